"""Softmax, temperature, entropy and the softmax Jacobian (chapters 1 and 4), and two ways
practice keeps the scores that enter softmax in range: soft-capping and QK normalisation
(chapter 4).

Shapes legend used across attnlib: ``B`` batch, ``H`` heads, ``T_q`` queries,
``T_k`` keys, ``d_k`` query/key width, ``d_v`` value width, ``d_model`` model width.
"""
from __future__ import annotations

import torch

from . import _validate

__all__ = ["softmax", "entropy", "softmax_jacobian", "soft_cap"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype attnlib computes scores and softmax in for inputs of ``dtype``: float32 for
    float16 and bfloat16 (whose range or precision is too small for scores and their
    exponentials), the input dtype otherwise.  Results are cast back to ``dtype``.

    >>> compute_dtype(torch.float16), compute_dtype(torch.float64)
    (torch.float32, torch.float64)
    """
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def softmax(scores, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """Numerically stable softmax of ``scores / temperature`` along ``dim``.

    ``softmax(s / tau)_j = exp((s_j - m) / tau) / sum_l exp((s_l - m) / tau)`` with
    ``m = max_l s_l``.  Subtracting the maximum changes nothing mathematically (softmax is
    invariant to adding a constant to every score) but keeps ``exp`` from overflowing;
    dividing the differences rather than the scores by ``tau`` keeps a tiny temperature
    from overflowing them too.

    Scores of ``-inf`` get weight exactly 0.  A slice whose every score is ``-inf``
    (a query that may attend to nothing) gets all-zero weights rather than NaN.  An empty
    slice (``T_k = 0``) gives an empty result.  NaN or ``+inf`` scores give NaN weights in their
    slice (as ``torch.softmax``): no finite distribution is defined there.
    Float16/bfloat16 inputs are computed in float32 and cast back.

    Shapes:
        scores: any shape, e.g. ``(..., T_q, T_k)``; result: same shape and dtype,
        non-negative, summing to 1 along ``dim`` (or to 0 for fully masked slices).

    Raises:
        TypeError: ``scores`` is not a floating tensor or numpy array; ``dim`` is not an int;
            ``temperature`` is not a real number.
        ValueError: ``temperature`` is not a finite number > 0; ``dim`` is out of range.

    Source: the softmax of Bridle (1990), "Probabilistic interpretation of feedforward
    classification network outputs"; temperature as in Hinton et al. (2015), "Distilling the
    knowledge in a neural network".

    >>> softmax(torch.tensor([1.0, 2.0, 3.0]))
    tensor([0.0900, 0.2447, 0.6652])
    """
    scores = _validate.floating(scores, "scores")
    dim = _validate.dim(dim, scores.dim())
    temperature = _validate.real(temperature, "temperature", low=0.0, low_open=True)
    x = scores.to(compute_dtype(scores.dtype))
    if x.numel() == 0:
        return scores.clone()
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)  # all -inf slice: avoid -inf - -inf
    d = x - m                                                   # <= 0, and 0 at the maximum
    if temperature != 1.0:                                      # 0 stays 0 even if tau underflows
        d = torch.where(d == 0, d, d / temperature)
    e = torch.exp(d)
    total = e.sum(dim=dim, keepdim=True)                        # >= 1, or 0 for an all -inf slice
    weights = e / torch.where(total == 0, torch.ones_like(total), total)
    return weights.to(scores.dtype)


def entropy(weights, dim: int = -1) -> torch.Tensor:
    """Shannon entropy ``-sum_j p_j log p_j`` of probability vectors along ``dim``, in nats.

    Uses ``0 log 0 = 0``.  A uniform row over ``T_k`` keys has entropy ``log(T_k)`` (the
    maximum); a one-hot row has entropy 0; an all-zero row (a fully masked query, as
    :func:`attnlib.softmax` returns it) has entropy 0.

    Every slice must be a probability vector: no NaN, no infinity, no negative entry, and a
    sum within ``1e-3`` of 1 (``4 * eps`` of the dtype for float16/bfloat16, about 4e-3 and
    3e-2), or exactly 0.  The tolerance admits rounding (float32 sums over thousands of keys
    are off by less than 1e-5) and refuses vectors that are not distributions, for which the
    formula has no meaning (``[nan, .5]`` or ``[-.5, 1.5]`` would otherwise give a number).

    Shapes:
        weights: ``(..., T_k)`` (or any shape with the distribution along ``dim``);
        result: the input shape without ``dim``.

    Raises:
        TypeError: ``weights`` is not a floating tensor or numpy array; ``dim`` is not an int.
        ValueError: a slice is not a probability vector (see above); ``dim`` is out of range.

    Source: Shannon (1948), "A mathematical theory of communication", section 6.

    >>> round(entropy(torch.full((4,), 0.25)).item(), 4)  # log 4
    1.3863
    """
    weights = _validate.floating(weights, "weights")
    dim = _validate.dim(dim, weights.dim())
    _validate.distribution(weights, dim, "weights")
    p = weights.to(compute_dtype(weights.dtype))
    plogp = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))), torch.zeros_like(p))
    return (-plogp.sum(dim=dim)).to(weights.dtype)


def softmax_jacobian(weights) -> torch.Tensor:
    """Jacobian of softmax at the point whose output is ``weights``:
    ``J[..., i, j] = d p_i / d s_j = p_i (delta_ij - p_j)``, i.e. ``diag(p) - p p^T``.

    When ``p`` is nearly one-hot every entry of ``J`` is nearly 0: a saturated softmax
    passes almost no gradient back to its scores (chapter 4).  ``weights`` must be softmax
    outputs: probability vectors along the last dimension, with the tolerance of
    :func:`entropy`.

    Shapes:
        weights: ``(..., T_k)``; result: ``(..., T_k, T_k)``, symmetric.

    Raises:
        TypeError: ``weights`` is not a floating tensor or numpy array.
        ValueError: ``weights`` is a 0-d tensor, or is not a probability vector along its
            last dimension.

    Source: the derivative of softmax, e.g. Goodfellow, Bengio & Courville (2016), *Deep
    Learning*, section 6.2.2.3.

    >>> softmax_jacobian(torch.tensor([0.5, 0.5]))
    tensor([[ 0.2500, -0.2500],
            [-0.2500,  0.2500]])
    """
    p = _validate.floating(weights, "weights")
    if p.dim() == 0:
        raise ValueError("weights must have at least one dimension (..., T_k), got a scalar")
    _validate.distribution(p, -1, "weights")
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., T_k, T_k)


def soft_cap(scores, cap: float) -> torch.Tensor:
    """Logit soft-capping: ``cap * tanh(scores / cap)``, the scores squashed smoothly into
    ``(-cap, cap)``.

    For ``|s|`` small against ``cap`` it is close to the identity (``tanh x = x - x^3/3 + ...``,
    so the relative change is at most ``(s / cap)^2 / 3``: 0.3% at ``|s| = cap / 10``); it
    is odd and increasing, so the order of the scores in a row is kept (up to ties where large
    scores round to ``±cap`` in floating point); a score far above ``cap`` is pulled down to
    about ``cap``.  A score of ``-inf`` (a masked key) stays ``-inf``, so capping after
    masking keeps the mask; Gemma 2 caps before adding its mask, which gives the same weights.
    ``+inf`` becomes ``cap``; NaN stays NaN.  Float16/bfloat16 inputs are computed in float32
    and cast back.

    Shapes:
        scores: any shape, e.g. ``(..., T_q, T_k)``; result: same shape and dtype.

    Raises:
        TypeError: ``scores`` is not a floating tensor or numpy array; ``cap`` is not a real
            number.
        ValueError: ``cap`` is not a finite number > 0.

    Source: Gemma Team (2024), "Gemma 2: Improving Open Language Models at a Practical Size",
    which caps the attention logits at 50 and the final logits at 30.

    >>> soft_cap(torch.tensor([0.5, 5.0, 500.0, -float("inf")]), cap=50.0)
    tensor([ 0.5000,  4.9834, 50.0000,    -inf])
    """
    scores = _validate.floating(scores, "scores")
    cap = _validate.real(cap, "cap", low=0.0, low_open=True)
    x = scores.to(compute_dtype(scores.dtype))
    capped = cap * torch.tanh(x / cap)
    return torch.where(torch.isneginf(x), x, capped).to(scores.dtype)
