"""Chapter 2 exercises: the top-key checker against the Hugging Face model's own attention
weights (an independent oracle), the symmetry checker against numerical facts, the tied
exercise against the model's own attentions and an independent tied recomputation,
bad inputs, and the widgets."""
import numpy as np
import pytest
import torch

import attnlib
from attnlib.corpus import BEARS
from attnlib.exercises import exercise, exercise_names
from attnlib.exercises.ch02 import (
    SYMMETRIC_OPTIONS, TIED_SETUP, TOP_KEY_SETUP, check_symmetric, check_tied, head_weights, tied_data,
    make_top_key_checker,
)

BAD_INPUTS = [None, "", "abc", float("nan"), float("inf"), -float("inf"), [1.0, 2.0],
              np.zeros((2, 2)), torch.zeros(3), True, {"a": 1}, object()]


@pytest.fixture(scope="module")
def hf_row():
    """Tokens and the query's row of weights, straight from the model's eager attentions."""
    model, tokenizer = attnlib.encoder.load_encoder()
    s = TOP_KEY_SETUP
    enc = tokenizer(s["text"], return_tensors="pt").to(model.device)
    with torch.no_grad():
        att = model(**enc, output_attentions=True).attentions[s["layer"]][0, s["head"]].cpu()
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return tokens, att


def test_registered():
    assert exercise_names(2) == ["top_key", "symmetric", "tied"]


# ---------------------------------------------------------------------- top_key
def test_head_weights_match_hugging_face(hf_row):
    tokens, att = hf_row
    s = TOP_KEY_SETUP
    ours_tokens, ours = head_weights(s["text"], s["layer"], s["head"])
    assert ours_tokens == tokens
    torch.testing.assert_close(ours, att, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layer", range(6))
def test_head_weights_match_eager_attentions_in_every_layer(encoder, layer):
    """head_weights must read layer l's own input hidden_states[l]: feeding the embeddings to
    every layer matched at layer 0 only (0.28 off at layer 3)."""
    model, tokenizer = encoder
    text = BEARS["object"]
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        hf = model(**enc, output_attentions=True).attentions[layer][0]         # (H, T, T)
    for head in (0, 5, 11):
        tokens, ours = head_weights(text, layer, head, model, tokenizer)
        assert tokens == tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
        torch.testing.assert_close(ours, hf[head], atol=1e-5, rtol=0)
    with pytest.raises(IndexError, match="head must be in 0..11"):
        head_weights(text, layer, 12, model, tokenizer)


def test_top_key_right_answer(hf_row):
    tokens, att = hf_row
    check = make_top_key_checker(tokens, att, TOP_KEY_SETUP["query"])
    best = int(att[tokens.index(TOP_KEY_SETUP["query"])].argmax())
    fb = check(best)
    assert fb.correct and tokens[best] in fb.message
    if tokens.count(tokens[best]) == 1:                  # also accepted as a string
        assert check(tokens[best]).correct
    assert check(np.int64(best)).correct


def test_top_key_wrong_answers(hf_row):
    tokens, att = hf_row
    i = tokens.index(TOP_KEY_SETUP["query"])
    check = make_top_key_checker(tokens, att, TOP_KEY_SETUP["query"])
    fb_self = check(i)
    assert not fb_self.correct and "itself" in fb_self.message
    order = torch.argsort(att[i], descending=True).tolist()
    col_best = int(att[:, i].argmax())
    if order[1] not in (i, col_best):
        assert "runner-up" in check(order[1]).message
    last = order[-1]
    fb = check(last)
    assert not fb.correct and f"{att[i, last].item():.2f}" in fb.message


def test_top_key_column_mistake_synthetic():
    tokens = ["a", "q", "b", "c"]
    weights = torch.tensor([[0.1, 0.1, 0.1, 0.7],
                            [0.1, 0.2, 0.1, 0.6],    # query "q" looks at "c" most
                            [0.1, 0.8, 0.05, 0.05],  # but "b" looks at "q" most (column of q)
                            [0.25, 0.25, 0.25, 0.25]])
    check = make_top_key_checker(tokens, weights, "q")
    assert check("c").correct
    fb = check("b")
    assert not fb.correct and "column" in fb.message and fb.hint
    with pytest.raises(ValueError):
        make_top_key_checker(tokens, weights, "zzz")
    with pytest.raises(ValueError):
        make_top_key_checker(tokens, weights[:3], "q")


@pytest.mark.parametrize("bad", BAD_INPUTS + [-1, 99, "not-a-token"])
def test_top_key_bad_input(hf_row, bad):
    tokens, att = hf_row
    check = make_top_key_checker(tokens, att, TOP_KEY_SETUP["query"])
    fb = check(bad)
    assert fb.correct is False and fb.message


def test_top_key_widget(hf_row):
    tokens, att = hf_row
    w = exercise(2, "top_key")
    assert not w.check().correct                          # nothing picked
    i = tokens.index(TOP_KEY_SETUP["query"])
    w.control.value = i
    assert not w.check().correct and "itself" in w.feedback.value
    w.control.value = int(att[i].argmax())
    assert w.check().correct and "Correct." in w.feedback.value


# ---------------------------------------------------------------------- symmetric
def test_symmetric_key_matches_numerics():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    S = x @ x.T                                           # symmetric scores
    A = torch.softmax(S, dim=-1)
    Z = torch.exp(S).sum(-1)
    candidates = {"A": A, "diag(Z) A": Z[:, None] * A, "diag(1/Z) A": A / Z[:, None], SYMMETRIC_OPTIONS[3]: A.T}
    symmetric = [name for name, m in candidates.items() if torch.allclose(m, m.T, rtol=1e-10, atol=0)]
    assert symmetric == ["diag(Z) A"]
    assert set(candidates) == set(SYMMETRIC_OPTIONS)
    assert check_symmetric("diag(Z) A").correct


@pytest.mark.parametrize("choice, phrase", [("A", "normaliser"), ("diag(1/Z) A", "second time"), (SYMMETRIC_OPTIONS[3], "exactly when")])
def test_symmetric_wrong(choice, phrase):
    fb = check_symmetric(choice)
    assert not fb.correct and phrase in fb.message


@pytest.mark.parametrize("bad", BAD_INPUTS + ["S"])
def test_symmetric_bad_input(bad):
    fb = check_symmetric(bad)
    assert fb.correct is False and fb.message


def test_symmetric_widget():
    w = exercise(2, "symmetric")
    w.control.value = "A"
    assert not w.check().correct and "Not yet." in w.feedback.value
    w.control.value = "diag(Z) A"
    assert w.check().correct and "Correct." in w.feedback.value


# ---------------------------------------------------------------------- tied
@pytest.fixture(scope="module")
def tied():
    return tied_data()


def test_tied_data_against_the_model(tied):
    """untied = the model's own eager attentions; tied = softmax(q q^T / sqrt(d_k)) with q
    recomputed from the embeddings and the head's slice of the query layer."""
    model, tokenizer = attnlib.encoder.load_encoder()
    s = TIED_SETUP
    enc = tokenizer(s["text"], return_tensors="pt").to(model.device)
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    hf = out.attentions[s["layer"]][0, s["head"]].cpu().double()
    assert torch.allclose(torch.tensor(tied["untied"], dtype=torch.double), hf, atol=1e-5)
    x = out.hidden_states[s["layer"]][0].cpu().double()
    p = attnlib.encoder.head_projections(model, s["layer"], s["head"])
    q = x @ p["W_Q"].double() + p["b_Q"].double()
    ours = torch.softmax(q @ q.T / 32 ** 0.5, dim=-1)
    assert torch.allclose(torch.tensor(tied["weights"], dtype=torch.double), ours, atol=1e-5)


def test_tied_right_answer_is_the_argmax(tied):
    i = tied["tokens"].index(tied["query"])
    best = int(np.argmax(tied["weights"][i]))
    assert tied["tokens"][best] == "mat"                      # the chapter's Reformer point
    for answer in (best, "mat", np.int64(best)):
        fb = check_tied(answer, tied)
        assert fb.correct and "masks the diagonal" in fb.message, fb.message


def test_tied_wrong_answers_teach(tied):
    i = tied["tokens"].index(tied["query"])
    untied_best = int(np.argmax(tied["untied"][i]))
    assert untied_best == i - 1                                # the previous "the"
    fb = check_tied(untied_best, tied)
    assert not fb.correct and "untied head picks" in fb.message, fb.message
    fb = check_tied(tied["tokens"].index("cat"), tied)
    assert not fb.correct and "one key gets" in fb.message, fb.message


@pytest.mark.parametrize("bad", BAD_INPUTS + [-1, 99, "zzz", 1.5])
def test_tied_bad_input(bad, tied):
    fb = check_tied(bad, tied)
    assert fb.correct is False and fb.message


def test_tied_widget(tied):
    w = exercise(2, "tied")
    tokens = tied["tokens"]
    w.control.value = tokens.index("mat") - 1
    assert not w.check().correct and "Not yet." in w.feedback.value
    w.control.value = tokens.index("mat")
    assert w.check().correct and "Correct." in w.feedback.value
