"""Chapter 4 exercise checkers and widgets, checked against attnlib.softmax / torch.softmax."""
import math

import numpy as np
import pytest
import torch

from attnlib import entropy, softmax
from attnlib.exercises import ch04, exercise, exercise_names
from attnlib import head_qkv

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


def test_scaling_right_answer_gives_unit_variance_empirically():
    # Oracle: measure the variance for each option rather than trusting the messages.
    g = torch.Generator().manual_seed(0)
    d = ch04.SCALING_D_K
    dots = (torch.randn(20000, d, generator=g, dtype=torch.float64)
            * torch.randn(20000, d, generator=g, dtype=torch.float64)).sum(-1)
    factors = {"1 (no scaling)": 1.0, "1/d_k": 1 / d, "1/sqrt(d_k)": 1 / math.sqrt(d), "sqrt(d_k)": math.sqrt(d)}
    best = min(factors, key=lambda o: abs((dots * factors[o]).var().item() - 1))
    assert best == "1/sqrt(d_k)"
    assert ch04.check_scaling(best).correct
    for option, f in factors.items():
        if option == best:
            continue
        fb = ch04.check_scaling(option)
        measured = (dots * f).var().item()
        assert not fb.correct
        stated = d * f ** 2
        assert math.isclose(measured, stated, rel_tol=0.05)          # the message's variance is right
        assert f"{stated:.3g}" in fb.message


def test_scaling_messages_are_specific():
    assert "uniform" in ch04.check_scaling("1/d_k").message
    assert "saturat" in ch04.check_scaling("1 (no scaling)").message
    assert "worse" in ch04.check_scaling("sqrt(d_k)").message
    for bad in (None, "", "1/sqrt(dk)", 0.5, float("nan")):
        assert ch04.check_scaling(bad).correct is False


def test_uniform_entropy():
    T = ch04.UNIFORM_T
    exact = entropy(torch.full((T,), 1.0 / T, dtype=torch.float64)).item()   # oracle: attnlib.entropy
    assert ch04.check_uniform_entropy(exact).correct
    assert ch04.check_uniform_entropy(f"{exact:.2f}").correct
    assert "bits" in ch04.check_uniform_entropy(math.log2(T)).message
    assert "number of keys" in ch04.check_uniform_entropy(T).message
    assert "1/T" in ch04.check_uniform_entropy(1 / T).message
    assert "one-hot" in ch04.check_uniform_entropy(0).message
    assert "never negative" in ch04.check_uniform_entropy(-1).message
    for bad in BAD_INPUTS:
        fb = ch04.check_uniform_entropy(bad)
        assert fb.correct is False and fb.message


def test_exercises_are_registered():
    assert set(exercise_names(4)) >= {"temperature", "scaling", "uniform_entropy"}


def test_temperature_widget(scores):
    w = exercise(4, "temperature")
    w.control.value = "1"
    assert not w.check().correct and "Lower the temperature" in w.feedback.value
    w.control.value = "0.3"
    assert w.check().correct and "Correct." in w.feedback.value
    w.control.value = "nan"
    assert not w.check().correct and "finite" in w.feedback.value


def test_scaling_widget():
    w = exercise(4, "scaling")
    w.control.value = "1/d_k"
    assert not w.check().correct and "uniform" in w.feedback.value
    w.control.value = "1/sqrt(d_k)"
    assert w.check().correct and "Correct." in w.feedback.value


def test_uniform_entropy_widget():
    w = exercise(4, "uniform_entropy")
    w.control.value = f"{math.log2(ch04.UNIFORM_T):.3f}"
    assert not w.check().correct and "bits" in w.feedback.value
    w.control.value = f"{math.log(ch04.UNIFORM_T):.3f}"
    assert w.check().correct
