"""Chapter 3 exercise checkers and widgets: right answers pass, typical slips get their message."""
import math

import numpy as np
import pytest
import torch

from attnlib import softmax
from attnlib.exercises import ch03, exercise, exercise_names
from attnlib.encoder import head_qkv

BAD_INPUTS = [None, "", "abc", float("nan"), float("inf"), [1.0, 2.0], np.ones((2, 2)), torch.ones(3), True]


@pytest.fixture(scope="module")
def data():
    return ch03.example()


def _matvec(rows, vec):
    return [sum(a * x for a, x in zip(row, vec)) for row in rows]


def test_example_is_the_real_head(data):
    # Oracle: the encoder's own attention for layer 0, head 5, rounded like the table.
    from attnlib.encoder import load_encoder

    model, tokenizer = load_encoder()
    enc = tokenizer(ch03.SENTENCE, return_tensors="pt").to(model.device)
    with torch.no_grad():
        ref = model(**enc, output_attentions=True).attentions[ch03.LAYER][0, ch03.HEAD].cpu()
    assert data["tokens"] == ["[CLS]", "hello", "there", "!", "[SEP]"]
    np.testing.assert_allclose(np.array(data["weights"]), ref.numpy(), atol=0.005 + 1e-6)
    tokens, q, k, v = head_qkv(ch03.SENTENCE, ch03.LAYER, ch03.HEAD)
    np.testing.assert_allclose(data["values"], v[:, data["feature"]].cpu().numpy(), atol=0.005 + 1e-6)


def test_row_entry_accepts_the_row_view_sum(data):
    i = data["query"]
    expected = _matvec(data["weights"], data["values"])[i]           # independent recomputation
    assert math.isclose(ch03.row_entry_expected(data), expected, abs_tol=1e-12)
    for answer in (expected, f"{expected:.3f}", str(round(expected, 2)).replace(".", ","), np.float32(expected)):
        fb = ch03.check_row_entry(answer, data=data)
        assert fb.correct, (answer, fb.message)


def test_row_entry_names_the_typical_slips(data):
    i, A, vals = data["query"], data["weights"], data["values"]
    column = sum(A[j][i] * vals[j] for j in range(len(vals)))
    cases = {
        column: "column",
        sum(vals) / len(vals): "plain average",
        sum(vals): "without weights",
        vals[i]: "own value",
        A[i][i] * vals[i]: "diagonal",
    }
    for answer, phrase in cases.items():
        fb = ch03.check_row_entry(answer, data=data)
        assert not fb.correct and phrase in fb.message, (answer, fb.message)
    fb = ch03.check_row_entry(ch03.row_entry_expected(data) + 0.5, data=data)
    assert not fb.correct and "too large" in fb.message and fb.hint


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_row_entry_bad_inputs_never_raise(data, bad):
    fb = ch03.check_row_entry(bad, data=data)
    assert fb.correct is False and fb.message


def test_spread_accepts_the_largest_entry_of_the_column(data):
    j = data["key"]
    column = [row[j] for row in data["weights"]]
    best = int(np.argmax(column))
    assert data["tokens"][best] == "!"
    assert ch03.check_spread(best, data=data).correct
    assert ch03.check_spread("!", data=data).correct


def test_spread_explains_row_column_confusion(data):
    j = data["key"]
    fb = ch03.check_spread(j, data=data)                               # the owner of the value
    assert not fb.correct and "owning a value" in fb.message
    row_best = int(np.argmax(data["weights"][j]))                      # where 'there' looks most
    fb = ch03.check_spread(row_best, data=data)
    assert not fb.correct and "row" in fb.message and "column" in fb.message
    fb = ch03.check_spread(1, data=data)
    assert not fb.correct and "moves by only" in fb.message


@pytest.mark.parametrize("bad", [None, "", "zebra", 99, -1, 2.5, float("nan"), True, [0]])
def test_spread_bad_inputs_never_raise(data, bad):
    fb = ch03.check_spread(bad, data=data)
    assert fb.correct is False and fb.message


@pytest.fixture(scope="module")
def longer():
    return ch03.longer_key_example()


def test_longer_key_example_against_the_model(longer):
    """Oracle: the model's own query and key layers (HEAD's 32 columns) on the input of layer 4,
    and its own eager attention weights; the longer key is that key row times 2, in float64."""
    import attnlib
    from attnlib.corpus import RUNNING
    model, tokenizer = attnlib.encoder.load_encoder()
    enc = tokenizer(RUNNING, return_tensors="pt").to(model.device)
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    L, H = ch03.LONGER_LAYER, ch03.LONGER_HEAD
    self_attn = model.encoder.layer[L].attention.self
    cols = slice(32 * H, 32 * H + 32)
    x = out.hidden_states[L][0].double()                                         # (T, d_model)
    with torch.no_grad():
        q = x @ self_attn.query.weight.double()[cols].T + self_attn.query.bias.double()[cols]   # (T, d_k)
        k = x @ self_attn.key.weight.double()[cols].T + self_attn.key.bias.double()[cols]       # (T, d_k)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    j = tokens.index(ch03.LONGER_KEY)
    assert longer["tokens"] == tokens and longer["key"] == j
    np.testing.assert_allclose(longer["scores"], (q @ k[j] / math.sqrt(32)).cpu().numpy(), atol=5e-4 + 1e-6)
    np.testing.assert_allclose(longer["before"], out.attentions[L][0, H][:, j].cpu().numpy(), atol=5e-5 + 1e-6)
    k2 = k.clone()
    k2[j] *= 2
    after = torch.softmax(q @ k2.T / math.sqrt(32), dim=-1)[:, j]
    np.testing.assert_allclose(longer["after"], after.cpu().numpy(), atol=5e-5 + 1e-6)
    assert longer["grew"] == [i for i in range(len(tokens)) if after[i] > out.attentions[L][0, H][i, j]]


def test_longer_key_answer_is_the_sign_of_the_shown_scores(longer):
    """The invariant the exercise teaches, on the numbers the learner sees: the weight grows
    exactly where the score is positive; and the data make the question worth asking."""
    S, T = longer["scores"], len(longer["tokens"])
    assert longer["grew"] == [i for i in range(T) if S[i] > 0]
    assert min(abs(s) for s in S) >= 0.01                            # every sign readable at 3 decimals
    assert 1 < len(longer["grew"]) < T - 1                            # neither "all" nor "all but self"
    assert all(longer["after"][i] < longer["before"][i] for i in range(T) if S[i] < 0)


def test_longer_key_accepts_the_count_of_positive_scores(longer):
    n = len(longer["grew"])
    for answer in (n, f"{n}", f" {n}.0 ", float(n), np.int64(n), torch.tensor(n)):
        fb = ch03.check_longer_key(answer, longer)
        assert fb.correct and "positive" in fb.message and "Measured on the head" in fb.message, (answer, fb.message)
    assert f"{longer['before'][longer['key']]:.4f} -> {longer['after'][longer['key']]:.4f}" in \
        ch03.check_longer_key(n, longer).message                        # numbers from data()


def test_longer_key_names_the_typical_slips(longer):
    T, n = len(longer["tokens"]), len(longer["grew"])
    cases = {T: "Not every query", T - n: "whose weight on 'warm' falls", 0: "only one score of the row changes",
             n - 1: "Every positive score counts"}
    for answer, phrase in cases.items():
        fb = ch03.check_longer_key(answer, longer)
        assert not fb.correct and phrase in fb.message, (answer, fb.message)
    for answer, side in ((n + 1, "too many"), (1, "too few")):
        fb = ch03.check_longer_key(answer, longer)
        assert not fb.correct and side in fb.message and "column 'warm'" in fb.hint
    assert "between 0 and 13" in ch03.check_longer_key(T + 1, longer).message
    assert "whole number" in ch03.check_longer_key(n + 0.5, longer).message


def test_longer_key_verdict_follows_the_data():
    data = {"tokens": ["[CLS]", "a", "b", "[SEP]"], "key": 2, "scores": [0.5, -0.2, 1.0, -0.3],
            "before": [0.2, 0.3, 0.4, 0.1], "after": [0.3, 0.2, 0.6, 0.05], "grew": [0, 2], "uniform": 0.25}
    assert ch03.check_longer_key(2, data).correct
    assert not ch03.check_longer_key(len(ch03.longer_key_example()["grew"]), data).correct
    fb = ch03.check_longer_key(1, data)
    assert not fb.correct and "Every positive score counts" in fb.message and "'b' reads its own key" in fb.message


@pytest.mark.parametrize("bad", BAD_INPUTS + [[8], {"n": 8}])
def test_longer_key_bad_inputs_never_raise(longer, bad):
    fb = ch03.check_longer_key(bad, longer)
    assert fb.correct is False and fb.message


def test_exercises_are_registered():
    assert exercise_names(3) == ["row_entry", "spread", "longer_key", "claim"]


def test_row_entry_widget(data):
    w = exercise(3, "row_entry")
    w.control.value = f"{ch03.row_entry_expected(data):.4f}"
    assert w.check().correct and "Correct." in w.feedback.value
    w.control.value = str(data["values"][data["query"]])
    assert not w.check().correct and "own value" in w.feedback.value
    w.control.value = "abc"
    assert not w.check().correct and "Not yet." in w.feedback.value


def test_spread_widget(data):
    w = exercise(3, "spread")
    w.control.value = 3                                                  # the query '!'
    assert w.check().correct and "Correct." in w.feedback.value
    w.control.value = data["key"]
    assert not w.check().correct and "owning a value" in w.feedback.value


def test_longer_key_widget(longer):
    w = exercise(3, "longer_key")
    w.control.value = str(len(longer["tokens"]))
    assert not w.check().correct and "Not every query" in w.feedback.value
    w.control.value = str(len(longer["grew"]))
    assert w.check().correct and "Correct." in w.feedback.value


def test_example_weights_rows_are_distributions(data):
    # The rounded table must still read as attention: rows close to summing to 1.
    assert np.allclose(np.sum(data["weights"], axis=1), 1.0, atol=0.03)
    tokens, q, k, v = head_qkv(ch03.SENTENCE, ch03.LAYER, ch03.HEAD)
    exact = softmax(q @ k.T / math.sqrt(q.shape[-1]))
    assert int(exact[:, data["key"]].argmax()) == 3


# --- claim: a claim about a head tested against a counterexample ---------------------------

def _claim_data(other_beats_subject: bool) -> dict:
    rows = [["The cat sat on the mat because it was warm.", "cat", 0.381, "mat", 0.119],
            ["The dog sat on the rug because it was warm.", "dog", 0.125 if other_beats_subject else 0.3, "rug", 0.225]]
    return {"rows": rows, "uniform": 0.077, "positional": 0.039}


def test_claim_is_refuted_by_one_counterexample_and_every_wrong_verdict_says_why():
    data = _claim_data(True)
    right = ch03.check_claim(ch03.CLAIM_OPTIONS[1], data)
    assert right.correct and "'dog' gets 0.125" in right.message and "'rug' gets 0.225" in right.message
    # the refuting sentence changes two nouns at once: a counterexample, not a minimal pair (issue 37)
    assert "counterexample" in right.message and "minimal pair" not in right.message
    for option in ch03.CLAIM_OPTIONS:
        assert "minimal pair" not in ch03.check_claim(option, data).message
    assert "uniform" in ch03.check_claim(ch03.CLAIM_OPTIONS[0], data).message
    assert "ablation" in ch03.check_claim(ch03.CLAIM_OPTIONS[2], data).message
    assert "0.039" in ch03.check_claim(ch03.CLAIM_OPTIONS[3], data).message
    for option in (ch03.CLAIM_OPTIONS[0], ch03.CLAIM_OPTIONS[2], ch03.CLAIM_OPTIONS[3]):
        assert ch03.check_claim(option, data).correct is False
    for bad in (None, "", "refuted", 3):
        assert ch03.check_claim(bad, data).correct is False


def test_claim_verdict_follows_the_data_not_a_fixed_option():
    data = _claim_data(False)   # the subject wins in every sentence: then the claim stands
    assert ch03.check_claim(ch03.CLAIM_OPTIONS[1], data).correct is False
    assert ch03.check_claim(ch03.CLAIM_OPTIONS[0], data).correct


def test_claim_evidence_reads_the_encoder(encoder):
    data = ch03.claim_evidence()
    from attnlib.encoder import get_attentions
    for sentence, subject, ws, other, wo in data["rows"]:
        att = get_attentions(sentence)
        A, t = att.head(ch03.EVIDENCE_LAYER, ch03.EVIDENCE_HEAD), att.tokens
        assert ws == pytest.approx(float(A[t.index("it"), t.index(subject)]), abs=5e-4)
        assert wo == pytest.approx(float(A[t.index("it"), t.index(other)]), abs=5e-4)
    assert any(wo > ws for _, _, ws, _, wo in data["rows"])   # the chapter's exercise is a refutation
