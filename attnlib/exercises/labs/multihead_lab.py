"""The multi-head forward-pass lab (chapter 6): ``check_multi_head_attention``."""
from __future__ import annotations

import math

import torch

from ...multihead import MultiHeadAttention
from ._core import (
    READY_MADE_ATTENTION, REAL_LAYER, _as_tensor_result, _Case, _close, _fmt, _generic_tensor, Lab, _randn,
    _real_head, Refusal, register, _shape,
)

__all__ = ["check_multi_head_attention", "reference_multi_head_attention"]


def reference_multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads: int) -> torch.Tensor:
    """attnlib's own answer to the lab: :class:`attnlib.MultiHeadAttention` without biases,
    its four projections set to ``W_q, W_k, W_v, W_o`` (row-vector convention, ``q = x W_q``,
    so ``q_proj.weight = W_q^T``), run in float64.

    Shapes:
        x ``(B, T, d_model)``; each ``W`` ``(d_model, d_model)``; returns ``(B, T, d_model)``.
    """
    d_model = x.shape[-1]
    mha = MultiHeadAttention(d_model, n_heads, bias=False).double()
    with torch.no_grad():
        for proj, W in ((mha.q_proj, W_q), (mha.k_proj, W_k), (mha.v_proj, W_v), (mha.out_proj, W_o)):
            proj.weight.copy_(W.double().T)
        return mha(x.double())[0]


def _mha_cases() -> list[_Case]:
    def weights(d, seed):
        return tuple(_randn(d, d, seed=seed + i, scale=d ** -0.5) for i in range(4))

    def real():
        from ...encoder import load_encoder

        _, _, _, _, X = _real_head()
        model, _ = load_encoder()
        att = model.encoder.layer[REAL_LAYER].attention
        Ws = tuple(lin.weight.detach().float().cpu().T.contiguous()
                   for lin in (att.self.query, att.self.key, att.self.value, att.output.dense))
        return (f"the real input of encoder layer {REAL_LAYER}, x of shape {_shape(X[None])}, with that layer's "
                "W_q, W_k, W_v, W_o (384, 384) (biases left out), n_heads=12", (X[None], *Ws, 12))

    return [
        _Case("x (1, 2, 4) (B=1, T=2, d_model=4), random W (4, 4), n_heads=2",
              (_randn(1, 2, 4, seed=31), *weights(4, 32), 2), {}, True),
        _Case("x (1, 3, 4), random W (4, 4), n_heads=2", (_randn(1, 3, 4, seed=36), *weights(4, 37), 2), {}, True),
        _Case("x (2, 5, 6) (B=2, T=5), random W (6, 6), n_heads=3",
              (_randn(2, 5, 6, seed=41), *weights(6, 42), 3), {}),
        _Case("x (3, 5, 12), random W (12, 12), n_heads=4", (_randn(3, 5, 12, seed=46), *weights(12, 47), 4), {}),
        _Case("x (2, 4, 5), random W (5, 5), n_heads=1", (_randn(2, 4, 5, seed=51), *weights(5, 52), 1), {}),
        _Case(None, make=real),
    ]


def _mha_variant(x, W_q, W_k, W_v, W_o, H, *, split="ok", scale="ok", axis=-1, out_proj="ok", merge="ok",
                 linear=False):
    """The forward pass with the given mistakes, in float64: ``(B, T, d_model)``."""
    x, W_q, W_k, W_v, W_o = (t.double() for t in (x, W_q, W_k, W_v, W_o))
    if linear:                                                     # nn.Linear's (out, in) convention
        W_q, W_k, W_v, W_o = W_q.T, W_k.T, W_v.T, W_o.T
    B, T, D = x.shape
    dh = D // H

    def heads_of(t):                                               # (B, T, D) -> (B, H, T, dh)
        if split == "mixes_tokens":
            return t.reshape(B, H, T, dh)
        if split == "interleaved":
            return t.reshape(B, T, dh, H).permute(0, 3, 1, 2)
        if split == "one_head":
            return t[:, None]
        return t.reshape(B, T, H, dh).transpose(1, 2)

    q, k, v = heads_of(x @ W_q), heads_of(x @ W_k), heads_of(x @ W_v)
    d = q.shape[-1]
    c = {"ok": 1 / math.sqrt(d), "sqrt_d_model": 1 / math.sqrt(D), "none": 1.0}[scale]
    w = torch.softmax(q @ k.transpose(-2, -1) * c, dim=axis)
    heads = w @ v                                                  # (B, H', T, d)
    if merge == "no_transpose":
        concat = heads.reshape(B, T, D)
    elif merge == "interleaved":
        concat = heads.permute(0, 2, 3, 1).reshape(B, T, D)
    else:
        concat = heads.transpose(1, 2).reshape(B, T, D)
    if out_proj == "missing":
        return concat
    if out_proj == "transposed":
        return concat @ W_o.T
    return concat @ W_o


def _mha_fingerprints(case: _Case) -> dict:
    args = case.args
    singles = {
        "split_mixes_tokens": dict(split="mixes_tokens"),
        "split_interleaved": dict(split="interleaved"),
        "one_head": dict(split="one_head", scale="sqrt_d_model"),
        "scaled_by_sqrt_d_model": dict(scale="sqrt_d_model"),
        "no_scaling": dict(scale="none"),
        "softmax_wrong_dim": dict(axis=-2),
        "no_out_proj": dict(out_proj="missing"),
        "out_proj_transposed": dict(out_proj="transposed"),
        "merge_without_transpose": dict(merge="no_transpose"),
        "merge_interleaved": dict(merge="interleaved"),
        "linear_convention": dict(linear=True),
    }
    return {key: _mha_variant(*args, **opts) for key, opts in singles.items()}


_MHA_ERRORS = (("got float", "float_d_head"), ("must be tuple of ints", "float_d_head"),
               ("received an invalid combination", "float_d_head"))


CHECK_MULTI_HEAD_ATTENTION_DOC = """Check a learner's ``multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads)`` against
    :class:`attnlib.MultiHeadAttention` (no biases; :func:`reference_multi_head_attention`).

    Contract (row-vector convention, Vaswani et al. 2017, section 3.2.2):
    ``Q = x W_q``, ``K = x W_k``, ``V = x W_v``, each ``(B, T, d_model)`` cut into ``H =
    n_heads`` heads of ``d_head = d_model // H`` contiguous features (head ``h`` holds
    features ``h*d_head : (h+1)*d_head``); in every head ``softmax(Q_h K_h^T / sqrt(d_head))
    V_h`` along the keys, no mask; the heads concatenated in head order, feature by feature
    as they were split, then multiplied by ``W_o``.  Returns ``out`` ``(B, T, d_model)``.

    Inputs, smallest first: ``(1, 2, 4)`` and ``(1, 3, 4)`` with 2 heads, ``(2, 5, 6)`` with
    3, ``(3, 5, 12)`` with 4, ``(2, 4, 5)`` with 1 head, all with seeded random weights; the
    real input of one encoder layer with that layer's weights (12 heads of 32).  Ready-made
    attention (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``, attnlib's
    attention functions and its ``split_heads`` / ``merge_heads``) is refused
    (``library_call``); ``torch.softmax`` is fine.  The function runs apart from the grader,
    at most :data:`TIME_LIMIT_S` seconds per input (see :mod:`._sandbox`).

    Shapes:
        x: ``(B, T, d_model)``; W_q, W_k, W_v, W_o: ``(d_model, d_model)``; returns
        ``(B, T, d_model)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["multi_head"]`` name the mistake.  Never raises.

    Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.2.
    """

def _out_only(got):
    """``(out, weights)`` is accepted: ``out`` is graded."""
    if isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], torch.Tensor):
        return got[0]
    return got


def _mha_show(case, key, expected, got):
    if case.small:
        return (f"\n  expected out[0, 0] (token 0): {_fmt(expected[0, 0])}"
                f"\n  your out[0, 0]:               {_fmt(got[0, 0])}")
    return f" Largest difference {float((got.detach().double() - expected).abs().max()):.3g}."


LAB = Lab(
    key="multi_head", checker="check_multi_head_attention", what="multi-head attention",
    writes='multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads)',
    contract=("``(B, T, d_model) -> (B, T, d_model)``: heads split, attended, merged and projected, as "
              ":class:`attnlib.MultiHeadAttention` without biases"),
    refusal=Refusal(
        about="writing the multi-head forward pass yourself, so ready-made attention (F.scaled_dot_product_attention, "
              "nn.MultiheadAttention, attnlib's attention functions and MultiHeadAttention) and attnlib's split_heads / "
              "merge_heads are not accepted here",
        instead="Project (x @ W_q), reshape to (B, T, H, d_head) and transpose(1, 2); scores q @ k.transpose(-2, -1) / "
                "sqrt(d_head), torch.softmax over the keys, times v; transpose back, reshape to (B, T, d_model) and "
                "multiply by W_o.",
        attnlib=("split_heads", "merge_heads"), **READY_MADE_ATTENTION),
    cases=_mha_cases,
    reference=lambda c: reference_multi_head_attention(*c.args),
    convert=lambda got, c, expected: _as_tensor_result(_out_only(got), c, "multi-head attention"),
    right=_close,
    fingerprints=_mha_fingerprints,
    matches=_close,
    usable=lambda g: _out_only(g) if isinstance(_out_only(g), torch.Tensor) else None,
    show=_mha_show,
    generic=lambda c, expected, got: _generic_tensor(c, "output", expected, got),
    success=lambda cases: (f"Your multi_head_attention matches attnlib.MultiHeadAttention on all {len(cases)} "
                           "inputs: 1 to 12 heads, batches, and a real encoder layer with its own weights."),
    errors=_MHA_ERRORS, sort_found=False, doc=CHECK_MULTI_HEAD_ATTENTION_DOC)

check_multi_head_attention = register(LAB)
