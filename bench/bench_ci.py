"""What CI costs: every phase of `.ci/run`, timed on a clean clone, with the load average.

CI runs `.ci/run` on a clean clone of main with a fresh environment: `make test` (set-up, the
unit tests, the book build, the checks of the built book) and then `make binder-test` (the
Binder environment built as repo2docker builds it, and every learner's notebook run in it).
This script runs the same commands, one phase at a time, in a clean clone of the current commit
(``git clone`` into a scratch folder; the work tree's uncommitted changes are not in it), and
times each:

* ``setup``: ``make setup`` (a fresh ``.venv`` from the package index);
* ``unit``: ``make unit`` (the unit tests, in parallel);
* ``book``: ``make book-tests`` (the book built as ``make book`` builds it, every chapter executed);
* ``pages``: ``make page-tests`` (browser checks of every page, the learners' notebooks, JupyterLab);
* ``binder``: ``make binder-test``; its report splits it into the environment's build and the
  notebooks' execution, and both are recorded.

The environment is CI's: ``ATTNLIB_REQUIRE_BROWSER=1`` and ``ATTNLIB_CACHE`` set as `.ci/run`
sets them (the trained-model cache in the clone's ``_build/cache``, empty at the start).  pip's
download cache is whatever the machine has (a warm package index, as CI's mirror is).

Usage:  python3 bench/bench_ci.py [--keep] [--phases setup,unit,...]
Writes: bench/results/ci.json (``total_seconds`` and one row per phase: seconds, exit status,
load average before and after, pytest's summary line) and bench/results/ci.md.
Units: seconds (wall clock).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: `.ci/run`'s commands, in its order (tests/test_ci.py checks that `make test` and `.ci/run`
#: are exactly these).
PHASES = [
    ("setup", ["make", "setup"]),
    ("unit", ["make", "unit"]),
    ("book", ["make", "book-tests"]),
    ("pages", ["make", "page-tests"]),
    ("binder", ["make", "binder-test"]),
]
#: The limit CI enforces, and the budget the project keeps (issue 34).
CI_LIMIT_MIN, BUDGET_MIN = 90, 35


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def summary_line(log: str) -> str:
    """pytest's last summary line (``2865 passed, 226 skipped in 242.84s``), or ''."""
    lines = re.findall(r"^=+ (.*(?:passed|failed|error).*) =+$", log, re.M)
    return lines[-1] if lines else ""


def binder_split(clone: Path) -> dict:
    """The Binder phase's own report: the environment's build steps and the notebooks' run."""
    report = clone / "_build" / "binder-test" / "binder.json"
    if not report.is_file():
        return {}
    data = json.loads(report.read_text())
    out = {}
    if "build_seconds" in data:
        out["build_seconds"] = data["build_seconds"]
    execute = data.get("execute") or {}
    if "seconds" in execute:
        out["execute_seconds"] = execute["seconds"]
    if "notebooks" in execute:
        out["notebooks"] = len(execute["notebooks"])
        out["all_ok"] = all(r.get("ok") for r in execute["notebooks"])
    return out


def render_md(result: dict) -> str:
    m = result["meta"]
    lines = [
        "# What CI costs (bench/bench_ci.py)", "",
        f"Measured {m['date']} on {m['machine']}, {m['cpus']} CPU cores, Python {m['python']}; commit "
        f"{m['commit']} cloned afresh; `ATTNLIB_REQUIRE_BROWSER=1`, `ATTNLIB_CACHE` in the clone's `_build/cache` "
        f"(empty at the start), as `.ci/run` sets them.", "",
        "| phase | command | s | min | exit | load before | load after | tests |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in result["phases"]:
        lines.append(f"| {r['phase']} | `{' '.join(r['command'])}` | {r['seconds']:.0f} | {r['seconds'] / 60:.1f} | "
                     f"{r['returncode']} | {r['load_before'][0]:.1f} | {r['load_after'][0]:.1f} | {r['tests']} |")
    total = result["total_seconds"]
    lines += ["", f"**Total: {total:.0f} s ({total / 60:.1f} min)**; CI's limit is {CI_LIMIT_MIN} min, the "
                  f"project's budget {BUDGET_MIN} min."]
    b = next((r.get("binder") for r in result["phases"] if r["phase"] == "binder" and r.get("binder")), None)
    if b:
        lines.append(f"The Binder phase: environment built in {b.get('build_seconds', float('nan')):.0f} s, "
                     f"{b.get('notebooks', '?')} notebooks run in {b.get('execute_seconds', float('nan')):.0f} s "
                     f"(its report: `bench/results/binder.md`).")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    ap.add_argument("--phases", default=",".join(p for p, _ in PHASES), help="comma-separated subset, in order")
    ap.add_argument("--results", default=str(RESULTS), help="folder for ci.json and ci.md")
    args = ap.parse_args(argv)
    wanted = args.phases.split(",")
    unknown = set(wanted) - {p for p, _ in PHASES}
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}; known: {[p for p, _ in PHASES]}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    scratch = Path(tempfile.mkdtemp(prefix="bench-ci-"))
    clone = scratch / "main"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    shared = ROOT.parent / "shared"
    if shared.is_dir():                                       # CI has ../shared beside the clone
        (scratch / "shared").symlink_to(shared)
    env = {**os.environ, "ATTNLIB_REQUIRE_BROWSER": "1", "ATTNLIB_CACHE": str(clone / "_build" / "cache")}
    env.pop("VIRTUAL_ENV", None)
    rows, start = [], time.perf_counter()
    for phase, cmd in PHASES:
        if phase not in wanted:
            continue
        before = loadavg()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        log = proc.stdout + proc.stderr
        (scratch / f"{phase}.log").write_text(log)
        row = {"phase": phase, "command": cmd, "seconds": round(seconds, 1), "returncode": proc.returncode,
               "load_before": before, "load_after": loadavg(), "tests": summary_line(log)}
        if phase == "binder":
            row["binder"] = binder_split(clone)
        rows.append(row)
        print(f"{phase}: {seconds:.0f} s, exit {proc.returncode}, {row['tests']}", flush=True)
        if proc.returncode != 0:
            print(log[-4000:], file=sys.stderr)
    total = time.perf_counter() - start
    result = {
        "meta": {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
                 "machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "phases_run": [r["phase"] for r in rows]},
        "phases": rows, "total_seconds": round(total, 1),
        "all_passed": all(r["returncode"] == 0 for r in rows),
    }
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ci.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "ci.md").write_text(render_md(result))
    print(f"total {total:.0f} s ({total / 60:.1f} min); logs in {scratch}; wrote {out / 'ci.md'}")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
