"""Decoding with a key/value cache (chapter 10).

A causal model generates one token at a time.  At step ``t`` the new token's query must meet
the keys and values of every earlier token, and those never change: token ``j``'s key is
``x_j W_K`` whatever comes after it (the causal mask sees to that).  So a decoder computes each
key and value once, appends it to a **KV cache**, and at every later step projects only the
new token.  The attention of the new queries over the cache equals the corresponding rows of
one causal pass over the whole sequence (tested to 1e-5 against PyTorch).  The price is
memory: ``2 * n_layers * B * H_kv * T * d_head`` numbers (:func:`kv_cache_bytes`), linear in
the length ``T``; grouped-query attention (``H_kv < H``, :func:`attnlib.kv_head_of`) divides
it by ``H / H_kv``.

:class:`KVCache` is the cache of one attention layer.  :func:`generate` decodes greedily with
the course's small causal model (:class:`attnlib.TinyTransformer`), with or without caches,
so that the two can be compared and timed.

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

__all__ = ["KVCache", "kv_cache_bytes", "generate", "cached_step_logits"]


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

    The cache grows by concatenation, like Hugging Face's ``DynamicCache``: each append copies
    what is held (simple, and exact about memory; a serving system preallocates instead).

    Shapes:
        append: k ``(B, H_kv, t, d_k)``, v ``(B, H_kv, t, d_v)``.
        attend: q ``(B, H, t, d_k)`` -> out ``(B, H, t, d_v)``, with ``t`` at most the cached
        length.
        keys / values: ``(B, H_kv, T, d_k)`` / ``(B, H_kv, T, d_v)`` (``None`` while empty).

    Attributes:
        nbytes: memory held by the cached keys and values, in bytes (exactly
            ``k.nelement() * k.element_size() + v.nelement() * v.element_size()``).
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
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        if self.keys is None:
            return "KVCache(empty)"
        return (f"KVCache(B={self.keys.shape[0]}, H_kv={self.keys.shape[1]}, T={self.length}, "
                f"d_k={self.keys.shape[3]}, d_v={self.values.shape[3]}, {self.keys.dtype}, {self.nbytes:,} bytes)")

    @property
    def length(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[2])

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return self.keys.nelement() * self.keys.element_size() + self.values.nelement() * self.values.element_size()

    def append(self, k, v) -> None:
        """Add the keys ``k (B, H_kv, t, d_k)`` and values ``v (B, H_kv, t, d_v)`` of ``t``
        new tokens (see the class docstring for the errors)."""
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
        if self.keys is None:
            self.keys, self.values = k.detach().clone(), v.detach().clone()
            return
        if k.dtype != self.keys.dtype:
            raise TypeError(f"the cache holds {self.keys.dtype}; k and v must be {self.keys.dtype}, got {k.dtype}")
        _validate.same_device(cached_keys=self.keys, k=k)
        for what, new, old in (("k", k, self.keys), ("v", v, self.values)):
            if new.shape[:2] != old.shape[:2] or new.shape[3] != old.shape[3]:
                raise ValueError(
                    f"{what} must match the cache's (B, H_kv, ., d) = ({old.shape[0]}, {old.shape[1]}, ., "
                    f"{old.shape[3]}), got {_validate.shape_of(new)}")
        self.keys = torch.cat([self.keys, k.detach()], dim=2)        # (B, H_kv, T + t, d_k)
        self.values = torch.cat([self.values, v.detach()], dim=2)    # (B, H_kv, T + t, d_v)

    def attend(self, q, *, scale: float | None = None) -> torch.Tensor:
        """Output ``(B, H, t, d_v)`` of the ``t`` newest queries ``q (B, H, t, d_k)`` over
        the cache, causally (see the class docstring); ``scale`` defaults to ``1/sqrt(d_k)``.
        Call :meth:`append` with the same tokens' keys and values first."""
        if self.keys is None:
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
        # query i of the t new ones sits at position T - t + i and sees keys 0 .. T - t + i
        mask = torch.arange(T, device=q.device)[None, :] <= (T - t + torch.arange(t, device=q.device))[:, None]
        out, _ = scaled_dot_product_attention(q, self.keys, self.values, mask, scale=scale,
                                              enable_gqa=q.shape[1] != self.keys.shape[1])
        return out                                                     # (B, H, t, d_v)


def _check_model(model):
    from .transformer import TinyTransformer

    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be an attnlib.TinyTransformer, got {type(model).__name__}")
    return model


@torch.no_grad()
def cached_step_logits(model, tokens, caches: list, start: int) -> torch.Tensor:
    """Run ``tokens`` (``B, t``), at positions ``start .. start + t - 1``, through
    :class:`attnlib.TinyTransformer` ``model`` using and extending its per-layer caches;
    return their logits ``(B, t, V)``.  Equal to the last ``t`` rows of ``model(all_tokens)``
    (tested): the same modules, in the order of ``TinyTransformer.forward`` and
    ``Block.forward`` (attention-only blocks ``x + attn(LN(x))``), with each layer's keys and
    values projected once.

    Raises:
        TypeError: ``model`` is not a TinyTransformer.  ValueError: ``len(caches) != n_layers``; ``start`` differs from the cached length; positions
            past ``model.max_len``.
    """
    from .multihead import merge_heads, split_heads

    model = _check_model(model)
    if len(caches) != len(model.blocks):
        raise ValueError(f"need one KVCache per layer: {len(model.blocks)}, got {len(caches)}")
    B, t = tokens.shape
    if start != caches[0].length:
        raise ValueError(f"start = {start} but the caches hold {caches[0].length} tokens")
    if start + t > model.max_len:
        raise ValueError(f"positions up to {start + t - 1} exceed the model's max_len = {model.max_len}")
    positions = torch.arange(start, start + t, device=tokens.device)
    x = model.tok_emb(tokens) + model.pos_emb(positions)                # (B, t, d_model)
    for block, cache in zip(model.blocks, caches):
        attn = block.attn
        h = block.ln_attn(x)
        q = split_heads(attn.q_proj(h), attn.n_heads)                   # (B, H, t, d_head)
        cache.append(split_heads(attn.k_proj(h), attn.n_heads),         # only the new tokens
                     split_heads(attn.v_proj(h), attn.n_heads))
        x = x + attn.out_proj(merge_heads(cache.attend(q)))            # (B, t, d_model)
    return model.unembed(model.ln_out(x))                               # (B, t, V)


@torch.no_grad()
def generate(model, prompt, n_new: int, *, use_cache: bool = True, return_caches: bool = False):
    """Greedy decoding with :class:`attnlib.TinyTransformer` ``model``: append the most
    likely next token (the argmax of the last position's logits) ``n_new`` times.

    With ``use_cache=True`` the prompt is run once and then only the newest token, reading
    the earlier keys and values from one :class:`KVCache` per layer
    (:func:`cached_step_logits`).  With ``use_cache=False`` every step runs the model over the
    whole sequence so far, recomputing every key and value.  Both give the same tokens.

    Shapes:
        prompt: ``(B, T_0)`` int64; returns ``(B, T_0 + n_new)`` (and the caches with
        ``return_caches=True``, ``use_cache=True``).

    Raises:
        TypeError: ``model`` is not a TinyTransformer, ``n_new`` not an int, ``use_cache`` not
            a bool.  ValueError: ``T_0 + n_new`` beyond ``model.max_len``,
            ``prompt`` not ``(B, T_0)`` with ``T_0 >= 1``.
    """
    model = _check_model(model)
    n_new = _validate.non_negative_int(n_new, "n_new")
    use_cache = _validate.flag(use_cache, "use_cache")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be a (B, T_0) tensor of token ids with T_0 >= 1, got "
                         f"{getattr(prompt, 'shape', type(prompt).__name__)}")
    if prompt.shape[1] + n_new > model.max_len:
        raise ValueError(f"T_0 + n_new = {prompt.shape[1] + n_new} exceeds the model's max_len = {model.max_len}")
    model.eval()
    tokens = prompt
    if not use_cache:
        for _ in range(n_new):
            logits, _ = model(tokens)                                   # (B, T, V)
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return tokens
    caches = [KVCache() for _ in model.blocks]
    logits = cached_step_logits(model, tokens, caches, 0)               # the prompt, once
    for _ in range(n_new):
        nxt = logits[:, -1].argmax(-1, keepdim=True)                    # (B, 1)
        tokens = torch.cat([tokens, nxt], dim=1)
        if tokens.shape[1] < prompt.shape[1] + n_new:
            logits = cached_step_logits(model, nxt, caches, tokens.shape[1] - 1)
    return (tokens, caches) if return_caches else tokens
