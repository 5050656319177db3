"""attnlib.graphs: graphs must equal the matrices they come from, checked against independent
oracles (numpy products, path sums, networkx's own algorithms, PyTorch SDPA, the pretrained
encoder's own attention weights), plus clear errors for hostile input.  The drawings are
tested in test_plotting.py."""
import functools
import math

import networkx as nx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.corpus import RUNNING
from attnlib.graphs import (
    attention_flow, attention_graph, attention_rollout, graph_attention, in_weight, is_dag_without_self_loops,
    layered_graph, neighbourhood_mask, path_flow, rank_correlation, score_graph, stationary_distribution,
    strongest_edges,
)

TOKENS = ["[CLS]", "the", "cat", "sat", "the", "[SEP]"]
T = len(TOKENS)


def random_weights(seed=0, T=T, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(T, T, generator=g, dtype=dtype), dim=-1).to(device)


# --- structure: the graph is the matrix ------------------------------------------------------
def test_graph_equals_matrix():
    w = random_weights()
    G = attention_graph(w, TOKENS)
    assert isinstance(G, nx.DiGraph)
    assert G.number_of_nodes() == T and G.number_of_edges() == T * T
    assert nx.number_of_selfloops(G) == T
    assert [G.nodes[i]["token"] for i in range(T)] == TOKENS  # repeated "the" stays two nodes
    adjacency = nx.to_numpy_array(G, nodelist=range(T), weight="weight")
    np.testing.assert_array_equal(adjacency, w.double().numpy())
    assert G.edges[3, 2]["weight"] == pytest.approx(w[3, 2].item())


def test_out_weights_sum_to_one_and_in_weight_is_column_sum():
    w = random_weights(1)
    G = attention_graph(w, TOKENS)
    out = dict(G.out_degree(weight="weight"))
    assert max(abs(out[i] - 1.0) for i in range(T)) < 1e-6
    col = w.double().sum(0).numpy()
    got = in_weight(G)
    np.testing.assert_allclose([got[i] for i in range(T)], col, atol=1e-6)
    share = in_weight(G, share=True)
    np.testing.assert_allclose([share[i] for i in range(T)], col / T, atol=1e-6)
    assert sum(share.values()) == pytest.approx(1.0, abs=1e-6)


def test_in_weight_by_hand_on_a_thresholded_graph():
    w = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.9, 0.0, 0.1]])
    G = attention_graph(w, ["a", "b", "c"], threshold=0.25)  # keeps 0.5, 0.5, 0.3, 0.5, 0.9
    assert in_weight(G) == pytest.approx({0: 1.4, 1: 0.8, 2: 0.5})
    assert in_weight(G, share=True) == pytest.approx({0: 1.4 / 3, 1: 0.8 / 3, 2: 0.5 / 3})


def test_threshold_and_zero_weights():
    w = random_weights(2)
    thr = 0.15
    G = attention_graph(w, TOKENS, threshold=thr)
    assert G.number_of_edges() == int((w >= thr).sum())
    assert G.number_of_nodes() == T  # nodes stay even when all their edges go
    assert all(v >= thr for _, _, v in G.edges(data="weight"))
    masked = w.clone()
    masked[0, 1:] = 0.0
    assert attention_graph(masked, TOKENS).out_degree(0) == 1  # exact zeros are not edges


def test_strongest_edges_match_topk():
    w = random_weights(3)
    top = strongest_edges(attention_graph(w, TOKENS), k=4)
    values, flat = torch.topk(w.flatten(), 4)
    assert [(i, j) for i, j, _ in top] == [(int(f) // T, int(f) % T) for f in flat]
    np.testing.assert_allclose([v for *_, v in top], values.double().numpy(), rtol=1e-6)


# --- causal DAG ------------------------------------------------------------------------------
def test_causal_mask_gives_dag_plus_self_loops():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(T, 8, generator=g) for _ in range(3))
    _, causal = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True)
    G = attention_graph(causal, TOKENS)
    assert G.number_of_edges() == T * (T + 1) // 2
    assert all(j <= i for i, j in G.edges)
    assert is_dag_without_self_loops(G)
    assert nx.number_of_selfloops(G) == T  # the self-loops are still there
    _, full = attnlib.scaled_dot_product_attention(q, k, v)
    G_full = attention_graph(full, TOKENS)
    assert not is_dag_without_self_loops(G_full)
    core = nx.DiGraph(G_full)
    core.remove_edges_from(list(nx.selfloop_edges(core)))
    assert len(nx.find_cycle(core)) >= 2
    window = attention_graph(torch.softmax(torch.randn(T, T), -1) * neighbourhood_mask(nx.path_graph(T)), TOKENS)
    assert not is_dag_without_self_loops(window)  # i <-> i+1 is a 2-cycle
    assert is_dag_without_self_loops(attention_graph(causal.T.contiguous(), TOKENS))  # anti-causal too


# --- symmetric scores -------------------------------------------------------------------------
def test_tied_projection_gives_undirected_score_graph():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(T, 16, generator=g, dtype=torch.float64)
    W = torch.randn(16, 8, generator=g, dtype=torch.float64) / 4
    q = x @ W
    scores = q @ q.T / math.sqrt(8)  # tied W_Q = W_K
    S = score_graph(scores, TOKENS, symmetric=True)
    assert isinstance(S, nx.Graph) and not S.is_directed()
    assert S.number_of_edges() == T * (T + 1) // 2
    assert S.edges[4, 1]["score"] == pytest.approx(scores[1, 4].item())
    k = x @ torch.randn(16, 8, generator=g, dtype=torch.float64)
    with pytest.raises(ValueError, match="not symmetric"):
        score_graph(q @ k.T, TOKENS, symmetric=True)
    D = score_graph(q @ k.T, TOKENS)
    assert D.is_directed() and D.number_of_edges() == T * T
    # softmax breaks the symmetry, but the chain is reversible: pi_i ∝ sum_j exp(S_ij)
    weights = torch.softmax(scores, -1)
    assert (weights - weights.T).abs().max() > 1e-3
    z = torch.exp(scores).sum(-1)
    torch.testing.assert_close(stationary_distribution(weights), z / z.sum(), atol=1e-9, rtol=1e-7)


def test_score_graph_drops_masked_scores():
    s = torch.randn(T, T).masked_fill(~attnlib.causal_mask(T), float("-inf"))
    G = score_graph(s, TOKENS)
    assert G.number_of_edges() == T * (T + 1) // 2


# --- Markov chain ----------------------------------------------------------------------------
def test_stationary_distribution_against_power_iteration():
    w = random_weights(6).double()
    w = w / w.sum(-1, keepdim=True)  # exactly stochastic in float64, so powers do not drift
    pi = stationary_distribution(w)
    limit = torch.linalg.matrix_power(w, 200)
    torch.testing.assert_close(limit, pi.expand(T, T), atol=1e-9, rtol=0)
    causal = torch.softmax(torch.randn(T, T, dtype=torch.float64).masked_fill(~attnlib.causal_mask(T), -math.inf), -1)
    torch.testing.assert_close(stationary_distribution(causal), torch.eye(T, dtype=torch.float64)[0])
    with pytest.raises(ValueError, match="attracting components"):
        stationary_distribution(torch.eye(T))
    with pytest.raises(ValueError, match="row-stochastic"):
        stationary_distribution(torch.ones(T, T))


def test_stationary_distribution_is_numpys_left_eigenvector_for_eigenvalue_one():
    """pi A = pi: pi is the eigenvector of A^T for eigenvalue 1 (numpy's eig), scaled to sum 1."""
    w = random_weights(11).double()
    w = w / w.sum(-1, keepdim=True)
    values, vectors = np.linalg.eig(w.numpy().T)
    one = np.argmin(np.abs(values - 1.0))
    assert abs(values[one] - 1.0) < 1e-12
    pi = np.real(vectors[:, one])
    np.testing.assert_allclose(stationary_distribution(w).numpy(), pi / pi.sum(), atol=1e-12)


# --- graph attention = masked attention --------------------------------------------------------
@pytest.mark.parametrize("kind", ["complete", "path", "causal"])
def test_graph_attention_matches_masked_sdpa(kind, device):
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(T, 8, generator=g).to(device) for _ in range(3))
    if kind == "complete":
        G = nx.complete_graph(T, create_using=nx.DiGraph)
    elif kind == "path":
        G = nx.path_graph(T)
    else:
        G = nx.DiGraph([(i, j) for i in range(T) for j in range(i)])
    G.add_edges_from((i, i) for i in range(T))
    mask = neighbourhood_mask(G, device=device)
    out, weights = graph_attention(q, k, v, G)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert out.device == q.device and weights.dtype == q.dtype
    assert bool((weights[~mask] == 0).all())
    if kind == "causal":
        torch.testing.assert_close(mask.cpu(), attnlib.causal_mask(T))
    lonely = nx.empty_graph(T)
    with pytest.raises(ValueError, match="no neighbours"):
        graph_attention(q, k, v, lonely)


def test_complete_graph_attention_is_the_real_encoder(encoder):
    model, tok = encoder
    enc = tok(RUNNING, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)                  # the oracle: the model called directly
    layer, head = 5, 11
    tokens, q, k, v = attnlib.encoder.head_qkv(RUNNING, layer, head, model, tok)  # (T, d_k) each, from layer 5's input
    n = q.shape[0]
    G = nx.complete_graph(n, create_using=nx.DiGraph)
    G.add_edges_from((i, i) for i in range(n))
    _, weights = graph_attention(q, k, v, G)
    hf = out.attentions[layer][0, head]
    torch.testing.assert_close(weights, hf, atol=1e-5, rtol=1e-4)
    got = in_weight(attention_graph(hf, tokens))
    np.testing.assert_allclose([got[i] for i in range(n)], hf.double().sum(0).numpy(), atol=1e-6)


# --- rollout ---------------------------------------------------------------------------------
def explicit_rollout(layers, residual=0.5):
    mats = []
    for a in layers:
        a_hat = residual * np.eye(a.shape[0]) + (1 - residual) * a
        mats.append(a_hat / a_hat.sum(1, keepdims=True))
    return functools.reduce(lambda acc, m: m @ acc, mats, np.eye(layers[0].shape[0]))


def test_rollout_equals_explicit_product_and_rows_sum_to_one():
    g = torch.Generator().manual_seed(8)
    layers = torch.softmax(torch.randn(4, T, T, generator=g, dtype=torch.float64), -1)
    R = attention_rollout(layers)
    np.testing.assert_allclose(R.numpy(), explicit_rollout(layers.numpy()), atol=1e-12)
    torch.testing.assert_close(R.sum(-1), torch.ones(T, dtype=torch.float64))
    steps = attention_rollout(list(layers), cumulative=True)
    assert steps.shape == (4, T, T)
    torch.testing.assert_close(steps[-1], R)
    np.testing.assert_allclose(steps[1].numpy(), explicit_rollout(layers[:2].numpy()), atol=1e-12)
    plain = layers[2] @ layers[1] @ layers[0]
    torch.testing.assert_close(attention_rollout(layers[:3], residual=0.0), plain)
    torch.testing.assert_close(attention_rollout(layers, residual=1.0), torch.eye(T, dtype=torch.float64))


def test_rollout_is_the_sum_over_paths_of_the_layered_graph():
    g = torch.Generator().manual_seed(9)
    n = 4
    layers = torch.softmax(torch.randn(2, n, n, generator=g, dtype=torch.float64), -1)
    L = layered_graph(layers, ["a", "b", "c", "d"])
    assert L.number_of_nodes() == 3 * n and L.number_of_edges() == 2 * n * n
    assert nx.is_directed_acyclic_graph(L)
    R = attention_rollout(layers)
    for i in range(n):
        for j in range(n):
            assert path_flow(L, (2, i), (0, j)) == pytest.approx(R[i, j].item(), abs=1e-12)
    sparse = layered_graph(layers, ["a", "b", "c", "d"], threshold=0.3)
    assert all(v >= 0.3 for *_, v in sparse.edges(data="weight"))


def test_rollout_follows_device_and_dtype(device):
    layers = torch.softmax(torch.randn(3, T, T), -1).to(device)
    R = attention_rollout(layers)
    assert R.device == layers.device and R.dtype == torch.float32
    G = attention_graph(layers[0], TOKENS)  # a GPU tensor is read back for the graph
    assert G.number_of_edges() == T * T


# --- attention flow --------------------------------------------------------------------------
def random_layers(seed, L, n=T):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(L, n, n, generator=g, dtype=torch.float64), -1)


def residual_adjusted(layers, residual=0.5):
    a_hat = residual * torch.eye(layers.shape[-1], dtype=layers.dtype) + (1 - residual) * layers
    return a_hat / a_hat.sum(-1, keepdim=True)


def test_flow_by_hand_on_two_tokens():
    """Chapter 8's rollout exercise, as a flow network.  Â_0 = [[0.8, 0.2], [0.1, 0.9]],
    Â_1 = [[0.95, 0.05], [0.25, 0.75]].  From rain at the top to [CLS] at the input there are two
    paths with no edge in common: via [CLS], min(0.25, 0.8) = 0.25; via rain, min(0.75, 0.1) = 0.1.
    So the flow is 0.35, where rollout (products, not minimums) gives 0.275."""
    layers = torch.tensor([[[0.6, 0.4], [0.2, 0.8]], [[0.9, 0.1], [0.5, 0.5]]], dtype=torch.float64)
    F = attention_flow(layers)
    expected = torch.tensor([[0.8 + 0.05, 0.2 + 0.05],   # min(.95, .8) + min(.05, .1), min(.95, .2) + min(.05, .9)
                             [0.25 + 0.1, 0.2 + 0.75]],  # min(.25, .8) + min(.75, .1), min(.25, .2) + min(.75, .9)
                            dtype=torch.float64)
    torch.testing.assert_close(F, expected, atol=1e-12, rtol=0)
    assert attention_rollout(layers)[1, 0].item() == pytest.approx(0.275, abs=1e-12)
    assert F[1, 0].item() > attention_rollout(layers)[1, 0].item() + 0.07  # not the same quantity


@pytest.mark.parametrize("seed, L, n", [(0, 3, 5), (1, 4, 4), (2, 6, 4)])
def test_flow_is_networkx_max_flow_and_min_cut_on_the_layered_graph(seed, L, n):
    """The oracle: networkx's Edmonds-Karp (the authors' choice) and its minimum cut, each run on
    the graph built here by hand from the residual-adjusted matrices, not from layered_graph."""
    layers = random_layers(seed, L, n)
    a_hat = residual_adjusted(layers)
    G = nx.DiGraph()
    for layer in range(L):
        G.add_weighted_edges_from(((layer + 1, i), (layer, j), a_hat[layer, i, j].item())
                                  for i in range(n) for j in range(n))
    F = attention_flow(layers)
    for i in range(n):
        for j in range(n):
            ek = nx.maximum_flow_value(G, (L, i), (0, j), capacity="weight",
                                       flow_func=nx.algorithms.flow.edmonds_karp)
            cut = nx.minimum_cut_value(G, (L, i), (0, j), capacity="weight")
            assert F[i, j].item() == pytest.approx(ek, abs=1e-12)
            assert F[i, j].item() == pytest.approx(cut, abs=1e-12)


def test_one_layer_flow_is_the_single_edge_and_equals_rollout():
    """With one layer the only route from (1, i) to (0, j) is the edge between them: a min cut of
    one edge, so F = Â_0 = rollout (the one place where the two agree in general)."""
    layers = random_layers(3, 1)
    torch.testing.assert_close(attention_flow(layers), residual_adjusted(layers)[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(attention_flow(layers), attention_rollout(layers), atol=1e-12, rtol=0)
    torch.testing.assert_close(attention_flow(layers, residual=0.0), layers[0], atol=1e-12, rtol=0)


def test_two_layer_flow_is_a_sum_of_minimums():
    """Two layers: the T paths (L, i) -> (1, k) -> (0, j) share no edge, so the max flow is
    sum_k min(Â_1[i, k], Â_0[k, j]) (rollout is sum_k Â_1[i, k] Â_0[k, j])."""
    layers = random_layers(4, 2)
    a_hat = residual_adjusted(layers)
    expected = torch.minimum(a_hat[1][:, :, None], a_hat[0][None, :, :]).sum(1)  # (T, T)
    torch.testing.assert_close(attention_flow(layers), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("seed, L, residual", [(5, 4, 0.5), (6, 6, 0.5), (7, 3, 0.2), (8, 5, 0.0)])
def test_flow_lies_between_rollout_and_the_end_cuts(seed, L, residual):
    """Rollout's path products are a feasible flow, so rollout <= flow; the flow is bounded by the
    capacity out of the output node (1, a row of Â) and into the input node (a column sum of Â_0)."""
    layers = random_layers(seed, L)
    F = attention_flow(layers, residual=residual)
    R = attention_rollout(layers, residual=residual)
    assert bool((R <= F + 1e-12).all())
    assert bool(((F - R) > 1e-3).any())  # and not an identity
    into_input = residual_adjusted(layers, residual)[0].sum(0)  # (T,): capacity into each (0, j)
    bound = torch.minimum(torch.ones(T, dtype=torch.float64), into_input)
    assert bool((F <= bound[None, :] + 1e-12).all())


def test_flow_with_only_the_residual_is_the_identity():
    layers = random_layers(9, 3)
    torch.testing.assert_close(attention_flow(layers, residual=1.0), torch.eye(T, dtype=torch.float64))


def test_flow_positions_and_normalise():
    layers = random_layers(10, 3)
    F = attention_flow(layers)
    torch.testing.assert_close(attention_flow(layers, positions=[4, 0, -1]), F[[4, 0, T - 1]])
    N = attention_flow(list(layers.float()), positions=(2,), normalise=True)
    assert N.shape == (1, T) and N.dtype == torch.float64
    torch.testing.assert_close(N[0], F[2] / F[2].sum(), atol=1e-6, rtol=0)
    torch.testing.assert_close(N.sum(-1), torch.ones(1, dtype=torch.float64))


def test_flow_on_the_real_encoder_bounds_rollout():
    attentions = attnlib.encoder.get_attentions(RUNNING).stacked().cpu()  # (L, H, T, T)
    layer_means = attentions.mean(1)
    n = layer_means.shape[-1]
    F = attention_flow(layer_means, positions=[0, n - 1])
    R = attention_rollout(layer_means.double())[[0, n - 1]]
    assert bool((R <= F + 1e-9).all()) and bool((F <= 1 + 1e-9).all())
    assert F[0, 0].item() == pytest.approx(1.0, abs=1e-9)  # [CLS] reaches itself along its own column


@pytest.mark.parametrize("call, error, match", [
    (lambda: attention_flow(random_layers(0, 2), positions=[T]), IndexError, r"positions\[0\] must be in 0..5"),
    (lambda: attention_flow(random_layers(0, 2), positions=[1.0]), TypeError, r"positions\[0\] must be an int"),
    (lambda: attention_flow(random_layers(0, 2), positions=3), TypeError, "positions must be a list"),
    (lambda: attention_flow(random_layers(0, 2), positions=[]), ValueError, "at least one"),
    (lambda: attention_flow(random_layers(0, 2), normalise="yes"), TypeError, "normalise must be True or False"),
    (lambda: attention_flow(random_layers(0, 2), residual=1.5), ValueError, "residual must be <= 1.0"),
    (lambda: attention_flow(torch.rand(6, 12, 5, 5)), ValueError, "average the heads"),
    (lambda: attention_flow(torch.rand(2, 3, 3) + 0.5), ValueError, "row-stochastic"),
])
def test_flow_rejects_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_rank_correlation_by_hand_and_against_the_formula():
    # ties share their mean rank: [1, 2, 2, 3] ranks 0, 1.5, 1.5, 3 against 0, 1, 2, 3
    assert rank_correlation(torch.tensor([1.0, 2.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0, 4.0])) == \
        pytest.approx(4.5 / math.sqrt(4.5 * 5), abs=1e-12)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        x, y = torch.randn(9, generator=g), torch.randn(9, generator=g)
        d = (torch.argsort(torch.argsort(x)) - torch.argsort(torch.argsort(y))).double()
        spearman = 1 - 6 * (d ** 2).sum().item() / (9 * (81 - 1))  # the no-ties formula
        assert rank_correlation(x, y) == pytest.approx(spearman, abs=1e-12)
        assert rank_correlation(x, torch.exp(3 * x)) == pytest.approx(1.0)  # ranks ignore any increasing map
        assert rank_correlation(x, -x) == pytest.approx(-1.0)
    near = torch.tensor([1.0, 1.0 + 4e-16, 0.5], dtype=torch.float64)  # a max-flow of 1 that came out as 1 + 4e-16
    assert rank_correlation(near, torch.tensor([3.0, 3.0, 1.0])) == pytest.approx(1.0)
    assert rank_correlation(near, torch.tensor([3.0, 3.0, 1.0]), atol=0.0) < 1.0


@pytest.mark.parametrize("x, y, kwargs, error, match", [
    (torch.rand(3), torch.rand(4), {}, ValueError, "same items"),
    (torch.rand(1), torch.rand(1), {}, ValueError, "at least 2"),
    (torch.rand(2, 2), torch.rand(2, 2), {}, ValueError, "1-D"),
    (torch.ones(3), torch.rand(3), {}, ValueError, "tied"),
    (torch.tensor([1.0, float("nan")]), torch.rand(2), {}, ValueError, "finite"),
    (torch.arange(3), torch.rand(3), {}, TypeError, "floating"),
    (torch.rand(3), torch.rand(3), {"atol": -1.0}, ValueError, "atol"),
])
def test_rank_correlation_rejects_bad_input(x, y, kwargs, error, match):
    with pytest.raises(error, match=match):
        rank_correlation(x, y, **kwargs)


# --- bad input gives clear errors ------------------------------------------------------------
@pytest.mark.parametrize("weights, tokens, kwargs, error, match", [
    (torch.rand(4, 5), ["a"] * 4, {}, ValueError, r"square .*\(4, 5\)"),
    (torch.rand(4, 4), ["a"] * 3, {}, ValueError, "3 tokens for a \\(4, 4\\)"),
    (torch.rand(4, 4), ["a"] * 4, {"threshold": -0.1}, ValueError, "threshold must be .*>= 0"),
    (torch.rand(4, 4), ["a"] * 4, {"threshold": float("nan")}, ValueError, "threshold"),
    (torch.rand(4, 4), ["a"] * 4, {"threshold": True}, TypeError, "threshold must be a real number"),
    (torch.rand(4, 4), ["a"] * 4, {"threshold": "x"}, TypeError, "threshold must be a real number, got str"),
    (torch.rand(4, 4), ["a"] * 4, {"threshold": None}, TypeError, "threshold must be a real number"),
    (None, ["a"] * 4, {}, TypeError, "torch.Tensor or numpy.ndarray, got NoneType"),
    ("weights", ["a"] * 4, {}, TypeError, "got str"),
    (torch.zeros(0, 0), [], {}, ValueError, "at least one token"),
    (torch.full((2, 2), float("inf")), ["a"] * 2, {}, ValueError, "finite"),
    (torch.rand(2, 2), None, {}, TypeError, "list of T strings, got NoneType"),
    (torch.rand(1, 4, 4), ["a"] * 4, {}, ValueError, r"\(1, 4, 4\).*pick one head.*weights\[0\]"),
    (torch.rand(12, 4, 4), ["a"] * 4, {}, ValueError, r"\(12, 4, 4\).*weights\[h\]"),
    (torch.rand(1, 12, 4, 4), ["a"] * 4, {}, ValueError, r"weights\[0, h\]"),
    (torch.ones(4, 4, dtype=torch.int64), ["a"] * 4, {}, TypeError, "floating-point"),
    ([[0.5, 0.5], [0.5, 0.5]], ["a"] * 2, {}, TypeError, "torch.Tensor or numpy.ndarray"),
    (torch.full((2, 2), -0.5), ["a"] * 2, {}, ValueError, "score_graph"),
    (torch.full((2, 2), float("nan")), ["a"] * 2, {}, ValueError, "NaN"),
    (torch.rand(2, 2), "ab", {}, TypeError, "list of T strings"),
])
def test_attention_graph_rejects_bad_input(weights, tokens, kwargs, error, match):
    with pytest.raises(error, match=match):
        attention_graph(weights, tokens, **kwargs)


def test_rollout_and_layered_graph_reject_bad_input():
    with pytest.raises(ValueError, match="average the heads"):
        attention_rollout(torch.rand(6, 12, 5, 5))
    with pytest.raises(ValueError, match=r"\(L, T, T\)"):
        attention_rollout(torch.rand(6, 5, 4))
    with pytest.raises(ValueError, match="residual must be <= 1.0"):
        attention_rollout(torch.softmax(torch.rand(2, 3, 3), -1), residual=1.5)
    with pytest.raises(ValueError, match="non-negative"):
        attention_rollout(-torch.rand(2, 3, 3))
    with pytest.raises(ValueError, match="one shape"):
        attention_rollout([torch.rand(3, 3), torch.rand(4, 4)])
    with pytest.raises(ValueError, match="tokens"):
        layered_graph(torch.softmax(torch.rand(2, 3, 3), -1), ["a", "b"])
    with pytest.raises(ValueError, match="row-stochastic"):
        attention_rollout(torch.rand(2, 3, 3) + 0.5)
    with pytest.raises(ValueError, match="k must be"):
        strongest_edges(attention_graph(torch.rand(2, 2), ["a", "b"]), k=0)


GRAPH = attention_graph(random_weights(12), TOKENS)
SCORES = score_graph(torch.randn(T, T, generator=torch.Generator().manual_seed(0)), TOKENS)


@pytest.mark.parametrize("call, error, match", [
    # graph arguments that are not graphs
    *[(lambda f=f, g=g: f(g), TypeError, "graph must be a networkx graph")
      for f in (in_weight, is_dag_without_self_loops, neighbourhood_mask, strongest_edges)
      for g in (None, "graph", torch.rand(3, 3))],
    (lambda: path_flow(None, 0, 1), TypeError, "graph must be a networkx graph"),
    (lambda: graph_attention(torch.rand(3, 2), torch.rand(3, 2), torch.rand(3, 2), None), TypeError, "networkx graph"),
    # undirected where direction matters
    (lambda: in_weight(nx.path_graph(3)), TypeError, "directed graph"),
    (lambda: is_dag_without_self_loops(nx.path_graph(3)), TypeError, "directed graph"),
    # attributes and options
    (lambda: in_weight(SCORES), ValueError, "no 'weight' attribute"),
    (lambda: in_weight(GRAPH, share="yes"), TypeError, "share must be True or False"),
    (lambda: strongest_edges(GRAPH, k=0), ValueError, "k must be a positive int, got 0"),
    (lambda: strongest_edges(GRAPH, k=2.0), TypeError, "k must be a positive int, got float"),
    (lambda: strongest_edges(GRAPH, k="3"), TypeError, "k must be a positive int, got str"),
    (lambda: strongest_edges(GRAPH, attr="score"), ValueError, "no 'score' attribute"),
    (lambda: strongest_edges(GRAPH, attr=None), TypeError, "attr must be a str"),
    (lambda: score_graph(torch.rand(3, 3), list("abc"), symmetric="no"), TypeError, "symmetric must be True or False"),
    (lambda: score_graph(torch.rand(3, 3), list("abc"), atol="x"), TypeError, "atol must be a real number"),
    (lambda: score_graph(torch.full((2, 2), float("inf")), list("ab")), ValueError, r"\+inf"),
    (lambda: neighbourhood_mask(nx.DiGraph([("a", "b")])), ValueError, "positions 0..T-1"),
    (lambda: neighbourhood_mask(GRAPH, device="gpu0"), ValueError, "device must name a device such as .cpu. or .cuda., got .gpu0."),
    (lambda: neighbourhood_mask(GRAPH, device=1.5), TypeError, "device must be"),
    (lambda: path_flow(GRAPH, 0, 99), ValueError, "target 99 is not a node"),
    (lambda: path_flow(GRAPH, [0], 1), ValueError, "source .* is not a node"),
    (lambda: graph_attention(torch.rand(3, 0), torch.rand(3, 0), torch.rand(3, 2), nx.complete_graph(3)),
     ValueError, "d_k >= 1"),
    # Markov chain and rollout: rows must sum to 1 where the maths needs it
    (lambda: stationary_distribution(torch.full((3, 3), 0.5)), ValueError, "row-stochastic"),
    (lambda: stationary_distribution(torch.tensor([[1.5, -0.5], [0.5, 0.5]])), ValueError, "non-negative"),
    (lambda: stationary_distribution(torch.full((3, 3), float("nan"))), ValueError, "NaN"),
    (lambda: attention_rollout(torch.zeros(2, 3, 3), residual=0.0), ValueError, "row-stochastic"),
    (lambda: attention_rollout(torch.softmax(torch.rand(2, 3, 3), -1), residual="x"), TypeError, "residual must be a real"),
    (lambda: attention_rollout(torch.softmax(torch.rand(2, 3, 3), -1), cumulative="yes"), TypeError, "cumulative"),
    (lambda: attention_rollout([]), ValueError, "L >= 1"),
    (lambda: attention_rollout([None]), TypeError, r"layer_weights\[0\] must be a torch.Tensor"),
    (lambda: attention_rollout(torch.ones(2, 3, 3, dtype=torch.long)), TypeError, "floating point"),
    (lambda: attention_rollout(torch.full((2, 3, 3), float("nan"))), ValueError, "finite"),
    (lambda: layered_graph(torch.softmax(torch.rand(2, 3, 3), -1), list("abc"), threshold="x"), TypeError, "threshold"),
    (lambda: layered_graph(torch.softmax(torch.rand(2, 3, 3), -1), None), TypeError, "tokens"),
])
def test_graph_helpers_reject_hostile_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_rollout_rows_are_distributions_even_when_input_rows_are_off_by_rounding():
    """Rows that sum to 1 only within the accepted rounding (here 1 + 4e-4) still give a rollout
    whose rows sum to 1: every step renormalises (Abnar & Zuidema 2020)."""
    layers = torch.softmax(torch.randn(4, T, T, generator=torch.Generator().manual_seed(2), dtype=torch.float64), -1)
    R = attention_rollout(layers * (1 + 4e-4))
    torch.testing.assert_close(R.sum(-1), torch.ones(T, dtype=torch.float64), atol=1e-12, rtol=0)
    np.testing.assert_allclose(R.numpy(), explicit_rollout((layers * (1 + 4e-4)).numpy()), atol=1e-12)


def test_rollout_accepts_half_precision_rows_that_sum_to_one_within_rounding():
    layers = torch.softmax(torch.randn(3, 40, 40, generator=torch.Generator().manual_seed(1)), -1)
    for dtype in (torch.float16, torch.bfloat16):
        R = attention_rollout(layers.to(dtype))
        assert R.dtype == dtype
        torch.testing.assert_close(R.double(), attention_rollout(layers.double()), atol=3e-2, rtol=0)


def test_threshold_keeps_a_weight_exactly_at_the_threshold():
    """The boundary: an edge exists when its weight is >= threshold (and > 0)."""
    w = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64)
    G = attention_graph(w, ["a", "b"], threshold=0.25)
    assert G.has_edge(0, 0) and G.number_of_edges() == 4
    G = attention_graph(w, ["a", "b"], threshold=0.5)
    assert not G.has_edge(0, 0) and G.has_edge(1, 0) and G.has_edge(1, 1) and G.number_of_edges() == 3
