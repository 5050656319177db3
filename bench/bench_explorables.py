"""How long one update of each explorable takes in a real browser, for T = 64 tokens.

Builds the five explorables from real data (a 64-token passage of ``attnlib.corpus`` run
through the pretrained encoder, layer 0, head 3), opens them in headless Debian Chromium
(Playwright, ``executable_path``) served on 127.0.0.1, and times one update at a time in the
page with ``performance.now()``:

* ``script``: dispatching the control's event (``input`` / ``change`` / ``mouseover``),
  i.e. the handler: softmax / masking / thresholding plus every DOM write;
* ``+ layout``: the same plus a forced style recalculation and layout (reading
  ``offsetHeight`` afterwards) and, for the views drawn on a ``<canvas>`` (mask heatmap,
  graph edges), a forced rasterisation (``getImageData``): the work the browser must do
  before the next paint.

The budget is one frame at 60 Hz: 16.7 ms.  Each update is repeated ``--repeats`` times
after a warm-up, in ``--runs`` fresh page loads; the table gives the median, the 95th
percentile and the maximum of the pooled samples, in ms.

Usage:  .venv/bin/python bench/bench_explorables.py [--repeats 200] [--runs 3]
Writes: bench/results/explorables.md and explorables.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import functools
import http.server
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import attnlib  # noqa: E402
from attnlib import corpus  # noqa: E402
from attnlib import explorables as xp  # noqa: E402

T = 64
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]

# One update per call: `i` is the repetition index, `root` the figure, `uid` its id.
UPDATES = {
    "convex": "const s = root.querySelector('#' + uid + '-score-' + (i % 64)); s.value = String((i % 7) - 3);"
              " s.dispatchEvent(new Event('input', {bubbles: true}));",
    "temperature": "const s = root.querySelector('#' + uid + '-temperature'); s.value = String(((i % 13) - 6) / 2);"
                   " s.dispatchEvent(new Event('input', {bubbles: true}));",
    "mask": "root.querySelector('#' + uid + '-causal').click();",
    "graph": "const s = root.querySelector('#' + uid + '-threshold'); s.value = String(i % 2 ? 0 : 1);"
             " s.dispatchEvent(new Event('input', {bubbles: true}));",  # worst case: all 4096 edges flip
    "graph (drag)": "const s = root.querySelector('#' + uid + '-threshold'); s.value = String(0.002 * (i % 100));"
                    " s.dispatchEvent(new Event('input', {bubbles: true}));",  # a slow drag across the dense region
    "hover": "root.querySelectorAll('.xp-chip')[(i * 17) % 64].dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));",
}

TIMER = """async ([uid, body, repeats]) => {
  const root = document.getElementById(uid);
  const update = new Function('root', 'uid', 'i', body);
  const script = [], layout = [], canvases = [...root.querySelectorAll('canvas')];
  for (let i = 0; i < 20; i++) { update(root, uid, i); void document.body.offsetHeight; }  // warm-up
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    update(root, uid, i);
    const t1 = performance.now();
    void document.body.offsetHeight;  // force style + layout
    for (const c of canvases) c.getContext('2d').getImageData(0, 0, 1, 1);  // force the canvas to raster
    const t2 = performance.now();
    script.push(t1 - t0); layout.push(t2 - t0);
    if (i % 10 === 0) await new Promise(r => requestAnimationFrame(r));  // let frames happen
  }
  return {script, layout};
}"""


def real_figures() -> dict:
    model, tokenizer = attnlib.encoder.load_encoder(device="cpu")
    tokens, q, k, v = attnlib.encoder.head_qkv(" ".join(corpus.SINK_PROBES), 0, 3, model, tokenizer)
    tokens, q, k, v = tokens[:T], q[:T], k[:T], v[:T]  # (T, d_k) each
    d_k = q.shape[-1]
    scores = q @ k.T / math.sqrt(d_k)
    weights = attnlib.softmax(scores)
    pad = torch.ones(T, dtype=torch.long)
    pad[-8:] = 0
    return {
        "convex": xp.convex_combination(v[:, :2], tokens, scores[10]),
        "temperature": xp.temperature_explorer(q @ k.T, tokens, d_k=d_k, query=10),
        "mask": xp.mask_explorer(scores, tokens, pad),
        "graph": xp.graph_threshold(weights, tokens, threshold=0.0),
        "hover": xp.head_hover(weights, tokens),
    }


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3, help="fresh page loads; samples are pooled")
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    figures = real_figures()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "index.html").write_text(xp.standalone_page(figures.values()), encoding="utf-8")
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=folder)
        handler.log_message = lambda *a: None
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, args=FLAGS, headless=True)
            samples = {kind: {"script": [], "layout": []} for kind in UPDATES}
            for _ in range(args.runs):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html", wait_until="load")
                for kind, body in UPDATES.items():
                    r = page.evaluate(TIMER, [figures[kind.split(" ")[0]].uid, body, args.repeats])
                    for k in r:
                        samples[kind][k] += r[k]
                page.close()
            rows = []
            for kind, r in samples.items():
                rows.append((kind, {k: (statistics.median(v), pct(v, 0.95), max(v)) for k, v in r.items()}))
                print(kind, {k: [round(x, 3) for x in v] for k, v in rows[-1][1].items()})
            version = browser.version
            browser.close()
        server.shutdown()

    lines = [
        "# Explorables: time of one update in a real browser (T = 64)",
        "",
        f"Written by `bench/bench_explorables.py` on {dt.date.today().isoformat()}: headless Chromium {version} "
        f"(`--disable-gpu`), {platform.machine()} Linux, {os.cpu_count()} CPU cores visible, "
        f"{args.runs} fresh page loads x {args.repeats} updates per view (after 20 warm-up updates each), pooled; "
        "the machine is shared, so the tail includes other processes' load.  Data: a real 64-token passage "
        "(`attnlib.corpus.SINK_PROBES`), pretrained encoder layer 0, head 3.  Units: milliseconds.",
        "",
        "`script` = the event handler (the maths plus every DOM write); `+ layout` = the same plus a forced "
        "style and layout pass and, for canvas views (mask, graph), a forced rasterisation.  Budget: one frame at 60 Hz = 16.7 ms.",
        "",
        "| view | update | script median | script p95 | script max | + layout median | + layout p95 | + layout max |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    what = {"convex": "drag one of 64 score sliders", "temperature": "move the temperature slider (64 keys)",
            "mask": "toggle the causal mask (64 x 64 cells)", "graph": "threshold 0 <-> 1 (all 4096 edges redrawn)",
            "graph (drag)": "threshold dragged 0 -> 0.2 in steps of 0.002",
            "hover": "hover another token (row of 64)"}
    for kind, stats in rows:
        s, lay = stats["script"], stats["layout"]
        lines.append(f"| {kind} | {what[kind]} | {s[0]:.2f} | {s[1]:.2f} | {s[2]:.2f} | {lay[0]:.2f} | {lay[1]:.2f} | {lay[2]:.2f} |")
    lines += ["", "HTML embedded per figure at T = 64 (runtime + style + data; the page-size budget is 2 MB): " +
              ", ".join(f"{kind} {len(fig.html) / 1024:.0f} KiB" for kind, fig in figures.items()) + "."]
    worst = max(stats["layout"][1] for _, stats in rows)
    lines += ["", f"Worst 95th percentile including layout: {worst:.2f} ms "
              f"({'within' if worst < 16.7 else 'OVER'} the 16.7 ms frame budget).", ""]
    out = ROOT / "bench" / "results" / "explorables.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines), encoding="utf-8")
    data = {"date": dt.date.today().isoformat(), "chromium": version, "runs": args.runs, "repeats": args.repeats,
            "T": T, "units": "ms", "views": {kind: {k: list(v) for k, v in stats.items()} for kind, stats in rows},
            "worst_p95_layout_ms": worst, "html_kib": {kind: len(fig.html) / 1024 for kind, fig in figures.items()}}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
