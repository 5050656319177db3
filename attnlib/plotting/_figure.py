"""The one figure helper of :mod:`attnlib.plotting`, and the conversion every drawing uses.

Every figure function takes an optional ``ax``: given one, it draws there (in a figure the
caller laid out); without one it asks :func:`figure` for a new figure.  The book's pages have
a text column about 700 px wide, and chapters draw at about 100 dpi, so a figure of
:data:`COLUMN_WIDTH` inches fills the column.
"""
from __future__ import annotations

import numbers

import matplotlib.axes
import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["COLUMN_WIDTH", "figure", "to_numpy"]

COLUMN_WIDTH = 7.0  # inches: the ~700 px text column at the book's 100 dpi


def figure(ax=None, *, size=None, nrows: int = 1, ncols: int = 1, **subplots_kw):
    """``(fig, ax)`` to draw on: ``ax`` and its figure when ``ax`` is given, otherwise a new
    figure of ``size`` inches (default: the column width, 3:5 high) with ``constrained_layout``
    and an ``nrows x ncols`` grid of axes (``ax`` is then what ``plt.subplots`` returns for
    that grid: one Axes, or an array of them; pass ``squeeze=False`` for always an array).

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
    return plt.subplots(nrows, ncols, figsize=tuple(float(x) for x in size), **subplots_kw)


def to_numpy(x) -> np.ndarray:
    """Tensor (any device/dtype) or array-like of numbers -> float64 numpy array, for drawing
    only.

    Raises:
        TypeError: ``x`` is None, a str, or holds something that is not a number.
    """
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"expected a tensor or an array of numbers, got {type(x).__name__}")
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"expected a tensor or an array of numbers, got {type(x).__name__}: {err}") from None
