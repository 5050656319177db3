"""Running a learner's function apart from the grader (every code lab).

A lab must not be fooled by the function it checks, and must survive it.  So the learner's
function never runs in the grader's own interpreter state:

* **A child process** (Linux): the first call of a check forks the kernel (``os.fork``, so a
  function defined in a notebook needs no pickling), and the child runs the learner's function
  on each input the parent sends it, with one torch thread, in a process group of its own
  (closing the check kills the group: nothing it started outlives it), with every descriptor
  it inherited closed and at most :data:`CHILD_MEMORY_BYTES` of address space beyond the
  kernel's.  The references and every comparison stay in the parent, which the learner's code
  never touches: patching ``torch.allclose`` or ``torch.exp`` there changes nothing here.
  Every wait has a deadline (:data:`TIME_LIMIT_S` per input, :data:`CHECK_TIME_LIMIT_S` per
  check); on a timeout the child is killed.  ``os._exit``, a crash or a kill end the child,
  never the kernel.  The child's ``stdout``/``stderr`` (Python's and the file descriptors) are
  captured: the feedback quotes a short excerpt.  Results come back as plain data (tensors as
  bytes), written with a ``pickle.dumps`` taken at import and read by an unpickler that builds
  no object other than builtins, in a form checked field by field (:func:`_loads`); what the
  watches see is also written at once to a second pipe, so the child's own record can be
  erased without effect.
* **In process** (other platforms, or ``ATTNLIB_LAB_ISOLATION=inprocess``): the same watches,
  without the time and memory limits and without protection from ``os._exit``; the feedback
  says so.  What the function changes for the code after it (torch settings, random
  generators, torch modes left on) is put back.

In both, while the learner's function runs and while its result is serialised:

* the attributes of ``torch``, ``torch.Tensor``, ``torch.nn.functional``, ``numpy``, ``math``,
  ``pickle``, ``builtins`` and every ``attnlib`` module are snapshotted before and compared
  after; a replaced or deleted function is reported (``tampered``) and put back;
* a :class:`torch.overrides.TorchFunctionMode` sees every torch call (by any alias, method or
  module), a :class:`~torch.utils._python_dispatch.TorchDispatchMode` every ATen operation
  (also under ``DisableTorchFunction``), and ``sys.setprofile`` every Python call, so the
  library functions that would do the lab's job (``torch.softmax`` in the softmax lab,
  ``F.scaled_dot_product_attention`` in the attention lab, ...) are seen however they are
  reached (``forbidden``);
* starting a thread or a process, sending a signal, ``torch.jit`` and ``torch.compile`` are
  refused (``not_allowed``);
* for the online-softmax lab, every torch result and every NumPy array made during the call
  (``Tensor.numpy``, ``np.asarray``, ``np.frombuffer``, ufuncs, ``@``, ``np.einsum``, ...)
  is checked for scores over every key at once (``matrix``).

What this guards is stated in :mod:`attnlib.exercises.labs`: accidents and the cheap routes,
not a learner set on deceiving a checker that runs in their own kernel.
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

import _thread
import threading

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

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
_dumps = pickle.dumps            # a learner who replaces pickle.dumps cannot forge the reply
_os_write, _os_getpid = os.write, os.getpid

#: Bytes of address space the child may take beyond what it had when it was forked (a
#: correct function of any lab needs a few MB; a runaway one is stopped with a MemoryError
#: instead of taking the machine's memory, which the notebook kernel needs).
CHILD_MEMORY_BYTES = 1 << 30


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


# ------------------------------------------------------------------------ refused everywhere

def _python_not_allowed(module: str, qualname: str) -> str | None:
    """The name to show when ``module.qualname`` is refused in every lab: compilers that run
    the function where the watches cannot see (``torch.jit``, ``torch.compile``)."""
    if module.startswith("torch.jit") and qualname in ("script", "trace", "trace_module", "fork", "load"):
        return f"torch.jit.{qualname}"
    if (module == "torch" and qualname == "compile") or (module.startswith("torch._dynamo") and qualname == "optimize"):
        return "torch.compile"
    return None


def _func_name(func):
    """The name a torch function mode is given: a ``Tensor`` attribute's read or write
    (``t.grad_fn``) arrives as the descriptor's ``__get__``/``__set__``, named here by the
    attribute's own name."""
    name = getattr(func, "__name__", None)
    if name in ("__get__", "__set__", "__delete__"):
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", None) or getattr(getattr(owner, "fget", None), "__name__", None) or name
    return name


def _torch_name(func) -> str:
    name = _func_name(func) or str(func)
    if getattr(func, "__name__", None) in ("__get__", "__set__", "__delete__"):
        return f"Tensor.{name}"
    if getattr(_Tensor, name, None) is func:
        return f"Tensor.{name}"
    for modname, mod in (("torch.nn.functional", F), ("torch.special", torch.special), ("torch", torch)):
        if getattr(mod, name, None) is func:
            return f"{modname}.{name}"
    for modname, mod in (("torch.sparse", torch.sparse), ("torch.special", torch.special)):  # aliases: _sparse_softmax
        alias = next((n for n, v in vars(mod).items() if v is func and not n.startswith("_")), None)
        if alias is not None:
            return f"{modname}.{alias}"
    if getattr(torch.autograd, name, None) is func:
        return f"torch.autograd.{name}"
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.aten.{name.split('.', 1)[0]}"
    return f"torch {name}"


# -------------------------------------------------------------------------------- the watches

class _Watch:
    """What one call of the learner's function did: library calls its lab's ``refusal``
    (:class:`~._core.Refusal`) names, and (when
    ``matrix`` is a dict ``{"shape": (T_q, T_k) or None, "min_elements": n or None}``) the
    first score-matrix-sized tensor or array it made."""

    def __init__(self, refusal, matrix: dict | None, events_fd: int | None = None):
        self.refusal, self.spec = refusal, matrix
        self.forbidden: list[str] = []
        self.not_allowed: list[str] = []
        self.matrix: tuple | None = None
        self.events_fd = events_fd
        self._codes: dict = {}
        self._saved: list = []
        self.profiler_changed = False
        self.modes_removed = False

    def record(self, kind: str, name) -> None:
        """Note what was seen (``kind``: ``"forbidden"``, ``"not_allowed"`` or ``"matrix"``).
        In the child it is also written at once to the parent's events pipe: a record the
        learner's code later clears (through ``gc`` or a frame) has already left the process."""
        if kind == "matrix":
            if self.matrix is not None:
                return
            self.matrix = tuple(name)
            text = " ".join(map(str, self.matrix))
        else:
            seen = self.forbidden if kind == "forbidden" else self.not_allowed
            if name in seen:
                return
            seen.append(name)
            text = str(name)
        if self.events_fd is not None:
            line = f"{kind}\t{text}".replace("\n", " ")[:300] + "\n"
            try:
                _os_write(self.events_fd, line.encode("utf-8", "replace"))
            except OSError:     # the learner closed the pipe: the parent sees its end (tampering)
                pass

    # -- score matrices
    def _big(self, shape: tuple, storage_elements: int | None) -> None:
        if self.matrix is not None or self.spec is None:
            return
        want = self.spec.get("shape")
        if want is not None and len(shape) >= 2:
            T_q, T_k = want
            if shape[-2:] == (T_q, T_k) or (self.spec.get("transposed") and shape[-2:] == (T_k, T_q)):
                self.record("matrix", shape)
                return
        row = self.spec.get("row")
        if row is not None and row["T_k"] in shape and not any(w in shape for w in row["widths"]):
            self.record("matrix", shape)   # a row of scores over every key (or more), not a tile's
            return
        least = self.spec.get("min_elements")
        if least and storage_elements is not None and storage_elements >= least:
            self.record("matrix", shape)

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
        verdict = self._codes.get(code)
        if verdict is None:
            module = frame.f_globals.get("__name__", "") if isinstance(frame.f_globals, dict) else ""
            module, qualname = str(module), getattr(code, "co_qualname", code.co_name)
            hit = self.refusal.python_refused(module, qualname)
            verdict = self._codes[code] = (("forbidden", hit) if hit else
                                           ("not_allowed", _python_not_allowed(module, qualname)))
        kind, name = verdict
        if name:
            self.record(kind, name)

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
        for name in ("zeros", "ones", "empty", "full", "frombuffer", "fromiter", "fromstring", "fromfunction"):
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
        name = _func_name(func)
        if isinstance(name, str) and self.watch.refusal.torch_refused(name):
            self.watch.record("forbidden", _torch_name(func))
        result = func(*args, **(kwargs or {}))
        if self.watch.spec is not None:
            for t in (result if isinstance(result, (tuple, list)) else (result,)):
                self.watch.tensor(t)
        return result


class _Dispatch(TorchDispatchMode):
    """Sees every ATen operation below the torch function level: what ``_Mode`` cannot see,
    such as a call made under ``torch._C.DisableTorchFunction()``, through ``torch.ops.aten``,
    or from a tensor subclass's own ``__torch_function__``."""

    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in a guard that imports torch._dynamo on the
        # first operation: 2 s and 140 MiB, paid again in every child.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if isinstance(name, str) and self.watch.refusal.torch_refused(name):
            self.watch.record("forbidden", f"torch.ops.aten.{name.split('.', 1)[0]}")
        graph = self.watch.refusal.graph_refused(args, kwargs)
        if graph:
            self.watch.record("forbidden", graph)
        result = func(*args, **(kwargs or {}))
        if self.watch.spec is not None:
            for t in (result if isinstance(result, (tuple, list)) else (result,)):
                self.watch.tensor(t)
        return result


# ------------------------------------------------------------------------ threads, processes, signals

def _escape_points() -> list:
    """``(owner, attribute, label)`` of every function that would let the learner's code run
    where the watches cannot see (a new thread or process) or reach the notebook's kernel
    (a signal).  Each is replaced by a refusal while the function runs."""
    import posix

    points = [(_thread, "start_new_thread", "a new thread"), (_thread, "start_joinable_thread", "a new thread"),
              (threading, "_start_new_thread", "a new thread"), (threading, "_start_joinable_thread", "a new thread")]
    for owner in (os, posix):
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "spawnv", "spawnve", "spawnvp",
                     "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe"):
            points.append((owner, name, f"os.{name} (a new process)"))
        for name in ("kill", "killpg"):
            points.append((owner, name, f"os.{name} (a signal to another process)"))
    for name in ("pthread_kill", "pidfd_send_signal"):
        points.append((signal, name, f"signal.{name} (a signal)"))
    try:
        import _posixsubprocess
        points.append((_posixsubprocess, "fork_exec", "subprocess (a new process)"))
    except ImportError:  # pragma: no cover - not on POSIX
        pass
    return [(owner, name, label) for owner, name, label in points if hasattr(owner, name)]


class _Escapes:
    """While installed, each escape point (:func:`_escape_points`) records ``not_allowed`` and
    raises ``PermissionError`` instead of starting a thread or process or sending a signal."""

    def __init__(self, watch: _Watch):
        self.watch, self.saved = watch, []

    def install(self) -> None:
        checked = threading.get_ident()   # the kernel's own threads (in process) are left alone
        for owner, name, label in _escape_points():
            old = getattr(owner, name)

            def refuse(*args, _label=label, _old=old, **kwargs):
                if threading.get_ident() != checked:
                    return _old(*args, **kwargs)
                self.watch.record("not_allowed", _label)
                raise PermissionError(f"{_label} is not allowed while a lab checks your function")

            self.saved.append((owner, name, old))
            setattr(owner, name, refuse)

    def uninstall(self) -> None:
        for owner, name, old in reversed(self.saved):
            setattr(owner, name, old)
        self.saved.clear()


# ------------------------------------------------------------------------ tampering: snapshot

def _watched_namespaces() -> list:
    """``(label, object)`` whose attributes the learner's function must leave alone."""
    out = [("torch", torch), ("torch.Tensor", torch.Tensor), ("torch.nn", torch.nn),
           ("torch.nn.functional", F), ("torch.special", torch.special), ("torch.linalg", torch.linalg),
           ("math", math), ("builtins", builtins), ("pickle", pickle)]
    if np is not None:
        out += [("numpy", np), ("numpy.ndarray", np.ndarray), ("numpy.linalg", np.linalg)]
    out += [(name, mod) for name, mod in list(sys.modules.items())
            if mod is not None and (name == "attnlib" or name.startswith("attnlib."))]
    return out


def _snapshot() -> list:
    return [(label, obj, dict(vars(obj))) for label, obj in _watched_namespaces()]


def _wraps(new, old) -> bool:
    """Whether ``new`` is a wrapper of ``old`` (``functools.wraps``'s ``__wrapped__`` chain)."""
    for _ in range(8):
        new = getattr(new, "__wrapped__", None) if not isinstance(new, type) else None
        if new is None:
            return False
        if new is old:
            return True
    return False


def _restore(snapshot: list, imported: bool = False) -> list[str]:
    """Put back every replaced or deleted function, class or module, and remove what was
    added to a class (it would shadow an inherited method); ``label.name`` of each.  Where a
    module was imported during the call (``imported``), a replacement that wraps the original
    (``torch._dynamo`` wraps ``torch.manual_seed`` when it is first imported) is the import's
    doing, not the learner's: it is put back without being reported."""
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
            if not (imported and _wraps(new, old)):
                changed.append(f"{label}.{name}")
            try:
                setattr(obj, name, old)
            except (AttributeError, TypeError):
                pass
    return changed


def _mode_depth() -> tuple:
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def _trim_modes(depth: tuple) -> bool:
    """Pop the torch modes the learner's function entered and did not leave, down to
    ``depth``; True when it removed some of the check's own (the stacks are shallower)."""
    while torch._C._len_torch_function_stack() > depth[0]:
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > depth[1]:
        torch._C._pop_torch_dispatch_stack()
    return _mode_depth() != depth


def _global_state() -> dict:
    """What the learner's function could change for everything that runs after it, apart from
    attributes: settings, random generators, the stacks of torch modes."""
    import random

    state = {"dtype": torch.get_default_dtype(), "grad": torch.is_grad_enabled(), "threads": torch.get_num_threads(),
             "torch_rng": torch.get_rng_state(), "random": random.getstate(),
             "function_modes": torch._C._len_torch_function_stack(),
             "dispatch_modes": torch._C._len_torch_dispatch_stack()}
    if np is not None:
        state["numpy_rng"] = np.random.get_state()
    return state


def _put_back(state: dict) -> None:
    import random

    torch.set_default_dtype(state["dtype"])  # this also resets torch.Storage
    torch.set_grad_enabled(state["grad"])
    if torch.get_num_threads() != state["threads"]:
        torch.set_num_threads(state["threads"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["random"])
    if np is not None:
        np.random.set_state(state["numpy_rng"])
    while torch._C._len_torch_function_stack() > state["function_modes"]:   # modes it entered and left on
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > state["dispatch_modes"]:
        torch._C._pop_torch_dispatch_stack()


# ------------------------------------------------------------------------ plain-data results

def _encode(obj, depth: int = 0):
    """``obj`` as builtins only: tensors as bytes, other objects as their type's name."""
    if isinstance(obj, _Tensor) and type(obj) not in (_Tensor, torch.nn.Parameter):
        kind = type(obj)   # a subclass runs its own code when read: it is not read, only named
        return ("object", str(getattr(kind, "__module__", "torch")),
                f"{getattr(kind, '__name__', 'Tensor')} (a subclass of Tensor: return a plain one)")
    if isinstance(obj, _Tensor):
        try:
            t = obj.detach()
            if t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
                return ("object", "torch", f"Tensor with layout {t.layout} on {t.device}")
            if t.numel() * t.element_size() > _MAX_REPLY_BYTES // 2:   # before any copy is made
                return ("too_big", tuple(t.shape), str(t.dtype))
            t = t.cpu().resolve_conj().resolve_neg().contiguous()
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
        dt = getattr(torch, dtype, None)
        if not isinstance(dt, torch.dtype) or not isinstance(data, bytes) or not all(
                isinstance(n, int) and n >= 0 for n in shape) or len(data) != math.prod(shape) * dt.itemsize:
            raise _Forged("a tensor whose bytes do not match its shape and dtype")
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
    if name == base.__name__ and base is NotImplementedError:
        return base(text) if text else base()
    if not issubclass(base, Exception):   # the learner's KeyboardInterrupt or SystemExit must not stop the kernel
        base = Exception
    for parent in (base, Exception):
        try:
            cls = type(name, (parent,), {"__str__": lambda self, t=text: t, "__module__": "builtins"})
            return cls(text)
        except TypeError:
            continue
    return Exception(text)  # pragma: no cover


class _Forged(Exception):
    """A reply that the check's own code in the child did not write."""


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # builtins only: a reply cannot build objects
        raise pickle.UnpicklingError(f"refused {module}.{name}")


_REPLY_KEYS = {"result", "forbidden", "not_allowed", "tampered", "matrix", "output", "output_chars"}


def _loads(data: bytes) -> dict:
    """A reply from :func:`_run_guarded`, read without building any object but builtins and
    checked for its form.

    Raises:
        _Forged: the bytes are not such a reply (a learner's function wrote to the pipe)."""
    try:
        reply = _SafeUnpickler(io.BytesIO(data)).load()
    except Exception as err:  # noqa: BLE001 - UnpicklingError, EOFError, ValueError, RecursionError, ...
        raise _Forged(f"a reply that could not be read ({type(err).__name__})") from None
    if type(reply) is not dict or set(reply) != _REPLY_KEYS:
        raise _Forged("a reply in another form")
    result = reply["result"]
    lists = [reply[k] for k in ("forbidden", "not_allowed", "tampered")]
    if (type(result) is not tuple or len(result) != 2 or result[0] not in ("ok", "error")
            or any(type(x) is not list or not all(type(n) is str for n in x) for x in lists)
            or not (reply["matrix"] is None or (type(reply["matrix"]) is tuple
                                                and all(type(n) is int for n in reply["matrix"])))
            or type(reply["output"]) is not str or type(reply["output_chars"]) is not int):
        raise _Forged("a reply in another form")
    if result[0] == "error" and not (type(result[1]) is tuple and len(result[1]) == 3 and type(result[1][0]) is str
                                     and type(result[1][1]) is list and type(result[1][2]) is str):
        raise _Forged("a reply in another form")
    return reply


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


def _run_guarded(fn, refusal, args, kwargs, matrix: dict | None, events_fd: int | None = None) -> bytes:
    """Run ``fn(*args, **kwargs)`` under every watch; the reply as bytes (builtins only).  The
    result is serialised while the watches are still on: a value that runs code when it is read
    is watched as the function is."""
    watch = _Watch(refusal, matrix, events_fd)
    capture = _Capture(OUTPUT_EXCERPT_CHARS * 4)
    saved_out, saved_err = sys.stdout, sys.stderr
    saved_profile = _getprofile()
    modules = len(sys.modules)
    state = _global_state()
    watch.install_numpy()
    snapshot = _snapshot()
    escapes = _Escapes(watch)
    body = None
    _ACTIVE.append(watch)
    try:
        sys.stdout = sys.stderr = capture
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            escapes.install()
            with _Dispatch(watch), _Mode(watch):
                depth = _mode_depth()
                _setprofile(watch.profile)
                try:
                    try:
                        value = fn(*args, **kwargs)
                        watch.spec = None     # the encoding's own byte views are not score matrices
                        body = ("ok", _encode(value))
                    except BaseException as err:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
                        body = ("error", _encode_error(err))
                finally:
                    _setprofile(saved_profile)
                    watch.modes_removed = _trim_modes(depth)
    except BaseException as err:  # noqa: BLE001 - e.g. the function left a mode of its own on the stack
        if body is None:
            body = ("error", _encode_error(err))
    finally:
        _ACTIVE.remove(watch)
        escapes.uninstall()
        sys.stdout, sys.stderr = saved_out, saved_err
        _put_back(state)
        tampered = _restore(snapshot, imported=len(sys.modules) != modules) + (
            ["sys.setprofile"] if watch.profiler_changed else []) + (
            ["the check's torch modes"] if watch.modes_removed else [])
        watch.uninstall_numpy()
    reply = {"result": body, "forbidden": list(watch.forbidden), "not_allowed": list(watch.not_allowed),
             "tampered": tampered, "matrix": watch.matrix, "output": capture.text()[:OUTPUT_EXCERPT_CHARS * 4],
             "output_chars": capture.total}
    data = _dumps(reply, protocol=4)
    if len(data) > _MAX_REPLY_BYTES:
        reply["result"] = ("error", ("MemoryError", ["MemoryError"], "your function's result is too large to check"))
        data = _dumps(reply, protocol=4)
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


def _limit_memory() -> None:
    """Let the child take at most :data:`CHILD_MEMORY_BYTES` of address space beyond what it
    has now (a MemoryError, not the machine's memory, stops a runaway function)."""
    try:
        import resource

        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + CHILD_MEMORY_BYTES, size + CHILD_MEMORY_BYTES))
    except (OSError, ValueError, StopIteration, ImportError):  # best effort
        pass


def _no_grandchildren() -> None:
    """A fork the escape refusals did not see (a reference to ``os.fork`` taken before the
    check) is reported at once and its child ends before it runs any of the learner's code."""
    try:
        os.register_at_fork(before=lambda: _ACTIVE and _ACTIVE[-1].record("not_allowed", "os.fork (a new process)"),
                            after_in_child=lambda: os._exit(71))
    except (AttributeError, ValueError):  # pragma: no cover
        pass


#: The watch of the call running now (the fork hook reports to it).
_ACTIVE: list = []


def _child(fn, refusal, req: int, resp: int, events: int) -> None:
    """The child's whole life: serve calls until the parent closes the pipe; never returns."""
    code = 0
    try:
        _die_with_parent()
        try:
            os.setpgid(0, 0)             # its own process group: closing the check kills every descendant
        except OSError:
            pass
        try:                              # every descriptor the kernel had (its sockets and pipes) is closed
            inherited = [int(n) for n in os.listdir("/proc/self/fd")]
        except OSError:
            inherited = list(_OPEN_FDS)
        for fd in inherited:
            if fd > 2 and fd not in (req, resp, events):
                try:
                    os.close(fd)
                except OSError:
                    pass
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        torch.set_num_threads(1)
        _limit_memory()
        _no_grandchildren()
        while True:
            try:
                request = _read_msg(req, None)
            except (EOFError, OSError):
                break
            args, kwargs, matrix = pickle.loads(request)
            reply = _run_guarded(fn, refusal, args, kwargs, matrix, events)
            _write_all(resp, reply, None)
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
        refusal: the lab's :class:`~._core.Refusal` (which library calls to refuse).
        mode: ``"process"`` or ``"inprocess"``; default :func:`isolation`.
    """

    def __init__(self, fn, refusal, mode: str | None = None):
        self.fn, self.refusal = fn, refusal
        self.mode = mode or isolation()
        self.pid: int | None = None
        self._req = self._resp = self._events = None
        self.spent = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self) -> None:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        ev_r, ev_w = os.pipe()
        _OPEN_FDS.update((req_r, req_w, resp_r, resp_w, ev_r, ev_w))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a threaded process
            pid = os.fork()
        if pid == 0:
            _child(self.fn, self.refusal, req_r, resp_w, ev_w)  # never returns
        try:
            os.setpgid(pid, pid)      # also here: whichever of the two runs first, the group exists
        except OSError:
            pass
        for fd in (req_r, resp_w, ev_w):
            os.close(fd)
            _OPEN_FDS.discard(fd)
        os.set_blocking(ev_r, False)
        self.pid, self._req, self._resp, self._events = pid, req_w, resp_r, ev_r

    def _drain_events(self) -> tuple[dict, bool]:
        """What the child's watches wrote to the events pipe since the last call, by kind, and
        whether the child closed its end (it never does on its own)."""
        data, closed = b"", False
        while len(data) < (1 << 20):
            try:
                chunk = os.read(self._events, 65536)
            except BlockingIOError:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
        seen: dict = {"forbidden": [], "not_allowed": [], "matrix": []}
        for line in data.decode("utf-8", "replace").splitlines():
            kind, _, text = line.partition("\t")
            if kind in seen and text not in seen[kind]:
                seen[kind].append(text)
        return seen, closed

    def _merge(self, reply: "Reply") -> "Reply":
        """The reply with every event the watches sent, even one the learner's code erased
        from the child's own record afterwards."""
        seen, closed = self._drain_events()
        for kind in ("forbidden", "not_allowed"):
            reply[kind] = reply[kind] + [n for n in seen[kind] if n not in reply[kind]]
        if reply["matrix"] is None and seen["matrix"]:
            try:
                reply["matrix"] = tuple(int(n) for n in seen["matrix"][0].split())
            except ValueError:
                reply["matrix"] = (0,)
        if closed and self.pid is not None:
            reply["tampered"] = reply["tampered"] + ["the check's events pipe"]
        return reply

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
                return Reply(status="ok", **_loads(_run_guarded(self.fn, self.refusal, args, kwargs, matrix)))
            if self.pid is None:
                try:
                    self._start()
                except OSError:  # no fork possible now (out of processes or memory): run it here
                    self.mode = "inprocess"
                    return Reply(status="ok", **_loads(_run_guarded(self.fn, self.refusal, args, kwargs, matrix)))
            deadline = start + limit
            try:
                _write_all(self._req, pickle.dumps((args, kwargs, matrix), protocol=4), deadline)
                data = _read_msg(self._resp, deadline)
            except TimeoutError:
                self.close()
                return Reply(status="timed_out", limit_s=limit)
            except (EOFError, OSError):
                return Reply(status="exited", **self._reap())
            try:
                reply = self._merge(Reply(status="ok", **_loads(data)))
            except _Forged as forged:
                self.close()
                return Reply(status="forged", what=str(forged))
            status, payload = reply["result"]
            if status == "error" and "forked subprocess" in payload[2]:  # CUDA cannot start in a fork
                self.close()
                self.mode = "inprocess"
                return Reply(status="ok", **_loads(_run_guarded(self.fn, self.refusal, args, kwargs, matrix)))
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
        try:
            os.killpg(pid, signal.SIGKILL)      # what it started, if anything is left
        except OSError:
            pass
        if os.WIFSIGNALED(status):
            return {"signal": signal.Signals(os.WTERMSIG(status)).name}
        return {"exit_code": os.WEXITSTATUS(status)}

    def _close_fds(self) -> None:
        for fd in (self._req, self._resp, self._events):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
                _OPEN_FDS.discard(fd)
        self._req = self._resp = self._events = None

    def close(self) -> None:
        """Kill the child and every process it started (its process group), and wait for the
        child; safe to call twice."""
        pid, self.pid = self.pid, None
        self._close_fds()
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
