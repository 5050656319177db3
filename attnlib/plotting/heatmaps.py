"""Labelled heatmaps of weight and score matrices (chapters 1-9).  Plotting never computes
attention; it only draws what the maths modules return.  Every function returns a
``matplotlib.figure.Figure``.
"""
from __future__ import annotations

import matplotlib
import numpy as np

from .. import _validate
from ._figure import MIN_FONT_PT, colormap, figure, labels, to_numpy

__all__ = ["attention_heatmap"]


def attention_heatmap(
    matrix, row_tokens, col_tokens=None, *, ax=None, title: str | None = None,
    cmap: str = "viridis", vmin=None, vmax=None, annotate: bool | None = None,
    fmt: str = "{:.2f}", colorbar_label: str = "attention weight",
    xlabel: str = "key", ylabel: str = "query",
):
    """Heatmap of a ``(T_q, T_k)`` matrix (weights or scores) with token labels.

    Rows are queries (``row_tokens``), columns are keys (``col_tokens``, default the same).
    ``-inf`` cells (masked scores) are drawn grey and labelled ``-inf`` (``inf`` and ``nan``
    cells are grey too, labelled as what they are).  ``annotate``
    (default: when the matrix is at most 12 x 12) writes each value in its cell.

    Shapes:
        matrix: ``(T_q, T_k)``; ``len(row_tokens) == T_q``, ``len(col_tokens) == T_k``.

    Raises:
        TypeError: ``matrix`` is not a tensor or array of numbers; ``ax`` is not an Axes;
            the tokens are not lists; ``cmap`` is not a colormap name or Colormap.
        ValueError: the matrix is not 2-D, is a meta tensor, or the label counts do not match
            its shape; ``cmap`` names no colormap.
    """
    m = to_numpy(matrix)
    row_tokens = labels(row_tokens, "row_tokens")
    col_tokens = row_tokens if col_tokens is None else labels(col_tokens, "col_tokens")
    base_cmap = colormap(cmap)
    if not isinstance(fmt, str):
        raise TypeError(f"fmt must be a format string such as '{{:.2f}}', got {type(fmt).__name__} {fmt!r}")
    for name, value in (("vmin", vmin), ("vmax", vmax)):
        if value is not None:
            _validate.real(value, name)
    if m.ndim != 2:
        raise ValueError(f"attention_heatmap expects a (T_q, T_k) matrix, got shape {m.shape}")
    if len(row_tokens) != m.shape[0] or len(col_tokens) != m.shape[1]:
        raise ValueError(
            f"labels do not match the matrix: {len(row_tokens)} row and {len(col_tokens)} column "
            f"labels for shape {m.shape}"
        )
    fig, ax = figure(ax, size=(max(3.0, 0.45 * m.shape[1] + 1.8), max(2.6, 0.4 * m.shape[0] + 1.2)))
    finite = np.isfinite(m)
    shown = np.ma.masked_where(~finite, m)
    cm = base_cmap.with_extremes(bad="#bdbdbd")
    im = ax.imshow(shown, cmap=cm, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(m.shape[1]), [str(t) for t in col_tokens], rotation=60, ha="right")
    ax.set_yticks(range(m.shape[0]), [str(t) for t in row_tokens])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    fig.colorbar(im, ax=ax, label=colorbar_label, shrink=0.85)
    if annotate is None:
        annotate = m.shape[0] <= 12 and m.shape[1] <= 12
    if annotate:
        lo, hi = im.get_clim()
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if not finite[i, j]:
                    ax.text(j, i, "nan" if np.isnan(m[i, j]) else "-inf" if m[i, j] < 0 else "inf", ha="center", va="center", fontsize=MIN_FONT_PT, color="black")
                    continue
                light = (m[i, j] - lo) / (hi - lo + 1e-12) > 0.6
                ax.text(j, i, fmt.format(m[i, j]), ha="center", va="center", fontsize=MIN_FONT_PT,
                        color="black" if light else "white")
    return fig
