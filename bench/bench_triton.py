"""Time and peak memory of attnlib's Triton FlashAttention kernel on a CUDA GPU, against
PyTorch's fused kernel and the readable tiled version, for T = 1k to 32k.

    python bench/bench_triton.py                    # needs a CUDA GPU and triton
    python bench/bench_triton.py --Ts 1024 4096 --dtype float32

Writes ``bench/results/triton_cuda.json`` and ``.md``; chapter 11 shows the table when the
JSON file exists (and says that no GPU benchmark was recorded when it does not).

Implementations (``B = 1``, ``--heads`` heads, ``d_head = 64``, ``--dtype`` default float16,
non-causal and causal):

* ``triton``: ``attnlib.triton_attention`` (block sizes 64 x 64 by default, ``--block-m``,
  ``--block-n``);
* ``torch``: ``torch.nn.functional.scaled_dot_product_attention`` (FlashAttention-2 or
  memory-efficient attention, chosen by PyTorch);
* ``tiled``: ``attnlib.tiled_attention(block_size=128)``, Python over PyTorch operations
  (skipped above ``--tiled-max-T``, it launches about a dozen kernels per tile).

Each time is the median of CUDA-event timings over repeated calls after warm-up (at least
``--repeats`` calls, at most ``--budget`` seconds per case); the ratio to the torch kernel is
the ratio of the medians.  Peak memory is ``torch.cuda.max_memory_allocated`` minus the memory
allocated before the call (after ``reset_peak_memory_stats``).  Before timing, every output is
checked against the torch kernel (float16: 2e-2 absolute; float32: 1e-4), so a wrong kernel
cannot produce a fast number.

This is a benchmark, not a test.  It refuses to run without CUDA: the interpreter's timings
say nothing about a GPU.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
MIB = 2 ** 20
LABELS = {"triton": "attnlib Triton kernel", "torch": "PyTorch fused kernel", "tiled": "attnlib tiled (Python)"}


def make_call(impl, q, k, v, causal, block_m, block_n):
    import torch.nn.functional as F

    import attnlib

    if impl == "triton":
        return lambda: attnlib.triton_attention(q, k, v, causal, block_m=block_m, block_n=block_n)
    if impl == "torch":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if impl == "tiled":
        return lambda: attnlib.tiled_attention(q, k, v, is_causal=causal, block_size=128)
    raise ValueError(impl)


def run_case(impl, T, heads, d_head, dtype, causal, args) -> dict:
    import torch

    g = torch.Generator(device="cuda").manual_seed(T)
    q, k, v = (torch.randn(1, heads, T, d_head, generator=g, device="cuda", dtype=dtype) for _ in range(3))
    call = make_call(impl, q, k, v, causal, args.block_m, args.block_n)
    reference = make_call("torch", q, k, v, causal, 0, 0)()
    out = call()                                                      # warm-up (compiles Triton once)
    tol = 2e-2 if dtype == torch.float16 else 1e-4
    err = (out.float() - reference.float()).abs().max().item()
    if err > tol:
        raise SystemExit(f"{impl} at T={T} causal={causal}: largest error {err:.2e} > {tol:g}; not timing a wrong kernel")
    del out
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / MIB
    times, spent = [], 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while len(times) < args.repeats or (spent < args.budget and len(times) < 1000):
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        spent += times[-1]
        if spent > args.budget and len(times) >= 3:
            break
    return {"impl": impl, "T": T, "causal": causal, "time_s": statistics.median(times), "calls": len(times),
            "peak_mib": peak, "max_abs_err": err}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--Ts", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default="float16")
    parser.add_argument("--block-m", type=int, default=64)
    parser.add_argument("--block-n", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed calls per case, at most")
    parser.add_argument("--tiled-max-T", type=int, default=8192)
    parser.add_argument("--out", type=Path, default=RESULTS / "triton_cuda.json")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        parser.error("this benchmark needs a CUDA GPU (the Triton interpreter's timings say nothing about one)")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import triton

    dtype = getattr(torch, args.dtype)
    rows = []
    for causal in (False, True):
        for T in args.Ts:
            for impl in ("triton", "torch", "tiled"):
                if impl == "tiled" and T > args.tiled_max_T:
                    continue
                row = run_case(impl, T, args.heads, args.d_head, dtype, causal, args)
                rows.append(row)
                print(f"causal={causal!s:5} T={T:6d} {impl:>6s}: {row['time_s'] * 1e3:8.3f} ms, "
                      f"peak {row['peak_mib']:8.1f} MiB, err {row['max_abs_err']:.1e}", flush=True)
    torch_time = {(r["T"], r["causal"]): r["time_s"] for r in rows if r["impl"] == "torch"}
    for r in rows:
        r["time_ratio"] = r["time_s"] / torch_time[r["T"], r["causal"]]
    data = {
        "meta": {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                 "machine": {"gpu": torch.cuda.get_device_name(), "cuda": torch.version.cuda, "torch": torch.__version__,
                             "triton": triton.__version__, "python": platform.python_version()}},
        "config": {"Ts": args.Ts, "heads": args.heads, "d_head": args.d_head, "dtype": args.dtype,
                   "block_m": args.block_m, "block_n": args.block_n, "impls": ["triton", "torch", "tiled"]},
        "labels": LABELS, "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    md = [f"# Triton kernel on {data['meta']['machine']['gpu']} ({data['meta']['date'][:10]})", "",
          f"B = 1, H = {args.heads}, d_head = {args.d_head}, {args.dtype}; time in ms (ratio to PyTorch's kernel), "
          "peak MiB", "", "| causal | T | " + " | ".join(LABELS[i] for i in data["config"]["impls"]) + " |",
          "|---|---:|" + "---:|" * 3]
    by = {(r["impl"], r["T"], r["causal"]): r for r in rows}
    for causal in (False, True):
        for T in args.Ts:
            cells = []
            for impl in data["config"]["impls"]:
                r = by.get((impl, T, causal))
                cells.append("-" if r is None else f"{r['time_s'] * 1e3:.3f} (x{r['time_ratio']:.2f}), {r['peak_mib']:.0f} MiB")
            md.append(f"| {causal} | {T:,} | " + " | ".join(cells) + " |")
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
