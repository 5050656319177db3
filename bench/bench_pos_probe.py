"""The part-of-speech probe of chapter 2 at every layer of the encoder.

For each layer and head: the held-out accuracy of a linear probe (multinomial logistic
regression, 4 folds by sentence, attnlib.evidence.probe_accuracy) reading the hand-assigned
tags of attnlib.evidence.TAGGED_SENTENCES from the head's queries and from its keys, against
two controls, a random d_k-dimensional projection of the same layer's input and the queries
with shuffled tags, and the majority-tag rate (attnlib.evidence.pos_probe).  The chapter runs
one layer live; this table shows the others.

Usage: .venv/bin/python bench/bench_pos_probe.py
Writes bench/results/pos_probe.json and bench/results/pos_probe.md.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnlib import encoder, evidence  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
SETTINGS = {"seed": 0, "n_folds": 4, "steps": 100, "lr": 0.1, "weight_decay": 1e-3}


def main() -> None:
    torch.set_num_threads(1)
    model, tokenizer = encoder.load_encoder(device="cpu")
    start = time.perf_counter()
    data = evidence.tagged_features(model=model, tokenizer=tokenizer)
    layers = list(range(model.config.num_hidden_layers))
    result = evidence.pos_probe(data, layers, **SETTINGS)
    seconds = time.perf_counter() - start
    per_layer = {name: [{"mean": float(row.mean()), "min": float(row.min()), "max": float(row.max())}
                        for row in result[name]] for name in ("q", "k", "random", "shuffled")}
    record = {"settings": SETTINGS, "n_words": len(data["words"]), "n_sentences": len(evidence.TAGGED_SENTENCES),
              "tags": data["tags"], "majority": result["majority"], "layers": layers, "per_layer": per_layer,
              "per_head": {name: result[name].tolist() for name in ("q", "k", "random", "shuffled")},
              "seconds": round(seconds, 1), "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                                        "torch": torch.__version__, "load": os.getloadavg()[0]}}
    OUT.mkdir(exist_ok=True)
    (OUT / "pos_probe.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["# Part-of-speech probe of queries and keys, every layer", "",
             f"{record['n_words']} words of {record['n_sentences']} hand-tagged sentences, {len(data['tags'])} tags; "
             f"majority tag {result['majority']:.3f}; settings {SETTINGS}; {seconds:.0f} s on {platform.platform()}.", "",
             "| layer | q mean (min-max) | k mean (min-max) | random view mean | shuffled tags mean |", "|---|---|---|---|---|"]
    for l in layers:
        c = {n: per_layer[n][l] for n in per_layer}
        lines.append(f"| {l} | {c['q']['mean']:.3f} ({c['q']['min']:.2f}-{c['q']['max']:.2f}) | "
                     f"{c['k']['mean']:.3f} ({c['k']['min']:.2f}-{c['k']['max']:.2f}) | {c['random']['mean']:.3f} | "
                     f"{c['shuffled']['mean']:.3f} |")
    (OUT / "pos_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
