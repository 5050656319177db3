"""Figures for reading a pretrained encoder's heads (chapter 9): one head, all heads of a layer,
per-head tables (layer x head) and per-layer curves.  Drawing only: every number shown is
computed by :mod:`attnlib.measures`, the encoder's reader or the caller.  Every function
returns a ``matplotlib.figure.Figure``.
"""
from __future__ import annotations

import math

import matplotlib

from .. import _validate
from ._figure import COLUMN_WIDTH, MIN_FONT_PT, colormap, figure, labels as _labels, to_numpy
from .heatmaps import attention_heatmap

__all__ = ["head_heatmap", "layer_grid", "head_table", "layer_curves"]


def _check_att(att) -> None:
    if not all(hasattr(att, a) for a in ("attentions", "tokens", "n_layers", "n_heads", "head")):
        raise TypeError(f"att must be an EncoderAttention from attnlib.encoder.get_attentions, got {type(att).__name__}")


def head_heatmap(att, layer: int, head: int, *, ax=None, title: str | None = None, **kwargs):
    """Labelled heatmap of one head's weights (rows = queries, columns = keys) of an
    :class:`attnlib.encoder.EncoderAttention`; other keywords go to
    :func:`attnlib.plotting.attention_heatmap`.  ``att`` is what :func:`attnlib.encoder.get_attentions`
    returns.

    Shapes:
        draws ``att.head(layer, head)``, ``(T_q, T_k)``.

    Raises:
        TypeError: ``att`` is not an EncoderAttention.
        IndexError: ``layer`` or ``head`` out of range.
    """
    _check_att(att)
    weights = att.head(layer, head)
    if title is None:
        layer, head = _validate.index(layer, att.n_layers, "layer"), _validate.index(head, att.n_heads, "head")
        title = f"layer {layer}, head {head}: attention weights"
    kwargs.setdefault("vmin", 0.0)
    kwargs.setdefault("vmax", 1.0)
    return attention_heatmap(weights, att.tokens, ax=ax, title=title, **kwargs)


def layer_grid(att, layer: int, *, ncols: int = 3, cmap: str = "viridis", panel_height: float | None = None,
               title: str | None = None):
    """All ``H`` heads of one layer on a shared 0..1 colour scale, ``ncols`` per row in a
    figure one column wide (:data:`attnlib.plotting.COLUMN_WIDTH`), with token labels on the
    outer axes and one colour bar.  Every label keeps the book's minimum size (8 pt), so the
    panels are made tall enough for one token label per row.

    Shapes:
        draws ``att.attentions[layer][0]``, ``(H, T_q, T_k)``.

    Raises:
        TypeError: ``att`` is not an EncoderAttention; ``layer`` or ``ncols`` is not an int;
            ``cmap`` not a colormap name or Colormap.
        IndexError: ``layer`` out of range.  ValueError: ``ncols < 1``; ``cmap`` names no colormap.
    """
    _check_att(att)
    cm = colormap(cmap)
    layer = _validate.index(layer, att.n_layers, "layer")
    ncols = _validate.positive_int(ncols, "ncols")
    weights = to_numpy(att.attentions[layer][0])  # (H, T, T)
    n_heads, n_tokens = weights.shape[0], weights.shape[-1]
    nrows = math.ceil(n_heads / ncols)
    if panel_height is None:  # one 8 pt label (~0.15 in with spacing) per token row, at least 1.6 in
        panel_height = max(1.6, 0.15 * n_tokens + 0.3)
    fig, axes = figure(size=(COLUMN_WIDTH, panel_height * nrows + 1.3), nrows=nrows, ncols=ncols, squeeze=False)
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[h], cmap=cm, vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {h}")
        row, col = divmod(h, ncols)
        ax.set_yticks(range(n_tokens), att.tokens if col == 0 else [], fontsize=MIN_FONT_PT)
        last_row = row == nrows - 1 or h + ncols >= n_heads
        ax.set_xticks(range(n_tokens), att.tokens if last_row else [], fontsize=MIN_FONT_PT, rotation=90)
    fig.colorbar(image, ax=axes, label="attention weight", shrink=0.6)
    fig.supylabel("query")
    fig.supxlabel("key")
    fig.suptitle(title or f"layer {layer}: every head's attention weights")
    return fig


def head_table(values, *, title: str, colorbar_label: str, ax=None, cmap: str = "magma",
               vmin=0.0, vmax=1.0, fmt: str = "{:.2f}"):
    """Heatmap of one number per head, rows = layers and columns = heads (e.g. the share of
    attention going to [CLS]), each cell annotated.

    Shapes:
        values: ``(n_layers, H)``.

    Raises:
        TypeError: ``values`` not numbers; ``cmap`` not a colormap name or Colormap.
        ValueError: ``values`` is not 2-D or is a meta tensor; ``cmap`` names no colormap.
    """
    colormap(cmap)
    table = to_numpy(values)
    if table.ndim != 2:
        raise ValueError(f"head_table expects an (n_layers, H) table, got shape {table.shape}")
    rows = [f"layer {i}" for i in range(table.shape[0])]
    cols = [f"head {j}" for j in range(table.shape[1])]
    _, ax = figure(ax, size=(0.55 * table.shape[1] + 2.2, 0.42 * table.shape[0] + 1.3))
    return attention_heatmap(table, rows, cols, ax=ax, title=title, cmap=cmap, vmin=vmin, vmax=vmax,
                             annotate=True, fmt=fmt, colorbar_label=colorbar_label,
                             xlabel="head", ylabel="layer")


def layer_curves(values, labels, *, ylabel: str, title: str, xlabel: str = "layer", ax=None):
    """One line per series across layers (e.g. cosine similarity of two word vectors after
    each layer), with markers and a legend.

    Shapes:
        values: ``(n_points, n_series)``; ``len(labels) == n_series``.

    Raises:
        TypeError: ``values`` not numbers; ``labels`` not a list.
        ValueError: ``values`` is not 2-D (or a meta tensor) or the label count differs from
            its columns.
    """
    table = to_numpy(values)
    labels = _labels(labels, "labels")
    if table.ndim != 2 or table.shape[1] != len(labels):
        raise ValueError(f"expected (n_points, {len(labels)}) values for {len(labels)} labels, got {table.shape}")
    fig, ax = figure(ax, size=(COLUMN_WIDTH, 3.6))
    colours = matplotlib.colormaps["viridis"]
    for s, label in enumerate(labels):
        ax.plot(range(table.shape[0]), table[:, s], marker="o", label=str(label),
                color=colours(s / max(1, len(labels) - 1) * 0.9))
    ax.set_xticks(range(table.shape[0]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return fig
