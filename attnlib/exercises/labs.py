"""Code labs: the learner writes the mechanism, a checker names the bug (chapters 4, 5, 6, 9).

Each checker takes the learner's function, runs it on several seeded random inputs and real
ones (a head of the course's pretrained encoder on :data:`attnlib.corpus.RUNNING`), ordered
from the smallest to the largest, and compares the result with attnlib's own reference
(:func:`attnlib.softmax`, :func:`attnlib.scaled_dot_product_attention`,
:func:`attnlib.causal_mask`, :func:`attnlib.split_heads`, :func:`attnlib.tiled_attention`).
On the first input where the two differ, it recognises the classic mistakes listed in
:data:`MISTAKES` by computing each mistake's output on that input (a fingerprint) and naming
the one the learner's output matches, with that input, the expected and the actual result.

| checker | the learner writes | contract |
|---|---|---|
| :func:`check_softmax` | ``softmax(x, dim=-1)`` | same shape; entries in [0, 1]; sum 1 along ``dim``; no overflow at 1e4 |
| :func:`check_attention` | ``attention(q, k, v, mask=None) -> (out, weights)`` | ``softmax(Q K^T / sqrt(d_k))`` with a boolean mask (True = may attend) |
| :func:`check_causal_mask` | ``causal_mask(T)`` | ``(T, T)`` bool, True where ``j <= i`` |
| :func:`check_split_heads` | ``split_heads(x, n_heads)`` | ``(B, T, d_model) -> (B, H, T, d_head)`` |
| :func:`check_online_softmax_attention` | ``online_softmax_attention(q, k, v, block_size)`` | unmasked attention, keys visited in blocks with a running max and sum |

Nothing the learner writes raises through a checker: an exception, a wrong type or shape, NaN
all become a :class:`LabFeedback` (a :class:`~attnlib.exercises.core.Feedback` that also
carries the key of its ``diagnosis``) naming the input that triggered it.  Inputs are copied
before each call, so a function that works in place cannot corrupt the reference.  Rows whose
every key is masked are never used: they are outside every contract here.

Unlike the rest of :mod:`attnlib.exercises` this module needs torch (it runs the learner's
PyTorch code), so it is not shipped to the static page's Pyodide and is not imported by the
package's ``__init__``; the page shows the lab's contract and a launch link instead.

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key
width, ``d_v`` value width, ``d_model`` model width, ``d_head = d_model / H``.

>>> import attnlib
>>> check_causal_mask(attnlib.causal_mask).correct
True
>>> fb = check_causal_mask(lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))
>>> fb.diagnosis, fb.message.splitlines()[0][:14]
('inverted', 'Mask inverted:')
"""
from __future__ import annotations

import functools
import itertools
import math
import textwrap
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from .. import corpus
from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ..multihead import split_heads
from ..softmax import softmax
from ..tiled import tiled_attention
from .core import Feedback

__all__ = [
    "LabFeedback", "MISTAKES", "mistakes_markdown", "check_softmax", "check_attention",
    "check_causal_mask", "check_split_heads", "check_online_softmax_attention",
]

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


#: ``log`` of the largest float32 / float64: ``exp`` of anything larger is ``inf``.
_EXP_LIMIT32 = math.log(torch.finfo(torch.float32).max)
_EXP_LIMIT64 = math.log(torch.finfo(torch.float64).max)


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


# ------------------------------------------------------------------ the mistakes each lab names

#: ``{lab: {key: (title, what it is, in a learner's words)}}``: every mistake a checker
#: recognises.  The book's lab sections list them with :func:`mistakes_markdown`.
MISTAKES: dict[str, dict[str, tuple[str, str]]] = {
    "softmax": {
        "wrong_axis": ("Softmax over the wrong axis",
                       "the result sums to 1 along another dimension than `dim` (columns instead of rows)."),
        "ignores_dim": ("The `dim` argument is ignored",
                        "the function always normalises the last dimension, whatever `dim` says."),
        "no_max_subtraction": ("No maximum subtracted",
                               f"`exp` of a score above about {_EXP_LIMIT32:.1f} (float32) or "
                               f"{_EXP_LIMIT64:.1f} (float64) is `inf`, and `inf / inf` is NaN; "
                               "subtracting each row's maximum first changes nothing mathematically "
                               "and prevents it."),
        "global_max": ("Maximum of the whole tensor subtracted",
                       "a row whose scores are far below the global maximum underflows to `0 / 0`; "
                       "subtract each row's own maximum."),
        "missing_keepdim": ("A reduction without `keepdim=True`",
                            "`sum` or `max` along `dim` drops that dimension, so dividing by it "
                            "broadcasts along the wrong axis (or fails)."),
        "max_returns_pair": ("`torch.max(x, dim)` used as a tensor",
                             "with a `dim` it returns `(values, indices)`; use `.values`, or `amax`."),
        "no_normalisation": ("Not normalised",
                             "the exponentials are returned without dividing by their sum."),
        "normalised_over_everything": ("Normalised over the whole tensor",
                                       "dividing by the sum of every entry makes the whole tensor, "
                                       "not each slice along `dim`, sum to 1."),
        "no_exp": ("No exponential",
                   "dividing the scores by their sum is not a softmax: weights can be negative "
                   "or above 1."),
        "log_softmax": ("Log-softmax returned",
                        "the result is the logarithm of the weights (all entries <= 0)."),
    },
    "attention": {
        "no_scaling": ("No scaling",
                       "the scores are `Q K^T`, not `Q K^T / sqrt(d_k)`; large `d_k` then "
                       "saturates the softmax."),
        "scaled_by_d_k": ("Scaled by d_k instead of sqrt(d_k)",
                          "dividing by `d_k` shrinks the scores too much, making the weights "
                          "too flat."),
        "scaled_up": ("Multiplied by sqrt(d_k)",
                      "the scores are multiplied by `sqrt(d_k)` instead of divided by it."),
        "other_scale": ("Another scale factor",
                        "the weights are a softmax of `c * Q K^T` with a `c` other than "
                        "`1 / sqrt(d_k)`."),
        "scaled_after_softmax": ("Scaled after the softmax",
                                 "dividing the weights by `sqrt(d_k)` makes rows sum to "
                                 "`1/sqrt(d_k)`; the scale belongs inside, on the scores."),
        "softmax_wrong_axis": ("Softmax over the wrong axis",
                               "the weights sum to 1 down each column (over queries); each row "
                               "(one query, over the keys) must sum to 1."),
        "mask_inverted": ("Mask inverted",
                          "True and False swapped: the keys the query may attend to are removed "
                          "and the others kept. Here `True` means *may attend*, as in PyTorch's "
                          "`scaled_dot_product_attention`."),
        "mask_ignored": ("Mask ignored", "the mask argument has no effect."),
        "mask_after_softmax": ("Masked after the softmax, not renormalised",
                               "zeroing weights after the softmax leaves rows that sum to less "
                               "than 1; mask the scores (with `-inf`) before it."),
        "mask_added": ("Boolean mask added to the scores",
                       "True becomes +1 and False 0: that nudges the scores instead of "
                       "removing keys."),
        "masked_to_zero": ("Masked scores set to 0",
                           "a score of 0 still has weight `exp(0)`; a removed key needs `-inf` "
                           "(or the dtype's minimum)."),
        "no_max_subtraction": ("Hand-written softmax without the maximum subtracted",
                               "large scores overflow `exp` to `inf` and the weights to NaN."),
        "scores_transposed": ("Scores transposed (K Q^T)",
                              "rows must be queries and columns keys: `scores = Q K^T`, shape "
                              "`(..., T_q, T_k)`."),
        "batched_transpose": ("Transposing the wrong dimensions of a batched tensor",
                              "`k.T`, `k.t()` or `k.transpose(0, 1)` works for one `(T_k, d_k)` "
                              "matrix but not for `(B, H, T_k, d_k)`; transpose the last two: "
                              "`k.transpose(-2, -1)`."),
        "mask_not_broadcast": ("A mask that does not broadcast",
                               "indexing `scores[~mask]` needs a mask of the scores' full shape; "
                               "`scores.masked_fill(~mask, float('-inf'))` or `torch.where` broadcast "
                               "a `(T_q, T_k)` or `(B, 1, 1, T_k)` mask."),
        "returns_swapped": ("`(weights, out)` returned",
                            "the contract returns `(out, weights)`, in that order."),
        "out_from_scores": ("Output from the scores",
                            "`out` must be `weights @ v`, the weights after the softmax, not the "
                            "scores."),
    },
    "causal_mask": {
        "inverted": ("Mask inverted",
                     "True marks the future (the cells to hide). In this course, as in "
                     "PyTorch's `scaled_dot_product_attention`, True means *may attend*."),
        "future_included": ("Future included (transposed)",
                            "True on and above the diagonal lets query `i` see keys `j > i`, "
                            "the tokens it must predict."),
        "diagonal_dropped": ("Diagonal dropped",
                             "query `i` may attend to itself (`j = i`); only `j > i` is hidden."),
        "off_by_one": ("Off by one",
                       "the boundary is shifted: keys `j <= i + 1` (or fewer) instead of `j <= i`."),
        "all_true": ("Nothing masked", "every cell is True, so every query sees the future."),
        "not_bool": ("Not a boolean mask",
                     "the cells are right but the dtype is not `torch.bool`; convert with "
                     "`.bool()`."),
        "additive": ("Additive mask returned",
                     "0 and `-inf` is the additive form; the contract asks for the boolean "
                     "one (True = may attend)."),
    },
    "split_heads": {
        "missing_transpose": ("Heads not moved before time",
                              "the result is `(B, T, H, d_head)`: after the reshape, "
                              "`transpose(1, 2)` gives `(B, H, T, d_head)`."),
        "mixes_tokens": ("A reshape that mixes tokens across heads",
                         "reshaping straight to `(B, H, T, d_head)` reads the numbers in memory "
                         "order, so a head gets pieces of several tokens. Split the features "
                         "first, `(B, T, H, d_head)`, then transpose."),
        "interleaved": ("Strided features",
                        "head `h` takes every `H`-th feature (`h, h + H, ...`) instead of the "
                        "contiguous slice `h*d_head : (h+1)*d_head`: the reshape was "
                        "`(B, T, d_head, H)`."),
        "heads_in_batch": ("Heads folded into the batch",
                           "the result is `(B*H, T, d_head)`; the contract keeps heads as their "
                           "own dimension, `(B, H, T, d_head)`."),
        "tokens_and_features_swapped": ("Tokens and features swapped",
                                        "the result is `(B, H, d_head, T)`: one transpose too many "
                                        "(or `permute(0, 2, 3, 1)`)."),
        "float_d_head": ("d_head computed with `/`",
                         "`d_model / n_heads` is a float; shapes need the integer `//`."),
    },
    "online_softmax": {
        "no_rescale": ("Running sum and output never rescaled",
                       "when a later block raises the running maximum, what was accumulated "
                       "relative to the old maximum must be multiplied by "
                       "`exp(m_old - m_new)`."),
        "no_rescale_sum": ("Running sum not rescaled",
                           "the output accumulator is rescaled by `exp(m_old - m_new)` when the "
                           "maximum grows, but the running sum `l` is not."),
        "no_rescale_acc": ("Output accumulator not rescaled",
                           "the running sum is rescaled when the maximum grows, but the "
                           "weighted sum of values is not."),
        "inverted_rescale": ("Rescaled by exp(m_new - m_old)",
                             "the correction factor is inverted; it is `exp(m_old - m_new)`, at "
                             "most 1."),
        "block_max_only": ("Each block uses its own maximum",
                           "the exponentials of each block are taken relative to that block's "
                           "maximum, so blocks are summed on different scales; keep one running "
                           "maximum and rescale."),
        "normalises_each_block": ("Each block normalised separately",
                                  "a softmax within each block, summed over blocks, weighs every "
                                  "block as 1."),
        "no_final_division": ("No final division",
                              "the accumulated `sum_j exp(s_j - m) v_j` must be divided by the "
                              "running sum `l` at the end."),
        "max_starts_at_zero": ("Running maximum started at 0",
                               "start it at `-inf`: from 0, a query whose scores are all far below 0 "
                               "gets `exp(s - 0) = 0` for every key, and `0 / 0` is NaN."),
        "no_max": ("No running maximum",
                   "`exp` of large scores overflows to `inf` and the output to NaN."),
        "no_scaling": ("No scaling", "the scores are `q k^T`, not `q k^T / sqrt(d_k)`."),
        "scaled_by_d_k": ("Scaled by d_k instead of sqrt(d_k)",
                          "dividing by `d_k` makes the weights too flat."),
        "full_matrix": ("The whole score matrix at once",
                        "the output is right, but the function computes a `(T_q, T_k)` score "
                        "matrix; the point is never to hold it, only `(T_q, block_size)` tiles."),
    },
}


def mistakes_markdown(lab: str) -> str:
    """The mistakes the checker of ``lab`` recognises, as a Markdown bullet list (for the
    book's lab sections, so the list shown cannot drift from the checker).

    Raises:
        KeyError: no such lab; the message lists the labs.
    """
    if lab not in MISTAKES:
        raise KeyError(f"no lab {lab!r}; known: {sorted(MISTAKES)}")
    return "\n".join(f"- **{title}**: {text}" for title, text in MISTAKES[lab].values())


# ------------------------------------------------------------------------------ shared machinery

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
    from ..encoder import head_qkv, layer_input

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


# ------------------------------------------------------------------------------------- softmax

def _softmax_cases() -> list[_Case]:
    big = torch.tensor([LARGE_SCORE, LARGE_SCORE - 1, LARGE_SCORE - 2])
    two_scales = torch.stack([big, -big])
    L = int(LARGE_SCORE)
    small = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 0.0]])
    cases = [
        _Case("x = [1, 2, 3] (shape (3,), dim=-1)", (torch.tensor([1.0, 2.0, 3.0]),), {"dim": -1}, True),
        _Case("x of shape (2, 3) with dim=-1", (small,), {"dim": -1}, True),
        _Case("x of shape (2, 3) with dim=0", (small,), {"dim": 0}, True),
        _Case(f"x = [{L}, {L - 1}, {L - 2}] (large scores, dim=-1)", (big,), {"dim": -1}, True),
        _Case(f"x of shape (2, 3) with rows near +{L} and -{L} (dim=-1)", (two_scales,), {"dim": -1}, True),
        _Case("random x of shape (2, 3, 5, 7) (B, H, T_q, T_k), dim=-1", (_randn(2, 3, 5, 7, seed=1, scale=3.0),),
              {"dim": -1}),
        _Case("random x of shape (4, 6, 5) with dim=1", (_randn(4, 6, 5, seed=2, scale=3.0),), {"dim": 1}),
        _Case("random x of shape (3, 4, 5) with dim=-3", (_randn(3, 4, 5, seed=3, scale=3.0),), {"dim": -3}),
    ]
    def real(factor):
        def make():
            _, q, k, _, _ = _real_head()
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])    # (H, T, T), real scaled scores
            what = "" if factor == 1 else f" times {factor}"
            return f"the real scores of layer {REAL_LAYER}'s heads{what}, shape {_shape(scores)}, dim=-1", \
                (scores * factor,)
        return _Case(None, kwargs={"dim": -1}, make=make)

    return cases + [real(1), real(1000)]


def _softmax_variants(x: torch.Tensor, dim: int) -> dict:
    """What each mistake returns on ``x`` (float64)."""
    x = x.double()
    nd = x.dim()
    d = dim % nd
    out = {}
    for other in range(nd):
        if other != d:
            key = "ignores_dim" if other == nd - 1 else "wrong_axis"
            out.setdefault(key, softmax(x, dim=other))
    e = torch.exp(x)
    out["no_max_subtraction"] = e / e.sum(dim=d, keepdim=True)
    eg = torch.exp(x - x.max())
    out["global_max"] = eg / eg.sum(dim=d, keepdim=True)
    out["normalised_over_everything"] = eg / eg.sum()
    es = torch.exp(x - x.amax(dim=d, keepdim=True))
    out["no_normalisation"] = es
    out["no_normalisation/raw"] = e
    out["log_softmax"] = torch.log_softmax(x, dim=d)
    out["no_exp"] = x / x.sum(dim=d, keepdim=True)
    if nd >= 2:  # reductions without keepdim broadcast against the last dimensions
        for keyname, fn in (("missing_keepdim", lambda: es / es.sum(dim=d)),
                            ("missing_keepdim/max", lambda: softmax(x - x.amax(dim=d), dim=d))):
            try:
                out[keyname] = fn()
            except RuntimeError:
                pass
    return out


_SOFTMAX_ERRORS = (("return_types", "max_returns_pair"), ("must match the size", "missing_keepdim"))


@_lab
def check_softmax(fn) -> LabFeedback:
    """Check a learner's ``softmax(x, dim=-1)`` against :func:`attnlib.softmax`.

    Contract: returns a tensor of ``x``'s shape with entries in ``[0, 1]`` that sum to 1 along
    ``dim`` (any dim, negative too), exact for scores of any size (``x`` up to ``1e4``, where
    ``exp`` overflows without the maximum subtracted).  The result may be float32 or float64.

    Inputs, smallest first: ``(3,)``, ``(2, 3)`` along each axis, scores of ``+-10000``, random
    ``(2, 3, 5, 7)``, ``(4, 6, 5)`` with ``dim=1``, ``(3, 4, 5)`` with ``dim=-3``, and the real
    scaled scores of every head of one encoder layer ``(H, T, T)``, as they are and times 1000.

    Shapes:
        x: any shape; result: the same shape.

    Returns:
        :class:`LabFeedback`; wrong results name the mistake (keys of ``MISTAKES["softmax"]``).
        Never raises.

    Source: the max-subtracted softmax (chapter 4); Bridle (1990).
    """
    cases = _softmax_cases()
    for i, case in enumerate(cases):
        x, dim = case.args[0], case.kwargs["dim"]
        expected = softmax(x.double(), dim=dim)
        try:
            got = _call(fn, case, "softmax")
        except _Raised as r:
            _raised(r.err, case, "softmax", _SOFTMAX_ERRORS, i)
        got = _as_tensor_result(got, case, "softmax")
        if _close(got, expected):
            continue
        variants_of = lambda c: c.memo("variants", lambda: _softmax_variants(c.args[0], c.kwargs["dim"]))  # noqa: E731
        matches = lambda key, c, g: _close(g, variants_of(c).get(key))  # noqa: E731
        variants = variants_of(case)
        found = [key for key, value in variants.items() if _close(got, value)]
        if found:
            later = _later_results(fn, cases, i, lambda g: g if isinstance(g, torch.Tensor) and _finite(g) else None)
            key = _pick(found, later, matches)[0]
            right = lambda c, g: _close(g, softmax(c.args[0].double(), dim=c.kwargs["dim"]))  # noqa: E731
            case, got = _showing(key, found, (case, got), later, matches, right)
            _wrong(case, "softmax", key, softmax(case.args[0].double(), dim=case.kwargs["dim"]), got)
        _generic_tensor(case, "softmax", expected, got,
                        extra=_sums_text(got, dim, expected.shape))
    return LabFeedback(True, f"Your softmax matches attnlib.softmax on all {len(cases)} inputs: small ones along "
                       f"each axis, scores of +-{int(LARGE_SCORE)}, batches of heads and a real layer's scores.")


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


# ----------------------------------------------------------------------------------- attention

def _attention_cases() -> list[_Case]:
    mask23 = torch.tensor([[True, False, True], [False, True, True]])
    q1, k1, v1 = _randn(2, 4, seed=11), _randn(3, 4, seed=12), _randn(3, 2, seed=13)
    pad = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    pad[1, ..., 5:] = False                                            # batch 1: the last 2 keys are padding
    gen = _gen(17)
    rand_mask = torch.rand(5, 7, generator=gen) < 0.6
    rand_mask[torch.arange(5), torch.randint(0, 7, (5,), generator=gen)] = True   # >= 1 key per row
    rand_mask[torch.arange(5), torch.randint(0, 7, (5,), generator=gen)] = False  # >= 1 removed (mostly)
    rand_mask[:, 0] |= ~rand_mask.any(-1)

    def real():
        _, q, k, v, _ = _real_head()
        T = q.shape[-2]
        return (f"the real q, k, v of layer {REAL_LAYER}'s heads, shape {_shape(q)}, with a causal mask ({T}, {T})",
                (q, k, v, causal_mask(T)))

    cases = [
        _Case("q (2, 4), k (3, 4), v (3, 2) (T_q=2, T_k=3, d_k=4, d_v=2), no mask", (q1, k1, v1), {}, True),
        _Case("q (2, 4), k (3, 4), v (3, 2) with mask [[1, 0, 1], [0, 1, 1]]", (q1, k1, v1, mask23), {}, True),
        _Case("q (2, 3, 5, 4), k (2, 3, 7, 4), v (2, 3, 7, 6) (B=2, H=3), no mask",
              (_randn(2, 3, 5, 4, seed=14), _randn(2, 3, 7, 4, seed=15), _randn(2, 3, 7, 6, seed=16)), {}),
        _Case("q (2, 3, 5, 4), k (2, 3, 7, 4), v (2, 3, 7, 6) (B=2, H=3), padding mask (2, 1, 1, 7)",
              (_randn(2, 3, 5, 4, seed=14), _randn(2, 3, 7, 4, seed=15), _randn(2, 3, 7, 6, seed=16), pad), {}),
        _Case("q (3, 5, 8), k (3, 7, 8), v (3, 7, 3) with a random mask (5, 7)",
              (_randn(3, 5, 8, seed=18), _randn(3, 7, 8, seed=19), _randn(3, 7, 3, seed=20), rand_mask), {}),
        _Case("integer q (3, 4), k (4, 4) with entries up to 60 (scores up to about 1e4), v (4, 2)",
              (_ints(3, 4, seed=21, high=60), _ints(4, 4, seed=22, high=60), _randn(4, 2, seed=23)), {}),
        _Case(None, make=real),
    ]
    return cases


_SCALES = {"ok": None, "no_scaling": 1.0, "scaled_by_d_k": "d_k", "scaled_up": "up"}
_MASK_MODES = ("ok", "mask_inverted", "mask_ignored", "mask_after_softmax", "mask_added", "masked_to_zero")


def _attention_variant(q, k, v, mask, scale="ok", mask_mode="ok", axis=-1, naive=False, after=False,
                       transposed=False, from_scores=False):
    """``(out, weights)`` of attention with the given mistakes, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    d_k = q.shape[-1]
    c = {"ok": 1 / math.sqrt(d_k), "no_scaling": 1.0, "scaled_by_d_k": 1 / d_k, "scaled_up": math.sqrt(d_k)}[scale]
    s = (k @ q.transpose(-2, -1) if transposed else q @ k.transpose(-2, -1)) * (1.0 if after else c)
    allowed = None if mask is None else torch.broadcast_to(mask.transpose(-2, -1) if transposed else mask, s.shape)
    if allowed is not None:
        if mask_mode == "ok":
            s = s.masked_fill(~allowed, float("-inf"))
        elif mask_mode == "mask_inverted":
            s = s.masked_fill(allowed, float("-inf"))
        elif mask_mode == "mask_added":
            s = s + allowed.double()
        elif mask_mode == "masked_to_zero":
            s = s.masked_fill(~allowed, 0.0)
    if naive:                                                           # overflows as in float32 or float64
        e = torch.exp(s.float()).double() if naive == "32" else torch.exp(s)
        w = e / e.sum(dim=axis, keepdim=True)
    else:
        w = softmax(s, dim=axis)
    if allowed is not None and mask_mode == "mask_after_softmax":
        w = w * allowed
    if after:
        w = w * c
    out = (s if from_scores else w) @ v
    return out, w


def _attention_fingerprints(case: _Case) -> dict:
    """``{(mistake keys...): (out, weights)}`` for the single mistakes and their pairs."""
    q, k, v = case.args[:3]
    mask = case.args[3] if len(case.args) > 3 else None
    singles = [dict(scale=s) for s in ("no_scaling", "scaled_by_d_k", "scaled_up")]
    singles += [dict(mask_mode=m) for m in _MASK_MODES[1:]]
    singles += [dict(axis=-2), dict(naive="32"), dict(naive="64"), dict(after=True), dict(from_scores=True)]
    names = {"axis": "softmax_wrong_axis", "naive": "no_max_subtraction", "after": "scaled_after_softmax",
             "from_scores": "out_from_scores"}

    def keys_of(opts):
        return tuple(v if k in ("scale", "mask_mode") else names[k] + ("/32" if v == "32" else "")
                     for k, v in opts.items())

    out = {}
    for opts in singles:
        out[keys_of(opts)] = _attention_variant(q, k, v, mask, **opts)
    for a, b in itertools.combinations(singles, 2):
        if set(a) & set(b):
            continue
        opts = {**a, **b}
        out[keys_of(opts)] = _attention_variant(q, k, v, mask, **opts)
    if q.shape[-2] == k.shape[-2]:
        out[("scores_transposed",)] = _attention_variant(q, k, v, mask, transposed=True)
    return out


def _fitted_scale(case: _Case, weights: torch.Tensor):
    """``c`` such that ``weights ~ softmax(c q k^T)`` on the allowed keys, or None."""
    q, k = case.args[0].double(), case.args[1].double()
    raw = q @ k.transpose(-2, -1)
    w = weights.detach().double()
    if w.shape != raw.shape or not _finite(w) or (w <= 0).any():
        return None
    lw = w.log() - w.log().mean(-1, keepdim=True)
    r = raw - raw.mean(-1, keepdim=True)
    c = float((lw * r).sum() / (r * r).sum())
    if not torch.allclose(softmax(c * raw, dim=-1), w, rtol=1e-3, atol=1e-5):
        return None
    return c


@_lab
def check_attention(fn) -> LabFeedback:
    """Check a learner's ``attention(q, k, v, mask=None) -> (out, weights)`` against
    :func:`attnlib.scaled_dot_product_attention`.

    Contract: ``weights = softmax(q k^T / sqrt(d_k))`` along the keys, with the keys where the
    boolean ``mask`` is False removed before the softmax (True = may attend, as in PyTorch's
    ``scaled_dot_product_attention``; the mask broadcasts to ``(..., T_q, T_k)``), and
    ``out = weights @ v``.  The mask is passed as the fourth positional argument, and left out
    when there is none.  No input has a fully masked row.

    Inputs, smallest first: ``T_q=2, T_k=3, d_k=4, d_v=2`` without and with a mask; batches of
    heads ``(2, 3, ...)`` with a padding mask ``(2, 1, 1, 7)``; ``(3, ...)`` with a ``(5, 7)``
    mask; integer-valued q and k whose scores reach about 1e4; the real q, k, v of every head
    of one encoder layer with a causal mask.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``,
        mask: broadcastable to ``(..., T_q, T_k)``; returns ``out`` ``(..., T_q, d_v)`` and
        ``weights`` ``(..., T_q, T_k)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["attention"]`` name the mistakes (two at
        once are recognised).  Never raises.

    Source: Vaswani et al. (2017), "Attention Is All You Need", eq. (1).
    """
    cases = _attention_cases()
    passed_2d = passed_batched = False
    for i, case in enumerate(cases):
        exp_out, exp_w = _reference_attention(case)
        try:
            got = _call(fn, case, "attention")
        except _Raised as r:
            hint = None
            if case.args[0].dim() > 2 and passed_2d and _is_shape_error(r.err):
                key = "mask_not_broadcast" if len(case.args) > 3 and passed_batched else "batched_transpose"
                hint = (key, _describe([key], "attention"))
            elif i == 0 and _is_shape_error(r.err):
                _probe_square(fn)
            _raised(r.err, case, "attention", (), i, hint)
        out, w = _attention_pair(got, case, exp_out, exp_w)
        if _close(out, exp_out) and _close(w, exp_w):
            passed_2d = passed_2d or case.args[0].dim() == 2
            passed_batched = passed_batched or case.args[0].dim() > 2
            continue
        fingerprints = case.memo("fp", lambda: _attention_fingerprints(case))
        found = [key for key, (o, ww) in fingerprints.items() if _close(w, ww) and _close(out, o)]
        if found:
            def matches(key, c, g):
                fp = c.memo("fp", lambda: _attention_fingerprints(c)).get(key)
                return fp is not None and _close(g[1], fp[1]) and _close(g[0], fp[0])

            later = _later_results(fn, cases, i, lambda g: _pair_or_none(g))
            found.sort(key=len)
            keys = _pick(found, later, matches)[0]
            right = lambda c, g: _close(g[1], _reference_attention(c)[1]) and _close(g[0], _reference_attention(c)[0])  # noqa: E731
            case, (out, w) = _showing(keys, found, (case, (out, w)), later, matches, right)
            _wrong_attention(case, keys, _reference_attention(case)[1], w, out=out)
        if w.shape == exp_w.shape and _close(w, exp_w):
            _fail(f"On {case.label}, your weights are right but `out` is not `weights @ v`"
                  + (f": shape {_shape(out)}, expected {_shape(exp_out)}." if out.shape != exp_out.shape else "."),
                  "wrong_values")
        if w.shape == exp_w.shape and (len(case.args) == 3):
            c = _fitted_scale(case, w)
            if c is not None:
                _wrong_attention(case, ("other_scale",), exp_w, w,
                                 f" Your weights are softmax(c q k^T) with c = {c:.4g}; the scale is "
                                 f"1/sqrt(d_k) = {1 / math.sqrt(case.args[0].shape[-1]):.4g}.")
        _generic_tensor(case, "attention weights", exp_w, w, extra=_sums_text(w, -1, exp_w.shape))
    return LabFeedback(True, f"Your attention matches attnlib.scaled_dot_product_attention on all {len(cases)} "
                       "inputs: T_q != T_k, boolean masks that broadcast, batches of heads, scores near 1e4 and "
                       "a real layer with a causal mask.")


def _reference_attention(case: _Case) -> tuple:
    """attnlib's ``(out, weights)`` on ``case``, in float64."""
    return scaled_dot_product_attention(*(a.double() if a.is_floating_point() else a for a in case.args))


def _probe_square(fn) -> None:
    """After a shape error on the first input (``T_q != T_k``), run the learner on a square
    one (``T_q = T_k``), where a transposed score matrix still fits, and name the mistake if
    its result is one of the fingerprints."""
    case = _Case("q (3, 4), k (3, 4), v (3, 2) (T_q = T_k = 3, no mask)",
                 (_randn(3, 4, seed=24), _randn(3, 4, seed=25), _randn(3, 2, seed=26)), {}, True)
    try:
        got = _pair_or_none(_call(fn, case, "attention"))
    except (_Raised, _Done):
        return
    if got is None:
        return
    exp_out, exp_w = scaled_dot_product_attention(*(a.double() for a in case.args))
    found = sorted((key for key, (o, w) in _attention_fingerprints(case).items()
                    if _close(got[1], w) and _close(got[0], o)), key=len)
    if found:
        _wrong_attention(case, found[0], exp_w, got[1],
                         " (Your function fails when T_q != T_k; on this square input it runs.)")


def _is_shape_error(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, (RuntimeError, ValueError, IndexError)) and any(
        s in text for s in ("size", "shape", "dimension", "mat1", "mat2", "broadcast", "Dimension"))


def _pair_or_none(got):
    if isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got) \
            and all(_finite(t) for t in got):
        return tuple(got)
    return None


def _attention_pair(got, case: _Case, exp_out: torch.Tensor, exp_w: torch.Tensor):
    """``(out, weights)`` from the learner's result, or a failure naming what is wrong with it."""
    if isinstance(got, torch.Tensor):
        _fail(f"On {case.label}, your attention returned one tensor of shape {_shape(got)}; the contract "
              f"returns a pair `(out, weights)`: out {_shape(exp_out)} and weights {_shape(exp_w)}.", "wrong_type")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        what = f"a {type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "")
        _fail(f"On {case.label}, your attention returned {what}; expected a pair `(out, weights)`.", "wrong_type")
    out = _as_tensor_result(got[0], case, "attention", "out (the first item)")
    w = _as_tensor_result(got[1], case, "attention", "weights (the second item)")
    if out.shape == exp_w.shape and w.shape == exp_out.shape and exp_out.shape != exp_w.shape:
        if _close(out, exp_w):
            _fail(f"{_describe(['returns_swapped'], 'attention')}\nShown by {case.label}: your first item has the "
                  f"weights' shape {_shape(exp_w)}.", "returns_swapped")
    T_q, T_k = exp_w.shape[-2], exp_w.shape[-1]
    if T_q != T_k and w.shape == (*exp_w.shape[:-2], T_k, T_q):
        _fail(f"{_describe(['scores_transposed'], 'attention')}\nShown by {case.label}: your weights have shape "
              f"{_shape(w)}, i.e. (T_k, T_q); expected {_shape(exp_w)}.", "scores_transposed")
    return out, w


def _wrong_attention(case: _Case, keys, exp_w, w, extra: str = "", out=None):
    def show():
        text = extra
        if not _finite(w):
            n = int((~torch.isfinite(w.detach().double())).sum())
            return text + f" Your weights have {n} NaN or infinite value(s) out of {w.numel()}."
        if "out_from_scores" in keys and case.small:
            exp_out = _reference_attention(case)[0]
            return text + f"\n  expected out: {_fmt(exp_out)}\n  your out:     {_fmt(out)}" if out is not None else text
        if case.small and w.numel() <= 12:
            text += f"\n  expected weights: {_fmt(exp_w)}\n  your weights:     {_fmt(w)}"
            if w.shape == exp_w.shape and _finite(w):
                text += f"\n  (your rows sum to {_fmt(w.double().sum(-1))})"
        return text

    _wrong(case, "attention", keys, exp_w, w, show=show)


# ---------------------------------------------------------------------------------- causal mask

_CAUSAL_TS = (1, 2, 3, 4, 5, 8, 13)


def _causal_variants(T: int) -> dict:
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    out = {
        "inverted": j > i,
        "future_included": j >= i,
        "diagonal_dropped": j < i,
        "all_true": torch.ones(T, T, dtype=torch.bool),
    }
    for o in (1, 2, -2):
        out[f"off_by_one/{o}"] = j <= i + o
    return out


@_lab
def check_causal_mask(fn) -> LabFeedback:
    """Check a learner's ``causal_mask(T)`` against :func:`attnlib.causal_mask`.

    Contract: a ``(T, T)`` ``torch.bool`` tensor, True where query ``i`` may attend to key
    ``j``, i.e. ``j <= i`` (rows are queries, columns keys; True = may attend, as in PyTorch's
    ``scaled_dot_product_attention``).  Checked for ``T`` in 1, 2, 3, 4, 5, 8 and 13 (the
    number of tokens of the course's running sentence... any length works the same).

    Shapes:
        result: ``(T, T)`` bool.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["causal_mask"]`` name the mistake.  Never raises.

    Source: Vaswani et al. (2017), section 3.2.3 (masking out illegal connections).
    """
    for n, T in enumerate(_CAUSAL_TS):
        case = _Case(f"T = {T}", (T,), {}, True)
        expected = causal_mask(T)
        try:
            got = _call(fn, case, "causal mask")
        except _Raised as r:
            _raised(r.err, case, "causal mask", (), n)
        got = _as_tensor_result(got, case, "causal mask")
        if _close(got, expected):
            continue
        if got.shape == expected.shape and got.dtype != torch.bool:
            g = got.detach().double()
            if bool(((g == 0) | (g == 1)).all()) and torch.equal(g.bool(), expected):
                _fail(f"{_describe(['not_bool'], 'causal_mask')}\nShown by T = {T}: your dtype is {got.dtype}.",
                      "not_bool")
            if torch.equal(torch.isneginf(g), ~expected) and bool((g[expected] == 0).all()):
                _fail(f"{_describe(['additive'], 'causal_mask')}\nShown by T = {T}.", "additive")
        as_bool = got.bool() if got.dtype != torch.bool and got.shape == expected.shape else got
        found = [key for key, value in _causal_variants(T).items() if _close(as_bool, value)]
        if found:
            later = []
            for T2 in _CAUSAL_TS[n + 1:]:
                try:
                    g2 = _call(fn, _Case(f"T = {T2}", (T2,), {}), "causal mask")
                except (_Raised, _Done):
                    continue
                if isinstance(g2, torch.Tensor):
                    later.append((T2, g2.bool() if g2.dtype != torch.bool else g2))
            matches = lambda key, T2, g2: _close(g2, _causal_variants(T2).get(key))  # noqa: E731
            key = _pick(found, later, matches)[0]
            T, as_bool = _showing(key, found, (T, as_bool), later, matches, lambda T2, g2: _close(g2, causal_mask(T2)))
            expected = causal_mask(T)
            extra = ""
            if key.startswith("off_by_one"):
                o = int(key.split("/")[1])
                extra = f" Yours is True where j <= i {'+' if o > 0 else '-'} {abs(o)}."
            _fail(f"{_describe([key.split('/')[0]], 'causal_mask')}{extra}\nShown by T = {T} (rows: queries i, "
                  f"columns: keys j):\n  expected:\n{_fmt(expected)}\n  yours:\n{_fmt(as_bool)}",
                  key.split("/")[0])
        if got.shape != expected.shape:
            _fail(f"For T = {T}, your mask has shape {_shape(got)}; expected ({T}, {T}).", "wrong_shape")
        if got.dtype != torch.bool:
            _fail(f"For T = {T}, your mask has dtype {got.dtype} and values other than the causal pattern; "
                  "expected a torch.bool tensor, True where j <= i.", "wrong_type")
        _fail(f"For T = {T}, your mask is wrong in {int((got != expected).sum())} cell(s) (rows: queries i, "
              f"columns: keys j):\n  expected:\n{_fmt(expected)}\n  yours:\n{_fmt(got)}", "wrong_values")
    return LabFeedback(True, f"Your causal mask matches attnlib.causal_mask for T = "
                       f"{', '.join(map(str, _CAUSAL_TS))}: True where key j <= query i.")


# ---------------------------------------------------------------------------------- split heads

def _split_cases() -> list[_Case]:
    def seq(B, T, D):  # unique values, so every number tells where it came from
        return torch.arange(B * T * D, dtype=torch.float32).reshape(B, T, D)

    def real():
        _, _, _, _, X = _real_head()
        X2 = torch.stack([X, X.flip(0)])                                # (2, T, d_model): two real sequences
        return f"the real layer input of two sequences, shape {_shape(X2)}, n_heads=12", (X2, 12)

    return [
        _Case("x of shape (1, 2, 4) (B=1, T=2, d_model=4), n_heads=2", (seq(1, 2, 4), 2), {}, True),
        _Case("x of shape (1, 3, 4), n_heads=2", (seq(1, 3, 4), 2), {}, True),
        _Case("x of shape (2, 5, 6), n_heads=3", (seq(2, 5, 6), 3), {}),
        _Case("x of shape (3, 5, 12), n_heads=4", (seq(3, 5, 12), 4), {}),
        _Case("x of shape (2, 3, 5), n_heads=1", (seq(2, 3, 5), 1), {}),
        _Case(None, make=real),
    ]


def _split_variants(x: torch.Tensor, H: int) -> dict:
    B, T, D = x.shape
    dh = D // H
    return {
        "missing_transpose": x.reshape(B, T, H, dh),
        "mixes_tokens": x.reshape(B, H, T, dh),
        "interleaved": x.reshape(B, T, dh, H).permute(0, 3, 1, 2),
        "heads_in_batch": split_heads(x, H).reshape(B * H, T, dh),
        "tokens_and_features_swapped": split_heads(x, H).transpose(-2, -1),
    }


def _trace(x: torch.Tensor, got: torch.Tensor, H: int) -> str:
    """Where the first wrong number of ``got`` came from in ``x`` (values of ``x`` are unique)."""
    B, T, D = x.shape
    dh = D // H
    expected = split_heads(x, H)
    if got.shape != expected.shape:
        return ""
    bad = (got.detach().double() != expected.double()).nonzero()
    if not len(bad):
        return ""
    b, h, t, f = (int(n) for n in bad[0])
    value = float(got[b, h, t, f])
    src = (x.double() == value).nonzero()
    where = (f"feature {int(src[0][2])} of token {int(src[0][1])}" + (f" of sequence {int(src[0][0])}" if B > 1 else "")
             if len(src) == 1 else f"the value {value:.4g}, which is not in x at all")
    return (f"\n  result[{b}, {h}, {t}, {f}] (sequence {b}, head {h}, token {t}, entry {f} of the head)"
            f"\n  should be feature {h * dh + f} of token {t}; yours holds {where}.")


_SPLIT_ERRORS = (("got float", "float_d_head"),
                 ("must be tuple of ints", "float_d_head"), ("received an invalid combination", "float_d_head"))


@_lab
def check_split_heads(fn) -> LabFeedback:
    """Check a learner's ``split_heads(x, n_heads)`` against :func:`attnlib.split_heads`.

    Contract: ``(B, T, d_model) -> (B, H, T, d_head)`` with ``d_head = d_model // H``; head
    ``h`` holds features ``h*d_head : (h+1)*d_head`` of every token, in token order.

    Inputs, smallest first: ``(1, 2, 4)`` and ``(1, 3, 4)`` with 2 heads, ``(2, 5, 6)`` with 3,
    ``(3, 5, 12)`` with 4, ``(2, 3, 5)`` with 1, all with distinct values so that every
    number tells where it came from; the real input of one encoder layer for two sequences,
    ``(2, T, 384)`` with 12 heads.

    Shapes:
        x: ``(B, T, d_model)``; result: ``(B, H, T, d_head)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["split_heads"]`` name the mistake.  Never raises.

    Source: Vaswani et al. (2017), section 3.2.2 (multi-head attention).
    """
    cases = _split_cases()
    for i, case in enumerate(cases):
        x, H = case.args
        expected = split_heads(x, H)
        try:
            got = _call(fn, case, "split_heads")
        except _Raised as r:
            _raised(r.err, case, "split_heads", _SPLIT_ERRORS, i)
        got = _as_tensor_result(got, case, "split_heads")
        if _close(got, expected):
            continue
        found = [key for key, value in _split_variants(x, H).items() if _close(got, value)]
        if found:
            later = _later_results(fn, cases, i, lambda g: g if isinstance(g, torch.Tensor) else None)
            matches = lambda key, c, g: _close(g, c.memo("v", lambda: _split_variants(*c.args))[key])  # noqa: E731
            key = _pick(found, later, matches)[0]
            case, got = _showing(key, found, (case, got), later, matches,
                                 lambda c, g: _close(g, split_heads(*c.args)))
            x, H = case.args
            expected = split_heads(x, H)
            _wrong(case, "split_heads", key, expected, got,
                   show=lambda: (f" Your result has shape {_shape(got)}, expected {_shape(expected)}."
                                 if got.shape != expected.shape else "") + _trace(x, got, H))
        if got.shape != expected.shape:
            _fail(f"On {case.label}, your result has shape {_shape(got)}; expected {_shape(expected)} "
                  f"(B, H, T, d_head).", "wrong_shape")
        _fail(f"On {case.label}, your heads hold the wrong numbers." + _trace(x, got, H), "wrong_values")
    return LabFeedback(True, f"Your split_heads matches attnlib.split_heads on all {len(cases)} inputs: every "
                       "head holds its own contiguous slice of features of every token, in order.")


# ------------------------------------------------------------------------ online softmax attention

def _online_cases() -> list[_Case]:
    q_big = _ints(3, 4, seed=40, high=60)
    q_big[0] = -60.0                                                     # query 0: every score <= -60 * 40 / 2
    q_big[1] = 60.0                                                      # query 1: every score >= 60 * 40 / 2
    k_big = _ints(9, 4, seed=41, high=25) + 35.0                         # key entries in [10, 60]
    def real():
        _, q, k, v, _ = _real_head()
        return f"the real q, k, v of layer {REAL_LAYER}'s heads, shape {_shape(q)}, block_size=4", (q, k, v, 4)

    return [
        _Case("q = [[1]], k = [[0], [2], [1]], v = [[1], [2], [4]], block_size=1 (the scores rise, then fall)",
              (torch.tensor([[1.0]]), torch.tensor([[0.0], [2.0], [1.0]]), torch.tensor([[1.0], [2.0], [4.0]]), 1), {},
              True),
        _Case("q = [[3]], k = [[2], [0], [1]], v = [[1], [2], [4]], block_size=2", (
            torch.tensor([[3.0]]), torch.tensor([[2.0], [0.0], [1.0]]), torch.tensor([[1.0], [2.0], [4.0]]), 2), {},
            True),
        _Case("q (2, 4), k (5, 4), v (5, 3), block_size=2 (5 keys: blocks of 2, 2, 1)",
              (_randn(2, 4, seed=31), _randn(5, 4, seed=32), _randn(5, 3, seed=33), 2), {}),
        _Case("q (3, 4), k (4, 4), v (4, 2), block_size=8 (one block holds every key)",
              (_randn(3, 4, seed=34), _randn(4, 4, seed=35), _randn(4, 2, seed=36), 8), {}),
        _Case("q (2, 3, 5, 8), k (2, 3, 11, 8), v (2, 3, 11, 6) (B=2, H=3), block_size=4",
              (_randn(2, 3, 5, 8, seed=37), _randn(2, 3, 11, 8, seed=38), _randn(2, 3, 11, 6, seed=39), 4), {}),
        _Case("integer q (3, 4), k (9, 4) with entries up to 60 (query 0's scores all below -1000, query 1's "
              "all above 1000), v (9, 2), block_size=2", (q_big, k_big, _randn(9, 2, seed=42), 2), {}),
        _Case(None, make=real),
    ]


def _online_variant(q, k, v, block: int, *, scale: str = "ok", bug: str | None = None) -> torch.Tensor:
    """Attention by the online softmax with one mistake (``bug``) and a scale, in float64."""
    dtype = torch.float32 if bug == "max_starts_at_zero/32" else torch.float64   # underflows as in float32
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    d_k = q.shape[-1]
    c = {"ok": 1 / math.sqrt(d_k), "no_scaling": 1.0, "scaled_by_d_k": 1 / d_k}[scale]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    start = 0.0 if bug and bug.startswith("max_starts_at_zero") else float("-inf")
    m = torch.full((*lead, q.shape[-2], 1), start, dtype=dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros((*lead, q.shape[-2], v.shape[-1]), dtype=dtype)
    for s0 in range(0, k.shape[-2], block):
        s = (q @ k[..., s0:s0 + block, :].transpose(-2, -1)) * c        # (..., T_q, b)
        vb = v[..., s0:s0 + block, :]
        if bug == "normalises_each_block":
            acc = acc + softmax(s, dim=-1) @ vb
            continue
        if bug in ("no_max", "no_max/32"):                              # overflows as in float64 or float32
            p = torch.exp(s.float()).double() if bug == "no_max/32" else torch.exp(s)
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ vb
            continue
        bmax = s.amax(-1, keepdim=True)
        if bug == "block_max_only":
            p = torch.exp(s - bmax)
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ vb
            continue
        m_new = torch.maximum(m, bmax)
        corr = torch.exp(m - m_new)
        if bug == "inverted_rescale":                                    # 0 * exp(inf) = NaN at the start
            corr = torch.exp(m_new - m)
        elif bug == "inverted_rescale/finite":                          # state started from the first block
            corr = torch.where(torch.isneginf(m), torch.zeros_like(m), torch.exp(m_new - m))
        p = torch.exp(s - m_new)
        l = l * (1.0 if bug in ("no_rescale", "no_rescale_sum") else corr) + p.sum(-1, keepdim=True)
        acc = acc * (1.0 if bug in ("no_rescale", "no_rescale_acc") else corr) + p @ vb
        m = m_new
    if bug in ("normalises_each_block", "no_final_division"):
        return acc.double()
    return (acc / l).double()


_ONLINE_BUGS = ("no_rescale", "no_rescale_sum", "no_rescale_acc", "inverted_rescale", "inverted_rescale/finite",
                "block_max_only",
                "normalises_each_block", "no_final_division", "no_max", "no_max/32", "max_starts_at_zero",
                "max_starts_at_zero/32")


def _online_fingerprints(case: _Case) -> dict:
    q, k, v, block = case.args
    out = {}
    for scale in ("ok", "no_scaling", "scaled_by_d_k"):
        for bug in (None, *_ONLINE_BUGS):
            if scale == "ok" and bug is None:
                continue
            keys = tuple(x for x in (bug, None if scale == "ok" else scale) if x)
            out[keys] = _online_variant(q, k, v, block, scale=scale, bug=bug)
    return out


def _reference_online(case: _Case) -> torch.Tensor:
    """attnlib's tiled attention on ``case``, in float64."""
    q, k, v, block = case.args
    return tiled_attention(q.double(), k.double(), v.double(), block_size=block)


class _ShapeWatch(torch.overrides.TorchFunctionMode):
    """Records whether any torch call returns a tensor whose last two dimensions are
    ``(T_q, T_k)``: a whole score (or weight) matrix."""

    def __init__(self, T_q: int, T_k: int):
        super().__init__()
        self.T_q, self.T_k, self.seen = T_q, T_k, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in (result if isinstance(result, (tuple, list)) else (result,)):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and tuple(t.shape[-2:]) == (self.T_q, self.T_k):
                self.seen = self.seen or tuple(t.shape)
        return result


@_lab
def check_online_softmax_attention(fn) -> LabFeedback:
    """Check a learner's ``online_softmax_attention(q, k, v, block_size)`` against
    :func:`attnlib.tiled_attention` (exact attention without a mask).

    Contract: returns ``out = softmax(q k^T / sqrt(d_k)) v``, computed by visiting the keys
    and values in blocks of ``block_size`` rows (the last block may be shorter), keeping for
    every query a running maximum ``m``, a running sum ``l`` and a running weighted sum of
    value rows, both rescaled by ``exp(m_old - m_new)`` when the maximum grows; never holding
    a ``(T_q, T_k)`` score matrix (checked on the batched input, whose ``T_k = 11`` is larger
    than its ``block_size = 4``).

    Inputs, smallest first: one query over three keys whose scores rise then fall
    (``block_size=1``), and fall then rise (``block_size=2``); ``T_k = 5`` in blocks of 2;
    a block larger than ``T_k``; batches of heads ``(2, 3, ...)``; integer-valued q and k
    whose scores reach about 1e4, with one query whose every score is below -1000 (a running
    maximum started at 0 underflows there); the real q, k, v of every head of one encoder
    layer.

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``; result
        ``(..., T_q, d_v)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["online_softmax"]`` name the mistakes (a
        recurrence mistake and a scaling mistake together are recognised).  Never raises.

    Source: Milakov & Gimelshein (2018), algorithm 3; Dao et al. (2022), "FlashAttention",
    algorithm 1.
    """
    cases = _online_cases()
    for i, case in enumerate(cases):
        q, k, v, block = case.args
        expected = _reference_online(case)
        watch = _ShapeWatch(q.shape[-2], k.shape[-2]) if k.shape[-2] > block and q.shape[-2] not in (1, k.shape[-2]) \
            and k.shape[-2] not in (q.shape[-1], v.shape[-1]) else None
        try:
            if watch is not None:
                with watch:
                    got = _call(fn, case, "online softmax attention")
            else:
                got = _call(fn, case, "online softmax attention")
        except _Raised as r:
            _raised(r.err, case, "online softmax attention", (), i)
        got = _as_tensor_result(got, case, "online softmax attention")
        if _close(got, expected):
            if watch is not None and watch.seen:
                _fail(f"{_describe(['full_matrix'], 'online_softmax')}\nShown by {case.label}: a tensor of shape "
                      f"{watch.seen} was computed.", "full_matrix")
            continue
        fingerprints = case.memo("fp", lambda: _online_fingerprints(case))
        found = sorted((key for key, value in fingerprints.items() if _close(got, value)), key=len)
        if found:
            later = _later_results(fn, cases, i, lambda g: g if isinstance(g, torch.Tensor) and _finite(g) else None)
            matches = lambda key, c, g: _close(g, c.memo("fp", lambda: _online_fingerprints(c)).get(key))  # noqa: E731
            keys = _pick(found, later, matches)[0]
            case, got = _showing(keys, found, (case, got), later, matches, lambda c, g: _close(g, _reference_online(c)))
            _wrong(case, "online softmax attention", keys, _reference_online(case), got, lab="online_softmax")
        _generic_tensor(case, "output", expected, got)
    return LabFeedback(True, f"Your online softmax attention matches attnlib.tiled_attention on all {len(cases)} "
                       "inputs, block by block, without ever holding the (T_q, T_k) score matrix.")
