"""One kernel-side round trip through an exercise's widget, shared by the chapters' tests:
an empty answer is refused, a wrong one gets "Not yet." with its teaching fragment, and the
right one gets "Correct."."""
from attnlib.exercises import exercise


def assert_widget_round_trip(chapter: int, name: str, wrong_answer: str, fragment: str, right_answer: str):
    ex = exercise(chapter, name)
    ex.control.value = ""
    assert not ex.check().correct and "empty" in ex.feedback.value
    ex.control.value = wrong_answer
    ex.button.click()
    assert not ex.last.correct and fragment in ex.feedback.value and "Not yet" in ex.feedback.value
    ex.control.value = right_answer
    assert ex.check().correct and "Correct" in ex.feedback.value
