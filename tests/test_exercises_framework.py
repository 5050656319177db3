"""The shared exercise machinery: parse helpers, the never-raise decorator, the four widget
kinds, the registry, and the rule of at least two exercises per chapter."""
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlib.exercises import REGISTRY, Feedback, checker, exercise, exercise_names, right, wrong
from attnlib.exercises.core import grade_choice, grade_number, parse_choice, parse_matrix, parse_number, parse_token
from attnlib.exercises.widgets import ChoiceExercise, MatrixToggleExercise, NumberExercise, TokenExercise

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))


@pytest.mark.parametrize("raw,value", [(3, 3.0), (2.5, 2.5), ("0.75", 0.75), (" 1,5 ", 1.5),
                                        (np.float32(2.0), 2.0), (torch.tensor(4.0), 4.0)])
def test_parse_number_accepts(raw, value):
    parsed, fb = parse_number(raw)
    assert fb is None and parsed == pytest.approx(value)


@pytest.mark.parametrize("raw,fragment", [(None, "empty"), ("", "empty"), ("abc", "text 'abc'"),
                                          (math.nan, "finite"), (math.inf, "finite"), ("inf", "finite"),
                                          (True, "yes/no"), ([1, 2], "list"), (torch.ones(3), "shape (3,)")])
def test_parse_number_rejects_with_reason(raw, fragment):
    parsed, fb = parse_number(raw)
    assert parsed is None and isinstance(fb, Feedback) and not fb.correct and fragment in fb.message


def test_parse_matrix():
    for good in ([[1, 0], [0, 1]], np.eye(2, dtype=bool), torch.eye(2), ((True, False), (False, True))):
        ok, fb = parse_matrix(good, (2, 2))
        assert fb is None and ok == [[True, False], [False, True]], good
        assert all(type(v) is bool for row in ok for v in row)
    for bad, fragment in [(None, "empty"), ([[1, 0]], "shape (2, 2), got shape (1, 2)"),
                          ([[2, 0], [0, 1]], "True/False"), ([[1, 0], [0]], "could not read"),
                          (torch.zeros(2, 2, dtype=torch.complex64), "True/False"),
                          ("abcd", "could not read"), ([["a", "b"], ["c", "d"]], "True/False")]:
        val, fb = parse_matrix(bad, (2, 2))
        assert val is None and fragment in fb.message, (bad, fb)
    val, fb = parse_matrix([[0.5, math.nan], [1, 2]], (2, 2), kind="float")
    assert val is None and "finite" in fb.message


def test_parse_choice_and_token():
    assert parse_choice("b", ["a", "b"]) == ("b", None)
    assert "not one of the options" in parse_choice("z", ["a", "b"])[1].message
    tokens = ["[CLS]", "the", "cat", "the", "[SEP]"]
    assert parse_token("cat", tokens) == (2, None)
    assert parse_token(4, tokens) == (4, None)
    assert "occurs 2 times" in parse_token("the", tokens)[1].message
    assert "outside the sentence" in parse_token(9, tokens)[1].message
    assert "not a token" in parse_token("dog", tokens)[1].message
    assert "Please pick" in parse_token(None, tokens)[1].message


# ------------------------------------------------ grade_number: the body of every number checker
def test_grade_number_tolerance_is_inclusive_and_scales_with_the_target():
    """|value - target| <= abs_tol + rel_tol * |target| (numpy.isclose's rule): the boundary
    counts, the next float beyond it does not; binary fractions keep the boundary exact."""
    at = lambda v: grade_number(v, 4.0, "yes", abs_tol=0.25, rel_tol=0.125)  # noqa: E731  band 0.75
    assert at(4.75).correct and at(3.25).correct and at("4,75").correct
    assert not at(math.nextafter(4.75, 9)).correct and not at(math.nextafter(3.25, 0)).correct
    assert grade_number(4.0, 4.0, "yes").correct                      # no tolerance: the exact value only
    assert not grade_number(math.nextafter(4.0, 9), 4.0, "yes").correct
    assert grade_number(-1030.0, -1000.0, "yes", rel_tol=0.03).correct  # relative to |target|
    assert not grade_number(-1031.0, -1000.0, "yes", rel_tol=0.03).correct


@pytest.mark.parametrize("raw,fragment", [(None, "Please enter a loss in nats; the answer is empty."),
                                          ("", "empty"), ("abc", "Expected a loss in nats, got the text 'abc'."),
                                          (math.nan, "finite"), ("nan", "finite"), (-math.inf, "finite"),
                                          (True, "yes/no"), ([1.0], "list"), (torch.ones(3), "shape (3,)"),
                                          ({"a": 1}, "got a dict")])
def test_grade_number_reads_bad_answers_like_parse_number(raw, fragment):
    fb = grade_number(raw, 1.0, "yes", what="a loss in nats", abs_tol=10.0)
    assert not fb.correct and fragment in fb.message and fb.message == parse_number(raw, "a loss in nats")[1].message


@pytest.mark.parametrize("raw", [" 2,5 ", "2.5", 2.5, np.float32(2.5), torch.tensor([2.5]), np.array([[2.5]])])
def test_grade_number_accepts_text_comma_and_one_element_arrays(raw):
    assert grade_number(raw, 2.5, "yes").correct


def test_grade_number_whole_refuses_fractions_and_hands_messages_an_int():
    seen = []
    kw = dict(whole="count the keys.", otherwise=lambda v: seen.append(v) or f"{v} is not it.")
    assert grade_number("2.5", 3, "yes", **kw).message == "2.5 is not a whole number: count the keys."
    assert grade_number("3,0", 3, "yes", **kw).correct
    fb = grade_number("4.0", 3, "yes", **kw)
    assert fb.message == "4 is not it." and seen == [4] and type(seen[0]) is int


def test_grade_number_names_mistakes_with_their_own_tolerance_and_hint():
    mistakes = [((10.0, 20.0), "you multiplied"), (0.5, lambda v: f"{v:g} is a half", "halve less")]
    kw = dict(abs_tol=0.25, mistakes=mistakes, mistake_tol=(1.0, 0.0), hint="fallback hint")
    assert grade_number(20.9, 2.0, "yes", **kw).message == "you multiplied"       # second value, own tolerance
    assert grade_number(9.0, 2.0, "yes", **kw).message == "you multiplied"        # boundary of mistake_tol
    fb = grade_number(1.0, 2.0, "yes", **kw)                                   # within 1.0 of 0.5 ...
    assert (fb.message, fb.hint) == ("1 is a half", "halve less")              # ... and not of 2.0 (0.25)
    assert grade_number(1.75, 2.0, "yes", **kw).correct                       # the truth wins over a mistake
    fb = grade_number(8.9, 2.0, "yes", **kw)
    assert (fb.message, fb.hint) == ("8.9 is too high.", "fallback hint")
    # without mistake_tol the right answer's tolerance is used
    assert grade_number(10.3, 2.0, "yes", abs_tol=0.25, mistakes=mistakes).message == "10.3 is too high."


def test_grade_number_skips_a_mistake_that_equals_the_truth():
    """A 'mistake' within the right answer's tolerance of the target cannot be told apart from
    it: an answer near it is not called that mistake."""
    kw = dict(abs_tol=0.1, mistakes=[(2.05, "that is the mistake")], mistake_tol=(0.5, 0.0))
    assert grade_number(2.5, 2.0, "yes", **kw).message == "2.5 is too high."
    assert grade_number(2.5, 1.0, "yes", **kw).message == "that is the mistake"


def test_grade_number_order_right_mistakes_impossible_otherwise():
    kw = dict(abs_tol=0.01, mistakes=[(-8.0, "raw scores as weights")],
              impossible=[(lambda v: v < 2, lambda v: f"{v:g} is below every value"), (lambda v: v > 10, "above")],
              otherwise=lambda v: f"{v:g} is inside, but not it")
    assert grade_number(-8.0, 3.0, "yes", **kw).message == "raw scores as weights"  # a mistake outside the range
    assert grade_number(-7.0, 3.0, "yes", **kw).message == "-7 is below every value"
    assert grade_number(11, 3.0, "yes", **kw).message == "above"
    fb = grade_number(4.0, 3.0, "yes", **kw)
    assert not fb.correct and fb.message == "4 is inside, but not it" and fb.hint is None


def test_grade_number_default_feedback_says_too_high_or_too_low():
    assert grade_number(3.5, 3.0, "yes").text == "Not yet. 3.5 is too high."
    assert grade_number("2,5", 3.0, "yes", hint="h").text == "Not yet. 2.5 is too low. Hint: h"
    fb = grade_number(3.0, 3.0, lambda v: f"{v:g} it is")
    assert fb.correct and fb.message == "3 it is"


@pytest.mark.parametrize("target,kw,error,fragment", [
    (math.nan, {}, ValueError, "finite"), (math.inf, {}, ValueError, "finite"),
    ("3", {}, TypeError, "got str"), (True, {}, TypeError, "got bool"), (None, {}, TypeError, "got NoneType"),
    (1.0, {"abs_tol": -0.1}, ValueError, ">= 0"), (1.0, {"mistake_tol": (0.0, -1e-3)}, ValueError, ">= 0"),
])
def test_grade_number_refuses_a_broken_exercise(target, kw, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        grade_number(1.0, target, "yes", **kw)
    # inside a checker the bug becomes feedback, never a traceback for the learner
    fb = checker(lambda answer: grade_number(answer, target, "yes", **kw))(1.0)
    assert not fb.correct and error.__name__ in fb.message


def test_grade_choice_appends_the_measurement_to_every_option_but_not_to_a_non_option():
    opts, fb = ("a", "b"), {"b": "b is wrong."}
    assert grade_choice("a", opts, "a", "a is right.", fb, measured="Measured: 3.").text == "Correct. a is right. Measured: 3."
    got = grade_choice("b", opts, "a", "a is right.", fb, hint="h", measured="Measured: 3.")
    assert (got.message, got.hint) == ("b is wrong. Measured: 3.", "h")
    assert "Measured" not in grade_choice("z", opts, "a", "a is right.", fb, measured="Measured: 3.").message
    assert grade_choice("b", opts, "a", "a is right.", fb).message == "b is wrong."


def test_checker_decorator_turns_exceptions_into_feedback():
    @checker
    def check_explodes(answer):
        return right("fine") if answer == 1 else 1 / 0

    assert check_explodes(1).correct
    fb = check_explodes(2)
    assert not fb.correct and "ZeroDivisionError" in fb.message


def _check_half(answer):
    value, fb = parse_number(answer)
    if fb:
        return fb
    return right("Yes, one half.") if abs(value - 0.5) < 1e-9 else wrong(f"{value} is not one half.", hint="Divide 1 by 2.")


def test_number_widget_shows_feedback():
    ex = NumberExercise("What is 1/2?", _check_half)
    ex.control.value = "0.4"
    fb = ex.check()
    assert not fb.correct and "0.4 is not one half" in ex.feedback.value and "Hint" in ex.feedback.value
    ex.control.value = "abc"
    ex.button.click()  # the real button path
    assert "Not yet" in ex.feedback.value and "text" in ex.feedback.value
    ex.control.value = "0.5"
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value


def test_widget_escapes_messages_and_survives_raising_checker():
    ex = NumberExercise("q", lambda a: 1 / 0)
    ex.control.value = "1"
    assert not ex.check().correct and "could not be checked" in ex.feedback.value
    ex2 = NumberExercise("q", lambda a: wrong("<script>alert(1)</script>"))
    ex2.check()
    assert "<script>" not in ex2.feedback.value and "&lt;script&gt;" in ex2.feedback.value


def test_choice_token_and_matrix_widgets():
    ch = ChoiceExercise("Pick b", ["a", "b"], lambda a: right("ok") if a == "b" else wrong(f"not {a}"))
    assert not ch.check().correct  # nothing chosen yet -> feedback, no exception
    ch.control.value = "b"
    assert ch.check().correct

    tokens = ["[CLS]", "cat", "[SEP]"]
    tk = TokenExercise("Pick cat", tokens, lambda a: right("ok") if a == 1 else wrong(f"position {a}"))
    tk.control.value = 2
    assert not tk.check().correct and "position 2" in tk.feedback.value
    tk.control.value = 1
    assert tk.check().correct

    target = [[True, False], [True, True]]
    mx = MatrixToggleExercise("causal", ["a", "b"], ["a", "b"],
                              lambda a: right("ok") if a == target else wrong("no"))
    assert mx.answer == [[False, False], [False, False]]
    mx.cells[0][0].value = True
    assert not mx.check().correct
    mx.set_answer(target)
    assert mx.check().correct and "Correct" in mx.feedback.value


def test_feedback_is_cleared_when_the_answer_changes():
    """A verdict never stands next to an answer it was not given for (issue 13)."""
    ex = NumberExercise("What is 1/2?", _check_half)
    ex.control.value = "0.5"
    assert ex.check().correct and "Correct" in ex.feedback.value
    ex.control.value = "0.4"
    assert ex.feedback.value == ""
    mx = MatrixToggleExercise("m", ["a", "b"], ["a", "b"], lambda a: right("ok"))
    mx.check()
    assert "Correct" in mx.feedback.value
    mx.cells[1][0].value = True
    assert mx.feedback.value == ""
    ch = ChoiceExercise("Pick b", ["a", "b"], lambda a: right("ok") if a == "b" else wrong("no"))
    ch.control.value = "b"
    ch.check()
    ch.control.value = "a"
    assert ch.feedback.value == ""


def test_enter_in_the_text_box_checks():
    ex = NumberExercise("What is 1/2?", _check_half)
    ex.control.value = "0.4"
    fb = ex.submit()   # the message the front end sends on Enter
    assert fb is not None and not fb.correct and "0.4 is not one half" in ex.feedback.value
    ex.control.value = "0.5"
    assert ex.submit().correct and "Correct" in ex.feedback.value


def test_restart_note_is_shown_only_on_disconnected_views():
    """The note is in every exercise, hidden by default, shown by the widget manager's
    `jupyter-widgets-disconnected` class (what ipywidgets 8 adds after a kernel restart)."""
    from attnlib.exercises.widgets import RESTART_NOTE
    ex = NumberExercise("q", _check_half)
    note = ex.restart_note.value
    assert ex.restart_note in ex.children and "attnlib-exercise" in ex._dom_classes
    assert ".attnlib-restart-note{display:none}" in note
    assert ".jupyter-widgets-disconnected .attnlib-restart-note" in note and "display:block" in note
    assert "Run this cell again" in RESTART_NOTE and "restarted" in RESTART_NOTE


def test_matrix_labels_are_whole_and_cells_say_on():
    tokens = ["attention", "is", "all", "you", "need", "."]
    mx = MatrixToggleExercise("m", tokens, tokens, lambda a: right("ok"))
    header = mx.control.children[1].children[1:]
    width = int(mx.cells[0][0].layout.width.removesuffix("px"))
    assert width >= 8 * len("attention")          # "attention" is not cut to "attenti"
    assert all(h.layout.width == mx.cells[0][0].layout.width for h in header)
    assert ">attention</div>" in header[0].value and "nowrap" in header[0].value
    legend = mx.control.children[0].value
    assert "<b>on</b>" in legend and "<b>off</b>" in legend
    mx.cells[0][1].value = True
    assert mx.cells[0][1].description == "on" and mx.cells[0][0].description == ""


@pytest.mark.parametrize("chapter", [int(p.name[:2]) for p in CHAPTERS])
def test_every_chapter_has_two_exercises_wired_to_the_registry(chapter):
    """At least two exercises per chapter, each with an {exercise} directive in the text, a
    registered widget, and a {solution}; every exercise(NN, name) call resolves."""
    path = next(p for p in CHAPTERS if int(p.name[:2]) == chapter)
    text = path.read_text()
    directives = re.findall(r"^[`:]{3,}\{exercise\}", text, flags=re.M)
    solutions = re.findall(r"^[`:]{3,}\{solution\}", text, flags=re.M)
    calls = re.findall(r"exercise\(\s*(\d+)\s*,\s*[\"'](\w+)[\"']\s*\)", text)
    assert len(directives) >= 2, f"{path.name}: {len(directives)} exercise directives, need >= 2"
    assert len(solutions) >= len(directives), f"{path.name}: every exercise needs a hidden solution"
    assert len(exercise_names(chapter)) >= 2, f"chapter {chapter}: registry has {exercise_names(chapter)}"
    assert len(calls) >= 2
    for ch, name in calls:
        assert int(ch) == chapter and name in REGISTRY[chapter], (ch, name)


@pytest.mark.parametrize("chapter,name", [(c, n) for c in sorted(REGISTRY) for n in REGISTRY[c]])
def test_every_registered_exercise_builds_and_handles_empty_answer(chapter, name):
    ex = exercise(chapter, name)
    fb = ex.check()  # nothing answered yet: feedback, never a traceback
    assert isinstance(fb, Feedback) and not fb.correct and fb.message
    assert "could not be checked" not in fb.message, "empty answers deserve a specific message"


def test_unknown_exercise_lists_known_ones():
    with pytest.raises(KeyError, match="no exercise 'nope' in chapter 99"):
        exercise(99, "nope")
