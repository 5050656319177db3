"""Exercises of chapter 6, "Many heads, and how they learn".

* ``param_count``: how many parameters multi-head attention has (heads split ``d_model``,
  they do not multiply the weights).
* ``two_back_cells``: toggle the cells where a perfect "word two places back" head puts its
  weight.
* ``torch_mask``: which ``attn_mask`` makes ``torch.nn.MultiheadAttention`` apply an attnlib
  boolean mask (``True`` = may attend).
"""
from __future__ import annotations

import re

from .core import checker, grade_choice, parse_matrix, parse_number, right, wrong
from .registry import define

__all__ = [
    "PARAM_D_MODEL", "PARAM_N_HEADS", "check_param_count",
    "TWO_BACK_WORDS", "check_two_back_cells",
    "TORCH_MASK_OPTIONS", "check_torch_mask",
]

# ----------------------------------------------------------------------------- param_count
PARAM_D_MODEL, PARAM_N_HEADS = 384, 12  # the course's pretrained encoder


def _strip_thousands(answer):
    """'591,360', '591 360' and '591_360' are one number, not 591.36."""
    if isinstance(answer, str) and re.fullmatch(r"\s*\d{1,3}([,\s_]\d{3})+\s*", answer):
        return re.sub(r"[,\s_]", "", answer)
    return answer


@checker
def check_param_count(answer, d_model: int = PARAM_D_MODEL, n_heads: int = PARAM_N_HEADS):
    """Grade the number of trainable parameters of ``MultiHeadAttention(d_model, n_heads)``
    with biases: four ``(d_model, d_model)`` matrices and four ``d_model`` biases."""
    value, problem = parse_number(_strip_thousands(answer), "a count of parameters, a whole number")
    if problem:
        return problem
    if value != int(value) or value < 0:
        return wrong(f"{value:g} is not a count: parameters come in whole, non-negative numbers.")
    value = int(value)
    d, H = d_model, n_heads
    d_head = d // H
    total = 4 * d * d + 4 * d
    if value == total:
        return right(f"4 x {d} x {d} weights (W_Q, W_K, W_V, W_O) + 4 x {d} biases = {total:,}. "
                     f"The {H} heads share these matrices column by column ({d_head} columns "
                     "each), so one head of width d_model would cost exactly the same.")
    mistakes = {
        4 * d * d: f"That counts the four {d} x {d} matrices but not the four bias vectors of "
                   f"{d} numbers each.",
        3 * d * d + 3 * d: "That is W_Q, W_K, W_V with their biases. The output projection W_O, "
                           "which mixes the concatenated heads, is a fourth matrix.",
        3 * d * d: "That is W_Q, W_K and W_V only: add the output projection W_O and the biases.",
        H * total: f"That gives every head its own full {d} x {d} matrices. The heads split the "
                   f"{d} columns of each projection: head h owns {d_head} of them.",
        H * 4 * d * d: f"That gives every head its own full {d} x {d} matrices (and drops the "
                       f"biases). The heads split the columns: {d_head} per head.",
        4 * d * d_head + 4 * d_head: f"That is the share of one head (its {d_head} columns). "
                                     f"There are {H} heads, and W_O maps back to {d} columns.",
        4 * d_head * d_head: f"Each head's projections map {d} input numbers to {d_head}: they "
                             f"are {d} x {d_head}, not {d_head} x {d_head}.",
    }
    if value in mistakes:
        return wrong(mistakes[value], hint="Count W_Q, W_K, W_V, W_O and one bias vector for each.")
    return wrong(f"{value:,} is not it. q_proj, k_proj, v_proj and out_proj are each "
                 f"nn.Linear({d}, {d}) with a bias.",
                 hint=f"nn.Linear(n, n) has n * n + n parameters; here n = {d}.")


define(6, "param_count", kind="number", title="What do twelve heads cost?",
       question=(f"How many trainable parameters does <code>attnlib.MultiHeadAttention(d_model={PARAM_D_MODEL}, "
                 f"n_heads={PARAM_N_HEADS})</code> have (the default <code>bias=True</code>)? This is the "
                 "shape of one attention layer of the course's pretrained encoder."),
       grade=check_param_count, label="Parameters", placeholder="a whole number")


# ----------------------------------------------------------------------------- two_back_cells
# The first words of the Gettysburg Address, the text the chapter's model learns from.
TWO_BACK_WORDS = ("four", "score", "and", "seven", "years", "ago")
_OFFSET = 2


@checker
def check_two_back_cells(answer, words=TWO_BACK_WORDS):
    """Grade a ``(T, T)`` boolean matrix that should be ``True`` exactly at ``(i, i - 2)``:
    where a perfect "word two places back" head puts all of its weight."""
    T = len(words)
    marked, problem = parse_matrix(answer, (T, T), kind="bool")
    if problem:
        return problem
    ideal = [[j == i - _OFFSET for j in range(T)] for i in range(T)]  # True at (i, i - 2)
    cells = [(i, j) for i in range(T) for j in range(T)]
    if marked == ideal:
        return right(f"One cell per row, two to the left of the diagonal: '{words[2]}' looks at "
                     f"'{words[0]}', '{words[3]}' at '{words[1]}', and so on. The first two words "
                     "have no word two back: their rows stay empty (that answer is not scored).")
    if not any(marked[i][j] for i, j in cells):
        return wrong("Nothing is switched on. For each query row, switch on the key two places "
                     "to its left.")
    if all(marked[i][j] == (j == i - 1) for i, j in cells):
        return wrong("That is the previous-word head (one place back), the other head's job. "
                     "Move every cell one more step to the left.")
    if all(marked[i][j] == ideal[j][i] for i, j in cells):
        return wrong("Those cells look two places ahead. The model is causal: a query only sees "
                     "itself and earlier words, to the left of the diagonal.")
    parts = [f"{sum(marked[i][j] != ideal[i][j] for i, j in cells)} of {T * T} cells are wrong."]
    early = [i for i in range(_OFFSET) if any(marked[i])]
    if early:
        i = early[0]
        parts.append(f"Row '{words[i]}' (position {i}) has no word two places back, so it has no "
                     "ideal key; leave it empty.")
    upper = [(i, j) for i, j in cells if j >= i and marked[i][j]]
    if upper:
        i, j = upper[0]
        parts.append(f"Cell (query '{words[i]}', key '{words[j]}') is {'the word itself' if i == j else 'in the future'}; "
                     "a two-back head looks strictly into the past.")
    crowded = [i for i in range(T) if sum(marked[i]) > 1]
    if crowded:
        parts.append(f"Row '{words[crowded[0]]}' has {sum(marked[crowded[0]])} cells on: a perfect head "
                     "puts all of its weight on one key.")
    missed = [(i, j) for i, j in cells if ideal[i][j] and not marked[i][j]]
    if missed:
        i, j = missed[0]
        parts.append(f"Query '{words[i]}' should look at '{words[j]}', two places back.")
    return wrong(" ".join(parts), hint="Cell (i, j) is on exactly when j = i - 2.")


define(6, "two_back_cells", kind="matrix", title="Draw the ideal pattern",
       question=("A perfect head for the second job of this chapter's model reads, at every position, "
                 "the word <b>two places back</b>. For the sequence <i>" + " ".join(TWO_BACK_WORDS) +
                 "</i> (rows = queries, columns = keys), switch <b>on</b> every cell where that head "
                 "puts its weight, and leave the others off."),
       rows=TWO_BACK_WORDS, cols=TWO_BACK_WORDS, grade=check_two_back_cells)


# ----------------------------------------------------------------------------- torch_mask
TORCH_MASK_OPTIONS = [
    "attn_mask=allowed",
    "attn_mask=~allowed",
    "attn_mask=allowed.float()",
    "attn_mask=1 - allowed.float()",
]
_TORCH_MASK_FEEDBACK = {
    TORCH_MASK_OPTIONS[0]: "torch.nn.MultiheadAttention reads a boolean True as 'masked out', the "
                           "opposite of attnlib and F.scaled_dot_product_attention. Passing "
                           "allowed hides exactly the keys that should be visible.",
    TORCH_MASK_OPTIONS[2]: "A float mask is added to the scores: this adds 1 to the allowed "
                           "scores and 0 to the others, so nothing is removed (a forbidden key "
                           "needs -inf).",
    TORCH_MASK_OPTIONS[3]: "A float mask is added to the scores: this adds 1 to the forbidden "
                           "scores, which makes them more likely to be attended, not less.",
}


@checker
def check_torch_mask(answer):
    """Grade the mask-convention question; the right answer is ``attn_mask=~allowed``."""
    return grade_choice(answer, TORCH_MASK_OPTIONS, TORCH_MASK_OPTIONS[1],
                        "PyTorch's module marks the keys to hide with True, so the mask is inverted. "
                        "An additive mask (0 where allowed, -inf elsewhere) works in both, unchanged.",
                        _TORCH_MASK_FEEDBACK, hint="Which convention does torch.nn.MultiheadAttention use for boolean masks?")


define(6, "torch_mask", kind="choice", title="Two conventions for one mask",
       question=("<code>allowed</code> is an attnlib boolean mask (<code>True</code> = the query <b>may "
                 "attend</b> to the key), e.g. <code>attnlib.causal_mask(T)</code>. Which argument makes "
                 "<code>torch.nn.MultiheadAttention</code> compute the same attention as "
                 "<code>attnlib.MultiHeadAttention(..., mask=allowed)</code>?"),
       options=TORCH_MASK_OPTIONS, grade=check_torch_mask)
