"""The pretrained encoder for the published page: exported to ONNX, checked against
:func:`attnlib.encoder.run`.

The book's in-page model lab (chapter 9) runs the course's encoder in the reader's browser
with onnxruntime-web, offline.  :func:`export` writes the graph the page runs, from the same
verified weights :func:`attnlib.encoder.load_encoder` loads:

* inputs ``input_ids`` and ``token_type_ids`` ``(B, T)`` int64 and ``head_mask``
  ``(B, n_layers, H)`` float32 (1 keeps a head, 0 switches it off: zero ablation,
  :func:`attnlib.multihead.scale_heads`, the ``head_mask`` of Michel et al. 2019);
* outputs ``attentions`` ``(B, n_layers, H, T, T)`` (the attention weights, row-major: layer,
  head, query, key) and ``hidden_states`` ``(B, n_layers + 1, T, d_model)``;
* weights stored as float16 (half the download) and cast to float32 inside the graph, so the
  arithmetic is float32 as in PyTorch: the attention weights move by about 1e-4, while int8
  weights would move them by up to 0.34 and change some heads' strongest key.

:func:`check` runs the file with onnxruntime on sentences and compares every attention weight
and hidden state with :func:`~attnlib.encoder.run` (the build fails above
:data:`BUILD_TOLERANCE`).  :func:`write_site_files` writes what the page fetches.

``onnx`` and ``onnxruntime`` are imported inside the functions that use them: they are
build-time dependencies (requirements.txt), not attnlib's (a learner's Binder has neither).

Shapes legend: ``B`` batch, ``H`` heads, ``T`` tokens, ``d_model`` model width.
"""
from __future__ import annotations

import copy
import hashlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np

import torch
from torch import nn

from .. import _validate, site_files
from ..multihead import scale_heads
from .loading import DEFAULT_MODEL_MANIFEST, default_model_dir, length_limit, load_encoder, sha256_file
from .run import run

__all__ = ["BrowserGraph", "export", "check", "write_site_files", "BUILD_TOLERANCE", "LONG_TOLERANCE", "CHECK_SENTENCES",
           "tokenizer_settings"]

#: Largest difference allowed between an attention weight of the exported graph and PyTorch's.
BUILD_TOLERANCE = 1e-3

#: Largest difference allowed for texts longer than :data:`SHORT` tokens: float16 weights move
#: the weights of a 130-token text by up to 1.5e-3 (measured; float32 weights: 2e-6).
LONG_TOLERANCE = 2e-3
SHORT = 64

#: Sentences the build checks the exported graph on (pairs as tuples): short sentences,
#: accents and numbers, a pair, and a 150-token text (checked at :data:`LONG_TOLERANCE`).
CHECK_SENTENCES = (
    "The cat sat on the mat.",
    ("time flies like an arrow", "fruit flies like a banana"),
    "Four score and seven years ago our fathers brought forth on this continent a new nation.",
    "Le café était fermé; naïve résumés cost 1,024 dollars.",
    "The bears that the dog chased were tired, so they slept until the spring came back to the hills.",
    " ".join(["the bears that the dog chased were tired"] * 15),
)

# Weights kept in float32 (0.4 MB in all): the LayerNorm gains and biases and the position and
# segment tables.  In float16 they add about 5e-4 to the largest weight difference
# (bench/bench_browser_model.py measures both).
_FLOAT32_WEIGHTS = ("LayerNorm", "position_embeddings", "token_type_embeddings")

# The exporter's version: part of the cache key of the exported file (bump when the graph changes).
_GRAPH_VERSION = "1"


class BrowserGraph(nn.Module):
    """The encoder as the page runs it: token ids and a head mask in, every layer's attention
    weights and hidden states out (see the module docstring for the shapes).

    Forward hooks at the heads' outputs (where :func:`attnlib.encoder.run` edits heads) apply
    :func:`attnlib.multihead.scale_heads`.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model
        self._mask = None
        n_heads = model.config.num_attention_heads
        for layer, block in enumerate(model.encoder.layer):
            def hook(module, args, output, layer=layer):
                return (scale_heads(output[0], self._mask[:, layer]),) + tuple(output[1:])  # (B, T, H * d_v)
            block.attention.self.register_forward_hook(hook)
        self.n_heads = n_heads

    def forward(self, input_ids, token_type_ids, head_mask):
        self._mask = head_mask                                              # (B, L, H)
        out = self.model(input_ids=input_ids, token_type_ids=token_type_ids,
                         output_attentions=True, output_hidden_states=True)
        return torch.stack(out.attentions, dim=1), torch.stack(out.hidden_states, dim=1)


def _fresh_model():
    """A private copy of the verified model (hooks are added to it; the cached one stays clean)."""
    model, _ = load_encoder(device="cpu")
    return copy.deepcopy(model).eval()


def _weights_to_float16(path: Path) -> None:
    """Store the float32 weight matrices of the ONNX file at ``path`` as float16, each followed
    by a Cast back to float32, so the arithmetic stays float32 (inputs and outputs too); the
    weights named in ``_FLOAT32_WEIGHTS`` stay float32."""
    import onnx
    from onnx import helper, numpy_helper

    graph_model = onnx.load(str(path))
    graph = graph_model.graph
    casts = []
    for init in graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT or len(init.dims) == 0:
            continue
        array = numpy_helper.to_array(init)
        if array.size < 16 or any(part in init.name for part in _FLOAT32_WEIGHTS):
            continue
        half_name = init.name + "__fp16"
        half = numpy_helper.from_array(array.astype("float16"), half_name)
        init.CopyFrom(half)
        casts.append(helper.make_node("Cast", [half_name], [half_name[:-6]], to=onnx.TensorProto.FLOAT,
                                      name=half_name + "_cast"))
    nodes = casts + list(graph.node)                                         # casts first: topological order
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(graph_model)
    onnx.save(graph_model, str(path))


def export(path) -> Path:
    """Export the course's encoder to ``path`` (ONNX, opset 17, float16 weights, dynamic batch
    and length).  Takes about 10 s on a laptop CPU.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        FileNotFoundError: the model package is missing (see :func:`attnlib.encoder.load_encoder`).
        ImportError: ``onnx`` is not installed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    graph = BrowserGraph(_fresh_model())
    ids = torch.tensor([[101, 1996, 4937, 2938, 1012, 102]])
    args = (ids, torch.zeros_like(ids), torch.ones(1, graph.model.config.num_hidden_layers, graph.n_heads))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                     # the tracer's notes on shapes
        torch.onnx.export(
            graph, args, str(path), dynamo=False, opset_version=17,
            input_names=["input_ids", "token_type_ids", "head_mask"],
            output_names=["attentions", "hidden_states"],
            dynamic_axes={"input_ids": {0: "B", 1: "T"}, "token_type_ids": {0: "B", 1: "T"},
                          "head_mask": {0: "B"}, "attentions": {0: "B", 3: "T", 4: "T"},
                          "hidden_states": {0: "B", 2: "T"}},
        )
    _weights_to_float16(path)
    return path


def _run_onnx(session, ids, types, head_mask):
    attentions, hidden = session.run(None, {"input_ids": ids, "token_type_ids": types, "head_mask": head_mask})
    return attentions, hidden


def check(path, sentences=CHECK_SENTENCES, *, tolerance: float = BUILD_TOLERANCE) -> dict:
    """Run the exported graph with onnxruntime (CPU) on ``sentences`` (a str, or a pair as a
    tuple) and compare it with :func:`attnlib.encoder.run`: every attention weight, intact and
    with one head switched off per sentence, and the hidden states.  Texts of more than
    :data:`SHORT` tokens are held to :data:`LONG_TOLERANCE`.

    Returns:
        ``{"max_weight_diff", "max_hidden_diff", "n_weights", "strongest_key_changes"}``:
        the largest absolute differences (weights are probabilities, hidden states unitless),
        how many weights were compared, and how many query rows' strongest key differs.

    Raises:
        ValueError: a weight differs by more than ``tolerance``; the message names the sentence.
        ImportError: ``onnxruntime`` is not installed.
    """
    import onnxruntime as ort

    tolerance = _validate.real(tolerance, "tolerance", low=0.0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model, tokenizer = load_encoder(device="cpu")
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    worst_w = worst_h = 0.0
    n_weights = flips = 0
    for i, sentence in enumerate(sentences):
        pair = sentence if isinstance(sentence, tuple) else (sentence, None)
        layer, head = i % L, (5 * i + 3) % H
        for ablate in ((), ((layer, head),)):
            ref = run(*pair, edits=[{"layer": l, "head": h, "mode": "zero"} for l, h in ablate],
                      model=model, tokenizer=tokenizer)
            ids = ref.input_ids[None].numpy().astype(np.int64)
            types = ref.token_type_ids[None].numpy().astype(np.int64)
            mask = np.ones((1, L, H), dtype=np.float32)
            for lh in ablate:
                mask[0, lh[0], lh[1]] = 0.0
            attentions, hidden = _run_onnx(session, ids, types, mask)
            want = ref.stacked("pattern").numpy()                           # (L, H, T, T)
            diff = float(np.abs(attentions[0] - want).max())
            worst_w = max(worst_w, diff)
            worst_h = max(worst_h, float(np.abs(hidden[0] - ref.stacked("resid_pre").numpy()).max()))
            n_weights += want.size
            flips += int((attentions[0].argmax(-1) != want.argmax(-1)).sum())
            allowed = tolerance if len(ref.tokens) <= SHORT else max(tolerance, LONG_TOLERANCE)
            if diff > allowed:
                raise ValueError(f"the exported encoder's attention weights differ from PyTorch's by {diff:.2e} "
                                 f"(> {allowed:g}, {len(ref.tokens)} tokens) on {pair!r} with heads switched off: {list(ablate)}")
    return {"max_weight_diff": worst_w, "max_hidden_diff": worst_h, "n_weights": n_weights,
            "strongest_key_changes": flips}


def tokenizer_settings() -> dict:
    """What the page's WordPiece tokenizer (``attnlib/static/wordpiece.js``) needs to match the
    model's: read from the verified ``tokenizer.json`` and the model's length limit."""
    model, tokenizer = load_encoder(device="cpu")
    spec = json.loads((default_model_dir() / "tokenizer.json").read_text(encoding="utf-8"))
    norm = spec["normalizer"]
    limit, _ = length_limit(model, tokenizer)
    return {"lowercase": bool(norm.get("lowercase", True)), "stripAccents": norm.get("strip_accents"),
            "handleChineseChars": bool(norm.get("handle_chinese_chars", True)),
            "cleanText": bool(norm.get("clean_text", True)), "unkToken": spec["model"]["unk_token"],
            "maxInputCharsPerWord": int(spec["model"]["max_input_chars_per_word"]),
            "clsToken": "[CLS]", "sepToken": "[SEP]", "maxLength": int(limit)}


def write_site_files(folder, *, cache=None) -> dict:
    """Write what the page's model lab fetches into ``folder``: ``encoder.onnx``,
    ``vocab.txt`` and ``model.json`` (sizes, sha256, the layer and head counts, the
    tokenizer's settings and :func:`check`'s figures), through :func:`attnlib.site_files.write`.
    With ``cache`` (a folder), the export and its check are reused while the model's files and
    the exporter's code (not its docstrings) are unchanged.

    Returns:
        the ``model.json`` dict.

    Raises:
        ValueError: the exported graph fails :func:`check`.
    """
    key = hashlib.sha256(json.dumps([DEFAULT_MODEL_MANIFEST, _GRAPH_VERSION, torch.__version__,
                                     site_files.code_digest(Path(__file__).read_text(encoding="utf-8"))],
                                    sort_keys=True).encode()).hexdigest()[:16]
    return site_files.write(folder, key=key, info_name="model.json", produce=_produce, cache=cache)


def _produce(target: Path) -> dict:
    export(target / "encoder.onnx")
    figures = check(target / "encoder.onnx")
    shutil.copyfile(default_model_dir() / "vocab.txt", target / "vocab.txt")
    model, _ = load_encoder(device="cpu")
    return {
        "model": "sentence-transformers/all-MiniLM-L6-v2", "graph_version": _GRAPH_VERSION,
        "n_layers": model.config.num_hidden_layers, "n_heads": model.config.num_attention_heads,
        "d_model": model.config.hidden_size, "tokenizer": tokenizer_settings(),
        "files": {name: {"bytes": (target / name).stat().st_size, "sha256": sha256_file(target / name)}
                  for name in ("encoder.onnx", "vocab.txt")},
        "check": {**figures, "tolerance": BUILD_TOLERANCE, "sentences": len(CHECK_SENTENCES)},
    }
