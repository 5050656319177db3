"""Time and peak memory of the ways attnlib and PyTorch compute attention, against the sequence length T.

    python bench/bench_attention.py                 # CPU: writes bench/results/attention_cpu.{json,md}
    python bench/bench_attention.py --device cuda   # GPU: writes bench/results/attention_cuda.{json,md}

Implementations (one batch, ``--heads`` heads, ``d_head = 64``, float32, no mask):

* ``reference``: ``attnlib.scaled_dot_product_attention``, the readable formula that builds
  the ``(T, T)`` scores and weights;
* ``tiled (block b)``: ``attnlib.tiled_attention(block_size=b)``, exact attention one
  ``(b, b)`` tile at a time, written in Python over PyTorch operations;
* ``torch``: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused kernel;
* ``attnlib backend='torch'`` (``--fastpath``, on by default with ``--device cuda``): the fast
  path of ``attnlib.scaled_dot_product_attention``, i.e. input checks plus the fused kernel.

Times are measured with the implementations **interleaved in one process**: for each T one
fresh process builds the inputs, warms every implementation up once, then runs rounds in which
every implementation is called once, in an order shuffled (seeded) from round to round.  Each
round gives each implementation's time and its ratio to the torch kernel in that same round;
the tables report the **median** time and the **median ratio** over the rounds.  Interleaving
puts every implementation under the same load at the same moment, so the ratios are far
steadier than absolute times on a shared machine.  On the CPU the time is the CPU time the
process spends in the call (``time.process_time``) with one thread by default; wall times are
stored in the JSON file too.  ``--causal`` adds the same measurements with the causal mask
(``is_causal=True`` everywhere).

Peak memory is the memory a call adds on top of its inputs:

* CPU: every (implementation, T) case runs in a fresh subprocess.  After imports, one call at
  T = 64 (which loads the kernels' code) and input creation, the process's peak resident set size (``VmHWM``) is reset through
  ``/proc/self/clear_refs``; the first call's peak minus the resident size before it is the
  figure (``resource.getrusage`` ``ru_maxrss`` minus the same baseline where ``clear_refs`` is
  unavailable).  It counts everything the call touches, allocator slack included, at page
  resolution; figures below about 1 MiB are at the method's resolution.
* CUDA: ``torch.cuda.max_memory_allocated`` minus the memory allocated before the call,
  after ``reset_peak_memory_stats``; times are taken with CUDA events around synchronised
  calls, warm-up excluded.

This is a benchmark script, not a test; a full CPU run takes a few minutes.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
MIB = 2 ** 20


# ---------------------------------------------------------------- one case

def make_inputs(T: int, heads: int, d_head: int, device: str):
    import torch

    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(1, heads, T, d_head, generator=g).to(device) for _ in range(3))  # (B, H, T, d_head)
    return q, k, v


def make_call(impl: str, q, k, v, causal: bool = False):
    import torch.nn.functional as F

    import attnlib

    if impl == "reference":
        return lambda: attnlib.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if impl == "torch":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if impl == "fastpath":
        return lambda: attnlib.scaled_dot_product_attention(q, k, v, is_causal=causal, backend="torch")
    match = re.fullmatch(r"tiled-(\d+)", impl)
    if match:
        block = int(match.group(1))
        return lambda: attnlib.tiled_attention(q, k, v, is_causal=causal, block_size=block)
    raise ValueError(f"unknown implementation {impl!r}")


def _status_kib(field: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) if found else None


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def memory_case_cpu(impl: str, T: int, heads: int, d_head: int, threads: int, causal: bool) -> dict:
    """Run in a fresh process: the peak memory that the first call at size T adds."""
    import gc

    import torch

    torch.set_num_threads(threads)
    small = make_inputs(64, heads, d_head, "cpu")
    make_call(impl, *small, causal)()  # loads the kernels' code pages and lazy state, so they are not counted
    q, k, v = make_inputs(T, heads, d_head, "cpu")
    call = make_call(impl, q, k, v, causal)
    del small
    gc.collect()
    exact = _reset_peak_rss()
    if exact:
        before = _status_kib("VmRSS")
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = call()
    peak = _status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del result
    return {"impl": impl, "T": T, "peak_mib": max(0, peak - before) / 1024,
            "memory_method": "VmHWM" if exact else "ru_maxrss"}


def time_case_cpu(impls: list, T: int, heads: int, d_head: int, threads: int, causal: bool,
                  budget_s: float, seed: int = 0) -> list:
    """Run in a fresh process: every implementation at size T, interleaved round by round."""
    import random
    import statistics

    import torch

    torch.set_num_threads(threads)
    q, k, v = make_inputs(T, heads, d_head, "cpu")
    calls = {impl: make_call(impl, q, k, v, causal) for impl in impls}
    for impl in impls:                                               # warm-up at size T (first-call costs)
        calls[impl]()
    round_s = 0.0
    for impl in impls:                                               # one more, to size the rounds
        start = time.process_time()
        calls[impl]()
        round_s += time.process_time() - start
    rounds = max(3, min(30, int(budget_s * len(impls) / max(round_s, 1e-6))))
    rng = random.Random(seed * 1_000_003 + T)
    cpu = {impl: [] for impl in impls}
    wall = {impl: [] for impl in impls}
    for _ in range(rounds):
        order = list(impls)
        rng.shuffle(order)
        for impl in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            calls[impl]()
            cpu[impl].append(time.process_time() - start_cpu)
            wall[impl].append(time.perf_counter() - start)
    rows = []
    for impl in impls:
        ratios = [a / b for a, b in zip(cpu[impl], cpu["torch"]) if b > 0]
        rows.append({"impl": impl, "T": T, "rounds": rounds, "times_s": cpu[impl], "wall_s": wall[impl],
                     "time_s": statistics.median(cpu[impl]), "time_kind": "process CPU time",
                     "time_ratio": statistics.median(ratios) if ratios else None})
    return rows


def run_case_cuda(impl: str, T: int, heads: int, d_head: int, budget_s: float, causal: bool = False) -> dict:
    import statistics

    import torch

    q, k, v = make_inputs(T, heads, d_head, "cuda")
    call = make_call(impl, q, k, v, causal)
    for _ in range(2):                                               # warm-up: kernels, allocator, autotuning
        call()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    start_evt, end_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start_evt.record()
    call()
    end_evt.record()
    torch.cuda.synchronize()
    once = start_evt.elapsed_time(end_evt) / 1e3
    times = []
    for _ in range(max(3, min(50, int(budget_s / max(once, 1e-6))))):
        start_evt.record()
        call()
        end_evt.record()
        torch.cuda.synchronize()
        times.append(start_evt.elapsed_time(end_evt) / 1e3)
    return {"impl": impl, "T": T, "first_s": once, "times_s": times, "time_s": statistics.median(times),
            "time_kind": "CUDA event time",
            "peak_mib": peak / MIB, "memory_method": "torch.cuda.max_memory_allocated"}


# ---------------------------------------------------------------- the whole run

def machine_description(device: str) -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = names[0].strip() if names else cpu
    except OSError:
        pass
    try:
        mem_kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f"{mem_kib / 2**20:.1f} GiB"
    except (OSError, AttributeError):
        mem = "unknown"
    info = {"cpu": cpu, "logical_cores": os.cpu_count(), "memory": mem, "os": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def ratio(a, b):
    return a / b if b else None


def to_markdown(data: dict) -> str:
    impls, rows, cfg, meta = data["config"]["impls"], data["rows"], data["config"], data["meta"]
    names = {i: data["labels"][i] for i in impls}
    others = [i for i in impls if i != "torch"]
    where = (f"{meta['machine']['gpu']} (CUDA {meta['machine']['cuda']}), " if "gpu" in meta["machine"] else "")
    threads = f", {cfg['threads']} CPU thread(s)" if cfg["threads"] else ""
    how = (f"in each of {cfg.get('repeats', 1)} independent runs, the median over rounds in which the "
           "implementations run interleaved in one process (order shuffled each round), and the run's ratio = median "
           "over rounds of time / torch kernel time in the same round; the tables give the median over the runs, "
           "with the runs' range (lowest-highest) in brackets"
           if cfg["device"] == "cpu" else "median of repeated calls after warm-up; ratio = time / torch kernel time")
    lines = [f"# Attention benchmark ({cfg['device']})", "",
             f"Written by `bench/bench_attention.py` on {meta['date']}: {where}{meta['machine']['cpu']} "
             f"({meta['machine']['logical_cores']} logical cores, {meta['machine']['memory']}), "
             f"PyTorch {meta['machine']['torch']}{threads}. {meta['note']}".rstrip(), "",
             f"Settings: one batch, {cfg['heads']} head(s), d_head = {cfg['d_head']}, float32. "
             f"Time: {rows[0]['time_kind']} per call, {how}. "
             "Memory: peak added by the first call at that size, on top of its inputs, in a fresh process.", ""]
    for mask in cfg["masks"]:
        by = {(r["impl"], r["T"]): r for r in rows if r["mask"] == mask}
        Ts = sorted({r["T"] for r in rows if r["mask"] == mask})
        title = "no mask" if mask == "none" else "causal mask (is_causal=True)"
        lines += [f"## Time, {title}", "",
                  "| T | " + " | ".join(f"{names[i]} (ms) | x torch" for i in others) + " | torch (ms) | rounds |",
                  "|---:|" + "---:|---:|" * len(others) + "---:|---:|"]
        for T in Ts:
            cells = []
            for i in others:
                r = by.get((i, T))
                if r is None:
                    cells += ["-", "-"]
                elif "ratio_range" in r:
                    cells += [f"{r['time_s'] * 1e3:.2f}",
                              f"{r['time_ratio']:.1f} ({r['ratio_range'][0]:.1f}-{r['ratio_range'][1]:.1f})"]
                else:
                    cells += [f"{r['time_s'] * 1e3:.2f}", f"{r['time_ratio']:.1f}"]
            t = by[("torch", T)]
            rounds = (" + ".join(str(run["rounds"]) for run in t["runs"]) if "runs" in t else str(len(t["times_s"])))
            lines.append(f"| {T} | " + " | ".join(cells) + f" | {t['time_s'] * 1e3:.2f} | {rounds} |")
        lines += ["", f"## Peak memory, {title}", "",
                  f"MiB added by one call ({meta['memory_method']}); the last column is the size of one float32 "
                  "(T, T) weight matrix per head.", "",
                  "| T | " + " | ".join(names[i] for i in impls) + " | T x T float32 |",
                  "|---:|" + "---:|" * (len(impls) + 1)]
        for T in Ts:
            cells = [f"{by[(i, T)]['peak_mib']:.1f}" if (i, T) in by else "-" for i in impls]
            weights = T * T * 4 * cfg["heads"] / MIB
            lines.append(f"| {T} | " + " | ".join(cells) + f" | {weights:.1f} |")
        lines.append("")
    return "\n".join(lines)


def _child(env, *args) -> object:
    cmd = [sys.executable, str(Path(__file__).resolve()), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        raise SystemExit(f"child {' '.join(map(str, args))} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--min-T", type=int, default=128)
    parser.add_argument("--max-T", type=int, default=16384)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for every implementation (default 1: stable on a shared machine)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per implementation and T")
    parser.add_argument("--repeats", type=int, default=3,
                        help="CPU: independent runs (fresh processes, one sweep over every T each) whose "
                             "results are combined; the tables give their median and their range (default 3)")
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure with the causal mask (default: on)")
    parser.add_argument("--fastpath", action=argparse.BooleanOptionalAction, default=None,
                        help="also time attnlib.scaled_dot_product_attention(backend='torch') "
                             "(default: on for --device cuda, off for cpu)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--note", default="", help="free text stored with the results (e.g. machine load)")
    parser.add_argument("--memory-case", nargs=3, metavar=("IMPL", "T", "MASK"), help=argparse.SUPPRESS)
    parser.add_argument("--time-case", nargs=3, metavar=("IMPLS", "T", "MASK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.memory_case:                                             # child process: one memory case
        impl, T, mask = args.memory_case
        print(json.dumps(memory_case_cpu(impl, int(T), args.heads, args.d_head, args.threads, mask == "causal")))
        return 0
    if args.time_case:                                               # child process: one T, all impls
        impls, T, mask = args.time_case
        print(json.dumps(time_case_cpu(impls.split(","), int(T), args.heads, args.d_head, args.threads,
                                       mask == "causal", args.budget, seed=args.seed)))
        return 0

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device, and none is available")
    if args.device == "cuda" and str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))                                # import attnlib from this checkout
    Ts = [T for T in (2 ** p for p in range(7, 20)) if args.min_T <= T <= args.max_T]
    fastpath = ["fastpath"] if (args.fastpath if args.fastpath is not None else args.device == "cuda") else []
    impls = ["reference", *[f"tiled-{b}" for b in args.block_sizes], *fastpath, "torch"]
    masks = ["none", "causal"] if args.causal else ["none"]
    labels = {"reference": "reference", "torch": "torch", "fastpath": "attnlib backend='torch'",
              **{f"tiled-{b}": f"tiled (block {b})" for b in args.block_sizes}}
    load_start = os.getloadavg()
    started = time.perf_counter()
    rows = []
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    common = ["--heads", args.heads, "--d-head", args.d_head, "--threads", args.threads, "--budget", args.budget]
    if args.device == "cpu":
        # Runs are whole sweeps, one after another, so a slow spell of the machine falls on one run of
        # every T rather than on every run of one T; each (run, T) is a fresh process.
        runs = {}
        for rep in range(args.repeats):
            for mask in masks:
                for T in Ts:
                    load = os.getloadavg()[0]
                    for row in _child(env, "--time-case", ",".join(impls), T, mask, *common, "--seed", rep):
                        runs.setdefault((mask, T, row["impl"]), []).append({**row, "run": rep, "load_1min": load})
                    print(f"run {rep + 1}/{args.repeats} {mask:6s} T={T:6d}: " + "  ".join(
                        f"{labels[i]} x{runs[(mask, T, i)][-1]['time_ratio']:.2f}" for i in impls if i != "torch"),
                        flush=True)
        for mask in masks:
            for T in Ts:
                for impl in impls:
                    got = runs[(mask, T, impl)]
                    ratios = [r["time_ratio"] for r in got]
                    times = [r["time_s"] for r in got]
                    row = {"impl": impl, "T": T, "mask": mask, "time_kind": got[0]["time_kind"],
                           "time_s": statistics.median(times), "time_range_s": [min(times), max(times)],
                           "time_ratio": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
                           "runs": [{"run": r["run"], "rounds": r["rounds"], "time_s": r["time_s"],
                                     "time_ratio": r["time_ratio"], "load_1min": r["load_1min"],
                                     "times_s": r["times_s"], "wall_s": r["wall_s"]} for r in got]}
                    row.update(_child(env, "--memory-case", impl, T, mask, *common))
                    rows.append(row)
                    print(f"{mask:6s} T={T:6d} {labels[impl]:>18s}: {row['time_s'] * 1e3:10.2f} ms  "
                          f"x{row['time_ratio']:.2f} ({row['ratio_range'][0]:.2f}-{row['ratio_range'][1]:.2f})  "
                          f"peak +{row['peak_mib']:8.1f} MiB", flush=True)
    else:
        for mask in masks:
            for T in Ts:
                timed = [run_case_cuda(impl, T, args.heads, args.d_head, args.budget, mask == "causal")
                         for impl in impls]
                base = next(r for r in timed if r["impl"] == "torch")
                for row in timed:
                    row["time_ratio"] = ratio(row["time_s"], base["time_s"])
                    row["mask"] = mask
                    rows.append(row)
                    print(f"{mask:6s} T={T:6d} {labels[row['impl']]:>18s}: {row['time_s'] * 1e3:10.2f} ms  "
                          f"x{row['time_ratio']:.2f}  peak +{row['peak_mib']:8.1f} MiB", flush=True)
    load_end = os.getloadavg()
    loads = [r["load_1min"] for row in rows for r in row.get("runs", [])]
    methods = sorted({r["memory_method"] for r in rows})
    note = (f"{args.repeats} independent runs. Load average (1 min) {load_start[0]:.1f} at the start and "
            f"{load_end[0]:.1f} at the end, {min(loads):.1f} to {max(loads):.1f} when the cases started, on "
            f"{os.cpu_count()} logical cores, which other work may share: absolute times are noisy, the "
            "interleaved ratios much less; the ranges say how much."
            if args.device == "cpu" else "")
    data = {
        "meta": {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                 "machine": machine_description(args.device), "memory_method": ", ".join(methods),
                 "wall_s": time.perf_counter() - started, "note": (note + " " + args.note).strip(),
                 "command": "python bench/bench_attention.py " + " ".join(sys.argv[1:] if argv is None else argv)},
        "config": {"device": args.device, "heads": args.heads, "d_head": args.d_head, "dtype": "float32",
                   "threads": args.threads if args.device == "cpu" else None, "Ts": Ts, "impls": impls,
                   "masks": masks, "budget_s": args.budget, "block_sizes": args.block_sizes,
                   "repeats": args.repeats if args.device == "cpu" else 1},
        "labels": labels,
        "rows": rows,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"attention_{args.device}"
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    table = to_markdown(data)
    stem.with_suffix(".md").write_text(table)
    print()
    print(table)
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.md')} in {data['meta']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
