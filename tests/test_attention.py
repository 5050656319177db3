"""attnlib.scaled_dot_product_attention against oracles (PyTorch's kernel called directly,
softmax written out in float64, Hugging Face's masks), invariants, and errors."""
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib import scaled_dot_product_attention as sdpa
from conftest import TOL  # per-dtype tolerances, defined once

pytestmark = pytest.mark.usefixtures("one_thread")

BACKENDS = ["reference", "torch"]

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


def oracle(q, k, v, mask=None, *, is_causal=False, scale=None):
    """softmax(Q K^T * scale + mask) V written out in float64, independently of attnlib."""
    q, k, v = (t.double() for t in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if is_causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.double()
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)      # fully masked rows: 0, as documented
    return w @ v, w


# ---------------------------------------------------------------- the oracles agree
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_torch_without_mask(shape, dtype, backend, device):
    q, k, v = make_qkv(*shape, dtype=dtype, device=device)
    out, weights = sdpa(q, k, v, backend=backend)
    expected = F.scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype and out.device.type == device.type
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, **TOL[dtype])
    if backend == "reference":
        assert weights.shape == (*shape[0], shape[1], shape[2]) and weights.dtype == dtype
        torch.testing.assert_close(weights.double(), oracle(q, k, v)[1], **TOL[dtype])
    else:
        assert weights is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES[1:])
@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_torch_causal(shape, dtype, backend, device):
    q, k, v = make_qkv(*shape, dtype=dtype, device=device, seed=1)
    out, weights = sdpa(q, k, v, is_causal=True, backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL[dtype])
    torch.testing.assert_close(out.double(), oracle(q, k, v, is_causal=True)[0], **TOL[dtype])
    if backend == "reference":
        # top-left alignment: query i never sees key j > i, whatever T_q and T_k are
        T_q, T_k = shape[1], shape[2]
        future = ~torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril()
        assert (weights[..., future] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_bfloat16_causal_loose(backend, device):
    q, k, v = make_qkv((2, 3), 8, 8, 16, 16, dtype=torch.bfloat16, device=device, seed=2)
    out, _ = sdpa(q, k, v, is_causal=True, backend=backend)
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
@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_torch_bool_mask(batch, T_q, T_k, mask_shape, dtype, backend, device):
    q, k, v = make_qkv(batch, T_q, T_k, 8, 5, dtype=dtype, device=device, seed=3)
    g = torch.Generator().manual_seed(4)
    mask = (torch.rand(mask_shape, generator=g) > 0.3).to(device)
    out, weights = sdpa(q, k, v, mask, backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL[dtype])
    torch.testing.assert_close(out.double(), oracle(q, k, v, mask)[0], **TOL[dtype])
    if backend == "reference":
        full = mask.expand(*batch, T_q, T_k)
        assert (weights[~full] == 0).all(), "masked weights must be exactly 0"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,T_q,T_k,mask_shape", MASK_SHAPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_torch_float_mask(batch, T_q, T_k, mask_shape, dtype, backend, device):
    q, k, v = make_qkv(batch, T_q, T_k, 8, 5, dtype=dtype, device=device, seed=5)
    g = torch.Generator().manual_seed(6)
    bias = torch.randn(mask_shape, generator=g, dtype=torch.float64) * 3
    bias = bias.masked_fill(torch.rand(mask_shape, generator=g) < 0.2, float("-inf")).to(device=device, dtype=dtype)
    out, _ = sdpa(q, k, v, bias, backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), **TOL[dtype])
    torch.testing.assert_close(out.double(), oracle(q, k, v, bias)[0], **TOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_mask_of_another_dtype_is_added_as_given(backend):
    q, k, v = make_qkv((2,), 4, 6, 8, 3, seed=9)
    bias = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(10)) * 4
    out, _ = sdpa(q, k, v, bias, backend=backend)
    torch.testing.assert_close(out.double(), oracle(q, k, v, bias)[0], **TOL[torch.float32])


@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0, -0.7, 0.0])
@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_scale(scale, backend, device):
    q, k, v = make_qkv((2,), 4, 6, 8, 3, dtype=torch.float64, device=device, seed=7)
    out, weights = sdpa(q, k, v, scale=scale, backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale), **TOL[torch.float64])
    expected_out, expected_w = oracle(q, k, v, scale=scale)
    torch.testing.assert_close(out, expected_out, **TOL[torch.float64])
    if backend == "reference":
        torch.testing.assert_close(weights, expected_w, **TOL[torch.float64])


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_scale_with_mask_and_causal(backend):
    q, k, v = make_qkv((2, 2), 5, 5, 4, 3, dtype=torch.float64, seed=11)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(12)) > 0.4
    mask[:, 0] = True
    for kwargs, expected in ((dict(mask=mask), oracle(q, k, v, mask, scale=2.5)[0]),
                             (dict(is_causal=True), oracle(q, k, v, is_causal=True, scale=2.5)[0])):
        out, _ = sdpa(q, k, v, scale=2.5, backend=backend, **kwargs)
        torch.testing.assert_close(out, expected, **TOL[torch.float64])


@pytest.mark.parametrize("scale", [np.float32(0.5), torch.tensor(0.5), 1])
def test_scale_accepts_any_real_number(scale):
    q, k, v = make_qkv((), 3, 4, 5, 2, dtype=torch.float64, seed=13)
    out, _ = sdpa(q, k, v, scale=scale)
    torch.testing.assert_close(out, oracle(q, k, v, scale=float(scale))[0], **TOL[torch.float64])


def test_default_scale_is_inverse_sqrt_dk():
    q, k, v = make_qkv((), 3, 4, 16, 2, dtype=torch.float64)
    _, weights = sdpa(q, k, v)
    direct = torch.softmax(q @ k.T / 4.0, dim=-1)          # sqrt(16) = 4, written out
    torch.testing.assert_close(weights, direct, **TOL[torch.float64])
    assert not torch.allclose(weights, torch.softmax(q @ k.T, dim=-1))


# ---------------------------------------------------------------- low precision: float32 inside
def _large_half(seed=14):
    """float16 q, k whose raw scores reach ~5e5 (beyond float16's 65504) and whose scaled
    scores exceed it too; v moderate.  Exact in float32, inf/NaN if computed in float16."""
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(2, 3, 12, 16, generator=g) * 200).half()
    k = (torch.randn(2, 3, 10, 16, generator=g) * 200).half()
    v = torch.randn(2, 3, 10, 4, generator=g).half()
    return q, k, v


def test_float16_scores_beyond_65504_reference():
    q, k, v = _large_half()
    assert (q.double() @ k.double().transpose(-2, -1) / 4).abs().max() > 65504
    for kwargs in (dict(), dict(is_causal=True), dict(scale=1.0)):
        out, weights = sdpa(q, k, v, **kwargs)
        assert out.dtype == weights.dtype == torch.float16
        expected_out, expected_w = oracle(q, k, v, **kwargs)
        assert torch.isfinite(out).all() and torch.isfinite(weights).all()
        torch.testing.assert_close(out.double(), expected_out, **TOL[torch.float16])
        torch.testing.assert_close(weights.double(), expected_w, **TOL[torch.float16])


def test_float16_scores_beyond_65504_torch_backend():
    q, k, v = _large_half(seed=15)
    out, _ = sdpa(q, k, v, backend="torch")
    torch.testing.assert_close(out.double(), oracle(q, k, v)[0], **TOL[torch.float16])


def test_float16_additive_mask_is_added_in_float32():
    # a float16 bias of -60000 plus a score of -20000 is -80000: -inf in float16, fine in float32
    q, k, v = _large_half(seed=16)
    bias = torch.zeros(12, 10, dtype=torch.float16)
    bias[:, :3] = -60000.0
    out, _ = sdpa(q, k, v, bias)
    torch.testing.assert_close(out.double(), oracle(q, k, v, bias)[0], **TOL[torch.float16])


# ---------------------------------------------------------------- fully masked rows, empty inputs
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["bool", "additive -inf"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_rows_give_zeros_not_nan(dtype, kind, backend, device):
    q, k, v = make_qkv((2,), 4, 5, 8, 3, dtype=dtype, device=device, seed=8)
    keep = torch.ones(4, 5, dtype=torch.bool, device=device)
    keep[1] = False
    keep[2, 3:] = False
    mask = keep if kind == "bool" else attnlib.to_additive(keep, dtype)
    out, weights = sdpa(q, k, v, mask, backend=backend)
    assert torch.isfinite(out).all()
    assert (out[:, 1] == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), **TOL[dtype])
    torch.testing.assert_close(out.double(), oracle(q, k, v, keep)[0], **TOL[dtype])
    if backend == "reference":
        assert torch.isfinite(weights).all() and (weights[:, 1] == 0).all()
        torch.testing.assert_close(weights[:, [0, 2, 3]].sum(-1), torch.ones(2, 3, dtype=dtype, device=device))


@pytest.mark.parametrize("T_q, T_k", [(0, 5), (3, 0), (0, 0)])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_sequences_match_torch(T_q, T_k, is_causal, backend):
    q, k, v = make_qkv((2,), T_q, T_k, 4, 3, seed=17)
    out, weights = sdpa(q, k, v, is_causal=is_causal, backend=backend)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert out.shape == expected.shape == (2, T_q, 3)
    assert torch.equal(out, torch.zeros(2, T_q, 3))          # no keys: zeros, as a fully masked row
    torch.testing.assert_close(out, expected)
    if backend == "reference":
        assert weights.shape == (2, T_q, T_k)


def test_empty_batch_and_zero_width_values_match_torch():
    for shape in (((0,), 3, 4, 5, 2), ((2,), 3, 4, 5, 0)):
        q, k, v = make_qkv(*shape, seed=18)
        out, weights = sdpa(q, k, v)
        expected = F.scaled_dot_product_attention(q, k, v)
        assert out.shape == expected.shape and weights.shape == (*shape[0], 3, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_width_queries_and_keys_are_an_error(backend):
    with pytest.raises(ValueError, match=r"q and k must have d_k >= 1 .*q \(3, 0\), k \(4, 0\)"):
        sdpa(torch.zeros(3, 0), torch.zeros(4, 0), torch.zeros(4, 2), backend=backend)
    with pytest.raises(ValueError, match=r"d_k >= 1"):
        attnlib.attention_scores(torch.zeros(3, 0), torch.zeros(4, 0))


# ---------------------------------------------------------------- Hugging Face's finfo.min masks
def _hf_eager_mask(attention_mask, dtype):
    from transformers.masking_utils import eager_mask
    B, T = attention_mask.shape
    return eager_mask(batch_size=B, q_length=T, kv_length=T, attention_mask=attention_mask.bool(), dtype=dtype)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", BACKENDS)
def test_finite_minimum_mask_fully_masked_row_is_uniform(dtype, backend):
    """Left padding + causal, built by transformers with finfo(dtype).min: the first query of
    the padded sentence sees only padding.  As documented, that row is uniform over all T_k
    keys (out = mean of v), like PyTorch's kernel; other rows match the boolean mask."""
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    hf = _hf_eager_mask(attention_mask, dtype)                          # (B, 1, T, T)
    assert hf.dtype == dtype and hf.min() == torch.finfo(dtype).min
    q, k, v = make_qkv((2, 2), 5, 5, 8, 4, dtype=dtype, seed=19)
    out, weights = sdpa(q, k, v, hf, backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=hf), **TOL[dtype])
    torch.testing.assert_close(out[0, :, :2], v[0].mean(-2, keepdim=True).expand(2, 2, 4), **TOL[dtype])
    if backend == "reference":
        torch.testing.assert_close(weights[0, :, :2], torch.full((2, 2, 5), 0.2, dtype=dtype))
    keep = attnlib.to_boolean(hf)
    torch.testing.assert_close(out[:, :, 2:], oracle(q, k, v, keep)[0][:, :, 2:].to(dtype), **TOL[dtype])
    out_b, _ = sdpa(q, k, v, keep, backend=backend)                     # converted: zeros
    assert (out_b[0, :, :2] == 0).all()
    torch.testing.assert_close(out_b, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), **TOL[dtype])


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_minimum_fully_masked_row_is_the_unmasked_softmax(backend):
    """-65504 added in float32 leaves the differences between scores intact: a row whose every
    key carries it gets softmax(S) itself, as documented (and as PyTorch's kernel does)."""
    attention_mask = torch.tensor([[0, 1, 1, 1]])
    hf = _hf_eager_mask(attention_mask, torch.float16)
    q, k, v = make_qkv((1, 2), 4, 4, 8, 3, dtype=torch.float16, seed=20)
    out, _ = sdpa(q, k, v, hf, backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=hf), **TOL[torch.float16])
    unmasked = oracle(q, k, v)[0]
    torch.testing.assert_close(out[..., 0, :].double(), unmasked[..., 0, :], **TOL[torch.float16])


# ---------------------------------------------------------------- devices (meta needs no GPU)
@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_on_different_devices_are_an_error(which, backend):
    t = dict(zip("qkv", make_qkv((2,), 3, 4, 5, 2)))
    t[which] = t[which].to("meta")
    with pytest.raises(ValueError, match=rf"q, k, v must be on one device, got .*{which} meta"):
        sdpa(t["q"], t["k"], t["v"], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mask_on_another_device_is_an_error(backend):
    q, k, v = make_qkv((2,), 3, 4, 5, 2)
    for mask in (torch.ones(3, 4, dtype=torch.bool, device="meta"), torch.zeros(4, device="meta")):
        with pytest.raises(ValueError, match=r"mask is on meta but q, k, v are on cpu"):
            sdpa(q, k, v, mask, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_meta_inputs_give_meta_outputs_of_the_right_shape(backend):
    q, k, v = (torch.empty(s, device="meta") for s in ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)))
    out, weights = sdpa(q, k, v, is_causal=True, backend=backend)
    assert out.device.type == "meta" and out.shape == (2, 3, 5, 4)
    assert weights is None or weights.shape == (2, 3, 5, 7)


# ---------------------------------------------------------------- invariants
@pytest.mark.parametrize("seed", range(5))
def test_invariants_rows_sum_to_one_and_output_in_hull(seed):
    q, k, v = make_qkv((3,), 6, 7, 4, 2, dtype=torch.float64, seed=seed)
    out, weights = sdpa(q, k, v)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6, dtype=torch.float64))
    # inside the box spanned by the values (a consequence of being a convex combination)
    assert (out >= v.amin(-2, keepdim=True) - 1e-12).all() and (out <= v.amax(-2, keepdim=True) + 1e-12).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL[torch.float64])


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


def test_gradients_match_torch():
    q, k, v = (t.requires_grad_() for t in make_qkv((2,), 4, 5, 6, 3, dtype=torch.float64))
    sdpa(q, k, v)[0].square().sum().backward()
    ours = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v).square().sum().backward()
    for a, t in zip(ours, (q, k, v)):
        torch.testing.assert_close(a, t.grad)


# ---------------------------------------------------------------- attention_scores
def test_attention_scores():
    q, k, _ = make_qkv((), 3, 4, 9, 1, dtype=torch.float64)
    torch.testing.assert_close(attnlib.attention_scores(q, k), q @ k.T / 3.0)
    torch.testing.assert_close(attnlib.attention_scores(q, k, scale=0.5), q @ k.T * 0.5)


@pytest.mark.parametrize("q, k, exc, pattern", [
    (torch.zeros(3, 4), torch.zeros(5, 6), ValueError, r"q and k must share d_k"),
    (torch.zeros(3, 4), torch.zeros(5, 4, dtype=torch.float64), TypeError, r"q, k must share a dtype"),
    (torch.zeros(4), torch.zeros(5, 4), ValueError, r"q must have at least 2 dimensions"),
    (torch.zeros(3, 4), torch.zeros(5, 4, device="meta"), ValueError, r"q, k must be on one device"),
    (torch.zeros(2, 3, 4), torch.zeros(3, 5, 4), ValueError, r"dimensions of q, k must broadcast"),
    (torch.zeros(3, 4), "k", TypeError, r"k must be a torch.Tensor"),
])
def test_attention_scores_errors_never_mention_v(q, k, exc, pattern):
    with pytest.raises(exc, match=pattern) as err:
        attnlib.attention_scores(q, k)
    assert not re.search(r"\bv\b", str(err.value)), str(err.value)


# ---------------------------------------------------------------- errors
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


@pytest.mark.parametrize("bad", [[[1.0, 2.0]], 3.0, "q", None])
def test_error_non_tensor(bad):
    with pytest.raises(TypeError, match=r"q must be a torch.Tensor or numpy.ndarray, got"):
        sdpa(bad, torch.randn(2, 2), torch.randn(2, 2))


def test_error_mask_with_is_causal():
    with pytest.raises(ValueError, match="either mask or is_causal"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.ones(3, 3, dtype=torch.bool), is_causal=True)


def test_error_mixed_dtypes_and_int_inputs():
    with pytest.raises(TypeError, match=r"q, k, v must share a dtype, got q torch.float32, k torch.float64"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4).double(), torch.randn(3, 4))
    with pytest.raises(TypeError, match="q must be a floating-point tensor, got dtype torch.int64"):
        sdpa(torch.ones(3, 4, dtype=torch.long), torch.randn(3, 4), torch.randn(3, 4))


def test_error_batch_dims_do_not_broadcast():
    with pytest.raises(ValueError, match="leading .* must broadcast"):
        sdpa(torch.randn(2, 3, 4), torch.randn(3, 3, 4), torch.randn(3, 3, 4))


@pytest.mark.parametrize("bad", ["flash", None, 1])
def test_error_unknown_backend(bad):
    with pytest.raises(ValueError, match="backend must be one of 'reference', 'torch'"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), backend=bad)


@pytest.mark.parametrize("bad", ["no", "False", 1, None, torch.tensor(True)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_error_is_causal_must_be_a_bool(bad, backend):
    with pytest.raises(TypeError, match=r"is_causal must be True or False"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), is_causal=bad, backend=backend)


@pytest.mark.parametrize("bad, exc", [("x", TypeError), (True, TypeError), (torch.ones(2), TypeError),
                                      (math.nan, ValueError), (math.inf, ValueError)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_error_scale(bad, exc, backend):
    with pytest.raises(exc, match=r"^scale must be a"):
        sdpa(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), scale=bad, backend=backend)


def test_np_bool_is_causal_is_accepted():
    q, k, v = make_qkv((), 3, 3, 4, 2, dtype=torch.float64)
    out, _ = sdpa(q, k, v, is_causal=np.bool_(True))
    torch.testing.assert_close(out, oracle(q, k, v, is_causal=True)[0])


# ---------------------------------------------------------------- one rule for float masks (issue 29)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fill", [-1e9, torch.finfo(torch.float32).min, -65520.0, -65504.0])
def test_float_mask_is_rounded_to_q_dtype_in_every_path(dtype, fill, device):
    """A float32 mask with huge negative entries and float16/bfloat16 inputs: the PyTorch path
    used to round it to q's dtype (-1e9 -> -inf in float16: a zero row) while the reference and
    tiled paths added it in float32 (a uniform row).  Now every path rounds it to q's dtype
    first; oracle: PyTorch's kernel given the mask rounded by hand, and the float64 reference
    with the rounded values as removals (-inf) or biases."""
    from attnlib.tiled import tiled_attention
    q, k, v = make_qkv((2, 2), 5, 6, 8, 4, dtype=dtype, device=device, seed=31)
    mask = torch.zeros(5, 6, device=device)
    mask[0] = fill                                                       # a row masked everywhere
    mask[1, :3] = fill                                                   # a row masked in part
    mask[2, 4] = -0.7                                                    # an ordinary bias
    rounded = mask.to(dtype)
    # Oracle: the float64 formula given the rounded mask.  (Not PyTorch's kernel: on CUDA it
    # overflows finfo.min, the Hugging Face fill, to -inf, and returns zeros where its CPU
    # kernel and the formula average the row; attnlib's torch path guards against that.)
    expected = oracle(q, k, v, rounded)[0].to(dtype)
    outs = {b: sdpa(q, k, v, mask, backend=b)[0] for b in BACKENDS}
    outs["tiled"] = tiled_attention(q, k, v, mask, block_size=2)
    # A finite bias of size |fill| rounds each score + bias to within half a unit in the last
    # place of |fill| (0.004 at 65504 in float32), so kernels that add in another order may
    # differ by about that much in every logit: the tolerance follows that conditioning.
    bias = rounded[torch.isfinite(rounded)].abs().max().item()
    ulp = bias * torch.finfo(torch.float32 if dtype == torch.float32 else dtype).eps
    tol = dict(TOL[dtype])
    tol["atol"] = max(tol["atol"], 2 * ulp * v.abs().max().item())
    for name, out in outs.items():
        torch.testing.assert_close(out, expected, **tol, msg=lambda m: f"{name}: {m}")
    removed = bool(torch.isinf(rounded[0, 0]))
    assert removed == (fill < -65504 if dtype == torch.float16 else
                       dtype == torch.bfloat16 and fill == torch.finfo(torch.float32).min)
    for name, out in outs.items():                                       # the documented meaning
        if removed:                                                      # fully masked: zeros
            assert (out[..., 0, :] == 0).all(), name
        else:                                                            # a finite bias: no zero row
            assert (out[..., 0, :] != 0).any(), name
