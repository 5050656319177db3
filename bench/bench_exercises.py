"""What grading an exercise in the page costs a reader: Pyodide's cold start and each check.

Builds the standalone exercise site (``_ext/exercise_pages.write_standalone``: every
exercise's HTML as the book embeds it, ``exercises.js``, the grader files and the vendored
Pyodide), serves it on 127.0.0.1 and opens it in headless Debian Chromium (Playwright,
``executable_path``), every other host blocked.  Per run, in a fresh browser context (empty
cache):

* ``first check``: from typing an answer and pressing Enter in exercise 4:temperature to
  the verdict on screen (``performance.now()`` in the page), with the page loaded but
  Pyodide not yet started: the worst case, where the reader's first act is Check;
* ``runtime load``: the part of it spent loading Pyodide and the graders
  (``attnExercises.loadMs``);
* ``bytes``: the response bodies fetched from pressing Enter to the verdict (all of
  Pyodide's core files and ``graders.json``), uncompressed, as the local server sends them;
* ``warm check``: after that, ``--checks`` checks cycling over every exercise, each with an
  answer in its control ("1" typed, the first option, the first token, the diagonal of a
  matrix), through ``attnExercises.check``, each from call to verdict on screen.

The machine's load average (1 min) is recorded before and after, with the CPU count: the
machine is shared, so cold-start times depend on what else runs.

Usage:  .venv/bin/python bench/bench_exercises.py [--runs 3] [--checks 100]
Writes: bench/results/exercises.md and exercises.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
OUT = ROOT / "bench" / "results"

FIRST = """async () => {
  const long = [];
  new PerformanceObserver(l => l.getEntries().forEach(e => long.push(e.duration))).observe({type: 'longtask'});
  const root = document.querySelector('[data-exercise="4:temperature"]');
  const input = root.querySelector('input');
  input.value = '0.3';
  const t0 = performance.now();
  input.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}));
  const box = root.querySelector('.attn-ex-feedback');
  while (!(box.classList.contains('attn-ex-correct') || box.classList.contains('attn-ex-wrong'))) {
    await new Promise(r => setTimeout(r, 5));
  }
  const ms = performance.now() - t0;
  await new Promise(r => setTimeout(r, 200));   // long-task entries arrive after the task
  return {ms: ms, load: attnExercises.loadMs, text: box.textContent, longest_task: Math.max(0, ...long)};
}"""

WARM = """async (n) => {
  const roots = [...document.querySelectorAll('[data-exercise]')];
  // a real answer in every control: "1" typed, the first option, the first token, the diagonal
  roots.forEach(root => {
    root.querySelectorAll('input.attn-ex-input').forEach(i => { i.value = '1'; });
    const radio = root.querySelector('input[type=radio]'); if (radio) radio.checked = true;
    const token = root.querySelector('.attn-ex-token'); if (token) token.setAttribute('aria-pressed', 'true');
    root.querySelectorAll('.attn-ex-cell').forEach(c => c.setAttribute('aria-pressed', String(c.dataset.row === c.dataset.col)));
  });
  const times = [];
  for (let k = 0; k < n; k++) {
    const root = roots[k % roots.length];
    const t0 = performance.now();
    await attnExercises.check(root);
    times.push(performance.now() - t0);
  }
  return times;
}"""


def _ext():
    spec = importlib.util.spec_from_file_location("exercise_pages", ROOT / "_ext" / "exercise_pages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(runs: int, checks: int, throttle: int = 1) -> dict:
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS, find_chromium, serve

    site = Path(tempfile.mkdtemp(prefix="bench_exercises_"))
    _ext().write_standalone(site)
    url = serve(str(site)) + "index.html"
    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        version = browser.version
        for _ in range(runs):
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            # the worst case: the checker held to the reader's first act (bench_first_check.py
            # measures the preloading a page does on its own, attnlib/static/exercises.js)
            ctx.add_init_script("window.attnlibCheckerStart = 'interaction';")
            ctx.route("**/*", lambda r: r.continue_() if "127.0.0.1" in r.request.url else r.abort())
            page = ctx.new_page()
            page.goto(url, wait_until="load")
            page.wait_for_load_state("networkidle")
            if throttle > 1:
                ctx.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": throttle})
            fetched = []
            page.on("requestfinished", lambda req: fetched.append(req))
            first = page.evaluate(FIRST)
            page.wait_for_load_state("networkidle")
            fetched = [(req.url, req.sizes()["responseBodySize"]) for req in fetched]
            warm = page.evaluate(WARM, checks)
            results.append({"first_ms": first["ms"], "load_ms": first["load"], "verdict": first["text"][:40],
                            "longest_task_ms": first["longest_task"], "throttle": throttle,
                            "bytes": sum(b for _, b in fetched), "requests": len(fetched),
                            "files": sorted({u.rsplit("/", 1)[-1] for u, _ in fetched}),
                            "warm_ms": warm})
            ctx.close()
        browser.close()
    return {"chromium": version, "runs": results}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--checks", type=int, default=100)
    args = ap.parse_args()
    from attnlib.exercises import REGISTRY
    n_exercises = sum(len(names) for names in REGISTRY.values())
    load_before = os.getloadavg()[0]
    data = measure(args.runs, args.checks)
    slow = measure(args.runs, max(1, args.checks // 10), throttle=4)   # a mid-range phone
    load_after = os.getloadavg()[0]
    warm = [t for r in data["runs"] for t in r["warm_ms"]]
    warm_sorted = sorted(warm)
    summary = {
        "date": dt.date.today().isoformat(), "machine": f"{platform.machine()} {platform.system()}",
        "cpus": os.cpu_count(), "load_1min_before": load_before, "load_1min_after": load_after,
        "chromium": data["chromium"], "runs": args.runs, "checks_per_run": args.checks,
        "first_check_ms": [r["first_ms"] for r in data["runs"]],
        "runtime_load_ms": [r["load_ms"] for r in data["runs"]],
        "bytes_first_check": [r["bytes"] for r in data["runs"]],
        "longest_main_thread_task_ms": [r["longest_task_ms"] for r in data["runs"]],
        "first_check_ms_cpu_4x": [r["first_ms"] for r in slow["runs"]],
        "longest_main_thread_task_ms_cpu_4x": [r["longest_task_ms"] for r in slow["runs"]],
        "requests_first_check": [r["requests"] for r in data["runs"]],
        "files_first_check": data["runs"][0]["files"],
        "warm_check_ms_median": statistics.median(warm),
        "warm_check_ms_p95": warm_sorted[int(0.95 * (len(warm_sorted) - 1))],
        "warm_check_ms_max": warm_sorted[-1],
        "detail": data["runs"],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "exercises.json").write_text(json.dumps(summary, indent=1) + "\n")
    mib = [b / 2 ** 20 for b in summary["bytes_first_check"]]
    lines = [
        "# Exercises graded in the page: Pyodide cold start and each check",
        "",
        f"Written by `bench/bench_exercises.py` on {summary['date']}: headless Chromium {summary['chromium']} "
        f"(`--disable-gpu`), {summary['machine']}, {summary['cpus']} CPU cores visible, load average (1 min) "
        f"{load_before:.1f} before and {load_after:.1f} after (the browser's own work counts in the second; "
        f"a load above the core count before the run means other processes shared the machine).  "
        f"{args.runs} fresh browser contexts (empty cache), page "
        "served from 127.0.0.1 (no network latency, no compression).",
        "",
        "Pyodide runs in a Web Worker (`grader_worker.js`): the longest main-thread task (a "
        "`longtask` PerformanceObserver, from Enter to the verdict) is what a reader feels as a freeze. "
        "The `4x` rows throttle the page's CPU 4x (Chrome DevTools' `Emulation.setCPUThrottlingRate`, "
        "a mid-range phone).",
        "",
        "| run | CPU | first check (ms) | of which runtime load (ms) | longest main-thread task (ms) | bytes fetched (MiB) | requests |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for k, r in enumerate(data["runs"] + slow["runs"], 1):
        lines.append(f"| {k} | {r['throttle']}x | {r['first_ms']:.0f} | {r['load_ms']:.0f} | {r['longest_task_ms']:.0f} "
                     f"| {r['bytes'] / 2 ** 20:.2f} | {r['requests']} |")
    lines += [
        "",
        f"First check, median of the runs: {statistics.median(summary['first_check_ms']):.0f} ms; "
        f"bytes on the first check: {statistics.median(mib):.2f} MiB "
        f"({', '.join(summary['files_first_check'])}).",
        "",
        f"Warm checks ({args.runs} x {args.checks}, cycling over all {n_exercises} exercises): median "
        f"{summary['warm_check_ms_median']:.2f} ms, p95 {summary['warm_check_ms_p95']:.2f} ms, "
        f"max {summary['warm_check_ms_max']:.2f} ms.",
        "",
        "Here the checker is held to the reader's first act, Check (the worst case: "
        "`window.attnlibCheckerStart = 'interaction'`). A page with exercises now starts it on its "
        "own once idle, or when an exercise comes near on a phone; bench/bench_first_check.py "
        "measures that (bench/results/first_check.md).",
    ]
    (OUT / "exercises.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
