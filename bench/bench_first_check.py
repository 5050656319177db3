"""The first Check on a cold page: how long a reader waits for the in-page checker (issue 45).

The page's exercises are graded by Pyodide in a Web Worker (``attnlib/static/exercises.js``,
``grader_worker.js``).  Before issue 45 the worker started on the reader's first focus, keystroke
or tap in an exercise, so the first Check waited for Pyodide's whole cold start (9-21 s).  Now
``exercises.js`` starts it once the page is idle after load, or when an exercise comes near the
screen (its ``preload()``).  This bench measures both on the built book.

The built book (``_build/html``, from ``make book``; it is not rebuilt here) is served on
127.0.0.1 with the checker's files (``_static/exercises/``: ``exercises.js``,
``grader_worker.js``, ``graders.json``) taken from the working tree (``_ext/exercise_pages.
write_assets``), so that the code measured is the code in the tree, and with ``exercises.js``
from the commit ``--before`` for the former behaviour.  Every run is a fresh browser context
(empty HTTP cache) on ``--page``, every other host blocked, in two settings of
``_browser_bench.SETTINGS``: a 1280 px desktop and a 390 px phone with the CPU throttled 4x
(``Emulation.setCPUThrottlingRate``, set before the page is requested).  In each run, from the
page's own clock (``performance.now()``):

* ``ready``: from the load event to the checker's "ready" message (worker created, Pyodide and
  the graders fetched and started);
* ``first verdict``: ``--click-after`` s after the load event, as a reader who has read a little,
  the exercise is scrolled into view, an answer written into it, and its Check button clicked:
  the time from that click to the verdict on screen (the feedback's Correct / Not yet class);
* ``longest task``: the longest main-thread task (the Long Tasks API, 50 ms or more; none is
  written 0) in the first 10 s after navigation began, and the sum of their parts over 50 ms
  (total blocking time) in that window: what preloading could cost the reader while reading;
* ``bytes``: response bodies received by then (the page's and the worker's).

Variants: ``before`` (``exercises.js`` of ``--before``: started on the first interaction),
``after`` (the working tree, its own choice for the viewport) and, in each setting, the working
tree forced to the other choice (``window.attnlibCheckerStart`` = ``idle`` or ``near``), so that
the phone's choice is decided by measurement; on the phone also ``before`` and ``after`` for a
reader who reads the question ``--read`` s between scrolling to it and the click (the phone starts
the checker when an exercise comes near the screen, so a click at the very moment of the scroll is
its worst case).  Runs are interleaved (variant by variant, round by
round) so that the variants share the machine's conditions.  The machine is shared: the 1-minute
load average is read before and after every run and reported beside the numbers.

Usage:  .venv/bin/python bench/bench_first_check.py [--rounds 3] [--page chapters/04_softmax_scaling.html]
Writes: bench/results/first_check.md and first_check.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import functools
import http.server
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _browser_bench import FLAGS, SETTINGS, _route, chromium_path, measured_bytes  # noqa: E402

OUT = ROOT / "bench" / "results"
HTML = ROOT / "_build" / "html"
SETTING_NAMES = ["desktop 1280 px", "phone 390 px, CPU 4x slower"]
WINDOW_MS = 10_000

# Before any of the page's scripts: the Long Tasks observer, and the grader worker's creation and
# "ready" message as the page sees them (the same for every variant, whatever exercises.js does).
INIT = """(mode) => {
  if (mode) window.attnlibCheckerStart = mode;
  window.__long = [];
  new PerformanceObserver(l => l.getEntries().forEach(e => window.__long.push([e.startTime, e.duration])))
    .observe({type: 'longtask', buffered: true});
  // Long animation frames (Chromium 123+) name the scripts that ran in them (those of 5 ms or
  // more): the main-thread work of exercises.js itself, told apart from the page's other work.
  window.__ours = [];
  try {
    new PerformanceObserver(l => l.getEntries().forEach(f => (f.scripts || []).forEach(s => {
      if (String(s.sourceURL).includes('/_static/exercises/')) window.__ours.push([s.startTime, s.duration, s.invoker]);
    }))).observe({type: 'long-animation-frame', buffered: true});
  } catch (e) { window.__ours = null; }
  const W = window.Worker;
  window.__worker = null; window.__ready = null;
  window.Worker = function (url, opts) {
    const w = new W(url, opts);
    if (String(url).includes('grader_worker')) {
      if (window.__worker === null) window.__worker = performance.now();
      w.addEventListener('message', e => {
        if (e.data && e.data.type === 'ready' && window.__ready === null) window.__ready = performance.now();
      });
    }
    return w;
  };
  window.Worker.prototype = W.prototype;
}"""

# --click-after s after the load event: the first exercise into view, an answer in it, Check.
CLICK = """async ([afterMs, readMs]) => {
  const nav = performance.getEntriesByType('navigation')[0];
  const load = nav.loadEventEnd || performance.now();
  while (performance.now() < load + afterMs) await new Promise(r => setTimeout(r, 20));
  const root = document.querySelector('[data-exercise]');
  root.scrollIntoView({block: 'center'});
  await new Promise(r => setTimeout(r, readMs));     // the reader reads the question first
  const kind = root.dataset.kind;
  if (kind === 'number') { const i = root.querySelector('input.attn-ex-input'); i.focus(); i.value = '1';
                           i.dispatchEvent(new Event('input', {bubbles: true})); }
  if (kind === 'choice') { const r = root.querySelector('input[type=radio]'); r.focus(); r.checked = true;
                           r.dispatchEvent(new Event('change', {bubbles: true})); }
  if (kind === 'token') root.querySelector('.attn-ex-token').click();
  const box = root.querySelector('.attn-ex-feedback');
  const t0 = performance.now();
  root.querySelector('.attn-ex-check').click();
  let status = null;
  while (!(box.classList.contains('attn-ex-correct') || box.classList.contains('attn-ex-wrong'))) {
    await new Promise(r => setTimeout(r, 5));
    if (status === null && box.classList.contains('attn-ex-busy')) status = box.textContent;
    if (performance.now() - t0 > 120000) break;
  }
  const t1 = performance.now();
  return {load: load, dom: nav.domContentLoadedEventEnd, click: t0, verdict: t1, status: status,
          text: box.textContent.slice(0, 80), key: root.dataset.exercise};
}"""

READ = """() => ({long: window.__long, ours: window.__ours, worker: window.__worker, ready: window.__ready,
          startedBy: window.attnExercises && attnExercises.startedBy,
          startMode: window.attnExercises && attnExercises.startMode})"""


def _ext():
    spec = importlib.util.spec_from_file_location("exercise_pages", ROOT / "_ext" / "exercise_pages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Overlay(http.server.SimpleHTTPRequestHandler):
    """Serves ``directory`` except ``/_static/exercises/``, which comes from ``overlay``."""

    def __init__(self, *args, overlay=None, **kwargs):
        self.overlay = overlay
        super().__init__(*args, **kwargs)

    def translate_path(self, path):
        clean = path.split("?", 1)[0].split("#", 1)[0]
        if "/_static/exercises/" in clean:
            return str(Path(self.overlay) / clean.rsplit("/_static/exercises/", 1)[1])
        return super().translate_path(path)

    def log_message(self, *args):
        pass


def serve_overlay(folder: Path, overlay: Path) -> str:
    handler = functools.partial(Overlay, directory=str(folder), overlay=str(overlay))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def before_rev() -> str:
    """The newest commit whose exercises.js has no preload(): the behaviour before issue 45."""
    revs = subprocess.run(["git", "log", "--format=%H", "--", "attnlib/static/exercises.js"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()
    for rev in revs:
        text = subprocess.run(["git", "show", f"{rev}:attnlib/static/exercises.js"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
        if "function preload" not in text:
            return rev
    raise SystemExit("no commit of attnlib/static/exercises.js without preload()")


def one_run(browser, url: str, viewport, rate: float, mode: str | None, click_after_ms: int, read_ms: int = 0) -> dict:
    load_before = os.getloadavg()[0]
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    context.route("**/*", _route)
    page = context.new_page()
    requests, errors = [], []
    page.on("requestfinished", lambda q: requests.append(q))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.add_init_script(f"({INIT})({json.dumps(mode)})")
    if rate != 1:
        context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": rate})
    page.goto(url, wait_until="load")
    clicked = page.evaluate(CLICK, [click_after_ms, read_ms])
    remaining = WINDOW_MS + 300 - page.evaluate("() => performance.now()")
    if remaining > 0:                    # the 10 s window is over (long-task entries arrive after the task)
        page.wait_for_timeout(remaining)
    seen = page.evaluate(READ)
    window = [d for s, d in seen["long"] if s < WINDOW_MS]
    load = clicked["load"]
    ready = seen["ready"]
    files = measured_bytes(requests)
    checker = sum(b for p, b in files.items() if "/pyodide/" in p or "/_static/exercises/" in p)
    context.close()
    return {
        "load_event_ms": round(load, 1),
        "worker_created_after_load_ms": None if seen["worker"] is None else round(seen["worker"] - load, 1),
        "ready_after_load_ms": None if ready is None else round(ready - load, 1),
        "click_after_load_ms": round(clicked["click"] - load, 1),
        "first_verdict_ms": round(clicked["verdict"] - clicked["click"], 1),
        "status_shown": clicked["status"],
        "verdict": clicked["text"],
        "exercise": clicked["key"],
        "longest_task_10s_ms": round(max(window, default=0), 1),
        "blocking_10s_ms": round(sum(d - 50 for d in window), 1),
        "long_tasks_10s": [[round(s), round(d)] for s, d in seen["long"] if s < WINDOW_MS],
        # exercises.js's own scripts in long animation frames (5 ms or more each), up to the verdict
        "checker_script_max_ms": None if seen["ours"] is None else round(max((d for _, d, _ in seen["ours"]), default=0), 1),
        "checker_scripts": seen["ours"],
        "started_by": seen["startedBy"], "start_mode": seen["startMode"],
        "bytes_total": sum(files.values()), "bytes_checker": checker,
        "errors": errors, "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0],
    }


def summarise(runs: list[dict]) -> dict:
    def med(key):
        vals = [r[key] for r in runs if r[key] is not None]
        return round(statistics.median(vals), 1) if vals else None
    return {"n": len(runs), "ready_after_load_ms": med("ready_after_load_ms"),
            "first_verdict_ms": med("first_verdict_ms"), "first_verdict_max_ms": max(r["first_verdict_ms"] for r in runs),
            "longest_task_10s_ms": max(r["longest_task_10s_ms"] for r in runs),
            "checker_script_max_ms": max((r["checker_script_max_ms"] or 0) for r in runs),
            "blocking_10s_ms": med("blocking_10s_ms"), "load_event_ms": med("load_event_ms"),
            "bytes_checker": max(r["bytes_checker"] for r in runs),
            "load_1min": [min(r["load_1min_before"] for r in runs), max(r["load_1min_after"] for r in runs)]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each variant in each setting")
    parser.add_argument("--page", default="chapters/04_softmax_scaling.html")
    parser.add_argument("--click-after", type=float, default=5.0, help="seconds from the load event to the Check")
    parser.add_argument("--read", type=float, default=10.0,
                        help="phone rows '... reading': seconds from scrolling to the exercise to the click")
    parser.add_argument("--before", default=None, help="commit whose exercises.js is 'before' (default: the newest without preload())")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if not (HTML / args.page).is_file():
        raise SystemExit(f"{HTML / args.page} is missing: build the book first (make book)")
    from playwright.sync_api import sync_playwright

    rev = args.before or before_rev()
    tmp = Path(tempfile.mkdtemp(prefix="first_check_"))
    after_dir = _ext().write_assets(tmp / "after")
    before_dir = _ext().write_assets(tmp / "before")
    (before_dir / "exercises.js").write_text(subprocess.run(
        ["git", "show", f"{rev}:attnlib/static/exercises.js"], cwd=ROOT, capture_output=True, text=True,
        check=True).stdout, encoding="utf-8")
    bases = {"before": serve_overlay(HTML, before_dir), "after": serve_overlay(HTML, after_dir)}
    # (name, which files, window.attnlibCheckerStart or None for the page's own choice, seconds
    # between scrolling to the exercise and the click: 0 unless said)
    read = args.read
    variants = {"desktop 1280 px": [("before", "before", None, 0), ("after", "after", None, 0),
                                    ("after, near only", "after", "near", 0)],
                "phone 390 px, CPU 4x slower": [("before", "before", None, 0), ("after", "after", None, 0),
                                                ("after, idle (not near)", "after", "idle", 0),
                                                (f"before, {read:.0f} s reading", "before", None, read),
                                                (f"after, {read:.0f} s reading", "after", None, read)]}
    results = {"date": dt.date.today().isoformat(), "page": args.page, "click_after_s": args.click_after, "read_s": args.read,
               "before_commit": rev, "rounds": args.rounds,
               "head_commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                             text=True).stdout.strip(),
               "machine": {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
                           "python": platform.python_version()},
               "load_average_before": list(os.getloadavg()), "settings": {}}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=FLAGS, headless=True)
        results["chromium"] = browser.version
        runs = {s: {v[0]: [] for v in variants[s]} for s in SETTING_NAMES}
        for k in range(args.rounds):
            for setting in SETTING_NAMES:
                viewport, rate = SETTINGS[setting]
                for name, files, mode, read_s in variants[setting]:
                    r = one_run(browser, bases[files] + args.page, viewport, rate, mode, int(args.click_after * 1000),
                                int(read_s * 1000))
                    runs[setting][name].append(r)
                    print(f"round {k + 1} {setting:28s} {name:18s} ready {r['ready_after_load_ms']} ms after load, "
                          f"verdict {r['first_verdict_ms']:.0f} ms after the click, longest task {r['longest_task_10s_ms']:.0f} ms, "
                          f"started by {r['started_by']}, load {r['load_1min_before']:.2f}", flush=True)
        browser.close()
    results["load_average_after"] = list(os.getloadavg())
    for setting in SETTING_NAMES:
        results["settings"][setting] = {name: {"summary": summarise(rs), "runs": rs} for name, rs in runs[setting].items()}
    if not args.no_write:
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "first_check.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        (OUT / "first_check.md").write_text(report(results), encoding="utf-8")
        print(f"wrote {OUT / 'first_check.md'} and first_check.json")
    return 0


def _ms(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _s(ms: float) -> str:
    """A duration given in ms, as a reader reads it: ms under a second, else seconds."""
    return f"{ms:,.0f} ms" if ms < 1000 else f"{ms / 1e3:.1f} s"


def report(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# The first Check on a cold page: checker start and first verdict (issue 45)", "",
        f"Written by `bench/bench_first_check.py` on {r['date']} (commit {r['head_commit']} plus the working tree): "
        f"headless Chromium {r['chromium']} (`--disable-gpu`), {m['platform']}, {m['cpus']} CPU cores visible. "
        f"The machine is shared with other work: 1-minute load average {r['load_average_before'][0]:.2f} before the "
        f"bench and {r['load_average_after'][0]:.2f} after (the browser's own work counts in it; each run's is in the "
        f"JSON and in the table's last column).", "",
        f"Page: `{r['page']}` of the built book (`_build/html`), the checker's files from the working tree; `before` "
        f"is `exercises.js` of commit {r['before_commit'][:10]} (the checker started on the first interaction). "
        f"Each run: a fresh browser context (empty cache), every other host blocked; {r['click_after_s']:.0f} s after "
        f"the load event the page's first exercise is scrolled into view, an answer is written and Check is clicked "
        f"(in the phone rows '... reading', {r['read_s']:.0f} s after the scroll: a reader who reads the question "
        f"first; on a phone the checker starts when an exercise comes within a viewport of the screen). "
        f"{r['rounds']} runs per row (medians; the longest task is the largest over the runs).", "",
        "* ready: from the load event to the worker's \"ready\" (Pyodide and the graders loaded);",
        "* first verdict: from the click on Check to the verdict on screen;",
        f"* longest task, blocking: the Long Tasks API on the main thread in the first {WINDOW_MS // 1000} s after "
        "navigation began (tasks of 50 ms or more; 0 = none): the longest, and the total blocking time (the sum of "
        "each task's part over 50 ms, median over the runs);",
        "* exercises.js's longest script: the longest run of `exercises.js` itself (its sourceURL) inside a long "
        "animation frame (the Long Animation Frames API names each script of 5 ms or more in a frame over 50 ms; "
        "0 = none), up to the end of the window: the main-thread work the checker's start causes, told apart from "
        "the page's own work (MathJax, the theme) and from a busy machine;",
        "* checker bytes: Pyodide and the checker's files received by the end of the window.", "",
        "| setting | variant | load event (ms) | ready after load (ms) | first verdict (ms) | worst first verdict (ms) "
        "| longest task, 10 s (ms) | blocking, 10 s (ms) | exercises.js's longest script (ms) | checker bytes (MB) "
        "| load avg (1 min) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for setting, variants in r["settings"].items():
        for name, v in variants.items():
            s = v["summary"]
            lines.append(f"| {setting} | {name} | {_ms(s['load_event_ms'])} | {_ms(s['ready_after_load_ms'])} | "
                         f"{_ms(s['first_verdict_ms'])} | {_ms(s['first_verdict_max_ms'])} | {_ms(s['longest_task_10s_ms'])} | "
                         f"{_ms(s['blocking_10s_ms'])} | {_ms(s['checker_script_max_ms'])} | {s['bytes_checker'] / 1e6:.1f} | "
                         f"{s['load_1min'][0]:.2f}-{s['load_1min'][1]:.2f} |")
    desk, phone = r["settings"].get("desktop 1280 px", {}), r["settings"].get("phone 390 px, CPU 4x slower", {})
    if "before" in desk and "after" in desk:
        b, a = desk["before"]["summary"], desk["after"]["summary"]
        slower = a["longest_task_10s_ms"] > b["longest_task_10s_ms"]
        busy = max(a["load_1min"][1], b["load_1min"][1]) > m["cpus"]
        lines += ["", f"Desktop: the first verdict came {_s(a['first_verdict_ms'])} after the click (median; worst "
                  f"{_s(a['first_verdict_max_ms'])}) instead of {_s(b['first_verdict_ms'])} (worst "
                  f"{_s(b['first_verdict_max_ms'])}); the checker was ready {_s(a['ready_after_load_ms'])} "
                  f"after the load event.  exercises.js itself never ran a script of more than "
                  f"{max(v['summary']['checker_script_max_ms'] for v in desk.values()):.0f} ms (0: none of 5 ms or more "
                  f"in a long frame); the longest main-thread task in the first 10 s was "
                  f"{a['longest_task_10s_ms']:.0f} ms with the preload and {b['longest_task_10s_ms']:.0f} ms without "
                  f"(total blocking {a['blocking_10s_ms']:.0f} ms against {b['blocking_10s_ms']:.0f} ms)"
                  + (f": the page's own work (MathJax, the layout pass in idle time) slowed by the worker compiling "
                     f"Pyodide on the same {m['cpus']} cores" + (", with the load average above the core count" if busy else "")
                     + "." if slower else ": the preload added no longer task.")]
    reading = [k for k in phone if k.startswith("after, ") and k.endswith("reading")]
    if reading and "before" in phone:
        rb = next(k for k in phone if k.startswith("before, ") and k.endswith("reading"))
        a, b = phone[reading[0]]["summary"], phone[rb]["summary"]
        lines += ["", f"Phone (390 px, CPU 4x): the checker starts when an exercise comes within a viewport of the "
                  f"screen; a reader who reads the question {r['read_s']:.0f} s before the click gets the verdict "
                  f"{a['first_verdict_ms'] / 1e3:.2f} s after it (median; worst {a['first_verdict_max_ms'] / 1e3:.2f} s) "
                  f"instead of {b['first_verdict_ms'] / 1e3:.1f} s; a click at the very moment of the scroll waits "
                  f"{phone['after']['summary']['first_verdict_ms'] / 1e3:.1f} s ({phone['before']['summary']['first_verdict_ms'] / 1e3:.1f} s "
                  f"before: both start at the click).  Started when the page is quiet instead ('after, idle (not near)'), the 4x-throttled page "
                  f"is never quiet for 1 s within 5 s of its load, so the start comes at the 5 s cap, no sooner than "
                  f"the reader's scroll here; started at the first idle period (an earlier version, "
                  f"same machine, load average 4.8-7.6) it raised the total blocking time of the first 10 s from "
                  f"3.3-3.6 s to 4.6-5.4 s, so a phone waits for the reader to come near an exercise."]
    lines += ["", "Every run (ready and click times from the load event; the status line the page showed while the "
              "checker was loading, if any):", "",
              "| setting | variant | run | started by | worker created (ms) | ready (ms) | click (ms) | first verdict (ms) "
              "| long tasks in 10 s [start, ms] | status shown | load avg |", "|---|---|---:|---|---:|---:|---:|---:|---|---|---|"]
    for setting, variants in r["settings"].items():
        for name, v in variants.items():
            for k, run in enumerate(v["runs"], 1):
                lines.append(f"| {setting} | {name} | {k} | {run['started_by']} | {_ms(run['worker_created_after_load_ms'])} "
                             f"| {_ms(run['ready_after_load_ms'])} | {_ms(run['click_after_load_ms'])} | "
                             f"{_ms(run['first_verdict_ms'])} | {run['long_tasks_10s'] or 'none'} | "
                             f"{run['status_shown'] or '-'} | {run['load_1min_before']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
