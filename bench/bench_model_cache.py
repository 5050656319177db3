"""The trained-model cache against training: chapter 7's runs trained in a fresh process with an
empty cache, then loaded from the cache in another fresh process.

For each run (the chapter's 2-layer model and the 1-layer control, seed 0, the default steps):

* ``train_seconds``: the wall time of ``induction.train(...)`` in a fresh process whose cache
  folder is empty (it trains and stores the run);
* ``load_seconds``: the wall time of the same call in a second fresh process (it loads the run);
  the import of attnlib is timed apart (``import_seconds``), since a notebook kernel pays it
  either way;
* ``same``: whether the loaded model's logits on the held-out repeated sequences equal the
  trained model's bit for bit.

Usage:  .venv/bin/python bench/bench_model_cache.py
Writes: bench/results/model_cache.json and bench/results/model_cache.md.
Units: seconds (wall clock), bytes.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

ONE = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
from attnlib import induction
t1 = time.perf_counter()
model, history = induction.train(int(sys.argv[1]), 0, progress=False)
t2 = time.perf_counter()
logits, _ = model(induction.repeated_sequences(64))
torch.save(logits, sys.argv[2])
print(json.dumps({"import_seconds": t1 - t0, "call_seconds": t2 - t1, "cached": history["cached"],
                  "training_seconds": history["seconds"]}))
"""


def run(n_layers: int, cache: Path, out: Path) -> dict:
    env = {**os.environ, "ATTNLIB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", ONE, str(n_layers), str(out)], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n_layers in (2, 1):
            load_before = os.getloadavg()[0]
            first = run(n_layers, tmp / "cache", tmp / "a.pt")
            second = run(n_layers, tmp / "cache", tmp / "b.pt")
            assert not first["cached"] and second["cached"], (first, second)
            entry = next((tmp / "cache" / "models").glob("*.pt"))
            same = torch.equal(torch.load(tmp / "a.pt"), torch.load(tmp / "b.pt"))
            rows.append({"n_layers": n_layers, "train_seconds": round(first["call_seconds"], 2),
                         "load_seconds": round(second["call_seconds"], 3),
                         "import_seconds": round(second["import_seconds"], 2),
                         "ratio": round(second["call_seconds"] / first["call_seconds"], 4),
                         "same": same, "load_average_before": round(load_before, 2),
                         "entry_bytes": entry.stat().st_size})
            for f in (tmp / "cache" / "models").glob("*"):
                f.unlink()
            print(rows[-1], flush=True)
    result = {"meta": {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       "torch": torch.__version__, "steps": __import__("attnlib").induction.STEPS},
              "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "model_cache.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Trained-model cache against training (bench/bench_model_cache.py)", "",
             f"Measured {result['meta']['date']} on {result['meta']['machine']}, {result['meta']['cpus']} CPU cores, "
             f"Python {result['meta']['python']}, torch {result['meta']['torch']}; chapter 7's runs, seed 0, "
             f"{result['meta']['steps']} steps; each call in a fresh process (attnlib's import timed apart).", "",
             "| run | train (s) | load from the cache (s) | load / train | same logits | entry (KiB) | load average before |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['n_layers']}-layer | {r['train_seconds']:.1f} | {r['load_seconds']:.3f} | "
                     f"{r['ratio']:.4f} | {'yes' if r['same'] else 'NO'} | {r['entry_bytes'] / 1024:.0f} | "
                     f"{r['load_average_before']:.1f} |")
    (RESULTS / "model_cache.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
