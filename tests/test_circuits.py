"""attnlib.circuits: the QK and OV circuits, the K-composition score and the OV eigenvalue test,
checked against the model's own forward pass, closed forms and full eigendecompositions."""
from __future__ import annotations

import math

import pytest
import torch

from attnlib import circuits
from attnlib.transformer import TinyTransformer


def _model(d_model=12, n_heads=3, n_layers=2, vocab=20, seed=0):
    """A small model with random LayerNorm gains and every bias zero, so that the circuits are
    exact (LayerNorm's shift and the biases are what the circuits leave out)."""
    m = TinyTransformer(vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers, max_len=8, seed=seed).double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "ln" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=g, dtype=p.dtype))
    return m.eval()


def _normed(x):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)


def test_qk_circuit_gives_the_models_layer0_weights():
    m = _model()
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2]])
    x0 = m.tok_emb(tokens) + m.pos_emb(torch.arange(7))
    _, weights = m(tokens)
    n = _normed(x0)[0]
    T = n.shape[0]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for h in range(m.n_heads):
        s = n @ circuits.qk_matrix(m, 0, h) @ n.T / math.sqrt(m.d_head)
        torch.testing.assert_close(s.masked_fill(~causal, -math.inf).softmax(-1), weights[0][0, h])


def test_ov_circuits_sum_to_the_layers_output():
    m = _model()
    tokens = torch.tensor([[0, 7, 7, 2, 19]])
    x0 = m.tok_emb(tokens) + m.pos_emb(torch.arange(5))
    x1, w = m.blocks[0](x0)
    n = _normed(x0)[0]
    written = sum(w[0, h] @ n @ circuits.ov_matrix(m, 0, h) for h in range(m.n_heads))
    torch.testing.assert_close(written, (x1 - x0)[0])


def test_k_composition_is_the_cosine_for_one_dimensional_heads():
    """d_head = 1: W_QK = q k^T and W_OV = v o^T, so the score is |cos(k, o)|."""
    m = _model(d_model=4, n_heads=4)
    for reader, writer in (((1, 0), (0, 3)), ((1, 2), (0, 1))):
        W1, W0 = circuits.head_weights(m, *reader), circuits.head_weights(m, *writer)
        k, o = W1["W_K"][:, 0], W0["W_O"][0]
        expected = abs(torch.dot(k, o).item()) / (k.norm() * o.norm()).item()
        assert circuits.k_composition(m, reader, writer) == pytest.approx(expected, rel=1e-9)


def test_k_composition_is_zero_for_orthogonal_subspaces_and_scale_free():
    m = _model(d_model=8, n_heads=2)
    with torch.no_grad():
        m.blocks[0].attn.out_proj.weight[4:, :] = 0          # layer 0 writes only features 0-3
        m.blocks[1].attn.k_proj.weight[:, :4] = 0            # layer 1's keys read only features 4-7
    assert circuits.k_composition(m, (1, 0), (0, 1)) < 1e-12
    m2 = _model(d_model=8, n_heads=2)
    before = circuits.k_composition(m2, (1, 1), (0, 0))
    with torch.no_grad():
        m2.blocks[0].attn.out_proj.weight.mul_(3.0)
    assert circuits.k_composition(m2, (1, 1), (0, 0)) == pytest.approx(before, rel=1e-9)
    assert 0 < before < 1


def test_random_composition_is_seeded_and_below_one():
    a, b = circuits.random_composition(16, 4, n=20, seed=1), circuits.random_composition(16, 4, n=20, seed=1)
    torch.testing.assert_close(a, b)
    assert a.shape == (20,) and ((a > 0) & (a < 1)).all()


def test_eigen_positivity_matches_the_full_vocabulary_matrix():
    m = _model(d_model=12, n_heads=3, vocab=30)
    for h in range(3):
        full = circuits.full_ov(m, 1, h)                                  # (V, V), rank <= d_head
        lam = torch.linalg.eigvals(full)
        lam = lam[lam.abs() > 1e-9 * lam.abs().max()]                     # the d_head nonzero ones
        assert len(lam) == m.d_head
        share = (lam.abs()[lam.real > 0].sum() / lam.abs().sum()).item()
        ratio = (lam.real.sum() / lam.abs().sum()).item()
        got = circuits.eigen_positivity(m, 1, h)
        assert got["positive_share"] == pytest.approx(share, abs=1e-9)
        assert got["eigen_ratio"] == pytest.approx(ratio, abs=1e-9)


def test_a_copying_head_has_only_positive_eigenvalues():
    """With W_V = (U E)^T W_O^T the small product W_O U E W_V = M M^T (M = W_O U E) is
    positive semi-definite: every nonzero eigenvalue of the full OV circuit is positive."""
    m = _model(d_model=8, n_heads=2, vocab=15)
    W = circuits.head_weights(m, 1, 0)
    UE = circuits.unembedding_matrix(m) @ circuits.embedding_matrix(m)   # (d, d)
    # set W_V = (UE)^T W_O^T so that W_O U E W_V = W_O UE UE^T W_O^T, positive semi-definite
    gain = m.blocks[1].ln_attn.weight.detach().double()[:, None]
    with torch.no_grad():
        W_V = UE.T @ W["W_O"].T                                           # (d_model, d_head)
        m.blocks[1].attn.v_proj.weight[:m.d_head] = (W_V / gain).T
    assert circuits.eigen_positivity(m, 1, 0)["positive_share"] == pytest.approx(1.0)
    assert circuits.diagonal_top1(circuits.full_ov(m, 1, 0)) > 0


def test_diagonal_top1_and_errors():
    assert circuits.diagonal_top1(torch.eye(5)) == 1.0
    assert circuits.diagonal_top1(torch.eye(4).flip(0)) == 0.0
    with pytest.raises(ValueError, match="square"):
        circuits.diagonal_top1(torch.ones(2, 3))
    m = _model()
    with pytest.raises(IndexError):
        circuits.qk_matrix(m, 2, 0)
    with pytest.raises(IndexError):
        circuits.ov_matrix(m, 0, 3)
    with pytest.raises(TypeError, match="TinyTransformer"):
        circuits.qk_matrix(torch.nn.Linear(2, 2), 0, 0)
    with pytest.raises(ValueError, match="earlier layer"):
        circuits.k_composition(m, (0, 1), (1, 0))


@pytest.mark.parametrize("model", [None, "model", torch.nn.Linear(2, 2)])
def test_every_function_of_a_model_refuses_what_is_not_a_tiny_transformer(model):
    """k_composition read model.n_layers before checking the model (issue 36: AttributeError)."""
    calls = [lambda: circuits.k_composition(model, (1, 0), (0, 0)), lambda: circuits.head_weights(model, 0, 0),
             lambda: circuits.qk_matrix(model, 0, 0), lambda: circuits.ov_matrix(model, 0, 0),
             lambda: circuits.full_ov(model, 0, 0), lambda: circuits.eigen_positivity(model, 0, 0),
             lambda: circuits.embedding_matrix(model), lambda: circuits.unembedding_matrix(model),
             lambda: circuits.random_ov_positivity(model, n=2)]
    for call in calls:
        with pytest.raises(TypeError, match=rf"model must be an attnlib.transformer.TinyTransformer, "
                                            rf"got {type(model).__name__}"):
            call()


def test_k_composition_reads_negative_indices_from_the_end_and_refuses_the_rest():
    m = _model()
    assert circuits.k_composition(m, (-1, -1), (0, -3)) == circuits.k_composition(m, (1, 2), (0, 0))
    with pytest.raises(IndexError, match=r"head must be in 0..2 \(or -3..-1 from the end\), got 3"):
        circuits.k_composition(m, (1, 3), (0, 0))
    with pytest.raises(TypeError, match=r"reader must hold \(layer, head\) pairs"):
        circuits.k_composition(m, None, (0, 0))


@pytest.mark.parametrize("bad, match", [([[1.0, 0.0], [0.0, 1.0]], "got list"),
                                        (torch.eye(3, dtype=torch.bool), "real numbers"),
                                        (torch.eye(3, dtype=torch.complex64), "real numbers")])
def test_diagonal_top1_refuses_what_is_not_a_real_matrix(bad, match):
    with pytest.raises(TypeError, match=match):
        circuits.diagonal_top1(bad)
