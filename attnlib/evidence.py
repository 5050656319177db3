"""Evidence before interpretation: the baselines, minimal pairs and ablations that a sentence
of the form "this head does X" needs before it can be believed.

A head's weight on a key means little on its own.  Three questions come first:

* **Uniform baseline.** Is the weight larger than ``1 / T``, what a head that ignores its
  input gives every key?  (:func:`uniform_weight`)
* **Positional baseline.** Is it larger than what the key's *offset* alone predicts?  Many
  heads mostly look a fixed distance back or forward; their weight on a noun two places back
  says nothing about nouns.  :func:`positional_lift` measures, over reference sentences, the
  mean weight at each offset ``j - i`` in multiples of the uniform weight, and
  :func:`positional_baseline` turns it into a weight for a sentence of ``T`` tokens.
* **Minimal pairs.** Does the weight follow the property claimed when *only* that property
  changes?  (:func:`pair_weights` reads one query's weight on named keys across sentences
  that differ in one word.)

And where the claim is about what a head contributes, an **ablation**: remove the head and
measure how much the model's output moves (:func:`head_ablation`), next to the same change
for every other head of the layer (:func:`layer_ablation`) or of the model
(:func:`ablation_table`) as its reference scale.  Where a minimal pair differs, **activation
patching** (:func:`patching_effects`) asks which head carries the difference: copy one head's
output from the run on one sentence into the run on the other and see how much of the
difference at a chosen token it brings along.

The reference sentences (:func:`reference_sentences`) are the course's sink probes and the
sentences of the Gettysburg Address: real prose, none written for a head.

Conventions: ``A[i, j]`` is the weight query ``i`` gives key ``j`` (rows sum to 1); offsets
are ``j - i`` (``-1`` is the previous token); special tokens (``[CLS]``, ``[SEP]``) are left
out of the positional statistics, since they attract weight for reasons other than position.
Layers and heads are 0-based, as everywhere in attnlib.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import torch

from . import _validate, corpus, encoder
from .corpus import reference_sentences
from .edits import head_means
from .encoder.loading import model_and_tokenizer

__all__ = [
    "reference_sentences", "uniform_weight", "positional_lifts", "positional_lift", "positional_baseline",
    "token_position", "pair_weights", "head_ablation", "layer_ablation", "ablation_table", "patching_effects",
    "probe_accuracy", "TAGGED_SENTENCES", "tagged_features", "pos_probe",
    "binomial_test", "sign_test", "referent_shifts", "head_shifts", "query_key_shifts", "control_shifts",
    "control_labels",
]

_SPECIAL = ("[CLS]", "[SEP]", "[PAD]")


def uniform_weight(n_keys: int) -> float:
    """The weight ``1 / n_keys`` a head that ignores its input gives every key.

    Raises:
        TypeError: ``n_keys`` is not an int.  ValueError: ``n_keys < 1``.

    >>> round(uniform_weight(13), 4)
    0.0769
    """
    return 1.0 / _validate.positive_int(n_keys, "n_keys")


def _texts(texts) -> list:
    texts = reference_sentences() if texts is None else texts
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
        raise TypeError(f"texts must be a non-empty list of str, got {type(texts).__name__}")
    return [_validate.text(t, "each text") for t in texts]


def positional_lifts(offsets, *, texts=None, model=None, tokenizer=None) -> torch.Tensor:
    """Mean weight every head gives the key ``o`` places away, in multiples of the uniform
    weight: the mean of ``T * A[i, i + o]`` over every ordinary (non-special) query and key
    of ``texts`` (default :func:`reference_sentences`), for all layers and heads from one
    batched forward pass.  1 means "no preference for this offset"; a previous-token head
    scores far above 1 at ``o = -1``.

    Shapes:
        returns ``(n_layers, H, len(offsets))`` float64 (unitless), offsets in the given order.

    Raises:
        TypeError: ``offsets`` not ints; ``texts`` not a list of str.
        ValueError: no pair of ordinary tokens at some offset in any text.
    """
    offsets = [int(o) for o in _ints(offsets, "offsets")]
    batch = encoder.get_batch_attentions(_texts(texts), model=model, tokenizer=tokenizer)  # padding masked
    sums = torch.zeros(batch.n_layers, batch.n_heads, len(offsets), dtype=torch.float64)
    counts = [0] * len(offsets)
    for b, tokens in enumerate(batch.tokens):
        T = int(batch.attention_mask[b].sum())                # real tokens; [PAD] come after them
        ordinary = [i for i, t in enumerate(tokens[:T]) if t not in _SPECIAL]
        keep = set(ordinary)
        for k, o in enumerate(offsets):
            rows = [i for i in ordinary if i + o in keep]
            if not rows:
                continue
            q, kk = torch.tensor(rows), torch.tensor(rows) + o
            for layer, a in enumerate(batch.attentions):       # (B, H, T, T) each, read in place: no
                picked = a[b, :, q, kk].double().cpu()        # (H, n) float64 copy of every layer at once
                sums[layer, :, k] += T * picked.sum(dim=-1)
            counts[k] += len(rows)
    empty = [o for o, n in zip(offsets, counts) if n == 0]
    if empty:
        raise ValueError(f"no pair of ordinary tokens at offset(s) {empty} in the texts")
    return sums / torch.tensor(counts, dtype=torch.float64)


def positional_lift(layer: int, head: int, offsets, *, texts=None, model=None, tokenizer=None) -> dict:
    """One head's :func:`positional_lifts`: ``{offset: lift}`` with one float per offset
    (unitless).

    Raises:
        as :func:`positional_lifts`; IndexError: ``layer`` or ``head`` out of range.
    """
    offsets = [int(o) for o in _ints(offsets, "offsets")]
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    head = _validate.index(head, model.config.num_attention_heads, "head")
    table = positional_lifts(offsets, texts=texts, model=model, tokenizer=tokenizer)[layer, head]
    return {o: float(table[k]) for k, o in enumerate(offsets)}


def positional_baseline(layer: int, head: int, offset: int, n_tokens: int, **kwargs) -> float:
    """The weight the offset alone predicts for a key ``offset`` places from its query, in a
    sentence of ``n_tokens`` tokens: ``positional_lift(...)[offset] / n_tokens``.  Keyword
    arguments go to :func:`positional_lift`.

    Raises:
        as :func:`positional_lift`; ValueError for ``n_tokens < 1``.
    """
    n = _validate.positive_int(n_tokens, "n_tokens")
    return positional_lift(layer, head, [offset], **kwargs)[int(offset)] / n


def _ints(values, name):
    if isinstance(values, (int,)) and not isinstance(values, bool):
        return [values]
    values = list(values)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(f"{name} must be an int or a non-empty list of ints, got {values!r}")
    return values


def token_position(tokens, token) -> int:
    """Position of ``token`` in ``tokens``: an int passes through (checked), a str must occur
    exactly once, so that a repeated word such as "the" is never silently taken for another.

    Raises:
        TypeError: ``token`` is neither an int nor a str.
        ValueError: the str does not occur, or occurs more than once (the message lists the
            positions to choose from); the int is outside the sentence.

    >>> token_position(["[CLS]", "the", "cat", "the", "[SEP]"], "cat")
    2
    """
    tokens = list(tokens)
    if isinstance(token, int) and not isinstance(token, bool):
        if not 0 <= token < len(tokens):
            raise ValueError(f"position {token} is outside the sentence (0..{len(tokens) - 1})")
        return token
    if not isinstance(token, str):
        raise TypeError(f"token must be a str or a position (int), got {type(token).__name__}")
    hits = [i for i, t in enumerate(tokens) if t == token]
    if len(hits) != 1:
        where = "does not occur" if not hits else f"occurs {len(hits)} times, at {hits}"
        raise ValueError(f"{token!r} {where} in {tokens}; pass its position instead")
    return hits[0]


def pair_weights(texts, layer: int, head: int, query, keys, *, model=None, tokenizer=None) -> list:
    """One query's weight on named keys, sentence by sentence: the table of a minimal pair.

    Each of ``texts`` is run through the encoder; ``query`` and each of ``keys`` is a token
    (str, which must occur exactly once in that sentence) or a position.  A key absent from a
    sentence gets ``None``.

    Returns:
        one dict per text: ``text``, ``tokens``, ``n_tokens``, ``uniform`` (``1 / T``) and
        ``weights`` (``{key: weight or None}``, floats in [0, 1]).

    Raises:
        TypeError / ValueError: ``texts`` is not a list or tuple of non-blank str (one str is
            refused: wrap it in a list); as :func:`token_position` for the query.
        IndexError: layer or head out of range.
    """
    keys = [keys] if isinstance(keys, (str, int)) else list(keys)
    rows = []
    for text in _validate.text_list(texts):   # one str is refused, not read letter by letter
        att = encoder.get_attentions(text, model=model, tokenizer=tokenizer)
        A = att.head(layer, head)
        i = token_position(att.tokens, query)
        weights = {}
        for key in keys:
            try:
                j = token_position(att.tokens, key)
            except ValueError:
                if isinstance(key, str) and key not in att.tokens:
                    weights[key] = None
                    continue
                raise
            weights[key] = float(A[i, j])
        rows.append({"text": text, "tokens": list(att.tokens), "n_tokens": len(att.tokens),
                     "uniform": 1.0 / len(att.tokens), "weights": weights})
    return rows


_MEAN_OUTPUTS: dict = {}


def _reference_means(model, tokenizer, texts: tuple) -> torch.Tensor:
    """Every head's mean output over every token of ``texts`` (one :func:`attnlib.encoder.run` per
    text, :func:`attnlib.edits.head_means`), ``(n_layers, H, d_v)``, computed once per model and
    texts: the ``source`` of a mean ablation."""
    key = (id(model), texts)
    if key not in _MEAN_OUTPUTS:
        _MEAN_OUTPUTS[key] = head_means([encoder.run(t, model=model, tokenizer=tokenizer) for t in texts])
    return _MEAN_OUTPUTS[key]


def _ablation(layer: int, head: int, mode: str, references) -> dict:
    """The edit that removes head ``(layer, head)`` (:mod:`attnlib.edits`)."""
    if mode == "zero":
        return {"layer": layer, "head": head, "mode": "zero"}
    return {"layer": layer, "head": head, "mode": "mean", "source": references}


def _change(intact, ablated) -> tuple:
    cos = torch.nn.functional.cosine_similarity
    token_change = (1 - cos(intact.double(), ablated.double(), dim=-1)).cpu()
    sentence_change = float(1 - cos(intact.double().mean(0), ablated.double().mean(0), dim=0))
    return token_change, sentence_change


def head_ablation(text, layer: int, head: int, *, mode: str = "mean", texts=None, model=None,
                  tokenizer=None) -> dict:
    """How far the model's output moves when one head is removed.

    ``mode="mean"`` replaces the head's output by its mean over the tokens of ``texts``
    (default :func:`reference_sentences`); ``mode="zero"`` by zeros.  Mean ablation is the
    fairer test: it removes what the head computes from *this* input, not the constant offset
    every later layer has learned to expect.

    Returns:
        dict with ``tokens`` (T str), ``token_change`` ``(T,)``: ``1 - cos`` between each
        token's last hidden state with and without the head, and ``sentence_change``: the same
        for the mean-pooled sentence vector (the course's encoder is a sentence encoder).
        Both are unitless, 0 for no change, at most 2.

    Raises:
        ValueError: ``mode`` is not "mean" or "zero"; as :func:`attnlib.encoder.run`.
    """
    mode = _validate.choice(mode, ("mean", "zero"), "mode")
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    _validate.text(text, "text")
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    head = _validate.index(head, model.config.num_attention_heads, "head")
    refs = _reference_means(model, tokenizer, tuple(_texts(texts))) if mode == "mean" else None
    base = encoder.run(text, model=model, tokenizer=tokenizer)
    tokens, intact = base.tokens, base.output
    ablated = encoder.run(text, edits=[_ablation(layer, head, mode, refs)], model=model, tokenizer=tokenizer).output
    token_change, sentence_change = _change(intact, ablated)
    return {"tokens": tokens, "token_change": token_change, "sentence_change": sentence_change}


def layer_ablation(text, layer: int, *, mode: str = "mean", texts=None, model=None, tokenizer=None) -> torch.Tensor:
    """:func:`head_ablation`'s ``sentence_change`` for every head of ``layer``: the baseline
    against which one head's effect is read.

    Shapes:
        returns ``(H,)`` float64, unitless.
    """
    mode = _validate.choice(mode, ("mean", "zero"), "mode")
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    refs = _reference_means(model, tokenizer, tuple(_texts(texts))) if mode == "mean" else None
    intact = encoder.run(text, model=model, tokenizer=tokenizer).output              # one intact pass, (T, d_model)
    changes = []
    for h in range(model.config.num_attention_heads):
        ablated = encoder.run(text, edits=[_ablation(layer, h, mode, refs)], model=model, tokenizer=tokenizer).output
        changes.append(_change(intact, ablated)[1])
    return torch.tensor(changes, dtype=torch.float64)


def ablation_table(text, *, mode: str = "mean", texts=None, model=None, tokenizer=None) -> torch.Tensor:
    """:func:`head_ablation`'s ``sentence_change`` for every head of every layer: the
    reference scale against which one head's effect is read ("is removing this head a large
    change, compared with removing any other head?").  The mean outputs of every layer come
    from one run per text of ``texts`` (default :func:`reference_sentences`), so
    ``ablation_table(text)[l]`` equals :func:`layer_ablation` ``(text, l)``.

    Shapes:
        returns ``(n_layers, H)`` float64, unitless (1 - cosine; 0 for no change, at most 2).

    Raises:
        ValueError: ``mode`` is not "mean" or "zero"; as :func:`attnlib.encoder.run`.
        TypeError: ``texts`` is not a list of str.
    """
    mode = _validate.choice(mode, ("mean", "zero"), "mode")
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    n_layers, n_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    refs = _reference_means(model, tokenizer, tuple(_texts(texts))) if mode == "mean" else None
    intact = encoder.run(text, model=model, tokenizer=tokenizer).output                     # (T, d_model)
    table = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for l in range(n_layers):
        for h in range(n_heads):
            ablated = encoder.run(text, edits=[_ablation(l, h, mode, refs)], model=model, tokenizer=tokenizer).output
            table[l, h] = _change(intact, ablated)[1]
    return table


def patching_effects(clean, corrupt, position, *, depth=None, layers=None, model=None, tokenizer=None) -> dict:
    """Activation patching between the two sentences of a minimal pair: which head carries
    the difference into one token?

    For every head ``(l, h)``, the encoder runs on ``clean`` with that head's output ``z``
    (before ``W_O``) at ``position`` only replaced by its output at the same position in the
    run on ``corrupt``; every other head and position keeps its clean output, and everything
    downstream is recomputed (:func:`attnlib.encoder.run` with a ``patch`` edit at ``position``).  The effect is
    the share of the clean-to-corrupt difference of the model's output at ``position`` that
    this one patch brings along, measured along that difference:

    ``effect[l, h] = (o_patched - o_clean) . (o_corrupt - o_clean) / ||o_corrupt - o_clean||^2``

    with ``o`` the hidden state at ``position`` after ``depth`` layers (default: the model's
    output): 1 when the patch alone turns the clean state into the corrupt one, 0 when it
    moves nothing (it can be negative, or above 1).  Heads of layers at or after ``depth``
    cannot reach that state and are not run.
    The method is the activation patching of Vig et al. (2020) and Meng et al. (2022), per
    head and per position as in Wang et al. (2023).

    Args:
        clean, corrupt: the two sentences; they must tokenize to the same number of tokens.
        position: a token of ``clean`` (a str occurring once) or its position.
        depth: where the difference is measured, as an index of ``Run.resid_pre``: 1 is the
            input of layer 1 (what layer 0 wrote), ``n_layers`` (the default) the output.
        layers: the layers whose heads are patched (default all below ``depth``).

    Returns:
        dict with ``tokens`` (clean) and ``corrupt_tokens`` (lists of ``T`` str),
        ``position`` (int), ``depth`` (int), ``difference`` (float, ``||o_corrupt - o_clean||``,
        in the units of the hidden states) and ``effect``: ``(n_layers, H)`` float64,
        unitless, NaN for the layers not patched.

    Raises:
        TypeError: a text is not a str; ``position`` neither an int nor a str.
        ValueError: the two tokenize to different lengths; the outputs at ``position`` are
            equal (nothing to carry); as :func:`token_position`.
        IndexError: a layer out of range; ``depth`` not in ``1..n_layers``; a layer patched
            at or after ``depth``.
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    n_layers, n_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    depth = n_layers if depth is None else _validate.index(depth, n_layers + 1, "depth")
    if depth == 0:
        raise IndexError("depth must be 1..n_layers: no head acts before the input of layer 0")
    base = encoder.run(_validate.text(clean, "clean"), model=model, tokenizer=tokenizer)
    other = encoder.run(_validate.text(corrupt, "corrupt"), model=model, tokenizer=tokenizer)
    if len(base.tokens) != len(other.tokens):
        raise ValueError(f"clean and corrupt must have the same number of tokens, got {len(base.tokens)} "
                         f"({base.tokens}) and {len(other.tokens)} ({other.tokens})")
    i = token_position(base.tokens, position)
    layers = range(depth) if layers is None else [_validate.index(l, n_layers, "layer") for l in _ints(layers, "layers")]
    late = [l for l in layers if l >= depth]
    if late:
        raise IndexError(f"layer(s) {late} cannot change the state after {depth} layer(s); patch layers 0..{depth - 1}")
    o_clean, o_corrupt = base.resid_pre[depth][i].double(), other.resid_pre[depth][i].double()
    delta = o_corrupt - o_clean
    norm2 = float(delta @ delta)
    if norm2 == 0.0:
        raise ValueError(f"the two sentences give the same output at position {i} ({base.tokens[i]!r}): "
                         "there is no difference to carry")
    effect = torch.full((n_layers, n_heads), float("nan"), dtype=torch.float64)
    for l in layers:
        for h in range(n_heads):
            edit = {"layer": l, "head": h, "mode": "patch", "source": other, "position": i}   # corrupt z at i only
            patched = encoder.run(clean, edits=[edit], model=model, tokenizer=tokenizer).resid_pre[depth][i].double()
            effect[l, h] = float((patched - o_clean) @ delta) / norm2
    return {"tokens": list(base.tokens), "corrupt_tokens": list(other.tokens), "position": i, "depth": depth,
            "difference": norm2 ** 0.5, "effect": effect}


def probe_accuracy(features, labels, groups, *, n_folds: int = 4, steps: int = 100, lr: float = 0.1,
                   weight_decay: float = 1e-3, seed: int = 0) -> torch.Tensor:
    """Held-out accuracy of linear probes: multinomial logistic regression, one per row of
    ``features``, all trained at once (full-batch Adam), with cross-validation by group.

    Tokens are split into ``n_folds`` folds by ``groups % n_folds`` (give each sentence its own
    group, so that no sentence is in both the training and the test part of a fold); each
    fold's probe is trained on the other folds, with features standardised by the training
    part's mean and standard deviation, and tested on its own.  The accuracy pools the
    predictions of every fold, so every token is predicted once, by a probe that never saw its
    sentence.  A probe answers "can a linear map read the labels from these vectors?"; what that
    means needs controls (shuffled labels, features not made for the purpose), as in Hewitt &
    Liang (2019).

    Shapes:
        features ``(P, N, d)`` float (P probes of N tokens with d features each); labels
        ``(P, N)`` or ``(N,)`` int64 in ``0..C-1``; groups ``(N,)`` int64.  Returns ``(P,)``
        float64, the share of the N tokens predicted correctly (unitless, 0 to 1).

    Raises:
        TypeError: a tensor of the wrong dtype.  ValueError: shapes that do not match, a
            negative label, a fold with no test or no training token, ``n_folds < 2``, or
            non-finite features.
    """
    if not isinstance(features, torch.Tensor) or not features.is_floating_point() or features.dim() != 3:
        raise TypeError(f"features must be a float tensor (P, N, d), got {getattr(features, 'shape', type(features))}")
    P, N, d = features.shape
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64:
        raise TypeError(f"labels must be an int64 tensor (P, N) or (N,), got {getattr(labels, 'dtype', type(labels))}")
    labels = labels.expand(P, N) if labels.shape == (N,) else labels
    if labels.shape != (P, N) or int(labels.min()) < 0:
        raise ValueError(f"labels must be (P, N) = ({P}, {N}) or ({N},) with values >= 0, got {tuple(labels.shape)}")
    if not isinstance(groups, torch.Tensor) or groups.dtype != torch.int64 or groups.shape != (N,):
        raise ValueError(f"groups must be an int64 tensor ({N},), one group per token")
    n_folds = _validate.positive_int(n_folds, "n_folds")
    if n_folds < 2:
        raise ValueError(f"n_folds must be at least 2, got {n_folds}")
    if not torch.isfinite(features).all():
        raise ValueError("features must be finite")
    test = torch.stack([groups % n_folds == f for f in range(n_folds)])         # (F, N)
    if (test.sum(1) == 0).any() or (test.sum(1) == N).any():
        raise ValueError(f"every fold needs test and training tokens; groups % {n_folds} leaves a fold empty")
    C = int(labels.max()) + 1
    x = features.double()
    train = (~test).double()[:, None, :, None]                                  # (F, 1, N, 1)
    mu = (x[None] * train).sum(2, keepdim=True) / train.sum(2, keepdim=True)   # (F, P, 1, d)
    sd = (((x[None] - mu) ** 2 * train).sum(2, keepdim=True) / train.sum(2, keepdim=True)).sqrt() + 1e-6
    z = ((x[None] - mu) / sd).float()                                           # (F, P, N, d)
    target = labels[None].expand(n_folds, P, N)
    torch.manual_seed(seed)
    W = torch.zeros(n_folds, P, d, C, requires_grad=True)
    b = torch.zeros(n_folds, P, 1, C, requires_grad=True)
    optimiser = torch.optim.Adam([W, b], lr=lr)
    weight = train[..., 0].float() / train[..., 0].float().sum((1, 2), keepdim=True)   # mean over each fold's training tokens
    for _ in range(steps):
        loss_per_token = torch.nn.functional.cross_entropy((z @ W + b).permute(0, 3, 1, 2), target, reduction="none")
        loss = (loss_per_token * weight).sum() + weight_decay * (W ** 2).sum()     # problems are independent: a sum
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        hit = ((z @ W + b).argmax(-1) == target).double()                      # (F, P, N)
    return (hit * test[:, None].double()).sum(dim=(0, 2)) / N


#: Sixteen sentences written for the course's part-of-speech probe, each word tagged by hand
#: ("word/TAG"; a coarse universal tag set: NOUN, VERB (auxiliaries included), ADJ, ADV, DET,
#: ADP, PRON (possessives included), CONJ, PUNCT).
TAGGED_SENTENCES = (
    "The/DET old/ADJ man/NOUN walked/VERB slowly/ADV to/ADP the/DET small/ADJ shop/NOUN ./PUNCT",
    "She/PRON quickly/ADV read/VERB the/DET long/ADJ letter/NOUN from/ADP her/PRON brother/NOUN ./PUNCT",
    "A/DET young/ADJ girl/NOUN found/VERB a/DET red/ADJ ball/NOUN in/ADP the/DET garden/NOUN ./PUNCT",
    "They/PRON built/VERB a/DET new/ADJ house/NOUN near/ADP the/DET river/NOUN ./PUNCT",
    "The/DET children/NOUN played/VERB happily/ADV in/ADP the/DET warm/ADJ sun/NOUN ./PUNCT",
    "We/PRON ate/VERB fresh/ADJ bread/NOUN and/CONJ drank/VERB cold/ADJ water/NOUN ./PUNCT",
    "My/PRON brother/NOUN bought/VERB an/DET expensive/ADJ car/NOUN last/ADJ week/NOUN ./PUNCT",
    "The/DET dog/NOUN barked/VERB loudly/ADV at/ADP the/DET strange/ADJ visitor/NOUN ./PUNCT",
    "He/PRON carefully/ADV opened/VERB the/DET heavy/ADJ door/NOUN and/CONJ stepped/VERB inside/ADV ./PUNCT",
    "The/DET teacher/NOUN gave/VERB the/DET students/NOUN a/DET difficult/ADJ test/NOUN ./PUNCT",
    "Birds/NOUN sing/VERB sweetly/ADV in/ADP the/DET early/ADJ morning/NOUN ./PUNCT",
    "The/DET tired/ADJ workers/NOUN slept/VERB deeply/ADV after/ADP the/DET long/ADJ day/NOUN ./PUNCT",
    "You/PRON can/VERB see/VERB the/DET tall/ADJ mountains/NOUN from/ADP the/DET window/NOUN ./PUNCT",
    "The/DET soup/NOUN was/VERB hot/ADJ but/CONJ the/DET bread/NOUN was/VERB stale/ADJ ./PUNCT",
    "Our/PRON neighbours/NOUN painted/VERB their/PRON old/ADJ fence/NOUN yesterday/ADV ./PUNCT",
    "A/DET cold/ADJ wind/NOUN blew/VERB across/ADP the/DET empty/ADJ field/NOUN ./PUNCT",
)


def tagged_features(sentences=TAGGED_SENTENCES, *, model=None, tokenizer=None) -> dict:
    """Per-word queries, keys and layer inputs of the encoder on hand-tagged sentences, for a
    part-of-speech probe.  Each sentence (``"word/TAG word/TAG ..."``) is run once
    (:func:`attnlib.encoder.run`); a word split into several word pieces is represented by
    its first piece; ``[CLS]`` and ``[SEP]`` are left out.

    Returns:
        dict with ``tags`` (sorted list of the C tag names), ``labels`` ``(N,)`` int64 (index
        into ``tags``), ``groups`` ``(N,)`` int64 (the sentence of each word), ``words`` (N
        str), and, over all N words: ``q`` and ``k`` ``(n_layers, H, N, d_k)`` and ``x``
        ``(n_layers, N, d_model)`` (the input of each layer), float32.

    Raises:
        ValueError: a sentence not in ``word/TAG`` form, or whose words tokenize differently
            alone and in the sentence.
    """
    model, tokenizer = model_and_tokenizer(model, tokenizer)
    parsed = []
    for line in _validate.text_list(list(sentences), "sentences"):
        pairs = [item.rsplit("/", 1) for item in line.split()]
        if any(len(p) != 2 or not p[0] or not p[1] for p in pairs):
            raise ValueError(f"each word must be written word/TAG, got {line!r}")
        parsed.append(pairs)
    tags = sorted({tag for pairs in parsed for _, tag in pairs})
    q, k, x, labels, groups, words = [], [], [], [], [], []
    for n, pairs in enumerate(parsed):
        sentence_words = [w for w, _ in pairs]
        enc = tokenizer(sentence_words, is_split_into_words=True)
        r = encoder.run(" ".join(sentence_words), model=model, tokenizer=tokenizer)
        if r.input_ids.tolist() != enc["input_ids"]:
            raise ValueError(f"the words of {' '.join(sentence_words)!r} tokenize differently in the sentence")
        first = [enc.word_ids().index(i) for i in range(len(sentence_words))]   # first piece of each word
        q.append(r.stacked("q")[:, :, first])                                   # (L, H, n, d_k)
        k.append(r.stacked("k")[:, :, first])
        x.append(torch.stack(r.resid_pre[:-1])[:, first])                        # (L, n, d_model)
        labels += [tags.index(t) for _, t in pairs]
        groups += [n] * len(pairs)
        words += sentence_words
    return {"tags": tags, "labels": torch.tensor(labels), "groups": torch.tensor(groups), "words": words,
            "q": torch.cat(q, dim=2).cpu(), "k": torch.cat(k, dim=2).cpu(), "x": torch.cat(x, dim=1).cpu()}


def pos_probe(data: dict, layers, *, seed: int = 0, **probe_kwargs) -> dict:
    """The part-of-speech probe of the course with its controls, for each head of each of
    ``layers``: :func:`probe_accuracy` on

    * ``q``, ``k``: the head's queries and keys (``d_k`` features per word);
    * ``random``: as many random ``d_k``-dimensional projections of the same layer's input
      ``x`` (Gaussian matrices, seeded per layer, so a layer's result does not depend on
      which other layers are probed with it), the same amount of the same information, with no
      training for attention: the baseline for "are queries and keys *organised* by part of
      speech?";
    * ``shuffled``: the queries with the labels permuted over all words (seeded), the control
      for what a probe can fit without any relation between vectors and tags;
    * ``control``, ``control_k``, ``control_random``: the control task of Hewitt & Liang (2019),
      :func:`control_labels` (one random tag per word type), read from the queries, the keys
      and the random views.  A word type seen in training can be memorised; one that is not
      cannot.  *Selectivity* is a representation's accuracy minus its control accuracy
      (``q - control``): high when the probe reads the tags, not the words;

    and ``majority``, the share of the most frequent tag.  ``data`` is
    :func:`tagged_features`'s result; other keyword arguments go to :func:`probe_accuracy`.

    Returns:
        dict with ``q``, ``k``, ``random``, ``shuffled``, ``control``, ``control_k`` and
        ``control_random``, each ``(len(layers), H)`` float64 (held-out accuracy, 0 to 1),
        ``majority`` (float) and ``layers`` (list).  Adding the control probes leaves the
        others unchanged: the probes are independent problems.

    Raises:
        IndexError: a layer out of range; as :func:`probe_accuracy`.
    """
    layers = [_validate.index(l, data["q"].shape[0], "layer") for l in _ints(layers, "layers")]
    q, k, x = data["q"][layers], data["k"][layers], data["x"][layers]          # (L', H, N, d_k), (L', N, d_model)
    L, H, N, d_k = q.shape
    projections = torch.stack([torch.randn(H, x.shape[-1], d_k,                # (L', H, d_model, d_k): one
                                           generator=torch.Generator().manual_seed(seed + 1000 * (l + 1)))
                               for l in layers])                                # seed per layer, whatever else is run
    random = torch.einsum("lnd,lhde->lhne", x, projections)
    y = data["labels"]
    shuffled = y[torch.randperm(N, generator=torch.Generator().manual_seed(seed))]
    control = control_labels(data["words"], y, seed=seed)                       # (N,): one tag per word type
    feats = torch.stack([q, k, random, q, q, k, random]).reshape(-1, N, d_k)     # (7 L' H, N, d_k)
    labels = torch.stack([y, y, y, shuffled, control, control, control])[:, None, None].expand(7, L, H, N).reshape(-1, N)
    acc = probe_accuracy(feats, labels, data["groups"], seed=seed, **probe_kwargs).reshape(7, L, H)
    return {"q": acc[0], "k": acc[1], "random": acc[2], "shuffled": acc[3], "control": acc[4],
            "control_k": acc[5], "control_random": acc[6], "layers": layers,
            "majority": float((y == y.mode().values).double().mean())}


def control_labels(words, labels, *, seed: int = 0) -> torch.Tensor:
    """The control task of Hewitt & Liang (2019, "Designing and interpreting probes with control
    tasks", EMNLP): every word *type* gets one label, drawn at random from the empirical
    distribution of the real ``labels``, and keeps it wherever it occurs.  A probe can score on
    it only by memorising word types, so a probe's accuracy on the real labels minus its
    accuracy on these (its *selectivity*) says how much of the accuracy is not memorisation.
    Types are compared in lower case, as the course's uncased tokenizer reads them; they are
    drawn in sorted order, so the labels depend on the set of words and the seed only.

    Shapes:
        ``words``: N str; ``labels``: ``(N,)`` int64 in ``0..C-1``.  Returns ``(N,)`` int64 in
        ``0..C-1``, equal for equal types.

    Raises:
        TypeError: ``words`` is not a list or tuple of str, or ``labels`` not an int64 tensor.
        ValueError: lengths differ, no words, or a negative label.
    """
    if isinstance(words, str) or not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        raise TypeError(f"words must be a list or tuple of str, got {type(words).__name__}")
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64 or labels.dim() != 1:
        raise TypeError(f"labels must be a 1-D int64 tensor, got {getattr(labels, 'dtype', type(labels))}")
    if len(words) != labels.shape[0] or not words or int(labels.min()) < 0:
        raise ValueError(f"words and labels must have the same non-zero length and labels be >= 0, got "
                         f"{len(words)} words and labels {tuple(labels.shape)}")
    types = sorted({w.lower() for w in words})
    counts = torch.bincount(labels.cpu()).double()                              # (C,): the empirical distribution
    drawn = torch.multinomial(counts, len(types), replacement=True,
                              generator=torch.Generator().manual_seed(seed))     # (n_types,)
    by_type = dict(zip(types, drawn.tolist()))
    return torch.tensor([by_type[w.lower()] for w in words], dtype=torch.int64)


# ----------------------------------------------------------------------------- tests of a claim
def _binomial_pmf(n: int, p: Fraction) -> list:
    """Exact probabilities of 0..n successes in n trials of probability p (Fractions)."""
    return [math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(n + 1)]


def binomial_test(k: int, n: int, p: float = 0.5, *, alternative: str = "two-sided") -> float:
    """The exact binomial test: the probability, if each of ``n`` independent trials succeeds
    with probability ``p``, of a count of successes at least as extreme as ``k``.

    ``alternative="greater"``: P(X >= k); ``"less"``: P(X <= k); ``"two-sided"``: the sum of
    P(X = j) over every j no more likely than k (with scipy's relative tolerance of 1e-7 for
    ties), the definition of ``scipy.stats.binomtest``.  Computed in exact rational arithmetic
    (``p`` is taken as the binary fraction a float holds), then rounded once to a float.

    Shapes:
        scalars in, a float in [0, 1] out (a probability, unitless).

    Raises:
        TypeError: ``k`` or ``n`` not an int, ``p`` not a real number.
        ValueError: ``n < 1``, ``k`` outside ``0..n``, ``p`` outside [0, 1], or an unknown
            ``alternative``.

    >>> round(binomial_test(9, 10), 6)      # 2 * (C(10,9) + C(10,10)) / 2**10 = 22 / 1024
    0.021484
    """
    n = _validate.positive_int(n, "n")
    k = _validate.non_negative_int(k, "k")
    if k > n:
        raise ValueError(f"k must be in 0..n = 0..{n}, got {k}")
    p = Fraction(_validate.real(p, "p", low=0.0, high=1.0))
    _validate.choice(alternative, ("two-sided", "greater", "less"), "alternative")
    pmf = _binomial_pmf(n, p)
    if alternative == "greater":
        total = sum(pmf[k:])
    elif alternative == "less":
        total = sum(pmf[:k + 1])
    else:
        limit = pmf[k] * Fraction(1 + 10 ** 7, 10 ** 7)
        total = sum(x for x in pmf if x <= limit)
    return min(1.0, float(total))


def sign_test(differences, *, alternative: str = "two-sided") -> dict:
    """The sign test (Dixon & Mood 1946): under the null hypothesis each paired difference is
    as likely to be positive as negative, so the number of positive ones among the non-zero ones
    is binomial with p = 1/2 (:func:`binomial_test`).  Zero differences carry no sign and are
    left out.  It assumes only independent pairs, nothing about the size or the distribution of
    the differences.

    ``alternative="greater"`` tests for a tendency to be positive, ``"less"`` negative,
    ``"two-sided"`` either.

    Shapes:
        ``differences``: a sequence or 1-D tensor of N finite real numbers.  Returns a dict with
        ``n`` (non-zero differences), ``n_positive``, ``n_negative``, ``n_zero`` (ints) and
        ``p_value`` (float in [0, 1]).

    Raises:
        TypeError: not a sequence of real numbers.  ValueError: NaN or infinity, or no
            non-zero difference; an unknown ``alternative``.

    >>> sign_test([0.2, 0.1, -0.05, 0.3, 0.0])["n_positive"]
    3
    """
    if isinstance(differences, torch.Tensor):
        if differences.dim() != 1:
            raise ValueError(f"differences must be 1-D, got shape {tuple(differences.shape)}")
        differences = differences.tolist()
    if isinstance(differences, (str, bytes)) or not hasattr(differences, "__iter__"):
        raise TypeError(f"differences must be a sequence of real numbers, got {type(differences).__name__}")
    values = [_validate.real(d, "each difference") for d in differences]
    positive, negative = sum(d > 0 for d in values), sum(d < 0 for d in values)
    n = positive + negative
    if n == 0:
        raise ValueError("the sign test needs at least one non-zero difference")
    return {"n": n, "n_positive": positive, "n_negative": negative, "n_zero": len(values) - n,
            "p_value": binomial_test(positive, n, 0.5, alternative=alternative)}


def referent_shifts(pairs, layer: int, head: int, *, query: str = "it", model=None, tokenizer=None) -> list:
    """How a pronoun's weight on two nouns moves when one word changes its referent: the
    measurement behind a minimal-pair test of "this head attends to what ``query`` refers to".

    Each pair is ``(text_a, text_b, referent_a, referent_b)`` (as
    :data:`attnlib.corpus.COREFERENCE_PAIRS`): ``query`` refers to ``referent_a`` in ``text_a``
    and to ``referent_b`` in ``text_b``; the two texts should differ in one word.  With
    ``w_a[x]`` the weight of ``query`` on noun ``x`` in ``text_a`` (:func:`pair_weights`):

    * ``gain_a = w_a[referent_a] - w_b[referent_a]``: how much ``referent_a`` gains where it is
      the referent; ``gain_b = w_b[referent_b] - w_a[referent_b]`` likewise;
    * ``shift = (gain_a + gain_b) / 2``: the mean gain of a noun when the changed word makes it
      the referent, one number per pair (positive: the weight follows the referent);
    * ``winner_a`` / ``winner_b``: which of the two nouns gets more weight in each text, and
      ``moved``: whether that winner differs between the texts.

    Shapes:
        returns one dict per pair with the texts, the referents, ``weights_a`` and ``weights_b``
        (``{noun: weight}``, floats in [0, 1]), ``gain_a``, ``gain_b``, ``shift`` (differences of
        weights, unitless, in [-1, 1]), ``winner_a``, ``winner_b`` (str) and ``moved`` (bool).

    Raises:
        TypeError: ``pairs`` is not a list or tuple of 4-tuples of str.
        ValueError: as :func:`token_position` (a noun or the query missing or repeated).
        IndexError: layer or head out of range.
    """
    if isinstance(pairs, str) or not isinstance(pairs, (list, tuple)) or not pairs or not all(
            isinstance(pair, (list, tuple)) and len(pair) == 4 and all(isinstance(x, str) for x in pair)
            for pair in pairs):
        raise TypeError("pairs must be a non-empty list of (text_a, text_b, referent_a, referent_b) str tuples")
    rows = []
    for text_a, text_b, ref_a, ref_b in pairs:
        row_a, row_b = pair_weights([text_a, text_b], layer, head, query, [ref_a, ref_b],
                                    model=model, tokenizer=tokenizer)
        wa, wb = row_a["weights"], row_b["weights"]
        for text, w in ((text_a, wa), (text_b, wb)):
            if None in w.values():
                raise ValueError(f"{text!r} lacks one of the nouns {ref_a!r}, {ref_b!r}")
        gain_a, gain_b = wa[ref_a] - wb[ref_a], wb[ref_b] - wa[ref_b]
        winner_a = ref_a if wa[ref_a] >= wa[ref_b] else ref_b
        winner_b = ref_a if wb[ref_a] >= wb[ref_b] else ref_b
        rows.append({"text_a": text_a, "text_b": text_b, "referent_a": ref_a, "referent_b": ref_b,
                     "weights_a": wa, "weights_b": wb, "gain_a": gain_a, "gain_b": gain_b,
                     "shift": (gain_a + gain_b) / 2, "winner_a": winner_a, "winner_b": winner_b,
                     "moved": winner_a != winner_b})
    return rows


def head_shifts(pairs, *, query: str = "it", model=None, tokenizer=None) -> torch.Tensor:
    """The shift of :func:`referent_shifts` for every head of the model at once: one forward pass
    per sentence, every layer and head read from it, so that a head picked out on one set of
    pairs can be ranked against all the others.

    For each pair ``(text_a, text_b, referent_a, referent_b)`` and each head, with ``w_a[x]``
    the weight of ``query`` on noun ``x`` in ``text_a``, the shift is
    ``((w_a[referent_a] - w_b[referent_a]) + (w_b[referent_b] - w_a[referent_b])) / 2``,
    exactly as :func:`referent_shifts` computes it for one head.

    Shapes:
        returns ``(n_pairs, n_layers, H)``, float64 (differences of weights, unitless, in [-1, 1]);
        ``[:, layer, head]`` equals :func:`referent_shifts`' ``shift`` for that head.

    Raises:
        as :func:`referent_shifts`.

    >>> s = head_shifts(corpus.COREFERENCE_PAIRS[:2])
    >>> tuple(s.shape)
    (2, 6, 12)
    """
    referent_shifts(pairs[:1], 0, 0, query=query, model=model, tokenizer=tokenizer)   # its checks
    rows = []
    for text_a, text_b, ref_a, ref_b in pairs:
        run_a = encoder.get_attentions(text_a, model=model, tokenizer=tokenizer)
        run_b = encoder.get_attentions(text_b, model=model, tokenizer=tokenizer)
        w = {}
        for name, att in (("a", run_a), ("b", run_b)):
            i = token_position(att.tokens, query)
            row = att.stacked()[:, :, i, :]                                             # (n_layers, H, T)
            for noun in (ref_a, ref_b):
                w[name, noun] = row[..., token_position(att.tokens, noun)].double()      # (n_layers, H)
        gain_a = w["a", ref_a] - w["b", ref_a]
        gain_b = w["b", ref_b] - w["a", ref_b]
        rows.append((gain_a + gain_b) / 2)                                              # (n_layers, H)
    return torch.stack(rows)                                                            # (n_pairs, n_layers, H)


def query_key_shifts(pairs, layer: int, head: int, *, query: str = "it", model=None, tokenizer=None) -> list:
    """Which side of the dot product moves a pronoun's weight: the shift of
    :func:`referent_shifts`, split into what the pronoun's **query** changes and what the nouns'
    **keys** change between the two sentences.

    The weights of ``query`` are ``softmax(q K^T / sqrt(d_k))`` (Vaswani et al. 2017, eq. 1),
    with ``q`` its query and ``K`` the keys of its sentence, at ``layer``, ``head``.  A minimal
    pair gives two queries, ``q_a`` and ``q_b``, and two sets of keys, ``K_a`` and ``K_b``, over
    the same positions (the texts must tokenize to the same length).  Crossing them gives four
    rows of weights; ``(q_a, K_a)`` and ``(q_b, K_b)`` are the model's own.  The shift is then
    computed, as :func:`referent_shifts` computes it, between

    * ``(q_a, K)`` and ``(q_b, K)`` for ``K`` = ``K_a``, then ``K_b``, averaged: ``shift_query``,
      what the query's change alone does;
    * ``(q, K_a)`` and ``(q, K_b)`` for ``q`` = ``q_a``, then ``q_b``, averaged: ``shift_key``,
      what the keys' change alone does.

    Averaging over the other side makes the split exact: ``shift_query + shift_key = shift``
    (each side's share is its Shapley value in the two-player game of query and keys).  The
    weights are recomputed from the model's ``q`` and ``k`` (:func:`attnlib.encoder.run`); the
    crossing keeps everything below ``layer`` as the model computed it for each sentence.

    Shapes:
        returns one dict per pair: ``text_a``, ``text_b``, ``shift`` (as :func:`referent_shifts`,
        from the recomputed weights), ``shift_query`` and ``shift_key`` (differences of weights,
        unitless, in [-1, 1]).

    Raises:
        as :func:`referent_shifts`; ValueError: the two texts of a pair tokenize to different
            lengths, or ``query`` sits at different positions in them.
    """
    referent_shifts(pairs[:1], layer, head, query=query, model=model, tokenizer=tokenizer)   # its checks
    rows = []
    for text_a, text_b, ref_a, ref_b in pairs:
        run_a = encoder.run(text_a, model=model, tokenizer=tokenizer)
        run_b = encoder.run(text_b, model=model, tokenizer=tokenizer)
        ta, tb = list(run_a.tokens), list(run_b.tokens)
        if len(ta) != len(tb):
            raise ValueError(f"{text_a!r} and {text_b!r} tokenize to {len(ta)} and {len(tb)} tokens; "
                             "crossing queries and keys needs the same positions")
        i = token_position(ta, query)
        if token_position(tb, query) != i:
            raise ValueError(f"{query!r} sits at different positions in {text_a!r} and {text_b!r}")
        ja, jb = token_position(ta, ref_a), token_position(ta, ref_b)
        q = {"a": run_a.head("q", layer, head)[i].double(), "b": run_b.head("q", layer, head)[i].double()}   # (d_k,)
        K = {"a": run_a.head("k", layer, head).double(), "b": run_b.head("k", layer, head).double()}         # (T, d_k)
        scale = q["a"].shape[-1] ** 0.5

        def w(qs, ks):                                     # the weights of the query on the two nouns
            row = torch.softmax(K[ks] @ q[qs] / scale, dim=-1)                                        # (T,)
            return float(row[ja]), float(row[jb])

        def shift(first, second):                          # referent_shifts' shift between two rows
            (a_a, b_a), (a_b, b_b) = first, second         # weights on ref_a, ref_b in "text a", "text b"
            return ((a_a - a_b) + (b_b - b_a)) / 2

        s_query = (shift(w("a", "a"), w("b", "a")) + shift(w("a", "b"), w("b", "b"))) / 2
        s_key = (shift(w("a", "a"), w("a", "b")) + shift(w("b", "a"), w("b", "b"))) / 2
        s_all = shift(w("a", "a"), w("b", "b"))
        rows.append({"text_a": text_a, "text_b": text_b, "shift": s_all, "shift_query": s_query, "shift_key": s_key})
    return rows


def control_shifts(pairs, layer: int, head: int, *, query: str = "it", model=None, tokenizer=None) -> list:
    """The control of :func:`referent_shifts`: the same shift, read from the sentence's other
    words instead of the pronoun.

    In a bidirectional encoder every word of a pair's sentences sees the changed word, so the
    changed word could pull every query's weight towards the noun it is often used with
    (*delicious* towards *worm*), pronoun or not.  For each pair, each token that occurs exactly
    once in both texts and is none of ``[CLS]``, ``[SEP]``, ``query`` and the two referents
    (the changed word differs between the texts, so it never qualifies) is taken as the query in
    turn, and its shift is computed exactly as :func:`referent_shifts` computes the pronoun's:
    the mean gain of a noun's weight in the text where it is the referent.  If the pronoun's
    shift exceeds the other words' mean shift in most pairs (a sign test on the differences),
    the shift is not only the changed word's pull on every query.  It may still come from the
    nouns' keys, which only the queries that look at the nouns can see: in a head whose other
    queries look elsewhere that would move the pronoun's weights alone.
    :func:`query_key_shifts` separates the two.

    Shapes:
        returns one dict per pair: ``text_a``, ``text_b``, ``queries`` (the control tokens, in
        sentence order), ``shifts`` (``{token: shift}``, unitless, in [-1, 1]), ``mean`` (their
        mean), ``pronoun`` (``query``'s own shift, as :func:`referent_shifts`) and ``excess``
        (``pronoun - mean``).

    Raises:
        as :func:`referent_shifts`; ValueError: a pair leaves no control token.
    """
    own = referent_shifts(pairs, layer, head, query=query, model=model, tokenizer=tokenizer)
    rows = []
    for (text_a, text_b, ref_a, ref_b), mine in zip(pairs, own):
        att_a = encoder.get_attentions(text_a, model=model, tokenizer=tokenizer)
        att_b = encoder.get_attentions(text_b, model=model, tokenizer=tokenizer)
        ta, tb = list(att_a.tokens), list(att_b.tokens)
        A, B = att_a.head(layer, head), att_b.head(layer, head)               # (T_a, T_a), (T_b, T_b)
        skip = {"[CLS]", "[SEP]", query, ref_a, ref_b}
        queries = [t for t in ta if t not in skip and ta.count(t) == 1 and tb.count(t) == 1]
        if not queries:
            raise ValueError(f"{text_a!r} and {text_b!r} share no word to serve as a control query")
        shifts = {}
        for q in queries:
            qa, qb = ta.index(q), tb.index(q)
            gain_a = float(A[qa, ta.index(ref_a)] - B[qb, tb.index(ref_a)])
            gain_b = float(B[qb, tb.index(ref_b)] - A[qa, ta.index(ref_b)])
            shifts[q] = (gain_a + gain_b) / 2
        mean = sum(shifts.values()) / len(shifts)
        rows.append({"text_a": text_a, "text_b": text_b, "queries": queries, "shifts": shifts, "mean": mean,
                     "pronoun": mine["shift"], "excess": mine["shift"] - mean})
    return rows
