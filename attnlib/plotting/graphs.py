"""Drawings of attention graphs (chapter 8).  Nothing here computes attention or graph
quantities: the graphs come from :mod:`attnlib.graphs`, and these functions only map the
numbers already stored on their edges to width, transparency and colour.  Each returns a
``matplotlib.figure.Figure``.
"""
from __future__ import annotations

import matplotlib
import networkx as nx
import numpy as np

from ._figure import COLUMN_WIDTH, MIN_FONT_PT, colormap, figure

__all__ = ["draw_attention_graph", "draw_layered_graph"]


def _edge_style(values, vmin, vmax, cmap, max_width):
    """Map edge values to (norm, widths, alphas, colours); larger value = wider, more opaque."""
    values = np.asarray(values, dtype=np.float64)
    lo = float(values.min()) if vmin is None else vmin
    hi = float(values.max()) if vmax is None else vmax
    norm = matplotlib.colors.Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1e-12)
    scaled = np.clip(norm(values), 0.0, 1.0)
    colours = colormap(cmap)(scaled)
    return norm, 0.4 + max_width * scaled, 0.25 + 0.75 * scaled, colours


def _colorbar(fig, ax, norm, cmap, label):
    mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(mappable, ax=ax, label=label, shrink=0.8, pad=0.01)


def draw_attention_graph(
    graph, *, ax=None, title: str | None = None, attr: str | None = None, node_values=None,
    cmap: str = "viridis", vmin=None, vmax=None, colorbar_label: str | None = None,
    max_width: float = 4.0, rad: float = 0.5,
):
    """Node-link drawing of a graph from :func:`attnlib.graphs.attention_graph` or :func:`attnlib.graphs.score_graph`.

    Tokens sit on a line in reading order.  Each edge is an arc: in a directed graph, edges
    that point back to an earlier token bend above the line, edges to a later token bend
    below, and self-loops are small loops on the node.  Width, opacity and colour grow with
    the edge value (``attr``: ``"weight"`` for weight graphs, ``"score"`` for score graphs).
    ``node_values`` (a dict node -> value, e.g. from :func:`attnlib.graphs.in_weight`) sets the area
    of the disc behind each token.

    Returns:
        the ``matplotlib.figure.Figure`` (the one holding ``ax`` when ``ax`` is given).

    Raises:
        TypeError: ``graph`` is not a networkx graph; ``cmap`` not a colormap name or Colormap;
            ``node_values`` not a dict.
        ValueError: the graph has no edges to draw, or nodes are not ``0..T-1``; ``cmap``
            names no colormap.
    """
    colormap(cmap)
    if not isinstance(graph, nx.Graph):
        raise TypeError(f"graph must be a networkx graph from attnlib.graphs.attention_graph or score_graph, "
                        f"got {type(graph).__name__}")
    attr = attr or ("score" if graph.graph.get("kind") == "scores" else "weight")
    nodes = sorted(graph.nodes)
    if nodes != list(range(len(nodes))):
        raise ValueError("draw_attention_graph expects nodes 0..T-1 (token positions)")
    edges = sorted(graph.edges(data=attr), key=lambda e: e[2])  # weakest first, strongest on top
    if not edges:
        raise ValueError("the graph has no edges to draw (threshold too high?)")
    T = len(nodes)
    directed = graph.is_directed()
    if not directed:  # orient every undirected edge right-to-left so that all arcs rise
        edges = [(max(i, j), min(i, j), v) for i, j, v in edges]
    # arcs to earlier tokens rise above the line, to later tokens dip below; an arc spanning
    # d positions reaches rad * d / 2 (equal aspect keeps arcs round); undirected arcs rise
    back = max([i - j for i, j, _ in edges if j < i] + [1])
    fwd = max([j - i for i, j, _ in edges if j > i and directed] + [0])
    up, down = rad * back / 2 + 0.8, rad * fwd / 2 + 0.6
    width = min(COLUMN_WIDTH, max(6.0, 0.75 * T + 1.5))
    height = (width - 1.5) * (up + down) / (T + 0.6) + 0.8
    fig, ax = figure(ax, size=(width, max(2.2, height)))
    pos = {i: (float(i), 0.0) for i in nodes}
    if attr == "weight":  # weights are probabilities: the colour scale is 0..1, as in the explorable
        vmin = 0.0 if vmin is None else vmin
        vmax = 1.0 if vmax is None else vmax
    norm, widths, alphas, colours = _edge_style([e[2] for e in edges], vmin, vmax, cmap, max_width)
    nx.draw_networkx_edges(
        graph, pos, edgelist=[(i, j) for i, j, _ in edges], width=widths, edge_color=colours,
        alpha=alphas, ax=ax, arrows=True, arrowstyle="-|>" if directed else "-", arrowsize=9,
        connectionstyle=f"arc3,rad={rad}", node_size=520, min_target_margin=6,
    )
    sizes = 520
    if node_values is not None:
        if not isinstance(node_values, dict):
            raise TypeError(f"node_values must be a dict {{node: value}} (e.g. attnlib.graphs.in_weight(graph)), "
                            f"got {type(node_values).__name__}")
        vals = np.array([float(node_values.get(i, 0.0)) for i in nodes])
        sizes = 120 + 2400 * vals / max(vals.max(), 1e-12)
    nx.draw_networkx_nodes(graph, pos, nodelist=nodes, node_size=sizes, node_color="#f4a261",
                           alpha=0.55, linewidths=0.8, edgecolors="#7a4419", ax=ax)
    for i in nodes:
        ax.text(i, 0.0, graph.nodes[i].get("token", str(i)), ha="center", va="center", fontsize=MIN_FONT_PT,
                zorder=5, bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.75})
    ax.set_xlim(-0.8, T - 0.2)
    ax.set_ylim(-down, up)
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    _colorbar(fig, ax, norm, cmap, colorbar_label or f"edge {attr}")
    return fig


def draw_layered_graph(
    graph, *, ax=None, title: str | None = None, cmap: str = "viridis", max_width: float = 3.0,
    colorbar_label: str = "edge weight (attention with residual)",
):
    """Layered drawing of a graph from :func:`attnlib.graphs.layered_graph`: one row of tokens per
    layer (input at the bottom), an edge from each token to the tokens it reads from in the
    layer below, width/opacity/colour by weight.  Following edges downward from a top node
    traces the paths whose weight products attention rollout adds up.

    Returns:
        the ``matplotlib.figure.Figure`` (the one holding ``ax`` when ``ax`` is given).

    Raises:
        TypeError: ``cmap`` not a colormap name or Colormap.
        ValueError: the graph is not a layered graph (nodes ``(layer, position)``) or has no
            edges; ``cmap`` names no colormap.
    """
    colormap(cmap)
    if not isinstance(graph, nx.Graph) or graph.graph.get("kind") != "layered":
        raise ValueError("draw_layered_graph expects a graph from attnlib.graphs.layered_graph")
    edges = sorted(graph.edges(data="weight"), key=lambda e: e[2])
    if not edges:
        raise ValueError("the graph has no edges to draw (threshold too high?)")
    n_layers = graph.graph["n_layers"]
    T = 1 + max(position for _, position in graph.nodes)
    fig, ax = figure(ax, size=(COLUMN_WIDTH, 1.0 + 1.05 * (n_layers + 1)))
    pos = {node: (float(node[1]), float(node[0])) for node in graph.nodes}
    norm, widths, alphas, colours = _edge_style([e[2] for e in edges], 0.0, None, cmap, max_width)
    nx.draw_networkx_edges(graph, pos, edgelist=[(u, v) for u, v, _ in edges], width=widths,
                           edge_color=colours, alpha=alphas, ax=ax, arrows=False, hide_ticks=False)
    nx.draw_networkx_nodes(graph, pos, node_size=60, node_color="#444444", ax=ax, hide_ticks=False)
    tokens = [graph.nodes[(0, i)]["token"] for i in range(T)]
    ax.set_xticks(range(T), tokens, rotation=45, ha="right")
    ax.set_yticks(range(n_layers + 1), ["input"] + [f"after layer {layer}" for layer in range(n_layers)])
    ax.tick_params(left=True, bottom=True, labelleft=True, labelbottom=True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_xlim(-0.6, T - 0.4)
    ax.set_ylim(-0.4, n_layers + 0.4)
    if title:
        ax.set_title(title)
    _colorbar(fig, ax, norm, cmap, colorbar_label)
    return fig
