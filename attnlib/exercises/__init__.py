"""Exercises with immediate feedback, graded by one set of pure Python checkers.

Layout of this package:

* ``core``: :class:`Feedback` and the ``parse_*`` helpers (standard library only).
* ``registry``: :func:`define`, the registry, and :func:`check` / :func:`check_json`, the
  one grading entry point (standard library only).
* ``chNN.py``: one module per chapter: pure checkers ``check_<name>(answer[, data])``, the
  ``data()`` functions that read the pretrained encoder (torch imported inside them, only
  when called), and one :func:`define` per exercise.
* ``page``: the exercise as HTML for the static page (standard library only).
* ``widgets``: the ipywidgets front end for a live kernel.
* ``labs/``: the code labs, where the learner writes a function in PyTorch and a checker names
  its bug.  A subpackage that needs torch: kernel only, not imported here and not shipped to
  the page (:func:`grader_sources` and the book take this folder's own modules only).

The graders (``core``, ``registry``, ``page`` and the chapter modules) import nothing but the
standard library, so the static book runs the very same files in the reader's browser
(a vendored Pyodide; see ``attnlib/static/exercises.js``): one source of truth for grading.

In a chapter::

    from attnlib.exercises import exercise
    exercise(4, "temperature")   # notebook: a widget; static page: the same exercise in HTML

Every chapter module is imported here, so the registry always lists every exercise.
"""
from __future__ import annotations

import importlib
import pkgutil

from .core import Feedback, checker, parse_choice, parse_matrix, parse_number, parse_token, right, wrong
from .registry import (
    KINDS, REGISTRY, Definition, check, check_json, define, definition, exercise_data, exercise_names,
)

__all__ = [
    "Feedback", "checker", "right", "wrong", "parse_number", "parse_matrix", "parse_choice",
    "parse_token", "KINDS", "REGISTRY", "Definition", "define", "definition", "exercise",
    "exercise_names", "exercise_data", "check", "check_json", "grader_sources",
]


def exercise(chapter: int, name: str):
    """Exercise ``name`` of ``chapter``, ready to display: in a live notebook an ipywidget
    (answer, press Check, read the feedback), and on the static page the same exercise as
    HTML graded in the browser (both representations travel in one output; see
    :class:`attnlib.exercises.page.ExerciseOutput`).

    Raises:
        KeyError: no such exercise; the message lists the chapter's exercises.
    """
    from .page import ExerciseOutput

    definition(chapter, name)  # KeyError with the known names
    return ExerciseOutput(chapter, name)


def grader_sources() -> dict[str, str]:
    """``{path under attnlib/: source}`` of every module the browser needs to grade: every
    module of this package except the ipywidgets front end (``widgets.py``).  The book's
    Sphinx extension (``_ext/exercise_pages.py``) ships the same list as
    ``_static/exercises/graders.json``."""
    from pathlib import Path

    folder = Path(__file__).resolve().parent
    return {f"exercises/{p.name}": p.read_text(encoding="utf-8")
            for p in sorted(folder.glob("*.py")) if p.name != "widgets.py"}


for _info in pkgutil.iter_modules(__path__):
    if _info.name.startswith("ch"):
        importlib.import_module(f"{__name__}.{_info.name}")
