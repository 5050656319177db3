"""ipywidgets front ends for the exercises (the live notebook): one class per kind of answer.

Each lays out the question, an answer control and a "Check" button; pressing the button (or
Enter in a text box, or calling ``.check()``) passes the answer to the pure checker and shows
its :class:`Feedback` at once, with the same words as the static page
(:attr:`Feedback.text`).  The grading logic never lives here: :func:`build` wires every
registered exercise to :func:`attnlib.exercises.check`.

Feedback a learner can trust:

* the verdict is cleared as soon as the answer changes, so a "Correct." never stands next to
  an answer it was not given for;
* after a kernel restart, or in a notebook closed and reopened (JupyterLab then draws the
  exercise from the widget state saved with the notebook; ``make notebooks`` turns that saving
  on), the widgets are not connected to any kernel and Check would do nothing.  The widget
  manager (ipywidgets 8, JupyterLab 4 and Notebook 7) then marks every view of the
  disconnected models with the CSS class ``jupyter-widgets-disconnected``; a style rule
  shipped inside the exercise (an ``HTML`` widget may carry ``<style>``, no script needed)
  turns that class into the message :data:`RESTART_NOTE`;
* the question is an ``HTMLMath`` widget: maths written ``$...$`` renders as in the text;
* in a token exercise the chosen token carries a check mark and its name is written out below
  the tokens (not only a darker shade, which some themes hardly show);
* the matrix exercises label their columns in full and say what on and off mean.
"""
from __future__ import annotations

import html

import ipywidgets as widgets

from .core import Feedback, wrong

__all__ = ["Exercise", "NumberExercise", "ChoiceExercise", "MatrixToggleExercise", "TokenExercise",
           "feedback_html", "build", "RESTART_NOTE"]

#: Shown in place of silence when the exercise has no kernel behind it (the kernel restarted,
#: or the notebook was closed and reopened): the CSS below reveals it on views that the widget
#: manager marked as disconnected.
RESTART_NOTE = ("This exercise is not connected to a running kernel (the kernel restarted, or the "
                "notebook was reopened), so Check cannot answer. Run this cell again "
                "(Shift+Enter) to get a working exercise: it imports what it needs.")
_RESTART_HTML = (
    "<style>.attnlib-restart-note{display:none}"
    ".jupyter-widgets-disconnected .attnlib-restart-note,"
    ".jupyter-widgets-disconnected.attnlib-restart-note{display:block}</style>"
    '<div class="attnlib-restart-note" role="alert" style="border-left:4px solid #9a6700;'
    f'background:#fff8c5;padding:6px 10px;color:#3b2300">{html.escape(RESTART_NOTE)}</div>'
)

_STYLE = {
    True: "border-left:4px solid #1a7f37;background:#e9f7ef;padding:6px 10px;color:#0b3d1c",
    False: "border-left:4px solid #b3261e;background:#fdecea;padding:6px 10px;color:#5c1510",
}


def feedback_html(result: Feedback) -> str:
    """The verdict as HTML whose text is exactly ``result.text`` ("Correct. ..." or
    "Not yet. ... Hint: ...")."""
    text = f"<b>{result.verdict}</b> {html.escape(result.message)}"
    if result.hint and not result.correct:
        text += f" <i>Hint:</i> {html.escape(result.hint)}"
    return f'<div style="{_STYLE[result.correct]}">{text}</div>'


class Exercise(widgets.VBox):
    """Base layout: question, answer control, Check button, feedback area.

    Attributes:
        control: the answer widget; ``answer`` reads it.
        button: the Check button.
        feedback: an ``HTML`` widget showing the last verdict.
        last: the last :class:`Feedback` (``None`` before the first check).
    """

    def __init__(self, question: str, control: widgets.Widget, check_fn, *, title: str = ""):
        self.check_fn = check_fn
        self.control = control
        self.button = widgets.Button(description="Check", button_style="primary", icon="check")
        self.feedback = widgets.HTML(value="")
        self.restart_note = widgets.HTML(value=_RESTART_HTML)
        self.last: Feedback | None = None
        self.button.on_click(lambda _b: self.check())
        header = f"<b>{html.escape(title)}</b><br>" if title else ""
        self.question = widgets.HTMLMath(header + question)
        super().__init__([self.question, control, self.button, self.feedback, self.restart_note])
        self.add_class("attnlib-exercise")
        for widget in self.answer_widgets():
            widget.observe(self._answer_changed, names="value")

    def answer_widgets(self) -> list:
        """The widgets whose ``value`` is the answer (a change clears the verdict)."""
        return [self.control]

    def _answer_changed(self, _change) -> None:
        """The answer changed: the last verdict no longer applies to it."""
        self.feedback.value = ""

    @property
    def answer(self):
        return self.control.value

    def check(self) -> Feedback:
        """Grade the current answer, show the verdict, and return it."""
        try:
            result = self.check_fn(self.answer)
        except Exception as err:  # noqa: BLE001 - a learner never sees a traceback
            result = wrong(f"Your answer could not be checked ({err}).")
        self.last = result
        self.feedback.value = feedback_html(result)
        return result


class NumberExercise(Exercise):
    """A number typed into a text box (text, so that empty or malformed input reaches the
    checker and gets feedback instead of being silently coerced)."""

    def __init__(self, question: str, check_fn, *, label: str = "Answer", placeholder: str = "", title: str = ""):
        control = widgets.Text(description=label, placeholder=placeholder, continuous_update=True)
        # Enter in the box checks (the front end sends a "submit" message; Text.on_submit is
        # deprecated in ipywidgets 8, the message itself is not)
        control.on_msg(lambda _w, content, _buffers: self.check() if content.get("event") == "submit" else None)
        super().__init__(question, control, check_fn, title=title)

    def submit(self) -> Feedback:
        """What pressing Enter in the text box does (used by tests)."""
        self.control._handle_custom_msg({"event": "submit"}, [])
        return self.last


class ChoiceExercise(Exercise):
    """One choice among labelled options (radio buttons); the checker receives the value."""

    def __init__(self, question: str, options, check_fn, *, title: str = ""):
        control = widgets.RadioButtons(options=list(options), value=None, layout={"width": "max-content"})
        super().__init__(question, control, check_fn, title=title)


class TokenExercise(Exercise):
    """Pick one token of a sentence; the checker receives its position.

    The chosen token is marked three ways, so that it reads in light and dark themes alike and
    to a screen reader: a check-mark icon on its button, its tooltip ("token 3: cat, chosen")
    and a line under the tokens ("Your choice: cat (token 3)", a live region)."""

    def __init__(self, question: str, tokens, check_fn, *, title: str = ""):
        self.tokens = [str(tok) for tok in tokens]
        options = [(tok, i) for i, tok in enumerate(self.tokens)]
        control = widgets.ToggleButtons(options=options, value=None, style={"button_width": "auto"},
                                        icons=[""] * len(options),
                                        tooltips=[f"token {i}: {tok}" for i, tok in enumerate(self.tokens)])
        self.choice = widgets.HTML()
        super().__init__(question, control, check_fn, title=title)
        self.children = (*self.children[:2], self.choice, *self.children[2:])
        control.observe(lambda _change: self._mark_choice(), names="value")
        self._mark_choice()

    def _mark_choice(self) -> None:
        """Check mark, tooltip and the written-out choice follow the selected token."""
        chosen = self.control.value
        self.control.icons = ["check" if i == chosen else "" for i in range(len(self.tokens))]
        self.control.tooltips = [f"token {i}: {tok}" + (", chosen" if i == chosen else "")
                                 for i, tok in enumerate(self.tokens)]
        text = ("No token chosen yet." if chosen is None else
                f"Your choice: <b>{html.escape(self.tokens[chosen])}</b> (token {chosen})")
        self.choice.value = f'<div role="status" aria-live="polite">{text}</div>'


class MatrixToggleExercise(Exercise):
    """A grid of toggle cells (rows = queries, columns = keys); the checker receives a nested
    list of bools, ``True`` where a cell is switched on."""

    def __init__(self, question: str, row_labels, col_labels, check_fn, *, initial=None, title: str = ""):
        self.row_labels, self.col_labels = list(row_labels), list(col_labels)
        n_rows, n_cols = len(self.row_labels), len(self.col_labels)
        # wide enough for the longest label in full (about 8 px a character at 13 px text)
        width = f"{max(44, 8 * max(len(str(c)) for c in self.col_labels) + 12)}px"
        row_width = f"{max(60, 8 * max(len(str(r)) for r in self.row_labels) + 16)}px"
        self.cells = [
            [widgets.ToggleButton(value=bool(initial[i][j]) if initial is not None else False,
                                  layout={"width": width, "height": "30px"},
                                  tooltip=f"query {self.row_labels[i]} -> key {self.col_labels[j]}")
             for j in range(n_cols)]
            for i in range(n_rows)
        ]
        for row in self.cells:
            for cell in row:
                self._show_state(cell)
                cell.observe(lambda change: self._show_state(change["owner"]), names="value")
        nowrap = "white-space:nowrap;overflow:visible;text-align:center"
        head = [widgets.HTML(f'<div style="{nowrap}" title="key {html.escape(str(c))}">{html.escape(str(c))}</div>',
                             layout={"width": width}) for c in self.col_labels]
        rows = [widgets.HBox([widgets.HTML(f'<div style="white-space:nowrap">{html.escape(str(self.row_labels[i]))}</div>',
                                           layout={"width": row_width}), *self.cells[i]])
                for i in range(n_rows)]
        legend = widgets.HTML(
            "<small>Rows are queries, columns are keys. Click a cell to switch it "
            "<b>on</b> (dark, marked &ldquo;on&rdquo;); click again to switch it <b>off</b> "
            "(light, blank).</small>")
        grid = widgets.VBox([legend, widgets.HBox([widgets.HTML("", layout={"width": row_width}), *head]), *rows])
        super().__init__(question, grid, check_fn, title=title)

    @staticmethod
    def _show_state(cell) -> None:
        """A cell that is on says so (its text), not only by its shade."""
        cell.description = "on" if cell.value else ""
        cell.button_style = "info" if cell.value else ""

    def answer_widgets(self) -> list:
        return [cell for row in self.cells for cell in row]

    @property
    def answer(self):
        return [[cell.value for cell in row] for row in self.cells]

    def set_answer(self, matrix) -> None:
        """Set every cell from a nested list / array of bools (used by tests and solutions)."""
        for i, row in enumerate(self.cells):
            for j, cell in enumerate(row):
                cell.value = bool(matrix[i][j])


def model_answer(texts, reads) -> dict:
    """A sentence exercise's answer as the kernel builds it: ``texts`` and, for each text, the
    tokens and the weights of each head in ``reads`` from the pretrained encoder
    (:func:`attnlib.encoder.run`), or ``error`` when the model refuses a text.  The page
    builds the same dict with the in-page model."""
    from ..encoder import run
    from .core import head_key

    texts = list(texts)
    runs = []
    for text in texts:
        try:
            r = run(text)
        except (TypeError, ValueError) as err:
            return {"texts": texts, "error": str(err)}
        runs.append({"tokens": r.tokens,
                     "heads": {head_key(l, h): r.head("pattern", l, h).tolist() for l, h in reads}})
    return {"texts": texts, "runs": runs}


class SentenceExercise(Exercise):
    """One or two sentences typed by the learner; the checker receives them with the model's
    reading of them (:func:`model_answer`)."""

    def __init__(self, question: str, n_texts: int, reads, check_fn, *, title: str = "", model: str = "encoder",
                 data=None):
        self.reads, self.model, self.data = tuple(reads), model, data
        labels = (["Your words"] if n_texts == 1 else ["Words A", "Words B"]) if model == "tiny" else \
            ["Clean prompt", "Corrupted prompt"] if model == "lm" else \
            (["Your text"] if n_texts == 1 else ["Sentence A", "Sentence B"])
        self.boxes = [widgets.Textarea(description=label, layout={"width": "100%"}) for label in labels]
        super().__init__(question, widgets.VBox(self.boxes), check_fn, title=title)

    def answer_widgets(self) -> list:
        return list(self.boxes)

    @property
    def answer(self):
        texts = [b.value for b in self.boxes]
        if any(not t.strip() for t in texts):
            return {"texts": texts}
        if self.model == "tiny":
            from ..circuit_lab import read
            return read(texts, self.data["checkpoint"], self.data["variants"])
        if self.model == "lm":
            from ..language_model import pair_reading
            return pair_reading(*texts)
        return model_answer(texts, self.reads)

    def set_answer(self, *texts) -> None:
        for box, text in zip(self.boxes, texts):
            box.value = text


def build(chapter: int, name: str) -> Exercise:
    """The widget of exercise ``name`` of ``chapter``, graded by
    :func:`attnlib.exercises.check` on :func:`attnlib.exercises.exercise_data`.

    Raises:
        KeyError: no such exercise.
    """
    from .registry import check, definition, exercise_data

    d = definition(chapter, name)
    data = exercise_data(chapter, name)

    def grade(answer):
        return check(chapter, name, answer, data)

    question = d.question_html(data)
    if d.kind == "number":
        return NumberExercise(question, grade, label=d.label, placeholder=d.placeholder, title=d.title)
    if d.kind == "choice":
        return ChoiceExercise(question, d.options, grade, title=d.title)
    if d.kind == "token":
        return TokenExercise(question, d.token_list(data), grade, title=d.title)
    if d.kind == "sentence":
        return SentenceExercise(question, d.n_texts, d.reads, grade, title=d.title, model=d.model, data=data)
    return MatrixToggleExercise(question, d.rows, d.cols, grade, title=d.title)
