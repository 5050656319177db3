"""Chapter 5 exercises: the checkers against independent oracles (the real tokenizer, PyTorch's
attention with a causal mask) and the widgets end to end."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib.corpus import PADDED_BATCH
from attnlib.exercises import exercise, exercise_names
from attnlib.exercises.ch05 import (
    CAUSAL_SENTENCE, CAUSAL_TOKENS, FULLY_MASKED_OPTIONS, PADDED_SENTENCE, PADDED_TOKENS,
    check_causal_cells, check_fully_masked_row, check_padding_zero_keys,
)

T = len(CAUSAL_TOKENS)
BAD_INPUTS = [None, "", "abc", math.nan, math.inf, -math.inf, [1, 2, 3], {"a": 1}, b"7",
              np.zeros((2, 2)), torch.zeros(3, 3, dtype=torch.complex64)]


def _removed_by_torch(n: int) -> torch.Tensor:
    """Oracle: the cells PyTorch's causal attention gives weight 0 (never from attnlib)."""
    torch.manual_seed(0)
    q = k = torch.randn(n, 4)
    v = torch.eye(n)  # out = weights @ I = the weights themselves
    weights = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    return weights == 0


def test_registered():
    assert exercise_names(5) == ["causal_cells", "padding_zero_keys", "fully_masked_row"]


def test_token_constants_match_the_real_tokenizer(encoder):
    _, tokenizer = encoder
    ids = tokenizer(CAUSAL_SENTENCE)["input_ids"]
    assert tuple(tokenizer.convert_ids_to_tokens(ids)[1:-1]) == CAUSAL_TOKENS
    batch = tokenizer(PADDED_BATCH, padding=True)
    row = PADDED_BATCH.index(PADDED_SENTENCE)
    assert tuple(tokenizer.convert_ids_to_tokens(batch["input_ids"][row])) == PADDED_TOKENS
    # the [PAD] positions are exactly the tokenizer's attention_mask zeros
    assert [t != "[PAD]" for t in PADDED_TOKENS] == [bool(m) for m in batch["attention_mask"][row]]


# ----------------------------------------------------------------------------- causal_cells
@pytest.mark.parametrize("form", ["bool", "int", "float", "numpy", "list"])
def test_causal_right_answer_in_every_form(form):
    removed = _removed_by_torch(T)
    answer = {"bool": removed, "int": removed.int(), "float": removed.float(),
              "numpy": removed.numpy(), "list": removed.tolist()}[form]
    fb = check_causal_cells(answer)
    assert fb.correct and "above the diagonal" in fb.message


def test_causal_typical_mistakes_get_specific_messages():
    removed = _removed_by_torch(T)
    cases = {
        "cells the mask keeps": ~removed,                                  # the complement
        "past instead of the future": removed.T,                  # transposed
        "Nothing is switched on": torch.zeros(T, T, dtype=torch.bool),
    }
    for fragment, answer in cases.items():
        fb = check_causal_cells(answer)
        assert not fb.correct and fragment in fb.message, (fragment, fb)

    with_diag = removed | torch.eye(T, dtype=torch.bool)
    fb = check_causal_cells(with_diag)
    assert not fb.correct and "removed the diagonal" in fb.message
    assert "(query 'attention', key 'attention')" in fb.message and f"{T} of {T * T}" in fb.message

    missing = removed.clone()
    missing[1, 3] = False  # query 'is' may not see key 'you'
    fb = check_causal_cells(missing)
    assert not fb.correct and "(query 'is', key 'you') is in the future of 'is'" in fb.message
    assert "still off" in fb.message and "switch it on" in fb.message and "left on" not in fb.message
    assert "1 of 36 cells are wrong" in fb.message

    extra = removed.clone()
    extra[3, 1] = True  # query 'you' loses the earlier key 'is'
    fb = check_causal_cells(extra)
    assert not fb.correct and "(query 'you', key 'is') is in the past of 'you'" in fb.message
    assert fb.hint and "j > i" in fb.hint


def test_causal_other_sentence_and_bad_inputs():
    tokens = ("the", "cat", "sat")
    assert check_causal_cells(_removed_by_torch(3), tokens).correct
    assert not check_causal_cells(_removed_by_torch(T), tokens).correct  # wrong size
    for bad in BAD_INPUTS + [torch.ones(T, T + 1), [[2] * T] * T, torch.full((T, T), math.nan)]:
        fb = check_causal_cells(bad)
        assert not fb.correct and fb.message, bad
    fb = check_causal_cells(torch.ones(T - 1, T - 1))
    assert f"shape ({T}, {T})" in fb.message


def test_causal_widget():
    ex = exercise(5, "causal_cells")
    assert ex.row_labels == list(CAUSAL_TOKENS) and ex.col_labels == list(CAUSAL_TOKENS)
    ex.cells[0][0].value = True
    assert not ex.check().correct and "removed the diagonal" in ex.feedback.value
    ex.set_answer(_removed_by_torch(T).tolist())
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value


# ----------------------------------------------------------------------------- padding_zero_keys
def _n_pad_oracle(encoder) -> int:
    _, tokenizer = encoder
    batch = tokenizer(PADDED_BATCH, padding=True, return_tensors="pt")
    return int((batch["attention_mask"][PADDED_BATCH.index(PADDED_SENTENCE)] == 0).sum())


def test_padding_right_answer(encoder):
    n_pad = _n_pad_oracle(encoder)
    for answer in (n_pad, float(n_pad), str(n_pad), f" {n_pad}.0 ", np.int64(n_pad), torch.tensor(n_pad)):
        fb = check_padding_zero_keys(answer)
        assert fb.correct and "[PAD]" in fb.message, answer


def test_padding_typical_mistakes(encoder):
    n_pad = _n_pad_oracle(encoder)
    n_all = len(PADDED_TOKENS)
    cases = {n_all - n_pad: "keys that are kept", n_all: "is every key", 0: "exp(-inf) = 0",
             n_pad + 2: "[CLS] and [SEP] are real tokens", 3: "attention_mask",
             n_pad + 0.5: "not a whole number", -1: "between 0 and", n_all + 1: "between 0 and"}
    for answer, fragment in cases.items():
        fb = check_padding_zero_keys(answer)
        assert not fb.correct and fragment in fb.message, (answer, fb)


def test_padding_bad_inputs():
    for bad in BAD_INPUTS + [True, torch.ones(2)]:
        fb = check_padding_zero_keys(bad)
        assert not fb.correct and fb.message, bad


def test_padding_widget(encoder):
    ex = exercise(5, "padding_zero_keys")
    ex.control.value = str(len(PADDED_TOKENS))
    assert not ex.check().correct and "every key" in ex.feedback.value
    ex.control.value = "NaN"
    assert not ex.check().correct and "finite" in ex.feedback.value
    ex.control.value = str(_n_pad_oracle(encoder))
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value


# ----------------------------------------------------------------------------- fully_masked_row
def test_fully_masked_right_answer_matches_pytorch():
    """The option graded right is what PyTorch's kernel really returns for a fully masked row."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 8), torch.randn(1, 5, 8), torch.randn(1, 5, 3)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[0, 1], torch.zeros(3))
    right = [o for o in FULLY_MASKED_OPTIONS if check_fully_masked_row(o).correct]
    assert right == ["a vector of zeros"]


def _version(v: str) -> tuple:
    return tuple(int(x) for x in v.split("+")[0].split(".")[:2])


def test_fully_masked_example_is_what_pytorch_returns_on_the_real_head(encoder):
    """The measurement behind the exercise, against PyTorch's kernel and a hand-written textbook
    softmax on the same real head (an independent oracle: no attnlib attention code)."""
    from attnlib import corpus
    from attnlib.encoder import head_qkv
    from attnlib.exercises.ch05 import FULLY_MASKED_HEAD, FULLY_MASKED_LAYER, FULLY_MASKED_PAD, fully_masked_example

    data = fully_masked_example()
    _, q, k, v = head_qkv(corpus.RUNNING, FULLY_MASKED_LAYER, FULLY_MASKED_HEAD)
    T, P = q.shape[0], FULLY_MASKED_PAD
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = (j <= i) & (j >= P)
    assert data["T"] == T and data["n_rows"] == P == int((~mask.any(-1)).sum())
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    e = torch.exp((q @ k.T / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf")))
    assert (e / e.sum(-1, keepdim=True))[:P].isnan().all() and data["naive_nan"]
    assert data["torch"] == torch.__version__
    if _version(torch.__version__) >= (2, 5):       # the chapter's claim: zeros since PyTorch 2.5
        assert torch.equal(out[:P], torch.zeros_like(out[:P]))
        assert data["torch_absmax"] == 0.0 and not data["torch_nan"]
    assert data["attnlib_absmax"] == 0.0 and not data["attnlib_nan"]


def test_fully_masked_grade_follows_the_measurement():
    """Predict, then check: the option graded right is the one the measurement supports, and
    the feedback quotes the measurement with the PyTorch version."""
    from attnlib.exercises.ch05 import fully_masked_example

    data = fully_masked_example()
    fb = check_fully_masked_row("a vector of zeros", data)
    assert fb.correct and f"PyTorch {torch.__version__}" in fb.message and "exactly zero" in fb.message
    nan_world = {**data, "attnlib_nan": True, "attnlib_absmax": float("nan")}
    assert check_fully_masked_row("NaN in every entry", nan_world).correct
    fb = check_fully_masked_row("a vector of zeros", nan_world)
    assert not fb.correct and "measurement" in fb.message


@pytest.mark.parametrize("option,fragment", [
    ("NaN in every entry", "0/0 is NaN"),
    ("the average of all value rows (uniform weights)", "-1e9"),
    ("the value row of the query's own position", "masked like every other key"),
])
def test_fully_masked_wrong_options(option, fragment):
    fb = check_fully_masked_row(option)
    assert not fb.correct and fragment in fb.message


def test_fully_masked_bad_inputs_and_widget():
    for bad in BAD_INPUTS + ["zeros", 2]:
        fb = check_fully_masked_row(bad)
        assert not fb.correct and fb.message, bad
    ex = exercise(5, "fully_masked_row")
    assert not ex.check().correct and "choose" in ex.feedback.value
    ex.control.value = "NaN in every entry"
    assert not ex.check().correct and "NaN" in ex.feedback.value
    ex.control.value = "a vector of zeros"
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value
