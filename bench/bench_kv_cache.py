"""The cost of one-token appends to attnlib.KVCache: the doubling buffers against concatenation.

A decoder appends one token's keys and values per step.  attnlib.KVCache keeps them in
preallocated buffers that double when full (amortised constant time per token); the cache it
replaced concatenated, copying all T held tokens at every append (quadratic in all).  For each
n in --tokens, each strategy runs n one-token appends from empty, in a fresh subprocess on one
thread, --repeats times, and records

* the CPU seconds (time.process_time) and wall seconds of the n appends,
* the peak memory: the growth of the subprocess's peak resident set (ru_maxrss) over its
  resident set just before the appends, against the bytes the cache holds at the end
  (KVCache.nbytes) and the bytes it has allocated (KVCache.allocated_nbytes).

"concat" is the old strategy reimplemented here: the same checks (KVCache._checked), then
torch.cat of the held tokens and the new one.  Both caches hold the same numbers at the end
(checked).  Timings on a shared machine mean little without its load: the load average is
recorded before and after.

Usage: nice -n 10 .venv/bin/python bench/bench_kv_cache.py [--tokens 1024 2048 4096 8192]
       [--repeats 3] [--heads 4] [--d 64]
Writes bench/results/kv_cache.json and bench/results/kv_cache.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(strategy: str, n: int, heads: int, d: int, seed: int) -> dict:
    """n one-token appends with one strategy, in this (fresh) process."""
    sys.path.insert(0, str(ROOT))
    import torch
    from attnlib.kv_cache import KVCache

    class ConcatCache(KVCache):
        """The strategy KVCache used before issue 29: copy everything held at each append."""

        def append(self, k, v):
            k, v = self._checked(k, v)
            if self._k is None:
                self._k, self._v = k.detach().clone(), v.detach().clone()
            else:
                self._k = torch.cat([self._k[:, :, :self._T], k.detach()], dim=2)   # (B, H_kv, T + 1, d)
                self._v = torch.cat([self._v[:, :, :self._T], v.detach()], dim=2)
            self._T += k.shape[2]

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    pool_k = torch.randn(1, heads, 64, d, generator=g)          # 64 distinct tokens, reused
    pool_v = torch.randn(1, heads, 64, d, generator=g)
    tokens = [(pool_k[:, :, i % 64:i % 64 + 1], pool_v[:, :, i % 64:i % 64 + 1]) for i in range(n)]
    cache = (KVCache if strategy == "doubling" else ConcatCache)()
    rss_before = _rss_bytes()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for k, v in tokens:
        cache.append(k, v)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    idx = torch.arange(n) % 64
    assert torch.equal(cache.keys, pool_k[:, :, idx]) and torch.equal(cache.values, pool_v[:, :, idx])
    return {"cpu_s": cpu, "wall_s": wall, "peak_rss_growth_bytes": max(peak - rss_before, 0),
            "nbytes": cache.nbytes, "allocated_nbytes": cache.allocated_nbytes, "length": len(cache)}


def machine() -> dict:
    import torch
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "logical_cores": os.cpu_count(), "os": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__}


def run_child(strategy, n, heads, d, seed) -> dict:
    cmd = [sys.executable, __file__, "--child", strategy, str(n), str(heads), str(d), str(seed)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        strategy, n, heads, d, seed = sys.argv[2], *map(int, sys.argv[3:7])
        print(json.dumps(child(strategy, n, heads, d, seed)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4, help="H_kv (batch 1, float32)")
    parser.add_argument("--d", type=int, default=64, help="d_k = d_v")
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for n in args.tokens:
        for strategy in ("doubling", "concat"):
            runs = [run_child(strategy, n, args.heads, args.d, seed) for seed in range(args.repeats)]
            cpu = [r["cpu_s"] for r in runs]
            wall = [r["wall_s"] for r in runs]
            peak = [r["peak_rss_growth_bytes"] for r in runs]
            row = {"tokens": n, "strategy": strategy, "runs": runs,
                   "cpu_s_median": statistics.median(cpu), "cpu_s_min": min(cpu), "cpu_s_max": max(cpu),
                   "wall_s_median": statistics.median(wall),
                   "peak_rss_growth_bytes_median": statistics.median(peak),
                   "nbytes": runs[0]["nbytes"], "allocated_nbytes": runs[0]["allocated_nbytes"]}
            rows.append(row)
            print(f"{n:6d} {strategy:9s} cpu {row['cpu_s_median']:.3f} s (min {row['cpu_s_min']:.3f}, "
                  f"max {row['cpu_s_max']:.3f}), peak +{row['peak_rss_growth_bytes_median'] / 2**20:.1f} MiB, "
                  f"held {row['nbytes'] / 2**20:.1f} MiB", flush=True)
    load_after = os.getloadavg()
    result = {"settings": {"tokens": args.tokens, "repeats": args.repeats, "batch": 1, "n_kv_heads": args.heads,
                           "d_k": args.d, "d_v": args.d, "dtype": "float32", "threads": 1,
                           "append": "one token per call, from an empty cache, each run in a fresh subprocess"},
              "machine": machine(), "started_utc": started,
              "load_average_before": load_before, "load_average_after": load_after, "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kv_cache.json").write_text(json.dumps(result, indent=1) + "\n")
    m = result["machine"]
    lines = ["# KV cache: one-token appends, doubling buffers vs concatenation", "",
             f"Written by `bench/bench_kv_cache.py` at {started}. Machine: {m['cpu']}, {m['logical_cores']} "
             f"logical cores, torch {m['torch']}, one thread. Load average (1, 5, 15 min) before "
             f"{', '.join(f'{x:.2f}' for x in load_before)}, after {', '.join(f'{x:.2f}' for x in load_after)}.",
             f"Cache: batch 1, H_kv = {args.heads}, d_k = d_v = {args.d}, float32; {args.repeats} runs per row, each "
             "in a fresh subprocess. CPU seconds of all n appends (median, min-max). Peak memory: growth of "
             "the subprocess's peak resident set over its resident set before the appends.", "",
             "| tokens n | strategy | CPU s (median) | min-max | µs per append | peak growth MiB | held MiB | allocated MiB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tokens']} | {r['strategy']} | {r['cpu_s_median']:.3f} | {r['cpu_s_min']:.3f}-"
                     f"{r['cpu_s_max']:.3f} | {r['cpu_s_median'] / r['tokens'] * 1e6:.1f} | "
                     f"{r['peak_rss_growth_bytes_median'] / 2**20:.1f} | {r['nbytes'] / 2**20:.1f} | "
                     f"{r['allocated_nbytes'] / 2**20:.1f} |")
    (OUT / "kv_cache.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
