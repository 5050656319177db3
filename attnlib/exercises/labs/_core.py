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
    ``"wrong_type"``, ``"wrong_shape"``, ``"not_finite"``, ``"wrong_values"``; ``None`` when
    correct.  Shown in a notebook as its text (``Correct. ...`` / ``Not yet. ...``)."""

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


def _lab(func):
    """Decorator of the checkers: whatever happens, a :class:`LabFeedback` comes back."""

    @functools.wraps(func)
    def wrapper(fn, *args, **kwargs):
        if not callable(fn):
            return LabFeedback(False, f"Expected your function itself (e.g. `{func.__name__[6:]}` without "
                               f"parentheses), got a {type(fn).__name__}.", None, "not_callable")
        try:
            return func(fn, *args, **kwargs)
        except _Done as done:
            return done.feedback
        except Exception as err:  # noqa: BLE001 - a learner's function must never raise through
            return LabFeedback(False, f"Your function could not be checked ({type(err).__name__}: {err}).",
                               None, "raised")

    return wrapper


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


def _call(fn, case: _Case, what: str):
    """The learner's result on ``case``; an exception becomes a failure naming the input."""
    args, kwargs = case.copy_args()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)
    except KeyboardInterrupt:
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
    """``got`` if it is a floating or bool torch tensor, else a failure saying what arrived."""
    if isinstance(got, torch.Tensor):
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
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    try:
        return bool(torch.allclose(a.detach().double().cpu(), b.detach().double().cpu(), rtol=RTOL, atol=ATOL,
                                   equal_nan=True))
    except (RuntimeError, TypeError):
        return False


def _finite(t: torch.Tensor) -> bool:
    return t.dtype == torch.bool or bool(torch.isfinite(t.detach().double()).all())


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


def _raised(err: BaseException, case: _Case, what: str, patterns, index: int, batched_hint: str | None = None):
    """Fail for an exception, naming a known mistake when its message gives it away."""
    text = f"{type(err).__name__}: {err}"
    lab = {"softmax": "softmax", "attention": "attention", "causal mask": "causal_mask",
           "split_heads": "split_heads", "online softmax attention": "online_softmax"}[what]
    for needle, key in patterns:
        if needle in text:
            _fail(_raised_message(err, case, ) + " " + _describe([key], lab), key)
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
