"""Exercises of chapter 2, "Queries, keys and values".

* ``top_key``: which key does a query attend to most, in a real head of the course encoder?
  The answer is computed from the model when the widget is built, never stored.
* ``symmetric``: what stays symmetric after a row softmax of symmetric scores?
* ``tied``: predict, then check on the encoder, which key a query weights most once the
  key map is tied to the query map (``W_K := W_Q``).
"""
from __future__ import annotations

import html
import math

from .core import as_plain, checker, grade_choice, parse_token, right, wrong
from .registry import define

__all__ = [
    "head_weights", "top_key_data", "check_top_key", "make_top_key_checker", "TOP_KEY_SETUP",
    "SYMMETRIC_OPTIONS", "check_symmetric", "TIED_SETUP", "tied_data", "check_tied",
]

# ----------------------------------------------------------------------------- top_key
# The sentence is attnlib.corpus.BEARS["verb"] (a test checks it), written out so that the
# graders import nothing beyond the standard library.
TOP_KEY_SETUP = {"text": "She bears the weight of the whole team.", "layer": 0, "head": 11, "query": "bears"}


def head_weights(text: str, layer: int, head: int, model=None, tokenizer=None):
    """Tokens and the ``(T_q, T_k)`` attention weights of one head of the course encoder,
    computed with chapter 2's recipe from that layer's own input ``hidden_states[layer]``
    (:func:`attnlib.encoder.head_qkv`): ``softmax(q k^T / sqrt(d_k))``.

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
SYMMETRIC_OPTIONS = ["A", "diag(Z) A", "diag(1/Z) A", "A\u1d40"]   # the last is A transposed: Aᵀ
_SYMMETRIC_FEEDBACK = {
    "A": "A_ij = e^(S_ij) / Z_i and A_ji = e^(S_ij) / Z_j: equal only when the two rows happen to "
         "have the same normaliser, which is not guaranteed.",
    "diag(1/Z) A": "This divides every row by Z_i a second time: entries e^(S_ij) / Z_i^2, "
                   "which differ from e^(S_ji) / Z_j^2 whenever Z_i != Z_j.",
    "A\u1d40": "A\u1d40 is symmetric exactly when A is, and A is not guaranteed to be symmetric.",
}


@checker
def check_symmetric(answer):
    """Grade the symmetry question; the right answer is ``"diag(Z) A"``."""
    return grade_choice(answer, SYMMETRIC_OPTIONS, "diag(Z) A",
                        "(diag(Z) A)_ij = Z_i A_ij = e^(S_ij), and e^S is symmetric because S is. "
                        "Equivalently A_ij Z_i = A_ji Z_j (detailed balance).",
                        _SYMMETRIC_FEEDBACK, hint="Write A_ij = e^(S_ij) / Z_i and undo the division.")


define(2, "symmetric", kind="choice", title="What stays symmetric?",
       question="S is symmetric (tied W<sub>Q</sub> = W<sub>K</sub>), A = softmax(S) row by row, "
                "Z<sub>i</sub> = &Sigma;<sub>l</sub> exp(S<sub>il</sub>). "
                "Which matrix is <b>guaranteed</b> to be symmetric?",
       options=SYMMETRIC_OPTIONS, grade=check_symmetric)


# ----------------------------------------------------------------------------- tied
# Predict, then check: tie layer 0, head 2's key map to its query map and read one row.
TIED_SETUP = {"text": "The cat sat on the mat because it was warm.", "layer": 0, "head": 2, "query": "mat"}


def tied_data() -> dict:
    """The data of the ``tied`` exercise, read from the encoder (kernel only): ``tokens``,
    ``query``, the head's real weights ``untied`` and the weights with ``W_K := W_Q`` and
    ``b_K := b_Q`` (``tied``), both ``T x T`` nested lists (rows are queries), plus the setup.
    """
    import torch

    from ..encoder import head_qkv

    s = TIED_SETUP
    tokens, q, k, _ = head_qkv(s["text"], s["layer"], s["head"])                 # (T, d_k) each
    scale = math.sqrt(q.shape[-1])
    untied = torch.softmax(q @ k.T / scale, dim=-1)                               # the model's head
    tied = torch.softmax(q @ q.T / scale, dim=-1)                                 # keys from the query map
    return {**s, **_top_key_data(tokens, tied, s["query"]),
            "untied": [[float(x) for x in row] for row in untied.cpu().tolist()]}


@checker
def check_tied(answer, data=None):
    """Grade "with W_K := W_Q, which key does the query weight most?" on ``data['weights']``
    (the tied weights).  Choosing the key the *untied* head prefers, or the runner-up, gets
    specific feedback.  ``data`` defaults to :func:`tied_data`."""
    data = data or tied_data()
    tokens, weights, query = data["tokens"], data["weights"], data["query"]
    j, problem = parse_token(answer, tokens)
    if problem:
        return problem
    i = tokens.index(query)
    row, untied = weights[i], data["untied"][i]
    best = max(range(len(row)), key=row.__getitem__)
    untied_best = max(range(len(untied)), key=untied.__getitem__)
    if j == best:
        extra = (" Tied, the diagonal score q_i . q_i = |q_i|^2 beats every other q_i . q_j here, "
                 "which is why the Reformer, which shares the query and key maps, masks the diagonal."
                 if best == i else "")
        return right(f'"{tokens[j]}" gets {row[j]:.3f} of the tied weight of "{query}".{extra}')
    if j == untied_best:
        return wrong(f'"{tokens[j]}" is what the real, untied head picks ({untied[j]:.3f}). Tied, it '
                     f'gets only {row[j]:.2g}: the keys now come from the query map, and a vector '
                     "matches itself better than its neighbour.",
                     hint="With W_K = W_Q, compare q_i . q_i = |q_i|^2 with q_i . q_j.")
    return wrong(f'"{tokens[j]}" gets {row[j]:.2g} of the tied weight; one key gets {row[best]:.3f}.',
                 hint="Compute q = X W_Q + b_Q and softmax(q q^T / sqrt(d_k)); read the row of the query.")


def _tied_question(data) -> str:
    return (f'Layer {data["layer"]}, head {data["head"]}, sentence "{html.escape(data["text"])}". Tie the '
            "head's key map to its query map (W_K := W_Q, b_K := b_Q). Predict first, then check: which "
            f'key will the query "<b>{html.escape(data["query"])}</b>" weight most?')


define(2, "tied", kind="token", title="Tie the key map to the query map", question=_tied_question,
       tokens=lambda data: data["tokens"], data=tied_data, grade=check_tied)
