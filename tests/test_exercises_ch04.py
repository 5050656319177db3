"""Chapter 4 exercise checkers and widgets, checked against attnlib.softmax / torch.softmax."""
import math

import numpy as np
import pytest
import torch

from attnlib import entropy, softmax
from attnlib.exercises import ch04, exercise, exercise_names
from attnlib.encoder import head_qkv

BAD_INPUTS = [None, "", "abc", float("nan"), float("inf"), float("-inf"), [0.5, 0.1], np.ones(3), torch.ones(2, 2), True]


@pytest.fixture(scope="module")
def scores():
    return ch04.temperature_example()["scores"]


def _torch_max_weight(scores, temperature):
    return torch.softmax(torch.tensor(scores, dtype=torch.float64) / temperature, dim=-1).max().item()


def test_example_scores_are_the_real_head(scores):
    from attnlib import corpus

    tokens, q, k, _ = head_qkv(corpus.RUNNING, ch04.LAYER, ch04.HEAD)
    i = tokens.index(ch04.QUERY)
    exact = (q[i] @ k.T / math.sqrt(q.shape[-1])).cpu().numpy()
    np.testing.assert_allclose(scores, exact, atol=0.005 + 1e-6)
    assert ch04.temperature_example()["tokens"] == tokens


@pytest.mark.parametrize("temperature", [0.05, 0.3, 1.0, 2.0, 50.0])
def test_max_weight_matches_softmax(scores, temperature):
    ref = _torch_max_weight(scores, temperature)
    assert math.isclose(ch04.max_weight(scores, temperature), ref, rel_tol=1e-12)
    mine = softmax(torch.tensor(scores, dtype=torch.float64), temperature=temperature).max().item()
    assert math.isclose(mine, ref, rel_tol=1e-12)


def test_max_weight_is_stable_for_tiny_temperatures(scores):
    assert ch04.max_weight(scores, 1e-300) == 1.0
    with pytest.raises(ValueError):
        ch04.max_weight(scores, 0.0)
    with pytest.raises(ValueError):
        ch04.max_weight([], 1.0)


def test_largest_temperature_is_the_threshold(scores):
    t = ch04.largest_temperature(scores)
    assert _torch_max_weight(scores, t) >= ch04.THRESHOLD - 1e-9
    assert _torch_max_weight(scores, t * 1.001) < ch04.THRESHOLD
    assert 0.1 < t < 1.0   # a real, unsaturated row: the exercise is not trivial


def test_temperature_accepts_any_temperature_reaching_the_threshold(scores):
    t = ch04.largest_temperature(scores)
    for answer in (t * 0.99, t / 2, 0.01, f"{t * 0.9:.4f}", 1e-6):
        fb = ch04.check_temperature(answer, scores=scores)
        assert fb.correct, (answer, fb.message)
        assert f"{t:.3f}" in fb.message


def test_temperature_wrong_answers_say_the_weight_and_the_direction(scores):
    fb = ch04.check_temperature(1.0, scores=scores)
    assert not fb.correct
    assert f"{_torch_max_weight(scores, 1.0):.3f}" in fb.message and "Lower the temperature" in fb.message
    fb = ch04.check_temperature(1000, scores=scores)
    assert not fb.correct and "uniform" in fb.message and "down" in fb.message
    fb = ch04.check_temperature(ch04.largest_temperature(scores) * 1.05, scores=scores)
    assert not fb.correct and "below 0.9" in fb.message
    assert "negative" in ch04.check_temperature(-0.5, scores=scores).message.lower()
    assert "zero" in ch04.check_temperature(0, scores=scores).message


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_temperature_bad_inputs_never_raise(scores, bad):
    fb = ch04.check_temperature(bad, scores=scores)
    assert fb.correct is False and fb.message


# ------------------------------------------------------------------ entropy_dk
@pytest.fixture(scope="module")
def wide():
    return ch04.entropy_example()


def test_entropy_example_against_an_independent_recomputation(wide):
    """Oracle: the same two heads through torch's own softmax and a hand-written entropy."""
    from attnlib import corpus
    qs, ks = zip(*[head_qkv(corpus.RUNNING, ch04.LAYER, h)[1:3] for h in ch04.WIDE_HEADS])
    q, k = torch.cat(qs, -1).double(), torch.cat(ks, -1).double()
    assert q.shape[-1] == wide["d_k"] == 64
    for divisor, key in ((64, "h_scaled"), (32, "h_unscaled")):
        p = torch.softmax(q @ k.T / math.sqrt(divisor), dim=-1)
        h = -(p * torch.log(p.clamp_min(1e-300))).sum(-1).mean().item()
        assert math.isclose(h, wide[key], abs_tol=1e-4), (key, h, wide[key])
    assert wide["h_unscaled"] < wide["h_scaled"] < wide["log_T"]   # the right option is what happens


def test_entropy_dk_right_and_wrong(wide):
    right_option = ch04.ENTROPY_OPTIONS[0]
    fb = ch04.check_entropy_dk(right_option, wide)
    assert fb.correct and f"{wide['h_unscaled']:.3f}" in fb.message and f"{wide['h_scaled']:.3f}" in fb.message
    for option, phrase in zip(ch04.ENTROPY_OPTIONS[1:], ("more peaked", "not a factor", "one-hot")):
        fb = ch04.check_entropy_dk(option, wide)
        assert not fb.correct and phrase in fb.message, fb.message
    for bad in BAD_INPUTS + ["It falls"]:
        fb = ch04.check_entropy_dk(bad, wide)
        assert fb.correct is False and fb.message


def test_entropy_falls_with_the_scale_for_any_row():
    """The invariant the right answer rests on: H(softmax(beta s)) is non-increasing in beta."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(200, 13, generator=g, dtype=torch.float64)
    hs = [entropy(softmax(beta * s)) for beta in (0.5, 1.0, math.sqrt(2), 2.0)]
    for a, b in zip(hs, hs[1:]):
        assert (b <= a + 1e-12).all()


# ------------------------------------------------------------------ overflow
def test_overflow_example_is_what_float32_does():
    data = ch04.overflow_example()
    s = torch.tensor(ch04.temperature_example()["scores"], dtype=torch.float32) + ch04.OVERFLOW_SHIFT
    naive = torch.exp(s) / torch.exp(s).sum()
    assert data["n_nan"] == int(torch.isnan(naive).sum()) == len(s)
    stable = torch.softmax(s, dim=-1)                                # oracle: PyTorch's own softmax
    assert not torch.isnan(stable).any() and data["stable_gap"] < 1e-5


def test_overflow_right_and_wrong():
    data = ch04.overflow_example()
    assert ch04.check_overflow("NaN in every entry", data).correct
    for option, phrase in zip((o for o in ch04.OVERFLOW_OPTIONS if o != "NaN in every entry"),
                              ("Mathematically yes", "cannot flatten", "a factor would")):
        fb = ch04.check_overflow(option, data)
        assert not fb.correct and phrase in fb.message and "subtracts the row maximum" in fb.message
    for bad in BAD_INPUTS:
        fb = ch04.check_overflow(bad, data)
        assert fb.correct is False and fb.message


def test_exercises_are_registered():
    assert exercise_names(4) == ["temperature", "entropy_dk", "overflow"]


def test_temperature_widget(scores):
    w = exercise(4, "temperature")
    w.control.value = "1"
    assert not w.check().correct and "Lower the temperature" in w.feedback.value
    w.control.value = "0.3"
    assert w.check().correct and "Correct." in w.feedback.value
    w.control.value = "nan"
    assert not w.check().correct and "finite" in w.feedback.value


def test_entropy_dk_widget():
    w = exercise(4, "entropy_dk")
    w.control.value = ch04.ENTROPY_OPTIONS[2]
    assert not w.check().correct and "not a factor" in w.feedback.value
    w.control.value = ch04.ENTROPY_OPTIONS[0]
    assert w.check().correct and "Correct." in w.feedback.value


def test_overflow_widget():
    w = exercise(4, "overflow")
    w.control.value = ch04.OVERFLOW_OPTIONS[0]
    assert not w.check().correct and "float32" in w.feedback.value
    w.control.value = "NaN in every entry"
    assert w.check().correct and "Correct." in w.feedback.value
