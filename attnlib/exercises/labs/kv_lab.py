"""The KV-cache lab (chapter 12): ``check_decode_step``, one decoding step through a cache."""
from __future__ import annotations


import torch

from ...attention import scaled_dot_product_attention
from ._core import (
    READY_MADE_ATTENTION, REAL_LAYER, _Case, _close, _fail, _finite, _generic_tensor, _ints, Lab, _randn,
    _real_head, Refusal, register, _shape,
)

__all__ = ["check_decode_step", "reference_decode_step"]


def reference_decode_step(q_new, k_new, v_new, cache_k, cache_v):
    """One decoding step: append the new key and value to the cache along the time axis, then
    let the new query attend to every cached position (itself included) with
    :func:`attnlib.scaled_dot_product_attention` (no mask: nothing cached lies in its future).

    Shapes:
        q_new, k_new ``(B, H, 1, d_k)``, v_new ``(B, H, 1, d_v)``, cache_k ``(B, H, T, d_k)``,
        cache_v ``(B, H, T, d_v)`` (``T >= 0``); returns ``out`` ``(B, H, 1, d_v)`` and the caches
        ``(B, H, T + 1, d_k)``, ``(B, H, T + 1, d_v)``.
    """
    cache_k = torch.cat([cache_k, k_new], dim=-2)
    cache_v = torch.cat([cache_v, v_new], dim=-2)
    return scaled_dot_product_attention(q_new, cache_k, cache_v)[0], cache_k, cache_v


def _step_args(B, H, T, d_k, d_v, seed, ints=False):
    make = (lambda *s, seed: _ints(*s, seed=seed, high=3)) if ints else _randn
    return (make(B, H, 1, d_k, seed=seed), make(B, H, 1, d_k, seed=seed + 1), make(B, H, 1, d_v, seed=seed + 2),
            make(B, H, T, d_k, seed=seed + 3), make(B, H, T, d_v, seed=seed + 4))


def _kv_cases() -> list[_Case]:
    def real():
        _, q, k, v, _ = _real_head()                                # (H, T, d) each
        T = q.shape[-2]
        args = (q[None, :, -1:], k[None, :, -1:], v[None, :, -1:], k[None, :, :-1], v[None, :, :-1])
        return (f"the real q, k, v of layer {REAL_LAYER}'s heads: the last of the {T} tokens as the new one, "
                f"the {T - 1} before it cached (cache_k {_shape(args[3])})", args)

    return [
        _Case("B = H = 1, d_k = d_v = 2, two cached tokens (integer entries)", _step_args(1, 1, 2, 2, 2, 80, True), {},
              True),
        _Case("B = H = 1, d_k = 4, d_v = 3, three cached tokens", _step_args(1, 1, 3, 4, 3, 90), {}, True),
        _Case("B = 2, H = 3, d_k = 8, d_v = 5, five cached tokens", _step_args(2, 3, 5, 8, 5, 100), {}),
        _Case("B = 1, H = 2, d_k = 16, an empty cache (T = 0: the first token)", _step_args(1, 2, 0, 16, 16, 110), {}),
        _Case(None, make=real),
    ]


def _attend(q, k, v, scale=None):
    return scaled_dot_product_attention(q, k, v, scale=scale)[0]


def _kv_fingerprints(case: _Case) -> dict:
    """``{mistake: (out, cache_k, cache_v)}``; a ``None`` entry is not compared."""
    q, k, v, ck, cv = (a.double() for a in case.args)
    full_k, full_v = torch.cat([ck, k], -2), torch.cat([cv, v], -2)
    out = {}
    out["not_appended"] = [(None, ck, cv)]                                      # caches returned unchanged
    out["appended_after"] = [(_attend(q, ck, cv), full_k, full_v)] if ck.shape[-2] else []
    # a top-left causal mask for one query: only key 0 is seen (is_causal=True, or tril(ones(1, T+1)))
    out["causal_single_query"] = [(full_v[..., :1, :], full_k, full_v)]
    out["no_scaling"] = [(_attend(q, full_k, full_v, 1.0), full_k, full_v)]
    axes = []
    for dim in (0, 1, -1):
        try:
            wrong_k, wrong_v = torch.cat([ck, k], dim), torch.cat([cv, v], dim)
        except RuntimeError:
            continue
        axes.append((None, wrong_k, wrong_v))
    out["wrong_concat_axis"] = axes
    return out


def _matches(got, variants) -> bool:
    for want in variants or ():
        if all(w is None or _close(g, w) for g, w in zip(got, want)):
            return True
    return False


#: Error messages that give a mistake away: torch.cat along another axis than time.
_KV_ERRORS = (("Sizes of tensors must match except in dimension", "wrong_concat_axis"),)


def _as_triple(got, case: _Case):
    if not isinstance(got, (tuple, list)) or len(got) != 3 or not all(isinstance(g, torch.Tensor) for g in got):
        kind = type(got).__name__ if not isinstance(got, (tuple, list)) else f"{type(got).__name__} of {len(got)}"
        _fail(f"On {case.label}, your decode_step returned a {kind}; the contract returns three tensors, "
              "(out, cache_k, cache_v).", "wrong_type")
    return tuple(got)


CHECK_DECODE_STEP_DOC = """Check a learner's ``decode_step(q_new, k_new, v_new, cache_k, cache_v)`` against
    :func:`reference_decode_step` (``torch.cat`` along time and
    :func:`attnlib.scaled_dot_product_attention`).

    Contract: append ``k_new`` and ``v_new`` to the caches along the time axis (``dim=-2``),
    then attend from ``q_new`` over every cached position, the new one included, with scores
    ``q k^T / sqrt(d_k)`` and no mask; return ``(out, cache_k, cache_v)``.

    Inputs, smallest first: two cached tokens of width 2; ``d_k != d_v``; a batch of heads;
    an empty cache (``T = 0``, the first token); the real q, k, v of one encoder layer, the
    last token new.  Ready-made attention (``F.scaled_dot_product_attention``,
    ``nn.MultiheadAttention``, attnlib's attention functions and :class:`attnlib.KVCache`) is
    refused (``library_call``); the function runs apart from the grader (:mod:`._sandbox`).

    Shapes:
        q_new, k_new ``(B, H, 1, d_k)``, v_new ``(B, H, 1, d_v)``, cache_k ``(B, H, T, d_k)``,
        cache_v ``(B, H, T, d_v)``; returns ``(B, H, 1, d_v)``, ``(B, H, T+1, d_k)``,
        ``(B, H, T+1, d_v)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["kv_cache"]`` name the mistake.  Never raises.

    Source: the incremental decoding of Transformer decoders (Vaswani et al. 2017; Pope et al.
    2023, "Efficiently Scaling Transformer Inference", section 2).
    """

_NAMES = ("out", "cache_k", "cache_v")


def _kv_show(case, key, expected, got):
    shapes = ", ".join(f"{n} {_shape(g)} (expected {_shape(e)})" for n, g, e in zip(_NAMES, got, expected))
    return f"\n  yours: {shapes}"


def _kv_generic(case, expected, got):
    for name, g, e in zip(_NAMES, got, expected):
        if not _close(g, e):
            _generic_tensor(case, name, e, g)


LAB = Lab(
    key="kv_cache", checker="check_decode_step", what="decode step",
    writes='decode_step(q_new, k_new, v_new, cache_k, cache_v) -> (out, cache_k, cache_v)',
    contract="new key and value appended along time, then the one query over every cached position",
    refusal=Refusal(
        about="one decoding step written out, so ready-made attention (F.scaled_dot_product_attention, "
              "nn.MultiheadAttention, attnlib's attention functions) and attnlib.KVCache are not accepted here",
        instead="torch.cat the new key and value onto the caches along dim=-2, then compute the scores "
                "q_new @ cache_k.transpose(-2, -1) / sqrt(d_k), their softmax (torch.softmax is fine) and @ cache_v.",
        attnlib=("kvcache",), **READY_MADE_ATTENTION),
    cases=_kv_cases,
    reference=lambda c: reference_decode_step(*(a.double() for a in c.args)),
    convert=lambda got, c, expected: _as_triple(got, c),
    right=lambda got, expected: all(_close(g, e) for g, e in zip(got, expected)),
    fingerprints=_kv_fingerprints,
    matches=_matches,
    usable=lambda g: (tuple(g) if isinstance(g, (tuple, list)) and len(g) == 3
                      and all(isinstance(t, torch.Tensor) and _finite(t) for t in g) else None),
    show=_kv_show,
    generic=_kv_generic,
    success=lambda cases: (f"Your decode_step matches attnlib on all {len(cases)} inputs: the new key and value "
                           "appended along time, then one query over every cached position, scaled by 1/sqrt(d_k)."),
    errors=_KV_ERRORS, sort_found=False, doc=CHECK_DECODE_STEP_DOC)

check_decode_step = register(LAB)
