"""Chapter 9 exercises: the right answers are recomputed here from the model called directly
(not through attnlib.encoder or attnlib.measures), typical wrong answers get their specific message, and
bad input never raises."""
import math

import numpy as np
import pytest
import torch

from attnlib.exercises import Feedback, exercise, exercise_names
from attnlib import corpus
from attnlib.exercises import ch09

BAD = [None, "", "   ", "abc", math.nan, math.inf, -math.inf, 2.0, True, [1, 2], (3,), {"x": 1},
       np.array([1, 2]), torch.tensor([0.5]), 99, -1, "flies"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _direct(encoder, sentence, layer, head):
    model, tokenizer = encoder
    enc = tokenizer(sentence, return_tensors="pt")
    with torch.no_grad():
        weights = model(**enc, output_attentions=True).attentions[layer][0, head]  # (T, T)
    return tokenizer.convert_ids_to_tokens(enc["input_ids"][0]), weights


@pytest.fixture(scope="module")
def sink_truth(encoder):
    tokens, weights = _direct(encoder, ch09.SINK_SENTENCE, *ch09.SINK_HEAD)
    received = weights.mean(dim=0)  # column means
    return tokens, received


@pytest.fixture(scope="module")
def query_truth(encoder):
    tokens, weights = _direct(encoder, ch09.QUERY_SENTENCE, *ch09.QUERY_HEAD)
    i = tokens.index(ch09.QUERY_WORD)
    return tokens, i, weights[i]


def test_registered():
    assert {"sink_token", "most_attended"} <= set(exercise_names(9))


def test_cases_match_the_model(sink_truth, query_truth):
    tokens, received = sink_truth
    got_tokens, got_received = ch09.sink_case()
    assert got_tokens == tokens
    np.testing.assert_allclose(got_received, received.numpy(), atol=1e-6)
    tokens, i, row = query_truth
    got_tokens, got_i, got_row = ch09.query_case()
    assert (got_tokens, got_i) == (tokens, i)
    np.testing.assert_allclose(got_row, row.numpy(), atol=1e-6)
    assert abs(sum(got_row) - 1) < 1e-5


def test_sink_right_answer_by_position_and_text(sink_truth):
    tokens, received = sink_truth
    best = int(received.argmax())
    assert tokens[best] == "."  # the exercise's premise: this head's sink is the full stop
    for answer in (best, np.int64(best), tokens[best]):
        fb = ch09.check_sink_token(answer)
        assert fb.correct and f"{received[best].item():.0%}" in fb.message


def test_sink_typical_wrong_answers(sink_truth):
    tokens, received = sink_truth
    fb = ch09.check_sink_token(tokens.index("[CLS]"))
    assert not fb.correct and "[CLS] is the sink of most heads" in fb.message and fb.hint
    for tok in (",", ";", "[SEP]"):
        fb = ch09.check_sink_token(tokens.index(tok))
        assert not fb.correct and "right kind of token" in fb.message
        assert f"{received[tokens.index(tok)].item():.0%}" in fb.message
    fb = ch09.check_sink_token(tokens.index("storm"))
    assert not fb.correct and "not content words" in fb.message


def test_most_attended_right_answer(query_truth):
    tokens, i, row = query_truth
    best = int(row.argmax())
    assert tokens[best] == "[CLS]" and tokens[i + 1] == "in"  # the premise the solution explains
    fb = ch09.check_most_attended(best)
    assert fb.correct and f"{row[best].item():.0%}" in fb.message


def test_most_attended_typical_wrong_answers(query_truth):
    tokens, i, row = query_truth
    fb = ch09.check_most_attended(i + 1)  # the next token: the head's job, but not the maximum
    assert not fb.correct and "next token" in fb.message and f"{row[i + 1].item():.0%}" in fb.message
    fb = ch09.check_most_attended(i - 1)
    assert not fb.correct and "previous token" in fb.message
    fb = ch09.check_most_attended(i)
    assert not fb.correct and "attends to itself" in fb.message
    fb = ch09.check_most_attended(tokens.index("river"))
    assert not fb.correct and "'river' gets" in fb.message


@pytest.mark.parametrize("bad", BAD, ids=repr)
@pytest.mark.parametrize("check", [ch09.check_sink_token, ch09.check_most_attended])
def test_bad_input_never_raises(check, bad):
    fb = check(bad)
    assert isinstance(fb, Feedback) and not fb.correct and fb.message


@pytest.mark.parametrize("name,check", [("sink_token", ch09.check_sink_token),
                                        ("most_attended", ch09.check_most_attended)])
def test_widgets_give_feedback(name, check):
    ex = exercise(9, name)
    tokens = [label for label, _ in ex.control.options]
    assert "[CLS]" in tokens and ex.check().correct is False  # nothing chosen yet
    assert "Please pick a token" in ex.feedback.value
    wrong_pos = tokens.index("[SEP]")
    ex.control.value = wrong_pos
    assert not ex.check().correct and "Not yet." in ex.feedback.value
    right_pos = next(p for p in range(len(tokens)) if check(p).correct)
    ex.control.value = right_pos
    fb = ex.check()
    assert fb.correct and "Correct." in ex.feedback.value and ex.last is fb


# ---------------------------------------------------------------------- claim (the baseline method)
@pytest.fixture(scope="module")
def claim():
    return ch09.claim_evidence()


def test_claim_evidence_matches_the_model(encoder, claim):
    """Every weight in the table, recomputed from the model called directly."""
    layer, head = ch09.CLAIM_HEAD
    for (text, subject, other), row in zip(ch09.CLAIM_SENTENCES, claim["rows"]):
        tokens, weights = _direct(encoder, text, layer, head)
        i = tokens.index("flies")
        assert row["uniform"] == round(1 / len(tokens), 3) and row["previous"] == tokens[i - 1]
        assert math.isclose(row["w_previous"], weights[i, i - 1].item(), abs_tol=6e-4)
        for key, name in ((subject, "w_subject"), (other, "w_other")):
            if key:
                assert math.isclose(row[name], weights[i, tokens.index(key)].item(), abs_tol=6e-4)
    assert claim["lift"]["-1"] > 5 > claim["lift"]["1"]             # a previous-token head, measured


def test_claim_verdict_follows_the_data(claim):
    fb = ch09.check_claim(ch09.CLAIM_OPTIONS[1], claim)
    assert fb.correct and "slowly" in fb.message and "14.9" in fb.message
    for option, phrase in zip((ch09.CLAIM_OPTIONS[0], *ch09.CLAIM_OPTIONS[2:]),
                              ("not ignoring its input", "never adjacent", "ablation")):
        fb = ch09.check_claim(option, claim)
        assert not fb.correct and phrase in fb.message, fb.message
    # if the subject won even when moved away, the verdict must flip: the checker reads the data
    flipped = {"rows": [dict(r, w_subject=0.9) if r["subject"] == "bird" else r for r in claim["rows"]],
               "lift": claim["lift"]}
    assert ch09.check_claim(ch09.CLAIM_OPTIONS[0], flipped).correct


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_claim_bad_input_never_raises(bad, claim):
    fb = ch09.check_claim(bad, claim)
    assert isinstance(fb, Feedback) and not fb.correct and fb.message


def test_claim_widget():
    ex = exercise(9, "claim")
    ex.control.value = ch09.CLAIM_OPTIONS[2]
    assert not ex.check().correct and "never adjacent" in ex.feedback.value
    ex.control.value = ch09.CLAIM_OPTIONS[1]
    assert ex.check().correct and "Correct." in ex.feedback.value


# ----------------------------------------------------------------------------- your own sentences
def _rows(T, favourite, margin=0.3):
    """T rows: query i puts weight on favourite(i), the rest spread evenly, margin above the rest."""
    rows = []
    for i in range(T):
        rest = (1 - margin) / T
        row = [rest] * T
        row[favourite(i)] += margin
        rows.append(row)
    return rows


def _answer(tokens, rows, head):
    return {"texts": [" ".join(tokens)], "runs": [{"tokens": tokens, "heads": {f"{head[0]}:{head[1]}": rows}}]}


def test_break_previous_on_synthetic_readings():
    tokens = ["[CLS]", "a", "b", "c", "d", "[SEP]"]
    prev = _rows(6, lambda i: max(i - 1, 0))
    assert not ch09.check_break_previous(_answer(tokens, prev, ch09.PREV_HEAD)).correct
    broken = _rows(6, lambda i: 1 if i == 4 else max(i - 1, 0))       # "d" looks at "a"
    fb = ch09.check_break_previous(_answer(tokens, broken, ch09.PREV_HEAD))
    assert fb.correct and "'d' (position 4)" in fb.message and "'a'" in fb.message
    close = _rows(6, lambda i: 1 if i == 4 else max(i - 1, 0), margin=ch09.CLOSE_CALL / 2)
    fb = ch09.check_break_previous(_answer(tokens, close, ch09.PREV_HEAD))
    assert not fb.correct and "too close to call" in fb.message
    special = _rows(6, lambda i: 0)                                   # only [CLS] ... but [CLS] is allowed as a key
    assert ch09.check_break_previous(_answer(tokens, special, ch09.PREV_HEAD)).correct


def test_flip_pair_needs_one_changed_token_and_a_clear_flip():
    a = ["[CLS]", "the", "cat", "sat", ",", "then", "[SEP]"]
    b = ["[CLS]", "the", "cat", "sat", "and", "then", "[SEP]"]
    to_comma = _rows(7, lambda i: 4)
    to_cls = _rows(7, lambda i: 0)
    def pair(ta, ra, tb, rb):
        key = f"{ch09.FLIP_HEAD[0]}:{ch09.FLIP_HEAD[1]}"
        return {"texts": ["A", "B"], "runs": [{"tokens": ta, "heads": {key: ra}}, {"tokens": tb, "heads": {key: rb}}]}
    fb = ch09.check_flip_pair(pair(a, to_comma, b, to_cls))
    assert fb.correct and "Query" in fb.message
    assert not ch09.check_flip_pair(pair(a, to_cls, b, to_cls)).correct          # nothing moves
    assert not ch09.check_flip_pair(pair(a, to_cls, a, to_comma)).correct         # same tokens
    far = ["[CLS]", "a", "dog", "ran", ",", "then", "[SEP]"]
    fb = ch09.check_flip_pair(pair(a, to_comma, far, to_cls))
    assert not fb.correct and "differ in 3 tokens" in fb.message
    shorter = ["[CLS]", "the", "cat", "sat", "then", "[SEP]"]                    # one token removed
    assert ch09.check_flip_pair(pair(a, to_comma, shorter, _rows(6, lambda i: 0))).correct


@pytest.mark.parametrize("answer, message", [
    ("The cat sat.", "graded on what the model does"),
    ({"texts": [""]}, "empty"),
    ({"texts": ["a", "b"]}, "one sentence"),
    ({"texts": ["a"], "error": "the input is 600 tokens long"}, "could not read your text: the input is 600"),
    ({"texts": ["a"], "runs": [{"tokens": ["[CLS]", "a", "[SEP]"], "heads": {"0:2": [[1, 0, 0]] * 2}}]}, "could not be read"),
    ({"texts": ["a"], "runs": [{"tokens": ["[CLS]", "a", "[SEP]"], "heads": {"0:2": [[0.5, 0.1, 0]] * 3}}]}, "could not be read"),
])
def test_sentence_answers_that_cannot_be_graded_get_feedback(answer, message):
    fb = ch09.check_break_previous(answer)
    assert not fb.correct and message in fb.message


def test_sentence_exercises_on_the_real_model_and_the_widget():
    from attnlib.exercises.widgets import build, model_answer

    words = corpus.load_text().split()
    assert not ch09.check_break_previous(model_answer(["The cat sat on the mat."], [ch09.PREV_HEAD])).correct
    assert ch09.check_break_previous(model_answer([" ".join(words[:150])], [ch09.PREV_HEAD])).correct
    widget = build(9, "flip_pair")
    widget.set_answer("The cat sat, then it slept.", "The cat sat and then it slept.")
    assert widget.check().correct and "Correct." in widget.feedback.value
    widget.set_answer("The cat sat, then it slept.", "")
    assert "empty" in widget.check().message
    too_long = build(9, "break_previous")
    too_long.set_answer("word " * 600)
    fb = too_long.check()
    assert not fb.correct and "512" in fb.message


def test_claim_reads_fruit_against_the_uniform_weight_as_the_chapter_does(claim):
    """Issue 37: the chapter reads the weight on 'fruit' as a multiple of the uniform weight; the
    grader's message reads it the same way, from the data it is given."""
    fruit = next(r for r in claim["rows"] if r["subject"] is None and r["previous"] == "fruit")
    message = ch09.check_claim(ch09.CLAIM_OPTIONS[1], claim).message
    ratio = fruit["w_previous"] / fruit["uniform"]
    assert f"gets {fruit['w_previous']:.3f}, {ratio:.1f} times the uniform {fruit['uniform']:.3f}" in message
    halved = {"rows": [dict(r, uniform=r["uniform"] * 2) if r is fruit else r for r in claim["rows"]],
              "lift": claim["lift"]}
    assert f"{ratio / 2:.1f} times the uniform" in ch09.check_claim(ch09.CLAIM_OPTIONS[1], halved).message
