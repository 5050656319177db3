"""Pure grading helpers for the widget exercises: no ipywidgets here.

Every checker ``check_<name>(answer) -> Feedback`` must never raise on learner input.  The
``parse_*`` helpers turn raw answers (numbers typed as text, nested lists, numpy arrays,
tensors, ``None``) into clean values, or into a ``Feedback`` that says what was expected;
:func:`checker` wraps a function so that even an unforeseen error becomes feedback.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "Feedback", "right", "wrong", "checker", "parse_number", "parse_matrix",
    "parse_choice", "parse_token", "grade_choice",
]


@dataclass(frozen=True)
class Feedback:
    """The result of checking one answer: ``correct``, a ``message`` that teaches, and an
    optional ``hint`` for the next try."""

    correct: bool
    message: str
    hint: str | None = None


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


def parse_number(answer, what: str = "a number"):
    """Return ``(value, None)`` for a finite real number (int, float or numeric text), or
    ``(None, Feedback)`` describing what is wrong with ``answer``."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong(f"Please enter {what}; the answer is empty.")
    if isinstance(answer, bool):
        return None, wrong(f"Expected {what}, got a yes/no value ({answer}).")
    if isinstance(answer, (torch.Tensor, np.ndarray)):
        n = answer.size if isinstance(answer, np.ndarray) else answer.numel()
        if n != 1:
            return None, wrong(f"Expected {what}, got an array of shape {tuple(answer.shape)}.")
        answer = answer.item()
    if isinstance(answer, str):
        try:
            answer = float(answer.strip().replace(",", "."))
        except ValueError:
            return None, wrong(f"Expected {what}, got the text {answer!r}.")
    if not isinstance(answer, (int, float, np.number)):
        return None, wrong(f"Expected {what}, got a {type(answer).__name__}.")
    value = float(answer)
    if not math.isfinite(value):
        return None, wrong(f"Expected a finite number, got {value}.")
    return value, None


def parse_matrix(answer, shape: tuple, *, kind: str = "bool"):
    """Return ``(tensor, None)`` when ``answer`` is a matrix of the given ``shape``
    (nested lists, numpy array or tensor), else ``(None, Feedback)``.

    ``kind="bool"`` expects True/False (or 0/1) cells; ``kind="float"`` expects finite numbers.
    """
    if answer is None:
        return None, wrong(f"Please give a {shape[0]} x {shape[1]} matrix; the answer is empty.")
    try:
        t = answer if isinstance(answer, torch.Tensor) else torch.as_tensor(np.asarray(answer))
    except (ValueError, TypeError):
        return None, wrong(f"Expected a {shape[0]} x {shape[1]} matrix of {kind} cells; could not read it.")
    if tuple(t.shape) != tuple(shape):
        return None, wrong(f"Expected a matrix of shape {tuple(shape)}, got shape {tuple(t.shape)}.")
    if kind == "bool":
        if t.dtype == torch.bool:
            return t, None
        if t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
            if bool(((t == 0) | (t == 1)).all()):
                return t.bool(), None
        return None, wrong(f"Expected True/False (or 0/1) cells, got dtype {t.dtype}.")
    if not t.is_floating_point() and t.dtype not in (torch.int32, torch.int64):
        return None, wrong(f"Expected numeric cells, got dtype {t.dtype}.")
    t = t.double()
    if not bool(torch.isfinite(t).all()):
        return None, wrong("Every cell must be a finite number (no NaN or infinity).")
    return t, None


def parse_choice(answer, options):
    """Return ``(answer, None)`` when ``answer`` is one of ``options``, else ``(None, Feedback)``."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong("Please choose one of the options.")
    if answer not in options:
        shown = ", ".join(map(str, options))
        return None, wrong(f"{answer!r} is not one of the options ({shown}).")
    return answer, None


def parse_token(answer, tokens):
    """Accept a token position (int) or a token string that occurs exactly once in
    ``tokens``; return ``(position, None)`` or ``(None, Feedback)``."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong("Please pick a token.")
    if isinstance(answer, bool):
        return None, wrong("Expected a token or its position, got a yes/no value.")
    if isinstance(answer, (int, np.integer)):
        if 0 <= int(answer) < len(tokens):
            return int(answer), None
        return None, wrong(f"Position {answer} is outside the sentence (0..{len(tokens) - 1}).")
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
