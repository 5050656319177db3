"""The split-heads lab (chapter 6): ``check_split_heads``."""
from __future__ import annotations

import torch

from ...multihead import split_heads
from ._core import (
    any_tensor, _as_tensor_result, _Case, _close, _fail, Lab, _real_head, Refusal, register, _shape,
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


CHECK_SPLIT_HEADS_DOC = """Check a learner's ``split_heads(x, n_heads)`` against :func:`attnlib.split_heads`.

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

def _split_generic(case, expected, got):
    x, H = case.args
    if got.shape != expected.shape:
        _fail(f"On {case.label}, your result has shape {_shape(got)}; expected {_shape(expected)} "
              f"(B, H, T, d_head).", "wrong_shape")
    _fail(f"On {case.label}, your heads hold the wrong numbers." + _trace(x, got, H), "wrong_values")


LAB = Lab(
    key="split_heads", checker="check_split_heads", what="split_heads",
    writes='split_heads(x, n_heads)',
    contract="``(B, T, d_model) -> (B, H, T, d_head)``",
    refusal=Refusal(
        about="writing the reshape yourself, so attnlib.split_heads is not accepted here",
        instead="Reshape (B, T, d_model) to (B, T, H, d_head), then transpose(1, 2).",
        families=("split_heads",)),
    cases=_split_cases,
    reference=lambda c: split_heads(*c.args),
    convert=lambda got, c, expected: _as_tensor_result(got, c, "split_heads"),
    right=_close,
    fingerprints=lambda c: _split_variants(*c.args),
    matches=_close,
    usable=any_tensor,
    show=lambda c, key, expected, got: ((f" Your result has shape {_shape(got)}, expected {_shape(expected)}."
                                         if got.shape != expected.shape else "") + _trace(c.args[0], got, c.args[1])),
    generic=_split_generic,
    success=lambda cases: (f"Your split_heads matches attnlib.split_heads on all {len(cases)} inputs: every head holds "
                           "its own contiguous slice of features of every token, in order."),
    errors=_SPLIT_ERRORS, sort_found=False, doc=CHECK_SPLIT_HEADS_DOC)

check_split_heads = register(LAB)
