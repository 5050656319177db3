"""Exercises of chapter 2, "Queries, keys and values".

* ``top_key``: which key does a query attend to most, in a real head of the course encoder?
  The answer is computed from the model when the widget is built, never stored.
* ``symmetric``: what stays symmetric after a row softmax of symmetric scores?
* ``rank``: the largest possible rank of ``M = W_Q W_K^T``.
"""
from __future__ import annotations

import html
import math

from .core import as_plain, checker, grade_choice, parse_number, parse_token, right, wrong
from .registry import define

__all__ = [
    "head_weights", "top_key_data", "check_top_key", "make_top_key_checker", "TOP_KEY_SETUP",
    "SYMMETRIC_OPTIONS", "check_symmetric", "check_rank",
]

# ----------------------------------------------------------------------------- top_key
# The sentence is attnlib.corpus.BEARS["verb"] (a test checks it), written out so that the
# graders import nothing beyond the standard library.
TOP_KEY_SETUP = {"text": "She bears the weight of the whole team.", "layer": 0, "head": 11, "query": "bears"}


def head_weights(text: str, layer: int, head: int, model=None, tokenizer=None):
    """Tokens and the ``(T_q, T_k)`` attention weights of one head of the course encoder,
    computed with chapter 2's recipe from that layer's own input ``hidden_states[layer]``
    (:func:`attnlib.head_qkv`): ``softmax(q k^T / sqrt(d_k))``.

    Shapes:
        returns ``tokens`` (list of ``T`` str) and ``weights`` ``(T, T)`` on the CPU, rows
        sum to 1.

    Raises:
        TypeError: ``text`` is not a str; ``layer`` or ``head`` is not an int.
        ValueError: ``text`` empty.
        IndexError: ``layer`` or ``head`` out of range.
    """
    import torch

    from ..encoder import head_qkv

    tokens, q, k, _ = head_qkv(text, layer, head, model, tokenizer)          # (T, d_k) each
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)       # (T_q, T_k)
    return tokens, weights.cpu()


def _top_key_data(tokens, weights, query: str) -> dict:
    tokens = [str(t) for t in tokens]
    weights = as_plain(weights)
    if tokens.count(query) != 1:
        raise ValueError(f"query {query!r} must occur exactly once in {tokens}")
    T = len(tokens)
    if len(weights) != T or any(len(row) != T for row in weights):
        raise ValueError(f"weights must be ({T}, {T}), got {len(weights)} rows")
    return {"tokens": tokens, "query": query, "weights": [[float(x) for x in row] for row in weights]}


def top_key_data() -> dict:
    """The data of the ``top_key`` exercise, read from the encoder (kernel only): ``tokens``
    (T str), ``query`` (str) and ``weights`` (T x T nested list, rows are queries), plus the
    setup (``text``, ``layer``, ``head``)."""
    s = TOP_KEY_SETUP
    tokens, weights = head_weights(s["text"], s["layer"], s["head"])
    return {**s, **_top_key_data(tokens, weights, s["query"])}


@checker
def check_top_key(answer, data=None):
    """Grade "which key does ``data['query']`` attend to most?" on ``data['weights']``.

    The answer (a token position or a token string occurring once) is right when it is the
    argmax of the query's row.  Reading the column instead of the row, choosing the query
    itself, or choosing the runner-up get specific feedback.  ``data`` defaults to
    :func:`top_key_data`.
    """
    data = data or top_key_data()
    tokens, weights, query = data["tokens"], data["weights"], data["query"]
    j, problem = parse_token(answer, tokens)
    if problem:
        return problem
    i = tokens.index(query)
    row = weights[i]
    order = sorted(range(len(row)), key=lambda n: -row[n])  # stable: ties keep token order
    best, second = order[0], order[1]
    column = [r[i] for r in weights]
    col_best = max(range(len(column)), key=column.__getitem__)
    share = f"{row[j]:.2f}"
    if j == best:
        return right(f'"{tokens[j]}" (position {j}) gets {share} of the weight of query '
                     f'"{query}", the largest in its row.')
    if j == col_best and j != best:
        return wrong(f'"{tokens[j]}" is the query that looks at "{query}" the most: you read '
                     f'the column of "{query}". Its row (where "{query}" looks) gives '
                     f'"{tokens[j]}" only {share}.',
                     hint="Row i of A is where query i looks; column j is who looks at key j.")
    if j == i:
        return wrong(f'"{query}" gives itself only {share}. A token does not automatically '
                     "attend to itself: the score is q_i . k_i, not |x_i|^2.")
    if j == second:
        return wrong(f'Close: "{tokens[j]}" is the runner-up with {share}; one key gets more.')
    return wrong(f'"{tokens[j]}" gets {share} of the weight; the top key gets '
                 f"{row[best]:.2f}.",
                 hint="Compute q = X W_Q + b_Q, k = X W_K + b_K, softmax(q k^T / sqrt(d_k)).")


def make_top_key_checker(tokens, weights, query: str):
    """A checker for "which key does ``query`` attend to most?" given a head's ``weights``
    (:func:`check_top_key` on those numbers).

    Shapes:
        ``len(tokens) == T``; weights: ``(T, T)`` (nested lists, an array or a tensor).

    Raises:
        ValueError: ``query`` is not exactly once in ``tokens``, or the shapes disagree.
    """
    data = _top_key_data(tokens, weights, query)
    return lambda answer: check_top_key(answer, data)


def _top_key_question(data) -> str:
    return (f'Layer {data["layer"]}, head {data["head"]}, sentence "{html.escape(data["text"])}": '
            f'which key does the query "<b>{html.escape(data["query"])}</b>" give the largest weight?')


define(2, "top_key", kind="token", title="Which key wins?", question=_top_key_question,
       tokens=lambda data: data["tokens"], data=top_key_data, grade=check_top_key)


# ----------------------------------------------------------------------------- symmetric
SYMMETRIC_OPTIONS = ["A", "diag(Z) A", "diag(1/Z) A", "A^T"]
_SYMMETRIC_FEEDBACK = {
    "A": "A_ij = e^(S_ij) / Z_i and A_ji = e^(S_ij) / Z_j: equal only when the two rows happen to "
         "have the same normaliser, which is not guaranteed.",
    "diag(1/Z) A": "This divides every row by Z_i a second time: entries e^(S_ij) / Z_i^2, "
                   "which differ from e^(S_ji) / Z_j^2 whenever Z_i != Z_j.",
    "A^T": "A^T is symmetric exactly when A is, and A is not guaranteed to be symmetric.",
}


@checker
def check_symmetric(answer):
    """Grade the symmetry question; the right answer is ``"diag(Z) A"``."""
    return grade_choice(answer, SYMMETRIC_OPTIONS, "diag(Z) A",
                        "(diag(Z) A)_ij = Z_i A_ij = e^(S_ij), and e^S is symmetric because S is. "
                        "Equivalently A_ij Z_i = A_ji Z_j (detailed balance).",
                        _SYMMETRIC_FEEDBACK, hint="Write A_ij = e^(S_ij) / Z_i and undo the division.")


define(2, "symmetric", kind="choice", title="What stays symmetric?",
       question="S is symmetric (tied W_Q = W_K), A = softmax(S) row by row, Z_i = sum_l exp(S_il). "
                "Which matrix is <b>guaranteed</b> to be symmetric?",
       options=SYMMETRIC_OPTIONS, grade=check_symmetric)


# ----------------------------------------------------------------------------- rank
RANK_D_MODEL, RANK_D_K = 384, 32


@checker
def check_rank(answer):
    """Grade "largest possible rank of M = W_Q W_K^T" for d_model = 384, d_k = 32."""
    value, problem = parse_number(answer, "a whole number (the rank)")
    if problem:
        return problem
    if value != int(value):
        return wrong(f"A rank counts independent directions, so it is a whole number; got {value:g}.")
    value = int(value)
    if value == RANK_D_K:
        return right("M = W_Q W_K^T passes through d_k = 32 dimensions, so rank(M) <= 32; a "
                     "generic head reaches it (the chapter measured 32).")
    if value == RANK_D_MODEL:
        return wrong("M is 384 x 384, but it is a product through a 32-dimensional middle: "
                     "rank(AB) <= min(rank A, rank B).", hint="What is the inner dimension of W_Q W_K^T?")
    if value == RANK_D_MODEL + 1:
        return wrong("385 would count the bias row of homogeneous coordinates as full rank; even "
                     "with biases the product still passes through 32 dimensions.")
    if value == 2 * RANK_D_K:
        return wrong("W_Q and W_K have 32 columns each, but they do not add up: the product "
                     "factors through one 32-dimensional space.")
    if value == RANK_D_MODEL // RANK_D_K:
        return wrong("12 is the number of heads, not a rank.")
    if value < 1 or value > RANK_D_MODEL:
        return wrong(f"A rank of a 384 x 384 matrix lies between 0 and 384; got {value}.")
    return wrong(f"{value} is not the bound. Think of the shapes: (384 x 32) times (32 x 384).")


define(2, "rank", kind="number", title="The rank of M",
       question="d_model = 384, d_k = 32: what is the largest possible rank of M = W_Q W_K^T for one head?",
       grade=check_rank)
