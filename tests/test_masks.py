"""Causal and padding masks, boolean <-> additive conversion."""
import pytest
import torch
import torch.nn.functional as F

import attnlib


@pytest.mark.parametrize("T_q,T_k", [(1, 1), (4, 4), (3, 6), (6, 3)])
def test_causal_mask_matches_torch_is_causal(T_q, T_k):
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(T_q, 4, generator=g), torch.randn(T_k, 4, generator=g), torch.randn(T_k, 2, generator=g)
    mask = attnlib.causal_mask(T_q, T_k)
    assert mask.shape == (T_q, T_k) and mask.dtype == torch.bool
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))
    for i in range(T_q):
        for j in range(T_k):
            assert bool(mask[i, j]) == (j <= i)


def test_causal_mask_device(device):
    assert attnlib.causal_mask(3, device=device).device.type == device.type


@pytest.mark.parametrize("bad", [0, -2, 2.5, "3", True])
def test_causal_mask_bad_lengths(bad):
    with pytest.raises(ValueError, match="T_q must be a positive int"):
        attnlib.causal_mask(bad)


def test_padding_mask_from_real_tokenizer(encoder):
    _, tokenizer = encoder
    batch = ["Attention is all you need.", "Hello there!"]
    enc = tokenizer(batch, padding=True, return_tensors="pt")
    mask = attnlib.padding_mask(enc["attention_mask"])
    B, T = enc["input_ids"].shape
    assert mask.shape == (B, 1, 1, T) and mask.dtype == torch.bool
    assert torch.equal(mask[:, 0, 0], enc["attention_mask"].bool())
    # broadcasts against (B, H, T_q, T) scores, and padded keys get zero weight
    q = torch.randn(B, 12, T, 8, generator=torch.Generator().manual_seed(1))
    _, weights = attnlib.scaled_dot_product_attention(q, q, q, mask)
    assert (weights[1, :, :, ~enc["attention_mask"][1].bool()] == 0).all()


@pytest.mark.parametrize("bad,err", [
    (torch.ones(3), ValueError), (torch.ones(2, 3, 4), ValueError),
    (torch.tensor([[1, 2, 0]]), ValueError), ([[1, 0]], TypeError)])
def test_padding_mask_errors(bad, err):
    with pytest.raises(err):
        attnlib.padding_mask(bad)


def test_additive_boolean_round_trip_gives_same_attention():
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(2)) > 0.4
    additive = attnlib.to_additive(mask)
    assert additive.dtype == torch.float32 and set(additive.unique().tolist()) <= {0.0, float("-inf")}
    assert torch.equal(attnlib.to_boolean(additive), mask)
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(5, 4, generator=g), torch.randn(7, 4, generator=g), torch.randn(7, 3, generator=g)
    out_b, w_b = attnlib.scaled_dot_product_attention(q, k, v, mask)
    out_f, w_f = attnlib.scaled_dot_product_attention(q, k, v, additive)
    assert torch.equal(w_b, w_f) and torch.equal(out_b, out_f)


def test_conversion_errors():
    with pytest.raises(TypeError, match="bool mask"):
        attnlib.to_additive(torch.zeros(2, 2))
    with pytest.raises(TypeError, match="float"):
        attnlib.to_boolean(torch.ones(2, 2, dtype=torch.bool))
