"""How long the exercises' number reader takes on the longest pastes a reader can send.

The unit tests (tests/test_answers_adversarial.py) check what the reader answers for these
inputs and that it answers at all (a 60 s hang guard, never a duration); the durations live here.
For each paste shape of that test file:

* ``check 1 MB``: ``attnlib.exercises.check(12, "cache_bytes", text)`` on a 1,000,000-character
  paste (the length limit answers it);
* ``reader 100k`` and ``reader 300k``: ``read_number`` with the length limit lifted (the patterns
  alone), at 100,000 and 300,000 characters: linear patterns take about three times as long on
  three times the text (the readers before issue 36 grew as n**2: 12 s at 32,000 characters,
  215 s at 100,000).

Each figure is the best of ``--repeats`` runs (seconds).  The load average is recorded: the
machine is shared, so the figures are upper bounds.

Usage:  .venv/bin/python bench/bench_answers.py [--repeats 3]
Writes: bench/results/answers.md and answers.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from attnlib.exercises import check, core  # noqa: E402
from attnlib.exercises.core import read_number  # noqa: E402


def _pastes() -> dict:
    spec = importlib.util.spec_from_file_location("test_answers_adversarial", ROOT / "tests" / "test_answers_adversarial.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PASTES


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    rows = {}
    limit = core.MAX_NUMBER_CHARS
    for shape, make in _pastes().items():
        row = {"check_1MB": best(lambda: check(12, "cache_bytes", make(1_000_000)), args.repeats)}
        core.MAX_NUMBER_CHARS = 10 ** 9                      # the patterns alone
        try:
            for n in (100_000, 300_000):
                text = make(n)
                row[f"reader_{n // 1000}k"] = best(lambda: read_number(text), args.repeats)
        finally:
            core.MAX_NUMBER_CHARS = limit
        rows[shape] = row
    result = {"script": "bench/bench_answers.py", "repeats": args.repeats, "rows": rows,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
              "load_before": load_before, "load_after": os.getloadavg(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    OUT.mkdir(exist_ok=True)
    (OUT / "answers.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# The number reader on long pastes", "",
             f"Written by `bench/bench_answers.py --repeats {args.repeats}` on {result['date']}, "
             f"{result['machine']['platform']}, {result['machine']['cpus']} CPUs. Load average (1, 5, 15 min) before: "
             f"{', '.join(f'{x:.2f}' for x in load_before)}; after: {', '.join(f'{x:.2f}' for x in result['load_after'])}. "
             "Best of the repeats, milliseconds.", "",
             "| paste | check, 1 MB | reader, 100k chars (no limit) | reader, 300k chars (no limit) |",
             "| --- | ---: | ---: | ---: |"]
    for shape, row in rows.items():
        lines.append(f"| {shape} | {1000 * row['check_1MB']:.1f} | {1000 * row['reader_100k']:.1f} | "
                     f"{1000 * row['reader_300k']:.1f} |")
    (OUT / "answers.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
