"""Exercises of chapter 7, "Heads that learn a circuit".

* ``induction_head``: pick the induction head of the chapter's trained model from its
  patterns (the explorable of the chapter shows every head on a repeated sequence).
* ``circuit_loss``: predict, then check, the loss on the repeated half when both heads of the
  induction circuit (the layer-0 head that feeds the induction head, found by ablation, and
  the induction head) are removed at once.
* ``one_layer_halves``: predict, then check, whether the one-layer control does better on the
  second copy of a repeated sequence than on the first, although it has no induction head.
* ``patching_table``: read the previous-token head's row of the activation-patching tables
  (denoising and noising scores): sufficient, necessary, both or neither (:func:`patching_data`).
* ``predict_patch``: predict, before running it, the noising score of the residual stream
  entering the last layer at the corrupted token's position (Hase & Bansal 2020: an
  explanation is understood when it lets its reader predict the model).
* ``copy_wrong`` and ``feeder_matters``: graded on the reader's own word sequence, read by the
  model of the circuit lab (:func:`lab_data`): a repeat on which the induction head hurts, and
  one on which the previous-token head matters more than the induction head.

The numbers come from the chapter's training runs (:func:`attnlib.induction.trained`, reused
from the chapter's kernel, so nothing is trained twice), rounded as the page shows them.
"""
from __future__ import annotations

import functools
import math

from .core import WORD_SHOWN, checker, grade_choice, grade_number, parse_token, right, unknown_word, wrong
from .registry import define

__all__ = [
    "induction_data", "INDUCTION_THRESHOLD", "check_induction_head", "circuit_reading", "check_circuit_loss",
    "HALVES_OPTIONS", "halves_answer", "check_one_layer_halves",
    "patching_data", "HALF", "TABLE_OPTIONS", "table_reading", "check_patching_table",
    "PATCH_OPTIONS", "patch_band", "check_predict_patch",
    "MIN_COPYABLE", "unknown_word", "lab_data", "copy_kinds", "check_copy_wrong", "check_feeder_matters",
]


def _r(x, digits: int = 3) -> float:
    return round(float(x), digits)


@functools.lru_cache(maxsize=1)
def _heads() -> dict:
    """The trained two-layer model's heads as the exercises name them, read once per process and
    shared by :func:`induction_data` and :func:`patching_data`: ``labels``, ``induction`` and
    ``previous`` (``(L, H)`` scores), ``ind_layer`` and ``ind_head`` (the best induction head of
    the last layer), ``prev_head`` (the best previous-token head of layer 0) and ``intact`` (the
    second-copy loss, nats, unrounded)."""
    from .. import induction

    model, _ = induction.trained(2, 0)
    ind = induction.induction_scores(model)
    prev = induction.previous_token_scores(model)
    L, H = ind.shape
    return {"labels": [f"L{layer} H{head}" for layer in range(L) for head in range(H)],
            "induction": ind, "previous": prev, "ind_layer": L - 1, "ind_head": int(ind[-1].argmax()),
            "prev_head": int(prev[0].argmax()), "intact": induction.repeated_loss(model)}


@functools.lru_cache(maxsize=1)
def induction_data() -> dict:
    """The trained models' numbers the three induction exercises grade against.

    Returns a dict with ``labels`` (``"L0 H0"`` ... one per head), ``induction``,
    ``previous`` and ``duplicate`` (one score per head, in the order of ``labels``),
    ``ind_head``, ``prev_head`` and ``dup_head`` (indices into ``labels``: the best induction
    head of the last layer, the best previous-token and duplicate-token heads of layer 0),
    ``feeder`` (the layer-0 head whose removal lowers the induction head's score most),
    ``uniform`` (the uniform induction score), ``intact`` (second-copy loss, nats),
    ``without_ind`` (with the induction head removed), ``without_feeder`` (with the feeder
    removed), ``without_both`` (both removed), ``first`` (first-copy loss) and, for the
    one-layer control, ``one_first`` and ``one_second`` (its loss on the two copies).
    """
    from .. import induction

    model, _ = induction.trained(2, 0)
    control, _ = induction.trained(1, 0)
    heads = _heads()
    ind, prev = heads["induction"], heads["previous"]
    L, H = ind.shape
    ind_layer, ind_head, prev_head = heads["ind_layer"], heads["ind_head"], heads["prev_head"]
    dup = induction.duplicate_token_scores(model)
    dup_head = int(dup[0].argmax())
    without = [induction.induction_scores(model, edits=[{"layer": 0, "head": h, "mode": "zero"}])[ind_layer, ind_head].item() for h in range(H)]
    feeder = min(range(H), key=without.__getitem__)
    loss = induction.repeated_loss
    return {
        "labels": heads["labels"],
        "induction": [_r(v) for v in ind.flatten().tolist()],
        "previous": [_r(v) for v in prev.flatten().tolist()],
        "duplicate": [_r(v) for v in dup.flatten().tolist()],
        "ind_head": ind_layer * H + ind_head, "prev_head": prev_head, "dup_head": dup_head, "feeder": feeder,
        "uniform": _r(induction.uniform_induction_score()),
        "intact": _r(heads["intact"]), "first": _r(loss(model, half="first")),
        "without_ind": _r(loss(model, edits=[{"layer": ind_layer, "head": ind_head, "mode": "zero"}])),
        "without_feeder": _r(loss(model, edits=[{"layer": 0, "head": feeder, "mode": "zero"}])),
        "without_both": _r(loss(model, edits=[{"layer": 0, "head": feeder, "mode": "zero"}, {"layer": ind_layer, "head": ind_head, "mode": "zero"}])),
        "one_first": _r(loss(control, half="first")), "one_second": _r(loss(control)),
    }


# ----------------------------------------------------------------------------- induction_head
#: A head of the last layer with at least this induction score counts as an induction head
#: (the chapter's and issue 16's threshold; the uniform baseline is about 0.04).
INDUCTION_THRESHOLD = 0.3


@checker
def check_induction_head(answer, data: dict | None = None):
    """``answer``: the index (into ``data["labels"]``) of the head picked as the induction head."""
    data = data or induction_data()
    labels, ind, prev = data["labels"], data["induction"], data["previous"]
    pos, problem = parse_token(answer, labels)
    if problem:
        return problem
    best = data["ind_head"]
    last = labels[best].split()[0]
    strong = [i for i, label in enumerate(labels)                 # every induction head of the last layer
              if label.startswith(last + " ") and ind[i] >= INDUCTION_THRESHOLD] or [best]
    if pos in strong:
        others = [i for i in strong if i != pos]
        also = ""
        if others:
            also = (" " + ("It is the strongest of " if pos == best else "It is one of ") +
                    f"{len(strong)} induction heads in this layer: " +
                    ", ".join(f"{labels[i]} {ind[i]:.2f}" for i in strong) + ".")
        return right(f"{labels[pos]}: from each word of the second copy it looks at the word that followed "
                     f"the same word in the first copy, a stripe half a sequence back that appears only in the "
                     f"second copy. Its induction score is {ind[pos]:.2f}, against {data['uniform']:.3f} for a "
                     "head that spreads its weight evenly." + also)
    if pos == data["prev_head"]:
        return wrong(f"{labels[pos]} is the previous-token head: its stripe sits right under the diagonal, "
                     f"the same in both copies (previous-token score {prev[pos]:.2f}). It never looks back "
                     "to the first copy" + (": it prepares the keys the induction head reads, one layer up."
                                            if pos == data["feeder"] else "."),
                     hint="Look for a head whose pattern changes between the first and the second copy.")
    if pos == data["dup_head"] and data["duplicate"][pos] >= 0.5:
        return wrong(f"{labels[pos]} is the duplicate-token head: from a repeated word it looks at the word's "
                     "first occurrence itself, one position too early for copying. The induction head looks "
                     "at the word that followed it." + (" It feeds the induction head, from layer 0."
                                                          if pos == data["feeder"] else ""),
                     hint="Look one position to the right of the duplicate-token head's stripe, in the last layer.")
    if labels[pos].startswith("L0"):
        return wrong(f"{labels[pos]} is in layer 0, whose keys know only their own word and position. "
                     "Finding the word that followed an earlier occurrence needs a key that knows its "
                     f"previous word, which only a second layer has. Its induction score is {ind[pos]:.2f}.",
                     hint="Look at the heads of the last layer.")
    return wrong(f"{labels[pos]} has an induction score of {ind[pos]:.2f}; another head of the same layer "
                 f"scores {ind[best]:.2f}. Hover a word of the second copy: the induction head's weight lands "
                 "on the word after that word's first occurrence.",
                 hint="In the second copy, where does each row's brightest cell sit?")


define(7, "induction_head", kind="token", title="Which head is the induction head?",
       question=("The chapter's two-layer model, trained on the speech, read on random words repeated once "
                 "(use the explorable above: pick a head, hover a word of the second copy). Name an "
                 "<b>induction head</b>: a head that looks from a repeated word to the word that "
                 "followed its first occurrence."),
       tokens=lambda data: data["labels"], data=induction_data, grade=check_induction_head)


# ----------------------------------------------------------------------------- circuit_loss
_TOLERANCE = 0.1   # nats: the value is read from the model and shown with two decimals


def circuit_reading(data: dict) -> str:
    """What the double ablation says about the circuit, read from the three losses: whether
    removing both heads adds little to the larger single ablation (one job, one path), or
    more than either alone but less than the two rises added (partial backups), or more
    than the sum."""
    rise_ind, rise_feeder = data["without_ind"] - data["intact"], data["without_feeder"] - data["intact"]
    rise_both, larger = data["without_both"] - data["intact"], max(rise_ind, rise_feeder)
    if rise_both - larger < 0.25 * larger:
        return ("Removing the second head of a circuit whose first step is already broken adds little: "
                "the two heads do one job together.")
    if rise_both <= rise_ind + rise_feeder:
        return (f"Together they raise it by {rise_both:.2f} nats: more than either alone ({rise_ind:.2f} and "
                f"{rise_feeder:.2f}), less than the two added ({rise_ind + rise_feeder:.2f}). Neither removal "
                "breaks the whole circuit: other heads do part of each job (other induction heads in the last "
                "layer, other heads of layer 0 that also read the previous word), and each single ablation "
                "leaves some of them working.")
    return (f"Together they raise it by {rise_both:.2f} nats, more than the two single rises added "
            f"({rise_ind + rise_feeder:.2f}): each head covers for part of the other's loss.")


#: The call that measures the exercise's answer (zero ablation of both heads, attnlib.edits's spec).
CIRCUIT_CODE = ('induction.repeated_loss(model, edits=[{"layer": 0, "head": feeder, "mode": "zero"}, '
                '{"layer": 1, "head": ind_head, "mode": "zero"}])')


@checker
def check_circuit_loss(answer, data: dict | None = None):
    """``answer``: the loss (nats) on the second copy with both circuit heads removed."""
    data = data or induction_data()
    target = data["without_both"]
    explain = (f"With both heads gone the loss on the second copy is {target:.2f} nats, against "
               f"{data['intact']:.2f} intact, {data['without_ind']:.2f} without the induction head alone and "
               f"{data['without_feeder']:.2f} without the layer-0 head that feeds it alone; the first copy costs "
               f"{data['first']:.2f}.")
    named = {"intact": "the intact model's loss", "without_ind": "the loss without the induction head alone",
             "without_feeder": "the loss without the layer-0 head alone", "first": "the first copy's loss"}
    return grade_number(
        answer, target, explain + " " + circuit_reading(data),
        what="a loss in nats, e.g. 3.5", abs_tol=_TOLERANCE,
        mistakes=[(data[key], lambda v, what=what: f"{v:g} is {what}, which the chapter shows. Removing both "
                                                  "heads is a new measurement: predict it, then run it.",
                   CIRCUIT_CODE)
                  for key, what in named.items()],
        impossible=[(lambda v: v < 0, "A cross-entropy loss is never negative: it is minus the log of a probability.")],
        otherwise=lambda v: f"{v:g} nats is {'lower' if v < target else 'higher'} than what the model gives.",
        hint="Run " + CIRCUIT_CODE + " and type its value with two decimals.")


define(7, "circuit_loss", kind="number", precision='Give it to 1 decimal place (graded within 0.1 nats).', title="Remove the whole circuit",
       question=("Predict, then check: remove <b>both</b> heads of the circuit at once, the layer-0 head that "
                 "feeds the induction head (<code>feeder</code>, found by ablation in the chapter) and the "
                 "induction head of layer 1 "
                 "(<code>" + CIRCUIT_CODE + "</code>). "
                 "What is the loss on the second copy, in nats? Compare it with the two single ablations "
                 "of the chapter before you run it."),
       data=induction_data, grade=check_circuit_loss, label="Loss (nats)", placeholder="e.g. 3.5")


# ----------------------------------------------------------------------------- one_layer_halves
HALVES_OPTIONS = (
    "Lower on the second copy: it can still favour words it has already seen",
    "About the same on both copies: without an induction head it cannot use the repeat",
    "Higher on the second copy: repeated words confuse it",
)
_HALVES_MARGIN = 0.1  # nats: closer than this counts as "about the same"


def halves_answer(data: dict) -> str:
    """The option that the one-layer control's losses support."""
    gap = data["one_first"] - data["one_second"]
    if gap > _HALVES_MARGIN:
        return HALVES_OPTIONS[0]
    if gap < -_HALVES_MARGIN:
        return HALVES_OPTIONS[2]
    return HALVES_OPTIONS[1]


@checker
def check_one_layer_halves(answer, data: dict | None = None):
    """``answer``: one of :data:`HALVES_OPTIONS`, graded against the control's real losses."""
    data = data or induction_data()
    first, second = data["one_first"], data["one_second"]
    numbers = (f"The one-layer control's loss is {first:.2f} nats on the first copy and {second:.2f} on the "
               f"second (two layers: {data['first']:.2f} and {data['intact']:.2f}).")
    reasons = {
        HALVES_OPTIONS[0]: ("A single layer can attend from a word to every earlier word and raise their "
                            "chances a little (a word seen once is a likely next word in these sequences), "
                            "but it cannot tell which of them comes next: that needs information that only "
                            "an earlier layer can add (where the word occurred before, or which word came "
                            "before each key)."),
        HALVES_OPTIONS[1]: ("Without an induction head the model cannot find the next word of the repeat; "
                            "what it does on the second copy it does on any sequence."),
        HALVES_OPTIONS[2]: ("The words of the second copy are the same random words; what makes them harder "
                            "is that, having seen them, the model expects something else."),
    }
    correct = halves_answer(data)
    feedback = {o: numbers + " " + reasons[o] for o in HALVES_OPTIONS if o != correct}
    return grade_choice(answer, HALVES_OPTIONS, correct, numbers + " " + reasons[correct], feedback,
                        hint="Compare the two losses of the one-layer model with code: "
                             "induction.repeated_loss(model1, half='first') and half='second'.")


define(7, "one_layer_halves", kind="choice", title="What does one layer do with a repeat?",
       question=("Predict, then check: the one-layer control has no induction head. On the held-out repeated "
                 "sequences, is its loss on the second copy lower than, about the same as (within 0.1 nats), "
                 "or higher than on the first copy?"),
       options=HALVES_OPTIONS, data=induction_data, grade=check_one_layer_halves)


# ----------------------------------------------------------------------------- patching (shared data)
@functools.lru_cache(maxsize=1)
def patching_data() -> dict:
    """The activation-patching numbers the two patching exercises grade against: the chapter's
    trained two-layer model on the chapter's 64 held-out pairs (``patching.induction_pairs(64,
    seed=0)``), read as the chapter reads them (normalised scores).

    Returns a dict with ``n`` (pairs), ``clean`` and ``corrupt`` (logit differences, nats),
    ``labels`` (``"L0 H0"`` ..., one per head), ``denoising`` and ``noising`` (the normalised
    score of every head's patch, in the order of ``labels``), ``prev_head`` and ``ind_head``
    (indices into ``labels``, as in :func:`induction_data`), ``intact`` and ``without_prev``
    (loss on the second copy, nats, intact and with the previous-token head zero-ablated),
    ``layer`` (the last layer), ``position`` (``B``'s position), ``query``, ``resid_den`` (the
    denoising score of the residual stream entering ``layer``, at each position) and
    ``resid_noise`` (the noising score of that stream at ``position``: the answer to
    ``predict_patch``).
    """
    from .. import induction, patching
    from ..transformer import run

    model, _ = induction.trained(2, 0)
    heads = _heads()                 # not induction_data(): its ablations are not needed here
    pairs = patching.induction_pairs(64, seed=0)
    # A run keeps every activation (about 10 MiB for the 64 pairs): the two reference metrics from runs
    # dropped at once, then one source run at a time, so that at most two runs are alive (the source
    # and a patched run).  Computed with the widget, it was where chapter 7's kernel used to peak.
    clean = patching.logit_diff(run(model, pairs["clean"]).logits, pairs)
    corrupt = patching.logit_diff(run(model, pairs["corrupt"]).logits, pairs)
    layer, p = model.n_layers - 1, pairs["position"]

    def score(value):
        return patching.normalised(value, clean, corrupt)

    def resid(tokens, source, pos):
        edit = {"layer": layer, "head": None, "mode": "patch", "source": source, "position": pos}
        return score(patching.logit_diff(run(model, tokens, edits=[edit]).logits, pairs))

    source = run(model, pairs["corrupt"])                                                   # noising
    noise = score(patching.patch_table(model, pairs["clean"], source, pairs))               # (L, H)
    resid_noise = resid(pairs["clean"], source, p)
    source = run(model, pairs["clean"])                                                     # denoising
    denoise = score(patching.patch_table(model, pairs["corrupt"], source, pairs))
    resid_den = [resid(pairs["corrupt"], source, t) for t in range(pairs["clean"].shape[1])]
    del source
    H, prev = model.n_heads, heads["prev_head"]
    return {
        "n": int(pairs["clean"].shape[0]), "clean": _r(clean), "corrupt": _r(corrupt), "labels": heads["labels"],
        "denoising": [_r(v) for v in denoise.flatten().tolist()],
        "noising": [_r(v) for v in noise.flatten().tolist()],
        "prev_head": prev, "ind_head": heads["ind_layer"] * H + heads["ind_head"], "intact": _r(heads["intact"]),
        "without_prev": _r(induction.repeated_loss(model, edits=[{"layer": 0, "head": prev, "mode": "zero"}])),
        "layer": layer, "position": p, "query": pairs["query"],
        "resid_den": [_r(v) for v in resid_den],
        "resid_noise": _r(resid_noise),
    }


# ----------------------------------------------------------------------------- patching_table
#: A denoising score at least this large reads "sufficient"; a noising score at most this large
#: reads "necessary" (at least half of the gap between the corrupted and the clean logit difference
#: closed by denoising; at most half of it kept by noising).
HALF = 0.5

TABLE_OPTIONS = (
    "Sufficient and necessary",
    "Sufficient but not necessary: another path backs it up",
    "Necessary but not sufficient: it works only together with other components",
    "Neither sufficient nor necessary on its own",
)

#: What each reading looks like in the two tables (said to a reader who chose it wrongly).
_TABLE_PATTERN = {
    TABLE_OPTIONS[0]: "A component that carries the difference by itself scores near 1 in denoising and near 0 "
                      "in noising.",
    TABLE_OPTIONS[1]: "A component with a backup scores high in denoising (alone, it closes the gap) and "
                      "near 1 in noising (without it, the backup does the job).",
    TABLE_OPTIONS[2]: "A component that is needed but not enough scores low in both tables: take it away and the "
                      "behaviour goes, give it back alone and the behaviour still needs the others.",
    TABLE_OPTIONS[3]: "A component that is neither scores low in denoising and high in noising.",
}


def table_reading(den: float, noi: float) -> str:
    """The option of :data:`TABLE_OPTIONS` that a denoising and a noising score support
    (thresholds :data:`HALF`)."""
    sufficient, necessary = den >= HALF, noi <= HALF
    return TABLE_OPTIONS[(0 if necessary else 1) if sufficient else (2 if necessary else 3)]


def _claims(option: str) -> tuple[bool, bool]:
    """(sufficient, necessary) as ``option`` claims them."""
    i = TABLE_OPTIONS.index(option)
    return i in (0, 1), i in (0, 2)


@checker
def check_patching_table(answer, data: dict | None = None):
    """``answer``: one of :data:`TABLE_OPTIONS`, graded against the previous-token head's two
    scores in the chapter's patching tables (:func:`patching_data`)."""
    data = data or patching_data()
    i = data["prev_head"]
    label, den, noi = data["labels"][i], data["denoising"][i], data["noising"][i]
    correct = table_reading(den, noi)
    sufficient, necessary = _claims(correct)
    says = (f"{label}: its clean output alone, patched into the corrupted run, closes {den:.2f} of the gap between "
            f"the corrupted and the clean logit difference (denoising; "
            f"{'sufficient: 0.5 or more' if sufficient else 'not sufficient: under 0.5'}), "
            f"and with its corrupted output the clean run keeps {noi:.2f} of that gap "
            f"(noising; {'necessary: 0.5 or less' if necessary else 'not necessary: over 0.5'}).")
    right_message = says
    rise = data["without_prev"] - data["intact"]
    if not sufficient and not necessary and rise > 0.5:
        right_message += (f" Yet removing it raised the loss on the second copy from {data['intact']:.2f} to "
                          f"{data['without_prev']:.2f} nats (the ablation above). Both hold: a patch sees only the "
                          "components that carry its difference. Replacing B changes what the induction head "
                          "copies, not where it looks, and this head serves the where.")
    j = data["ind_head"]
    right_message += (f" Compare the induction head {data['labels'][j]}: {data['denoising'][j]:.2f} in denoising, "
                      f"{data['noising'][j]:.2f} in noising.")
    feedback = {}
    for option in TABLE_OPTIONS:
        if option == correct:
            continue
        claim_suff, claim_nec = _claims(option)
        parts = []
        if claim_suff and not sufficient:
            parts.append(f"Sufficient would need its clean output alone to close at least half of the gap between the "
                         f"corrupted and the clean logit difference (a denoising score of 0.5 or more); it closes {den:.2f}.")
        if not claim_suff and sufficient:
            parts.append(f"Its clean output alone closes {den:.2f} of the gap between the corrupted and the clean logit "
                         "difference (denoising): at least half, which is what sufficient means here.")
        if claim_nec and not necessary:
            parts.append(f"Necessary would need the noising score to fall to 0.5 or less; with its corrupted output "
                         f"the clean run still keeps {noi:.2f} of the gap. In noising, a score "
                         "near 1 means that nothing was lost.")
        if not claim_nec and necessary:
            parts.append(f"With its corrupted output the clean run keeps only {noi:.2f} of the gap between the "
                         "corrupted and the clean logit difference (noising): losing the head loses at least half, "
                         "which is what necessary means here.")
        feedback[option] = " ".join(parts + [_TABLE_PATTERN[option]])
    return grade_choice(answer, TABLE_OPTIONS, correct, right_message, feedback,
                        hint="Denoising asks whether the head is enough (near 1: yes); noising asks whether it "
                             "is needed (near 0: yes).")


def _table_question(data: dict) -> str:
    i = data["prev_head"]
    return (f"The previous-token head {data['labels'][i]} of the chapter's model: removing it raised the loss on "
            f"the second copy from {data['intact']:.2f} to {data['without_prev']:.2f} nats. In the patching tables "
            f"(B replaced by B', {data['n']} held-out pairs) it scores <b>{data['denoising'][i]:.2f}</b> in "
            f"denoising (its clean output patched into the corrupted run) and <b>{data['noising'][i]:.2f}</b> in "
            "noising (its corrupted output patched into the clean run). Call a head <i>sufficient</i> when its "
            "denoising score is 0.5 or more, <i>necessary</i> when its noising score is 0.5 or less. Which "
            "reading do the two numbers support?")


define(7, "patching_table", kind="choice", title="Read one row of the patching tables",
       question=_table_question, options=TABLE_OPTIONS, data=patching_data, grade=check_patching_table)


# ----------------------------------------------------------------------------- predict_patch
PATCH_OPTIONS = (
    "Negative (below -0.2)",
    "About 0 (-0.2 to 0.2)",
    "Between 0.2 and 0.8",
    "About 1 (0.8 or more)",
)
_EDGES = (-0.2, 0.2, 0.8)

#: What a noising score in each band would mean (said to a reader who predicted it wrongly) ...
_PATCH_MEANING = (
    "In noising, a score below -0.2 would mean that the patch pushes the clean run further toward B' than the "
    "corrupted run itself goes.",
    "In noising, a score near 0 means that this one patch turns the clean run into the corrupted one.",
    "In noising, a score between 0.2 and 0.8 means that the site carries part of the difference and other paths "
    "carry the rest.",
    "In noising, a score near 1 means that the clean run hardly notices the patch.",
)
#: ... and what the measured score, in each band, says about the site.
_PATCH_SAYS = (
    "The patch pushes the clean run past the corrupted one, toward B'.",
    "This one patch turns the clean run into the corrupted one: the site carries the whole difference, so it is "
    "necessary.",
    "The site carries part of the difference; other paths carry the rest.",
    "The clean run hardly notices the patch: the difference reaches the query without this site.",
)


def patch_band(score: float) -> str:
    """The option of :data:`PATCH_OPTIONS` whose band holds ``score`` (edges: -0.2, 0.2, 0.8;
    an edge belongs to the band nearer 0 or 1, as the options say)."""
    if score < _EDGES[0]:
        return PATCH_OPTIONS[0]
    if score <= _EDGES[1]:
        return PATCH_OPTIONS[1]
    if score < _EDGES[2]:
        return PATCH_OPTIONS[2]
    return PATCH_OPTIONS[3]


@checker
def check_predict_patch(answer, data: dict | None = None):
    """``answer``: one of :data:`PATCH_OPTIONS`, the predicted noising score of the residual
    stream entering the last layer at ``B``'s position; graded against the measured value
    (:func:`patching_data`)."""
    data = data or patching_data()
    score, layer, p = data["resid_noise"], data["layer"], data["position"]
    correct = patch_band(score)
    k = PATCH_OPTIONS.index(correct)
    den = data["resid_den"]
    others = max(abs(v) for t, v in enumerate(den) if t != p)
    measured = f"Measured on the {data['n']} held-out pairs: {score:.2f}. {_PATCH_SAYS[k]}"
    why = ""
    if k == 1 and den[p] > 0.8:
        why = (f" The denoising table put {den[p]:.2f} of the difference at B's position ({p}) entering layer "
               f"{layer}, and at most {others:.3f} at any other position: the whole difference enters layer {layer} "
               "there. Give that position the corrupted stream and the induction heads find B' after the earlier "
               "A, and copy it.")
    tips = {
        PATCH_OPTIONS[0]: (" The patch gives the clean run the corrupted run's own stream at one position; to go "
                           "below 0, the clean positions would have to push toward B' as well, and the denoising "
                           "table shows that they carry none of the difference."),
        PATCH_OPTIONS[1]: "",
        PATCH_OPTIONS[2]: (" A score in between belongs to a site that shares the difference with others, like the "
                           f"induction head {data['labels'][data['ind_head']]} (noising "
                           f"{data['noising'][data['ind_head']]:.2f})."),
        PATCH_OPTIONS[3]: (" Noising reads the other way round from denoising: near 1 means that nothing was lost. "
                           "A site that closes the whole gap when patched in can take all of it away when "
                           "patched out."),
    }
    feedback = {o: _PATCH_MEANING[i] + tips[o] + " " + measured + why
                for i, o in enumerate(PATCH_OPTIONS) if o != correct}
    return grade_choice(answer, PATCH_OPTIONS, correct, measured + why, feedback,
                        hint="Entering the last layer, where does the difference between the clean and the "
                             "corrupted prompts sit? Read the residual-stream table above.")


def _patch_question(data: dict) -> str:
    return ("Predict, before you run it: in the <b>clean</b> run, replace the residual stream entering layer "
            f"{data['layer']} at B's position ({data['position']}) with the one from the <b>corrupted</b> run "
            "(noising, one position), "
            f"<code>run(model, pairs[\"clean\"], edits=[{{\"layer\": {data['layer']}, \"head\": None, "
            f"\"mode\": \"patch\", \"source\": corrupt_run, \"position\": {data['position']}}}])</code>. "
            "What will the normalised score (patched - corrupted) / (clean - corrupted) be?")


define(7, "predict_patch", kind="choice", title="Predict a patch before you run it",
       question=_patch_question, options=PATCH_OPTIONS, data=patching_data, grade=check_predict_patch)


# ------------------------------------------------------------------ the circuit lab's exercises
# Graded on the reader's own word sequences, read by chapter 7's model: attnlib.circuit_lab.read in
# the kernel, window.attnlibTiny (the circuit lab) on the page; both give, for each variant of the
# data (a name and attnlib.edits's edits), the loss on every word.

#: Fewest words that copying predicts for the feeder exercise to compare two heads on them.
MIN_COPYABLE = 3

@functools.lru_cache(maxsize=1)
def lab_data() -> dict:
    """The circuit lab exercises' data: the checkpoint they read (the end of training), its
    induction head (the best induction score of layer 1) and its previous-token head (the best
    previous-token score of layer 0), as the run read them, and the variants the answer is
    computed for: ``intact``, ``induction_off`` and ``previous_off`` (zero ablation)."""
    from .. import circuit_lab

    checkpoints = circuit_lab.lab_checkpoints()              # names and scores: no model is built
    name = [n for n in checkpoints if n != circuit_lab.CONTROL][-1]
    scores = checkpoints[name][1]
    ind = max(range(len(scores["induction"][-1])), key=lambda h: scores["induction"][-1][h])
    prev = max(range(len(scores["previous"][0])), key=lambda h: scores["previous"][0][h])
    variants = [{"name": "intact", "edits": []},
                {"name": "induction_off", "edits": [{"layer": 1, "head": ind, "mode": "zero"}]},
                {"name": "previous_off", "edits": [{"layer": 0, "head": prev, "mode": "zero"}]}]
    circuit_lab.check_variants(variants, len(scores["induction"]), len(scores["induction"][0]))   # once, here: the page runs them as given
    return {"checkpoint": name, "induction_head": [1, ind], "previous_head": [0, prev],
            "induction_score": _r(scores["induction"][-1][ind]), "previous_score": _r(scores["previous"][0][prev]),
            "variants": variants}


def copy_kinds(words: list) -> list:
    """What position ``i`` (predicting word ``i + 1``) can copy, as
    :func:`attnlib.induction.natural_repeats` classifies it: ``"same"`` (an earlier occurrence of
    word ``i`` was followed by word ``i + 1``), ``"other"`` (word ``i`` occurred earlier, never
    followed by word ``i + 1``) or ``"first"``."""
    out = []
    for i in range(len(words) - 1):
        seen = [j for j in range(i) if words[j] == words[i]]
        out.append("same" if any(words[j + 1] == words[i + 1] for j in seen) else "other" if seen else "first")
    return out


def _is_loss(x) -> bool:
    """A loss in nats as the page sends it: a finite, non-negative float (an int as large as
    10**400 cannot become one; True is not a number)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        x = float(x)
    except OverflowError:
        return False
    return math.isfinite(x) and x >= 0


def _lab_run(answer, variants):
    """``(words, losses, None)`` from a circuit-lab answer, or ``(None, None, Feedback)``: one
    text, read by the model, with a finite, non-negative loss per word for every variant."""
    if isinstance(answer, str):
        return None, None, wrong("This exercise is graded on what the model does with your words: type them in "
                                 "the box and press Check, so the model reads them first.")
    if not isinstance(answer, dict) or not isinstance(answer.get("texts"), list) or len(answer["texts"]) != 1 \
            or not isinstance(answer["texts"][0], str):
        return None, None, wrong("Your answer could not be read: expected your words and the model's reading of them.")
    if not answer["texts"][0].strip():
        return None, None, wrong("Please type some words: the box is empty.")
    if answer.get("error"):
        return None, None, wrong(f"The model could not read your words: {str(answer['error'])[:300]}",
                                 hint="The circuit lab's vocabulary list shows every word the model knows.")
    runs = answer.get("runs")
    if not isinstance(runs, list) or len(runs) != 1 or not isinstance(runs[0], dict):
        return None, None, wrong("The model's reading of your words is missing; press Check again.")
    words, loss = runs[0].get("words"), runs[0].get("loss")
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words) or not isinstance(loss, dict):
        return None, None, wrong("The model's reading of your words could not be read.")
    for v in variants:
        values = loss.get(v["name"])
        if not isinstance(values, list) or len(values) != len(words) - 1 or not all(map(_is_loss, values)):
            return None, None, wrong("The model's losses for your words could not be read.")
    return words, loss, None


def _mean(values, where) -> float:
    picked = [v for v, w in zip(values, where) if w]
    return sum(picked) / len(picked)


@checker
def check_copy_wrong(answer, data: dict | None = None):
    """Right when the reader's sequence has words that copying predicts wrongly (a word that
    occurred earlier, followed now by a different word) and switching the induction head off
    lowers their mean loss: the head copied, and the copy was wrong."""
    data = lab_data() if data is None else data
    words, loss, problem = _lab_run(answer, data["variants"])
    if problem:
        return problem
    kinds = copy_kinds(words)
    head = "{}.{}".format(*data["induction_head"])
    other = [k == "other" for k in kinds]
    same = [k == "same" for k in kinds]
    if not any(other):
        if any(same):
            delta = _mean(loss["induction_off"], same) - _mean(loss["intact"], same)
            return wrong(f"Every repeated word here is followed by what followed it before, so copying is right; "
                         f"switching head {head} off changes those words' mean loss by {delta:+.2f} nats"
                         + (": the head helps." if delta > 0 else "."),
                         hint="Repeat a word, but follow it with a different word the second time.")
        return wrong(f"No word of your {len(words)} occurs twice before the end, so head {head} has nothing to copy.",
                     hint="Repeat a stretch of words, then change the word after the repeat.")
    delta = _mean(loss["induction_off"], other) - _mean(loss["intact"], other)
    n = sum(other)
    first = kinds.index("other")
    if delta < 0:
        return right(f"On the {n} word{'s' if n > 1 else ''} where copying is wrong (the first: {words[first + 1]!r} "
                     f"after {words[first]!r}), switching head {head} off lowers the loss by {-delta:.2f} nats: the head "
                     f"copied what followed {words[first]!r} before, and that was wrong here. An induction head copies; "
                     f"whether that helps depends on the text. The chapter found the same on real text: the head hurts "
                     f"where copying is wrong.")
    return wrong(f"On the {n} word{'s' if n > 1 else ''} where copying is wrong, switching head {head} off changes "
                 f"their mean loss by {delta:+.2f} nats: here the head did not push the model toward the wrong copy.",
                 hint="Try repeating a longer exact stretch before the change, or other words: whether the head "
                      "copies strongly depends on the sequence.")


@checker
def check_feeder_matters(answer, data: dict | None = None):
    """Right when, on the words copying predicts (at least :data:`MIN_COPYABLE`), switching off
    the previous-token head raises the mean loss more than switching off the induction head."""
    data = lab_data() if data is None else data
    words, loss, problem = _lab_run(answer, data["variants"])
    if problem:
        return problem
    same = [k == "same" for k in copy_kinds(words)]
    n = sum(same)
    ind, prev = "{}.{}".format(*data["induction_head"]), "{}.{}".format(*data["previous_head"])
    if n < MIN_COPYABLE:
        return wrong(f"Your words give copying {n} word{'' if n == 1 else 's'} to predict; the comparison needs at "
                     f"least {MIN_COPYABLE}.", hint="Repeat a stretch of words (the lab's 'Repeat it' does it).")
    base = _mean(loss["intact"], same)
    d_ind = _mean(loss["induction_off"], same) - base
    d_prev = _mean(loss["previous_off"], same) - base
    if d_prev > 0 and d_prev > d_ind:
        return right(f"On the {n} words copying predicts, switching off previous-token head {prev} raises the loss by "
                     f"{d_prev:+.2f} nats, more than switching off induction head {ind} ({d_ind:+.2f}). The induction "
                     f"head finds what to copy through the previous-token head's output (K-composition), so breaking "
                     f"the feeder breaks copying too; which link costs more depends on the sequence, so 'the most "
                     f"important head' is a claim about inputs, not about the model alone.")
    if d_prev <= 0:
        return wrong(f"On the {n} words copying predicts, switching off previous-token head {prev} changes their mean "
                     f"loss by {d_prev:+.2f} nats: it does not raise it, so it cannot matter more here.",
                     hint="Repeat a stretch of words: the previous-token head feeds the copy.")
    return wrong(f"On the {n} words copying predicts, switching off induction head {ind} raises the loss by "
                 f"{d_ind:+.2f} nats and previous-token head {prev} by {d_prev:+.2f}: here the induction head matters more.",
                 hint="Try other lengths of the repeated stretch, or other words: on some repeats the feeder matters more.")


def _lab_question(text: str):
    def question(data: dict) -> str:
        # "head l.h (layer l, head h)" where a head is first named: the lab's naming
        return text.format(ind="{0}.{1} (layer {0}, head {1})".format(*data["induction_head"]),
                           ind_short="{}.{}".format(*data["induction_head"]),
                           prev="{0}.{1} (layer {0}, head {1})".format(*data["previous_head"]),
                           prev_short="{}.{}".format(*data["previous_head"]),
                           ind_score=data["induction_score"], prev_score=data["previous_score"])
    return question


define(7, "copy_wrong", kind="sentence", model="tiny", n_texts=1, data=lab_data,
       title="A repeat on which the induction head hurts",
       question=_lab_question(
           "At the end of training, head {ind} is the induction head (induction score {ind_score:.2f}). Write up to 32 "
           "words of the Gettysburg Address in which a word repeats but is followed by a <em>different</em> word the "
           "second time, such that switching head {ind_short} off (zero ablation, at the last checkpoint) lowers the mean "
           "loss on the words that follow a repeated word but differ from what followed it before. Try it in the "
           "circuit lab first."),
       grade=check_copy_wrong)
define(7, "feeder_matters", kind="sentence", model="tiny", n_texts=1, data=lab_data,
       title="When the feeder matters more than the induction head",
       question=_lab_question(
           "Head {prev} is the previous-token head (score {prev_score:.2f}) and head {ind} the "
           "induction head. Write a sequence (up to 32 words of the Gettysburg Address) with at least 3 copyable words "
           "(words whose preceding word occurred earlier, followed there by this same word), on which switching off "
           "head {prev_short} raises their mean loss, and <em>more</em> than switching off head {ind_short} does (zero ablation, "
           "at the last checkpoint)."),
       grade=check_feeder_matters)
