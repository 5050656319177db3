"""Page load on the main thread: the longest task and the load event of every page of the built
book, at 390 and 1280 px, with the CPU unthrottled and throttled 4x (issue 38, item 7).

Serves a built book (``_build/html`` unless ``--html``) on 127.0.0.1 and opens each page in
headless Debian Chromium (Playwright, ``executable_path``) in a fresh browser context (empty
cache, every request to another host blocked), with the viewport and CPU throttling set
*before* the navigation (Chrome DevTools Protocol ``Emulation.setCPUThrottlingRate``, which the
target keeps across the navigation).  An init script registers a Long Tasks observer before
the page's first byte is parsed, so every main-thread task of 50 ms or more from the start of
parsing on is recorded (the Long Tasks API reports nothing shorter: "0" means no task of 50 ms
or more).  The run ends when the page has settled: the load event, MathJax's start-up promise, and then
``QUIET_S`` seconds (times the throttling rate) with no new long task and no request in flight,
or ``MAX_S`` seconds after the navigation at most.  (Playwright's "networkidle" is not used: under
4x throttling it sometimes never came.)

Per page, setting and run it records: ``load_ms`` (the load event, ``loadEventStart`` of the
navigation entry), ``dcl_ms`` (``DOMContentLoaded``), ``longest_ms`` (the longest task),
``over_200`` (tasks over 200 ms), ``blocking_ms`` (the sum over long tasks of their time past
50 ms, the "total blocking time" of the whole settle window) and ``busy_until_ms`` (the end of
the last long task).  The tables give the median over runs of each, and the worst run.

``--attribute`` adds one traced run per page (1280 px, CPU 1x; Chromium's ``devtools.timeline``
trace) and says what each long task was made of: the scripts evaluated or called in it (an
inline script is named by what it is: an explorable's view, course-layout.js, ...), the event
dispatched (DOMContentLoaded, load), parsing, style and layout.

Usage:  .venv/bin/python bench/bench_page_load.py --label before [--html DIR] [--runs 3]
            [--pages chapters/04_softmax_scaling.html ...] [--attribute] [--patch] [--note "..."]

``--patch`` measures a copy of the built book with the working tree's page-wide scripts written
into it (:func:`patch_site`: course-layout.css/.js and the MathJax configuration of ``_config.yml``),
as the next ``make html`` would write them, without rebuilding the book.
Writes: bench/results/page_load.json (one entry per label, so "before" and "after" sit side by
side; a label that is run again is replaced) and bench/results/page_load.md (every label's
tables, then the comparison of the labels).

The machine is shared (2 cores, other engineers' builds and tests): the load average before
and after each label's run is recorded with it, and so is the median over runs, which is what
the comparison uses.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _browser_bench import FLAGS, _route, chromium_path, serve  # noqa: E402

RESULTS = ROOT / "bench" / "results"
#: name -> ((width, height) in CSS px, CPU throttling rate)
SETTINGS = {"1280 px, CPU 1x": ((1280, 900), 1), "390 px, CPU 1x": ((390, 844), 1),
            "1280 px, CPU 4x": ((1280, 900), 4), "390 px, CPU 4x": ((390, 844), 4)}
QUIET_S = 1.5    # settled: this long (times the throttling rate) with no new long task ...
MAX_S = 60.0     # ... or this long after the navigation at most
AFTER_LOAD_S = 10.0   # and at least this long after the load event: the tasks a reader meets as they start reading (issue 45)
#: Registered before the page's own scripts (an init script): every long task into window.__long.
OBSERVE = """(() => { window.__long = []; try { new PerformanceObserver(l => l.getEntries().forEach(
  e => window.__long.push([e.startTime, e.duration]))).observe({type: 'longtask', buffered: true}); }
  catch (err) { window.__long = null; } })();"""
NAV = """() => { const n = performance.getEntriesByType('navigation')[0];
  return {load: n.loadEventStart, dcl: n.domContentLoadedEventStart, now: performance.now()}; }"""
MATHJAX = ("() => window.MathJax && MathJax.startup && MathJax.startup.promise ? "
           "MathJax.startup.promise.then(() => true) : true")


_LAYOUT_CSS = re.compile(r"<style>\n/\* Layout of the course book on every screen.*?</style>", re.S)
_LAYOUT_JS = re.compile(r"<script>\n/\* Page behaviour of the course book.*?</script>", re.S)
_MATHJAX_CONFIG = re.compile(r"<script>window\.MathJax = (\{.*?\})</script>", re.S)


def _merge(into: dict, new: dict) -> dict:
    for key, value in new.items():
        into[key] = _merge(dict(into.get(key) or {}), value) if isinstance(value, dict) else value
    return into


def patch_site(src: Path, dst: Path) -> dict:
    """Copy the built book ``src`` to ``dst`` with the working tree's page-wide scripts written
    into it, as the next ``make html`` would write them: course-layout.css and .js inlined
    (``_ext/page_weight.py``) and the MathJax configuration merged from ``_config.yml``
    (``sphinx.config.mathjax3_config``).  Nothing else: the chapters' outputs and every other
    file are the built ones, so that a comparison with ``src`` shows these changes alone.
    Returns how many pages got each change."""
    import yaml
    shutil.copytree(src, dst, symlinks=True)
    css = (ROOT / "_static" / "course-layout.css").read_text(encoding="utf-8")
    js = (ROOT / "_static" / "course-layout.js").read_text(encoding="utf-8")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    mathjax = ((config.get("sphinx") or {}).get("config") or {}).get("mathjax3_config") or {}
    counts = {"css": 0, "js": 0, "mathjax": 0}
    for page in dst.rglob("*.html"):
        if {"_static", "_sources", "_images"} & set(page.relative_to(dst).parts):
            continue
        text = page.read_text(encoding="utf-8")
        text, n_css = _LAYOUT_CSS.subn(lambda m: f"<style>\n{css}</style>", text, count=1)
        text, n_js = _LAYOUT_JS.subn(lambda m: f"<script>\n{js}</script>", text, count=1)
        text, n_mj = _MATHJAX_CONFIG.subn(
            lambda m: "<script>window.MathJax = " + json.dumps(_merge(json.loads(m.group(1)), mathjax)) + "</script>",
            text, count=1)
        counts["css"] += n_css
        counts["js"] += n_js
        counts["mathjax"] += n_mj
        page.write_text(text, encoding="utf-8")
    return counts


def pages_of(html: Path) -> list[str]:
    """The book's pages, relative to ``html``: every chapter (with the references) and the
    introduction; not the search page, the index or the redirect stub."""
    chapters = sorted(p.relative_to(html).as_posix() for p in (html / "chapters").glob("*.html"))
    return chapters + (["intro.html"] if (html / "intro.html").is_file() else [])


def load_once(browser, url: str, viewport: tuple, rate: float) -> dict:
    """One fresh load of ``url``: the navigation timings and every long task until settled."""
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    context.route("**/*", _route)
    context.add_init_script(OBSERVE)
    page = context.new_page()
    errors, in_flight = [], set()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: in_flight.add(r))
    page.on("requestfinished", lambda r: in_flight.discard(r))
    page.on("requestfailed", lambda r: in_flight.discard(r))
    if rate != 1:
        context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": rate})
    t0 = time.monotonic()
    page.goto(url, wait_until="load", timeout=MAX_S * 1000)
    loaded = time.monotonic()
    page.evaluate(MATHJAX)
    seen, since = None, time.monotonic()
    while time.monotonic() - t0 < MAX_S:   # settled: no new long task and nothing in flight for a while
        state = (page.evaluate("() => window.__long ? window.__long.length : -1"), len(in_flight))
        if state != seen:
            seen, since = state, time.monotonic()
        elif not state[1] and time.monotonic() - since >= QUIET_S * rate and time.monotonic() - loaded >= AFTER_LOAD_S:
            break
        page.wait_for_timeout(100)
    nav = page.evaluate(NAV)
    tasks = page.evaluate("() => window.__long")
    context.close()
    if tasks is None:
        raise RuntimeError("this Chromium has no Long Tasks API")
    durations = [d for _, d in tasks]
    after = [d for t, d in tasks if nav["load"] <= t < nav["load"] + AFTER_LOAD_S * 1000]   # started in the 10 s after load
    return {"longest_after_load_ms": max(after, default=0.0), "over_200_after_load": sum(d > 200 for d in after),
            "load_ms": nav["load"], "dcl_ms": nav["dcl"], "longest_ms": max(durations, default=0.0),
            "over_200": sum(d > 200 for d in durations), "blocking_ms": sum(max(0.0, d - 50) for d in durations),
            "busy_until_ms": max((s + d for s, d in tasks), default=0.0), "tasks": tasks,
            "settled_after_s": time.monotonic() - t0, "errors": errors}


# --- attribution: what the long tasks of one load were made of (Chromium's trace) -----------------

class _Scripts(HTMLParser):
    """The inline <script> blocks of a page: (first line, last line, name)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.found, self._open, self._kind = [], None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and "attnlib-xp" in (a.get("class") or ""):
            self._kind = a.get("data-kind")
        if tag == "script" and "src" not in a:
            self._open = (self.getpos()[0], a.get("type"))

    def handle_data(self, data):
        if self._open is not None:
            line, kind = self._open
            self.found.append((line, line + data.count("\n"), _name_inline(data, kind, self._kind)))

    def handle_endtag(self, tag):
        if tag == "script":
            self._open = None
        if tag == "figure":
            self._kind = None


def _name_inline(body: str, mime: str | None, figure_kind: str | None) -> str:
    if "attnlib explorables" in body:
        return f"inline: explorable '{figure_kind or '?'}' (xp_core.js + view)"
    if "Page behaviour of the course book" in body:
        return "inline: course-layout.js"
    if "window.MathJax" in body:
        return "inline: MathJax configuration"
    if "require" in body and ("define(" in body or "requirejs" in body):
        return "inline: require.js / bertviz"
    if "bertviz" in body or "d3." in body:
        return "inline: bertviz view"
    return "inline: other (" + re.sub(r"\s+", " ", body.strip())[:40] + ")"


def _label(ev: dict, base: str, inline: dict) -> str:
    data = (ev.get("args") or {}).get("data") or {}
    name = ev["name"]
    url = data.get("url") or ""
    if url:
        if url.split("?")[0].split("#")[0].endswith(".html"):
            line = (data.get("lineNumber") or 0) + 1
            page = url.split("?")[0].split("#")[0]
            for first, last, what in inline.get(page, []):
                if first <= line <= last + 1:
                    return what
            return f"inline: line {line}"
        return url.replace(base, "").split("?")[0]
    if name == "EventDispatch":
        return f"event {data.get('type')}"
    if name in ("TimerFire", "FireAnimationFrame", "FireIdleCallback"):
        return name
    return name


_SCRIPT = {"EvaluateScript", "FunctionCall", "v8.compile", "v8.evaluateModule", "v8.compileModule"}
_FORCED = {"Layout", "UpdateLayoutTree"}
_CALLBACKS = {"FireIdleCallback": "idle callback (script not named by the trace)",
              "TimerFire": "timer (script not named by the trace)",
              "FireAnimationFrame": "animation frame (script not named by the trace)",
              "BlinkScheduler_PerformMicrotaskCheckpoint": "promise callbacks (script not named by the trace)",
              "RunMicrotasks": "promise callbacks (script not named by the trace)",
              "AsyncTask Run": "async callback (script not named by the trace)"}
#: what the browser does that is not a page's script, named as Chromium's trace names it
_RENDER = {"Layout": "layout", "UpdateLayoutTree": "style", "PrePaint": "paint", "Paint": "paint",
           "Layerize": "paint", "Commit": "paint", "HitTest": "hit test", "ParseHTML": "parse HTML",
           "ParseAuthorStyleSheet": "parse CSS", "StyleElement::processStyleSheet": "parse CSS",
           "MajorGC": "garbage collection", "MinorGC": "garbage collection",
           "IntersectionObserverController::computeIntersections": "intersection observers"}


def _contains(outer: dict, inner: dict) -> bool:
    return outer is not inner and outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def _outermost(events: list[dict]) -> list[dict]:
    """The events of a list (sorted by start, longest first) that no other event of it contains."""
    out = []
    for e in events:
        if out and _contains(out[-1], e):
            continue
        if not any(_contains(o, e) for o in out[-3:]):
            out.append(e)
    return out


def _parts(task: dict, inside: list[dict], base: str, inline: dict) -> dict[str, float]:
    """Milliseconds of ``task`` per part: each outermost script (evaluation or call), the forced
    style and layout inside it, then what the browser did outside scripts; the rest is "other"."""
    parts: dict[str, float] = {}

    def add(label, us):
        if us > 0:
            parts[label] = parts.get(label, 0.0) + us / 1000

    scripts = _outermost([e for e in inside if e["name"] in _SCRIPT])
    # callbacks the trace does not name a script for (an idle callback, a timer, promise callbacks)
    scripts += _outermost([e for e in inside if e["name"] in _CALLBACKS and not any(_contains(sc, e) for sc in scripts)
                           and not any(_contains(e, sc) for sc in scripts)])
    scripts.sort(key=lambda e: (e["ts"], -e["dur"]))
    for sc in scripts:
        label = _CALLBACKS[sc["name"]] if sc["name"] in _CALLBACKS else _label(sc, base, inline)
        forced = _outermost([e for e in inside if e["name"] in _FORCED and _contains(sc, e)])
        for f in forced:
            add(f"{label} -> forced {_RENDER[f['name']]}", f["dur"])
        add(label, sc["dur"] - sum(f["dur"] for f in forced))
    rest = _outermost([e for e in inside if e["name"] in _RENDER and not any(_contains(sc, e) for sc in scripts)])
    for e in rest:
        add(_RENDER[e["name"]], e["dur"])
    add("other", task["dur"] - sum(sc["dur"] for sc in scripts) - sum(e["dur"] for e in rest))
    return dict(sorted(parts.items(), key=lambda kv: -kv[1]))


def attribute(browser, base: str, page_rel: str, html_dir: Path) -> list[dict]:
    """One traced load of ``base + page_rel`` (1280 px, CPU 1x): for each main-thread task of
    50 ms or more, its duration and the milliseconds of each part of it (:func:`_parts`)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.route("**/*", _route)
    page = context.new_page()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        browser.start_tracing(page=page, path=str(path), categories=[
            "devtools.timeline", "disabled-by-default-devtools.timeline", "v8", "blink", "toplevel"])
        page.goto(base + page_rel, wait_until="load")
        page.evaluate(MATHJAX)
        page.wait_for_timeout(int(QUIET_S * 1000))
        browser.stop_tracing()
        events = json.loads(path.read_text(encoding="utf-8"))
        events = events["traceEvents"] if isinstance(events, dict) else events
    context.close()
    inline = {base + page_rel: _Scripts((html_dir / page_rel).read_text(encoding="utf-8")).found}
    main = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
            and (e.get("args") or {}).get("name") == "CrRendererMain"}
    # the page's renderer only (headless Chromium runs other renderers too, e.g. its own WebUI)
    ours = {(e["pid"], e["tid"]) for e in events
            if str(((e.get("args") or {}).get("data") or {}).get("url") or "").startswith(base)}
    main &= ours
    out = []
    for pid, tid in main:
        evs = sorted((e for e in events if e.get("pid") == pid and e.get("tid") == tid and e.get("ph") == "X"
                      and "dur" in e), key=lambda e: (e["ts"], -e["dur"]))
        tasks = _outermost([e for e in evs if e["name"] in ("RunTask", "ThreadControllerImpl::RunTask")])
        for t in (t for t in tasks if t["dur"] >= 50_000):
            inside = [e for e in evs if _contains(t, e)]
            out.append({"ms": t["dur"] / 1000, "parts": _parts(t, inside, base, inline)})
    return sorted(out, key=lambda r: -r["ms"])


# --- report ----------------------------------------------------------------------------------

def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def summarise(runs: list[dict]) -> dict:
    keys = ("load_ms", "dcl_ms", "longest_ms", "over_200", "blocking_ms", "busy_until_ms",
            "longest_after_load_ms", "over_200_after_load")
    return {k: {"median": statistics.median(r[k] for r in runs), "max": max(r[k] for r in runs),
                "min": min(r[k] for r in runs)} for k in keys if all(k in r for r in runs)}


def _fmt(x: float) -> str:
    return f"{x:,.0f}"


def report(all_results: dict) -> str:
    lines = ["# Page load: the main thread while a page of the book loads", "",
             "Written by `bench/bench_page_load.py` (issue 38, item 7).  Each page of the built book in headless "
             "Chromium, a fresh context per load (empty cache, every other host blocked), viewport and CPU "
             "throttling (Chrome DevTools Protocol `Emulation.setCPUThrottlingRate`) set before the navigation.  "
             "`longest` = the longest main-thread task from the start of parsing until the page has settled "
             f"(load, MathJax's start-up, then {QUIET_S} s times the rate with no new long task and no request in flight); "
             "the Long Tasks API reports tasks of 50 ms or more, so 0 means none.  `load` = the load event "
             "(`loadEventStart`).  `blocking` = the sum over long tasks of their time past 50 ms.  "
             "`> 200` = tasks over 200 ms.  `after load` (runs since issue 45): the longest task, and the number "
             f"over 200 ms, that started in the {AFTER_LOAD_S:.0f} s after the load event (a run lasts at least that long).  "
             "Medians over the runs, then the worst run in brackets.  Units: ms.", ""]
    labels = list(all_results)
    for label in labels:
        res = all_results[label]
        m = res["meta"]
        lines += [f"## {label}", "",
                  f"{m['date']}: commit {m['commit']} ({m['commit_date']}); pages from `{m['html']}` "
                  f"({m['html_note']}).  {m['chromium']}, {m['machine']}, {m['runs']} runs per page and setting.  "
                  f"Load average (1 min) {m['load_before']:.1f} before, {m['load_after']:.1f} after.  "
                  f"`{m['command']}`." + (f"  {m['note']}" if m.get("note") else "")
                  + (f"  Measured run for run in turn with {', '.join(m['measured_in_turn_with'])}."
                     if m.get("measured_in_turn_with") else ""), ""]
        for setting in (s for s in SETTINGS if s in m["settings"]):
            rows = res["pages"]
            lines += [f"### {setting}", "",
                      "| page | longest | load | DOMContentLoaded | blocking | > 200 | main thread busy until | after load: longest, > 200 |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|"]
            for pg, per in rows.items():
                s = per[setting]["summary"]
                lines.append(f"| {pg} | {_fmt(s['longest_ms']['median'])} ({_fmt(s['longest_ms']['max'])}) | "
                             f"{_fmt(s['load_ms']['median'])} ({_fmt(s['load_ms']['max'])}) | "
                             f"{_fmt(s['dcl_ms']['median'])} | {_fmt(s['blocking_ms']['median'])} | "
                             f"{s['over_200']['median']:.0f} ({s['over_200']['max']}) | "
                             f"{_fmt(s['busy_until_ms']['median'])} | "
                             + (f"{_fmt(s['longest_after_load_ms']['median'])} ({_fmt(s['longest_after_load_ms']['max'])}), "
                                f"{s['over_200_after_load']['median']:.0f} ({s['over_200_after_load']['max']}) |"
                                if "longest_after_load_ms" in s else "not measured |"))
            lines.append("")
        if res.get("attribution"):
            lines += ["### What the long tasks were made of (one traced load per page, 1280 px, CPU 1x)", "",
                      "Each task of 50 ms or more with its parts of 5 ms or more (Chromium's `devtools.timeline` "
                      "trace; tracing itself slows the page a little).  An inline script is named by what it is.", "",
                      "```"]
            for pg, tasks in res["attribution"].items():
                lines.append(f"{pg}: {len(tasks)} tasks of 50 ms or more")
                for t in tasks[:6]:
                    parts = ", ".join(f"{k} {v:.0f}" for k, v in t["parts"].items() if v >= 5)
                    lines.append(f"  {t['ms']:7.0f}  {parts}")
            lines += ["```", ""]
    pairs = [(all_results[lab]["meta"]["baseline"], lab) for lab in labels
             if all_results[lab]["meta"].get("baseline") in all_results]
    if not pairs and len(labels) >= 2:
        pairs = [(labels[0], labels[-1])]
    for a, b in pairs:
        both = [s for s in SETTINGS if s in all_results[a]["meta"]["settings"] and s in all_results[b]["meta"]["settings"]]
        lines += [f"## {a} -> {b}", "",
                  f"Worst page (of the medians over runs) and the range over pages, {a} then {b}.", "",
                  "| setting | longest, worst page | longest, range over pages | load event, worst page | "
                  "load event, range over pages | tasks > 200 ms, most on a page |",
                  "|---|---:|---:|---:|---:|---:|"]
        for setting in both:
            cells = []
            for key in ("longest_ms", "load_ms"):
                vals = {lab: [per[setting]["summary"][key]["median"] for per in all_results[lab]["pages"].values()]
                        for lab in (a, b)}
                cells.append(f"{_fmt(max(vals[a]))} -> {_fmt(max(vals[b]))}")
                cells.append(f"{_fmt(min(vals[a]))}-{_fmt(max(vals[a]))} -> {_fmt(min(vals[b]))}-{_fmt(max(vals[b]))}")
            most = {lab: max(per[setting]["summary"]["over_200"]["median"] for per in all_results[lab]["pages"].values())
                    for lab in (a, b)}
            lines.append(f"| {setting} | " + " | ".join(cells) + f" | {most[a]:.0f} -> {most[b]:.0f} |")
        lines += ["", "Per page (median longest task, ms):", "",
                  "| page | " + " | ".join(f"{s}: {a} -> {b}" for s in both) + " |",
                  "|---|" + "---:|" * len(both)]
        for pg in all_results[b]["pages"]:
            if pg not in all_results[a]["pages"]:
                continue
            cells = [f"{_fmt(all_results[a]['pages'][pg][s]['summary']['longest_ms']['median'])} -> "
                     f"{_fmt(all_results[b]['pages'][pg][s]['summary']['longest_ms']['median'])}" for s in both]
            lines.append(f"| {pg} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="e.g. before, after")
    parser.add_argument("--html", default=str(ROOT / "_build" / "html"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pages", nargs="*", help="pages relative to --html (default: every chapter and intro)")
    parser.add_argument("--settings", nargs="*", choices=list(SETTINGS), help="default: all four")
    parser.add_argument("--attribute", action="store_true", help="add one traced load per page: what the long tasks were")
    parser.add_argument("--patch", action="store_true",
                        help="measure a copy of --html with the working tree's page-wide scripts written in (patch_site)")
    parser.add_argument("--baseline", metavar="LABEL",
                        help="with --patch: also measure --html as it is, under LABEL, run for run in turn with the "
                             "patched copy (same machine load for both)")
    parser.add_argument("--baseline-html", metavar="DIR",
                        help="with --baseline: measure this other build as the baseline (e.g. a copy of the pages "
                             "built before a change to attnlib), run for run in turn with --html")
    parser.add_argument("--note", default="", help="what was measured (which build, what was patched in)")
    parser.add_argument("--dry", action="store_true", help="print, do not write the results")
    args = parser.parse_args()
    if args.baseline and not (args.patch or args.baseline_html):
        parser.error("--baseline needs --patch or --baseline-html")
    if args.baseline_html and not args.baseline:
        parser.error("--baseline-html needs --baseline LABEL")
    from playwright.sync_api import sync_playwright

    built_from = Path(args.html).resolve()
    sites = {}   # label -> served folder
    if args.baseline:
        sites[args.baseline] = Path(args.baseline_html).resolve() if args.baseline_html else built_from
    if args.patch:
        tmp = tempfile.mkdtemp(prefix="page_load_")
        counts = patch_site(built_from, Path(tmp) / "html")
        sites[args.label] = Path(tmp) / "html"
        print(f"patched into {sites[args.label]}: {counts}")
    else:
        sites[args.label] = built_from
    pages = args.pages or pages_of(built_from)
    settings = args.settings or list(SETTINGS)
    chromium = chromium_path()
    bases = {label: serve(folder) for label, folder in sites.items()}
    load_before = os.getloadavg()[0]
    commit = _git("rev-parse", "--short", "HEAD"), _git("log", "-1", "--format=%cd", "--date=short")
    results = {label: {"pages": {}, "attribution": {}} for label in sites}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
        version = browser.version
        for pg in pages:
            for setting in settings:
                viewport, rate = SETTINGS[setting]
                runs = {label: [] for label in sites}
                for _ in range(args.runs):   # in turn: each site's run n under the same machine load
                    for label in sites:
                        runs[label].append(load_once(browser, bases[label] + pg, viewport, rate))
                for label in sites:
                    results[label]["pages"].setdefault(pg, {})[setting] = {"runs": runs[label], "summary": summarise(runs[label])}
                    s = results[label]["pages"][pg][setting]["summary"]
                    print(f"{label:>8s} {pg:40s} {setting:16s} longest {s['longest_ms']['median']:7.0f} "
                          f"({s['longest_ms']['max']:5.0f})  load {s['load_ms']['median']:7.0f}  >200 "
                          f"{s['over_200']['median']:.0f}  errors {sum(len(r['errors']) for r in runs[label])}", flush=True)
            if args.attribute:
                for label, folder in sites.items():
                    results[label]["attribution"][pg] = attribute(browser, bases[label], pg, folder)
                    for t in results[label]["attribution"][pg][:4]:
                        print(f"    {label}: {t['ms']:6.0f} ms: " + ", ".join(f"{k} {v:.0f}" for k, v in t["parts"].items() if v >= 5))
        browser.close()
    for label in sites:
        patched = args.patch and label == args.label
        folder = Path(args.baseline_html).resolve() if args.baseline_html and label == args.baseline else built_from
        html_rel = folder.relative_to(ROOT).as_posix() if folder.is_relative_to(ROOT) else str(folder)
        newest = max((f.stat().st_mtime for f in folder.rglob("*.html")), default=0)
        results[label]["meta"] = {
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit[0], "commit_date": commit[1],
            "html": html_rel + (" with the working tree's course-layout.css/.js and MathJax configuration "
                                "written in (`--patch`)" if patched else ""),
            "html_note": "newest page written " + dt.datetime.fromtimestamp(newest, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "chromium": f"headless Chromium {version} (`--disable-gpu`)",
            "machine": f"{platform.machine()} Linux, {os.cpu_count()} CPU cores visible (shared)",
            "runs": args.runs, "settings": {s: {"viewport": SETTINGS[s][0], "cpu_rate": SETTINGS[s][1]} for s in settings},
            "quiet_s": QUIET_S, "max_s": MAX_S, "load_before": load_before, "load_after": os.getloadavg()[0],
            "command": "bench/bench_page_load.py " + " ".join(sys.argv[1:]), "note": args.note,
            "measured_in_turn_with": [other for other in sites if other != label],
            "baseline": args.baseline if (patched or (args.baseline_html and label == args.label)) else None,
        }
    if args.dry:
        print(report(results))
        return
    path = RESULTS / "page_load.json"
    everything = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    everything.update(results)
    path.write_text(json.dumps(everything, indent=1), encoding="utf-8")
    (RESULTS / "page_load.md").write_text(report(everything), encoding="utf-8")
    print(report(everything))


if __name__ == "__main__":
    main()
