"""Attention matrices as graphs, built on networkx (chapter 7).

A weight matrix ``A`` ``(T, T)`` is the weighted adjacency matrix of a directed graph on the
tokens: node ``i`` is position ``i`` (attribute ``token``), edge ``i -> j`` means "query ``i``
attends to key ``j``" with attribute ``weight = A[i, j]``; self-loops are ordinary edges.
Because every row of ``A`` sums to 1, the graph is also a Markov chain.

Shapes legend: ``B`` batch, ``H`` heads, ``L`` layers, ``T_q`` queries, ``T_k`` keys
(``T = T_q = T_k`` for self-attention), ``d_k`` query/key width, ``d_v`` value width.
"""
from __future__ import annotations

import math
from itertools import pairwise

import networkx as nx
import torch

from .attention import check_qkv
from .devices import as_tensor
from .softmax import softmax

__all__ = [
    "attention_graph", "score_graph", "strongest_edges", "in_weight", "received_attention",
    "is_dag_without_self_loops", "stationary_distribution", "neighbourhood_mask",
    "graph_attention", "attention_rollout", "layered_graph", "path_flow",
]

_HEAD_HINT = {
    3: "it looks like (H, T, T) heads (or a (1, T, T) batch of one); pick one head first, "
       "e.g. weights[h] (weights[0] for a leading axis of size 1)",
    4: "it looks like (B, H, T, T) attentions as Hugging Face returns them; pick one "
       "sentence and one head first, e.g. weights[0, h]",
}


def _square(matrix, name: str, what: str = "weights") -> torch.Tensor:
    m = as_tensor(matrix, name)
    if not m.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {m.dtype}")
    if m.dim() != 2:
        hint = _HEAD_HINT.get(m.dim(), "pass a single (T, T) matrix")
        raise ValueError(f"{name} must be one head's (T, T) {what} matrix, got shape {tuple(m.shape)}: {hint}")
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"{name} must be square (T, T) (self-attention), got shape {tuple(m.shape)}")
    if torch.isnan(m).any():
        raise ValueError(f"{name} contains NaN")
    return m.detach().to("cpu", torch.float64)


def _tokens(tokens, T: int) -> list[str]:
    if isinstance(tokens, str) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a list of T strings, got {type(tokens).__name__}")
    if len(tokens) != T:
        raise ValueError(f"got {len(tokens)} tokens for a ({T}, {T}) matrix; need one token per position")
    return [str(t) for t in tokens]


def _threshold(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"threshold must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"threshold must be a finite number >= 0 (a weight), got {value!r}")
    return float(value)


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
            is told to pick a head), not square, with NaN or negative entries (use
            :func:`score_graph` for scores); token count not ``T``; threshold negative.
    """
    w = _square(weights, "weights")
    tokens, threshold = _tokens(tokens, w.shape[0]), _threshold(threshold)
    if (w < 0).any():
        raise ValueError("weights must be non-negative (post-softmax); for pre-softmax scores use score_graph")
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
        TypeError/ValueError: as :func:`attention_graph`; ValueError also when
            ``symmetric=True`` but ``scores`` is not symmetric (the message gives the
            largest ``|S - S^T|``).
    """
    s = _square(scores, "scores", "score")
    tokens = _tokens(tokens, s.shape[0])
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
        ValueError: ``k`` is not a positive int.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    edges = [(i, j, float(v)) for i, j, v in graph.edges(data=attr) if v is not None]
    return sorted(edges, key=lambda e: (-e[2], e[0], e[1]))[:k]


def in_weight(graph, *, share: bool = False) -> dict[int, float]:
    """Total attention each token receives: the weighted in-degree (a column sum of ``A``).

    With ``share=True`` it is divided by the number of nodes: since every query hands out
    exactly 1, this is the fraction of all attention that lands on the token.

    Shapes:
        a weight graph on ``T`` nodes; returns ``{node: float}`` with ``T`` entries (summing to
        ``T``, or to 1 with ``share=True``, when every row of ``A`` sums to 1).
    """
    n = graph.number_of_nodes()
    return {node: value / (n if share else 1) for node, value in graph.in_degree(weight="weight")}


def received_attention(weights) -> torch.Tensor:
    """Share of all attention each key receives: column means of ``weights``.

    The tensor form of ``in_weight(attention_graph(w, tokens), share=True)``, for many heads at once.

    Shapes:
        weights: ``(..., T_q, T_k)``, e.g. ``(L, H, T, T)``; result ``(..., T_k)``, summing to 1.
    """
    w = as_tensor(weights, "weights")
    if w.dim() < 2 or not w.is_floating_point():
        raise ValueError(f"weights must be a float tensor (..., T_q, T_k), got {tuple(w.shape)} {w.dtype}")
    return w.mean(dim=-2)  # (..., T_k)


def is_dag_without_self_loops(graph) -> bool:
    """True when ``graph`` has no directed cycle apart from self-loops, as for a causally
    masked head (every edge ``i -> j`` has ``j <= i``).  Uses
    ``networkx.is_directed_acyclic_graph`` on a copy without the self-loops.

    Shapes:
        any directed graph; the input is not modified.
    """
    core = nx.DiGraph(graph)
    core.remove_edges_from(list(nx.selfloop_edges(core)))
    return nx.is_directed_acyclic_graph(core)


def stationary_distribution(weights) -> torch.Tensor:
    """The stationary distribution ``pi`` of the Markov chain with transition matrix ``weights``:
    ``pi A = pi``, ``sum(pi) = 1``.  It is unique when the graph has exactly one attracting
    component (``networkx.number_attracting_components``), e.g. when all weights are positive.

    Shapes:
        weights: ``(T, T)``, rows summing to 1; result ``(T,)`` (float64, CPU).

    Raises:
        ValueError: rows do not sum to 1, or the chain has several attracting components.
    """
    w = _square(weights, "weights")
    if (w.sum(-1) - 1).abs().max() > 1e-4:
        raise ValueError("weights must be row-stochastic (every row sums to 1)")
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
    """
    nodes = sorted(graph.nodes)
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
        ValueError: inputs not 2-D, shapes that do not fit, node set not ``0..T-1``, or a
            node without neighbours (its softmax would be over nothing).
    """
    q, k, v = check_qkv(q, k, v)
    T = q.shape[0]
    if q.dim() != 2 or k.shape[0] != T or sorted(graph.nodes) != list(range(T)):
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
        mats = [as_tensor(m, "layer_weights[l]") for m in layer_weights]
        if not mats or len({tuple(m.shape) for m in mats}) != 1:
            raise ValueError(f"layer_weights must be L >= 1 matrices of one shape (T, T), got shapes {[tuple(m.shape) for m in mats]}")
        w = torch.stack(mats)
    else:
        w = as_tensor(layer_weights, "layer_weights")
    if w.dim() != 3 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"layer_weights must be (L, T, T), one head-averaged matrix per layer, got {tuple(w.shape)}; "
                         "for (L, H, T, T) average the heads first: weights.mean(1)")
    if not w.is_floating_point():
        raise TypeError(f"layer_weights must be floating point, got dtype {w.dtype}")
    if (w < 0).any() or not torch.isfinite(w).all():
        raise ValueError("layer_weights must be finite and non-negative (post-softmax weights)")
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
        ValueError: not ``(L, T, T)``, negative/non-finite weights, residual outside [0, 1].
    """
    w = _layers(layer_weights)
    if isinstance(residual, bool) or not isinstance(residual, (int, float)) or not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must be in [0, 1], got {residual!r}")
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    a_hat = residual * eye + (1 - residual) * w  # (L, T, T)
    a_hat = a_hat / a_hat.sum(-1, keepdim=True)
    steps, rolled = [], eye
    for layer in a_hat:
        rolled = layer @ rolled  # later layers multiply on the left
        steps.append(rolled)
    return torch.stack(steps) if cumulative else rolled


def layered_graph(layer_weights, tokens, *, residual: float = 0.5, threshold: float = 0.0) -> nx.DiGraph:
    """Layers of attention as one DAG: node ``(l, i)`` is token ``i`` after layer ``l``
    (``l = 0`` is the input); edge ``(l, i) -> (l - 1, j)`` has weight ``Â_l[i, j]`` (as in
    :func:`attention_rollout`).  Edges below ``threshold`` are dropped.

    Shapes:
        layer_weights: ``(L, T, T)``; ``len(tokens) == T``; ``(L + 1) * T`` nodes.
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
        networkx.NodeNotFound: ``source`` or ``target`` is not a node.
    """
    return sum(math.prod(graph.edges[u, v]["weight"] for u, v in pairwise(path))
               for path in nx.all_simple_paths(graph, source, target))
