"""What a code-lab check costs a learner, in each way the learner's function can be run.

For each isolation mode of :mod:`attnlib.exercises.labs._sandbox` (``process``: a forked child,
Linux's default; ``spawn``: a worker spawned ahead of time, the default on macOS and Windows;
``inprocess``: only when asked for), in a fresh interpreter per mode (the "kernel"):

* ``correct``: the wall time of ``check_softmax`` on a right softmax (10 inputs, the last a
  real layer of the encoder; the reference's own first-time costs are paid by a warm-up check
  first), from the call to the verdict;
* ``refusal``: the same for a function that calls ``torch.softmax`` (refused on its first input);
* in ``spawn`` mode the worker for each check was started when the previous check closed (as
  in a notebook, where the reader reads between checks: the bench waits ``--gap`` seconds),
  and ``spawn, cold`` times the first check with no worker waiting (``ATTNLIB_LAB_PRESTART=0``).

Each measured twice: on the machine as it is ("quiet": its load average is recorded) and with
one CPU-bound process per core running beside it ("under load").

Usage:  .venv/bin/python bench/bench_lab_isolation.py [--runs 5] [--gap 6]
Writes: bench/results/lab_isolation.md and lab_isolation.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"

KERNEL = r'''
import json, os, sys, time, torch
from attnlib.exercises.labs import check_softmax

def sm(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)

def library(x, dim=-1):
    return torch.softmax(x, dim)

runs, gap = int(sys.argv[1]), float(sys.argv[2])
assert check_softmax(sm).correct            # warm-up: the reference's inputs and the encoder load
time.sleep(gap)
out = {"correct": [], "refusal": []}
for _ in range(runs):
    for name, fn in (("correct", sm), ("refusal", library)):
        t = time.perf_counter()
        fb = check_softmax(fn)
        out[name].append(time.perf_counter() - t)
        assert fb.correct == (name == "correct"), fb.text
        time.sleep(gap)
print("RESULT " + json.dumps(out), flush=True)
'''

COLD = r'''
import json, time, torch
from attnlib.exercises.labs import check_softmax
t = time.perf_counter()
fb = check_softmax(lambda x, dim=-1: torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x - x.amax(dim, keepdim=True)).sum(dim, keepdim=True))
print("RESULT " + json.dumps({"first": time.perf_counter() - t, "correct": fb.correct}), flush=True)
'''


def _burn(stop):  # one core busy until told to stop
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _kernel(code: str, env: dict, *args: str) -> dict:
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=1800,
                         env=dict(os.environ, **env, PYTHONPATH=str(ROOT)))
    line = next((l for l in run.stdout.decode().splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(run.stderr.decode()[-3000:])
    return json.loads(line[7:])


def measure(runs: int, gap: float, load: bool) -> dict:
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(os.cpu_count() if load else 0)]
    for p in burners:
        p.start()
    try:
        before = os.getloadavg()[0]
        out = {}
        for mode in ("process", "spawn", "inprocess"):
            out[mode] = _kernel(KERNEL, {"ATTNLIB_LAB_ISOLATION": mode, "ATTNLIB_CACHE": os.environ.get(
                "ATTNLIB_CACHE", str(ROOT / "_build" / "cache"))}, str(runs), str(gap))
        cold = _kernel(COLD, {"ATTNLIB_LAB_ISOLATION": "spawn", "ATTNLIB_LAB_PRESTART": "0"})
        out["spawn, cold"] = {"correct": [cold["first"]], "refusal": []}
        return {"load_before": before, "load_after": os.getloadavg()[0], "modes": out}
    finally:
        stop.set()
        for p in burners:
            p.join(5)


def _stats(xs: list) -> str:
    if not xs:
        return "–"
    return f"{statistics.median(xs):.2f} (min {min(xs):.2f}, max {max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gap", type=float, default=6.0, help="seconds between checks (the reader reading)")
    args = ap.parse_args()
    import torch

    result = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                          "torch": torch.__version__},
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                       cwd=ROOT).stdout.strip(),
              "runs": args.runs, "gap_s": args.gap,
              "quiet": measure(args.runs, args.gap, load=False),
              "under_load": measure(args.runs, args.gap, load=True)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "lab_isolation.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# What a code-lab check costs (bench/bench_lab_isolation.py)", "",
             f"Measured {result['date']} on {result['machine']['platform']}, {result['machine']['cpus']} CPU cores, "
             f"Python {result['machine']['python']}, torch {result['machine']['torch']}; commit {result['commit']}. "
             f"`check_softmax` (10 inputs, the last a real encoder layer), {args.runs} checks of each kind per mode, "
             f"{args.gap:g} s apart (the reader reading); wall seconds from the call to the verdict, median (min, max). "
             "Under load: one CPU-bound process per core beside it.", "",
             "| mode | right function, quiet | refused call, quiet | right function, under load | refused call, under load |",
             "|---|---|---|---|---|"]
    for mode in ("process", "spawn", "spawn, cold", "inprocess"):
        q, l = result["quiet"]["modes"][mode], result["under_load"]["modes"][mode]
        lines.append(f"| {mode} | {_stats(q['correct'])} | {_stats(q['refusal'])} | {_stats(l['correct'])} | "
                     f"{_stats(l['refusal'])} |")
    lines += ["", f"Load average (1 min) before/after: quiet {result['quiet']['load_before']:.1f}/"
              f"{result['quiet']['load_after']:.1f}, under load {result['under_load']['load_before']:.1f}/"
              f"{result['under_load']['load_after']:.1f}.",
              "`spawn, cold`: the first check of a kernel with no worker started ahead (its start-up: a new "
              "interpreter importing torch).", ""]
    (OUT / "lab_isolation.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
