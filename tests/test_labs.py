"""The code labs (attnlib.exercises.labs): correct solutions written in several ways pass,
every mistake the checkers name is triggered by a buggy implementation and named, other
buggy implementations are never marked correct, and nothing a learner writes raises through.

The oracle is attnlib's own reference (softmax, scaled_dot_product_attention, causal_mask,
split_heads, tiled_attention), itself tested against PyTorch in the other test files.  The
learners' functions here never call the library function their lab is about (each lab refuses
that: see the hostile functions at the end, which also patch libraries, loop for ever, exit,
flood the output and hide a full score matrix)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.exercises import Feedback, grader_sources
from attnlib.exercises import labs
from attnlib.exercises.labs import online as online_lab
from attnlib.exercises.labs import (
    MISTAKES, LabFeedback, check_attention, check_causal_mask, check_online_softmax_attention, check_softmax,
    check_split_heads,
)

from lab_checks import assert_correct, assert_diagnosis

NEG_INF = float("-inf")


_assert_correct, _assert_diagnosis = assert_correct, assert_diagnosis


# --------------------------------------------------------------------------------------- softmax

def sm_manual(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def sm_float64(x, dim=-1):
    x = x.double()
    m, _ = x.max(dim=dim, keepdim=True)
    e = (x - m).exp()
    return (e / e.sum(dim, keepdim=True)).float()


def sm_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def sm_movedim(x, dim=-1):  # moves the axis last, loops over rows in numpy
    y = x.movedim(dim, -1).double().numpy().copy()
    flat = y.reshape(-1, y.shape[-1])
    for row in flat:
        row -= row.max()
        np.exp(row, out=row)
        row /= row.sum()
    return torch.from_numpy(flat.reshape(y.shape)).movedim(-1, dim)


def sm_inplace(x, dim=-1):  # modifies its input: the checker must not be fooled
    x -= x.amax(dim=dim, keepdim=True)
    x.exp_()
    x /= x.sum(dim=dim, keepdim=True)
    return x


def _sm(x, dim=-1):
    """A hand-written softmax (the lab refuses torch.softmax), for the buggy variants below."""
    return sm_manual(x, dim)


def _log_sm(x, dim=-1):
    s = x - x.amax(dim=dim, keepdim=True)
    return s - s.exp().sum(dim=dim, keepdim=True).log()


SOFTMAX_BUGS = {
    "wrong_axis": lambda x, dim=-1: _sm(x, dim=0),
    "ignores_dim": lambda x, dim=-1: _sm(x, dim=-1),
    "no_max_subtraction": lambda x, dim=-1: x.exp() / x.exp().sum(dim=dim, keepdim=True),
    "global_max": lambda x, dim=-1: (x - x.max()).exp() / (x - x.max()).exp().sum(dim=dim, keepdim=True),
    "missing_keepdim": lambda x, dim=-1: torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(
        x - x.amax(dim, keepdim=True)).sum(dim),
    "max_returns_pair": lambda x, dim=-1: torch.exp(x - x.max(dim=dim, keepdim=True)),
    "no_normalisation": lambda x, dim=-1: torch.exp(x - x.amax(dim=dim, keepdim=True)),
    "normalised_over_everything": lambda x, dim=-1: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(),
    "no_exp": lambda x, dim=-1: x / x.sum(dim=dim, keepdim=True),
    "log_softmax": lambda x, dim=-1: _log_sm(x, dim=dim),
}

SOFTMAX_UNLISTED = [
    lambda x, dim=-1: _sm(x * 2, dim=dim),                                 # a temperature of 1/2
    lambda x, dim=-1: _sm(x, dim=dim).flip(dim),                            # reversed
    lambda x, dim=-1: torch.sigmoid(x),                                     # element-wise
    lambda x, dim=-1: _sm(x, dim=dim).round(decimals=2),                    # rounded
    lambda x, dim=-1: (x - x.amin(dim, keepdim=True)).exp() / (x - x.amin(dim, keepdim=True)).exp().sum(
        dim, keepdim=True),                                                 # minimum subtracted
    lambda x, dim=-1: _sm(x, dim=dim) if x.dim() < 3 else _sm(x, dim=-1),  # fine up to 2-D
    lambda x, dim=-1: _sm(x, dim=dim) if x.abs().max() < 100 else torch.zeros_like(x),
    lambda x, dim=-1: _sm(x, dim=dim).double() + 1e-3,
]


@pytest.mark.parametrize("fn", [sm_manual, sm_float64, sm_logsumexp, sm_movedim, sm_inplace])
def test_correct_softmaxes_pass(fn):
    _assert_correct(check_softmax(fn))


@pytest.mark.parametrize("key", list(SOFTMAX_BUGS))
def test_each_softmax_mistake_is_named(key):
    _assert_diagnosis(check_softmax(SOFTMAX_BUGS[key]), key, "softmax")


def test_every_softmax_mistake_has_a_buggy_implementation():
    assert set(SOFTMAX_BUGS) == set(MISTAKES["softmax"])


@pytest.mark.parametrize("i", range(len(SOFTMAX_UNLISTED)))
def test_unlisted_softmax_bugs_are_never_correct(i):
    fb = check_softmax(SOFTMAX_UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


def test_softmax_feedback_shows_the_smallest_input():
    fb = check_softmax(SOFTMAX_BUGS["wrong_axis"])
    assert "x of shape (2, 3) with dim=-1" in fb.message and "expected" in fb.message and "yours" in fb.message
    fb = check_softmax(SOFTMAX_BUGS["no_max_subtraction"])
    assert "[10000, 9999, 9998]" in fb.message and "nan" in fb.message


# ------------------------------------------------------------------------------------- attention

def at_reference(q, k, v, mask=None):  # written out (the lab refuses attnlib's own attention)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w


def at_einsum_inf(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return torch.einsum("...qk,...kv->...qv", weights, v), weights


def at_float64_finfo(q, k, v, mask=None):
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.mT * q.shape[-1] ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def at_loop_heads(q, k, v, mask=None):  # one (T_q, T_k) matrix at a time
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    qb, kb, vb = (t.expand(*batch, *t.shape[-2:]).reshape(-1, *t.shape[-2:]) for t in (q, k, v))
    mb = None if mask is None else mask.expand(*batch, q.shape[-2], k.shape[-2]).reshape(-1, q.shape[-2], k.shape[-2])
    outs, ws = [], []
    for n in range(qb.shape[0]):
        s = qb[n] @ kb[n].T / math.sqrt(q.shape[-1])
        if mb is not None:
            s = s.masked_fill(~mb[n], -1e9)
        w = torch.softmax(s, dim=-1)
        outs.append(w @ vb[n])
        ws.append(w)
    return torch.stack(outs).reshape(*batch, *outs[0].shape), torch.stack(ws).reshape(*batch, *ws[0].shape)


def at_renormalised_after(q, k, v, mask=None):  # mask after the softmax, renormalised: also correct
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True)
    return w @ v, w


def _attention_with(scale=None, mask_fn=None, post=None, naive=False, from_scores=False, swap=False):
    def fn(q, k, v, mask=None):
        d_k = q.shape[-1]
        c = 1 / math.sqrt(d_k) if scale is None else scale(d_k)
        s = q @ k.transpose(-2, -1) * c
        if mask is not None and mask_fn is not None:
            s = mask_fn(s, mask)
        if naive:
            e = s.exp()
            w = e / e.sum(-1, keepdim=True)
        else:
            w = torch.softmax(s, dim=-1)
        if post is not None:
            w = post(w, mask, d_k)
        out = (s if from_scores else w) @ v
        return (w, out) if swap else (out, w)

    return fn


def _ok_mask(s, m):
    return s.masked_fill(~m, NEG_INF)


def at_batched_transpose(q, k, v, mask=None):
    s = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    w = s.softmax(-1)
    return w @ v, w


def at_mask_indexing(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s[~mask] = NEG_INF
    w = s.softmax(-1)
    return w @ v, w


def at_kq(q, k, v, mask=None):
    s = k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask.transpose(-2, -1), NEG_INF)
    w = s.softmax(-1)
    return w @ v, w


ATTENTION_BUGS = {
    "no_scaling": _attention_with(scale=lambda d: 1.0, mask_fn=_ok_mask),
    "scaled_by_d_k": _attention_with(scale=lambda d: 1 / d, mask_fn=_ok_mask),
    "scaled_up": _attention_with(scale=lambda d: math.sqrt(d), mask_fn=_ok_mask),
    "other_scale": _attention_with(scale=lambda d: 1 / math.sqrt(2 * d), mask_fn=_ok_mask),
    "scaled_after_softmax": _attention_with(scale=lambda d: 1.0, mask_fn=_ok_mask,
                                            post=lambda w, m, d: w / math.sqrt(d)),
    "softmax_wrong_axis": lambda q, k, v, mask=None: (
        lambda w: (w @ v, w))(_ok_mask(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), mask).softmax(-2)
                              if mask is not None else (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-2)),
    "mask_inverted": _attention_with(mask_fn=lambda s, m: s.masked_fill(m, NEG_INF)),
    "mask_ignored": _attention_with(),
    "mask_after_softmax": _attention_with(post=lambda w, m, d: w if m is None else w * m),
    "mask_added": _attention_with(mask_fn=lambda s, m: s + m),
    "masked_to_zero": _attention_with(mask_fn=lambda s, m: s * m),
    "no_max_subtraction": _attention_with(mask_fn=_ok_mask, naive=True),
    "scores_transposed": at_kq,
    "batched_transpose": at_batched_transpose,
    "mask_not_broadcast": at_mask_indexing,
    "returns_swapped": _attention_with(mask_fn=_ok_mask, swap=True),
    "out_from_scores": _attention_with(mask_fn=_ok_mask, from_scores=True),
}

ATTENTION_UNLISTED = [
    _attention_with(mask_fn=_ok_mask, post=lambda w, m, d: w.transpose(-2, -1) if w.shape[-1] == w.shape[-2] else w),
    lambda q, k, v, mask=None: (v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1]),
                                torch.full((*q.shape[:-1], k.shape[-2]), 1 / k.shape[-2])),       # uniform
    _attention_with(scale=lambda d: 1 / math.sqrt(d), mask_fn=lambda s, m: s.masked_fill(~m, -5.0)),
    _attention_with(mask_fn=_ok_mask, post=lambda w, m, d: w.clamp(max=0.9)),
    lambda q, k, v, mask=None: at_reference(q, k, v, mask)[0],                                   # out only
    lambda q, k, v, mask=None: (at_reference(q, k, v, mask)[0].numpy(), at_reference(q, k, v, mask)[1]),
    _attention_with(mask_fn=lambda s, m: s.masked_fill(~m.tril(), NEG_INF) if m.dim() == 2 else _ok_mask(s, m)),
    lambda q, k, v, mask=None: at_reference(q, k, v, None if mask is None or mask.dim() > 2 else mask),
]


@pytest.mark.parametrize("fn", [at_reference, at_einsum_inf, at_float64_finfo, at_loop_heads, at_renormalised_after])
def test_correct_attentions_pass(fn):
    _assert_correct(check_attention(fn))


@pytest.mark.parametrize("key", list(ATTENTION_BUGS))
def test_each_attention_mistake_is_named(key):
    _assert_diagnosis(check_attention(ATTENTION_BUGS[key]), key, "attention")


def test_every_attention_mistake_has_a_buggy_implementation():
    assert set(ATTENTION_BUGS) == set(MISTAKES["attention"])


def test_two_attention_mistakes_at_once_are_both_named():
    fb = check_attention(_attention_with(scale=lambda d: 1.0, mask_fn=lambda s, m: s.masked_fill(m, NEG_INF)))
    assert not fb.correct and "No scaling" in fb.message and "Mask inverted" in fb.message, fb.text


@pytest.mark.parametrize("i", range(len(ATTENTION_UNLISTED)))
def test_unlisted_attention_bugs_are_never_correct(i):
    fb = check_attention(ATTENTION_UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


# ----------------------------------------------------------------------------------- causal mask

def cm_tril(T):
    return torch.tril(torch.ones(T, T)).bool()


def cm_compare(T):
    i = torch.arange(T)
    return i[None, :] <= i[:, None]


def cm_loops(T):
    return torch.tensor([[j <= i for j in range(T)] for i in range(T)], dtype=torch.bool).reshape(T, T)


def cm_numpy(T):
    return torch.from_numpy(np.tri(T, dtype=bool))


CAUSAL_BUGS = {
    "inverted": lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1),
    "future_included": lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool)),
    "diagonal_dropped": lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1),
    "off_by_one": lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=1),
    "all_true": lambda T: torch.ones(T, T, dtype=torch.bool),
    "not_bool": lambda T: torch.tril(torch.ones(T, T)),
    "additive": lambda T: torch.zeros(T, T).masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), NEG_INF),
}

CAUSAL_UNLISTED = [
    lambda T: torch.ones(T, T, dtype=torch.bool).tril()[:, :-1] if T > 1 else torch.ones(1, 1, dtype=torch.bool),
    lambda T: torch.eye(T, dtype=torch.bool),
    lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool))[None],
    lambda T: cm_compare(T) if T < 5 else cm_compare(T).T,
    lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool)).flip(0),
    lambda T: np.tri(T, dtype=bool),
    lambda T: [[j <= i for j in range(T)] for i in range(T)],
]


@pytest.mark.parametrize("fn", [cm_tril, cm_compare, cm_loops, cm_numpy])
def test_correct_causal_masks_pass(fn):
    _assert_correct(check_causal_mask(fn))


@pytest.mark.parametrize("key", list(CAUSAL_BUGS))
def test_each_causal_mistake_is_named(key):
    _assert_diagnosis(check_causal_mask(CAUSAL_BUGS[key]), key, "causal_mask")


def test_every_causal_mistake_has_a_buggy_implementation():
    assert set(CAUSAL_BUGS) == set(MISTAKES["causal_mask"])


def test_causal_feedback_shows_the_smallest_grid():
    """T = 1 cannot tell a dropped diagonal from an inverted mask (both give [[0]]): T = 2 can."""
    for key in ("diagonal_dropped", "inverted", "future_included"):
        fb = check_causal_mask(CAUSAL_BUGS[key])
        assert "Shown by T = 2" in fb.message, fb.message
    fb = check_causal_mask(CAUSAL_BUGS["not_bool"])
    assert "Shown by T = 1" in fb.message, fb.message


@pytest.mark.parametrize("i", range(len(CAUSAL_UNLISTED)))
def test_unlisted_causal_bugs_are_never_correct(i):
    fb = check_causal_mask(CAUSAL_UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


# ----------------------------------------------------------------------------------- split heads

def sh_view_permute(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).permute(0, 2, 1, 3)


def sh_chunks(x, n_heads):  # one head at a time
    return torch.stack(torch.chunk(x, n_heads, dim=-1), dim=1)


def sh_loop(x, n_heads):
    d_head = x.shape[-1] // n_heads
    return torch.stack([x[..., h * d_head:(h + 1) * d_head] for h in range(n_heads)], dim=1)


def sh_unflatten(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 2).contiguous()


SPLIT_BUGS = {
    "missing_transpose": lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], n_heads, -1),
    "mixes_tokens": lambda x, n_heads: x.reshape(x.shape[0], n_heads, x.shape[1], -1),
    "interleaved": lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], -1, n_heads).permute(0, 3, 1, 2),
    "heads_in_batch": lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2).reshape(
        -1, x.shape[1], x.shape[2] // n_heads),
    "tokens_and_features_swapped": lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], n_heads, -1).permute(
        0, 2, 3, 1),
    "float_d_head": lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], n_heads, x.shape[2] / n_heads).transpose(1, 2),
}

SPLIT_UNLISTED = [
    lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2).flip(1),      # heads reversed
    lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], n_heads, -1).permute(0, 2, 1, 3).flip(2),  # tokens reversed
    lambda x, n_heads: x.reshape(-1, n_heads, x.shape[1], x.shape[2] // n_heads),
    lambda x, n_heads: x.transpose(0, 1).reshape(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2),  # mixes batch
    lambda x, n_heads: x.reshape(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2) if n_heads < 12 else x,
    lambda x, n_heads: sh_view_permute(x, n_heads).numpy(),
]


@pytest.mark.parametrize("fn", [sh_view_permute, sh_chunks, sh_loop, sh_unflatten])
def test_correct_split_heads_pass(fn):
    _assert_correct(check_split_heads(fn))


@pytest.mark.parametrize("key", list(SPLIT_BUGS))
def test_each_split_mistake_is_named(key):
    _assert_diagnosis(check_split_heads(SPLIT_BUGS[key]), key, "split_heads")


def test_every_split_mistake_has_a_buggy_implementation():
    assert set(SPLIT_BUGS) == set(MISTAKES["split_heads"])


def test_split_feedback_traces_the_misplaced_number():
    """(1, 2, 4) with 2 heads cannot tell a missing transpose from a reshape straight to
    (B, H, T, d_head) (T = H: the same numbers); (1, 3, 4) can."""
    fb = check_split_heads(SPLIT_BUGS["mixes_tokens"])
    assert "x of shape (1, 3, 4)" in fb.message, fb.message
    assert "should be feature 0 of token 1; yours holds feature 2 of token 0" in fb.message, fb.message


@pytest.mark.parametrize("i", range(len(SPLIT_UNLISTED)))
def test_unlisted_split_bugs_are_never_correct(i):
    fb = check_split_heads(SPLIT_UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


# ------------------------------------------------------------------------ online softmax attention

def _online(q, k, v, block_size, *, bug=None, scale=None):
    """A learner-style online softmax attention; ``bug`` switches in one classic mistake."""
    d_k = q.shape[-1]
    c = 1 / math.sqrt(d_k) if scale is None else scale(d_k)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m = torch.full((*lead, q.shape[-2], 1), 0.0 if bug == "max_starts_at_zero" else float("-inf"))
    l = torch.zeros((*lead, q.shape[-2], 1))
    acc = torch.zeros((*lead, q.shape[-2], v.shape[-1]))
    for start in range(0, k.shape[-2], block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) * c
        if bug == "normalises_each_block":
            acc = acc + torch.softmax(s, -1) @ vb
            continue
        if bug == "no_max":
            p = s.exp()
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ vb
            continue
        if bug == "block_max_only":
            p = (s - s.amax(-1, keepdim=True)).exp()
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ vb
            continue
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        corr = torch.exp(m_new - m) if bug == "inverted_rescale" else torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = (l if bug in ("no_rescale", "no_rescale_sum") else l * corr) + p.sum(-1, keepdim=True)
        acc = (acc if bug in ("no_rescale", "no_rescale_acc") else acc * corr) + p @ vb
        m = m_new
    if bug in ("normalises_each_block", "no_final_division"):
        return acc
    return acc / l


def os_float64(q, k, v, block_size):  # float64, state without the trailing 1
    q, k, v = q.double(), k.double(), v.double()
    m = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float64)
    l = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    for s0 in range(0, k.shape[-2], block_size):
        s = q @ k[..., s0:s0 + block_size, :].mT / math.sqrt(q.shape[-1])
        m_new = torch.maximum(m, s.amax(-1))
        corr = torch.exp(m - m_new)
        p = torch.exp(s - m_new[..., None])
        l = l * corr + p.sum(-1)
        acc = acc * corr[..., None] + p @ v[..., s0:s0 + block_size, :]
        m = m_new
    return acc / l[..., None]


def os_numpy(q, k, v, block_size):  # the same in NumPy, one block at a time
    q, k, v = np.asarray(q, dtype=np.float64), k.numpy().astype(np.float64), np.array(v, dtype=np.float64)
    m = np.full(q.shape[:-1] + (1,), -np.inf)
    l = np.zeros(q.shape[:-1] + (1,))
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for s0 in range(0, k.shape[-2], block_size):
        s = q @ np.swapaxes(k[..., s0:s0 + block_size, :], -1, -2) / math.sqrt(q.shape[-1])
        m_new = np.maximum(m, s.max(-1, keepdims=True))
        corr = np.exp(m - m_new)
        p = np.exp(s - m_new)
        l = l * corr + p.sum(-1, keepdims=True)
        acc = acc * corr + np.matmul(p, v[..., s0:s0 + block_size, :])
        m = m_new
    return torch.from_numpy(acc / l)


def os_per_query(q, k, v, block_size):  # one query row at a time, scalars in Python
    out = torch.empty(*q.shape[:-1], v.shape[-1])
    flat_q = q.reshape(-1, q.shape[-2], q.shape[-1])
    kk = k.expand(*q.shape[:-2], *k.shape[-2:]).reshape(-1, *k.shape[-2:])
    vv = v.expand(*q.shape[:-2], *v.shape[-2:]).reshape(-1, *v.shape[-2:])
    res = out.reshape(-1, q.shape[-2], v.shape[-1])
    for b in range(flat_q.shape[0]):
        for i in range(q.shape[-2]):
            m, l, acc = -math.inf, 0.0, torch.zeros(v.shape[-1])
            for s0 in range(0, k.shape[-2], block_size):
                s = kk[b, s0:s0 + block_size] @ flat_q[b, i] / math.sqrt(q.shape[-1])
                m_new = max(m, s.max().item())
                corr = math.exp(m - m_new)
                p = torch.exp(s - m_new)
                l = l * corr + p.sum().item()
                acc = acc * corr + p @ vv[b, s0:s0 + block_size]
                m = m_new
            res[b, i] = acc / l
    return out


ONLINE_BUGS = {
    key: (lambda q, k, v, b, key=key: _online(q, k, v, b, bug=key))
    for key in ("no_rescale", "no_rescale_sum", "no_rescale_acc", "inverted_rescale", "block_max_only",
                "normalises_each_block", "no_final_division", "no_max", "max_starts_at_zero")
}
ONLINE_BUGS["no_scaling"] = lambda q, k, v, b: _online(q, k, v, b, scale=lambda d: 1.0)
ONLINE_BUGS["scaled_by_d_k"] = lambda q, k, v, b: _online(q, k, v, b, scale=lambda d: 1 / d)
ONLINE_BUGS["full_matrix"] = lambda q, k, v, b: torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1) @ v

ONLINE_UNLISTED = [
    lambda q, k, v, b: _online(q, k, v, b + 1),                                  # wrong block edges: still exact!
    lambda q, k, v, b: _online(q, k[..., :-1, :], v[..., :-1, :], b),            # drops the last key
    lambda q, k, v, b: _online(q, k, v, b)[..., :1, :].expand(*q.shape[:-1], v.shape[-1]),
    lambda q, k, v, b: _online(q, k[..., :b, :], v[..., :b, :], b),              # only the first block
    lambda q, k, v, b: _online(q, k, v, b) * 1.01,
    lambda q, k, v, b: _online(q, k, v, b, scale=lambda d: 1 / math.sqrt(d + 1)),
]


@pytest.mark.parametrize("fn", [os_float64, os_numpy, os_per_query, lambda q, k, v, b: _online(q, k, v, b)])
def test_correct_online_softmax_attentions_pass(fn):
    _assert_correct(check_online_softmax_attention(fn))


@pytest.mark.parametrize("key", list(ONLINE_BUGS))
def test_each_online_mistake_is_named(key):
    _assert_diagnosis(check_online_softmax_attention(ONLINE_BUGS[key]), key, "online_softmax")


def test_every_online_mistake_has_a_buggy_implementation():
    assert set(ONLINE_BUGS) == set(MISTAKES["online_softmax"])


def test_online_no_rescale_is_shown_on_one_query_over_three_keys():
    fb = check_online_softmax_attention(ONLINE_BUGS["no_rescale"])
    assert "q = [[1]], k = [[0], [2], [1]]" in fb.message and "expected" in fb.message, fb.message
    fb = check_online_softmax_attention(ONLINE_BUGS["block_max_only"])
    assert "q = [[1]], k = [[0], [2], [1]]" in fb.message, fb.message


@pytest.mark.parametrize("i", range(len(ONLINE_UNLISTED)))
def test_unlisted_online_bugs_are_never_correct(i):
    if i == 0:  # blocks of b + 1 are still exact attention, and b + 1 never reaches T_k: correct by contract
        return
    fb = check_online_softmax_attention(ONLINE_UNLISTED[i])
    assert not fb.correct and fb.message, fb.text


def test_the_online_variants_without_mistakes_equal_the_reference():
    """The fingerprint generator is only trusted if, with no mistake, it is attention."""
    for case in online_lab._online_cases()[:-1]:
        q, k, v, b = case.args
        torch.testing.assert_close(online_lab._online_variant(q, k, v, b),
                                   attnlib.scaled_dot_product_attention(q.double(), k.double(), v.double())[0])


# ------------------------------------------------------------------------ nothing raises through

CHECKERS = {
    check_softmax: "softmax", check_attention: "attention", check_causal_mask: "causal mask",
    check_split_heads: "split_heads", check_online_softmax_attention: "online softmax attention",
}


def _raises(*args, **kwargs):
    raise ValueError("learner bug")


def _not_implemented(*args, **kwargs):
    raise NotImplementedError


def _exits(*args, **kwargs):
    raise SystemExit(1)


def _returns_none(*args, **kwargs):
    return None


def _returns_text(*args, **kwargs):
    return "weights"


def _returns_nan(*args, **kwargs):
    return torch.full((2, 2), float("nan"))


def _returns_wrong_shape(*args, **kwargs):
    return torch.zeros(1, 2, 3, 4, 5)


@pytest.mark.parametrize("checker", list(CHECKERS))
@pytest.mark.parametrize("fn,key", [
    (_raises, "raised"), (_exits, "raised"), (_not_implemented, "not_implemented"), (_returns_none, "wrong_type"),
    (_returns_text, "wrong_type"), (_returns_nan, None), (_returns_wrong_shape, None), (42, "not_callable"),
    (lambda: None, "raised"),
])
def test_nothing_a_learner_writes_raises_through(checker, fn, key):
    fb = checker(fn)
    assert isinstance(fb, LabFeedback) and not fb.correct and fb.message
    assert fb.text.startswith("Not yet. ")
    if key is not None:
        assert fb.diagnosis == key, fb.text
    if key == "raised" and fn is _raises:
        assert "ValueError" in fb.message and "learner bug" in fb.message
        assert "on " in fb.message  # names the input that triggered it
    if key == "not_implemented":
        assert "not implemented yet" in fb.message


def test_nan_results_name_the_input_shape():
    def nan_on_batches(x, dim=-1):
        y = _sm(x, dim)
        return y if x.dim() < 4 else y * float("nan")

    fb = check_softmax(nan_on_batches)
    assert fb.diagnosis == "not_finite" and "(2, 3, 5, 7)" in fb.message, fb.text

    def shape_off(x, n_heads):
        return sh_view_permute(x, n_heads)[..., :-1] if x.shape[0] > 1 else sh_view_permute(x, n_heads)

    fb = check_split_heads(shape_off)
    assert fb.diagnosis == "wrong_shape" and "(2, 5, 6)" in fb.message, fb.text


def test_feedback_displays_as_its_text():
    fb = check_causal_mask(_not_implemented)
    assert str(fb) == fb.text

    class P:
        def __init__(self):
            self.out = ""

        def text(self, t):
            self.out += t

    p = P()
    fb._repr_pretty_(p, False)
    assert p.out == fb.wrapped() and " ".join(p.out.split()) == " ".join(fb.text.split())
    long = check_softmax(SOFTMAX_BUGS["no_max_subtraction"])
    assert max(len(line) for line in long.wrapped().splitlines()) <= 72


def test_mistakes_markdown_lists_every_title():
    for lab, mistakes in MISTAKES.items():
        md = labs.mistakes_markdown(lab)
        assert md.count("\n- ") + 1 == len(mistakes)
        assert all(f"**{title}**" in md for title, _ in mistakes.values())
    with pytest.raises(KeyError, match="no lab"):
        labs.mistakes_markdown("nope")


def test_labs_is_not_shipped_to_the_page():
    """The labs need torch: the page's Pyodide must not get them (nor would they import there).
    No shipped grader imports torch at module level, and none is a lab module."""
    import re

    sources = grader_sources()
    assert not any("labs" in path for path in sources)
    assert not any(re.search(r"^(import torch|from torch)", src, flags=re.M) for src in sources.values())
    assert not any("def check_softmax(fn)" in src for src in sources.values())
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("exercise_pages", root / "_ext" / "exercise_pages.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    assert not any("labs" in path for path in ext.grader_paths())
    assert not any(re.search(r"^(import torch|from torch)", (root / "attnlib" / path).read_text(), flags=re.M)
                   for path in ext.grader_paths())


# ------------------------------------------------------------------------------------ the book

BOOK_LABS = [  # chapter file, checker, learner's stub, MISTAKES key, the solution's checked result
    ("04_softmax_scaling.md", "check_softmax", "my_softmax", "softmax", "softmax_lab_result"),
    ("04_softmax_scaling.md", "check_attention", "my_attention", "attention", "attention_lab_result"),
    ("05_masking.md", "check_causal_mask", "my_causal_mask", "causal_mask", "causal_lab_result"),
    ("06_multihead.md", "check_split_heads", "my_split_heads", "split_heads", "split_lab_result"),
    ("06_multihead.md", "check_multi_head_attention", "my_multi_head_attention", "multi_head", "mha_lab_result"),
    ("11_at_scale.md", "check_online_softmax_attention", "my_online_softmax_attention", "online_softmax",
     "online_lab_result"),
]


@pytest.mark.parametrize("chapter,checker,stub,lab,result", BOOK_LABS)
def test_each_lab_is_in_its_chapter_before_the_exercises(chapter, checker, stub, lab, result):
    """The stub the learner edits, the list of mistakes from MISTAKES, the hidden reference and
    the removed assert that makes the build prove the checker accepts it, all before the
    chapter's exercises."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "chapters" / chapter).read_text()
    exercises = text.index("\n## Exercises\n")
    lab_part = text[:exercises]
    assert "```{include} _lab_note.md" in lab_part
    assert f"{checker}({stub})" in lab_part and "raise NotImplementedError" in lab_part
    assert f'mistakes_markdown("{lab}")' in lab_part
    solution = lab_part.index(f"{result} = {checker}(")
    assert ":tags: [hide-input]" in lab_part[lab_part.rindex("```{code-cell}", 0, solution):solution]
    assert f"assert {result}.correct" in lab_part[solution:]
    assert ":tags: [remove-cell]" in lab_part[solution:]


# ------------------------------------------------------------------ a learner cannot fool a lab
# The learner's function runs apart from the grader (a forked child on Linux, see
# attnlib.exercises.labs._sandbox): it cannot change the reference or the comparison, a change
# it makes to a library is refused and undone, the library calls that would do the lab's job are
# refused, the online lab sees every score matrix, and a loop, os._exit or a flood of output
# cannot hang, end or flood the kernel.

def _patches_allclose(*args, **kwargs):
    torch.allclose = lambda *a, **k: True
    return args[0] if len(args) == 1 else (args[0], args[0])


_EXP = torch.exp


def _patches_exp(x, dim=-1):  # a right softmax, through the real exp, that breaks torch.exp for everyone
    torch.exp = lambda t: t * 0
    e = _EXP(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize("checker", [check_softmax, check_attention])
def test_patching_allclose_is_refused_and_undone(checker):
    original = torch.allclose
    try:
        fb = checker(_patches_allclose)
        assert not fb.correct and fb.diagnosis == "tampered", fb.text
        assert "`torch.allclose`" in fb.message and "undone" in fb.message, fb.text
        assert torch.allclose is original
        later = check_softmax(lambda x, dim=-1: x) if checker is check_softmax else check_attention(
            lambda q, k, v, mask=None: (q, q))
        assert not later.correct, later.text                     # a later wrong answer still fails
    finally:
        torch.allclose = original


def test_patching_exp_cannot_corrupt_the_reference():
    try:
        fb = check_softmax(_patches_exp)
        assert not fb.correct and fb.diagnosis == "tampered" and "`torch.exp`" in fb.message, fb.text
        assert torch.exp is _EXP
        torch.testing.assert_close(attnlib.softmax(torch.tensor([1.0, 2.0, 3.0])),
                                   torch.tensor([0.0900306, 0.2447285, 0.6652409]))
        _assert_correct(check_softmax(sm_manual))
    finally:
        torch.exp = _EXP


def _patches_tensor_exp(x, dim=-1):  # adds a method to torch.Tensor that shadows the inherited one
    torch.Tensor.exp = lambda self: self
    return sm_manual(x, dim)


def _patches_numpy(x, dim=-1):
    np.allclose = lambda *a, **k: True
    return sm_manual(x, dim)


def _switches_the_watch_off(x, dim=-1):
    import sys

    sys.setprofile(None)
    return attnlib.softmax(x, dim=dim)


@pytest.mark.parametrize("isolation", ["process", "inprocess"])
@pytest.mark.parametrize("fn,name", [(_patches_tensor_exp, "torch.Tensor.exp"), (_patches_numpy, "numpy.allclose"),
                                     (_switches_the_watch_off, "sys.setprofile")])
def test_other_patches_are_refused_and_undone(fn, name, isolation, monkeypatch):
    monkeypatch.setenv("ATTNLIB_LAB_ISOLATION", isolation)
    allclose = np.allclose
    try:
        fb = check_softmax(fn)
        assert fb.diagnosis == "tampered" and f"`{name}`" in fb.message, fb.text
        assert "exp" not in vars(torch.Tensor) and np.allclose is allclose
    finally:
        np.allclose = allclose
        if "exp" in vars(torch.Tensor):
            del torch.Tensor.exp


def test_in_process_fallback_still_refuses_and_undoes(monkeypatch):
    """Where there is no fork (or when asked), the function runs in the kernel: the snapshot
    still undoes and reports a patch, and the feedback says what is not guarded."""
    monkeypatch.setenv("ATTNLIB_LAB_ISOLATION", "inprocess")
    original = torch.allclose
    try:
        fb = check_softmax(_patches_allclose)
        assert fb.diagnosis == "tampered" and torch.allclose is original, fb.text
        assert "inside this kernel" in fb.message and "no time or memory limit" in fb.message, fb.text
        fb = check_softmax(lambda x, dim=-1: torch.softmax(x, dim))
        assert fb.diagnosis == "library_call", fb.text
        _assert_correct(check_softmax(sm_manual))
    finally:
        torch.allclose = original


def _mha(q, k, v, mask=None):
    mha = torch.nn.MultiheadAttention(q.shape[-1], 1, kdim=k.shape[-1], vdim=v.shape[-1])
    return mha(q, k, v, need_weights=True)


def _os_steps(q, k, v, block_size):  # attnlib's own step function does the recurrence
    from attnlib import online_softmax_step

    m = torch.full(q.shape[:-1], float("-inf"))
    l, acc = torch.zeros_like(m), torch.zeros(*q.shape[:-1], v.shape[-1])
    for s0 in range(0, k.shape[-2], block_size):
        s = q @ k[..., s0:s0 + block_size, :].mT / math.sqrt(q.shape[-1])
        m_new, l, corr = online_softmax_step(m, l, s)
        acc = acc * corr[..., None] + torch.exp(s - m_new[..., None]) @ v[..., s0:s0 + block_size, :]
        m = m_new
    return acc / l[..., None]


REFUSED = [  # checker, a function that lets a library do the lab's job, the name the feedback shows
    (check_softmax, lambda x, dim=-1: attnlib.softmax(x, dim=dim), "attnlib.softmax"),
    (check_softmax, lambda x, dim=-1: torch.softmax(x, dim), "torch.softmax"),
    (check_softmax, lambda x, dim=-1: F.softmax(x, dim=dim), "torch.nn.functional.softmax"),
    (check_softmax, lambda x, dim=-1: x.softmax(dim), "Tensor.softmax"),
    (check_softmax, lambda x, dim=-1: torch.nn.Softmax(dim)(x), "torch.nn.Softmax"),
    (check_softmax, lambda x, dim=-1: torch.log_softmax(x, dim).exp(), "torch.log_softmax"),
    (check_softmax, lambda x, dim=-1: F.softmin(-x, dim=dim), "softmin"),
    (check_attention, lambda q, k, v, mask=None: (F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                                  at_reference(q, k, v, mask)[1]), "scaled_dot_product_attention"),
    (check_attention, lambda q, k, v, mask=None: attnlib.scaled_dot_product_attention(q, k, v, mask),
     "attnlib.scaled_dot_product_attention"),
    (check_attention, _mha, "MultiheadAttention"),
    (check_causal_mask, lambda T: attnlib.causal_mask(T), "attnlib.causal_mask"),
    (check_causal_mask, lambda T: torch.nn.Transformer.generate_square_subsequent_mask(T) == 0,
     "generate_square_subsequent_mask"),
    (check_causal_mask, lambda T: attnlib.masks.sliding_window_mask(T, T), "sliding_window_mask"),
    (check_split_heads, lambda x, n_heads: attnlib.split_heads(x, n_heads), "attnlib.split_heads"),
    (check_online_softmax_attention, lambda q, k, v, block_size: F.scaled_dot_product_attention(q, k, v),
     "scaled_dot_product_attention"),
    (check_online_softmax_attention, lambda q, k, v, b: attnlib.tiled_attention(q, k, v, block_size=b),
     "attnlib.tiled_attention"),
    (check_online_softmax_attention, _os_steps, "attnlib.online_softmax_step"),
]


@pytest.mark.parametrize("checker,fn,name", REFUSED)
def test_library_calls_that_do_the_labs_job_are_refused(checker, fn, name):
    fb = checker(fn)
    assert not fb.correct and fb.diagnosis == "library_call", fb.text
    assert name in fb.message and "This lab is about" in fb.message, fb.text


def test_the_attention_lab_accepts_a_library_softmax():
    """Only what the lab is about is refused: torch.softmax is fine inside attention."""
    _assert_correct(check_attention(at_einsum_inf))


def _np_full(q, k, v, block_size):  # NumPy, the whole score matrix at once
    q, k, v = q.numpy(), np.asarray(k), v.numpy()
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy(w / w.sum(-1, keepdims=True) @ v)


def _np_einsum_full(q, k, v, block_size):
    q, k, v = np.array(q, dtype=np.float64), np.array(k, dtype=np.float64), np.array(v, dtype=np.float64)
    s = np.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy(np.einsum("...qk,...kv->...qv", w / w.sum(-1, keepdims=True), v))


def _full_on_long_inputs(q, k, v, block_size):  # blockwise on the short inputs only
    if k.shape[-2] < 100:
        return _online(q, k, v, block_size)
    s = (q[..., :, None, :] * k[..., None, :, :]).sum(-1).flatten()   # (T_q * T_k,): no (T_q, T_k) shape
    w = torch.exp(s / math.sqrt(q.shape[-1]) - s.max() / math.sqrt(q.shape[-1])).reshape(q.shape[-2], -1)
    return (w / w.sum(-1, keepdim=True)) @ v


def _np_from_lists_full(q, k, v, block_size):  # arrays from Python lists, not from the tensors
    q, k, v = np.array(q.tolist()), np.array(k.tolist()), np.array(v.tolist())
    w = np.exp(np.dot(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])) if q.ndim == 2 else None
    if w is None:
        return _online(*(torch.from_numpy(t) for t in (q, k, v)), block_size)
    return torch.from_numpy(w / w.sum(-1, keepdims=True) @ v)


@pytest.mark.parametrize("fn", [ONLINE_BUGS["full_matrix"], _np_full, _np_einsum_full, _full_on_long_inputs,
                                _np_from_lists_full])
def test_the_online_lab_sees_every_score_matrix(fn):
    fb = check_online_softmax_attention(fn)
    assert not fb.correct and fb.diagnosis == "full_matrix", fb.text
    assert "The whole score matrix at once" in fb.message and "(T_q, T_k)" in fb.message, fb.text


_HOSTILE = r'''
import json, os, sys, time, torch
try:
    from attnlib.exercises.labs import _sandbox
    _sandbox.TIME_LIMIT_S = 1.0
except ImportError:
    pass
from attnlib.exercises.labs import check_causal_mask

def report(name, fb, t0):
    print("RESULT " + json.dumps({"name": name, "correct": fb.correct, "diagnosis": fb.diagnosis,
                                  "message": fb.message, "seconds": time.time() - t0}), flush=True)

def mask(T):
    i = torch.arange(T)
    return i[None, :] <= i[:, None]

def flood(T):
    print("x" * 2_000_000)
    os.write(2, b"y" * 200_000)
    return mask(T)

def loop(T):
    while True:
        pass

for name, fn in (("flood", flood), ("loop", loop), ("sys.exit", lambda T: sys.exit(3)),
                 ("os._exit", lambda T: os._exit(7)), ("after", mask)):
    t0 = time.time()
    report(name, check_causal_mask(fn), t0)
try:
    children = [p for task in os.listdir("/proc/self/task")
                for p in open(f"/proc/self/task/{task}/children").read().split()]
except OSError:
    children = []
print("CHILDREN " + json.dumps(children), flush=True)
'''


@pytest.fixture(scope="module")
def hostile_run():
    """The hostile functions, checked in a fresh Python (a kernel of its own): what it printed
    and each check's feedback.  Today's code would hang there (killed after 120 s) or die."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(attnlib.__file__)))
    env.pop("ATTNLIB_LAB_ISOLATION", None)
    try:
        run = subprocess.run([sys.executable, "-c", _HOSTILE], capture_output=True, timeout=120, env=env)
    except subprocess.TimeoutExpired as err:
        return {"results": {}, "stdout": err.stdout or b"", "stderr": err.stderr or b"", "rc": "timeout"}
    results, children = {}, None
    for line in run.stdout.decode(errors="replace").splitlines():
        if line.startswith("RESULT "):
            item = json.loads(line[7:])
            results[item["name"]] = item
        elif line.startswith("CHILDREN "):
            children = json.loads(line[9:])
    return {"results": results, "stdout": run.stdout, "stderr": run.stderr, "rc": run.returncode,
            "children": children}


def test_an_endless_loop_is_stopped_by_a_time_limit(hostile_run):
    """The loop never returns: that the check came back at all, with the time limit's verdict,
    is what shows the limit works (no duration is asserted; the checks that follow ran too)."""
    loop = hostile_run["results"].get("loop")
    assert loop is not None, hostile_run["rc"]
    assert loop["diagnosis"] == "timed_out" and "computed for 1 s of processor time" in loop["message"], loop
    assert "after" in hostile_run["results"], hostile_run["results"].keys()


def test_exits_do_not_end_the_kernel(hostile_run):
    results = hostile_run["results"]
    assert results.get("os._exit", {}).get("diagnosis") == "exited", (hostile_run["rc"], results.keys())
    assert "exit status 7" in results["os._exit"]["message"] and "still running" in results["os._exit"]["message"]
    assert results["sys.exit"]["diagnosis"] == "raised" and "SystemExit" in results["sys.exit"]["message"]
    assert results["after"]["correct"] and hostile_run["rc"] == 0, hostile_run["rc"]   # the kernel lives on
    assert hostile_run["children"] == [], hostile_run["children"]                      # no child left behind


def test_printed_output_is_captured_and_quoted(hostile_run):
    flood = hostile_run["results"].get("flood")
    assert flood is not None and flood["correct"], (hostile_run["rc"], flood)
    assert "printed 14,000,007 characters" in flood["message"] and "'xxxx" in flood["message"], flood["message"]
    assert len(hostile_run["stdout"]) < 20_000 and len(hostile_run["stderr"]) < 20_000   # nothing flooded out


@pytest.mark.parametrize("chapter", sorted({chapter for chapter, *_ in BOOK_LABS}))
def test_the_chapters_solutions_are_graded_correct(chapter):
    """Each chapter's hidden reference solution, run as the book runs it, passes its lab."""
    import re
    from pathlib import Path

    from attnlib.exercises import labs as labs_module

    text = (Path(__file__).resolve().parents[1] / "chapters" / chapter).read_text()
    ns = {"torch": torch, "math": math, "np": np, **{name: getattr(labs_module, name) for name in labs_module.__all__}}
    checked = [result for ch, _, _, _, result in BOOK_LABS if ch == chapter]
    for cell in re.findall(r"```\{code-cell\} ipython3\n:tags: \[hide-input\]\n(.*?)```", text, flags=re.S):
        if any(f"{result} = " in cell for result in checked):
            exec(compile(cell, chapter, "exec"), ns)  # noqa: S102 - the book's own code
    for result in checked:
        _assert_correct(ns[result])


def test_a_failed_fork_falls_back_to_a_spawned_worker(monkeypatch):
    """Out of processes or memory, os.fork fails: the check runs in a spawned worker instead."""
    import os

    def no_fork():
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    monkeypatch.delenv("ATTNLIB_LAB_ISOLATION", raising=False)
    monkeypatch.setenv("ATTNLIB_LAB_PRESTART", "0")
    fb = check_softmax(sm_manual)
    assert fb.correct and "inside this kernel" not in fb.message, fb.text
    assert check_softmax(lambda x, dim=-1: torch.softmax(x, dim)).diagnosis == "library_call"


def test_where_no_process_can_start_the_check_runs_in_the_kernel_and_says_why(monkeypatch):
    import os

    from attnlib.exercises.labs import _sandbox

    def no_process(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_process)
    monkeypatch.setattr(_sandbox, "_Worker", no_process)
    monkeypatch.delenv("ATTNLIB_LAB_ISOLATION", raising=False)
    fb = check_softmax(sm_manual)
    assert fb.correct and "inside this kernel, because no worker process could be started" in fb.message, fb.text
    assert check_softmax(lambda x, dim=-1: torch.softmax(x, dim)).diagnosis == "library_call"
