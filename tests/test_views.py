"""The explicit-loop views of chapter 3 against `@` and torch.einsum (head_qkv, their real inputs,
is tested against the encoder's eager attention in test_encoder.py)."""
import numpy as np
import pytest
import torch

from attnlib.views import column_view, dot_product_view, outer_product_view, row_view

pytestmark = pytest.mark.usefixtures("one_thread")

PRODUCT_VIEWS = [row_view, column_view, outer_product_view]


def _weights(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g, dtype=dtype), dim=-1)


@pytest.mark.parametrize("shape_q, shape_k", [((5, 8), (7, 8)), ((2, 3, 4, 6), (2, 3, 9, 6)), ((1, 4, 2), (3, 5, 2))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dot_product_view_matches_matmul_and_einsum(shape_q, shape_k, dtype):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(*shape_q, generator=g).to(dtype)
    k = torch.randn(*shape_k, generator=g).to(dtype)
    got = dot_product_view(q, k)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, q @ k.transpose(-2, -1), **tol)
    torch.testing.assert_close(got, torch.einsum("...id,...jd->...ij", q, k), **tol)
    assert got.dtype == dtype


@pytest.mark.parametrize("view", PRODUCT_VIEWS)
@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
def test_product_views_match_matmul_and_einsum(view, batch):
    weights = _weights(*batch, 6, 5, seed=2)
    v = torch.randn(*batch, 5, 7, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = view(weights, v)
    torch.testing.assert_close(got, weights @ v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, torch.einsum("...ij,...jd->...id", weights, v), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("view", PRODUCT_VIEWS)
def test_product_views_broadcast_batch_and_accept_numpy(view):
    weights = _weights(2, 1, 4, 3, seed=4)                    # (B, 1, T_q, T_k)
    v = torch.randn(1, 5, 3, 2, dtype=torch.float64)           # (1, H, T_k, d_v)
    torch.testing.assert_close(view(weights, v), weights @ v)
    out = view(weights.numpy(), v.numpy())
    assert out.shape == (2, 5, 4, 2)


def test_row_view_output_is_a_convex_combination():
    # Invariant of the row view: each output row lies in the box spanned by the value rows.
    weights = _weights(8, 6, seed=5)
    v = torch.randn(6, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    out = row_view(weights, v)
    assert bool((out <= v.max(0).values + 1e-12).all()) and bool((out >= v.min(0).values - 1e-12).all())


def test_column_view_keeps_constant_features_constant():
    # Rows of A sum to 1, so A applied to a constant column returns that constant.
    weights = _weights(5, 5, seed=7)
    v = torch.full((5, 2), 3.5, dtype=torch.float64)
    torch.testing.assert_close(column_view(weights, v), torch.full((5, 2), 3.5, dtype=torch.float64))


@pytest.mark.parametrize("view", PRODUCT_VIEWS + [dot_product_view])
def test_views_are_differentiable(view):
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    ref = (a @ (b.T if view is dot_product_view else b)).sum()
    got = view(a, b).sum()
    ga, gb = torch.autograd.grad(got, (a, b))
    ra, rb = torch.autograd.grad(ref, (a, b))
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gb, rb)


@pytest.mark.parametrize("view", PRODUCT_VIEWS)
def test_bad_inputs_raise_with_shapes(view):
    w = torch.rand(3, 4)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 2\)"):
        view(w, torch.rand(5, 2))                             # T_k mismatch
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        view(torch.rand(4), torch.rand(4, 2))
    with pytest.raises(TypeError, match="dtype"):
        view(w, torch.rand(4, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating-point"):
        view(w, torch.ones(4, 2, dtype=torch.int64))
    with pytest.raises(TypeError, match="list"):
        view([[1.0]], torch.rand(1, 1))
    with pytest.raises(ValueError, match="broadcast"):
        view(torch.rand(2, 3, 4), torch.rand(5, 4, 2))


@pytest.mark.parametrize("view", PRODUCT_VIEWS)
@pytest.mark.parametrize("shape_w, shape_v", [((0, 3), (3, 2)), ((2, 0), (0, 3)), ((2, 3), (3, 0)),
                                              ((4, 0, 3), (3, 2))])
def test_product_views_of_empty_inputs_match_matmul(view, shape_w, shape_v):
    w, v = torch.rand(shape_w, dtype=torch.float64), torch.rand(shape_v, dtype=torch.float64)
    got, expected = view(w, v), w @ v
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)                 # zeros where T_k = 0 (sums of nothing)


@pytest.mark.parametrize("shape_q, shape_k", [((0, 3), (4, 3)), ((2, 3), (0, 3)), ((2, 0), (4, 0))])
def test_dot_product_view_of_empty_inputs_matches_matmul(shape_q, shape_k):
    q, k = torch.rand(shape_q), torch.rand(shape_k)
    torch.testing.assert_close(dot_product_view(q, k), q @ k.T)


@pytest.mark.parametrize("view", PRODUCT_VIEWS + [dot_product_view])
def test_views_refuse_tensors_on_different_devices(view):
    with pytest.raises(ValueError, match=r"must be on one device, got .* meta"):
        view(torch.rand(3, 4), torch.rand(4, 4, device="meta"))


def test_dot_product_view_bad_inputs():
    with pytest.raises(ValueError, match=r"q \(2, 3\) vs k \(4, 5\)"):
        dot_product_view(torch.rand(2, 3), torch.rand(4, 5))
    with pytest.raises(TypeError):
        dot_product_view(np.ones((2, 3), dtype=np.int64), np.ones((2, 3), dtype=np.int64))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("view", PRODUCT_VIEWS)
def test_views_follow_cuda_device(view):
    weights = _weights(4, 3, seed=8, dtype=torch.float32).cuda()
    v = torch.randn(3, 2, device="cuda")
    out = view(weights, v)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out, weights @ v)
    with pytest.raises(ValueError, match="device"):
        view(weights, v.cpu())
