"""Chapter 1 exercises: checkers against independently computed answers, bad inputs, widgets."""
import math

import numpy as np
import pytest
import torch

from attnlib.exercises import exercise, exercise_names
from attnlib.exercises.ch01 import REACHABLE_OPTIONS, check_output, check_reachable

BAD_INPUTS = [None, "", "abc", float("nan"), float("inf"), -float("inf"), [1.0, 2.0],
              np.zeros((2, 2)), torch.zeros(3), True, {"a": 1}, object()]


def test_registered():
    assert exercise_names(1) == ["reachable", "output"]


# ---------------------------------------------------------------------- reachable
def _reachable_exactly(point):
    """Oracle: solve a1 v1 + a2 v2 + a3 v3 = p with sum a = 1; reachable by softmax iff all a > 0."""
    V = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    M = np.vstack([V.T, np.ones(3)])
    a = np.linalg.solve(M, np.r_[point, 1.0])
    return bool((a > 1e-12).all())


def test_reachable_oracle_agrees_with_key():
    answers = [opt for opt in REACHABLE_OPTIONS if _reachable_exactly(eval(opt))]
    assert answers == ["(1, 1)"]
    fb = check_reachable("(1, 1)")
    assert fb.correct and "ln 2" in fb.message


@pytest.mark.parametrize("choice, phrase", [
    ("(4, 0)", "vertex"), ("(2, 2)", "edge"), ("(3, 3)", "outside"), ("(-1, 2)", "negative"),
])
def test_reachable_wrong_choices_explained(choice, phrase):
    fb = check_reachable(choice)
    assert not fb.correct and phrase in fb.message and fb.hint


@pytest.mark.parametrize("bad", BAD_INPUTS + ["(5, 5)"])
def test_reachable_bad_input(bad):
    fb = check_reachable(bad)
    assert fb.correct is False and fb.message


# ---------------------------------------------------------------------- output
def _oracle_output():
    s = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    return float(torch.nn.functional.softmax(s, dim=0) @ torch.tensor([2.0, 4.0, 10.0], dtype=torch.float64))


def test_output_right_answers():
    truth = _oracle_output()
    assert truth == pytest.approx(3.2097, abs=1e-4)  # hand check: (2e + 4 + 10/e) / (e + 1 + 1/e)
    assert (2 * math.e + 4 + 10 / math.e) / (math.e + 1 + 1 / math.e) == pytest.approx(truth)
    for answer in [truth, "3.21", " 3,21 ", np.float32(3.211), torch.tensor(3.205)]:
        assert check_output(answer).correct, answer


@pytest.mark.parametrize("answer, phrase", [
    (16 / 3, "plain mean"),
    (-8.0, "raw scores"),
    (2 * math.e + 4 + 10 / math.e, "without dividing"),
    (2.0, "argmax"),
    ((10 * math.e + 4 + 2 / math.e) / (math.e + 1 + 1 / math.e), "wrong values"),
    (12.0, "outside [2, 10]"),
    (6.0, "inside [2, 10]"),
    (3.25, "inside [2, 10]"),   # just outside the tolerance
])
def test_output_typical_mistakes(answer, phrase):
    fb = check_output(answer)
    assert not fb.correct and phrase in fb.message


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_output_bad_input(bad):
    fb = check_output(bad)
    assert fb.correct is False and fb.message


# ---------------------------------------------------------------------- widgets
def test_reachable_widget():
    w = exercise(1, "reachable")
    assert w.check().correct is False          # nothing chosen yet
    w.control.value = "(3, 3)"
    assert w.check().correct is False and "Not yet." in w.feedback.value and "outside" in w.feedback.value
    w.control.value = "(1, 1)"
    assert w.check().correct and "Correct." in w.feedback.value


def test_output_widget():
    w = exercise(1, "output")
    w.control.value = "abc"
    assert not w.check().correct and "text" in w.feedback.value
    w.control.value = "5.333"
    assert not w.check().correct and "plain mean" in w.feedback.value
    w.control.value = "3.21"
    assert w.check().correct and "Correct." in w.feedback.value
