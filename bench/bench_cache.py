"""Why the readable attention formula's time grows faster than T^2 on a CPU: caches or fresh pages?

    python bench/bench_cache.py          # writes bench/results/attention_cache.{json,md} (about 20 s)

Chapter 11 fits the time of ``attnlib.scaled_dot_product_attention`` (one head, d_k = d_v = 64,
float32, one thread) as T^p and finds p above 2, by different amounts on different runs.  Two
explanations predict different things:

* **caches**: once a (T, T) float32 matrix outgrows a cache level (read from
  ``/sys/devices/system/cpu/cpu0/cache``), every pass over it streams from a slower level, so
  the time *per score* of a pass that allocates nothing steps up at those sizes.  Measured by
  ``exp_into``: ``torch.exp(S, out=buffer)`` over a preallocated (T, T) matrix (one read and
  one write per score, no allocation), and ``scores_into``: ``torch.matmul(q, k^T, out=buffer)``.
* **fresh pages**: each call of the readable formula allocates several (T, T) intermediates
  (scores, scaled scores, ``x - max``, ``exp``, the weights).  When the allocator gets them as new
  memory from the operating system (glibc maps large blocks and unmaps them when freed), the
  kernel zeroes every 4 KiB page on first touch; that time is counted in the process's CPU time.
  Measured by the minor page faults of each call (``getrusage``): ``fresh`` is the number of
  (T, T) float32 matrices' worth of pages a call faulted in.

For every T one warm-up call, then ``--calls`` calls of each of the three, in one process, one
thread, with ``time.process_time`` (CPU time, so time other programs take from the core is
left out; cache contention from them is not).  The JSON holds every call, the machine, its
caches and the load average before and after; the Markdown file a summary.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import machine_description  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def cpu_caches() -> list[dict]:
    """The data and unified caches of CPU 0 from sysfs: ``[{"level", "type", "bytes", "shared_by"}]``
    (empty where sysfs does not describe them)."""
    out = []
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(root.glob("index*")):
        try:
            kind = (d / "type").read_text().strip()
            if kind == "Instruction":
                continue
            size = (d / "size").read_text().strip()
            n = int(size.rstrip("KMG")) * {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}.get(size[-1], 1)
            shared = (d / "shared_cpu_list").read_text().strip() if (d / "shared_cpu_list").exists() else None
            out.append({"level": int((d / "level").read_text()), "type": kind, "bytes": n, "shared_by": shared})
        except (OSError, ValueError):
            continue
    return out


def _usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.process_time(), r.ru_utime, r.ru_stime, r.ru_minflt


def measure(fn, n_scores: int, calls: int) -> list[dict]:
    """``calls`` calls of ``fn`` after one warm-up: CPU ns per score (user and system parts from
    getrusage), and ``fresh``, the (T, T) float32 matrices' worth of pages each call faulted in."""
    fn()
    rows = []
    for _ in range(calls):
        a = _usage()
        fn()
        b = _usage()
        rows.append({"ns_per_score": (b[0] - a[0]) / n_scores * 1e9,
                     "user_ns": (b[1] - a[1]) / n_scores * 1e9, "sys_ns": (b[2] - a[2]) / n_scores * 1e9,
                     "fresh": (b[3] - a[3]) * PAGE / (4 * n_scores)})
    return rows


def run(Ts, calls: int, d_head: int = 64, seed: int = 0) -> dict:
    import torch

    import attnlib

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for T in Ts:
        q, k, v = (torch.randn(1, 1, T, d_head, generator=g) for _ in range(3))     # (B, H, T, d_head)
        buf = torch.empty(1, 1, T, T)
        S = q @ k.transpose(-2, -1)
        n = T * T
        out[T] = {
            "reference": measure(lambda: attnlib.scaled_dot_product_attention(q, k, v), n, calls),
            "exp_into": measure(lambda: torch.exp(S, out=buf), n, calls),
            "scores_into": measure(lambda: torch.matmul(q, k.transpose(-2, -1), out=buf), n, calls),
        }
    return out


FRESH = 0.5  # a call that faulted in at least half a (T, T) matrix's pages got fresh memory


def summarise(calls: dict) -> dict:
    """Per T: medians of each measurement, the reference split by fresh pages."""
    summary = {}
    for T, by in calls.items():
        ref = by["reference"]
        reused = [c["ns_per_score"] for c in ref if c["fresh"] < FRESH]
        fresh = [c for c in ref if c["fresh"] >= FRESH]
        summary[T] = {
            "matrix_mib": int(T) ** 2 * 4 / 2 ** 20,
            "reference_min": min(c["ns_per_score"] for c in ref),
            "reference_median": statistics.median(c["ns_per_score"] for c in ref),
            "reference_reused_median": statistics.median(reused) if reused else None,
            "reference_fresh_median": statistics.median(c["ns_per_score"] for c in fresh) if fresh else None,
            "n_reused": len(reused), "n_fresh": len(fresh),
            "fresh_matrices_median": statistics.median(c["fresh"] for c in fresh) if fresh else 0.0,
            "fresh_sys_share": (sum(c["sys_ns"] for c in fresh) / sum(c["ns_per_score"] for c in fresh)) if fresh else None,
            "exp_into_median": statistics.median(c["ns_per_score"] for c in by["exp_into"]),
            "scores_into_median": statistics.median(c["ns_per_score"] for c in by["scores_into"]),
        }
    return summary


def to_markdown(data: dict) -> str:
    m = data["meta"]
    caches = ", ".join(f"L{c['level']} {c['bytes'] // 1024} KiB" for c in m["caches"]) or "unknown"
    lines = [f"# Attention time per score against cache sizes and fresh pages ({m['date'][:10]})", "",
             f"{m['machine']['cpu']}, {m['machine']['logical_cores']} logical cores, caches {caches}; "
             f"PyTorch {m['machine']['torch']}; one thread; {data['config']['calls']} calls per case; "
             f"load average {m['load_start'][0]:.2f} before, {m['load_end'][0]:.2f} after.", "",
             "| T | one (T, T) matrix, MiB | reference, ns/score: median (calls reusing memory / calls with fresh pages) "
             "| fresh calls | exp into a buffer | q k^T into a buffer |", "|---|---|---|---|---|---|"]
    for T, s in data["summary"].items():
        f = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        lines.append(f"| {T} | {s['matrix_mib']:.2f} | {s['reference_median']:.2f} ({f(s['reference_reused_median'])} / "
                     f"{f(s['reference_fresh_median'])}) | {s['n_fresh']} of {s['n_fresh'] + s['n_reused']} | "
                     f"{s['exp_into_median']:.2f} | {s['scores_into_median']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--Ts", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    p.add_argument("--calls", type=int, default=15)
    p.add_argument("--out", default=str(RESULTS / "attention_cache"))
    args = p.parse_args(argv)
    load_start = os.getloadavg()
    started = time.perf_counter()
    calls = run(args.Ts, args.calls)
    data = {"meta": {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "machine": machine_description("cpu"), "caches": cpu_caches(), "page_bytes": PAGE,
                     "load_start": load_start, "load_end": os.getloadavg(),
                     "wall_s": time.perf_counter() - started,
                     "note": "CPU time per call (time.process_time), one thread, on a machine shared with other "
                             "jobs (see the load averages)."},
            "config": {"Ts": args.Ts, "calls": args.calls, "d_head": 64, "dtype": "float32", "seed": 0,
                       "fresh_threshold": FRESH},
            "calls": {str(T): v for T, v in calls.items()}}
    data["summary"] = summarise(data["calls"])
    Path(args.out + ".json").write_text(json.dumps(data, indent=1) + "\n")
    Path(args.out + ".md").write_text(to_markdown(data))
    print(to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
