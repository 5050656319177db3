"""Stall rate of Output-widget cells executed through nbclient, without and with the wake-up fix.

A stall is the lost wake-up described in ``_ext/nbclient_wakeup.py``: the cell's
``execute_reply`` has arrived but nbclient only sees it when the per-cell timeout fires, so the
cell takes the whole timeout and then succeeds.  Each run executes one notebook of ``--cells``
``ipywidgets.interact`` cells (the pattern of chapter 1) in one fresh kernel, with a short
per-cell timeout.  Stalls are counted by ``nbclient_wakeup.count_lost_wakeups`` (a shell
``get_msg`` that returns a message only after waiting its whole timeout), which machine load
cannot fake: a reply that really comes late raises instead.  Runs
alternate between "without" and "with" the fix so that machine load affects both alike.

Usage:  .venv/bin/python bench/bench_nbclient_wakeup.py [--runs 6] [--cells 50] [--timeout 3]
Writes: bench/results/nbclient_wakeup.json and .md (only with --write).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import sys
from importlib.metadata import version
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import nbclient_wakeup  # noqa: E402

SETUP = """\
%matplotlib inline
import matplotlib.pyplot as plt
from ipywidgets import FloatSlider, interact

def show(a=0.0):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["x", "y"], [a, 1 - a])
    plt.show()
"""
WIDGET_CELL = "interact(show, a=FloatSlider(value={v}, min=-1.0, max=1.0, step=0.25));"


def widget_notebook(cells: int) -> nbformat.NotebookNode:
    """A notebook: one set-up cell, then ``cells`` cells with an ``interact`` Output widget."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP)]
    nb.cells += [nbformat.v4.new_code_cell(WIDGET_CELL.format(v=(i % 9 - 4) / 4)) for i in range(cells)]
    return nb


def execute(nb: nbformat.NotebookNode, timeout: float) -> int:
    """Execute ``nb`` in a fresh kernel; return the number of stalled cells."""
    with nbclient_wakeup.count_lost_wakeups() as lost:
        NotebookClient(nb, timeout=timeout, kernel_name="python3").execute()
    return len(lost)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=6, help="kernels per setting (default 6)")
    ap.add_argument("--cells", type=int, default=50, help="widget cells per kernel (default 50)")
    ap.add_argument("--timeout", type=float, default=3.0, help="per-cell timeout, s (default 3)")
    ap.add_argument("--write", action="store_true", help="write bench/results/nbclient_wakeup.*")
    args = ap.parse_args()
    nb = widget_notebook(args.cells)
    totals = {"without": [0, 0], "with": [0, 0]}   # [stalls, cells]
    for run in range(args.runs):
        for setting in ("without", "with"):
            (nbclient_wakeup.install if setting == "with" else nbclient_wakeup.uninstall)()
            stalls = execute(nbformat.from_dict(nb), args.timeout)
            totals[setting][0] += stalls
            totals[setting][1] += args.cells
            print(f"run {run + 1}/{args.runs} {setting:>7} fix: {stalls:3d} stalls in {args.cells} cells",
                  flush=True)
    nbclient_wakeup.uninstall()
    for setting, (stalls, cells) in totals.items():
        print(f"{setting:>7} the fix: {stalls} stalls in {cells} widget cells ({100 * stalls / cells:.1f} %)")
    if args.write:
        versions = {p: version(p) for p in ("nbclient", "jupyter_client", "pyzmq", "ipykernel", "ipywidgets")}
        report = {"date": dt.date.today().isoformat(),
                  "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}",
                  "versions": versions, "runs_per_setting": args.runs, "cells_per_run": args.cells,
                  "timeout_s": args.timeout,
                  "stalls": {k: {"stalls": v[0], "cells": v[1]} for k, v in totals.items()}}
        out = ROOT / "bench" / "results"
        out.mkdir(parents=True, exist_ok=True)
        (out / "nbclient_wakeup.json").write_text(json.dumps(report, indent=2) + "\n")
        lines = [f"Measured {report['date']} on {report['machine']}; "
                 + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".", "",
                 f"{args.runs} fresh kernels per setting (alternating), each executing {args.cells} "
                 f"`ipywidgets.interact` cells with a {args.timeout:g} s per-cell timeout; a stall is a "
                 f"reply seen only when the timeout fired (`bench/bench_nbclient_wakeup.py`).", "",
                 "| nbclient wake-up fix | stalled cells | widget cells | rate |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {s} | {c} | {100 * s / c:.1f} % |" for k, (s, c) in totals.items()]
        (out / "nbclient_wakeup.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
