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
    "parse_choice", "parse_token", "grade_choice", "as_plain",
]


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
            return wrong(f"Your answer could not be checked ({type(err).__name__}: {err}).")
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
            return None, wrong(f"Expected {what}, got the text {answer!r}.")
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
        return None, wrong(f"{answer!r} is not one of the options ({shown}).")
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
            return None, wrong(f"{answer!r} is not a token of this sentence: {' '.join(tokens)}")
        return None, wrong(f"{answer!r} occurs {len(hits)} times; give its position instead ({hits}).")
    return None, wrong(f"Expected a token or its position, got a {type(answer).__name__}.")


def grade_choice(answer, options, correct, right_message: str, feedback: dict, hint: str | None = None) -> Feedback:
    """Grade a multiple-choice answer: ``right_message`` for ``correct``, the option's own
    explanation from ``feedback`` (what that choice gets wrong) for any other option, and the
    ``parse_choice`` message for an answer that is not an option at all."""
    choice, problem = parse_choice(answer, options)
    if problem:
        return problem
    if choice == correct:
        return right(right_message)
    return wrong(feedback[choice], hint=hint)
