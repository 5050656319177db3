"""Pictures of attention as a weighted average of 2-D value vectors (chapter 1).

Plotting only draws: the hull comes from :mod:`attnlib.geometry`, the weights and the
averaged point are computed by the caller.  Every function returns a
``matplotlib.figure.Figure``.
"""
from __future__ import annotations

import matplotlib
import numpy as np

from ..geometry import convex_hull_2d
from ._figure import MIN_FONT_PT, colormap, figure, labels as _labels, to_numpy

__all__ = ["hull_plot", "weights_bar"]


def hull_plot(
    values, labels, weights=None, out=None, *, ax=None, title: str | None = None,
    cmap: str = "viridis", colorbar: bool = True, xlabel: str = "PC 1", ylabel: str = "PC 2",
    fontsize: float = MIN_FONT_PT,
):
    """2-D value vectors, their convex hull (shaded), and optionally the attention weights
    (point colours) and the averaged output (a red star).

    Shapes:
        values: ``(T_k, 2)``; ``len(labels) == T_k``; weights: ``(T_k,)`` or None;
        out: ``(2,)`` or None.

    Raises:
        TypeError: ``values``/``weights``/``out`` not numbers; ``labels`` not a list; ``cmap``
            not a colormap name or Colormap.
        ValueError: ``values`` is not ``(T_k, 2)``, or labels/weights do not have ``T_k``
            entries, or ``out`` is not a 2-vector; a meta tensor; ``cmap`` names no colormap.
    """
    v = to_numpy(values)
    labels = _labels(labels, "labels")
    colormap(cmap)
    if v.ndim != 2 or v.shape[1] != 2:
        raise ValueError(f"values must be (T_k, 2) for a 2-D picture, got shape {v.shape}")
    if len(labels) != v.shape[0]:
        raise ValueError(f"got {len(labels)} labels for {v.shape[0]} value vectors")
    w = None if weights is None else to_numpy(weights).reshape(-1)
    if w is not None and w.shape[0] != v.shape[0]:
        raise ValueError(f"weights must have T_k = {v.shape[0]} entries, got shape {w.shape}")
    p = None if out is None else to_numpy(out).reshape(-1)
    if p is not None and p.shape[0] != 2:
        raise ValueError(f"out must be a 2-vector, got shape {p.shape}")
    fig, ax = figure(ax, size=(5.2, 4.2))
    hull = convex_hull_2d(v).numpy()
    poly = v[hull]
    ax.fill(poly[:, 0], poly[:, 1], color="#cfd8dc", alpha=0.6, zorder=0, label="convex hull")
    ax.plot(np.r_[poly[:, 0], poly[:1, 0]], np.r_[poly[:, 1], poly[:1, 1]], color="#607d8b", lw=1, zorder=1)
    if w is None:
        ax.scatter(v[:, 0], v[:, 1], s=28, color="#37474f", zorder=2)
    else:
        sc = ax.scatter(v[:, 0], v[:, 1], c=w, cmap=colormap(cmap), vmin=0.0, vmax=1.0,
                        s=30 + 220 * w, edgecolors="black", linewidths=0.5, zorder=2)
        if colorbar:
            fig.colorbar(sc, ax=ax, label="attention weight", shrink=0.85)
    for (x, y), text in zip(v, labels):
        ax.annotate(str(text), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=fontsize)
    if p is not None:
        ax.scatter([p[0]], [p[1]], marker="*", s=260, color="#d62728", edgecolors="white",
                   linewidths=0.8, zorder=3, label="weighted average")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=fontsize,
                  frameon=False)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_aspect("equal", adjustable="datalim")
    if title:
        ax.set_title(title, fontsize=fontsize + 2)
    return fig


def weights_bar(weights, labels, *, ax=None, title: str | None = None, cmap: str = "viridis"):
    """Bar chart of one row of attention weights, bars coloured by weight (0 to 1).

    Shapes:
        weights: ``(T_k,)``; ``len(labels) == T_k``.

    Raises:
        TypeError: ``weights`` not numbers; ``labels`` not a list; ``cmap`` not a colormap
            name or Colormap.
        ValueError: ``weights`` is not 1-D with ``len(labels)`` entries, or is a meta tensor;
            ``cmap`` names no colormap.
    """
    w = to_numpy(weights)
    labels = _labels(labels, "labels")
    cm = colormap(cmap)
    if w.ndim != 1 or w.shape[0] != len(labels):
        raise ValueError(f"weights must be (T_k,) with T_k = {len(labels)}, got shape {w.shape}")
    fig, ax = figure(ax, size=(4.0, 2.6))
    colors = cm(np.clip(w, 0.0, 1.0))
    ax.bar(range(len(w)), w, color=colors, edgecolor="black", linewidth=0.5)
    ax.set_xticks(range(len(w)), [str(t) for t in labels], rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("weight")
    for i, x in enumerate(w):
        ax.text(i, x + 0.02, f"{x:.2f}", ha="center", va="bottom", fontsize=MIN_FONT_PT)
    if title:
        ax.set_title(title)
    return fig
