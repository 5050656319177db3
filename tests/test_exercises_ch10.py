"""Chapter 10 exercises: the data against independent runs of the language model (one patched run
per number, through ``language_model.run``, not ``run_variants``), each checker's verdict on
the right answer, the typical mistakes and bad input, and the widgets end to end."""
import json
import math

import numpy as np
import pytest
import torch

from attnlib import language_model as lm
from attnlib.exercises import check_json, exercise_names
from attnlib.exercises.ch10 import (LATE_LAYER, LATE_OPTIONS, NORMALISED_HEAD, OWN_THRESHOLD, ROLE_HEAD, ROLE_OPTIONS,
                                    check_late_stream, check_normalised, check_own_pair, check_role)
from attnlib.exercises.registry import exercise_data
from widget_checks import assert_widget_round_trip

pytestmark = pytest.mark.usefixtures("one_thread")

BAD_INPUTS = [None, "", "   ", "abc", math.nan, math.inf, -math.inf, "nan", "inf", [1, 2], {"a": 1},
              b"7", True, np.zeros((2, 2)), torch.zeros(3), 7]


@pytest.fixture(scope="module")
def data():
    return exercise_data(10, "late_stream")


def test_registered_with_one_shared_data(data):
    assert exercise_names(10) == ["late_stream", "normalised", "role", "own_pair"]
    assert exercise_data(10, "normalised") == data == exercise_data(10, "role")
    assert json.loads(json.dumps(data)) == data


def test_data_is_single_patched_runs_of_the_model(data):
    model = lm.load()
    pair = lm.ioi_sets()["held_out"][0]
    a, b = lm.encode(pair["clean"]), lm.encode(pair["corrupted"])
    good, bad = lm.answer_token(" " + pair["io"]), lm.answer_token(" " + pair["s"])
    metric = lambda r: float(r.logits[0, -1, good] - r.logits[0, -1, bad])  # noqa: E731
    clean = lm.run(model, a)
    s2 = [lm.tokenizer().token(i) for i in a.tolist()].index(" " + pair["s"], 5)
    assert (data["io"], data["s"]) == (pair["io"], pair["s"])
    assert abs(data["clean"] - metric(clean)) < 1e-4
    assert abs(data["corrupted"] - metric(lm.run(model, b))) < 1e-4
    late = lm.run(model, b, edits=[{"layer": LATE_LAYER, "head": None, "mode": "patch", "source": clean,
                                    "position": s2}])
    assert abs(data["late"] - metric(late)) < 1e-3
    patched = lm.run(model, b, edits=[{"layer": NORMALISED_HEAD[0], "head": NORMALISED_HEAD[1], "mode": "patch",
                                       "source": clean}])
    assert abs(data["patched"] - metric(patched)) < 1e-3
    # role: head ROLE_HEAD's weight from the last position to S2, averaged by hand over the found set
    ws = []
    for p in lm.ioi_sets()["found"]:
        r = lm.run(model, lm.encode(p["clean"]))
        toks = [lm.tokenizer().token(i) for i in r.tokens[0].tolist()]
        last_s = len(toks) - 1 - toks[::-1].index(" " + p["s"])
        ws.append(float(r.pattern[ROLE_HEAD[0]][0, ROLE_HEAD[1], -1, last_s]))
    assert abs(data["weights"]["END_S2"] - sum(ws) / len(ws)) < 1e-5


def test_late_stream_grades_the_option_that_holds_the_measurement(data):
    score = (data["late"] - data["corrupted"]) / (data["clean"] - data["corrupted"])
    right = LATE_OPTIONS[0 if score >= 0.75 else 1 if score >= 0.25 else 2 if score >= -0.25 else 3]
    fb = check_late_stream(right, data)
    assert fb.correct and f"{score:.2f}" in fb.message
    for other in set(LATE_OPTIONS) - {right}:
        fb = check_late_stream(other, data)
        assert not fb.correct and "Measured" in fb.message and fb.hint
    # the same checker follows the data: a patch that restores everything grades "close to 1"
    assert check_late_stream(LATE_OPTIONS[0], {**data, "late": data["clean"]}).correct


def test_normalised_right_and_typical_mistakes(data):
    c, x, p = data["clean"], data["corrupted"], data["patched"]
    target = (p - x) / (c - x)
    assert check_normalised(f"{target:.2f}", data).correct
    assert check_normalised(target, data).correct
    for answer, fragment in ((1 - target, "1 minus"), (p / c, "clean metric alone"),
                             (p - x, "change in nats"), (target + 0.2, "not it")):
        fb = check_normalised(answer, data)
        assert not fb.correct and fragment in fb.message, (answer, fb)


def test_role_is_the_largest_weight_and_says_what_a_pattern_does_not_show(data):
    keys = ("END_IO", "END_S2", "S2_S1", "S2_after_S1")
    best = max(range(4), key=lambda i: data["weights"][keys[i]])
    fb = check_role(ROLE_OPTIONS[best], data)
    assert fb.correct and "hypothesis" in fb.message
    assert not check_role(ROLE_OPTIONS[(best + 1) % 4], data).correct
    moved = {**data, "weights": {**data["weights"], "END_IO": 0.99}}
    assert check_role(ROLE_OPTIONS[0], moved).correct


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=repr)
def test_bad_inputs_never_raise(bad, data):
    for fb in (check_late_stream(bad, data), check_normalised(bad, data), check_role(bad, data)):
        assert not fb.correct and fb.message


def test_page_grading_is_the_kernels(data):
    """The page calls check_json with the embedded data: the same verdict as the kernel."""
    got = json.loads(check_json(10, "normalised", json.dumps("0.5"), json.dumps(data)))
    assert got["correct"] == check_normalised("0.5", data).correct


def test_widget_round_trip(data):
    c, x, p = data["clean"], data["corrupted"], data["patched"]
    assert_widget_round_trip(10, "normalised", f"{1 - (p - x) / (c - x):.2f}", "1 minus", f"{(p - x) / (c - x):.2f}")


# ----------------------------------------------------------------------------- own_pair
CLEAN = "When Anna and Tom went to the park, Tom gave a book to"
CORRUPT = "When Anna and Tom went to the park, Anna gave a book to"


def test_own_pair_reads_the_models_patching_of_the_readers_pair():
    """The reading is patch_sweep's (heads, denoising) with the answers taken from the one token
    where the prompts differ; the chapter's template with other names passes."""
    reading = lm.pair_reading(CLEAN, CORRUPT)
    sweep = lm.patch_sweep(lm.load(), CLEAN, CORRUPT, [" Anna", " Tom"], sites=("heads",), directions=("denoise",))
    assert reading["sweep"]["answers"] == [" Anna", " Tom"] and reading["sweep"]["position"] == 9
    assert abs(reading["sweep"]["clean"] - sweep["clean"]) < 1e-5
    table = np.array(reading["sweep"]["denoise"])
    assert table.shape == (30, 9) and np.abs(table - sweep["normalised"]["denoise"]["heads"].numpy()).max() < 1e-5
    fb = check_own_pair(reading)
    assert fb.correct and f"{table.max():.2f}" in fb.message
    assert json.loads(json.dumps(reading)) == reading


@pytest.mark.parametrize("clean, corrupted, fragment", [
    (CLEAN, "When Anna and Tom went to the big park, Anna gave a book to", "same number of tokens: 14 and 15"),
    (CLEAN, CLEAN, "differ in exactly one token; they differ in 0"),
    ("Mary likes tea and John likes", "Mary likes tea and Mary likes", "prefers"),   # no IOI behaviour to trace
    ("The cat chased the dog and then the dog", "The cat chased the dog and then the cat", "does not lower"),
    (" ".join(["word"] * 70), " ".join(["word"] * 69) + " other", "the page's model reads at most 64"),
])
def test_own_pair_explains_what_is_wrong_with_a_pair(clean, corrupted, fragment):
    fb = check_own_pair(lm.pair_reading(clean, corrupted))
    assert not fb.correct and fragment in fb.message, fb


def test_own_pair_needs_one_head_above_the_threshold():
    reading = lm.pair_reading(CLEAN, CORRUPT)
    flat = json.loads(json.dumps(reading))
    flat["sweep"]["denoise"] = [[OWN_THRESHOLD - 0.01] * 9 for _ in range(30)]
    fb = check_own_pair(flat)
    assert not fb.correct and "No head restores" in fb.message and fb.hint
    flat["sweep"]["denoise"][5][2] = OWN_THRESHOLD
    assert check_own_pair(flat).correct
    for bad in (None, {"texts": ["a"]}, {"texts": ["", "b"]}, {"texts": ["a", "b"], "sweep": 3}, "x", 7):
        fb = check_own_pair(bad)
        assert not fb.correct and fb.message
