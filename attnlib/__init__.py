"""attnlib: the companion library of the attention course.

One idea per module, mirroring the chapters.  Shapes legend used in every docstring:
``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key width,
``d_v`` value width, ``d_model`` model width.

>>> import attnlib, torch
>>> out, weights = attnlib.scaled_dot_product_attention(torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3))
>>> out.shape, weights.shape
(torch.Size([4, 3]), torch.Size([4, 6]))
"""
# The public surface, by rule (CONTRIBUTING.md, "The public surface"; tests/test_build.py):
# the top level holds the tensor mechanism the chapters build, attention, masks, softmax,
# positions, multi-head attention (and the views and geometry of chapters 1 and 3), tiled
# attention, the KV cache and the Triton kernel.  Every other module of CONTRIBUTING's module
# table is a namespace, named in __all__ below: reading models, measuring heads, graphs,
# evidence, edits, circuits, patching, the tiny language model and its training, figures and
# exercises.  tests/test_build.py reads that table and fails on a module missing here or there.
# The namespaces are imported on first use (_LAZY below).
from .attention import attention_scores, kv_head_of, repeat_kv, scaled_dot_product_attention
from .devices import as_tensor, default_device
from .geometry import convex_hull_2d, in_convex_hull_2d, support_excess
from .kv_cache import KVCache, kv_cache_bytes
from .masks import causal_mask, padding_mask, to_additive, to_boolean
from .multihead import MultiHeadAttention, merge_heads, scale_heads, split_heads
from .positions import apply_rope, rope_scores, sinusoidal
from .softmax import entropy, softmax, softmax_jacobian
from .tiled import online_softmax, online_softmax_step, tiled_attention
from .views import column_view, dot_product_view, outer_product_view, row_view
from . import kernels  # noqa: E402  (triton_attention below loads its kernel through it)

#: The namespaces, each imported on first use (``attnlib.encoder`` the first time it is named,
#: or ``from attnlib import encoder``): ``import attnlib`` loads the tensor mechanism only, never
#: Hugging Face's transformers, matplotlib, the exercises or the explorables, and no module of
#: the package imports upwards through its root.
_LAZY = ("bertviz_offline", "circuit_export", "circuit_lab", "circuits", "corpus", "edits", "encoder", "evidence",
         "exercises", "explorables", "graphs", "induction", "language_model", "lm_export", "measures", "model_cache",
         "patching", "plotting", "site_files", "transformer")


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")   # also sets attnlib.<name>
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

def triton_attention(q, k, v, is_causal: bool = False, *, scale=None, block_m=None, block_n=None,
                     return_lse: bool = False):
    """Exact attention by a FlashAttention forward kernel written in Triton (chapter 11).

    Imports Triton on the first call: ``ImportError`` where it is not installed (macOS,
    Windows).  Without CUDA it runs under Triton's CPU interpreter (float32 and float16 only).
    See :func:`attnlib.kernels.triton_attention.triton_attention` for shapes, errors and
    sources.

    Shapes:
        q ``(..., T_q, d_k)``, k ``(..., T_k, d_k)``, v ``(..., T_k, d_v)`` -> out
        ``(..., T_q, d_v)`` (and ``lse`` ``(..., T_q)`` with ``return_lse=True``).
    """
    return kernels.load_triton_attention().triton_attention(
        q, k, v, is_causal, scale=scale, block_m=block_m, block_n=block_n, return_lse=return_lse)


__all__ = [
    # attention, masks, softmax (chapters 1-5)
    "scaled_dot_product_attention", "attention_scores", "kv_head_of", "repeat_kv",
    "causal_mask", "padding_mask", "to_additive", "to_boolean",
    "softmax", "entropy", "softmax_jacobian",
    # the three views and the convex hull (chapters 1, 3)
    "dot_product_view", "row_view", "column_view", "outer_product_view",
    "convex_hull_2d", "in_convex_hull_2d", "support_excess",
    # heads, positions, scale, decoding (chapters 6, 11, 12)
    "MultiHeadAttention", "split_heads", "merge_heads", "scale_heads",
    "sinusoidal", "apply_rope", "rope_scores",
    "tiled_attention", "online_softmax", "online_softmax_step", "triton_attention",
    "KVCache", "kv_cache_bytes",
    "default_device", "as_tensor",
    # the namespaces (CONTRIBUTING's module table; plotting is imported on first use)
    "bertviz_offline", "circuit_export", "circuit_lab", "circuits", "corpus", "edits", "encoder", "evidence",
    "exercises", "explorables", "graphs", "induction", "kernels", "language_model", "lm_export", "measures",
    "model_cache", "patching", "plotting", "site_files", "transformer",
]
