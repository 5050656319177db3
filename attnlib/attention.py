"""Scaled dot-product attention, written to be read (chapters 2 to 5).

``out = softmax(Q K^T * scale + mask) V`` with ``scale = 1/sqrt(d_k)``
(Vaswani et al., 2017, "Attention Is All You Need", equation 1).

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key
width, ``d_v`` value width.  ``...`` stands for any leading batch dimensions, e.g. ``(B, H)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .devices import as_tensor
from .masks import causal_mask
from .softmax import softmax

__all__ = ["scaled_dot_product_attention", "attention_scores", "check_qkv", "prepare_mask"]


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


def check_qkv(q, k, v) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Convert ``q, k, v`` to tensors and check that they fit together.

    Raises:
        TypeError: an input is not a tensor/numpy array, is not floating point, or the
            three differ in dtype.
        ValueError: an input has fewer than 2 dimensions; q and k differ in ``d_k``;
            k and v differ in ``T_k``; the leading (batch) dimensions do not broadcast;
            the inputs are on different devices.
    """
    q, k, v = as_tensor(q, "q"), as_tensor(k, "k"), as_tensor(v, "v")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., T, d), got shape {_shape(t)}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share a dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got q {q.device}, k {k.device}, v {v.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share d_k (last dimension): q {_shape(q)} vs k {_shape(k)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must share T_k (second-to-last dimension): k {_shape(k)} vs v {_shape(v)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "the leading (batch) dimensions of q, k and v must broadcast: "
            f"q {_shape(q)}, k {_shape(k)}, v {_shape(v)}"
        ) from None
    return q, k, v


def prepare_mask(mask, batch_shape: tuple, T_q: int, T_k: int, device) -> torch.Tensor:
    """Check a user mask and return it as a tensor on ``device``.

    Raises:
        TypeError: not a tensor/numpy array, or neither bool nor floating point.
        ValueError: does not broadcast to ``(*batch_shape, T_q, T_k)``, or lives on
            another device.
    """
    mask = as_tensor(mask, "mask")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            "mask must be bool (True = may attend) or floating point (added to the scores), "
            f"got dtype {mask.dtype}"
        )
    target = (*batch_shape, T_q, T_k)
    try:
        ok = torch.broadcast_shapes(mask.shape, target) == torch.Size(target)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"mask of shape {_shape(mask)} does not broadcast to the scores' shape "
            f"(..., T_q, T_k) = {target}"
        )
    if mask.device != torch.device(device):
        raise ValueError(f"mask is on {mask.device} but q, k, v are on {device}")
    return mask


def attention_scores(q, k, scale: float | None = None) -> torch.Tensor:
    """Scaled scores ``S = Q K^T * scale`` before any mask or softmax.

    Entry ``(..., i, j)`` is the dot product of query row ``i`` with key row ``j``, times
    ``scale`` (default ``1/sqrt(d_k)``).

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``; result: ``(..., T_q, T_k)``.

    >>> attention_scores(torch.ones(2, 4), torch.ones(3, 4)).shape
    torch.Size([2, 3])
    """
    q, k, _ = check_qkv(q, k, k)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return (q @ k.transpose(-2, -1)) * scale  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)


def scaled_dot_product_attention(
    q, k, v, mask=None, *, is_causal: bool = False, scale: float | None = None,
    backend: str = "reference",
):
    """Attention of every query over all keys: ``softmax(Q K^T * scale + mask) V``.

    The same semantics as ``torch.nn.functional.scaled_dot_product_attention`` with
    ``dropout_p=0``, but returning the attention weights too:

    * ``mask`` bool: ``True`` means the query **may attend** to the key;
      ``mask`` float: **added** to the scaled scores (``-inf`` removes a key).
    * ``is_causal=True`` applies :func:`attnlib.causal_mask`, whose lower triangle is
      aligned to the top-left corner when ``T_q != T_k``.  Passing ``mask`` as well is an
      error, as in PyTorch.
    * ``scale`` defaults to ``1/sqrt(d_k)``.
    * **Fully masked rows**: a query whose every key is masked gets weights of exactly 0
      and an output of exactly 0, never NaN (PyTorch's kernels do the same).
    * Scores and softmax are computed in float32 for float16/bfloat16 inputs; the
      weights are cast back to the input dtype before multiplying the values.

    Args:
        backend: ``"reference"`` (default) computes the steps explicitly and returns the
            weights.  ``"torch"`` defers to PyTorch's fused kernel, which never forms the
            weight matrix, and returns ``weights=None``; use it when only ``out`` is needed.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``,
        mask: broadcastable to ``(..., T_q, T_k)``.
        Returns ``out`` ``(..., T_q, d_v)`` and ``weights`` ``(..., T_q, T_k)``.

    Raises:
        TypeError: non-tensor input, non-float q/k/v, mixed dtypes, or a mask that is
            neither bool nor float.
        ValueError: rank below 2, ``d_k`` mismatch between q and k, ``T_k`` mismatch
            between k and v, batch dimensions that do not broadcast, a mask that does not
            broadcast, ``mask`` together with ``is_causal=True``, an unknown backend.

    Source: Vaswani et al. (2017), "Attention Is All You Need", eq. (1).

    >>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
    >>> out, weights = scaled_dot_product_attention(q, k, v)
    >>> out.shape, weights.shape
    (torch.Size([2, 5, 3]), torch.Size([2, 5, 7]))
    """
    if backend not in ("reference", "torch"):
        raise ValueError(f"backend must be 'reference' or 'torch', got {backend!r}")
    q, k, v = check_qkv(q, k, v)
    if mask is not None and is_causal:
        raise ValueError(
            "pass either mask or is_causal=True, not both (as in PyTorch); to combine a "
            "causal mask with another boolean mask, use causal_mask(T_q, T_k) & mask"
        )
    T_q, T_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    batch_shape = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    if mask is not None:
        mask = prepare_mask(mask, batch_shape, T_q, T_k, q.device)
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)

    if backend == "torch":
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
        return out, None

    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = (q.to(compute) @ k.to(compute).transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if is_causal:
        mask = causal_mask(T_q, T_k, device=q.device)                    # (T_q, T_k)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))            # removed keys
        else:
            scores = scores + mask.to(compute)                           # additive bias
    weights = softmax(scores, dim=-1).to(q.dtype)                        # (..., T_q, T_k), rows sum to 1 (or 0)
    out = weights @ v                                                    # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, weights
