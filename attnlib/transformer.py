"""A small transformer trained from scratch inside a chapter, the task it learns, and the
measures that say whether its heads found the right pattern (chapter 6).

The task, :class:`LookBackTask`, is built on the words of a real text: at every position,
output the words ``offsets`` places back (e.g. the previous word and the one before it).
Its correct attention pattern is known in advance: to answer offset ``o`` at position
``i``, a head should put all its weight on key ``i - o``.  :func:`pattern_closeness`
measures how far each head got.

Shapes legend: ``B`` batch, ``H`` heads, ``T`` sequence length (``T_q = T_k = T``),
``d_model`` model width, ``V`` vocabulary size, ``n_targets`` answers per position.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .multihead import MultiHeadAttention

__all__ = [
    "IGNORE", "load_text", "words_of", "LookBackTask", "TinyTransformer", "train",
    "evaluate", "ideal_pattern", "pattern_closeness",
]

IGNORE = -100  # target value of positions with no answer (cross_entropy's ignore_index)
_DATA = Path(__file__).parent / "data"
_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*|--|[^\sa-z]")


def load_text(name: str = "gettysburg") -> str:
    """A public-domain text shipped in ``attnlib/data`` (``"gettysburg"``: Lincoln's
    Gettysburg Address, 1863).

    Raises:
        ValueError: no such text; the message lists the available ones.
    """
    path = _DATA / f"{name}.txt"
    if not isinstance(name, str) or not path.is_file():
        known = sorted(p.stem for p in _DATA.glob("*.txt"))
        raise ValueError(f"no text named {name!r} in attnlib/data; available: {known}")
    return path.read_text(encoding="utf-8")


def words_of(text: str) -> list[str]:
    """Lower-cased words and punctuation marks of ``text``, in order.

    >>> words_of("We are met on a great battle-field -- of that war.")
    ['we', 'are', 'met', 'on', 'a', 'great', 'battle-field', '--', 'of', 'that', 'war', '.']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _WORD.findall(text.lower())


def ideal_pattern(T: int, offset: int) -> torch.Tensor:
    """The attention pattern of a perfect "look ``offset`` places back" head.

    Row ``i`` is one-hot at key ``i - offset``; the first ``offset`` rows, which have no
    such key, are all zero.

    Shapes:
        result: ``(T, T)`` float32, ``result[i, j] = 1`` iff ``j = i - offset``.

    Raises:
        ValueError: ``T`` or ``offset`` is not a positive int.

    >>> ideal_pattern(3, 1)
    tensor([[0., 0., 0.],
            [1., 0., 0.],
            [0., 1., 0.]])
    """
    for name, value in (("T", T), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return torch.diag(torch.ones(max(T - offset, 0)), diagonal=-offset)[:T, :T]


def pattern_closeness(weights: torch.Tensor, offsets) -> torch.Tensor:
    """How close each head is to each ideal look-back pattern: the mean attention weight a
    head puts on the ideal key ``i - o``, over all queries ``i >= o`` and the batch.

    1 means the head always looks exactly ``o`` places back; a head spreading its weight
    uniformly over the ``i + 1`` visible keys scores about ``mean(1 / (i + 1))``.

    Shapes:
        weights: ``(B, H, T, T)`` (one layer's weights); result: ``(H, len(offsets))``.

    Raises:
        ValueError: ``weights`` is not ``(B, H, T, T)`` or an offset is not in ``1..T-1``.
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must be (B, H, T, T), got {shape}")
    T = weights.shape[-1]
    columns = []
    for o in offsets:
        if isinstance(o, bool) or not isinstance(o, int) or not 1 <= o < T:
            raise ValueError(f"offsets must be ints in 1..{T - 1}, got {o!r}")
        on_ideal = weights.diagonal(offset=-o, dim1=-2, dim2=-1)  # (B, H, T - o): weights[b, h, i, i - o]
        columns.append(on_ideal.float().mean(dim=(0, 2)))         # (H,)
    return torch.stack(columns, dim=-1)                           # (H, len(offsets))


class LookBackTask:
    """Sequences of real words; the answers at position ``i`` are the words at ``i - o``
    for each ``o`` in ``offsets``.

    Each sequence is a window of ``seq_len`` consecutive words of ``words``.  With
    ``shuffle=True`` (default) the window's words are put in random order, so the previous
    word cannot be guessed from the current one by remembering the text: looking back is
    the only way to answer.

    Args:
        words: the token stream (e.g. ``words_of(load_text())``).
        offsets: how far back each answer lies (positive ints, each below ``seq_len``).
        seq_len: ``T``, the length of a sequence.
        shuffle: shuffle each window (see above).

    Raises:
        ValueError: fewer than ``seq_len`` words, or a bad offset or length.
    """

    def __init__(self, words, offsets=(1, 2), seq_len: int = 12, *, shuffle: bool = True):
        words = list(words)
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 2:
            raise ValueError(f"seq_len must be an int >= 2, got {seq_len!r}")
        if len(words) < seq_len:
            raise ValueError(f"need at least seq_len = {seq_len} words, got {len(words)}")
        offsets = tuple(offsets)
        if not offsets or any(isinstance(o, bool) or not isinstance(o, int) or not 1 <= o < seq_len for o in offsets):
            raise ValueError(f"offsets must be ints in 1..{seq_len - 1}, got {offsets}")
        self.offsets, self.seq_len, self.shuffle = offsets, seq_len, shuffle
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
        ValueError: bad sizes (see :class:`attnlib.MultiHeadAttention`), tokens not 2-D,
            longer than ``max_len``, or outside ``0..V-1``.
        TypeError: tokens not an integer tensor.
    """

    def __init__(self, vocab_size: int, *, d_model: int = 32, n_heads: int = 2, n_layers: int = 1,
                 max_len: int = 64, n_targets: int = 1, d_mlp: int = 0, causal: bool = True,
                 seed: int = 0):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("max_len", max_len), ("n_layers", n_layers),
                            ("n_targets", n_targets)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
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


def train(model: nn.Module, task, *, steps: int = 500, batch_size: int = 64, lr: float = 3e-3,
          seed: int = 0, probe=None, probe_every: int = 25, progress: bool = True,
          desc: str = "training", threads: int | None = 1) -> dict:
    """Train ``model`` on batches from ``task.batch(batch_size, generator)`` with AdamW and
    cross-entropy (positions marked :data:`IGNORE` do not count), showing a ``tqdm``
    progress bar.

    ``probe(model)``, when given, is called (under ``no_grad``) before the first step,
    every ``probe_every`` steps and after the last step, to record how something evolves
    (for instance :func:`pattern_closeness` on a fixed batch).  Batches are drawn from a
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
        ValueError: ``steps``, ``batch_size`` or ``probe_every`` is not a positive int.
    """
    for name, value in (("steps", steps), ("batch_size", batch_size), ("probe_every", probe_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
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
        bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, leave=True)
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
    """
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
