"""What the course's language model (attnlib.language_model) costs in a kernel, on this machine.

Each measurement runs in a fresh Python process (so that nothing loaded earlier is counted),
with the trained-model cache folder of this process (``ATTNLIB_CACHE``):

* ``tokenizer, first build``: ``language_model.tokenizer()`` with an empty cache folder
  (``transformers`` builds it from the GGUF file) and ``tokenizer, kept``: the same call once
  the built copy is kept (``tokenizers`` alone);
* ``load``: ``language_model.load()`` (the SHA-256 check, reading the file, dequantizing into
  float32);
* ``run, 20 tokens``: ``language_model.run`` on a 20-token prompt (every activation kept), the
  best of ``--repeats`` after one warm-up, and the same for ``forward`` alone;
* ``peak memory``: the process's maximum resident set (``ru_maxrss``) after loading the model,
  tokenizing and one run: what a notebook kernel holding the model and a run needs on top of
  the Jupyter machinery (mybinder.org guarantees 450 MB and allows 2 GB).

The machine is shared: the load average (1 min) is recorded before and after, and the times are
upper bounds.

Usage:  .venv/bin/python bench/bench_language_model.py [--repeats 5]
Writes: bench/results/language_model.md and language_model.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"

PROBE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch
from attnlib import language_model as lm
what = sys.argv[1]
out = {}
if what == "tokenizer":
    t = time.perf_counter(); lm.tokenizer(); out["seconds"] = time.perf_counter() - t
    out["transformers_imported"] = "transformers" in sys.modules
else:
    torch.set_num_threads(int(sys.argv[3]))
    t = time.perf_counter(); model = lm.load(); out["load_seconds"] = time.perf_counter() - t
    out["rss_after_load_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    text = "When Mary and John went to the store, John gave a drink to Mary. Then the two of them walked home"
    tokens = lm.encode(text)[:20]
    out["tokens"] = int(tokens.numel())
    repeats = int(sys.argv[2])
    runs, forwards = [], []
    lm.run(model, tokens)
    for _ in range(repeats):
        t = time.perf_counter(); lm.run(model, tokens); runs.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            model(tokens)
        forwards.append(time.perf_counter() - t)
    out["run_seconds"] = min(runs)
    out["forward_seconds"] = min(forwards)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["process_seconds"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def probe(*args: str, env=None) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as empty:
        first = probe("tokenizer", env={"ATTNLIB_CACHE": empty})
        kept = probe("tokenizer", env={"ATTNLIB_CACHE": empty})
    model = {threads: probe("model", str(args.repeats), str(threads)) for threads in (1, os.cpu_count() or 1)}
    result = {"script": "bench/bench_language_model.py", "repeats": args.repeats,
              "tokenizer_first": first, "tokenizer_kept": kept, "model_by_threads": model,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
              "load_before": load_before, "load_after": os.getloadavg(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    OUT.mkdir(exist_ok=True)
    (OUT / "language_model.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# The language model in a kernel (attnlib.language_model)", "",
             f"Written by `bench/bench_language_model.py --repeats {args.repeats}` on {result['date']}, "
             f"{result['machine']['platform']}, {result['machine']['cpus']} CPUs. Load average (1, 5, 15 min) before: "
             f"{', '.join(f'{x:.2f}' for x in load_before)}; after: {', '.join(f'{x:.2f}' for x in result['load_after'])}. "
             "Each row is a fresh process; times are the best of the repeats after one warm-up run.", "",
             f"* tokenizer, first build (transformers, from the GGUF file): {first['seconds']:.1f} s; kept copy "
             f"(tokenizers alone, transformers imported: {kept['transformers_imported']}): {kept['seconds']:.2f} s", "",
             "| torch threads | load (s) | run, 20 tokens, every activation kept (s) | forward alone (s) | "
             "peak resident memory after load (MB) | peak with a run (MB) |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for threads, m in model.items():
        lines.append(f"| {threads} | {m['load_seconds']:.1f} | {m['run_seconds']:.3f} | {m['forward_seconds']:.3f} | "
                     f"{m['rss_after_load_mb']:.0f} | {m['peak_rss_mb']:.0f} |")
    (OUT / "language_model.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
