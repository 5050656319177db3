"""Running a learner's function apart from the grader (every code lab).

A lab must not be fooled by the function it checks, and must survive it.  So the learner's
function never runs in the grader's own interpreter state.  Three ways to run it
(:func:`isolation` chooses; ``ATTNLIB_LAB_ISOLATION`` overrides):

* ``"process"`` (Linux, the default there): the first call of a check forks the kernel
  (``os.fork``, so a function defined in a notebook needs no pickling); the child runs the
  learner's function on each input the parent sends it, then is ended when the check closes.
* ``"spawn"`` (macOS and Windows, the default there; anywhere on request): a worker process
  started with ``multiprocessing``'s *spawn* method ahead of time, while the reader reads
  (:func:`prestart`), receives the learner's function by value (``cloudpickle``) and runs it
  the same way; it is ended when the check closes and a fresh one is started for the next
  check, so a check pays no start-up.  A function that needs CUDA (which cannot start in a
  forked child) moves to a spawned worker too.
* ``"inprocess"`` (only when asked for): in the kernel's own process, with the same watches;
  it cannot stop ``os._exit``, a hung loop or memory exhaustion, and the feedback says so.

In a child (``process`` or ``spawn``): one torch thread; its own process group; on Linux a
child subreaper (``PR_SET_CHILD_SUBREAPER``), so that whatever it starts, in any session or
group, stays its descendant, and at close every descendant is stopped, then killed
(:func:`_end_tree`; elsewhere its process group and the descendants ``psutil`` can still see);
every descriptor it inherited closed; file descriptors 1 and 2 sent to ``os.devnull`` (the
learner's ``print`` is captured through ``sys.stdout``); at most :data:`CHILD_MEMORY_BYTES`
of address space beyond what it had.  The references and every comparison stay in the
parent, which the learner's code never touches.  Results come back as plain data (tensors as
bytes), read by an unpickler that builds no object other than builtins, in a form checked
field by field (:func:`_loads`); what the watches see is also sent at once on a second
channel, so the child's own record can be erased without effect.

Time: :data:`TIME_LIMIT_S` seconds of CPU time *in the learner's function* per input (a
watchdog thread in the child ends it past that), :data:`CHECK_TIME_LIMIT_S` per check; the
CPU time of a first-use import is not counted, and while an import runs the parent waits (up
to :data:`IMPORT_LIMIT_S`), so a right function never reads as an endless loop because a
large library loads.  A function that waits without computing (``time.sleep``, ``input()``)
is stopped after :data:`WAIT_LIMIT_S` seconds of wall time; a slow machine only stretches
the wall time the parent allows (up to :data:`WALL_LIMIT_S` per input).

The kernel during a check (``process``/``spawn``, from the main thread): every catchable
signal whose default would end or stop the kernel (``SIGTERM``, ``SIGHUP``, ``SIGQUIT``,
``SIGUSR1``, ``SIGUSR2``, ``SIGALRM``, ``SIGTSTP``, real-time signals, ...) is ignored until
every process of the check has ended, so one sent from the child (by ``os.kill`` or through
libc) is discarded.  Not covered: ``SIGKILL`` and ``SIGSTOP``, which no process can catch,
and the fault signals a fault handler may own (``SIGSEGV``, ``SIGBUS``, ``SIGFPE``,
``SIGILL``, ``SIGABRT``); each takes a deliberate call through ``ctypes``.  ``SIGINT`` keeps
its handler: the reader's interrupt still stops a check.

In process, and in the child, while the learner's function runs and while its result is
serialised:

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

In process only, because there the kernel is the process: closing or replacing descriptors
(``os.close``, ``os.closerange``, ``os.dup2``), installing signal handlers or timers
(``signal.signal``, ``signal.alarm``, ``signal.setitimer``, ``signal.raise_signal``,
``signal.pthread_sigmask``), ``os._exit``, ``os.abort`` and ``resource.setrlimit`` are refused;
file descriptors 1 and 2 are captured (not only ``sys.stdout``); and after the call the
working directory, the recursion limit, ``sys.path``, ``sys.meta_path``, ``sys.path_hooks``,
``os.environ``, the signal handlers, torch's default dtype, grad mode, threads, random
generators, deterministic, anomaly and print settings, NumPy's print and error settings, and
the ``__code__``, ``__defaults__`` and ``__kwdefaults__`` of every function of ``attnlib``
(the checkers included) and of ``torch.nn.functional`` are put back (compared as code
objects, so a function rebound in place is found).

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

#: Seconds of CPU time the learner's function may spend on one input before the check stops
#: it (a correct function takes milliseconds on every input of every lab).  The CPU time of a
#: first-use import is not counted.
TIME_LIMIT_S = 5.0

#: Seconds of CPU time all the calls of one check may spend together.
CHECK_TIME_LIMIT_S = 30.0

#: Seconds of wall time the parent waits for one input while the child computes nothing (a
#: function that sleeps or waits for ``input()``).
WAIT_LIMIT_S = 20.0

#: Seconds of wall time the parent waits for one input at most, however busy the machine.
WALL_LIMIT_S = 120.0

#: Seconds one first-use import may take (CPU in the child, wall in the parent) before the
#: check stops it.
IMPORT_LIMIT_S = 120.0

#: Seconds the first check waits for a spawned worker that is still starting (importing torch).
SPAWN_START_LIMIT_S = 120.0

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
_os_write, _os_getpid, _os_exit = os.write, os.getpid, os._exit
_os_dup, _os_dup2, _os_close = os.dup, os.dup2, os.close
_process_time, _sleep, _monotonic = time.process_time, time.sleep, time.monotonic
_start_thread = _thread.start_new_thread
_FIND_AND_LOAD = getattr(getattr(sys.modules.get("_frozen_importlib"), "_find_and_load", None), "__code__", None)

#: Bytes of address space the child may take beyond what it had when it started (a
#: correct function of any lab needs a few MB; a runaway one is stopped with a MemoryError
#: instead of taking the machine's memory, which the notebook kernel needs).
CHILD_MEMORY_BYTES = 1 << 30

_MODES = ("process", "spawn", "inprocess")


def isolation() -> str:
    """How the learner's function runs: ``"process"`` (a forked child: Linux), ``"spawn"`` (a
    spawned worker: macOS, Windows, and Linux without ``os.fork``), or ``"inprocess"`` (only
    when asked for).  The environment variable ``ATTNLIB_LAB_ISOLATION`` (``process``,
    ``spawn`` or ``inprocess``) overrides it; ``process`` where ``os.fork`` is missing means
    ``spawn``.

    Raises:
        ValueError: ``ATTNLIB_LAB_ISOLATION`` names none of the three."""
    env = os.environ.get("ATTNLIB_LAB_ISOLATION", "").strip().lower()
    if env and env not in _MODES:
        raise ValueError(f"ATTNLIB_LAB_ISOLATION is {env!r}; expected one of {', '.join(_MODES)} (or unset)")
    can_fork = hasattr(os, "fork")
    if env == "inprocess":
        return "inprocess"
    if env == "spawn" or (env == "process" and not can_fork):
        return "spawn"
    if env == "process":
        return "process"
    return "process" if sys.platform.startswith("linux") and can_fork else "spawn"


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

    def __init__(self, refusal, matrix: dict | None, emit=None, clock: "_Clock | None" = None):
        self.refusal, self.spec = refusal, matrix
        self.forbidden: list[str] = []
        self.not_allowed: list[str] = []
        self.matrix: tuple | None = None
        self.emit = emit
        self.clock = clock
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
        if self.emit is not None:
            self.emit(kind, text)

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
        code = frame.f_code
        if code is _FIND_AND_LOAD and self.clock is not None:
            self.clock.importing(frame, event, self.emit)
        if event != "call":
            if event == "c_call" and arg is _setprofile and frame.f_code is not _run_guarded.__code__:
                self.profiler_changed = True                 # the function switches the watch off
            return
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


# ------------------------------------------------------------------------ the learner's CPU time

class _Clock:
    """The CPU time the learner's function spends in this process, less first-use imports
    (seen by the profiler as calls of importlib's ``_find_and_load``); read by the watchdog
    (:func:`_watchdog`) while the function runs."""

    def __init__(self):
        self.start: float | None = None
        self.limit = math.inf
        self.depth, self.since, self.imports, self.module = 0, 0.0, 0.0, ""

    def begin(self, limit: float | None) -> None:
        self.depth, self.imports = 0, 0.0
        self.limit = math.inf if limit is None else float(limit)
        self.start = _process_time()

    def end(self) -> tuple[float, float]:
        """``(CPU seconds in the function less imports, CPU seconds in imports)``."""
        now = _process_time()
        if self.start is None:
            return 0.0, 0.0
        if self.depth:
            self.imports += now - self.since
            self.depth = 0
        used = max(0.0, now - self.start - self.imports)
        self.start = None
        return used, self.imports

    def importing(self, frame, event: str, emit) -> None:
        if event == "call":
            if self.depth == 0:
                self.since = _process_time()
                try:
                    self.module = str(frame.f_locals.get("name", ""))[:120]
                except Exception:  # noqa: BLE001
                    self.module = ""
                if emit is not None:
                    emit("import", self.module)
            self.depth += 1
        elif event == "return" and self.depth:
            self.depth -= 1
            if self.depth == 0:
                self.imports += _process_time() - self.since
                if emit is not None:
                    emit("imported", self.module)


def _watchdog(clock: _Clock, emit) -> None:
    """The child's timer (a thread started before any learner code runs): past the CPU limit,
    or past :data:`IMPORT_LIMIT_S` in one import, it reports which and ends the child."""
    while True:
        _sleep(0.02)
        start = clock.start
        if start is None:
            continue
        now = _process_time()
        if clock.depth:
            if now - clock.since > IMPORT_LIMIT_S:
                emit("timeout", "import " + clock.module)
                _os_exit(75)
        elif now - start - clock.imports > clock.limit:
            emit("timeout", "cpu")
            _os_exit(75)


def _emitter(write):
    """``emit(kind, text)`` that sends one event line through ``write`` (bytes), at once."""
    def emit(kind: str, text: str) -> None:
        line = f"{kind}\t{text}".replace("\n", " ")[:300] + "\n"
        try:
            write(line.encode("utf-8", "replace"))
        except (OSError, ValueError, EOFError):   # the learner closed the channel: the parent sees its end
            pass
    return emit


# ------------------------------------------------------------------------ threads, processes, signals

def _escape_points() -> list:
    """``(owner, attribute, label)`` of every function that would let the learner's code run
    where the watches cannot see (a new thread or process) or reach the notebook's kernel
    (a signal).  Each is replaced by a refusal while the function runs."""
    try:
        import posix
    except ImportError:  # pragma: no cover - Windows: os holds the same functions
        posix = os

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


def _kernel_points() -> list:
    """``(owner, attribute, label)`` of what is refused only in process, where the kernel is
    the process the learner's function runs in: closing or replacing its descriptors, signal
    handlers and timers, ending the process, lowering its resource limits."""
    owners = [os]
    try:
        import posix
        owners.append(posix)
    except ImportError:  # pragma: no cover - Windows
        pass
    points = []
    for owner in owners:
        for name in ("close", "closerange", "dup2"):
            points.append((owner, name, f"os.{name} (the kernel's own file descriptors)"))
        for name in ("_exit", "abort"):
            points.append((owner, name, f"os.{name} (it would end the kernel)"))
    for name in ("signal", "alarm", "setitimer", "raise_signal", "pthread_sigmask", "siginterrupt", "set_wakeup_fd"):
        points.append((signal, name, f"signal.{name} (the kernel's signals)"))
    try:
        import resource
        for name in ("setrlimit", "prlimit"):
            points.append((resource, name, f"resource.{name} (the kernel's resource limits)"))
    except ImportError:  # pragma: no cover - Windows
        pass
    return [(owner, name, label) for owner, name, label in points if hasattr(owner, name)]


class _Escapes:
    """While installed, each escape point (:func:`_escape_points`) records ``not_allowed`` and
    raises ``PermissionError`` instead of starting a thread or process or sending a signal."""

    def __init__(self, watch: _Watch, kernel: bool = False):
        self.watch, self.saved, self.kernel = watch, [], kernel

    def install(self) -> None:
        checked = threading.get_ident()   # the kernel's own threads (in process) are left alone
        for owner, name, label in _escape_points() + (_kernel_points() if self.kernel else []):
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


# ------------------------------------------------------------------------ in process: the kernel's state

_PRINT_OPTS = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")


def _kernel_state() -> dict:
    """What a function run in the kernel's own process could change for the kernel, beyond
    :func:`_global_state`: put back by :func:`_put_back_kernel`."""
    state: dict = {"recursion": sys.getrecursionlimit(), "path": list(sys.path), "meta_path": list(sys.meta_path),
                   "path_hooks": list(sys.path_hooks), "environ": dict(os.environ),
                   "deterministic": (torch.are_deterministic_algorithms_enabled(),
                                     torch.is_deterministic_algorithms_warn_only_enabled()),
                   "anomaly": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                   "print": {k: getattr(torch._tensor_str.PRINT_OPTS, k) for k in _PRINT_OPTS},
                   "matmul": torch.get_float32_matmul_precision(), "signals": {}}
    try:
        state["cwd"] = os.getcwd()
    except OSError:  # pragma: no cover - the kernel's folder was deleted
        state["cwd"] = None
    for sig in signal.valid_signals():
        try:
            state["signals"][sig] = signal.getsignal(sig)
        except (ValueError, OSError):
            pass
    if np is not None:
        state["np_print"], state["np_err"] = np.get_printoptions(), np.geterr()
    try:
        import resource
        state["rlimits"] = {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource)
                            if name.startswith("RLIMIT_")}
    except (ImportError, OSError, ValueError):  # pragma: no cover - Windows
        state["rlimits"] = {}
    return state


def _put_back_kernel(state: dict) -> list[str]:
    """Put back what :func:`_kernel_state` saved; what could not be put back, by name."""
    lost = []
    if state["cwd"] is not None:
        try:
            if os.getcwd() != state["cwd"]:
                os.chdir(state["cwd"])
        except OSError:
            try:
                os.chdir(state["cwd"])
            except OSError:
                lost.append("the working directory")
    if sys.getrecursionlimit() != state["recursion"]:
        sys.setrecursionlimit(state["recursion"])
    sys.path[:], sys.meta_path[:], sys.path_hooks[:] = state["path"], state["meta_path"], state["path_hooks"]
    if dict(os.environ) != state["environ"]:
        for key in [k for k in os.environ if k not in state["environ"]]:
            del os.environ[key]
        for key, value in state["environ"].items():
            if os.environ.get(key) != value:
                os.environ[key] = value
    det, warn_only = state["deterministic"]
    if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != (det, warn_only):
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
    if (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()) != state["anomaly"]:
        torch.set_anomaly_enabled(*state["anomaly"])
    for key, value in state["print"].items():
        setattr(torch._tensor_str.PRINT_OPTS, key, value)
    if torch.get_float32_matmul_precision() != state["matmul"]:
        torch.set_float32_matmul_precision(state["matmul"])
    for sig, handler in state["signals"].items():
        try:
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
        except (ValueError, OSError, TypeError):
            lost.append(f"the handler of {signal.Signals(sig).name}")
    if np is not None:
        np.set_printoptions(**state["np_print"])
        np.seterr(**state["np_err"])
    if state["rlimits"]:
        import resource
        for name, limits in state["rlimits"].items():
            try:
                if resource.getrlimit(getattr(resource, name)) != limits:
                    resource.setrlimit(getattr(resource, name), limits)
            except (OSError, ValueError):
                lost.append(f"the resource limit {name}")
    return lost


def _functions_in(obj) -> list:
    """The Python functions ``obj`` is or holds (a class's methods, properties, static and class
    methods, one level; the functions a decorator wraps)."""
    import types

    found, todo = [], [obj]
    if isinstance(obj, type):
        todo = list(vars(obj).values())
    for item in todo:
        if isinstance(item, (staticmethod, classmethod)):
            item = item.__func__
        if isinstance(item, property):
            found += [f for f in (item.fget, item.fset, item.fdel) if isinstance(f, types.FunctionType)]
            continue
        for _ in range(4):
            if isinstance(item, types.FunctionType):
                found.append(item)
            item = getattr(item, "__wrapped__", None) if not isinstance(item, type) else None
            if item is None:
                break
    return found


def _code_snapshot() -> list:
    """``(function, __code__, __defaults__, __kwdefaults__)`` of every Python function of
    ``attnlib`` (the checkers and this module included) and of ``torch.nn.functional``."""
    modules = [mod for name, mod in list(sys.modules.items())
               if mod is not None and (name == "attnlib" or name.startswith("attnlib."))] + [F]
    out, seen = [], set()
    for mod in modules:
        for value in list(vars(mod).values()):
            if isinstance(value, type) and not str(getattr(value, "__module__", "")).startswith("attnlib"):
                continue
            for fn in _functions_in(value):
                if id(fn) not in seen:
                    seen.add(id(fn))
                    out.append((fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__))
    return out


def _restore_code(snapshot: list) -> list[str]:
    """Put back every ``__code__``, ``__defaults__`` or ``__kwdefaults__`` that changed; the
    function of each, by name."""
    changed = []
    for fn, code, defaults, kwdefaults in snapshot:
        if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
            changed.append(f"{fn.__module__}.{fn.__qualname__} (its code)")
            fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults
    return changed


class _FdCapture:
    """File descriptors 1 and 2 sent to a temporary file while the function runs in the
    kernel (what a C library or ``os.write(1, ...)`` prints); the first characters are kept
    and the rest counted."""

    def __init__(self, keep: int):
        self.keep, self.head, self.total, self.saved, self.file = keep, "", 0, None, None

    def __enter__(self):
        import tempfile

        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        try:
            self.file = tempfile.TemporaryFile()
            self.saved = (_os_dup(1), _os_dup(2))
            _os_dup2(self.file.fileno(), 1)
            _os_dup2(self.file.fileno(), 2)
        except (OSError, ValueError):   # no descriptors 1 and 2 (a GUI process): nothing to capture
            self.saved = None
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is None:
            return
        for fd, saved in zip((1, 2), self.saved):
            try:
                _os_dup2(saved, fd)
                _os_close(saved)
            except OSError:  # pragma: no cover
                pass
        try:
            self.total = os.fstat(self.file.fileno()).st_size
            self.file.seek(0)
            self.head = self.file.read(self.keep).decode("utf-8", "replace")
        finally:
            self.file.close()


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


_REPLY_KEYS = {"result", "forbidden", "not_allowed", "tampered", "matrix", "output", "output_chars", "cpu_s", "import_s"}


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
            or type(reply["output"]) is not str or type(reply["output_chars"]) is not int
            or type(reply["cpu_s"]) is not float or type(reply["import_s"]) is not float):
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


def _run_guarded(fn, refusal, args, kwargs, matrix: dict | None, emit=None, limit_s: float | None = None,
                 clock: _Clock | None = None, kernel: bool = False) -> bytes:
    """Run ``fn(*args, **kwargs)`` under every watch; the reply as bytes (builtins only).  The
    result is serialised while the watches are still on: a value that runs code when it is read
    is watched as the function is.  ``emit``: the child's event channel (:func:`_emitter`);
    ``clock`` and ``limit_s``: the CPU seconds the watchdog allows; ``kernel``: run in the
    kernel's own process (the refusals and the putting back that only that needs)."""
    clock = clock if clock is not None else _Clock()
    watch = _Watch(refusal, matrix, emit, clock)
    capture = _Capture(OUTPUT_EXCERPT_CHARS * 4)
    saved_out, saved_err = sys.stdout, sys.stderr
    saved_profile = _getprofile()
    modules = len(sys.modules)
    state = _global_state()
    kernel_state = _kernel_state() if kernel else None
    codes = _code_snapshot() if kernel else []
    fds = _FdCapture(OUTPUT_EXCERPT_CHARS * 4) if kernel else None
    watch.install_numpy()
    snapshot = _snapshot()
    escapes = _Escapes(watch, kernel=kernel)
    body = None
    cpu = (0.0, 0.0)
    _ACTIVE.append(watch)
    try:
        if fds is not None:
            fds.__enter__()
        sys.stdout = sys.stderr = capture
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            escapes.install()
            with _Dispatch(watch), _Mode(watch):
                depth = _mode_depth()
                _setprofile(watch.profile)
                try:
                    try:
                        clock.begin(limit_s)
                        try:
                            value = fn(*args, **kwargs)
                        finally:
                            cpu = clock.end()
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
        if fds is not None:
            fds.__exit__(None, None, None)
        _put_back(state)
        tampered = _restore(snapshot, imported=len(sys.modules) != modules) + (
            ["sys.setprofile"] if watch.profiler_changed else []) + (
            ["the check's torch modes"] if watch.modes_removed else [])
        if kernel:
            tampered += _restore_code(codes)
            lost = _put_back_kernel(kernel_state)
            tampered += [f"{what} (it could not be put back)" for what in lost]
        watch.uninstall_numpy()
    output, chars = capture.text(), capture.total
    if fds is not None and fds.total:
        output, chars = output + fds.head, chars + fds.total
    reply = {"result": body, "forbidden": list(watch.forbidden), "not_allowed": list(watch.not_allowed),
             "tampered": tampered, "matrix": watch.matrix, "output": output[:OUTPUT_EXCERPT_CHARS * 4],
             "output_chars": chars, "cpu_s": float(cpu[0]), "import_s": float(cpu[1])}
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

_LINUX = sys.platform.startswith("linux")


def _prctl(option: int, value: int) -> bool:
    if not _LINUX:
        return False
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - best effort
        return False


def _die_with_parent() -> None:
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the child ends with the kernel (the pipe's EOF ends it anyway)


def _limit_memory() -> None:
    """Let the child take at most :data:`CHILD_MEMORY_BYTES` of address space beyond what it
    has now (a MemoryError, not the machine's memory, stops a runaway function).  Linux only:
    elsewhere ``RLIMIT_AS`` is not enforced."""
    if not _LINUX:
        return
    try:
        import resource

        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + CHILD_MEMORY_BYTES, size + CHILD_MEMORY_BYTES))
    except (OSError, ValueError, StopIteration, ImportError):  # best effort
        pass


def _limit_cpu() -> None:
    """A backstop for the watchdog (which needs the GIL): the kernel ends the child with
    ``SIGXCPU`` once it has used the whole check's CPU time, the imports' and a margin."""
    try:
        import resource

        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime + CHECK_TIME_LIMIT_S + IMPORT_LIMIT_S + 10)
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    except (ImportError, OSError, ValueError, AttributeError):  # Windows: the watchdog and the parent's wall limit
        pass


def _no_grandchildren() -> None:
    """A fork the escape refusals did not see (a reference to ``os.fork`` taken before the
    check) is reported at once and its child ends before it runs any of the learner's code."""
    try:
        os.register_at_fork(before=lambda: _ACTIVE and _ACTIVE[-1].record("not_allowed", "os.fork (a new process)"),
                            after_in_child=lambda: _os_exit(71))
    except (AttributeError, ValueError):  # pragma: no cover
        pass


#: The watch of the call running now (the fork hook reports to it).
_ACTIVE: list = []

#: Signals the kernel ignores during a check: every catchable one whose default action ends or
#: stops a process, except SIGINT (the reader's interrupt) and the fault signals a fault
#: handler may own (it cannot be put back from Python).
_NOT_GUARDED = {"SIGKILL", "SIGSTOP", "SIGINT", "SIGCHLD", "SIGCONT", "SIGWINCH", "SIGURG",
                "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGIOT"}


def guarded_signals() -> list:
    """The signals the kernel ignores while a check runs (POSIX; none on Windows)."""
    if os.name != "posix":
        return []
    out = []
    for sig in sorted(signal.valid_signals()):
        try:
            name = signal.Signals(sig).name
        except ValueError:        # a real-time signal without a name of its own
            name = f"SIGRT{sig}"
        if name not in _NOT_GUARDED:
            out.append(sig)
    return out


class _KernelGuard:
    """While a check's processes live: the signals of :func:`guarded_signals` are ignored by
    the kernel (one sent from the child, by ``os.kill`` or through libc, is discarded), and on
    Linux the kernel is a child subreaper, so that a process the check started whose parent
    ended early comes back to the kernel, which ends it at :meth:`uninstall`.  Only from the
    main thread (``signal.signal`` works nowhere else)."""

    def __init__(self):
        self.saved: dict = {}
        self.children_before: set | None = None
        self.was_subreaper = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in guarded_signals():
            try:
                previous = signal.getsignal(sig)
                if previous is None:       # a handler installed outside Python: left as it is
                    continue
                signal.signal(sig, signal.SIG_IGN)
                self.saved[sig] = previous
            except (OSError, ValueError, RuntimeError):
                pass
        if _LINUX:
            self.children_before = set(_children_of(os.getpid()))
            try:
                import ctypes
                flag = ctypes.c_int(0)
                ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0)   # PR_GET_CHILD_SUBREAPER
                self.was_subreaper = bool(flag.value)
            except Exception:  # noqa: BLE001
                self.was_subreaper = True      # unknown: leave it as it is
            if not self.was_subreaper:
                _prctl(36, 1)                  # PR_SET_CHILD_SUBREAPER

    def adopted(self) -> list[int]:
        """Processes the kernel adopted during the check (orphans of the check's processes)
        outside the kernel's own process group."""
        if self.children_before is None:
            return []
        group = os.getpgrp()
        out = []
        for pid in _children_of(os.getpid()):
            if pid in self.children_before:
                continue
            try:
                if os.getpgid(pid) != group:
                    out.append(pid)
            except OSError:
                pass
        return out

    def uninstall(self) -> None:
        if self.children_before is not None:
            for pid in self.adopted():
                _reap_quietly([pid] + _end_tree(pid))
            if not self.was_subreaper:
                _prctl(36, 0)
            self.children_before = None
        for sig, previous in self.saved.items():
            try:
                signal.signal(sig, previous)
            except (OSError, ValueError, RuntimeError, TypeError):
                pass
        self.saved.clear()


def _proc_children() -> dict:
    """``{parent pid: [child pids]}`` of every live process (Linux, from ``/proc``; zombies left out)."""
    kids: dict = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return kids
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) < 2 or fields[0] in (b"Z", b"X"):
            continue
        kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def _children_of(pid: int) -> list[int]:
    return _proc_children().get(pid, []) if _LINUX else []


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (Linux: ``/proc``; elsewhere what ``psutil`` sees)."""
    if _LINUX:
        kids, out, todo = _proc_children(), [], [root]
        while todo:
            for child in kids.get(todo.pop(), []):
                if child not in out and child != root:
                    out.append(child)
                    todo.append(child)
        return out
    try:
        import psutil
        return [p.pid for p in psutil.Process(root).children(recursive=True)]
    except Exception:  # noqa: BLE001 - psutil missing, or the process is gone
        return []


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except (OSError, ValueError):
        pass


def _end_tree(root: int, alive: bool = True) -> list[int]:
    """End ``root`` and every process under it, wherever it moved (its own session or group):
    each round stops every process found (a stopped process cannot start another) until no
    new one appears, then all are killed.  Also kills ``root``'s process group.  ``alive``
    False: ``root`` was already reaped (its number may be reused), only its group is killed.
    Returns the descendants found (their zombies come back to a subreaper: :func:`_reap_quietly`)."""
    if not alive:
        if hasattr(os, "killpg"):
            try:
                os.killpg(root, getattr(signal, "SIGKILL", signal.SIGTERM))
            except OSError:
                pass
        return []
    stop = getattr(signal, "SIGSTOP", None)
    kill = getattr(signal, "SIGKILL", signal.SIGTERM)
    found: list[int] = []
    for _ in range(64):
        if stop is not None:
            _signal(root, stop)
        tree = _descendants(root)
        for pid in tree:
            if stop is not None:
                _signal(pid, stop)
        new = [pid for pid in tree if pid not in found]
        found += new
        if not new:
            break
    for pid in [root] + found:
        _signal(pid, kill)
    if hasattr(os, "killpg"):
        try:
            os.killpg(root, kill)
        except OSError:
            pass
    return found


def _reap_quietly(pids: list[int]) -> None:
    """Reap those of ``pids`` that came back to this process as zombies (the kernel is a
    subreaper during a check); the others belong to another process and are left alone."""
    left = list(pids)
    for _ in range(20):
        still = []
        for pid in left:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except (ChildProcessError, OSError):
                continue
            if not done:
                still.append(pid)
        if not still:
            return
        left = still
        _sleep(0.01)


def _reset_guarded_signals() -> None:
    """In a child: the default action for every signal the kernel ignores during a check (a
    forked child inherits the kernel's ``SIG_IGN``), and for SIGINT."""
    for sig in guarded_signals() + ([signal.SIGINT] if hasattr(signal, "SIGINT") else []):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass


def _child_setup(keep: tuple = ()) -> None:
    """What every child does before it runs any learner code (fork or spawn)."""
    _die_with_parent()
    _prctl(36, 1)                          # PR_SET_CHILD_SUBREAPER: its descendants stay its own
    if hasattr(os, "setpgid"):
        try:
            os.setpgid(0, 0)               # its own process group
        except OSError:
            pass
    if keep:                               # forked: every descriptor the kernel had (its sockets and pipes) is closed
        try:
            inherited = [int(n) for n in os.listdir("/proc/self/fd")]
        except OSError:
            inherited = list(_OPEN_FDS)
        for fd in inherited:
            if fd > 2 and fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    except OSError:  # pragma: no cover
        pass
    _reset_guarded_signals()
    torch.set_num_threads(1)
    _limit_memory()
    _limit_cpu()
    _no_grandchildren()


def _serve(fn, refusal, receive, reply, emit) -> None:
    """The child's loop: a request ``(args, kwargs, matrix, limit_s)``, one guarded call, its
    reply; until the parent closes the channel."""
    clock = _Clock()
    _start_thread(_watchdog, (clock, emit))
    while True:
        try:
            request = receive()
        except (EOFError, OSError):
            return
        args, kwargs, matrix, limit = pickle.loads(request)
        reply(_run_guarded(fn, refusal, args, kwargs, matrix, emit, limit, clock))


def _child(fn, refusal, req: int, resp: int, events: int) -> None:
    """A forked child's whole life: serve calls until the parent closes the pipe; never returns."""
    code = 0
    try:
        _child_setup(keep=(req, resp, events))
        _serve(fn, refusal, lambda: _read_msg(req, None), lambda data: _write_all(resp, data, None),
               _emitter(lambda line: _os_write(events, line)))
    except BaseException:  # noqa: BLE001 - the child must never return into the kernel's code
        code = 70
    finally:
        _os_exit(code)


def _spawn_main(req, resp, events) -> None:
    """A spawned worker's whole life (``multiprocessing``'s *spawn*): set up, say it is ready,
    receive the learner's function, serve calls until the parent closes the channel."""
    code = 0
    try:
        _child_setup()
        send_reply, send_event, receive = resp.send_bytes, events.send_bytes, req.recv_bytes
        send_reply(b"ready")
        try:
            fn, refusal = pickle.loads(receive())
        except Exception as err:  # noqa: BLE001 - a module the function needs cannot be imported here
            send_reply(b"unloadable\t" + f"{type(err).__name__}: {err}"[:300].encode("utf-8", "replace"))
            return
        send_reply(b"loaded")
        _serve(fn, refusal, receive, send_reply, _emitter(send_event))
    except BaseException:  # noqa: BLE001
        code = 70
    finally:
        _os_exit(code)


# ------------------------------------------------------------------------ the parent's side

class _ForkChannel:
    """The parent's ends of a forked child's three pipes."""

    def __init__(self, req: int, resp: int, events: int):
        self.req, self.resp, self.ev = req, resp, events
        os.set_blocking(events, False)

    def send(self, data: bytes, deadline: float) -> None:
        _write_all(self.req, data, deadline)

    def ready(self, timeout: float) -> bool:
        return _ready(self.resp, False, _monotonic() + timeout)

    def receive(self, deadline: float) -> bytes:
        return _read_msg(self.resp, deadline)

    def events(self) -> tuple[bytes, bool]:
        data, closed = b"", False
        while len(data) < (1 << 20):
            try:
                chunk = os.read(self.ev, 65536)
            except BlockingIOError:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
        return data, closed

    def close(self) -> None:
        for fd in (self.req, self.resp, self.ev):
            try:
                os.close(fd)
            except OSError:
                pass
            _OPEN_FDS.discard(fd)


class _ConnChannel:
    """The parent's ends of a spawned worker's three ``multiprocessing`` connections."""

    def __init__(self, req, resp, events):
        self.req, self.resp, self.ev = req, resp, events

    def send(self, data: bytes, deadline: float) -> None:
        self.req.send_bytes(data)

    def ready(self, timeout: float) -> bool:
        return self.resp.poll(timeout)

    def receive(self, deadline: float) -> bytes:
        data = self.resp.recv_bytes(_MAX_REPLY_BYTES + 1024)
        if not data:
            raise EOFError
        return data

    def events(self) -> tuple[bytes, bool]:
        data, closed = b"", False
        try:
            while len(data) < (1 << 20) and self.ev.poll(0):
                data += self.ev.recv_bytes(1 << 16)
        except (EOFError, OSError):
            closed = True
        return data, closed

    def close(self) -> None:
        for conn in (self.req, self.resp, self.ev):
            try:
                conn.close()
            except OSError:
                pass


class _Worker:
    """A spawned worker process and the parent's ends of its connections."""

    def __init__(self):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        req_r, req_w = ctx.Pipe(duplex=False)
        resp_r, resp_w = ctx.Pipe(duplex=False)
        ev_r, ev_w = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_spawn_main, args=(req_r, resp_w, ev_w), daemon=True,
                                   name="attnlib-lab-worker")
        # The worker needs nothing from __main__ (the function arrives by value), and a __main__
        # that spawn cannot re-import (a notebook, `python -`, an embedded interpreter) would
        # stop it: while start() writes its preparation data, __main__ is a bare module.
        import types

        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            self.process.start()
        finally:
            if main is not None:
                sys.modules["__main__"] = main
        for conn in (req_r, resp_w, ev_w):
            conn.close()
        self.channel = _ConnChannel(req_w, resp_r, ev_r)
        self.started = _monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid

    def end(self) -> None:
        self.channel.close()
        if self.process.pid is not None:
            alive = self.process.exitcode is None
            _reap_quietly(_end_tree(self.process.pid, alive=alive))
        self.process.join(5)
        if self.process.is_alive():  # pragma: no cover
            self.process.kill()
            self.process.join(5)


#: The spawned worker waiting for the next check (:func:`prestart`).
_SPARE: list = []


def prestart() -> None:
    """Start the spawned worker the next check will use, if none is waiting and this platform
    runs labs in spawned workers (:func:`isolation`); it imports torch while the reader reads.
    ``ATTNLIB_LAB_PRESTART=0`` turns this off (the first check then waits for the start)."""
    if _SPARE or os.environ.get("ATTNLIB_LAB_PRESTART", "1") == "0":
        return
    import multiprocessing

    if multiprocessing.parent_process() is not None:   # a worker itself (it imports this package): no spare of its own
        return
    try:
        if isolation() != "spawn":
            return
        _SPARE.append(_Worker())
    except Exception:  # noqa: BLE001 - no worker now: the check starts one, or runs in process
        pass


def _take_worker() -> "_Worker":
    while _SPARE:
        worker = _SPARE.pop()
        if worker.process.is_alive():
            return worker
        worker.end()
    return _Worker()


def _child_cpu(pid: int) -> float | None:
    """CPU seconds ``pid`` has used (Linux ``/proc``, else ``psutil``), or None."""
    if _LINUX:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None
    try:
        import psutil
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except Exception:  # noqa: BLE001
        return None


class Reply(dict):
    """One call's report: ``status`` (``"ok"``, ``"timed_out"``, ``"exited"``, ``"forged"``,
    ``"unsendable"``: a spawned worker cannot receive the function, ``what`` says why),
    ``result`` (``("ok", encoded value)`` or ``("error", (type name, builtin bases,
    message))``), ``forbidden``, ``tampered``, ``matrix``, ``output``, ``output_chars``,
    ``cpu_s`` and ``import_s`` (CPU seconds in the function and in its first-use imports); for
    a timeout ``cause`` (``"cpu"``, ``"wait"``, ``"import"``), ``limit_s`` and ``module``;
    for an exit ``exit_code`` or ``signal``."""

    @property
    def status(self) -> str:
        return self.get("status", "ok")


class Sandbox:
    """Runs one learner function, input after input, isolated from the grader (see the module
    docstring).  Use as a context manager, or call :meth:`close`: it ends the child and
    everything it started.

    Args:
        fn: the learner's function.
        refusal: the lab's :class:`~._core.Refusal` (which library calls to refuse).
        mode: ``"process"``, ``"spawn"`` or ``"inprocess"``; default :func:`isolation`.

    Attributes:
        mode: how it runs now (a check moves from ``process`` to ``spawn`` for CUDA, and to
            ``inprocess`` where no child can be started; ``fallback`` says why).
        spent: CPU seconds the learner's function used so far, imports excluded.
    """

    def __init__(self, fn, refusal, mode: str | None = None):
        self.fn, self.refusal = fn, refusal
        self.mode = mode or isolation()
        if self.mode not in _MODES:
            raise ValueError(f"mode is {self.mode!r}; expected one of {', '.join(_MODES)}")
        self.fallback: str | None = None
        self.unsendable: str | None = None
        self.pid: int | None = None
        self._channel = None
        self._worker: _Worker | None = None
        self._guard: _KernelGuard | None = None
        self.spent = 0.0
        self.wall = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- starting the child
    def _fork(self) -> None:
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
        self.pid, self._channel = pid, _ForkChannel(req_w, resp_r, ev_r)

    def _spawn(self) -> str | None:
        """Take a spawned worker and send it the function; None, or why it cannot be used."""
        try:
            import cloudpickle
        except ImportError:
            return "cloudpickle, which sends your function to the worker, is not installed"
        try:
            payload = cloudpickle.dumps((self.fn, self.refusal), protocol=4)
        except Exception as err:  # noqa: BLE001 - a function that holds something unpicklable
            self.unsendable = f"{type(err).__name__}: {str(err)[:200]}"
            return None
        try:
            worker = _take_worker()
        except Exception as err:  # noqa: BLE001 - out of processes or memory, no interpreter to start
            return f"no worker process could be started ({type(err).__name__}: {str(err)[:200]})"
        self._worker, self.pid, self._channel = worker, worker.pid, worker.channel
        chan = worker.channel
        try:
            if not chan.ready(max(0.0, SPAWN_START_LIMIT_S - (_monotonic() - worker.started))):
                return f"the worker process did not start within {SPAWN_START_LIMIT_S:g} s"
            if chan.receive(None) != b"ready":
                return "the worker process did not start"
            chan.send(payload, None)
            if not chan.ready(SPAWN_START_LIMIT_S):
                return "the worker process did not load your function in time"
            answer = chan.receive(None)
        except (EOFError, OSError) as err:
            return f"the worker process ended while starting ({type(err).__name__})"
        if answer != b"loaded":     # e.g. it holds an object that cannot be rebuilt in another process
            self.unsendable = answer.partition(b"\t")[2].decode("utf-8", "replace") or "it could not be loaded there"
        return None

    def _open(self) -> None:
        if self._guard is None:
            self._guard = _KernelGuard()
            self._guard.install()
        if self.mode == "process":
            try:
                self._fork()
                return
            except OSError as err:  # out of processes or memory now: try a spawned worker
                self.fallback = f"no child process could be forked ({err})"
                self.mode = "spawn"
        problem = self._spawn()
        if self.unsendable is not None:
            self._end_child()
            return
        if problem is not None:
            self._end_child()
            self.fallback = problem
            self.mode = "inprocess"

    # -- one call
    def call(self, args: tuple, kwargs: dict, matrix: dict | None = None, limit_s: float | None = None) -> Reply:
        """Run the learner's function on ``args``/``kwargs``: a :class:`Reply`.  ``limit_s``
        (CPU seconds) defaults to :data:`TIME_LIMIT_S`; ``matrix`` is the online lab's watch
        (:class:`_Watch`).

        Raises:
            KeyboardInterrupt: the user interrupted the kernel (the child is ended first).
            Nothing else: whatever the learner's code does is reported in the reply.
        """
        limit = TIME_LIMIT_S if limit_s is None else limit_s
        start = _monotonic()
        try:
            if self.mode != "inprocess" and self._channel is None and self.unsendable is None:
                self._open()
            if self.unsendable is not None:     # never run in the kernel instead: that needs asking for
                return Reply(status="unsendable", what=self.unsendable)
            if self.mode == "inprocess":
                reply = Reply(status="ok", **_loads(_run_guarded(self.fn, self.refusal, args, kwargs, matrix,
                                                                 kernel=True)))
            else:
                reply = self._remote(args, kwargs, matrix, limit)
            if reply.status == "ok":
                self.spent += reply["cpu_s"]
                status, payload = reply["result"]
                if status == "error" and self.mode == "process" and "forked subprocess" in payload[2]:
                    self._end_child()            # CUDA cannot start in a forked child: a spawned one can
                    self.mode, self.fallback = "spawn", "your function uses CUDA, which cannot start in a forked process"
                    return self.call(args, kwargs, matrix, limit_s)
            return reply
        except BaseException:
            self.close()
            raise
        finally:
            self.wall += _monotonic() - start

    def _remote(self, args, kwargs, matrix, limit: float) -> Reply:
        chan, start = self._channel, _monotonic()
        try:
            chan.send(pickle.dumps((args, kwargs, matrix, limit), protocol=4), start + WAIT_LIMIT_S)
        except TimeoutError:
            self._end_child()
            return Reply(status="timed_out", cause="wait", limit_s=WAIT_LIMIT_S, module="")
        except (EOFError, OSError):
            return self._exited(limit)
        seen: dict = {"forbidden": [], "not_allowed": [], "matrix": [], "timeout": []}
        closed, importing, import_since = False, None, 0.0
        window, cpu_before = start, _child_cpu(self.pid)
        while True:
            if chan.ready(0.1):
                try:
                    data = chan.receive(_monotonic() + WAIT_LIMIT_S)
                except (EOFError, OSError, TimeoutError):
                    closed = self._read_events(seen)[0] or closed
                    if seen["timeout"]:
                        return self._timed_out(seen["timeout"][0], limit)
                    return self._exited(limit)
                break
            was_closed, imports = self._read_events(seen)
            closed = closed or was_closed
            if self._dead():       # it ended while a process it started holds its pipe open
                self._read_events(seen)
                if seen["timeout"]:
                    return self._timed_out(seen["timeout"][0], limit)
                return self._exited(limit)
            for kind, module in imports:
                importing, import_since = (module, _monotonic()) if kind == "import" else (None, 0.0)
            now = _monotonic()
            if seen["timeout"]:
                return self._timed_out(seen["timeout"][0], limit)
            if importing is not None:
                window, cpu_before = now, _child_cpu(self.pid)   # an import is never counted as waiting
                if now - import_since > IMPORT_LIMIT_S:
                    return self._timed_out("import " + importing, limit)
                continue
            if now - start > WALL_LIMIT_S:
                return self._timed_out("cpu", limit)
            if now - window > WAIT_LIMIT_S:
                cpu_now = _child_cpu(self.pid)
                if cpu_now is not None and cpu_before is not None and cpu_now - cpu_before < 0.05 * (now - window):
                    return self._timed_out("wait", limit)
                window, cpu_before = now, cpu_now       # it is computing, slowly: the watchdog times it
        try:
            reply = Reply(status="ok", **_loads(data))
        except _Forged as forged:
            self._end_child()
            return Reply(status="forged", what=str(forged))
        more_closed, _ = self._read_events(seen)
        for kind in ("forbidden", "not_allowed"):
            reply[kind] = reply[kind] + [n for n in seen[kind] if n not in reply[kind]]
        if reply["matrix"] is None and seen["matrix"]:
            try:
                reply["matrix"] = tuple(int(n) for n in seen["matrix"][0].split())
            except ValueError:
                reply["matrix"] = (0,)
        if closed or more_closed:
            reply["tampered"] = reply["tampered"] + ["the check's events pipe"]
        return reply

    def _dead(self) -> bool:
        """Whether the child has ended (without reaping it)."""
        if self._worker is not None:
            return not self._worker.process.is_alive()
        if self.pid is None:
            return True
        try:
            if hasattr(os, "waitid"):
                return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True
        return False

    def _read_events(self, seen: dict) -> tuple[bool, list]:
        """Fold the events the child sent since the last read into ``seen``; whether the
        channel was closed, and the import events in order."""
        data, closed = self._channel.events()
        imports = []
        for line in data.decode("utf-8", "replace").splitlines():
            kind, _, text = line.partition("\t")
            if kind in ("import", "imported"):
                imports.append((kind, text))
            elif kind in seen and text not in seen[kind]:
                seen[kind].append(text)
        return closed, imports

    def _exited(self, limit: float) -> Reply:
        how = self._reap()
        if how.get("signal") == "SIGXCPU":     # the CPU-time backstop (_limit_cpu) ended it
            return Reply(status="timed_out", cause="cpu", limit_s=limit, module="")
        return Reply(status="exited", **how)

    def _timed_out(self, what: str, limit: float) -> Reply:
        self._end_child()
        cause, _, module = what.partition(" ")
        cause = cause if cause in ("cpu", "wait", "import") else "cpu"
        limits = {"cpu": limit, "wait": WAIT_LIMIT_S, "import": IMPORT_LIMIT_S}
        return Reply(status="timed_out", cause=cause, limit_s=limits[cause], module=module)

    # -- ending
    def _reap(self) -> dict:
        """The child's end: ``exit_code`` or ``signal`` (its name); everything it started is ended."""
        pid, worker = self.pid, self._worker
        if pid is None:
            self._end_child()
            return {}
        status = None
        if worker is None:
            for _ in range(100):
                try:
                    done, raw = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    status = raw
                    break
                _sleep(0.01)
        else:
            worker.process.join(1)
        self._end_child(reaped=worker is None and status is not None)
        if worker is not None:
            code = worker.process.exitcode
            if code is not None and code < 0:
                try:
                    return {"signal": signal.Signals(-code).name}
                except ValueError:
                    return {"signal": str(-code)}
            return {"exit_code": code}
        if status is None:
            return {}
        if os.WIFSIGNALED(status):
            return {"signal": signal.Signals(os.WTERMSIG(status)).name}
        return {"exit_code": os.WEXITSTATUS(status)}

    def _end_child(self, reaped: bool = False) -> None:
        pid, self.pid = self.pid, None
        worker, self._worker = self._worker, None
        chan, self._channel = self._channel, None
        if worker is not None:
            worker.end()
        else:
            if chan is not None:
                chan.close()
            if pid is not None:
                found = _end_tree(pid, alive=not reaped)
                if not reaped:
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass
                _reap_quietly(found)

    def close(self) -> None:
        """End the child and every process it started, put the kernel's signal handlers back,
        and (spawn) start the worker for the next check; safe to call twice."""
        spawned = self._worker is not None or self.mode == "spawn"
        self._end_child()
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.uninstall()
            if spawned:
                prestart()
