"""Where tensors live.

``default_device`` is the only place in attnlib that chooses a device; every other
function follows the device and dtype of the tensors it is given.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["default_device", "as_tensor"]


def default_device() -> torch.device:
    """The device the course uses for new tensors: CUDA when available, else CPU.

    >>> default_device().type in {"cpu", "cuda"}
    True
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def as_tensor(x, name: str = "input") -> torch.Tensor:
    """Return ``x`` as a tensor: tensors pass through unchanged, numpy arrays are converted
    (sharing memory, on the CPU).

    Raises:
        TypeError: when ``x`` is neither a ``torch.Tensor`` nor a ``numpy.ndarray``;
            the message names ``name`` and the type that arrived.
    """
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise TypeError(
        f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}"
    )
