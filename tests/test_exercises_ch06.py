"""Chapter 6 exercises: checkers against independent oracles (PyTorch's own module, a loop over
positions, the first words of the shipped text) and the widgets end to end."""
import math

import numpy as np
import pytest
import torch
from torch import nn

import attnlib
from attnlib.exercises import exercise, exercise_names
from attnlib.exercises.ch06 import (
    PARAM_D_MODEL, PARAM_N_HEADS, TORCH_MASK_OPTIONS, TWO_BACK_WORDS,
    check_param_count, check_torch_mask, check_two_back_cells,
)
from attnlib.corpus import load_text, words_of

T = len(TWO_BACK_WORDS)
BAD_INPUTS = [None, "", "abc", math.nan, math.inf, -math.inf, [1, 2, 3], {"a": 1}, b"7",
              np.zeros((2, 2)), torch.zeros(3, 3, dtype=torch.complex64)]


def test_registered():
    assert exercise_names(6) == ["param_count", "two_back_cells", "torch_mask"]


# ----------------------------------------------------------------------------- param_count
def _torch_count(d_model=PARAM_D_MODEL, n_heads=PARAM_N_HEADS) -> int:
    """Oracle: PyTorch's own module with the same layout (never attnlib)."""
    return sum(p.numel() for p in nn.MultiheadAttention(d_model, n_heads, batch_first=True).parameters())


def test_param_count_right_answer_in_every_form():
    n = _torch_count()
    for answer in (n, float(n), str(n), f"{n:,}", f"{n:_}", f" {n:,} ".replace(",", " "), np.int64(n),
                   torch.tensor(n)):
        fb = check_param_count(answer)
        assert fb.correct and "one head of width d_model" in fb.message, answer
    assert check_param_count(_torch_count(64, 4), d_model=64, n_heads=4).correct


def test_param_count_typical_mistakes():
    d, H = PARAM_D_MODEL, PARAM_N_HEADS
    no_bias = sum(p.numel() for p in nn.MultiheadAttention(d, H, bias=False).parameters())
    cases = {
        no_bias: "not the four bias vectors",
        3 * d * d + 3 * d: "output projection W_O",
        3 * d * d: "W_Q, W_K and W_V only",
        H * _torch_count(): "every head its own full",
        4 * d * (d // H) + 4 * (d // H): "share of one head",
        4 * (d // H) ** 2: "not 32 x 32",
        123456: "is not it",
        591360.5: "is not a count",
        -5: "is not a count",
    }
    for answer, fragment in cases.items():
        fb = check_param_count(answer)
        assert not fb.correct and fragment in fb.message, (answer, fb)
    fb = check_param_count("591,36")  # a decimal comma, not a thousands separator
    assert not fb.correct and "591.36 is not a count" in fb.message


def test_param_count_bad_inputs():
    for bad in BAD_INPUTS + [True, torch.ones(2)]:
        fb = check_param_count(bad)
        assert not fb.correct and fb.message, bad


def test_param_count_widget():
    ex = exercise(6, "param_count")
    ex.control.value = str(3 * PARAM_D_MODEL ** 2)
    assert not ex.check().correct and "W_O" in ex.feedback.value
    ex.control.value = "inf"
    assert not ex.check().correct and "finite" in ex.feedback.value
    ex.control.value = f"{_torch_count():,}"
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value


# ----------------------------------------------------------------------------- two_back_cells
def _two_back_oracle(n: int) -> list:
    return [[j == i - 2 for j in range(n)] for i in range(n)]


def test_two_back_words_open_the_shipped_text():
    assert tuple(words_of(load_text())[:T]) == TWO_BACK_WORDS


@pytest.mark.parametrize("form", ["list", "bool", "int", "numpy"])
def test_two_back_right_answer(form):
    ideal = torch.tensor(_two_back_oracle(T))
    answer = {"list": ideal.tolist(), "bool": ideal, "int": ideal.int(), "numpy": ideal.numpy()}[form]
    fb = check_two_back_cells(answer)
    assert fb.correct and "'and' looks at 'four'" in fb.message
    assert check_two_back_cells(_two_back_oracle(4), ("a", "b", "c", "d")).correct


def test_two_back_typical_mistakes():
    ideal = torch.tensor(_two_back_oracle(T))
    previous = torch.tensor([[j == i - 1 for j in range(T)] for i in range(T)])
    cases = {"previous-word head": previous, "two places ahead": ideal.T,
             "Nothing is switched on": torch.zeros(T, T, dtype=torch.bool)}
    for fragment, answer in cases.items():
        fb = check_two_back_cells(answer)
        assert not fb.correct and fragment in fb.message, (fragment, fb)

    early = ideal.clone()
    early[1, 0] = True
    fb = check_two_back_cells(early)
    assert not fb.correct and "Row 'score' (position 1) has no word two places back" in fb.message
    assert "1 of 36 cells are wrong" in fb.message

    diag = ideal | torch.eye(T, dtype=torch.bool)
    fb = check_two_back_cells(diag)
    assert not fb.correct and "is the word itself" in fb.message and "puts all of its weight on one key" in fb.message

    missing = ideal.clone()
    missing[4, 2] = False
    fb = check_two_back_cells(missing)
    assert not fb.correct and "Query 'years' should look at 'and'" in fb.message
    assert fb.hint and "j = i - 2" in fb.hint


def test_two_back_bad_inputs():
    for bad in BAD_INPUTS + [torch.ones(T, T + 1), [[2] * T] * T, torch.full((T, T), math.nan)]:
        fb = check_two_back_cells(bad)
        assert not fb.correct and fb.message, bad
    assert f"shape ({T}, {T})" in check_two_back_cells(torch.ones(3, 3)).message


def test_two_back_widget():
    ex = exercise(6, "two_back_cells")
    assert ex.row_labels == list(TWO_BACK_WORDS)
    ex.cells[3][3].value = True
    assert not ex.check().correct and "the word itself" in ex.feedback.value
    ex.set_answer(_two_back_oracle(T))
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value


# ----------------------------------------------------------------------------- torch_mask
def test_torch_mask_right_option_is_what_pytorch_needs():
    """Run PyTorch's module with each option; only the option graded right matches attnlib."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = attnlib.MultiHeadAttention.from_torch(ref)
    x = torch.randn(1, 4, 8)
    allowed = attnlib.causal_mask(4)
    expected, _ = ours(x, mask=allowed)
    matching = []
    for option in TORCH_MASK_OPTIONS:
        attn_mask = eval(option.split("=", 1)[1], {"allowed": allowed})  # noqa: S307 - fixed strings
        out, _ = ref(x, x, x, attn_mask=attn_mask)
        if torch.allclose(out, expected, atol=1e-5, equal_nan=False):
            matching.append(option)
    assert matching == [o for o in TORCH_MASK_OPTIONS if check_torch_mask(o).correct] == ["attn_mask=~allowed"]


@pytest.mark.parametrize("option,fragment", [
    ("attn_mask=allowed", "opposite of attnlib"),
    ("attn_mask=allowed.float()", "nothing is removed"),
    ("attn_mask=1 - allowed.float()", "more likely to be attended"),
])
def test_torch_mask_wrong_options(option, fragment):
    fb = check_torch_mask(option)
    assert not fb.correct and fragment in fb.message and fb.hint


def test_torch_mask_bad_inputs_and_widget():
    for bad in BAD_INPUTS + ["~allowed", 1]:
        fb = check_torch_mask(bad)
        assert not fb.correct and fb.message, bad
    ex = exercise(6, "torch_mask")
    assert not ex.check().correct and "choose" in ex.feedback.value
    ex.control.value = "attn_mask=allowed"
    assert not ex.check().correct and "opposite" in ex.feedback.value
    ex.control.value = "attn_mask=~allowed"
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value
