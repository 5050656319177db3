"""attnlib.positions against Hugging Face's rotary embedding (Llama) and the formula of
Vaswani et al. (2017), section 3.5; the relative-position property of RoPE as an invariant."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnlib

from attnlib.positions import apply_rope, rope_frequencies, rope_scores, sinusoidal

ml = pytest.importorskip("transformers.models.llama.modeling_llama")


def _hf_rope(x, positions, base):
    """Hugging Face's own path: LlamaRotaryEmbedding makes cos/sin, apply_rotary_pos_emb rotates."""
    from transformers import LlamaConfig

    d = x.shape[-1]
    cfg = LlamaConfig(hidden_size=d * 2, num_attention_heads=2, head_dim=d,
                      rope_parameters={"rope_type": "default", "rope_theta": base})
    rot = ml.LlamaRotaryEmbedding(cfg)
    cos, sin = rot(x, positions[None])                      # (1, T, d)
    out, _ = ml.apply_rotary_pos_emb(x, x, cos, sin)         # x (1, H, T, d), unsqueeze_dim=1
    return out


@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("d", [8, 64])
def test_apply_rope_equals_hugging_face_llama(base, d):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 40, d, generator=g)                # (B, H, T, d)
    positions = torch.arange(40)
    ours = apply_rope(x, positions, base)
    theirs = _hf_rope(x, positions, base)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(apply_rope(x, base=base), ours)   # default positions 0..T-1


def test_apply_rope_equals_hf_at_far_positions_with_exact_angles():
    """HF forms the angles in float32; at position 5000 that rounding alone is ~1e-4.  With the
    same (float64) cos/sin, apply_rotary_pos_emb and apply_rope agree to float32 rounding."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 6, 32, generator=g, dtype=torch.float64)
    positions = torch.tensor([0, 1, 777, 4096, 5000, 12345])
    freqs = positions[:, None].double() * rope_frequencies(32, 10000.0)[None]
    emb = torch.cat([freqs, freqs], -1)
    theirs, _ = ml.apply_rotary_pos_emb(x, x, emb.cos()[None], emb.sin()[None])
    torch.testing.assert_close(apply_rope(x, positions), theirs, atol=1e-12, rtol=0)


def test_scores_after_rotation_depend_on_offset_only():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(5, 16, generator=g, dtype=torch.float64), torch.randn(7, 16, generator=g, dtype=torch.float64)
    i, j = torch.arange(5), torch.arange(7)
    base_scores = rope_scores(q, k, i, j)
    for shift in (1, 13, 1000, -3):
        torch.testing.assert_close(rope_scores(q, k, i + shift, j + shift), base_scores, atol=1e-9, rtol=0)
    # and it does depend on the offset: moving only the keys changes the scores
    assert (rope_scores(q, k, i, j + 3) - base_scores).abs().max() > 1e-2
    # the score at offset 0 is the plain dot product (rotation by the same angle)
    torch.testing.assert_close(rope_scores(q, k[:5], i, i).diagonal(), (q * k[:5]).sum(-1), atol=1e-12, rtol=0)


def test_rope_keeps_norms_and_position_zero_is_identity():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 9, 12, generator=g)
    y = apply_rope(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(y[:, 0], x[:, 0])


def test_rope_half_precision_is_computed_in_float32():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(4))
    y16 = apply_rope(x.half(), torch.arange(4) + 100)
    assert y16.dtype == torch.float16
    torch.testing.assert_close(y16.float(), apply_rope(x, torch.arange(4) + 100), atol=2e-3, rtol=0)


def test_sinusoidal_matches_vaswani_formula():
    T, d = 50, 16
    pe = sinusoidal(T, d, dtype=torch.float64)
    expected = np.zeros((T, d))
    for pos in range(T):
        for i in range(d // 2):
            expected[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d))
            expected[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d))
    np.testing.assert_allclose(pe.numpy(), expected, atol=1e-12)
    assert sinusoidal(T, d).dtype == torch.float32
    # PE_i . PE_j depends on i - j only
    gram = pe @ pe.T
    for off in (0, 1, 7):
        diag = gram.diagonal(off)
        assert (diag - diag[0]).abs().max() < 1e-9


@pytest.mark.parametrize("call, err, text", [
    (lambda: sinusoidal(4, 5), ValueError, "even"),
    (lambda: sinusoidal(4.0, 4), TypeError, "T must be"),
    (lambda: sinusoidal(-1, 4), ValueError, "non-negative"),
    (lambda: sinusoidal(3, 4, base=1.0), ValueError, "base"),
    (lambda: apply_rope(torch.randn(3, 5)), ValueError, "even"),
    (lambda: apply_rope(torch.randn(5)), ValueError, "at least 2 dimensions"),
    (lambda: apply_rope(torch.ones(3, 4, dtype=torch.long)), TypeError, "floating-point"),
    (lambda: apply_rope([[1.0, 2.0]]), TypeError, "torch.Tensor"),
    (lambda: apply_rope(torch.randn(3, 4), torch.arange(4)), ValueError, "broadcast"),
    (lambda: apply_rope(torch.randn(3, 4), torch.tensor([0., float("nan"), 1.])), ValueError, "finite"),
    (lambda: apply_rope(torch.randn(3, 4), torch.tensor([True, False, True])), TypeError, "real numbers"),
    (lambda: rope_scores(torch.randn(3, 4), torch.randn(3, 6), [0, 1, 2], [0, 1, 2]), ValueError, "d_k"),
])
def test_errors(call, err, text):
    with pytest.raises(err, match=text):
        call()


@pytest.mark.parametrize("base", [100.0, 10000.0, 1e6])
def test_sinusoidal_uses_its_base_as_written_in_the_paper(base):
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(...), written out entry by entry."""
    T, d = 7, 6
    pe = sinusoidal(T, d, base=base, dtype=torch.float64)
    for pos in range(T):
        for i in range(d // 2):
            angle = pos / base ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    assert not torch.allclose(sinusoidal(T, d, base=base), sinusoidal(T, d, base=base * 10))


def test_apply_rope_keeps_float64_positions_from_a_list():
    """A list of Python floats went through torch's float32 default (an angle error of 9e-3
    rad at position 1e5): a list is read as float64 (issue 29)."""
    x = torch.randn(2, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = [100000.3, 123456.7]
    exact = attnlib.apply_rope(x, torch.tensor(positions, dtype=torch.float64))
    assert torch.equal(attnlib.apply_rope(x, positions), exact)


def test_apply_rope_refuses_batch_positions_that_would_line_up_with_heads():
    """Positions (B, T) against x (B, H, T, d) broadcast B against H: with B == H the rotation
    ran along the wrong axis without a word (issue 29).  They must be (T,) or (B, 1, T)."""
    x = torch.randn(2, 2, 3, 8, generator=torch.Generator().manual_seed(0))
    pos = torch.tensor([[0.0, 1, 2], [5, 6, 7]])
    with pytest.raises(ValueError, match=r"\(B, 1, T\)"):
        attnlib.apply_rope(x, pos)
    per_sequence = attnlib.apply_rope(x, pos[:, None, :])
    for b in range(2):
        torch.testing.assert_close(per_sequence[b], attnlib.apply_rope(x[b], pos[b]))
