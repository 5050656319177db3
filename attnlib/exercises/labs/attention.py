"""The attention lab (chapter 4): ``check_attention``."""
from __future__ import annotations

import itertools
import math

import torch

from ...attention import scaled_dot_product_attention
from ...masks import causal_mask
from ...softmax import softmax
from ._core import (
    READY_MADE_ATTENTION, REAL_LAYER, _as_tensor_result, _call, _Case, _close, _describe, _Done, _fail, _finite,
    _fmt, _gen, _generic_tensor, _ints, Lab, _Raised, _randn, _real_head, Refusal, register, _shape, _sums_text,
    _wrong,
)

__all__ = ["check_attention"]


def _attention_cases() -> list[_Case]:
    mask23 = torch.tensor([[True, False, True], [False, True, True]])
    q1, k1, v1 = _randn(2, 4, seed=11), _randn(3, 4, seed=12), _randn(3, 2, seed=13)
    pad = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    pad[1, ..., 5:] = False                                            # batch 1: the last 2 keys are padding
    gen = _gen(17)
    rand_mask = torch.rand(5, 7, generator=gen) < 0.6
    rand_mask[torch.arange(5), torch.randint(0, 7, (5,), generator=gen)] = True   # >= 1 key per row
    rand_mask[torch.arange(5), torch.randint(0, 7, (5,), generator=gen)] = False  # >= 1 removed (mostly)
    rand_mask[:, 0] |= ~rand_mask.any(-1)

    def real():
        _, q, k, v, _ = _real_head()
        T = q.shape[-2]
        return (f"the real q, k, v of layer {REAL_LAYER}'s heads, shape {_shape(q)}, with a causal mask ({T}, {T})",
                (q, k, v, causal_mask(T)))

    cases = [
        _Case("q (2, 4), k (3, 4), v (3, 2) (T_q=2, T_k=3, d_k=4, d_v=2), no mask", (q1, k1, v1), {}, True),
        _Case("q (2, 4), k (3, 4), v (3, 2) with mask [[1, 0, 1], [0, 1, 1]]", (q1, k1, v1, mask23), {}, True),
        _Case("q (2, 3, 5, 4), k (2, 3, 7, 4), v (2, 3, 7, 6) (B=2, H=3), no mask",
              (_randn(2, 3, 5, 4, seed=14), _randn(2, 3, 7, 4, seed=15), _randn(2, 3, 7, 6, seed=16)), {}),
        _Case("q (2, 3, 5, 4), k (2, 3, 7, 4), v (2, 3, 7, 6) (B=2, H=3), padding mask (2, 1, 1, 7)",
              (_randn(2, 3, 5, 4, seed=14), _randn(2, 3, 7, 4, seed=15), _randn(2, 3, 7, 6, seed=16), pad), {}),
        _Case("q (3, 5, 8), k (3, 7, 8), v (3, 7, 3) with a random mask (5, 7)",
              (_randn(3, 5, 8, seed=18), _randn(3, 7, 8, seed=19), _randn(3, 7, 3, seed=20), rand_mask), {}),
        _Case("integer q (3, 4), k (4, 4) with entries up to 60 (scores up to about 1e4), v (4, 2)",
              (_ints(3, 4, seed=21, high=60), _ints(4, 4, seed=22, high=60), _randn(4, 2, seed=23)), {}),
        _Case(None, make=real),
    ]
    return cases


_SCALES = {"ok": None, "no_scaling": 1.0, "scaled_by_d_k": "d_k", "scaled_up": "up"}
_MASK_MODES = ("ok", "mask_inverted", "mask_ignored", "mask_after_softmax", "mask_added", "masked_to_zero")


def _attention_variant(q, k, v, mask, scale="ok", mask_mode="ok", axis=-1, naive=False, after=False,
                       transposed=False, from_scores=False):
    """``(out, weights)`` of attention with the given mistakes, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    d_k = q.shape[-1]
    c = {"ok": 1 / math.sqrt(d_k), "no_scaling": 1.0, "scaled_by_d_k": 1 / d_k, "scaled_up": math.sqrt(d_k)}[scale]
    s = (k @ q.transpose(-2, -1) if transposed else q @ k.transpose(-2, -1)) * (1.0 if after else c)
    allowed = None if mask is None else torch.broadcast_to(mask.transpose(-2, -1) if transposed else mask, s.shape)
    if allowed is not None:
        if mask_mode == "ok":
            s = s.masked_fill(~allowed, float("-inf"))
        elif mask_mode == "mask_inverted":
            s = s.masked_fill(allowed, float("-inf"))
        elif mask_mode == "mask_added":
            s = s + allowed.double()
        elif mask_mode == "masked_to_zero":
            s = s.masked_fill(~allowed, 0.0)
    if naive:                                                           # overflows as in float32 or float64
        e = torch.exp(s.float()).double() if naive == "32" else torch.exp(s)
        w = e / e.sum(dim=axis, keepdim=True)
    else:
        w = softmax(s, dim=axis)
    if allowed is not None and mask_mode == "mask_after_softmax":
        w = w * allowed
    if after:
        w = w * c
    out = (s if from_scores else w) @ v
    return out, w


def _attention_fingerprints(case: _Case) -> dict:
    """``{(mistake keys...): (out, weights)}`` for the single mistakes and their pairs."""
    q, k, v = case.args[:3]
    mask = case.args[3] if len(case.args) > 3 else None
    singles = [dict(scale=s) for s in ("no_scaling", "scaled_by_d_k", "scaled_up")]
    singles += [dict(mask_mode=m) for m in _MASK_MODES[1:]]
    singles += [dict(axis=-2), dict(naive="32"), dict(naive="64"), dict(after=True), dict(from_scores=True)]
    names = {"axis": "softmax_wrong_axis", "naive": "no_max_subtraction", "after": "scaled_after_softmax",
             "from_scores": "out_from_scores"}

    def keys_of(opts):
        return tuple(v if k in ("scale", "mask_mode") else names[k] + ("/32" if v == "32" else "")
                     for k, v in opts.items())

    out = {}
    for opts in singles:
        out[keys_of(opts)] = _attention_variant(q, k, v, mask, **opts)
    for a, b in itertools.combinations(singles, 2):
        if set(a) & set(b):
            continue
        opts = {**a, **b}
        out[keys_of(opts)] = _attention_variant(q, k, v, mask, **opts)
    if q.shape[-2] == k.shape[-2]:
        out[("scores_transposed",)] = _attention_variant(q, k, v, mask, transposed=True)
    return out


def _fitted_scale(case: _Case, weights: torch.Tensor):
    """``c`` such that ``weights ~ softmax(c q k^T)`` on the allowed keys, or None."""
    q, k = case.args[0].double(), case.args[1].double()
    raw = q @ k.transpose(-2, -1)
    w = weights.detach().double()
    if w.shape != raw.shape or not _finite(w) or (w <= 0).any():
        return None
    lw = w.log() - w.log().mean(-1, keepdim=True)
    r = raw - raw.mean(-1, keepdim=True)
    c = float((lw * r).sum() / (r * r).sum())
    if not torch.allclose(softmax(c * raw, dim=-1), w, rtol=1e-3, atol=1e-5):
        return None
    return c


def _reference_attention(case: _Case) -> tuple:
    """attnlib's ``(out, weights)`` on ``case``, in float64."""
    return scaled_dot_product_attention(*(a.double() if a.is_floating_point() else a for a in case.args))


def _probe_square(fn) -> None:
    """After a shape error on the first input (``T_q != T_k``), run the learner on a square
    one (``T_q = T_k``), where a transposed score matrix still fits, and name the mistake if
    its result is one of the fingerprints."""
    case = _Case("q (3, 4), k (3, 4), v (3, 2) (T_q = T_k = 3, no mask)",
                 (_randn(3, 4, seed=24), _randn(3, 4, seed=25), _randn(3, 2, seed=26)), {}, True)
    try:
        got = _pair_or_none(_call(fn, case, "attention"))
    except (_Raised, _Done):
        return
    if got is None:
        return
    exp_out, exp_w = scaled_dot_product_attention(*(a.double() for a in case.args))
    found = sorted((key for key, (o, w) in _attention_fingerprints(case).items()
                    if _close(got[1], w) and _close(got[0], o)), key=len)
    if found:
        _wrong_attention(case, found[0], exp_w, got[1],
                         " (Your function fails when T_q != T_k; on this square input it runs.)")


def _is_shape_error(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, (RuntimeError, ValueError, IndexError)) and any(
        s in text for s in ("size", "shape", "dimension", "mat1", "mat2", "broadcast", "Dimension"))


def _pair_or_none(got):
    if isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got) \
            and all(_finite(t) for t in got):
        return tuple(got)
    return None


def _attention_pair(got, case: _Case, exp_out: torch.Tensor, exp_w: torch.Tensor):
    """``(out, weights)`` from the learner's result, or a failure naming what is wrong with it."""
    if isinstance(got, torch.Tensor):
        _fail(f"On {case.label}, your attention returned one tensor of shape {_shape(got)}; the contract "
              f"returns a pair `(out, weights)`: out {_shape(exp_out)} and weights {_shape(exp_w)}.", "wrong_type")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        what = f"a {type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "")
        _fail(f"On {case.label}, your attention returned {what}; expected a pair `(out, weights)`.", "wrong_type")
    out = _as_tensor_result(got[0], case, "attention", "out (the first item)")
    w = _as_tensor_result(got[1], case, "attention", "weights (the second item)")
    if out.shape == exp_w.shape and w.shape == exp_out.shape and exp_out.shape != exp_w.shape:
        if _close(out, exp_w):
            _fail(f"{_describe(['returns_swapped'], 'attention')}\nShown by {case.label}: your first item has the "
                  f"weights' shape {_shape(exp_w)}.", "returns_swapped")
    T_q, T_k = exp_w.shape[-2], exp_w.shape[-1]
    if T_q != T_k and w.shape == (*exp_w.shape[:-2], T_k, T_q):
        _fail(f"{_describe(['scores_transposed'], 'attention')}\nShown by {case.label}: your weights have shape "
              f"{_shape(w)}, i.e. (T_k, T_q); expected {_shape(exp_w)}.", "scores_transposed")
    return out, w


def _wrong_attention(case: _Case, keys, exp_w, w, extra: str = "", out=None):
    _wrong(case, "attention", keys, exp_w, w, show=lambda: _attention_show(case, keys, exp_w, w, extra, out))


def _attention_show(case: _Case, keys, exp_w, w, extra: str = "", out=None) -> str:
    """The text after a named mistake: the weights (or ``out``) expected and the learner's."""
    text = extra
    if not _finite(w):
        n = int((~torch.isfinite(w.detach().double())).sum())
        return text + f" Your weights have {n} NaN or infinite value(s) out of {w.numel()}."
    if "out_from_scores" in keys and case.small:
        exp_out = _reference_attention(case)[0]
        return text + f"\n  expected out: {_fmt(exp_out)}\n  your out:     {_fmt(out)}" if out is not None else text
    if case.small and w.numel() <= 12:
        text += f"\n  expected weights: {_fmt(exp_w)}\n  your weights:     {_fmt(w)}"
        if w.shape == exp_w.shape and _finite(w):
            text += f"\n  (your rows sum to {_fmt(w.double().sum(-1))})"
    return text


def _on_raised(fn, err, case: _Case, index: int, passed: list):
    """A shape error on a batch after 2-D inputs passed names the batched mistake; one on the
    first input (``T_q != T_k``) sends the learner's function to a square input."""
    if case.args[0].dim() > 2 and any(c.args[0].dim() == 2 for c in passed) and _is_shape_error(err):
        key = ("mask_not_broadcast" if len(case.args) > 3 and any(c.args[0].dim() > 2 for c in passed)
               else "batched_transpose")
        return key, _describe([key], "attention")
    if index == 0 and _is_shape_error(err):
        _probe_square(fn)
    return None


def _attention_generic(case: _Case, expected, got):
    (exp_out, exp_w), (out, w) = expected, got
    if w.shape == exp_w.shape and _close(w, exp_w):
        _fail(f"On {case.label}, your weights are right but `out` is not `weights @ v`"
              + (f": shape {_shape(out)}, expected {_shape(exp_out)}." if out.shape != exp_out.shape else "."),
              "wrong_values")
    if w.shape == exp_w.shape and (len(case.args) == 3):
        c = _fitted_scale(case, w)
        if c is not None:
            _wrong_attention(case, ("other_scale",), exp_w, w,
                             f" Your weights are softmax(c q k^T) with c = {c:.4g}; the scale is "
                             f"1/sqrt(d_k) = {1 / math.sqrt(case.args[0].shape[-1]):.4g}.")
    _generic_tensor(case, "attention weights", exp_w, w, extra=_sums_text(w, -1, exp_w.shape))


CHECK_ATTENTION_DOC = """Check a learner's ``attention(q, k, v, mask=None) -> (out, weights)`` against
    :func:`attnlib.scaled_dot_product_attention`.

    Contract: ``weights = softmax(q k^T / sqrt(d_k))`` along the keys, with the keys where the
    boolean ``mask`` is False removed before the softmax (True = may attend, as in PyTorch's
    ``scaled_dot_product_attention``; the mask broadcasts to ``(..., T_q, T_k)``), and
    ``out = weights @ v``.  The mask is passed as the fourth positional argument, and left out
    when there is none.  No input has a fully masked row.

    Inputs, smallest first: ``T_q=2, T_k=3, d_k=4, d_v=2`` without and with a mask; batches of
    heads ``(2, 3, ...)`` with a padding mask ``(2, 1, 1, 7)``; ``(3, ...)`` with a ``(5, 7)``
    mask; integer-valued q and k whose scores reach about 1e4; the real q, k, v of every head
    of one encoder layer with a causal mask.

    Ready-made attention (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``,
    attnlib's attention functions) is refused (``library_call``); ``torch.softmax`` is fine.
    The function runs apart from the grader, at most :data:`TIME_LIMIT_S` seconds per input
    (see :mod:`._sandbox`).

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``,
        mask: broadcastable to ``(..., T_q, T_k)``; returns ``out`` ``(..., T_q, d_v)`` and
        ``weights`` ``(..., T_q, T_k)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["attention"]`` name the mistakes (two at
        once are recognised).  Never raises.

    Source: Vaswani et al. (2017), "Attention Is All You Need", eq. (1).
    """

LAB = Lab(
    key="attention", checker="check_attention", what="attention",
    writes='attention(q, k, v, mask=None) -> (out, weights)',
    contract="``softmax(Q K^T / sqrt(d_k))`` with a boolean mask (True = may attend)",
    refusal=Refusal(
        about="writing attention yourself, so ready-made attention (F.scaled_dot_product_attention, "
              "nn.MultiheadAttention, attnlib's attention functions) is not accepted here",
        instead="Compute the scores q @ k.transpose(-2, -1) / sqrt(d_k), fill the masked ones with -inf, take the "
                "softmax over the keys (torch.softmax is fine in this lab) and multiply by v.",
        **READY_MADE_ATTENTION),
    cases=_attention_cases,
    reference=_reference_attention,
    convert=lambda got, c, expected: _attention_pair(got, c, *expected),
    right=lambda got, expected: _close(got[0], expected[0]) and _close(got[1], expected[1]),
    fingerprints=_attention_fingerprints,
    matches=lambda got, fp: _close(got[1], fp[1]) and _close(got[0], fp[0]),
    usable=_pair_or_none,
    show=lambda c, key, expected, got: _attention_show(c, key, expected[1], got[1], out=got[0]),
    generic=_attention_generic,
    success=lambda cases: (f"Your attention matches attnlib.scaled_dot_product_attention on all {len(cases)} inputs: "
                           "T_q != T_k, boolean masks that broadcast, batches of heads, scores near 1e4 and a real "
                           "layer with a causal mask."),
    on_raised=_on_raised, doc=CHECK_ATTENTION_DOC)

check_attention = register(LAB)
