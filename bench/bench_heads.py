"""Why several heads: the chapter-6 model with H = 1, 4 and 8 heads at equal width (issue 28).

For each head count H and seed: train the two-layer attention-only model of chapter 7
(attnlib.induction.train with n_heads=H; everything else the chapter's settings, d_model =
D_MODEL, so a head has width D_MODEL / H and the parameter count does not change), then measure
on the held-out repeated sequences

* the next-token loss on the second copy (the repeat) and on the first copy (random words),
  nats (attnlib.induction.repeated_loss),
* the best induction score of the last layer and the best previous-token score of layer 0,
* the training loss of the first two steps (``early_loss``: the initial weights, and after one
  Adam step; both are independent of the schedule's length, so tests/test_induction.py
  re-trains two steps and compares them with this file),

with each run's wall time, the process's peak memory and the machine's load average.

Usage: nice -n 10 .venv/bin/python bench/bench_heads.py [--heads 1 4 8] [--seeds 0 1 2] [--steps N] [--jobs J]
(``--jobs J`` trains J models at once in separate processes, each on one CPU thread as
attnlib.induction.train always does; the results do not depend on J.)  The committed results
were run on an otherwise idle 16-core machine with CUDA hidden (CUDA_VISIBLE_DEVICES=""), so
that every model trains on the CPU as in the book; the shared 2-core machine was too loaded to
finish the nine runs in the time available.
Writes bench/results/heads.json and bench/results/heads.md.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnlib import induction  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"


def measure(n_heads: int, seed: int, steps: int) -> dict:
    model, history = induction.train(2, seed, steps, progress=False, n_heads=n_heads)
    ind = induction.induction_scores(model)
    prev = induction.previous_token_scores(model)
    return {
        "n_heads": n_heads, "d_head": induction.D_MODEL // n_heads, "seed": seed,
        "seconds": history["seconds"],
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "loss_second": induction.repeated_loss(model),
        "loss_first": induction.repeated_loss(model, half="first"),
        "induction_best": ind[-1].max().item(), "previous_best": prev[0].max().item(),
        "final_train_loss": history["loss"][-1],
        "early_loss": history["loss"][:2],
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _measure(args: tuple) -> dict:
    return measure(*args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=induction.STEPS)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    load_before = os.getloadavg()
    start = time.perf_counter()
    work = [(h, seed, args.steps) for seed in args.seeds for h in args.heads]
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            rows = pool.map(_measure, work)
    else:
        rows = [_measure(w) for w in work]
    for r in rows:
        print(f"H={r['n_heads']} seed={r['seed']}: {r['seconds']:.0f} s, second copy {r['loss_second']:.2f} nats, "
              f"induction {r['induction_best']:.3f}", flush=True)
    total = time.perf_counter() - start
    meta = {
        "settings": {**{k: getattr(induction, k) for k in ("SEQ_LEN", "CHUNK", "SPAN_MIN", "D_MODEL", "BATCH_SIZE",
                                                          "LR", "N_HELD_OUT")},
                     "STEPS": args.steps, "chapter_STEPS": induction.STEPS, "steps_reduced": args.steps != induction.STEPS,
                     "n_layers": 2, "heads": args.heads, "seeds": args.seeds},
        "torch": torch.__version__, "device": str(induction.build_model().tok_emb.weight.device),
        "cpus": os.cpu_count(), "machine": f"{platform.machine()}, {_cpu_model()}", "jobs": args.jobs,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "niceness": os.nice(0), "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "total_seconds": total,
        "peak_rss_mb": max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "heads.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        "# Why several heads: H = 1, 4, 8 at equal width (chapter 7)",
        "",
        "Written by `bench/bench_heads.py`. Settings: " + ", ".join(f"{k} = {v}" for k, v in meta["settings"].items())
        + f"; torch {meta['torch']} on {meta['device']} ({meta['machine']}, {meta['cpus']} CPUs visible, {meta['jobs']} "
        f"runs at a time, niceness {meta['niceness']}).",
        "",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in meta['load_average_before'])}; after: "
        f"{', '.join(f'{x:.2f}' for x in meta['load_average_after'])}. The machine is shared: times are upper bounds. "
        f"Total {total:.0f} s; peak resident memory {meta['peak_rss_mb']:.0f} MB.",
        "",
        "| H | d_head | seed | parameters | train (s) | second-copy loss (nats) | first-copy loss (nats) | "
        "best induction score (layer 1) | best previous-token score (layer 0) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['n_heads']} | {r['d_head']} | {r['seed']} | {r['n_parameters']:,} | {r['seconds']:.0f} | "
                     f"{r['loss_second']:.2f} | {r['loss_first']:.2f} | {r['induction_best']:.3f} | "
                     f"{r['previous_best']:.3f} |")
    lines += ["", "Mean over seeds:", "", "| H | second-copy loss | induction score |", "|---|---|---|"]
    for h in args.heads:
        sel = [r for r in rows if r["n_heads"] == h]
        lines.append(f"| {h} | {sum(r['loss_second'] for r in sel) / len(sel):.2f} | "
                     f"{sum(r['induction_best'] for r in sel) / len(sel):.3f} |")
    (OUT / "heads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
