"""Exercises of chapter 10, "A real language model" (SmolLM2-135M, :mod:`attnlib.language_model`).

* ``late_stream``: predict, before running it, what patching the clean residual stream at the
  subject's second mention (S2), entering a late layer, restores on a held-out IOI pair.
* ``normalised``: the normalised denoising score of one head from three logit differences.
* ``role``: which of Wang et al.'s roles one head's attention pattern fits (and what a pattern
  alone does not show).
* ``own_pair``: the reader's own IOI pair, graded on what the model does with it: every head
  denoised (:func:`attnlib.language_model.pair_reading` in the kernel, ``window.attnlibLM`` on the
  page).

The first three read ``ioi_data()``, which runs the language model (kernel only); the page
receives it as JSON computed when the book is built.
"""
from __future__ import annotations

import functools
import html

from .core import checker, grade_choice, grade_number, right, wrong
from .registry import define

__all__ = ["LATE_LAYER", "NORMALISED_HEAD", "ROLE_HEAD", "ioi_data", "LATE_OPTIONS", "check_late_stream", "OWN_THRESHOLD", "check_own_pair",
           "check_normalised", "ROLE_OPTIONS", "check_role"]

#: The layer whose incoming stream is patched at S2 in ``late_stream`` (after both moves the
#: chapter finds, made by layers 19, 20 and 23 on its first pair).
LATE_LAYER = 26
#: The head of ``normalised`` and the head of ``role`` (layer, head).
NORMALISED_HEAD = (20, 0)
ROLE_HEAD = (23, 3)


@functools.cache
def ioi_data() -> dict:
    """What the three exercises read, computed with the language model on the first held-out
    pair (``language_model.ioi_sets()["held_out"][0]``, template B) and, for ``role``, the
    found set: the two metrics (``logit(IO) - logit(S)``, nats), the metric with the clean
    stream patched at S2 entering :data:`LATE_LAYER`, the metric with head
    :data:`NORMALISED_HEAD` patched (denoising), and head :data:`ROLE_HEAD`'s mean attention
    weights over the four found pairs from END to IO, S1 and S2 and from S2 to S1 and to the
    token after S1.  Runs the model once (kernel only; cached: the three
    exercises read the same dict, which the registry passes through JSON)."""
    import torch

    from attnlib import language_model as lm

    model = lm.load()
    sets = lm.ioi_sets()
    pair = sets["held_out"][0]
    a, b = lm.encode(pair["clean"]), lm.encode(pair["corrupted"])
    good, bad = (lm.answer_token(x) for x in pair["answers"])
    clean, corrupted = lm.run(model, a), lm.run(model, b)
    where = lm.name_positions(a.tolist(), pair)
    layer, head = NORMALISED_HEAD
    edits = [[{"layer": LATE_LAYER, "head": None, "mode": "patch", "source": clean, "position": where["S2"]}],
             [{"layer": layer, "head": head, "mode": "patch", "source": clean}]]
    last = lm.run_variants(model, b, edits, last=True)
    metric = lambda logits: float(logits[good] - logits[bad])  # noqa: E731
    weights = {"END_IO": [], "END_S1": [], "END_S2": [], "S2_S1": [], "S2_after_S1": []}
    for p in sets["found"]:
        r = lm.run(model, lm.encode(p["clean"]))
        w, pos = r.pattern[ROLE_HEAD[0]][0, ROLE_HEAD[1]], lm.name_positions(r.tokens[0].tolist(), p)
        for key, (q, k) in {"END_IO": ("END", "IO"), "END_S1": ("END", "S1"), "END_S2": ("END", "S2"),
                            "S2_S1": ("S2", "S1")}.items():
            weights[key].append(float(w[pos[q], pos[k]]))
        weights["S2_after_S1"].append(float(w[pos["S2"], pos["S1"] + 1]))
    return {"clean_prompt": pair["clean"], "corrupted_prompt": pair["corrupted"], "io": pair["io"], "s": pair["s"],
            "clean": metric(clean.logits[0, -1]), "corrupted": metric(corrupted.logits[0, -1]),
            "late": metric(last[0]), "late_layer": LATE_LAYER, "head": list(NORMALISED_HEAD),
            "patched": metric(last[1]), "role_head": list(ROLE_HEAD),
            "weights": {k: float(torch.tensor(v).mean()) for k, v in weights.items()}}


def _score(data: dict, key: str) -> float:
    return (data[key] - data["corrupted"]) / (data["clean"] - data["corrupted"])


# ----------------------------------------------------------------------------- late_stream
LATE_OPTIONS = ("Close to 1: most of the clean behaviour comes back",
                "About half of it",
                "Close to 0: almost nothing comes back",
                "Below 0: the prediction moves further from the clean one")


@checker
def check_late_stream(answer, data):
    """Grade the prediction: the option whose range holds the measured normalised score
    (at least 0.75; 0.25 to 0.75; -0.25 to 0.25; below -0.25)."""
    score = _score(data, "late")
    correct = LATE_OPTIONS[0 if score >= 0.75 else 1 if score >= 0.25 else 2 if score >= -0.25 else 3]
    measured = (f"Measured: the corrupted run gives {data['corrupted']:.2f} nats, the clean {data['clean']:.2f}; with "
                f"the clean stream at S2 entering layer {data['late_layer']} it gives {data['late']:.2f}, a "
                f"normalised score of {score:.2f}.")
    why = (f"By layer {data['late_layer']} the heads that read S2 from the last position (layers 19 to 23 on "
           "the chapter's pair) have already run: what S2 holds has been copied to the end, and a clean S2 this late "
           "reaches the prediction only through the few layers left.")
    feedback = {o: why for o in LATE_OPTIONS}
    feedback[LATE_OPTIONS[0]] = ("That is what the same patch does early enough (before layer 19 on the chapter's pair): S2 is then the only place "
                                 "that holds the difference. " + why)
    return grade_choice(answer, LATE_OPTIONS, correct, why, feedback, measured=measured,
                        hint="Look at the residual-stream figure of the chapter: in which layers does the "
                             "difference leave S2?")


def _late_question(d: dict) -> str:
    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    return (f"A held-out pair, another template: the clean prompt <i>{e(d['clean_prompt'])}</i> and the corrupted "
            f"<i>{e(d['corrupted_prompt'])}</i>. <b>Before running it</b>, predict: patch the clean residual "
            f"stream at the subject's second mention (S2, <i>{e(d['s'])}</i>), entering layer "
            f"{e(d['late_layer'])}, into the corrupted run. What normalised score does the logit difference "
            f"{e(d['io'])} &minus; {e(d['s'])} get?")


define(10, "late_stream", kind="choice", title="Predict a patch, then run it", question=_late_question,
       data=ioi_data, options=LATE_OPTIONS, grade=check_late_stream)


# ----------------------------------------------------------------------------- normalised
@checker
def check_normalised(answer, data):
    """Grade the normalised denoising score ``(patched - corrupted) / (clean - corrupted)``."""
    c, x, p = data["clean"], data["corrupted"], data["patched"]
    target = _score(data, "patched")
    return grade_number(
        answer, target,
        f"({p:.2f} - ({x:.2f})) / ({c:.2f} - ({x:.2f})) = {target:.2f}: the share of the way from the corrupted "
        "metric back to the clean one that this one head's clean output covers.",
        what="a normalised score", abs_tol=0.01,
        mistakes=[
            (1 - target, "That is 1 minus the score: the share still missing. Measure from the corrupted metric "
                         "(0) towards the clean one (1)."),
            (p / c, "That divides by the clean metric alone; the scale runs from the corrupted metric to the clean "
                    "one, so subtract the corrupted metric from both."),
            ((p - x), "That is the change in nats; divide by the gap between the clean and corrupted metrics."),
        ],
        otherwise=lambda v: f"{v:g} is not it. Where does the patched metric sit between the corrupted one (0) "
                            "and the clean one (1)?",
        hint="normalised = (patched - corrupted) / (clean - corrupted).")


def _normalised_question(d: dict) -> str:
    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    num = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else e(v)  # noqa: E731
    return (f"On the pair <i>{e(d['clean_prompt'])}</i> / <i>{e(d['corrupted_prompt'])}</i> the logit difference "
            f"{e(d['io'])} &minus; {e(d['s'])} is {num(d['clean'])} nats on the clean prompt and "
            f"{num(d['corrupted'])} on the corrupted one. Run the corrupted prompt with head "
            f"{e(d['head'][0])}.{e(d['head'][1])}'s clean output (denoising): it gives {num(d['patched'])}. "
            "What is the head's normalised denoising score?")


define(10, "normalised", kind="number", precision="Give it to 2 decimal places (graded within 0.01).",
       title="A normalised score", question=_normalised_question, data=ioi_data, grade=check_normalised,
       label="Score", placeholder="e.g. 0.25")


# ----------------------------------------------------------------------------- role
ROLE_OPTIONS = ("A name mover's: from the end to the indirect object (IO)",
                "An S-inhibition head's: from the end to the subject's second mention (S2)",
                "A duplicate-token head's: from S2 to the subject's first mention (S1)",
                "An induction head's: from S2 to the token after S1")
_ROLE_KEYS = ("END_IO", "END_S2", "S2_S1", "S2_after_S1")


@checker
def check_role(answer, data):
    """Grade the role whose attention pattern the head's weights fit best (the largest of the
    four mean weights), and say what the pattern does not show."""
    w = data["weights"]
    best = max(range(4), key=lambda i: w[_ROLE_KEYS[i]])
    caveat = ("A pattern is a hypothesis about a role, not the role: Wang et al. call a head S-inhibition because "
              "patching it changes where the name movers look. This chapter measured where it looks and what "
              "patching its output restores, not that.")
    measured = ("Its mean weights over the four found prompts: end to IO {END_IO:.2f}, end to S1 {END_S1:.2f}, end to "
                "S2 {END_S2:.2f}; S2 to S1 {S2_S1:.2f}, S2 to the token after S1 {S2_after_S1:.2f}.").format(**w)
    feedback = {o: f"The weights say otherwise: {ROLE_OPTIONS[best].split(': ')[1]} is where most of its weight "
                   "goes. " + caveat for o in ROLE_OPTIONS}
    return grade_choice(answer, ROLE_OPTIONS, ROLE_OPTIONS[best], "Yes, by its weights. " + caveat, feedback,
                        measured=measured, hint="Compare the five weights: which pair of positions gets the most?")


def _role_question(d: dict) -> str:
    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    w = d["weights"]
    num = lambda k: f"{w[k]:.2f}" if isinstance(w.get(k), (int, float)) else e(w.get(k))  # noqa: E731
    return (f"Head {e(d['role_head'][0])}.{e(d['role_head'][1])}, on the four found IOI prompts (mean attention "
            f"weights): from the last position (END) to IO {num('END_IO')}, to S1 {num('END_S1')}, to S2 "
            f"{num('END_S2')}; from S2 to S1 {num('S2_S1')}, to the token after S1 {num('S2_after_S1')}. Which "
            "of Wang et al.'s roles has this attention pattern?")


define(10, "role", kind="choice", title="Which role's pattern?", question=_role_question, data=ioi_data,
       options=ROLE_OPTIONS, grade=check_role)


# ----------------------------------------------------------------------------- own_pair
#: The normalised denoising score one head must reach on the reader's own pair.
OWN_THRESHOLD = 0.3


@checker
def check_own_pair(answer, data=None):
    """Grade the reader's clean/corrupted pair (the model's reading,
    :func:`attnlib.language_model.pair_reading`): the model must prefer the indirect object on
    the clean prompt (metric above 0), the corruption must lower the metric, by at least the
    course's minimum gap, and one head's denoising must restore at least
    :data:`OWN_THRESHOLD` of it."""
    if not isinstance(answer, dict) or not isinstance(answer.get("texts"), list) or len(answer["texts"]) != 2:
        return wrong("Write a clean prompt and a corrupted one.")
    texts = answer["texts"]
    if any(not isinstance(t, str) or not t.strip() for t in texts):
        return wrong("Write both prompts: the clean one, and the same prompt with one name changed.",
                     hint="Copy the clean prompt and change the second mention of the subject to the other name.")
    if "error" in answer:
        return wrong(f"The model could not patch this pair: {answer['error']}.",
                     hint="The prompts must have the same tokens except one: change one name for another name "
                          "that is also one token (with its leading space, as \u201c Mary\u201d).")
    sweep = answer.get("sweep")
    if not isinstance(sweep, dict):
        return wrong("Your pair could not be read; check it again.")
    io, s = sweep["answers"]
    c, x = sweep["clean"], sweep["corrupted"]
    if not c > 0:
        return wrong(f"On your clean prompt the model prefers \u201c{s}\u201d to \u201c{io}\u201d (logit difference "
                     f"{c:.2f} nats): it is not predicting the indirect object here, so there is no behaviour to trace.",
                     hint="End the clean prompt where the indirect object is the natural next word, as in "
                          "\u201c..., John gave a drink to\u201d.")
    if not x < c:
        return wrong(f"Your corruption does not lower the logit difference (clean {c:.2f}, corrupted {x:.2f} nats): "
                     f"on the corrupted prompt \u201c{s}\u201d should become the answer, so the difference should fall, "
                     "usually below 0.",
                     hint="Change the second mention of the subject (S2) to the indirect object's name.")
    if sweep.get("problem") or sweep.get("denoise") is None:
        return wrong(f"The corruption barely moves the model (clean {c:.2f}, corrupted {x:.2f} nats): "
                     f"{sweep.get('problem') or 'no normalised score'}.",
                     hint="Change the second mention of the subject (S2) to the indirect object's name.")
    table = sweep["denoise"]
    best = max(((v, l, h) for l, row in enumerate(table) for h, v in enumerate(row)), key=lambda t: t[0])
    tops = sorted(((v, l, h) for l, row in enumerate(table) for h, v in enumerate(row)), reverse=True)[:3]
    listing = ", ".join(f"{l}.{h} ({v:.2f})" for v, l, h in tops)
    metrics = f"Clean {c:.2f}, corrupted {x:.2f} nats; largest denoising scores: {listing}."
    if best[0] >= OWN_THRESHOLD:
        return right(f"{metrics} Head {best[1]}.{best[2]} alone restores {best[0]:.2f} of the gap on your pair. "
                     "Is it one of the heads the chapter found? Read where it attends from the last token in the lab.")
    return wrong(f"{metrics} No head restores {OWN_THRESHOLD} of the gap alone on this pair: the work is spread "
                 "over several heads, or the corruption is not the one the chapter studies.",
                 hint="Keep the chapter's shape: two names, then the subject named again, then a verb whose "
                      "object is the other name; change only the second mention of the subject.")


define(10, "own_pair", kind="sentence", model="lm", n_texts=2, title="Your own IOI pair",
       question=("Write an indirect-object prompt of your own (two names, then the subject named again, ending "
                 "where the other name should come) and its corrupted copy, with the second mention of the "
                 f"subject changed to the other name. Find a pair on which one head restores at least "
                 f"{OWN_THRESHOLD} of the gap alone (denoising)."),
       grade=check_own_pair)
