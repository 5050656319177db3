"""attnlib.scaled_dot_product_attention against PyTorch's kernel, plus invariants and errors."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib import scaled_dot_product_attention as sdpa

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-12),
       torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}

# (batch dims, T_q, T_k, d_k, d_v)
SHAPES = [
    ((), 1, 1, 1, 1),
    ((), 5, 5, 8, 8),
    ((), 4, 7, 16, 3),
    ((3,), 6, 6, 4, 9),
    ((2, 4), 5, 9, 8, 8),
    ((2, 3), 9, 4, 32, 16),
]


def make_qkv(batch, T_q, T_k, d_k, d_v, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, T_q, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(*batch, T_k, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(*batch, T_k, d_v, generator=g, dtype=torch.float64)
    return (t.to(device=device, dtype=dtype) for t in (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_torch_without_mask(shape, dtype, device):
    q, k, v = make_qkv(*shape, dtype=dtype, device=device)
    out, weights = sdpa(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype and out.device.type == device.type
    assert out.shape == expected.shape
    assert weights.shape == (*shape[0], shape[1], shape[2])
    torch.testing.assert_close(out, expected, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_matches_torch_causal(shape, dtype, device):
    q, k, v = make_qkv(*shape, dtype=dtype, device=device, seed=1)
    out, weights = sdpa(q, k, v, is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL[dtype])
    # top-left alignment: query i never sees key j > i, whatever T_q and T_k are
    T_q, T_k = shape[1], shape[2]
    future = ~torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril()
    assert (weights[..., future] == 0).all()


def test_bfloat16_causal_loose(device):
    q, k, v = make_qkv((2, 3), 8, 8, 16, 16, dtype=torch.bfloat16, device=device, seed=2)
    out, _ = sdpa(q, k, v, is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL[torch.bfloat16])


MASK_SHAPES = [  # (batch, T_q, T_k, mask shape)
    ((2, 3), 5, 6, (5, 6)),
    ((2, 3), 5, 6, (2, 3, 5, 6)),
    ((2, 3), 5, 6, (2, 1, 1, 6)),   # padding-style: per batch, per key
    ((2, 3), 5, 6, (1, 3, 5, 1)),
    ((4,), 3, 3, (3,)),              # broadcasts along T_q and batch
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,T_q,T_k,mask_shape", MASK_SHAPES)
def test_matches_torch_bool_mask(batch, T_q, T_k, mask_shape, dtype, device):
    q, k, v = make_qkv(batch, T_q, T_k, 8, 5, dtype=dtype, device=device, seed=3)
    g = torch.Generator().manual_seed(4)
    mask = (torch.rand(mask_shape, generator=g) > 0.3).to(device)
    out, weights = sdpa(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL[dtype])
    full = mask.expand(*batch, T_q, T_k)
    assert (weights[~full] == 0).all(), "masked weights must be exactly 0"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,T_q,T_k,mask_shape", MASK_SHAPES)
def test_matches_torch_float_mask(batch, T_q, T_k, mask_shape, dtype, device):
    q, k, v = make_qkv(batch, T_q, T_k, 8, 5, dtype=dtype, device=device, seed=5)
    g = torch.Generator().manual_seed(6)
    bias = torch.randn(mask_shape, generator=g, dtype=torch.float64)
    bias = bias.masked_fill(torch.rand(mask_shape, generator=g) < 0.2, float("-inf")).to(device=device, dtype=dtype)
    out, _ = sdpa(q, k, v, bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), **TOL[dtype])


@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0])
def test_custom_scale(scale, device):
    q, k, v = make_qkv((2,), 4, 6, 8, 3, dtype=torch.float64, device=device, seed=7)
    out, weights = sdpa(q, k, v, scale=scale)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale), **TOL[torch.float64])
    direct = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
    torch.testing.assert_close(weights, direct, **TOL[torch.float64])


def test_default_scale_is_inverse_sqrt_dk():
    q, k, v = make_qkv((), 3, 4, 16, 2, dtype=torch.float64)
    _, w_default = sdpa(q, k, v)
    _, w_explicit = sdpa(q, k, v, scale=1 / math.sqrt(16))
    torch.testing.assert_close(w_default, w_explicit, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fully_masked_rows_give_zeros_not_nan(dtype, device):
    q, k, v = make_qkv((2,), 4, 5, 8, 3, dtype=dtype, device=device, seed=8)
    mask = torch.ones(4, 5, dtype=torch.bool, device=device)
    mask[1] = False
    out, weights = sdpa(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (weights[:, 1] == 0).all() and (out[:, 1] == 0).all()
    assert torch.allclose(weights[:, [0, 2, 3]].sum(-1), torch.ones((), dtype=dtype, device=device))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL[dtype])
    additive = attnlib.to_additive(mask, dtype)
    out_f, weights_f = sdpa(q, k, v, additive)
    assert (out_f[:, 1] == 0).all() and torch.equal(weights_f, weights)


@pytest.mark.parametrize("seed", range(5))
def test_invariants_rows_sum_to_one_and_output_in_hull(seed):
    q, k, v = make_qkv((3,), 6, 7, 4, 2, dtype=torch.float64, seed=seed)
    out, weights = sdpa(q, k, v)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6, dtype=torch.float64))
    # Inside the convex hull of the values: every coordinate between the min and max of the
    # values, and the weights reproduce out exactly as a convex combination.
    assert (out >= v.amin(-2, keepdim=True) - 1e-12).all() and (out <= v.amax(-2, keepdim=True) + 1e-12).all()
    # the only convex combination that matches is the one with the returned weights
    torch.testing.assert_close(torch.einsum("bqk,bkd->bqd", weights, v), out)


def test_convex_hull_strict_check_in_2d():
    """For 2-D values, out must lie inside the hull polygon (half-plane test on each edge)."""
    v = torch.tensor([[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [0.0, 3.0]], dtype=torch.float64)
    g = torch.Generator().manual_seed(9)
    q, k = torch.randn(50, 3, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    out, _ = sdpa(q * 4, k, v)
    for a, b in zip(v, v.roll(-1, 0)):
        cross = (b[0] - a[0]) * (out[:, 1] - a[1]) - (b[1] - a[1]) * (out[:, 0] - a[0])
        assert (cross >= -1e-12).all()


def test_numpy_inputs_are_accepted():
    q, k, v = (t.numpy() for t in make_qkv((), 3, 4, 5, 2, dtype=torch.float64))
    out, weights = sdpa(q, k, v)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    torch.testing.assert_close(out, F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v))))


def test_torch_backend_matches_and_returns_no_weights(device):
    q, k, v = make_qkv((2, 2), 5, 5, 8, 8, device=device)
    out, weights = sdpa(q, k, v, is_causal=True, backend="torch")
    assert weights is None
    torch.testing.assert_close(out, sdpa(q, k, v, is_causal=True)[0], **TOL[torch.float32])


def test_gradients_match_torch():
    q, k, v = (t.requires_grad_() for t in make_qkv((2,), 4, 5, 6, 3, dtype=torch.float64))
    sdpa(q, k, v)[0].square().sum().backward()
    ours = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v).square().sum().backward()
    for a, t in zip(ours, (q, k, v)):
        torch.testing.assert_close(a, t.grad)


def test_attention_scores():
    q, k, _ = make_qkv((), 3, 4, 9, 1, dtype=torch.float64)
    torch.testing.assert_close(attnlib.attention_scores(q, k), q @ k.T / 3.0)


# ----------------------------------------------------------------------------- errors
def test_error_wrong_rank():
    with pytest.raises(ValueError, match=r"q must have at least 2 dimensions .* got shape \(8,\)"):
        sdpa(torch.randn(8), torch.randn(3, 8), torch.randn(3, 8))


def test_error_dk_mismatch():
    with pytest.raises(ValueError, match=r"q and k must share d_k.*q \(2, 4, 5, 8\) vs k \(2, 4, 5, 16\)"):
        sdpa(torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 16), torch.randn(2, 4, 5, 8))


def test_error_tk_mismatch():
    with pytest.raises(ValueError, match=r"k and v must share T_k.*k \(6, 8\) vs v \(5, 8\)"):
        sdpa(torch.randn(4, 8), torch.randn(6, 8), torch.randn(5, 8))


def test_error_mask_does_not_broadcast():
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) does not broadcast .*\(4, 6\)"):
        sdpa(torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 2), torch.ones(4, 5, dtype=torch.bool))


def test_error_mask_dtype():
    with pytest.raises(TypeError, match=r"mask must be bool .* got dtype torch.int64"):
        sdpa(torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 2), torch.ones(4, 4, dtype=torch.long))


@pytest.mark.parametrize("bad", [[[1.0, 2.0]], 3.0, "q"])
def test_error_non_tensor(bad):
    with pytest.raises(TypeError, match=r"q must be a torch.Tensor or numpy.ndarray, got"):
        sdpa(bad, torch.randn(2, 2), torch.randn(2, 2))


def test_error_mask_with_is_causal():
    with pytest.raises(ValueError, match="either mask or is_causal"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.ones(3, 3, dtype=torch.bool), is_causal=True)


def test_error_mixed_dtypes_and_int_inputs():
    with pytest.raises(TypeError, match="share a dtype"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4).double(), torch.randn(3, 4))
    with pytest.raises(TypeError, match="floating-point"):
        sdpa(torch.ones(3, 4, dtype=torch.long), torch.randn(3, 4), torch.randn(3, 4))


def test_error_batch_dims_do_not_broadcast():
    with pytest.raises(ValueError, match="leading .* must broadcast"):
        sdpa(torch.randn(2, 3, 4), torch.randn(3, 3, 4), torch.randn(3, 3, 4))


def test_error_unknown_backend():
    with pytest.raises(ValueError, match="backend must be"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), backend="flash")
