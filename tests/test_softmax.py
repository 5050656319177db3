"""attnlib.softmax / entropy / softmax_jacobian against torch, float64 oracles and invariants."""
import math

import numpy as np
import pytest
import torch

import attnlib

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_torch(dtype, dim, device):
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
    torch.testing.assert_close(attnlib.softmax(x, dim=dim), torch.softmax(x, dim=dim))


@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0, 10.0])
def test_temperature_divides_scores(temperature):
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(attnlib.softmax(x, temperature=temperature), torch.softmax(x / temperature, -1))


def test_tiny_temperature_gives_the_argmax_not_nan():
    x = torch.tensor([[1.0, 3.0, 2.0]])
    w = attnlib.softmax(x, temperature=1e-300)                # x / 1e-300 overflows float32
    assert torch.equal(w, torch.tensor([[0.0, 1.0, 0.0]]))


def test_stable_for_huge_scores():
    x = torch.tensor([1000.0, 1001.0, 1002.0])
    naive = torch.exp(x) / torch.exp(x).sum()
    assert torch.isnan(naive).all()  # the failure the max-subtraction avoids
    torch.testing.assert_close(attnlib.softmax(x), torch.softmax(x.double() - 1000, -1).float())


def test_shift_invariance():
    x = torch.randn(10, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(attnlib.softmax(x), attnlib.softmax(x + 123.4))
    torch.testing.assert_close(attnlib.softmax(x), torch.softmax(x, -1))


def test_all_minus_inf_row_gives_zeros():
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    w = attnlib.softmax(x)
    assert torch.equal(w[1], torch.zeros(2)) and torch.isclose(w[0].sum(), torch.tensor(1.0))
    torch.testing.assert_close(w[0], torch.softmax(x[0], -1))


def test_empty_slices_give_empty_results():
    for shape, dim in (((3, 0), -1), ((0, 4), -1), ((0,), 0), ((2, 0, 5), 1)):
        x = torch.randn(shape)
        got = attnlib.softmax(x, dim=dim)
        assert got.shape == torch.softmax(x, dim=dim).shape and got.dtype == x.dtype


def test_nan_scores_give_nan_in_their_slice_only():
    w = attnlib.softmax(torch.tensor([[0.0, math.nan], [0.0, 0.0]]))
    assert torch.isnan(w[0]).all() and torch.equal(w[1], torch.tensor([0.5, 0.5]))


# ---------------------------------------------------------------- low precision: float32 inside
def test_half_precision_computed_in_float32():
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(3)) * 30
    w = attnlib.softmax(x.bfloat16())
    assert w.dtype == torch.bfloat16
    torch.testing.assert_close(w.float(), torch.softmax(x.bfloat16().float(), -1), atol=1e-2, rtol=1e-2)


def test_float16_small_temperature_does_not_overflow():
    # 100 / 0.001 = 1e5 is beyond float16's 65504: computed in float16 it would be inf - inf = NaN
    x = torch.tensor([[100.0, 99.0, 98.0]], dtype=torch.float16)
    w = attnlib.softmax(x, temperature=0.001)
    assert w.dtype == torch.float16
    assert torch.equal(w, torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float16))
    w = attnlib.softmax(x, temperature=0.5)
    torch.testing.assert_close(w.double(), torch.softmax(x.double() / 0.5, -1), atol=1e-3, rtol=1e-3)


def test_float16_long_row_sums_to_one():
    # 70000 equal scores: the sum of their exponentials, 70000, is beyond float16's range
    x = torch.zeros(2, 70_000, dtype=torch.float16)
    w = attnlib.softmax(x)
    assert w.dtype == torch.float16
    torch.testing.assert_close(w.double().sum(-1), torch.ones(2, dtype=torch.float64), atol=2e-3, rtol=0)


# ---------------------------------------------------------------- argument errors
@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                                      (float("inf"), ValueError), ("1", TypeError), (True, TypeError),
                                      (None, TypeError)])
def test_bad_temperature(bad, exc):
    with pytest.raises(exc, match="temperature must be"):
        attnlib.softmax(torch.zeros(3), temperature=bad)


@pytest.mark.parametrize("bad, exc", [(2, ValueError), (-3, ValueError), (1.0, TypeError), (None, TypeError),
                                      (torch.tensor(0), TypeError)])
def test_bad_dim(bad, exc):
    with pytest.raises(exc, match="dim must be"):
        attnlib.softmax(torch.zeros(2, 3), dim=bad)
    with pytest.raises(exc, match="dim must be"):
        attnlib.entropy(torch.full((2, 3), 1 / 3), dim=bad)


@pytest.mark.parametrize("bad", [torch.arange(3), torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.complex64)])
def test_non_float_scores_rejected(bad):
    with pytest.raises(TypeError, match="scores must be a floating-point tensor"):
        attnlib.softmax(bad)


def test_numpy_accepted():
    out = attnlib.softmax(np.array([0.0, 0.0]))
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5], dtype=torch.float64))


# ---------------------------------------------------------------- entropy
def test_entropy_in_nats():
    T = 8
    assert math.isclose(attnlib.entropy(torch.full((T,), 1 / T)).item(), math.log(T), rel_tol=1e-6)
    assert attnlib.entropy(torch.tensor([0.0, 1.0, 0.0])).item() == 0.0
    p = torch.softmax(torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4)), -1)
    expected = torch.distributions.Categorical(probs=p).entropy()
    torch.testing.assert_close(attnlib.entropy(p), expected)
    torch.testing.assert_close(attnlib.entropy(p.T, dim=0), expected)


def test_entropy_of_a_fully_masked_row_is_zero():
    w = attnlib.softmax(torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]]))
    assert attnlib.entropy(w)[1].item() == 0.0


def test_entropy_accepts_rounding_of_real_weights():
    g = torch.Generator().manual_seed(5)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        w = attnlib.softmax(torch.randn(4, 2048, generator=g).to(dtype) * 4)
        expected = torch.distributions.Categorical(probs=w.double()).entropy()
        torch.testing.assert_close(attnlib.entropy(w).double(), expected, atol=5e-2, rtol=1e-2)


@pytest.mark.parametrize("bad, pattern", [
    ([math.nan, 0.5], "found nan"),
    ([-0.5, 1.5], "non-negative"),
    ([0.5, 0.6], "sum to 1"),
    ([0.33, 0.33, 0.33], "sum to 1"),
    ([math.inf, 0.0], "found inf"),
])
def test_entropy_refuses_what_is_not_a_distribution(bad, pattern):
    with pytest.raises(ValueError, match=pattern):
        attnlib.entropy(torch.tensor(bad))


def test_entropy_errors_and_meta():
    with pytest.raises(TypeError, match="weights must be a floating-point tensor"):
        attnlib.entropy(torch.tensor([0, 1]))
    assert attnlib.entropy(torch.empty(3, 4, device="meta")).shape == (3,)


# ---------------------------------------------------------------- Jacobian
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


def test_softmax_jacobian_errors():
    with pytest.raises(ValueError, match="at least one dimension"):
        attnlib.softmax_jacobian(torch.tensor(1.0))
    with pytest.raises(ValueError, match="sum to 1"):
        attnlib.softmax_jacobian(torch.tensor([0.5, 0.7]))
    with pytest.raises(TypeError, match="floating-point"):
        attnlib.softmax_jacobian(torch.tensor([1, 0]))


# ---------------------------------------------------------------- soft-capping (Gemma 2)
from attnlib.attention import qk_norm_scores  # noqa: E402
from attnlib.softmax import soft_cap  # noqa: E402  (attnlib.softmax is also the function)


@pytest.mark.parametrize("cap", [1.0, 5.0, 50.0])
def test_soft_cap_is_cap_tanh(cap, device):
    s = (torch.randn(3, 4, 9, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 3 * cap).to(device)
    torch.testing.assert_close(soft_cap(s, cap), cap * torch.tanh(s / cap))


def test_soft_cap_is_bounded_by_the_cap():
    cap = 50.0
    s = torch.tensor([-1e30, -1e4, -150.0, -50.0, 0.0, 50.0, 150.0, 1e4, 1e30], dtype=torch.float64)
    out = soft_cap(s, cap)
    assert out.abs().max() <= cap
    moderate = s.abs() <= 3 * cap                                   # tanh(3) = 0.995: strictly inside
    assert (out[moderate].abs() < cap).all()
    assert out[-1] == cap and out[0] == -cap                        # far scores land on the cap


def test_soft_cap_is_about_the_identity_for_small_scores():
    cap = 50.0
    s = torch.linspace(-cap / 10, cap / 10, 201, dtype=torch.float64)
    out = soft_cap(s, cap)
    # tanh x = x - x^3/3 + ...: the change is below |s|^3 / (3 cap^2), 0.34 % of s at cap / 10
    assert ((out - s).abs() <= s.abs() ** 3 / (3 * cap ** 2) + 1e-12).all()
    assert ((out - s).abs() <= 0.0034 * s.abs() + 1e-12).all()
    assert (out - s).abs().max() > 1e-3                              # and it is not the identity


def test_soft_cap_keeps_the_order_and_the_mask():
    s = torch.tensor([[-3.0, 0.5, 12.0, 80.0, -math.inf]], dtype=torch.float64)
    out = soft_cap(s, 10.0)
    assert torch.equal(out.argsort(), s.argsort()) and (out.diff()[0, :3] > 0).all()
    assert torch.isneginf(out[0, -1])                               # a masked key stays masked
    w = attnlib.softmax(out)
    assert w[0, -1] == 0
    # Gemma 2 caps first and masks after: the same weights
    mask = torch.tensor([[True, True, True, True, False]])
    capped_then_masked = soft_cap(torch.tensor([[-3.0, 0.5, 12.0, 80.0, 7.0]], dtype=torch.float64), 10.0)
    torch.testing.assert_close(w, attnlib.softmax(capped_then_masked.masked_fill(~mask, -math.inf)))
    assert soft_cap(torch.tensor([math.inf]), 10.0).item() == 10.0 and soft_cap(torch.tensor([math.nan]), 10.0).isnan()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_soft_cap_half_precision(dtype):
    s = torch.tensor([0.1, 3.0, 40.0, 200.0, 6e4]).to(dtype)
    out = soft_cap(s, 50.0)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), 50.0 * torch.tanh(s.double() / 50.0), atol=0.25, rtol=1e-2)


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                                      (float("inf"), ValueError), ("50", TypeError), (None, TypeError)])
def test_soft_cap_bad_cap(bad, exc):
    with pytest.raises(exc, match="cap must be"):
        soft_cap(torch.zeros(3), bad)


def test_soft_cap_refuses_integer_scores():
    with pytest.raises(TypeError, match="scores must be a floating-point tensor"):
        soft_cap(torch.arange(3), 5.0)


# ---------------------------------------------------------------- QK normalisation (ViT-22B)
def _qk(shape_q=(2, 3, 5, 8), shape_k=(2, 3, 7, 8), seed=7, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape_q, generator=g, dtype=dtype), torch.randn(shape_k, generator=g, dtype=dtype)


def test_qk_norm_scores_match_layer_norm_modules(device):
    q, k = _qk()
    q, k = q.to(device) * 7 + 2, k.to(device) * 0.1 - 1
    d_k = q.shape[-1]
    ln = torch.nn.LayerNorm(d_k, eps=1e-6, elementwise_affine=False).to(device=device, dtype=torch.float64)
    expected = ln(q) @ ln(k).transpose(-2, -1) / math.sqrt(d_k)
    torch.testing.assert_close(qk_norm_scores(q, k), expected)
    torch.testing.assert_close(qk_norm_scores(q, k, scale=0.25), expected * math.sqrt(d_k) * 0.25)


@pytest.mark.parametrize("size", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("scale", [None, 1 / 8, 2.0])
def test_qk_norm_scores_are_bounded_by_the_scale(size, scale):
    q, k = _qk((4, 6, 8), (4, 9, 8), seed=8)
    s = qk_norm_scores(size * q, k, scale=scale)
    bound = 8 * (1 / math.sqrt(8) if scale is None else scale)       # |s| <= d_k * scale
    assert s.abs().max() <= bound + 1e-9
    # a query that equals its key scores d_k * scale * var / (var + eps): the bound, less what eps takes
    same = torch.diagonal(qk_norm_scores(size * q, size * q, scale=scale), dim1=-2, dim2=-1)   # (4, 6)
    var = (size * q).var(dim=-1, unbiased=False)
    torch.testing.assert_close(same, bound * var / (var + 1e-6))
    if size >= 1:                                                    # eps negligible: the bound is reached
        assert (same >= bound * (1 - 1e-4)).all()


def test_qk_norm_scores_ignore_the_size_of_q_and_k():
    q, k = _qk()
    base = qk_norm_scores(q, k)
    grow = torch.tensor([0.5, 1.0, 30.0, 1e3, 5.0])[:, None]           # one positive factor per query row
    # equal up to eps = 1e-6 against the variance of a row (about 1 here)
    torch.testing.assert_close(qk_norm_scores(q * grow + 3.0, k * 40.0 - 2.0), base, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(qk_norm_scores(-q, k), -base)
    # plain scores grow with the factor: what the normalisation removes
    assert not torch.allclose(attnlib.attention.attention_scores(q * grow, k), attnlib.attention.attention_scores(q, k))


def test_qk_norm_scores_broadcast_batches():
    q, k = _qk((2, 3, 5, 8), (3, 7, 8))
    s = qk_norm_scores(q, k)
    assert s.shape == (2, 3, 5, 7)
    torch.testing.assert_close(s[1, 2], qk_norm_scores(q[1, 2], k[2]))


def test_qk_norm_scores_half_precision():
    q, k = _qk((5, 16), (6, 16), dtype=torch.float32)
    s = qk_norm_scores((q * 300).half(), k.half())
    assert s.dtype == torch.float16
    torch.testing.assert_close(s.float(), qk_norm_scores(q, k), atol=2e-2, rtol=1e-2)


def test_qk_norm_scores_errors():
    q, k = _qk((5, 8), (6, 8))
    with pytest.raises(ValueError, match="share d_k"):
        qk_norm_scores(q, k[:, :4])
    with pytest.raises(TypeError, match="share a dtype"):
        qk_norm_scores(q, k.float())
    with pytest.raises(TypeError, match="floating-point"):
        qk_norm_scores(torch.ones(5, 8, dtype=torch.long), torch.ones(6, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="eps must be"):
        qk_norm_scores(q, k, eps=0.0)
    with pytest.raises(ValueError, match="scale must be"):
        qk_norm_scores(q, k, scale=float("nan"))
