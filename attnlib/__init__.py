"""attnlib: the companion library of the attention course.

One idea per module, mirroring the chapters.  Shapes legend used in every docstring:
``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key width,
``d_v`` value width, ``d_model`` model width.

>>> import attnlib, torch
>>> out, weights = attnlib.scaled_dot_product_attention(torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3))
>>> out.shape, weights.shape
(torch.Size([4, 3]), torch.Size([4, 6]))
"""
from .attention import attention_scores, scaled_dot_product_attention
from .devices import as_tensor, default_device
from .masks import causal_mask, padding_mask, to_additive, to_boolean
from .encoder import (DEFAULT_MODEL, EncoderAttention, EncoderBatch, embed, get_attentions, get_batch_attentions,
                      head_outputs, head_projections, head_qkv, layer_input, load_encoder, project_qkv, token_vectors)
from .softmax import entropy, softmax, softmax_jacobian
from .geometry import convex_hull_2d, in_convex_hull_2d, support_excess
from .graphs import (attention_graph, attention_rollout, graph_attention, in_weight, is_dag_without_self_loops,
                     layered_graph, neighbourhood_mask, path_flow, score_graph, stationary_distribution,
                     strongest_edges)
from .tiled import online_softmax, online_softmax_step, tiled_attention
from . import explorables  # kernel-free interactive figures for the static book (chapters 1, 4, 5, 7, 8)
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .transformer import TinyTransformer
from .measures import (asymmetry, attention_share, cosine_similarities, offset_share,
                       received_attention, sink_shares, token_groups, top_keys)
from .corpus import load_text, words_of
from . import evidence  # baselines, minimal pairs and ablations for reading a head (chapters 3, 8)

from .views import column_view, dot_product_view, outer_product_view, row_view

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention", "attention_scores",
    "softmax", "entropy", "softmax_jacobian",
    "convex_hull_2d", "in_convex_hull_2d", "support_excess",
    "causal_mask", "padding_mask", "to_additive", "to_boolean",
    "default_device", "as_tensor",
    "load_encoder", "embed", "head_projections", "DEFAULT_MODEL", "layer_input", "project_qkv", "head_qkv",
    "head_outputs", "get_batch_attentions", "EncoderBatch",
    "MultiHeadAttention", "split_heads", "merge_heads",
    "TinyTransformer",
    "tiled_attention", "online_softmax", "online_softmax_step",
    "get_attentions", "EncoderAttention", "token_vectors",
    "attention_share", "received_attention", "sink_shares", "offset_share", "asymmetry", "top_keys",
    "token_groups", "cosine_similarities", "load_text", "words_of",
    "attention_graph", "score_graph", "strongest_edges", "in_weight",
    "is_dag_without_self_loops", "stationary_distribution", "neighbourhood_mask", "graph_attention",
    "attention_rollout", "layered_graph", "path_flow",
    "explorables", "evidence",
    "dot_product_view", "row_view", "column_view", "outer_product_view",
]

from . import induction  # heads that emerge in a tiny causal language model (chapter 6)
__all__ += ["induction"]
# Chapter 10 (position, decoding) and chapter 9's Triton kernel (issue 17).
from .attention import kv_head_of, repeat_kv
from .positions import apply_rope, rope_scores, sinusoidal
from .kv_cache import KVCache, kv_cache_bytes
from .transformer import generate
from . import kernels


def triton_attention(q, k, v, is_causal: bool = False, *, scale=None, block_m=None, block_n=None,
                     return_lse: bool = False):
    """Exact attention by a FlashAttention forward kernel written in Triton (chapter 9).

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


__all__ += ["kv_head_of", "repeat_kv", "apply_rope", "rope_scores", "sinusoidal", "KVCache", "generate",
            "kv_cache_bytes", "kernels", "triton_attention"]
