"""Attention matrices as graphs, built on networkx (chapter 8).

A weight matrix ``A`` ``(T, T)`` is the weighted adjacency matrix of a directed graph on the
tokens: node ``i`` is position ``i`` (attribute ``token``), edge ``i -> j`` means "query ``i``
attends to key ``j``" with attribute ``weight = A[i, j]``; self-loops are ordinary edges.
Because every row of ``A`` sums to 1, the graph is also a Markov chain.  Measures of the
weights themselves (the share of attention a key receives, offsets, sinks) live in
:mod:`attnlib.measures`; :func:`in_weight` reads the same share off a graph.  Across layers,
:func:`layered_graph` stacks one copy of the tokens per depth; :func:`attention_rollout` sums the
weight products along its paths and :func:`attention_flow` takes its maximum flow (Abnar &
Zuidema 2020).

Shapes legend: ``B`` batch, ``H`` heads, ``L`` layers, ``T_q`` queries, ``T_k`` keys
(``T = T_q = T_k`` for self-attention), ``d_k`` query/key width, ``d_v`` value width.
"""
from __future__ import annotations

import math
from itertools import pairwise

import networkx as nx
import torch
from networkx.algorithms.flow import build_residual_network, preflow_push

from . import _validate
from .attention import check_qkv
from .measures import received_attention
from .softmax import softmax

__all__ = [
    "attention_graph", "score_graph", "strongest_edges", "in_weight",
    "is_dag_without_self_loops", "stationary_distribution", "neighbourhood_mask",
    "graph_attention", "attention_rollout", "layered_graph", "path_flow", "attention_flow",
    "rank_correlation",
]

_HEAD_HINT = {
    3: "it looks like (H, T, T) heads (or a (1, T, T) batch of one); pick one head first, "
       "e.g. weights[h] (weights[0] for a leading axis of size 1)",
    4: "it looks like (B, H, T, T) attentions as Hugging Face returns them; pick one "
       "sentence and one head first, e.g. weights[0, h]",
}


def _square(matrix, name: str, what: str = "weights") -> torch.Tensor:
    m = _validate.has_values(_validate.floating(matrix, name), name, "the graph helpers")
    if m.dim() != 2:
        hint = _HEAD_HINT.get(m.dim(), "pass a single (T, T) matrix")
        raise ValueError(f"{name} must be one head's (T, T) {what} matrix, got shape {tuple(m.shape)}: {hint}")
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"{name} must be square (T, T) (self-attention), got shape {tuple(m.shape)}")
    if m.shape[0] == 0:
        raise ValueError(f"{name} must have at least one token, got shape {tuple(m.shape)}")
    if torch.isnan(m).any():
        raise ValueError(f"{name} contains NaN")
    return m.detach().to("cpu", torch.float64)


def _row_stochastic(w: torch.Tensor, name: str, dtype: torch.dtype) -> None:
    """Every row of ``w`` sums to 1, within the rounding of the caller's ``dtype`` (1e-3 for
    float32 and float64; wider for float16 and bfloat16)."""
    tol = max(1e-3, 2 * torch.finfo(dtype).eps * math.sqrt(w.shape[-1]))
    gap = (w.double().sum(-1) - 1).abs().max().item()
    if gap > tol:
        raise ValueError(f"{name} must be row-stochastic (every row sums to 1, as post-softmax weights do); "
                         f"the largest |row sum - 1| is {gap:.3g}")


def _tokens(tokens, T: int) -> list[str]:
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a list of T strings, got {type(tokens).__name__}")
    if len(tokens) != T:
        raise ValueError(f"got {len(tokens)} tokens for a ({T}, {T}) matrix; need one token per position")
    return [str(t) for t in tokens]


def _threshold(value) -> float:
    return _validate.real(value, "threshold", low=0.0)


def _graph(graph, name: str = "graph", *, directed: bool = False) -> nx.Graph:
    """``graph`` if it is a networkx graph (a directed one when ``directed``)."""
    if not isinstance(graph, nx.Graph):
        raise TypeError(f"{name} must be a networkx graph (e.g. from attnlib.graphs.attention_graph), "
                        f"got {type(graph).__name__}")
    if directed and not graph.is_directed():
        raise TypeError(f"{name} must be a directed graph (networkx.DiGraph, as attnlib.graphs.attention_graph "
                        f"returns), got an undirected {type(graph).__name__}")
    return graph


def _edge_attr(graph, attr: str, name: str = "graph") -> None:
    """Every edge of ``graph`` carries a number under ``attr``."""
    if not isinstance(attr, str):
        raise TypeError(f"attr must be a str such as 'weight' or 'score', got {type(attr).__name__}")
    missing = [(u, v) for u, v, value in graph.edges(data=attr) if value is None]
    if missing:
        kind = graph.graph.get("kind")
        hint = "; score graphs carry 'score', weight graphs 'weight'" if kind else ""
        raise ValueError(f"{len(missing)} of the {graph.number_of_edges()} edges of {name} have no "
                         f"{attr!r} attribute, e.g. {missing[0]}{hint}")


def attention_graph(weights, tokens, *, threshold: float = 0.0) -> nx.DiGraph:
    """The directed graph whose weighted adjacency matrix is ``weights``.

    Nodes ``0..T-1`` carry ``token``; edge ``i -> j`` (query ``i`` attends to key ``j``) carries
    ``weight = weights[i, j]``.  Self-loops are kept.  An edge exists when its weight is
    positive and at least ``threshold``: a weight of exactly 0 (a masked key) is no edge.
    ``networkx.to_numpy_array(G)`` gives ``weights`` back (thresholded entries as 0).

    Shapes:
        weights: ``(T, T)`` = ``(T_q, T_k)``; ``len(tokens) == T``.

    Raises:
        TypeError: weights not a float tensor/array, tokens not a list, threshold not a number.
        ValueError: weights not 2-D (a ``(1, T, T)``, ``(H, T, T)`` or ``(B, H, T, T)`` input
            is told to pick a head), not square, empty, with NaN, infinite or negative
            entries (use :func:`score_graph` for scores); token count not ``T``; threshold
            negative or not finite.
    """
    w = _square(weights, "weights")
    tokens, threshold = _tokens(tokens, w.shape[0]), _threshold(threshold)
    if (w < 0).any():
        raise ValueError("weights must be non-negative (post-softmax); for pre-softmax scores use score_graph")
    if torch.isinf(w).any():
        raise ValueError("weights must be finite (post-softmax weights lie in [0, 1])")
    graph = nx.DiGraph(kind="weights")
    graph.add_nodes_from((i, {"token": t}) for i, t in enumerate(tokens))
    rows, cols = torch.nonzero((w > 0) & (w >= threshold), as_tuple=True)
    graph.add_weighted_edges_from(zip(rows.tolist(), cols.tolist(), w[rows, cols].tolist()))
    return graph


def score_graph(scores, tokens, *, symmetric: bool = False, atol: float = 1e-5):
    """The graph of pre-softmax scores: edge ``i -> j`` with attribute ``score = scores[i, j]``.

    Scores are signed and unbounded; ``-inf`` (a masked key) is no edge.  With
    ``symmetric=True`` the scores must satisfy ``S = S^T`` (within ``atol``), as they do for
    tied ``W_Q = W_K``, and an undirected ``networkx.Graph`` is returned.

    Shapes:
        scores: ``(T, T)``; ``len(tokens) == T``.

    Raises:
        TypeError/ValueError: as :func:`attention_graph`; TypeError when ``symmetric`` is
            not a bool or ``atol`` not a number; ValueError also for a ``+inf`` score, a
            negative ``atol``, and when ``symmetric=True`` but ``scores`` is not symmetric
            (the message gives the largest ``|S - S^T|``).
    """
    s = _square(scores, "scores", "score")
    tokens = _tokens(tokens, s.shape[0])
    symmetric = _validate.flag(symmetric, "symmetric")
    atol = _validate.real(atol, "atol", low=0.0)
    if (s == math.inf).any():
        raise ValueError("scores must not be +inf (-inf marks a masked key; +inf has no softmax)")
    if symmetric:
        gap = (s - s.T).abs().nan_to_num(0.0).max().item()
        if gap > atol:
            raise ValueError(f"scores are not symmetric: max |S - S^T| = {gap:.3g} > atol = {atol}")
    graph = (nx.Graph if symmetric else nx.DiGraph)(kind="scores")
    graph.add_nodes_from((i, {"token": t}) for i, t in enumerate(tokens))
    rows, cols = torch.nonzero(torch.isfinite(s), as_tuple=True)
    graph.add_weighted_edges_from(zip(rows.tolist(), cols.tolist(), s[rows, cols].tolist()), weight="score")
    return graph


def strongest_edges(graph, k: int = 5, *, attr: str = "weight") -> list[tuple[int, int, float]]:
    """The ``k`` edges with the largest ``attr``, as ``(i, j, value)``, largest first (ties by
    ``(i, j)``).  Use ``attr="score"`` on a :func:`score_graph`.

    Shapes:
        a graph on ``T`` nodes; returns ``min(k, number of edges)`` tuples.

    Raises:
        TypeError: ``graph`` is not a networkx graph, ``k`` not an int, ``attr`` not a str.
        ValueError: ``k < 1``, or an edge lacks ``attr`` (e.g. ``"weight"`` asked of a
            score graph).
    """
    graph = _graph(graph)
    k = _validate.positive_int(k, "k")
    _edge_attr(graph, attr)
    edges = [(i, j, float(v)) for i, j, v in graph.edges(data=attr)]
    return sorted(edges, key=lambda e: (-e[2], e[0], e[1]))[:k]


def in_weight(graph, *, share: bool = False) -> dict[int, float]:
    """Total attention each token receives: the weighted in-degree (networkx's
    ``in_degree(weight="weight")``, a column sum of ``A``).

    With ``share=True`` it is the share of all attention that lands on the token, the one
    definition :func:`attnlib.measures.received_attention` (column means) applied to the graph's
    weighted adjacency matrix: the in-degree divided by the number of nodes.

    Shapes:
        a weight graph on ``T`` nodes; returns ``{node: float}`` with ``T`` entries (summing to
        ``T``, or to 1 with ``share=True``, when every row of ``A`` sums to 1).

    Raises:
        TypeError: ``graph`` is not a directed networkx graph; ``share`` is not a bool.
        ValueError: an edge has no ``weight`` (a score graph); ``share=True`` on a graph
            without nodes.
    """
    graph = _graph(graph, directed=True)
    share = _validate.flag(share, "share")
    _edge_attr(graph, "weight")
    if not share:
        return dict(graph.in_degree(weight="weight"))
    nodes = list(graph.nodes)
    if not nodes:
        raise ValueError("graph has no nodes, so no share of attention")
    adjacency = torch.from_numpy(nx.to_numpy_array(graph, nodelist=nodes, weight="weight"))  # (T, T)
    return dict(zip(nodes, received_attention(adjacency).tolist()))


def is_dag_without_self_loops(graph) -> bool:
    """True when ``graph`` has no directed cycle apart from self-loops, as for a causally
    masked head (every edge ``i -> j`` has ``j <= i``).  Uses
    ``networkx.is_directed_acyclic_graph`` on a copy without the self-loops.

    Shapes:
        any directed graph; the input is not modified.

    Raises:
        TypeError: ``graph`` is not a directed networkx graph.
    """
    core = nx.DiGraph(_graph(graph, directed=True))
    core.remove_edges_from(list(nx.selfloop_edges(core)))
    return nx.is_directed_acyclic_graph(core)


def stationary_distribution(weights) -> torch.Tensor:
    """The stationary distribution ``pi`` of the Markov chain with transition matrix ``weights``:
    ``pi A = pi``, ``sum(pi) = 1``.  It is unique when the graph has exactly one attracting
    component (``networkx.number_attracting_components``), e.g. when all weights are positive.

    Shapes:
        weights: ``(T, T)``, rows summing to 1; result ``(T,)`` (float64, CPU).

    Raises:
        TypeError: ``weights`` is not a floating tensor/array.
        ValueError: not one square matrix, NaN or negative entries, rows that do not sum to
            1, or a chain with several attracting components.
    """
    w = _square(weights, "weights")
    if (w < 0).any():
        raise ValueError("weights must be non-negative (transition probabilities)")
    _row_stochastic(w, "weights", _validate.floating(weights).dtype)
    count = nx.number_attracting_components(attention_graph(w, ["."] * w.shape[0]))
    if count != 1:
        raise ValueError(f"the chain has {count} attracting components, so no unique stationary distribution")
    w = w / w.sum(-1, keepdim=True)  # exact row sums in float64, so pi A = pi is consistent
    T = w.shape[0]
    system = w.T - torch.eye(T, dtype=w.dtype)  # (A^T - I) pi = 0 has rank T - 1 ...
    system[-1] = 1.0                            # ... so swap one equation for sum(pi) = 1
    rhs = torch.zeros(T, dtype=w.dtype)
    rhs[-1] = 1.0
    return torch.linalg.solve(system, rhs).clamp_min(0)


def neighbourhood_mask(graph, *, device=None) -> torch.Tensor:
    """Boolean mask ``M[i, j] = True`` when ``j`` is a neighbour of ``i`` (a successor in a
    DiGraph), in node order ``0..T-1``: the ``mask`` that turns attention into graph attention.
    True means "may attend", as in PyTorch's SDPA.

    Shapes:
        a graph on ``T`` nodes; returns a bool ``(T, T)`` = ``(T_q, T_k)`` tensor on ``device``.

    Raises:
        TypeError: ``graph`` is not a networkx graph; ``device`` is not a device or its name.
        ValueError: its nodes are not the positions ``0..T-1``; an unknown device name, or
            CUDA on a machine without it.
    """
    graph = _graph(graph)
    device = _validate.device(device)
    nodes = list(range(graph.number_of_nodes()))
    if set(graph.nodes) != set(nodes):
        shown = list(graph.nodes)[:6]
        raise ValueError(f"graph nodes must be the token positions 0..T-1, got {shown}"
                         f"{' ...' if len(graph) > 6 else ''}")
    return torch.as_tensor(nx.to_numpy_array(graph, nodelist=nodes, weight=None) > 0, device=device)


def graph_attention(q, k, v, graph):
    """Graph attention (Velickovic et al. 2018, eq. 3): each node ``i`` takes a softmax of
    ``q_i . k_j / sqrt(d_k)`` over its neighbours ``j`` in ``graph`` only, node by node.

    On the complete graph with self-loops this is ordinary self-attention; on any graph it
    equals attention with ``mask=neighbourhood_mask(graph)``.

    Shapes:
        q, k: ``(T, d_k)``, v: ``(T, d_v)``, graph with nodes ``0..T-1``.
        Returns ``out`` ``(T, d_v)`` and ``weights`` ``(T, T)`` (zero off the neighbourhood).

    Raises:
        TypeError: q, k, v not floating tensors of one dtype; ``graph`` not a networkx graph.
        ValueError: inputs not 2-D, shapes that do not fit, ``d_k = 0``, node set not
            ``0..T-1``, or a node without neighbours (its softmax would be over nothing).
    """
    q, k, v = check_qkv(q, k, v)
    graph = _graph(graph)
    T = q.shape[0]
    if q.shape[-1] == 0:
        raise ValueError(f"q and k must have d_k >= 1, got q {tuple(q.shape)}")
    if q.dim() != 2 or k.dim() != 2 or v.dim() != 2 or k.shape[0] != T \
            or set(graph.nodes) != set(range(T)) or graph.number_of_nodes() != T:
        raise ValueError(f"need q, k, v of shape (T, d) and a graph on nodes 0..T-1; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, {graph.number_of_nodes()} nodes")
    weights = torch.zeros(T, T, dtype=q.dtype, device=q.device)
    for i in range(T):
        nbrs = sorted(graph.neighbors(i))
        if not nbrs:
            raise ValueError(f"node {i} has no neighbours; add a self-loop so it can attend to itself")
        e = q[i] @ k[nbrs].T / math.sqrt(q.shape[-1])  # (|N(i)|,) scores over the neighbourhood
        weights[i, nbrs] = softmax(e, dim=-1)
    return weights @ v, weights


def _layers(layer_weights) -> torch.Tensor:
    if isinstance(layer_weights, (list, tuple)):
        mats = [_validate.tensor(m, f"layer_weights[{i}]") for i, m in enumerate(layer_weights)]
        if not mats or len({tuple(m.shape) for m in mats}) != 1:
            raise ValueError(f"layer_weights must be L >= 1 matrices of one shape (T, T), got shapes {[tuple(m.shape) for m in mats]}")
        w = torch.stack(mats)
    else:
        w = _validate.tensor(layer_weights, "layer_weights")
    if not w.is_floating_point():
        raise TypeError(f"layer_weights must be floating point, got dtype {w.dtype}")
    _validate.has_values(w, "layer_weights", "attention rollout")
    if w.dim() != 3 or w.shape[-1] != w.shape[-2] or w.shape[0] == 0 or w.shape[-1] == 0:
        raise ValueError(f"layer_weights must be (L, T, T) with L, T >= 1, one head-averaged matrix per layer, "
                         f"got {tuple(w.shape)}; for (L, H, T, T) average the heads first: weights.mean(1)")
    if (w < 0).any() or not torch.isfinite(w).all():
        raise ValueError("layer_weights must be finite and non-negative (post-softmax weights)")
    _row_stochastic(w.detach(), "layer_weights", w.dtype)
    return w


def attention_rollout(layer_weights, *, residual: float = 0.5, cumulative: bool = False) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020, eq. 1): ``R = Â_L ... Â_2 Â_1`` with
    ``Â_l = residual * I + (1 - residual) * A_l``, each row renormalised to sum to 1.

    ``R[i, j]`` is how much of input token ``j`` reaches position ``i`` after all layers if
    attention alone (plus the residual connection) moved information: the sum over all paths
    ``i -> ... -> j`` in :func:`layered_graph` of the product of the edge weights.

    Shapes:
        layer_weights: ``(L, T, T)`` (heads averaged) or a list of ``L`` ``(T, T)``.
        Returns ``(T, T)``, or ``(L, T, T)`` (rollout after each layer) with ``cumulative``.

    Raises:
        TypeError: not a floating tensor/array (or list of them); ``residual`` not a real
            number; ``cumulative`` not a bool.
        ValueError: not ``(L, T, T)``, negative/non-finite weights, rows that do not sum to
            1, ``residual`` outside [0, 1].
    """
    w = _layers(layer_weights)
    residual = _validate.real(residual, "residual", low=0.0, high=1.0)
    cumulative = _validate.flag(cumulative, "cumulative")
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    a_hat = residual * eye + (1 - residual) * w  # (L, T, T)
    a_hat = a_hat / a_hat.sum(-1, keepdim=True)
    steps, rolled = [], eye
    for layer in a_hat:
        rolled = layer @ rolled  # later layers multiply on the left
        steps.append(rolled)
    return torch.stack(steps) if cumulative else rolled


def layered_graph(layer_weights, tokens, *, residual: float = 0.5, threshold: float = 0.0) -> nx.DiGraph:
    """Layers of attention as one DAG: node ``(l, i)`` is token ``i`` at depth ``l``, the
    output of the first ``l`` layers (``l = 0`` is the input); edge ``(l, i) -> (l - 1, j)``
    has weight ``Â[i, j]`` of ``layer_weights[l - 1]`` (0-based layers, as in
    :func:`attention_rollout`).  Edges below ``threshold`` are dropped.

    Shapes:
        layer_weights: ``(L, T, T)``; ``len(tokens) == T``; ``(L + 1) * T`` nodes.

    Raises:
        TypeError/ValueError: as :func:`attention_rollout`; a token count other than ``T``;
            a negative or non-finite ``threshold``.
    """
    w = _layers(layer_weights)
    tokens, threshold = _tokens(tokens, w.shape[-1]), _threshold(threshold)
    graph = nx.DiGraph(kind="layered", n_layers=len(w))
    for layer in range(len(w) + 1):
        graph.add_nodes_from(((layer, i), {"token": t, "layer": layer, "position": i}) for i, t in enumerate(tokens))
    for layer in range(1, len(w) + 1):
        a_hat = attention_rollout(w[layer - 1 : layer], residual=residual).detach().cpu().double()
        for i, j in zip(*torch.nonzero((a_hat > 0) & (a_hat >= threshold), as_tuple=True)):
            graph.add_edge((layer, int(i)), (layer - 1, int(j)), weight=float(a_hat[i, j]))
    return graph


def path_flow(graph, source, target) -> float:
    """Sum over all simple paths ``source -> target`` of the product of edge weights.

    Exponential in the path length: for checking rollout on a few layers, not for 6 layers.
    On a :func:`layered_graph`, ``path_flow(G, (l, i), (0, j))`` equals
    ``attention_rollout(layer_weights[:l])[i, j]``.

    Raises:
        TypeError: ``graph`` is not a directed networkx graph.
        ValueError: ``source`` or ``target`` is not a node, or an edge has no ``weight``.
    """
    graph = _graph(graph, directed=True)
    for name, node in (("source", source), ("target", target)):
        try:
            found = node in graph
        except TypeError:  # an unhashable node, e.g. a list
            found = False
        if not found:
            raise ValueError(f"{name} {node!r} is not a node of the graph (a layered graph's nodes are (layer, position))")
    _edge_attr(graph, "weight")
    return sum(math.prod(graph.edges[u, v]["weight"] for u, v in pairwise(path))
               for path in nx.all_simple_paths(graph, source, target))


def attention_flow(layer_weights, *, residual: float = 0.5, positions=None, normalise: bool = False) -> torch.Tensor:
    """Attention flow (Abnar & Zuidema 2020, section 3, "Attention flow"): ``F[i, j]`` is the
    maximum flow from output position ``i`` (node ``(L, i)`` of :func:`layered_graph`) to input
    token ``j`` (node ``(0, j)``), when every edge's capacity is its weight in that graph, the
    residual-adjusted, row-renormalised ``Â_l = residual * I + (1 - residual) * A_l`` that
    :func:`attention_rollout` multiplies.

    Rollout adds up the products of the weights along every path; flow asks how much can get
    through at all, which by the max-flow min-cut theorem is the total capacity of the
    narrowest cut between the two nodes.  Relations that hold for every input (up to float64
    rounding):

    * ``attention_rollout(layer_weights)[i, j] <= F[i, j]``: sending along each path the product
      of its weights is a feasible flow (no edge carries more than its capacity, since rollout
      rows sum to 1), whose value is rollout's.
    * ``F[i, j] <= min(1, sum_k Â_0[k, j])``: the capacity out of ``(L, i)`` (a row of ``Â``,
      which sums to 1) and the capacity into ``(0, j)`` (a column sum of the first layer's ``Â``).
    * With one layer, ``F = Â_0`` (one edge joins the two nodes), which is rollout; with two,
      ``F[i, j] = sum_k min(Â_1[i, k], Â_0[k, j])`` (the paths share no edge).  For more layers
      flow and rollout differ in general (the tests show a two-token example).

    Computed with networkx's ``maximum_flow_value`` (preflow-push, on one residual network
    reused for every pair): the 169 pairs of a 6-layer, 13-token graph take about a second.
    With ``normalise=True`` each row is divided by its sum, as the authors' code
    (``compute_flows`` in github.com/samiraabnar/attention_flow) does before plotting.

    Shapes:
        layer_weights: ``(L, T, T)`` (heads averaged) or a list of ``L`` ``(T, T)``.
        positions: ``None`` (every output position) or a list of ``P`` positions.
        Returns ``(T, T)`` or ``(P, T)`` = (output positions, input tokens), float64 on the CPU.

    Raises:
        TypeError/ValueError: as :func:`attention_rollout`; TypeError when ``positions`` is not
            a list or tuple of ints or ``normalise`` is not a bool; ValueError for an empty
            ``positions``; IndexError for a position outside ``-T..T-1``.
    """
    w = _layers(layer_weights).detach().to("cpu", torch.float64)  # Â renormalised in float64: rows sum to 1
    residual = _validate.real(residual, "residual", low=0.0, high=1.0)
    normalise = _validate.flag(normalise, "normalise")
    T, L = w.shape[-1], w.shape[0]
    if positions is None:
        rows = list(range(T))
    else:
        if not isinstance(positions, (list, tuple)):
            raise TypeError(f"positions must be a list of output positions (ints), got {type(positions).__name__}")
        if not positions:
            raise ValueError("positions must name at least one output position")
        rows = [_validate.index(p, T, f"positions[{n}]") for n, p in enumerate(positions)]
    graph = layered_graph(w, [str(i) for i in range(T)], residual=residual)
    network = build_residual_network(graph, "weight")  # reset and reused by every call below
    flow = torch.zeros(len(rows), T, dtype=torch.float64)
    for r, i in enumerate(rows):
        for j in range(T):
            flow[r, j] = nx.maximum_flow_value(graph, (L, i), (0, j), capacity="weight",
                                               flow_func=preflow_push, residual=network)
    return flow / flow.sum(-1, keepdim=True) if normalise else flow


def rank_correlation(x, y, *, atol: float = 1e-9) -> float:
    """Spearman's rank correlation of two scores of the same items, e.g. a row of
    :func:`attention_rollout` and the same row of :func:`attention_flow` (how much each input
    token matters to one position): the Pearson correlation of their ranks, with tied values
    given the mean of the ranks they share.  Values within ``atol`` of their neighbour in sorted
    order count as tied (a max-flow of 1 may come out as 1 + 4e-16).

    Shapes:
        x, y: ``(N,)`` with ``N >= 2``; returns a float in [-1, 1].

    Raises:
        TypeError: not floating tensors/arrays; ``atol`` not a real number.
        ValueError: not 1-D, different lengths, fewer than 2 items, NaN or infinite values, a
            negative ``atol``, or all values of one input tied (no ranking, so no correlation).
    """
    atol = _validate.real(atol, "atol", low=0.0)
    ranked = []
    for name, v in (("x", x), ("y", y)):
        v = _validate.has_values(_validate.floating(v, name), name, "rank_correlation")
        if v.dim() != 1 or v.shape[0] < 2:
            raise ValueError(f"{name} must be 1-D with at least 2 items, got shape {tuple(v.shape)}")
        if not torch.isfinite(v).all():
            raise ValueError(f"{name} must be finite (no NaN or infinity)")
        v = v.detach().to("cpu", torch.float64)
        order = torch.argsort(v, stable=True)
        ranks = torch.empty_like(v)
        start = 0
        for end in range(1, len(v) + 1):  # a run of values each within atol of the one before is one tie
            if end == len(v) or v[order[end]] - v[order[end - 1]] > atol:
                ranks[order[start:end]] = (start + end - 1) / 2
                start = end
        if (ranks == ranks[0]).all():
            raise ValueError(f"all values of {name} are tied, so they have no ranking to correlate")
        ranked.append(ranks - ranks.mean())
    if ranked[0].shape != ranked[1].shape:
        raise ValueError(f"x and y must score the same items, got {ranked[0].shape[0]} and {ranked[1].shape[0]} values")
    a, b = ranked
    return float(a @ b / (a.norm() * b.norm()))
