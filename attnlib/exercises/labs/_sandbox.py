"""Running a learner's function apart from the grader (every code lab).

A lab must not be fooled by the function it checks, and must survive it.  So the learner's
function never runs in the grader's own interpreter state:

* **A child process** (Linux): the first call of a check forks the kernel (``os.fork``, so a
  function defined in a notebook needs no pickling), and the child runs the learner's function
  on each input the parent sends it, with one torch thread.  The references and every
  comparison stay in the parent, which the learner's code never touches: patching
  ``torch.allclose`` or ``torch.exp`` there changes nothing here.  Every wait has a deadline
  (:data:`TIME_LIMIT_S` per input, :data:`CHECK_TIME_LIMIT_S` per check); on a timeout the
  child is killed.  ``os._exit``, a crash or a kill end the child, never the kernel.  The
  child's ``stdout``/``stderr`` (Python's and the file descriptors) are captured: the feedback
  quotes a short excerpt.  Results come back as plain data (tensors as bytes), read by an
  unpickler that builds no object other than builtins.
* **In process** (other platforms, or ``ATTNLIB_LAB_ISOLATION=inprocess``): the same guards,
  without the time limit and without protection from ``os._exit``; the feedback says so.

In both, while the learner's function runs:

* the attributes of ``torch``, ``torch.Tensor``, ``torch.nn.functional``, ``numpy``, ``math``,
  ``builtins`` and every ``attnlib`` module are snapshotted before and compared after; a
  replaced or deleted function is reported (``tampered``) and put back;
* a :class:`torch.overrides.TorchFunctionMode` sees every torch call (by any alias, method or
  module) and ``sys.setprofile`` every Python call, so the library functions that would do the
  lab's job (``torch.softmax`` in the softmax lab, ``F.scaled_dot_product_attention`` in the
  attention lab, ...) are seen however they are reached (``forbidden``);
* for the online-softmax lab, every torch result and every NumPy array made from the inputs
  (``Tensor.numpy``, ``np.asarray``, ufuncs, ``@``, ``np.dot``, ``np.einsum``, ``np.zeros``, ...)
  is checked for a ``(T_q, T_k)`` score matrix (``matrix``).
"""
from __future__ import annotations

import builtins
import io
import math
import os
import pickle
import select
import signal
import sys
import time
import warnings

import torch
import torch.nn.functional as F

try:  # numpy is a dependency of torch's conversions, but the labs must run without it
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

__all__ = ["TIME_LIMIT_S", "CHECK_TIME_LIMIT_S", "OUTPUT_EXCERPT_CHARS", "isolation", "Sandbox", "Reply"]

#: Seconds the learner's function may take on one input before the check stops it (a correct
#: function takes milliseconds on every input of every lab).
TIME_LIMIT_S = 5.0

#: Seconds all the calls of one check may take together.
CHECK_TIME_LIMIT_S = 30.0

#: Characters of the learner's printed output quoted in the feedback.
OUTPUT_EXCERPT_CHARS = 160

_MAX_REPLY_BYTES = 256 * 2**20
_MAX_ITEMS = 64

# Captured at import, before any learner code can run in this interpreter.
_Tensor = torch.Tensor
_TorchFunctionMode = torch.overrides.TorchFunctionMode
_orig_numpy = torch.Tensor.numpy
_orig_array = torch.Tensor.__array__
_setprofile, _getprofile = sys.setprofile, sys.getprofile


def isolation() -> str:
    """``"process"`` where the learner's function runs in a forked child (Linux with
    ``os.fork``), else ``"inprocess"``; the environment variable ``ATTNLIB_LAB_ISOLATION``
    (``process`` / ``inprocess``) overrides it (``process`` only where ``os.fork`` exists)."""
    env = os.environ.get("ATTNLIB_LAB_ISOLATION", "").strip().lower()
    can_fork = hasattr(os, "fork")
    if env == "inprocess" or not can_fork:
        return "inprocess"
    if env == "process":
        return "process"
    return "process" if sys.platform.startswith("linux") else "inprocess"


# ------------------------------------------------------------------------ what each lab refuses

#: The names of torch functions (``func.__name__`` as a TorchFunctionMode sees it: function,
#: method, ``torch.ops`` overload) that would do each lab's job.
def _torch_forbidden(lab: str, name: str) -> bool:
    if lab == "softmax":
        return name in ("softmax", "log_softmax", "_softmax", "_log_softmax", "softmin")
    if lab in ("attention", "online_softmax", "multi_head", "kv_cache"):
        return "scaled_dot_product" in name or "multi_head_attention" in name
    if lab == "attention_backward":  # autograd: torch.autograd.grad, Tensor.backward (torch.func goes through grad)
        return name in ("grad", "backward", "_run_backward", "run_backward")
    return False


def _python_forbidden(lab: str, module: str, qualname: str) -> str | None:
    """The name to show when the Python function ``module.qualname`` would do ``lab``'s job."""
    q = qualname.lower()
    if module.startswith("attnlib") and not module.startswith("attnlib.exercises"):
        hit = {"softmax": q in ("softmax", "online_softmax"),
               "attention": "attention" in q,
               "causal_mask": "causal_mask" in q or "causal_block" in q,
               "split_heads": "split_heads" in q,
               "online_softmax": "attention" in q or "online_softmax" in q,
               "multi_head": "attention" in q or "split_heads" in q or "merge_heads" in q,
               "rope": "rope" in q,
               "kv_cache": "attention" in q or "kvcache" in q}.get(lab, False)
        if hit:
            import attnlib
            return f"attnlib.{qualname}" if getattr(attnlib, qualname, None) is not None else f"{module}.{qualname}"
        return None
    if lab == "softmax" and module.startswith("scipy.special") and q in ("softmax", "log_softmax"):
        return f"scipy.special.{qualname}"
    if lab == "rope" and module.startswith("transformers") and "rotary" in q:
        return f"{module}.{qualname}"
    if lab in ("attention", "online_softmax", "multi_head", "kv_cache") and module.startswith("torch.nn.modules") \
            and qualname in ("MultiheadAttention.forward",):
        return "torch.nn.MultiheadAttention"
    if lab == "attention_backward" and (
            (module.startswith("torch.autograd") and q in ("grad", "backward", "vjp", "jacobian"))
            or (module == "torch._tensor" and q == "tensor.backward")
            or (module.startswith("torch._functorch") and q in ("grad", "grad_and_value", "vjp", "jacrev", "jacfwd"))):
        return "Tensor.backward" if q == "tensor.backward" else f"{module.split('.')[0]}.{'func' if 'functorch' in module else 'autograd'}.{qualname}"
    if lab == "causal_mask" and module.startswith("torch.nn.modules.transformer") and "square_subsequent_mask" in q:
        return f"torch.nn.{qualname.lstrip('_')}" if "." in qualname else f"torch.nn.modules.transformer.{qualname}"
    return None


def _torch_name(func) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if getattr(_Tensor, name, None) is func:
        return f"Tensor.{name}"
    for modname, mod in (("torch.nn.functional", F), ("torch.special", torch.special), ("torch", torch)):
        if getattr(mod, name, None) is func:
            return f"{modname}.{name}"
    if getattr(torch.autograd, name, None) is func:
        return f"torch.autograd.{name}"
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.aten.{name}"
    return f"torch {name}"


# -------------------------------------------------------------------------------- the watches

class _Watch:
    """What one call of the learner's function did: library calls refused in ``lab``, and (when
    ``matrix`` is a dict ``{"shape": (T_q, T_k) or None, "min_elements": n or None}``) the
    first score-matrix-sized tensor or array it made."""

    def __init__(self, lab: str, matrix: dict | None):
        self.lab, self.spec = lab, matrix
        self.forbidden: list[str] = []
        self.matrix: tuple | None = None
        self._codes: dict = {}
        self._saved: list = []
        self.profiler_changed = False

    # -- score matrices
    def _big(self, shape: tuple, storage_elements: int | None) -> None:
        if self.matrix is not None or self.spec is None:
            return
        want = self.spec.get("shape")
        if want is not None and len(shape) >= 2:
            T_q, T_k = want
            if shape[-2:] == (T_q, T_k) or (self.spec.get("transposed") and shape[-2:] == (T_k, T_q)):
                self.matrix = shape
                return
        least = self.spec.get("min_elements")
        if least and storage_elements is not None and storage_elements >= least:
            self.matrix = shape

    def tensor(self, t) -> None:
        if not isinstance(t, _Tensor):
            return
        try:
            elements = t.untyped_storage().nbytes() // max(t.element_size(), 1) if t.layout == torch.strided else None
        except Exception:  # noqa: BLE001 - meta, sparse, ...: shapes only
            elements = None
        self._big(tuple(t.shape), elements)

    def array(self, a) -> None:
        root = a
        while isinstance(getattr(root, "base", None), np.ndarray):
            root = root.base
        self._big(tuple(a.shape), root.nbytes // max(a.itemsize, 1))

    # -- the profiler: Python functions that would do the lab's job, however they were reached
    def profile(self, frame, event, arg):
        if event != "call":
            if event == "c_call" and arg is _setprofile and frame.f_code is not _run_guarded.__code__:
                self.profiler_changed = True                 # the function switches the watch off
            return
        code = frame.f_code
        hit = self._codes.get(code, False)
        if hit is False:
            module = frame.f_globals.get("__name__", "") if isinstance(frame.f_globals, dict) else ""
            hit = self._codes[code] = _python_forbidden(self.lab, str(module),
                                                        getattr(code, "co_qualname", code.co_name))
        if hit and hit not in self.forbidden:
            self.forbidden.append(hit)

    # -- NumPy: arrays made from the inputs carry a watch to everything computed from them
    def install_numpy(self) -> None:
        if self.spec is None or np is None:
            return
        global _CURRENT
        _CURRENT = self
        watched = _watched_class()

        def to_watched(a):
            return a.view(watched) if type(a) is np.ndarray else a

        def numpy_method(t, *args, **kwargs):
            return to_watched(_orig_numpy(t, *args, **kwargs))

        def array_method(t, *args, **kwargs):
            return to_watched(_orig_array(t, *args, **kwargs))

        def converting(orig):  # every array made during the call is watched, from tensors or lists alike
            def wrapper(*args, **kwargs):
                out = orig(*args, **kwargs)
                if type(out) is np.ndarray and out.dtype.kind in "biufc":
                    return to_watched(out)
                return out
            return wrapper

        creating = converting

        patches = [(torch.Tensor, "numpy", numpy_method), (torch.Tensor, "__array__", array_method)]
        for name in ("asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray", "copy"):
            patches.append((np, name, converting(getattr(np, name))))
        for name in ("zeros", "ones", "empty", "full"):
            patches.append((np, name, creating(getattr(np, name))))
        for owner, name, new in patches:
            self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
            setattr(owner, name, new)

    def uninstall_numpy(self) -> None:
        global _CURRENT
        for owner, name, old in reversed(self._saved):
            if old is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, old)
        self._saved.clear()
        _CURRENT = None


_MISSING = object()
_CURRENT: _Watch | None = None
_WATCHED = None


def _watched_class():
    """An ``ndarray`` subclass that reports every array created as or from it to the current
    :class:`_Watch` (ufunc outputs, ``@``, views, and results of NumPy functions)."""
    global _WATCHED
    if _WATCHED is not None:
        return _WATCHED

    class WatchedArray(np.ndarray):
        def __array_finalize__(self, obj):
            if _CURRENT is not None:
                _CURRENT.array(self)

        def __array_function__(self, func, types, args, kwargs):
            out = super().__array_function__(func, types, args, kwargs)
            return _rewatch(out)

    def _rewatch(out):
        if type(out) is np.ndarray:
            return out.view(WatchedArray)
        if isinstance(out, tuple):
            return tuple(_rewatch(o) for o in out)
        return out

    WatchedArray.__module__ = "numpy"
    WatchedArray.__qualname__ = WatchedArray.__name__ = "ndarray"
    _WATCHED = WatchedArray
    return WatchedArray


class _Mode(_TorchFunctionMode):
    """Sees every torch call of the learner's function: refused functions, and score matrices."""

    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", None)
        if isinstance(name, str) and _torch_forbidden(self.watch.lab, name):
            shown = _torch_name(func)
            if shown not in self.watch.forbidden:
                self.watch.forbidden.append(shown)
        result = func(*args, **(kwargs or {}))
        if self.watch.spec is not None:
            for t in (result if isinstance(result, (tuple, list)) else (result,)):
                self.watch.tensor(t)
        return result


# ------------------------------------------------------------------------ tampering: snapshot

def _watched_namespaces() -> list:
    """``(label, object)`` whose attributes the learner's function must leave alone."""
    out = [("torch", torch), ("torch.Tensor", torch.Tensor), ("torch.nn", torch.nn),
           ("torch.nn.functional", F), ("torch.special", torch.special), ("torch.linalg", torch.linalg),
           ("math", math), ("builtins", builtins)]
    if np is not None:
        out += [("numpy", np), ("numpy.ndarray", np.ndarray), ("numpy.linalg", np.linalg)]
    out += [(name, mod) for name, mod in list(sys.modules.items())
            if mod is not None and (name == "attnlib" or name.startswith("attnlib."))]
    return out


def _snapshot() -> list:
    return [(label, obj, dict(vars(obj))) for label, obj in _watched_namespaces()]


def _restore(snapshot: list) -> list[str]:
    """Put back every replaced or deleted function, class or module, and remove what was
    added to a class (it would shadow an inherited method); ``label.name`` of each."""
    changed = []
    for label, obj, before in snapshot:
        now = vars(obj)
        is_module = not isinstance(obj, type)
        if not is_module:
            for name in [n for n in now if n not in before]:
                changed.append(f"{label}.{name}")
                try:
                    delattr(obj, name)
                except (AttributeError, TypeError):
                    pass
        for name, old in before.items():
            if is_module and (name.startswith("__") or name == "_"):
                continue
            new = now.get(name, _MISSING)
            if new is old or not (callable(old) or type(old).__name__ == "module"):
                continue
            changed.append(f"{label}.{name}")
            try:
                setattr(obj, name, old)
            except (AttributeError, TypeError):
                pass
    return changed


# ------------------------------------------------------------------------ plain-data results

def _encode(obj, depth: int = 0):
    """``obj`` as builtins only: tensors as bytes, other objects as their type's name."""
    if isinstance(obj, _Tensor):
        try:
            t = obj.detach()
            if t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
                return ("object", "torch", f"Tensor with layout {t.layout} on {t.device}")
            t = t.cpu().resolve_conj().resolve_neg().contiguous()
            if t.numel() * t.element_size() > _MAX_REPLY_BYTES // 2:
                return ("too_big", tuple(t.shape), str(t.dtype))
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            return ("tensor", str(t.dtype).replace("torch.", ""), tuple(t.shape), data)
        except Exception as err:  # noqa: BLE001
            return ("object", "torch", f"Tensor that cannot be read ({type(err).__name__})")
    if np is not None and isinstance(obj, (np.ndarray, np.generic)):
        return ("object", "numpy", "ndarray" if isinstance(obj, np.ndarray) else type(obj).__name__)
    if obj is None or type(obj) in (bool, int, float, complex):
        return ("value", obj)
    if type(obj) is str:
        return ("value", obj[:2000])
    if type(obj) in (tuple, list) and depth < 4:
        return (type(obj).__name__, [_encode(x, depth + 1) for x in obj[:_MAX_ITEMS]], len(obj))
    kind = type(obj)
    return ("object", str(getattr(kind, "__module__", "builtins")), str(getattr(kind, "__qualname__", "object")))


def _encode_error(err: BaseException) -> tuple:
    try:
        text = str(err)
    except Exception:  # noqa: BLE001
        text = "<its message could not be read>"
    bases = [c.__name__ for c in type(err).__mro__ if c.__module__ == "builtins"]
    return (type(err).__name__, bases, text[:2000])


_PLACEHOLDERS: dict = {}


def _decode(item):
    kind = item[0]
    if kind == "tensor":
        _, dtype, shape, data = item
        dt = getattr(torch, dtype)
        if not data:
            return torch.empty(shape, dtype=dt)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dt).reshape(shape)
    if kind == "value":
        return item[1]
    if kind in ("tuple", "list"):
        items = [_decode(x) for x in item[1]] + [None] * (item[2] - len(item[1]))
        return tuple(items) if kind == "tuple" else items
    if kind == "too_big":
        raise MemoryError(f"your function returned a tensor of shape {tuple(item[1])} ({item[2]}), too large "
                          "to check")
    module, name = item[1], item[2]
    key = (module, name)
    if key not in _PLACEHOLDERS:
        _PLACEHOLDERS[key] = type(name.rsplit(".", 1)[-1], (), {"__module__": module,
                                                               "__repr__": lambda self, n=name: f"<{n}>"})
    return _PLACEHOLDERS[key]()


def _rebuild_error(name: str, bases: list, text: str) -> BaseException:
    """An exception whose type is named ``name`` and derives from the same builtin classes."""
    base = next((getattr(builtins, b) for b in bases if isinstance(getattr(builtins, b, None), type)
                 and issubclass(getattr(builtins, b), BaseException)), Exception)
    if name == base.__name__ and base in (SystemExit, KeyboardInterrupt, NotImplementedError):
        return base(text) if text else base()
    for parent in (base, Exception):
        try:
            cls = type(name, (parent,), {"__str__": lambda self, t=text: t, "__module__": "builtins"})
            return cls(text)
        except TypeError:
            continue
    return Exception(text)  # pragma: no cover


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # builtins only: a reply cannot build objects
        raise pickle.UnpicklingError(f"refused {module}.{name}")


def _loads(data: bytes) -> dict:
    return _SafeUnpickler(io.BytesIO(data)).load()


# ------------------------------------------------------------------------ one guarded call

class _Capture(io.TextIOBase):
    """A stdout/stderr that keeps the first characters and counts the rest."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.kept, self.total = limit, [], 0

    def write(self, s) -> int:
        s = str(s)
        have = sum(map(len, self.kept))
        if have < self.limit:
            self.kept.append(s[:self.limit - have])
        self.total += len(s)
        return len(s)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self):
        return "utf-8"

    def text(self) -> str:
        return "".join(self.kept)


def _run_guarded(fn, lab: str, args, kwargs, matrix: dict | None) -> bytes:
    """Run ``fn(*args, **kwargs)`` under every watch; the reply as bytes (builtins only)."""
    watch = _Watch(lab, matrix)
    capture = _Capture(OUTPUT_EXCERPT_CHARS * 4)
    saved_out, saved_err = sys.stdout, sys.stderr
    saved_profile = _getprofile()
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    watch.install_numpy()
    snapshot = _snapshot()
    result = None
    try:
        sys.stdout = sys.stderr = capture
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _Mode(watch):
                _setprofile(watch.profile)
                try:
                    value = fn(*args, **kwargs)
                finally:
                    _setprofile(saved_profile)
        result = ("ok", value)
    except BaseException as err:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
        result = ("error", err)
    finally:
        sys.stdout, sys.stderr = saved_out, saved_err
        torch.set_default_dtype(dtype)  # global settings, put back silently (this also resets torch.Storage)
        torch.set_grad_enabled(grad)
        tampered = _restore(snapshot) + (["sys.setprofile"] if watch.profiler_changed else [])
        watch.uninstall_numpy()
    try:
        body = ("ok", _encode(result[1])) if result[0] == "ok" else ("error", _encode_error(result[1]))
    except BaseException as err:  # noqa: BLE001
        body = ("error", _encode_error(err))
    reply = {"result": body, "forbidden": list(watch.forbidden), "tampered": tampered,
             "matrix": watch.matrix, "output": capture.text()[:OUTPUT_EXCERPT_CHARS * 4],
             "output_chars": capture.total}
    data = pickle.dumps(reply, protocol=4)
    if len(data) > _MAX_REPLY_BYTES:
        reply["result"] = ("error", ("MemoryError", ["MemoryError"], "your function's result is too large to check"))
        data = pickle.dumps(reply, protocol=4)
    return data


# ------------------------------------------------------------------------ framing with deadlines

def _ready(fd: int, write: bool, deadline: float | None) -> bool:
    """Whether ``fd`` can be written (or read, or is closed) before ``deadline`` (a
    ``time.monotonic()`` value; None waits for ever).  ``poll``, not ``select``: a kernel that
    has opened many files can hand out descriptors above ``select``'s limit of 1024."""
    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLOUT if write else select.POLLIN)
        return bool(poller.poll(None if wait is None else int(math.ceil(wait * 1000))))
    ready = select.select([], [fd], [], wait)[1] if write else select.select([fd], [], [], wait)[0]  # pragma: no cover
    return bool(ready)


def _write_all(fd: int, data: bytes, deadline: float | None) -> None:
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        if not _ready(fd, True, deadline):
            raise TimeoutError
        n = os.write(fd, view[:65536])
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    parts, got = [], 0
    while got < n:
        if not _ready(fd, False, deadline):
            raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _read_msg(fd: int, deadline: float | None) -> bytes:
    n = int.from_bytes(_read_exact(fd, 8, deadline), "little")
    if n > _MAX_REPLY_BYTES:
        raise EOFError
    return _read_exact(fd, n, deadline)


#: Pipe ends of the live sandboxes of this process: a new child closes the others' ends.
_OPEN_FDS: set = set()


def _die_with_parent() -> None:
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort; the pipe's EOF ends the child anyway
        pass


def _child(fn, lab: str, req: int, resp: int) -> None:
    """The child's whole life: serve calls until the parent closes the pipe; never returns."""
    code = 0
    try:
        _die_with_parent()
        for fd in list(_OPEN_FDS):
            if fd not in (req, resp):
                try:
                    os.close(fd)
                except OSError:
                    pass
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        torch.set_num_threads(1)
        while True:
            try:
                request = _read_msg(req, None)
            except (EOFError, OSError):
                break
            args, kwargs, matrix = pickle.loads(request)
            _write_all(resp, _run_guarded(fn, lab, args, kwargs, matrix), None)
    except BaseException:  # noqa: BLE001 - the child must never return into the kernel's code
        code = 70
    finally:
        os._exit(code)


class Reply(dict):
    """One call's report: ``status`` (``"ok"``, ``"timed_out"``, ``"exited"``), ``result``
    (``("ok", encoded value)`` or ``("error", (type name, builtin bases, message))``),
    ``forbidden``, ``tampered``, ``matrix``, ``output``, ``output_chars``, and for an exit
    ``exit_code`` or ``signal``."""

    @property
    def status(self) -> str:
        return self.get("status", "ok")


class Sandbox:
    """Runs one learner function, input after input, isolated from the grader (see the module
    docstring).  Use as a context manager, or call :meth:`close`: it kills the child.

    Args:
        fn: the learner's function.
        lab: which lab's library calls to refuse (a key of ``MISTAKES``).
        mode: ``"process"`` or ``"inprocess"``; default :func:`isolation`.
    """

    def __init__(self, fn, lab: str, mode: str | None = None):
        self.fn, self.lab = fn, lab
        self.mode = mode or isolation()
        self.pid: int | None = None
        self._req = self._resp = None
        self.spent = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self) -> None:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        _OPEN_FDS.update((req_r, req_w, resp_r, resp_w))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a threaded process
            pid = os.fork()
        if pid == 0:
            _child(self.fn, self.lab, req_r, resp_w)  # never returns
        for fd in (req_r, resp_w):
            os.close(fd)
            _OPEN_FDS.discard(fd)
        self.pid, self._req, self._resp = pid, req_w, resp_r

    def call(self, args: tuple, kwargs: dict, matrix: dict | None = None, limit_s: float | None = None) -> Reply:
        """Run the learner's function on ``args``/``kwargs``: a :class:`Reply`.  ``limit_s``
        (seconds) defaults to :data:`TIME_LIMIT_S`; ``matrix`` is the online lab's watch
        (:class:`_Watch`).  Where the child cannot be started (``os.fork`` fails) or the
        function needs CUDA, which cannot start in a forked child, the sandbox switches to
        running in this process (:attr:`mode` becomes ``"inprocess"``).

        Raises:
            KeyboardInterrupt: the user interrupted the kernel (the child is killed first).
            Nothing else: whatever the learner's code does is reported in the reply.
        """
        limit = TIME_LIMIT_S if limit_s is None else limit_s
        start = time.monotonic()
        try:
            if self.mode != "process":
                return Reply(status="ok", **_loads(_run_guarded(self.fn, self.lab, args, kwargs, matrix)))
            if self.pid is None:
                try:
                    self._start()
                except OSError:  # no fork possible now (out of processes or memory): run it here
                    self.mode = "inprocess"
                    return Reply(status="ok", **_loads(_run_guarded(self.fn, self.lab, args, kwargs, matrix)))
            deadline = start + limit
            try:
                _write_all(self._req, pickle.dumps((args, kwargs, matrix), protocol=4), deadline)
                data = _read_msg(self._resp, deadline)
            except TimeoutError:
                self.close()
                return Reply(status="timed_out", limit_s=limit)
            except (EOFError, OSError):
                return Reply(status="exited", **self._reap())
            reply = Reply(status="ok", **_loads(data))
            status, payload = reply["result"]
            if status == "error" and "forked subprocess" in payload[2]:  # CUDA cannot start in a fork
                self.close()
                self.mode = "inprocess"
                return Reply(status="ok", **_loads(_run_guarded(self.fn, self.lab, args, kwargs, matrix)))
            return reply
        except BaseException:
            self.close()
            raise
        finally:
            self.spent += time.monotonic() - start

    def _reap(self) -> dict:
        """The child's end: ``exit_code`` or ``signal`` (its name)."""
        pid, self.pid = self.pid, None
        self._close_fds()
        if pid is None:
            return {}
        status = None
        for _ in range(100):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            return {"signal": signal.Signals(os.WTERMSIG(status)).name}
        return {"exit_code": os.WEXITSTATUS(status)}

    def _close_fds(self) -> None:
        for fd in (self._req, self._resp):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
                _OPEN_FDS.discard(fd)
        self._req = self._resp = None

    def close(self) -> None:
        """Kill the child (if any) and wait for it; safe to call twice."""
        pid, self.pid = self.pid, None
        self._close_fds()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
