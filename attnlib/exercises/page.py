"""The exercises on the static page: HTML that the browser grades with the same checkers.

:func:`render_html` writes one exercise as an element ``<div data-exercise="4:temperature">``
holding the question, its answer control, a button labelled **Check** and a feedback
element (``role="status"``), plus the exercise's data as JSON.  The book's script
(``attnlib/static/exercises.js``) reads the answer, runs
:func:`attnlib.exercises.check_json` in a vendored Pyodide (the same Python files as the
kernel) and writes :attr:`Feedback.text` into the feedback element.

:class:`ExerciseOutput` is what ``exercise(chapter, name)`` returns in a chapter: a live
notebook shows its ipywidget, and the HTML build (``nb_mime_priority_overrides`` in
``_config.yml`` puts ``text/html`` first) shows this HTML.  Standard library only.
"""
from __future__ import annotations

import html
import json

from .registry import definition, exercise_data, former_key

__all__ = ["render_html", "ExerciseOutput", "dom_id"]


def dom_id(chapter: int, name: str) -> str:
    """The element id prefix of one exercise, e.g. ``"attn-ex-4-temperature"``."""
    return f"attn-ex-{chapter}-{name}".replace("_", "-")


def _json_for_script(value) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</`` can close it)."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")


def _number_control(d, uid: str) -> str:
    return (f'<label class="attn-ex-label" for="{uid}-answer">{html.escape(d.label)}</label> '
            f'<input class="attn-ex-input" id="{uid}-answer" type="text" inputmode="decimal" '
            f'autocomplete="off" spellcheck="false" placeholder="{html.escape(d.placeholder)}">')


def _sr(text: str) -> str:
    """Text for screen readers only (visually hidden; part of the accessible name)."""
    return f'<span class="attn-ex-sr">{html.escape(text)}</span>'


def _choice_control(d, uid: str) -> str:
    items = "".join(
        f'<label class="attn-ex-option"><input type="radio" name="{uid}-choice" '
        f'value="{html.escape(str(option), quote=True)}"> <span>{html.escape(str(option))}</span></label>'
        for option in d.options)
    return (f'<fieldset class="attn-ex-choices"><legend class="attn-ex-legend">Choose one{_sr(": " + d.title)}</legend>'
            f"{items}</fieldset>")


def _token_control(d, tokens, uid: str) -> str:
    words = [str(tok) for tok in tokens]
    repeated = {w for w in words if words.count(w) > 1}
    buttons = "".join(
        f'<button type="button" class="attn-ex-token" aria-pressed="false" data-value="{i}">'
        f"{html.escape(w)}{_sr(f' (position {i})') if w in repeated else ''}</button>"
        for i, w in enumerate(words))
    return (f'<div class="attn-ex-tokens" role="group" aria-labelledby="{uid}-tokens-label">'
            f'<span class="attn-ex-legend" id="{uid}-tokens-label">Pick one token{_sr(" for: " + d.title)}:</span> '
            f"{buttons}</div>")


def _matrix_control(d, uid: str) -> str:
    head = "".join(f'<th scope="col">{html.escape(str(c))}</th>' for c in d.cols)
    rows = []
    for i, r in enumerate(d.rows):
        cells = "".join(
            f'<td><button type="button" class="attn-ex-cell" aria-pressed="false" data-row="{i}" '
            f'data-col="{j}" aria-label="query {html.escape(str(r))}, key {html.escape(str(c))}">'
            '<span aria-hidden="true"></span></button></td>'
            for j, c in enumerate(d.cols))
        rows.append(f'<tr><th scope="row">{html.escape(str(r))}</th>{cells}</tr>')
    return (f'<p class="attn-ex-help" id="{uid}-grid-help">Rows: queries; columns: keys. Switch a cell '
            'on or off with a click, Enter or Space.</p>'
            f'<div class="attn-ex-grid-wrap"><table class="attn-ex-grid" '
            f'aria-describedby="{uid}-q {uid}-grid-help">'
            f'<thead><tr><th scope="col"><span class="attn-ex-sr">query \\ key</span></th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _text_boxes(uid: str, labels, maxlength: int) -> str:
    return "".join(
        f'<div class="attn-ex-text"><label class="attn-ex-label" for="{uid}-text-{k}">{label}</label> '
        f'<textarea class="attn-ex-input attn-ex-sentence" id="{uid}-text-{k}" rows="2" maxlength="{maxlength}" '
        f'autocomplete="off" spellcheck="false"></textarea></div>'
        for k, label in enumerate(labels))


def _sentence_control(d, uid: str) -> str:
    if d.model == "tiny":                       # chapter 7's language model reads words of the speech
        boxes = _text_boxes(uid, ["Your words"] if d.n_texts == 1 else ["Words A", "Words B"], 2000)
        return (f'<div class="attn-ex-sentences" data-model="tiny">{boxes}'
                '<p class="attn-ex-help">Graded on chapter 7\'s model reading your words: the first Check loads '
                'the models into this page (once), as the circuit lab above does.</p></div>')
    if d.model == "lm":                         # chapter 10's language model patches the reader's pair
        boxes = _text_boxes(uid, ["Clean prompt", "Corrupted prompt"], 2000)
        return (f'<div class="attn-ex-sentences" data-model="lm">{boxes}'
                '<p class="attn-ex-help">Graded on the language model reading your pair: the first Check loads the '
                'model into this page (once, the download the lab above states) and patches every head.</p></div>')
    boxes = _text_boxes(uid, ["Your text"] if d.n_texts == 1 else ["Sentence A", "Sentence B"], 20000)
    reads = " ".join(f"{layer}:{head}" for layer, head in d.reads)
    return (f'<div class="attn-ex-sentences" data-reads="{reads}">{boxes}'
            '<p class="attn-ex-help">Graded on the model\'s reading of your text: the first Check loads the '
            'model into this page (once), as the model lab above does.</p></div>')


def render_html(chapter: int, name: str, data=None) -> str:
    """The exercise as HTML for the static page (see the module docstring).

    ``data`` defaults to :func:`attnlib.exercises.exercise_data` (runs the encoder in the
    kernel for exercises that read it).

    Raises:
        KeyError: no such exercise.
    """
    d = definition(chapter, name)
    if d.data is not None and data is None:
        data = exercise_data(chapter, name)
    uid = dom_id(chapter, name)
    control = {
        "number": lambda: _number_control(d, uid),
        "choice": lambda: _choice_control(d, uid),
        "token": lambda: _token_control(d, d.token_list(data), uid),
        "matrix": lambda: _matrix_control(d, uid),
        "sentence": lambda: _sentence_control(d, uid),
    }[d.kind]()
    return (
        f'<div class="attn-exercise" data-exercise="{d.key}" data-former="{former_key(chapter, name)}" '
        f'data-kind="{d.kind}" id="{uid}" role="group" '
        f'aria-labelledby="{uid}-title">'
        f'<script type="application/json" class="attn-ex-data">{_json_for_script(data)}</script>'
        f'<p class="attn-ex-title" id="{uid}-title">{html.escape(d.title)}</p>'
        f'<div class="attn-ex-question" id="{uid}-q">{d.question_html(data)}</div>'
        f'<div class="attn-ex-control">{control}</div>'
        f'<div class="attn-ex-actions"><button type="button" class="attn-ex-check" '
        f'aria-label="Check your answer to: {html.escape(d.title, quote=True)}">Check</button></div>'
        f'<div class="attn-ex-feedback" role="status" aria-live="polite" id="{uid}-feedback"></div>'
        "</div>"
    )


class ExerciseOutput:
    """What ``exercise(chapter, name)`` returns: displays as the ipywidget in a live
    notebook and as :func:`render_html` on the static page (one output, both mime types).

    Attribute access falls through to the widget (``.check()``, ``.control``,
    ``.feedback``, ``.set_answer``), which is built on first use.
    """

    def __init__(self, chapter: int, name: str):
        self.chapter, self.name = chapter, name
        self._widget = None

    @property
    def widget(self):
        """The ipywidgets front end (:func:`attnlib.exercises.widgets.build`)."""
        if self._widget is None:
            from .widgets import build

            self._widget = build(self.chapter, self.name)
        return self._widget

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.widget, attr)

    def _repr_html_(self) -> str:
        return render_html(self.chapter, self.name)

    def _repr_mimebundle_(self, include=None, exclude=None):
        d = definition(self.chapter, self.name)
        bundle = {"text/plain": f"Exercise {d.key}: {d.title}", "text/html": self._repr_html_()}
        try:
            method = getattr(self.widget, "_repr_mimebundle_", None)
            widget_bundle = (method() if callable(method) else None) or {}
        except ImportError:  # no ipywidgets: the HTML alone
            widget_bundle = {}
        view = "application/vnd.jupyter.widget-view+json"
        if view in widget_bundle:
            bundle[view] = widget_bundle[view]
        return bundle
