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

from . import _validate
from .masks import apply_mask, causal_mask, prepare_mask
from .softmax import compute_dtype, softmax

__all__ = ["scaled_dot_product_attention", "attention_scores", "check_qkv", "check_qk",
           "prepare_mask", "resolve_scale", "repeat_kv", "kv_head_of", "qk_norm_scores"]


def _check_inputs(named: dict) -> dict:
    """Tensors, floating point, at least 2-D, one dtype, one device (in that order)."""
    tensors = {}
    for name, x in named.items():
        t = _validate.min_dims(_validate.tensor(x, name), 2, name, "(..., T, d)")
        tensors[name] = _validate.floating(t, name)
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) > 1:
        listed = ", ".join(f"{n} {t.dtype}" for n, t in tensors.items())
        raise TypeError(f"{', '.join(tensors)} must share a dtype, got {listed}")
    _validate.same_device(**tensors)
    return tensors


def _check_d_k(q: torch.Tensor, k: torch.Tensor) -> None:
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share d_k (last dimension): q {_validate.shape_of(q)} vs k {_validate.shape_of(k)}"
        )
    if q.shape[-1] == 0:
        raise ValueError(
            f"q and k must have d_k >= 1 (a query or key of width 0 has no direction): "
            f"q {_validate.shape_of(q)}, k {_validate.shape_of(k)}"
        )


def _check_batch(**tensors) -> tuple:
    try:
        return tuple(torch.broadcast_shapes(*(t.shape[:-2] for t in tensors.values())))
    except RuntimeError:
        listed = ", ".join(f"{n} {_validate.shape_of(t)}" for n, t in tensors.items())
        raise ValueError(
            f"the leading (batch) dimensions of {', '.join(tensors)} must broadcast: {listed}"
        ) from None


def _hint_gqa(q, k, v) -> None:
    """A head-count mismatch that looks like grouped-query attention gets a message naming
    ``enable_gqa=True`` (instead of the generic "must broadcast")."""
    if not all(isinstance(x, torch.Tensor) and x.dim() >= 3 for x in (q, k, v)):
        return
    H, H_kv = q.shape[-3], k.shape[-3]
    if H != H_kv and H_kv > 1 and v.shape[-3] == H_kv and H % H_kv == 0:
        raise ValueError(
            f"q has H = {H} heads but k and v have H_kv = {H_kv}: pass enable_gqa=True for "
            f"grouped-query attention (query head h reads key/value head h // {H // H_kv}); "
            f"q {_validate.shape_of(q)}, k {_validate.shape_of(k)}, v {_validate.shape_of(v)}"
        )


def check_qk(q, k) -> tuple[torch.Tensor, torch.Tensor]:
    """Convert ``q, k`` to tensors and check that they fit together (see :func:`check_qkv`;
    nothing here mentions a ``v``).

    Raises:
        TypeError: an input is not a tensor/numpy array or not floating point, or the two
            differ in dtype.
        ValueError: an input has fewer than 2 dimensions; q and k differ in ``d_k``, or
            ``d_k = 0``; the batch dimensions do not broadcast; different devices.
    """
    t = _check_inputs({"q": q, "k": k})
    q, k = t["q"], t["k"]
    _check_d_k(q, k)
    _check_batch(q=q, k=k)
    return q, k


def check_qkv(q, k, v) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Convert ``q, k, v`` to tensors and check that they fit together.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``, with batch
        dimensions that broadcast.  ``T_q``, ``T_k`` and ``d_v`` may be 0; ``d_k`` may not.

    Raises:
        TypeError: an input is not a tensor/numpy array, is not floating point, or the
            three differ in dtype.
        ValueError: an input has fewer than 2 dimensions; q and k differ in ``d_k`` or
            ``d_k = 0``; k and v differ in ``T_k``; the leading (batch) dimensions do not
            broadcast; the inputs are on different devices.
    """
    t = _check_inputs({"q": q, "k": k, "v": v})
    q, k, v = t["q"], t["k"], t["v"]
    _check_d_k(q, k)
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must share T_k (second-to-last dimension): k {_validate.shape_of(k)} "
            f"vs v {_validate.shape_of(v)}"
        )
    _check_batch(q=q, k=k, v=v)
    return q, k, v


def resolve_scale(scale, d_k: int) -> float:
    """``scale`` as a float, ``1/sqrt(d_k)`` when it is ``None``.  Any finite real number is
    accepted (0 gives uniform weights, a negative scale reverses the preferences), as in
    PyTorch.

    Raises:
        TypeError: not a real number.  ValueError: NaN or infinite.
    """
    if scale is None:
        return 1.0 / math.sqrt(d_k)
    return _validate.real(scale, "scale")


def attention_scores(q, k, scale: float | None = None) -> torch.Tensor:
    """Scaled scores ``S = Q K^T * scale`` before any mask or softmax.

    Entry ``(..., i, j)`` is the dot product of query row ``i`` with key row ``j``, times
    ``scale`` (default ``1/sqrt(d_k)``).  Computed in the inputs' dtype.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``; result: ``(..., T_q, T_k)``.

    Raises:
        TypeError: as :func:`check_qk`, or ``scale`` is not a real number.
        ValueError: as :func:`check_qk`, or ``scale`` is NaN or infinite.

    Source: Vaswani et al. (2017), "Attention Is All You Need", eq. (1), inside the softmax.

    >>> attention_scores(torch.ones(2, 4), torch.ones(3, 4)).shape
    torch.Size([2, 3])
    """
    q, k = check_qk(q, k)
    scale = resolve_scale(scale, q.shape[-1])
    return (q @ k.transpose(-2, -1)) * scale  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)


def kv_head_of(head: int, n_heads: int, n_kv_heads: int) -> int:
    """The key/value head that query head ``head`` reads in grouped-query attention.

    The ``H`` query heads are cut into ``H_kv`` consecutive groups of ``H / H_kv`` heads;
    group ``g`` shares key/value head ``g``, so query head ``h`` reads head
    ``h // (H / H_kv)``.  This is the layout of ``torch.nn.functional.scaled_dot_product_attention(
    ..., enable_gqa=True)`` (which repeats each key/value head ``H / H_kv`` times with
    ``repeat_interleave``) and of Hugging Face's ``repeat_kv``.  ``H_kv = 1`` is multi-query
    attention (every query head reads head 0); ``H_kv = H`` is ordinary multi-head attention.

    Raises:
        TypeError: an argument is not an int.
        ValueError: ``H_kv`` does not divide ``H``.
        IndexError: ``head`` outside ``0 .. H-1`` (negative values count from the end).

    Source: Shazeer (2019), "Fast Transformer Decoding: One Write-Head is All You Need"
    (multi-query); Ainslie et al. (2023), "GQA", section 2.2 (grouped-query).

    >>> [kv_head_of(h, 8, 2) for h in range(8)]
    [0, 0, 0, 0, 1, 1, 1, 1]
    """
    n_heads = _validate.positive_int(n_heads, "n_heads (H)")
    n_kv_heads = _validate.positive_int(n_kv_heads, "n_kv_heads (H_kv)")
    _check_groups(n_heads, n_kv_heads)
    head = _validate.index(head, n_heads, "head")
    return head // (n_heads // n_kv_heads)


def _check_groups(n_heads: int, n_kv_heads: int) -> None:
    if n_heads % n_kv_heads:
        raise ValueError(
            f"the number of key/value heads H_kv must divide the number of query heads H "
            f"(grouped-query attention gives each group of H / H_kv query heads one key/value "
            f"head), got H = {n_heads}, H_kv = {n_kv_heads}"
        )


def repeat_kv(q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` and ``v`` with each of their ``H_kv`` heads repeated ``H / H_kv`` times, so that
    they line up with the ``H`` heads of ``q`` (grouped-query attention; see :func:`kv_head_of`).

    The copy exists only for the readable reference path; the point of grouped-query attention
    is that a kernel (or a KV cache) never needs it.

    Shapes:
        q: ``(..., H, T_q, d_k)``, k: ``(..., H_kv, T_k, d_k)``, v: ``(..., H_kv, T_k, d_v)``;
        returns k ``(..., H, T_k, d_k)`` and v ``(..., H, T_k, d_v)``.

    Raises:
        TypeError: as :func:`check_qkv`.
        ValueError: an input with fewer than 3 dimensions ``(..., H, T, d)``; k and v differ in
            their number of heads; ``H_kv`` does not divide ``H``.

    Source: Ainslie et al. (2023), "GQA: Training Generalized Multi-Query Transformer Models
    from Multi-Head Checkpoints", section 2.2.
    """
    t = _check_inputs({"q": q, "k": k, "v": v})
    q, k, v = t["q"], t["k"], t["v"]
    for name, x in (("q", q), ("k", k), ("v", v)):
        _validate.min_dims(x, 3, name, "(..., H, T, d) for grouped-query attention")
    if k.shape[-3] != v.shape[-3]:
        raise ValueError(f"k and v must have the same number of heads H_kv (third-from-last "
                         f"dimension): k {_validate.shape_of(k)} vs v {_validate.shape_of(v)}")
    n_heads, n_kv_heads = q.shape[-3], k.shape[-3]
    if n_kv_heads == 0:
        raise ValueError(f"k and v must have at least one head, got k {_validate.shape_of(k)}")
    _check_groups(n_heads, n_kv_heads)
    group = n_heads // n_kv_heads
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)  # (..., H, T_k, d)


def scaled_dot_product_attention(
    q, k, v, mask=None, *, is_causal: bool = False, scale: float | None = None,
    backend: str = "reference", enable_gqa: bool = False,
):
    """Attention of every query over all keys: ``softmax(Q K^T * scale + mask) V``.

    The same semantics as ``torch.nn.functional.scaled_dot_product_attention`` with
    ``dropout_p=0``, but returning the attention weights too:

    * ``mask`` bool: ``True`` means the query **may attend** to the key;
      ``mask`` float: **added** to the scaled scores (``-inf`` removes a key).
    * ``is_causal=True`` applies :func:`attnlib.causal_mask`, whose lower triangle is
      aligned to the top-left corner when ``T_q != T_k``.  Passing ``mask`` as well is an
      error, as in PyTorch.
    * ``scale`` defaults to ``1/sqrt(d_k)``; any finite real number is accepted.
    * **Fully masked rows**: a query whose every key is removed (``False`` or ``-inf``)
      gets weights of exactly 0 and an output of exactly 0, never NaN, as with PyTorch's
      kernel.  The same holds for ``T_k = 0`` (no keys at all); ``T_q = 0`` gives an empty
      output.
    * **A float mask is first rounded to the dtype of q**, in every backend (PyTorch's
      kernel takes its mask in that dtype; :func:`attnlib.masks.prepare_mask` rounds it once
      for the reference, tiled and PyTorch paths alike).  A value that dtype cannot hold
      becomes ``-inf`` and removes its key: with float16 inputs, ``-1e9`` (anything at or
      below ``-65520``) is a removal, so a row masked with it everywhere is fully masked
      (zeros); with bfloat16 inputs, float32's ``finfo.min`` is a removal too.  The rounded
      mask is then added in the compute dtype (float32 for float16/bfloat16).
    * **Finite minimums are not removals.**  A float mask that writes
      ``torch.finfo(dtype).min`` instead of ``-inf`` (Hugging Face's extended masks) is added
      like any bias.  Keys with it get weight 0 while the row has an unmasked key; a row
      whose every key has it is *not* fully masked: it gets ``softmax(S + min)``, which for
      a float32 or bfloat16 minimum is the uniform row ``1/T_k`` (the sum rounds every
      score to the same value; ``out`` is then the mean of the value rows), and for a
      float16 minimum (``-65504``) added in float32 is ``softmax(S)`` itself.  PyTorch's CPU
      kernel gives the same numbers; its CUDA kernels overflow a float32 or bfloat16 minimum
      to ``-inf`` (zeros for such a row), so ``backend="torch"`` clamps those biases at
      ``finfo.min / 4`` on CUDA, which changes no weight.  For zeros, convert first:
      ``mask = attnlib.to_boolean(mask)``.
    * Scores and softmax are computed in float32 for float16/bfloat16 inputs; the
      weights are cast back to the input dtype before multiplying the values.
    * ``enable_gqa=True``: **grouped-query attention**.  k and v may have ``H_kv`` heads
      where ``H_kv`` divides the ``H`` heads of q; query head ``h`` reads key/value head
      ``h // (H / H_kv)`` (:func:`kv_head_of`).  ``H_kv = 1`` is multi-query attention.
      As in PyTorch's ``enable_gqa``; the returned weights have ``H`` heads.

    Args:
        backend: ``"reference"`` (default) computes the steps explicitly and returns the
            weights.  ``"torch"`` defers to PyTorch's fused kernel, which never forms the
            weight matrix, and returns ``weights=None``; use it when only ``out`` is needed.
            A float mask is rounded to the dtype of ``q``, as in the other paths (see above).
        enable_gqa: allow k and v to have fewer heads than q (see above).  Off by default,
            as in PyTorch, so that a head-count mismatch is an error unless asked for.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``,
        mask: broadcastable to ``(..., T_q, T_k)``.  With ``enable_gqa=True``: q
        ``(..., H, T_q, d_k)``, k ``(..., H_kv, T_k, d_k)``, v ``(..., H_kv, T_k, d_v)``.
        Returns ``out`` ``(..., T_q, d_v)`` and ``weights`` ``(..., T_q, T_k)``.

    Raises:
        TypeError: non-tensor input, non-float q/k/v, mixed dtypes, a mask that is
            neither bool nor float, ``is_causal`` not a bool, ``scale`` not a real number.
        ValueError: rank below 2, ``d_k`` mismatch between q and k or ``d_k = 0``, ``T_k``
            mismatch between k and v, batch dimensions that do not broadcast, inputs or mask
            on different devices, a mask that does not broadcast, a float mask holding NaN or
            ``+inf`` (after the rounding to q's dtype), ``mask`` together with
            ``is_causal=True``, a NaN or infinite ``scale``, an unknown backend; with
            ``enable_gqa=True``: inputs with fewer than 3 dimensions, or ``H_kv`` that does
            not divide ``H``.

    Source: Vaswani et al. (2017), "Attention Is All You Need", eq. (1); grouped-query
    attention: Shazeer (2019) and Ainslie et al. (2023).

    >>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
    >>> out, weights = scaled_dot_product_attention(q, k, v)
    >>> out.shape, weights.shape
    (torch.Size([2, 5, 3]), torch.Size([2, 5, 7]))
    """
    _validate.choice(backend, ("reference", "torch"), "backend")
    enable_gqa = _validate.flag(enable_gqa, "enable_gqa")
    k_kv, v_kv = k, v
    if enable_gqa:
        k, v = repeat_kv(q, k, v)                                        # (..., H, T_k, d) each
    else:
        _hint_gqa(q, k, v)
    q, k, v = check_qkv(q, k, v)
    T_q, T_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    batch_shape = _check_batch(q=q, k=k, v=v)
    mask = prepare_mask(mask, batch_shape, T_q, T_k, q.device, is_causal=is_causal, dtype=q.dtype)
    is_causal = bool(is_causal)
    scale = resolve_scale(scale, d_k)

    if backend == "torch":
        if enable_gqa:                                                   # the kernel reads the H_kv heads itself
            k, v = _validate.tensor(k_kv, "k"), _validate.tensor(v_kv, "v")   # (..., H_kv, T_k, d), not repeated
        if mask is not None and mask.dtype in (torch.float32, torch.bfloat16) and mask.device.type == "cuda":
            # PyTorch's CUDA kernels multiply the masked scores by log2(e) before exp2, which
            # overflows a bias near finfo.min (the Hugging Face fill) to -inf: a row masked with
            # it everywhere came back as zeros on CUDA but averaged on the CPU and in the other
            # paths.  Any bias at or below min / 4 swamps every score in float32 arithmetic
            # (scores + bias round to the bias itself), so clamping there changes no weight
            # while keeping the kernel's arithmetic finite (found by make gpu-check on an H100).
            # Only finite biases: -inf stays a removal.
            floor = torch.finfo(mask.dtype).min / 4
            mask = torch.where(torch.isfinite(mask), mask.clamp(min=floor), mask)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale,
                                             enable_gqa=enable_gqa)
        return out, None

    compute = compute_dtype(q.dtype)
    scores = (q.to(compute) @ k.to(compute).transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if is_causal:
        mask = causal_mask(T_q, T_k, device=q.device)                    # (T_q, T_k)
    scores = apply_mask(scores, mask)
    weights = softmax(scores, dim=-1).to(q.dtype)                        # (..., T_q, T_k), rows sum to 1 (or 0)
    out = weights @ v                                                    # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, weights


def qk_norm_scores(q, k, scale: float | None = None, eps: float = 1e-6) -> torch.Tensor:
    """Scores with QK normalisation: ``LN(q) LN(k)^T * scale``, where ``LN`` normalises each
    query and each key over its ``d_k`` entries to mean 0 and variance 1 (LayerNorm without
    learned gain or bias) and ``scale`` is ``1/sqrt(d_k)`` by default.

    A normalised vector has length ``sqrt(d_k)`` (a little less, by ``eps``), so by
    Cauchy-Schwarz every score satisfies ``|s| <= d_k * |scale|``: ``sqrt(d_k)`` with the
    default scale, whatever the size of ``q`` and ``k``.  Scaling a query or a key by a
    positive number, or adding the same number to all its entries, leaves the scores
    unchanged: the norms of ``W_Q`` and ``W_K`` no longer reach the softmax.  In a trained
    model the LayerNorms have learned gains, which multiply this bound; the logits can then
    grow only through them.  No mask is applied: mask the result as any scores.
    Float16/bfloat16 inputs are computed in float32 and cast back.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)`` with batch dimensions that broadcast;
        result: ``(..., T_q, T_k)``, the dtype of ``q``.

    Raises:
        TypeError: ``q`` or ``k`` is not a floating tensor or numpy array, or they differ in
            dtype; ``scale`` or ``eps`` is not a real number.
        ValueError: ``q`` and ``k`` do not fit together (see
            :func:`attnlib.attention.check_qk`); ``scale`` is NaN or infinite; ``eps`` is not
            a finite number > 0.

    Source: Dehghani et al. (2023), "Scaling Vision Transformers to 22 Billion Parameters",
    section 2 (LayerNorm on the queries and keys); earlier, Henry et al. (2020),
    "Query-Key Normalization for Transformers" (unit-length q and k with a learned scale).

    >>> g = torch.Generator().manual_seed(0)
    >>> q, k = torch.randn(2, 5, 16, generator=g), torch.randn(2, 7, 16, generator=g)
    >>> s = qk_norm_scores(1000 * q, k)
    >>> tuple(s.shape), bool(s.abs().max() <= 16 ** 0.5), torch.allclose(s, qk_norm_scores(q, k), atol=1e-4)
    ((2, 5, 7), True, True)
    """
    q, k = check_qk(q, k)
    eps = _validate.real(eps, "eps", low=0.0, low_open=True)
    d_k = q.shape[-1]
    scale = resolve_scale(scale, d_k)
    dtype = compute_dtype(q.dtype)
    q_n = torch.nn.functional.layer_norm(q.to(dtype), (d_k,), eps=eps)   # (..., T_q, d_k), length ~ sqrt(d_k)
    k_n = torch.nn.functional.layer_norm(k.to(dtype), (d_k,), eps=eps)   # (..., T_k, d_k)
    return attention_scores(q_n, k_n, scale).to(q.dtype)                # (..., T_q, T_k)
