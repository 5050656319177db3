"""Pure grading helpers for the exercises: the Python standard library only.

This module, the chapter modules' checkers and the registry run unchanged in two places: the
Jupyter kernel (behind the ipywidgets front end) and the reader's browser (in a vendored
Pyodide, behind the static page's front end).  So nothing here imports torch, numpy or
ipywidgets.  Arrays and tensors are still accepted in the kernel by duck typing: anything
with ``shape`` and ``tolist()`` (a numpy array or scalar, a torch tensor) is read through
``tolist()``.

Every checker ``check_<name>(answer) -> Feedback`` must never raise on learner input.  The
``parse_*`` helpers turn raw answers (numbers typed as text, nested lists, arrays, tensors,
``None``) into clean values, or into a ``Feedback`` that says what was expected;
:func:`checker` wraps a function so that even an unforeseen error becomes feedback.
"""
from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

__all__ = [
    "Feedback", "right", "wrong", "checker", "parse_number", "parse_matrix",
    "parse_choice", "parse_token", "grade_choice", "grade_number", "as_plain",
    "parse_model_answer", "head_key", "strongest", "align_tokens", "CLOSE_CALL", "excerpt", "EXCERPT_CHARS",
]

#: Feedback quotes at most this many characters of a learner's answer (:func:`excerpt`).
EXCERPT_CHARS = 40

#: Two weights closer than this are "too close to call": a sentence exercise never rests its
#: verdict on them, so the kernel (PyTorch, float32) and the page (float16 weights, within
#: 2e-3 of PyTorch) give the same verdict.
CLOSE_CALL = 0.01


@dataclass(frozen=True)
class Feedback:
    """The result of checking one answer: ``correct``, a ``message`` that teaches, and an
    optional ``hint`` for the next try (shown only when the answer is not correct)."""

    correct: bool
    message: str
    hint: str | None = None

    @property
    def verdict(self) -> str:
        """``"Correct."`` or ``"Not yet."``: the first words every front end shows."""
        return "Correct." if self.correct else "Not yet."

    @property
    def text(self) -> str:
        """The whole message as a reader sees it, e.g. ``"Not yet. 0.4 is not it. Hint: ..."``.
        Both front ends (the notebook widget and the static page) show exactly this text."""
        out = f"{self.verdict} {self.message}"
        if self.hint and not self.correct:
            out += f" Hint: {self.hint}"
        return out

    def to_dict(self) -> dict:
        """JSON-ready form: ``correct``, ``message``, ``hint`` and the rendered ``text``."""
        return {"correct": self.correct, "message": self.message, "hint": self.hint, "text": self.text}


def excerpt(value, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` for quoting in feedback, cut to about ``limit`` characters: a longer
    answer is quoted by its start, an ellipsis and its length, so feedback never echoes a
    whole pasted essay.

    >>> excerpt("0.5")
    "'0.5'"
    >>> excerpt("x" * 1000, 10)
    "'xxxxxxxxxx…' (1,000 characters)"
    """
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(value) if isinstance(value, str) else text
    head = repr(text[:limit])
    return f"{head[:-1]}…{head[-1]} ({len(text):,} characters)"


def right(message: str) -> Feedback:
    return Feedback(True, message)


def wrong(message: str, hint: str | None = None) -> Feedback:
    return Feedback(False, message, hint)


def checker(func):
    """Decorator: any exception raised while checking becomes ``Feedback(correct=False)``
    with a message naming the problem, so a learner never sees a traceback."""

    @functools.wraps(func)
    def wrapper(answer, *args, **kwargs):
        try:
            result = func(answer, *args, **kwargs)
        except Exception as err:  # noqa: BLE001 - learner input must never raise
            return wrong(f"Your answer could not be checked ({type(err).__name__}: {excerpt(str(err), 200)[1:-1]}).")
        if not isinstance(result, Feedback):
            return wrong("The checker could not grade this answer.")
        return result

    return wrapper


def _is_array(value) -> bool:
    """A numpy array or scalar, or a torch tensor (duck-typed: ``shape`` and ``tolist``)."""
    return not isinstance(value, (str, bytes)) and hasattr(value, "shape") and callable(
        getattr(value, "tolist", None))


def _shape(value) -> tuple:
    try:
        return tuple(int(n) for n in value.shape)
    except (TypeError, ValueError):
        return ()


def as_plain(value):
    """``value`` with arrays and tensors turned into Python numbers / nested lists (via
    ``tolist()``); anything else is returned unchanged."""
    return value.tolist() if _is_array(value) else value


def parse_number(answer, what: str = "a number"):
    """Return ``(value, None)`` for a finite real number (int, float, numeric text such as
    ``" 1,5 "``, or a one-element array/tensor), or ``(None, Feedback)`` describing what is
    wrong with ``answer``."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong(f"Please enter {what}; the answer is empty.")
    if isinstance(answer, bool):
        return None, wrong(f"Expected {what}, got a yes/no value ({answer}).")
    if _is_array(answer):
        shape = _shape(answer)
        if math.prod(shape) != 1:
            return None, wrong(f"Expected {what}, got an array of shape {shape}.")
        answer = answer.tolist()
        while isinstance(answer, list):
            answer = answer[0]
        if isinstance(answer, bool):
            return None, wrong(f"Expected {what}, got a yes/no value ({answer}).")
    if isinstance(answer, str):
        try:
            answer = float(answer.strip().replace(",", "."))
        except ValueError:
            return None, wrong(f"Expected {what}, got the text {excerpt(answer)}.")
    if not isinstance(answer, numbers.Real):
        return None, wrong(f"Expected {what}, got a {type(answer).__name__}.")
    try:
        value = float(answer)
    except OverflowError:
        return None, wrong(f"Expected {what}; that number is too large to be one.")
    if not math.isfinite(value):
        return None, wrong(f"Expected a finite number, got {value}.")
    return value, None


def _cell(value, kind: str):
    """One matrix cell as a bool (``kind="bool"``) or float, or ``None`` if it is not one."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, numbers.Real) and value in (0, 1):
            return bool(value)
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def parse_matrix(answer, shape: tuple, *, kind: str = "bool"):
    """Return ``(rows, None)`` when ``answer`` is a matrix of the given ``shape`` (nested
    lists, a numpy array or a tensor), else ``(None, Feedback)``.

    ``rows`` is a list of ``shape[0]`` lists of ``shape[1]`` plain values: bools for
    ``kind="bool"`` (True/False or 0/1 cells), finite floats for ``kind="float"``.
    """
    n_rows, n_cols = shape
    if answer is None:
        return None, wrong(f"Please give a {n_rows} x {n_cols} matrix; the answer is empty.")
    answer = as_plain(answer)
    if isinstance(answer, tuple):
        answer = list(answer)
    if not isinstance(answer, list) or not all(isinstance(row, (list, tuple)) for row in answer):
        return None, wrong(f"Expected a {n_rows} x {n_cols} matrix of {kind} cells; could not read it.")
    widths = {len(row) for row in answer}
    if len(widths) > 1:
        return None, wrong(f"Expected a {n_rows} x {n_cols} matrix of {kind} cells; could not read it "
                           "(its rows have different lengths).")
    got = (len(answer), widths.pop() if widths else 0)
    if got != (n_rows, n_cols):
        return None, wrong(f"Expected a matrix of shape {(n_rows, n_cols)}, got shape {got}.")
    rows = [[_cell(v, kind) for v in row] for row in answer]
    if any(v is None for row in rows for v in row):
        if kind == "bool":
            return None, wrong("Expected True/False (or 0/1) cells; some cells are neither.")
        return None, wrong("Expected numeric cells; some cells are not numbers.")
    if kind != "bool" and not all(math.isfinite(v) for row in rows for v in row):
        return None, wrong("Every cell must be a finite number (no NaN or infinity).")
    return rows, None


def parse_choice(answer, options):
    """Return ``(answer, None)`` when ``answer`` is one of ``options``, else ``(None, Feedback)``."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong("Please choose one of the options.")
    try:
        known = answer in options
    except TypeError:  # unhashable answers against a set of options
        known = False
    if not known:
        shown = ", ".join(map(str, options))
        return None, wrong(f"{excerpt(answer)} is not one of the options ({shown}).")
    return answer, None


def parse_token(answer, tokens):
    """Accept a token position (an int, or a whole-number array/tensor scalar) or a token
    string that occurs exactly once in ``tokens``; return ``(position, None)`` or
    ``(None, Feedback)``.  Floats are refused: a position is never rounded."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong("Please pick a token.")
    if _is_array(answer) and _shape(answer) == ():
        answer = answer.tolist()
    if isinstance(answer, bool):
        return None, wrong("Expected a token or its position, got a yes/no value.")
    if isinstance(answer, numbers.Integral):
        if 0 <= int(answer) < len(tokens):
            return int(answer), None
        return None, wrong(f"Position {answer} is outside the sentence (0..{len(tokens) - 1}).")
    if isinstance(answer, float):
        return None, wrong(f"Expected a token or its position, got the number {answer}.")
    if isinstance(answer, str):
        hits = [i for i, t in enumerate(tokens) if t == answer.strip()]
        if len(hits) == 1:
            return hits[0], None
        if not hits:
            return None, wrong(f"{excerpt(answer)} is not a token of this sentence: {' '.join(tokens)}")
        return None, wrong(f"{excerpt(answer)} occurs {len(hits)} times; give its position instead ({hits}).")
    return None, wrong(f"Expected a token or its position, got a {type(answer).__name__}.")


def grade_choice(answer, options, correct, right_message: str, feedback: dict, hint: str | None = None,
                 measured: str | None = None) -> Feedback:
    """Grade a multiple-choice answer: ``right_message`` for ``correct``, the option's own
    explanation from ``feedback`` (what that choice gets wrong) for any other option, and the
    ``parse_choice`` message for an answer that is not an option at all.  ``measured`` (the
    real numbers behind the answer, e.g. ``"Measured on layer 0: ..."``) is appended, after a
    space, to the message of every option, right or wrong."""
    choice, problem = parse_choice(answer, options)
    if problem:
        return problem
    tail = "" if measured is None else " " + measured
    if choice == correct:
        return right(right_message + tail)
    return wrong(feedback[choice] + tail, hint=hint)


def _say(message, value) -> str:
    """A feedback message: ``message`` itself, or ``message(value)`` when it is callable."""
    return message(value) if callable(message) else message


def _within(value: float, target: float, abs_tol: float, rel_tol: float) -> bool:
    """numpy.isclose's rule (not symmetric): ``|value - target| <= abs_tol + rel_tol * |target|``."""
    return abs(value - target) <= abs_tol + rel_tol * abs(target)


def grade_number(answer, target, right_message, *, what: str = "a number", abs_tol: float = 0.0,
                 rel_tol: float = 0.0, mistakes=(), mistake_tol=None, impossible=(),
                 whole: str | None = None, otherwise=None, hint: str | None = None) -> Feedback:
    """Grade a typed number against the measured ``target``: the one body of every checker of
    kind ``number`` (predict, then check a value read from the exercise's data).

    The answer is read by :func:`parse_number` (text with a decimal point or comma, a number,
    a one-element array or tensor); ``None``, text, NaN or infinity get its message, which
    names ``what`` was expected.  Then, in this order, the first rule that applies answers:

    1. ``whole``: when given, a number that is not whole is refused with
       ``"<value> is not a whole number: <whole>"``; from here on the value is an ``int``.
    2. Right: ``|value - target| <= abs_tol + rel_tol * |target|`` (numpy.isclose's rule; with
       both tolerances 0 only the exact value counts), feedback ``right_message``.
    3. ``mistakes``: ``(values, message)`` or ``(values, message, hint)`` pairs, ``values`` one
       number or a tuple of numbers, each the result of one typical mistake; an answer within
       ``mistake_tol`` (``(abs_tol, rel_tol)``, default the right answer's tolerances) of one
       of them gets that mistake's message.  A mistake whose value lies within the right
       answer's tolerance of ``target`` is skipped: it cannot be told apart from the truth.
    4. ``impossible``: ``(predicate, message)`` pairs for values no answer can take (a negative
       loss, a share above 1); the first predicate that is true for the value answers.
    5. ``otherwise`` (with ``hint``): by default ``"<value> is too high."`` or ``"... too low."``.

    Every message may be a str or a function of the (parsed) value returning one, so that it
    can quote the learner's number.  Units: ``target``, the tolerances and the mistakes' values
    are in the unit of the question.

    Raises:
        TypeError: ``target`` is not a real number (a bug of the exercise, not of the learner;
            :func:`checker` turns it into feedback).
        ValueError: ``target`` is NaN or infinite, or a tolerance is negative.

    >>> grade_number("0,5", 0.5, "Yes.", abs_tol=0.01).text
    'Correct. Yes.'
    >>> grade_number(2, 0.5, "Yes.", mistakes=[(2.0, "That is 1/0.5.")]).text
    'Not yet. That is 1/0.5.'
    >>> grade_number("0.7", 0.5, "Yes.", abs_tol=0.01, hint="Divide 1 by 2.").text
    'Not yet. 0.7 is too high. Hint: Divide 1 by 2.'
    """
    if isinstance(target, bool) or not isinstance(target, numbers.Real):
        raise TypeError(f"target must be a real number, got {type(target).__name__}")
    if not math.isfinite(target):
        raise ValueError(f"target must be finite, got {target}")
    m_abs, m_rel = (abs_tol, rel_tol) if mistake_tol is None else mistake_tol
    if min(abs_tol, rel_tol, m_abs, m_rel) < 0:
        raise ValueError(f"tolerances must be >= 0, got abs_tol={abs_tol}, rel_tol={rel_tol}, "
                         f"mistake_tol={mistake_tol}")
    value, problem = parse_number(answer, what)
    if problem:
        return problem
    if whole is not None:
        if value != int(value):
            return wrong(f"{value:g} is not a whole number: {whole}")
        value = int(value)
    if _within(value, target, abs_tol, rel_tol):
        return right(_say(right_message, value))
    for values, message, *extra in mistakes:
        for v in values if isinstance(values, (tuple, list)) else (values,):
            if _within(value, v, m_abs, m_rel) and not _within(v, target, abs_tol, rel_tol):
                return wrong(_say(message, value), hint=extra[0] if extra else None)
    for is_impossible, message in impossible:
        if is_impossible(value):
            return wrong(_say(message, value))
    if otherwise is None:
        otherwise = f"{value:g} is too {'high' if value > target else 'low'}."
    return wrong(_say(otherwise, value), hint=hint)


def head_key(layer: int, head: int) -> str:
    """The key of one head in a sentence answer's ``heads`` map, e.g. ``"0:2"``."""
    return f"{int(layer)}:{int(head)}"


def parse_model_answer(answer, n_texts: int, reads):
    """Return ``(texts, runs, None)`` for a sentence answer (see
    :data:`attnlib.exercises.registry.KINDS`), else ``(None, None, Feedback)``.

    ``runs[k]`` has ``tokens`` (``T`` str) and ``heads``: ``{"L:H": T rows of T weights}``
    for every pair of ``reads``; each row is checked to be a distribution (non-negative,
    summing to 1 within 1e-3)."""
    if isinstance(answer, str):
        return None, None, wrong("This exercise is graded on what the model does with your sentence: "
                                 "write it in the box and press Check, so the model reads it first.")
    if not isinstance(answer, dict) or not isinstance(answer.get("texts"), list):
        return None, None, wrong("Your answer could not be read: expected your sentence and the model's reading of it.")
    texts = answer["texts"]
    if len(texts) != n_texts or not all(isinstance(t, str) for t in texts):
        return None, None, wrong(f"Please write {'one sentence' if n_texts == 1 else 'two sentences, A and B'}.")
    if any(not t.strip() for t in texts):
        return None, None, wrong("Please write a sentence: the box is empty.")
    if answer.get("error"):
        return None, None, wrong(f"The model could not read your text: {excerpt(str(answer['error']), 200)[1:-1]}.")
    runs = answer.get("runs")
    if not isinstance(runs, list) or len(runs) != n_texts:
        return None, None, wrong("The model's reading of your sentence is missing; press Check again.")
    for run in runs:
        tokens, heads = run.get("tokens"), run.get("heads")
        if not isinstance(tokens, list) or not isinstance(heads, dict):
            return None, None, wrong("The model's reading of your sentence could not be read.")
        T = len(tokens)
        for layer, head in reads:
            rows = heads.get(head_key(layer, head))
            if not isinstance(rows, list) or len(rows) != T or any(
                    not isinstance(r, list) or len(r) != T or any(not isinstance(w, numbers.Real) or w < 0 for w in r)
                    or abs(sum(r) - 1) > 1e-3 for r in rows):
                return None, None, wrong(f"The model's weights for layer {layer}, head {head} could not be read.")
    return texts, runs, None


def strongest(row) -> tuple:
    """``(key, weight, margin)``: the position of the largest weight of ``row``, that weight,
    and how far it is ahead of the runner-up (``margin < CLOSE_CALL`` is a close call)."""
    order = sorted(range(len(row)), key=lambda j: -row[j])
    second = row[order[1]] if len(order) > 1 else 0.0
    return order[0], row[order[0]], row[order[0]] - second


def align_tokens(a, b) -> list:
    """The longest common subsequence of two token lists, as ``[(i, j), ...]`` with
    ``a[i] == b[j]``: which positions of a minimal pair are "the same token"."""
    n, m = len(a), len(b)
    L = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            L[i][j] = L[i + 1][j + 1] + 1 if a[i] == b[j] else max(L[i + 1][j], L[i][j + 1])
    out, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif L[i + 1][j] >= L[i][j + 1]:
            i += 1
        else:
            j += 1
    return out
