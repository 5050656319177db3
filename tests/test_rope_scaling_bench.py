"""bench/bench_rope_scaling.py, whose results chapter 12 reads: its forward pass is the RoPE
model's own (scaling=None at base 10000 gives model(tokens)), its training loop is
bench_positions.train's (at base 10000, the same model), its unscaled base-10000 rows are the RoPE
rows of bench/results/positions.json (the same models), and the committed JSON matches today's
code."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from attnlib.positions import rope_attention_factor, rope_frequencies
from attnlib.transformer import TinyTransformer

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_rope_scaling", ROOT / "bench" / "bench_rope_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def result():
    return json.loads((ROOT / "bench" / "results" / "rope_scaling.json").read_text())


def _tokens(V, B=3, T=20, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_forward_without_scaling_is_the_models_own(bench):
    model = TinyTransformer(50, d_model=32, n_heads=4, n_layers=2, max_len=64, seed=3, positions="rope").eval()
    tokens = _tokens(50)
    with torch.no_grad():
        logits, weights = model(tokens)
        ours, our_weights = bench.forward(model, tokens, None)
    torch.testing.assert_close(ours, logits, rtol=0, atol=1e-6)
    for w, w_ours in zip(weights, our_weights):
        torch.testing.assert_close(w_ours, w, rtol=0, atol=1e-6)


def test_forward_applies_the_scaling(bench):
    """Each method changes the logits past the trained length, and none at s = 1."""
    model = TinyTransformer(50, d_model=32, n_heads=4, n_layers=2, max_len=64, seed=3, positions="rope").eval()
    tokens = _tokens(50, T=64)
    with torch.no_grad():
        plain = bench.forward(model, tokens, None)[0]
        for method in bench.METHODS[1:]:
            assert (bench.forward(model, tokens, bench.scaling_for(method, 64))[0] - plain).abs().max() > 1e-3
            torch.testing.assert_close(bench.forward(model, tokens, bench.scaling_for(method, 32))[0], plain,
                                       rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="scales RoPE"):
        bench.forward(TinyTransformer(50, seed=0), tokens[:, :8])


def test_scaling_for_uses_the_ratio_of_lengths(bench):
    assert bench.scaling_for("none", 64) is None
    assert bench.scaling_for("linear", 128) == {"type": "linear", "factor": 4.0}
    assert bench.scaling_for("yarn", 64) == {"type": "yarn", "factor": 2.0, "original_length": 32}


def test_training_at_base_10000_is_bench_positions_train(bench):
    """The loop through ``forward`` at base 10000 is bench_positions.train("rope", seed): the same
    losses and weights after a few steps; at another base the loss differs."""
    ours, our_losses, _ = bench.train(0, 10000.0, steps=3)
    theirs, their_losses, _ = bench.positions_bench.train("rope", 0, steps=3)
    assert our_losses == their_losses
    for (name, p), (_, q) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
    _, other_losses, _ = bench.train(0, 100.0, steps=1)
    assert other_losses[0] != their_losses[0]


def test_turning_pairs(bench):
    """The docstring's and chapter's counts: 2 of 8 pairs turn within 32 tokens at base 10000, 3 at base
    100, 2 at base 1000 (so 100 is the largest power of ten with more than 2)."""
    assert bench.turning_pairs(16, 32, 10000.0) == 2
    assert bench.turning_pairs(16, 32, 1000.0) == 2
    assert bench.turning_pairs(16, 32, 100.0) == 3
    assert bench.turning_pairs(128, 4096, 10000.0) == 46


def test_results_match_the_code(bench, result):
    assert result["settings"] == bench.settings()
    seen = {(r["base"], r["seed"], r["method"]) for r in result["runs"]}
    assert seen == {(b, s, m) for b in bench.BASES for s in bench.positions_bench.SEEDS for m in bench.METHODS}
    d = result["settings"]["d_head"]
    assert result["turning_pairs"] == {f"{b:g}": bench.turning_pairs(d, result["settings"]["seq_len"], b)
                                       for b in bench.BASES}
    for base in bench.BASES:
        for L, by_method in result["frequencies"][f"{base:g}"].items():
            for method, f in by_method.items():
                scaling = bench.scaling_for(method, int(L))
                assert f["theta"] == pytest.approx(rope_frequencies(d, base, scaling=scaling).tolist(), rel=1e-12)
                assert f["attention_factor"] == pytest.approx(rope_attention_factor(scaling), rel=1e-12)


def test_unscaled_rows_are_the_extrapolation_experiments_rope_models(bench, result):
    """The base-10000 models are bench_positions.py's RoPE models: without scaling they give its
    numbers; at the training length (s = 1) every method gives the unscaled numbers, at both bases."""
    positions = json.loads((ROOT / "bench" / "results" / "positions.json").read_text())
    for seed in bench.positions_bench.SEEDS:
        recorded = next(r for r in positions["runs"] if (r["scheme"], r["seed"]) == ("rope", seed))
        for base in bench.BASES:
            rows = {r["method"]: r for r in result["runs"] if r["seed"] == seed and r["base"] == base}
            for key in ("repeated_second", "repeated_first", "induction_best", "chunked"):
                if base == 10000.0:
                    for e_ours, e_recorded in zip(rows["none"]["eval"], recorded["eval"]):
                        assert e_ours["L"] == e_recorded["L"]
                        assert e_ours[key] == pytest.approx(e_recorded[key], abs=1e-3)
                for method in bench.METHODS:
                    assert rows[method]["eval"][0][key] == pytest.approx(rows["none"]["eval"][0][key], abs=1e-5)
