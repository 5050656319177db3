"""The readers the chapters use, each a view of one forward pass of the pretrained encoder.

Part of :mod:`attnlib.encoder`; see its docstring for the conventions.
"""
from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass

import torch

from .. import _validate
from ..edits import head_means
from .loading import check_length, check_model, load_encoder, model_and_tokenizer
from .run import EncoderAttention, EncoderBatch, run

# ----------------------------------------------------------------------------- one forward pass

def _forward(model, enc, *, attention_mask=None):
    """One forward pass under no_grad with every layer's attentions and hidden states."""
    if model.training:
        raise ValueError("the model is in training mode, so dropout would randomise the weights; call model.eval() first")
    accepted = inspect.signature(model.forward).parameters
    inputs = {k: v.to(model.device) for k, v in enc.items() if k in accepted}
    if attention_mask is not None:
        inputs["attention_mask"] = attention_mask.to(model.device)
    with torch.no_grad():
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
    if not out.attentions or any(a is None for a in out.attentions):
        raise ValueError("the model returned no attention weights; load it with attn_implementation=\"eager\" "
                         "(attnlib.encoder.load_encoder does), since fused SDPA kernels never form the weights")
    return out


def get_attentions(text, text_pair=None, *, model=None, tokenizer=None, truncate: bool = False) -> EncoderAttention:
    """Run an encoder on ``text`` (and optionally ``text_pair``) and return its tokens, the
    attention weights of every layer and head, and its hidden states.

    The model runs under ``torch.no_grad()`` on its own device; the returned tensors stay on
    that device.  Without ``model`` and ``tokenizer`` the course's encoder
    (:func:`load_encoder`) is used.  A pair is encoded the BERT way,
    ``[CLS] text [SEP] text_pair [SEP]``, and ``sentence_b_start`` is the index of
    ``text_pair``'s first token, as bertviz's ``head_view(..., sentence_b_start=...)`` expects.

    Shapes:
        ``attentions``: ``n_layers`` tensors ``(1, H, T, T)`` (``T_q = T_k = T``);
        ``hidden_states``: ``n_layers + 1`` tensors ``(1, T, d_model)``.

    Raises:
        TypeError: ``text`` (or ``text_pair``) is not a str; ``truncate`` is not a bool.
        ValueError: a text is empty or blank; only one of ``model`` / ``tokenizer`` is given;
            the model is in training mode (dropout would randomise the weights); the model
            returns no attention weights (load it with ``attn_implementation="eager"``); or the
            input is longer than the model's maximum length (``max_position_embeddings``, 512
            for the course's model) and ``truncate`` is False.

    Warns:
        UserWarning: with ``truncate=True``, when tokens were cut; it says how many.

    >>> att = get_attentions("The cat sat.")
    >>> att.tokens, att.n_layers, tuple(att.attentions[0].shape), tuple(att.hidden_states[0].shape)
    (['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]'], 6, (1, 12, 6, 6), (1, 6, 384))
    """
    return run(text, text_pair, model=model, tokenizer=tokenizer, truncate=truncate).attention()



def get_batch_attentions(texts, *, model=None, tokenizer=None, padding_side: str = "right",
                         mask_padding: bool = True, truncate: bool = False) -> EncoderBatch:
    """Run an encoder on a batch of texts padded to one length, as models are run in
    practice (chapter 5): the tokenizer fills the shorter texts with ``[PAD]`` on the
    ``padding_side`` and returns an ``attention_mask`` (1 = real token, 0 = padding), and the
    model turns that mask into the additive key mask of every attention layer.

    With ``mask_padding=False`` the model is run with an all-ones mask instead, so every token
    attends to the padding too: the mistake chapter 5 measures.  The returned
    ``attention_mask`` is the tokenizer's either way.  With ``padding_side="left"`` the real
    tokens of a shorter text sit at later positions, and a model with absolute position
    embeddings (BERT) sees them there: their vectors differ from the text run alone.

    Shapes:
        ``attention_mask``: ``(B, T)``; ``attentions``: ``n_layers`` tensors ``(B, H, T, T)``;
        ``hidden_states``: ``n_layers + 1`` tensors ``(B, T, d_model)``; on the model's device
        (the mask on the CPU).

    Raises:
        TypeError: ``texts`` is not a list or tuple of str (a single str is refused);
            ``mask_padding`` or ``truncate`` is not a bool.
        ValueError: ``texts`` is empty or holds a blank text; ``padding_side`` is neither
            ``"right"`` nor ``"left"``; the errors of :func:`get_attentions` for the model and
            for a text longer than the model's maximum.

    Warns:
        UserWarning: with ``truncate=True``, when tokens were cut.

    >>> batch = get_batch_attentions(["Hello there!", "The cat sat on the mat."])
    >>> batch.tokens[0], batch.attention_mask[0].tolist()
    (['[CLS]', 'hello', 'there', '!', '[SEP]', '[PAD]', '[PAD]', '[PAD]', '[PAD]'], [1, 1, 1, 1, 1, 0, 0, 0, 0])
    >>> tuple(batch.attentions[0].shape), tuple(batch.hidden_states[-1].shape)
    ((2, 12, 9, 9), (2, 9, 384))
    """
    texts = _validate.text_list(texts, "texts")
    _validate.choice(padding_side, ("right", "left"), "padding_side")
    mask_padding = _validate.flag(mask_padding, "mask_padding")
    truncate = _validate.flag(truncate, "truncate")
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    longest = max(len(ids) for ids in tokenizer(texts, truncation=False, verbose=False)["input_ids"])
    limit = check_length(longest, model, tokenizer, truncate, "the longest text")
    cut = {"truncation": True, "max_length": limit} if longest > limit else {}
    enc = tokenizer(texts, padding=True, padding_side=padding_side, return_tensors="pt", **cut)
    mask = enc["attention_mask"]                                            # (B, T)
    out = _forward(model, enc, attention_mask=None if mask_padding else torch.ones_like(mask))
    return EncoderBatch(tokens=[tokenizer.convert_ids_to_tokens(ids.tolist()) for ids in enc["input_ids"]],
                        attention_mask=mask,
                        attentions=tuple(a.detach() for a in out.attentions),
                        hidden_states=tuple(h.detach() for h in out.hidden_states))


# ----------------------------------------------------------------------------- layers and heads

def layer_input(text, layer: int, model=None, tokenizer=None, *, truncate: bool = False):
    """Tokens of ``text`` and the matrix ``X`` that layer ``layer`` receives:
    ``hidden_states[layer]`` of one forward pass (:func:`get_attentions`).  ``layer`` runs
    over ``0 .. n_layers``: ``0`` is the embedding output (:func:`embed`), ``n_layers`` (or
    ``-1``) the model's output.

    Shapes:
        returns ``tokens`` (list of ``T`` str) and ``X`` ``(T, d_model)``, on the model's device.

    Raises:
        TypeError: ``text`` is not a str or ``layer`` not an int.
        ValueError: ``text`` is empty; the input is longer than the model's maximum and
            ``truncate`` is False.
        IndexError: ``layer`` outside ``-(n_layers + 1) .. n_layers``.
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    _validate.text(text, "text")
    layer = _validate.index(layer, model.config.num_hidden_layers + 1, "layer")
    r = run(text, model=model, tokenizer=tokenizer, truncate=truncate)
    return r.tokens, r["resid_pre", layer]                                  # (T, d_model)



def embed(text, model=None, tokenizer=None, *, truncate: bool = False, positions: bool = True, order=None):
    """Tokens of ``text`` and the matrix ``X`` the first attention layer receives, optionally
    without the position embedding or with the tokens in another order.

    ``X`` is the sum of token, position and segment embeddings after the embedding
    LayerNorm (Devlin et al. 2019, section 3.2 and figure 2): row ``i`` is token ``i``'s
    vector.  With the defaults it is ``hidden_states[0]`` of the model's forward pass
    (:func:`layer_input` with ``layer=0``).

    Two options take the input apart, for the permutation-equivariance experiment of
    chapter 12 (attention alone is blind to order; Vaswani et al. 2017, section 3.5):

    * ``positions=False`` leaves out the learned position table:
      ``X = LayerNorm(token + segment embedding)``, what the model's embedding layer computes
      with its ``position_embeddings`` set to zero.  Every row then depends on its own token
      only, so reordering the tokens reorders the rows and changes nothing else.
    * ``order`` (a permutation of ``0 .. T-1``) reorders the tokens (``[CLS]`` and ``[SEP]``
      included) before they are embedded: row ``i`` holds token ``order[i]``, and with
      ``positions=True`` it gets the position embedding of position ``i``, as if the sentence
      had been written in that order.

    Dropout is not applied (the model is read in evaluation mode).

    Shapes:
        ``order``: ``T`` ints (list, tuple or integer tensor), a permutation of ``0 .. T-1``,
        where ``T`` counts the tokens with ``[CLS]`` and ``[SEP]``.
        Returns ``tokens`` (list of ``T`` str, in the order used) and ``X`` ``(T, d_model)``,
        on the model's device.

    Raises:
        TypeError: ``text`` is not a str; ``truncate`` or ``positions`` is not a bool;
            ``order`` is not a sequence of ints.
        ValueError: ``text`` is empty; longer than the model's maximum
            (``max_position_embeddings``) and ``truncate`` is False; ``order`` is not a
            permutation of ``0 .. T-1``; the model is in training mode; or (with
            ``positions=False`` or ``order``) the model has no BERT-style embedding layer with
            an absolute position table.

    >>> tokens, X = embed("The cat sat.")
    >>> tokens, tuple(X.shape)
    (['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]'], (6, 384))
    >>> tokens, X0 = embed("The cat sat.", positions=False, order=[0, 3, 2, 1, 4, 5])
    >>> tokens
    ['[CLS]', 'sat', 'cat', 'the', '.', '[SEP]']
    """
    positions = _validate.flag(positions, "positions")
    if positions and order is None:
        return layer_input(text, 0, model, tokenizer, truncate=truncate)
    _validate.text(text, "text")
    truncate = _validate.flag(truncate, "truncate")
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    if model.training:
        raise ValueError("the model is in training mode, so dropout would randomise the embeddings; call model.eval() first")
    emb = getattr(model, "embeddings", None)
    parts = ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm")
    kind = getattr(model.config, "position_embedding_type", "absolute") or "absolute"
    if emb is None or not all(hasattr(emb, p) for p in parts) or kind != "absolute":
        raise ValueError("positions=False and order need a BERT-style embedding layer (model.embeddings with "
                         "word_embeddings, position_embeddings (absolute), token_type_embeddings and LayerNorm); "
                         f"got {type(model).__name__} with position_embedding_type={kind!r}")
    n_tokens = len(tokenizer(text, truncation=False, verbose=False)["input_ids"])
    limit = check_length(n_tokens, model, tokenizer, truncate)
    enc = tokenizer(text, return_tensors="pt", truncation=n_tokens > limit, max_length=limit)
    ids = enc["input_ids"][0].to(model.device)                                  # (T,)
    segments = enc.get("token_type_ids", torch.zeros_like(enc["input_ids"]))[0].to(model.device)  # (T,)
    T = ids.shape[0]
    if order is not None:
        order = _permutation(order, T)
        ids, segments = ids[order], segments[order]
    with torch.no_grad():
        x = emb.word_embeddings(ids) + emb.token_type_embeddings(segments)     # (T, d_model)
        if positions:
            x = x + emb.position_embeddings(torch.arange(T, device=ids.device))  # position i for row i
        x = emb.LayerNorm(x)                                                    # (T, d_model)
    return tokenizer.convert_ids_to_tokens(ids.tolist()), x


def _permutation(order, T: int) -> torch.Tensor:
    """``order`` as a ``(T,)`` long tensor, checked to be a permutation of ``0 .. T-1``."""
    if isinstance(order, torch.Tensor):
        if order.dtype.is_floating_point or order.dtype.is_complex or order.dtype == torch.bool:
            raise TypeError(f"order must hold ints, got a tensor of dtype {order.dtype}")
        values = order.reshape(-1).tolist() if order.dim() == 1 else None
    elif isinstance(order, (list, tuple)):
        if not all(_validate._is_int(i) for i in order):
            bad = next(i for i in order if not _validate._is_int(i))
            raise TypeError(f"order must hold ints, got {type(bad).__name__} {bad!r}")
        values = [int(i) for i in order]
    else:
        raise TypeError(f"order must be a list, tuple or 1-D integer tensor of {T} positions, "
                        f"got {type(order).__name__}")
    if values is None:
        raise ValueError(f"order must be 1-D ({T} positions), got shape {tuple(order.shape)}")
    if sorted(values) != list(range(T)):
        raise ValueError(f"order must be a permutation of 0..{T - 1} (the text has {T} tokens with [CLS] and "
                         f"[SEP]), got {values}")
    return torch.tensor(values, dtype=torch.long)


def head_projections(model, layer: int, head: int) -> dict:
    """One head's projections from a BERT-family encoder, in the row-vector convention.

    With ``X`` ``(T, d_model)``: ``Q = X @ W_Q + b_Q``, ``K = X @ W_K + b_K``,
    ``V = X @ W_V + b_V`` (Vaswani et al. 2017, section 3.2.2, one head).  (``nn.Linear``
    stores ``weight`` as ``(out, in)``, so the matrices here are the transposed column slices
    of those weights: head ``h`` owns columns ``h d_k .. (h + 1) d_k - 1``.)

    Returns:
        dict with ``W_Q, W_K, W_V`` ``(d_model, d_k)`` and ``b_Q, b_K, b_V`` ``(d_k,)``,
        detached, on the model's device.

    Raises:
        TypeError: ``model`` is not an encoder from :func:`attnlib.encoder.load_encoder`;
            ``layer`` or ``head`` is not an int.
        IndexError: ``layer`` or ``head`` out of range (the message gives the valid range).
    """
    cfg = check_model(model).config
    n_layers, n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
    layer = _validate.index(layer, n_layers, "layer")
    head = _validate.index(head, n_heads, "head")
    d_k = cfg.hidden_size // n_heads
    cols = slice(head * d_k, (head + 1) * d_k)
    attn = model.encoder.layer[layer].attention.self
    out = {}
    for letter, lin in (("Q", attn.query), ("K", attn.key), ("V", attn.value)):
        out[f"W_{letter}"] = lin.weight.detach()[cols].T  # (d_model, d_k)
        out[f"b_{letter}"] = lin.bias.detach()[cols]      # (d_k,)
    return out


def project_qkv(x, model, layer: int, head: int | None = None):
    """Apply head ``head`` of layer ``layer`` to hidden states ``x``:
    ``q = x W_Q + b_Q``, ``k = x W_K + b_K``, ``v = x W_V + b_V`` (:func:`head_projections`).
    With ``head=None`` every head of the layer, stacked on a new head axis.

    ``x`` should be what the layer receives, ``hidden_states[layer]``: then
    ``softmax(q k^T / sqrt(d_k))`` is the model's own attention for that head.

    Shapes:
        x: ``(..., T, d_model)``; returns ``q, k, v`` each ``(..., T, d_k)``, or
        ``(..., H, T, d_k)`` for ``head=None`` (here ``d_v = d_k``).

    Raises:
        TypeError: ``x`` is not a floating tensor of the model's dtype; ``layer``/``head`` not
            an int.
        ValueError: ``x``'s last dimension is not ``d_model``, or it has fewer than 2
            dimensions, or it is on another device than the model.
        IndexError: ``layer`` or ``head`` out of range.
    """
    x = _validate.floating(x, "x")
    cfg = check_model(model).config
    if x.ndim < 2 or x.shape[-1] != cfg.hidden_size:
        raise ValueError(f"x must be (..., T, d_model) with d_model = {cfg.hidden_size}, got {_validate.shape_of(x)}")
    heads = range(cfg.num_attention_heads) if head is None else [head]
    projections = [head_projections(model, layer, h) for h in heads]  # validates layer and head
    weight = projections[0]["W_Q"]
    _validate.same_device(x=x, model=weight)
    if x.dtype != weight.dtype:
        raise TypeError(f"x must have the model's dtype {weight.dtype}, got {x.dtype}")
    q, k, v = ([x @ p[f"W_{n}"] + p[f"b_{n}"] for p in projections] for n in "QKV")  # H x (..., T, d_k)
    if head is not None:
        return q[0], k[0], v[0]                                   # (..., T, d_k) each
    return torch.stack(q, -3), torch.stack(k, -3), torch.stack(v, -3)  # (..., H, T, d_k) each


def head_qkv(text, layer: int, head: int | None, model=None, tokenizer=None, *, truncate: bool = False):
    """One head's queries, keys and values for a sentence, in the pretrained encoder.

    Runs the encoder on ``text`` for the input ``X`` of layer ``layer``
    (``hidden_states[layer]``: the embeddings for layer 0, the previous layer's output
    otherwise; :func:`layer_input`), then applies that head's projections
    (:func:`project_qkv`): ``q = X W_Q + b_Q`` and likewise for ``k`` and ``v``.
    ``softmax(q k^T / sqrt(d_k))`` equals the attention weights the model itself returns for
    that head.  ``head=None`` gives every head of the layer.

    Shapes:
        returns ``tokens`` (list of ``T`` str) and ``q, k, v`` each ``(T, d_k)``, or
        ``(H, T, d_k)`` for ``head=None`` (here ``d_v = d_k``), on the model's device.

    Raises:
        TypeError: ``text`` is not a str; ``layer`` or ``head`` is not an int.
        ValueError: empty text; an input longer than the model's maximum
            (``max_position_embeddings``) while ``truncate`` is False.
        IndexError: ``layer`` or ``head`` out of range.

    >>> tokens, q, k, v = head_qkv("The cat sat.", 4, 3)
    >>> len(tokens), tuple(q.shape), tuple(v.shape)
    (6, (6, 32), (6, 32))
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    _validate.text(text, "text")
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    if head is not None:
        head = _validate.index(head, model.config.num_attention_heads, "head")  # before the model runs
    r = run(text, model=model, tokenizer=tokenizer, truncate=truncate)
    q, k, v = r["q", layer], r["k", layer], r["v", layer]                   # (H, T, d_k) each
    return (r.tokens, q, k, v) if head is None else (r.tokens, q[head], k[head], v[head])



def head_outputs(text, layer: int, head: int | None = None, model=None, tokenizer=None, *,
                 truncate: bool = False):
    """What the model's self-attention of layer ``layer`` outputs for ``text``, head by head:
    each head's ``softmax(q k^T / sqrt(d_k)) v`` before the heads are concatenated and mixed
    by ``W_O``, read from the model's own forward pass with a forward hook.

    Shapes:
        returns ``tokens`` (list of ``T`` str) and ``out`` ``(T, d_v)`` for one head or
        ``(H, T, d_v)`` for ``head=None``, on the model's device.

    Raises:
        TypeError, ValueError, IndexError: as :func:`head_qkv`.
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    _validate.text(text, "text")
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    if head is not None:
        head = _validate.index(head, model.config.num_attention_heads, "head")
    r = run(text, model=model, tokenizer=tokenizer, truncate=truncate)
    z = r["z", layer]                                                       # (H, T, d_v)
    return r.tokens, z if head is None else z[head]



def feed_forward(h, layer: int, model=None):
    """The feed-forward block of layer ``layer`` applied to the rows of ``h``, as the model
    applies it after attention: ``LayerNorm(h + GELU(h W_1 + b_1) W_2 + b_2)`` (BERT's
    intermediate and output modules, residual connection and LayerNorm included).  It acts on
    every row (token position) separately: no information moves between positions.

    Shapes:
        h: ``(T, d_model)`` or ``(B, T, d_model)``; returns the same shape, on ``h``'s device.

    Raises:
        TypeError: ``h`` is not a floating tensor; ``layer`` not an int.
        ValueError: the last axis of ``h`` is not ``d_model``.
        IndexError: ``layer`` outside ``0 .. n_layers - 1``.

    Source: Vaswani et al. 2017, eq. (2), "position-wise feed-forward networks"; Devlin et al.
    2019 (BERT) for the GELU and the post-LayerNorm arrangement.
    """
    model = load_encoder()[0] if model is None else check_model(model)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    h = _validate.floating(h, "h")
    if h.dim() not in (2, 3) or h.shape[-1] != model.config.hidden_size:
        raise ValueError(f"h must have shape (T, {model.config.hidden_size}) or (B, T, "
                         f"{model.config.hidden_size}), got {tuple(h.shape)}")
    block = model.encoder.layer[layer]
    with torch.no_grad():
        return block.output(block.intermediate(h), h)     # (..., T, d_model)


def ablated_outputs(text, layer: int, head: int, *, replacement=None, model=None, tokenizer=None,
                    truncate: bool = False):
    """The model's output for ``text`` with one head removed, next to the intact output.

    The head's output (its slice of the self-attention output of layer ``layer``, before the
    heads are mixed by ``W_O``) is replaced at every token by ``replacement``: zeros by
    default (zero ablation), or a ``(d_v,)`` vector such as the head's mean output over a
    reference text (mean ablation, which keeps the head's average contribution and removes
    only what depends on the input).  Everything downstream is recomputed.  The method is
    the head ablation of Michel et al. (2019) and of the interpretability literature.

    Shapes:
        returns ``tokens`` (list of ``T`` str), ``intact`` and ``ablated``, each
        ``(T, d_model)``: the last hidden states, on the model's device.

    Raises:
        TypeError, ValueError, IndexError: as :func:`head_qkv`; TypeError when
        ``replacement`` is a number or not a floating tensor; ValueError when it is not
        ``(d_v,)``, is a meta tensor, or holds NaN or infinity (each named as such).
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    _validate.text(text, "text")
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    head = _validate.index(head, model.config.num_attention_heads, "head")
    d_v = model.config.hidden_size // model.config.num_attention_heads
    if replacement is not None:
        if isinstance(replacement, (int, float)) and not isinstance(replacement, bool):
            raise TypeError(f"replacement must be a ({d_v},) tensor (one value vector of the head), got the "
                            f"number {replacement!r}; for a constant c pass torch.full(({d_v},), c)")
        replacement = _validate.floating(replacement, "replacement")
        if replacement.shape != (d_v,):
            raise ValueError(f"replacement must be a ({d_v},) tensor (one value vector of the head), "
                             f"got shape {tuple(replacement.shape)}")
        _validate.has_values(replacement, "replacement", "ablated_outputs")
        if not bool(torch.isfinite(replacement).all()):
            bad = torch.nonzero(~torch.isfinite(replacement)).flatten().tolist()
            raise ValueError(f"replacement must be finite; entries {bad[:5]}{' ...' if len(bad) > 5 else ''} are "
                             f"NaN or infinite (the head's output would make every later layer NaN)")
    intact = run(text, model=model, tokenizer=tokenizer, truncate=truncate)
    if replacement is None:
        edit = {"layer": layer, "head": head, "mode": "zero"}
    else:                                   # a mean ablation whose mean is given: the spec's means tensor
        means = torch.zeros(model.config.num_hidden_layers, model.config.num_attention_heads, d_v)
        means[layer, head] = replacement.detach().float().cpu()
        edit = {"layer": layer, "head": head, "mode": "mean", "source": means}
    ablated = run(text, edits=[edit], model=model, tokenizer=tokenizer, truncate=truncate)
    return intact.tokens, intact.output, ablated.output



def mean_head_outputs(texts, layer: int, model=None, tokenizer=None) -> torch.Tensor:
    """Every head's output in layer ``layer`` (as :func:`head_outputs`) averaged over every
    token of ``texts`` (each text run alone, :func:`run`).  The replacement of a mean
    ablation (:func:`ablated_outputs`).

    Shapes:
        returns ``(H, d_v)`` float32 on the model's device.

    Raises:
        TypeError, ValueError: as :func:`get_batch_attentions`; IndexError: ``layer`` out of range.
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    _validate.text_list(texts, "texts")
    return head_means([run(text, model=model, tokenizer=tokenizer) for text in texts])[layer]   # (H, d_v)



# ----------------------------------------------------------------------------- read from a run

def _check_att(att) -> None:
    if not isinstance(att, EncoderAttention):
        raise TypeError(f"att must be an EncoderAttention from get_attentions, got {type(att).__name__}")


def head_scores(att: EncoderAttention, model, layer: int, head: int) -> torch.Tensor:
    """Recompute one head's scores ``S = Q K^T / sqrt(d_k)`` from the layer's input
    ``X = hidden_states[layer]`` of ``att`` and the head's projections (:func:`project_qkv`):
    ``Q = X W_Q + b_Q``, ``K = X W_K + b_K`` (Vaswani et al. 2017, eq. 1).  Row-wise softmax
    of the result equals ``att.head(layer, head)`` (no padding, so no mask is added).

    Shapes:
        returns ``(T_q, T_k)`` scores, ``T_q = T_k = T``.

    Raises:
        TypeError: ``att`` is not an :class:`EncoderAttention`; ``layer``/``head`` not ints.
        IndexError: ``layer`` or ``head`` out of range.
    """
    _check_att(att)
    layer = _validate.index(layer, att.n_layers, "layer")     # hidden_states[-1] is the output, not layer -1's input
    q, k, _ = project_qkv(att.hidden_states[layer][0], model, layer, head)  # (T, d_k) each
    return q @ k.T / math.sqrt(q.shape[-1])                   # (T, T)


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
        TypeError: ``att`` is not an :class:`EncoderAttention`; ``layer``/``head`` not ints.
        IndexError: ``layer`` or ``head`` out of range.
    """
    _check_att(att)
    check_model(model)
    n_heads = att.n_heads
    layer = _validate.index(layer, att.n_layers, "layer")
    if head is not None:
        head = _validate.index(head, n_heads, "head")
    module = model.encoder.layer[layer].attention
    x = att.hidden_states[layer][0]                                          # (T, d_model)
    with torch.no_grad():
        v = module.self.value(x)                                             # (T, H * d_v) = x W_V + b_V
        d_v = v.shape[-1] // n_heads
        v = v.view(x.shape[0], n_heads, d_v).transpose(0, 1)                 # (H, T, d_v)
        w_o = module.output.dense.weight.detach().T.reshape(n_heads, d_v, -1)  # (H, d_v, d_model)
        f_norms = (v @ w_o).norm(dim=-1)                                     # (H, T_k): ||f_h(x_j)||
    weights = att.attentions[layer][0]                                       # (H, T_q, T_k)
    sizes = weights * f_norms[:, None, :]                                    # (H, T_q, T_k)
    return sizes if head is None else sizes[head]


def token_vectors(texts, word: str, *, layer: int | None = -1, model=None, tokenizer=None):
    """The hidden vector of ``word`` in each text: the model's output by default
    (``layer=-1``), ``hidden_states[layer]`` for an int (``0`` is the input of the first
    layer, ``n_layers`` the output), or every depth at once for ``layer=None`` (one model run
    per text).  A word split into several word pieces gets the mean of its pieces' vectors.

    Shapes:
        returns ``(positions, vectors)``: a list of ``N`` first-piece positions and a tensor
        ``(N, d_model)`` for ``N = len(texts)``, or ``(n_layers + 1, N, d_model)`` for
        ``layer=None``.

    Raises:
        TypeError: ``texts`` is not a list or tuple (a single str is refused), a text or
            ``word`` is not a str, ``layer`` is neither an int nor None.
        ValueError: ``texts`` is empty; ``word`` is blank, not in the vocabulary (it would
            become ``[UNK]``, which matches any unknown character), or does not occur exactly
            once (as whole word pieces) in a text.
        IndexError: ``layer`` outside ``-(n_layers + 1) .. n_layers``.
    """
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list or tuple of str, got {type(texts).__name__}"
                        + (" (wrap a single text in a list)" if isinstance(texts, str) else ""))
    if not texts:
        raise ValueError("texts must hold at least one text")
    _validate.text(word, "word")
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    if layer is not None:
        layer = _validate.index(layer, model.config.num_hidden_layers + 1, "layer")
    pieces = tokenizer.tokenize(word)
    if not pieces:
        raise ValueError(f"word must produce at least one token, got {word!r}")
    unk = getattr(tokenizer, "unk_token", None)
    if unk is not None and unk in pieces:
        # every unknown character reads as the same [UNK]: matching it would find any other
        # unknown character (a different emoji) as if it were this word
        raise ValueError(f"{word!r} is not in the tokenizer's vocabulary (it becomes {pieces}): "
                         f"its {unk} would match any other unknown character; pick a word the model knows")
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
