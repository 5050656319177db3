"""The RoPE lab (chapter 12): ``check_apply_rope`` (the rotation) and
``check_rope_attention`` (using it: q and k rotated, v not)."""
from __future__ import annotations

import itertools

import torch

from ...attention import scaled_dot_product_attention
from ...positions import apply_rope
from ._core import (
    REAL_LAYER, _as_tensor_result, _Case, _close, finite_tensor, _generic_tensor, _ints, Lab, _randn, _real_head,
    Refusal, register, _shape,
)

__all__ = ["check_apply_rope", "check_rope_attention", "rope_variant"]

BASE = 10000.0


def rope_variant(x, positions, *, pairing: str = "half", freq: str = "ok", sign: int = 1, shift: int = 0):
    """RoPE written out, in float64, with the lab's mistakes as switches: ``pairing``
    ``"half"`` (the chapter's: ``m`` with ``m + d/2``) or ``"adjacent"`` (``2m`` with
    ``2m + 1``); ``freq`` ``"ok"`` (``theta_m = base^(-2m/d)``), ``"i_over_d"``
    (``base^(-m/d)``) or ``"positive"`` (``base^(+2m/d)``); ``sign`` ``-1`` rotates by
    minus the angle; ``shift`` adds to every position.

    Shapes:
        x ``(..., T, d)``, positions ``(T,)``; returns ``(..., T, d)`` float64.
    """
    x = x.double()
    d = x.shape[-1]
    m = torch.arange(d // 2, dtype=torch.float64)
    exponent = {"ok": -2 * m / d, "i_over_d": -m / d, "positive": 2 * m / d}[freq]
    theta = BASE ** exponent                                              # (d/2,)
    ang = (positions.double() + shift)[:, None] * theta[None, :] * sign   # (T, d/2)
    c, s = ang.cos(), ang.sin()
    if pairing == "half":
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


#: ``(keyword, value, mistake)`` of each switch of :func:`rope_variant` away from the chapter's RoPE.
_SWITCHES = (("pairing", ("half", None), ("adjacent", "wrong_pairing")),
             ("freq", ("ok", None), ("i_over_d", "frequency"), ("positive", "frequency")),
             ("sign", (1, None), (-1, "sin_sign")),
             ("shift", (0, None), (1, "positions_off_by_one"), (-1, "positions_off_by_one")))


def _rope_fingerprints(case: _Case) -> dict:
    """``{(mistake, ...): output}`` for every combination of the mistakes (each alone first)."""
    x, positions = case.args
    out = {}
    for combo in itertools.product(*(options[1:] for options in _SWITCHES)):
        keys = tuple(sorted({key for _, key in combo if key}))
        if not keys:
            continue
        kwargs = {name: value for (name, *_), (value, _) in zip(_SWITCHES, combo)}
        out.setdefault(keys, []).append(rope_variant(x, positions, **kwargs))
    return out


def _matches_any(got, outputs) -> bool:
    return outputs is not None and any(_close(got, o) for o in outputs)


def _rope_cases() -> list[_Case]:
    def real():
        _, q, _, _, _ = _real_head()
        T = q.shape[-2]
        return (f"the real queries of layer {REAL_LAYER}'s heads, shape {_shape(q)}, positions 0..{T - 1}",
                (q, torch.arange(T)))

    return [
        _Case("x = [[1, 0]] (one pair, d = 2), positions = [1]",
              (torch.tensor([[1.0, 0.0]]), torch.tensor([1])), {}, True),
        _Case("x = [[1, 2], [3, 4], [5, 6]] (d = 2), positions = [0, 1, 2]",
              (torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), torch.tensor([0, 1, 2])), {}, True),
        _Case("x (3, 4) with integer entries, positions = [0, 1, 2] (d = 4: two pairs)",
              (_ints(3, 4, seed=60, high=3), torch.tensor([0, 1, 2])), {}, True),
        _Case("x (4, 8), positions = [3, 0, 10, 2] (not in order)",
              (_randn(4, 8, seed=61), torch.tensor([3, 0, 10, 2])), {}),
        _Case("x (2, 3, 5, 16) (B=2, H=3), positions = 7..11 (a decoder after 7 cached tokens)",
              (_randn(2, 3, 5, 16, seed=62), torch.arange(7, 12)), {}),
        _Case(None, make=real),
        _Case("x (6, 32), positions = 1000..1005 (far positions)", (_randn(6, 32, seed=63), torch.arange(1000, 1006)),
              {}),
    ]


def _reference_rope(case: _Case) -> torch.Tensor:
    """attnlib's RoPE (the chapter's rotate-half pairing) on ``case``, in float64."""
    x, positions = case.args
    return apply_rope(x.double(), positions, BASE, pairing="half")


CHECK_APPLY_ROPE_DOC = """Check a learner's ``apply_rope(x, positions)`` against :func:`attnlib.apply_rope`
    (``pairing="half"``, base 10000).

    Contract: ``x`` ``(..., T, d)`` with ``d`` even, ``positions`` an int tensor ``(T,)``; the
    result has ``x``'s shape, with each pair of coordinates ``(m, m + d/2)`` of row ``t``
    rotated by the angle ``positions[t] * theta_m``, ``theta_m = 10000^(-2m/d)``
    (``m = 0 .. d/2 - 1``): ``out_m = x_m cos - x_{m+d/2} sin``,
    ``out_{m+d/2} = x_m sin + x_{m+d/2} cos``.

    Inputs, smallest first: one pair at position 1; three rows of one pair; two pairs;
    positions out of order; a batch of heads at positions 7..11; the real queries of one
    encoder layer; far positions (1000..1005).  attnlib's ``apply_rope``, ``rope_scores``,
    ``rope_frequencies`` and Hugging Face's ``apply_rotary_pos_emb`` are refused
    (``library_call``); the function runs apart from the grader (:mod:`._sandbox`).

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["rope"]`` name the mistakes (several at once
        are recognised).  Never raises.

    Source: Su et al. (2021), "RoFormer", eq. (34); the rotate-half layout of GPT-NeoX and Llama.
    """

#: What the RoPE labs refuse (both: the rotation is the lab's job).
_ROPE_REFUSAL = Refusal(
    about="writing the rotation yourself, so attnlib's RoPE (apply_rope, rope_scores, rope_frequencies) and Hugging "
          "Face's apply_rotary_pos_emb are not accepted here",
    instead="Compute theta = 10000 ** (-2 * torch.arange(d // 2) / d), the angles positions[:, None] * theta, and "
            "rotate each pair (x[..., m], x[..., m + d // 2]) with their cos and sin.",
    families=("rotary",), attnlib=("rope",))

#: What the two RoPE labs share: the mistakes' list, the refusal and how results compare.
_ROPE_SHARED = dict(key="rope", refusal=_ROPE_REFUSAL, right=_close, matches=_matches_any, usable=finite_tensor)

APPLY_LAB = Lab(
    **_ROPE_SHARED, checker="check_apply_rope", what="apply_rope",
    writes='apply_rope(x, positions)',
    contract="each pair ``(m, m + d/2)`` of row ``t`` rotated by ``positions[t] * 10000^(-2m/d)``",
    cases=_rope_cases,
    reference=_reference_rope,
    convert=lambda got, c, expected: _as_tensor_result(got, c, "apply_rope"),
    fingerprints=_rope_fingerprints,
    generic=lambda c, expected, got: _generic_tensor(c, "rotated x", expected, got),
    success=lambda cases: (f"Your apply_rope matches attnlib.apply_rope on all {len(cases)} inputs: each pair "
                           "(m, m + d/2) turned by position * 10000^(-2m/d)."),
    doc=CHECK_APPLY_ROPE_DOC)

check_apply_rope = register(APPLY_LAB)


# ------------------------------------------------------------------------- RoPE inside attention

def _attention_cases() -> list[_Case]:
    def real():
        _, q, k, v, _ = _real_head()
        T = q.shape[-2]
        return (f"the real q, k, v of layer {REAL_LAYER}'s heads, shape {_shape(q)}, positions 0..{T - 1}",
                (q, k, v, torch.arange(T)))

    return [
        _Case("q, k, v (3, 2) (one pair), positions = [0, 1, 2]",
              (_ints(3, 2, seed=70, high=2), _ints(3, 2, seed=71, high=2), _ints(3, 2, seed=72, high=2),
               torch.tensor([0, 1, 2])), {}, True),
        _Case("q (4, 8), k (4, 8), v (4, 8), positions = [5, 6, 7, 8]",
              (_randn(4, 8, seed=73), _randn(4, 8, seed=74), _randn(4, 8, seed=75), torch.arange(5, 9)), {}),
        _Case("q, k (2, 3, 6, 16), v (2, 3, 6, 16) (B=2, H=3), positions 0..5",
              (_randn(2, 3, 6, 16, seed=76), _randn(2, 3, 6, 16, seed=77), _randn(2, 3, 6, 16, seed=78),
               torch.arange(6)), {}),
        _Case(None, make=real),
    ]


def _attend(q, k, v, scale: float | None = None) -> torch.Tensor:
    return scaled_dot_product_attention(q, k, v, scale=scale)[0]


def _reference_rope_attention(case: _Case) -> torch.Tensor:
    q, k, v, positions = (a.double() if a.is_floating_point() else a for a in case.args)
    return _attend(apply_rope(q, positions, pairing="half"), apply_rope(k, positions, pairing="half"), v)


def _use_fingerprints(case: _Case) -> dict:
    """The outputs of attention with RoPE used wrongly (the rotation itself right)."""
    q, k, v, positions = (a.double() if a.is_floating_point() else a for a in case.args)
    rq, rk, rv = (apply_rope(t, positions, pairing="half") for t in (q, k, v))
    d = q.shape[-1]
    out = {("rotates_v",): [_attend(rq, rk, rv)],
           ("one_side_only",): [_attend(rq, k, v), _attend(q, rk, v)],
           ("not_rotated",): [_attend(q, k, v)],
           ("rotates_v", "no_scaling"): [_attend(rq, rk, rv, 1.0)],
           ("no_scaling",): [_attend(rq, rk, v, 1.0), _attend(rq, rk, v, 1 / d)]}
    for pairing, freq, sign in itertools.product(("half", "adjacent"), ("ok", "i_over_d", "positive"), (1, -1)):
        if (pairing, freq, sign) == ("half", "ok", 1):
            continue
        keys = tuple(sorted({k_ for k_, on in (("wrong_pairing", pairing != "half"), ("frequency", freq != "ok"),
                                               ("sin_sign", sign == -1)) if on}))
        out.setdefault(keys, []).append(_attend(rope_variant(q, positions, pairing=pairing, freq=freq, sign=sign),
                                                rope_variant(k, positions, pairing=pairing, freq=freq, sign=sign), v))
    return out


CHECK_ROPE_ATTENTION_DOC = """Check a learner's ``rope_attention(q, k, v, positions)``: attention (no mask) of
    queries and keys rotated by RoPE at ``positions``, the values left as they are,
    ``softmax(R(q) R(k)^T / sqrt(d_k)) v``, against :func:`attnlib.apply_rope` and
    :func:`attnlib.scaled_dot_product_attention`.

    The learner's own ``apply_rope`` may be used (and ``torch.softmax`` or
    ``F.scaled_dot_product_attention`` for the attention step); attnlib's RoPE functions are
    refused (``library_call``).  A mistake inside the rotation is named as in
    :func:`check_apply_rope` (check that one first).

    Shapes:
        q, k ``(..., T, d_k)``, v ``(..., T, d_v)``, positions ``(T,)``; result ``(..., T, d_v)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["rope"]``.  Never raises.

    Source: Su et al. (2021), section 3.4.2 (RoPE rotates queries and keys only).
    """

USE_LAB = Lab(
    **_ROPE_SHARED, checker="check_rope_attention", what="attention with RoPE",
    writes='rope_attention(q, k, v, positions)',
    contract="``softmax(R(q) R(k)^T / sqrt(d_k)) v``: q and k rotated, v not",
    cases=_attention_cases,
    reference=_reference_rope_attention,
    convert=lambda got, c, expected: _as_tensor_result(got, c, "attention with RoPE"),
    fingerprints=_use_fingerprints,
    generic=lambda c, expected, got: _generic_tensor(c, "output", expected, got),
    success=lambda cases: (f"Your attention with RoPE matches attnlib on all {len(cases)} inputs: q and k rotated at "
                           "their positions, v left as it is, scores scaled by 1/sqrt(d_k)."),
    doc=CHECK_ROPE_ATTENTION_DOC)

check_rope_attention = register(USE_LAB)
