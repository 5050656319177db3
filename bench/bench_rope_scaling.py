"""RoPE scaling (chapter 12): the RoPE model of ``bench_positions.py``, trained on 32 tokens,
evaluated at 64 and 128 tokens with position interpolation, NTK-aware scaling and YaRN, for two
rotary bases (:data:`BASES`).

Why two bases.  A head of the model has ``d_head = 16``, 8 pairs.  At the base 10000 of
``bench_positions.py``'s RoPE models only 2 of them turn a full circle within the 32 trained
tokens (:func:`turning_pairs`), so the three scalings differ mostly on pairs that training never
saw turn.  At base 100, the largest power of ten at which more than 2 pairs turn, 3 do (a Llama 2
head turns 46 of its 64 pairs within its 4096 tokens).  Base 10000 is kept as the models of the
extrapolation experiment: unscaled, they give ``positions.json``'s RoPE rows (a test checks).

For each base and each seed in ``bench_positions.SEEDS``: train ``TinyTransformer(positions="rope")``
with the training loop of ``bench_positions.train`` (the same model, batches, optimiser and
schedule) with the loss computed through :func:`forward` at that base (:func:`train`; at base
10000 it is ``bench_positions.train("rope", seed)``, which a test checks).  Then, at every length
``L`` of ``bench_positions.EVAL_LENGTHS``, evaluate it with ``bench_positions.evaluate`` (the same
held-out sequences and measures: loss on the second and first copy of the repeated sequences,
best induction score of the last layer, loss on the training construction) through
:func:`forward` with the rotations made by ``attnlib.apply_rope(..., base, scaling=...)`` for each
method of :data:`METHODS`, with the factor ``s = L / 32`` (the new length over the trained one;
``s = 1`` at 32 changes nothing).  No weight is changed: no fine-tuning, the scaling alone at
inference, as NTK-aware scaling and dynamic scaling are used (Chen et al. 2023 and Peng et al.
2023 also fine-tune; see chapter 12).

Usage: nice -n 10 .venv/bin/python bench/bench_rope_scaling.py [--models DIR]
(``--models``: keep the trained models in DIR and reuse them on the next run.)
Writes bench/results/rope_scaling.json and bench/results/rope_scaling.md (settings, machine,
load, seconds).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attnlib import induction  # noqa: E402
from attnlib.attention import scaled_dot_product_attention  # noqa: E402
from attnlib.masks import causal_mask  # noqa: E402
from attnlib.multihead import merge_heads, split_heads  # noqa: E402
from attnlib.positions import apply_rope, rope_attention_factor, rope_frequencies  # noqa: E402
from attnlib.transformer import TinyTransformer  # noqa: E402

OUT = ROOT / "bench" / "results"

_spec = importlib.util.spec_from_file_location("bench_positions", ROOT / "bench" / "bench_positions.py")
positions_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(positions_bench)

#: The methods compared; ``"none"`` is the model as trained.
METHODS = ("none", "linear", "ntk", "yarn")
#: The rotary bases of the models trained here (see the module's docstring); the first is the
#: chapter's head, the second that of ``bench_positions.py``.
BASES = (100.0, 10000.0)


def turning_pairs(d: int, L: int, base: float) -> int:
    """How many of the ``d/2`` pairs of a head turn at least one full circle over ``L`` positions
    (``L theta_m >= 2 pi``)."""
    return int((L * rope_frequencies(d, base) >= 2 * math.pi).sum())


def scaling_for(method: str, L: int) -> dict | None:
    """The ``scaling`` argument of ``attnlib.apply_rope`` for ``method`` at length ``L``:
    factor ``L / SEQ_LEN`` (YaRN also needs the trained length)."""
    if method == "none":
        return None
    spec = {"type": method, "factor": L / induction.SEQ_LEN}
    if method == "yarn":
        spec["original_length"] = induction.SEQ_LEN
    return spec


def forward(model: TinyTransformer, tokens: torch.Tensor, scaling: dict | None = None, base: float = 10000.0):
    """``model``'s forward pass (``TinyTransformer(positions="rope")``: tokens, blocks
    ``x + out_proj(attention(LN(x)))`` with q and k rotated, final LayerNorm, read-out) with its
    rotations made at ``base`` with ``scaling``; ``scaling=None`` and ``base=10000`` give
    ``model(tokens)`` (tested).

    Shapes: tokens ``(B, T)``; returns logits ``(B, T, V)`` and a list of weights
    ``(B, H, T, T)``, one per layer, as ``model(tokens)``."""
    if model.positions != "rope":
        raise ValueError(f"forward scales RoPE; the model has positions={model.positions!r}")
    T = tokens.shape[1]
    pos = torch.arange(T, device=tokens.device)
    mask = causal_mask(T, device=tokens.device)                               # (T, T)
    x = model.tok_emb(tokens)                                                 # (B, T, d_model)
    weights = []
    for block in model.blocks:
        attn, h = block.attn, block.ln_attn(x)
        q = split_heads(attn.q_proj(h), attn.n_heads)                         # (B, H, T, d_head)
        k = split_heads(attn.k_proj(h), attn.n_heads)
        v = split_heads(attn.v_proj(h), attn.n_heads)
        q, k = apply_rope(q, pos, base, scaling=scaling), apply_rope(k, pos, base, scaling=scaling)
        heads, w = scaled_dot_product_attention(q, k, v, mask)                # (B, H, T, d_head), (B, H, T, T)
        x = x + attn.out_proj(merge_heads(heads))
        weights.append(w)
    return model.unembed(model.ln_out(x)), weights


def settings() -> dict:
    s = positions_bench.settings()
    return {"methods": list(METHODS), "seeds": s["seeds"], "eval_lengths": s["eval_lengths"],
            "seq_len": s["seq_len"], "n_eval": s["n_eval"], "eval_seed": s["eval_seed"], "steps": s["steps"],
            "d_head": s["d_model"] // s["n_heads"], "bases": list(BASES), "fine_tuning_steps": 0}


def train(seed: int, base: float, steps: int | None = None):
    """``bench_positions.train("rope", seed)`` (the same model built, the same batches, Adam,
    cosine decay over ``induction.STEPS``, one thread) with the loss computed through
    :func:`forward` at ``base``; at base 10000 it is that function (tested).  ``steps`` stops
    early (the test runs a few).  Returns ``(model, losses, seconds)``."""
    return positions_bench.train("rope", seed, steps, logits_of=lambda model, tokens: forward(model, tokens, None, base)[0])


def trained(seed: int, base: float, models: Path | None):
    """:func:`train`'s model for ``seed`` and ``base``, from ``models`` when kept there;
    ``(model, seconds, final loss)``, the last two ``None`` for a kept model."""
    path = None if models is None else models / f"rope_base{base:g}_seed{seed}.pt"
    if path is not None and path.exists():
        return TinyTransformer.load(path), None, None
    model, losses, seconds = train(seed, base)
    if path is not None:
        models.mkdir(parents=True, exist_ok=True)
        model.save(path)
    return model, seconds, losses[-1]


def frequencies(base: float) -> dict:
    """Each method's frequencies at ``base`` and every length (the chapter draws them), and
    YaRN's factor."""
    d = settings()["d_head"]
    return {str(L): {m: {"theta": rope_frequencies(d, base, scaling=scaling_for(m, L)).tolist(),
                         "attention_factor": rope_attention_factor(scaling_for(m, L))} for m in METHODS}
            for L in positions_bench.EVAL_LENGTHS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    runs = []
    for base in BASES:
        for seed in positions_bench.SEEDS:
            model, seconds, final_loss = trained(seed, base, args.models)
            for method in METHODS:
                start = time.perf_counter()
                evals = [positions_bench.evaluate(lambda tokens: forward(model, tokens, scaling_for(method, L), base), L)
                         for L in positions_bench.EVAL_LENGTHS]
                runs.append({"base": base, "seed": seed, "method": method, "train_seconds": seconds,
                             "final_train_loss": final_loss, "eval_seconds": time.perf_counter() - start, "eval": evals})
                print(f"base {base:g} seed {seed} {method:6s}: second-copy loss "
                      + ", ".join(f"L={e['L']}: {e['repeated_second']:.2f}" for e in evals)
                      + "; induction " + ", ".join(f"{e['induction_best']:.3f}" for e in evals), flush=True)
    result = {
        "script": "bench/bench_rope_scaling.py", "settings": settings(), "runs": runs,
        "frequencies": {f"{base:g}": frequencies(base) for base in BASES},
        "turning_pairs": {f"{base:g}": turning_pairs(settings()["d_head"], induction.SEQ_LEN, base) for base in BASES},
        **positions_bench.run_record(t0, load_before),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "rope_scaling.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "rope_scaling.md").write_text(markdown(result))


def markdown(r: dict) -> str:
    s = r["settings"]
    lines = ["# RoPE scaling past the training length: position interpolation, NTK-aware, YaRN", "",
             "Written by `bench/bench_rope_scaling.py` (read by chapter 12). Settings: "
             + ", ".join(f"{k} = {v}" for k, v in s.items()) + f". {r['machine']['platform']}, torch "
             f"{r['machine']['torch']}, {r['machine']['cpus']} CPUs visible.", "",
             f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in r['load_before'])}; after: "
             f"{', '.join(f'{x:.2f}' for x in r['load_after'])}. Total {r['total_seconds']:.0f} s; "
             f"peak resident memory {r['peak_rss_mb']:.0f} MB; {r['date']}.", "",
             "The RoPE model of bench_positions.py trained at length 32 with each rotary base ("
             + "; ".join(f"base {b}: {n} of {s['d_head'] // 2} pairs turn within 32 tokens"
                         for b, n in r["turning_pairs"].items())
             + "), no fine-tuning; factor s = L / 32. "
             "Losses in nats on held-out sequences; *2nd / 1st*: the repeated sequences' second and first copy; "
             "*induction*: the best last-layer head's weight on the token to copy; *chunked*: the training "
             "construction at length L.", "",
             "| base | seed | method | " + " | ".join(f"L={L}: 2nd / 1st / induction / chunked" for L in s["eval_lengths"]) + " |",
             "|---|---|---|" + "---|" * len(s["eval_lengths"])]
    for row in r["runs"]:
        cells = [f"{e['repeated_second']:.2f} / {e['repeated_first']:.2f} / {e['induction_best']:.3f} / "
                 f"{e['chunked']:.2f}" for e in row["eval"]]
        lines.append(f"| {row['base']:g} | {row['seed']} | {row['method']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
