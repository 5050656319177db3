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


# ---------------------------------------------------------------- the two pairings (issue 29)
def _complex_rope(x, positions, base, pairs):
    """Oracle from the complex form of RoPE (Su et al. 2021, section 3.4.1 / eq. 34 read as
    complex numbers): pair i = (x[a_i], x[b_i]) is the number x[a_i] + 1j x[b_i], multiplied by
    exp(1j * p * base^(-2i/d)); written element by element in float64 complex arithmetic."""
    x = x.double()
    d = x.shape[-1]
    out = torch.empty_like(x)
    for i, (a, b) in enumerate(pairs):
        theta = base ** (-2 * i / d)
        z = torch.complex(x[..., a], x[..., b]) * torch.polar(torch.ones(len(positions), dtype=torch.float64),
                                                              positions.double() * theta)
        out[..., a], out[..., b] = z.real, z.imag
    return out


@pytest.mark.parametrize("d", [2, 8, 64])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_each_pairing_equals_the_complex_form_of_its_source(d, base):
    """adjacent: RoFormer eq. (34), pairs (2i, 2i+1); half: Hugging Face Llama, pairs (i, i + d/2).
    Tolerance 1e-10: angles up to 65536 rad, whose float64 rounding (the oracle forms
    base^(-2i/d) in Python) is ~1e-11."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 11, d, generator=g, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 5, 17, 100, 999, 4096, 5000, 12345, 65536])
    adjacent = [(2 * i, 2 * i + 1) for i in range(d // 2)]
    half = [(i, i + d // 2) for i in range(d // 2)]
    torch.testing.assert_close(apply_rope(x, positions, base, pairing="adjacent"),
                               _complex_rope(x, positions, base, adjacent), atol=1e-10, rtol=0)
    torch.testing.assert_close(apply_rope(x, positions, base, pairing="half"),
                               _complex_rope(x, positions, base, half), atol=1e-10, rtol=0)
    torch.testing.assert_close(apply_rope(x, positions, base), apply_rope(x, positions, base, pairing="half"),
                               atol=0, rtol=0)


def test_the_pairings_agree_exactly_after_reordering_q_and_k_and_differ_otherwise():
    """perm = (0, 2, .., d-2, 1, 3, .., d-1): adjacent(x)[perm] == half(x[perm]), hence equal
    scores for q and k both reordered; for the same q and k the scores differ (except at
    offset 0).  d = 2 has a single pair: the two are the same there."""
    g = torch.Generator().manual_seed(6)
    d = 64
    q = torch.randn(2, 4, 32, d, generator=g, dtype=torch.float64)
    k = torch.randn(2, 4, 32, d, generator=g, dtype=torch.float64)
    pos = torch.arange(32)
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    torch.testing.assert_close(apply_rope(q, pos, pairing="adjacent")[..., perm],
                               apply_rope(q[..., perm], pos, pairing="half"), atol=1e-12, rtol=0)
    adj = rope_scores(q, k, pos, pos, pairing="adjacent")
    half = rope_scores(q, k, pos, pos, pairing="half")
    torch.testing.assert_close(adj, rope_scores(q[..., perm], k[..., perm], pos, pos, pairing="half"),
                               atol=1e-10, rtol=0)
    # same q, k: different scores, as large as the scores themselves (this seed: mean |gap| 5.6
    # against mean |score| 6.4; largest gap 39.5)
    off = ~torch.eye(32, dtype=torch.bool)
    gap = (adj - half).abs()[..., off]
    assert gap.mean() > 0.5 * half.abs()[..., off].mean() and gap.min() > 0
    torch.testing.assert_close(adj.diagonal(dim1=-2, dim2=-1), half.diagonal(dim1=-2, dim2=-1),
                               atol=1e-10, rtol=0)                           # offset 0: both q . k
    x2, y2 = torch.randn(5, 2, generator=g, dtype=torch.float64), torch.randn(7, 2, generator=g, dtype=torch.float64)
    torch.testing.assert_close(rope_scores(x2, y2, torch.arange(5), torch.arange(7), pairing="adjacent"),
                               rope_scores(x2, y2, torch.arange(5), torch.arange(7)), atol=1e-12, rtol=0)


@pytest.mark.parametrize("pairing", ["half", "adjacent"])
def test_each_pairing_depends_on_the_offset_only_and_keeps_norms(pairing):
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(5, 16, generator=g, dtype=torch.float64), torch.randn(7, 16, generator=g, dtype=torch.float64)
    i, j = torch.arange(5), torch.arange(7)
    s = rope_scores(q, k, i, j, pairing=pairing)
    torch.testing.assert_close(rope_scores(q, k, i + 321, j + 321, pairing=pairing), s, atol=1e-9, rtol=0)
    torch.testing.assert_close(apply_rope(k, j + 50, pairing=pairing).norm(dim=-1), k.norm(dim=-1))


@pytest.mark.parametrize("bad", ["interleaved", "Half", None, 0])
def test_unknown_pairing_is_refused(bad):
    with pytest.raises(ValueError, match=r"pairing must be one of 'half', 'adjacent'"):
        apply_rope(torch.randn(3, 4), pairing=bad)
    with pytest.raises(ValueError, match=r"pairing must be one of"):
        rope_scores(torch.randn(3, 4), torch.randn(3, 4), [0, 1, 2], [0, 1, 2], pairing=bad)


# ------------------------------------------------- RoPE scaling: PI, NTK-aware, YaRN

from attnlib.positions import rope_attention_factor  # noqa: E402

rope_utils = pytest.importorskip("transformers.modeling_rope_utils")


def _hf_config(d, base, rope_parameters, max_position_embeddings=2048):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=d * 2, num_attention_heads=2, head_dim=d, max_position_embeddings=max_position_embeddings,
                       rope_parameters={"rope_theta": base, **rope_parameters})


@pytest.mark.parametrize("d, base, factor", [(16, 10000.0, 2.0), (64, 10000.0, 4.0), (128, 500000.0, 8.0), (8, 10000.0, 1.5)])
def test_linear_scaling_equals_hugging_face_and_interpolated_positions(d, base, factor):
    """Position interpolation (Chen et al. 2023): Hugging Face's "linear" frequencies, and a
    rotation at position p equal to the unscaled rotation at p / s."""
    scaling = {"type": "linear", "factor": factor}
    theirs, attention = rope_utils._compute_linear_scaling_rope_parameters(
        _hf_config(d, base, {"rope_type": "linear", "factor": factor}))
    torch.testing.assert_close(rope_frequencies(d, base, scaling=scaling).float(), theirs, rtol=1e-6, atol=0)
    assert attention == 1.0 == rope_attention_factor(scaling)
    x = torch.randn(2, 3, 50, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pos = torch.arange(50, dtype=torch.float64) * 3
    torch.testing.assert_close(apply_rope(x, pos, base, scaling=scaling), apply_rope(x, pos / factor, base))


@pytest.mark.parametrize("d, base, factor", [(16, 10000.0, 2.0), (16, 10000.0, 4.0), (64, 10000.0, 4.0), (128, 500000.0, 8.0)])
def test_ntk_scaling_equals_hugging_face_dynamic_ntk_at_that_length(d, base, factor):
    """NTK-aware scaling with factor s is Hugging Face's dynamic NTK at the length s times the
    trained one (its factor set to 1): base * s^(d/(d-2)); the fastest pair is untouched and the
    slowest is divided by s."""
    trained = 32
    cfg = _hf_config(d, base, {"rope_type": "dynamic", "factor": 1.0}, max_position_embeddings=trained)
    theirs, attention = rope_utils._compute_dynamic_ntk_parameters(cfg, seq_len=int(factor * trained))
    ours = rope_frequencies(d, base, scaling={"type": "ntk", "factor": factor})
    torch.testing.assert_close(ours.float(), theirs, rtol=2e-6, atol=0)
    plain = rope_frequencies(d, base)
    assert ours[0] == plain[0]
    torch.testing.assert_close(ours[-1], plain[-1] / factor, rtol=1e-12, atol=0)
    assert torch.all(ours <= plain) and torch.all(ours >= plain / factor)


YARN_CASES = [(16, 10000.0, 4.0, 32), (16, 10000.0, 2.0, 32), (64, 10000.0, 8.0, 4096), (128, 500000.0, 4.0, 8192),
              (32, 10000.0, 16.0, 64)]


@pytest.mark.parametrize("d, base, factor, L", YARN_CASES)
def test_yarn_equals_hugging_face(d, base, factor, L):
    """YaRN's frequencies and attention factor equal Hugging Face's _compute_yarn_parameters
    (the authors' NTK-by-parts ramp), and the whole rotation equals LlamaRotaryEmbedding +
    apply_rotary_pos_emb with rope_type "yarn" (cos and sin multiplied by the factor)."""
    params = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": L}
    cfg = _hf_config(d, base, params, max_position_embeddings=int(factor * L))
    theirs, attention = rope_utils._compute_yarn_parameters(cfg)
    scaling = {"type": "yarn", "factor": factor, "original_length": L}
    torch.testing.assert_close(rope_frequencies(d, base, scaling=scaling).float(), theirs, rtol=2e-6, atol=0)
    assert rope_attention_factor(scaling) == pytest.approx(attention, rel=1e-12)
    x = torch.randn(1, 2, 24, d, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(0, 24 * 7, 7)
    rot = ml.LlamaRotaryEmbedding(cfg)
    cos, sin = rot(x, positions[None])
    hf, _ = ml.apply_rotary_pos_emb(x, x, cos, sin)
    torch.testing.assert_close(apply_rope(x, positions, base, scaling=scaling), hf, atol=3e-5, rtol=3e-5)


def test_yarn_keeps_fast_pairs_interpolates_slow_ones_and_sharpens():
    """The parts of NTK-by-parts: pairs turning more than beta_fast times over the trained
    length keep their frequency, pairs turning less than beta_slow times are divided by s,
    the others lie between; the scores are multiplied by (0.1 ln s + 1)^2."""
    d, L, s = 64, 4096, 8.0
    scaling = {"type": "yarn", "factor": s, "original_length": L}
    plain, yarn = rope_frequencies(d), rope_frequencies(d, scaling=scaling)
    turns = L * plain / (2 * math.pi)
    assert torch.equal(yarn[turns > 32], plain[turns > 32]) and bool((turns > 32).any())
    torch.testing.assert_close(yarn[turns < 1], plain[turns < 1] / s, rtol=1e-15, atol=0)
    mid = (turns >= 1) & (turns <= 32)
    assert bool(mid.any()) and torch.all(yarn[mid] <= plain[mid]) and torch.all(yarn[mid] >= plain[mid] / s)
    q = torch.randn(5, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    k = torch.randn(7, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    unscaled_q_at_0 = rope_scores(q, k, [0] * 5, [0] * 7)                   # offset 0: no rotation left
    torch.testing.assert_close(rope_scores(q, k, [0] * 5, [0] * 7, scaling=scaling),
                               unscaled_q_at_0 * (0.1 * math.log(s) + 1) ** 2)


@pytest.mark.parametrize("scaling", [{"type": "linear", "factor": 3.0}, {"type": "ntk", "factor": 3.0},
                                     {"type": "yarn", "factor": 3.0, "original_length": 32}])
def test_scaled_scores_still_depend_on_the_offset_only(scaling):
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(4, 16, generator=g, dtype=torch.float64), torch.randn(4, 16, generator=g, dtype=torch.float64)
    pos = torch.tensor([0.0, 5.0, 17.0, 90.0])
    base_scores = rope_scores(q, k, pos, pos, scaling=scaling)
    torch.testing.assert_close(rope_scores(q, k, pos + 1000, pos + 1000, scaling=scaling), base_scores)
    assert (base_scores - rope_scores(q, k, pos, pos)).abs().max() > 1e-3      # and the scaling changes them


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn"])
def test_factor_one_changes_nothing(kind):
    """s = 1 is the model as trained, bit for bit (YaRN with s = 1 interpolates by 1 and has
    attention factor 1); scaling=None is the unscaled path."""
    scaling = {"type": kind, "factor": 1.0, **({"original_length": 32} if kind == "yarn" else {})}
    x = torch.randn(3, 40, 16, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(apply_rope(x, scaling=scaling), apply_rope(x), rtol=1e-7, atol=1e-7)
    assert torch.equal(apply_rope(x, scaling=None), apply_rope(x))


@pytest.mark.parametrize("scaling, err, text", [
    ("linear", TypeError, "scaling must be None or a dict"),
    ({"type": "linear"}, ValueError, "needs 'type'"),
    ({"factor": 2.0}, ValueError, "needs 'type'"),
    ({"type": "dynamic", "factor": 2.0}, ValueError, r"scaling\['type'\] must be one of 'linear', 'ntk', 'yarn'"),
    ({"type": "linear", "factor": 0.5}, ValueError, r"scaling\['factor'\] must be >= 1.0"),
    ({"type": "linear", "factor": "2"}, TypeError, r"scaling\['factor'\] must be a real number"),
    ({"type": "linear", "factor": float("nan")}, ValueError, "finite"),
    ({"type": "linear", "factor": 2.0, "original_length": 32}, ValueError, "takes the keys"),
    ({"type": "yarn", "factor": 2.0}, ValueError, "needs 'original_length'"),
    ({"type": "yarn", "factor": 2.0, "original_length": 0}, ValueError, "original_length'\\] must be a positive int"),
    ({"type": "yarn", "factor": 2.0, "original_length": 32, "beta_fast": 1, "beta_slow": 2}, ValueError, "must exceed"),
    ({"type": "yarn", "factor": 2.0, "original_length": 32, "alpha": 1}, ValueError, "takes the keys"),
])
def test_bad_scaling_is_refused(scaling, err, text):
    for call in (lambda: rope_frequencies(16, scaling=scaling), lambda: apply_rope(torch.zeros(2, 16), scaling=scaling),
                 lambda: rope_scores(torch.zeros(2, 16), torch.zeros(2, 16), [0, 1], [0, 1], scaling=scaling),
                 lambda: rope_attention_factor(scaling)):
        with pytest.raises(err, match=text):
            call()


def test_ntk_needs_two_pairs():
    with pytest.raises(ValueError, match="d >= 4"):
        rope_frequencies(2, scaling={"type": "ntk", "factor": 2.0})
