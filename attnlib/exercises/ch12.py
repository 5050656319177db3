"""Exercises of chapter 12, "Position and decoding".

* ``shifted_score``: predict the rotary-embedding score of a real query and key after both
  move by the same number of positions (it does not change).
* ``cache_bytes``: the memory, in GiB, of the KV cache of a given grouped-query model.
* ``gqa_head``: which key/value head a query head reads in grouped-query attention.
* ``receptive_field``: how many tokens can reach the last one through ``L`` stacked layers of
  sliding-window attention (``L (w - 1) + 1``).
"""
from __future__ import annotations

import html
import math

from .core import checker, grade_number
from .registry import define

__all__ = [
    "SHIFT", "shifted_score_data", "check_shifted_score",
    "CACHE_MODEL", "cache_gib", "check_cache_bytes",
    "GQA", "check_gqa_head",
    "WINDOW", "check_receptive_field",
]

GIB = 2 ** 30


# ----------------------------------------------------------------------------- shifted_score
SHIFT = {"text": "The cat sat on the mat because it was warm.", "query": "it", "key": "cat",
         "layer": 0, "head": 3, "shift": 100}


def shifted_score_data() -> dict:
    """The scaled RoPE score of the encoder's query ``it`` and key ``cat`` (layer 0, head 3) at
    their positions in the sentence, and two scores a learner might confuse it with: the query
    alone moved by the shift, and no rotation at all.  Runs the encoder (kernel only)."""
    import attnlib

    tokens, q, k, _ = attnlib.encoder.head_qkv(SHIFT["text"], SHIFT["layer"], SHIFT["head"])
    i, j = tokens.index(SHIFT["query"]), tokens.index(SHIFT["key"])
    qi, kj = q[i].double()[None], k[j].double()[None]
    scale = math.sqrt(q.shape[-1])

    def score(pi, pj):
        return attnlib.rope_scores(qi, kj, [pi], [pj])[0, 0].item() / scale

    return {"query": SHIFT["query"], "key": SHIFT["key"], "i": i, "j": j, "shift": SHIFT["shift"],
            "score": score(i, j), "shifted": score(i + SHIFT["shift"], j + SHIFT["shift"]),
            "query_only": score(i + SHIFT["shift"], j), "unrotated": (qi @ kj.T).item() / scale}


@checker
def check_shifted_score(answer, data):
    """Grade the score after shifting both positions: the same score (RoPE depends on i - j)."""
    s, shift = data["score"], data["shift"]
    return grade_number(
        answer, data["shifted"],
        f"{data['shifted']:.4f}: the same score. Both vectors turn by {shift} times "
        "theta_m more in every pair m, and a dot product of two rotated vectors only "
        "sees the difference of their angles, (i - j) theta_m, which the shift leaves alone.",
        what="a score (a number)", abs_tol=5e-4, rel_tol=1e-3,
        mistakes=[
            (data["query_only"], lambda v: f"{v:g} is the score with only the query moved (offset i - j grows "
                                           f"by {shift}). Here both tokens move, so the offset i - j stays the same."),
            (data["unrotated"], lambda v: f"{v:g} is the score without any rotation, q . k / sqrt(d_k). The "
                                          "rotations do not cancel: what remains is a rotation by (i - j) theta_m, "
                                          "the same before and after the shift."),
            ((s * math.cos(shift), 0.0), "The shift does not act on the score through a factor: both vectors "
                                         "turn by the same extra angle, which cancels in their dot product."),
        ],
        otherwise=lambda v: f"{v:g} is not it. Write the score as q^T R(i theta)^T R(j theta) k and use "
                            "R(a)^T R(b) = R(b - a).",
        hint="What happens to i - j when both positions grow by the same amount?")


def _shifted_score_question(d: dict) -> str:
    """The question as HTML: every value of the data is escaped (the page embeds the data as
    JSON, which the HTML must not trust), and the score is formatted only when it is a number."""
    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    score = f"{d['score']:.4f}" if isinstance(d["score"], (int, float)) else e(d["score"])
    return (f"With rotary embeddings, the query \u201c{e(d['query'])}\u201d at position {e(d['i'])} and the "
            f"key \u201c{e(d['key'])}\u201d at position {e(d['j'])} have the scaled score "
            f"<b>{score}</b> (the encoder's layer {e(SHIFT['layer'])}, head {e(SHIFT['head'])}). Both tokens "
            f"move {e(d['shift'])} positions to the right. What is their score now?")


define(12, "shifted_score", kind="number", precision='Give it to 4 decimal places (graded within 0.0005, plus 0.1 % of the answer).', title="The score after a shift",
       question=_shifted_score_question,
       grade=check_shifted_score, data=shifted_score_data, label="Score", placeholder="4 decimals")


# ----------------------------------------------------------------------------- cache_bytes
CACHE_MODEL = {"n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "d_head": 128, "T": 8192, "batch": 4,
               "bytes": 2}


def cache_gib(n_layers, n_kv_heads, d_head, T, batch, bytes_per_number) -> float:
    """``2 * n_layers * batch * n_kv_heads * T * d_head * bytes / 2**30`` (keys and values)."""
    return 2 * n_layers * batch * n_kv_heads * T * d_head * bytes_per_number / GIB


@checker
def check_cache_bytes(answer, model: dict = CACHE_MODEL):
    """Grade the KV-cache size in GiB of ``model`` (see :data:`CACHE_MODEL`)."""
    m = model
    target = cache_gib(m["n_layers"], m["n_kv_heads"], m["d_head"], m["T"], m["batch"], m["bytes"])
    n_bytes = target * GIB
    return grade_number(
        answer, target,
        f"2 (keys and values) x {m['n_layers']} layers x {m['batch']} sequences x "
        f"{m['n_kv_heads']} key/value heads x {m['T']} tokens x {m['d_head']} x {m['bytes']} bytes "
        f"= {n_bytes:,.0f} bytes = {target:g} GiB.",
        what="a size in GiB", rel_tol=5e-3, unit="GiB",
        mistakes=[
            (target * m["n_heads"] / m["n_kv_heads"], f"That counts {m['n_heads']} heads: only the "
             f"{m['n_kv_heads']} key/value heads are cached; the query heads share them."),
            (target / 2, "That counts only keys or only values; the cache holds both (the factor 2)."),
            (target * 2, "That is twice too much: bfloat16 takes 2 bytes, not 4 (or keys and values were counted twice)."),
            (target / m["batch"], f"That is one sequence; the batch has {m['batch']}, each with its own cache."),
            (target / m["n_layers"], f"That is one layer; each of the {m['n_layers']} layers keeps its own keys and values."),
            (n_bytes, "That is the size in bytes; divide by 2**30 for GiB."),
            (n_bytes / 1e9, "That is gigabytes (10**9 bytes); a GiB is 2**30 = 1,073,741,824 bytes."),
            (n_bytes / 2 ** 20, "That is MiB (2**20 bytes); divide by 1024 once more for GiB."),
            (target / m["bytes"], "That counts numbers, not bytes: each bfloat16 takes 2 bytes."),
        ],
        impossible=[(lambda v: v <= 0, "A cache holding tokens takes a positive amount of memory.")],
        otherwise=lambda v: f"{v:g} GiB is not it. Multiply: 2 (keys and values) x layers x batch x key/value "
                            "heads x tokens x head width x bytes per number, then divide by 2**30.",
        hint="Which of the model's numbers does a cache of keys and values depend on?")


define(12, "cache_bytes", kind="number", precision='Graded within 0.5 %. You may write the unit (e.g. 3.5 GiB); another byte unit is converted.', title="The size of a KV cache",
       question=(f"A model has {CACHE_MODEL['n_layers']} layers and {CACHE_MODEL['n_heads']} query heads of width "
                 f"{CACHE_MODEL['d_head']}, with {CACHE_MODEL['n_kv_heads']} key/value heads (grouped-query "
                 f"attention). It serves a batch of {CACHE_MODEL['batch']} sequences of {CACHE_MODEL['T']} tokens "
                 f"with keys and values in bfloat16 ({CACHE_MODEL['bytes']} bytes per number). How many "
                 "<b>GiB</b> (2<sup>30</sup> bytes) does its KV cache hold?"),
       grade=check_cache_bytes, label="GiB", placeholder="e.g. 1.5")


# ----------------------------------------------------------------------------- gqa_head
GQA = {"H": 32, "H_kv": 8, "head": 13}


@checker
def check_gqa_head(answer, H: int = GQA["H"], H_kv: int = GQA["H_kv"], head: int = GQA["head"]):
    """Grade the key/value head that query ``head`` reads: ``head // (H // H_kv)``
    (``attnlib.kv_head_of``, PyTorch's ``enable_gqa`` layout)."""
    group = H // H_kv
    target = head // group
    return grade_number(
        answer, target,
        f"Groups of H / H_kv = {group} consecutive query heads share one key/value head: "
        f"query heads {target * group}..{target * group + group - 1} read head {target} "
        f"({head} // {group} = {target}).",
        what="a head number", whole="heads are numbered 0, 1, 2, ...",
        mistakes=[
            (head % H_kv, f"{head} mod {H_kv} = {head % H_kv} would deal the query heads out in turn (0, 1, ..., "
                          f"{H_kv - 1}, 0, 1, ...). PyTorch and Hugging Face repeat each key/value head "
                          f"{group} times in a row (repeat_interleave): consecutive query heads share one."),
            (head // H_kv, f"That divides by H_kv = {H_kv}; divide by the group size H / H_kv = {group} instead."),
            ((target + 1, target - 1), "Off by one: heads and groups are both numbered from 0."),
        ],
        impossible=[(lambda v: not 0 <= v < H_kv, f"There are only {H_kv} key/value heads, numbered 0 to {H_kv - 1}.")],
        otherwise=lambda v: f"Head {v} is read by other query heads. Find the group of {group} consecutive "
                            f"query heads that contains head {head}.",
        hint="Group g holds query heads g*(H/H_kv) .. (g+1)*(H/H_kv) - 1.")


define(12, "gqa_head", kind="number", precision='A whole number (heads are numbered from 0).', title="Which key/value head?",
       question=(f"A layer has H = {GQA['H']} query heads and H<sub>kv</sub> = {GQA['H_kv']} key/value heads, "
                 "grouped as in PyTorch's <code>enable_gqa=True</code> and Hugging Face's Llama. Heads are "
                 f"numbered from 0. Which key/value head does query head <b>{GQA['head']}</b> read?"),
       grade=check_gqa_head, label="Key/value head", placeholder="a whole number")


# ----------------------------------------------------------------------------- receptive_field
WINDOW = {"layers": 6, "window": 5}


@checker
def check_receptive_field(answer, layers: int = WINDOW["layers"], window: int = WINDOW["window"]):
    """Grade the receptive field of ``layers`` stacked sliding-window layers of window ``window``
    (key ``j`` visible from query ``i`` iff ``i - window < j <= i``): ``layers (window - 1) + 1``
    positions, the token itself included (Beltagy et al. 2020; Jiang et al. 2023)."""
    L, w = layers, window
    target = L * (w - 1) + 1
    return grade_number(
        answer, target,
        f"Each layer reaches w - 1 = {w - 1} positions further back than the one below it, so after {L} layers "
        f"the last token can have read {L} x {w - 1} = {L * (w - 1)} earlier positions, plus itself: {target}.",
        what="a number of positions", whole="positions are counted one by one",
        mistakes=[
            (L * w, f"{L} x {w} counts the token itself once per layer. Each window of {w} holds the query itself "
                    f"and {w - 1} earlier positions; only the {w - 1} new ones add up from layer to layer."),
            (L * (w - 1), f"{L * (w - 1)} is how far back it reaches; count the last token itself as well."),
            (w, f"{w} is one layer's window. In the next layer each of those {w} positions passes on what it read "
                "in the layer below, so the field grows with every layer."),
            (w ** L, "The windows overlap: they do not multiply. Each layer moves the oldest reachable position back "
                     f"by {w - 1}."),
        ],
        impossible=[(lambda v: v < 1, "The token always sees at least itself.")],
        otherwise=lambda v: f"{v} is not it. Follow the oldest position the last token can reach: one window "
                            "back per layer.",
        hint="With w = 2 (each token sees itself and the one before), how far back does information get in "
             "2 layers?")


define(12, "receptive_field", kind="number", precision="A whole number.", title="Stacked sliding windows",
       question=(f"A decoder has <b>{WINDOW['layers']}</b> layers, each with sliding-window attention of window "
                 f"w = <b>{WINDOW['window']}</b> (query i sees keys j with i - w &lt; j &le; i). Through all the "
                 "layers, how many positions of a long sequence, the last token itself included, can have "
                 "influenced the last token's output?"),
       grade=check_receptive_field, label="Positions", placeholder="a whole number")
