"""The split-heads lab (chapter 6): ``check_split_heads``."""
from __future__ import annotations

import torch

from ...multihead import split_heads
from ._core import (
    LabFeedback, _Case, _Raised, _as_tensor_result, _call, _close, _fail, _lab, _later_results, _pick,
    _raised, _real_head, _shape, _showing, _wrong,
)

__all__ = ["check_split_heads"]


def _split_cases() -> list[_Case]:
    def seq(B, T, D):  # unique values, so every number tells where it came from
        return torch.arange(B * T * D, dtype=torch.float32).reshape(B, T, D)

    def real():
        _, _, _, _, X = _real_head()
        X2 = torch.stack([X, X.flip(0)])                                # (2, T, d_model): two real sequences
        return f"the real layer input of two sequences, shape {_shape(X2)}, n_heads=12", (X2, 12)

    return [
        _Case("x of shape (1, 2, 4) (B=1, T=2, d_model=4), n_heads=2", (seq(1, 2, 4), 2), {}, True),
        _Case("x of shape (1, 3, 4), n_heads=2", (seq(1, 3, 4), 2), {}, True),
        _Case("x of shape (2, 5, 6), n_heads=3", (seq(2, 5, 6), 3), {}),
        _Case("x of shape (3, 5, 12), n_heads=4", (seq(3, 5, 12), 4), {}),
        _Case("x of shape (2, 3, 5), n_heads=1", (seq(2, 3, 5), 1), {}),
        _Case(None, make=real),
    ]


def _split_variants(x: torch.Tensor, H: int) -> dict:
    B, T, D = x.shape
    dh = D // H
    return {
        "missing_transpose": x.reshape(B, T, H, dh),
        "mixes_tokens": x.reshape(B, H, T, dh),
        "interleaved": x.reshape(B, T, dh, H).permute(0, 3, 1, 2),
        "heads_in_batch": split_heads(x, H).reshape(B * H, T, dh),
        "tokens_and_features_swapped": split_heads(x, H).transpose(-2, -1),
    }


def _trace(x: torch.Tensor, got: torch.Tensor, H: int) -> str:
    """Where the first wrong number of ``got`` came from in ``x`` (values of ``x`` are unique)."""
    B, T, D = x.shape
    dh = D // H
    expected = split_heads(x, H)
    if got.shape != expected.shape:
        return ""
    bad = (got.detach().double() != expected.double()).nonzero()
    if not len(bad):
        return ""
    b, h, t, f = (int(n) for n in bad[0])
    value = float(got[b, h, t, f])
    src = (x.double() == value).nonzero()
    where = (f"feature {int(src[0][2])} of token {int(src[0][1])}" + (f" of sequence {int(src[0][0])}" if B > 1 else "")
             if len(src) == 1 else f"the value {value:.4g}, which is not in x at all")
    return (f"\n  result[{b}, {h}, {t}, {f}] (sequence {b}, head {h}, token {t}, entry {f} of the head)"
            f"\n  should be feature {h * dh + f} of token {t}; yours holds {where}.")


_SPLIT_ERRORS = (("got float", "float_d_head"),
                 ("must be tuple of ints", "float_d_head"), ("received an invalid combination", "float_d_head"))


@_lab
def check_split_heads(fn) -> LabFeedback:
    """Check a learner's ``split_heads(x, n_heads)`` against :func:`attnlib.split_heads`.

    Contract: ``(B, T, d_model) -> (B, H, T, d_head)`` with ``d_head = d_model // H``; head
    ``h`` holds features ``h*d_head : (h+1)*d_head`` of every token, in token order.

    Inputs, smallest first: ``(1, 2, 4)`` and ``(1, 3, 4)`` with 2 heads, ``(2, 5, 6)`` with 3,
    ``(3, 5, 12)`` with 4, ``(2, 3, 5)`` with 1, all with distinct values so that every
    number tells where it came from; the real input of one encoder layer for two sequences,
    ``(2, T, 384)`` with 12 heads.  :func:`attnlib.split_heads` is refused
    (``library_call``); the function runs apart from the grader, at most
    :data:`TIME_LIMIT_S` seconds per input (see :mod:`._sandbox`).

    Shapes:
        x: ``(B, T, d_model)``; result: ``(B, H, T, d_head)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["split_heads"]`` name the mistake.  Never raises.

    Source: Vaswani et al. (2017), section 3.2.2 (multi-head attention).
    """
    cases = _split_cases()
    for i, case in enumerate(cases):
        x, H = case.args
        expected = split_heads(x, H)
        try:
            got = _call(fn, case, "split_heads")
        except _Raised as r:
            _raised(r.err, case, "split_heads", _SPLIT_ERRORS, i)
        got = _as_tensor_result(got, case, "split_heads")
        if _close(got, expected):
            continue
        found = [key for key, value in _split_variants(x, H).items() if _close(got, value)]
        if found:
            later = _later_results(fn, cases, i, lambda g: g if isinstance(g, torch.Tensor) else None)
            matches = lambda key, c, g: _close(g, c.memo("v", lambda: _split_variants(*c.args))[key])  # noqa: E731
            key = _pick(found, later, matches)[0]
            case, got = _showing(key, found, (case, got), later, matches,
                                 lambda c, g: _close(g, split_heads(*c.args)))
            x, H = case.args
            expected = split_heads(x, H)
            _wrong(case, "split_heads", key, expected, got,
                   show=lambda: (f" Your result has shape {_shape(got)}, expected {_shape(expected)}."
                                 if got.shape != expected.shape else "") + _trace(x, got, H))
        if got.shape != expected.shape:
            _fail(f"On {case.label}, your result has shape {_shape(got)}; expected {_shape(expected)} "
                  f"(B, H, T, d_head).", "wrong_shape")
        _fail(f"On {case.label}, your heads hold the wrong numbers." + _trace(x, got, H), "wrong_values")
    return LabFeedback(True, f"Your split_heads matches attnlib.split_heads on all {len(cases)} inputs: every "
                       "head holds its own contiguous slice of features of every token, in order.")
