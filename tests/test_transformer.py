"""TinyTransformer's position schemes (chapter 12): ``positions="learned" | "rope" | "alibi"``.

Oracles: the forward pass written out here from the papers' formulas with PyTorch's own
``F.scaled_dot_product_attention`` (RoPE as an explicit 2x2 rotation of each pair
``(m, m + d/2)`` by ``p * 10000^(-2m/d)``; ALiBi as ``-m_h (i - j)`` with Press et al.'s
slopes), the paper's slopes for 8 heads, and invariants (a shift of both positions leaves the
scores unchanged; cached decoding equals one causal pass)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlib.edits import head_means
from attnlib.transformer import POSITIONS, TinyTransformer, alibi_bias, alibi_slopes, run

V = 23


def _model(positions, n_layers=1, max_len=16, seed=0):
    return TinyTransformer(V, d_model=24, n_heads=3, n_layers=n_layers, max_len=max_len, seed=seed,
                           positions=positions).double().eval()


def _tokens(B=2, T=9, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def _rope_direct(x, pos, base=10000.0):
    """Rotate each pair (m, m + d/2) of x (..., T, d) by the angle pos * base^(-2m/d)."""
    d = x.shape[-1]
    half = d // 2
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * theta[None, :]                  # (T, d/2)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def _direct_logits(model, tokens):
    """The forward pass written out: embeddings, per layer x + attn(LN(x)) with RoPE on q and k
    or the ALiBi bias, PyTorch's SDPA; final LN and read-out."""
    B, T = tokens.shape
    x = model.tok_emb(tokens)
    if model.positions == "learned":
        x = x + model.pos_emb(torch.arange(T))
    H = model.n_heads
    for block in model.blocks:
        a = block.attn
        h = block.ln_attn(x)
        q, k, v = (lin(h).view(B, T, H, -1).transpose(1, 2) for lin in (a.q_proj, a.k_proj, a.v_proj))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        if model.positions == "rope":
            pos = torch.arange(T)
            q, k = _rope_direct(q, pos), _rope_direct(k, pos)
        if model.positions == "alibi":
            slopes = torch.tensor([2.0 ** (-8.0 * (hh + 1) / H) for hh in range(H)], dtype=x.dtype)
            i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
            bias = (-slopes[:, None, None] * (i - j)).masked_fill(~causal, float("-inf"))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        x = x + a.out_proj(o.transpose(1, 2).reshape(B, T, -1))
    return model.unembed(model.ln_out(x))


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("n_layers", [1, 2])
def test_forward_equals_the_direct_computation(positions, n_layers):
    model = _model(positions, n_layers)
    tokens = _tokens()
    logits, weights = model(tokens)
    assert torch.allclose(logits, _direct_logits(model, tokens), atol=1e-10)
    assert len(weights) == n_layers and weights[0].shape == (2, 3, 9, 9)
    assert torch.allclose(weights[0].sum(-1), torch.ones(2, 3, 9, dtype=torch.float64))
    assert float(weights[0].detach().triu(1).abs().max()) == 0.0                     # causal in every scheme


def test_default_is_learned_and_rope_alibi_have_no_table():
    default = TinyTransformer(V, d_model=24, n_heads=3, max_len=16, seed=0)
    learned = TinyTransformer(V, d_model=24, n_heads=3, max_len=16, seed=0, positions="learned")
    assert default.positions == "learned" and default.pos_emb.weight.shape == (16, 24)
    for a, b in zip(default.state_dict().values(), learned.state_dict().values()):
        assert torch.equal(a, b)
    for positions in ("rope", "alibi"):
        m = _model(positions)
        assert m.pos_emb is None and not any("pos_emb" in n for n in m.state_dict())
        # the same seed draws the same token embedding; no parameter stores a position
        assert torch.equal(m.tok_emb.weight.float(), default.tok_emb.weight)


def test_rope_and_alibi_change_the_output():
    """Each scheme is used: switching it off (the learned table zeroed vs. RoPE vs. ALiBi on the
    same weights) changes the logits."""
    tokens = _tokens()
    base = _model("learned")
    with torch.no_grad():
        base.pos_emb.weight.zero_()
    plain = base(tokens)[0]
    for positions in ("rope", "alibi"):
        m = _model(positions)
        m.load_state_dict({k: v for k, v in base.state_dict().items() if "pos_emb" not in k})
        assert (m(tokens)[0] - plain).abs().max() > 1e-3


def test_alibi_slopes_are_the_papers():
    """Press et al. (2022), section 3: 8 heads get 1/2, 1/4, ..., 1/256; 16 heads 2^-0.5 ... 2^-8."""
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    assert torch.allclose(alibi_slopes(16), 2.0 ** (-0.5 * torch.arange(1, 17, dtype=torch.float64)))
    assert alibi_slopes(4).tolist() == [0.25, 0.0625, 0.015625, 0.00390625]


def test_alibi_bias_shape_values_and_mask():
    bias = alibi_bias(4, 3, 5)                          # queries at 2, 3, 4 over keys 0..4
    assert bias.shape == (4, 3, 5) and bias.dtype == torch.float32
    m = alibi_slopes(4)
    for h in range(4):
        for a, i in enumerate(range(2, 5)):
            for j in range(5):
                want = -m[h].item() * (i - j) if j <= i else float("-inf")
                assert bias[h, a, j].item() == pytest.approx(want) or (want == float("-inf") and bias[h, a, j] == want)
    assert alibi_bias(2, 4).shape == (2, 4, 4)
    assert torch.equal(alibi_bias(2, 4)[:, 0, 1:], torch.full((2, 3), float("-inf")))


@pytest.mark.parametrize("bad, err", [(dict(n_heads=0, T_q=2), ValueError), (dict(n_heads=2, T_q=0), ValueError),
                                      (dict(n_heads=2, T_q=3, T_k=2), ValueError),
                                      (dict(n_heads=2, T_q=2, T_k=4, start=3), ValueError),
                                      (dict(n_heads=2.0, T_q=2), TypeError)])
def test_alibi_bias_refuses(bad, err):
    with pytest.raises(err):
        alibi_bias(**bad)


def test_scores_depend_on_the_offset_only():
    """RoPE: a real layer's q and k, rotated at positions (i, j) and (i + s, j + s), give the same
    scores; ALiBi: the bias of queries shifted by s over keys shifted by s is the same."""
    model = _model("rope")
    a = model.blocks[0].attn
    x = model.blocks[0].ln_attn(model.tok_emb(_tokens(1, 6)))
    q = a.q_proj(x).view(1, 6, 3, 8).transpose(1, 2)
    k = a.k_proj(x).view(1, 6, 3, 8).transpose(1, 2)
    pos = torch.arange(6)
    from attnlib import apply_rope
    ref = apply_rope(q, pos) @ apply_rope(k, pos).transpose(-2, -1)
    for s in (1, 17, 1000):
        shifted = apply_rope(q, pos + s) @ apply_rope(k, pos + s).transpose(-2, -1)
        assert torch.allclose(shifted, ref, atol=1e-9)
    moved_q = apply_rope(q, pos + 5) @ apply_rope(k, pos).transpose(-2, -1)   # query alone moved: different
    assert (moved_q - ref).abs().max() > 1e-2
    b = alibi_bias(4, 3, 6)                                 # queries 3..5 over keys 0..5
    for s in (1, 9):
        shifted = alibi_bias(4, 3, 6 + s)[:, :, s:]         # queries 3+s..5+s over keys s..5+s
        assert torch.equal(shifted, b)


@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_decoding_equals_one_causal_pass(positions):
    """The cache path rotates each key at its own position (RoPE) and biases by the true
    distance (ALiBi): a prompt then one token at a time gives the rows of one pass."""
    model = _model(positions, n_layers=2, max_len=20)
    tokens = _tokens(2, 14)
    full, _ = model(tokens)
    caches = model.new_cache()
    steps = [model(tokens[:, :5], cache=caches)[0]]
    for t in range(5, 14):
        steps.append(model(tokens[:, t:t + 1], cache=caches)[0])
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-10)
    assert torch.equal(model.generate(tokens[:, :3], 8), model.generate(tokens[:, :3], 8, use_cache=False))


@pytest.mark.parametrize("positions", ("rope", "alibi"))
def test_ablation_still_works(positions):
    model = _model(positions, n_layers=2)
    tokens = _tokens()
    intact = model(tokens)[0]
    ablated = run(model, tokens, edits=[{"layer": 1, "head": 0, "mode": "zero"}]).logits
    assert (ablated - intact).abs().max() > 1e-4
    means = head_means(run(model, tokens))
    assert means.shape == (2, 3, 8)


def test_positions_refused_and_max_len_kept():
    for bad in ("sinusoidal", "RoPE", None, 1):
        with pytest.raises(ValueError, match="positions must be one of"):
            TinyTransformer(V, positions=bad)
    for positions in POSITIONS:                             # max_len stays a limit for every scheme
        with pytest.raises(ValueError, match="1 <= T <= 16"):
            _model(positions)(_tokens(1, 17))


# ------------------------------------------------- the committed sweep of bench/bench_positions.py

def _bench():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("bench_positions", root / "bench" / "bench_positions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, root / "bench" / "results" / "positions.json"


def test_positions_results_match_the_code():
    """The JSON chapter 12 reads was written with today's settings (the constants of
    attnlib.induction and of the script), every scheme and seed is there, and re-running the
    first training steps of one configuration gives the recorded losses."""
    import json

    bench, path = _bench()
    result = json.loads(path.read_text())
    assert result["settings"] == bench.settings()
    runs = {(r["scheme"], r["seed"]) for r in result["runs"]}
    assert runs == {(s, seed) for s in bench.SCHEMES for seed in bench.SEEDS}
    for r in result["runs"]:
        assert [e["L"] for e in r["eval"]] == list(bench.EVAL_LENGTHS)
        assert len(r["eval"][-1]["repeated_loss_by_position"]) == max(bench.EVAL_LENGTHS) - 1
    recorded = next(r for r in result["runs"] if (r["scheme"], r["seed"]) == ("rope", bench.SEEDS[0]))
    _, losses, _ = bench.train("rope", bench.SEEDS[0], steps=3)
    assert losses == pytest.approx(recorded["early_losses"][:3], abs=1e-4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model="16"), r"d_model must be a positive int, got str '16'"),
    (dict(d_model=16.0), r"d_model must be a positive int, got float"),
    (dict(d_model=0), r"d_model must be a positive int"),
])
def test_a_bad_width_is_named_before_torch_sees_it(kwargs, match):
    """TinyTransformer(5, d_model="16") raised torch's 'empty(): argument size ... got str'
    from inside nn.Embedding (issue 29)."""
    with pytest.raises((TypeError, ValueError), match=match):
        TinyTransformer(5, **kwargs)
