"""tiled_attention and the online softmax against oracles: PyTorch's fused kernel, the readable
reference attnlib.scaled_dot_product_attention, and torch.softmax."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import attnlib
from attnlib import online_softmax, online_softmax_step, scaled_dot_product_attention, tiled_attention
from conftest import TOL  # per-dtype tolerances, defined once

pytestmark = pytest.mark.usefixtures("one_thread")



def qkv(shape_q, shape_k, d_v, dtype=torch.float64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g, dtype=dtype)
    k = torch.randn(*shape_k, generator=g, dtype=dtype)
    v = torch.randn(*shape_k[:-1], d_v, generator=g, dtype=dtype)
    return q.to(device), k.to(device), v.to(device)


def assert_close(actual, expected, dtype):
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, **TOL[dtype])


# ---------------------------------------------------------------- equality with the oracles

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape_q, shape_k, d_v", [
    ((37, 8), (37, 8), 8),                # 2-D, one head
    ((2, 3, 50, 16), (2, 3, 29, 16), 5),  # (B, H, T_q, d_k), T_q > T_k, d_v != d_k
    ((3, 20, 8), (2, 3, 45, 8), 4),       # batch dimensions that broadcast
])
@pytest.mark.parametrize("block_size", [3, 7, 16, 128])
def test_equals_fused_kernel_and_reference(device, dtype, shape_q, shape_k, d_v, block_size):
    q, k, v = qkv(shape_q, shape_k, d_v, dtype, device)
    out = tiled_attention(q, k, v, block_size=block_size)
    ref, _ = scaled_dot_product_attention(q, k, v)
    assert_close(out, ref, dtype)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    fused = F.scaled_dot_product_attention(q.expand(*batch, *q.shape[-2:]), k.expand(*batch, *k.shape[-2:]),
                                           v.expand(*batch, *v.shape[-2:]))
    assert_close(out, fused, dtype)
    assert out.device == q.device


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("T_q, T_k", [(40, 40), (45, 19), (19, 45), (1, 30)])
@pytest.mark.parametrize("block_size", [4, 16, 64])
def test_causal_top_left_alignment(device, dtype, T_q, T_k, block_size):
    q, k, v = qkv((2, T_q, 16), (2, T_k, 16), 8, dtype, device, seed=1)
    out = tiled_attention(q, k, v, is_causal=True, block_size=block_size)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), dtype)
    explicit = torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril()      # written out
    out_mask = tiled_attention(q, k, v, mask=explicit, block_size=block_size)
    assert_close(out_mask, F.scaled_dot_product_attention(q, k, v, attn_mask=explicit), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask_shape", [(2, 3, 33, 26), (33, 26), (2, 1, 1, 26), (26,), (33, 1), (1, 26)])
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("block_size", [5, 8, 64])
def test_masks_and_broadcasting(dtype, mask_shape, kind, block_size):
    q, k, v = qkv((2, 3, 33, 8), (2, 3, 26, 8), 6, dtype, seed=2)
    g = torch.Generator().manual_seed(3)
    keep = torch.rand(mask_shape, generator=g) > 0.3
    keep[..., 0] = True                                   # no fully masked row here (see below)
    if kind == "bool":
        mask = keep
    else:
        mask = torch.randn(mask_shape, generator=g, dtype=dtype).masked_fill(~keep, float("-inf"))
    out = tiled_attention(q, k, v, mask, block_size=block_size)
    mask_2d = mask.reshape((1,) * (2 - mask.dim()) + mask.shape)  # PyTorch's kernel wants >= 2-D
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask_2d), dtype)
    ref, _ = scaled_dot_product_attention(q, k, v, mask)
    assert_close(out, ref, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zeros(dtype, kind, device):
    q, k, v = qkv((2, 12, 8), (2, 21, 8), 4, dtype, device, seed=4)
    keep = torch.rand(2, 12, 21, generator=torch.Generator().manual_seed(5)).to(device) > 0.5
    keep[:, [0, 5, 11], :] = False                        # three queries that may attend to nothing
    keep[:, 3, 4:] = False                                # one that sees only the first key block
    mask = keep if kind == "bool" else attnlib.to_additive(keep, dtype)
    out = tiled_attention(q, k, v, mask, block_size=4)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, [0, 5, 11], :], torch.zeros(2, 3, 4, dtype=dtype, device=device))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), dtype)


@pytest.mark.parametrize("T_q, T_k", [(0, 9), (7, 0), (0, 0)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_empty_sequences_match_torch(T_q, T_k, is_causal):
    q, k, v = qkv((2, T_q, 4), (2, T_k, 4), 3, seed=21)
    out = tiled_attention(q, k, v, is_causal=is_causal, block_size=4)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert out.shape == expected.shape == (2, T_q, 3)
    assert torch.equal(out, torch.zeros(2, T_q, 3, dtype=torch.float64))
    assert_close(out, expected, torch.float64)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_minimum_mask_fully_masked_row_as_documented(dtype):
    """Hugging Face's finfo.min masks: a row whose every key carries the minimum is uniform
    (out = mean of v), as in the reference and PyTorch; converted with to_boolean, zeros."""
    from transformers.masking_utils import eager_mask
    attention_mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1] * 7], dtype=torch.bool)
    hf = eager_mask(batch_size=2, q_length=7, kv_length=7, attention_mask=attention_mask, dtype=dtype)
    q, k, v = (t.to(dtype) for t in qkv((2, 2, 7, 8), (2, 2, 7, 8), 4, torch.float32, seed=22))
    out = tiled_attention(q, k, v, hf, block_size=2)
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=hf), **tol)
    torch.testing.assert_close(out[0, :, :3], v[0].mean(-2, keepdim=True).expand(2, 3, 4), **tol)
    out_b = tiled_attention(q, k, v, attnlib.to_boolean(hf), block_size=2)
    assert (out_b[0, :, :3] == 0).all()


def test_scale_argument_and_numpy_inputs():
    q, k, v = qkv((9, 8), (14, 8), 3, seed=6)
    out = tiled_attention(q.numpy(), k.numpy(), v.numpy(), scale=0.3, block_size=4)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3), torch.float64)


def test_float16_scores_beyond_65504():
    """Raw and scaled scores reach ~1e5, beyond float16's range: computed in float32 as
    documented, the output matches a float64 oracle on the same float16 inputs."""
    g = torch.Generator().manual_seed(23)
    q = (torch.randn(2, 40, 16, generator=g) * 200).half()
    k = (torch.randn(2, 30, 16, generator=g) * 200).half()
    v = torch.randn(2, 30, 4, generator=g).half()
    assert (q.double() @ k.double().transpose(-2, -1) / 4).abs().max() > 65504
    for kwargs in (dict(), dict(is_causal=True), dict(scale=1.0)):
        out = tiled_attention(q, k, v, block_size=8, **kwargs)
        assert out.dtype == torch.float16 and torch.isfinite(out).all()
        exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kwargs)
        torch.testing.assert_close(out.double(), exact, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_computed_in_float32(dtype):
    q, k, v = qkv((2, 64, 16), (2, 64, 16), 16, torch.float32, seed=7)
    out = tiled_attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=True, block_size=16)
    assert out.dtype == dtype
    exact = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out.float() - exact).abs().max() < 2e-2


def test_large_scores_do_not_overflow():
    # scores around 1e3: exp overflows without the running-maximum subtraction
    q, k, v = qkv((50, 4), (70, 4), 3, torch.float32, seed=8)
    out = tiled_attention(q * 40, k * 40, v, block_size=8)
    assert torch.isfinite(out).all()
    assert_close(out, F.scaled_dot_product_attention(q * 40, k * 40, v), torch.float32)


# ---------------------------------------------------------------- what is materialised

class LargestTensor(TorchFunctionMode):
    """Records the largest number of elements of any tensor a torch function returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for r in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(r, torch.Tensor):
                self.largest = max(self.largest, r.numel())
        return result


@pytest.mark.parametrize("is_causal", [False, True])
def test_never_materialises_a_T_q_by_T_k_tensor(is_causal):
    T, d, block = 256, 8, 16
    q, k, v = qkv((T, d), (T, d), d, torch.float32, seed=9)
    with LargestTensor() as seen:
        tiled_attention(q, k, v, is_causal=is_causal, block_size=block)
    assert seen.largest <= max(T * d, block * block)      # the output, or one score tile
    with LargestTensor() as seen_ref:
        scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert seen_ref.largest == T * T                       # the probe does see a T x T tensor


# ---------------------------------------------------------------- online softmax

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sizes", [[10], [1, 1, 1], [3, 17, 5, 1], [64, 64]])
def test_online_softmax_equals_softmax(dtype, sizes):
    g = torch.Generator().manual_seed(10)
    blocks = [torch.randn(4, 6, n, generator=g, dtype=dtype) * 5 for n in sizes]
    blocks[-1][0, 0, -1] = float("-inf")                  # one masked score
    expected = torch.softmax(torch.cat(blocks, -1), dim=-1)
    assert_close(online_softmax(blocks), expected, dtype)


def test_online_softmax_all_masked_row_is_zero():
    blocks = [torch.tensor([[0.5, float("-inf")], [float("-inf")] * 2]), torch.tensor([[2.0], [float("-inf")]])]
    weights = online_softmax(blocks)
    assert torch.equal(weights[1], torch.zeros(3))
    assert torch.allclose(weights[0], torch.softmax(torch.tensor([0.5, float("-inf"), 2.0]), -1))


def test_online_softmax_step_invariant_and_correction():
    g = torch.Generator().manual_seed(11)
    scores = torch.randn(5, 40, generator=g, dtype=torch.float64) * 3
    m = torch.full((5,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(5, dtype=torch.float64)
    for start in range(0, 40, 7):
        m_old = m
        m, l, correction = online_softmax_step(m, l, scores[:, start:start + 7])
        seen = scores[:, :start + 7]
        assert torch.equal(m, seen.amax(-1))
        torch.testing.assert_close(l, torch.exp(seen - m[:, None]).sum(-1), atol=0, rtol=1e-12)
        expected_c = torch.zeros(5, dtype=torch.float64) if start == 0 else torch.exp(m_old - m)
        torch.testing.assert_close(correction, expected_c, atol=0, rtol=1e-12)
    assert torch.allclose(l, torch.exp(torch.logsumexp(scores, -1) - m), rtol=1e-12)


@pytest.mark.parametrize("bad, exc", [
    ([], ValueError),
    (torch.zeros(3), TypeError),
    ([torch.zeros(2, 3), torch.zeros(3, 3)], ValueError),
    ([torch.zeros(())], ValueError),
    ([torch.zeros(2, dtype=torch.long)], TypeError),
    (["abc"], TypeError),
])
def test_online_softmax_bad_input(bad, exc):
    with pytest.raises(exc):
        online_softmax(bad)


def test_online_softmax_step_bad_shapes():
    with pytest.raises(ValueError, match=r"m \(3,\), l \(3,\), block \(4, 2\)"):
        online_softmax_step(torch.zeros(3), torch.zeros(3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"m, l, block must be on one device, got m cpu, l cpu, block meta"):
        online_softmax_step(torch.zeros(3), torch.zeros(3), torch.zeros(3, 2, device="meta"))
    with pytest.raises(TypeError, match=r"block must be a floating-point tensor"):
        online_softmax_step(torch.zeros(3), torch.zeros(3), torch.zeros(3, 2, dtype=torch.long))


def test_online_softmax_rising_maximum_and_empty_blocks():
    # every block raises the maximum, so every step must rescale what came before
    blocks = [torch.tensor([[0.0, 1.0]]), torch.zeros(1, 0), torch.tensor([[5.0]]), torch.tensor([[9.0, 20.0]])]
    expected = torch.softmax(torch.tensor([[0.0, 1.0, 5.0, 9.0, 20.0]], dtype=torch.float64), -1)
    torch.testing.assert_close(online_softmax([b.double() for b in blocks]), expected, atol=0, rtol=1e-12)
    m, l, c = online_softmax_step(torch.tensor([2.0]), torch.tensor([3.0]), torch.zeros(1, 0))
    assert (m.item(), l.item(), c.item()) == (2.0, 3.0, 1.0)        # an empty block changes nothing
    assert online_softmax([torch.zeros(2, 0)]).shape == (2, 0)


# ---------------------------------------------------------------- bad input, as the reference

_q, _k, _v = torch.zeros(2, 4, 8), torch.zeros(2, 5, 8), torch.zeros(2, 5, 3)
BAD = [
    ((_q, torch.zeros(2, 5, 16), _v), {}),                           # d_k mismatch
    ((_q, _k, torch.zeros(2, 6, 3)), {}),                            # T_k mismatch
    ((torch.zeros(8), _k, _v), {}),                                  # rank 1
    ((_q.long(), _k, _v), {}),                                       # integer q
    ((_q, _k.double(), _v), {}),                                     # mixed dtypes
    (([[1.0]], _k, _v), {}),                                         # not a tensor
    ((torch.zeros(3, 4, 8), _k, _v), {}),                            # batch does not broadcast
    ((_q, _k, _v), {"mask": torch.ones(4, 6, dtype=torch.bool)}),    # mask does not broadcast
    ((_q, _k, _v), {"mask": torch.ones(4, 5, dtype=torch.long)}),    # integer mask
    ((_q, _k, _v), {"mask": torch.ones(4, 5, dtype=torch.bool), "is_causal": True}),
    ((_q, _k, _v), {"is_causal": "no"}),                             # not a bool
    ((_q, _k, _v), {"scale": "x"}),                                  # not a number
    ((_q, _k, _v), {"scale": float("nan")}),
    ((torch.zeros(2, 4, 0), torch.zeros(2, 5, 0), _v), {}),          # d_k = 0
    ((_q.to("meta"), _k, _v), {}),                                   # q on another device
    ((_q, _k, _v), {"mask": torch.ones(4, 5, device="meta")}),       # mask on another device
]


@pytest.mark.parametrize("args, kwargs", BAD)
def test_bad_input_raises_as_the_reference(args, kwargs):
    with pytest.raises((TypeError, ValueError)) as expected:
        scaled_dot_product_attention(*args, **kwargs)
    with pytest.raises(expected.type, match=None) as got:
        tiled_attention(*args, **kwargs)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("block_size, exc", [(0, ValueError), (-3, ValueError), (2.0, TypeError),
                                             (True, TypeError), ("8", TypeError), (None, TypeError),
                                             (torch.tensor(8), TypeError)])
def test_bad_block_size(block_size, exc):
    with pytest.raises(exc, match="block_size"):
        tiled_attention(_q, _k, _v, block_size=block_size)


def test_block_size_larger_than_sequence_is_one_tile():
    q, k, v = qkv((6, 4), (9, 4), 2, seed=12)
    out = tiled_attention(q, k, v, block_size=10_000)
    assert_close(out, F.scaled_dot_product_attention(q, k, v), torch.float64)
    assert math.isfinite(out.sum().item())


def test_gradients_match_torch():
    q, k, v = qkv((2, 19, 8), (2, 23, 8), 5, torch.float64, seed=13)
    grads = []
    for fn in (lambda *a: tiled_attention(*a, is_causal=True, block_size=6),
               lambda *a: F.scaled_dot_product_attention(*a, is_causal=True)):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        fn(*leaves).square().sum().backward()
        grads.append([t.grad for t in leaves])
    for g_tiled, g_ref in zip(*grads):
        torch.testing.assert_close(g_tiled, g_ref, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("row", [[math.inf, 1.0, -2.0], [math.nan, 1.0, 0.5], [1.0, -math.inf, math.inf],
                                 [-math.inf, -math.inf, -math.inf], [3.0, -math.inf, 1.0]])
@pytest.mark.parametrize("split", [1, 2])
def test_online_softmax_agrees_with_softmax_on_infinite_and_nan_scores(row, split):
    """online_softmax([inf], [1]) gave [nan, 0] where softmax([inf, 1]) gives [nan, nan]
    (issue 29): a +inf or NaN score makes the whole row NaN in both, -inf keeps weight 0, a
    fully masked row is all zeros."""
    scores = torch.tensor(row, dtype=torch.float64)
    got = attnlib.online_softmax([scores[:split], scores[split:]])
    want = attnlib.softmax(scores)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=1e-15)
    if any(math.isnan(x) or x == math.inf for x in row):
        assert torch.isnan(want).all()
