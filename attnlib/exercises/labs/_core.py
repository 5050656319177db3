"""What every code lab shares: the feedback type, the inputs, calling the learner's function
safely, comparing, and choosing which mistake and which input to show."""
from __future__ import annotations

import functools
import textwrap
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from ... import corpus
from ..core import Feedback
from . import _sandbox
from ._sandbox import Sandbox, _decode, _rebuild_error
from .mistakes import MISTAKES

#: Tolerances of every comparison (float64 reference against the learner's result, which may
#: be float32).  The inputs with large scores use integer-valued q and k, so that a float32
#: ``q @ k^T`` is exact there.  The relative tolerance admits a float32 softmax written as
#: ``exp(x - logsumexp(x))``, exact in mathematics but off by about ``|x| * 6e-8`` (6e-4 at
#: ``x = 1e4``) in float32; every mistake the labs name is off by far more.
RTOL, ATOL = 1e-3, 1e-5

#: The largest score magnitude the softmax lab feeds in (``exp`` overflows far below it).
LARGE_SCORE = 10000.0

#: Encoder layer whose heads give the labs their real inputs (any layer would do).
REAL_LAYER = 4




@dataclass(frozen=True)
class LabFeedback(Feedback):
    """:class:`~attnlib.exercises.core.Feedback` with the key of the ``diagnosis``: a key of
    ``MISTAKES[lab]``, or one of ``"not_implemented"``, ``"raised"``, ``"not_callable"``,
    ``"wrong_type"``, ``"wrong_shape"``, ``"not_finite"``, ``"wrong_values"``, and, from
    running the function apart (:mod:`._sandbox`), ``"library_call"`` (it used a library
    function that does the lab's job, or in the backward lab built autograd's graph),
    ``"tampered"`` (it replaced a function of torch, numpy, math or attnlib, or wrote to the
    check's pipe), ``"not_allowed"`` (it started a thread or
    process, sent a signal, or used torch.jit / torch.compile), ``"memory"`` (it ran out of the
    child's memory), ``"timed_out"`` and ``"exited"``; ``None`` when correct.  Shown in a notebook as its text (``Correct. ...`` / ``Not yet. ...``)."""

    diagnosis: str | None = None

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's plain-text display, wrapped for the page
        p.text(self.wrapped())

    def wrapped(self, width: int = 72) -> str:
        """:attr:`text` with its prose lines wrapped at ``width`` (indented lines, the values
        of inputs and results, are kept as they are)."""
        return "\n".join(line if line.startswith(" ") else textwrap.fill(line, width, subsequent_indent="")
                         for line in self.text.splitlines())


class _Case:
    """One input of a lab: ``args`` (and ``kwargs``) for the learner's function, a ``label``
    that names it in feedback, and whether it is ``small`` enough to print in full.  A real
    input is given as ``make() -> (label, args)`` instead, run on first use, so that the
    encoder is loaded only when a learner's function gets that far."""

    def __init__(self, label, args=(), kwargs=None, small: bool = False, make: Callable | None = None):
        self._label, self._args, self.kwargs, self.small, self._make = label, args, kwargs or {}, small, make

    def memo(self, name: str, compute: Callable):
        """``compute()``, computed once per case (the mistakes' fingerprints on this input)."""
        cache = self.__dict__.setdefault("_memo", {})
        if name not in cache:
            cache[name] = compute()
        return cache[name]

    def _built(self):
        if self._make is not None:
            self._label, self._args = self._make()
            self._make = None
        return self

    @property
    def label(self) -> str:
        return self._built()._label

    @property
    def args(self) -> tuple:
        return self._built()._args

    def copy_args(self):
        """Fresh copies, so that an in-place learner cannot change the case."""
        copy = lambda a: a.clone() if isinstance(a, torch.Tensor) else a  # noqa: E731
        return tuple(copy(a) for a in self.args), {k: copy(a) for k, a in self.kwargs.items()}


class _Done(Exception):
    """Carries the feedback out of nested checks."""

    def __init__(self, feedback: LabFeedback):
        super().__init__(feedback.message)
        self.feedback = feedback


def _fail(message: str, diagnosis: str, hint: str | None = None):
    raise _Done(LabFeedback(False, message, hint, diagnosis))


#: Module prefixes whose Python functions are library code: one whose qualname contains a word of
#: a lab's ``families`` is refused there (a learner's own functions, in ``__main__`` or a module
#: of their own, never are, whatever their names).
LIBRARIES = ("torch", "transformers", "scipy", "xformers", "flash_attn", "torchtune")

#: Where a lab's ``families`` are looked for (:meth:`Refusal.describe` and the package docstring say it).
NAME_SCOPE = ("any torch function, `Tensor` method or attribute, or ATen operation (sparse, masked and fused variants "
              "included), and any Python function of attnlib or of " + ", ".join(LIBRARIES[:-1]) + " or "
              + LIBRARIES[-1] + " (its qualname),")

#: What the feedback shows when a lab that refuses autograd sees its graph being built.
AUTOGRAD_GRAPH = "autograd's graph (an operation on a tensor that requires grad)"


def _or(items: list) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _in_library(module: str) -> bool:
    return any(module == lib or module.startswith(lib + ".") for lib in LIBRARIES)


def _shown(module: str, qualname: str) -> str:
    """The public name of the library function ``module.qualname`` (where torch defines it is
    not where a learner reaches it): ``torch.nn.Softmax``, ``Tensor.backward``, ``torch.func.vjp``."""
    if module.startswith("torch.nn.modules.") and "." in qualname:   # nn.Softmax(dim)(x): its __init__, forward
        cls, method = qualname.rsplit(".", 1)
        return f"torch.nn.{cls if method == 'forward' or method.startswith('__') else qualname}"
    if module == "torch._tensor":
        return qualname
    if module.startswith("torch._functorch."):
        return f"torch.func.{qualname}"
    return f"{module}.{qualname}"


@dataclass(frozen=True)
class Refusal:
    """The library calls a lab refuses, because they would do its job, and what to say: the one
    source of what a lab refuses (the watches of :mod:`._sandbox` ask it; :meth:`describe`
    writes it for the package docstring's table and the book's lab sections).

    ``families``: words of the lab's job (``softmax``, ``attention``).  Refused is anything
    whose name contains one: a torch function, a ``Tensor`` method or attribute, an ATen
    operation (so ``_softmax``, ``_safe_softmax``, ``_masked_softmax``, ``_sparse_softmax`` and
    the fused attention kernels alike), the qualname of a Python function of attnlib or of a
    library in :data:`LIBRARIES` (``torch.nn.Softmax.forward``, Hugging Face's
    ``eager_attention_forward``).  Each word is chosen so that no operation a right solution
    uses contains it (``tests/test_lab_refusals.py`` checks every ATen operation and torch
    name).  ``torch``: names refused only whole (``grad``, a word that would also refuse
    ``requires_grad``), in the same places (a Python function's own name, not its class's).
    ``attnlib``: more qualnames of attnlib functions, exact (``=causal_mask``) or as substrings
    (``split_heads``).  ``autograd_graph``: any ATen operation on a tensor that requires grad,
    with grad mode on, is refused: building autograd's graph, which walking it by hand
    (``grad_fn``, ``next_functions``, calling its nodes) needs, is seen by the dispatch watch
    even where the torch function watch is switched off.  ``about`` and ``instead`` make the
    feedback: "This lab is about ``about``. ``instead``"."""

    about: str
    instead: str
    families: tuple = ()
    torch: tuple = ()
    attnlib: tuple = ()
    autograd_graph: bool = False

    def torch_refused(self, name: str) -> bool:
        """Whether a torch function, ``Tensor`` attribute or ATen op of this ``name`` does the
        lab's job (an overload, ``_softmax.default``, is its packet's name)."""
        name = name.split(".", 1)[0].lower()
        return name in self.torch or any(word in name for word in self.families)

    def graph_refused(self, args, kwargs) -> str | None:
        """The name to show when an ATen operation on ``args``/``kwargs`` builds autograd's
        graph (a tensor argument requires grad and grad mode is on) in a lab that refuses it."""
        if not self.autograd_graph or not torch.is_grad_enabled():
            return None
        stack = [args, kwargs or {}]
        while stack:
            item = stack.pop()
            if isinstance(item, torch.Tensor):
                if item.requires_grad:
                    return AUTOGRAD_GRAPH
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
        return None

    def python_refused(self, module: str, qualname: str) -> str | None:
        """The name to show when the Python function ``module.qualname`` does the lab's job."""
        q = qualname.lower()
        if module.startswith("attnlib") and not module.startswith("attnlib.exercises"):
            if any(q == rule[1:] if rule.startswith("=") else rule in q for rule in self.attnlib + self.families):
                import attnlib
                return f"attnlib.{qualname}" if getattr(attnlib, qualname, None) is not None else f"{module}.{qualname}"
            return None
        if _in_library(module) and (q.rsplit(".", 1)[-1] in self.torch or any(w in q for w in self.families)):
            return _shown(module, qualname)    # Python decompositions of ops (torch._decomp, _refs) included
        return None

    def describe(self, tick: str = "`", short: bool = False) -> str:
        """What this lab refuses, made from the fields above: a sentence for the book's lab
        section, or with ``short`` a phrase for the package docstring's table, where "a name"
        means what :data:`NAME_SCOPE` says.  ``tick`` quotes a name (```` `` ```` for
        reStructuredText)."""
        c = lambda s: f"{tick}{s}{tick}"  # noqa: E731
        parts = []
        if self.families:
            parts.append(("names containing " if short else NAME_SCOPE.replace("`", tick) + " whose name contains ")
                         + _or([c(w) for w in self.families]))
        if self.torch:
            parts.append(("names exactly " if short else "or whose name is exactly ") + _or([c(n) for n in self.torch]))
        exact = [c(r[1:]) for r in self.attnlib if r.startswith("=")]
        sub = [c(r) for r in self.attnlib if not r.startswith("=") and r not in self.families]
        if exact:
            parts.append("attnlib's " + _or(exact))
        if sub:
            parts.append(("attnlib names containing " if short else "attnlib's functions whose name contains ")
                         + _or(sub))
        if self.autograd_graph:
            walk = f"{c('grad_fn')}, {c('next_functions')}, calling its nodes"
            parts.append(f"building autograd's graph (an operation on a tensor that requires grad), so walking it by "
                         f"hand ({walk})" if short else
                         ("and " if parts else "") + "building autograd's graph at all (any operation on a tensor "
                         f"that requires grad), so walking it by hand ({walk}) is refused too")
        text = "; ".join(parts)
        return text if short else (text[:1].upper() + text[1:] + "." if text else "")


@dataclass(frozen=True)
class Lab:
    """One code lab, defined once: what the learner writes, what is refused, the inputs, the
    reference, the mistakes it recognises (their fingerprints) and every message.  The one
    grading loop, :func:`grade`, runs any of them.

    ``key``: its entry in ``MISTAKES`` (several checkers may share one, as the two RoPE labs
    do); ``checker``: the function's public name; ``what``: how feedback names the learner's
    function; ``writes``: the signature the learner writes; ``contract``: one line (the package
    docstring's table is made from these, :func:`lab_table`); ``refusal``.

    Grading hooks, each given a case (:class:`_Case`): ``cases()``, ``reference(case)``,
    ``convert(got, case, expected)`` (the learner's result in the graded form, or a failure),
    ``right(got, expected)``, ``fingerprints(case)`` (``{mistake key: what it returns}``),
    ``matches(got, fingerprint)``, ``usable(got)`` (a later result in the graded form, or
    None), ``show(case, key, expected, got)`` (text after a named mistake, or None),
    ``generic(case, expected, got)`` (the failure when no mistake matches), ``success(cases)``;
    optional ``errors`` (``(text in the exception, mistake key)``), ``on_raised(fn, err, case,
    index, passed)`` (a mistake key and text to name, or None), ``precheck(case, expected,
    got)`` (failures to look for before the fingerprints), ``matrix(case)`` (the online
    lab's score-matrix watch), ``sort_found`` (try shorter combinations of mistakes first)."""

    key: str
    checker: str
    what: str
    writes: str
    contract: str
    refusal: Refusal
    cases: Callable
    reference: Callable
    convert: Callable
    right: Callable
    fingerprints: Callable
    matches: Callable
    usable: Callable
    generic: Callable
    success: Callable
    show: Callable | None = None
    errors: tuple = ()
    on_raised: Callable | None = None
    precheck: Callable | None = None
    matrix: Callable | None = None
    sort_found: bool = True
    doc: str = ""

    def checker_function(self):
        """The public ``check_...(fn) -> LabFeedback`` of this lab (docstring ``doc``)."""
        lab = self

        def check(fn) -> LabFeedback:
            return run_lab(lab, fn)

        check.__name__ = check.__qualname__ = self.checker
        check.__doc__ = self.doc
        check.lab = self
        return check


#: What every lab that is about attention refuses: anything whose name contains ``attention``
#: (PyTorch's fused kernels, ``_scaled_dot_product_*``, ``_efficient_attention_forward``,
#: ``_native_multi_head_attention``, ``nn.MultiheadAttention``; Hugging Face's
#: ``eager_attention_forward``; attnlib's).
READY_MADE_ATTENTION = dict(families=("attention",))

#: Every lab, by checker name (filled as the lab modules are imported).
LABS: dict = {}


def lab_table(checkers) -> str:
    """The Markdown table of the labs named in ``checkers``: checker, what the learner writes,
    contract, and what is refused as doing the lab's job (from each :class:`Lab` and its
    :class:`Refusal`)."""
    rows = ["| checker | the learner writes | contract | refused (``library_call``) |", "|---|---|---|---|"]
    rows += [f"| :func:`{name}` | ``{LABS[name].writes}`` | {LABS[name].contract} | "
             f"{LABS[name].refusal.describe(tick='``', short=True)} |" for name in checkers]
    return "\n".join(rows)


def register(lab: Lab):
    """Record ``lab`` in :data:`LABS` and return its checker function."""
    LABS[lab.checker] = lab
    return lab.checker_function()


def _names(items: list) -> str:
    items = [f"`{x}`" for x in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class _Learner:
    """The learner's function as a checker sees it: each call runs in a
    :class:`~._sandbox.Sandbox` (a forked child on Linux), and what the sandbox saw becomes
    feedback: a refused library call or a replaced library function is the verdict of the
    whole check (:attr:`verdict`); a timeout or an ended process fails the input it happened
    on; printed output is counted and quoted at the end (:meth:`annotate`)."""

    def __init__(self, fn, lab: Lab):
        self.fn, self.lab, self.what = fn, lab, lab.what
        self.sandbox = Sandbox(fn, lab.refusal)
        self.verdict: LabFeedback | None = None
        self.output, self.output_chars = "", 0

    def close(self) -> None:
        self.sandbox.close()

    def run(self, case: "_Case", what: str, matrix: dict | None = None):
        """The learner's result on ``case`` (rebuilt in this process), or the learner's
        exception (rebuilt with the same type name), or a failure (:class:`_Done`)."""
        what = self.what if what == "function" else what
        left = _sandbox.CHECK_TIME_LIMIT_S - self.sandbox.spent
        if left <= 0:
            _fail(f"Your {what} used up the {_sandbox.CHECK_TIME_LIMIT_S:g} s of computing this check allows before "
                  f"it got to {case.label}. A correct one needs well under a second for all the inputs; look for a "
                  "slow loop (e.g. over every number of a tensor in Python).", "timed_out")
        limit = min(_sandbox.TIME_LIMIT_S, left)
        args, kwargs = case.copy_args()
        reply = self.sandbox.call(args, kwargs, matrix, limit)
        if reply.get("output_chars"):
            if not self.output_chars:
                self.output = reply.get("output", "")
            self.output_chars += reply["output_chars"]
        if reply.status == "timed_out":
            cause = reply.get("cause", "cpu")
            if cause == "import":
                module = reply.get("module") or "a module"
                _fail(f"Your {what} was still importing `{module}` after {reply['limit_s']:g} s on {case.label}, so "
                      "the check stopped it. That is not a loop in your code: the first use of a large library "
                      "loads it. Import it once in a cell of its own, then run the check again; or compute the "
                      "result with torch alone. Your notebook is unaffected: the check ran your function in a "
                      "separate process.", "timed_out")
            if cause == "wait":
                _fail(f"Your {what} waited for {reply['limit_s']:g} s on {case.label} without computing anything "
                      "(`time.sleep`, `input()`, a lock or a file that never answers), so the check stopped it. "
                      "A lab's function should compute its result from its inputs and return it. Your notebook is "
                      "unaffected: the check ran your function in a separate process.", "timed_out")
            _fail(f"Your {what} computed for {limit:g} s of processor time on {case.label} without returning, so the "
                  "check stopped it (a correct one takes a few milliseconds here; time spent importing a library "
                  "is not counted). Look for a loop that never ends, such as a `while` whose condition never "
                  "becomes false, or a loop over a list that keeps growing. Your notebook is unaffected: the check "
                  "ran your function in a separate process.", "timed_out")
        if reply.status == "unsendable":
            _fail(f"Your {what} could not be sent to the separate process the check runs it in ({reply['what']}). "
                  "On this platform the check sends the function by value, with what it uses from the notebook: "
                  "keep that to plain values (tensors, numbers, lists, modules) and create anything else (an open "
                  "file, a lock, a ctypes library) inside the function. Your notebook is unaffected.", "exited")
        if reply.status == "exited":
            how = (f"was killed by the signal {reply['signal']}"
                   + (" (often: it ran out of memory)" if reply["signal"] == "SIGKILL" else "") if "signal" in reply
                   else f"ended the Python process it ran in (exit status {reply.get('exit_code')})")
            _fail(f"Your {what} {how} on {case.label}: `os._exit` (or a crash) stops Python at once, without "
                  "returning anything. The check ran your function in a separate process, so your notebook "
                  "kernel is still running; a function should `return` its result, and `raise` an exception "
                  "to report a problem.", "exited")
        if reply.status == "forged":
            self.verdict = LabFeedback(
                False, f"The check received, on {case.label}, {reply.get('what', 'a reply')} in place of the one its "
                f"own code sends from the process that runs your {what}: something in your function wrote to the "
                "check's pipe. It is not accepted, and nothing from it was run.", None, "tampered")
            raise _Done(self.verdict)
        if reply.get("not_allowed"):
            self.verdict = LabFeedback(
                False, f"Your {what} uses {_names(reply['not_allowed'][:2])} (seen on {case.label}). The check "
                "watches what your function does in its own thread and process, so new threads and processes, "
                "signals to other processes, and compilers that run code where the watch cannot see "
                "(torch.jit, torch.compile) are not allowed in a lab. Compute the result directly, in the "
                "function itself.", None, "not_allowed")
            raise _Done(self.verdict)
        if reply.get("tampered"):
            changed = reply["tampered"]
            self.verdict = LabFeedback(
                False, f"Your {what} replaced {_names(changed[:4])}{' and more' if len(changed) > 4 else ''} while "
                "it ran (seen on " + case.label + "). A function that patches torch, NumPy or attnlib changes "
                "them for everything that runs after it, in every cell, and here it would change how your "
                "answer is checked, so it is not accepted. The check has undone the change: nothing changed "
                "in this notebook. Remove the assignment and compute the result instead.", None, "tampered")
            raise _Done(self.verdict)
        if reply.get("forbidden"):
            about, instead = self.lab.refusal.about, self.lab.refusal.instead
            first = sorted(reply["forbidden"], key=lambda n: n == AUTOGRAD_GRAPH)[0]   # a named call first
            uses = f"builds {first}" if first == AUTOGRAD_GRAPH else f"uses {_names([first])}"
            self.verdict = LabFeedback(
                False, f"Your {what} {uses} (seen on {case.label}). This lab is about {about}. {instead}", None,
                "library_call")
            raise _Done(self.verdict)
        if reply.get("matrix"):
            title, text = MISTAKES["online_softmax"]["full_matrix"]
            self.verdict = LabFeedback(
                False, f"{title}: {text}\nShown by {case.label}: your function made a tensor or array of shape "
                f"{tuple(reply['matrix'])}: scores over all the keys at once (a row of the (T_q, T_k) score matrix, or "
                "more), where working block by block holds at most block_size of them per query. The check grades "
                "the values only when no such tensor or array is made.", None, "full_matrix")
            raise _Done(self.verdict)
        status, payload = reply["result"]
        if status == "error":
            name, _, text = payload
            if name == "MemoryError" or "can't allocate memory" in text or "not enough memory" in text:
                _fail(f"Your {what} ran out of the memory the check allows on {case.label} (it may take "
                      f"{_sandbox.CHILD_MEMORY_BYTES / 2**30:g} GiB beyond what the notebook already uses). A correct "
                      "one needs a few megabytes here; look for a tensor far larger than the inputs, e.g. one that "
                      "grows in a loop or an outer product over every pair of positions.", "memory")
            raise _rebuild_error(*payload)
        try:
            return _decode(payload)
        except _sandbox._Forged as forged:
            self.verdict = LabFeedback(
                False, f"The check received, on {case.label}, {forged} from the process that runs your {what}: "
                "something in your function wrote to the check's pipe. It is not accepted.", None, "tampered")
            raise _Done(self.verdict)

    def annotate(self, fb: LabFeedback) -> LabFeedback:
        """``fb`` with a note on what the function printed, and on how it was run when that
        was not in a separate process."""
        notes = []
        if self.output_chars:
            head = self.output[:_sandbox.OUTPUT_EXCERPT_CHARS]
            more = "" if self.output_chars <= len(head) else "…"
            notes.append(f"(Your {self.what} printed {self.output_chars:,} characters while it was checked, kept out "
                         f"of this cell's output; they begin: {head!r}{more})")
        if self.sandbox.mode == "inprocess":
            why = (f"because {self.sandbox.fallback}" if self.sandbox.fallback
                   else "as ATTNLIB_LAB_ISOLATION=inprocess asks")
            notes.append(f"(The check ran your function inside this kernel, {why}: there is no time or memory limit, "
                         "and a crash in native code would end the kernel. The library functions it replaces, the "
                         "settings it changes and the files it closes or redirects are refused or put back.)")
        if not notes:
            return fb
        return LabFeedback(fb.correct, fb.message + "\n" + "\n".join(notes), fb.hint, fb.diagnosis)


def run_lab(lab: Lab, fn) -> LabFeedback:
    """Check the learner's ``fn`` with ``lab``: it runs through a :class:`_Learner` (isolated,
    timed, watched), and whatever happens, a :class:`LabFeedback` comes back."""
    if not callable(fn):
        return LabFeedback(False, f"Expected your function itself (e.g. `{lab.checker[6:]}` without "
                           f"parentheses), got a {type(fn).__name__}.", None, "not_callable")
    learner = _Learner(fn, lab)
    try:
        try:
            fb = grade(lab, learner)
        except _Done as done:
            fb = done.feedback
        except Exception as err:  # noqa: BLE001 - a learner's function must never raise through
            fb = LabFeedback(False, f"Your function could not be checked ({type(err).__name__}: {err}).",
                             None, "raised")
        if learner.verdict is not None:
            fb = learner.verdict
        return learner.annotate(fb)
    finally:
        learner.close()


def grade(lab: Lab, fn) -> LabFeedback:
    """The one grading loop of every lab.  Input after input, smallest first: call the
    learner's function (a :class:`_Learner`, or a plain function, run as is); convert what it
    returned; go on if it equals the reference; else find the mistakes whose fingerprints it
    matches, narrow them with the later inputs, and name the one that fits, on the smallest
    input that shows it alone; else fail with the lab's generic message.  Raises
    :class:`_Done` with the failure; returns the success feedback."""
    cases = lab.cases()
    reference = lambda c: c.memo("ref", lambda: lab.reference(c))        # noqa: E731
    fingerprints = lambda c: c.memo("fp", lambda: lab.fingerprints(c))   # noqa: E731
    passed: list = []
    for i, case in enumerate(cases):
        expected = reference(case)
        try:
            got = _call(fn, case, lab.what, matrix=lab.matrix(case) if lab.matrix else None)
        except _Raised as r:
            hint = lab.on_raised(fn, r.err, case, i, passed) if lab.on_raised else None
            _raised(r.err, case, lab, lab.errors, i, hint)
        got = lab.convert(got, case, expected)
        if lab.right(got, expected):
            passed.append(case)
            continue
        if lab.precheck is not None:
            lab.precheck(case, expected, got)
        found = [key for key, value in fingerprints(case).items() if value is not None and lab.matches(got, value)]
        if lab.sort_found:
            found.sort(key=len)
        if found:
            def matches(key, c, g):
                value = fingerprints(c).get(key)
                return value is not None and lab.matches(g, value)

            later = _later_results(fn, cases, i, lab.usable)
            key = _pick(found, later, matches)[0]
            case, got = _showing(key, found, (case, got), later, matches, lambda c, g: lab.right(g, reference(c)))
            expected = reference(case)
            show = (lambda: lab.show(case, key, expected, got)) if lab.show else None
            _wrong(case, lab.what, key, expected if isinstance(expected, torch.Tensor) else None,
                   got if isinstance(got, torch.Tensor) else None, lab=lab.key, show=show)
        lab.generic(case, expected, got)
    return LabFeedback(True, lab.success(cases))


def _fmt(t: torch.Tensor) -> str:
    """A small tensor's values, rounded for reading: nested lists, or a 1/0 grid for bools."""
    t = t.detach().cpu()
    if t.dtype == torch.bool:
        return "\n".join("    " + " ".join("1" if c else "0" for c in row) for row in t.reshape(-1, t.shape[-1]).tolist()) \
            if t.dim() >= 1 and t.numel() else str(t.tolist())

    def fmt(x):
        if isinstance(x, list):
            return "[" + ", ".join(fmt(y) for y in x) + "]"
        return f"{x:.4g}"

    return fmt(t.double().tolist())


def _shape(t) -> tuple:
    return tuple(t.shape)


def _call(fn, case: _Case, what: str, matrix: dict | None = None):
    """The learner's result on ``case``; an exception becomes a failure naming the input.
    ``fn`` is a :class:`_Learner` (every checker's), or a plain function (run here, as is).
    ``matrix``: the score-matrix watch of the online lab (see :class:`~._sandbox._Watch`)."""
    try:
        if isinstance(fn, _Learner):
            return fn.run(case, what, matrix)
        args, kwargs = case.copy_args()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)
    except (KeyboardInterrupt, _Done):
        raise
    except NotImplementedError:
        _fail(f"Your {what} is not implemented yet: replace `raise NotImplementedError` with your code "
              "and run the cell again.", "not_implemented")
    except BaseException as err:  # noqa: BLE001 - SystemExit included: nothing raises through
        raise _Raised(err) from None


class _Raised(Exception):
    def __init__(self, err: BaseException):
        super().__init__(str(err))
        self.err = err


def _raised_message(err: BaseException, case: _Case) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return (f"Your function raised {type(err).__name__}" + (f" ({text})" if text else "")
            + f" on {case.label}.")


def _as_tensor_result(got, case: _Case, what: str, name: str = "the result") -> torch.Tensor:
    """``got`` if it is a real (floating, integer or bool) torch tensor, else a failure saying
    what arrived (a complex tensor is refused: its real part alone would otherwise compare)."""
    if isinstance(got, torch.Tensor):
        if got.is_complex():
            _fail(f"On {case.label}, {name} of your {what} is a complex tensor ({got.dtype}); attention works in "
                  "real numbers. Return a real tensor (float32 or float64).", "wrong_type")
        return got
    kind = type(got).__module__ + "." + type(got).__name__ if type(got).__module__ != "builtins" else type(got).__name__
    extra = " (return a torch tensor, e.g. torch.from_numpy(...))" if "numpy" in kind else ""
    if got is None:
        extra = " (is a `return` missing?)"
    _fail(f"On {case.label}, {name} of your {what} is a {kind}, not a torch tensor{extra}.", "wrong_type")


def _close(a, b) -> bool:
    """Same shape and equal within the tolerances (NaN equal to NaN), compared in float64."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    if a.is_complex() or b.is_complex():      # .double() would drop the imaginary part
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    try:
        return bool(torch.allclose(a.detach().double().cpu(), b.detach().double().cpu(), rtol=RTOL, atol=ATOL,
                                   equal_nan=True))
    except (RuntimeError, TypeError):
        return False


def _finite(t: torch.Tensor) -> bool:
    return t.dtype == torch.bool or bool(torch.isfinite(t.detach().double()).all())


def finite_tensor(got):
    """``got`` if it is a tensor with no NaN or infinity (a later result worth comparing), else None."""
    return got if isinstance(got, torch.Tensor) and _finite(got) else None


def any_tensor(got):
    """``got`` if it is a tensor, else None."""
    return got if isinstance(got, torch.Tensor) else None


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed)) * scale


def _ints(*shape, seed: int, high: int) -> torch.Tensor:
    """Integer-valued float32 entries in ``[-high, high]``: sums of their products are exact."""
    return torch.randint(-high, high + 1, shape, generator=_gen(seed)).float()


@functools.lru_cache(maxsize=None)
def _real_head() -> tuple:
    """Real inputs: tokens of :data:`attnlib.corpus.RUNNING` and the queries, keys and values
    of every head of layer :data:`REAL_LAYER` of the course's encoder, each ``(H, T, d_k)``,
    and the layer's input ``X`` ``(T, d_model)``.  Loads the encoder once."""
    from ...encoder import head_qkv, layer_input

    tokens, q, k, v = head_qkv(corpus.RUNNING, REAL_LAYER, None)
    _, X = layer_input(corpus.RUNNING, REAL_LAYER)
    detach = lambda t: t.detach().float().cpu()  # noqa: E731
    return tuple(tokens), detach(q), detach(k), detach(v), detach(X)


def _pick(candidates: list, later: list, matches: Callable) -> list:
    """Candidate mistakes that fit the first failing case, narrowed by the later cases (where
    the learner's result is known and finite): a candidate that disagrees there is dropped,
    unless that would drop them all."""
    for case, got in later:
        kept = [c for c in candidates if matches(c, case, got)]
        if kept:
            candidates = kept
        if len(candidates) == 1:
            break
    return candidates


def _showing(key, found: list, first: tuple, later: list, matches: Callable, right: Callable) -> tuple:
    """The smallest ``(case, result)`` that shows mistake ``key`` and no other of ``found``:
    the learner's result is wrong there and matches ``key`` alone (or ``key`` with mistakes
    that this input cannot show, such as a wrong scale when ``d_k = 1``).  Cases are ordered
    smallest first; falls back to ``first`` (the first failing case)."""
    def contains_key(other):  # mistake combinations that include key's mistakes (invisible extras)
        return isinstance(key, tuple) and isinstance(other, tuple) and set(key) < set(other)

    rivals = [other for other in found if other != key and not contains_key(other)]
    for case, got in [first, *later]:
        if right(case, got) or not matches(key, case, got):
            continue
        if not any(matches(other, case, got) for other in rivals):
            return case, got
    return first


def _later_results(fn, cases: list, start: int, convert: Callable) -> list:
    """``(case, result)`` for the cases after ``start`` on which the learner's function runs
    and gives a usable result (``convert`` returns None otherwise)."""
    out = []
    for case in cases[start + 1:]:
        try:
            got = convert(_call(fn, case, "function"))
        except (_Raised, _Done):
            continue
        if got is not None:
            out.append((case, got))
    return out


def _describe(keys, lab: str) -> str:
    """``"Title: explanation"`` for one mistake, or a numbered list for several."""
    items = [MISTAKES[lab][k.split("/")[0]] for k in keys]
    if len(items) == 1:
        title, text = items[0]
        return f"{title}: {text}"
    return f"{len(items)} mistakes at once: " + " ".join(f"({i}) {t}: {x}" for i, (t, x) in enumerate(items, 1))


def _sums_text(got: torch.Tensor, dim: int, shape) -> str:
    if got.shape != shape or got.dtype == torch.bool or not _finite(got):
        return ""
    sums = got.double().sum(dim=dim)
    lo, hi = float(got.min()), float(got.max())
    parts = []
    if lo < -ATOL or hi > 1 + ATOL:
        parts.append(f"entries run from {lo:.4g} to {hi:.4g}, outside [0, 1]")
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
        parts.append(f"sums along dim={dim} run from {float(sums.min()):.6g} to {float(sums.max()):.6g}, not 1")
    return (" Your result: " + "; ".join(parts) + ".") if parts else ""


def _raised(err: BaseException, case: _Case, lab: Lab, patterns, index: int, batched_hint: tuple | None = None):
    """Fail for an exception, naming a known mistake when its message gives it away
    (``patterns``: ``(text in the message, mistake key)``), or the mistake of
    ``batched_hint`` (``(key, text)``) when an earlier input passed."""
    text = f"{type(err).__name__}: {err}"
    for needle, key in patterns:
        if needle in text:
            _fail(_raised_message(err, case) + " " + _describe([key], lab.key), key)
    if batched_hint and index > 0:
        _fail(_raised_message(err, case) + " " + batched_hint[1], batched_hint[0])
    _fail(_raised_message(err, case), "raised",
          hint="Run your function on this input yourself and read the last line of the traceback.")


def _wrong(case: _Case, what: str, keys, expected, got, lab: str | None = None, show: Callable | None = None):
    lab = lab or what
    keys = [keys] if isinstance(keys, str) else list(keys)
    msg = f"{_describe(keys, lab)}\nShown by {case.label}."
    if show is not None:
        msg += show()
    elif case.small and isinstance(got, torch.Tensor) and got.numel() <= 24 and expected.numel() <= 24:
        args = ", ".join(_fmt(a) for a in case.args if isinstance(a, torch.Tensor))
        msg += f"\n  input:    {args}\n  expected: {_fmt(expected)}\n  yours:    {_fmt(got)}"
    elif isinstance(got, torch.Tensor) and not _finite(got):
        n = int((~torch.isfinite(got.detach().double())).sum())
        msg += f" Your result has {n} NaN or infinite value(s) out of {got.numel()}."
    _fail(msg, keys[0].split("/")[0])


def _generic_tensor(case: _Case, what: str, expected: torch.Tensor, got: torch.Tensor, extra: str = ""):
    """Failure for a tensor that is not one of the known mistakes: shape, then NaN, then values."""
    if got.shape != expected.shape:
        _fail(f"On {case.label}, your {what} has shape {_shape(got)}; expected {_shape(expected)}.", "wrong_shape")
    if not _finite(got):
        n = int((~torch.isfinite(got.detach().double())).sum())
        _fail(f"On {case.label}, your {what} contains {n} NaN or infinite value(s).", "not_finite",
              hint="Look for exp() of a large number, 0/0, or -inf - (-inf).")
    verb = "differ" if what.endswith("s") else "differs"
    msg = f"On {case.label}, your {what} {verb} from the reference." + extra
    if case.small and got.numel() <= 24:
        msg += f"\n  expected: {_fmt(expected)}\n  yours:    {_fmt(got)}"
    else:
        err = (got.detach().double() - expected.double()).abs()
        msg += f" Largest difference {float(err.max()):.3g} at index {tuple(int(i) for i in _unravel(int(err.argmax()), err.shape))}."
    _fail(msg, "wrong_values")


def _unravel(flat: int, shape) -> list:
    out = []
    for n in reversed(shape):
        out.append(flat % n)
        flat //= n
    return list(reversed(out))


def mistakes_markdown(lab: str) -> str:
    """The mistakes the checker of ``lab`` recognises, as a Markdown bullet list, followed by a
    paragraph on what it refuses as doing the lab's job (its :class:`~._core.Refusal`'s
    ``describe()``), for the book's lab sections, so that neither can drift from the checker.

    Raises:
        KeyError: no such lab; the message lists the labs.
    """
    if lab not in MISTAKES:
        raise KeyError(f"no lab {lab!r}; known: {sorted(MISTAKES)}")
    text = "\n".join(f"- **{title}**: {text}" for title, text in MISTAKES[lab].values())
    refused = list(dict.fromkeys(spec.refusal.describe() for spec in LABS.values() if spec.key == lab))
    for line in refused:   # the two RoPE labs share one refusal: said once
        text += ("\n\n**Refused**, because it would do the lab's job for you (`library_call`): "
                 f"{line[:1].lower()}{line[1:]}")
    return text
