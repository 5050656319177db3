"""What a code lab refuses as doing its job, by family (issue 46, items 4 and 5).

Each lab's :class:`~attnlib.exercises.labs.Refusal` names words of its job (``softmax``,
``attention``, ``backward``, ...): any torch function, ``Tensor`` attribute, ATen operation or
library/attnlib Python function whose name contains one is refused, so the variants that an
exact list misses (``_safe_softmax``, ``_masked_softmax``, ``torch.sparse.softmax``, Hugging
Face's ``eager_attention_forward``) are refused too.  The backward lab also refuses building
autograd's graph, so autograd walked by hand (``grad_fn``, ``next_functions``, calling its
nodes) is refused however the graph is reached.  Each route below is first shown to do the
lab's job (its result is right), so that only the refusal stands between it and "Correct.".
The words must not catch ordinary operations: every ATen operation and torch name is checked,
and right solutions that use the nearby ordinary operations, or helpers of the learner's own
whose names contain the words, pass.
"""
from __future__ import annotations

import importlib
import math
import re
import sys
import types

import pytest
import torch

from attnlib.exercises import labs
from attnlib.exercises.labs import (
    LABS, check_attention, check_attention_backward, check_causal_mask, check_softmax,
)
from attnlib.exercises.labs._core import AUTOGRAD_GRAPH, LIBRARIES

from lab_checks import assert_correct


def _sm(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _dense_sparse(x):
    """``x`` as a sparse COO tensor holding every entry, zeros included (``to_sparse`` would drop
    them, and a sparse softmax treats a missing entry as ``-inf``)."""
    return torch.sparse_coo_tensor(torch.ones_like(x, dtype=torch.bool).nonzero().T, x.reshape(-1), x.shape)


def _no_torch_function_safe_softmax(x, dim=-1):
    with torch._C.DisableTorchFunction():
        return torch.ops.aten._safe_softmax(x, dim)


SOFTMAX_ROUTES = [  # a library softmax the exact list of names let through, the name the feedback shows
    (lambda x, dim=-1: torch.ops.aten._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool), dim % x.dim()),
     "torch.ops.aten._masked_softmax"),
    (lambda x, dim=-1: torch.ops.aten._safe_softmax(x, dim), "torch.ops.aten._safe_softmax"),
    (_no_torch_function_safe_softmax, "torch.ops.aten._safe_softmax"),
    (lambda x, dim=-1: torch.sparse.softmax(_dense_sparse(x), dim).to_dense(), "torch.sparse.softmax"),
    (lambda x, dim=-1: torch.sparse.log_softmax(_dense_sparse(x), dim).to_dense().exp(), "torch.sparse.log_softmax"),
    (lambda x, dim=-1: torch.special.softmax(x, dim), "torch.special.softmax"),
]


@pytest.mark.parametrize("fn,name", SOFTMAX_ROUTES, ids=[n.rsplit(".", 1)[-1] + str(i)
                                                         for i, (_, n) in enumerate(SOFTMAX_ROUTES)])
def test_every_library_softmax_is_refused_in_the_softmax_lab(fn, name):
    x = torch.tensor([[0.0, 1.0, 2.0], [1e4, 0.0, -1e4]])
    for dim in (-1, 0):                          # the route does the lab's job: only the refusal stops it
        torch.testing.assert_close(fn(x.clone(), dim), torch.softmax(x, dim))
    fb = check_softmax(fn)
    assert not fb.correct and fb.diagnosis == "library_call", fb.text
    assert f"`{name}`" in fb.message and "This lab is about writing the softmax yourself" in fb.message, fb.text


def _hf_attention(q, k, v, mask=None):
    """Hugging Face's BERT attention, reached as a plain function (no torch name says attention)."""
    from transformers.models.bert.modeling_bert import eager_attention_forward

    def four(t):
        return t.reshape(-1, *t.shape[-2:])[:, None]           # (batch * heads, 1, T, d)

    add = None
    if mask is not None:
        full = torch.broadcast_to(mask, (*q.shape[:-1], k.shape[-2]))
        add = torch.zeros(full.shape, dtype=q.dtype).masked_fill(~full, float("-inf")).reshape(-1, 1, *full.shape[-2:])
    out, weights = eager_attention_forward(torch.nn.Module(), four(q), four(k), four(v), add)
    return out.transpose(1, 2).reshape(*q.shape[:-1], v.shape[-1]), weights.reshape(*q.shape[:-1], k.shape[-2])


def test_a_libraries_attention_function_is_refused_by_its_name():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 6)
    mask = torch.rand(4, 5) > 0.3
    mask[:, 0] = True
    out, weights = _hf_attention(q, k, v, mask)
    s = (q @ k.mT / math.sqrt(8)).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(weights, torch.softmax(s, -1))
    torch.testing.assert_close(out, torch.softmax(s, -1) @ v)
    fb = check_attention(_hf_attention)
    assert fb.diagnosis == "library_call" and "eager_attention_forward" in fb.message, fb.text


def test_torchs_causal_bias_is_refused_in_the_causal_lab():
    def bias(T):
        from torch.nn.attention.bias import causal_upper_left

        return causal_upper_left(T, T)._materialize()

    assert torch.equal(bias(4), torch.ones(4, 4, dtype=torch.bool).tril())
    fb = check_causal_mask(bias)
    assert fb.diagnosis == "library_call" and "causal_upper_left" in fb.message, fb.text


# ------------------------------------------------------------------ the backward lab: autograd by hand

def _walk_graph(q, k, v, d_out):
    """Autograd's own backward, walked by hand: every node of ``out``'s graph, in topological
    order, called on the gradient of its output; the leaves' gradients collected."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(-1, keepdim=True).detach())
    out = e / e.sum(-1, keepdim=True) @ v
    order, seen = [], set()

    def visit(node):
        if node is not None and node not in seen:
            seen.add(node)
            for child, _ in node.next_functions:
                visit(child)
            order.append(node)

    visit(out.grad_fn)
    grads, leaves = {out.grad_fn: d_out}, {}
    for node in reversed(order):
        g = grads.pop(node, None)
        if g is None:
            continue
        if hasattr(node, "variable"):                       # AccumulateGrad: a leaf's gradient
            leaves[id(node.variable)] = g
            continue
        outs = node(g)
        for (child, nr), gc in zip(node.next_functions, outs if isinstance(outs, tuple) else (outs,)):
            if child is not None and gc is not None:
                if hasattr(child, "variable"):
                    gc = gc.sum_to_size(child.variable.shape)
                else:                                   # the engine's own step: undo broadcasting
                    gc = gc.sum_to_size(child._input_metadata[nr].shape)
                grads[child] = grads[child] + gc if child in grads else gc
    return tuple(leaves[id(t)].detach() for t in (q, k, v))


def _walk_graph_unseen(q, k, v, d_out):   # the same, with the torch function watch switched off
    with torch._C.DisableTorchFunction():
        return _walk_graph(q, k, v, d_out)


def _gradient_edge(q, k, v, d_out):
    from torch.autograd.graph import get_gradient_edge

    q = q.detach().clone().requires_grad_(True)
    out = _sm(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v
    get_gradient_edge(out)
    return _walk_graph(q, k, v, d_out)


def _forward_mode(q, k, v, d_out):
    """Forward-mode autograd (dual tensors): each entry of each input's gradient as a directional
    derivative of <d_out, out>."""
    fwAD = importlib.import_module("torch.autograd.forward_ad")

    def f(q, k, v):
        return (_sm(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v * d_out).sum()

    inputs, grads = [q, k, v], []
    with fwAD.dual_level():
        for i, t in enumerate(inputs):
            g = torch.zeros_like(t).reshape(-1)
            for j in range(t.numel()):
                tangent = torch.zeros(t.numel(), dtype=t.dtype)
                tangent[j] = 1
                args = list(inputs)
                args[i] = fwAD.make_dual(t, tangent.reshape(t.shape))
                g[j] = fwAD.unpack_dual(f(*args)).tangent
            grads.append(g.reshape(t.shape))
    return tuple(grads)


def _autograd(q, k, v, d_out):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    return torch.autograd.grad(_sm(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v, (q, k, v), d_out)


BACKWARD_ROUTES = [  # route, what the feedback names
    (_walk_graph, "uses `Tensor.grad_fn`"),
    (_walk_graph_unseen, f"builds {AUTOGRAD_GRAPH}"),
    (_gradient_edge, "uses `torch.autograd.graph.get_gradient_edge`"),
    (_forward_mode, "dual_level"),
]


@pytest.mark.parametrize("fn,shown", BACKWARD_ROUTES, ids=[f.__name__ for f, _ in BACKWARD_ROUTES])
@pytest.mark.parametrize("isolation", ["process", "inprocess"])
def test_autograd_walked_by_hand_is_refused(fn, shown, isolation, monkeypatch):
    q, k, v, d = torch.randn(2, 3), torch.randn(4, 3), torch.randn(4, 2), torch.randn(2, 2)
    for got, want in zip(fn(q, k, v, d), _autograd(q, k, v, d)):   # the route gives autograd's gradients
        torch.testing.assert_close(got, want)
    monkeypatch.setenv("ATTNLIB_LAB_ISOLATION", isolation)
    fb = check_attention_backward(fn)
    assert not fb.correct and fb.diagnosis == "library_call", fb.text
    assert shown in fb.message, fb.text
    assert "Work on q, k, v and d_out as they come, with no requires_grad" in fb.message   # what to write instead
    assert "dS = A * (dA - rowsum(dA * A))" in fb.message


def test_a_named_autograd_call_is_shown_before_the_graph_it_builds():
    fb = check_attention_backward(_autograd)
    assert fb.diagnosis == "library_call" and "uses `torch.autograd.grad`" in fb.message, fb.text


# ------------------------------------------------------------------ no accident: ordinary operations pass

def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _torch_names() -> set:
    """Every ATen operation, and every name of torch's public namespaces and of ``Tensor``."""
    names = {op.split("::", 1)[1].split(".", 1)[0] for op in torch._C._dispatch_get_all_op_names()
             if op.startswith("aten::")}
    spaces = [torch, torch.Tensor, torch._C.TensorBase, torch.special, torch.sparse, torch.linalg, torch.nn, torch.fft,
              torch.autograd, torch.autograd.graph, torch.autograd.functional]
    spaces += [importlib.import_module(m) for m in ("torch.nn.functional", "torch.autograd.forward_ad", "torch.func")]
    for space in spaces:
        names.update(dir(space))
    return names


def _torch_python_functions() -> set:
    """``(module, qualname)`` of the Python functions and methods of every torch module loaded."""
    importlib.import_module("torch.nn.attention.bias")     # the causal lab's neighbours

    found = set()
    for mname, mod in list(sys.modules.items()):
        if mod is None or not (mname == "torch" or mname.startswith("torch.")):
            continue
        for value in list(vars(mod).values()):
            try:
                own = isinstance(value, type) and value.__module__ == mname
                members = list(vars(value).values()) if own else [value]
            except Exception:  # noqa: BLE001 - lazy objects
                continue
            for f in members:
                f = f.__func__ if isinstance(f, (staticmethod, classmethod)) else f
                if type(f) is types.FunctionType and f.__module__ == mname:
                    found.add((mname, f.__code__.co_qualname))
    return found


def _refusals() -> dict:
    return {id(lab.refusal): (name, lab.refusal) for name, lab in LABS.items()}.values()


def _at_a_word_boundary(name: str, refusal) -> bool:
    """Whether ``name`` is refused for a word of the lab's job that starts a word of the name
    (``_masked_softmax``, ``MultiheadAttention``), not for letters inside another word
    (``residual`` holds ``dual``, ``property`` holds ``rope``)."""
    snake = _snake(name)
    return (snake.rsplit(".", 1)[-1] in refusal.torch
            or any(re.search(r"(^|[^a-z])" + re.escape(word), snake) for word in refusal.families))


def test_no_torch_name_is_refused_by_accident():
    names = _torch_names()
    assert len(names) > 2000
    for lab, refusal in _refusals():
        refused = [n for n in names if refusal.torch_refused(n)]
        assert all(_at_a_word_boundary(n, refusal) for n in refused), (lab, [
            n for n in refused if not _at_a_word_boundary(n, refusal)])


def test_no_python_function_of_torch_is_refused_by_accident():
    functions = _torch_python_functions()
    assert len(functions) > 10000
    for lab, refusal in _refusals():
        refused = [q for m, q in functions if refusal.python_refused(m, q)]
        assert all(_at_a_word_boundary(q, refusal) for q in refused), (lab, [
            q for q in refused if not _at_a_word_boundary(q, refusal)])


#: What right solutions use, in some lab: none of it is refused in any lab.
ORDINARY = ("exp", "exp_", "log", "amax", "amin", "max", "sum", "mean", "div", "sub", "mul", "neg", "sqrt", "rsqrt",
            "pow", "logsumexp", "masked_fill", "masked_fill_", "where", "matmul", "mm", "bmm", "baddbmm", "addmm",
            "einsum", "tril", "triu", "arange", "ones", "zeros", "full", "empty", "le", "lt", "ge", "eq",
            "logical_not", "bitwise_not", "cat", "stack", "reshape", "view", "_unsafe_view", "transpose", "permute",
            "movedim", "expand", "unsqueeze", "squeeze", "flatten", "unflatten", "chunk", "split", "contiguous",
            "clone", "detach", "copy_", "_to_copy", "to", "float", "double", "cos", "sin", "outer", "isfinite",
            "nan_to_num", "finfo", "numpy", "from_numpy", "tensor", "as_tensor", "gather", "index_select", "flip",
            "roll", "sigmoid", "softplus", "requires_grad", "requires_grad_", "is_grad_enabled", "no_grad",
            "set_grad_enabled", "is_leaf", "data", "shape", "dtype", "T", "mT")


def test_ordinary_operations_are_refused_in_no_lab():
    names = _torch_names()
    assert set(ORDINARY) <= names, set(ORDINARY) - names
    for lab, refusal in _refusals():
        assert not [n for n in ORDINARY if refusal.torch_refused(n)], lab


def softmax_with_where(x, dim=-1):  # torch.where and a helper of the learner's own named *softmax*
    def my_stable_softmax_step(z):
        return torch.where(z > -math.inf, torch.exp(z), torch.zeros_like(z))

    e = my_stable_softmax_step(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def attention_with_baddbmm(q, k, v, mask=None):  # baddbmm on flattened heads; the helper named *attention*
    def attention_scores(q, k):
        Q, K = q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:])
        zero = torch.zeros(Q.shape[0], Q.shape[1], K.shape[1], dtype=Q.dtype)
        return torch.baddbmm(zero, Q, K.transpose(1, 2), alpha=1 / math.sqrt(q.shape[-1])).reshape(
            *q.shape[:-1], k.shape[-2])

    s = attention_scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = _sm(s)
    return w @ v, w


def backward_with_helpers(q, k, v, d_out):  # helpers of the learner's own named *backward*, *grad*, *vjp*
    def softmax_backward(A, dA):
        return A * (dA - (dA * A).sum(-1, keepdim=True))

    def grad_vjp(dS, x, c):
        return dS @ x * c

    c = 1 / math.sqrt(q.shape[-1])
    A = _sm(q @ k.transpose(-2, -1) * c)
    dS = softmax_backward(A, d_out @ v.transpose(-2, -1))
    return grad_vjp(dS, k, c), grad_vjp(dS.transpose(-2, -1), q, c), A.transpose(-2, -1) @ d_out


@pytest.mark.parametrize("checker,fn", [(check_softmax, softmax_with_where), (check_attention, attention_with_baddbmm),
                                        (check_attention_backward, backward_with_helpers)])
def test_right_solutions_near_the_refused_names_pass(checker, fn):
    assert_correct(checker(fn))


# ------------------------------------------------------------------ one source: the book and the docstring

def test_what_is_refused_is_written_from_the_lab_spec():
    for name, lab in LABS.items():
        refusal = lab.refusal
        short, long = refusal.describe(tick="``", short=True), refusal.describe()
        assert f"| {lab.contract} | {short} |" in labs.__doc__, name          # the package docstring's table
        assert long[1:] in labs.mistakes_markdown(lab.key), name                # under the lab's mistakes in the book
        for word in refusal.families + refusal.torch:
            assert f"``{word}``" in short and f"`{word}`" in long, (name, word)
        assert ("autograd's graph" in long) == refusal.autograd_graph, name
    assert all(lib in labs.__doc__ for lib in LIBRARIES)
