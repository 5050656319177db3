"""The in-page model (chapter 9's lab): download size, time to load, time per sentence, and
how far float16 weights move the attention weights, in headless Chromium on this machine.

Assembles the site as ``make book`` does (``attnlib.encoder.browser.write_site_files``, the
worker, the tokenizer and the vendored onnxruntime-web), serves it on 127.0.0.1 with every
other host blocked, and measures with ``performance.now()`` in the page:

* ``load``: from ``attnlibModel.load()`` to the session being ready (download from the local
  server, WebAssembly compile, session creation), in a fresh browser context (empty cache);
* ``first run`` and ``run``: one sentence of 12 and of 64 tokens, the first call and the
  median of ``--repeats`` later calls (worker time as the worker reports it, plus the round
  trip to the page);
* ``ablation scale``: the 73 runs (intact + each of the 72 heads off) the lab's "switch this
  head off" button makes, in batches of 12, for the 12-token sentence;
* ``longest main-thread task``: a reader's path through the lab by taps (Load, Run the 64-token
  sentence, switch the selected head off), in a fresh context: the longest task the Long Tasks
  API reports on the page's main thread over it (it reports tasks of 50 ms or more; none is
  written 0);

each in three settings: a 1280 px desktop viewport, a 390 px phone viewport, and the phone
viewport with the CPU throttled 4x (Chrome DevTools Protocol ``Emulation.setCPUThrottlingRate``,
as a mid-range phone).  Also: the largest attention-weight difference from PyTorch
(``attnlib.encoder.run``) over the sentences, for the shipped float16 export.

Usage:  .venv/bin/python bench/bench_browser_model.py [--repeats 10]
Writes: bench/results/browser_model.md and browser_model.json

``--long`` measures the lab on long texts instead (issue 38 items 1 and 3), in the same three
settings, each in a fresh context with the model loaded: for texts of 70, 311 and 509 tokens,
the longest main-thread task (Long Tasks API) while the lab shows a run (Run pressed to the
result drawn), three head changes, three query changes and ten scroll steps of the heatmap's
box, alone and as a minimal pair (the text against itself with one word added); then the
72-head sweep on the 509-token text: the time to the first progress step, the time per head
over the first steps, the longest main-thread task meanwhile, and what Cancel does (the time
until the lab says it stopped, and whether any head is counted after it).
Writes: bench/results/browser_model_long.md and browser_model_long.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _browser_bench import FLAGS, LONG_TASKS, SETTINGS, chromium_path, open_page, serve  # noqa: E402
from attnlib import corpus, encoder  # noqa: E402
from attnlib.encoder import browser as browser_model  # noqa: E402




def _page_models():
    """``_ext/page_models.py``: the build's list of in-page models and their scripts."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("page_models", ROOT / "_ext" / "page_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def sentences() -> dict:
    words = corpus.load_text().split()
    short = "The cat sat on the mat because it was warm."
    model, tokenizer = encoder.load_encoder(device="cpu")
    n = 10
    while len(tokenizer(" ".join(words[:n]))["input_ids"]) < 64:
        n += 1
    long = " ".join(words[:n - 1]) if len(tokenizer(" ".join(words[:n]))["input_ids"]) > 64 else " ".join(words[:n])
    return {len(tokenizer(short)["input_ids"]): short, len(tokenizer(long)["input_ids"]): long}


def build_site(folder: Path) -> dict:
    model_dir = folder / "_static" / "model"
    info = browser_model.write_site_files(model_dir, cache=ROOT / "_build" / "browser-model" / "cache")
    _page_models().copy_scripts("model", model_dir)                  # as the build copies them
    shutil.copytree(ROOT / "_static" / "vendor" / "onnxruntime-web", folder / "_static" / "vendor" / "onnxruntime-web")
    from attnlib.explorables import model_lab
    lab = model_lab(corpus.RUNNING, layer=0, head=2, ablation=False)
    (folder / "chapters").mkdir()
    (folder / "chapters" / "lab.html").write_text(
        '<!DOCTYPE html><html lang="en" data-content_root="../"><head><meta charset="utf-8"><title>lab</title>'
        f"</head><body>{lab.html}</body></html>", encoding="utf-8")
    return info



TIME_LOAD = "async () => { const t = performance.now(); await window.attnlibModel.load(); return performance.now() - t; }"
TIME_RUN = """async ([text, batch, keep]) => { const t = performance.now();
  const r = await window.attnlibModel.run(text, null, batch ? {batch: batch} : undefined);
  const total = performance.now() - t;
  return {total: total, worker: r.ms, T: r.tokens.length, attentions: keep ? Array.from(r.attentions) : null}; }"""
# A reader's path through the lab, by taps dispatched in the page: Load, Run a sentence, switch the
# selected head off.  Returns the longest main-thread task over it (0: none of 50 ms or more).
READER_PATH = """async (text) => {
  const root = document.querySelector('.attnlib-xp[data-kind=model]');
  const q = (role) => root.querySelector('[data-role=' + role + ']');
  const until = (test) => new Promise((ok) => { const id = setInterval(() => {
    if (test()) { clearInterval(id); ok(); } }, 100); });
  q('load').click();
  await until(() => q('status').textContent.startsWith('The model is loaded'));
  q('mode-one').click();
  const box = q('text-a'); box.value = text; box.dispatchEvent(new Event('input', {bubbles: true}));
  q('run').click();
  await until(() => q('status').textContent.startsWith('Ran'));
  q('ablate').click();
  await until(() => q('ablation').getAttribute('data-measured') === '72');   /* the whole sweep, not its first batch */
  return Math.max(0, ...window.__long.map(e => e[1])); }"""

# ------------------------------------------------------------------------------ --long
LONG_LENGTHS = (70, 311, 509)


def long_texts() -> dict:
    """Words of the Gettysburg Address (repeated) making texts of each of LONG_LENGTHS tokens
    (the longest prefix within the length), as tests/test_page_model.py makes its 509."""
    words, tokenizer = corpus.load_text().split() * 4, encoder.load_encoder(device="cpu")[1]
    out = {}
    for n in LONG_LENGTHS:
        lo, hi = 1, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(tokenizer(" ".join(words[:mid]))["input_ids"]) <= n:
                lo = mid
            else:
                hi = mid - 1
        text = " ".join(words[:lo])
        out[len(tokenizer(text)["input_ids"])] = text
    return out


# The lab on one text (and as a minimal pair): the longest main-thread task over each step.
LONG_STEPS = """async ([a, b]) => {
  const root = document.querySelector('.attnlib-xp[data-kind=model]');
  const q = (role) => root.querySelector('[data-role=' + role + ']');
  const wait = (ms) => new Promise((ok) => setTimeout(ok, ms));
  const until = (test) => new Promise((ok) => { const id = setInterval(() => { if (test()) { clearInterval(id); ok(); } }, 50); });
  const longest = () => { const m = Math.max(0, ...window.__long.map(e => e[1])); window.__long = []; return m; };
  const pick = (role, value) => { const s = q(role); s.value = String(value); s.dispatchEvent(new Event('change')); };
  q(b === null ? 'mode-one' : 'mode-minimal').click();
  q('text-a').value = a; if (b !== null) q('text-b').value = b;
  q('status').textContent = ''; await wait(300); longest();
  q('run').click();
  await until(() => q('status').textContent.startsWith('Ran'));
  await wait(400);
  const out = {run: longest()};
  for (const h of [3, 7, 11]) { pick('head', h); await wait(120); }
  out.head = longest();
  for (const i of [20, 60, 40]) { pick('query', i); await wait(120); }
  out.query = longest();
  const box = q('map-0');
  for (let k = 1; k <= 10; k++) { box.scrollTo(k * box.scrollWidth / 14, k * box.scrollHeight / 14); await wait(60); }
  await wait(200);
  out.scroll = longest();
  return out; }"""
# The 72-head sweep on a long text, cancelled after `steps` progress steps.
LONG_SWEEP = """async (steps) => {
  const root = document.querySelector('.attnlib-xp[data-kind=model]');
  const q = (role) => root.querySelector('[data-role=' + role + ']');
  const until = (test) => new Promise((ok) => { const id = setInterval(() => { if (test()) { clearInterval(id); ok(); } }, 20); });
  const wait = (ms) => new Promise((ok) => setTimeout(ok, ms));
  const measured = () => parseInt(q('ablation').getAttribute('data-measured') || '0', 10);
  if (!q('cancel')) return null;                  /* a lab without the sweep's progress (before issue 38) */
  window.__long = [];
  const t0 = performance.now();
  q('ablate').click();
  await until(() => measured() >= 1);
  const first = performance.now() - t0, m1 = measured();
  await until(() => measured() >= m1 + steps);
  const m2 = measured(), perHead = (performance.now() - t0 - first) / (m2 - m1);
  const t1 = performance.now();
  q('cancel').click();
  const said = q('status').textContent, cancelMs = performance.now() - t1;
  await wait(Math.max(3000, 2 * perHead));
  return {first_step_ms: first, first_step_heads: m1, ms_per_head: perHead, cancel_ms: cancelMs,
          stopped_said: said.slice(0, 80), measured_at_cancel: m2, measured_after: measured(),
          longest_task_ms: Math.max(0, ...window.__long.map(e => e[1]))}; }"""


def long_main(args) -> None:
    from playwright.sync_api import sync_playwright

    texts = long_texts()
    results = {"settings": {}, "lengths": list(texts), "load_1min_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build_site(folder)
        url = serve(folder) + "chapters/lab.html"
        chromium = chromium_path()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
            for name, (viewport, rate) in SETTINGS.items():
                context, page, _ = open_page(browser, url, viewport, rate)
                page.evaluate("() => window.attnlibModel.load()")
                page.evaluate(LONG_TASKS)
                row = {}
                for T, text in texts.items():
                    row[f"T={T}"] = page.evaluate(LONG_STEPS, [text, None])
                    row[f"T={T} pair"] = page.evaluate(LONG_STEPS, [text, text + " too"])
                    print(name, T, row[f"T={T}"], row[f"T={T} pair"], flush=True)
                page.evaluate(LONG_STEPS, [texts[max(texts)], None])          # the sweep's text on show
                row["sweep"] = page.evaluate(LONG_SWEEP, args.sweep_steps)       # None: a lab with no Cancel
                print(name, row["sweep"], flush=True)
                results["settings"][name] = row
                context.close()
            browser.close()
    results.update({"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "python": platform.python_version(), "date": dt.date.today().isoformat()},
                    "load_1min_after": os.getloadavg()[0], "sweep_steps": args.sweep_steps})
    out = ROOT / "bench" / "results"
    (out / "browser_model_long.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    lengths = list(texts)
    before = json.loads(Path(args.before).read_text(encoding="utf-8")) if args.before else None
    if before:
        results["before"] = {"label": args.before_label, **before}
        (out / "browser_model_long.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    lines = ["# The model lab on long texts (chapter 9), in headless Chromium", "",
             f"{results['machine']['date']}, {results['machine']['cores']} cores ({results['machine']['cpu']}), "
             f"Debian Chromium. Load average (1 min) {results['load_1min_before']:.1f} before, "
             f"{results['load_1min_after']:.1f} after. `.venv/bin/python bench/bench_browser_model.py --long`.", "",
             "Longest main-thread task (ms; Long Tasks API, which reports tasks of 50 ms or more, so 0 means none) "
             "while the lab shows a run of each length (Run to the result drawn), over three head changes, three query "
             "changes and ten scroll steps of the heatmap's box; 'pair': the same as a minimal pair (the text and the "
             "text with one word added). The model's own work runs in a Web Worker and is not in these figures.", "",
             "| setting | " + " | ".join(f"T={T}: run / head / query / scroll" for T in lengths) + " |",
             "|---|" + "---|" * len(lengths)]
    for name, row in results["settings"].items():
        for kind in ("", " pair"):
            cells = ["{run:.0f} / {head:.0f} / {query:.0f} / {scroll:.0f}".format(**row[f"T={T}{kind}"]) for T in lengths]
            lines.append(f"| {name}{kind} | " + " | ".join(cells) + " |")
    if before:
        lines += ["", f"The same, measured by this script on {args.before_label} (its date {before['machine']['date']}, load "
                      f"average {before['load_1min_before']:.1f} before, {before['load_1min_after']:.1f} after):", "",
                  "| setting | " + " | ".join(f"T={T}: run / head / query / scroll" for T in before["lengths"]) + " |",
                  "|---|" + "---|" * len(before["lengths"])]
        for name, row in before["settings"].items():
            for kind in ("", " pair"):
                cells = ["{run:.0f} / {head:.0f} / {query:.0f} / {scroll:.0f}".format(**row[f"T={T}{kind}"])
                         for T in before["lengths"]]
                lines.append(f"| {name}{kind} | " + " | ".join(cells) + " |")
    lines += ["", f"The 72-head sweep on the {max(lengths)}-token text, cancelled after {args.sweep_steps} progress steps "
                  "past the first (the button, then Cancel, by taps):", "",
              "| setting | first step (ms, heads) | per head (ms) | longest main-thread task (ms) | Cancel to 'Stopped' (ms) "
              "| heads at Cancel / 3 s later |", "|---|---|---|---|---|---|"]
    for name, row in results["settings"].items():
        w = row["sweep"]
        if w is None:
            lines.append(f"| {name} | no progress, no Cancel | | | | |")
            continue
        lines.append(f"| {name} | {w['first_step_ms']:.0f} ({w['first_step_heads']}) | {w['ms_per_head']:.0f} | "
                     f"{w['longest_task_ms']:.0f} | {w['cancel_ms']:.1f} | {w['measured_at_cancel']} / {w['measured_after']} |")
    (out / "browser_model_long.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--long", action="store_true", help="the lab on texts of 70, 311 and 509 tokens and the sweep")
    parser.add_argument("--sweep-steps", type=int, default=6, help="--long: progress steps before Cancel")
    parser.add_argument("--before", help="--long: a browser_model_long.json measured on earlier code, shown beside "
                                         "(with --before-label naming that code)")
    parser.add_argument("--before-label", default="earlier code")
    args = parser.parse_args()
    if args.long:
        long_main(args)
        return
    from playwright.sync_api import sync_playwright

    texts = sentences()
    results = {"settings": {}, "sentences": {str(k): v for k, v in texts.items()},
               "load_1min_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        info = build_site(folder)
        url = serve(folder) + "chapters/lab.html"
        chromium = chromium_path()
        masks = [[]] + [[{"layer": k // 12, "head": k % 12, "mode": "zero"}] for k in range(72)]   # intact, then each head off
        worst = 0.0
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
            for name, (viewport, rate) in SETTINGS.items():
                context, page, _ = open_page(browser, url, viewport, rate)
                row = {"load_ms": page.evaluate(TIME_LOAD)}
                for T, text in texts.items():
                    first = page.evaluate(TIME_RUN, [text, None, True])
                    later = [page.evaluate(TIME_RUN, [text, None, False]) for _ in range(args.repeats)]
                    want = encoder.run(text).stacked("pattern").numpy().reshape(-1)
                    worst = max(worst, float(np.abs(np.array(first["attentions"]) - want).max()))
                    row[f"T={T}"] = {"first_ms": first["total"], "median_ms": statistics.median(r["total"] for r in later),
                                     "worker_median_ms": statistics.median(r["worker"] for r in later)}
                short = texts[min(texts)]
                t0 = page.evaluate("() => performance.now()")
                for c in range(0, 73, 12):
                    page.evaluate(TIME_RUN, [short, masks[c:c + 12], False])
                row["ablation_scale_ms"] = page.evaluate("() => performance.now()") - t0
                context.close()
                # the reader's path, in a fresh context (empty cache), the longest main-thread task
                context, page, _ = open_page(browser, url, viewport, rate)
                page.evaluate(LONG_TASKS)
                row["longest_main_thread_task_ms"] = page.evaluate(READER_PATH, texts[max(texts)])
                results["settings"][name] = row
                context.close()
            browser.close()
    results.update({
        "download_bytes": {name: f["bytes"] for name, f in info["files"].items()},
        "runtime_bytes": {p.name: p.stat().st_size for p in (ROOT / "_static" / "vendor" / "onnxruntime-web").iterdir()
                          if p.suffix in (".js", ".mjs", ".wasm")},
        "max_weight_diff_vs_pytorch": worst, "build_check": info["check"],
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "date": dt.date.today().isoformat()},
        "repeats": args.repeats, "load_1min_after": os.getloadavg()[0],
    })
    out = ROOT / "bench" / "results"
    (out / "browser_model.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    lines = ["# The in-page model (chapter 9's lab) in headless Chromium", "",
             f"{results['machine']['date']}, {results['machine']['cores']} cores ({results['machine']['cpu']}), "
             f"Debian Chromium, onnxruntime-web 1.30.0 (WebAssembly, 1 thread, in a Web Worker). "
             f"Load average (1 min) {results['load_1min_before']:.1f} before, {results['load_1min_after']:.1f} after. "
             f"`.venv/bin/python bench/bench_browser_model.py --repeats {args.repeats}`.", "",
             f"Download: model {results['download_bytes']['encoder.onnx'] / 1e6:.1f} MB + vocabulary "
             f"{results['download_bytes']['vocab.txt'] / 1e6:.2f} MB; runtime "
             f"{sum(results['runtime_bytes'].values()) / 1e6:.1f} MB (WebAssembly + JavaScript); "
             f"fetched once, on the reader's request.", "",
             f"Largest attention-weight difference from PyTorch on these sentences: {worst:.1e} "
             f"(build check: {info['check']['max_weight_diff']:.1e} over {info['check']['sentences']} sentences).", "",
             "Chrome's CPU throttling slows the page's main thread; the model runs in a Web Worker, which the "
             "throttle evidently slows far less (compare the rows). The last column is the longest task on the page's "
             "main thread over a reader's path by taps (Load, Run the longer sentence, switch the selected head off; "
             "Long Tasks API, which reports only tasks of 50 ms or more, so 0 means none): what a reader would feel "
             "as a freeze. The tests check that the model loads "
             "and runs off the main thread; how long the main thread is busy is measured here, not asserted.", "",
             "| setting | load (ms) | " + " | ".join(f"T={T}: first / median (ms)" for T in texts) +
             " | 73 runs for the ablation scale (ms) | longest main-thread task (ms) |",
             "|---|---|" + "---|" * len(texts) + "---|---|"]
    for name, row in results["settings"].items():
        cells = [f"{row[f'T={T}']['first_ms']:.0f} / {row[f'T={T}']['median_ms']:.0f}" for T in texts]
        lines.append(f"| {name} | {row['load_ms']:.0f} | " + " | ".join(cells) + f" | {row['ablation_scale_ms']:.0f} | "
                     f"{row['longest_main_thread_task_ms']:.0f} |")
    (out / "browser_model.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
