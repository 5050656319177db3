"""Causal, padding and document masks, conversion between boolean and additive masks, and the
one path that applies a mask to attention scores (chapter 5).

Convention (the same as ``torch.nn.functional.scaled_dot_product_attention``):
a boolean mask holds ``True`` where a query **may attend** to a key; a float mask is
**added** to the scores, so ``0`` keeps a key and ``-inf`` removes it.

:func:`prepare_mask` checks a user's mask and :func:`apply_mask` applies it; both the
reference attention (:func:`attnlib.scaled_dot_product_attention`) and the tiled one
(:func:`attnlib.tiled_attention`) use them, and both build their causal masks with
:func:`causal_block`, so every path has one definition of the diagonal.

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys.
"""
from __future__ import annotations

import torch

from . import _validate

__all__ = ["causal_mask", "sliding_window_mask", "causal_block", "padding_mask", "document_ids", "document_mask",
           "to_additive", "to_boolean", "prepare_mask", "apply_mask", "ALIGNS"]

#: Where the causal triangle of a ``(T_q, T_k)`` mask is anchored (:func:`causal_mask`).
ALIGNS = ("top_left", "bottom_right")


def causal_block(q_start: int, q_end: int, k_start: int, k_end: int, *, device=None) -> torch.Tensor:
    """The rows ``q_start .. q_end-1`` and columns ``k_start .. k_end-1`` of the causal mask:
    entry ``(i, j)`` is ``True`` (may attend) when key ``k_start + j`` is not after query
    ``q_start + i``.  :func:`causal_mask` is the whole matrix; :func:`attnlib.tiled_attention`
    asks for one tile at a time.

    Shapes:
        result: ``(q_end - q_start, k_end - k_start)`` bool.

    Raises:
        TypeError: a bound is not an int.  ValueError: a bound is negative or an end comes
            before its start.

    >>> causal_block(2, 4, 1, 4).int()
    tensor([[1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    for start, end, what in ((q_start, q_end, "q"), (k_start, k_end, "k")):
        start = _validate.non_negative_int(start, f"{what}_start")
        if _validate.non_negative_int(end, f"{what}_end") < start:
            raise ValueError(f"{what}_end must be >= {what}_start, got {what}_start = {start}, {what}_end = {end}")
    rows = torch.arange(q_start, q_end, device=device)[:, None]   # (n_q, 1) query positions
    cols = torch.arange(k_start, k_end, device=device)[None, :]   # (1, n_k) key positions
    return cols <= rows                                            # (n_q, n_k)


def causal_mask(T_q: int, T_k: int | None = None, *, align: str = "top_left", device=None) -> torch.Tensor:
    """Boolean look-ahead mask: ``True`` where query ``i`` may attend to key ``j``.

    For a square mask (``T_k = T_q``, the default) query ``i`` sees keys ``0..i``.  When
    ``T_q != T_k`` the triangle can be anchored at either corner, and the two choices are
    different masks (they agree only when ``T_q == T_k``):

    * ``align="top_left"`` (the default): entry ``(i, j)`` is ``j <= i``, the first query is
      the first position.  This is what PyTorch's
      ``scaled_dot_product_attention(is_causal=True)`` does, and ``attnlib``'s ``is_causal``
      (``torch.nn.attention.bias.causal_upper_left``).
    * ``align="bottom_right"``: the ``T_q`` queries are the **last** ``T_q`` of the ``T_k``
      positions, query ``i`` at absolute position ``T_k - T_q + i``, so entry ``(i, j)`` is
      ``j <= T_k - T_q + i``: the last query sees every key.  This is the mask of decoding with a
      KV cache (``T_k - T_q`` tokens cached, ``T_q`` new ones; what
      :meth:`attnlib.KVCache.attend` applies) and of PyTorch's
      ``torch.nn.attention.bias.causal_lower_right`` and FlashAttention 2's ``causal=True``.
      With ``T_q > T_k`` the first ``T_q - T_k`` queries sit before position 0 and have no key
      at all (fully masked rows, as in ``causal_lower_right``).

    A length of 0 gives an empty mask.

    Shapes:
        result: ``(T_q, T_k)`` bool, ``T_k`` defaulting to ``T_q``.

    Raises:
        TypeError: ``T_q`` or ``T_k`` is not an int; ``device`` is not a device or name.
        ValueError: ``T_q`` or ``T_k`` is negative; ``align`` is not ``"top_left"`` or
            ``"bottom_right"``; ``device`` names no available device.

    Source: the decoder's masking in Vaswani et al. (2017), "Attention Is All You Need",
    section 3.2.3; the two alignments as PyTorch names them (``torch.nn.attention.bias``,
    ``CausalVariant.UPPER_LEFT`` / ``LOWER_RIGHT``) and FlashAttention 2.1's change of
    ``causal=True`` to bottom-right (Dao 2023, the flash-attn README).

    >>> causal_mask(3).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    >>> causal_mask(2, 4).int()                          # top-left: queries at positions 0, 1
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0]], dtype=torch.int32)
    >>> causal_mask(2, 4, align="bottom_right").int()    # queries at positions 2, 3
    tensor([[1, 1, 1, 0],
            [1, 1, 1, 1]], dtype=torch.int32)
    """
    T_q = _validate.non_negative_int(T_q, "T_q")
    T_k = T_q if T_k is None else _validate.non_negative_int(T_k, "T_k")
    _validate.choice(align, ALIGNS, "align")
    device = _validate.device(device)
    if align == "top_left":
        return causal_block(0, T_q, 0, T_k, device=device)
    if T_q <= T_k:                                   # queries at positions T_k - T_q .. T_k - 1
        return causal_block(T_k - T_q, T_k, 0, T_k, device=device)
    rows = torch.arange(T_q, device=device)[:, None] + (T_k - T_q)   # (T_q, 1), the first ones negative
    return torch.arange(T_k, device=device)[None, :] <= rows          # (T_q, T_k)


def sliding_window_mask(T: int, window: int, *, device=None) -> torch.Tensor:
    """Boolean sliding-window causal mask: query ``i`` may attend to key ``j`` iff
    ``i - window < j <= i``, the ``window`` most recent positions, itself included.

    Each query sees at most ``window`` keys, so one layer costs ``O(T * window)`` scores instead
    of ``O(T^2)``.  Stacked in ``L`` layers, position ``i`` can still receive information from
    ``L (window - 1)`` positions back: the receptive field is ``L (window - 1) + 1`` tokens
    (Beltagy et al. 2020, "Longformer", section 3.1; Jiang et al. 2023, "Mistral 7B", section 2).
    ``window >= T`` gives :func:`causal_mask`; ``window = 1`` lets each token see only itself.

    Shapes:
        result: ``(T, T)`` bool (True = may attend, as in :func:`causal_mask`).

    Raises:
        TypeError: ``T`` or ``window`` is not an int; ``device`` is not a device or name.
        ValueError: ``T`` negative; ``window`` below 1 (a query must see itself); ``device``
            names no available device.

    >>> sliding_window_mask(4, 2).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1]], dtype=torch.int32)
    """
    T = _validate.non_negative_int(T, "T")
    window = _validate.positive_int(window, "window")
    device = _validate.device(device)
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    return (j <= i) & (j > i - window)

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
    m = _validate.tensor(attention_mask, "attention_mask")
    if m.dim() != 2:
        raise ValueError(
            f"attention_mask must be (B, T), a tokenizer's 0/1 mask; got shape {tuple(m.shape)}"
        )
    if m.dtype != torch.bool and m.device.type != "meta" and not bool(((m == 0) | (m == 1)).all()):
        bad = m[(m != 0) & (m != 1)].flatten()[:3].tolist()
        raise ValueError(f"attention_mask must hold only 0 and 1, found values such as {bad}")
    return m.bool()[:, None, None, :]  # (B, 1, 1, T): broadcast over heads and queries


def document_ids(lengths, *, device=None) -> torch.Tensor:
    """The document id of each position of a packed row: ``lengths = (3, 2)`` gives
    ``(0, 0, 0, 1, 1)``, document ``d`` holding ``lengths[d]`` consecutive positions.

    Shapes:
        lengths: ``n_docs`` ints (list, tuple or 1-D integer tensor); result:
        ``(sum(lengths),)`` int64.

    Raises:
        TypeError: ``lengths`` is not a sequence of ints.  ValueError: a length below 1, or no
            length at all.

    >>> document_ids([3, 2])
    tensor([0, 0, 0, 1, 1])
    """
    if isinstance(lengths, torch.Tensor):
        if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype.is_complex \
                or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must be 1-D ints, got a tensor of shape {tuple(lengths.shape)} "
                            f"and dtype {lengths.dtype}")
        lengths = lengths.tolist()
    if not isinstance(lengths, (list, tuple)):
        raise TypeError(f"lengths must be a list, tuple or 1-D integer tensor, got {type(lengths).__name__}")
    if not lengths:
        raise ValueError("lengths must name at least one document")
    lengths = [_validate.positive_int(n, f"lengths[{d}]") for d, n in enumerate(lengths)]
    device = _validate.device(device)
    return torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                   torch.tensor(lengths, device=device))


def document_mask(ids, *, causal: bool = False) -> torch.Tensor:
    """Block-diagonal mask for **packed sequences**: several documents written one after the
    other in one row, each attending only to itself.  Entry ``(i, j)`` is ``True`` (may attend)
    when positions ``i`` and ``j`` belong to the same document, ``ids[i] == ids[j]``; with
    ``causal=True`` also ``j <= i`` (a decoder trained on packed documents).

    Packing fills a batch without padding; the mask keeps the documents from reading each other,
    so that every output equals the one of its document run alone (tested).  Positions must
    restart at each document as well (the mask says nothing about them).  Documents need not be
    contiguous: equal ids are one document wherever they stand.

    Shapes:
        ids: ``(T,)`` or ``(B, T)`` integer document ids (:func:`document_ids` builds them from
        lengths).  Result: ``(T, T)`` bool, or ``(B, 1, T, T)`` for ``(B, T)`` ids (broadcast
        over the heads, as :func:`padding_mask`).

    Raises:
        TypeError: ``ids`` is not an integer tensor or array; ``causal`` is not a bool.
        ValueError: ``ids`` is not 1-D or 2-D.

    Source: "document masking" of packed training sequences, e.g. Llama 3
    (Grattafiori et al. 2024, section 3.2: "an attention mask that prevents self-attention
    between different documents within the same sequence"); Krell et al. (2021), "Efficient
    Sequence Packing without Cross-contamination".

    >>> document_mask(document_ids([2, 1])).int()
    tensor([[1, 1, 0],
            [1, 1, 0],
            [0, 0, 1]], dtype=torch.int32)
    >>> document_mask(document_ids([2, 1]), causal=True).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [0, 0, 1]], dtype=torch.int32)
    """
    causal = _validate.flag(causal, "causal")
    ids = _validate.tensor(ids, "ids")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"ids must hold integer document ids, got dtype {ids.dtype}")
    if ids.dim() not in (1, 2):
        raise ValueError(f"ids must be (T,) or (B, T) document ids, got shape {tuple(ids.shape)}")
    same = ids[..., :, None] == ids[..., None, :]            # (..., T, T): same document
    if causal:
        T = ids.shape[-1]
        same = same & causal_mask(T, device=ids.device)      # and not in the future
    return same if ids.dim() == 1 else same[:, None]         # (T, T) or (B, 1, T, T)


def to_additive(mask, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask -> additive float mask: ``True`` -> ``0``, ``False`` -> ``-inf``.

    Shapes:
        mask: any shape; result: the same shape, of ``dtype``.

    Raises:
        TypeError: ``mask`` is not a boolean tensor or array, or ``dtype`` is not a floating
            dtype (given as ``torch.float16`` or by name, ``"float16"``).

    >>> to_additive(torch.tensor([True, False]), "float16")
    tensor([0., -inf], dtype=torch.float16)
    """
    mask = _validate.tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise TypeError(f"to_additive expects a bool mask, got dtype {mask.dtype}")
    dtype = _validate.float_dtype(dtype)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, float("-inf"))


def to_boolean(mask) -> torch.Tensor:
    """Additive float mask -> boolean mask: ``True`` (kept) for a bias, ``False`` (removed)
    for ``-inf`` and for any value at or below half the most negative number of the mask's
    dtype, ``torch.finfo(mask.dtype).min / 2``.

    The second rule recognises the extended masks of Hugging Face ``transformers``, which
    write ``torch.finfo(dtype).min`` in place of ``-inf`` (also after a small bias such as
    ALiBi is added to it, which leaves it near that minimum).  Every other finite value is
    kept as ``True``: a finite negative bias only down-weights a key.  A minimum of a
    *smaller* dtype stored in a larger one (``-65504``, float16's minimum, in a float32
    mask) is such a finite bias and stays ``True``.

    Why it matters: added to the scores, ``finfo.min`` is not ``-inf``.  Masked keys get
    weight 0 only while the row has an unmasked key; a query whose every key carries the
    minimum is *not* treated as fully masked (see
    :func:`attnlib.scaled_dot_product_attention`).  ``to_boolean`` turns such a mask into
    one with that meaning.

    Shapes:
        mask: any shape; result: the same shape, bool.

    Raises:
        TypeError: ``mask`` is not a floating tensor or array.
        ValueError: ``mask`` holds NaN or ``+inf`` (no meaning as an additive mask).

    >>> to_boolean(torch.tensor([0.0, -2.5, torch.finfo(torch.float32).min, float("-inf")]))
    tensor([ True,  True, False, False])
    """
    mask = _validate.tensor(mask, "mask")
    if not mask.is_floating_point():
        raise TypeError(f"to_boolean expects a float (additive) mask, got dtype {mask.dtype}")
    if mask.device.type != "meta" and bool((torch.isnan(mask) | (mask == float("inf"))).any()):
        raise ValueError("an additive mask must not hold NaN or +inf (softmax would give NaN)")
    return mask > torch.finfo(mask.dtype).min / 2


def prepare_mask(mask, batch_shape: tuple, T_q: int, T_k: int, device, *,
                 is_causal: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """Check the ``mask`` and ``is_causal`` arguments of an attention call and return the mask
    as a tensor of at least 2 dimensions (a ``(T_k,)`` key mask becomes ``(1, T_k)``), or
    ``None`` when there is none.  The causal mask itself is not built here: each attention
    path builds what it needs with :func:`causal_block`.

    With ``dtype`` (the dtype of ``q``), a float mask is **rounded to that dtype** here, once,
    for every attention path: this is the one rule that makes the reference, tiled and
    PyTorch paths agree, since PyTorch's kernel takes its mask in ``q``'s dtype.  A value the
    dtype cannot hold becomes ``-inf`` and removes its key: ``-1e9`` for float16 (anything at
    or below ``-65520``), float32's ``finfo.min`` for bfloat16.  A boolean mask is unchanged.

    Shapes:
        mask: broadcastable to ``(*batch_shape, T_q, T_k)``.

    Raises:
        TypeError: ``mask`` is not a tensor/numpy array, or neither bool nor floating point;
            ``is_causal`` is not a bool.
        ValueError: ``mask`` does not broadcast to ``(*batch_shape, T_q, T_k)``, lives on
            another device than ``device``, is given together with ``is_causal=True``, or is
            a float mask holding NaN or ``+inf`` (added to the scores, either makes its row
            NaN; ``-inf`` is the removal).
    """
    is_causal = _validate.flag(is_causal, "is_causal")
    if dtype is not None:
        dtype = _validate.float_dtype(dtype)
    if mask is None:
        return None
    if is_causal:
        raise ValueError(
            "pass either mask or is_causal=True, not both (as in PyTorch); to combine a "
            "causal mask with another boolean mask, use causal_mask(T_q, T_k) & mask"
        )
    mask = _validate.tensor(mask, "mask")
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
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"(..., T_q, T_k) = {target}"
        )
    if mask.device != torch.device(device):
        raise ValueError(f"mask is on {mask.device} but q, k, v are on {device}")
    if dtype is not None and mask.dtype != torch.bool:
        mask = mask.to(dtype)                                            # the one rounding, in every path
    if mask.is_floating_point() and mask.device.type != "meta":
        bad = torch.isnan(mask) | (mask == float("inf"))
        if bool(bad.any()):
            raise ValueError(f"a float mask is added to the scores, so it must not hold NaN or +inf (either makes "
                             f"the row NaN; -inf removes a key; a value beyond q's dtype rounds to +-inf); found "
                             f"{mask[bad].flatten()[0].item()} at index {tuple(torch.nonzero(bad)[0].tolist())}")
    while mask.dim() < 2:                                                # e.g. a (T_k,) key mask
        mask = mask.unsqueeze(0)
    return mask


def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Scores with ``mask`` applied: a boolean mask sets the removed (``False``) entries to
    ``-inf``; a float mask is added, after a cast to the scores' dtype (the compute dtype).

    Shapes:
        scores: ``(..., T_q, T_k)``; mask: broadcastable to it, or ``None`` (no change).
        Result: the broadcast shape of the two.

    Raises:
        TypeError: ``scores`` is not a floating tensor; ``mask`` is not a bool or floating
            tensor (an int mask would be added as a bias of 0s and 1s).

    >>> apply_mask(torch.zeros(2, 2), causal_mask(2))
    tensor([[0., -inf],
            [0., 0.]])
    """
    scores = _validate.floating(scores, "scores")
    if mask is None:
        return scores
    mask = _validate.tensor(mask, "mask")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"mask must be bool (True = may attend) or floating point (added to the scores), "
                        f"got dtype {mask.dtype}")
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))                  # removed keys
    return scores + mask.to(scores.dtype)                                # additive bias
