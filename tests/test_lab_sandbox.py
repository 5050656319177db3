"""A learner set on passing a lab without doing it, or whose code would harm the kernel.

The labs' promise (``attnlib.exercises.labs``): a checker that runs in the learner's own kernel
catches accidental use of a library function and every mistake it names, and closes the cheap
routes around its watches; a learner set on deceiving it can.  Each route below passed as
"Correct." (or took the kernel down) before the watches below it existed:

* a dispatch-level watch (``TorchDispatchMode``) sees ATen calls made under
  ``DisableTorchFunction``, through ``torch.ops.aten`` or a Python decomposition;
* every record is written at once to the parent through a pipe, so clearing the child's own
  record (``gc``, a frame) hides nothing, and the reply is written with a ``pickle.dumps``
  taken at import and read back only as builtins, in a form checked field by field;
* threads, new processes, signals, ``torch.jit`` and ``torch.compile`` are refused;
* the result is serialised while the watches are on; a Tensor subclass is named, never read;
  a complex result is refused;
* in the online lab, any tensor or array holding scores over every key (a row or more) is
  seen however it was built: torch, ``torch.tensor`` of Python lists, ``np.frombuffer``.
"""
from __future__ import annotations

import gc
import io
import json
import math
import os
import pickle
import subprocess
import sys
import threading
import uuid

import numpy as np
import pytest
import torch

import attnlib
from attnlib.exercises.labs import _sandbox, check_online_softmax_attention, check_softmax


def sm(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


# ------------------------------------------------------------------ routes around the watches

def disable_torch_function(x, dim=-1):
    with torch._C.DisableTorchFunction():
        return torch.softmax(x, dim)


def aten_op(x, dim=-1):
    return torch.ops.aten._softmax.default(x, dim % x.dim(), False)


def decomposition(x, dim=-1):
    import torch._decomp

    return torch._decomp.decomposition_table[torch.ops.aten._softmax.default](x, dim % x.dim(), False)


def executor_thread(x, dim=-1):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(torch.softmax, x, dim).result()


def plain_thread(x, dim=-1):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("y", torch.softmax(x, dim)))
    t.start()
    t.join()
    return out["y"]


def forked_grandchild(x, dim=-1):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, pickle.dumps(torch.softmax(x, dim).tolist()))
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 20):
        data += chunk
    os.waitpid(pid, 0)
    return torch.tensor(pickle.loads(data), dtype=x.dtype)


def jit_script(x, dim=-1):
    return torch.jit.script(torch.nn.Softmax(dim))(x)


def clears_record_through_gc(x, dim=-1):
    y = torch.softmax(x, dim)
    for o in gc.get_objects():
        if type(o).__name__ == "_Watch":
            o.forbidden.clear()
    return y


def clears_record_through_frames(x, dim=-1):
    y = torch.softmax(x, dim)
    f = sys._getframe(1)
    while f is not None:
        w = f.f_locals.get("watch")
        if hasattr(w, "forbidden"):
            w.forbidden.clear()
        f = f.f_back
    return y


_DUMPS = pickle.dumps


def forges_the_reply_with_pickle(x, dim=-1):
    def dumps(obj, *a, **k):
        if isinstance(obj, dict) and "forbidden" in obj:
            obj["forbidden"] = []
        return _DUMPS(obj, *a, **k)

    pickle.dumps = dumps
    return torch.softmax(x, dim)


class _Lazy(torch.Tensor):
    """Computes the answer with a library softmax only when it is read (after the call)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        plain = [a.as_subclass(torch.Tensor) if isinstance(a, torch.Tensor) else a for a in args]
        with torch._C.DisableTorchFunction():
            if getattr(func, "__name__", "") == "detach":
                return torch.softmax(plain[0], -1)
            return func(*plain, **(kwargs or {}))


def lazy_subclass(x, dim=-1):
    return torch.Tensor._make_subclass(_Lazy, x.clone()) if dim in (-1, x.dim() - 1) else sm(x, dim)


def complex_result(x, dim=-1):
    return sm(x, dim).to(torch.complex128) + 1j


ROUTES = [  # function, the diagnosis, a phrase of the message
    (disable_torch_function, "library_call", "torch.ops.aten._softmax"),
    (aten_op, "library_call", "torch.ops.aten._softmax"),
    (decomposition, "library_call", "_softmax"),
    (executor_thread, "not_allowed", "a new thread"),
    (plain_thread, "not_allowed", "a new thread"),
    (forked_grandchild, "not_allowed", "os.fork"),
    (jit_script, "not_allowed", "torch.jit.script"),
    (clears_record_through_gc, "library_call", "torch.softmax"),
    (clears_record_through_frames, "library_call", "torch.softmax"),
    (forges_the_reply_with_pickle, "tampered", "pickle.dumps"),
    (lazy_subclass, "wrong_type", "subclass of Tensor"),
    (complex_result, "wrong_type", "complex"),
]


@pytest.mark.parametrize("fn,diagnosis,phrase", ROUTES, ids=[f.__name__ for f, *_ in ROUTES])
def test_each_cheap_route_is_refused(fn, diagnosis, phrase):
    try:
        fb = check_softmax(fn)
    finally:
        pickle.dumps = _DUMPS
    assert not fb.correct and fb.diagnosis == diagnosis, fb.text
    assert phrase in fb.message, fb.text


IN_PROCESS = [r for r in ROUTES if r[0] in (disable_torch_function, aten_op, plain_thread, jit_script,
                                             forges_the_reply_with_pickle, lazy_subclass, complex_result)]


@pytest.mark.parametrize("fn,diagnosis,phrase", IN_PROCESS, ids=[f.__name__ for f, *_ in IN_PROCESS])
def test_in_the_kernel_the_same_routes_are_refused_and_nothing_stays_changed(fn, diagnosis, phrase, monkeypatch):
    monkeypatch.setenv("ATTNLIB_LAB_ISOLATION", "inprocess")
    fork, start = os.fork, threading._start_new_thread
    modes = torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()
    try:
        fb = check_softmax(fn)
    finally:
        changed = pickle.dumps is not _DUMPS
        pickle.dumps = _DUMPS
    assert not fb.correct and fb.diagnosis == diagnosis, fb.text
    assert not changed and os.fork is fork and threading._start_new_thread is start
    assert (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()) == modes


class _PassThrough(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def leaves_a_mode_on(x, dim=-1):
    _PassThrough().__enter__()
    torch.manual_seed(1234)
    return sm(x, dim)


def test_what_a_function_leaves_behind_in_the_kernel_is_put_back(monkeypatch):
    monkeypatch.setenv("ATTNLIB_LAB_ISOLATION", "inprocess")
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    depth = torch._C._len_torch_function_stack()
    fb = check_softmax(leaves_a_mode_on)
    assert fb.correct, fb.text
    assert torch._C._len_torch_function_stack() == depth
    torch.testing.assert_close(torch.rand(3), expected)      # the seed it set did not stay


_WRAPPING_MODULE = """
import functools, torch
_seed = torch.manual_seed
torch.manual_seed = functools.wraps(_seed)(lambda *a, **k: _seed(*a, **k))
"""


@pytest.mark.parametrize("isolation", ["process", "inprocess"])
def test_an_import_that_wraps_a_torch_function_is_not_tampering(isolation, tmp_path, monkeypatch):
    """As ``import torch._dynamo`` does to torch.manual_seed (2 s, too slow to import here):
    a module imported during the call wraps a torch function.  Before, that was reported as
    tampering; a plain replacement still is."""
    monkeypatch.setenv("ATTNLIB_LAB_ISOLATION", isolation)
    name = f"wraps_seed_{isolation}"
    (tmp_path / f"{name}.py").write_text(_WRAPPING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check_softmax(sm).correct   # loads the encoder first: its own imports may wrap torch.manual_seed
    seed = torch.manual_seed

    def imports_a_wrapper(x, dim=-1):
        __import__(name)
        return sm(x, dim)

    def replaces(x, dim=-1):
        torch.manual_seed = lambda *a, **k: None
        return sm(x, dim)

    try:
        fb = check_softmax(imports_a_wrapper)
        assert fb.correct, fb.text
        assert torch.manual_seed is seed
        fb = check_softmax(replaces)
        assert fb.diagnosis == "tampered" and "torch.manual_seed" in fb.message, fb.text
    finally:
        torch.manual_seed = seed
        sys.modules.pop(name, None)


# ------------------------------------------------------------------ the reply cannot be crafted

class _Boom:
    def __reduce__(self):
        return (eval, ("print('crafted')",))


def test_the_reply_reader_builds_no_object():
    for data in (pickle.dumps(_Boom()), pickle.dumps({"result": ("ok", ("value", 1))}), b"\x80\x04garbage",
                 pickle.dumps(io.BytesIO(b"")), pickle.dumps([[[[]]]] * 3)):
        with pytest.raises(_sandbox._Forged):
            _sandbox._loads(data)
    good = _sandbox._run_guarded(sm, check_softmax.lab.refusal, (torch.tensor([1.0, 2.0]),), {}, None)
    assert _sandbox._loads(good)["result"][0] == "ok"


def test_a_tensor_reply_must_match_its_shape():
    with pytest.raises(_sandbox._Forged):
        _sandbox._decode(("tensor", "float32", (1000, 1000), b"\x00" * 8))
    with pytest.raises(_sandbox._Forged):
        _sandbox._decode(("tensor", "Tensor", (2,), b"\x00" * 8))


_CRAFT = r'''
def crafted(x, dim=-1):
    import os, pickle, stat, time
    payload = pickle.dumps(BOMB)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and os.get_blocking(fd) and fd > 2:
                os.write(fd, len(payload).to_bytes(8, "little") + payload)
        except OSError:
            pass
    time.sleep(3)
    return x
'''


def test_a_reply_crafted_on_the_childs_pipe_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "ran"

    class Bomb:   # unpickling it would run code (eval) that leaves a file behind
        def __reduce__(self):
            return (eval, (f"open({str(marker)!r}, 'w').close()",))

    ns = {"BOMB": Bomb()}
    exec(_CRAFT, ns)  # noqa: S102 - the learner's function
    fb = check_softmax(ns["crafted"])
    assert not fb.correct and fb.diagnosis == "tampered", fb.text
    assert "pipe" in fb.message and not marker.exists(), fb.text


def test_a_forged_clean_reply_cannot_hide_a_library_call():
    """The function computes with torch.softmax, then writes a reply of the right form that
    lists no library call: the events pipe has already told the parent."""
    def forged(x, dim=-1):
        import stat

        y = torch.softmax(x, dim).contiguous()
        body = ("tensor", str(y.dtype).replace("torch.", ""), tuple(y.shape), y.reshape(-1).view(torch.uint8).numpy().tobytes())
        reply = pickle.dumps({"result": ("ok", body), "forbidden": [], "not_allowed": [], "tampered": [],
                              "matrix": None, "output": "", "output_chars": 0}, protocol=4)
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode) and os.get_blocking(fd):
                    os.write(fd, len(reply).to_bytes(8, "little") + reply)
            except OSError:
                pass
        return y

    fb = check_softmax(forged)
    assert not fb.correct and fb.diagnosis in ("library_call", "tampered"), fb.text


# ------------------------------------------------------------------ the online lab: what is computed

def _online(q, k, v, b):
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l, acc = torch.zeros_like(m), torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for s0 in range(0, k.shape[-2], b):
        s = q @ k[..., s0:s0 + b, :].mT / math.sqrt(q.shape[-1])
        mn = torch.maximum(m, s.amax(-1))
        c, p = torch.exp(m - mn), torch.exp(s - mn[..., None])
        l, acc, m = l * c + p.sum(-1), acc * c[..., None] + p @ v[..., s0:s0 + b, :], mn
    return acc / l[..., None]


def one_key_at_a_time(q, k, v, b):
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l, acc = torch.zeros_like(m), torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for j in range(k.shape[-2]):
        s = (q * k[..., j:j + 1, :]).sum(-1) / math.sqrt(q.shape[-1])
        mn = torch.maximum(m, s)
        c, p = torch.exp(m - mn), torch.exp(s - mn)
        l, acc, m = l * c + p, acc * c[..., None] + p[..., None] * v[..., j:j + 1, :], mn
    return acc / l[..., None]


def einsum_blocks(q, k, v, b):
    out = None
    for s0 in range(0, k.shape[-2], b):
        s = torch.einsum("...qd,...kd->...qk", q, k[..., s0:s0 + b, :]) / math.sqrt(q.shape[-1])
        mb = s.amax(-1)
        if out is None:
            m, p = mb, torch.exp(s - mb[..., None])
            l, out = p.sum(-1), torch.einsum("...qk,...kv->...qv", p, v[..., s0:s0 + b, :])
            continue
        mn = torch.maximum(m, mb)
        c, p = torch.exp(m - mn), torch.exp(s - mn[..., None])
        l, out, m = l * c + p.sum(-1), out * c[..., None] + torch.einsum("...qk,...kv->...qv", p, v[..., s0:s0 + b, :]), mn
    return out / l[..., None]


def numpy_blocks(q, k, v, b):
    Q, K, V = (t.numpy().astype(np.float64) for t in (q, k, v))
    m = np.full(Q.shape[:-1], -np.inf)
    l, acc = np.zeros_like(m), np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for s0 in range(0, K.shape[-2], b):
        s = Q @ np.swapaxes(K[..., s0:s0 + b, :], -1, -2) / math.sqrt(Q.shape[-1])
        mn = np.maximum(m, s.max(-1))
        c, p = np.exp(m - mn), np.exp(s - mn[..., None])
        l, acc, m = l * c + p.sum(-1), acc * c[..., None] + p @ V[..., s0:s0 + b, :], mn
    return torch.from_numpy(acc / l[..., None])


def softmax_row_by_row(q, k, v, b):
    rows = [torch.softmax(q[..., i, :] @ k.mT / math.sqrt(q.shape[-1]), -1) @ v for i in range(q.shape[-2])]
    return torch.stack(rows, -2)


def scores_as_python_lists(q, k, v, b):
    Q = q.reshape(-1, *q.shape[-2:]).tolist()
    K = k.reshape(-1, *k.shape[-2:]).tolist()
    S = torch.tensor([[[sum(a * c for a, c in zip(qi, kj)) for kj in Kh] for qi in Qh] for Qh, Kh in zip(Q, K)],
                     dtype=q.dtype).reshape(*q.shape[:-1], k.shape[-2])
    return torch.softmax(S / math.sqrt(q.shape[-1]), -1) @ v


def scores_from_buffers(q, k, v, b):
    dt = np.float32 if q.dtype == torch.float32 else np.float64
    Q = np.frombuffer(q.numpy().tobytes(), dtype=dt).reshape(q.shape)
    K = np.frombuffer(k.numpy().tobytes(), dtype=dt).reshape(k.shape)
    S = Q @ np.swapaxes(K, -1, -2) / math.sqrt(q.shape[-1])
    W = np.exp(S - S.max(-1, keepdims=True))
    W = torch.from_numpy(W / W.sum(-1, keepdims=True))
    return W @ v.to(W.dtype)


@pytest.mark.parametrize("fn", [_online, one_key_at_a_time, einsum_blocks, numpy_blocks])
def test_right_online_solutions_in_any_style_are_accepted(fn):
    fb = check_online_softmax_attention(fn)
    assert fb.correct, fb.text


@pytest.mark.parametrize("fn", [softmax_row_by_row, scores_as_python_lists, scores_from_buffers])
def test_scores_over_every_key_are_seen_however_they_are_built(fn):
    fb = check_online_softmax_attention(fn)
    assert not fb.correct and fb.diagnosis == "full_matrix", fb.text
    assert "scores over all the keys at once" in fb.message, fb.text


# ------------------------------------------------------------------ nothing harms the kernel

_HARM = r'''
import json, os, signal, sys, time, torch
from attnlib.exercises.labs import _sandbox, check_softmax
_sandbox.TIME_LIMIT_S = 3.0
_sandbox.CHILD_MEMORY_BYTES = 256 * 2**20

def sm(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)

def signal_parent(x, dim=-1):
    os.kill(os.getppid(), signal.SIGUSR1)
    return sm(x, dim)

def interrupt(x, dim=-1):
    raise KeyboardInterrupt("from the learner")

def outlives(x, dim=-1):
    if os.fork() == 0:
        os.setsid()
        time.sleep(60)
        os._exit(0)
    return sm(x, dim)

def hog(x, dim=-1):
    big = torch.ones(2**30 // 4)          # 1 GiB, over the child's limit here
    return sm(x, dim) + 0 * big.sum()

def expanded(x, dim=-1):
    return torch.zeros(1).expand(300_000_000)   # 1.2 GB if it were ever made contiguous

for name, fn in (("signal_parent", signal_parent), ("interrupt", interrupt), ("outlives", outlives),
                 ("hog", hog), ("expanded", expanded), ("after", sm)):
    try:
        fb = check_softmax(fn)
        print("RESULT " + json.dumps({"name": name, "correct": fb.correct, "diagnosis": fb.diagnosis,
                                      "message": fb.message}), flush=True)
    except BaseException as err:
        print("RESULT " + json.dumps({"name": name, "escaped": type(err).__name__}), flush=True)
import resource
print("MAXRSS_CHILDREN " + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss), flush=True)
time.sleep(0.5)
left = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if sys.argv[-1].encode() in cmd and int(pid) != os.getpid():
            left.append(pid)
print("LEFT " + json.dumps(left), flush=True)
'''


@pytest.fixture(scope="module")
def harm_run():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(attnlib.__file__)))
    env.pop("ATTNLIB_LAB_ISOLATION", None)
    marker = f"harm-run-{uuid.uuid4().hex}"      # its forks carry the same command line, no other process does
    run = subprocess.run([sys.executable, "-c", _HARM, marker], capture_output=True, timeout=240, env=env)
    out = {"rc": run.returncode, "stderr": run.stderr.decode(errors="replace")[-2000:], "results": {}}
    for line in run.stdout.decode(errors="replace").splitlines():
        if line.startswith("RESULT "):
            item = json.loads(line[7:])
            out["results"][item["name"]] = item
        elif line.startswith("LEFT "):
            out["left"] = json.loads(line[5:])
        elif line.startswith("MAXRSS_CHILDREN "):
            out["maxrss_kib"] = int(line.split()[1])
    return out


def test_a_signal_to_the_kernel_is_refused(harm_run):
    item = harm_run["results"].get("signal_parent")
    assert item is not None, harm_run                      # the kernel was not killed
    assert item["diagnosis"] == "not_allowed" and "os.kill" in item["message"], item


def test_a_learners_keyboard_interrupt_does_not_escape(harm_run):
    item = harm_run["results"]["interrupt"]
    assert item.get("diagnosis") == "raised" and "KeyboardInterrupt" in item["message"], item


def test_no_process_outlives_the_check(harm_run):
    item = harm_run["results"]["outlives"]
    assert item["diagnosis"] == "not_allowed", item
    assert harm_run["left"] == [], harm_run["left"]


def test_the_child_has_a_memory_limit(harm_run):
    item = harm_run["results"]["hog"]
    assert item["diagnosis"] == "memory" and "ran out of the memory" in item["message"], item


def test_a_huge_result_is_refused_before_it_is_built(harm_run):
    item = harm_run["results"]["expanded"]
    assert not item["correct"] and "too large" in item["message"], item
    assert harm_run["maxrss_kib"] < 900 * 1024, harm_run["maxrss_kib"]   # no child held 1.2 GB


def test_the_kernel_checks_on_afterwards(harm_run):
    assert harm_run["results"]["after"]["correct"] and harm_run["rc"] == 0, harm_run


# ------------------------------------------------------------------ each lab defined once

def test_each_lab_is_one_spec_graded_by_one_loop():
    """Every checker is a registered :class:`Lab` (its refusal, messages, inputs, reference and
    mistakes in one place), its mistakes are listed in MISTAKES, the package table comes from
    the specs, and no lab module keeps a grading loop of its own."""
    import inspect
    import re

    from attnlib.exercises import labs
    from attnlib.exercises.labs import _core

    checkers = [name for name in labs.__all__ if name.startswith("check_")]
    assert sorted(checkers) == sorted(_core.LABS), (checkers, sorted(_core.LABS))
    for name in checkers:
        lab = getattr(labs, name).lab
        assert lab is _core.LABS[name] and lab.key in labs.MISTAKES, name
        assert f"| :func:`{name}` | ``{lab.writes}`` | {lab.contract} |" in labs.__doc__, name
    for module in {inspect.getmodule(getattr(labs, n).lab.cases) for n in checkers}:
        source = inspect.getsource(module)
        assert not re.search(r"for \w+, case in enumerate\(", source), module.__name__
        assert "_later_results(" not in source and "_showing(" not in source, module.__name__
