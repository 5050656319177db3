"""A small transformer trained from scratch inside a chapter, the task it learns, and the
measures that say whether its heads found the right pattern (chapter 6).

The task, :class:`LookBackTask`, is built on the words of a real text: at every position,
output the words ``offsets`` places back (e.g. the previous word and the one before it).
Its correct attention pattern is known in advance: to answer offset ``o`` at position
``i``, a head should put all its weight on key ``i - o``
(:func:`attnlib.ideal_pattern`); :func:`attnlib.pattern_closeness` measures how far each head
got.  The text and its words come from :mod:`attnlib.corpus`.

Shapes legend: ``B`` batch, ``H`` heads, ``T`` sequence length (``T_q = T_k = T``),
``d_model`` model width, ``V`` vocabulary size, ``n_targets`` answers per position.
"""
from __future__ import annotations

import numbers
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from . import _validate
from .multihead import MultiHeadAttention

__all__ = ["IGNORE", "LookBackTask", "TinyTransformer", "train", "evaluate"]

IGNORE = -100  # target value of positions with no answer (cross_entropy's ignore_index)


class LookBackTask:
    """Sequences of real words; the answers at position ``i`` are the words at ``i - o``
    for each ``o`` in ``offsets``.

    Each sequence is a window of ``seq_len`` consecutive words of ``words``.  With
    ``shuffle=True`` (default) the window's words are put in random order, so the previous
    word cannot be guessed from the current one by remembering the text: looking back is
    the only way to answer.

    Args:
        words: the token stream (e.g. ``attnlib.corpus.words_of(attnlib.corpus.load_text())``).
        offsets: how far back each answer lies (positive ints, each below ``seq_len``).
        seq_len: ``T``, the length of a sequence.
        shuffle: shuffle each window (see above).

    Raises:
        TypeError: ``words`` is a single str (pass its words, e.g. from ``words_of``);
            ``seq_len`` or an offset is not an int; ``shuffle`` is not a bool.
        ValueError: fewer than ``seq_len`` words, ``seq_len < 2``, no offsets, or an offset
            outside ``1..seq_len-1``.
    """

    def __init__(self, words, offsets=(1, 2), seq_len: int = 12, *, shuffle: bool = True):
        if isinstance(words, (str, bytes)) or not hasattr(words, "__iter__"):
            raise TypeError(f"words must be a list of words (e.g. attnlib.corpus.words_of(text)), "
                            f"got {type(words).__name__}")
        words = list(words)
        seq_len = _validate.positive_int(seq_len, "seq_len")
        if seq_len < 2:
            raise ValueError(f"seq_len must be an int >= 2, got {seq_len!r}")
        if len(words) < seq_len:
            raise ValueError(f"need at least seq_len = {seq_len} words, got {len(words)}")
        if isinstance(offsets, (str, bytes)) or not hasattr(offsets, "__iter__"):
            raise TypeError(f"offsets must be a tuple of ints, got {type(offsets).__name__} {offsets!r}")
        offsets = tuple(offsets)
        for o in offsets:
            if isinstance(o, bool) or not isinstance(o, numbers.Integral):
                raise TypeError(f"offsets must be ints, got {type(o).__name__} {o!r}")
        if not offsets or any(not 1 <= o < seq_len for o in offsets):
            raise ValueError(f"offsets must be ints in 1..{seq_len - 1}, got {offsets}")
        shuffle = _validate.flag(shuffle, "shuffle")
        self.offsets, self.seq_len, self.shuffle = tuple(int(o) for o in offsets), seq_len, shuffle
        self.vocab = sorted(set(words))
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.ids = torch.tensor([self.index[w] for w in words])  # (N,) the whole text

    def decode(self, ids) -> list[str]:
        """Token ids -> words."""
        return [self.vocab[int(i)] for i in ids]

    def batch(self, batch_size: int, generator: torch.Generator | None = None):
        """A random batch ``(tokens, targets)``; ``generator`` makes it reproducible.

        Shapes:
            tokens: ``(B, T)`` int64; targets: ``(B, T, n_targets)`` int64, where
            ``targets[b, i, j] = tokens[b, i - offsets[j]]``, or :data:`IGNORE` when
            ``i < offsets[j]``.
        """
        batch_size = _validate.positive_int(batch_size, "batch_size")
        T = self.seq_len
        starts = torch.randint(0, len(self.ids) - T + 1, (batch_size,), generator=generator)
        tokens = self.ids[starts[:, None] + torch.arange(T)]        # (B, T) consecutive words
        if self.shuffle:
            order = torch.rand(batch_size, T, generator=generator).argsort(dim=1)
            tokens = tokens.gather(1, order)                         # (B, T) each window shuffled
        targets = torch.full((batch_size, T, len(self.offsets)), IGNORE, dtype=torch.long)
        for j, o in enumerate(self.offsets):
            targets[:, o:, j] = tokens[:, :-o]                       # answer j at i is token i - o
        return tokens, targets


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(LN(x))``, then ``x + MLP(LN(x))`` when
    ``d_mlp > 0``.  Returns ``(x, weights)`` with weights ``(B, H, T, T)``."""

    def __init__(self, d_model: int, n_heads: int, d_mlp: int = 0):
        super().__init__()
        self.ln_attn = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.mlp = None
        if d_mlp:
            self.mlp = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_mlp), nn.GELU(),
                                     nn.Linear(d_mlp, d_model))

    def forward(self, x, is_causal: bool = True):
        a, weights = self.attn(self.ln_attn(x), is_causal=is_causal)  # (B, T, d_model), (B, H, T, T)
        x = x + a
        if self.mlp is not None:
            x = x + self.mlp(x)
        return x, weights


class TinyTransformer(nn.Module):
    """A small decoder-style transformer: token + position embeddings, ``n_layers``
    attention blocks (:class:`attnlib.MultiHeadAttention`, causal by default), a final
    LayerNorm and a linear output layer giving ``n_targets`` predictions per position.

    Args:
        vocab_size: ``V``.  max_len: the longest sequence it accepts.
        d_model, n_heads, n_layers: width, heads per block, blocks.
        n_targets: answers per position (the output layer has ``n_targets * V`` units).
        d_mlp: hidden width of each block's MLP; 0 (default) means attention only.
        causal: mask future keys (query ``i`` sees keys ``0..i``).
        seed: seed of the initial weights (the global random state is left untouched).

    Shapes:
        tokens: ``(B, T)`` int64 with ``T <= max_len``.  Returns ``logits``
        ``(B, T, n_targets, V)`` and ``weights``, a list of ``n_layers`` tensors
        ``(B, H, T, T)``.

    Raises:
        TypeError: a size or ``seed`` is not an int, ``causal`` is not a bool (at
            construction); tokens not an integer tensor (when called).
        ValueError: a size below 1 (``d_mlp`` below 0; see also
            :class:`attnlib.MultiHeadAttention`); tokens not 2-D, longer than ``max_len``, or
            outside ``0..V-1``.
    """

    def __init__(self, vocab_size: int, *, d_model: int = 32, n_heads: int = 2, n_layers: int = 1,
                 max_len: int = 64, n_targets: int = 1, d_mlp: int = 0, causal: bool = True,
                 seed: int = 0):
        super().__init__()
        vocab_size, max_len, n_layers, n_targets = (
            _validate.positive_int(value, name) for name, value in (
                ("vocab_size", vocab_size), ("max_len", max_len), ("n_layers", n_layers), ("n_targets", n_targets)))
        d_mlp = _validate.non_negative_int(d_mlp, "d_mlp")
        causal = _validate.flag(causal, "causal")
        seed = _validate.non_negative_int(seed, "seed")
        self.vocab_size, self.max_len, self.n_targets, self.causal = vocab_size, max_len, n_targets, causal
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            self.pos_emb = nn.Embedding(max_len, d_model)
            self.blocks = nn.ModuleList(Block(d_model, n_heads, d_mlp) for _ in range(n_layers))
            self.ln_out = nn.LayerNorm(d_model)
            self.unembed = nn.Linear(d_model, n_targets * vocab_size)

    def forward(self, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"tokens must be an int64 tensor of ids, got {getattr(tokens, 'dtype', type(tokens).__name__)}")
        if tokens.dim() != 2 or not 1 <= tokens.shape[1] <= self.max_len:
            raise ValueError(f"tokens must be (B, T) with 1 <= T <= {self.max_len}, got shape {tuple(tokens.shape)}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.vocab_size - 1}, got {tokens.min().item()}..{tokens.max().item()}")
        B, T = tokens.shape
        positions = torch.arange(T, device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)  # (B, T, d_model) + (T, d_model)
        weights = []
        for block in self.blocks:
            x, w = block(x, is_causal=self.causal)            # (B, T, d_model), (B, H, T, T)
            weights.append(w)
        logits = self.unembed(self.ln_out(x))                 # (B, T, n_targets * V)
        return logits.view(B, T, self.n_targets, self.vocab_size), weights


def _loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 2), targets.flatten(), ignore_index=IGNORE)


#: Set (to any non-empty value) while the static book is built: :func:`train` then prints one
#: line per run instead of a progress bar.
STATIC_BOOK_ENV = "ATTNLIB_STATIC_BOOK"


def train(model: nn.Module, task, *, steps: int = 500, batch_size: int = 64, lr: float = 3e-3,
          seed: int = 0, probe=None, probe_every: int = 25, progress: bool = True,
          desc: str = "training", threads: int | None = 1) -> dict:
    """Train ``model`` on batches from ``task.batch(batch_size, generator)`` with AdamW and
    cross-entropy (positions marked :data:`IGNORE` do not count), showing a ``tqdm``
    progress bar (a widget in a notebook, text in a terminal).  While the static book is
    built (environment variable :data:`STATIC_BOOK_ENV` set, as ``_ext/exercise_pages.py``
    does for the kernels it starts) the bar is replaced by one printed line per run (steps,
    seconds, final loss): a bar widget would make its page load the widget manager, and a
    text bar leaves every update as a line of the page.

    ``probe(model)``, when given, is called (under ``no_grad``) before the first step,
    every ``probe_every`` steps and after the last step, to record how something evolves
    (for instance :func:`attnlib.pattern_closeness` on a fixed batch).  Batches are drawn from a
    generator seeded with ``seed``: the same model seed and ``seed`` repeat the same run
    on the same machine.

    ``threads`` CPU threads are used while training (the previous setting is restored
    afterwards; ``None`` leaves it alone).  One thread is the default because a model this
    small trains fastest on one: splitting a 32-wide matrix product across cores costs more
    in synchronisation than it saves, and far more on a busy machine.

    Shapes:
        ``task.batch`` returns tokens ``(B, T)`` and targets ``(B, T, n_targets)``; the model
        maps tokens to logits ``(B, T, n_targets, V)`` (and a list of weights).

    Returns:
        dict with ``loss`` (one float per step), ``probe_step`` and ``probe`` (the steps
        probed and what ``probe`` returned), and ``seconds`` (wall time).

    Raises:
        TypeError: ``steps``, ``batch_size``, ``probe_every``, ``seed`` or ``threads`` is not
            an int, ``lr`` not a real number, ``progress`` not a bool, ``probe`` not callable.
        ValueError: ``steps``, ``batch_size``, ``probe_every`` or ``threads`` below 1, a
            negative ``seed``, or ``lr`` not positive and finite.
    """
    steps, batch_size, probe_every = (_validate.positive_int(value, name) for name, value in (
        ("steps", steps), ("batch_size", batch_size), ("probe_every", probe_every)))
    seed = _validate.non_negative_int(seed, "seed")
    lr = _validate.real(lr, "lr", low=0.0, low_open=True)
    progress = _validate.flag(progress, "progress")
    if threads is not None:
        threads = _validate.positive_int(threads, "threads")
    if probe is not None and not callable(probe):
        raise TypeError(f"probe must be a function of the model, got {type(probe).__name__}")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    history = {"loss": [], "probe_step": [], "probe": []}

    def record(step):
        if probe is not None:
            model.eval()
            with torch.no_grad():
                history["probe"].append(probe(model))
            history["probe_step"].append(step)
            model.train()

    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    try:
        model.train()
        record(0)
        summary = progress and bool(os.environ.get(STATIC_BOOK_ENV))
        bar = tqdm(range(1, steps + 1), desc=desc, disable=summary or not progress, leave=True)
        for step in bar:
            tokens, targets = (t.to(device) for t in task.batch(batch_size, generator))
            logits, _ = model(tokens)                 # (B, T, n_targets, V)
            loss = _loss(logits, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            history["loss"].append(loss.item())
            if step % probe_every == 0 or step == steps:
                record(step)
                bar.set_postfix(loss=f"{history['loss'][-1]:.3f}")
        bar.close()
    finally:
        torch.set_num_threads(previous_threads)
        model.eval()
    history["seconds"] = time.perf_counter() - start
    if summary:
        print(f"{desc}: {steps} steps in {history['seconds']:.1f} s, final loss {history['loss'][-1]:.3f}",
              file=sys.stdout)
    return history


@torch.no_grad()
def evaluate(model: nn.Module, task, *, batch_size: int = 256, seed: int = 12345) -> dict:
    """Loss, accuracy per answer and attention weights on one fresh batch (no training).
    The batch comes from ``task.batch(batch_size, generator)`` with a generator seeded by
    ``seed``, a stream of its own, apart from the batches drawn during training.

    Shapes:
        see Returns; ``B = batch_size``, ``H`` heads, ``T = task.seq_len``.

    Returns:
        dict with ``tokens`` ``(B, T)``, ``targets`` ``(B, T, n_targets)``, ``loss`` (float),
        ``accuracy`` ``(n_targets,)`` (fraction of answerable positions predicted right)
        and ``weights`` (list of ``(B, H, T, T)``, one per layer).

    Raises:
        TypeError: ``batch_size`` or ``seed`` is not an int.  ValueError: ``batch_size < 1``
            or a negative ``seed``.
    """
    batch_size = _validate.positive_int(batch_size, "batch_size")
    seed = _validate.non_negative_int(seed, "seed")
    device = next(model.parameters()).device
    tokens, targets = task.batch(batch_size, torch.Generator().manual_seed(seed))
    model.eval()
    logits, weights = model(tokens.to(device))
    targets_d = targets.to(device)
    answerable = targets_d != IGNORE                                    # (B, T, n_targets)
    hits = (logits.argmax(-1) == targets_d) & answerable
    accuracy = hits.sum(dim=(0, 1)) / answerable.sum(dim=(0, 1))        # (n_targets,)
    return {"tokens": tokens, "targets": targets, "loss": _loss(logits, targets_d).item(),
            "accuracy": accuracy.cpu(), "weights": [w.cpu() for w in weights]}
