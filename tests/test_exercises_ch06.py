"""Chapter 6 exercises: the parameter count of more heads, counted on real modules, and the
mask question against its oracle (PyTorch's own module), with the widgets."""
import math

import numpy as np
import pytest
import torch
from torch import nn

import attnlib
from attnlib.exercises import exercise, exercise_names, registry
from attnlib.exercises.ch06 import (
    HEAD_PARAMS_OPTIONS, TORCH_MASK_OPTIONS, check_head_params, check_torch_mask, head_params_answer,
    head_params_data, torch_mask_answer, torch_mask_data,
)

BAD_INPUTS = [None, "", "abc", math.nan, math.inf, -math.inf, [1, 2, 3], {"a": 1}, b"7",
              np.zeros((2, 2)), torch.zeros(3, 3, dtype=torch.complex64)]


def test_registered():
    assert exercise_names(6) == ["head_params", "torch_mask"]


# ----------------------------------------------------------------------------- head_params
def test_head_params_counts_real_modules():
    """The data are counted on modules, and they agree with the formula 4 (d^2 + d) whatever H is."""
    data = head_params_data()
    assert data["params"] == [4 * (384 * 384 + 384)] * 3
    assert head_params_answer(data) == HEAD_PARAMS_OPTIONS[0]
    fb = check_head_params(HEAD_PARAMS_OPTIONS[0], data)
    assert fb.correct and "591,360" in fb.message


def test_head_params_grade_follows_the_data():
    """A module whose parameters grew with H would make "12 times as many" right: the grade reads the counts."""
    grown = {"d_model": 384, "heads": [1, 12, 384], "params": [100, 1200, 38400]}
    assert head_params_answer(grown) == HEAD_PARAMS_OPTIONS[1]
    assert check_head_params(HEAD_PARAMS_OPTIONS[1], grown).correct
    assert not check_head_params(HEAD_PARAMS_OPTIONS[0], grown).correct


@pytest.mark.parametrize("option, fragment", [
    (HEAD_PARAMS_OPTIONS[1], "side by side"),
    (HEAD_PARAMS_OPTIONS[2], "same (d_model, d_model) matrix"),
    (HEAD_PARAMS_OPTIONS[3], "never by the input"),
])
def test_head_params_wrong_options_teach(option, fragment):
    fb = check_head_params(option, head_params_data())
    assert not fb.correct and fragment in fb.message and fb.hint and "Counted on" in fb.message


def test_head_params_bad_inputs_and_widget(monkeypatch):
    data = head_params_data()
    for bad in BAD_INPUTS + [12, "12"]:
        fb = check_head_params(bad, data)
        assert not fb.correct and fb.message, bad
    monkeypatch.setitem(registry._DATA_CACHE, (6, "head_params"), data)
    ex = exercise(6, "head_params")
    ex.control.value = HEAD_PARAMS_OPTIONS[0]
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value

# ----------------------------------------------------------------------------- torch_mask
MASK_DATA = {"options": list(TORCH_MASK_OPTIONS), "gaps": [None, 2e-7, 4.19, 4.19], "nan_rows": [1, 0, 0, 0],
             "T": 13, "torch": "2.13.0"}


def _gaps_by_pytorch(seed=0):
    """The measurement of torch_mask_data, on a small random layer: PyTorch's module run with
    each option, against attnlib's module with the same weights."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = attnlib.MultiHeadAttention.from_torch(ref)
    x = torch.randn(1, 4, 8)
    allowed = attnlib.causal_mask(4)
    expected, _ = ours(x, mask=allowed)
    gaps, nans = [], []
    for option in TORCH_MASK_OPTIONS:
        attn_mask = eval(option.split("=", 1)[1], {"allowed": allowed})  # noqa: S307 - fixed strings
        out, _ = ref(x, x, x, attn_mask=attn_mask)
        bad = ~torch.isfinite(out[0]).all(-1)
        nans.append(int(bad.sum()))
        gaps.append(None if bad.any() else (out - expected).abs().max().item())
    return {"options": list(TORCH_MASK_OPTIONS), "gaps": gaps, "nan_rows": nans, "T": 4, "torch": "x"}


def test_torch_mask_right_option_is_what_pytorch_needs():
    """Only the option graded right makes PyTorch's module match attnlib's."""
    data = _gaps_by_pytorch()
    matching = [o for o, g in zip(TORCH_MASK_OPTIONS, data["gaps"]) if g is not None and g < 1e-5]
    assert matching == [o for o in TORCH_MASK_OPTIONS if check_torch_mask(o, data).correct] == ["attn_mask=~allowed"]
    assert torch_mask_answer(dict(data, gaps=[0.0, 3.0, 3.0, 3.0])) == TORCH_MASK_OPTIONS[0]   # the grade follows the data


def test_torch_mask_data_on_the_real_layer():
    data = torch_mask_data()
    assert data["options"] == list(TORCH_MASK_OPTIONS) and data["T"] > 3
    assert data["gaps"][1] < 1e-5 and data["gaps"][0] is None and data["nan_rows"][0] >= 1
    assert min(data["gaps"][2:]) > 0.1
    fb = check_torch_mask("attn_mask=~allowed", data)
    assert fb.correct and "Measured on the encoder's first layer" in fb.message and "NaN in" in fb.message


@pytest.mark.parametrize("option,fragment", [
    ("attn_mask=allowed", "opposite of attnlib"),
    ("attn_mask=allowed.float()", "nothing is removed"),
    ("attn_mask=1 - allowed.float()", "more likely to be attended"),
])
def test_torch_mask_wrong_options(option, fragment):
    fb = check_torch_mask(option, MASK_DATA)
    assert not fb.correct and fragment in fb.message and fb.hint
    assert "largest difference 4.2e+00" in fb.message


def test_torch_mask_bad_inputs_and_widget(monkeypatch):
    for bad in BAD_INPUTS + ["~allowed", 1]:
        fb = check_torch_mask(bad, MASK_DATA)
        assert not fb.correct and fb.message, bad
    monkeypatch.setitem(registry._DATA_CACHE, (6, "torch_mask"), MASK_DATA)
    ex = exercise(6, "torch_mask")
    assert not ex.check().correct and "choose" in ex.feedback.value
    ex.control.value = "attn_mask=allowed"
    assert not ex.check().correct and "opposite" in ex.feedback.value
    ex.control.value = "attn_mask=~allowed"
    ex.button.click()
    assert ex.last.correct and "Correct" in ex.feedback.value


