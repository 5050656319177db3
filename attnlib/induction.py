"""Heads that emerge: a tiny causal language model trained on the words of a real text grows
a previous-token head and an induction head (chapter 7).

The model is :class:`attnlib.transformer.TinyTransformer`, attention only.  It is trained with the
next-token loss and nothing else (no per-head target, no auxiliary loss) on sequences built
from the words of Lincoln's Gettysburg Address (:func:`attnlib.corpus.load_text`):

* each training sequence (:func:`training_batch`) is ``SEQ_LEN`` words made of short
  stretches of ``CHUNK`` consecutive words of the speech, each taken from a random place, so
  that local word order is real but the speech cannot be recited from memory; the first
  stretch is cut at a random point, so that no position is always the start of a stretch
  (were it, a head could learn where word order is real from the position alone);
* inside each sequence one span (random length ``SPAN_MIN .. SEQ_LEN / 2``) is copied to a
  random later place, so that copying what followed an earlier occurrence pays, and no fixed
  distance back does it: the distance between the two copies changes from sequence to
  sequence.

What emerges is read on held-out sequences, never used in training:

* :func:`induction_scores`: sequences of ``SEQ_LEN / 2`` distinct random words repeated once
  (the test sequences of Olsson et al. 2022); the score of a head is its mean weight, from
  each token of the second copy, on the token that followed the same token in the first
  copy.  A head that spreads its weight evenly scores :func:`uniform_induction_score`; a
  head that only looks a fixed distance back scores :func:`offset_baseline`.
* :func:`duplicate_token_scores`: the same sequences; the mean weight from each token of the
  second copy on its own earlier occurrence (Wang et al. 2023).
* :func:`previous_token_scores`: contiguous windows of the speech in its real order; the
  score is the mean weight on the immediately preceding token
  (:func:`attnlib.measures.offset_share` at offset -1).
* :func:`repeated_loss`: the next-token loss, in nats, on the second (or first) half of the
  repeated sequences, with heads edited (:mod:`attnlib.edits`: switched off, zero or mean).

Sources: Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits";
Olsson et al. (2022), "In-context Learning and Induction Heads"; Wang et al. (2023),
"Interpretability in the Wild" (duplicate-token heads).

Shapes legend: ``B`` batch, ``H`` heads, ``T`` sequence length (``SEQ_LEN``), ``V``
vocabulary size (the distinct words of the speech).
"""
from __future__ import annotations

import functools
import math
import numbers
import os
import sys
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import _validate, corpus, model_cache
from .evidence import uniform_weight
from .devices import default_device
from .measures import offset_share
from .transformer import STATIC_BOOK_ENV, TinyTransformer, repeated_tokens, run

__all__ = [
    "SEQ_LEN", "CHUNK", "SPAN_MIN", "D_MODEL", "N_HEADS", "BATCH_SIZE", "LR", "STEPS",
    "vocabulary", "encode", "decode", "training_batch", "repeated_sequences", "text_sequences",
    "build_model", "TrainConfig", "train", "induction_scores", "previous_token_scores", "duplicate_token_scores",
    "repeated_loss", "natural_repeats", "natural_repeat_loss",
    "uniform_induction_score", "uniform_previous_score", "offset_baseline", "head_patterns", "trained",
    "TRAINING_SOURCES", "checkpoint",
]

SEQ_LEN = 32        # T, tokens per sequence
CHUNK = 3           # consecutive words of the speech per stretch of a training sequence
SPAN_MIN = 4        # shortest repeated span in training
D_MODEL = 64        # model width; N_HEADS heads of width D_MODEL / N_HEADS
N_HEADS = 4
BATCH_SIZE = 64
LR = 1e-2           # Adam's learning rate
STEPS = 1200        # training steps of the chapter's runs
PROBE_EVERY = 25    # steps between two readings of the heads during training
N_HELD_OUT = 256    # held-out sequences per measure

_HERE = os.path.dirname(os.path.abspath(__file__))
#: The files whose source decides a training run's result (the model, its attention, the
#: training loop and its probes, the text it learns from): their SHA-256 is part of a cached
#: run's key (:mod:`attnlib.model_cache`), so editing any of them retrains.
TRAINING_SOURCES = tuple(os.path.join(_HERE, name) for name in (
    "induction.py", "transformer.py", "multihead.py", "attention.py", "masks.py", "softmax.py",
    "positions.py", "kv_cache.py", "edits.py", "measures.py", "evidence.py", "corpus.py", "devices.py", "_validate.py",
    os.path.join("data", "gettysburg.txt")))

# The digest of those sources as this process loaded them: a file edited after the import does
# not change the key, so a run of the old code is never stored under the new code's key.
_SOURCES_DIGEST = model_cache.source_digest(TRAINING_SOURCES)

# Offsets added to ``seed`` so that held-out sequences never share a random stream with the
# training batches (which use ``seed`` itself).
_HELD_OUT_REPEATED, _HELD_OUT_TEXT, _HELD_OUT_PLAIN, _PROBE = 10_000, 20_000, 30_000, 40_000


@functools.lru_cache(maxsize=1)
def _speech():
    words = corpus.words_of(corpus.load_text("gettysburg"))
    vocab = sorted(set(words))
    index = {w: i for i, w in enumerate(vocab)}
    return tuple(vocab), index, torch.tensor([index[w] for w in words])


def vocabulary() -> list:
    """The model's vocabulary: the distinct words and punctuation marks of the Gettysburg
    Address (:func:`attnlib.corpus.words_of`), sorted; a word's id is its position here."""
    return list(_speech()[0])


def encode(words) -> torch.Tensor:
    """Words -> ids ``(T,)`` int64.

    Raises:
        TypeError: ``words`` is a single str (pass a list of words).
        ValueError: a word is not in :func:`vocabulary`.
    """
    if isinstance(words, (str, bytes)) or not hasattr(words, "__iter__"):
        raise TypeError(f"words must be a list of words, got {type(words).__name__}")
    index = _speech()[1]
    missing = [w for w in words if w not in index]
    if missing:
        raise ValueError(f"not in the speech's vocabulary: {missing[:5]}")
    return torch.tensor([index[w] for w in words], dtype=torch.long)


def decode(ids) -> list:
    """Ids -> words: ``ids`` a 1-D tensor of integers or a list/tuple of ints, each in
    ``0..V-1`` (``V`` the vocabulary size); returns one word per id.

    Raises:
        TypeError: ``ids`` is a str, a float tensor, or holds something that is not an int
            (a float such as 1.7 is refused, never rounded).
        ValueError: an id outside ``0..V-1`` (a negative id would silently index from the end).
    """
    vocab = _speech()[0]
    if isinstance(ids, torch.Tensor):
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool or ids.dim() > 1:
            raise TypeError(f"ids must be a 1-D integer tensor, got dtype {ids.dtype} and shape {tuple(ids.shape)}")
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple)):
        raise TypeError(f"ids must be a list of ints or a 1-D integer tensor, got {type(ids).__name__}")
    out = []
    for n, i in enumerate(ids):
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"ids[{n}] must be an int, got {type(i).__name__} {i!r}")
        if not 0 <= int(i) < len(vocab):
            raise ValueError(f"ids[{n}] = {i} is outside the vocabulary 0..{len(vocab) - 1}")
        out.append(vocab[int(i)])
    return out


def _generator(seed, offset: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(_validate.non_negative_int(seed, "seed") + offset)


def training_batch(batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """One training batch (see the module docstring): stretches of ``CHUNK`` consecutive
    words from random places of the speech, with one span copied to a random later place.

    Shapes:
        returns ``(B, SEQ_LEN)`` int64 with ``B = batch_size``.

    Raises:
        TypeError: ``batch_size`` not an int, ``generator`` not a ``torch.Generator``.
        ValueError: ``batch_size < 1``.
    """
    batch_size = _validate.positive_int(batch_size, "batch_size")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return _chunked(batch_size, generator, repeat=True)


def _chunked(n: int, generator: torch.Generator, *, repeat: bool) -> torch.Tensor:
    ids = _speech()[2]
    T, n_chunks = SEQ_LEN, -(-SEQ_LEN // CHUNK) + 1                             # enough stretches to fill T
    starts = torch.randint(0, len(ids) - CHUNK + 1, (n, n_chunks), generator=generator)
    x = ids[(starts[:, :, None] + torch.arange(CHUNK)).reshape(n, -1)]          # (B, n_chunks * CHUNK)
    phase = torch.randint(0, CHUNK, (n, 1), generator=generator)                # stretches start anywhere:
    x = x.gather(1, phase + torch.arange(T))                                    # (B, T), no boundary at a fixed position
    if not repeat:
        return x
    span = torch.randint(SPAN_MIN, T // 2 + 1, (n, 1), generator=generator)   # (B, 1) span lengths
    u = torch.rand(n, 2, generator=generator)
    src = (u[:, :1] * (T - 2 * span + 1)).long()                               # 0 .. T - 2 span
    dst = src + span + (u[:, 1:] * (T - span - (src + span) + 1)).long()      # src + span .. T - span
    pos = torch.arange(T).expand(n, T)
    inside = (pos >= dst) & (pos < dst + span)
    source = torch.where(inside, pos - (dst - src), pos)                       # the second copy reads the first
    return x.gather(1, source)


def repeated_sequences(n: int = N_HELD_OUT, seed: int = 0) -> torch.Tensor:
    """Held-out test sequences: ``SEQ_LEN / 2`` distinct words of the vocabulary in random
    order, then the same words again.  Token ``i`` of the second copy (position
    ``SEQ_LEN / 2 + i``) was followed, in the first copy, by the token at position ``i + 1``.

    Shapes:
        returns ``(n, SEQ_LEN)`` int64.
    """
    n = _validate.positive_int(n, "n")
    seed = _validate.non_negative_int(seed, "seed")
    return repeated_tokens(n, SEQ_LEN, len(_speech()[0]), _HELD_OUT_REPEATED + seed)


def _plain_sequences(n: int, seed: int) -> torch.Tensor:
    """Distinct random words, no repeat: the positional baseline's sequences ``(n, SEQ_LEN)``."""
    g = _generator(seed, _HELD_OUT_PLAIN)
    return torch.stack([torch.randperm(len(_speech()[0]), generator=g)[:SEQ_LEN] for _ in range(n)])


def text_sequences(n: int = N_HELD_OUT, seed: int = 0) -> torch.Tensor:
    """Real text: windows of ``SEQ_LEN`` consecutive words of the speech, in their real order
    (training only ever sees stretches of ``CHUNK`` words).  Not held out: the windows come
    from the speech the model is trained on, and their starts are drawn at random with
    replacement, so with ``n`` near the number of possible windows many windows repeat.

    Shapes:
        returns ``(n, SEQ_LEN)`` int64.
    """
    n = _validate.positive_int(n, "n")
    ids = _speech()[2]
    starts = torch.randint(0, len(ids) - SEQ_LEN + 1, (n,), generator=_generator(seed, _HELD_OUT_TEXT))
    return ids[starts[:, None] + torch.arange(SEQ_LEN)]


def build_model(n_layers: int = 2, seed: int = 0, *, n_heads: int = N_HEADS, qk_norm: bool = False) -> TinyTransformer:
    """The untrained model of :func:`train`, on :func:`attnlib.default_device`: width
    ``D_MODEL`` split into ``n_heads`` heads of width ``D_MODEL / n_heads`` (the heads sweep of
    ``bench/bench_heads.py`` changes ``n_heads`` at equal width).

    Raises:
        TypeError: ``n_heads`` not an int.  ValueError: ``n_heads`` below 1 or not dividing ``D_MODEL``.
    """
    n_heads = _validate.positive_int(n_heads, "n_heads")
    if D_MODEL % n_heads:
        raise ValueError(f"n_heads must divide D_MODEL = {D_MODEL}, got {n_heads}")
    return TinyTransformer(len(_speech()[0]), d_model=D_MODEL, n_heads=n_heads, n_layers=n_layers,
                           max_len=SEQ_LEN, seed=seed, qk_norm=qk_norm).to(default_device())


def _model(model) -> TinyTransformer:
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be an attnlib.transformer.TinyTransformer (e.g. from attnlib.induction.train), "
                        f"got {type(model).__name__}")
    if model.max_len < SEQ_LEN:
        raise ValueError(f"model.max_len = {model.max_len} is shorter than the test sequences ({SEQ_LEN})")
    return model


def _device(model):
    return next(model.parameters()).device


def _next_token_loss(logits, tokens) -> torch.Tensor:
    """``(B, T-1)`` nats: position ``i`` predicts token ``i + 1``."""
    B, T, V = logits.shape
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1),
                           reduction="none").view(B, T - 1)


def _induction_from_weights(weights: list, shift: int = 1) -> torch.Tensor:
    """``(n_layers, H)``: on repeated sequences of length ``T = 2 n``, the mean of
    ``A[i, i - n + shift]`` over the queries ``i = n .. T-1`` of the second copy and the
    batch (``shift=1``: the token after the earlier occurrence; ``0``: the occurrence)."""
    out = []
    for w in weights:                                              # (B, H, T, T)
        n = w.shape[-1] // 2
        diag = torch.diagonal(w, offset=-(n - shift), dim1=-2, dim2=-1)  # A[i, i-n+shift], i = n-shift..T-1
        out.append(diag[..., shift:].mean(dim=(0, 2)))                   # queries of the second copy only
    return torch.stack(out).float().cpu()


@torch.no_grad()
def _probe(model, repeated, text) -> dict:
    model.eval()
    logits, weights = model(repeated)
    loss = _next_token_loss(logits, repeated)                           # (B, T-1)
    n = repeated.shape[1] // 2
    _, text_weights = model(text)
    return {"induction": _induction_from_weights(weights),
            "previous": torch.stack([offset_share(w, -1).mean(0) for w in text_weights]).float().cpu(),
            "first_half": loss[:, :n - 1].mean().item(), "second_half": loss[:, n:].mean().item()}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run of :func:`train` (kept in its history as
    ``history["config"]``, so a figure can say exactly what produced it).

    Attributes:
        n_layers, seed, steps: :func:`train`'s arguments.  seq_len, d_model, n_heads,
        batch_size, lr: the module's constants (``SEQ_LEN``, ``D_MODEL``, ``N_HEADS``,
        ``BATCH_SIZE``, ``LR``; Adam with a cosine decay to 0).  vocab_size: the words of the
        speech.  device: where it ran.  qk_norm: :func:`train`'s argument (QK-LayerNorm).
    """

    n_layers: int
    seed: int
    steps: int
    seq_len: int = SEQ_LEN
    d_model: int = D_MODEL
    n_heads: int = N_HEADS
    batch_size: int = BATCH_SIZE
    lr: float = LR
    vocab_size: int = 0
    device: str = "cpu"
    qk_norm: bool = False


def train(n_layers: int = 2, seed: int = 0, steps: int | None = None, progress: bool = True, *,
          n_heads: int = N_HEADS, cache: bool = True, qk_norm: bool = False):
    """Train the chapter's model: :func:`build_model` (seeded by ``seed``) on
    :func:`training_batch` batches (drawn from a generator seeded by ``seed``) with Adam and
    the next-token cross-entropy, nothing else.  The same arguments repeat the same run on
    the same machine.

    With ``progress=True`` a ``tqdm`` bar shows the run (a widget in a notebook); while the
    static book is built (environment variable :data:`attnlib.transformer.STATIC_BOOK_ENV`
    set) one line per run is printed instead.  Every ``PROBE_EVERY`` steps the heads are
    read on a small held-out set (64 repeated sequences and 64 windows of the speech).

    A finished run is kept in the trained-model cache (:mod:`attnlib.model_cache`, keyed on the
    configuration, the source of :data:`TRAINING_SOURCES` and the PyTorch version): the same
    call in any later process loads it (a fraction of a second) instead of training (from under
    half a minute on a quiet laptop CPU to a few minutes on a busy one; bench/results/model_cache.md),
    and says so.  ``cache=False`` always trains and stores nothing.

    Training runs on one CPU thread (restored afterwards): a model this small trains fastest
    on one, since splitting 64-wide matrix products across cores costs more in
    synchronisation than it saves.  A GPU is used when present.

    Args:
        n_layers: 2 for the chapter's model, 1 for the control.
        seed: initial weights and batches.
        steps: training steps (default ``STEPS``).
        progress: show progress.
        n_heads: heads per layer at the same width ``D_MODEL`` (default ``N_HEADS``).
        qk_norm: train with QK-LayerNorm (:class:`attnlib.transformer.TinyTransformer`'s
            ``qk_norm``; chapter 4 compares it with the default model).
        cache: load the run from the trained-model cache when it is there, store it when it
            was trained.

    Returns:
        ``(model, history)``: the trained model (in eval mode) and a dict with ``loss`` (one
        float per step, nats), ``probe_step`` (steps read), ``induction`` and ``previous``
        (one ``(n_layers, H)`` tensor per probe step), ``first_half`` and ``second_half``
        (repeated sequences' loss per probe step, nats), ``checkpoints`` (the model's
        ``state_dict`` at each probe step, on the CPU, ``{step: state_dict}``; rebuild one with
        :func:`checkpoint`), ``seconds`` (wall time of the
        training, seconds; for a run loaded from the cache, that of the run that trained it),
        ``config`` (a :class:`TrainConfig`) and ``cached`` (``True`` when it was loaded).

    Raises:
        TypeError: ``n_layers``, ``seed`` or ``steps`` not an int, ``progress`` or ``cache`` not a bool.
        ValueError: ``n_layers`` or ``steps`` below 1, ``seed`` negative, ``n_heads`` not
            dividing ``D_MODEL``.

    Source: small attention-only models trained on next-token prediction, as in Elhage et
    al. (2021) and Olsson et al. (2022), in miniature.
    """
    n_layers = _validate.positive_int(n_layers, "n_layers")
    seed = _validate.non_negative_int(seed, "seed")
    steps = STEPS if steps is None else _validate.positive_int(steps, "steps")
    progress = _validate.flag(progress, "progress")
    cache = _validate.flag(cache, "cache")
    qk_norm = _validate.flag(qk_norm, "qk_norm")
    model = build_model(n_layers, seed, n_heads=n_heads, qk_norm=qk_norm)
    device = _device(model)
    config = TrainConfig(n_layers=n_layers, seed=seed, steps=steps, n_heads=model.n_heads,
                         vocab_size=len(_speech()[0]), device=str(device), qk_norm=qk_norm)
    summary = progress and bool(os.environ.get(STATIC_BOOK_ENV))
    if not cache:
        return _train_run(model, config, progress, summary)
    key = _cache_key(config)
    with model_cache.lock(key, waiting=f"waiting for another process that is training the same "
                                       f"{n_layers}-layer model (seed {seed})" if progress else None):
        loaded = _from_cache(key, config)
        if loaded is None:
            model, history = _train_run(model, config, progress, summary)
            _to_cache(key, model, history)
            return model, history
    model, history = loaded
    if model.n_heads == N_HEADS and not qk_norm:
        _RUNS[(n_layers, seed, steps)] = (model, history)
    if progress:
        print(f"{n_layers}-layer model, seed {seed}: {steps} steps, loaded from the trained-model cache "
              f"(trained in {history['seconds']:.1f} s, final loss {history['loss'][-1]:.3f})", file=sys.stdout)
    return model, history


def _train_run(model, config: TrainConfig, progress: bool, summary: bool):
    """The training loop of :func:`train` (arguments already checked)."""
    n_layers, seed, steps, device = config.n_layers, config.seed, config.steps, _device(model)
    generator = _generator(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    schedule = torch.optim.lr_scheduler.LambdaLR(            # cosine decay to 0 over the run
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))
    probe_repeated = repeated_sequences(64, seed + _PROBE).to(device)
    probe_text = text_sequences(64, seed + _PROBE).to(device)
    history = {"loss": [], "probe_step": [], "induction": [], "previous": [], "first_half": [],
               "second_half": [], "checkpoints": {}, "config": config}

    def record(step):
        reading = _probe(model, probe_repeated, probe_text)
        history["probe_step"].append(step)
        for key, value in reading.items():
            history[key].append(value)
        history["checkpoints"][step] = {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
        model.train()

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        record(0)
        model.train()
        bar = None
        if progress and not summary:
            from tqdm.auto import tqdm
            bar = tqdm(total=steps, desc=f"{n_layers}-layer model, seed {seed}", leave=True)
        for step in range(1, steps + 1):
            tokens = training_batch(BATCH_SIZE, generator).to(device)
            logits, _ = model(tokens)                               # (B, T, V)
            loss = _next_token_loss(logits, tokens).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            history["loss"].append(loss.item())
            if step % PROBE_EVERY == 0 or step == steps:
                record(step)
                if bar is not None:
                    bar.set_postfix(loss=f"{history['loss'][-1]:.3f}")
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    finally:
        torch.set_num_threads(previous_threads)
        model.eval()
    history["seconds"] = time.perf_counter() - start
    history["cached"] = False
    if model.n_heads == N_HEADS and not config.qk_norm:            # trained() serves the chapter's model only
        _RUNS[(n_layers, seed, steps)] = (model, history)
    if summary:
        print(f"{n_layers}-layer model, seed {seed}: {steps} steps in {history['seconds']:.1f} s, "
              f"final loss {history['loss'][-1]:.3f}", file=sys.stdout)
    return model, history


_RUNS: dict = {}


def _cache_key(config: TrainConfig) -> str:
    fields = {**config.__dict__, "device": torch.device(config.device).type, "chunk": CHUNK, "span_min": SPAN_MIN,
              "probe_every": PROBE_EVERY}
    return model_cache.entry_key("induction.train", fields, _SOURCES_DIGEST)


def _from_cache(key: str, config: TrainConfig):
    """``(model, history)`` from the cache, or ``None``; an entry that does not fit ``config``
    is ignored with a warning (it cannot happen unless the file was replaced by hand)."""
    payload = model_cache.load(key)
    if payload is None:
        return None
    try:
        stored = payload["history"]
        if stored["config"] != config.__dict__:
            raise ValueError(f"it was trained with {stored['config']}, not {config.__dict__}")
        model = TinyTransformer.from_payload(payload["model"], device=config.device, source=f"cached run {key}")
    except Exception as err:
        warnings.warn(f"ignoring the cached run {key}: {err}; training again", stacklevel=3)
        return None
    history = {**stored, "config": config, "cached": True}
    return model, history


def _to_cache(key: str, model, history: dict) -> None:
    stored = {**history, "config": history["config"].__dict__}
    stored.pop("cached", None)
    model_cache.store(key, {"model": model.to_payload(), "history": stored},
                      describe={"what": "attnlib.induction.train", "config": stored["config"],
                                "source": _SOURCES_DIGEST,
                                "seconds": round(history["seconds"], 1)})


def trained(n_layers: int = 2, seed: int = 0):
    """``(model, history)`` of the chapter's run (the default steps) with these arguments: the
    run already made in this process, else the one in the trained-model cache
    (:mod:`attnlib.model_cache`; a fraction of a second), else a new training run, announced
    with a line and a progress bar, which is then cached.
    Exercises and later cells reuse the chapter's run instead of training again."""
    key = (_validate.positive_int(n_layers, "n_layers"), _validate.non_negative_int(seed, "seed"), STEPS)
    if key not in _RUNS:
        model = build_model(n_layers, seed)
        config = TrainConfig(n_layers=n_layers, seed=seed, steps=STEPS, n_heads=model.n_heads,
                             vocab_size=len(_speech()[0]), device=str(_device(model)))
        cache_key = _cache_key(config)
        loaded = _from_cache(cache_key, config)
        if loaded is not None:
            _RUNS[key] = loaded
        else:
            where = model_cache.entry_path(cache_key)
            print(f"The chapter's {n_layers}-layer model (seed {seed}) is not in the trained-model cache yet: "
                  f"training it now ({STEPS} steps; under a minute to a few minutes, by how busy the CPU is)"
                  + (f"; it is then kept in {where.parent.parent} for next time." if where else "."),
                  file=sys.stdout, flush=True)
            train(n_layers, seed, progress=True)
    return _RUNS[key]


@torch.no_grad()
def checkpoint(history: dict, step: int) -> TinyTransformer:
    """The model of a :func:`train` run as it was after ``step`` training steps (a probe step:
    a multiple of ``PROBE_EVERY``, or the last step), in eval mode on the CPU.

    Raises:
        TypeError: ``history`` is not a history of :func:`train`; ``step`` not an int.
        ValueError: no checkpoint was kept at ``step`` (the message lists the steps kept).
    """
    if not isinstance(history, dict) or not isinstance(history.get("checkpoints"), dict):
        raise TypeError("history must be the history dict of attnlib.induction.train (with its 'checkpoints')")
    step = _validate.non_negative_int(step, "step")
    states = history["checkpoints"]
    if step not in states:
        kept = sorted(states)
        raise ValueError(f"no checkpoint at step {step}; kept: {kept[:3]} ... {kept[-2:]} (every {PROBE_EVERY} steps)")
    config = history["config"]
    config = config if isinstance(config, dict) else config.__dict__
    model = TinyTransformer(config["vocab_size"], d_model=config["d_model"], n_heads=config["n_heads"],
                            n_layers=config["n_layers"], max_len=config["seq_len"],
                            qk_norm=config.get("qk_norm", False))
    model.load_state_dict(states[step])
    return model.eval()


@torch.no_grad()
def head_patterns(model, tokens, edits=()) -> list:
    """The model's attention weights on ``tokens`` (one ``(B, H, T, T)`` tensor per layer, on
    the CPU), with ``edits`` (:mod:`attnlib.edits`'s spec) applied."""
    model = _model(model)
    tokens = tokens.to(_device(model))
    if not edits:                                       # the intact model: its own forward pass
        model.eval()
        return [w.cpu() for w in model(tokens)[1]]
    return [w.cpu() for w in run(model, tokens, edits=edits).pattern]


def induction_scores(model, seed: int = 0, *, edits=()) -> torch.Tensor:
    """Induction score of every head: on :func:`repeated_sequences` (held out, ``seed``), the
    mean weight from each token of the second copy to the token that followed its earlier
    occurrence, ``mean A[i, i - T/2 + 1]`` over ``i = T/2 .. T-1`` and the sequences
    (Olsson et al. 2022, section 2).  1 for a perfect induction head.  With ``edits``
    (:mod:`attnlib.edits`'s spec), the scores of the edited model (a head's score can depend
    on an earlier head that prepares its keys).

    Shapes:
        returns ``(n_layers, H)`` float32, weights in [0, 1].

    Raises:
        TypeError: ``model`` is not a :class:`attnlib.transformer.TinyTransformer`, ``seed`` not an int.
        ValueError: ``seed`` negative; the model is shorter than ``SEQ_LEN``.
    """
    model = _model(model)
    return _induction_from_weights(head_patterns(model, repeated_sequences(N_HELD_OUT, seed), edits))


def duplicate_token_scores(model, seed: int = 0) -> torch.Tensor:
    """Duplicate-token score of every head: on :func:`repeated_sequences` (held out,
    ``seed``), the mean weight from each token of the second copy on the earlier occurrence
    of the same token, ``mean A[i, i - T/2]`` over ``i = T/2 .. T-1`` and the sequences.
    (Duplicate-token heads: Wang et al. 2023, "Interpretability in the Wild".)

    Shapes:
        returns ``(n_layers, H)`` float32, weights in [0, 1].

    Raises:
        as :func:`induction_scores`.
    """
    model = _model(model)
    return _induction_from_weights(head_patterns(model, repeated_sequences(N_HELD_OUT, seed)), shift=0)


def previous_token_scores(model, seed: int = 0) -> torch.Tensor:
    """Previous-token score of every head: on :func:`text_sequences` (held-out windows of the
    speech, ``seed``), the mean weight on the immediately preceding token,
    ``mean A[i, i-1]`` over ``i = 1 .. T-1`` and the windows
    (:func:`attnlib.measures.offset_share` at offset -1).

    Shapes:
        returns ``(n_layers, H)`` float32, weights in [0, 1].

    Raises:
        as :func:`induction_scores`.
    """
    model = _model(model)
    weights = head_patterns(model, text_sequences(N_HELD_OUT, seed))
    return torch.stack([offset_share(w, -1).mean(0) for w in weights]).float()


def uniform_induction_score(T: int = SEQ_LEN) -> float:
    """The induction score of a head that spreads each query's weight evenly over the
    ``i + 1`` keys it may see: ``mean 1 / (i + 1)`` over the queries ``i = T/2 .. T-1``
    (:func:`attnlib.evidence.uniform_weight` of each row).

    Raises:
        TypeError: ``T`` not an int.  ValueError: ``T`` below 2 or odd.
    """
    T = _validate.positive_int(T, "T")
    if T < 2 or T % 2:
        raise ValueError(f"T must be an even int >= 2 (two copies of T/2 tokens), got {T}")
    return sum(uniform_weight(i + 1) for i in range(T // 2, T)) / (T // 2)


def uniform_previous_score(T: int = SEQ_LEN) -> float:
    """The previous-token score of a head that spreads each query's weight evenly over the
    ``i + 1`` keys it may see: ``mean 1 / (i + 1)`` over ``i = 1 .. T-1``.

    Raises:
        TypeError: ``T`` not an int.  ValueError: ``T`` below 2.
    """
    T = _validate.positive_int(T, "T")
    if T < 2:
        raise ValueError(f"T must be an int >= 2 (a query needs a previous token), got {T}")
    return sum(uniform_weight(i + 1) for i in range(1, T)) / (T - 1)


def offset_baseline(model, seed: int = 0) -> torch.Tensor:
    """The positional baseline of the induction score: each head's mean weight at the same
    distance back, ``A[i, i - T/2 + 1]`` over ``i = T/2 .. T-1``, on held-out sequences of
    ``T`` distinct random words *without* any repeat.  A head that merely looks a fixed
    distance back scores as high here as on the repeated sequences; an induction head scores
    near the uniform weight here.

    Shapes:
        returns ``(n_layers, H)`` float32.

    Raises:
        as :func:`induction_scores`.
    """
    model = _model(model)
    return _induction_from_weights(head_patterns(model, _plain_sequences(N_HELD_OUT, seed)))


def natural_repeats(tokens) -> dict:
    """Classify each next-token prediction of real text by what the context offers to copy.

    Position ``i`` predicts token ``i + 1`` (``i = 0 .. T-2``).  It is

    * ``"same_next"``: token ``i`` occurred earlier in the sequence, and at some earlier
      occurrence ``j < i`` it was followed by the same word as now (``x[j+1] == x[i+1]``):
      copying what followed an earlier occurrence, as an induction head does, is right;
    * ``"other_next"``: token ``i`` occurred earlier, but never followed by ``x[i+1]``:
      copying is wrong;
    * ``"first"``: token ``i`` occurs for the first time: there is nothing to copy.

    Shapes:
        tokens ``(B, T)`` int64; returns a dict of three ``(B, T-1)`` bool masks, one True per
        position.

    Raises:
        TypeError: tokens not an integer tensor.  ValueError: tokens not 2-D or shorter than 2.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"tokens must be an integer tensor (B, T), got {getattr(tokens, 'dtype', type(tokens).__name__)}")
    if tokens.dim() != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must be (B, T) with T >= 2, got shape {tuple(tokens.shape)}")
    t = tokens.cpu()
    T = t.shape[1]
    earlier = torch.tril(torch.ones(T - 1, T - 1, dtype=torch.bool), diagonal=-1)    # j < i
    same_tok = (t[:, :-1, None] == t[:, None, :-1]) & earlier                          # (B, i, j): x[j] == x[i]
    same_next = (t[:, 1:, None] == t[:, None, 1:])                                     # x[j+1] == x[i+1]
    seen = same_tok.any(-1)
    copy = (same_tok & same_next).any(-1)
    return {"same_next": copy, "other_next": seen & ~copy, "first": ~seen}


@torch.no_grad()
def natural_repeat_loss(model, edits=(), seed: int = 0) -> dict:
    """Next-token loss, in nats, on windows of the training speech (:func:`text_sequences`,
    ``seed``), split by :func:`natural_repeats`, with ``edits`` (:mod:`attnlib.edits`'s spec,
    heads only) applied: repeats that happen in real text, never planted.

    Returns:
        dict with, for each of ``"same_next"``, ``"other_next"`` and ``"first"``, the mean
        loss over those positions, and ``counts`` (positions of each kind).

    Raises:
        as :func:`repeated_loss`.
    """
    model = _model(model)
    tokens = text_sequences(N_HELD_OUT, seed)
    kinds = natural_repeats(tokens)
    logits = run(model, tokens.to(_device(model)), edits=edits).logits
    loss = _next_token_loss(logits, tokens.to(_device(model))).cpu()              # (B, T-1)
    out = {k: loss[m].mean().item() for k, m in kinds.items()}
    out["counts"] = {k: int(m.sum()) for k, m in kinds.items()}
    return out


_HALVES = ("second", "first")


@torch.no_grad()
def repeated_loss(model, edits=(), seed: int = 0, *, half: str = "second") -> float:
    """Mean next-token loss, in nats, on one half of the held-out :func:`repeated_sequences`
    (``seed``), with ``edits`` (:mod:`attnlib.edits`'s spec) applied: for example
    ``[{"layer": 1, "head": 0, "mode": "zero"}]`` (zero ablation) or ``[{"layer": 1, "head": 0,
    "mode": "mean"}]`` (mean ablation: the head's mean output over the held-out repeated
    sequences, :func:`attnlib.transformer.reference_means`).

    ``half="second"`` scores the predictions of the tokens of the second copy that copying
    can predict (positions ``T/2 + 1 .. T-1``: the token before each of them occurred earlier,
    followed by it); ``half="first"`` those of the first copy (positions ``1 .. T/2 - 1``,
    random words nothing in the sequence predicts).  Both halves count ``T/2 - 1`` tokens.

    Raises:
        TypeError: as :func:`induction_scores`; an edit malformed (:func:`attnlib.edits.as_edits`).
        ValueError: ``half`` not one of the options; an edit as :func:`attnlib.edits.as_edits` says.
        IndexError: an edited layer or head outside the model.
    """
    model = _model(model)
    half = _validate.choice(half, _HALVES, "half")
    tokens = repeated_sequences(N_HELD_OUT, seed).to(_device(model))
    logits = run(model, tokens, edits=edits).logits
    loss = _next_token_loss(logits, tokens)                       # (B, T-1): entry i predicts token i + 1
    n = tokens.shape[1] // 2
    part = loss[:, n:] if half == "second" else loss[:, :n - 1]
    return part.mean().item()
