"""What the course's method finds in the language model (attnlib.language_model), recorded before
any of it is written in a chapter: each reading is made on one set of inputs and checked on a
held-out set (other seeds; other names and another template).

1. **Induction** on repeated random tokens (``repeated_random_tokens``, 8 sequences of 2 x 25
   tokens): the loss on each copy, every head's induction, previous-token and first-token
   (sink) scores against their uniform baselines (``head_scores``), on seed 0 (found) and
   seed 1 (held out).  The pre-specified criterion for an induction head: a score above 0.4
   (over 5 times the uniform baseline) on both seeds.  Then the causal test: the loss on the
   second copy with the heads that meet it zeroed, against zeroing as many other heads of the
   same layers chosen at random (5 draws: the reference scale).
2. **Indirect-object identification** (Wang et al. 2023) by activation patching
   (``patch_sweep``): clean prompts ``... {S} gave a {thing} to`` whose answer is the other
   name {IO}, corrupted by changing the subject {S} to {IO} (one token), metric
   ``logit(IO) - logit(S)``.  Every head denoised and noised, the normalised scores averaged
   over the found set (4 name pairs, template A) and, separately, the held-out set (4 new name
   pairs, template B).  Recorded: the heads with the largest mean denoising score on the found
   set, their scores on the held-out set, and the rank correlation of all 270 heads' scores
   between the sets; where the top head's last position attends (IO, S1, S2).

Usage:  .venv/bin/python bench/bench_lm_heads.py
Writes: bench/results/lm_heads.md and lm_heads.json
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from attnlib import language_model as lm  # noqa: E402

HALF, N_SEQ, THRESHOLD = 25, 8, 0.4
TEMPLATES = lm.IOI_TEMPLATES


def rank_correlation(a, b) -> float:
    ra, rb = a.flatten().argsort().argsort().double(), b.flatten().argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def main() -> int:
    torch.manual_seed(0)
    load_before, t0 = os.getloadavg(), time.perf_counter()
    model = lm.load()
    result = {"script": "bench/bench_lm_heads.py", "settings": {"half": HALF, "sequences": N_SEQ, "threshold": THRESHOLD,
                                                                "templates": TEMPLATES}}
    # 1. induction
    scores, losses = {}, {}
    for seed in (0, 1):
        tokens = lm.repeated_random_tokens(N_SEQ, HALF, seed)
        r = lm.run(model, tokens)
        loss = torch.nn.functional.cross_entropy(r.logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(),
                                                 reduction="none").view(N_SEQ, -1)
        losses[seed] = {"first_copy": float(loss[:, :HALF - 1].mean()), "second_copy": float(loss[:, HALF:].mean())}
        scores[seed] = lm.head_scores(r.pattern)
    both = (scores[0]["induction"] > THRESHOLD) & (scores[1]["induction"] > THRESHOLD)
    heads = [(int(l), int(h)) for l, h in both.nonzero()]
    tokens = lm.repeated_random_tokens(N_SEQ, HALF, 2)                    # a third seed for the ablation

    def second_copy_loss(edits):
        logits = lm.run(model, tokens, edits=edits).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
        return float(loss.view(N_SEQ, -1)[:, HALF:].mean())

    intact = second_copy_loss([])
    ablated = second_copy_loss([{"layer": l, "head": h, "mode": "zero"} for l, h in heads])
    g = torch.Generator().manual_seed(3)
    layers = sorted({l for l, _ in heads})
    others = [(l, h) for l in layers for h in range(9) if (l, h) not in heads]
    controls = []
    for _ in range(5):
        pick = [others[int(i)] for i in torch.randperm(len(others), generator=g)[:len(heads)]]
        controls.append(second_copy_loss([{"layer": l, "head": h, "mode": "zero"} for l, h in pick]))
    top = lambda t, k=8: [(int(i) // 9, int(i) % 9, round(float(t.flatten()[i]), 3)) for i in t.flatten().argsort(descending=True)[:k]]  # noqa: E731
    result["induction"] = {
        "loss": losses, "heads_meeting_criterion": heads,
        "top_induction": {s: top(scores[s]["induction"]) for s in (0, 1)},
        "top_previous": {s: top(scores[s]["previous"], 6) for s in (0, 1)},
        "uniform": {k: scores[0][k] for k in ("uniform_induction", "uniform_previous", "uniform_first")},
        "first_token_weight_median": {s: float(scores[s]["first"].median()) for s in (0, 1)},
        "heads_with_first_token_weight_over_half": {s: int((scores[s]["first"] > 0.5).sum()) for s in (0, 1)},
        "ablation": {"seed": 2, "intact": intact, "criterion_heads_zeroed": ablated, "random_same_layers": controls}}
    # 2. IOI
    sweeps = {}
    for name, prompts in lm.ioi_sets().items():
        den, noi, metrics = [], [], []
        for p in prompts:
            sweep = lm.patch_sweep(model, p["clean"], p["corrupted"], p["answers"], layers=range(30))
            metrics.append((sweep["clean"], sweep["corrupted"]))
            den.append(sweep["normalised"]["denoise"]["heads"])
            noi.append(sweep["normalised"]["noise"]["heads"])
        sweeps[name] = {"denoise": torch.stack(den).mean(0), "noise": torch.stack(noi).mean(0), "metrics": metrics}
    found_top = top(sweeps["found"]["denoise"], 6)
    first = found_top[0][:2]
    p = lm.ioi_sets()["held_out"][0]
    r = lm.run(model, lm.encode(p["clean"]))
    toks = [lm.tokenizer().token(i) for i in r.tokens[0].tolist()]
    where = lm.name_positions(toks, p)
    io, s1, s2 = where["IO"], where["S1"], where["S2"]
    w = r.pattern[first[0]][0, first[1], -1]
    result["ioi"] = {
        "metrics": {k: v["metrics"] for k, v in sweeps.items()},
        "found_top_denoise": found_top,
        "held_out_scores_of_found_top": [(l, h, round(float(sweeps["held_out"]["denoise"][l, h]), 3),
                                          round(float(sweeps["held_out"]["noise"][l, h]), 3)) for l, h, _ in found_top],
        "held_out_top_denoise": top(sweeps["held_out"]["denoise"], 6),
        "found_top_noise": top(sweeps["found"]["noise"], 6),
        "rank_correlation_denoise": rank_correlation(sweeps["found"]["denoise"], sweeps["held_out"]["denoise"]),
        "top_head_last_position_weights": {"head": first, "prompt": p["clean"], "IO": float(w[io]), "S1": float(w[s1]),
                                           "S2": float(w[s2]), "first_token": float(w[0])}}
    result.update(machine={"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__},
                  load_before=load_before, load_after=os.getloadavg(), seconds=time.perf_counter() - t0,
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    OUT.mkdir(exist_ok=True)
    (OUT / "lm_heads.json").write_text(json.dumps(result, indent=1) + "\n")
    i, o = result["induction"], result["ioi"]
    lines = ["# What the method finds in SmolLM2-135M (Q4_1): induction heads and IOI", "",
             f"Written by `bench/bench_lm_heads.py` on {result['date']}, {result['machine']['platform']}, "
             f"{result['machine']['cpus']} CPUs, torch {result['machine']['torch']}; {result['seconds']:.0f} s; load average "
             f"before {', '.join(f'{x:.1f}' for x in load_before)}, after {', '.join(f'{x:.1f}' for x in result['load_after'])}.", "",
             "## Induction (repeated random tokens, 8 x (25 + 25))", "",
             f"* loss, first copy / second copy: seed 0 {i['loss'][0]['first_copy']:.2f} / {i['loss'][0]['second_copy']:.2f} nats; "
             f"seed 1 (held out) {i['loss'][1]['first_copy']:.2f} / {i['loss'][1]['second_copy']:.2f} nats",
             f"* induction score, top heads (layer, head, score): seed 0 {i['top_induction'][0]}; seed 1 {i['top_induction'][1]}; "
             f"uniform baseline {i['uniform']['uniform_induction']:.3f}",
             f"* heads above {THRESHOLD} on both seeds (the pre-specified criterion): {i['heads_meeting_criterion']}",
             f"* previous-token score, top heads: seed 0 {i['top_previous'][0]}; seed 1 {i['top_previous'][1]}",
             f"* first-token (sink) weight: median over the 270 heads {i['first_token_weight_median'][0]:.2f} (seed 0), "
             f"{i['first_token_weight_median'][1]:.2f} (seed 1); heads above 0.5: {i['heads_with_first_token_weight_over_half'][0]} "
             f"and {i['heads_with_first_token_weight_over_half'][1]} of 270; uniform baseline {i['uniform']['uniform_first']:.3f}",
             f"* ablation on seed 2: second-copy loss intact {i['ablation']['intact']:.2f} nats; with the criterion's "
             f"{len(i['heads_meeting_criterion'])} heads zeroed {i['ablation']['criterion_heads_zeroed']:.2f}; with as many "
             f"other heads of the same layers zeroed (5 draws): {', '.join(f'{x:.2f}' for x in i['ablation']['random_same_layers'])}", "",
             "## Indirect-object identification (activation patching, every head)", "",
             f"* metric logit(IO) - logit(S), clean / corrupted, found set (template A): "
             f"{', '.join(f'{c:.2f} / {x:.2f}' for c, x in o['metrics']['found'])}; held-out set (template B): "
             f"{', '.join(f'{c:.2f} / {x:.2f}' for c, x in o['metrics']['held_out'])}",
             f"* found set, top mean denoising scores (layer, head, score): {o['found_top_denoise']}",
             f"* the same heads on the held-out set (layer, head, denoising, noising): {o['held_out_scores_of_found_top']}",
             f"* held-out set, top mean denoising scores: {o['held_out_top_denoise']}",
             f"* found set, top mean noising scores (the clean behaviour kept with the head corrupted): {o['found_top_noise']}",
             f"* rank correlation of the 270 heads' denoising scores between the sets: {o['rank_correlation_denoise']:.2f}",
             f"* head {tuple(o['top_head_last_position_weights']['head'])} at the last position of \"{o['top_head_last_position_weights']['prompt']}\": "
             f"weight on IO {o['top_head_last_position_weights']['IO']:.2f}, S1 {o['top_head_last_position_weights']['S1']:.2f}, "
             f"S2 {o['top_head_last_position_weights']['S2']:.2f}, first token {o['top_head_last_position_weights']['first_token']:.2f}"]
    (OUT / "lm_heads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
