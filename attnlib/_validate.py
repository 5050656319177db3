"""The one place for argument checks, and the one error policy of attnlib.

Every public function checks what it is given with the helpers below, so that the same
mistake gets the same kind of error and the same wording wherever it is made:

* ``TypeError``: the argument has the wrong type or dtype (a str where a number was expected,
  an int tensor where a float tensor was expected, a bool where an int was expected).
* ``ValueError``: the type is right but the value is not: a shape that does not fit, a number
  out of range, NaN or infinity, an unknown option, a tensor on another device.
* ``IndexError``: a layer or head index outside the model.  Negative indices count from the
  end, as in Python (``-1`` is the last layer); anything outside ``-n .. n-1`` is refused.

Messages name the argument, say what was expected and show what arrived, in the manner of
einops: ``"q and k must share d_k: q (2, 4, 5, 8) vs k (2, 4, 5, 16)"``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch

__all__ = [
    "tensor", "floating", "real_tensor", "shape_of", "positive_int", "non_negative_int", "real", "flag",
    "index", "choice", "float_dtype", "text", "same_device", "device", "dim", "min_dims",
    "distribution", "has_values",
    "DISTRIBUTION_ATOL",
]


def shape_of(t) -> tuple:
    """The shape of a tensor as a plain tuple, for messages: ``(2, 4, 5, 8)``."""
    return tuple(t.shape)


def tensor(x, name: str = "input") -> torch.Tensor:
    """``x`` as a tensor: tensors pass through unchanged, numpy arrays are wrapped (sharing
    memory, on the CPU; an array with negative strides, such as ``np.flip(a)``, is copied).

    Raises:
        TypeError: ``x`` is neither a ``torch.Tensor`` nor a ``numpy.ndarray``, or is an
            array of a dtype torch has no counterpart for (object, str, ...).
    """
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        if any(s < 0 for s in x.strides):
            x = np.ascontiguousarray(x)
        try:
            return torch.from_numpy(x)
        except TypeError:
            raise TypeError(f"{name} must hold numbers or booleans, got a numpy array of dtype "
                            f"{x.dtype}") from None
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def floating(x, name: str = "input") -> torch.Tensor:
    """``x`` as a floating-point tensor.

    Raises:
        TypeError: not a tensor/array, or its dtype is not floating point (int, bool, complex).
    """
    t = tensor(x, name)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    return t


def real_tensor(x, name: str = "input") -> torch.Tensor:
    """``x`` as a tensor of real numbers (any integer or floating dtype): what a function that
    compares or multiplies values accepts, where a bool or complex tensor is a mistake.

    Raises:
        TypeError: not a tensor/array, or its dtype is bool or complex.
    """
    t = tensor(x, name)
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name} must be a tensor of real numbers (int or float), got dtype {t.dtype}")
    return t


def _is_int(value) -> bool:
    # bool is an int subclass in Python; True as a length is always a mistake.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(value, name: str) -> int:
    """``value`` as an int of at least 1.

    Raises:
        TypeError: not an int (bools, floats and strings are refused).
        ValueError: an int below 1.
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def non_negative_int(value, name: str) -> int:
    """``value`` as an int of at least 0.

    Raises:
        TypeError: not an int.  ValueError: negative.
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be a non-negative int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def real(value, name: str, *, low: float | None = None, high: float | None = None,
         low_open: bool = False, allow_inf: bool = False) -> float:
    """``value`` as a finite Python float (any ``numbers.Real``: int, float, numpy scalar,
    or a one-element tensor), optionally inside ``[low, high]`` (``(low, high]`` with
    ``low_open=True``).

    Raises:
        TypeError: not a real number (a str, None, a bool, a complex, a tensor of several
            elements).
        ValueError: NaN, infinite (unless ``allow_inf``), or outside the range.
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex \
            and value.dtype != torch.bool and value.device.type != "meta":
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}")
    return value


def flag(value, name: str) -> bool:
    """``value`` as a bool.  Only ``True`` and ``False`` (and numpy bools) are accepted, so that
    ``is_causal="no"`` is an error rather than a truthy string.

    Raises:
        TypeError: anything else.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def index(value, size: int, name: str) -> int:
    """A layer or head index into ``size`` items, normalised to ``0 .. size-1``.  Negative
    values count from the end, as in Python.

    Raises:
        TypeError: not an int.  IndexError: outside ``-size .. size-1``.
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not -size <= value < size:
        raise IndexError(f"{name} must be in 0..{size - 1} (or -{size}..-1 from the end), got {value}")
    return int(value) % size


def choice(value, options, name: str):
    """``value`` if it is one of ``options``.

    Raises:
        ValueError: anything else; the message lists the options.
    """
    try:
        ok = bool(value in options)
    except (TypeError, ValueError, RuntimeError):  # unhashable, or an array compared elementwise
        ok = False
    if not ok:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def float_dtype(value, name: str = "dtype") -> torch.dtype:
    """A floating torch dtype, given as ``torch.float16`` or as its name ``"float16"``.

    Raises:
        TypeError: not a dtype or dtype name, or not a floating dtype.
    """
    if isinstance(value, str):
        found = getattr(torch, value, None)
        if not isinstance(found, torch.dtype):
            raise TypeError(f"{name} must be a floating torch dtype such as torch.float32, got {value!r}")
        value = found
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a floating torch dtype such as torch.float32, "
                        f"got {type(value).__name__} {value!r}")
    if not value.is_floating_point:
        raise TypeError(f"{name} must be a floating dtype, got {value}")
    return value


def text(value, name: str = "text") -> str:
    """``value`` if it is a str with at least one non-space character.

    Raises:
        TypeError: not a str.  ValueError: empty or only white space.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must contain at least one non-space character, got {value!r}")
    return value


def text_list(value, name: str = "texts") -> list:
    """``value`` as a non-empty list of non-blank str (a list or tuple; one str is refused).

    Raises:
        TypeError: not a list or tuple of str (the message says to wrap a single text).
        ValueError: empty, or holding an empty or blank text.
    """
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple of str, got {type(value).__name__}"
                        + (" (wrap a single text in a list)" if isinstance(value, str) else ""))
    if not value:
        raise ValueError(f"{name} must hold at least one text")
    return [text(t, f"{name}[{i}]") for i, t in enumerate(value)]


def head_pairs(value, n_layers: int, n_heads: int, name: str = "ablate") -> list:
    """``value`` as a list of ``(layer, head)`` int pairs inside the model (``None``: none);
    negative indices count from the end.  The check of "which heads" where a function names
    heads rather than edits them (:mod:`attnlib.circuits`; edits are checked by
    :func:`attnlib.edits.as_edits`).

    Raises:
        TypeError: not a list of pairs (the message shows the form, e.g. ``[(1, 3)]``).
        IndexError: a layer or head outside the model.
    """
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a list of (layer, head) pairs, got {type(value).__name__} {value!r}")
    pairs = []
    for pair in value:
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise TypeError(f"{name} must hold (layer, head) pairs, got {pair!r} (e.g. {name}=[(1, 3)])")
        pairs.append((index(pair[0], n_layers, "layer"), index(pair[1], n_heads, "head")))
    return pairs


def same_device(**tensors) -> torch.device:
    """The one device that every tensor given by keyword is on.

    Raises:
        ValueError: they are on different devices; the message lists each one's device.
    """
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{n} {d}" for n, d in devices.items())
        raise ValueError(f"{', '.join(devices)} must be on one device, got {listed}")
    return next(iter(devices.values()))


def device(value, name: str = "device") -> torch.device | None:
    """``value`` as a ``torch.device`` (``None`` stays ``None``: "the default").  Accepts a
    ``torch.device``, a name such as ``"cpu"`` or ``"cuda:0"``, or a CUDA index.

    Raises:
        TypeError: not a device, str or int.
        ValueError: not a device name, or a CUDA device on a machine without one.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (torch.device, str, int)):
        raise TypeError(f"{name} must be a torch.device or a name such as 'cpu', "
                        f"got {type(value).__name__} {value!r}")
    try:
        dev = torch.device(value)
    except RuntimeError:
        raise ValueError(f"{name} must name a device such as 'cpu' or 'cuda', got {value!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} {value!r} asks for CUDA, which this machine does not have")
    return dev


def dim(value, ndim: int, name: str = "dim") -> int:
    """A dimension of a tensor with ``ndim`` dimensions, normalised to ``0 .. ndim-1``.
    Negative values count from the end; a 0-d tensor accepts ``0`` and ``-1``, as in PyTorch.

    Raises:
        TypeError: not an int.  ValueError: outside ``-ndim .. ndim-1``.
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    size = max(ndim, 1)
    if not -size <= value < size:
        raise ValueError(f"{name} must be in -{size}..{size - 1} for a {ndim}-d tensor, got {value}")
    return int(value) % size


def has_values(t: torch.Tensor, name: str, what: str = "") -> torch.Tensor:
    """``t`` if it holds numbers: a tensor on the ``meta`` device has a shape but no values,
    so a function that reads the numbers (a measure, a graph, a drawing) cannot use it.
    ``what`` names the function for the message.

    Raises:
        ValueError: ``t`` is on the ``meta`` device.
    """
    if t.device.type == "meta":
        by = f" by {what}" if what else ""
        raise ValueError(f"{name} is a meta tensor (a shape, no values), shape {shape_of(t)}; the numbers are "
                         f"read{by}: pass a tensor on 'cpu' or a GPU")
    return t


def min_dims(t: torch.Tensor, n: int, name: str, form: str = "") -> torch.Tensor:
    """``t`` if it has at least ``n`` dimensions; ``form`` (e.g. ``"(..., T, d)"``) goes in
    the message.

    Raises:
        ValueError: fewer than ``n`` dimensions.
    """
    if t.dim() < n:
        form = f" {form}" if form else ""
        raise ValueError(f"{name} must have at least {n} dimensions{form}, got shape {shape_of(t)}")
    return t


#: How far from 1 a probability vector may sum, at least: rounding in float32 over a few
#: thousand entries stays below 1e-5, and a hand-typed ``[0.33, 0.33, 0.33]`` (0.99) is refused.
#: For float16 and bfloat16 the bound is ``4 * eps`` of the dtype (about 4e-3 and 3e-2).
DISTRIBUTION_ATOL = 1e-3


def distribution(p: torch.Tensor, dim: int, name: str = "weights") -> torch.Tensor:
    """``p`` if every slice along ``dim`` is a probability vector: no NaN or infinity, no
    negative entry, and a sum within ``max(DISTRIBUTION_ATOL, 4 * eps(dtype))`` of 1.  An
    all-zero slice is accepted too: it is how attnlib writes the weights of a query that may
    attend to nothing (a fully masked row).  The sums are taken in float64.  Empty tensors
    and tensors on the ``meta`` device (no values) pass unchecked.

    Raises:
        ValueError: the first problem found, with an example value.
    """
    if p.numel() == 0 or p.device.type == "meta":
        return p
    if not bool(torch.isfinite(p).all()):
        bad = p[~torch.isfinite(p)].flatten()[0].item()
        raise ValueError(f"{name} must be probabilities, found {bad}")
    if bool((p < 0).any()):
        raise ValueError(f"{name} must be probabilities (non-negative), found {p.min().item():.6g}")
    tol = max(DISTRIBUTION_ATOL, 4 * torch.finfo(p.dtype).eps)
    total = p.sum(dim=dim, dtype=torch.float64)
    bad = ((total - 1).abs() > tol) & (total != 0)
    if bool(bad.any()):
        raise ValueError(
            f"{name} must sum to 1 along dim {dim} (within {tol:.3g}; or to 0 for a fully masked "
            f"row), found a sum of {total[bad].flatten()[0].item():.6g}"
        )
    return p


def token_ids(tokens, vocab_size: int, max_len: int, what: str = "tokens"):
    """``tokens`` as a ``(B, T)`` integer tensor of ids of a vocabulary of ``vocab_size`` with
    ``1 <= T <= max_len`` (a ``(T,)`` tensor is read as a batch of one): the check every model
    of the course makes of its input.

    Raises:
        TypeError: not an int32/int64 tensor.  ValueError: another shape, too long, or an id
            outside ``0 .. vocab_size - 1``.
    """
    import torch
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{what} must be an int64 tensor of ids, got {getattr(tokens, 'dtype', type(tokens).__name__)}")
    if tokens.dim() == 1:
        tokens = tokens[None]
    if tokens.dim() != 2 or not 1 <= tokens.shape[1] <= max_len:
        raise ValueError(f"{what} must be (B, T) with 1 <= T <= {max_len}, got shape {tuple(tokens.shape)}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must lie in 0..{vocab_size - 1}, got {int(tokens.min())}..{int(tokens.max())}")
    return tokens
