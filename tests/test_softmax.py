"""attnlib.softmax / entropy / softmax_jacobian against torch and invariants."""
import math

import numpy as np
import pytest
import torch

import attnlib


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_torch(dtype, dim, device):
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
    torch.testing.assert_close(attnlib.softmax(x, dim=dim), torch.softmax(x, dim=dim))


@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0, 10.0])
def test_temperature_divides_scores(temperature):
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(attnlib.softmax(x, temperature=temperature), torch.softmax(x / temperature, -1))


def test_stable_for_huge_scores():
    x = torch.tensor([1000.0, 1001.0, 1002.0])
    naive = torch.exp(x) / torch.exp(x).sum()
    assert torch.isnan(naive).all()  # the failure the max-subtraction avoids
    torch.testing.assert_close(attnlib.softmax(x), torch.softmax(x - 1000, -1))


def test_shift_invariance():
    x = torch.randn(10, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(attnlib.softmax(x), attnlib.softmax(x + 123.4))


def test_all_minus_inf_row_gives_zeros():
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    w = attnlib.softmax(x)
    assert torch.equal(w[1], torch.zeros(2)) and torch.isclose(w[0].sum(), torch.tensor(1.0))


def test_half_precision_computed_in_float32():
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(3)) * 30
    w = attnlib.softmax(x.bfloat16())
    assert w.dtype == torch.bfloat16
    torch.testing.assert_close(w.float(), torch.softmax(x.bfloat16().float(), -1), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_bad_temperature(bad):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        attnlib.softmax(torch.zeros(3), temperature=bad)


def test_integer_scores_rejected():
    with pytest.raises(TypeError, match="floating-point"):
        attnlib.softmax(torch.arange(3))


def test_numpy_accepted():
    out = attnlib.softmax(np.array([0.0, 0.0]))
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_entropy_in_nats():
    T = 8
    assert math.isclose(attnlib.entropy(torch.full((T,), 1 / T)).item(), math.log(T), rel_tol=1e-6)
    assert attnlib.entropy(torch.tensor([0.0, 1.0, 0.0])).item() == 0.0
    p = torch.softmax(torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4)), -1)
    expected = torch.distributions.Categorical(probs=p).entropy()
    torch.testing.assert_close(attnlib.entropy(p), expected)


def test_softmax_jacobian_matches_autograd():
    s = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    J_auto = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), s)
    torch.testing.assert_close(attnlib.softmax_jacobian(torch.softmax(s, -1)), J_auto)


def test_softmax_jacobian_batched_and_vanishes_when_saturated():
    p = torch.softmax(torch.randn(3, 4, 5, dtype=torch.float64), -1)
    J = attnlib.softmax_jacobian(p)
    assert J.shape == (3, 4, 5, 5)
    torch.testing.assert_close(J.sum(-1), torch.zeros(3, 4, 5, dtype=torch.float64))  # rows sum to 0
    saturated = torch.softmax(torch.tensor([0.0, 100.0, 0.0], dtype=torch.float64), -1)
    assert attnlib.softmax_jacobian(saturated).abs().max() < 1e-40
