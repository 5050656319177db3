"""Attention at scale: the online softmax and exact attention computed tile by tile (chapter 11).

The direct formula ``softmax(Q K^T * scale + mask) V`` holds a ``(T_q, T_k)`` score matrix
and a ``(T_q, T_k)`` weight matrix in memory: quadratic in the sequence length.  The online
softmax (Milakov & Gimelshein, 2018, "Online normalizer calculation for softmax",
algorithm 3) computes the softmax normaliser in one pass over a stream of score blocks by
keeping a running maximum ``m`` and a running sum ``l`` and rescaling ``l`` by
``exp(m_old - m_new)`` whenever the maximum grows.  Applying the same rescaling to a running
weighted sum of value rows gives exact attention one ``(block, block)`` tile at a time
(Rabe & Staats, 2021; Dao et al., 2022, "FlashAttention", algorithm 1).

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key
width, ``d_v`` value width.  ``...`` stands for any leading batch dimensions, e.g. ``(B, H)``.
"""
from __future__ import annotations

import torch

from . import _validate
from .attention import check_qkv, resolve_scale
from .masks import apply_mask, causal_block, prepare_mask
from .softmax import compute_dtype

__all__ = ["online_softmax_step", "online_softmax", "tiled_attention", "DEFAULT_BLOCK_SIZE"]

#: Rows per query block and per key block of :func:`tiled_attention` (see its docstring).
DEFAULT_BLOCK_SIZE = 256


def _safe(m: torch.Tensor) -> torch.Tensor:
    """The running maximum with ``-inf`` (nothing seen yet, or all masked) replaced by 0, so
    that ``exp(s - m)`` and ``exp(m_old - m)`` never compute ``-inf - (-inf)`` = NaN."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def online_softmax_step(m, l, block):
    """One update of the online softmax: fold a new block of scores into the running
    maximum ``m`` and running sum ``l = sum_j exp(s_j - m)`` of the scores seen so far.

    ``m_new = max(m, max_j block_j)``;
    ``l_new = l * exp(m - m_new) + sum_j exp(block_j - m_new)``.
    The factor ``correction = exp(m - m_new)`` (at most 1) re-expresses the old sum relative
    to the new maximum.  Start from ``m = -inf``, ``l = 0``.  Scores of ``-inf`` (masked
    keys) contribute 0; while every score seen is ``-inf``, ``l`` stays 0 and no NaN appears.

    Shapes:
        m, l: ``(...)``; block: ``(..., n)`` (``n`` new scores per row).
        Returns ``(m_new, l_new, correction)``, each ``(...)``.

    An empty block (``n = 0``) changes nothing (``correction`` is then ``exp(m - m)``: 1, or
    0 while nothing has been seen).

    Raises:
        TypeError: an input is not a floating tensor / numpy array.
        ValueError: ``block`` has no last dimension or its leading shape does not match ``m``;
            the three are on different devices.

    Source: Milakov & Gimelshein (2018), algorithm 3.

    >>> m, l, c = online_softmax_step(torch.tensor(float("-inf")), torch.tensor(0.0), torch.tensor([0.0, 0.0]))
    >>> m.item(), l.item()
    (0.0, 2.0)
    """
    m, l, block = (_validate.floating(t, name) for t, name in ((m, "m"), (l, "l"), (block, "block")))
    if block.dim() < 1 or block.shape[:-1] != m.shape or m.shape != l.shape:
        raise ValueError(
            "expected m and l of shape (...) and block of shape (..., n): got "
            f"m {tuple(m.shape)}, l {tuple(l.shape)}, block {tuple(block.shape)}"
        )
    _validate.same_device(m=m, l=l, block=block)
    if block.shape[-1] == 0:                                             # nothing new
        return m, l, torch.exp(m - _safe(m))
    m_new = torch.maximum(m, block.amax(dim=-1))                        # (...)
    correction = torch.exp(m - _safe(m_new))                             # (...), exp(-inf) = 0 at the start
    l_new = l * correction + torch.exp(block - _safe(m_new)[..., None]).sum(dim=-1)
    return m_new, l_new, correction


def online_softmax(score_blocks) -> torch.Tensor:
    """Softmax over the concatenation of a stream of score blocks, computed with the online
    normaliser: one pass over the blocks for the running maximum and sum
    (:func:`online_softmax_step`), then one pass that writes ``exp(s - m) / l`` block by block.

    Equal to ``attnlib.softmax(torch.cat(score_blocks, -1), dim=-1)``, without ever
    computing the maximum of the whole row first.  Rows whose every score is ``-inf`` get
    all-zero weights, and rows holding a ``+inf`` or NaN score get NaN weights, as in
    :func:`attnlib.softmax`.

    Shapes:
        score_blocks: a sequence of tensors ``(..., n_b)`` with equal leading shapes;
        result: ``(..., sum_b n_b)``.

    Raises:
        TypeError: ``score_blocks`` is not a list/tuple of floating tensors.
        ValueError: it is empty, or the blocks' leading shapes differ.

    Source: Milakov & Gimelshein (2018), algorithm 3.

    >>> online_softmax([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])
    tensor([0.0900, 0.2447, 0.6652])
    """
    if not isinstance(score_blocks, (list, tuple)):
        raise TypeError(f"score_blocks must be a list or tuple of tensors, got {type(score_blocks).__name__}")
    if not score_blocks:
        raise ValueError("score_blocks must hold at least one block, got an empty sequence")
    blocks = [_validate.floating(b, f"score_blocks[{i}]") for i, b in enumerate(score_blocks)]
    lead = blocks[0].shape[:-1] if blocks[0].dim() else None
    for i, b in enumerate(blocks):
        if b.dim() < 1:
            raise ValueError(f"score_blocks[{i}] must be (..., n_b), got a 0-d tensor")
        if b.shape[:-1] != lead:
            raise ValueError(
                "score_blocks must all be (..., n_b) with the same leading shape: block 0 "
                f"{tuple(blocks[0].shape)} vs block {i} {tuple(b.shape)}"
            )
    _validate.same_device(**{f"score_blocks[{i}]": b for i, b in enumerate(blocks)})
    dtype = blocks[0].dtype
    compute = compute_dtype(dtype)
    m = torch.full(lead, float("-inf"), dtype=compute, device=blocks[0].device)
    l = torch.zeros(lead, dtype=compute, device=blocks[0].device)
    for b in blocks:                                                     # pass 1: normaliser
        m, l, _ = online_softmax_step(m, l, b.to(compute))
    m_safe = _safe(m)[..., None]
    l_safe = torch.where(l > 0, l, torch.ones_like(l))[..., None]
    out = torch.cat([torch.exp(b.to(compute) - m_safe) / l_safe for b in blocks], dim=-1)   # pass 2
    # A +inf or NaN score leaves no meaningful distribution: the whole row is NaN, exactly as
    # attnlib.softmax (and torch.softmax) give it, never a row that looks like weights.
    bad = torch.zeros(lead, dtype=torch.bool, device=out.device)
    for b in blocks:
        bad |= (torch.isnan(b) | torch.isposinf(b)).any(dim=-1)
    out = torch.where(bad[..., None], torch.full_like(out, float("nan")), out)
    return out.to(dtype)


def tiled_attention(q, k, v, mask=None, *, is_causal: bool = False, scale: float | None = None,
                    block_size: int = DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """Exact attention ``softmax(Q K^T * scale + mask) V`` computed one tile at a time.

    Queries are cut into blocks of ``block_size`` rows and keys/values into blocks of
    ``block_size`` rows.  For each query block the key blocks stream past; each tile of
    scores updates a running maximum ``m``, a running sum ``l`` and a running weighted sum
    ``acc`` of value rows, all rescaled by ``exp(m_old - m_new)`` when the maximum grows
    (the online softmax, see :func:`online_softmax_step`).  At the end ``out = acc / l``.
    The result equals :func:`attnlib.scaled_dot_product_attention` up to rounding.

    **What is materialised.**  Never a ``(T_q, T_k)`` tensor.  Besides the inputs and the
    output ``(..., T_q, d_v)``, at any moment: at most three tiles of shape
    ``(..., block, block)`` (the scores, the scores minus the running maximum, their
    exponentials), the slice of the mask for that tile, and per query block the state
    ``m, l`` ``(..., block, 1)`` and ``acc`` ``(..., block, d_v)``.  For one head with
    ``block_size = 256`` (the default) in float32 a tile is 256 KiB whatever ``T_q`` and
    ``T_k`` are; memory grows only through the output, linearly in ``T_q``.

    **The default block.**  Chosen from ``bench/results/attention_cpu.json`` (one CPU thread,
    blocks 128, 256, 512 and 1024, T = 128 to 16384, with and without the causal mask): 256
    is the block whose worst slowdown against the fastest block at any measured T >= 512 is
    the smallest.  Larger blocks mean fewer Python-level tile steps but larger tiles;
    ``tests/test_readme_figures.py`` recomputes the choice from the committed measurement.
    On a GPU each tile step is a handful of kernel launches, so the launches dominate and
    larger blocks win outright (``bench/results/attention_cuda.md``, H200, T = 16384: 1.2 s
    per call with blocks of 256, 60 ms with blocks of 1024): pass ``block_size`` there,
    or use ``scaled_dot_product_attention(..., backend="torch")``.  Float16/bfloat16 inputs
    are computed in float32 and the output cast back.

    Same semantics as :func:`attnlib.scaled_dot_product_attention`: bool ``mask`` ``True``
    = may attend; float ``mask`` added to the scaled scores; ``is_causal=True`` masks with
    the lower triangle aligned top-left (key blocks wholly above it are skipped); ``mask``
    together with ``is_causal`` is an error; a fully masked query row, and every row when
    ``T_k = 0``, gets an output of 0; a row whose keys all carry a finite minimum such as
    ``finfo.min`` is not fully masked (see the reference).  Masks reach the scores through
    the same functions as in the reference, :func:`attnlib.masks.apply_mask` and
    :func:`attnlib.masks.causal_block`.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``,
        mask: broadcastable to ``(..., T_q, T_k)``; result ``out``: ``(..., T_q, d_v)``.

    Raises:
        TypeError: as :func:`attnlib.scaled_dot_product_attention`, or ``block_size`` is not
            an int.
        ValueError: as :func:`attnlib.scaled_dot_product_attention`, or ``block_size < 1``.

    Source: Rabe & Staats (2021); Dao et al. (2022), "FlashAttention", algorithm 1 (forward).

    >>> q, k, v = torch.randn(2, 300, 16), torch.randn(2, 200, 16), torch.randn(2, 200, 8)
    >>> tiled_attention(q, k, v, block_size=64).shape
    torch.Size([2, 300, 8])
    """
    q, k, v = check_qkv(q, k, v)
    T_q, T_k, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    batch_shape = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    mask = prepare_mask(mask, batch_shape, T_q, T_k, q.device, is_causal=is_causal, dtype=q.dtype)
    is_causal = bool(is_causal)
    block_size = _validate.positive_int(block_size, "block_size")
    scale = resolve_scale(scale, d_k)

    compute = compute_dtype(q.dtype)
    out = torch.empty((*batch_shape, T_q, d_v), dtype=q.dtype, device=q.device)
    for qs in range(0, T_q, block_size):
        qe = min(qs + block_size, T_q)
        q_blk = q[..., qs:qe, :].to(compute) * scale                     # (..., bq, d_k)
        m = torch.full((*batch_shape, qe - qs, 1), float("-inf"), dtype=compute, device=q.device)
        l = torch.zeros((*batch_shape, qe - qs, 1), dtype=compute, device=q.device)
        acc = torch.zeros((*batch_shape, qe - qs, d_v), dtype=compute, device=q.device)
        # With a causal mask, query i sees keys 0..i: key blocks starting after qe - 1 are empty.
        k_end = min(T_k, qe) if is_causal else T_k
        for ks in range(0, k_end, block_size):
            ke = min(ks + block_size, T_k)
            scores = q_blk @ k[..., ks:ke, :].to(compute).transpose(-2, -1)  # (..., bq, bk)
            if is_causal:
                if ke - 1 > qs:                                          # tile crosses the diagonal
                    scores = apply_mask(scores, causal_block(qs, qe, ks, ke, device=q.device))
            elif mask is not None:
                rs = slice(None) if mask.shape[-2] == 1 else slice(qs, qe)
                cs = slice(None) if mask.shape[-1] == 1 else slice(ks, ke)
                scores = apply_mask(scores, mask[..., rs, cs])           # tile (..., bq or 1, bk or 1)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            m_safe = _safe(m_new)
            correction = torch.exp(m - m_safe)                           # (..., bq, 1), <= 1
            p = torch.exp(scores - m_safe)                               # (..., bq, bk), unnormalised weights
            l = torch.addcmul(p.sum(dim=-1, keepdim=True), l, correction)      # l * correction + row sums
            acc = torch.addcmul(p @ v[..., ks:ke, :].to(compute), acc, correction)  # (..., bq, d_v)
            m = m_new
        out[..., qs:qe, :] = (acc / torch.where(l > 0, l, torch.ones_like(l))).to(q.dtype)
    return out
