"""The causal-mask lab (chapter 5): ``check_causal_mask``."""
from __future__ import annotations

import torch

from ...masks import causal_mask
from ._core import (
    LabFeedback, _Case, _Done, _Raised, _as_tensor_result, _call, _close, _describe, _fail, _fmt, _lab, _pick,
    _raised, _shape, _showing,
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


@_lab
def check_causal_mask(fn) -> LabFeedback:
    """Check a learner's ``causal_mask(T)`` against :func:`attnlib.causal_mask`.

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
    for n, T in enumerate(_CAUSAL_TS):
        case = _Case(f"T = {T}", (T,), {}, True)
        expected = causal_mask(T)
        try:
            got = _call(fn, case, "causal mask")
        except _Raised as r:
            _raised(r.err, case, "causal mask", (), n)
        got = _as_tensor_result(got, case, "causal mask")
        if _close(got, expected):
            continue
        if got.shape == expected.shape and got.dtype != torch.bool:
            g = got.detach().double()
            if bool(((g == 0) | (g == 1)).all()) and torch.equal(g.bool(), expected):
                _fail(f"{_describe(['not_bool'], 'causal_mask')}\nShown by T = {T}: your dtype is {got.dtype}.",
                      "not_bool")
            if torch.equal(torch.isneginf(g), ~expected) and bool((g[expected] == 0).all()):
                _fail(f"{_describe(['additive'], 'causal_mask')}\nShown by T = {T}.", "additive")
        as_bool = got.bool() if got.dtype != torch.bool and got.shape == expected.shape else got
        found = [key for key, value in _causal_variants(T).items() if _close(as_bool, value)]
        if found:
            later = []
            for T2 in _CAUSAL_TS[n + 1:]:
                try:
                    g2 = _call(fn, _Case(f"T = {T2}", (T2,), {}), "causal mask")
                except (_Raised, _Done):
                    continue
                if isinstance(g2, torch.Tensor):
                    later.append((T2, g2.bool() if g2.dtype != torch.bool else g2))
            matches = lambda key, T2, g2: _close(g2, _causal_variants(T2).get(key))  # noqa: E731
            key = _pick(found, later, matches)[0]
            T, as_bool = _showing(key, found, (T, as_bool), later, matches, lambda T2, g2: _close(g2, causal_mask(T2)))
            expected = causal_mask(T)
            extra = ""
            if key.startswith("off_by_one"):
                o = int(key.split("/")[1])
                extra = f" Yours is True where j <= i {'+' if o > 0 else '-'} {abs(o)}."
            _fail(f"{_describe([key.split('/')[0]], 'causal_mask')}{extra}\nShown by T = {T} (rows: queries i, "
                  f"columns: keys j):\n  expected:\n{_fmt(expected)}\n  yours:\n{_fmt(as_bool)}",
                  key.split("/")[0])
        if got.shape != expected.shape:
            _fail(f"For T = {T}, your mask has shape {_shape(got)}; expected ({T}, {T}).", "wrong_shape")
        if got.dtype != torch.bool:
            _fail(f"For T = {T}, your mask has dtype {got.dtype} and values other than the causal pattern; "
                  "expected a torch.bool tensor, True where j <= i.", "wrong_type")
        _fail(f"For T = {T}, your mask is wrong in {int((got != expected).sum())} cell(s) (rows: queries i, "
              f"columns: keys j):\n  expected:\n{_fmt(expected)}\n  yours:\n{_fmt(got)}", "wrong_values")
    return LabFeedback(True, f"Your causal mask matches attnlib.causal_mask for T = "
                       f"{', '.join(map(str, _CAUSAL_TS))}: True where key j <= query i.")
