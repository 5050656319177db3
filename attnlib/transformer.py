"""A small causal language model, attention only, small enough to train inside a chapter
(chapter 7), with per-head ablation.

:class:`TinyTransformer` is a decoder in the manner of Elhage et al. (2021), "A Mathematical
Framework for Transformer Circuits": token and learned position embeddings, ``n_layers``
blocks ``x + attn(LN(x))`` of :class:`attnlib.MultiHeadAttention` under a causal mask (no MLP,
so that everything the model does passes through attention heads), a final LayerNorm and a
linear read-out to next-token logits.  The training run and the measures of its heads live in
:mod:`attnlib.induction`.

Position information comes in one of three ways (``positions=``, chapter 12): ``"learned"``
(the default, a table of ``max_len`` learned vectors added to the token embeddings, as in GPT-2
and in chapter 7), ``"rope"`` (no table; every layer rotates each head's queries and keys by
:func:`attnlib.apply_rope`, Su et al. 2021) or ``"alibi"`` (no table; every layer adds the
bias ``-m_h (i - j)`` to head ``h``'s causal scores, :func:`alibi_bias`, Press et al. 2022).

Edits (:func:`run`, in :mod:`attnlib.edits`'s spec) switch
heads off or patch them: each head's output is a block of ``d_head`` columns of the
concatenation that enters ``W_O`` (:func:`attnlib.merge_heads`), and an edit replaces that block
(by zeros, by the head's mean, or by another run's) before ``W_O`` mixes the heads.

Shapes legend: ``B`` batch, ``H`` heads, ``T`` sequence length (``T_q = T_k = T``),
``d_model`` model width, ``d_head = d_model / H``, ``V`` vocabulary size.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import nn

from . import _validate
from .edits import RunActivations, RunHooks, as_edits, head_means
from .kv_cache import KVCache, cache_start
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .attention import scaled_dot_product_attention
from .positions import apply_rope

__all__ = ["TinyTransformer", "STATIC_BOOK_ENV", "POSITIONS", "alibi_slopes", "alibi_bias", "Run", "run",
           "repeated_tokens", "reference_tokens", "reference_means", "REFERENCE"]

#: The position schemes of :class:`TinyTransformer` (``positions=``).
POSITIONS = ("learned", "rope", "alibi")


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes ``m_h = 2^(-8 h / H)`` for ``h = 1 .. H`` (Press et al. 2022,
    section 3: for 8 heads ``1/2, 1/4, ..., 1/256``; a geometric sequence for any ``H``).

    Shapes:
        returns ``(H,)`` float64.

    Raises:
        TypeError: ``n_heads`` not an int.  ValueError: ``n_heads < 1``.

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    H = _validate.positive_int(n_heads, "n_heads")
    return 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)


def alibi_bias(n_heads: int, T_q: int, T_k: int | None = None, *, start: int | None = None) -> torch.Tensor:
    """The additive ALiBi mask of causal attention: ``-m_h (i - j)`` where key ``j`` may be seen
    by query ``i`` (``j <= i``) and ``-inf`` where it may not (``j > i``), to be added to the
    scaled scores ``q_i . k_j / sqrt(d_k)`` of head ``h`` (Press et al. 2022, eq. in section
    3).  The queries sit at positions ``start .. start + T_q - 1`` and the keys at
    ``0 .. T_k - 1`` (``start = T_k - T_q`` by default: the last ``T_q`` positions, as when
    decoding with a cache).  The bias depends on ``i - j`` only.

    Shapes:
        returns ``(H, T_q, T_k)`` float32 (broadcasts against scores ``(B, H, T_q, T_k)``).

    Raises:
        TypeError: an argument not an int.  ValueError: a size below 1 (``T_q``, ``T_k``,
            ``n_heads``), ``T_q > T_k``, ``start`` negative or ``start + T_q > T_k`` (a query after the last key).
    """
    slopes = alibi_slopes(n_heads)
    T_q = _validate.positive_int(T_q, "T_q")
    T_k = T_q if T_k is None else _validate.positive_int(T_k, "T_k")
    if T_q > T_k:
        raise ValueError(f"T_q = {T_q} queries need at least as many keys (causal), got T_k = {T_k}")
    start = T_k - T_q if start is None else _validate.non_negative_int(start, "start")
    if start + T_q > T_k:
        raise ValueError(f"queries at {start}..{start + T_q - 1} need keys up to that position, got T_k = {T_k}")
    i = torch.arange(start, start + T_q, dtype=torch.float64)[:, None]
    j = torch.arange(T_k, dtype=torch.float64)[None, :]
    distance = i - j                                                        # (T_q, T_k)
    bias = -slopes[:, None, None] * distance                                # (H, T_q, T_k)
    return bias.masked_fill(distance < 0, float("-inf")).float()


#: Set (to any non-empty value) while the static book is built (``_ext/exercise_pages.py``
#: does it for the kernels it starts): training then prints one line per run instead of a
#: progress bar, whose widget would make its page load the widget manager.
STATIC_BOOK_ENV = "ATTNLIB_STATIC_BOOK"


class Block(nn.Module):
    """Pre-LayerNorm attention block: ``x + attn(LN(x))``.  Returns ``(x, weights)`` with
    weights ``(B, H, T, T)``."""

    def __init__(self, d_model: int, n_heads: int, positions: str = "learned", qk_norm: bool = False):
        super().__init__()
        self.ln_attn = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.positions = positions
        self.qk_norm = qk_norm
        if qk_norm:   # QK-LayerNorm (Dehghani et al. 2023): each head's q and k normalised over d_head
            self.ln_q = nn.LayerNorm(self.attn.d_head)
            self.ln_k = nn.LayerNorm(self.attn.d_head)

    def _positional(self, x, start: int, cache=None):
        """Causal self-attention with RoPE on q and k, or with the ALiBi bias, through the
        same four projections: ``(out (B, t, d_model), weights (B, H, t, start + t))`` for the
        ``t`` rows of ``x`` at positions ``start .. start + t - 1``."""
        attn, t = self.attn, x.shape[1]
        q = split_heads(attn.q_proj(x), attn.n_heads)                  # (B, H, t, d_head)
        k = split_heads(attn.k_proj(x), attn.n_heads)
        v = split_heads(attn.v_proj(x), attn.n_heads)
        if self.qk_norm:                                               # before any rotation
            q, k = self.ln_q(q), self.ln_k(k)
        if self.positions == "rope":                                   # rotate q and k, never v
            pos = torch.arange(start, start + t, device=x.device)
            q, k = apply_rope(q, pos), apply_rope(k, pos)
        if cache is not None:
            cache.append(k, v)                                         # keys already rotated (RoPE)
            k, v = cache.keys, cache.values                            # (B, H, start + t, d_head)
        T_k = k.shape[2]
        if self.positions == "alibi":
            mask = alibi_bias(attn.n_heads, t, T_k, start=start).to(x.device, q.dtype)   # (H, t, T_k)
        else:
            i = torch.arange(start, start + t, device=x.device)[:, None]
            mask = torch.arange(T_k, device=x.device)[None, :] <= i     # (t, T_k) causal, True = may attend
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, t, d_head), (B, H, t, T_k)
        return attn.out_proj(merge_heads(heads)), weights

    def forward(self, x, is_causal: bool = True, cache=None, start: int = 0):
        if self.positions != "learned" or self.qk_norm:
            a, weights = self._positional(self.ln_attn(x), start, cache)
        elif cache is None:
            a, weights = self.attn(self.ln_attn(x), is_causal=is_causal)  # (B, T, d_model), (B, H, T, T)
        else:
            a, weights = self.attn(self.ln_attn(x), cache=cache)          # (B, t, d_model), (B, H, t, T)
        return x + a, weights


class TinyTransformer(nn.Module):
    """A small attention-only causal language model.

    Args:
        vocab_size: ``V``.  max_len: the longest sequence it accepts (with
            ``positions="learned"`` the number of learned position embeddings; with RoPE or
            ALiBi only a limit, since nothing is stored per position).
        d_model, n_heads, n_layers: width, heads per block, blocks.
        positions: ``"learned"`` (default: a learned vector per position added to the token
            embeddings), ``"rope"`` (every layer rotates each head's queries and keys,
            :func:`attnlib.apply_rope`, rotate-half pairing, base 10000; the values are not
            rotated) or ``"alibi"`` (every layer adds :func:`alibi_bias` to the causal scores).
            With RoPE or ALiBi the model has no ``pos_emb`` (it is ``None``).
        qk_norm: ``True`` puts a LayerNorm (learned gain and bias, over ``d_head``) on each
            head's queries and keys before the scores, so a score no longer grows with their
            lengths (QK-LayerNorm; Dehghani et al. 2023); default ``False``.  It draws no random
            numbers, so the other weights are those of the same seed without it.
        seed: seed of the initial weights (the global random state is left untouched).

    Shapes:
        tokens: ``(B, T)`` int64 with ``T <= max_len``.  ``forward`` returns ``logits``
        ``(B, T, V)`` (position ``i`` predicts token ``i + 1``) and ``weights``, a list of
        ``n_layers`` tensors ``(B, H, T, T)``.

    ``forward`` is the intact model.  Edits (zero, mean, patch; heads and the residual stream)
    and the activations of every layer: :func:`run`, the one door for edits.

    Raises:
        TypeError: a size or ``seed`` is not an int (at construction); tokens not an
            integer tensor.
        ValueError: a size below 1, ``d_model`` not divisible by ``n_heads``, ``positions`` not
            one of :data:`POSITIONS` (anything else, a non-str included); tokens not
            2-D, longer than ``max_len`` or outside ``0..V-1``.

    Source: Elhage et al. (2021), attention-only transformers; Vaswani et al. (2017); Su et
    al. (2021), RoFormer (RoPE); Press et al. (2022), "Train Short, Test Long" (ALiBi).
    """

    def __init__(self, vocab_size: int, *, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 max_len: int = 32, seed: int = 0, positions: str = "learned", qk_norm: bool = False):
        super().__init__()
        vocab_size, max_len, n_layers, d_model = (_validate.positive_int(value, name) for name, value in (
            ("vocab_size", vocab_size), ("max_len", max_len), ("n_layers", n_layers), ("d_model", d_model)))
        seed = _validate.non_negative_int(seed, "seed")
        positions = _validate.choice(positions, POSITIONS, "positions")
        qk_norm = _validate.flag(qk_norm, "qk_norm")
        self.vocab_size, self.max_len, self.n_layers, self.positions = vocab_size, max_len, n_layers, positions
        self.qk_norm = qk_norm
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            # the learned table is drawn only when used, so the default model's weights are unchanged
            self.pos_emb = nn.Embedding(max_len, d_model) if positions == "learned" else None
            self.blocks = nn.ModuleList(Block(d_model, n_heads, positions, qk_norm) for _ in range(n_layers))
            self.ln_out = nn.LayerNorm(d_model)
            self.unembed = nn.Linear(d_model, vocab_size)
        self.n_heads, self.d_head = self.blocks[0].attn.n_heads, self.blocks[0].attn.d_head

    def _tokens(self, tokens) -> torch.Tensor:
        if isinstance(tokens, torch.Tensor) and tokens.dim() == 1:
            raise ValueError(f"tokens must be (B, T) with 1 <= T <= {self.max_len}, got shape {tuple(tokens.shape)}")
        return _validate.token_ids(tokens, self.vocab_size, self.max_len)

    def new_cache(self) -> list:
        """One empty :class:`attnlib.KVCache` per layer, for ``forward(..., cache=...)``."""
        return [KVCache() for _ in self.blocks]

    def forward(self, tokens, cache=None):
        tokens = self._tokens(tokens)
        start = 0
        if cache is not None:
            start = cache_start(cache, self.n_layers)
            if start + tokens.shape[1] > self.max_len:
                raise ValueError(f"positions up to {start + tokens.shape[1] - 1} exceed max_len = {self.max_len}")
        B, T = tokens.shape
        positions = torch.arange(start, start + T, device=tokens.device)   # after what the cache holds
        x = self.tok_emb(tokens)                               # (B, T, d_model)
        if self.pos_emb is not None:
            x = x + self.pos_emb(positions)                    # + (T, d_model)
        weights = []
        for layer, block in enumerate(self.blocks):
            x, w = block(x, cache=None if cache is None else cache[layer], start=start)  # (B, T, d_model), (B, H, T, start + T)
            weights.append(w)
        logits = self.unembed(self.ln_out(x))                  # (B, T, V)
        return logits, weights

    #: The format tag :meth:`save` writes and :meth:`load` requires.
    FILE_FORMAT = "attnlib.TinyTransformer/1"

    def config(self) -> dict:
        """The constructor arguments that rebuild this architecture (``vocab_size``,
        ``d_model``, ``n_heads``, ``n_layers``, ``max_len``, ``positions``; not ``seed``, which
        only drew the initial weights)."""
        config = {"vocab_size": self.vocab_size, "d_model": self.tok_emb.embedding_dim, "n_heads": self.n_heads,
                  "n_layers": self.n_layers, "max_len": self.max_len, "positions": self.positions}
        if self.qk_norm:                 # only when set, so the default model's config is unchanged
            config["qk_norm"] = True
        return config

    def save(self, path) -> None:
        """Write the weights and :meth:`config` to ``path`` (one ``torch.save`` file, tensors
        moved to the CPU), so that :meth:`load` rebuilds the same model in another process.

        Raises:
            OSError: the file cannot be written.
        """
        torch.save(self.to_payload(), path)

    def to_payload(self) -> dict:
        """What :meth:`save` writes: ``{"format", "config", "state_dict"}`` (tensors on the CPU)."""
        state = {name: t.detach().cpu() for name, t in self.state_dict().items()}
        return {"format": self.FILE_FORMAT, "config": self.config(), "state_dict": state}

    @classmethod
    def load(cls, path, *, device=None) -> "TinyTransformer":
        """The model :meth:`save` wrote to ``path``, in eval mode, on ``device`` (default:
        the CPU).  Read with ``torch.load(weights_only=True)``: a file can hold tensors and
        plain data only, never code.

        Raises:
            FileNotFoundError: no such file.  ValueError: the file is not a TinyTransformer
                saved by :meth:`save` (no format tag, another format, a config or weights that
                do not fit the architecture), with what was expected and what was found.
        """
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise
        except Exception as err:                       # pickle, zip or unsafe-global errors
            raise ValueError(f"{path}: not a file written by TinyTransformer.save ({type(err).__name__}: {err})") from None
        return cls.from_payload(payload, device=device, source=path)

    @classmethod
    def from_payload(cls, payload, *, device=None, source="payload") -> "TinyTransformer":
        """The model of a :meth:`to_payload` dict (what :meth:`load` reads from a file).

        Raises:
            ValueError: as :meth:`load` (``source`` names where the payload came from).
        """
        path = source
        if not isinstance(payload, dict) or payload.get("format") != cls.FILE_FORMAT:
            found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
            raise ValueError(f"{path}: expected a file of format {cls.FILE_FORMAT!r} (TinyTransformer.save), found {found!r}")
        config, state = payload.get("config"), payload.get("state_dict")
        expected = {"vocab_size", "d_model", "n_heads", "n_layers", "max_len", "positions"}
        if not isinstance(config, dict) or set(config) - {"qk_norm"} != expected or not isinstance(state, dict):
            raise ValueError(f"{path}: expected a config with keys {sorted(expected)} and a state_dict, found "
                             f"{sorted(config) if isinstance(config, dict) else type(config).__name__}")
        model = cls(**config)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as err:
            raise ValueError(f"{path}: the weights do not fit the stored config {config}: {err}") from None
        return model.to(device if device is not None else "cpu").eval()

    @torch.no_grad()
    def generate(self, prompt, n_new: int, *, use_cache: bool = True, return_caches: bool = False):
        """Greedy decoding: append the most likely next token (the argmax of the last
        position's logits) ``n_new`` times.

        With ``use_cache=True`` the prompt runs once and then only the newest token, the
        earlier keys and values read from one :class:`attnlib.KVCache` per layer (the same
        ``forward``, with ``cache=``).  With ``use_cache=False`` every step runs the model over
        the whole sequence so far.  Both give the same tokens (tested).

        Shapes:
            prompt: ``(B, T_0)`` int64; returns ``(B, T_0 + n_new)`` (and the caches with
            ``return_caches=True``, ``use_cache=True``).

        Raises:
            TypeError: ``n_new`` not an int, ``use_cache`` not a bool.  ValueError: ``T_0 + n_new``
                beyond ``max_len``; ``prompt`` not ``(B, T_0)`` with ``T_0 >= 1``.
        """
        n_new = _validate.non_negative_int(n_new, "n_new")
        use_cache = _validate.flag(use_cache, "use_cache")
        if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
            raise ValueError(f"prompt must be a (B, T_0) tensor of token ids with T_0 >= 1, got "
                             f"{getattr(prompt, 'shape', type(prompt).__name__)}")
        if prompt.shape[1] + n_new > self.max_len:
            raise ValueError(f"T_0 + n_new = {prompt.shape[1] + n_new} exceeds the model's max_len = {self.max_len}")
        self.eval()
        tokens, caches = prompt, (self.new_cache() if use_cache else None)
        new = prompt                                                   # what the next forward pass reads
        for _ in range(n_new):
            logits, _ = self(new if use_cache else tokens, cache=caches)   # (B, t, V)
            nxt = logits[:, -1].argmax(-1, keepdim=True)               # (B, 1)
            tokens = torch.cat([tokens, nxt], dim=1)
            new = nxt
        return (tokens, caches) if (return_caches and use_cache) else tokens


def generate(model, prompt, n_new: int, *, use_cache: bool = True, return_caches: bool = False):
    """``model.generate(...)`` (:meth:`TinyTransformer.generate`), for a model given as an
    argument.

    Raises:
        TypeError: ``model`` is not a TinyTransformer; as :meth:`TinyTransformer.generate`.
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be an attnlib.transformer.TinyTransformer, got {type(model).__name__}")
    return model.generate(prompt, n_new, use_cache=use_cache, return_caches=return_caches)


@dataclass(frozen=True)
class Run(RunActivations):
    """What :func:`run` returns: one forward pass of a :class:`TinyTransformer` on a batch, every
    activation kept under TransformerLens's names (read it as :class:`attnlib.edits.RunReading`:
    ``run["pattern", 1]``, ``run.head("z", 1, 2)``, ``run.stacked("q")``).

    Attributes:
        tokens: ``(B, T)`` int64, the input.
        resid_pre: ``n_layers + 1`` tensors ``(B, T, d_model)``: the stream entering each block
            (after any residual edit), the last entry the stream after the last block, before
            the final LayerNorm.
        q, k, v: per layer ``(B, H, T, d_head)``, the projections of ``LN(resid_pre)`` split into
            heads (before RoPE rotates ``q`` and ``k``, as TransformerLens's ``hook_q``).
        attn_scores: per layer ``(B, H, T, T)``: the scores the softmax reads, ``q k^T / sqrt(d_head)``
            (rotated ``q``, ``k`` with RoPE; plus the ALiBi bias), ``-inf`` above the diagonal.
        pattern: per layer ``(B, H, T, T)``: the attention weights.
        z: per layer ``(B, H, T, d_head)``: each head's output before ``W_O``, after any edit.
        logits: ``(B, T, V)``: position ``i`` predicts token ``i + 1``.
        edits: the :class:`attnlib.edits.Edit` applied (empty for an intact run).
    """

    tokens: torch.Tensor
    logits: torch.Tensor
    edits: tuple = ()


@torch.no_grad()
def run(model, tokens, *, edits=()) -> Run:
    """Run ``model`` once on ``tokens`` and keep every activation of every layer and head
    (:class:`Run`), with ``edits`` applied (the spec of :mod:`attnlib.edits`: zero, mean or
    patch, per head or for the residual stream, optionally at one position).  The one way to
    run the model with edits.  A ``"mean"`` edit without a source uses :func:`reference_means`.

    The pass is the model's own ``forward`` (under ``torch.no_grad()``, in evaluation mode);
    hooks read its projections, edit what enters ``W_O`` (:func:`attnlib.edits.apply_head_edits`)
    or the stream entering a block (:func:`attnlib.edits.apply_resid_edit`), so everything
    downstream of an edit is recomputed.

    Shapes:
        tokens: ``(B, T)`` (or ``(T,)``, read as a batch of one) int64; see :class:`Run`.

    Raises:
        TypeError: ``model`` not a TinyTransformer; tokens not integer; an edit malformed.
        ValueError: tokens not ``(B, T)`` with ``1 <= T <= max_len`` or outside the vocabulary;
            an edit as :func:`attnlib.edits.as_edits` and :func:`attnlib.edits.apply_head_edits` say.
        IndexError: a layer, head or position outside the model or the input.

    >>> model = TinyTransformer(10, d_model=8, n_heads=2, n_layers=2, max_len=6)
    >>> r = run(model, torch.tensor([[1, 2, 3, 1, 2]]), edits=[{"layer": 1, "head": 0, "mode": "zero"}])
    >>> tuple(r["pattern", 0].shape), tuple(r.head("z", 1, 0).shape), float(r.head("z", 1, 0).abs().max())
    ((1, 2, 5, 5), (1, 5, 4), 0.0)
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be an attnlib.transformer.TinyTransformer, got {type(model).__name__}")
    if isinstance(tokens, torch.Tensor) and tokens.dim() == 1:
        tokens = tokens[None]
    tokens = model._tokens(tokens)
    edits = as_edits(edits, model.n_layers, model.n_heads, T=tokens.shape[1],
                     reference=lambda: reference_means(model))
    model.eval()
    H, d_head = model.n_heads, model.d_head
    hooks, proj = RunHooks(edits, model.n_layers, H), {}
    handles = []

    try:
        for layer, block in enumerate(model.blocks):
            handles.append(block.register_forward_pre_hook(hooks.stream(layer)))
            handles.append(block.attn.out_proj.register_forward_pre_hook(hooks.head_outputs(layer)))
            for name in ("q", "k", "v"):
                handles.append(getattr(block.attn, f"{name}_proj").register_forward_hook(
                    lambda m, a, out, key=(name, layer): proj.__setitem__(key, split_heads(out, H).detach())))
        handles.append(model.ln_out.register_forward_pre_hook(hooks.stream(model.n_layers)))
        logits, weights = model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    T = tokens.shape[1]
    scores = []
    for layer in range(model.n_layers):
        q, k = proj["q", layer], proj["k", layer]
        if model.qk_norm:                                               # the scores read normalised q, k
            q, k = model.blocks[layer].ln_q(q), model.blocks[layer].ln_k(k)
        if model.positions == "rope":
            pos = torch.arange(T, device=tokens.device)
            q, k = apply_rope(q, pos), apply_rope(k, pos)
        s = q @ k.transpose(-2, -1) / d_head ** 0.5                    # (B, H, T, T)
        if model.positions == "alibi":
            s = s + alibi_bias(H, T).to(s)
        scores.append(s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=s.device).tril(), float("-inf")))
    return Run(tokens=tokens, resid_pre=tuple(hooks.resid), q=tuple(proj["q", l] for l in range(model.n_layers)),
               k=tuple(proj["k", l] for l in range(model.n_layers)), v=tuple(proj["v", l] for l in range(model.n_layers)),
               attn_scores=tuple(scores), pattern=tuple(w.detach() for w in weights), z=tuple(hooks.z), logits=logits,
               edits=edits)


#: Mean ablation's reference inputs for a :class:`TinyTransformer` (a ``"mean"`` edit without a
#: source): ``n`` sequences of ``length / 2`` distinct token ids in a seeded random order, each
#: followed by itself, drawn with ``seed`` (:func:`repeated_tokens`).  They are chapter 7's
#: held-out repeated sequences (:func:`attnlib.induction.repeated_sequences`, seed 0), so the
#: kernel's default means are the ones the circuit lab's page stores.
REFERENCE = {"n": 256, "length": 32, "seed": 10_000}


def repeated_tokens(n: int, length: int, vocab_size: int, seed: int) -> torch.Tensor:
    """``n`` sequences of ``min(length // 2, vocab_size)`` distinct ids of ``0..vocab_size-1`` in
    a random order (a ``torch.Generator`` seeded with ``seed``, one permutation per sequence),
    each followed by a copy of itself.

    Shapes:
        returns ``(n, 2 * min(length // 2, vocab_size))`` int64.

    Raises:
        TypeError: an argument not an int.  ValueError: ``n``, ``length`` or ``vocab_size``
            below 1 (``length`` below 2), ``seed`` negative.
    """
    n, vocab_size = _validate.positive_int(n, "n"), _validate.positive_int(vocab_size, "vocab_size")
    length, seed = _validate.positive_int(length, "length"), _validate.non_negative_int(seed, "seed")
    if length < 2:
        raise ValueError(f"length must be at least 2 (a word and its repeat), got {length}")
    g = torch.Generator().manual_seed(seed)
    half = torch.stack([torch.randperm(vocab_size, generator=g)[:length // 2] for _ in range(n)])
    return torch.cat([half, half], dim=1)


def reference_tokens(model) -> torch.Tensor:
    """The model's reference inputs (:data:`REFERENCE`, at most ``max_len`` tokens long), on the
    CPU.  Shapes: ``(256, T)`` int64, ``T <= 32``."""
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be an attnlib.transformer.TinyTransformer, got {type(model).__name__}")
    return repeated_tokens(REFERENCE["n"], min(REFERENCE["length"], model.max_len), model.vocab_size, REFERENCE["seed"])


_REFERENCE_MEANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@torch.no_grad()
def reference_means(model) -> torch.Tensor:
    """Each head's output ``z`` averaged over every token of the model's reference inputs
    (:func:`reference_tokens`), by :func:`attnlib.edits.head_means` of an intact :func:`run`:
    what a ``"mean"`` edit without a source puts in a head's place.  Computed once per model and
    state of its weights (a training step recomputes it).

    Shapes:
        returns ``(n_layers, H, d_head)`` float32 on the CPU.

    Raises:
        TypeError: ``model`` not a :class:`TinyTransformer`.
    """
    tokens = reference_tokens(model)
    state = tuple((p.data_ptr(), p._version) for p in model.parameters())
    cached = _REFERENCE_MEANS.get(model)
    if cached is None or cached[0] != state:
        device = next(model.parameters()).device
        means = head_means(run(model, tokens.to(device))).float().cpu()
        _REFERENCE_MEANS[model] = cached = (state, means)
    return cached[1]
