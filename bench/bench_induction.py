"""The induction figures of chapter 7 over seeds 0-4, against the targets of issue 16.

For each seed: train the two-layer model and the one-layer control (attnlib.induction.train,
the chapter's settings), then measure on held-out data

* the best induction score in the last layer (target >= 0.3; uniform is about 1/T),
* the best previous-token score in layer 0 (target >= 0.5),
* the rise of the repeated-half loss when the best induction head is zero-ablated
  (target >= 0.5 nats), and of the first-half loss (should stay small),
* the layer-0 head whose removal lowers the induction head's score most (the head feeding it),
  with its duplicate-token and previous-token scores,
* the one-layer control's best induction score (target < half the two-layer one's) and its
  repeated-half loss (target >= 0.5 nats worse than the two-layer model's),

with the wall time of each run, the peak resident memory of the process and the load average
of the machine (timings on a shared machine mean little without it).

Usage: .venv/bin/python bench/bench_induction.py [--seeds 0 1 2 3 4]
Writes bench/results/induction.md and bench/results/induction.json.
"""
from __future__ import annotations

import argparse
import json
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


def measure(seed: int) -> dict:
    model, history = induction.train(2, seed, progress=False)
    control, history1 = induction.train(1, seed, progress=False)
    ind = induction.induction_scores(model)
    prev = induction.previous_token_scores(model)
    last = model.n_layers - 1
    ih, ph = int(ind[last].argmax()), int(prev[0].argmax())
    intact2, intact1 = induction.repeated_loss(model), induction.repeated_loss(model, half="first")
    feeder = [induction.induction_scores(model, edits=[{"layer": 0, "head": h, "mode": "zero"}])[last, ih].item() for h in range(model.n_heads)]
    dup = induction.duplicate_token_scores(model)
    fh = min(range(model.n_heads), key=feeder.__getitem__)
    ind1 = induction.induction_scores(control)
    loss1 = induction.repeated_loss(control)
    row = {
        "seed": seed,
        "seconds_2_layers": history["seconds"], "seconds_1_layer": history1["seconds"],
        "induction_best": ind[last, ih].item(), "induction_head": ih,
        "previous_best": prev[0, ph].item(), "previous_head": ph,
        "loss_second": intact2, "loss_first": intact1,
        "ablation_rise_second": induction.repeated_loss(model, [{"layer": last, "head": ih, "mode": "zero"}]) - intact2,
        "ablation_rise_first": induction.repeated_loss(model, [{"layer": last, "head": ih, "mode": "zero"}], half="first") - intact1,
        "mean_ablation_rise_second": induction.repeated_loss(
            model, [{"layer": last, "head": ih, "mode": "mean"}]) - intact2,
        "induction_without_layer0_head": feeder, "feeder_head": fh,
        "feeder_duplicate_score": dup[0, fh].item(), "feeder_previous_score": prev[0, fh].item(),
        "control_induction_best": ind1.max().item(), "control_loss_second": loss1,
    }
    row["checks"] = {
        "induction >= 0.3": row["induction_best"] >= 0.3,
        "previous >= 0.5": row["previous_best"] >= 0.5,
        "ablation >= 0.5 nats": row["ablation_rise_second"] >= 0.5,
        "control induction < half": row["control_induction_best"] < 0.5 * row["induction_best"],
        "control >= 0.5 nats worse": loss1 - intact2 >= 0.5,
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    load_before = os.getloadavg()
    start = time.perf_counter()
    rows = [measure(seed) for seed in args.seeds]
    total = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load_after = os.getloadavg()
    meta = {
        "settings": {k: getattr(induction, k) for k in ("SEQ_LEN", "CHUNK", "SPAN_MIN", "D_MODEL", "N_HEADS",
                                                       "BATCH_SIZE", "LR", "STEPS", "N_HELD_OUT")},
        "torch": torch.__version__, "device": str(induction.build_model().tok_emb.weight.device),
        "cpus": os.cpu_count(), "machine": platform.machine(),
        "load_average_before": load_before, "load_average_after": load_after,
        "total_seconds": total, "peak_rss_mb": peak_mb,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "induction.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    names = list(rows[0]["checks"])
    lines = [
        "# Induction heads: the figures of chapter 7 over seeds",
        "",
        "Written by `bench/bench_induction.py`. Settings: " + ", ".join(f"{k} = {v}" for k, v in meta["settings"].items())
        + f"; torch {meta['torch']} on {meta['device']} ({meta['cpus']} CPUs visible).",
        "",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; after: "
        f"{', '.join(f'{x:.2f}' for x in load_after)}. The machine is shared, so the times below are upper "
        f"bounds for a quiet 2-core CPU. Total {total:.0f} s; peak resident memory of the process "
        f"{peak_mb:.0f} MB.",
        "",
        "| seed | train 2L (s) | train 1L (s) | induction (last layer) | previous token (layer 0) | "
        "repeated-half loss | ablate induction head: rise 2nd / 1st half (nats) | mean ablation (nats) | "
        "induction score with each layer-0 head removed | head fed from: duplicate / previous-token score | "
        "1-layer induction | 1-layer repeated-half loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['seconds_2_layers']:.0f} | {r['seconds_1_layer']:.0f} | "
            f"{r['induction_best']:.3f} (head {r['induction_head']}) | {r['previous_best']:.3f} (head {r['previous_head']}) | "
            f"{r['loss_second']:.2f} | {r['ablation_rise_second']:+.2f} / {r['ablation_rise_first']:+.2f} | "
            f"{r['mean_ablation_rise_second']:+.2f} | {', '.join(f'{x:.2f}' for x in r['induction_without_layer0_head'])} | "
            f"L0 H{r['feeder_head']}: {r['feeder_duplicate_score']:.2f} / {r['feeder_previous_score']:.2f} | "
            f"{r['control_induction_best']:.3f} | {r['control_loss_second']:.2f} |")
    lines += ["", "Targets of issue 16 (pass count over the seeds):", ""]
    for name in names:
        lines.append(f"- {name}: {sum(r['checks'][name] for r in rows)} / {len(rows)}")
    (OUT / "induction.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
