"""The registry of exercises and the one grading entry point both front ends call.

Pure Python (standard library only): this module runs in the Jupyter kernel and, unchanged,
in the reader's browser (Pyodide).  Each exercise is declared once with :func:`define`: its
kind of answer, its question, its options or tokens, its checker, and, when the checker needs
numbers read from the pretrained encoder, a ``data()`` function that computes them in the
kernel (the static page receives them as JSON, computed when the book is built).
"""
from __future__ import annotations

import json
import html
from dataclasses import dataclass
from typing import Any, Callable

from .core import Feedback, wrong

__all__ = [
    "KINDS", "Definition", "REGISTRY", "define", "definition", "exercise_names",
    "exercise_data", "check", "check_json", "FORMER_KEYS", "former_key",
]

#: The five kinds of answer.  What the checker receives from either front end:
#: number: the typed text; choice: the option's value (``None`` when nothing is chosen);
#: token: the position (``None`` when nothing is picked); matrix: a nested list of bools;
#: sentence: the reader's sentence(s) *and the model's reading of them*,
#: ``{"texts": [...], "runs": [{"tokens": [...], "heads": {"L:H": T x T weights}}, ...]}``
#: (or ``{"texts": [...], "error": "..."}`` when the model refused a text), computed by the
#: pretrained encoder: PyTorch in the kernel, the in-page model on the page.  A sentence exercise
#: with ``model="tiny"`` reads word sequences with chapter 7's language model instead
#: (:mod:`attnlib.circuit_lab`): ``{"texts": [...], "runs": [{"words": [...], "loss": {variant:
#: [T - 1 nats]}}]}`` for the checkpoint ``data["checkpoint"]`` and the edits of each of
#: ``data["variants"]`` (``[{"name", "edits"}]``), computed by :func:`attnlib.circuit_lab.read`
#: in the kernel and by ``window.attnlibTiny`` (the circuit lab) on the page.  With ``model="lm"``
#: the two texts are a clean and a corrupted prompt read by chapter 10's language model:
#: ``{"texts": [...], "sweep": {...}}`` (or ``"error"``), :func:`attnlib.language_model.pair_reading`
#: in the kernel and ``window.attnlibLM.patch`` (the language-model lab) on the page.
KINDS = ("number", "choice", "token", "matrix", "sentence")


@dataclass(frozen=True)
class Definition:
    """One exercise.

    Attributes:
        chapter, name: the key ``(chapter, name)``.
        kind: one of :data:`KINDS`.
        title: a short heading.
        question: the question as HTML, or ``question(data) -> str`` when it shows data.
        grade: ``grade(answer, data) -> Feedback``, pure.
        data: ``data() -> dict`` (JSON-ready), computed in the kernel only; ``None`` when the
            checker needs no data.
        options: the choices (choice kind).
        tokens: the tokens (token kind), a list or ``tokens(data) -> list``.
        rows, cols: the labels of a matrix's rows (queries) and columns (keys).
        label, placeholder: the label and the placeholder of a number's text box.
        reads: the ``(layer, head)`` pairs a sentence exercise's checker reads.
        n_texts: how many sentences a sentence exercise asks for (1, or 2 for a minimal pair).
        model: which model reads a sentence exercise's texts: ``"encoder"`` (the pretrained
            encoder, the heads in ``reads``), ``"tiny"`` (chapter 7's language model, the
            checkpoint and variants in the exercise's data) or ``"lm"`` (chapter 10's language
            model: a clean and a corrupted prompt, every head denoised).
        precision: for a number, the precision the answer is graded to, shown under the question
            (e.g. "Give it to 2 decimal places."); every number exercise states one.
    """

    chapter: int
    name: str
    kind: str
    title: str
    question: Any
    grade: Callable
    data: Callable | None = None
    options: tuple = ()
    tokens: Any = ()
    rows: tuple = ()
    cols: tuple = ()
    label: str = "Answer"
    placeholder: str = ""
    reads: tuple = ()
    n_texts: int = 1
    precision: str = ""
    model: str = "encoder"

    @property
    def key(self) -> str:
        return f"{self.chapter}:{self.name}"

    def question_html(self, data=None) -> str:
        text = self.question(data) if callable(self.question) else self.question
        if self.precision:
            text += f'<p class="attn-ex-precision">{html.escape(self.precision)}</p>'
        return text

    def token_list(self, data=None) -> list:
        return list(self.tokens(data) if callable(self.tokens) else self.tokens)


REGISTRY: dict[int, dict[str, Definition]] = {}

#: Where a learner's saved progress for an exercise was kept before the chapters were
#: renumbered to the curriculum's table of contents (issue 44): ``(chapter, name)`` now ->
#: ``(chapter, name)`` then.  The page reads a saved answer from the former key when the new one
#: holds nothing, and never writes or deletes the former key except when the learner presses
#: Clear (attnlib/static/exercises.js), so no saved work is lost or overwritten by the move.
#: Exercises of chapters 1-5 and chapter 6's ``torch_mask`` kept their keys.
FORMER_KEYS: dict[tuple[int, str], tuple[int, str]] = {
    **{(7, n): (6, n) for n in ("induction_head", "circuit_loss", "one_layer_halves", "patching_table",
                                "predict_patch", "copy_wrong", "feeder_matters")},
    **{(8, n): (7, n) for n in ("sink", "acyclic", "rollout")},
    **{(9, n): (8, n) for n in ("sink_token", "most_attended", "claim", "break_previous", "flip_pair")},
    **{(10, n): (11, n) for n in ("late_stream", "normalised", "role", "own_pair")},
    **{(11, n): (9, n) for n in ("weights_memory", "rescale_factor", "state_per_query")},
    **{(12, n): (10, n) for n in ("shifted_score", "cache_bytes", "gqa_head", "receptive_field")},
}


def former_key(chapter: int, name: str) -> str:
    """The key ``"chapter:name"`` under which the page kept this exercise's progress before the
    renumbering (:data:`FORMER_KEYS`), or its own key where it did not move."""
    c, n = FORMER_KEYS.get((chapter, name), (chapter, name))
    return f"{c}:{n}"


def define(chapter: int, name: str, *, kind: str, title: str, question, grade: Callable,
           data: Callable | None = None, options=(), tokens=(), rows=(), cols=(),
           label: str = "Answer", placeholder: str = "", reads=(), n_texts: int = 1,
           precision: str = "", model: str = "encoder") -> Definition:
    """Declare exercise ``name`` of ``chapter`` (see :class:`Definition`).

    ``grade`` is called as ``grade(answer)`` when ``data`` is ``None``, else as
    ``grade(answer, data)``.

    Raises:
        ValueError: the name is taken in this chapter, or ``kind`` is not one of :data:`KINDS`,
            or a choice exercise has no options, or a matrix exercise has no labels.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "choice" and not options:
        raise ValueError("a choice exercise needs options")
    if kind == "matrix" and not (rows and cols):
        raise ValueError("a matrix exercise needs row and column labels")
    if kind == "number" and not precision:
        raise ValueError(f"number exercise {name!r} must state the precision it is graded to (precision=...)")
    if model not in ("encoder", "tiny", "lm"):
        raise ValueError(f"model must be 'encoder', 'tiny' or 'lm', got {model!r}")
    if kind == "sentence" and model == "lm" and n_texts != 2:
        raise ValueError("a sentence exercise on the language model reads a clean and a corrupted prompt (n_texts=2)")
    if kind == "sentence" and model == "encoder" and (not reads or n_texts not in (1, 2)):
        raise ValueError("a sentence exercise needs reads=[(layer, head), ...] and n_texts of 1 or 2")
    if kind == "sentence" and model == "tiny" and (data is None or n_texts not in (1, 2)):
        raise ValueError("a sentence exercise on the tiny model needs data() giving its checkpoint and variants")
    chapter_defs = REGISTRY.setdefault(chapter, {})
    if name in chapter_defs:
        raise ValueError(f"exercise {name!r} is registered twice in chapter {chapter}")
    two_args = data is not None
    definition_ = Definition(
        chapter, name, kind, title, question,
        grade if two_args else (lambda answer, _data, _g=grade: _g(answer)),
        data, tuple(options), tokens if callable(tokens) else tuple(tokens), tuple(rows), tuple(cols),
        label, placeholder, tuple(tuple(pair) for pair in reads), n_texts, precision, model,
    )
    chapter_defs[name] = definition_
    return definition_


def definition(chapter: int, name: str) -> Definition:
    """The :class:`Definition` of exercise ``name`` of ``chapter``.

    Raises:
        KeyError: no such exercise; the message lists the chapter's exercises.
    """
    try:
        return REGISTRY[chapter][name]
    except KeyError:
        raise KeyError(
            f"no exercise {name!r} in chapter {chapter}; known: {exercise_names(chapter)}"
        ) from None


def exercise_names(chapter: int) -> list[str]:
    """Names of the exercises registered for ``chapter`` (in registration order)."""
    return list(REGISTRY.get(chapter, {}))


_DATA_CACHE: dict[tuple, Any] = {}


def exercise_data(chapter: int, name: str):
    """The exercise's data as the page receives it: ``data()`` passed through JSON (so the
    kernel grades on exactly the numbers the page embeds), cached; ``None`` without data.
    Runs the encoder the first time for exercises that read it (kernel only)."""
    d = definition(chapter, name)
    if d.data is None:
        return None
    key = (chapter, name)
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = json.loads(json.dumps(d.data()))
    return _DATA_CACHE[key]


def check(chapter: int, name: str, answer, data=None) -> Feedback:
    """Grade ``answer`` to exercise ``name`` of ``chapter``; never raises on any answer.

    ``answer``: number exercises take the typed text (or a number), choice exercises the
    option's value, token exercises the position (or a token occurring once), matrix
    exercises a nested list of bools (arrays and tensors work in the kernel).  ``data``
    defaults to :func:`exercise_data` (computed in the kernel); the page passes the JSON it
    embeds.

    Raises:
        KeyError: no such exercise (a programming error, not a learner's).
    """
    d = definition(chapter, name)
    if d.data is not None and data is None:
        data = exercise_data(chapter, name)
    try:
        result = d.grade(answer, data)
    except Exception as err:  # noqa: BLE001 - learner input must never raise
        return wrong(f"Your answer could not be checked ({type(err).__name__}: {err}).")
    if not isinstance(result, Feedback):
        return wrong("The checker could not grade this answer.")
    return result


def check_json(chapter: int, name: str, answer_json: str, data_json: str = "null") -> str:
    """:func:`check` for the page: the answer and the data arrive as JSON text, the result
    leaves as the JSON of :meth:`Feedback.to_dict` (``correct``, ``message``, ``hint``,
    ``text``).  Never raises on any answer or data: an unreadable answer (not JSON, or nested
    too deeply to read) and unreadable data (a damaged page) each get feedback that says so.

    >>> json.loads(check_json(4, "temperature", "[" * 100000))["message"]
    'Your answer could not be read.'
    """
    try:
        answer = json.loads(answer_json)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(wrong("Your answer could not be read.").to_dict())
    try:
        data = json.loads(data_json) if data_json else None
    except (TypeError, ValueError, RecursionError):
        return json.dumps(wrong("This exercise's data on the page is damaged, so it cannot be checked here: "
                                "reload the page, or run the exercise in its notebook.").to_dict())
    try:
        return json.dumps(check(int(chapter), str(name), answer, data).to_dict())
    except (RecursionError, ValueError, TypeError, KeyError) as err:
        return json.dumps(wrong(f"Your answer could not be checked ({type(err).__name__}).").to_dict())
