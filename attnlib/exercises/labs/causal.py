"""The causal-mask lab (chapter 5): ``check_causal_mask``."""
from __future__ import annotations

import torch

from ...masks import causal_mask
from ._core import (
    any_tensor, _as_tensor_result, _Case, _close, _describe, _fail, _fmt, Lab, Refusal, register, _shape,
)

__all__ = ["check_causal_mask"]


_CAUSAL_TS = (1, 2, 3, 4, 5, 8, 13)


def _causal_variants(T: int) -> dict:
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    out = {
        "inverted": j > i,
        "future_included": j >= i,
        "diagonal_dropped": j < i,
        "all_true": torch.ones(T, T, dtype=torch.bool),
    }
    for o in (1, 2, -2):
        out[f"off_by_one/{o}"] = j <= i + o
    return out


CHECK_CAUSAL_MASK_DOC = """Check a learner's ``causal_mask(T)`` against :func:`attnlib.causal_mask`.

    Contract: a ``(T, T)`` ``torch.bool`` tensor, True where query ``i`` may attend to key
    ``j``, i.e. ``j <= i`` (rows are queries, columns keys; True = may attend, as in PyTorch's
    ``scaled_dot_product_attention``).  Checked for ``T`` in 1, 2, 3, 4, 5, 8 and 13 (the
    number of tokens of the course's running sentence... any length works the same).
    :func:`attnlib.causal_mask` and ``nn.Transformer.generate_square_subsequent_mask`` are
    refused (``library_call``); the function runs apart from the grader, at most
    :data:`TIME_LIMIT_S` seconds per input (see :mod:`._sandbox`).

    Shapes:
        result: ``(T, T)`` bool.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["causal_mask"]`` name the mistake.  Never raises.

    Source: Vaswani et al. (2017), section 3.2.3 (masking out illegal connections).
    """

def _as_bool(got: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A 0/1 (or any) mask of the right shape read as bool, to compare with the mistakes."""
    return got.bool() if got.dtype != torch.bool and got.shape == like.shape else got


def _causal_precheck(case, expected, got):
    """A mask of the right pattern in the wrong form: 0/1 numbers, or an additive 0/-inf mask."""
    if got.shape == expected.shape and got.dtype != torch.bool:
        g = got.detach().double()
        if bool(((g == 0) | (g == 1)).all()) and torch.equal(g.bool(), expected):
            _fail(f"{_describe(['not_bool'], 'causal_mask')}\nShown by {case.label}: your dtype is {got.dtype}.",
                  "not_bool")
        if torch.equal(torch.isneginf(g), ~expected) and bool((g[expected] == 0).all()):
            _fail(f"{_describe(['additive'], 'causal_mask')}\nShown by {case.label}.", "additive")


def _causal_show(case, key, expected, got):
    extra = ""
    if key.startswith("off_by_one"):
        o = int(key.split("/")[1])
        extra = f" Yours is True where j <= i {'+' if o > 0 else '-'} {abs(o)}."
    return (f"{extra} Rows: queries i, columns: keys j.\n  expected:\n{_fmt(expected)}\n  yours:\n"
            f"{_fmt(_as_bool(got, expected))}")


def _causal_generic(case, expected, got):
    (T,) = case.args
    if got.shape != expected.shape:
        _fail(f"For T = {T}, your mask has shape {_shape(got)}; expected ({T}, {T}).", "wrong_shape")
    if got.dtype != torch.bool:
        _fail(f"For T = {T}, your mask has dtype {got.dtype} and values other than the causal pattern; "
              "expected a torch.bool tensor, True where j <= i.", "wrong_type")
    _fail(f"For T = {T}, your mask is wrong in {int((got != expected).sum())} cell(s) (rows: queries i, "
          f"columns: keys j):\n  expected:\n{_fmt(expected)}\n  yours:\n{_fmt(got)}", "wrong_values")


LAB = Lab(
    key="causal_mask", checker="check_causal_mask", what="causal mask",
    writes='causal_mask(T)',
    contract="``(T, T)`` bool, True where ``j <= i``",
    refusal=Refusal(
        about="building the mask yourself, so a ready-made causal mask (attnlib.causal_mask, attnlib's sliding-window "
              "and document masks, nn.Transformer.generate_square_subsequent_mask) is not accepted here",
        instead="Compare positions: i = torch.arange(T), then i[None, :] <= i[:, None]; or "
                "torch.tril(torch.ones(T, T, dtype=torch.bool)).",
        families=("causal", "subsequent_mask"),
        attnlib=("sliding_window", "document_mask")),
    cases=lambda: [_Case(f"T = {T}", (T,), {}, True) for T in _CAUSAL_TS],
    reference=lambda c: causal_mask(*c.args),
    convert=lambda got, c, expected: _as_tensor_result(got, c, "causal mask"),
    right=_close,
    precheck=_causal_precheck,
    fingerprints=lambda c: _causal_variants(*c.args),
    matches=lambda got, value: _close(_as_bool(got, value), value),
    usable=any_tensor,
    show=_causal_show,
    generic=_causal_generic,
    success=lambda cases: (f"Your causal mask matches attnlib.causal_mask for T = "
                           f"{', '.join(str(c.args[0]) for c in cases)}: True where key j <= query i."),
    sort_found=False, doc=CHECK_CAUSAL_MASK_DOC)

check_causal_mask = register(LAB)
