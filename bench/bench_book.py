"""Whole-book benchmark: each chapter's execution time and peak memory, and `make html`.

Each chapter runs in a fresh process (jupytext -> nbclient, a fresh kernel), the way the
book build runs it: ``_ext/execute_notebook.py``, with the book's per-cell timeout
(``execute.timeout`` in ``_config.yml``) and the nbclient wake-up fix
(``_ext/nbclient_wakeup.py``); a cell that fails or times out stops the benchmark and is named.  Peak RSS is the kernel's high-water mark, read from
``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of that process once the kernel has exited
(Linux reports the largest descendant).  Each chapter gets an empty trained-model cache of its
own (``ATTNLIB_CACHE``, :mod:`attnlib.model_cache`), as a learner who opens only that page
from a fresh clone has: a chapter that needs chapter 7's models trains them, whatever ran
before it, and the row says so (``trains``: the number of models it stored).  Then the full
``make html`` build is timed (there the first page to need a model trains it and the others
load it).

Usage:  .venv/bin/python bench/bench_book.py [--no-build] [chapters/05_masking.md ...]
Writes: bench/results/book.json and bench/results/book.md (a table; the README quotes it).
Units: seconds (wall clock) and MiB (peak resident set size).  The slowest cell of each
chapter is recorded too (its index in the executed notebook and its seconds).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

RUN_ONE = r"""
import resource, sys
sys.path.insert(0, sys.argv[2])
from execute_notebook import ChapterError, execute_chapter
try:
    r = execute_chapter(sys.argv[1])
except ChapterError as err:
    sys.exit(f"FAILED: {err}")
index, cell_seconds, _ = max(r["cells"], key=lambda c: c[1])
print(r["seconds"], resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, index, cell_seconds)
"""


def toc_sources() -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]
    return [ROOT / f"{f}.md" for f in files if (ROOT / f"{f}.md").read_text().startswith("---\njupytext")]


def run_chapter(path: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_book_cache_") as cache:
        env = dict(os.environ, HF_HUB_OFFLINE="1", ATTNLIB_CACHE=cache)
        proc = subprocess.run([sys.executable, "-c", RUN_ONE, str(path), str(ROOT / "_ext")],
                              capture_output=True, text=True, env=env, cwd=ROOT)
        trains = len(list(Path(cache).glob("models/*/model.pt")))   # model_cache.entry_path: <cache>/models/<key>/model.pt
    if proc.returncode != 0:
        raise SystemExit(f"{path.name} failed:\n{proc.stderr[-3000:]}")
    seconds, rss_mib, cell, cell_seconds = map(float, proc.stdout.split()[-4:])
    return {"chapter": str(path.relative_to(ROOT)), "seconds": round(seconds, 1), "peak_rss_mib": round(rss_mib),
            "slowest_cell": int(cell), "slowest_cell_seconds": round(cell_seconds, 1), "trains": trains}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chapters", nargs="*", help="chapter sources (default: every notebook in _toc.yml)")
    ap.add_argument("--no-build", action="store_true", help="skip timing the full `make html` build")
    args = ap.parse_args()
    paths = [Path(p).resolve() for p in args.chapters] or toc_sources()
    rows = []
    load_before = os.getloadavg()[0]
    for p in paths:
        row = run_chapter(p)
        rows.append(row)
        print(f"{row['chapter']:<40} {row['seconds']:>7.1f} s {row['peak_rss_mib']:>7d} MiB   slowest cell "
              f"{row['slowest_cell']}: {row['slowest_cell_seconds']} s   models trained: {row['trains']}", flush=True)
    build_seconds = None
    if not args.no_build:
        # from an empty _build: Sphinx would otherwise skip unchanged pages and execute nothing
        subprocess.run(["make", "--no-print-directory", "clean"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        t0 = time.perf_counter()
        subprocess.run(["make", "--no-print-directory", "html"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        build_seconds = round(time.perf_counter() - t0, 1)
        print(f"make html (all chapters executed + Sphinx): {build_seconds} s")
    report = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "chapters": rows, "make_html_seconds": build_seconds,
        "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.chapters:
        (RESULTS / "book.json").write_text(json.dumps(report, indent=2) + "\n")
        lines = [f"Measured {report['date']} on {report['machine']}; each chapter in a fresh kernel with an "
                 "empty trained-model cache of its own (`models trained`: what it trained and stored).", "",
                 "| chapter | execution (s) | peak RSS (MiB) | slowest cell (index: s) | models trained |",
                 "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['chapter']} | {r['seconds']} | {r['peak_rss_mib']} | "
                  f"{r['slowest_cell']}: {r['slowest_cell_seconds']} | {r['trains']} |" for r in rows]
        if build_seconds is not None:
            lines += ["", f"`make html` (every chapter executed, then Sphinx): {build_seconds} s"]
        (RESULTS / "book.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
