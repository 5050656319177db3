"""Where tensors live.

``default_device`` is the only place in attnlib that chooses a device; every other
function follows the device and dtype of the tensors it is given.
"""
from __future__ import annotations

import torch

from . import _validate

__all__ = ["default_device", "as_tensor"]


def default_device() -> torch.device:
    """The device the course uses for new tensors: CUDA when available, else CPU.

    >>> default_device().type in {"cpu", "cuda"}
    True
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def as_tensor(x, name: str = "input") -> torch.Tensor:
    """Return ``x`` as a tensor: tensors pass through unchanged, numpy arrays are converted
    (sharing memory, on the CPU).  The public name of :func:`attnlib._validate.tensor`.

    Raises:
        TypeError: when ``x`` is neither a ``torch.Tensor`` nor a ``numpy.ndarray`` (or is an
            array of strings or objects); the message names ``name`` and what arrived.

    >>> import numpy as np
    >>> as_tensor(np.zeros((2, 3))).shape
    torch.Size([2, 3])
    """
    return _validate.tensor(x, name)
