"""The two assertions every code-lab test makes, shared by tests/test_labs.py and the lab test
files added later (test_lab_backward, test_lab_multihead, test_lab_rope, test_lab_kv): a
correct solution gets "Correct." and no diagnosis; a buggy one gets the named mistake, its
title in words, and the input that shows it."""
from attnlib.exercises import Feedback
from attnlib.exercises.labs import MISTAKES, LabFeedback

#: Ways the feedback points at the input that reveals the mistake.
SHOWN = ("Shown by", "shown by", "on ")


def assert_correct(fb):
    assert isinstance(fb, Feedback) and isinstance(fb, LabFeedback), fb
    assert fb.correct, fb.text
    assert fb.diagnosis is None and fb.text.startswith("Correct. ")


def assert_diagnosis(fb, key, lab, shown=SHOWN):
    assert isinstance(fb, LabFeedback) and not fb.correct, fb
    assert fb.diagnosis == key, f"expected {key!r}, got {fb.diagnosis!r}: {fb.text}"
    title = MISTAKES[lab][key][0]
    assert title in fb.message, fb.message                      # the feedback names the bug in words
    assert any(s in fb.message for s in shown), fb.message
