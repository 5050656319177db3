"""Every matplotlib figure of the course, drawn through one figure helper
(:func:`attnlib.plotting.figure`, :func:`attnlib.plotting.panels`) for the book's column, in
the book's style (:func:`attnlib.plotting.book_style`: 100 dpi, no text under 8 pt, maths in
mathtext; :func:`attnlib.plotting.render_png` enforces the minimum and records it in the PNG;
:mod:`._variants` draws each figure again for the phone column and for zooming, in the book build).

Plotting only draws: the numbers come from the maths modules (:mod:`attnlib.geometry`,
:mod:`attnlib.graphs`, :mod:`attnlib.measures`, the encoder's reader) or the caller, and no
maths module imports plotting.  Every figure function takes an optional ``ax`` and returns the
``matplotlib.figure.Figure`` it drew in.

* :mod:`.heatmaps`: :func:`attention_heatmap`, a labelled matrix of weights or scores.
* :mod:`.hull`: :func:`hull_plot` and :func:`weights_bar`, attention as a weighted average (ch. 1).
* :mod:`.heads`: :func:`head_heatmap`, :func:`layer_grid`, :func:`head_table`,
  :func:`layer_curves`, a pretrained encoder's heads (ch. 9).
* :mod:`.graphs`: :func:`draw_attention_graph`, :func:`draw_layered_graph` (ch. 8).
"""
from ._figure import (
    BOOK_RC, COLUMN_PX, COLUMN_WIDTH, DPI, MIN_FONT_PT, MIN_TEXT_KEY, figure, min_text_size, panels,
    render_png, text_size, to_numpy,
)
from ._variants import (
    PHONE_DENSITY, PHONE_PX, PHONE_WIDTH, VARIANT_KEY, VARIANTS_ENV, ZOOM_DENSITY, book_style, figure_png, pack_variants,
    reflow_for_phone, render_variants, strip_variants, unpack_variants,
)
from .graphs import draw_attention_graph, draw_layered_graph
from .heads import head_heatmap, head_table, layer_curves, layer_grid
from .heatmaps import attention_heatmap
from .hull import hull_plot, weights_bar

__all__ = [
    "BOOK_RC", "COLUMN_PX", "COLUMN_WIDTH", "DPI", "MIN_FONT_PT", "MIN_TEXT_KEY", "book_style", "figure",
    "min_text_size", "panels", "render_png", "text_size", "to_numpy",
    "PHONE_DENSITY", "PHONE_PX", "PHONE_WIDTH", "VARIANT_KEY", "VARIANTS_ENV", "ZOOM_DENSITY", "figure_png",
    "pack_variants", "reflow_for_phone", "render_variants", "strip_variants", "unpack_variants",
    "attention_heatmap", "hull_plot", "weights_bar",
    "head_heatmap", "layer_grid", "head_table", "layer_curves",
    "draw_attention_graph", "draw_layered_graph",
]
