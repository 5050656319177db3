"""The KV-cache lab (chapter 12): correct decoding steps written in different ways pass, each
listed mistake is named by its own buggy implementation (written out here), unlisted bugs are
never marked correct, and ready-made attention and attnlib's KVCache are refused.  The
checker's reference is checked against PyTorch's causal kernel: decoding a sequence step by
step with it gives the rows of one causal pass."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.exercises.labs import MISTAKES, LabFeedback, check_decode_step
from attnlib.exercises.labs.kv_lab import reference_decode_step
from lab_checks import assert_correct, assert_diagnosis


def _assert_correct(fb):
    assert_correct(fb)


def _assert_diagnosis(fb, key):
    assert_diagnosis(fb, key, "kv_cache")


def test_reference_decodes_like_one_causal_pass():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ck, cv = k[..., :0, :], v[..., :0, :]
    rows = []
    for t in range(7):
        out, ck, cv = reference_decode_step(q[..., t:t + 1, :], k[..., t:t + 1, :], v[..., t:t + 1, :], ck, cv)
        rows.append(out)
    torch.testing.assert_close(torch.cat(rows, dim=-2), full)
    torch.testing.assert_close(ck, k)


def step(q, k, v, ck, cv, *, dim=-2, when="before", scale=None, causal=False, keep=True):
    """A learner's decoding step with switchable mistakes."""
    new_k, new_v = torch.cat([ck, k], dim=dim), torch.cat([cv, v], dim=dim)
    keys, values = (new_k, new_v) if when == "before" else (ck, cv)
    s = q @ keys.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:   # a top-left causal mask on a (1, T+1) grid
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    out = torch.softmax(s, dim=-1) @ values
    return (out, new_k, new_v) if keep else (out, ck, cv)


def step_einsum(q, k, v, ck, cv):
    K, V = torch.cat((ck, k), 2), torch.cat((cv, v), 2)
    w = torch.einsum("bhqd,bhkd->bhqk", q, K).mul(q.shape[-1] ** -0.5).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", w, V), K, V


def step_float64(q, k, v, ck, cv):
    K, V = torch.cat([ck, k], dim=-2).double(), torch.cat([cv, v], dim=-2).double()
    s = q.double() @ K.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return ((e / e.sum(-1, keepdim=True)) @ V).float(), K.float(), V.float()


@pytest.mark.parametrize("fn", [step, step_einsum, step_float64])
def test_correct_steps_pass(fn):
    _assert_correct(check_decode_step(fn))


BUGS = {
    "not_appended": lambda *a: step(*a, keep=False),
    "appended_after": lambda *a: step(*a, when="after"),
    "causal_single_query": lambda *a: step(*a, causal=True),
    "wrong_concat_axis": lambda *a: step(*a, dim=-1),
    "no_scaling": lambda *a: step(*a, scale=1.0),
}


@pytest.mark.parametrize("key", list(BUGS))
def test_each_mistake_is_named(key):
    _assert_diagnosis(check_decode_step(BUGS[key]), key)


def test_every_mistake_has_a_buggy_implementation():
    assert set(BUGS) == set(MISTAKES["kv_cache"])


@pytest.mark.parametrize("fn", [
    lambda *a: step(*a, dim=1),                           # heads axis: fails on the first input, named
    lambda q, k, v, ck, cv: step(q, k, v, ck, cv, dim=0) if ck.shape[0] == 1 and ck.shape[2] == 1 else
    step(q, k, v, ck, cv, dim=-1),
])
def test_other_wrong_axes_are_named(fn):
    _assert_diagnosis(check_decode_step(fn), "wrong_concat_axis")


def test_is_causal_on_one_query_is_named():
    def sdpa_like(q, k, v, ck, cv):   # the learner's own softmax, PyTorch's top-left is_causal convention
        K, V = torch.cat([ck, k], -2), torch.cat([cv, v], -2)
        s = q @ K.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.ones(1, K.shape[-2], dtype=torch.bool).tril()
        return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ V, K, V
    _assert_diagnosis(check_decode_step(sdpa_like), "causal_single_query")


UNLISTED = [
    lambda *a: step(*a, scale=4.0),                                       # another scale
    lambda q, k, v, ck, cv: (step(q, k, v, ck, cv)[0] * 2, *step(q, k, v, ck, cv)[1:]),
    lambda q, k, v, ck, cv: step(q, k, k, ck, ck) if k.shape[-1] == v.shape[-1] else step(q, k, v, ck, cv),
    lambda q, k, v, ck, cv: step(q, k, v, ck, cv)[:2],                    # a pair returned
    lambda q, k, v, ck, cv: step(k, q, v, ck, cv),                        # query and key swapped
]


@pytest.mark.parametrize("i", range(len(UNLISTED)))
def test_unlisted_bugs_are_never_correct(i):
    fb = check_decode_step(UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


def _cached(q, k, v, ck, cv):
    cache = attnlib.KVCache()
    if ck.shape[-2]:
        cache.append(ck, cv)
    cache.append(k, v)
    return cache.attend(q), cache.keys, cache.values


@pytest.mark.parametrize("fn, name", [
    (lambda q, k, v, ck, cv: (F.scaled_dot_product_attention(q, torch.cat([ck, k], -2), torch.cat([cv, v], -2)),
                              torch.cat([ck, k], -2), torch.cat([cv, v], -2)), "scaled_dot_product_attention"),
    (lambda q, k, v, ck, cv: (attnlib.scaled_dot_product_attention(q, torch.cat([ck, k], -2), torch.cat([cv, v], -2))[0],
                              torch.cat([ck, k], -2), torch.cat([cv, v], -2)), "attnlib"),
    (_cached, "KVCache"),
])
def test_ready_made_attention_and_cache_are_refused(fn, name):
    fb = check_decode_step(fn)
    assert fb.diagnosis == "library_call", fb.text
    assert name in fb.message, fb.message


def test_stub_and_garbage_are_feedback():
    def stub(q_new, k_new, v_new, cache_k, cache_v):
        raise NotImplementedError
    assert check_decode_step(stub).diagnosis == "not_implemented"
    assert check_decode_step(None).diagnosis == "not_callable"
    assert check_decode_step(lambda *a: step(*a)[0]).diagnosis == "wrong_type"
    assert check_decode_step(lambda *a: (step(*a)[0][..., :1], *step(*a)[1:])).diagnosis == "wrong_shape"


def test_the_lab_is_in_chapter_10_before_the_exercises_and_its_solution_passes():
    """As tests/test_labs.py checks the other labs; the hidden solution, run as the book runs
    it, passes."""
    import re
    from pathlib import Path

    from attnlib.exercises import labs as labs_module

    text = (Path(__file__).resolve().parents[1] / "chapters" / "12_position_decoding.md").read_text()
    lab_part = text[:text.index("\n## Exercises\n")]
    assert "check_decode_step(my_decode_step)" in lab_part and "raise NotImplementedError" in lab_part
    assert 'mistakes_markdown("kv_cache")' in lab_part
    solution = lab_part.index("kv_lab_result = check_decode_step(")
    assert ":tags: [hide-input]" in lab_part[lab_part.rindex("```{code-cell}", 0, solution):solution]
    assert "assert kv_lab_result.correct" in lab_part[solution:]
    ns = {"torch": torch, "math": math, **{name: getattr(labs_module, name) for name in labs_module.__all__}}
    for cell in re.findall(r"```\{code-cell\} ipython3\n:tags: \[hide-input\]\n(.*?)```", lab_part, flags=re.S):
        if "kv_lab_result = " in cell:
            exec(compile(cell, "12_position_decoding.md", "exec"), ns)  # noqa: S102 - the book's own code
    _assert_correct(ns["kv_lab_result"])
