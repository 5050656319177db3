"""Multi-head attention: split ``d_model`` into ``n_heads`` heads, attend in parallel,
concatenate, project (chapter 6).

For input rows ``X`` (the queries) and ``Y`` (the keys/values; ``Y = X`` in self-attention),
head ``h`` computes ``A_h = softmax(X W_Q^h (Y W_K^h)^T / sqrt(d_head))`` and
``head_h = A_h Y W_V^h``; the heads are concatenated and projected,
``out = [head_1, ..., head_H] W_O`` (Vaswani et al., 2017, section 3.2.2).

Shapes legend: ``B`` batch, ``H`` heads (``n_heads``), ``T_q`` queries, ``T_k`` keys,
``d_model`` model width, ``d_head = d_model / n_heads`` the width of one head
(``d_k = d_v = d_head``).  Inputs are batch-first, ``(B, T, d_model)``.
"""
from __future__ import annotations

import torch
from torch import nn

from . import _validate
from .attention import scaled_dot_product_attention

__all__ = ["MultiHeadAttention", "split_heads", "merge_heads", "scale_heads"]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Cut the last dimension into ``n_heads`` slices and move heads before time.

    Shapes:
        x: ``(B, T, d_model)``; result: ``(B, H, T, d_head)`` with ``d_head = d_model / H``.
        Head ``h`` owns the columns ``h * d_head`` to ``(h + 1) * d_head - 1`` of ``x``.

    Raises:
        TypeError: ``x`` is not a tensor or numpy array; ``n_heads`` is not an int.
        ValueError: ``x`` is not 3-D; ``n_heads < 1``; ``d_model`` is not divisible by
            ``n_heads``.

    >>> split_heads(torch.zeros(2, 5, 12), 3).shape
    torch.Size([2, 3, 5, 4])
    """
    x = _validate.tensor(x, "x")
    if x.dim() != 3:
        raise ValueError(f"x must be (B, T, d_model) for split_heads, got shape {tuple(x.shape)}")
    B, T, d_model = x.shape
    n_heads = _validate.positive_int(n_heads, "n_heads")
    if d_model % n_heads:
        raise ValueError(f"d_model = {d_model} is not divisible by n_heads = {n_heads}")
    d_head = d_model // n_heads
    return x.reshape(B, T, n_heads, d_head).transpose(1, 2)  # (B, T, H, d_head) -> (B, H, T, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`split_heads`: concatenate the heads side by side.

    Shapes:
        x: ``(B, H, T, d_head)``; result: ``(B, T, H * d_head)``.

    Raises:
        TypeError: ``x`` is not a tensor or numpy array.
        ValueError: ``x`` is not 4-D.

    >>> merge_heads(torch.zeros(2, 3, 5, 4)).shape
    torch.Size([2, 5, 12])
    """
    x = _validate.tensor(x, "x")
    if x.dim() != 4:
        raise ValueError(f"x must be (B, H, T, d_head) for merge_heads, got shape {tuple(x.shape)}")
    B, H, T, d_head = x.shape
    return x.transpose(1, 2).reshape(B, T, H * d_head)  # (B, T, H, d_head) -> (B, T, d_model)


def scale_heads(out: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Multiply each head's output by a number per input and head: the ``head_mask`` of
    Michel et al. (2019), 1 keeps a head, 0 removes it (zero ablation, as
    :func:`attnlib.edits.apply_head_edits` with a ``zero`` edit).  The in-page model is exported with this as an
    input so that a reader can switch heads off in the browser.

    Shapes:
        out: ``(B, T, H * d_head)``; scale: ``(B, H)``; returns ``(B, T, H * d_head)``.

    Raises:
        TypeError: ``out`` is not a floating-point tensor (or numpy array); ``scale`` is not a
            tensor (or numpy array) of real numbers (a list, a bool or complex tensor).
        ValueError: the shapes do not agree (``H`` must be at least 1 and divide the width of ``out``).

    >>> scale_heads(torch.ones(1, 2, 6), torch.tensor([[1.0, 0.0, 0.5]]))[0, 0]
    tensor([1.0000, 1.0000, 0.0000, 0.0000, 0.5000, 0.5000])
    """
    out = _validate.floating(out, "out")
    scale = _validate.real_tensor(scale, "scale")
    if scale.dim() != 2 or out.dim() != 3 or out.shape[0] != scale.shape[0] or scale.shape[1] < 1 \
            or out.shape[-1] % scale.shape[1]:
        raise ValueError(f"scale must be (B, H) for out (B, T, H * d_head), got scale {tuple(scale.shape)} "
                         f"and out {tuple(out.shape)}")
    B, T, width = out.shape
    H = scale.shape[1]
    heads = out.reshape(B, T, H, width // H) * scale[:, None, :, None].to(out)   # (B, T, H, d_head)
    return heads.reshape(B, T, width)


class MultiHeadAttention(nn.Module):
    """Multi-head attention that returns the per-head weights.

    Four ``nn.Linear(d_model, d_model)`` layers hold the learned weights: ``q_proj``,
    ``k_proj``, ``v_proj`` (all heads side by side) and ``out_proj`` (``W_O``).  Each head
    runs :func:`attnlib.scaled_dot_product_attention` on its own ``d_head`` columns, so
    ``H`` heads cost the same parameters as one head of width ``d_model``.

    Masks follow attnlib's convention (that of ``F.scaled_dot_product_attention``): a
    boolean ``True`` means **may attend**, a float mask is **added** to the scores.
    ``torch.nn.MultiheadAttention`` uses the opposite boolean convention (``True`` = masked
    out) and averages the weights over heads unless ``average_attn_weights=False``.

    Args:
        d_model: model width (a positive int divisible by ``n_heads``).
        n_heads: number of heads ``H``.
        bias: whether the four projections have a bias.

    Shapes:
        query: ``(B, T_q, d_model)``; key, value: ``(B, T_k, d_model)`` (default: the
        query, i.e. self-attention); mask: broadcastable to ``(B, H, T_q, T_k)``, e.g.
        ``(T_q, T_k)`` or the ``(B, 1, 1, T_k)`` of :func:`attnlib.padding_mask`.
        Returns ``out`` ``(B, T_q, d_model)`` and ``weights`` ``(B, H, T_q, T_k)``.

    ``T_q = 0`` gives an empty output; ``T_k = 0`` gives heads of zeros (nothing to attend
    to, as a fully masked row), so ``out`` is the output projection's bias, as in
    ``torch.nn.MultiheadAttention``.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``, or either below 1; inputs not
            3-D; a last dimension other than ``d_model``; batch sizes or ``T_k`` that
            disagree; an input on another device than the weights; mask problems (see
            :func:`attnlib.scaled_dot_product_attention`).
        TypeError: ``d_model`` or ``n_heads`` not an int, ``bias`` or ``is_causal`` not a
            bool; an input is not a tensor or numpy array, or its dtype differs from the
            weights'.

    Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.2.

    >>> mha = MultiHeadAttention(d_model=12, n_heads=3)
    >>> out, weights = mha(torch.randn(2, 5, 12), is_causal=True)
    >>> out.shape, weights.shape
    (torch.Size([2, 5, 12]), torch.Size([2, 3, 5, 5]))
    """

    def __init__(self, d_model: int, n_heads: int, *, bias: bool = True):
        super().__init__()
        d_model = _validate.positive_int(d_model, "d_model")
        n_heads = _validate.positive_int(n_heads, "n_heads")
        bias = _validate.flag(bias, "bias")
        if d_model % n_heads:
            raise ValueError(
                f"d_model = {d_model} is not divisible by n_heads = {n_heads}; each head gets "
                f"d_model / n_heads columns (e.g. d_model = {n_heads * (d_model // n_heads + 1)})"
            )
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}"

    def _check(self, name: str, x, batch: int | None = None) -> torch.Tensor:
        x = _validate.tensor(x, name)
        if x.dim() != 3:
            hint = " (add a batch dimension with x[None])" if x.dim() == 2 else ""
            raise ValueError(f"{name} must be (B, T, d_model), got shape {tuple(x.shape)}{hint}")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"{name} has last dimension {x.shape[-1]}, but this module has "
                f"d_model = {self.d_model}: got shape {tuple(x.shape)}"
            )
        weight = self.q_proj.weight
        if x.dtype != weight.dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but the weights are {weight.dtype}")
        if x.device != weight.device:
            raise ValueError(f"{name} is on {x.device} but the weights are on {weight.device}")
        if batch is not None and x.shape[0] != batch:
            raise ValueError(f"{name} has batch size {x.shape[0]} but query has {batch}")
        return x

    def forward(self, query, key=None, value=None, mask=None, *, is_causal: bool = False, cache=None):
        """``(out, weights)`` of multi-head attention; see the class docstring for shapes.

        With ``cache`` (an :class:`attnlib.KVCache`), causal self-attention while decoding:
        the keys and values of ``query``'s ``t`` tokens are appended to the cache and the
        queries attend to everything cached (weights ``(B, H, t, T)``); ``key``, ``value``
        and ``mask`` must then be left out."""
        if cache is not None:
            if key is not None or value is not None or mask is not None:
                raise ValueError("with a cache, attention is causal self-attention: pass no key, value or mask")
            query = self._check("query", query)
            q = split_heads(self.q_proj(query), self.n_heads)  # (B, t, d_model) -> (B, H, t, d_head)
            cache.append(split_heads(self.k_proj(query), self.n_heads),   # only the new tokens' keys
                         split_heads(self.v_proj(query), self.n_heads))   # and values
            heads, weights = cache.attend(q, return_weights=True)        # (B, H, t, d_head), (B, H, t, T)
            return self.out_proj(merge_heads(heads)), weights
        query = self._check("query", query)
        key = query if key is None else self._check("key", key, query.shape[0])
        value = key if value is None else self._check("value", value, query.shape[0])
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must share T_k: key {tuple(key.shape)} vs value {tuple(value.shape)}"
            )
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, T_q, d_model) -> (B, H, T_q, d_head)
        k = split_heads(self.k_proj(key), self.n_heads)    # (B, T_k, d_model) -> (B, H, T_k, d_head)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, T_k, d_model) -> (B, H, T_k, d_head)
        heads, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
        # heads: (B, H, T_q, d_head); weights: (B, H, T_q, T_k)
        out = self.out_proj(merge_heads(heads))            # (B, T_q, d_model)
        return out, weights

    def projections(self, head: int) -> dict:
        """One head's weights in the row-vector convention: ``Q_h = X @ W_Q + b_Q``, etc.

        ``nn.Linear`` stores ``weight`` as ``(out, in)``, so ``W_Q`` is the transpose of the
        head's rows of ``q_proj.weight``.  ``W_O`` is the head's block of the output
        projection: ``out = sum_h head_h @ W_O^h (+ bias)``.

        Returns:
            dict with ``W_Q, W_K, W_V`` ``(d_model, d_head)``, ``W_O`` ``(d_head, d_model)``
            and biases ``b_Q, b_K, b_V`` ``(d_head,)`` (``None`` when ``bias=False``).

        Raises:
            TypeError: ``head`` is not an int.
            IndexError: ``head`` is outside ``-n_heads .. n_heads - 1`` (negative indices
                count from the end).
        """
        head = _validate.index(head, self.n_heads, "head")
        rows = slice(head * self.d_head, (head + 1) * self.d_head)
        out = {}
        for letter, lin in (("Q", self.q_proj), ("K", self.k_proj), ("V", self.v_proj)):
            out[f"W_{letter}"] = lin.weight.detach()[rows].T  # (d_model, d_head)
            out[f"b_{letter}"] = None if lin.bias is None else lin.bias.detach()[rows]
        out["W_O"] = self.out_proj.weight.detach()[:, rows].T  # (d_head, d_model)
        return out

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A copy of a ``torch.nn.MultiheadAttention`` with the same weights, dtype and device.

        PyTorch packs ``W_Q, W_K, W_V`` into ``in_proj_weight`` ``(3 d_model, d_model)``; the
        three blocks become ``q_proj``, ``k_proj``, ``v_proj``.  The copy is batch-first
        whatever ``module.batch_first`` is.  Dropout is not copied: compare the two in
        ``eval()`` mode.  To get the same results, call PyTorch's module with
        ``attn_mask=~mask`` for a boolean ``mask`` (its ``True`` means *masked out*) and
        ``average_attn_weights=False`` to get per-head weights ``(B, H, T_q, T_k)``.

        Raises:
            TypeError: ``module`` is not a ``torch.nn.MultiheadAttention``.
            ValueError: it uses ``kdim``/``vdim`` different from ``embed_dim``,
                ``add_bias_kv`` or ``add_zero_attn`` (features this class does not have).
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(module).__name__}")
        if not module._qkv_same_embed_dim:
            raise ValueError(
                f"kdim = {module.kdim} and vdim = {module.vdim} must equal embed_dim = "
                f"{module.embed_dim} to copy the module"
            )
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn have no counterpart in attnlib")
        has_bias = module.in_proj_bias is not None
        if has_bias != (module.out_proj.bias is not None):
            raise ValueError("the input and output projections must both have a bias or neither")
        weight = module.in_proj_weight
        copy = cls(module.embed_dim, module.num_heads, bias=has_bias).to(weight.device, weight.dtype)
        with torch.no_grad():
            w_q, w_k, w_v = weight.chunk(3, dim=0)  # each (d_model, d_model), rows = outputs
            for lin, w in ((copy.q_proj, w_q), (copy.k_proj, w_k), (copy.v_proj, w_v)):
                lin.weight.copy_(w)
            copy.out_proj.weight.copy_(module.out_proj.weight)
            if has_bias:
                for lin, b in zip((copy.q_proj, copy.k_proj, copy.v_proj), module.in_proj_bias.chunk(3)):
                    lin.bias.copy_(b)
                copy.out_proj.bias.copy_(module.out_proj.bias)
        return copy
