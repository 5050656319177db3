"""The RoPE lab (chapter 12): correct solutions written in different ways pass, each listed
mistake is named by its own buggy implementation (written out here, not taken from the
checker's fingerprints), unlisted bugs are never marked correct, and attnlib's RoPE (and Hugging
Face's) is refused.  The checker's reference, attnlib.apply_rope(pairing="half"), is tested
against Hugging Face's Llama code in tests/test_positions.py; here it is checked once more
against the complex-number form written out."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.exercises.labs import MISTAKES, LabFeedback, check_apply_rope, check_rope_attention
from lab_checks import assert_correct, assert_diagnosis


def _assert_correct(fb):
    assert_correct(fb)


def _assert_diagnosis(fb, key):
    assert_diagnosis(fb, key, "rope", shown=("Shown by",))


def rope(x, positions, *, adjacent=False, exponent=lambda m, d: -2 * m / d, sign=1.0, shift=0):
    """A learner's RoPE with switchable mistakes (rotate-half by default)."""
    d = x.shape[-1]
    m = torch.arange(d // 2, dtype=torch.float32)
    theta = 10000.0 ** exponent(m, d)
    ang = sign * (positions.float() + shift)[:, None] * theta
    c, s = torch.cos(ang), torch.sin(ang)
    if adjacent:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def rope_complex(x, positions):
    """The same rotation as a complex product: z_m = x_m + i x_(m+d/2), times exp(i p theta_m)."""
    d = x.shape[-1]
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double())
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = z * torch.polar(torch.ones_like(theta), positions.double()[:, None] * theta)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def rope_half_helper(x, positions):  # the Llama way: cos/sin over both halves and rotate_half
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).double() / d))
    emb = torch.cat([positions.double()[:, None] * inv] * 2, dim=-1)
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return (x.double() * emb.cos() + rot.double() * emb.sin()).to(x.dtype)


def test_reference_is_the_complex_rotation():
    x = torch.randn(2, 3, 7, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pos = torch.tensor([0, 1, 5, 9, 100, 3, 2])
    torch.testing.assert_close(attnlib.apply_rope(x, pos, pairing="half"), rope_complex(x, pos))


@pytest.mark.parametrize("fn", [rope, rope_complex, rope_half_helper])
def test_correct_ropes_pass(fn):
    _assert_correct(check_apply_rope(fn))


ROPE_BUGS = {
    "wrong_pairing": lambda x, p: rope(x, p, adjacent=True),
    "frequency": lambda x, p: rope(x, p, exponent=lambda m, d: -m / d),
    "sin_sign": lambda x, p: rope(x, p, sign=-1.0),
    "positions_off_by_one": lambda x, p: rope(x, p, shift=1),
}


@pytest.mark.parametrize("key", list(ROPE_BUGS))
def test_each_rope_mistake_is_named(key):
    _assert_diagnosis(check_apply_rope(ROPE_BUGS[key]), key)


@pytest.mark.parametrize("fn, key", [
    (lambda x, p: rope(x, p, exponent=lambda m, d: 2 * m / d), "frequency"),     # positive exponent
    (lambda x, p: rope(x, p, shift=-1), "positions_off_by_one"),
])
def test_other_forms_of_a_mistake_are_named(fn, key):
    _assert_diagnosis(check_apply_rope(fn), key)


def test_two_rope_mistakes_at_once_are_both_named():
    fb = check_apply_rope(lambda x, p: rope(x, p, adjacent=True, sign=-1.0))
    assert not fb.correct and fb.diagnosis in ("wrong_pairing", "sin_sign"), fb.text
    assert "2 mistakes at once" in fb.message
    for key in ("wrong_pairing", "sin_sign"):
        assert MISTAKES["rope"][key][0] in fb.message


def test_sign_is_shown_on_the_smallest_input():
    fb = check_apply_rope(ROPE_BUGS["sin_sign"])
    assert "Shown by x = [[1, 0]] (one pair, d = 2), positions = [1]" in fb.message, fb.message


UNLISTED = [
    lambda x, p: x,                                                     # nothing done
    lambda x, p: rope(x, p) * 2,                                        # scaled
    lambda x, p: rope(x, p, exponent=lambda m, d: -2 * m / d * 0.5 + 0.1),  # another frequency law
    lambda x, p: rope(x, p.flip(0)),                                    # positions reversed
    lambda x, p: rope(x, p) if x.dim() == 2 else x,                     # right on 2-D inputs only
]


@pytest.mark.parametrize("i", range(len(UNLISTED)))
def test_unlisted_rope_bugs_are_never_correct(i):
    fb = check_apply_rope(UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


@pytest.mark.parametrize("fn", [
    lambda x, p: attnlib.apply_rope(x, p),
    lambda x, p: attnlib.positions.apply_rope(x, p, pairing="half"),
    lambda x, p: rope(x, p, exponent=lambda m, d: torch.log(attnlib.positions.rope_frequencies(d)[m.long()].float()) / math.log(10000.0)),
])
def test_attnlib_rope_is_refused(fn):
    fb = check_apply_rope(fn)
    assert fb.diagnosis == "library_call", fb.text
    assert "attnlib" in fb.message


def test_hugging_face_rope_is_refused():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    def hf(x, p):
        d = x.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        emb = torch.cat([p.float()[:, None] * inv] * 2, dim=-1)
        return apply_rotary_pos_emb(x, x, emb.cos(), emb.sin(), unsqueeze_dim=0)[0]

    fb = check_apply_rope(hf)
    assert fb.diagnosis == "library_call", fb.text


def test_stub_and_garbage_are_feedback():
    def stub(x, positions):
        raise NotImplementedError
    assert check_apply_rope(stub).diagnosis == "not_implemented"
    assert check_apply_rope(42).diagnosis == "not_callable"
    assert check_apply_rope(lambda x, p: x.tolist()).diagnosis == "wrong_type"
    assert check_apply_rope(lambda x, p: x[..., :1]).diagnosis == "wrong_shape"


# ------------------------------------------------------------------------ attention with RoPE

def attn(q, k, v, scale=None):
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    return torch.softmax(s, dim=-1) @ v


def rope_attention(q, k, v, p):
    return attn(rope(q, p), rope(k, p), v)


def rope_attention_sdpa(q, k, v, p):       # PyTorch's attention is allowed in this lab
    return F.scaled_dot_product_attention(rope_complex(q, p), rope_complex(k, p), v)


@pytest.mark.parametrize("fn", [rope_attention, rope_attention_sdpa])
def test_correct_rope_attentions_pass(fn):
    _assert_correct(check_rope_attention(fn))


USE_BUGS = {
    "rotates_v": lambda q, k, v, p: attn(rope(q, p), rope(k, p), rope(v, p)),
    "one_side_only": lambda q, k, v, p: attn(rope(q, p), k, v),
    "not_rotated": lambda q, k, v, p: attn(q, k, v),
    "no_scaling": lambda q, k, v, p: attn(rope(q, p), rope(k, p), v, scale=1.0),
    "sin_sign": lambda q, k, v, p: attn(rope(q, p, sign=-1.0), rope(k, p, sign=-1.0), v),
    "wrong_pairing": lambda q, k, v, p: attn(rope(q, p, adjacent=True), rope(k, p, adjacent=True), v),
    "frequency": lambda q, k, v, p: attn(rope(q, p, exponent=lambda m, d: -m / d),
                                         rope(k, p, exponent=lambda m, d: -m / d), v),
}


@pytest.mark.parametrize("key", list(USE_BUGS))
def test_each_rope_attention_mistake_is_named(key):
    _assert_diagnosis(check_rope_attention(USE_BUGS[key]), key)


def test_every_rope_mistake_has_a_buggy_implementation():
    assert set(ROPE_BUGS) | set(USE_BUGS) == set(MISTAKES["rope"])


def test_an_off_by_one_in_both_q_and_k_is_harmless_in_attention():
    """The reason the rotation has its own check: shifting every position cancels in the scores."""
    _assert_correct(check_rope_attention(lambda q, k, v, p: attn(rope(q, p, shift=1), rope(k, p, shift=1), v)))


def test_rope_attention_refuses_attnlib_rope():
    fb = check_rope_attention(lambda q, k, v, p: attn(attnlib.apply_rope(q, p), attnlib.apply_rope(k, p), v))
    assert fb.diagnosis == "library_call", fb.text


# ------------------------------------------------------------------------------------ the book

def _chapter_lab_part():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "chapters" / "12_position_decoding.md").read_text()
    return text[:text.index("\n## Exercises\n")]


@pytest.mark.parametrize("checker, stub, result", [
    ("check_apply_rope", "my_apply_rope", "rope_lab_result"),
    ("check_rope_attention", "my_rope_attention", "rope_attention_lab_result"),
])
def test_the_lab_is_in_chapter_10_before_the_exercises(checker, stub, result):
    """As tests/test_labs.py checks the other labs: the stub, the mistakes from MISTAKES, the
    hidden reference solution and the removed assert that makes the build prove it correct."""
    lab_part = _chapter_lab_part()
    assert "```{include} _lab_note.md" in lab_part
    assert f"{checker}({stub})" in lab_part and "raise NotImplementedError" in lab_part
    assert 'mistakes_markdown("rope")' in lab_part
    solution = lab_part.index(f"{result} = {checker}(")
    assert ":tags: [hide-input]" in lab_part[lab_part.rindex("```{code-cell}", 0, solution):solution]
    assert f"assert {result}.correct" in lab_part[solution:]


def test_the_chapters_rope_solutions_are_graded_correct():
    import re

    from attnlib.exercises import labs as labs_module

    ns = {"torch": torch, "math": math, **{name: getattr(labs_module, name) for name in labs_module.__all__}}
    for cell in re.findall(r"```\{code-cell\} ipython3\n:tags: \[hide-input\]\n(.*?)```", _chapter_lab_part(), flags=re.S):
        if "rope_lab_result = " in cell:
            exec(compile(cell, "12_position_decoding.md", "exec"), ns)  # noqa: S102 - the book's own code
    _assert_correct(ns["rope_lab_result"])
    _assert_correct(ns["rope_attention_lab_result"])
