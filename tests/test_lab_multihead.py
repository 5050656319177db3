"""The multi-head forward-pass lab (chapter 6): correct solutions pass, each listed mistake is
named by its own buggy implementation (written out here, not taken from the checker's
fingerprints), unlisted bugs are never marked correct, and ready-made attention is refused.
The checker's reference, attnlib.MultiHeadAttention, is itself tested against
torch.nn.MultiheadAttention in tests/test_multihead.py; here it is checked once more against
PyTorch directly."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.exercises.labs import MISTAKES, LabFeedback, check_multi_head_attention
from attnlib.exercises.labs.multihead_lab import reference_multi_head_attention
from lab_checks import assert_correct, assert_diagnosis


def _assert_correct(fb):
    assert_correct(fb)


def _assert_diagnosis(fb, key):
    assert_diagnosis(fb, key, "multi_head")


def mha(x, W_q, W_k, W_v, W_o, n_heads, *, split=None, scale=None, dim=-1, merge=None, out=True):
    """A hand-written forward pass with switchable mistakes (the lab refuses attnlib's)."""
    B, T, D = x.shape
    dh = D // n_heads

    def heads(t):
        if split == "straight":
            return t.reshape(B, n_heads, T, dh)
        if split == "strided":
            return torch.stack([t[..., h::n_heads] for h in range(n_heads)], dim=1)
        if split == "one":
            return t.unsqueeze(1)
        return t.view(B, T, n_heads, dh).permute(0, 2, 1, 3)

    q, k, v = heads(x @ W_q), heads(x @ W_k), heads(x @ W_v)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k)
    s = s / (math.sqrt(q.shape[-1]) if scale is None else scale(D, dh))
    w = torch.exp(s - s.amax(dim=dim, keepdim=True))
    w = w / w.sum(dim=dim, keepdim=True)
    o = w @ v
    if merge == "flat":
        concat = o.reshape(B, T, D)
    elif merge == "strided":
        concat = torch.stack([o[:, h] for h in range(o.shape[1])], dim=-1).reshape(B, T, D)
    else:
        concat = torch.cat([o[:, h] for h in range(o.shape[1])], dim=-1)
    if out == "T":
        return concat @ W_o.T
    return concat @ W_o if out else concat


def mha_loop(x, W_q, W_k, W_v, W_o, n_heads):  # one head at a time, torch.softmax
    dh = x.shape[-1] // n_heads
    outs = []
    for h in range(n_heads):
        cols = slice(h * dh, (h + 1) * dh)
        q, k, v = x @ W_q[:, cols], x @ W_k[:, cols], x @ W_v[:, cols]
        outs.append(torch.softmax(q @ k.transpose(-2, -1) / dh ** 0.5, dim=-1) @ v)
    return torch.cat(outs, dim=-1) @ W_o


def mha_per_head_output(x, W_q, W_k, W_v, W_o, n_heads):  # W_o split by rows, heads summed
    dh = x.shape[-1] // n_heads
    total = 0
    for h in range(n_heads):
        cols = slice(h * dh, (h + 1) * dh)
        a = torch.softmax((x @ W_q[:, cols]) @ (x @ W_k[:, cols]).transpose(1, 2) / math.sqrt(dh), dim=-1)
        total = total + a @ (x @ W_v[:, cols]) @ W_o[cols]
    return total


BUGS = {
    "split_mixes_tokens": lambda *a: mha(*a, split="straight"),
    "split_interleaved": lambda *a: mha(*a, split="strided"),
    "one_head": lambda *a: mha(*a, split="one"),
    "scaled_by_sqrt_d_model": lambda *a: mha(*a, scale=lambda D, dh: math.sqrt(D)),
    "no_scaling": lambda *a: mha(*a, scale=lambda D, dh: 1.0),
    "softmax_wrong_dim": lambda *a: mha(*a, dim=-2),
    "no_out_proj": lambda *a: mha(*a, out=False),
    "out_proj_transposed": lambda *a: mha(*a, out="T"),
    "merge_without_transpose": lambda *a: mha(*a, merge="flat"),
    "merge_interleaved": lambda *a: mha(*a, merge="strided"),
    "linear_convention": lambda x, W_q, W_k, W_v, W_o, H: mha(x, W_q.T, W_k.T, W_v.T, W_o.T, H),
    "float_d_head": lambda x, W_q, W_k, W_v, W_o, H: (x @ W_q).view(x.shape[0], x.shape[1], H, x.shape[2] / H),
}

UNLISTED = [
    lambda *a: mha(*a, scale=lambda D, dh: dh),                          # divided by d_head, not its root
    lambda *a: mha(*a).flip(1),                                          # tokens reversed
    lambda x, *a: mha(x, *a) + x,                                        # a residual added
    lambda *a: mha(*a) if a[-1] < 4 else mha(*a, out=False),             # right on small inputs only
    lambda x, W_q, W_k, W_v, W_o, H: mha(x, W_q, W_q, W_v, W_o, H),      # keys from W_q
]


def test_reference_matches_torch_multihead_attention():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 12, generator=g, dtype=torch.float64)
    Ws = [torch.randn(12, 12, generator=g, dtype=torch.float64) / 12 ** 0.5 for _ in range(4)]
    torch_mha = torch.nn.MultiheadAttention(12, 4, bias=False, batch_first=True).double()
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([W.T for W in Ws[:3]]))
        torch_mha.out_proj.weight.copy_(Ws[3].T)
    expected = torch_mha(x, x, x, need_weights=False)[0]
    torch.testing.assert_close(reference_multi_head_attention(x, *Ws, 4), expected)


@pytest.mark.parametrize("fn", [lambda *a: mha(*a), mha_loop, mha_per_head_output])
def test_correct_solutions_pass(fn):
    _assert_correct(check_multi_head_attention(fn))


@pytest.mark.parametrize("key", list(BUGS))
def test_each_mistake_is_named(key):
    _assert_diagnosis(check_multi_head_attention(BUGS[key]), key)


def test_every_mistake_has_a_buggy_implementation():
    assert set(BUGS) == set(MISTAKES["multi_head"])


@pytest.mark.parametrize("i", range(len(UNLISTED)))
def test_unlisted_bugs_are_never_correct(i):
    fb = check_multi_head_attention(UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


@pytest.mark.parametrize("fn", [
    lambda x, W_q, W_k, W_v, W_o, H: F.scaled_dot_product_attention(
        *(attnlib.split_heads(x @ W, H) for W in (W_q, W_k, W_v))).transpose(1, 2).flatten(2) @ W_o,
    lambda x, W_q, W_k, W_v, W_o, H: attnlib.merge_heads(attnlib.split_heads(x @ W_v, H)) @ W_o,
])
def test_ready_made_attention_is_refused(fn):
    fb = check_multi_head_attention(fn)
    assert fb.diagnosis == "library_call", fb.text


def test_not_implemented_and_not_callable_are_feedback():
    def stub(x, W_q, W_k, W_v, W_o, n_heads):
        raise NotImplementedError

    assert check_multi_head_attention(stub).diagnosis == "not_implemented"
    assert check_multi_head_attention(None).diagnosis == "not_callable"
