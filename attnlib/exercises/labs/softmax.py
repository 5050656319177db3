"""The softmax lab (chapter 4): ``check_softmax``."""
from __future__ import annotations

import math

import torch

from ...softmax import softmax
from ._core import (
    LARGE_SCORE, REAL_LAYER, _as_tensor_result, _Case, _close, finite_tensor, _generic_tensor, Lab, _randn,
    _real_head, Refusal, register, _shape, _sums_text,
)

__all__ = ["check_softmax"]


def _softmax_cases() -> list[_Case]:
    big = torch.tensor([LARGE_SCORE, LARGE_SCORE - 1, LARGE_SCORE - 2])
    two_scales = torch.stack([big, -big])
    L = int(LARGE_SCORE)
    small = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 0.0]])
    cases = [
        _Case("x = [1, 2, 3] (shape (3,), dim=-1)", (torch.tensor([1.0, 2.0, 3.0]),), {"dim": -1}, True),
        _Case("x of shape (2, 3) with dim=-1", (small,), {"dim": -1}, True),
        _Case("x of shape (2, 3) with dim=0", (small,), {"dim": 0}, True),
        _Case(f"x = [{L}, {L - 1}, {L - 2}] (large scores, dim=-1)", (big,), {"dim": -1}, True),
        _Case(f"x of shape (2, 3) with rows near +{L} and -{L} (dim=-1)", (two_scales,), {"dim": -1}, True),
        _Case("random x of shape (2, 3, 5, 7) (B, H, T_q, T_k), dim=-1", (_randn(2, 3, 5, 7, seed=1, scale=3.0),),
              {"dim": -1}),
        _Case("random x of shape (4, 6, 5) with dim=1", (_randn(4, 6, 5, seed=2, scale=3.0),), {"dim": 1}),
        _Case("random x of shape (3, 4, 5) with dim=-3", (_randn(3, 4, 5, seed=3, scale=3.0),), {"dim": -3}),
    ]
    def real(factor):
        def make():
            _, q, k, _, _ = _real_head()
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])    # (H, T, T), real scaled scores
            what = "" if factor == 1 else f" times {factor}"
            return f"the real scores of layer {REAL_LAYER}'s heads{what}, shape {_shape(scores)}, dim=-1", \
                (scores * factor,)
        return _Case(None, kwargs={"dim": -1}, make=make)

    return cases + [real(1), real(1000)]


def _softmax_variants(x: torch.Tensor, dim: int) -> dict:
    """What each mistake returns on ``x`` (float64)."""
    x = x.double()
    nd = x.dim()
    d = dim % nd
    out = {}
    for other in range(nd):
        if other != d:
            key = "ignores_dim" if other == nd - 1 else "wrong_axis"
            out.setdefault(key, softmax(x, dim=other))
    e = torch.exp(x)
    out["no_max_subtraction"] = e / e.sum(dim=d, keepdim=True)
    eg = torch.exp(x - x.max())
    out["global_max"] = eg / eg.sum(dim=d, keepdim=True)
    out["normalised_over_everything"] = eg / eg.sum()
    es = torch.exp(x - x.amax(dim=d, keepdim=True))
    out["no_normalisation"] = es
    out["no_normalisation/raw"] = e
    out["log_softmax"] = torch.log_softmax(x, dim=d)
    out["no_exp"] = x / x.sum(dim=d, keepdim=True)
    if nd >= 2:  # reductions without keepdim broadcast against the last dimensions
        for keyname, fn in (("missing_keepdim", lambda: es / es.sum(dim=d)),
                            ("missing_keepdim/max", lambda: softmax(x - x.amax(dim=d), dim=d))):
            try:
                out[keyname] = fn()
            except RuntimeError:
                pass
    return out


_SOFTMAX_ERRORS = (("return_types", "max_returns_pair"), ("must match the size", "missing_keepdim"))


DOC = """Check a learner's ``softmax(x, dim=-1)`` against :func:`attnlib.softmax`.

    Contract: returns a tensor of ``x``'s shape with entries in ``[0, 1]`` that sum to 1 along
    ``dim`` (any dim, negative too), exact for scores of any size (``x`` up to ``1e4``, where
    ``exp`` overflows without the maximum subtracted).  The result may be float32 or float64.

    Inputs, smallest first: ``(3,)``, ``(2, 3)`` along each axis, scores of ``+-10000``, random
    ``(2, 3, 5, 7)``, ``(4, 6, 5)`` with ``dim=1``, ``(3, 4, 5)`` with ``dim=-3``, and the real
    scaled scores of every head of one encoder layer ``(H, T, T)``, as they are and times 1000.

    A library softmax (``torch.softmax``, ``F.softmax``, ``Tensor.softmax``, ``log_softmax``,
    ``softmin``, ``nn.Softmax``, :func:`attnlib.softmax`, ``scipy.special.softmax``) is refused
    (``library_call``).  The function runs apart from the grader, at most
    :data:`TIME_LIMIT_S` seconds per input (see :mod:`._sandbox`).

    Shapes:
        x: any shape; result: the same shape.

    Returns:
        :class:`LabFeedback`; wrong results name the mistake (keys of ``MISTAKES["softmax"]``).
        Never raises.

    Source: the max-subtracted softmax (chapter 4); Bridle (1990).
    """

LAB = Lab(
    key="softmax", checker="check_softmax", what="softmax",
    writes='softmax(x, dim=-1)',
    contract="same shape; entries in [0, 1]; sum 1 along ``dim``; no overflow at 1e4",
    refusal=Refusal(
        about="writing the softmax yourself, so a library softmax (torch.softmax, F.softmax, x.softmax, log_softmax, "
              "nn.Softmax, attnlib.softmax) is not accepted here",
        instead="Build it from torch.exp, each slice's maximum (x.amax(dim=dim, keepdim=True)) and a sum "
                "(keepdim=True). Outside this lab, do use the library's softmax.",
        families=("softmax", "softmin")),
    cases=_softmax_cases,
    reference=lambda c: softmax(c.args[0].double(), dim=c.kwargs["dim"]),
    convert=lambda got, c, expected: _as_tensor_result(got, c, "softmax"),
    right=_close,
    fingerprints=lambda c: _softmax_variants(c.args[0], c.kwargs["dim"]),
    matches=_close,
    usable=finite_tensor,
    generic=lambda c, expected, got: _generic_tensor(c, "softmax", expected, got,
                                                     extra=_sums_text(got, c.kwargs["dim"], expected.shape)),
    success=lambda cases: (f"Your softmax matches attnlib.softmax on all {len(cases)} inputs: small ones along each "
                           f"axis, scores of +-{int(LARGE_SCORE)}, batches of heads and a real layer's scores."),
    errors=_SOFTMAX_ERRORS, sort_found=False, doc=DOC)

check_softmax = register(LAB)
