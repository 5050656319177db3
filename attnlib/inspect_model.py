"""Reading a pretrained encoder's attention (chapter 8): one call returns the tokens, every
layer's and head's attention weights and the hidden states; the helpers rebuild scores,
weighted value norms and contextual word vectors.  What is measured on the weights (shares,
offsets, sinks, asymmetry, cosine similarities) lives in :mod:`attnlib.measures`.

Conventions: ``attentions[l][0, h, i, j]`` is the weight query token ``i`` gives key token
``j`` in head ``h`` of layer ``l`` (row ``i`` sums to 1), the layout of Hugging Face's
``output_attentions=True`` and of bertviz's ``head_view`` / ``model_view`` (Vig 2019).
``hidden_states[l]`` is the input of layer ``l``; ``hidden_states[-1]`` the model's output.
"""
from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass

import torch

from .models import head_projections, load_encoder

__all__ = ["EncoderAttention", "get_attentions", "head_scores", "weighted_value_norms", "token_vectors"]


@dataclass(frozen=True)
class EncoderAttention:
    """What :func:`get_attentions` returns.

    Attributes:
        tokens: the ``T`` word pieces, special tokens included (``[CLS] ... [SEP]``).
        attentions: one ``(1, H, T, T)`` tensor of weights per layer (bertviz's format).
        sentence_b_start: index of the first token of the second text, or ``None``.
        hidden_states: ``n_layers + 1`` tensors ``(1, T, d_model)``; entry ``l`` is the input
            of layer ``l`` and the last entry is the model's output.
    """

    tokens: list
    attentions: tuple
    sentence_b_start: int | None
    hidden_states: tuple

    @property
    def n_layers(self) -> int:
        return len(self.attentions)

    @property
    def n_heads(self) -> int:
        return self.attentions[0].shape[1]

    def stacked(self) -> torch.Tensor:
        """All weights as one tensor. Shapes: returns ``(n_layers, H, T, T)``."""
        return torch.cat(self.attentions, dim=0)

    def head(self, layer: int, head: int) -> torch.Tensor:
        """Weights of one head (negative indices count from the end, so ``head(-1, -1)`` is
        the last layer's last head). Shapes: returns ``(T_q, T_k)`` with ``T_q = T_k = T``.

        Raises:
            IndexError: ``layer`` or ``head`` out of range (the message gives the range).
        """
        if not -self.n_layers <= layer < self.n_layers:
            raise IndexError(f"layer must be in -{self.n_layers}..{self.n_layers - 1}, got {layer}")
        if not -self.n_heads <= head < self.n_heads:
            raise IndexError(f"head must be in -{self.n_heads}..{self.n_heads - 1}, got {head}")
        return self.attentions[layer][0, head]


def _max_length(model, tokenizer) -> int:
    limits = [getattr(model.config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    return min([int(n) for n in limits if n is not None and n < 1_000_000] or [1_000_000])  # 1e30 means "none"


def get_attentions(text, text_pair=None, *, model=None, tokenizer=None, truncate: bool = False) -> EncoderAttention:
    """Run an encoder on ``text`` (and optionally ``text_pair``) and return its tokens, the
    attention weights of every layer and head, and its hidden states.

    The model runs under ``torch.no_grad()`` on its own device; the returned tensors stay on
    that device.  Without ``model`` and ``tokenizer`` the course's encoder
    (:func:`attnlib.load_encoder`) is used.  A pair is encoded the BERT way,
    ``[CLS] text [SEP] text_pair [SEP]``, and ``sentence_b_start`` is the index of
    ``text_pair``'s first token, as bertviz's ``head_view(..., sentence_b_start=...)`` expects.

    Shapes:
        ``attentions``: ``n_layers`` tensors ``(1, H, T, T)`` (``T_q = T_k = T``);
        ``hidden_states``: ``n_layers + 1`` tensors ``(1, T, d_model)``.

    Raises:
        TypeError: ``text`` (or ``text_pair``) is not a str.
        ValueError: a text is empty or blank; only one of ``model`` / ``tokenizer`` is given;
            the model is in training mode (dropout would randomise the weights); the model
            returns no attention weights (load it with ``attn_implementation="eager"``); or the
            input is longer than the model's maximum length and ``truncate`` is False.

    Warns:
        UserWarning: with ``truncate=True``, when tokens were cut; it says how many.
    """
    for name, value in (("text", text), ("text_pair", text_pair))[: 1 if text_pair is None else 2]:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if not value.strip():
            raise ValueError(f"{name} must contain at least one non-space character, got {value!r}")
    if (model is None) != (tokenizer is None):
        raise ValueError("pass both model and tokenizer, or neither (to use attnlib.load_encoder())")
    if model is None:
        model, tokenizer = load_encoder()
    if model.training:
        raise ValueError("the model is in training mode, so dropout would randomise the weights; call model.eval() first")
    limit = _max_length(model, tokenizer)
    n_tokens = len(tokenizer(text, text_pair, truncation=False, verbose=False)["input_ids"])
    if n_tokens > limit and not truncate:
        raise ValueError(f"the input is {n_tokens} tokens long but the model accepts at most {limit}; "
                         "shorten it or pass truncate=True to cut it to the maximum length")
    if n_tokens > limit:
        warnings.warn(f"input truncated from {n_tokens} to {limit} tokens (the model's maximum length)", stacklevel=2)
    enc = tokenizer(text, text_pair, return_tensors="pt", truncation=n_tokens > limit, max_length=limit)
    accepted = inspect.signature(model.forward).parameters
    inputs = {k: v.to(model.device) for k, v in enc.items() if k in accepted}
    with torch.no_grad():
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
    if not out.attentions or any(a is None for a in out.attentions):
        raise ValueError("the model returned no attention weights; load it with attn_implementation=\"eager\" "
                         "(attnlib.load_encoder does), since fused SDPA kernels never form the weights")
    sentence_b_start = None
    if text_pair is not None:
        sequence_ids = enc.sequence_ids(0) if enc.encodings else enc["token_type_ids"][0].tolist()
        sentence_b_start = next((i for i, s in enumerate(sequence_ids) if s == 1), None)
    return EncoderAttention(tokens=tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist()),
                            attentions=tuple(a.detach() for a in out.attentions),
                            sentence_b_start=sentence_b_start,
                            hidden_states=tuple(h.detach() for h in out.hidden_states))


def head_scores(att: EncoderAttention, model, layer: int, head: int) -> torch.Tensor:
    """Recompute one head's scores ``S = Q K^T / sqrt(d_k)`` from the layer's input
    ``X = hidden_states[layer]`` and the head's projections (:func:`attnlib.head_projections`):
    ``Q = X W_Q + b_Q``, ``K = X W_K + b_K`` (Vaswani et al. 2017, eq. 1).  Row-wise softmax
    of the result equals ``att.head(layer, head)`` (no padding, so no mask is added).

    Shapes:
        returns ``(T_q, T_k)`` scores, ``T_q = T_k = T``.

    Raises:
        ValueError: ``layer`` or ``head`` out of range.
    """
    proj = head_projections(model, layer, head)
    x = att.hidden_states[layer][0]                      # (T, d_model)
    q = x @ proj["W_Q"] + proj["b_Q"]                    # (T, d_k)
    k = x @ proj["W_K"] + proj["b_K"]                    # (T, d_k)
    return q @ k.T / math.sqrt(q.shape[-1])              # (T, T)


def weighted_value_norms(att: EncoderAttention, model, layer: int, head: int | None = None) -> torch.Tensor:
    """``||A[i, j] f(x_j)||`` with ``f(x) = (x W_V + b_V) W_O^h``: the size of what key ``j``
    actually adds to query ``i``'s output through head ``h`` (Kobayashi et al. 2020).
    ``W_O^h`` is the head's ``(d_v, d_model)`` block of the output projection.  A large weight
    on a key whose transformed value vector is short contributes little.  With
    ``head=None`` all heads of the layer are computed at once.

    Shapes:
        returns ``(T_q, T_k)`` for one head or ``(H, T_q, T_k)`` for ``head=None``;
        non-negative, in the units of the hidden states.

    Raises:
        ValueError: ``layer`` or ``head`` out of range.
    """
    n_heads = att.n_heads
    if head is not None:
        head_projections(model, layer, head)  # validates both indices with a clear message
    elif not 0 <= layer < att.n_layers:
        raise ValueError(f"layer must be in 0..{att.n_layers - 1}, got {layer}")
    module = model.encoder.layer[layer].attention
    x = att.hidden_states[layer][0]                                      # (T, d_model)
    v = module.self.value(x)                                             # (T, H * d_v) = x W_V + b_V
    d_v = v.shape[-1] // n_heads
    v = v.view(x.shape[0], n_heads, d_v).transpose(0, 1)                 # (H, T, d_v)
    w_o = module.output.dense.weight.detach().T.reshape(n_heads, d_v, -1)  # (H, d_v, d_model)
    f_norms = (v @ w_o).norm(dim=-1)                                     # (H, T_k): ||f_h(x_j)||
    weights = att.attentions[layer][0]                                   # (H, T_q, T_k)
    sizes = weights * f_norms[:, None, :]                                # (H, T_q, T_k)
    return sizes if head is None else sizes[head]


def token_vectors(texts, word: str, *, layer: int | None = -1, model=None, tokenizer=None):
    """The hidden vector of ``word`` in each text: the model's output by default
    (``layer=-1``), ``hidden_states[layer]`` for an int (``0`` is the input of the first
    layer), or every depth at once for ``layer=None`` (one model run per text).
    A word split into several word pieces gets the mean of its pieces' vectors.

    Shapes:
        returns ``(positions, vectors)``: a list of ``N`` first-piece positions and a tensor
        ``(N, d_model)`` for ``N = len(texts)``, or ``(n_layers + 1, N, d_model)`` for
        ``layer=None``.

    Raises:
        ValueError: ``word`` does not occur exactly once (as whole word pieces) in a text.
    """
    if model is None and tokenizer is None:
        model, tokenizer = load_encoder()
    pieces = tokenizer.tokenize(word)
    if not pieces:
        raise ValueError(f"word must produce at least one token, got {word!r}")
    positions, vectors = [], []
    for text in texts:
        att = get_attentions(text, model=model, tokenizer=tokenizer)
        n = len(pieces)
        hits = [i for i in range(len(att.tokens) - n + 1) if att.tokens[i:i + n] == pieces]
        if len(hits) != 1:
            raise ValueError(f"{word!r} (pieces {pieces}) occurs {len(hits)} times in {att.tokens}; expected once")
        positions.append(hits[0])
        states = torch.cat(att.hidden_states) if layer is None else att.hidden_states[layer]  # (depths or 1, T, d_model)
        vectors.append(states[:, hits[0]:hits[0] + n].mean(dim=1))                          # (depths or 1, d_model)
    stacked = torch.stack(vectors, dim=1)                                                   # (depths or 1, N, d_model)
    return positions, stacked if layer is None else stacked[0]
