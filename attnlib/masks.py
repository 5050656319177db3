"""Causal and padding masks, and conversion between boolean and additive masks (chapter 5).

Convention (the same as ``torch.nn.functional.scaled_dot_product_attention``):
a boolean mask holds ``True`` where a query **may attend** to a key; a float mask is
**added** to the scores, so ``0`` keeps a key and ``-inf`` removes it.
"""
from __future__ import annotations

import torch

from .devices import as_tensor

__all__ = ["causal_mask", "padding_mask", "to_additive", "to_boolean"]


def _check_length(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def causal_mask(T_q: int, T_k: int | None = None, *, device=None) -> torch.Tensor:
    """Boolean look-ahead mask: query ``i`` may attend to keys ``0..i``.

    The lower triangle is aligned to the top-left corner, as in PyTorch's
    ``scaled_dot_product_attention(is_causal=True)``: entry ``(i, j)`` is ``j <= i``
    also when ``T_q != T_k``.

    Shapes:
        result: ``(T_q, T_k)`` bool, ``T_k`` defaulting to ``T_q``.

    Raises:
        ValueError: ``T_q`` or ``T_k`` is not a positive int.

    >>> causal_mask(3).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    T_q = _check_length(T_q, "T_q")
    T_k = T_q if T_k is None else _check_length(T_k, "T_k")
    return torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril()


def padding_mask(attention_mask) -> torch.Tensor:
    """Turn a tokenizer's ``attention_mask`` (1 = real token, 0 = padding) into a boolean
    key mask that broadcasts against attention scores of shape ``(B, H, T_q, T)``.

    Only keys are masked: a padding position's own query row still attends to the real
    tokens, so nothing becomes NaN; its output is ignored downstream.

    Shapes:
        attention_mask: ``(B, T)`` of 0/1 (int, bool or float); result: ``(B, 1, 1, T)`` bool.

    Raises:
        TypeError: not a tensor or numpy array.
        ValueError: not 2-D, or holds values other than 0 and 1.

    >>> padding_mask(torch.tensor([[1, 1, 0]])).shape
    torch.Size([1, 1, 1, 3])
    """
    m = as_tensor(attention_mask, "attention_mask")
    if m.dim() != 2:
        raise ValueError(
            f"attention_mask must be (B, T), a tokenizer's 0/1 mask; got shape {tuple(m.shape)}"
        )
    if m.dtype != torch.bool and not bool(((m == 0) | (m == 1)).all()):
        bad = m[(m != 0) & (m != 1)].flatten()[:3].tolist()
        raise ValueError(f"attention_mask must hold only 0 and 1, found values such as {bad}")
    return m.bool()[:, None, None, :]  # (B, 1, 1, T): broadcast over heads and queries


def to_additive(mask, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask -> additive float mask: ``True`` -> ``0``, ``False`` -> ``-inf``.

    Raises:
        TypeError: ``mask`` is not boolean, or ``dtype`` is not a floating dtype.
    """
    mask = as_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise TypeError(f"to_additive expects a bool mask, got dtype {mask.dtype}")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype, got {dtype}")
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, float("-inf"))


def to_boolean(mask) -> torch.Tensor:
    """Additive float mask -> boolean mask: ``-inf`` -> ``False`` (removed), anything else
    -> ``True``.  Finite negative biases are kept as ``True``: they only down-weight a key.

    Raises:
        TypeError: ``mask`` is not a floating tensor.
    """
    mask = as_tensor(mask, "mask")
    if not mask.is_floating_point():
        raise TypeError(f"to_boolean expects a float (additive) mask, got dtype {mask.dtype}")
    return mask != float("-inf")
