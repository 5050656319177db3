"""Positions that extrapolate (chapter 12): the chapter 7 model trained with learned absolute
positions, with RoPE and with ALiBi, evaluated at and beyond its training length.

For each scheme in SCHEMES and each seed in SEEDS: train
``attnlib.transformer.TinyTransformer(positions=scheme)`` (two attention-only layers, chapter
7's width, heads and optimiser) on chapter 7's task at its length ``SEQ_LEN = 32``
(``attnlib.induction.training_batch``: stretches of CHUNK consecutive words of the speech, one
span copied to a later place), with Adam at ``LR`` and a cosine decay over ``STEPS``, exactly
as ``attnlib.induction.train``.  Then evaluate on held-out sequences of the same two
constructions at every length in EVAL_LENGTHS:

* ``repeated``: ``L/2`` distinct random words, then the same words again
  (``attnlib.induction.repeated_sequences`` at length ``L``): the next-token loss on the second
  copy (what copying predicts) and on the first (random words nothing predicts), and the best
  induction score of the last layer (mean weight from a token of the second copy on the token
  that followed its earlier occurrence, ``attnlib.induction``'s measure at length ``L``);
* ``chunked``: the training construction at length ``L`` (span lengths up to ``L/2``): the mean
  next-token loss over all positions;
* the loss at each position of the repeated sequences of the longest length (for the
  chapter's figure).

The sequences at length ``L`` are made by the functions of ``attnlib.induction`` themselves,
with its ``SEQ_LEN`` set to ``L`` while they run (:func:`length`), so that they are the same
construction.  Learned positions cannot be read past the table: the model is built with a table
of ``max(EVAL_LENGTHS)`` rows, of which training reaches only the first ``SEQ_LEN`` (the others
get no gradient and stay at their random initial values, checked and recorded); a model whose
table has ``SEQ_LEN`` rows refuses a longer input (its error is recorded).

Usage: nice -n 10 .venv/bin/python bench/bench_positions.py
Writes bench/results/positions.json and bench/results/positions.md (settings, machine, load).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnlib import induction  # noqa: E402
from attnlib.transformer import TinyTransformer  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"

SCHEMES = ("learned", "rope", "alibi")
SEEDS = (0, 1)
EVAL_LENGTHS = (32, 64, 128)
N_LAYERS = 2
N_EVAL = 256                 # held-out sequences per construction and length
EVAL_SEED = 7                # seed of the held-out sequences (never a training stream)
EARLY_STEPS = 20             # training losses recorded step by step (the test re-runs a few)


def settings() -> dict:
    """Everything that determines the runs (written to the JSON; the test compares)."""
    return {"schemes": list(SCHEMES), "seeds": list(SEEDS), "eval_lengths": list(EVAL_LENGTHS),
            "n_layers": N_LAYERS, "n_eval": N_EVAL, "eval_seed": EVAL_SEED,
            "seq_len": induction.SEQ_LEN, "chunk": induction.CHUNK, "span_min": induction.SPAN_MIN,
            "d_model": induction.D_MODEL, "n_heads": induction.N_HEADS, "batch_size": induction.BATCH_SIZE,
            "lr": induction.LR, "steps": induction.STEPS, "max_len": max(EVAL_LENGTHS),
            "vocab_size": len(induction.vocabulary())}


@contextlib.contextmanager
def length(L: int):
    """``attnlib.induction``'s sequence builders at length ``L`` (its ``SEQ_LEN`` set to ``L``
    while the block runs, then restored)."""
    saved = induction.SEQ_LEN
    induction.SEQ_LEN = L
    try:
        yield
    finally:
        induction.SEQ_LEN = saved


def build(scheme: str, seed: int) -> TinyTransformer:
    return TinyTransformer(len(induction.vocabulary()), d_model=induction.D_MODEL, n_heads=induction.N_HEADS,
                           n_layers=N_LAYERS, max_len=max(EVAL_LENGTHS), seed=seed, positions=scheme)


def next_token_loss(logits, tokens) -> torch.Tensor:
    """``(B, T-1)`` nats: position ``i`` predicts token ``i + 1``."""
    B, T, V = logits.shape
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), reduction="none").view(B, T - 1)


def train(scheme: str, seed: int, steps: int | None = None, logits_of=None):
    """The training loop of ``attnlib.induction.train`` (same batches for the same seed, Adam,
    cosine decay to 0 over ``induction.STEPS``, one thread) for a model with ``positions=scheme``;
    ``steps`` stops early (the test runs a few); ``logits_of(model, tokens)`` replaces the model's
    own forward for the loss (bench_rope_scaling trains at another RoPE base through it).
    Returns ``(model, losses, seconds)``."""
    total = induction.STEPS
    steps = total if steps is None else steps
    model = build(scheme, seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=induction.LR)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    losses, start = [], time.perf_counter()
    try:
        model.train()
        for _ in range(steps):
            tokens = induction.training_batch(induction.BATCH_SIZE, generator)     # (B, SEQ_LEN)
            logits = model(tokens)[0] if logits_of is None else logits_of(model, tokens)
            loss = next_token_loss(logits, tokens).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
        model.eval()
    return model, losses, time.perf_counter() - start


@torch.no_grad()
def evaluate(model: TinyTransformer, L: int) -> dict:
    with length(L):
        rep = induction.repeated_sequences(N_EVAL, EVAL_SEED)                        # (N, L)
        chunked = induction.training_batch(N_EVAL, torch.Generator().manual_seed(50_000 + EVAL_SEED))
    n = L // 2
    logits, weights = model(rep)
    loss = next_token_loss(logits, rep)                                            # (N, L-1)
    w = weights[-1]                                                                # (N, H, L, L)
    diag = torch.diagonal(w, offset=-(n - 1), dim1=-2, dim2=-1)[..., 1:]           # A[i, i-n+1], i = n..L-1
    induction_scores = diag.mean(dim=(0, 2))                                       # (H,)
    out = {"L": L, "repeated_second": loss[:, n:].mean().item(), "repeated_first": loss[:, :n - 1].mean().item(),
           "induction_best": induction_scores.max().item(), "induction_head": int(induction_scores.argmax()),
           "induction_uniform": induction.uniform_induction_score(L),
           "chunked": next_token_loss(model(chunked)[0], chunked).mean().item()}
    if L == max(EVAL_LENGTHS):
        out["repeated_loss_by_position"] = [round(x, 5) for x in loss.mean(0).tolist()]
    return out


def main() -> None:
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    runs = []
    for scheme in SCHEMES:
        for seed in SEEDS:
            model, losses, seconds = train(scheme, seed)
            row = {"scheme": scheme, "seed": seed, "seconds": seconds, "final_loss": losses[-1],
                   "early_losses": losses[:EARLY_STEPS], "loss_every_25": losses[24::25],
                   "eval": [evaluate(model, L) for L in EVAL_LENGTHS]}
            if scheme == "learned":   # rows past SEQ_LEN never trained: still their initial values?
                init = build(scheme, seed).pos_emb.weight.detach()
                table = model.pos_emb.weight.detach()
                row["untrained_rows_max_change"] = (table[induction.SEQ_LEN:] - init[induction.SEQ_LEN:]).abs().max().item()
                row["trained_rows_mean_change"] = (table[:induction.SEQ_LEN] - init[:induction.SEQ_LEN]).abs().mean().item()
            runs.append(row)
            print(f"{scheme:8s} seed {seed}: {seconds:.0f} s, final loss {losses[-1]:.3f}; second-copy loss at "
                  + ", ".join(f"L={e['L']}: {e['repeated_second']:.2f}" for e in row["eval"]), flush=True)
    short = TinyTransformer(len(induction.vocabulary()), max_len=induction.SEQ_LEN, seed=0)
    try:
        short(torch.zeros(1, 2 * induction.SEQ_LEN, dtype=torch.long))
        refusal = None
    except ValueError as err:
        refusal = str(err)
    result = {
        "script": "bench/bench_positions.py", "settings": settings(), "runs": runs,
        "learned_table_of_seq_len_refuses": refusal,
        "uniform_loss": math.log(len(induction.vocabulary())),   # nats of a uniform guess over the words
        **run_record(t0, load_before),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "positions.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "positions.md").write_text(markdown(result))


def run_record(t0: float, load_before) -> dict:
    """What a training benchmark records about its run (this one and bench_rope_scaling.py):
    the machine, the load average before and after, the total seconds since ``t0``
    (``time.perf_counter()``), the peak resident memory (MB) and the date."""
    return {
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "threads_for_training": 1},
        "load_before": load_before, "load_after": os.getloadavg(), "total_seconds": time.perf_counter() - t0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(r: dict) -> str:
    s = r["settings"]
    lines = ["# Positions that extrapolate: learned, RoPE, ALiBi", "",
             "Written by `bench/bench_positions.py` (read by chapter 12). Settings: "
             + ", ".join(f"{k} = {v}" for k, v in s.items()) + f". {r['machine']['platform']}, torch "
             f"{r['machine']['torch']}, {r['machine']['cpus']} CPUs visible, training on 1 thread.", "",
             f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in r['load_before'])}; after: "
             f"{', '.join(f'{x:.2f}' for x in r['load_after'])}. The machine is shared: times are upper bounds. "
             f"Total {r['total_seconds']:.0f} s; peak resident memory {r['peak_rss_mb']:.0f} MB; {r['date']}.", "",
             "Trained at length 32; losses in nats on held-out sequences. *repeated*: L/2 random words twice "
             "(loss on the second copy / the first); *induction*: best last-layer head's weight on the token after "
             "the earlier occurrence; *chunked*: the training construction at length L.", "",
             "| scheme | seed | train (s) | final train loss | "
             + " | ".join(f"L={L}: 2nd copy / 1st / induction / chunked" for L in s["eval_lengths"]) + " |",
             "|---|---|---|---|" + "---|" * len(s["eval_lengths"])]
    for row in r["runs"]:
        cells = [f"{e['repeated_second']:.2f} / {e['repeated_first']:.2f} / {e['induction_best']:.2f} / "
                 f"{e['chunked']:.2f}" for e in row["eval"]]
        lines.append(f"| {row['scheme']} | {row['seed']} | {row['seconds']:.0f} | {row['final_loss']:.3f} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Learned table: rows past 32 changed by at most "
              + ", ".join(f"{row['untrained_rows_max_change']:.1e}" for row in r["runs"] if row["scheme"] == "learned")
              + " in training (never reached); a table of 32 rows refuses length 64: "
              f"`{r['learned_table_of_seq_len_refuses']}`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
