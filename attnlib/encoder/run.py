"""One forward pass of the pretrained encoder, kept whole and read many ways.

:func:`run` tokenizes and checks the input once, runs the model once with forward hooks, and
returns a :class:`Run`: an activation cache holding, for every layer and head, what the
layer receives (``resid_pre``), the head's queries, keys and values (``q``, ``k``, ``v``), its
scores before the softmax (``attn_scores``), its attention weights (``pattern``) and its
output before ``W_O`` mixes the heads (``z``).  The names are TransformerLens's
(``ActivationCache``), so a learner who moves on to that library finds the same objects;
``run["pattern", 3]`` reads them the same way.

Interventions go through the same pass, in the one edit vocabulary of both of the course's
models (:mod:`attnlib.edits`): ``edits=[{"layer": 3, "head": 5, "mode": "zero"}]``, ``"mean"``
(the head's mean output over reference runs), ``"patch"`` (another run's activation, per head or
for the residual stream, optionally at one position), applied by
:func:`attnlib.edits.apply_head_edits` and :func:`attnlib.edits.apply_resid_edit`, as in the
tiny causal model (:func:`attnlib.transformer.run`).  Everything downstream of an edit is
recomputed.

Every reader of :mod:`attnlib.encoder` (``get_attentions``, ``layer_input``, ``head_qkv``,
``head_outputs``, ``ablated_outputs``...) is a view of a run, and the in-page model
(:mod:`attnlib.encoder.browser`) is tested against it.

Shapes legend: ``H`` heads, ``T`` tokens (``T_q = T_k = T``), ``d_k = d_v`` the width of one
head, ``d_model`` the model width.  A run holds one text (or one pair): no batch axis.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch

from .. import _validate, corpus
from ..edits import ACTIVATIONS, RunActivations, apply_head_edits, apply_resid_edit, as_edits, edits_by_layer, head_means
from ..multihead import split_heads
from .loading import check_length, model_and_tokenizer

__all__ = ["Run", "run", "reference_means", "encode", "ACTIVATIONS", "head_interventions", "EncoderAttention", "EncoderBatch"]


class _LayersAndHeads:
    """``n_layers`` and ``n_heads`` read off ``self.attentions`` (one ``(B, H, T, T)`` tensor
    per layer), shared by :class:`EncoderAttention` and :class:`EncoderBatch`."""

    @property
    def n_layers(self) -> int:
        return len(self.attentions)

    @property
    def n_heads(self) -> int:
        return self.attentions[0].shape[1]


@dataclass(frozen=True)
class EncoderAttention(_LayersAndHeads):
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

    def stacked(self) -> torch.Tensor:
        """All weights as one tensor. Shapes: returns ``(n_layers, H, T, T)``."""
        return torch.cat(self.attentions, dim=0)

    def head(self, layer: int, head: int) -> torch.Tensor:
        """Weights of one head (negative indices count from the end, so ``head(-1, -1)`` is
        the last layer's last head). Shapes: returns ``(T_q, T_k)`` with ``T_q = T_k = T``.

        Raises:
            TypeError: ``layer`` or ``head`` is not an int.
            IndexError: ``layer`` or ``head`` out of range (the message gives the range).
        """
        layer = _validate.index(layer, self.n_layers, "layer")
        head = _validate.index(head, self.n_heads, "head")
        return self.attentions[layer][0, head]


@dataclass(frozen=True)
class EncoderBatch(_LayersAndHeads):
    """What :func:`get_batch_attentions` returns for ``B`` texts padded to ``T`` tokens.

    Attributes:
        tokens: ``B`` lists of ``T`` word pieces, ``[PAD]`` included.
        attention_mask: ``(B, T)`` int64, the tokenizer's: 1 for a real token, 0 for padding
            (also when the model ran with ``mask_padding=False``).
        attentions: one ``(B, H, T, T)`` tensor of weights per layer.
        hidden_states: ``n_layers + 1`` tensors ``(B, T, d_model)``; entry ``l`` is the input
            of layer ``l`` and the last entry is the model's output.
    """

    tokens: list
    attention_mask: torch.Tensor
    attentions: tuple
    hidden_states: tuple



@dataclass(frozen=True)
class Run(RunActivations):
    """What :func:`run` returns: the tokens and every activation of one forward pass.

    Attributes:
        tokens: the ``T`` word pieces, ``[CLS]`` and ``[SEP]`` included.
        input_ids, token_type_ids: ``(T,)`` int64, what the model read.
        sentence_b_start: index of the second text's first token, or ``None``.
        resid_pre: ``n_layers + 1`` tensors ``(T, d_model)``: entry ``l`` is the input of
            layer ``l`` (after any residual edit), the last entry the model's output.
        q, k, v: per layer ``(H, T, d_k)``: ``X W_Q + b_Q`` and so on, head by head.
        attn_scores: per layer ``(H, T, T)``: ``q k^T / sqrt(d_k)``, before the softmax.
        pattern: per layer ``(H, T, T)``: the attention weights, row ``i`` sums to 1.
        z: per layer ``(H, T, d_v)``: each head's ``pattern @ v`` (after any edit), the heads'
            outputs before ``W_O``.
        edits: the :class:`attnlib.edits.Edit` applied; empty for an intact run.

    Indexing follows TransformerLens (:class:`attnlib.edits.RunReading`): ``run["pattern", 3]``
    is layer 3's ``(H, T, T)`` weights; ``run.head("q", 3, 5)`` one head's ``(T, d_k)``;
    ``run.stacked("pattern")`` all layers ``(n_layers, H, T, T)``.
    """

    tokens: list
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    sentence_b_start: int | None
    edits: tuple = field(default=())

    @property
    def output(self) -> torch.Tensor:
        """The model's last hidden states. Shapes: ``(T, d_model)``."""
        return self.resid_pre[-1]

    @property
    def sentence_vector(self) -> torch.Tensor:
        """The mean of the output over the tokens: the sentence embedding of
        all-MiniLM-L6-v2 (its pooling is the mean; Reimers & Gurevych 2019).
        Shapes: ``(d_model,)``."""
        return self.output.mean(dim=0)

    def attention(self) -> EncoderAttention:
        """The run in bertviz's and Hugging Face's layout (:class:`EncoderAttention`):
        ``attentions`` ``(1, H, T, T)`` and ``hidden_states`` ``(1, T, d_model)`` per layer."""
        return EncoderAttention(tokens=self.tokens, attentions=tuple(p[None] for p in self.pattern),
                                sentence_b_start=self.sentence_b_start,
                                hidden_states=tuple(h[None] for h in self.resid_pre))


def encode(tokenizer, model, text, text_pair=None, *, truncate: bool = False):
    """Check and tokenize a text (or pair) once: the BatchEncoding (batch of one) the model
    reads, cut to the model's maximum length only with ``truncate=True``.

    Raises:
        TypeError: a text is not a str; ``truncate`` not a bool.
        ValueError: a text is empty or blank; too long and ``truncate`` is False.
    """
    _validate.text(text, "text")
    if text_pair is not None:
        _validate.text(text_pair, "text_pair")
    truncate = _validate.flag(truncate, "truncate")
    n_tokens = len(tokenizer(text, text_pair, truncation=False, verbose=False)["input_ids"])
    limit = check_length(n_tokens, model, tokenizer, truncate)
    return tokenizer(text, text_pair, return_tensors="pt", truncation=n_tokens > limit, max_length=limit)


class head_interventions:
    """Context manager: hooks on a BERT-family encoder that apply checked edits
    (:func:`attnlib.edits.as_edits`) and keep what each layer receives and what its heads output:
    ``resid[layer]`` ``(B, T, d_model)`` (after any residual edit) and ``captured[layer]``
    ``(B, T, H * d_v)`` (after any head edit).

    Head edits act on each self-attention's output, the heads side by side before ``W_O``
    (:func:`attnlib.edits.apply_head_edits`); residual edits on the hidden states entering a
    layer (:func:`attnlib.edits.apply_resid_edit`).  Used by :func:`run`; the in-page model's
    export (:mod:`attnlib.encoder.browser`) uses :func:`attnlib.multihead.scale_heads` at the
    same place as the head edits.
    """

    def __init__(self, model, edits: tuple = ()):
        self.model, self.captured, self.resid, self._handles = model, {}, {}, []
        self.head_edits, self.resid_edits = edits_by_layer(tuple(edits))

    def __enter__(self):
        n_heads = self.model.config.num_attention_heads
        for layer, block in enumerate(self.model.encoder.layer):
            def hook(module, args, output, layer=layer):
                out = output[0]                                       # (B, T, H * d_v)
                if layer in self.head_edits:
                    out = apply_head_edits(out, n_heads, self.head_edits[layer])
                self.captured[layer] = out.detach()
                return (out,) + tuple(output[1:])

            def pre(module, args, layer=layer):
                x = args[0]                                           # (B, T, d_model)
                for edit in self.resid_edits.get(layer, ()):
                    x = apply_resid_edit(x, edit)
                self.resid[layer] = x.detach()
                return (x, *args[1:])
            self._handles.append(block.attention.self.register_forward_hook(hook))
            self._handles.append(block.register_forward_pre_hook(pre))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        return False


def run(text, text_pair=None, *, edits=(), model=None, tokenizer=None, truncate: bool = False) -> Run:
    """Run the encoder once on ``text`` (or the pair ``text``, ``text_pair``) and keep every
    activation of every layer and head (:class:`Run`).

    Args:
        text, text_pair: the input; a pair is encoded the BERT way,
            ``[CLS] text [SEP] text_pair [SEP]``.
        edits: interventions in the spec of :mod:`attnlib.edits`: ``{"layer", "head", "mode":
            "zero" | "mean" | "patch", "source"?, "position"?}``, ``source`` being a run (for
            ``"mean"``, optional: a run, a list of runs or their head means; without one, the
            head's mean output over :func:`reference_means`'s sentences; for ``"patch"``, a run
            on an input of the same length).  ``head=None`` patches the
            residual stream entering ``layer`` (``layer = n_layers``: the output).
        model, tokenizer: default :func:`attnlib.encoder.load_encoder`'s.
        truncate: cut an input longer than the model's maximum (with a warning) instead of
            refusing it.

    The model runs under ``torch.no_grad()`` on its own device, in evaluation mode.  ``q``,
    ``k``, ``v`` are the outputs of the model's own ``query``, ``key``, ``value`` layers,
    ``attn_scores = q k^T / sqrt(d_k)`` (Vaswani et al. 2017, eq. 1), and ``pattern`` the
    weights the model returns (``output_attentions``), so ``softmax(attn_scores) = pattern``.

    Shapes:
        see :class:`Run`: ``q, k, v, z`` ``(H, T, d_k)``, ``attn_scores, pattern``
        ``(H, T, T)`` per layer; ``resid_pre`` ``(T, d_model)`` per layer and output.

    Raises:
        TypeError: a text is not a str; an edit malformed (:func:`attnlib.edits.as_edits`).
        ValueError: an empty text; an input longer than the model's maximum (512 tokens for
            the course's model) without ``truncate``; the model in training mode or returning
            no weights (load it with ``attn_implementation="eager"``); a place edited twice; a
            patch source of another length.
        IndexError: a layer or head outside the model.

    >>> r = run("The cat sat.")
    >>> r.tokens, r.n_layers, r.n_heads, tuple(r["pattern", 0].shape), tuple(r.head("q", 4, 3).shape)
    (['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]'], 6, 12, (12, 6, 6), (6, 32))
    >>> float((run("The cat sat.", edits=[{"layer": 4, "head": 3, "mode": "zero"}]).head("z", 4, 3)).abs().max())
    0.0
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    if model.training:
        raise ValueError("the model is in training mode, so dropout would randomise the weights; call model.eval() first")
    cfg = model.config
    n_layers, n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
    enc = encode(tokenizer, model, text, text_pair, truncate=truncate)
    edits = as_edits(edits, n_layers, n_heads, T=enc["input_ids"].shape[1],
                     reference=lambda: reference_means(model, tokenizer))
    ids = enc["input_ids"].to(model.device)                                     # (1, T)
    types = enc.get("token_type_ids", torch.zeros_like(enc["input_ids"])).to(model.device)
    qkv: dict = {}
    handles = []
    for layer, block in enumerate(model.encoder.layer):
        attn = block.attention.self
        for name in ("q", "k", "v"):
            linear = {"q": attn.query, "k": attn.key, "v": attn.value}[name]
            handles.append(linear.register_forward_hook(
                lambda module, args, out, key=(name, layer): qkv.__setitem__(key, out.detach())))
    try:
        with head_interventions(model, edits) as heads, torch.no_grad():
            out = model(input_ids=ids, token_type_ids=types, output_attentions=True, output_hidden_states=True)
    finally:
        for handle in handles:
            handle.remove()
    if not out.attentions or any(a is None for a in out.attentions):
        raise ValueError("the model returned no attention weights; load it with attn_implementation=\"eager\" "
                         "(attnlib.encoder.load_encoder does), since fused SDPA kernels never form the weights")
    per_layer = {name: tuple(split_heads(qkv[name, l], n_heads)[0] for l in range(n_layers))   # (H, T, d_k)
                 for name in ("q", "k", "v")}
    d_k = per_layer["q"][0].shape[-1]
    scores = tuple(q @ k.transpose(-2, -1) / math.sqrt(d_k) for q, k in zip(per_layer["q"], per_layer["k"]))
    z = tuple(split_heads(heads.captured[l], n_heads)[0] for l in range(n_layers))     # (H, T, d_v)
    final = out.hidden_states[-1]                                                       # (1, T, d_model)
    for edit in heads.resid_edits.get(n_layers, ()):                   # the output itself patched
        final = apply_resid_edit(final, edit)
    resid = tuple(heads.resid[l][0] for l in range(n_layers)) + (final[0].detach(),)
    sentence_b_start = None
    if text_pair is not None:
        sentence_b_start = next((i for i, s in enumerate(types[0].tolist()) if s == 1), None)
    return Run(tokens=tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist()),
               input_ids=enc["input_ids"][0], token_type_ids=types[0].cpu(),
               sentence_b_start=sentence_b_start,
               resid_pre=resid,
               q=per_layer["q"], k=per_layer["k"], v=per_layer["v"], attn_scores=scores,
               pattern=tuple(a[0].detach() for a in out.attentions), z=z, edits=edits)


_REFERENCE_MEANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reference_means(model=None, tokenizer=None) -> torch.Tensor:
    """Each head's output ``z`` averaged over every token of the encoder's reference sentences
    (:func:`attnlib.corpus.reference_sentences`, each run alone with :func:`run`), by
    :func:`attnlib.edits.head_means`: what a ``"mean"`` edit without a source puts in a head's
    place.  Computed once per model.

    Shapes:
        returns ``(n_layers, H, d_v)``, on the model's device.
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    if model not in _REFERENCE_MEANS:
        _REFERENCE_MEANS[model] = head_means([run(t, model=model, tokenizer=tokenizer)
                                              for t in corpus.reference_sentences()])
    return _REFERENCE_MEANS[model]
