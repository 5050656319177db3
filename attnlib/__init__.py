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
from .models import DEFAULT_MODEL, embed, head_projections, load_encoder
from .softmax import entropy, softmax, softmax_jacobian

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention", "attention_scores",
    "softmax", "entropy", "softmax_jacobian",
    "causal_mask", "padding_mask", "to_additive", "to_boolean",
    "default_device", "as_tensor",
    "load_encoder", "embed", "head_projections", "DEFAULT_MODEL",
]
