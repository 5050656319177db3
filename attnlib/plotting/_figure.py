"""The one figure helper of :mod:`attnlib.plotting`, the book's figure style, and the conversion
every drawing uses.

Every figure function takes an optional ``ax``: given one, it draws there (in a figure the
caller laid out); without one it asks :func:`figure` for a new figure.

Figures are designed for the page they sit on.  The book's text column is
:data:`COLUMN_PX` CSS pixels wide at a 1280 px window (measured in Chromium on the built
page), and figures are drawn at :data:`DPI` dots per inch, so a figure at most
:data:`COLUMN_WIDTH` inches wide is shown at its natural size (one image pixel per CSS pixel,
never shrunk).  At that scale a font size of :data:`MIN_FONT_PT` points is
``MIN_FONT_PT * DPI / 72`` = 11.1 px on screen.  :func:`book_style` sets these sizes and, in a
notebook, renders every figure through :func:`render_png`, which raises any smaller text to
the minimum and writes the smallest text size into the PNG (text chunk
:data:`MIN_TEXT_KEY`), where the book's tests read it.  "Text size" is that of the smallest
letter or digit drawn: mathtext draws sub- and superscripts (``$d_k$``, the ``$10^{-1}$`` tick
labels of a log axis) at 0.7 of the font size, so such a text needs a font of 8 / 0.7 pt.
"""
from __future__ import annotations

import functools
import io
import math
import numbers

import matplotlib
import matplotlib.axes
import matplotlib.figure
import matplotlib.pyplot as plt
import matplotlib.text
import numpy as np
from matplotlib import cbook
from matplotlib.font_manager import FontProperties
from matplotlib.mathtext import MathTextParser
import torch

from .. import _validate

__all__ = ["COLUMN_PX", "COLUMN_WIDTH", "DPI", "MIN_FONT_PT", "MIN_TEXT_KEY", "BOOK_RC", "book_style", "figure",
           "panels", "render_png", "min_text_size", "text_size", "to_numpy"]

COLUMN_PX = 672        # CSS px: widest a figure image is shown on a chapter page at a 1280 px window (Chromium)
DPI = 100              # image pixels per inch of every book figure
COLUMN_WIDTH = 6.6     # inches: COLUMN_PX at DPI, less a margin for the bounding box padding
MIN_FONT_PT = 8.0      # points: 8 pt at 100 dpi = 11.1 px, above the 10 px floor on screen
MIN_TEXT_KEY = "attnlib:min-text-px"   # PNG text chunk: smallest text in image pixels
_MATH = MathTextParser("path")

#: matplotlib settings of every book figure (:func:`book_style` applies them).
BOOK_RC = {
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 9.0,
    "xtick.labelsize": MIN_FONT_PT,
    "ytick.labelsize": MIN_FONT_PT,
    "legend.fontsize": MIN_FONT_PT,
    "legend.title_fontsize": 9.0,
    "figure.titlesize": 10.0,
    "figure.labelsize": 9.0,
    "mathtext.fontset": "dejavusans",   # $\sqrt{d_k}$, $W_Q$ typeset in the sans face of the text
    "figure.constrained_layout.use": True,
}


def figure(ax=None, *, size=None, nrows: int = 1, ncols: int = 1, **subplots_kw):
    """``(fig, ax)`` to draw on: ``ax`` and its figure when ``ax`` is given, otherwise a new
    figure of ``size`` inches (default: the column width, 3:5 high) with ``constrained_layout``
    and an ``nrows x ncols`` grid of axes (``ax`` is then what ``plt.subplots`` returns for
    that grid: one Axes, or an array of them; pass ``squeeze=False`` for always an array).
    A width above :data:`COLUMN_WIDTH` is reduced to it (the page would shrink the image).

    Raises:
        TypeError: ``ax`` is not a matplotlib Axes; ``size`` is not two numbers.
        ValueError: ``ax`` is given together with a grid of several axes; a size that is not
            positive.
    """
    if ax is not None:
        if not isinstance(ax, matplotlib.axes.Axes):
            raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
        if nrows * ncols != 1:
            raise ValueError(f"ax is one Axes; a {nrows} x {ncols} grid needs a new figure (ax=None)")
        return ax.figure, ax
    if size is None:
        size = (COLUMN_WIDTH, 0.6 * COLUMN_WIDTH)
    if (not isinstance(size, (tuple, list)) or len(size) != 2
            or not all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in size)):
        raise TypeError(f"size must be (width, height) in inches, got {size!r}")
    if not all(np.isfinite(x) and x > 0 for x in size):
        raise ValueError(f"size must be positive (width, height) in inches, got {size!r}")
    subplots_kw.setdefault("constrained_layout", True)
    size = (min(float(size[0]), COLUMN_WIDTH), float(size[1]))
    return plt.subplots(nrows, ncols, figsize=size, **subplots_kw)


def panels(n: int, *, ncols: int = 2, panel_height: float = 3.0, **subplots_kw):
    """``(fig, axes)``: ``n`` panels, ``ncols`` per row, in a figure one column wide
    (:data:`COLUMN_WIDTH`) and ``panel_height`` inches per row; ``axes`` is a flat array of
    ``n`` Axes (unused cells of the last row are removed).

    Raises:
        TypeError: ``n`` or ``ncols`` not an int, ``panel_height`` not a number.
        ValueError: ``n`` or ``ncols`` below 1, or ``panel_height`` not positive.
    """
    n = _validate.positive_int(n, "n")
    ncols = _validate.positive_int(ncols, "ncols")
    panel_height = _validate.real(panel_height, "panel_height", low=0.0, low_open=True)
    ncols = min(ncols, n)
    nrows = -(-n // ncols)
    fig, axes = figure(size=(COLUMN_WIDTH, panel_height * nrows), nrows=nrows, ncols=ncols, squeeze=False,
                       **subplots_kw)
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def _texts(fig) -> list[matplotlib.text.Text]:
    """Every visible, non-empty text of ``fig`` (titles, labels, tick labels, annotations,
    legends, colour bars) as last drawn."""
    return [t for t in fig.findobj(matplotlib.text.Text)
            if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())]


@functools.lru_cache(maxsize=4096)
def _script_ratio(s: str) -> float:
    """Smallest letter or digit of the mathtext string ``s`` relative to its font size: 1 for
    plain maths, 0.7 (mathtext's script size) with a sub- or superscript (``$d_k$``,
    ``$10^{-1}$``)."""
    try:
        glyphs = _MATH.parse(s, dpi=72, prop=FontProperties(size=10.0)).glyphs
    except ValueError:  # not valid mathtext: drawn as written (or refused at draw time)
        return 1.0
    sizes = [g[1] for g in glyphs if chr(g[2]).isalnum()]   # (font, fontsize, char code, x, y, ...)
    return min(sizes, default=10.0) / 10.0


def text_size(t: matplotlib.text.Text) -> float:
    """The size in points of the smallest letter or digit that ``t`` draws: its font size,
    times 0.7 where mathtext draws a sub- or superscript."""
    s = t.get_text()
    if t.get_usetex() or not t.get_parse_math():
        return t.get_fontsize()
    # line by line, as matplotlib lays a text out: mathtext has no line breaks, and parsing a
    # wrapped title whole logged "Font 'default' does not have a glyph for '\n'" into the page
    ratios = [_script_ratio(line) for line in s.split("\n") if cbook.is_math_text(line)]
    return t.get_fontsize() * min(ratios, default=1.0)


def min_text_size(fig) -> float:
    """Smallest text in points among the visible texts of ``fig`` (see :func:`text_size`;
    the figure is drawn first, so that tick labels exist); ``inf`` for a figure without text."""
    fig.canvas.draw()
    return min((text_size(t) for t in _texts(fig)), default=float("inf"))


def _raise_small_text(fig, minimum: float) -> None:
    """Raise every text whose smallest letter is below ``minimum`` points until it is not:
    tick labels through their Axes' ``tick_params`` (ticks are re-created on each draw),
    every other text directly."""
    fig.canvas.draw()
    for t in _texts(fig):
        size = text_size(t)
        if size >= minimum:
            continue
        new = math.ceil(10 * t.get_fontsize() * minimum / size) / 10
        ax = t.axes
        if ax is not None and t in ax.xaxis.get_ticklabels(which="both"):
            ax.tick_params(axis="x", which="both", labelsize=new)
        elif ax is not None and t in ax.yaxis.get_ticklabels(which="both"):
            ax.tick_params(axis="y", which="both", labelsize=new)
        t.set_fontsize(new)


def render_png(fig, *, minimum: float = MIN_FONT_PT, dpi: float = DPI, meta: dict[str, str] | None = None) -> bytes:
    """PNG bytes of ``fig`` at ``dpi``, every text at least ``minimum`` points (smaller text
    is raised to it), cropped to its drawn content; the PNG carries the smallest text size in
    image pixels under the text key :data:`MIN_TEXT_KEY` (read it back with
    ``PIL.Image.open(...).text``), its ``dpi`` (pHYs chunk) and the text chunks in ``meta``.

    Raises:
        ValueError: ``minimum`` or ``dpi`` is not positive.
    """
    if not (minimum > 0 and dpi > 0):
        raise ValueError(f"minimum and dpi must be positive, got minimum={minimum!r}, dpi={dpi!r}")
    _raise_small_text(fig, minimum)
    smallest = min_text_size(fig)
    smallest_px = "none" if smallest == float("inf") else f"{smallest * dpi / 72:.2f}"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.04,
                facecolor=fig.get_facecolor(), metadata={**(meta or {}), MIN_TEXT_KEY: smallest_px})
    return buf.getvalue()


def colormap(cmap, name: str = "cmap") -> matplotlib.colors.Colormap:
    """``cmap`` as a matplotlib colormap: a registered name such as ``"viridis"``, or a
    ``Colormap``.

    Raises:
        TypeError: neither a str nor a ``Colormap``.
        ValueError: a name matplotlib does not know (the message suggests close names).
    """
    if isinstance(cmap, matplotlib.colors.Colormap):
        return cmap
    if not isinstance(cmap, str):
        raise TypeError(f"{name} must be a matplotlib colormap name such as 'viridis' or a Colormap, "
                        f"got {type(cmap).__name__} {cmap!r}")
    if cmap not in matplotlib.colormaps:
        import difflib
        close = difflib.get_close_matches(cmap, list(matplotlib.colormaps), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"{name} {cmap!r} is not a matplotlib colormap (e.g. 'viridis', 'magma', 'coolwarm'){hint}")
    return matplotlib.colormaps[cmap]


def labels(tokens, name: str = "labels") -> list:
    """``tokens`` as a list (of anything printable), for tick labels.

    Raises:
        TypeError: ``tokens`` is None, one str, or has no length.
    """
    if tokens is None or isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__") \
            or not hasattr(tokens, "__iter__"):
        raise TypeError(f"{name} must be a list of labels, one per position, got {type(tokens).__name__}"
                        + (" (wrap a single label in a list)" if isinstance(tokens, str) else ""))
    return list(tokens)


def to_numpy(x) -> np.ndarray:
    """Tensor (any device/dtype) or array-like of numbers -> float64 numpy array, for drawing
    only.

    Raises:
        TypeError: ``x`` is None, a str, or holds something that is not a number.
        ValueError: ``x`` is a meta tensor (a shape without values).
    """
    if isinstance(x, torch.Tensor):
        _validate.has_values(x, "the data to draw", "the plotting helper")
        if x.is_complex():
            raise TypeError(f"expected real numbers to draw, got a tensor of dtype {x.dtype}")
        return x.detach().to("cpu", torch.float64).numpy()
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"expected a tensor or an array of numbers, got {type(x).__name__}")
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"expected a tensor or an array of numbers, got {type(x).__name__}: {err}") from None
