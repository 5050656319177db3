"""Three ways to read one matrix product, written out with explicit loops (chapter 3).

Attention multiplies two matrices twice: ``S = Q K^T`` (then scaled and softmaxed into
``A``) and ``out = A V``.  The functions here compute those products the slow, explicit way,
each following one reading of matrix multiplication as Gilbert Strang teaches it
(*Introduction to Linear Algebra*, 5th ed., 2016, section 1.3 and chapter 2):

* :func:`dot_product_view`: entry ``(i, j)`` of ``Q K^T`` is the dot product of query row
  ``i`` with key row ``j``.
* :func:`row_view`: row ``i`` of ``A V`` is a combination of the rows of ``V`` with the
  weights in row ``i`` of ``A``.
* :func:`column_view`: column ``c`` of ``A V`` is a combination of the columns of ``A`` with
  the numbers in column ``c`` of ``V``.
* :func:`outer_product_view`: ``A V`` is a sum of rank-one pieces, column ``j`` of ``A``
  times row ``j`` of ``V``, one piece per key.

They are for teaching and testing, not speed: each must equal ``@`` / ``torch.einsum`` up to
rounding, also for empty inputs (a sum over ``T_k = 0`` keys or ``d_k = 0`` features is 0).
:func:`attnlib.encoder.head_qkv` (in :mod:`attnlib.encoder`) provides real inputs: one head's
``q, k, v`` in the pretrained encoder for a sentence.

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key
width, ``d_v`` value width, ``d_model`` model width.  ``...`` is any broadcastable batch
shape such as ``(B, H)``.
"""
from __future__ import annotations

import torch

from . import _validate

__all__ = ["dot_product_view", "row_view", "column_view", "outer_product_view"]


def _check_pair(a, b, a_name: str, b_name: str, a_form: str, b_form: str, *, transpose_b: bool):
    """Check that ``a`` and ``b`` can be multiplied as ``a @ b`` (or ``a @ b^T``); return
    them as tensors and the shape of the product."""
    a, b = _validate.tensor(a, a_name), _validate.tensor(b, b_name)
    for name, form, t in ((a_name, a_form, a), (b_name, b_form, b)):
        _validate.min_dims(t, 2, name, form)
        _validate.floating(t, name)
    if a.dtype != b.dtype:
        raise TypeError(f"{a_name} and {b_name} must share a dtype, got {a.dtype} and {b.dtype}")
    _validate.same_device(**{a_name: a, b_name: b})
    inner_b = b.shape[-1] if transpose_b else b.shape[-2]
    if a.shape[-1] != inner_b:
        raise ValueError(
            f"shapes do not fit {a_form} x {b_form}: {a_name} {tuple(a.shape)} vs {b_name} {tuple(b.shape)}"
        )
    try:
        batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions must broadcast: {a_name} {tuple(a.shape)}, "
            f"{b_name} {tuple(b.shape)}"
        ) from None
    cols = b.shape[-2] if transpose_b else b.shape[-1]
    return a, b, (*batch, a.shape[-2], cols)


def dot_product_view(q, k) -> torch.Tensor:
    """``Q K^T`` entry by entry: ``S[..., i, j] = sum_c q[..., i, c] * k[..., j, c]``.

    Each entry is one dot product between a query row and a key row: how well query ``i``
    aligns with key ``j``.  Unscaled: divide by ``sqrt(d_k)`` yourself to get the scores of
    Vaswani et al. (2017), eq. (1).

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``; result ``(..., T_q, T_k)``.

    Raises:
        TypeError: non-tensor input, non-float dtype, or q and k differ in dtype.
        ValueError: rank below 2, different ``d_k``, batch dimensions that do not broadcast,
            or different devices.

    >>> dot_product_view(torch.ones(2, 3), torch.ones(4, 3)).shape
    torch.Size([2, 4])
    """
    q, k, shape = _check_pair(q, k, "q", "k", "(..., T_q, d_k)", "(..., T_k, d_k)", transpose_b=True)
    if 0 in shape[-2:] or q.shape[-1] == 0:                # nothing to loop over: empty, or sums of nothing
        return q.new_zeros(shape)
    rows = []
    for i in range(q.shape[-2]):
        entries = [(q[..., i, :] * k[..., j, :]).sum(-1) for j in range(k.shape[-2])]  # T_k x (...)
        rows.append(torch.stack(entries, dim=-1))  # (..., T_k)
    return torch.stack(rows, dim=-2)  # (..., T_q, T_k)


def row_view(weights, v) -> torch.Tensor:
    """``A V`` row by row: ``out[..., i, :] = sum_j weights[..., i, j] * v[..., j, :]``.

    Output row ``i`` is a combination of the rows of ``v`` (one per key) with the numbers in
    row ``i`` of ``weights``; for attention weights (non-negative rows summing to 1) it is
    a weighted average of the value vectors.

    Shapes:
        weights: ``(..., T_q, T_k)``, v: ``(..., T_k, d_v)``; result ``(..., T_q, d_v)``.

    Raises:
        TypeError: non-tensor input, non-float dtype, or mixed dtypes.
        ValueError: rank below 2, ``T_k`` mismatch, batch dimensions that do not broadcast,
            or different devices.

    >>> row_view(torch.tensor([[0.25, 0.75]]), torch.tensor([[0.0, 4.0], [8.0, 0.0]]))
    tensor([[6., 1.]])
    """
    weights, v, shape = _check_pair(weights, v, "weights", "v", "(..., T_q, T_k)", "(..., T_k, d_v)", transpose_b=False)
    if 0 in shape[-2:] or v.shape[-2] == 0:                # nothing to loop over: empty, or sums of nothing
        return weights.new_zeros(shape)
    rows = []
    for i in range(weights.shape[-2]):
        row = 0
        for j in range(v.shape[-2]):
            row = row + weights[..., i, j, None] * v[..., j, :]  # scalar weight times value row j
        rows.append(row)  # (..., d_v)
    return torch.stack(rows, dim=-2)  # (..., T_q, d_v)


def column_view(weights, v) -> torch.Tensor:
    """``A V`` column by column: ``out[..., :, c] = sum_j v[..., j, c] * weights[..., :, j]``.

    Output column ``c`` (value feature ``c`` at every position) is a combination of the
    columns of ``weights`` (one per key) with the numbers in column ``c`` of ``v``.

    Shapes:
        weights: ``(..., T_q, T_k)``, v: ``(..., T_k, d_v)``; result ``(..., T_q, d_v)``.

    Raises:
        TypeError: non-tensor input, non-float dtype, or mixed dtypes.
        ValueError: rank below 2, ``T_k`` mismatch, batch dimensions that do not broadcast,
            or different devices.

    >>> column_view(torch.tensor([[0.25, 0.75]]), torch.tensor([[0.0, 4.0], [8.0, 0.0]]))
    tensor([[6., 1.]])
    """
    weights, v, shape = _check_pair(weights, v, "weights", "v", "(..., T_q, T_k)", "(..., T_k, d_v)", transpose_b=False)
    if 0 in shape[-2:] or v.shape[-2] == 0:                # nothing to loop over: empty, or sums of nothing
        return weights.new_zeros(shape)
    cols = []
    for c in range(v.shape[-1]):
        col = 0
        for j in range(weights.shape[-1]):
            col = col + v[..., j, c, None] * weights[..., :, j]  # number v[j, c] times column j of A
        cols.append(col)  # (..., T_q)
    return torch.stack(cols, dim=-1)  # (..., T_q, d_v)


def outer_product_view(weights, v) -> torch.Tensor:
    """``A V`` as a sum of rank-one pieces: ``sum_j outer(weights[..., :, j], v[..., j, :])``.

    Piece ``j`` is key ``j``'s whole contribution: its value row, handed to every query in
    proportion to how much that query attends to key ``j`` (column ``j`` of ``A``).

    Shapes:
        weights: ``(..., T_q, T_k)``, v: ``(..., T_k, d_v)``; result ``(..., T_q, d_v)``.

    Raises:
        TypeError: non-tensor input, non-float dtype, or mixed dtypes.
        ValueError: rank below 2, ``T_k`` mismatch, batch dimensions that do not broadcast,
            or different devices.

    >>> outer_product_view(torch.tensor([[0.25, 0.75]]), torch.tensor([[0.0, 4.0], [8.0, 0.0]]))
    tensor([[6., 1.]])
    """
    weights, v, shape = _check_pair(weights, v, "weights", "v", "(..., T_q, T_k)", "(..., T_k, d_v)", transpose_b=False)
    if 0 in shape[-2:] or v.shape[-2] == 0:                # nothing to loop over: empty, or sums of nothing
        return weights.new_zeros(shape)
    total = 0
    for j in range(v.shape[-2]):
        total = total + weights[..., :, j, None] * v[..., j, None, :]  # (..., T_q, 1) * (..., 1, d_v)
    return total  # (..., T_q, d_v)

