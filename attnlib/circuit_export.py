"""The circuit lab's exporter, run at build time (``_ext/page_models.py``): chapter 7's trained
language model at the lab's checkpoints and the one-layer control (:func:`attnlib.circuit_lab.lab_models`)
written to ONNX for the page, and checked.

* :class:`LabGraph`: the graph the page runs, every edit of :mod:`attnlib.edits` an input
  (:func:`attnlib.edits.graph_inputs` is the translation; ``attnlib/static/edits.js`` mirrors it).
* :func:`export` writes it (float32); :func:`check` runs it with onnxruntime on seeded random
  sequences, intact and with every kind of edit, against :func:`attnlib.transformer.run`, and
  fails above :data:`BUILD_TOLERANCE` on the logits, the attention weights, the heads' outputs or
  the residual stream.
* :func:`write_site_files` writes every model, ``tiny.json`` (the vocabulary, the sizes, each
  model's SHA-256, head scores and reference means) and keeps each checkpoint's weights as
  ``<name>.pt`` (:meth:`attnlib.transformer.TinyTransformer.load` reads it).  Its cache is keyed
  on what the export reads: the trained runs' keys and the code (not the docstrings or comments)
  of the modules the export runs.

Shapes legend: ``B`` batch, ``L`` layers, ``H`` heads, ``T`` tokens, ``V`` vocabulary,
``d_head`` a head's width, ``d_model`` the model's width.
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path

import torch
from torch import nn

from . import _validate, circuit_lab, induction, site_files
from .edits import as_edits, graph_inputs, head_means
from .patching import MIN_GAP
from .transformer import TinyTransformer, reference_means, run

__all__ = ["BUILD_TOLERANCE", "LabGraph", "export", "check", "feeds", "write_site_files"]

#: Largest difference allowed between an exported graph's output and PyTorch's: logits (nats),
#: attention weights, head outputs and the residual stream.
BUILD_TOLERANCE = 1e-4

# The exporter's version: part of the key of the exported files (bump when the graph changes).
_GRAPH_VERSION = "2"


class LabGraph(nn.Module):
    """The graph the page runs: a :class:`~attnlib.transformer.TinyTransformer` (learned
    positions) written out with every edit of :mod:`attnlib.edits` as an input, so one graph
    serves intact runs, zero and mean ablation and patching.

    Inputs:
        tokens ``(B, T)`` int64; head_mask ``(B, L, H, T)`` and head_value ``(B, L, H, T, d_head)``:
        where the mask is 1, the head's output at that position (``z``, before ``W_O``) is
        replaced by the value (zeros, the head's mean, or another run's ``z``); resid_mask
        ``(B, L + 1, T)`` and resid_value ``(B, L + 1, T, d_model)``: the same for the stream
        entering each block (entry ``L``: the stream after the last block).
    Outputs:
        logits ``(B, T, V)``, pattern ``(B, L, H, T, T)``, z ``(B, L, H, T, d_head)`` (after the
        edits), resid ``(B, L + 1, T, d_model)`` (after the edits).
    """

    def __init__(self, model: TinyTransformer):
        super().__init__()
        if not isinstance(model, TinyTransformer) or model.positions != "learned":
            raise TypeError("LabGraph needs a TinyTransformer with learned positions")
        self.model = model.eval()

    def forward(self, tokens, head_mask, head_value, resid_mask, resid_value):
        m = self.model
        B, T = tokens.shape
        H, dh = m.n_heads, m.d_head
        x = m.tok_emb(tokens) + m.pos_emb.weight[:T]                     # (B, T, d_model)
        allowed = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
        resid, patterns, zs = [], [], []
        for layer, block in enumerate(m.blocks):
            keep = resid_mask[:, layer, :, None]
            x = x * (1 - keep) + resid_value[:, layer] * keep
            resid.append(x)
            h, a = block.ln_attn(x), block.attn
            q = a.q_proj(h).view(B, T, H, dh).transpose(1, 2)              # (B, H, T, d_head)
            k = a.k_proj(h).view(B, T, H, dh).transpose(1, 2)
            v = a.v_proj(h).view(B, T, H, dh).transpose(1, 2)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(dh)             # (B, H, T, T)
            weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            z = weights @ v                                                 # (B, H, T, d_head)
            swap = head_mask[:, layer, :, :, None]
            z = z * (1 - swap) + head_value[:, layer] * swap
            patterns.append(weights)
            zs.append(z)
            x = x + a.out_proj(z.transpose(1, 2).reshape(B, T, H * dh))
        keep = resid_mask[:, m.n_layers, :, None]
        x = x * (1 - keep) + resid_value[:, m.n_layers] * keep
        resid.append(x)
        logits = m.unembed(m.ln_out(x))
        return logits, torch.stack(patterns, 1), torch.stack(zs, 1), torch.stack(resid, 1)


def feeds(model: TinyTransformer, tokens: torch.Tensor, edits=()) -> dict:
    """:class:`LabGraph`'s inputs for a run of ``tokens`` ``(B, T)`` with ``edits`` (the spec of
    :mod:`attnlib.edits`, checked with the model's sizes and ``T``; a mean without a source takes
    :func:`attnlib.transformer.reference_means`), as numpy arrays: the translation
    :func:`attnlib.edits.graph_inputs` makes, which the page's workers mirror.

    Raises:
        as :func:`attnlib.edits.as_edits` and :func:`attnlib.edits.graph_inputs`.
    """
    B, T = tokens.shape
    checked = as_edits(edits, model.n_layers, model.n_heads, T=T, reference=lambda: reference_means(model))
    inputs = graph_inputs(checked, n_layers=model.n_layers, n_heads=model.n_heads, d_head=model.d_head,
                          d_model=model.tok_emb.weight.shape[1], B=B, T=T)
    return {"tokens": tokens.numpy(), **{k: v.numpy() for k, v in inputs.items()}}


def export(model: TinyTransformer, path) -> Path:
    """Export ``model`` as a :class:`LabGraph` to ``path`` (ONNX, opset 17, float32, dynamic
    batch and length).

    Raises:
        TypeError: as :class:`LabGraph`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    graph = LabGraph(model.cpu())
    inputs = {k: torch.from_numpy(v) for k, v in feeds(model, torch.tensor([[1, 2, 3, 1, 2]])).items()}
    names = list(inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                     # the tracer's notes on shapes
        torch.onnx.export(
            graph, tuple(inputs.values()), str(path), dynamo=False, opset_version=17,
            input_names=names, output_names=["logits", "pattern", "z", "resid"],
            dynamic_axes={"tokens": {0: "B", 1: "T"}, "head_mask": {0: "B", 3: "T"}, "head_value": {0: "B", 3: "T"},
                          "resid_mask": {0: "B", 2: "T"}, "resid_value": {0: "B", 2: "T"},
                          "logits": {0: "B", 1: "T"}, "pattern": {0: "B", 3: "T", 4: "T"}, "z": {0: "B", 3: "T"},
                          "resid": {0: "B", 2: "T"}})
    return path


def _check_edits(model: TinyTransformer, generator: torch.Generator, T: int, source, means) -> list:
    """Edit lists of every kind for :func:`check`, drawn with ``generator``: none; zero, mean
    (the reference means, and ``means``) and patch of a head, whole or at one position; a patch of
    the residual stream at one position and at every position; and three edits at once."""
    L, H = model.n_layers, model.n_heads
    pick = lambda n: int(torch.randint(n, (1,), generator=generator))    # noqa: E731
    heads = torch.randperm(L * H, generator=generator)[:3].tolist()
    three = [{"layer": k // H, "head": k % H, "mode": mode, **({"source": source} if mode == "patch" else {})}
             for k, mode in zip(heads, ("zero", "mean", "patch"))]
    return [
        [],
        [{"layer": pick(L), "head": pick(H), "mode": "zero"}],
        [{"layer": pick(L), "head": pick(H), "mode": "zero", "position": pick(T)}],
        [{"layer": pick(L), "head": pick(H), "mode": "mean"}],
        [{"layer": pick(L), "head": pick(H), "mode": "mean", "source": means}],
        [{"layer": pick(L), "head": pick(H), "mode": "patch", "source": source}],
        [{"layer": pick(L), "head": pick(H), "mode": "patch", "source": source, "position": pick(T)}],
        [{"layer": pick(L + 1), "head": None, "mode": "patch", "source": source, "position": pick(T)}],
        [{"layer": pick(L + 1), "head": None, "mode": "patch", "source": source}],
        three,
    ]


def check(path, model: TinyTransformer, *, n: int = 8, seed: int = 0, tolerance: float = BUILD_TOLERANCE) -> dict:
    """Run the exported graph at ``path`` with onnxruntime (CPU) on ``n`` seeded random word
    sequences of random lengths (2 to ``max_len`` tokens), intact and with every kind of edit
    (:func:`_check_edits`), and compare the logits, the attention weights, the heads' outputs
    ``z`` and the residual stream with :func:`attnlib.transformer.run`.

    Returns:
        ``{"max_logit_diff", "max_weight_diff", "max_z_diff", "max_resid_diff", "runs"}``
        (nats, probabilities, activations, count).

    Raises:
        ValueError: an output differs by more than ``tolerance``; the message names the output,
            the run and the edits.
        ImportError: ``onnxruntime`` is not installed.
    """
    import onnxruntime as ort

    tolerance = _validate.real(tolerance, "tolerance", low=0.0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model = model.cpu().eval()
    g = torch.Generator().manual_seed(seed)
    worst = {"logits": 0.0, "pattern": 0.0, "z": 0.0, "resid": 0.0}
    runs = 0
    for i in range(n):
        T = int(torch.randint(2, model.max_len + 1, (1,), generator=g))
        tokens = torch.randint(model.vocab_size, (2, T), generator=g)
        source = run(model, torch.randint(model.vocab_size, (2, T), generator=g))
        means = head_means(run(model, torch.randint(model.vocab_size, (8, model.max_len), generator=g)))
        for edits in _check_edits(model, g, T, source, means):
            want = run(model, tokens, edits=edits)
            got = dict(zip(("logits", "pattern", "z", "resid"), session.run(None, feeds(model, tokens, edits))))
            expected = {"logits": want.logits, "pattern": want.stacked("pattern").transpose(0, 1),
                        "z": want.stacked("z").transpose(0, 1), "resid": want.stacked("resid_pre").transpose(0, 1)}
            runs += 1
            for name, value in expected.items():
                d = float(abs(got[name] - value.numpy()).max())
                worst[name] = max(worst[name], d)
                if not d <= tolerance:
                    raise ValueError(f"the exported lab model {Path(path).name} differs from PyTorch in {name} by "
                                     f"{d:.2e} (> {tolerance:g}) on sequence {i} ({T} tokens) with edits "
                                     f"{[{k: v for k, v in e.items() if k != 'source'} for e in edits]!r}")
    return {"max_logit_diff": worst["logits"], "max_weight_diff": worst["pattern"], "max_z_diff": worst["z"],
            "max_resid_diff": worst["resid"], "runs": runs}


#: The modules whose code the export runs: a change to their code (not to a docstring or a
#: comment) exports the models again.
_EXPORT_READS = ("circuit_export", "circuit_lab", "edits", "transformer", "multihead", "attention", "masks",
                 "positions", "kv_cache")


def _site_key() -> str:
    """What decides the exported files: the trained runs' cache keys (configuration, the training
    sources, torch), the graph's version and the code of :data:`_EXPORT_READS`."""
    parts = []
    for n_layers in (2, 1):
        model = induction.build_model(n_layers)
        config = induction.TrainConfig(n_layers=n_layers, seed=0, steps=induction.STEPS, n_heads=model.n_heads,
                                       vocab_size=len(induction.vocabulary()), device=str(next(model.parameters()).device))
        parts.append(induction._cache_key(config))
    here = Path(__file__).parent
    code = {name: site_files.code_digest((here / f"{name}.py").read_text(encoding="utf-8")) for name in _EXPORT_READS}
    return hashlib.sha256(json.dumps([parts, _GRAPH_VERSION, torch.__version__, code]).encode()).hexdigest()[:16]


def write_site_files(folder, *, cache=None, keep=None) -> dict:
    """Write what the page's circuit lab fetches into ``folder``: one ``<name>.onnx`` per model
    of :func:`attnlib.circuit_lab.lab_models` and ``tiny.json`` (the vocabulary, the sizes, and per
    model its step, file size and SHA-256 (and ``digest``, one SHA-256 over them all: the name of
    the reader's browser cache), its heads' induction and previous-token scores on the chapter's
    probe sequences, its :func:`attnlib.transformer.reference_means`, and :func:`check`'s
    figures), through :func:`attnlib.site_files.write`.  With ``keep`` (a folder), each model's
    weights are also saved there as ``<name>.pt`` (:meth:`TinyTransformer.save`).  With ``cache``
    (a folder), the export and its checks are reused while the trained runs and the code the
    export runs are unchanged (:func:`_site_key`).

    Returns:
        the ``tiny.json`` dict.

    Raises:
        ValueError: an exported graph fails :func:`check`.
    """
    return site_files.write(folder, key=_site_key(), info_name="tiny.json", produce=_produce, cache=cache, keep=keep)


def _produce(target: Path) -> dict:
    _, history2 = induction.trained(2)
    models = []
    (target / "weights").mkdir(exist_ok=True)
    for name, (model, step, scores) in circuit_lab.lab_models().items():
        export(model, target / f"{name}.onnx")
        figures = check(target / f"{name}.onnx", model, seed=len(models))
        model.save(target / "weights" / f"{name}.pt")
        models.append({
            "name": name, "step": step, "n_layers": model.n_layers, "control": name == circuit_lab.CONTROL,
            "bytes": (target / f"{name}.onnx").stat().st_size,
            "sha256": hashlib.sha256((target / f"{name}.onnx").read_bytes()).hexdigest(),
            **scores,
            "means": [round(float(x), 7) for x in reference_means(model).flatten()],
            "check": figures})
    probe = induction.repeated_sequences(1, seed=0)[0]
    return {
        "graph_version": _GRAPH_VERSION, "vocabulary": induction.vocabulary(), "max_len": induction.SEQ_LEN,
        "n_heads": induction.N_HEADS, "d_model": induction.D_MODEL, "d_head": induction.D_MODEL // induction.N_HEADS,
        "steps": int(history2["probe_step"][-1]), "models": models, "tolerance": BUILD_TOLERANCE,
        "files": [f"{m['name']}.onnx" for m in models],
        "digest": hashlib.sha256("".join(m["sha256"] for m in models).encode()).hexdigest(),
        "example": induction.decode(probe),
        "uniform_induction": induction.uniform_induction_score(), "uniform_previous": induction.uniform_previous_score(),
        "min_gap": MIN_GAP,
    }
