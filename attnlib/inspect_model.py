"""Measures on a pretrained encoder's attention (chapter 8): shares of attention, offsets,
asymmetry and cosine similarities.

Running the model and reading it (``EncoderAttention``, ``get_attentions``, ``head_scores``,
``weighted_value_norms``, ``token_vectors``) moved to :mod:`attnlib.encoder`; they are
imported here so that old imports keep working.

Conventions: ``attentions[l][0, h, i, j]`` is the weight query token ``i`` gives key token
``j`` in head ``h`` of layer ``l`` (row ``i`` sums to 1), the layout of Hugging Face's
``output_attentions=True`` and of bertviz's ``head_view`` / ``model_view`` (Vig 2019).
``hidden_states[l]`` is the input of layer ``l``; ``hidden_states[-1]`` the model's output.
"""
from __future__ import annotations

import unicodedata

import torch

from .encoder import (EncoderAttention, get_attentions, head_scores, load_encoder, token_vectors,  # noqa: F401
                      weighted_value_norms)

__all__ = ["EncoderAttention", "get_attentions", "token_groups", "attention_share", "sink_shares", "offset_share",
           "asymmetry", "top_keys", "head_scores", "weighted_value_norms", "token_vectors", "cosine_similarities"]


def _is_punctuation(token: str) -> bool:
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def token_groups(tokens, *, cls_token: str = "[CLS]", sep_token: str = "[SEP]") -> dict:
    """Positions of the classification token, the separator tokens and the punctuation tokens
    (tokens made only of Unicode punctuation characters, such as ``.`` or ``,``).

    Returns:
        dict ``{cls_token: [...], sep_token: [...], "punctuation": [...]}`` of position lists.
    """
    return {cls_token: [i for i, t in enumerate(tokens) if t == cls_token],
            sep_token: [i for i, t in enumerate(tokens) if t == sep_token],
            "punctuation": [i for i, t in enumerate(tokens) if _is_punctuation(t)]}


def attention_share(weights: torch.Tensor, key_positions) -> torch.Tensor:
    """Share of attention that goes to a set of keys, averaged over the queries:
    ``mean_i sum_{j in key_positions} A[..., i, j]``, a number in [0, 1] per head.

    Shapes:
        weights: ``(..., T_q, T_k)``, e.g. ``(n_layers, H, T, T)``; returns ``(...)``.

    Raises:
        TypeError: ``weights`` is not a tensor of at least 2 dimensions.
        ValueError: a position is outside ``0..T_k - 1``.
    """
    if not isinstance(weights, torch.Tensor) or weights.ndim < 2:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise TypeError(f"weights must be a tensor (..., T_q, T_k), got {shape}")
    positions = [int(p) for p in key_positions]
    bad = [p for p in positions if not 0 <= p < weights.shape[-1]]
    if bad:
        raise ValueError(f"key positions {bad} are outside 0..{weights.shape[-1] - 1}")
    return weights[..., positions].sum(dim=-1).mean(dim=-1)


def sink_shares(texts, *, model=None, tokenizer=None) -> dict:
    """Per-head share of attention going to the [CLS] token, the [SEP] tokens and punctuation,
    averaged over queries and then over the sentences: the measurement behind "separator and
    [CLS] sinks" (Clark et al. 2019).

    ``texts`` holds sentences (str) or results of :func:`get_attentions` for them (reused
    as they are, so one model run can serve several measurements).  The special tokens'
    names come from ``tokenizer`` (default: the course's encoder).

    Shapes:
        returns ``{group: tensor (n_layers, H)}`` for the groups of :func:`token_groups`.

    Raises:
        ValueError: ``texts`` is empty; errors of :func:`get_attentions` for a bad text.
    """
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


def _check_square(weights, name: str) -> None:
    if not isinstance(weights, torch.Tensor) or weights.ndim < 2 or weights.shape[-1] != weights.shape[-2]:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"{name} expects a square (..., T, T) tensor, got {shape}")


def offset_share(weights: torch.Tensor, offset: int) -> torch.Tensor:
    """Mean weight a query gives the token ``offset`` places away, ``mean_i A[..., i, i + offset]``
    over the queries that have such a neighbour: ``offset=-1`` measures a previous-token head,
    ``+1`` a next-token head, ``0`` attention to oneself.

    Shapes:
        weights: ``(..., T, T)``; returns ``(...)``.

    Raises:
        ValueError: the last two dimensions differ, or no query has a neighbour at ``offset``.
    """
    _check_square(weights, "offset_share")
    if abs(offset) >= weights.shape[-1]:
        raise ValueError(f"offset {offset} leaves no query with a neighbour among {weights.shape[-1]} tokens")
    return torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1).mean(dim=-1)


def asymmetry(weights: torch.Tensor) -> torch.Tensor:
    """``max_{i,j} |A[i, j] - A[j, i]|``: 0 exactly when the matrix is symmetric.

    Shapes:
        weights: ``(..., T, T)`` (square); returns ``(...)``.

    Raises:
        ValueError: the last two dimensions differ or there are fewer than two.
    """
    _check_square(weights, "asymmetry")
    return (weights - weights.transpose(-1, -2)).abs().amax(dim=(-1, -2))


def top_keys(weights_row: torch.Tensor, tokens, k: int = 3) -> list:
    """The ``k`` keys a query attends to most, as ``(position, token, weight)`` triples.

    Shapes:
        weights_row: ``(T_k,)``; ``len(tokens) == T_k``.

    Raises:
        ValueError: the row is not 1-D, its length differs from ``len(tokens)``, or ``k < 1``.
    """
    if weights_row.ndim != 1 or weights_row.shape[0] != len(tokens):
        raise ValueError(f"expected a (T_k,) row for {len(tokens)} tokens, got shape {tuple(weights_row.shape)}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    values, idx = weights_row.topk(min(k, len(tokens)))
    return [(int(j), tokens[int(j)], float(v)) for v, j in zip(values, idx)]


def cosine_similarities(vectors: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every pair of rows, ``u . v / (|u| |v|)``.

    Shapes:
        vectors: ``(N, d_model)``; returns ``(N, N)`` with ones on the diagonal.

    Raises:
        ValueError: ``vectors`` is not 2-D.
    """
    if not isinstance(vectors, torch.Tensor) or vectors.ndim != 2:
        shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
        raise ValueError(f"expected an (N, d_model) tensor, got {shape}")
    unit = torch.nn.functional.normalize(vectors.double(), dim=-1)  # rows of length 1
    return (unit @ unit.T).to(vectors.dtype)                        # (N, N)
