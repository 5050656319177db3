"""Decoding with a key/value cache (chapter 12).

A causal model generates one token at a time.  At step ``t`` the new token's query must meet
the keys and values of every earlier token, and those never change: token ``j``'s key is
``x_j W_K`` whatever comes after it (the causal mask sees to that).  So a decoder computes each
key and value once, appends it to a **KV cache**, and at every later step projects only the
new token.  The attention of the new queries over the cache equals the corresponding rows of
one causal pass over the whole sequence (tested to 1e-5 against PyTorch).  The price is
memory: ``2 * n_layers * B * H_kv * T * d_head`` numbers (:func:`kv_cache_bytes`), linear in
the length ``T``; grouped-query attention (``H_kv < H``, :func:`attnlib.kv_head_of`) divides
it by ``H / H_kv``.

:class:`KVCache` is the cache of one attention layer.  The course's small causal model reads
and extends its caches in its own forward pass (``TinyTransformer(...)(tokens, cache=caches)``,
:class:`attnlib.transformer.TinyTransformer`), and decodes with
:meth:`~attnlib.transformer.TinyTransformer.generate`, with or without caches, so that the two
can be compared and timed.

Shapes legend: ``B`` batch, ``H`` query heads, ``H_kv`` key/value heads, ``t`` new tokens,
``T`` cached tokens, ``d_k`` key width, ``d_v`` value width, ``d_model`` model width.

Sources: causal self-attention, Vaswani et al. (2017), section 3.2.3; the cache's memory
traffic as the bottleneck of decoding, Shazeer (2019), "Fast Transformer Decoding: One
Write-Head is All You Need", and Pope et al. (2023), "Efficiently Scaling Transformer
Inference".
"""
from __future__ import annotations

import torch

from . import _validate
from .attention import scaled_dot_product_attention
from .masks import causal_block

__all__ = ["KVCache", "kv_cache_bytes", "cache_start"]


def kv_cache_bytes(*, n_layers: int, n_kv_heads: int, d_head: int, T: int, batch: int = 1,
                   bytes_per_number: int = 2) -> int:
    """The memory of a full KV cache in **bytes**: ``2 * n_layers * batch * n_kv_heads * T *
    d_head * bytes_per_number`` (the 2 counts keys and values).

    Args:
        n_layers: attention layers (one cache each).  n_kv_heads: ``H_kv`` (``H`` for
            multi-head attention, ``1`` for multi-query, a divisor of ``H`` for
            grouped-query).  d_head: the width of one key (and value) head.  T: tokens held.
        batch: ``B`` sequences decoded together.
        bytes_per_number: 2 for float16/bfloat16 (the default: models are served in 16 bits),
            4 for float32.

    Raises:
        TypeError: an argument is not an int.  ValueError: an argument below 1 (``T``,
            below 0).

    >>> kv_cache_bytes(n_layers=32, n_kv_heads=8, d_head=128, T=8192)   # Llama-3-8B, one sequence
    1073741824
    """
    n_layers = _validate.positive_int(n_layers, "n_layers")
    n_kv_heads = _validate.positive_int(n_kv_heads, "n_kv_heads")
    d_head = _validate.positive_int(d_head, "d_head")
    T = _validate.non_negative_int(T, "T")
    batch = _validate.positive_int(batch, "batch")
    bytes_per_number = _validate.positive_int(bytes_per_number, "bytes_per_number")
    return 2 * n_layers * batch * n_kv_heads * T * d_head * bytes_per_number


class KVCache:
    """The keys and values one attention layer has computed so far, and attention over them.

    ``append(k, v)`` adds the keys and values of ``t`` new tokens; ``attend(q)`` gives the
    output of the new tokens' queries over everything cached, causally: the ``t`` newest
    queries sit at positions ``T - t .. T - 1`` and query ``T - t + i`` sees keys
    ``0 .. T - t + i`` (the bottom-right aligned causal mask).  Decoding one token at a time,
    or a prompt at once followed by single tokens, gives the rows of one causal pass over the
    whole sequence.  Queries may have more heads than the cache (``H`` a multiple of
    ``H_kv``: grouped-query attention, Ainslie et al. 2023; ``H_kv = 1``: multi-query,
    Shazeer 2019).

    **Memory layout.**  The keys and values live in preallocated buffers of ``capacity`` tokens
    along ``T``; an append writes the new tokens after the ``T`` held ones.  When they do not
    fit, the buffers are reallocated at ``max(2 * capacity, T + t)`` tokens and the held tokens
    copied once, so ``n`` one-token appends copy fewer than ``2 n`` tokens in all: amortised
    constant time per token (concatenating, as Hugging Face's ``DynamicCache`` does, copies all
    ``T`` held tokens at every step: quadratic in all; ``bench/bench_kv_cache.py`` measures
    both).  ``keys`` and ``values`` are views of the first ``T`` tokens of the buffers, not
    copies: a view taken earlier keeps showing the tokens it showed (later appends write past
    its end, and a reallocation leaves the old buffer to it), and writing into a view writes
    into the cache.  The inputs are copied, never aliased.

    Shapes:
        append: k ``(B, H_kv, t, d_k)``, v ``(B, H_kv, t, d_v)``.
        attend: q ``(B, H, t, d_k)`` -> out ``(B, H, t, d_v)``, with ``t`` at most the cached
        length.
        keys / values: ``(B, H_kv, T, d_k)`` / ``(B, H_kv, T, d_v)`` (``None`` while empty).

    Attributes:
        nbytes: bytes of the ``T`` tokens held (used, not allocated): exactly
            ``keys.nelement() * keys.element_size() + values.nelement() * values.element_size()``,
            the count of :func:`kv_cache_bytes`.
        capacity: tokens the buffers can hold before the next reallocation (``>= T``).
        allocated_nbytes: bytes of the buffers, ``nbytes * capacity / T`` (at most twice
            ``nbytes`` after a growth by doubling, and ``nbytes`` after the first append).
        length (also ``len(cache)``): ``T``, the tokens cached.

    Raises:
        TypeError: non-tensor or non-float input; a dtype other than the cache's.
        ValueError: not 4-D; ``B``, ``H_kv``, ``d_k`` or ``d_v`` differ from what is cached;
            k and v differ in ``t``; another device; ``attend`` before any ``append``, with
            more queries than cached keys, or with ``H`` not a multiple of ``H_kv``.

    >>> cache = KVCache()
    >>> cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    >>> len(cache), cache.nbytes
    (3, 192)
    """

    def __init__(self):
        self._k: torch.Tensor | None = None       # (B, H_kv, capacity, d_k) buffer
        self._v: torch.Tensor | None = None       # (B, H_kv, capacity, d_v) buffer
        self._T = 0                               # tokens held: the first _T of the buffers

    @property
    def keys(self) -> torch.Tensor | None:
        """``(B, H_kv, T, d_k)``: a view of the cached keys (``None`` while empty)."""
        return None if self._k is None else self._k[:, :, :self._T]

    @property
    def values(self) -> torch.Tensor | None:
        """``(B, H_kv, T, d_v)``: a view of the cached values (``None`` while empty)."""
        return None if self._v is None else self._v[:, :, :self._T]

    @property
    def capacity(self) -> int:
        return 0 if self._k is None else int(self._k.shape[2])

    @property
    def allocated_nbytes(self) -> int:
        if self._k is None:
            return 0
        return self._k.nelement() * self._k.element_size() + self._v.nelement() * self._v.element_size()

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        if self.keys is None:
            return "KVCache(empty)"
        return (f"KVCache(B={self._k.shape[0]}, H_kv={self._k.shape[1]}, T={self.length}, "
                f"d_k={self._k.shape[3]}, d_v={self._v.shape[3]}, {self._k.dtype}, {self.nbytes:,} bytes; "
                f"capacity {self.capacity} tokens, {self.allocated_nbytes:,} bytes allocated)")

    @property
    def length(self) -> int:
        return self._T

    @property
    def nbytes(self) -> int:
        if self._k is None:
            return 0
        per_token = self._k.shape[0] * self._k.shape[1] * (self._k.shape[3] * self._k.element_size()
                                                           + self._v.shape[3] * self._v.element_size())
        return per_token * self._T

    def append(self, k, v) -> None:
        """Add the keys ``k (B, H_kv, t, d_k)`` and values ``v (B, H_kv, t, d_v)`` of ``t``
        new tokens (see the class docstring for the errors)."""
        k, v = self._checked(k, v)
        t = k.shape[2]
        if self._k is None:                        # the first append allocates exactly t tokens
            self._k = k.detach().clone(memory_format=torch.contiguous_format)   # never an alias of the caller's
            self._v = v.detach().clone(memory_format=torch.contiguous_format)   # tensors
            self._T = t
            return
        T = self._T
        if T + t > self.capacity:                  # grow by doubling: amortised O(1) per token
            cap = max(2 * self.capacity, T + t)
            for name in ("_k", "_v"):
                old = getattr(self, name)
                grown = old.new_empty((old.shape[0], old.shape[1], cap, old.shape[3]))   # (B, H_kv, cap, d)
                grown[:, :, :T] = old[:, :, :T]
                setattr(self, name, grown)
        with torch.no_grad():
            self._k[:, :, T:T + t] = k.detach()    # (B, H_kv, t, d_k) written after the T held
            self._v[:, :, T:T + t] = v.detach()
        self._T = T + t

    def _checked(self, k, v) -> tuple[torch.Tensor, torch.Tensor]:
        """``k, v`` as tensors that fit each other and what the cache holds (the errors of the
        class docstring)."""
        k = _validate.floating(k, "k")
        v = _validate.floating(v, "v")
        for name, x in (("k", k), ("v", v)):
            if x.dim() != 4:
                raise ValueError(f"{name} must be 4-D (B, H_kv, t, d), got shape {_validate.shape_of(x)}")
        if k.shape[:3] != v.shape[:3]:
            raise ValueError(f"k and v must share (B, H_kv, t): k {_validate.shape_of(k)} vs v {_validate.shape_of(v)}")
        if k.dtype != v.dtype:
            raise TypeError(f"k and v must share a dtype, got k {k.dtype}, v {v.dtype}")
        _validate.same_device(k=k, v=v)
        if self._k is None:
            return k, v
        if k.dtype != self._k.dtype:
            raise TypeError(f"the cache holds {self._k.dtype}; k and v must be {self._k.dtype}, got {k.dtype}")
        _validate.same_device(cached_keys=self._k, k=k)
        for what, new, old in (("k", k, self._k), ("v", v, self._v)):
            if new.shape[:2] != old.shape[:2] or new.shape[3] != old.shape[3]:
                raise ValueError(
                    f"{what} must match the cache's (B, H_kv, ., d) = ({old.shape[0]}, {old.shape[1]}, ., "
                    f"{old.shape[3]}), got {_validate.shape_of(new)}")
        return k, v

    def attend(self, q, *, scale: float | None = None, return_weights: bool = False):
        """Output ``(B, H, t, d_v)`` of the ``t`` newest queries ``q (B, H, t, d_k)`` over
        the cache, causally (see the class docstring); ``scale`` defaults to ``1/sqrt(d_k)``.
        With ``return_weights=True``, ``(out, weights)`` with weights ``(B, H, t, T)``.
        Call :meth:`append` with the same tokens' keys and values first."""
        return_weights = _validate.flag(return_weights, "return_weights")
        if self._k is None:
            raise ValueError("the cache is empty: append the new tokens' keys and values before attend(q)")
        q = _validate.floating(q, "q")
        if q.dim() != 4:
            raise ValueError(f"q must be 4-D (B, H, t, d_k), got shape {_validate.shape_of(q)}")
        if q.dtype != self.keys.dtype:
            raise TypeError(f"q must have the cache's dtype {self.keys.dtype}, got {q.dtype}")
        t, T = q.shape[2], self.length
        if t > T:
            raise ValueError(f"q has t = {t} queries but the cache holds only T = {T} keys; append the "
                             "new tokens' keys and values first")
        if q.shape[0] != self.keys.shape[0]:
            raise ValueError(f"q must have the cache's batch size B = {self.keys.shape[0]}, got {_validate.shape_of(q)}")
        if q.shape[3] != self.keys.shape[3]:
            raise ValueError(f"q must have the cached keys' width d_k = {self.keys.shape[3]}, got {_validate.shape_of(q)}")
        # the t new queries sit at positions T - t .. T - 1: rows T - t .. T - 1 of the causal mask
        mask = causal_block(T - t, T, 0, T, device=q.device)             # (t, T)
        out, weights = scaled_dot_product_attention(q, self.keys, self.values, mask, scale=scale,
                                                    enable_gqa=q.shape[1] != self.keys.shape[1])
        return (out, weights) if return_weights else out               # (B, H, t, d_v), (B, H, t, T)


def cache_start(cache, n_layers: int) -> int:
    """How many tokens a model's per-layer caches already hold (where new tokens start), after
    checking that ``cache`` is ``model.new_cache()``: ``n_layers`` :class:`KVCache`.

    Raises:
        TypeError: anything else.
    """
    if not isinstance(cache, (list, tuple)) or len(cache) != n_layers or not all(isinstance(c, KVCache) for c in cache):
        raise TypeError(f"cache must be a list of {n_layers} KVCache (model.new_cache()), got {type(cache).__name__}")
    return cache[0].length
