"""What we measure on attention weights: the share of attention keys receive, the weight a
query gives the token a fixed offset away, asymmetry, the strongest keys of a query, the sinks of a
pretrained encoder, and the cosine similarity of hidden vectors.

Each measure has one definition here, and the related ones are written through it:

* :func:`received_attention` (column means) is the share of all attention each key
  receives; :func:`attention_share` sums it over a set of keys, and
  :func:`attnlib.graphs.in_weight` with ``share=True`` is the same number read off a graph.
* :func:`offset_share` is the mean weight on the key ``offset`` places away (the
  previous-token scores of chapters 7 and 9 are ``offset_share(weights, -1)``).

Conventions: ``weights[..., i, j]`` is the weight query ``i`` gives key ``j`` (row ``i``
sums to 1), the layout of Hugging Face's ``output_attentions=True`` once a sentence is picked.

Shapes legend: ``B`` batch, ``H`` heads, ``L`` layers (``n_layers``), ``T_q`` queries,
``T_k`` keys (``T = T_q = T_k`` for self-attention), ``d_model`` model width.
"""
from __future__ import annotations

import numbers
import unicodedata

import numpy as np
import torch

from . import _validate
from .encoder import EncoderAttention, get_attentions, load_encoder

__all__ = [
    "received_attention", "attention_share", "offset_share",
    "asymmetry", "top_keys", "token_groups", "sink_shares", "cosine_similarities",
]


def _weights(x, name: str = "weights", *, min_dim: int = 2) -> torch.Tensor:
    """``x`` as a floating tensor of post-softmax weights: at least ``min_dim`` dimensions,
    finite and non-negative."""
    w = _validate.has_values(_validate.floating(x, name), name, "the measure")
    if w.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions (..., T_q, T_k), "
                         f"got shape {_validate.shape_of(w)}")
    if w.numel() == 0:
        raise ValueError(f"{name} is empty, shape {_validate.shape_of(w)}; there is nothing to measure")
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"{name} must be finite (post-softmax weights), got NaN or infinity")
    if bool((w < 0).any()):
        raise ValueError(f"{name} must be non-negative (post-softmax weights); got a minimum of "
                         f"{w.min().item():.3g}")
    return w


def _square(x, name: str = "weights") -> torch.Tensor:
    """``x`` as a floating ``(..., T, T)`` tensor with ``T >= 1``."""
    t = _validate.has_values(_validate.floating(x, name), name, "the measure")
    if t.dim() < 2 or t.shape[-1] != t.shape[-2] or t.shape[-1] == 0:
        raise ValueError(f"{name} must be a square (..., T, T) tensor with T >= 1, got shape "
                         f"{_validate.shape_of(t)}")
    return t


# --- shares of attention -------------------------------------------------------------------

def received_attention(weights) -> torch.Tensor:
    """Share of all attention each key receives: the column means of ``weights``,
    ``r_j = mean_i A[..., i, j]``.  When every row sums to 1 the result sums to 1 over the
    keys.  On a graph this is ``in_weight(attention_graph(w, tokens), share=True)``, the
    weighted in-degree divided by ``T``.

    Shapes:
        weights: ``(..., T_q, T_k)``, e.g. ``(L, H, T, T)``; returns ``(..., T_k)``, same
        dtype and device.

    Raises:
        TypeError: ``weights`` is not a floating tensor/array.
        ValueError: fewer than 2 dimensions, no entries, NaN/infinite or negative entries.

    >>> w = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    >>> received_attention(w)
    tensor([0.7500, 0.2500])
    """
    w = _weights(weights)
    return w.mean(dim=-2)  # (..., T_k)


def _positions(key_positions, n_keys: int) -> list[int]:
    if isinstance(key_positions, (torch.Tensor, np.ndarray)):
        key_positions = key_positions.tolist()
    if isinstance(key_positions, numbers.Integral) and not isinstance(key_positions, bool):
        key_positions = [key_positions]
    if isinstance(key_positions, (str, bytes)) or not hasattr(key_positions, "__iter__"):
        raise TypeError(f"key_positions must be a list of ints, got {type(key_positions).__name__} {key_positions!r}")
    positions = list(key_positions)
    for p in positions:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise TypeError(f"key_positions must be ints, got {type(p).__name__} {p!r}")
    bad = [int(p) for p in positions if not 0 <= p < n_keys]  # negative positions are refused, not counted from the end
    if bad:
        raise ValueError(f"key positions {bad} are outside 0..{n_keys - 1}")
    if len(set(positions)) != len(positions):
        raise ValueError(f"key positions repeat, which would count a key twice: {positions}")
    return [int(p) for p in positions]


def attention_share(weights, key_positions) -> torch.Tensor:
    """Share of attention that goes to a set of keys, averaged over the queries:
    ``mean_i sum_{j in key_positions} A[..., i, j]``, the sum of :func:`received_attention`
    over those keys; a number in [0, 1] per head when rows sum to 1.

    Shapes:
        weights: ``(..., T_q, T_k)``, e.g. ``(n_layers, H, T, T)``; ``key_positions``: a list
        of distinct ints in ``0..T_k - 1`` (or one int); returns ``(...)``.

    Raises:
        TypeError: ``weights`` is not a floating tensor/array; a position is not an int.
        ValueError: as :func:`received_attention`; a position outside ``0..T_k - 1`` or
            repeated.

    >>> w = torch.tensor([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]])
    >>> attention_share(w, [0, 2])
    tensor(0.8750)
    """
    received = received_attention(weights)  # (..., T_k)
    positions = _positions(key_positions, received.shape[-1])
    return received[..., positions].sum(dim=-1)


# --- positions: offsets and the look-back pattern ------------------------------------------

def offset_share(weights, offset: int) -> torch.Tensor:
    """Mean weight a query gives the token ``offset`` places away,
    ``mean_i A[..., i, i + offset]`` over the queries that have such a neighbour:
    ``offset=-1`` measures a previous-token head, ``+1`` a next-token head, ``0`` attention
    to oneself.

    Shapes:
        weights: ``(..., T, T)``; returns ``(...)``.

    Raises:
        TypeError: ``weights`` is not a floating tensor/array; ``offset`` is not an int.
        ValueError: not square, NaN/infinite or negative entries, or no query has a
            neighbour at ``offset`` (``|offset| >= T``).

    >>> offset_share(torch.tensor([[1.0, 0.0], [0.75, 0.25]]), -1)
    tensor(0.7500)
    """
    w = _weights(_square(weights))
    if isinstance(offset, bool) or not isinstance(offset, numbers.Integral):
        raise TypeError(f"offset must be an int, got {type(offset).__name__} {offset!r}")
    if abs(offset) >= w.shape[-1]:
        raise ValueError(f"offset {offset} leaves no query with a neighbour among {w.shape[-1]} tokens")
    return torch.diagonal(w, offset=int(offset), dim1=-2, dim2=-1).mean(dim=-1)  # mean over the T - |offset| queries


# --- shape of one matrix ----------------------------------------------------------------------

def asymmetry(weights, *, relative: bool = False) -> torch.Tensor:
    """``max_{i,j} |M[i, j] - M[j, i]|``: 0 exactly when the matrix is symmetric.  Works on
    weights and on scores alike.  With ``relative=True`` it is divided by ``max |M[i, j]|``,
    so matrices of different scales compare (0 for an all-zero matrix).

    Shapes:
        weights: ``(..., T, T)`` (square); returns ``(...)``.

    Raises:
        TypeError: not a floating tensor/array; ``relative`` not a bool.
        ValueError: not square, or an entry is NaN or infinite (masked ``-inf`` scores have
            no finite asymmetry).

    >>> asymmetry(torch.tensor([[0.0, 2.0], [1.0, 0.0]]))
    tensor(1.)
    """
    m = _square(weights)
    relative = _validate.flag(relative, "relative")
    if not bool(torch.isfinite(m).all()):
        raise ValueError("asymmetry needs finite entries; got NaN or infinity (masked -inf scores?)")
    dtype = m.dtype
    m = m.to(torch.float32) if dtype in (torch.float16, torch.bfloat16) else m   # half's tiny range: float32 inside
    gap = (m - m.transpose(-1, -2)).abs().amax(dim=(-1, -2))  # (...)
    if not relative:
        return gap.to(dtype)
    scale = m.abs().amax(dim=(-1, -2))
    # divide by the scale itself (a clamp to float16's smallest normal number, 6e-5, turned a
    # fully asymmetric matrix of tiny entries into 0.002)
    return torch.where(scale > 0, gap / torch.where(scale > 0, scale, torch.ones_like(scale)),
                       torch.zeros_like(gap)).to(dtype)


def top_keys(weights_row, tokens, k: int = 3) -> list:
    """The ``k`` keys a query attends to most, as ``(position, token, weight)`` triples,
    largest first (``min(k, T_k)`` of them).

    Shapes:
        weights_row: ``(T_k,)``; ``len(tokens) == T_k``.

    Raises:
        TypeError: ``weights_row`` is not a floating tensor/array, ``tokens`` is a str or has
            no length, or ``k`` is not an int.
        ValueError: the row is not 1-D or its length differs from ``len(tokens)``; ``k < 1``;
            the row holds NaN (it has no order) or is a meta tensor (no values).

    >>> top_keys(torch.tensor([0.1, 0.7, 0.2]), ["a", "b", "c"], k=2)
    [(1, 'b', 0.699999988079071), (2, 'c', 0.20000000298023224)]
    """
    row = _validate.has_values(_validate.floating(weights_row, "weights_row"), "weights_row", "top_keys")
    tokens = _token_list(tokens)
    k = _validate.positive_int(k, "k")
    if row.dim() != 1 or row.shape[0] != len(tokens):
        raise ValueError(f"expected a (T_k,) row for {len(tokens)} tokens, got shape {_validate.shape_of(row)}")
    if bool(torch.isnan(row).any()):
        raise ValueError(f"weights_row holds NaN at positions {torch.nonzero(torch.isnan(row)).flatten().tolist()}; "
                         "NaN has no rank among the weights")
    values, idx = row.topk(min(k, len(tokens)))
    return [(int(j), tokens[int(j)], float(v)) for v, j in zip(values, idx)]


# --- special tokens and sinks ------------------------------------------------------------------

def _token_list(tokens) -> list:
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a list of strings, got {type(tokens).__name__}")
    return list(tokens)


def _is_punctuation(token: str) -> bool:
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def token_groups(tokens, *, cls_token: str = "[CLS]", sep_token: str = "[SEP]") -> dict:
    """Positions of the classification token, the separator tokens and the punctuation tokens
    (tokens made only of Unicode punctuation characters, such as ``.`` or ``,``).

    Returns:
        dict ``{cls_token: [...], sep_token: [...], "punctuation": [...]}`` of position lists.

    Raises:
        TypeError: ``tokens`` is a str (not a list of tokens) or holds a non-str;
            ``cls_token`` or ``sep_token`` is not a str.

    >>> token_groups(["[CLS]", "hi", "!", "[SEP]"])
    {'[CLS]': [0], '[SEP]': [3], 'punctuation': [2]}
    """
    tokens = _token_list(tokens)
    for name, value in (("cls_token", cls_token), ("sep_token", sep_token)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    bad = [t for t in tokens if not isinstance(t, str)]
    if bad:
        raise TypeError(f"tokens must be strings, got {type(bad[0]).__name__} {bad[0]!r}")
    return {cls_token: [i for i, t in enumerate(tokens) if t == cls_token],
            sep_token: [i for i, t in enumerate(tokens) if t == sep_token],
            "punctuation": [i for i, t in enumerate(tokens) if _is_punctuation(t)]}


def sink_shares(texts, *, model=None, tokenizer=None) -> dict:
    """Per-head share of attention going to the [CLS] token, the [SEP] tokens and punctuation
    (:func:`attention_share` of each :func:`token_groups` group), averaged over the sentences:
    the measurement behind "separator and [CLS] sinks" (Clark et al. 2019, sec. 3).

    ``texts`` holds sentences (str) or results of :func:`attnlib.encoder.get_attentions` for them
    (reused as they are, so one model run can serve several measurements).  The special
    tokens' names come from ``tokenizer`` (default: the course's encoder).

    Shapes:
        returns ``{group: tensor (n_layers, H)}`` for the groups of :func:`token_groups`.

    Raises:
        TypeError: ``texts`` is a single str (pass a list of sentences).
        ValueError: ``texts`` is empty; errors of :func:`attnlib.encoder.get_attentions` for a bad text.
    """
    if isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
        raise TypeError(f"texts must be a list of sentences, got {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise ValueError("texts must hold at least one sentence")
    if model is None and tokenizer is None:
        model, tokenizer = load_encoder()
    totals: dict = {}
    for text in texts:
        att = text if isinstance(text, EncoderAttention) else get_attentions(text, model=model, tokenizer=tokenizer)
        groups = token_groups(att.tokens, cls_token=tokenizer.cls_token, sep_token=tokenizer.sep_token)
        weights = att.stacked()  # (n_layers, H, T, T)
        for name, positions in groups.items():
            totals[name] = totals.get(name, 0) + attention_share(weights, positions) / len(texts)
    return totals


# --- hidden vectors ------------------------------------------------------------------------------

def cosine_similarities(vectors) -> torch.Tensor:
    """Cosine similarity of every pair of rows, ``u . v / (|u| |v|)``, computed in float64
    and returned in the input's dtype.

    Shapes:
        vectors: ``(N, d_model)``; returns ``(N, N)`` with ones on the diagonal.

    Raises:
        TypeError: ``vectors`` is not a floating tensor/array (an int tensor would round
            every similarity to 0 or 1).
        ValueError: not 2-D, NaN/infinite entries, or a row of length 0 (its angle to
            anything is undefined).

    >>> cosine_similarities(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    tensor([[1.0000, 0.7071],
            [0.7071, 1.0000]])
    """
    x = _validate.has_values(_validate.floating(vectors, "vectors"), "vectors", "cosine_similarities")
    if x.dim() != 2:
        raise ValueError(f"vectors must be an (N, d_model) tensor, got shape {_validate.shape_of(x)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("vectors must be finite, got NaN or infinity")
    norms = x.double().norm(dim=-1)  # (N,)
    zero = torch.nonzero(norms == 0).flatten().tolist()
    if zero:
        raise ValueError(f"rows {zero} of vectors have length 0, so their cosine similarity is undefined")
    unit = x.double() / norms[:, None]       # (N, d_model) rows of length 1
    return (unit @ unit.T).to(x.dtype)       # (N, N)
