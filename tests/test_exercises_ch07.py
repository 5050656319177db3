"""Chapter 7 exercises: the induction checkers on data of the shape the page embeds (the real
numbers come from the chapter's training run; here a fixed, hand-made set, so that no test
trains a model), the patching and lab exercises, and the widgets."""
import math

import numpy as np
import pytest
import torch

from attnlib.exercises import ch07, check, exercise, exercise_names, registry
from attnlib.exercises.ch07 import (
    HALVES_OPTIONS, PATCH_OPTIONS, TABLE_OPTIONS, check_circuit_loss, check_induction_head,
    check_one_layer_halves, check_patching_table, check_predict_patch, halves_answer, patch_band,
    table_reading,
)
BAD_INPUTS = [None, "", "abc", math.nan, math.inf, -math.inf, [1, 2, 3], {"a": 1}, b"7",
              np.zeros((2, 2)), torch.zeros(3, 3, dtype=torch.complex64)]

DATA = {
    "labels": ["L0 H0", "L0 H1", "L1 H0", "L1 H1"],
    "induction": [0.02, 0.05, 0.61, 0.08], "previous": [0.12, 0.74, 0.05, 0.1],
    "duplicate": [0.81, 0.03, 0.04, 0.05],
    "ind_head": 2, "prev_head": 1, "dup_head": 0, "feeder": 1, "uniform": 0.045,
    "intact": 4.3, "first": 9.1, "without_ind": 8.6, "without_feeder": 8.2, "without_both": 8.9,
    "one_first": 9.4, "one_second": 8.7,
}


@pytest.fixture
def fake_data(monkeypatch):
    """The widgets read exercise_data(); give them DATA instead of the chapter's training run."""
    for name in ("induction_head", "circuit_loss", "one_layer_halves"):
        monkeypatch.setitem(registry._DATA_CACHE, (7, name), DATA)
    return DATA


def test_registered():
    assert exercise_names(7) == ["induction_head", "circuit_loss", "one_layer_halves",
                                 "patching_table", "predict_patch", "copy_wrong", "feeder_matters"]


# ----------------------------------------------------------------------------- induction_head
def test_induction_head_accepts_the_best_head():
    fb = check_induction_head(2, DATA)
    assert fb.correct and "0.61" in fb.message and "0.045" in fb.message
    assert check_induction_head("L1 H0", DATA).correct


@pytest.mark.parametrize("pick, fragment", [
    (1, "previous-token head"), (0, "duplicate-token head"), (3, "another head of the same layer"),
])
def test_induction_head_explains_wrong_picks(pick, fragment):
    fb = check_induction_head(pick, DATA)
    assert not fb.correct and fragment in fb.message and fb.hint


def test_induction_head_accepts_every_induction_head_of_the_last_layer():
    shared = dict(DATA, induction=[0.02, 0.05, 0.61, 0.42])
    fb = check_induction_head(3, shared)
    assert fb.correct and "one of 2 induction heads" in fb.message and "L1 H0 0.61" in fb.message
    assert "strongest of 2" in check_induction_head(2, shared).message
    weak = dict(DATA, induction=[0.02, 0.05, 0.61, 0.29])        # just under the threshold
    assert not check_induction_head(3, weak).correct
    assert "induction heads" not in check_induction_head(2, weak).message
    layer0 = dict(DATA, induction=[0.35, 0.05, 0.61, 0.08])      # a layer-0 head never counts
    assert not check_induction_head(0, layer0).correct


def test_induction_head_follows_the_data():
    other = dict(DATA, ind_head=3, induction=[0.02, 0.05, 0.08, 0.61])
    assert check_induction_head(3, other).correct and not check_induction_head(2, other).correct
    fb = check_induction_head(0, dict(DATA, dup_head=1, prev_head=1))
    assert not fb.correct and "layer 0, whose keys know only" in fb.message


def test_induction_head_names_roles_only_where_the_scores_show_them():
    # the previous-token head that feeds the induction head is said to prepare its keys
    assert "prepares the keys" in check_induction_head(1, DATA).message
    assert "prepares the keys" not in check_induction_head(1, dict(DATA, feeder=0)).message
    # a layer-0 head is called a duplicate-token head only if its duplicate-token score is high
    weak = dict(DATA, duplicate=[0.04, 0.03, 0.04, 0.05])
    fb = check_induction_head(0, weak)
    assert not fb.correct and "duplicate-token" not in fb.message and "layer 0, whose keys know only" in fb.message


# ----------------------------------------------------------------------------- circuit_loss
def test_circuit_loss_accepts_the_measured_value():
    for answer in (8.9, "8.9", "8.93", 8.85, np.float64(8.9), torch.tensor(8.9)):
        fb = check_circuit_loss(answer, DATA)
        assert fb.correct and "8.90" in fb.message, answer


def test_circuit_reading_follows_the_three_losses():
    from attnlib.exercises.ch07 import circuit_reading
    one_job = dict(DATA, intact=4.0, without_ind=8.0, without_feeder=7.0, without_both=8.5)
    backups = dict(DATA, intact=2.57, without_ind=5.48, without_feeder=5.37, without_both=6.68)
    beyond = dict(DATA, intact=4.0, without_ind=5.0, without_feeder=5.0, without_both=7.0)
    assert "adds little" in circuit_reading(one_job)
    text = circuit_reading(backups)
    assert "4.11" in text and "less than the two added (5.71)" in text and "adds little" not in text
    assert "more than the two single rises added (2.00)" in circuit_reading(beyond)
    assert circuit_reading(backups) in check_circuit_loss(6.68, backups).message


@pytest.mark.parametrize("answer, fragment", [
    (4.3, "intact model's loss"), (8.6, "without the induction head alone"),
    (8.2, "without the layer-0 head alone"), (-1, "never negative"), (2.0, "lower than"),
    (12, "higher than"),
])
def test_circuit_loss_names_the_slip(answer, fragment):
    fb = check_circuit_loss(answer, DATA)
    assert not fb.correct and fragment in fb.message


# ----------------------------------------------------------------------------- one_layer_halves
def test_one_layer_halves_follows_the_control_losses():
    assert halves_answer(DATA) == HALVES_OPTIONS[0]
    assert halves_answer(dict(DATA, one_second=9.35)) == HALVES_OPTIONS[1]
    assert halves_answer(dict(DATA, one_second=9.9)) == HALVES_OPTIONS[2]
    fb = check_one_layer_halves(HALVES_OPTIONS[0], DATA)
    assert fb.correct and "9.40" in fb.message and "8.70" in fb.message
    for option in HALVES_OPTIONS[1:]:
        fb = check_one_layer_halves(option, DATA)
        assert not fb.correct and "9.40" in fb.message and fb.hint


@pytest.mark.parametrize("check", [
    lambda a: check_induction_head(a, DATA), lambda a: check_circuit_loss(a, DATA),
    lambda a: check_one_layer_halves(a, DATA),
])
def test_bad_inputs_never_raise(check):
    for bad in BAD_INPUTS + [-1, 99, True]:
        fb = check(bad)
        assert not fb.correct and fb.message, bad


def test_widgets(fake_data):
    ex = exercise(7, "circuit_loss")
    ex.control.value = "4.3"
    assert not ex.check().correct and "intact" in ex.feedback.value
    ex.control.value = "8.9"
    assert ex.check().correct and "Correct" in ex.feedback.value
    ex = exercise(7, "one_layer_halves")
    ex.control.value = HALVES_OPTIONS[0]
    assert ex.check().correct
    ex = exercise(7, "induction_head")
    ex.control.value = 2
    assert ex.check().correct and "Correct." in ex.feedback.value
    ex.control.value = 1
    assert not ex.check().correct and "previous-token head" in ex.feedback.value


# ----------------------------------------------------------------------------- patching_table, predict_patch
# The shape of patching_data(); the numbers are made up near the chapter's (no test trains a model).
PATCH_DATA = {
    "n": 64, "clean": 4.3, "corrupt": -4.2, "labels": ["L0 H0", "L0 H1", "L1 H0", "L1 H1"],
    "denoising": [0.05, 0.004, 0.59, 0.21], "noising": [0.98, 1.008, 0.41, 0.79],
    "prev_head": 1, "ind_head": 2, "intact": 2.57, "without_prev": 5.37,
    "layer": 1, "position": 3, "query": 6, "resid_den": [0.0, 0.0, 0.001, 1.002, 0.006, 0.0, 0.0],
    "resid_noise": 0.011,
}


def _with_prev(den, noi, **more):
    """PATCH_DATA with the previous-token head's two scores replaced."""
    return dict(PATCH_DATA, denoising=[0.05, den, 0.59, 0.21], noising=[0.98, noi, 0.41, 0.79], **more)


def test_table_reading_follows_both_scores():
    assert table_reading(0.95, 0.05) == TABLE_OPTIONS[0]
    assert table_reading(0.9, 0.95) == TABLE_OPTIONS[1]
    assert table_reading(0.1, 0.1) == TABLE_OPTIONS[2]
    assert table_reading(0.004, 1.008) == TABLE_OPTIONS[3]
    assert table_reading(0.5, 0.5) == TABLE_OPTIONS[0]          # the thresholds the question states are inclusive


def test_patching_table_accepts_the_reading_of_the_two_numbers():
    fb = check_patching_table(TABLE_OPTIONS[3], PATCH_DATA)
    assert fb.correct and "L0 H1" in fb.message and "closes 0.00" in fb.message and "keeps 1.01" in fb.message
    assert "from 2.57 to 5.37 nats" in fb.message and "serves the where" in fb.message    # the ablation disagrees
    assert "L1 H0: 0.59 in denoising, 0.41 in noising" in fb.message
    # the contrast with the ablation is said only where the ablation found the head important
    assert "serves the where" not in check_patching_table(TABLE_OPTIONS[3], dict(PATCH_DATA, without_prev=2.6)).message


@pytest.mark.parametrize("option, fragments", [
    (TABLE_OPTIONS[0], ["it closes 0.00", "still keeps 1.01", "near 1 means that nothing was lost",
                        "carries the difference by itself"]),
    (TABLE_OPTIONS[1], ["it closes 0.00", "A component with a backup scores high in denoising"]),
    (TABLE_OPTIONS[2], ["still keeps 1.01", "near 1 means that nothing was lost", "scores low in both tables"]),
])
def test_patching_table_says_why_each_wrong_reading_does_not_follow(option, fragments):
    fb = check_patching_table(option, PATCH_DATA)
    assert not fb.correct and fb.hint
    for fragment in fragments:
        assert fragment in fb.message, (fragment, fb.message)
    if option != TABLE_OPTIONS[0]:      # a reading that gets one half right is told only about the other half
        assert ("it closes" in fb.message) != ("still keeps" in fb.message)


def test_patching_table_follows_the_data():
    for den, noi, option in ((0.9, 0.1, 0), (0.9, 0.95, 1), (0.1, 0.1, 2), (0.1, 0.9, 3)):
        data = _with_prev(den, noi)
        verdicts = [check_patching_table(o, data).correct for o in TABLE_OPTIONS]
        assert verdicts == [i == option for i in range(4)], (den, noi, verdicts)
    # a head that is sufficient: the reader who says "not sufficient" is told it closes at least half of the gap
    fb = check_patching_table(TABLE_OPTIONS[3], _with_prev(0.9, 0.95))
    assert not fb.correct and "closes 0.90" in fb.message and "at least half" in fb.message
    fb = check_patching_table(TABLE_OPTIONS[3], _with_prev(0.1, 0.1))
    assert not fb.correct and "keeps only 0.10" in fb.message


def test_patch_band_edges():
    assert [patch_band(v) for v in (-0.5, -0.2, 0.0, 0.2, 0.21, 0.79, 0.8, 1.3)] == [
        PATCH_OPTIONS[0], PATCH_OPTIONS[1], PATCH_OPTIONS[1], PATCH_OPTIONS[1], PATCH_OPTIONS[2], PATCH_OPTIONS[2],
        PATCH_OPTIONS[3], PATCH_OPTIONS[3]]


def test_predict_patch_accepts_the_measured_band():
    fb = check_predict_patch(PATCH_OPTIONS[1], PATCH_DATA)
    assert fb.correct and "Measured on the 64 held-out pairs: 0.01" in fb.message
    assert "1.00 of the difference at B's position (3)" in fb.message and "at most 0.006" in fb.message


@pytest.mark.parametrize("option, fragment", [
    (PATCH_OPTIONS[0], "further toward B' than the corrupted run"),
    (PATCH_OPTIONS[2], "like the induction head L1 H0 (noising 0.41)"),
    (PATCH_OPTIONS[3], "Noising reads the other way round from denoising"),
])
def test_predict_patch_says_why_each_wrong_prediction_does_not_follow(option, fragment):
    fb = check_predict_patch(option, PATCH_DATA)
    assert not fb.correct and fragment in fb.message and fb.hint
    assert "Measured on the 64 held-out pairs: 0.01" in fb.message


def test_predict_patch_follows_the_data():
    for score, k in ((-0.6, 0), (0.011, 1), (0.5, 2), (0.97, 3)):
        data = dict(PATCH_DATA, resid_noise=score)
        assert [check_predict_patch(o, data).correct for o in PATCH_OPTIONS] == [i == k for i in range(4)], score
    fb = check_predict_patch(PATCH_OPTIONS[1], dict(PATCH_DATA, resid_noise=0.97))
    assert not fb.correct and "Measured on the 64 held-out pairs: 0.97" in fb.message and "hardly notices" in fb.message
    assert "the whole difference enters" not in fb.message      # that reason is given only for a score near 0


@pytest.mark.parametrize("check", [
    lambda a: check_patching_table(a, PATCH_DATA), lambda a: check_predict_patch(a, PATCH_DATA),
])
def test_patching_bad_inputs_never_raise(check):
    for bad in BAD_INPUTS + [-1, 99, True, "about 0", 0.0]:
        fb = check(bad)
        assert not fb.correct and fb.message, bad
        if not hasattr(bad, "shape"):   # an array is refused by core.parse_choice's generic message
            assert "is not one of the options" in fb.message or "choose" in fb.message, (bad, fb.message)


def test_patching_widgets(monkeypatch):
    for name in ("patching_table", "predict_patch"):
        monkeypatch.setitem(registry._DATA_CACHE, (7, name), PATCH_DATA)
    ex = exercise(7, "patching_table")
    assert not ex.check().correct and "choose" in ex.feedback.value
    ex.control.value = TABLE_OPTIONS[2]
    assert not ex.check().correct and "nothing was lost" in ex.feedback.value
    ex.control.value = TABLE_OPTIONS[3]
    assert ex.check().correct and "Correct." in ex.feedback.value
    ex = exercise(7, "predict_patch")
    ex.control.value = PATCH_OPTIONS[3]
    assert not ex.check().correct and "other way round" in ex.feedback.value
    ex.control.value = PATCH_OPTIONS[1]
    assert ex.check().correct and "0.01" in ex.feedback.value


# ---------------------------------------------------- the circuit lab's exercises (own sequences)
LAB = {"checkpoint": "step-1200", "induction_head": [1, 0], "previous_head": [0, 1], "induction_score": 0.7,
       "previous_score": 0.76,
       "variants": [{"name": "intact", "edits": []},
                    {"name": "induction_off", "edits": [{"layer": 1, "head": 0, "mode": "zero"}]},
                    {"name": "previous_off", "edits": [{"layer": 0, "head": 1, "mode": "zero"}]}]}


def _lab_answer(words, intact, ind_off, prev_off=None):
    return {"texts": [" ".join(words)], "runs": [{"words": words, "loss": {
        "intact": intact, "induction_off": ind_off, "previous_off": prev_off if prev_off is not None else intact}}]}


def test_copy_wrong_right_when_the_head_hurt_where_copying_is_wrong():
    words = ["a", "b", "c", "a", "d"]                 # position 3 ('a' again) is followed by 'd', not 'b'
    assert ch07.copy_kinds(words) == ["first", "first", "first", "other"]
    fb = check(7, "copy_wrong", _lab_answer(words, [3, 3, 3, 4.0], [3, 3, 3, 2.5]), LAB)
    assert fb.correct and "lowers the loss by 1.50 nats" in fb.message and "'d' after 'a'" in fb.message
    fb = check(7, "copy_wrong", _lab_answer(words, [3, 3, 3, 2.0], [3, 3, 3, 2.5]), LAB)
    assert not fb.correct and "+0.50 nats" in fb.message and fb.hint


def test_copy_wrong_names_what_the_sequence_lacks():
    no_repeat = check(7, "copy_wrong", _lab_answer(["a", "b", "c"], [1, 1], [1, 1]), LAB)
    assert not no_repeat.correct and "nothing to copy" in no_repeat.message
    only_right = check(7, "copy_wrong", _lab_answer(["a", "b", "a", "b"], [3, 3, 1.0], [3, 3, 2.0]), LAB)
    assert not only_right.correct and "copying is right" in only_right.message and "+1.00" in only_right.message
    assert "the head helps" in only_right.message
    lower = check(7, "copy_wrong", _lab_answer(["a", "b", "a", "b"], [3, 3, 2.0], [3, 3, 1.5]), LAB)
    assert not lower.correct and "-0.50" in lower.message and "the head helps" not in lower.message


def test_feeder_matters_compares_the_two_links_on_copyable_words():
    words = ["a", "b", "c", "d", "a", "b", "c", "d"]  # positions 4, 5, 6 predict b, c, d by copying
    same = [k == "same" for k in ch07.copy_kinds(words)]
    assert sum(same) == 3
    intact = [3.0] * 7
    ind = [3.0] * 4 + [2.0] * 3
    right_ = check(7, "feeder_matters", _lab_answer(words, [3.0] * 4 + [1.0] * 3, ind, [3.0] * 4 + [2.5] * 3), LAB)
    assert right_.correct and "+1.50" in right_.message and "+1.00" in right_.message
    wrong_ = check(7, "feeder_matters", _lab_answer(words, [3.0] * 4 + [1.0] * 3, [3.0] * 4 + [2.5] * 3, ind), LAB)
    assert not wrong_.correct and "the induction head matters more" in wrong_.message
    # both switches lower the loss: the feeder "matters more" only by falling less, which is not mattering
    neither = check(7, "feeder_matters", _lab_answer(words, [3.0] * 4 + [1.0] * 3, [3.0] * 4 + [0.5] * 3,
                                                     [3.0] * 4 + [0.9] * 3), LAB)
    assert not neither.correct and "does not raise it" in neither.message
    few = check(7, "feeder_matters", _lab_answer(["a", "b", "a", "b"], [1, 1, 1], [1, 1, 1]), LAB)
    assert not few.correct and "at least 3" in few.message



@pytest.mark.parametrize("name", ["copy_wrong", "feeder_matters"])
@pytest.mark.parametrize("forged", [float("nan"), True, -1.0, "2.0", float("inf")])
def test_lab_answers_with_forged_losses_are_refused(name, forged):
    words = ["a", "b", "c", "a", "d", "b", "c", "d"]
    answer = _lab_answer(words, [1.0] * 7, [forged] + [1.0] * 6)
    fb = check(7, name, answer, LAB)
    assert not fb.correct and "could not be read" in fb.message


@pytest.mark.parametrize("answer, message", [
    ("we are met", "press Check"),
    ({"texts": ["  "]}, "empty"),
    ({"texts": ["xylophone"], "error": "\u201cxylophone\u201d is not in the model's vocabulary"}, "could not read your words"),
    ({"texts": ["a b"], "runs": []}, "missing"),
    (None, "could not be read"),
])
@pytest.mark.parametrize("name", ["copy_wrong", "feeder_matters"])
def test_lab_exercises_give_feedback_not_tracebacks(name, answer, message):
    fb = check(7, name, answer, LAB)
    assert not fb.correct and message in fb.message


def test_lab_exercises_in_the_kernel_read_the_models_words():
    """The kernel's answer (circuit_lab.read with the exercise's variants) on the solution's
    example: the induction head switched off lowers the loss of 'nation'."""
    from attnlib import circuit_lab
    data = ch07.lab_data()
    text = "we are met on a great battle-field of that war . we are met on a great battle-field of that nation"
    answer = circuit_lab.read([text], data["checkpoint"], data["variants"])
    assert check(7, "copy_wrong", answer, data).correct
    refused = circuit_lab.read(["we are met on a great battel-field"], data["checkpoint"], data["variants"])
    assert "did you mean \u201cbattle-field\u201d?" in refused["error"]
    assert not check(7, "copy_wrong", refused, data).correct


@pytest.mark.parametrize("name", ["copy_wrong", "feeder_matters"])
@pytest.mark.parametrize("text", ["fourscore and seven years ago", "we are met on a great battel-field", "gettysburg"])
def test_an_unknown_word_gets_the_labs_own_refusal_with_its_suggestions(name, text):
    """One definition (ch07.unknown_word): the kernel's reader raises it and the grader's
    feedback carries it whole, "did you mean" included, and points to the vocabulary list."""
    from attnlib import circuit_lab, corpus, induction
    data = ch07.lab_data()
    unknown = [w for w in corpus.words_of(text) if w not in induction.vocabulary()][0]
    message = ch07.unknown_word(unknown, induction.vocabulary())
    refused = circuit_lab.read([text], data["checkpoint"], data["variants"])
    assert refused["error"] == message
    fb = check(7, name, refused, data)
    assert not fb.correct and fb.message == f"The model could not read your words: {message}"
    assert "vocabulary list" in fb.hint


def test_patching_data_is_the_chapters_tables_without_the_induction_exercises_data(monkeypatch):
    """patching_data() on the trained model (the chapter's run) gives the chapter's tables, read
    as the chapter reads them, without computing induction_data() (its ablations of every
    layer-0 head, which the patching exercises never read: they made the patching widget's cell
    the peak of chapter 7's kernel in Binder)."""
    from attnlib import induction, patching
    from attnlib.transformer import run

    def refused():
        raise AssertionError("patching_data computed induction_data")

    monkeypatch.setattr(ch07, "induction_data", refused)
    data = ch07.patching_data.__wrapped__()
    model, _ = induction.trained(2, 0)
    pairs = patching.induction_pairs(64, seed=0)
    clean_run, corrupt_run = run(model, pairs["clean"]), run(model, pairs["corrupt"])
    clean, corrupt = patching.logit_diff(clean_run.logits, pairs), patching.logit_diff(corrupt_run.logits, pairs)
    den = patching.normalised(patching.patch_table(model, pairs["corrupt"], clean_run, pairs), clean, corrupt)
    noi = patching.normalised(patching.patch_table(model, pairs["clean"], corrupt_run, pairs), clean, corrupt)
    resid = patching.normalised(patching.patch_table(model, pairs["corrupt"], clean_run, pairs, site="resid_pre"),
                                clean, corrupt)
    ind, prev = induction.induction_scores(model), induction.previous_token_scores(model)
    assert (data["clean"], data["corrupt"]) == (round(clean, 3), round(corrupt, 3))
    assert data["denoising"] == [round(float(x), 3) for x in den.flatten()]
    assert data["noising"] == [round(float(x), 3) for x in noi.flatten()]
    assert data["resid_den"] == [round(float(x), 3) for x in resid[data["layer"]]]
    edit = {"layer": data["layer"], "head": None, "mode": "patch", "source": corrupt_run, "position": pairs["position"]}
    noised = patching.normalised(patching.logit_diff(run(model, pairs["clean"], edits=[edit]).logits, pairs), clean, corrupt)
    assert data["resid_noise"] == round(noised, 3)
    last = (model.n_layers - 1) * model.n_heads
    assert data["prev_head"] == int(prev[0].argmax()) and data["ind_head"] == last + int(ind[-1].argmax())
    assert data["intact"] == round(induction.repeated_loss(model), 3)
