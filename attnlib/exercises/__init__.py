"""Widget exercises with immediate feedback.

Layout of this package:

* ``core``: :class:`Feedback` and the ``parse_*`` helpers (pure, no widgets).
* ``widgets``: one builder per kind of question (number, choice, token, toggle matrix).
* ``chNN.py``: one module per chapter.  Each defines pure checkers ``check_<name>(answer)``
  and registers a builder per exercise with ``@register(chapter, name)``.

In a chapter::

    from attnlib.exercises import exercise
    exercise(4, "temperature")      # shows the widget; answer, press Check, read feedback

Every chapter module is imported here, so the registry always lists every exercise.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from .core import Feedback, checker, parse_choice, parse_matrix, parse_number, parse_token, right, wrong

__all__ = [
    "Feedback", "checker", "right", "wrong", "parse_number", "parse_matrix", "parse_choice",
    "parse_token", "register", "exercise", "exercise_names", "REGISTRY",
]

REGISTRY: dict[int, dict[str, Callable]] = {}


def register(chapter: int, name: str):
    """Decorator registering ``builder() -> Exercise`` as exercise ``name`` of ``chapter``."""

    def deco(builder: Callable):
        REGISTRY.setdefault(chapter, {})
        if name in REGISTRY[chapter]:
            raise ValueError(f"exercise {name!r} is registered twice in chapter {chapter}")
        REGISTRY[chapter][name] = builder
        return builder

    return deco


def exercise_names(chapter: int) -> list[str]:
    """Names of the exercises registered for ``chapter`` (in registration order)."""
    return list(REGISTRY.get(chapter, {}))


def exercise(chapter: int, name: str):
    """Build the widget of exercise ``name`` of ``chapter``.

    Raises:
        KeyError: no such exercise; the message lists the chapter's exercises.
    """
    try:
        builder = REGISTRY[chapter][name]
    except KeyError:
        raise KeyError(
            f"no exercise {name!r} in chapter {chapter}; known: {exercise_names(chapter)}"
        ) from None
    return builder()


for _info in pkgutil.iter_modules(__path__):
    if _info.name.startswith("ch"):
        importlib.import_module(f"{__name__}.{_info.name}")
