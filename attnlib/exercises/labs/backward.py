"""The attention-backward lab (chapter 11): ``check_attention_backward``."""
from __future__ import annotations

import itertools
import math

import torch

from ...attention import scaled_dot_product_attention
from ...softmax import softmax
from ._core import (
    REAL_LAYER, _as_tensor_result, _Case, _close, _fail, _finite, _fmt, _generic_tensor, _ints, Lab, _randn,
    _real_head, Refusal, register, _shape,
)

__all__ = ["check_attention_backward"]

#: The gradients, in the order the learner returns them.
_NAMES = ("dq", "dk", "dv")


def _backward_cases() -> list[_Case]:
    def real():
        _, q, k, v, _ = _real_head()
        d_out = _randn(*v.shape, seed=58)
        return (f"the real q, k, v of layer {REAL_LAYER}'s heads, shape {_shape(q)}, with a seeded random "
                f"d_out {_shape(d_out)}"), (q, k, v, d_out)

    q_big, k_big = _ints(3, 4, seed=56, high=9), _ints(6, 4, seed=57, high=9)
    return [
        _Case("q, k, v, d_out of shape (2, 2) (T_q = T_k = 2, d_k = 2)",
              (_randn(2, 2, seed=50), _randn(2, 2, seed=51), _randn(2, 2, seed=52), _randn(2, 2, seed=53)), {}, True),
        _Case("q (3, 4), k (3, 4), v (3, 3), d_out (3, 3) (T_q = T_k = 3)",
              (_randn(3, 4, seed=54), _randn(3, 4, seed=55), _randn(3, 3, seed=59), _randn(3, 3, seed=60)), {}),
        _Case("q (2, 4), k (5, 4), v (5, 3), d_out (2, 3) (T_q != T_k)",
              (_randn(2, 4, seed=61), _randn(5, 4, seed=62), _randn(5, 3, seed=63), _randn(2, 3, seed=64)), {}),
        _Case("q (2, 3, 5, 8), k (2, 3, 7, 8), v (2, 3, 7, 6), d_out (2, 3, 5, 6) (B=2, H=3)",
              (_randn(2, 3, 5, 8, seed=65), _randn(2, 3, 7, 8, seed=66), _randn(2, 3, 7, 6, seed=67),
               _randn(2, 3, 5, 6, seed=68)), {}),
        _Case("integer q (3, 4), k (6, 4) with entries up to 9 (scores up to about 160: exp overflows float32 "
              "without the maximum subtracted), v (6, 2), d_out (3, 2)",
              (q_big, k_big, _randn(6, 2, seed=69), _randn(3, 2, seed=70)), {}),
        _Case(None, make=real),
    ]


#: The named mistakes, in the order they are listed; at most one of the rowsum family at once.
_BUGS = ("no_rowsum", "rowsum_wrong_axis", "rowsum_no_keepdim", "no_scaling", "dv_not_transposed",
         "dk_not_transposed")
_ROWSUM = {"no_rowsum", "rowsum_wrong_axis", "rowsum_no_keepdim"}


def _backward_variant(q, k, v, d_out, bugs=()) -> tuple | None:
    """``(dq, dk, dv)`` of ``softmax(q k^T / sqrt(d_k)) v`` against ``d_out``, written out, with
    the mistakes ``bugs`` (float64); None where a mistake's shapes do not fit this input."""
    q, k, v, d_out = (t.double() for t in (q, k, v, d_out))
    c = 1 / math.sqrt(q.shape[-1])
    A = softmax(q @ k.transpose(-2, -1) * c)                               # (..., T_q, T_k)
    try:
        dA = d_out @ v.transpose(-2, -1)                                   # (..., T_q, T_k)
        dv = (A if "dv_not_transposed" in bugs else A.transpose(-2, -1)) @ d_out
        if "no_rowsum" in bugs:
            r = 0.0
        elif "rowsum_wrong_axis" in bugs:
            r = (dA * A).sum(-2, keepdim=True)
        elif "rowsum_no_keepdim" in bugs:
            r = (dA * A).sum(-1)[..., None, :]                             # broadcasts along the rows
        else:
            r = (dA * A).sum(-1, keepdim=True)
        dS = A * (dA - r)
        if dS.shape != A.shape:
            return None
        s = 1.0 if "no_scaling" in bugs else c
        dq = dS @ k * s
        dk = (dS if "dk_not_transposed" in bugs else dS.transpose(-2, -1)) @ q * s
    except RuntimeError:
        return None
    return dq, dk, dv


def _backward_fingerprints(case: _Case) -> dict:
    """``{(bug, ...): (dq, dk, dv)}`` for every mistake alone and every two at once."""
    out = {}
    for n in (1, 2):
        for keys in itertools.combinations(_BUGS, n):
            if len(_ROWSUM.intersection(keys)) > 1:
                continue
            fp = _backward_variant(*case.args, bugs=keys)
            if fp is not None:
                out[keys] = fp
    return out


def _reference_backward(case: _Case) -> tuple:
    """The gradients of :func:`attnlib.scaled_dot_product_attention` on ``case`` by
    ``torch.autograd`` (float64): ``(dq, dk, dv)``."""
    q, k, v, d_out = case.args
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    with torch.enable_grad():
        out, _ = scaled_dot_product_attention(*leaves)
        return torch.autograd.grad(out, leaves, d_out.double())


def _triple_or_none(got):
    if isinstance(got, (tuple, list)) and len(got) == 3 and all(isinstance(t, torch.Tensor) and _finite(t)
                                                                for t in got):
        return tuple(got)
    return None


def _triple(got, case: _Case, expected: tuple) -> tuple:
    """``(dq, dk, dv)`` from the learner's result, or a failure saying what is wrong with it."""
    if isinstance(got, torch.Tensor):
        _fail(f"On {case.label}, your attention backward returned one tensor of shape {_shape(got)}; the "
              "contract returns three, `(dq, dk, dv)`, of the shapes of q, k and v.", "wrong_type")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        what = f"a {type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "")
        _fail(f"On {case.label}, your attention backward returned {what}; expected three tensors "
              "`(dq, dk, dv)`.", "wrong_type")
    grads = tuple(_as_tensor_result(g, case, "attention backward", f"{name} (item {i + 1})")
                  for i, (g, name) in enumerate(zip(got, _NAMES)))
    for g, e, name, arg in zip(grads, expected, _NAMES, ("q", "k", "v")):
        if g.shape != e.shape:
            swap = [n for n, e2 in zip(_NAMES, expected) if e2.shape == g.shape and n != name]
            extra = f" (that is the shape of {swap[0]}: are the three returned in the order dq, dk, dv?)" if swap else ""
            _fail(f"On {case.label}, your {name} has shape {_shape(g)}; a gradient has the shape of what it is "
                  f"the gradient of, here {arg}: {_shape(e)}{extra}.", "wrong_shape")
    return grads


def _all_close(got: tuple, want: tuple | None) -> bool:
    return want is not None and all(_close(g, w) for g, w in zip(got, want))


def _show(case: _Case, got: tuple, expected: tuple):
    def text() -> str:
        wrong = [n for n, g, e in zip(_NAMES, got, expected) if not _close(g, e)]
        right = [n for n in _NAMES if n not in wrong]
        msg = f" Wrong: {', '.join(wrong)}" + (f"; right: {', '.join(right)}." if right else ".")
        if case.small:
            for n in wrong:
                i = _NAMES.index(n)
                msg += f"\n  expected {n}: {_fmt(expected[i])}\n  your {n}:     {_fmt(got[i])}"
        return msg
    return text


CHECK_ATTENTION_BACKWARD_DOC = """Check a learner's ``attention_backward(q, k, v, d_out) -> (dq, dk, dv)`` against the
    gradients ``torch.autograd`` computes through :func:`attnlib.scaled_dot_product_attention`.

    Contract: with ``A = softmax(q k^T / sqrt(d_k))`` (no mask) and ``out = A v``, ``d_out``
    the gradient of a loss with respect to ``out``, return the gradients with respect to q, k
    and v, derived by hand: ``dA = d_out v^T``, ``dv = A^T d_out``,
    ``dS = A * (dA - rowsum(dA * A))``, ``dq = dS k / sqrt(d_k)``, ``dk = dS^T q / sqrt(d_k)``.
    Autograd (``torch.autograd.grad``, ``Tensor.backward``, ``torch.func``'s ``grad``, ``vjp``
    and Jacobians) is refused (``library_call``): the lab is the derivation.  The function runs
    apart from the grader (see :mod:`._sandbox`).

    Inputs, smallest first: ``(2, 2)`` everything; ``T_q = T_k = 3`` with ``d_k = 4``;
    ``T_q = 2 != T_k = 5``; batches of heads ``(2, 3, ...)``; integer-valued q and k whose
    scores reach about 160 (the softmax must subtract its maximum); the real q, k, v of every
    head of one encoder layer with a seeded random ``d_out``.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``,
        d_out: ``(..., T_q, d_v)``; returns dq ``(..., T_q, d_k)``, dk ``(..., T_k, d_k)``,
        dv ``(..., T_k, d_v)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["attention_backward"]`` name the mistakes (two
        at once are recognised).  Never raises.

    Source: the chain rule through Vaswani et al. (2017), eq. (1); the same five equations are
    the backward pass of Dao et al. (2022), "FlashAttention", algorithm 4 (with ``D_i =
    rowsum(dO_i * O_i) = rowsum(dA_i * A_i)``).
    """

def _backward_generic(case, expected, got):
    for g, e, name in zip(got, expected, _NAMES):
        if not _close(g, e):
            right = [n for n, g2, e2 in zip(_NAMES, got, expected) if _close(g2, e2)]
            _generic_tensor(case, name, e, g, extra=f" (Right: {', '.join(right)}.)" if right else "")


LAB = Lab(
    key="attention_backward", checker="check_attention_backward", what="attention backward",
    writes='attention_backward(q, k, v, d_out) -> (dq, dk, dv)',
    contract=("the gradients of unmasked attention, derived by hand (autograd refused), checked against "
              "``torch.autograd``"),
    refusal=Refusal(
        about="deriving the gradients yourself, so autograd (torch.autograd.grad, .backward(), torch.func's grad, vjp "
              "and Jacobians, forward-mode dual tensors, and autograd's graph walked by hand through grad_fn and "
              "next_functions) is not accepted here",
        instead="Work on q, k, v and d_out as they come, with no requires_grad: recompute "
                "A = softmax(q k^T / sqrt(d_k)), then dA = d_out v^T, dv = A^T d_out, dS = A * (dA - rowsum(dA * A)), "
                "dq = dS k / sqrt(d_k), dk = dS^T q / sqrt(d_k).",
        families=("backward", "grad_fn", "gradient_edge", "vjp", "jvp", "jacobian", "jacrev", "jacfwd", "hessian",
                  "make_dual", "unpack_dual", "dual_level"),
        torch=("grad", "_grad", "grad_and_value", "linearize", "hvp", "vhp"),
        autograd_graph=True),
    cases=_backward_cases,
    reference=_reference_backward,
    convert=_triple,
    right=_all_close,
    fingerprints=_backward_fingerprints,
    matches=_all_close,
    usable=_triple_or_none,
    show=lambda case, key, expected, got: _show(case, got, expected)(),
    generic=_backward_generic,
    success=lambda cases: (f"Your attention backward matches torch.autograd through "
                           f"attnlib.scaled_dot_product_attention on all {len(cases)} inputs: dq, dk and dv, with "
                           "T_q != T_k, batches of heads, large scores and a real layer."),
    doc=CHECK_ATTENTION_BACKWARD_DOC)

check_attention_backward = register(LAB)
