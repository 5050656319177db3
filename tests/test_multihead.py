"""attnlib.MultiHeadAttention against torch.nn.MultiheadAttention and F.scaled_dot_product_attention."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlib
from attnlib import MultiHeadAttention, merge_heads, split_heads
from conftest import TOL  # per-dtype tolerances, defined once

pytestmark = pytest.mark.usefixtures("one_thread")



def torch_mha(d_model, n_heads, *, bias=True, dtype=torch.float32, device="cpu", seed=0):
    torch.manual_seed(seed)
    module = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True)
    if bias:  # PyTorch initialises the biases to zero; make them count in the comparison
        with torch.no_grad():
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    return module.to(device=device, dtype=dtype).eval()


def inputs(B, T, d_model, *, dtype=torch.float32, device="cpu", seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, d_model, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


# (B, T_q, T_k, d_model, n_heads)
SHAPES = [(1, 1, 1, 4, 1), (2, 5, 5, 16, 4), (3, 7, 7, 24, 3), (2, 4, 9, 32, 8), (1, 6, 3, 12, 12)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_self_and_cross_attention_match_torch(shape, bias, dtype, device):
    B, T_q, T_k, d_model, n_heads = shape
    ref = torch_mha(d_model, n_heads, bias=bias, dtype=dtype, device=device)
    ours = MultiHeadAttention.from_torch(ref)
    assert ours.q_proj.weight.dtype == dtype and ours.q_proj.weight.device.type == device.type
    query = inputs(B, T_q, d_model, dtype=dtype, device=device)
    memory = inputs(B, T_k, d_model, dtype=dtype, device=device, seed=2)
    for key in (None, memory) if T_q == T_k else (memory,):
        k = query if key is None else key
        out, weights = ours(query, key)
        expected, expected_w = ref(query, k, k, need_weights=True, average_attn_weights=False)
        assert out.shape == (B, T_q, d_model) and weights.shape == (B, n_heads, T_q, T_k)
        torch.testing.assert_close(out, expected, **TOL[dtype])
        torch.testing.assert_close(weights, expected_w, **TOL[dtype])
        # PyTorch's default averages the heads
        _, averaged = ref(query, k, k)
        torch.testing.assert_close(weights.mean(dim=1), averaged, **TOL[dtype])


def test_separate_value_tensor(device):
    ref = torch_mha(16, 4, device=device)
    ours = MultiHeadAttention.from_torch(ref)
    q, k, v = (inputs(2, T, 16, device=device, seed=s) for T, s in ((3, 1), (5, 2), (5, 3)))
    out, weights = ours(q, k, v)
    expected, expected_w = ref(q, k, v, average_attn_weights=False)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])
    torch.testing.assert_close(weights, expected_w, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causal_matches_torch_inverted_bool_mask(dtype, device):
    ref = torch_mha(24, 6, dtype=dtype, device=device, seed=3)
    ours = MultiHeadAttention.from_torch(ref)
    x = inputs(3, 8, 24, dtype=dtype, device=device)
    allowed = attnlib.causal_mask(8, device=device)            # True = may attend
    out_c, w_c = ours(x, is_causal=True)
    out_m, w_m = ours(x, mask=allowed)
    expected, expected_w = ref(x, x, x, attn_mask=~allowed, average_attn_weights=False)  # True = masked out
    for out, w in ((out_c, w_c), (out_m, w_m)):
        torch.testing.assert_close(out, expected, **TOL[dtype])
        torch.testing.assert_close(w, expected_w, **TOL[dtype])
    assert (w_c[..., ~allowed] == 0).all()
    # PyTorch's own causal flag (it needs the mask as a hint as well)
    expected_c, _ = ref(x, x, x, attn_mask=~allowed, is_causal=True)
    torch.testing.assert_close(out_c, expected_c, **TOL[dtype])


def test_padding_mask_matches_key_padding_mask(device):
    ref = torch_mha(16, 2, device=device, seed=4)
    ours = MultiHeadAttention.from_torch(ref)
    x = inputs(3, 6, 16, device=device)
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]], device=device)
    out, weights = ours(x, mask=attnlib.padding_mask(attention_mask))   # (B, 1, 1, T)
    expected, expected_w = ref(x, x, x, key_padding_mask=attention_mask == 0, average_attn_weights=False)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])
    torch.testing.assert_close(weights, expected_w, **TOL[torch.float32])
    assert (weights[1, :, :, 3:] == 0).all() and (weights[2, :, :, 2:] == 0).all()


def test_cross_attention_with_float_mask(device):
    ref = torch_mha(16, 4, device=device, seed=5)
    ours = MultiHeadAttention.from_torch(ref)
    q, kv = inputs(2, 4, 16, device=device), inputs(2, 7, 16, device=device, seed=9)
    g = torch.Generator().manual_seed(6)
    bias = torch.randn(4, 7, generator=g).to(device)
    bias[:, 2] = float("-inf")
    out, weights = ours(q, kv, mask=bias)
    expected, expected_w = ref(q, kv, kv, attn_mask=bias, average_attn_weights=False)  # floats: same convention
    torch.testing.assert_close(out, expected, **TOL[torch.float32])
    torch.testing.assert_close(weights, expected_w, **TOL[torch.float32])
    assert (weights[..., 2] == 0).all()


def test_heads_match_functional_sdpa_on_split_projections(device):
    """Each head is plain SDPA on its own d_head columns of X W_Q, X W_K, X W_V."""
    torch.manual_seed(7)
    mha = MultiHeadAttention(32, 4).to(device).double()
    x = inputs(2, 9, 32, dtype=torch.float64, device=device)
    out, weights = mha(x, is_causal=True)
    heads = []
    for h in range(4):
        P = mha.projections(h)
        q, k, v = x @ P["W_Q"] + P["b_Q"], x @ P["W_K"] + P["b_K"], x @ P["W_V"] + P["b_V"]  # (B, T, d_head)
        heads.append(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        direct = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(
            ~torch.ones(9, 9, dtype=torch.bool, device=device).tril(), float("-inf")), dim=-1)
        torch.testing.assert_close(weights[:, h], direct)
    concat = torch.cat(heads, dim=-1)                                     # (B, T, d_model)
    expected = sum(heads[h] @ mha.projections(h)["W_O"] for h in range(4)) + mha.out_proj.bias
    torch.testing.assert_close(out, concat @ mha.out_proj.weight.T + mha.out_proj.bias)
    torch.testing.assert_close(out, expected)


def test_weights_are_distributions_and_gradients_flow():
    torch.manual_seed(8)
    mha = MultiHeadAttention(12, 3)
    x = inputs(2, 5, 12).requires_grad_()
    out, weights = mha(x)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    assert (weights >= 0).all()
    out.square().sum().backward()
    assert x.grad is not None and mha.q_proj.weight.grad.abs().sum() > 0


def test_parameter_count_does_not_depend_on_heads():
    counts = {H: sum(p.numel() for p in MultiHeadAttention(384, H).parameters()) for H in (1, 4, 12)}
    assert set(counts.values()) == {4 * 384 * 384 + 4 * 384}
    ref = nn.MultiheadAttention(384, 12, batch_first=True)
    assert counts[12] == sum(p.numel() for p in ref.parameters())


def test_split_merge_roundtrip_and_layout():
    x = torch.arange(2 * 3 * 12.0).view(2, 3, 12)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 3)
    torch.testing.assert_close(heads[1, 2, 0], x[1, 0, 6:9])  # head 2 owns columns 6..8
    torch.testing.assert_close(merge_heads(heads), x)


def test_from_torch_copies_rather_than_shares():
    ref = torch_mha(8, 2)
    ours = MultiHeadAttention.from_torch(ref)
    with torch.no_grad():
        ref.in_proj_weight.zero_()
    assert ours.q_proj.weight.abs().sum() > 0


# ----------------------------------------------------------------------------- errors
def test_error_d_model_not_divisible():
    with pytest.raises(ValueError, match=r"d_model = 10 is not divisible by n_heads = 4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match=r"d_model = 10 is not divisible by n_heads = 3"):
        split_heads(torch.zeros(1, 2, 10), 3)


@pytest.mark.parametrize("d_model,n_heads,exc", [(0, 1, ValueError), (8, 0, ValueError), (8.0, 2, TypeError),
                                                 (True, 1, TypeError), (8, "2", TypeError), (None, 2, TypeError)])
def test_error_bad_sizes(d_model, n_heads, exc):
    with pytest.raises(exc, match=r"(d_model|n_heads) must be a positive int"):
        MultiHeadAttention(d_model, n_heads)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_error_bias_must_be_a_bool(bad):
    with pytest.raises(TypeError, match=r"bias must be True or False"):
        MultiHeadAttention(8, 2, bias=bad)


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_error_split_heads_sizes(bad, exc):
    with pytest.raises(exc, match=r"n_heads must be a positive int"):
        split_heads(torch.zeros(1, 2, 8), bad)
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor or numpy.ndarray, got list"):
        split_heads([[[0.0]]], 1)
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor or numpy.ndarray, got list"):
        merge_heads([[[[0.0]]]])


def test_error_wrong_last_dimension():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"query has last dimension 12, but this module has d_model = 16"):
        mha(torch.randn(2, 5, 12))
    with pytest.raises(ValueError, match=r"key has last dimension 8, but .* d_model = 16: got shape \(2, 3, 8\)"):
        mha(torch.randn(2, 5, 16), torch.randn(2, 3, 8))


def test_error_wrong_rank_and_types():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"query must be \(B, T, d_model\), got shape \(5, 16\) \(add a batch"):
        mha(torch.randn(5, 16))
    with pytest.raises(TypeError, match=r"query must be a torch.Tensor or numpy.ndarray, got list"):
        mha([[0.0] * 16])
    with pytest.raises(TypeError, match=r"query has dtype torch.float64 but the weights are torch.float32"):
        mha(torch.randn(1, 2, 16, dtype=torch.float64))


def test_error_batch_and_length_mismatch():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"key has batch size 3 but query has 2"):
        mha(torch.randn(2, 4, 8), torch.randn(3, 4, 8))
    with pytest.raises(ValueError, match=r"key and value must share T_k: key \(2, 4, 8\) vs value \(2, 5, 8\)"):
        mha(torch.randn(2, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 5, 8))


def test_error_mask_and_causal_together():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"pass either mask or is_causal=True"):
        mha(torch.randn(1, 3, 8), mask=attnlib.causal_mask(3), is_causal=True)


def test_error_from_torch_unsupported():
    with pytest.raises(TypeError, match=r"expected a torch.nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"kdim = 6 and vdim = 6 must equal embed_dim = 8"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=6, vdim=6))
    with pytest.raises(ValueError, match=r"add_bias_kv and add_zero_attn"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))


def test_error_projections_head_out_of_range():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(IndexError, match=r"head must be in 0..3 \(or -4..-1 from the end\), got 4"):
        mha.projections(4)
    with pytest.raises(IndexError, match=r"got -5"):
        mha.projections(-5)
    with pytest.raises(TypeError, match=r"head must be an int"):
        mha.projections(1.0)


def test_projections_negative_head_counts_from_the_end():
    mha = MultiHeadAttention(16, 4)
    last, minus_one = mha.projections(3), mha.projections(-1)
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q"):
        assert torch.equal(last[name], minus_one[name])
    torch.testing.assert_close(last["W_Q"], mha.q_proj.weight.detach()[12:16].T)


def test_error_inputs_on_other_devices_and_is_causal_type():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"query is on meta but the weights are on cpu"):
        mha(torch.zeros(1, 3, 8, device="meta"))
    with pytest.raises(ValueError, match=r"mask is on meta but q, k, v are on cpu"):
        mha(torch.zeros(1, 3, 8), mask=torch.ones(3, 3, dtype=torch.bool, device="meta"))
    with pytest.raises(TypeError, match=r"is_causal must be True or False"):
        mha(torch.zeros(1, 3, 8), is_causal="no")


@pytest.mark.parametrize("T_q, T_k", [(0, 0), (0, 4), (3, 0)])
def test_empty_sequences_match_torch(T_q, T_k):
    ref = torch_mha(16, 4, seed=11)                       # random biases: T_k = 0 gives out = bias
    ours = MultiHeadAttention.from_torch(ref)
    query, memory = inputs(2, T_q, 16), inputs(2, T_k, 16, seed=2)
    out, weights = ours(query, memory)
    expected, expected_w = ref(query, memory, memory, average_attn_weights=False)
    assert out.shape == expected.shape == (2, T_q, 16) and weights.shape == expected_w.shape == (2, 4, T_q, T_k)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])
    if T_k == 0 and T_q > 0:
        torch.testing.assert_close(out, ref.out_proj.bias.detach().expand(2, T_q, 16))


# --- scale_heads: the in-page head_mask (issue 36: a list raised AttributeError) -----------------
def test_scale_heads_scales_each_heads_columns():
    out = torch.arange(24.0).reshape(2, 1, 12)
    scale = torch.tensor([[1.0, 0.0, 0.5], [0.0, 2.0, 1.0]])
    expected = out.reshape(2, 1, 3, 4) * scale[:, None, :, None]
    torch.testing.assert_close(attnlib.scale_heads(out, scale), expected.reshape(2, 1, 12))
    torch.testing.assert_close(attnlib.scale_heads(out, scale.long()), attnlib.scale_heads(out, scale.floor()))


@pytest.mark.parametrize("out, scale, exc, match", [
    ([[[0.0] * 12]], torch.ones(1, 3), TypeError, r"^out must be a torch.Tensor or numpy.ndarray, got list$"),
    (torch.zeros(1, 2, 12), [[1.0, 0.0, 1.0]], TypeError, r"^scale must be a torch.Tensor or numpy.ndarray, got list$"),
    (torch.zeros(1, 2, 12), None, TypeError, r"^scale must be a torch.Tensor or numpy.ndarray, got NoneType$"),
    (torch.zeros(1, 2, 12, dtype=torch.long), torch.ones(1, 3), TypeError, r"out must be a floating-point tensor"),
    (torch.zeros(1, 2, 12), torch.ones(1, 3, dtype=torch.bool), TypeError, r"scale must be a tensor of real numbers"),
    (torch.zeros(1, 2, 12), torch.ones(1, 0), ValueError, r"scale must be \(B, H\) .* got scale \(1, 0\)"),
    (torch.zeros(1, 2, 12), torch.ones(1, 5), ValueError, r"scale must be \(B, H\) .* got scale \(1, 5\)"),
    (torch.zeros(2, 2, 12), torch.ones(1, 3), ValueError, r"got scale \(1, 3\) and out \(2, 2, 12\)"),
])
def test_scale_heads_refuses_with_the_error_policy(out, scale, exc, match):
    with pytest.raises(exc, match=match):
        attnlib.scale_heads(out, scale)
