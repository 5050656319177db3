"""The attention-backward lab (attnlib.exercises.labs.backward, chapter 11): correct backward
passes written in several ways pass, every mistake the checker names is triggered by a buggy
implementation and named, other buggy ones are never marked correct, autograd is refused, and
the chapter's reference solution passes.

The oracle is torch.autograd through attnlib.scaled_dot_product_attention (itself tested
against PyTorch's SDPA in test_attention.py); the learners' functions below never use autograd."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlib.exercises import labs
from attnlib.exercises.labs import MISTAKES, LabFeedback, check_attention_backward
from attnlib.exercises.labs import backward as backward_lab

LAB = "attention_backward"


def _sm(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _bw(q, k, v, d_out, *, bug=None):
    """A learner-style backward pass; ``bug`` switches in one classic mistake."""
    c = 1 / math.sqrt(q.shape[-1])
    A = _sm(q @ k.transpose(-2, -1) * c)
    dA = d_out @ v.transpose(-2, -1)
    dv = (A if bug == "dv_not_transposed" else A.transpose(-2, -1)) @ d_out
    r = {"no_rowsum": 0.0, "rowsum_wrong_axis": (dA * A).sum(-2, keepdim=True),
         "rowsum_no_keepdim": (dA * A).sum(-1)}.get(bug, (dA * A).sum(-1, keepdim=True))
    dS = A * (dA - r)
    s = 1.0 if bug == "no_scaling" else c
    dq = dS @ k * s
    dk = (dS if bug == "dk_not_transposed" else dS.transpose(-2, -1)) @ q * s
    return dq, dk, dv


def bw_einsum(q, k, v, d_out):  # einsum, D computed from the output as FlashAttention does
    d_k = q.shape[-1]
    S = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(d_k)
    A = torch.exp(S - torch.logsumexp(S, -1, keepdim=True))
    out = torch.einsum("...ij,...jd->...id", A, v)
    D = (d_out * out).sum(-1, keepdim=True)                       # rowsum(dO * O) = rowsum(dA * A)
    dA = torch.einsum("...id,...jd->...ij", d_out, v)
    dS = A * (dA - D)
    return (torch.einsum("...ij,...jd->...id", dS, k) / math.sqrt(d_k),
            torch.einsum("...ij,...id->...jd", dS, q) / math.sqrt(d_k),
            torch.einsum("...ij,...id->...jd", A, d_out))


def bw_numpy_loop(q, k, v, d_out):  # per query row, in NumPy float64, through the softmax Jacobian
    shape = q.shape
    Q, K, V, G = (t.double().reshape(-1, *t.shape[-2:]).numpy() for t in (q, k, v, d_out))
    dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    c = 1 / math.sqrt(shape[-1])
    for b in range(Q.shape[0]):
        for i in range(Q.shape[1]):
            s = K[b] @ Q[b, i] * c
            a = np.exp(s - s.max())
            a /= a.sum()
            da = V[b] @ G[b, i]
            ds = (np.diag(a) - np.outer(a, a)) @ da             # Jacobian of the softmax times da
            dQ[b, i] = ds @ K[b] * c
            dK[b] += np.outer(ds, Q[b, i]) * c
            dV[b] += np.outer(a, G[b, i])
    return tuple(torch.from_numpy(x).reshape(*t.shape) for x, t in zip((dQ, dK, dV), (q, k, v)))


BUGS = {key: (lambda q, k, v, d, key=key: _bw(q, k, v, d, bug=key)) for key in MISTAKES[LAB]}

UNLISTED = [
    lambda q, k, v, d: tuple(g * 2 for g in _bw(q, k, v, d)),                        # everything doubled
    lambda q, k, v, d: _bw(q, k, v, d)[::-1],                                         # (dv, dk, dq)
    lambda q, k, v, d: (_bw(q, k, v, d)[1], _bw(q, k, v, d)[0], _bw(q, k, v, d)[2]),   # dq and dk swapped
    lambda q, k, v, d: (*_bw(q, k, v, d)[:2], torch.zeros_like(v)),                    # dv forgotten
    lambda q, k, v, d: _bw(q * math.sqrt(q.shape[-1]) ** -0.5, k, v, d),               # wrong forward scale
    lambda q, k, v, d: (_bw(q, k, v, d)[0], -_bw(q, k, v, d)[1], _bw(q, k, v, d)[2]),  # dk's sign flipped
]


from lab_checks import assert_correct as _assert_correct  # noqa: E402  (shared with the other lab tests)


@pytest.mark.parametrize("fn", [lambda q, k, v, d: _bw(q, k, v, d), bw_einsum, bw_numpy_loop])
def test_correct_backward_passes_pass(fn):
    _assert_correct(check_attention_backward(fn))


@pytest.mark.parametrize("key", sorted(MISTAKES[LAB]))
def test_each_backward_mistake_is_named(key):
    fb = check_attention_backward(BUGS[key])
    assert not fb.correct and fb.diagnosis == key, f"expected {key!r}, got {fb.diagnosis!r}: {fb.text}"
    assert MISTAKES[LAB][key][0] in fb.message and "Shown by" in fb.message, fb.message


def test_every_backward_mistake_has_a_buggy_implementation():
    assert set(BUGS) == set(MISTAKES[LAB]) == set(backward_lab._BUGS)


def test_two_backward_mistakes_at_once_are_both_named():
    def two(q, k, v, d):
        dq, dk, _ = _bw(q, k, v, d, bug="no_rowsum")
        return dq, dk, _bw(q, k, v, d, bug="dv_not_transposed")[2]

    fb = check_attention_backward(two)
    assert fb.diagnosis == "no_rowsum" and "2 mistakes at once" in fb.message, fb.text
    assert MISTAKES[LAB]["dv_not_transposed"][0] in fb.message


def test_the_small_input_shows_which_gradients_are_wrong():
    fb = check_attention_backward(BUGS["dv_not_transposed"])
    assert "(2, 2)" in fb.message and "Wrong: dv; right: dq, dk." in fb.message, fb.text
    assert "expected dv:" in fb.message and "your dv:" in fb.message


@pytest.mark.parametrize("i", range(len(UNLISTED)))
def test_unlisted_backward_bugs_are_never_correct(i):
    fb = check_attention_backward(UNLISTED[i])
    assert not fb.correct and fb.diagnosis not in (None, "library_call"), fb.text


def test_the_variants_without_mistakes_equal_autograd():
    for case in backward_lab._backward_cases()[:-1]:
        for got, want in zip(backward_lab._backward_variant(*case.args), backward_lab._reference_backward(case)):
            torch.testing.assert_close(got, want)


def _autograd(q, k, v, d):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = _sm(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v
    return torch.autograd.grad(out, (q, k, v), d)


def _backward_call(q, k, v, d):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = _sm(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v
    out.backward(d)
    return q.grad, k.grad, v.grad


def _vjp(q, k, v, d):
    from torch.func import vjp

    _, pull = vjp(lambda q, k, v: _sm(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v, q, k, v)
    return pull(d)


@pytest.mark.parametrize("fn,name", [(_autograd, "torch.autograd.grad"), (_backward_call, "backward"),
                                     (_vjp, "torch.func.vjp")])
@pytest.mark.parametrize("isolation", ["process", "inprocess"])
def test_autograd_is_refused(fn, name, isolation, monkeypatch):
    monkeypatch.setenv("ATTNLIB_LAB_ISOLATION", isolation)
    fb = check_attention_backward(fn)
    assert fb.diagnosis == "library_call" and name in fb.message, fb.text
    assert "deriving the gradients yourself" in fb.message


@pytest.mark.parametrize("fn,key", [
    (lambda *a: (_ for _ in ()).throw(ValueError("learner bug")), "raised"),
    (lambda *a: (_ for _ in ()).throw(NotImplementedError), "not_implemented"),
    (lambda *a: None, "wrong_type"), (lambda *a: a[0], "wrong_type"),
    (lambda q, k, v, d: (q, k), "wrong_type"), (lambda q, k, v, d: (q, k, v.sum(-1)), "wrong_shape"),
    (lambda q, k, v, d: tuple(torch.full_like(t, float("nan")) for t in (q, k, v)), "not_finite"),
    (42, "not_callable"),
])
def test_nothing_a_learner_writes_raises_through(fn, key):
    fb = check_attention_backward(fn)
    assert isinstance(fb, LabFeedback) and not fb.correct and fb.text.startswith("Not yet. ")
    assert fb.diagnosis == key, fb.text


def test_mistakes_markdown_lists_the_lab():
    md = labs.mistakes_markdown(LAB)
    assert all(f"**{title}**" in md for title, _ in MISTAKES[LAB].values())


CHAPTER = Path(__file__).resolve().parents[1] / "chapters" / "11_at_scale.md"


def test_the_lab_is_in_chapter_9_before_the_exercises():
    text = CHAPTER.read_text()
    lab_part = text[:text.index("\n## Exercises\n")]
    assert "check_attention_backward(my_attention_backward)" in lab_part
    assert 'mistakes_markdown("attention_backward")' in lab_part
    solution = lab_part.index("backward_lab_result = check_attention_backward(")
    assert ":tags: [hide-input]" in lab_part[lab_part.rindex("```{code-cell}", 0, solution):solution]
    assert "assert backward_lab_result.correct" in lab_part[solution:]


def test_the_chapters_solution_is_graded_correct():
    import re

    text = CHAPTER.read_text()
    ns = {"torch": torch, "math": math, **{name: getattr(labs, name) for name in labs.__all__}}
    cells = [c for c in re.findall(r"```\{code-cell\} ipython3\n:tags: \[hide-input\]\n(.*?)```", text, flags=re.S)
             if "backward_lab_result = " in c]
    assert len(cells) == 1
    exec(compile(cells[0], "11_at_scale.md", "exec"), ns)  # noqa: S102 - the book's own code
    _assert_correct(ns["backward_lab_result"])
