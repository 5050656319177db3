"""Chapter 8 exercise checkers and widgets: right answers pass, typical slips get their
specific message, and nothing a learner types raises."""
import math

import numpy as np
import pytest
import torch

from attnlib.corpus import RUNNING
from attnlib.exercises import ch08, exercise, exercise_names

BAD_INPUTS = [None, "", "abc", float("nan"), float("inf"), [1.0, 2.0], np.ones((2, 2)), torch.ones(3), True]
CHECKERS = [ch08.check_sink, ch08.check_acyclic, ch08.check_rollout]


def test_three_exercises_registered():
    assert exercise_names(8) == ["sink", "acyclic", "rollout"]


# --- sink: oracle is the encoder's own attention, column sums computed here -------------------
@pytest.fixture(scope="module")
def sink_oracle(encoder):
    model, tok = encoder
    enc = tok(RUNNING, return_tensors="pt")
    with torch.no_grad():
        weights = model(**enc, output_attentions=True).attentions[ch08.SINK_HEAD[0]][0, ch08.SINK_HEAD[1]]
    tokens = tok.convert_ids_to_tokens(enc["input_ids"][0])
    shares = weights.sum(0) / weights.shape[0]  # column sums / T
    order = torch.argsort(shares, descending=True).tolist()
    return tokens, shares, order


def test_sink_case_matches_column_sums(sink_oracle):
    tokens, shares, _ = sink_oracle
    got_tokens, got = ch08.sink_case()
    assert got_tokens == tokens
    np.testing.assert_allclose(got, shares.double().numpy(), atol=1e-6)
    assert math.isclose(sum(got), 1.0, abs_tol=1e-5)


def test_sink_accepts_the_sink_by_position_and_text(sink_oracle):
    tokens, _, order = sink_oracle
    best = order[0]
    assert ch08.check_sink(best).correct
    if tokens.count(tokens[best]) == 1:
        assert ch08.check_sink(tokens[best]).correct


def test_sink_explains_typical_wrong_picks(sink_oracle):
    tokens, _, order = sink_oracle
    fb = ch08.check_sink(tokens.index("[CLS]"))
    assert not fb.correct and "most heads" in fb.message
    fb = ch08.check_sink(order[1])
    assert not fb.correct and "second strongest" in fb.message
    fb = ch08.check_sink(order[-1])
    assert not fb.correct and "column sums" in fb.message
    fb = ch08.check_sink("the")
    assert not fb.correct and "occurs 2 times" in fb.message
    fb = ch08.check_sink(len(tokens))
    assert not fb.correct and "outside the sentence" in fb.message


# --- acyclic: graded with networkx, any maximal DAG is right ----------------------------------
def test_acyclic_accepts_the_causal_mask_and_any_reordered_one():
    T = len(ch08.ACYCLIC_TOKENS)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    fb = ch08.check_acyclic(causal)
    assert fb.correct and "causal mask" in fb.message
    assert ch08.check_acyclic(causal.T.tolist()).correct  # anti-causal: causal for reversed order
    perm = [2, 0, 3, 1]
    reordered = np.zeros((T, T), dtype=int)
    for a in range(T):
        for b in range(a + 1):
            reordered[perm[a], perm[b]] = 1
    fb = ch08.check_acyclic(reordered)
    assert fb.correct and "sing, [CLS], [SEP], birds" in fb.message


def test_acyclic_names_the_cycle_the_missing_self_loops_and_the_missing_edges():
    T = len(ch08.ACYCLIC_TOKENS)
    fb = ch08.check_acyclic(torch.ones(T, T, dtype=torch.bool))
    assert not fb.correct and "directed cycle: [CLS] -> birds -> [CLS]" in fb.message
    three = torch.eye(T, dtype=torch.bool)
    three[1, 2] = three[2, 3] = three[3, 1] = True  # birds -> sing -> [SEP] -> birds
    fb = ch08.check_acyclic(three)
    assert not fb.correct and "directed cycle" in fb.message and fb.message.count("->") == 3
    fb = ch08.check_acyclic(torch.zeros(T, T, dtype=torch.bool))
    assert not fb.correct and "self-loops" in fb.message
    sparse = torch.eye(T, dtype=torch.bool)
    sparse[1, 0] = True
    fb = ch08.check_acyclic(sparse)
    assert not fb.correct and "only 1 of the 6" in fb.message


def test_acyclic_suggested_edge_really_keeps_the_graph_acyclic():
    T = len(ch08.ACYCLIC_TOKENS)
    m = torch.tril(torch.ones(T, T, dtype=torch.bool))
    m[3, 0] = False
    fb = ch08.check_acyclic(m)
    assert not fb.correct and "only 5 of the 6" in fb.message
    i, j = (ch08.ACYCLIC_TOKENS.index(t) for t in fb.message.split("add ")[1].split(" without")[0].split(" -> "))
    m[i, j] = True
    assert ch08.check_acyclic(m).correct


def test_acyclic_rejects_bad_shapes_and_dtypes():
    for bad, phrase in [(np.ones((3, 3)), "shape (4, 4)"), ([[0.5] * 4] * 4, "True/False"),
                        (np.full((4, 4), "x"), "True/False"), ("xxxx", "could not read")]:
        fb = ch08.check_acyclic(bad)
        assert not fb.correct and phrase in fb.message, fb.message


# --- rollout: the right value by hand, each slip by its own arithmetic ------------------------
def test_rollout_accepts_the_hand_computed_value():
    # Â0 = [[.8, .2], [.1, .9]], Â1 = [[.95, .05], [.25, .75]] (layers from 0); R[1, 0] = .25 * .8 + .75 * .1
    expected = 0.25 * 0.8 + 0.75 * 0.1
    for answer in (expected, "0.275", "0,275", np.float32(0.2751)):
        assert ch08.check_rollout(answer).correct, answer


@pytest.mark.parametrize("answer, phrase", [
    (0.5 * 0.6 + 0.5 * 0.2, "without the residual"),   # A1 A0
    (0.1 * 0.95 + 0.9 * 0.25, "Â0 Â1"),                # wrong order
    (0.25, "layer 1 alone"),                          # Â1[1, 0]
    (0.25 * 0.2 + 0.75 * 0.9, "R[1, 1]"),              # the other entry of the row
    (1.7, "not a share"),
    (0.9, "is not R[1, 0]"),
])
def test_rollout_names_the_slip(answer, phrase):
    fb = ch08.check_rollout(answer)
    assert not fb.correct and phrase in fb.message, fb.message


@pytest.mark.parametrize("check", CHECKERS)
@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_bad_inputs_never_raise(check, bad):
    fb = check(bad)
    assert fb.correct is False and fb.message


# --- widgets ---------------------------------------------------------------------------------
def test_sink_widget(sink_oracle):
    _, _, order = sink_oracle
    w = exercise(8, "sink")
    w.control.value = order[0]
    assert w.check().correct and "Correct." in w.feedback.value
    w.control.value = order[1]
    assert not w.check().correct and "second strongest" in w.feedback.value


def test_acyclic_widget():
    w = exercise(8, "acyclic")
    T = len(ch08.ACYCLIC_TOKENS)
    assert not w.check().correct and "self-loops" in w.feedback.value
    w.set_answer(torch.tril(torch.ones(T, T)).tolist())
    assert w.check().correct and "causal mask" in w.feedback.value
    w.set_answer(torch.ones(T, T).tolist())
    assert not w.check().correct and "directed cycle" in w.feedback.value


def test_rollout_widget():
    w = exercise(8, "rollout")
    w.control.value = "0.275"
    assert w.check().correct and "Correct." in w.feedback.value
    w.control.value = "0.4"
    assert not w.check().correct and "residual" in w.feedback.value
    w.control.value = ""
    assert not w.check().correct and "empty" in w.feedback.value


def test_rollout_counts_layers_from_zero():
    """The course numbers layers from 0: the question and every message say A0/A1, never A2."""
    from attnlib.exercises.registry import definition
    spec = definition(8, "rollout")
    texts = [ch08.check_rollout(a).message for a in (0.275, 0.4, 0.32, 0.25, 0.9)]
    texts += [ch08.check_rollout(0.9).hint or ""]
    texts.append(str(spec.question))
    for text in texts:
        assert "A2" not in text and "Â2" not in text and "layer 2" not in text, text
