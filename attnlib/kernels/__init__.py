"""Fused attention kernels (chapter 11).

``attnlib.kernels.triton_attention`` holds a FlashAttention forward kernel written in Triton,
called as :func:`attnlib.triton_attention`.  Triton is imported lazily, on the first call, so
``import attnlib`` works where Triton is not installed (macOS, Windows, where no wheel
exists): there the call raises an ``ImportError`` that says so.  On a machine without CUDA
the kernel runs under Triton's interpreter (``TRITON_INTERPRET=1``, set before the kernel is
defined), which executes each block operation with numpy on the CPU.

Triton decides at import time whether its own library functions (``tl.zeros``, ``tl.max``,
...) are interpreted, so ``TRITON_INTERPRET=1`` must be in the environment before *any* module
imports triton (Hugging Face's Llama code does, for one).  Importing ``attnlib`` therefore sets
it (when there is no CUDA device and it is not set yet); import ``attnlib`` before such
modules, or set the variable in the shell.
"""
from __future__ import annotations

import importlib.util
import os

__all__ = ["triton_available", "interpreter_mode", "load_triton_attention"]


def _choose_interpreter() -> None:
    import sys

    import torch

    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_choose_interpreter()

INSTALL_HINT = ("attnlib.triton_attention needs the triton package, which is not installed here. Triton has "
                "wheels for Linux only: on Linux, pip install 'triton==3.9.0' (as requirements.txt does); "
                "on macOS or Windows, run chapter 11's Triton section in a Linux container or WSL2, or read "
                "it without running.")


def triton_available() -> bool:
    """True when the ``triton`` package can be imported (Linux wheels only)."""
    return importlib.util.find_spec("triton") is not None


def interpreter_mode() -> bool:
    """True when the kernel runs under Triton's CPU interpreter: no CUDA device, or
    ``TRITON_INTERPRET=1`` set by the user before the first call."""
    import torch

    return os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available()


def load_triton_attention():
    """The module :mod:`attnlib.kernels.triton_attention`, imported on first use.

    Raises:
        ImportError: triton is not installed; the message says how to get it.
    """
    if not triton_available():
        raise ImportError(INSTALL_HINT)
    return importlib.import_module(f"{__name__}.triton_attention")
