"""Every book figure in three renderings: the desktop column's, the phone column's, and a
sharper one to zoom into.

:func:`attnlib.plotting.render_png` draws a figure for the desktop column (:data:`DPI`,
shown at one image pixel per CSS pixel).  At a 390 px window the page shrinks that image to
about :data:`PHONE_PX` CSS px, and its text to about 6 px.  :func:`render_variants` therefore
also draws the *same* Figure again:

* ``phone``: a copy of the figure redrawn :data:`PHONE_WIDTH` inches wide (the font sizes
  kept, panels of a grid stacked in one column, the height allowed to grow;
  ``constrained_layout`` reflows it; see :func:`reflow_for_phone`) at
  :data:`PHONE_DENSITY` x :data:`DPI`, to be shown at :data:`PHONE_DENSITY` image px per CSS
  px, so that its text is as large on a phone as the desktop rendering's is on a desktop;
* ``zoom``: the desktop layout at :data:`ZOOM_DENSITY` x :data:`DPI`, the file a tap on the
  figure opens (sharp when pinch-zoomed).

Each rendering carries its own smallest-text chunk (:data:`MIN_TEXT_KEY`, in image px of
that file) and its name under :data:`VARIANT_KEY`.  In the book build (the environment
variable :data:`VARIANTS_ENV` is set by ``_ext/figure_zoom.py`` before the kernels start),
the notebook formatter returns the desktop PNG with the other two inside private PNG chunks
of type :data:`CHUNK_TYPE` (:func:`pack_variants`); browsers and Jupyter ignore them, so a
notebook still shows one ordinary figure.  The Sphinx extension takes them out
(:func:`unpack_variants`), writes them next to the desktop file and ships the desktop PNG
without them (:func:`strip_variants`).  Outside the book build (Binder, a local notebook)
the formatter draws the desktop rendering only.
"""
from __future__ import annotations

import base64
import functools
import os
import re
import struct
import zlib

import matplotlib
import matplotlib.axis
import matplotlib.colorbar
import matplotlib.figure
import matplotlib.text
import matplotlib.pyplot as plt
import matplotlib.ticker
from matplotlib.gridspec import GridSpec

from ._figure import BOOK_RC, COLUMN_WIDTH, DPI, MIN_FONT_PT, _texts, render_png

__all__ = ["PHONE_PX", "PHONE_WIDTH", "PHONE_DENSITY", "ZOOM_DENSITY", "VARIANT_KEY", "VARIANTS_ENV",
           "CHUNK_TYPE", "render_variants", "reflow_for_phone", "pack_variants", "unpack_variants",
           "strip_variants", "png_size", "variants_wanted", "figure_png"]

PHONE_PX = 342           # CSS px: width a figure is shown at in a 390 px window (Chromium, measured)
PHONE_WIDTH = 3.3        # inches at DPI: PHONE_PX less render_png's padding and a margin
PHONE_DENSITY = 2        # image px per CSS px of the phone rendering (sharp on 2x screens)
ZOOM_DENSITY = 3         # image px per CSS px of the zoom rendering (the desktop layout)
VARIANT_KEY = "attnlib:variant"            # PNG text chunk: "desktop", "phone" or "zoom"
VARIANTS_ENV = "ATTNLIB_FIGURE_VARIANTS"   # set (to "1") by the book build: draw all three
CHUNK_TYPE = b"atVr"     # private, ancillary, safe-to-copy PNG chunk: name, NUL, PNG bytes
_PNG = b"\x89PNG\r\n\x1a\n"
_NAMES = ("phone", "zoom")


# ------------------------------------------------------------------ PNG chunks (no decoding)
def _chunks(png: bytes):
    """``(type, data)`` of every chunk of ``png``, in order.

    Raises:
        ValueError: ``png`` is not a PNG file, or a chunk runs past its end.
    """
    if not png.startswith(_PNG):
        raise ValueError(f"not a PNG file (starts with {png[:8]!r})")
    pos = len(_PNG)
    while pos < len(png):
        if pos + 8 > len(png):
            raise ValueError(f"truncated PNG: chunk header at byte {pos} of {len(png)}")
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        end = pos + 12 + length
        if end > len(png):
            raise ValueError(f"truncated PNG: {kind!r} chunk of {length} bytes at byte {pos} of {len(png)}")
        yield kind, png[pos + 8:pos + 8 + length]
        pos = end


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_size(png: bytes) -> tuple[int, int]:
    """``(width, height)`` in image px of a PNG, read from its header.

    Raises:
        ValueError: ``png`` is not a PNG file.
    """
    kind, data = next(_chunks(png))
    if kind != b"IHDR":
        raise ValueError(f"PNG without IHDR first (found {kind!r})")
    return struct.unpack(">II", data[:8])


def pack_variants(desktop: bytes, variants: dict[str, bytes]) -> bytes:
    """``desktop`` (PNG bytes) with each of ``variants`` (name -> PNG bytes) added as a
    :data:`CHUNK_TYPE` chunk before its end; image viewers ignore such chunks.

    Raises:
        ValueError: a PNG is not valid, or a name is empty, not ASCII or holds a NUL.
    """
    chunks = list(_chunks(desktop))
    extra = b""
    for name, png in variants.items():
        if not name or not name.isascii() or "\0" in name:
            raise ValueError(f"variant names are non-empty ASCII without NUL, got {name!r}")
        png_size(png)
        extra += _chunk(CHUNK_TYPE, name.encode("ascii") + b"\0" + png)
    body = b"".join(_chunk(k, d) for k, d in chunks if k != b"IEND")
    return _PNG + body + extra + _chunk(b"IEND", b"")


def unpack_variants(png: bytes) -> dict[str, bytes]:
    """The renderings packed into ``png`` by :func:`pack_variants`: name -> PNG bytes
    (``{}`` for a PNG without any).

    Raises:
        ValueError: ``png`` is not a PNG file.
    """
    out = {}
    for kind, data in _chunks(png):
        if kind == CHUNK_TYPE:
            name, _, body = data.partition(b"\0")
            out[name.decode("ascii")] = body
    return out


def strip_variants(png: bytes) -> bytes:
    """``png`` without the chunks :func:`pack_variants` added (unchanged bytes when it has
    none): what the page ships.

    Raises:
        ValueError: ``png`` is not a PNG file.
    """
    chunks = list(_chunks(png))
    if not any(k == CHUNK_TYPE for k, _ in chunks):
        return png
    return _PNG + b"".join(_chunk(k, d) for k, d in chunks if k != CHUNK_TYPE)


# ------------------------------------------------------------------ the phone rendering
def _restack(fig, undo: list) -> tuple[int, int, int]:
    """Put the panels of the figure's grid in one column, in reading order.  Returns the
    grid's rows and columns before and the number of rows after (unchanged when the grid
    already has one column, or has panels spanning rows, or several grids)."""
    axes = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    if not axes:
        return 1, 1, 1
    grids = {id(ax.get_subplotspec().get_gridspec()) for ax in axes}
    gs = axes[0].get_subplotspec().get_gridspec()
    nrows, ncols = gs.get_geometry()
    if len(grids) != 1 or ncols == 1 or any(len(ax.get_subplotspec().rowspan) != 1 for ax in axes):
        return nrows, ncols, nrows
    cells = sorted({(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) for ax in axes})
    stacked = GridSpec(len(cells), 1, figure=fig)
    for ax in axes:   # twin axes share their parent's cell
        spec = ax.get_subplotspec()
        undo.append(lambda ax=ax, spec=spec: ax.set_subplotspec(spec))
        ax.set_subplotspec(stacked[cells.index((spec.rowspan.start, spec.colspan.start))])
    return nrows, ncols, len(cells)


def _split_words(s: str) -> list[str]:
    """Words of ``s`` at spaces outside ``$...$`` (a mathtext span is never broken)."""
    return [w for w in re.split(r" (?=(?:[^$]*\$[^$]*\$)*[^$]*$)", s) if w]


def _width_px(t: matplotlib.text.Text, s: str, renderer) -> float:
    """Width in display px of ``s`` (its widest line) in the font of ``t``."""
    widths = []
    for line in s.split("\n"):
        line, ismath = t._preprocess_math(line)
        widths.append(renderer.get_text_width_height_descent(line, t.get_fontproperties(), ismath=ismath)[0])
    return max(widths)


def _wrap(t: matplotlib.text.Text, room: float, renderer, undo: list) -> bool:
    """Break ``t`` into lines no wider than ``room`` display px (at spaces outside maths).
    Returns whether it changed."""
    lines = []
    for para in t.get_text().split("\n"):
        line = ""
        for word in _split_words(para):
            trial = f"{line} {word}" if line else word
            if line and _width_px(t, trial, renderer) > room:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    new = "\n".join(lines)
    if new == t.get_text():
        return False
    undo.append(lambda t=t, old=t.get_text(): t.set_text(old))
    t.set_text(new)
    return True


def _overlap(boxes, along: int, gap: float = 2.0) -> bool:
    """Whether any two of ``boxes`` (Bbox) overlap along axis 0 (x) or 1 (y), with ``gap`` px."""
    spans = sorted((b.get_points()[0][along], b.get_points()[1][along]) for b in boxes)
    return any(a[1] + gap > b[0] for a, b in zip(spans, spans[1:]))


def _thin(axis: matplotlib.axis.Axis, undo: list) -> None:
    """Fewer ticks on ``axis``: half the bins of a MaxNLocator, every other fixed label."""
    loc, fmt = axis.get_major_locator(), axis.get_major_formatter()
    undo.append(lambda: (axis.set_major_locator(loc), axis.set_major_formatter(fmt)))
    n = len([t for t in axis.get_ticklabels() if t.get_text()])
    if isinstance(loc, matplotlib.ticker.MaxNLocator):
        axis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=max(2, n // 2), steps=[1, 2, 2.5, 5, 10]))
    elif isinstance(loc, matplotlib.ticker.FixedLocator):
        labels = [t.get_text() for t in axis.get_ticklabels()]
        axis.set_ticks(loc.locs, [s if i % 2 == 0 else "" for i, s in enumerate(labels)])
    elif isinstance(loc, matplotlib.ticker.AutoLocator):
        axis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=max(2, n // 2), steps=[1, 2, 2.5, 5, 10]))


def _fit_ticks(ax, renderer, undo: list) -> bool:
    """Tick labels that touch each other: categorical x labels turned upright first, then
    fewer ticks.  Returns whether anything changed."""
    changed = False
    for axis, along in ((ax.xaxis, 0), (ax.yaxis, 1)):
        labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
        if len(labels) < 2 or not _overlap([t.get_window_extent(renderer) for t in labels], along):
            continue
        if along == 0 and isinstance(axis.get_major_locator(), matplotlib.ticker.FixedLocator) \
                and abs(labels[0].get_rotation() % 180 - 90) > 1:
            old = [(t, t.get_horizontalalignment()) for t in axis.get_ticklabels()]
            undo.append(lambda ax=ax, rot=labels[0].get_rotation(), old=old: (
                ax.tick_params(axis="x", labelrotation=rot), [t.set_horizontalalignment(ha) for t, ha in old]))
            ax.tick_params(axis="x", labelrotation=90)
            for t in axis.get_ticklabels():
                t.set_horizontalalignment("center")
        else:
            _thin(axis, undo)
        changed = True
    return changed


def _colorbars_below(fig, undo: list) -> None:
    """Turn every vertical colorbar that ``fig.colorbar(ax=...)`` placed beside its axes into
    a horizontal one below them (the phone column has no width to spare)."""
    for cax in fig.axes:
        cb = getattr(cax, "_colorbar", None)
        info = getattr(cax, "_colorbar_info", None)
        if cb is None or info is None or info.get("location") not in ("right", "left"):
            continue
        undo.append(functools.partial(_turn_colorbar, cb, info["location"], info["pad"]))
        _turn_colorbar(cb, "bottom", max(info["pad"], 0.08))   # clear of upright tick labels


def _turn_colorbar(cb, location: str, pad: float) -> None:
    """Move colorbar ``cb`` (made by ``fig.colorbar(ax=...)``) to ``location``, ``pad`` (a
    fraction of its parent) away from it, with its label, ticks and tick format."""
    cax, info = cb.ax, cb.ax._colorbar_info
    settings = matplotlib.colorbar._normalize_location_orientation(location, None)
    label = cb.long_axis.label.get_text()
    locator, formatter = cb.long_axis.get_major_locator(), cb.long_axis.get_major_formatter()
    cb.long_axis.set_label_text("")
    cb.orientation, cb.ticklocation = settings["orientation"], settings["location"]
    info.update({k: settings[k] for k in ("location", "anchor", "panchor")}, pad=pad)
    cax.set_anchor(settings["anchor"])
    cax.set_box_aspect(info["aspect"] if cb.orientation == "vertical" else 1 / info["aspect"])
    cb._reset_locator_formatter_scale()
    cb.locator, cb.formatter = locator, formatter
    cb.set_label(label)
    cb._draw_all()


def _legend_below(fig, renderer, undo: list) -> None:
    """An Axes legend wider than most of its Axes (at the phone's width it would squeeze the
    plot away) is shown instead as a figure legend below everything (one per figure: the
    first such legend)."""
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None or not leg.get_visible() or hasattr(ax, "_colorbar"):
            continue
        if leg.get_window_extent(renderer).width <= 0.7 * ax.get_window_extent(renderer).width:
            continue
        texts = leg.get_texts()
        below = fig.legend(leg.legend_handles, [t.get_text() for t in texts], loc="outside lower center", ncols=1,
                           fontsize=texts[0].get_fontsize() if texts else None, frameon=False)
        leg.set_visible(False)
        undo.append(lambda leg=leg, below=below: (below.remove(), leg.set_visible(True)))
        return


def _scale_marks(fig, widths: dict, renderer, undo: list) -> None:
    """Markers, edge widths and arrow heads (in points) of each Axes that got narrower,
    scaled with it (sizes by the square of the ratio, widths by the ratio), so that a
    drawing of nodes and arcs keeps its proportions; plotted lines keep their width."""
    for ax, old in widths.items():
        r = ax.get_window_extent(renderer).width / old if old else 1.0
        if not r < 0.95:
            continue
        for c in ax.collections:
            sizes, lws = c.get_sizes() if hasattr(c, "get_sizes") else None, c.get_linewidths()
            undo.append(lambda c=c, s=sizes, lw=lws: (s is not None and len(s) and c.set_sizes(s), c.set_linewidths(lw)))
            if sizes is not None and len(sizes):
                c.set_sizes(sizes * r * r)
            c.set_linewidths([max(0.3, lw * r) for lw in lws])
        for p in ax.patches:
            lw = p.get_linewidth()
            ms = p.get_mutation_scale() if hasattr(p, "get_mutation_scale") else None
            undo.append(lambda p=p, lw=lw, ms=ms: (p.set_linewidth(lw), ms is not None and p.set_mutation_scale(ms)))
            p.set_linewidth(max(0.3, lw * r) if lw else lw)
            if ms is not None:
                p.set_mutation_scale(ms * r)


def _fit_cell_texts(ax, renderer, undo: list) -> bool:
    """Texts drawn in the data area (a heatmap's cell values) that now touch each other are
    hidden on the phone (the zoom rendering keeps them).  Returns whether any was hidden."""
    texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
    if len(texts) < 2:
        return False
    boxes = [t.get_window_extent(renderer) for t in texts]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a.x0 < b.x1 + 1 and b.x0 < a.x1 + 1 and a.y0 < b.y1 and b.y0 < a.y1:
                one_row = len({round(t.get_position()[1], 6) for t in texts}) == 1
                if one_row and all(t.get_rotation() == 0 for t in texts):   # labels along a line: upright
                    for t in texts:
                        undo.append(lambda t=t: t.set_rotation(0))
                        t.set_rotation(90)
                    return True
                for t in texts:
                    t.set_visible(False)
                    undo.append(lambda t=t: t.set_visible(True))
                return True
    return False


def reflow_for_phone(fig, *, width: float = PHONE_WIDTH):
    """Redraw ``fig`` (in place) for the phone column: ``width`` inches wide at the same font
    sizes; a grid of panels restacked into one column (a panel keeps its height, less up to
    a quarter where it gets narrower), colorbars moved below their Axes, a legend wider than
    most of its Axes moved below the figure; then, for up to three rounds of drawing: titles and
    labels wider than their room broken into lines, tick labels that touch turned upright
    or thinned, cell values that touch hidden.  Figures already narrower than ``width``
    keep their size.  Returns a function of no arguments that undoes all of it (the figure
    then draws as before).

    Raises:
        ValueError: ``width`` is not positive.
    """
    if not width > 0:
        raise ValueError(f"width must be positive inches, got {width!r}")
    w, h = fig.get_size_inches()
    undo = [lambda: fig.set_size_inches(w, h)]
    fig.canvas.draw()
    widths = {ax: ax.get_window_extent().width for ax in fig.axes if not hasattr(ax, "_colorbar")}
    before_rows, ncols, after_rows = _restack(fig, undo)
    if w > width or after_rows != before_rows:
        panel_w = min(w, COLUMN_WIDTH) / ncols
        shrink = min(1.0, max(0.75, width / panel_w))
        fig.set_size_inches(min(w, width), h / before_rows * after_rows * shrink)
        _colorbars_below(fig, undo)
        fig.canvas.draw()
        _legend_below(fig, fig.canvas.get_renderer(), undo)
        fig.canvas.draw()
        _scale_marks(fig, widths, fig.canvas.get_renderer(), undo)
    for _ in range(3):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        fig_w = fig.bbox.width
        changed = False
        for t in _texts(fig):
            if t.get_rotation() % 180 == 0 and t.axes is not None and t in (t.axes.title, t.axes._left_title,
                                                                          t.axes._right_title):
                room = t.axes.get_window_extent(renderer).width
            elif t.axes is not None and t is t.axes.yaxis.label:
                room = t.axes.get_window_extent(renderer).height
            elif t.axes is not None and t is t.axes.xaxis.label:
                room = t.axes.get_window_extent(renderer).width
            elif t.axes is None and t.get_rotation() % 180 == 0:
                room = fig_w
            else:
                continue
            if _width_px(t, t.get_text(), renderer) > room * 1.02:
                changed |= _wrap(t, max(room, 40.0), renderer, undo)
        for ax in fig.axes:
            if ax.get_visible():
                changed |= _fit_ticks(ax, renderer, undo)
                changed |= _fit_cell_texts(ax, renderer, undo)
        if not changed:
            break

    def restore() -> None:
        for step in reversed(undo):
            step()
        fig.canvas.draw()
    return restore


def render_variants(fig, *, minimum: float = MIN_FONT_PT) -> dict[str, bytes]:
    """The figure's three renderings as PNG bytes: ``desktop`` (:func:`render_png` at
    :data:`DPI`), ``zoom`` (the same layout at :data:`ZOOM_DENSITY` x :data:`DPI`) and
    ``phone`` (a copy reflowed by :func:`reflow_for_phone`, at :data:`PHONE_DENSITY` x
    :data:`DPI`).  Each PNG carries its smallest text in its own image px
    (:data:`~attnlib.plotting.MIN_TEXT_KEY`) and its name (:data:`VARIANT_KEY`); every text
    is at least ``minimum`` points.  ``fig`` is reflowed for the phone in place and restored
    afterwards: it keeps its desktop layout.

    Raises:
        ValueError: ``minimum`` is not positive.
    """
    out = {"desktop": render_png(fig, minimum=minimum, meta={VARIANT_KEY: "desktop"}),
           "zoom": render_png(fig, minimum=minimum, dpi=ZOOM_DENSITY * DPI, meta={VARIANT_KEY: "zoom"})}
    restore = reflow_for_phone(fig)
    try:
        out["phone"] = render_png(fig, minimum=minimum, dpi=PHONE_DENSITY * DPI, meta={VARIANT_KEY: "phone"})
    finally:
        restore()
    return out


def variants_wanted() -> bool:
    """Whether the book build asked for all renderings (:data:`VARIANTS_ENV` set to a
    value other than "", "0")."""
    return os.environ.get(VARIANTS_ENV, "") not in ("", "0")


def figure_png(fig) -> bytes:
    """The PNG the notebook shows for ``fig``: :func:`render_png`'s, with the phone and zoom
    renderings packed inside it (:func:`pack_variants`) when :func:`variants_wanted`."""
    if not variants_wanted():
        return render_png(fig)
    v = render_variants(fig)
    return pack_variants(v["desktop"], {k: v[k] for k in _NAMES if k in v})


def _png_formatter(fig, **_ignored):
    if not fig.axes and not fig.lines:
        return None
    return base64.b64encode(figure_png(fig)).decode("ascii")


def book_style():
    """Apply the book's figure style (:data:`BOOK_RC`: 100 dpi, text of at least 8 pt,
    mathtext in the sans face) and, inside IPython, show every figure through
    :func:`render_png` (in the book build, with its phone and zoom renderings packed inside:
    :func:`attnlib.plotting.figure_png`).  Chapters call it once, in their set-up cell;
    returns None.
    """
    matplotlib.rcParams.update(BOOK_RC)
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a declared dependency; kept optional for plain scripts
        get_ipython = lambda: None  # noqa: E731
    shell = get_ipython()
    if shell is not None:
        plt.close(plt.figure())   # load the inline backend now, so that it cannot replace our formatter later
        shell.display_formatter.formatters["image/png"].for_type(matplotlib.figure.Figure, _png_formatter)
        matplotlib.rcParams.update(BOOK_RC)   # the inline backend loads its own rc on first use
