"""Softmax, temperature, entropy and the softmax Jacobian (chapters 1 and 4).

Shapes legend used across attnlib: ``B`` batch, ``H`` heads, ``T_q`` queries,
``T_k`` keys, ``d_k`` query/key width, ``d_v`` value width, ``d_model`` model width.
"""
from __future__ import annotations

import math

import torch

from .devices import as_tensor

__all__ = ["softmax", "entropy", "softmax_jacobian"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def softmax(scores, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """Numerically stable softmax of ``scores / temperature`` along ``dim``.

    ``softmax(s)_j = exp(s_j - m) / sum_l exp(s_l - m)`` with ``m = max_l s_l``.
    Subtracting the maximum changes nothing mathematically (softmax is invariant to
    adding a constant to every score) but keeps ``exp`` from overflowing.

    Scores of ``-inf`` get weight exactly 0.  A slice whose every score is ``-inf``
    (a query that may attend to nothing) gets all-zero weights rather than NaN.
    Half-precision inputs are computed in float32 and cast back.

    Shapes:
        scores: any shape, e.g. ``(..., T_q, T_k)``; result: same shape, non-negative,
        summing to 1 along ``dim`` (or to 0 for fully masked slices).

    Raises:
        ValueError: ``temperature`` is not a finite number > 0.
        TypeError: ``scores`` is not a tensor or numpy array, or not floating point.

    >>> softmax(torch.tensor([1.0, 2.0, 3.0]))
    tensor([0.0900, 0.2447, 0.6652])
    """
    scores = as_tensor(scores, "scores")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got dtype {scores.dtype}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
        math.isfinite(temperature) and temperature > 0
    ):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    dtype = scores.dtype
    x = scores.float() if dtype in _LOW_PRECISION else scores
    x = x / temperature
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # all -inf slice: avoid -inf - -inf
    e = torch.exp(x - m)
    total = e.sum(dim=dim, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    return weights.to(dtype)


def entropy(weights, dim: int = -1) -> torch.Tensor:
    """Shannon entropy ``-sum_j p_j log p_j`` of probability vectors along ``dim``, in nats.

    Uses ``0 log 0 = 0``.  A uniform row over ``T_k`` keys has entropy ``log(T_k)`` (the
    maximum); a one-hot row has entropy 0.

    Shapes:
        weights: ``(..., T_k)`` (or any shape with the distribution along ``dim``);
        result: the input shape without ``dim``.

    Raises:
        TypeError: ``weights`` is not a floating tensor or numpy array.

    >>> round(entropy(torch.full((4,), 0.25)).item(), 4)  # log 4
    1.3863
    """
    weights = as_tensor(weights, "weights")
    if not weights.is_floating_point():
        raise TypeError(f"weights must be a floating-point tensor, got dtype {weights.dtype}")
    p = weights.float() if weights.dtype in _LOW_PRECISION else weights
    plogp = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))), torch.zeros_like(p))
    return (-plogp.sum(dim=dim)).to(weights.dtype)


def softmax_jacobian(weights) -> torch.Tensor:
    """Jacobian of softmax at the point whose output is ``weights``:
    ``J[..., i, j] = d p_i / d s_j = p_i (delta_ij - p_j)``, i.e. ``diag(p) - p p^T``.

    When ``p`` is nearly one-hot every entry of ``J`` is nearly 0: a saturated softmax
    passes almost no gradient back to its scores (chapter 4).

    Shapes:
        weights: ``(..., T_k)``; result: ``(..., T_k, T_k)``, symmetric.

    Raises:
        TypeError: ``weights`` is not a floating tensor or numpy array.
        ValueError: ``weights`` is a 0-d tensor.

    >>> softmax_jacobian(torch.tensor([0.5, 0.5]))
    tensor([[ 0.2500, -0.2500],
            [-0.2500,  0.2500]])
    """
    p = as_tensor(weights, "weights")
    if not p.is_floating_point():
        raise TypeError(f"weights must be a floating-point tensor, got dtype {p.dtype}")
    if p.dim() == 0:
        raise ValueError("weights must have at least one dimension (..., T_k), got a scalar")
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., T_k, T_k)
