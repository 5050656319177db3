"""The in-page model (chapter 8's lab): download size, time to load, time per sentence, and
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
from _browser_bench import FLAGS, LONG_TASKS, SETTINGS, open_page, serve  # noqa: E402
from attnlib import corpus, encoder  # noqa: E402
from attnlib.encoder import browser as browser_model  # noqa: E402



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
    shutil.copyfile(ROOT / "attnlib" / "static" / "model_worker.js", model_dir / "worker.js")
    shutil.copyfile(ROOT / "attnlib" / "static" / "wordpiece.js", model_dir / "wordpiece.js")
    shutil.copyfile(ROOT / "attnlib" / "static" / "worker_common.js", model_dir / "worker_common.js")
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
  await until(() => q('ablation').hasAttribute('data-change'));
  return Math.max(0, ...window.__long.map(e => e[1])); }"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    texts = sentences()
    results = {"settings": {}, "sentences": {str(k): v for k, v in texts.items()},
               "load_1min_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        info = build_site(folder)
        url = serve(folder) + "chapters/lab.html"
        chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
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
    lines = ["# The in-page model (chapter 8's lab) in headless Chromium", "",
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
