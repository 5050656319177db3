"""The circuit lab: chapter 6's trained language model, and its training checkpoints, in the page.

Chapter 6 trains a two-layer attention-only model (:mod:`attnlib.induction`) in which a
previous-token head and an induction head form.  The circuit lab lets a reader of the published
page run that model on a word sequence of their own, at any of :data:`N_CHECKPOINTS` moments of
its training, switch heads off and patch activations between two runs, with no kernel.  This
module is the lab's one definition, used in two places:

* at build time (``_ext/tiny_model.py``): :func:`write_site_files` exports the chosen checkpoints
  and the one-layer control to ONNX (:class:`LabGraph`, float32), checks every file against
  :func:`attnlib.transformer.run` with onnxruntime (:func:`check`; the build fails above
  :data:`BUILD_TOLERANCE`), and keeps each checkpoint's weights as ``<name>.pt``
  (:meth:`attnlib.transformer.TinyTransformer.load` reads it);
* in the kernel: :func:`lab_models` gives the same checkpoints as PyTorch models, and
  :func:`read` is what a lab exercise's grader receives, computed with PyTorch; the page
  computes the same dict with ``window.attnlibTiny`` (``attnlib/static/xp_tiny.js``).

The edits are :mod:`attnlib.edits`'s spec: ``{"layer", "head", "mode": "zero" | "mean" | "patch",
"source"?, "position"?}``.  Mean ablation replaces a head's output by its mean over the
chapter's held-out repeated sequences (:func:`attnlib.induction.head_means`), stored per checkpoint so that
the page uses the same numbers.

Shapes legend: ``B`` batch, ``L`` layers, ``H`` heads, ``T`` tokens, ``V`` vocabulary,
``d_head`` a head's width, ``d_model`` the model's width.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
import warnings
from pathlib import Path

import torch
from torch import nn

from . import _validate, induction
from .transformer import TinyTransformer, run

__all__ = ["N_CHECKPOINTS", "BUILD_TOLERANCE", "LabGraph", "checkpoint_steps", "lab_checkpoints", "lab_models",
           "head_scores", "pair_metric", "corrupted_position", "default_pair", "lab_data",
           "export", "check", "write_site_files", "read_words", "read", "CONTROL"]

#: Checkpoints of the two-layer run the page offers (the first and last steps included).
N_CHECKPOINTS = 16

#: Largest difference allowed between a logit of an exported graph and PyTorch's (nats).
BUILD_TOLERANCE = 1e-4

#: The name of the one-layer control in the lab.
CONTROL = "one-layer"

# The exporter's version: part of the key of the exported files (bump when the graph changes).
_GRAPH_VERSION = "1"


def checkpoint_steps(history: dict, n: int = N_CHECKPOINTS) -> list:
    """``n`` probe steps of a training run, dense where the induction head forms: the first
    and last steps, then, for ``n - 2`` levels evenly spaced between the last layer's best
    induction score at the start and at its highest, the first step that reaches each level;
    steps that coincide are replaced by the probe steps furthest from those already chosen.

    Returns:
        the steps, sorted (ints).

    Raises:
        TypeError: ``history`` not a :func:`attnlib.induction.train` history; ``n`` not an int.
        ValueError: ``n`` below 2 or above the number of probe steps.
    """
    if not isinstance(history, dict) or "probe_step" not in history or "induction" not in history:
        raise TypeError("history must be the history dict of attnlib.induction.train")
    n = _validate.positive_int(n, "n")
    steps = [int(s) for s in history["probe_step"]]
    if not 2 <= n <= len(steps):
        raise ValueError(f"n must be between 2 and the {len(steps)} probe steps, got {n}")
    score = [float(x[-1].max()) for x in history["induction"]]          # the last layer's best head
    low, high = score[0], max(score)
    chosen = {steps[0], steps[-1]}
    for i in range(1, n - 1):
        level = low + (high - low) * i / (n - 1)
        chosen.add(next(s for s, v in zip(steps, score) if v >= level))
    while len(chosen) < n:                                              # fill the widest gaps in time
        chosen.add(max((s for s in steps if s not in chosen), key=lambda s: min(abs(s - c) for c in chosen)))
    return sorted(chosen)


def head_scores(history: dict, step: int) -> dict:
    """Each head's induction and previous-token scores at ``step`` of a training run, as the run
    read them (:func:`attnlib.induction.train`'s probes: 64 held-out repeated sequences and 64
    windows of the speech), rounded to 4 decimals: ``{"induction": L lists of H, "previous": L
    lists of H}``.

    Raises:
        ValueError: ``step`` is not a probe step of the run.
    """
    steps = [int(s) for s in history["probe_step"]]
    if step not in steps:
        raise ValueError(f"step {step} is not a probe step of the run")
    at = steps.index(step)
    return {name: [[round(float(x), 4) for x in row] for row in history[name][at]] for name in ("induction", "previous")}


def pair_metric(logits: torch.Tensor, clean, corrupt) -> float:
    """The lab's patching metric for one clean/corrupted pair of word-id sequences that differ at
    exactly one position ``p``: at the last position, the logit of the clean word at ``p`` minus
    that of the corrupted word (nats; :func:`attnlib.patching.logit_diff`).  When the last word
    occurred earlier, just before ``p``, the clean word is what induction copies.

    Shapes:
        logits ``(1, T, V)``; clean, corrupt ``(T,)`` int64.

    Raises:
        ValueError: the two sequences differ in length or not at exactly one position.
    """
    from .patching import logit_diff
    p = corrupted_position(clean, corrupt)
    return logit_diff(logits, {"query": len(clean) - 1, "clean_next": torch.tensor([int(clean[p])]),
                               "corrupt_next": torch.tensor([int(corrupt[p])])})


def corrupted_position(clean, corrupt) -> int:
    """The one position where two word-id sequences differ.

    Raises:
        ValueError: they differ in length, nowhere, or at more than one position.
    """
    clean, corrupt = [int(x) for x in clean], [int(x) for x in corrupt]
    if len(clean) != len(corrupt):
        raise ValueError(f"the clean and corrupted sequences must have the same length, got {len(clean)} and {len(corrupt)}")
    where = [i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b]
    if len(where) != 1:
        raise ValueError(f"the clean and corrupted sequences must differ at exactly one position, "
                         f"they differ at {len(where)}")
    return where[0]


def default_pair() -> tuple:
    """The lab's first pair: the first of the chapter's patching pairs
    (:func:`attnlib.patching.induction_pairs`), cut after its query, so that the metric at the
    last position is the chapter's.  Returns ``(clean words, corrupted words)``."""
    from .patching import induction_pairs
    pairs = induction_pairs(1)
    q = pairs["query"]
    return induction.decode(pairs["clean"][0, :q + 1]), induction.decode(pairs["corrupt"][0, :q + 1])


def lab_data(words=None, corrupt=None, *, model_name: str | None = None, layer: int = 1, head: int | None = None) -> dict:
    """The data of the circuit lab's first view (``attnlib/static/xp_tiny.js``), computed with
    PyTorch: the models and their head scores, the words, the loss per word and every head's
    pattern at ``model_name`` (default: the last checkpoint), and the pair's metric.

    Raises:
        ValueError: as :func:`read_words` (text given as a str is read by it); an unknown model; a
            pair that does not differ at exactly one position.
        IndexError: ``layer`` or ``head`` outside the model.
    """
    import torch.nn.functional as F
    checkpoints = lab_checkpoints()
    names = list(checkpoints)
    model_name = names[-2] if model_name is None else model_name
    if model_name not in checkpoints:
        raise ValueError(f"model_name must be one of {names}, got {model_name!r}")
    model = _lab_model(model_name)
    if words is None and corrupt is None:
        words, corrupt = default_pair()
    words = read_words(words) if isinstance(words, str) else list(words)
    corrupt = None if corrupt is None else (read_words(corrupt) if isinstance(corrupt, str) else list(corrupt))
    ids = induction.encode(words)
    if head is None:
        head = int(torch.tensor(checkpoints[model_name][1]["induction"][-1]).argmax())
    layer = _validate.index(layer, model.n_layers, "layer")
    head = _validate.index(head, model.n_heads, "head")
    r = run(model, ids[None])
    loss = F.cross_entropy(r.logits[0, :-1], ids[1:], reduction="none")
    pair = None
    if corrupt is not None:
        bad = induction.encode(corrupt)
        p = corrupted_position(ids, bad)
        pair = {"corrupt": corrupt, "position": p, "clean": pair_metric(r.logits, ids, bad),
                "corrupted": pair_metric(run(model, bad[None]).logits, ids, bad)}
    return {
        "vocabulary": induction.vocabulary(), "max_len": induction.SEQ_LEN, "n_heads": model.n_heads,
        "models": [{"name": n, "step": s, "n_layers": len(scores["induction"]), "control": n == CONTROL, **scores}
                   for n, (s, scores) in checkpoints.items()],
        "model": model_name, "layer": layer, "head": head, "words": words, "pair": pair,
        "loss": [round(float(x), 5) for x in loss],
        "attentions": [round(float(x), 4) for x in r.stacked("pattern")[:, 0].flatten()],
        "uniform_induction": induction.uniform_induction_score(), "uniform_previous": induction.uniform_previous_score(),
    }


# The lab in this process: its checkpoints, and each model and its head means once built, for the
# trained runs they come from (held here, so that they stay alive while they key the entry).  A lab
# exercise's grader reads the reader's words with one model (:func:`read`), twenty times in
# chapter 6's feeder solution, which built all 17 models and that model's head means every time.
_LAB: dict = {}


def _lab() -> dict:
    """The lab's entry for the current trained runs (:func:`attnlib.induction.trained`), made anew
    when they changed: ``{"runs", "checkpoints": {name: (history, step, scores)}, "models": {},
    "means": {}}``."""
    _, history2 = induction.trained(2)
    _, history1 = induction.trained(1)
    runs = _LAB.get("runs")
    if runs is None or runs[0] is not history2 or runs[1] is not history1:
        checkpoints = {f"step-{s}": (history2, s, head_scores(history2, s)) for s in checkpoint_steps(history2)}
        last = int(history1["probe_step"][-1])
        checkpoints[CONTROL] = (history1, last, head_scores(history1, last))
        _LAB.clear()
        _LAB.update(runs=(history2, history1), checkpoints=checkpoints, models={}, means={})
    return _LAB


def lab_checkpoints() -> dict:
    """The lab's models without building them: ``{name: (step, scores)}`` in the page's order (as
    :func:`lab_models`)."""
    return {name: (step, scores) for name, (_, step, scores) in _lab()["checkpoints"].items()}


def _lab_model(name: str) -> TinyTransformer:
    """The model ``name`` of :func:`lab_models`, built the first time it is asked for.

    Raises:
        ValueError: ``name`` is not one of the lab's models.
    """
    lab = _lab()
    if name not in lab["checkpoints"]:
        raise ValueError(f"model_name must be one of {list(lab['checkpoints'])}, got {name!r}")
    if name not in lab["models"]:
        history, step, _ = lab["checkpoints"][name]
        lab["models"][name] = induction.checkpoint(history, step)
    return lab["models"][name]


def _lab_means(name: str) -> torch.Tensor:
    """:func:`attnlib.induction.head_means` of the model ``name``, computed once."""
    lab = _lab()
    model = _lab_model(name)
    if name not in lab["means"]:
        lab["means"][name] = induction.head_means(model)
    return lab["means"][name]


def lab_models() -> dict:
    """The lab's models in the kernel: ``{name: (model, step, scores)}`` in the page's order, the
    :func:`checkpoint_steps` of the chapter's two-layer run (names ``"step-<step>"``) and the
    one-layer control (:data:`CONTROL`, its last step); ``scores`` is :func:`head_scores`.  Built
    from the trained runs (:func:`attnlib.induction.trained`: the cache, or a training run), once
    per process and run: every call returns the same model objects, so treat them as read-only
    (:func:`lab_checkpoints` lists them without building any)."""
    return {name: (_lab_model(name), step, scores) for name, (step, scores) in lab_checkpoints().items()}


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


def _feeds(model: TinyTransformer, tokens: torch.Tensor) -> dict:
    """Inputs of :class:`LabGraph` for an intact run of ``tokens`` ``(B, T)``."""
    B, T = tokens.shape
    L, H, dh, d = model.n_layers, model.n_heads, model.d_head, model.tok_emb.weight.shape[1]
    return {"tokens": tokens, "head_mask": torch.zeros(B, L, H, T), "head_value": torch.zeros(B, L, H, T, dh),
            "resid_mask": torch.zeros(B, L + 1, T), "resid_value": torch.zeros(B, L + 1, T, d)}


def export(model: TinyTransformer, path) -> Path:
    """Export ``model`` as a :class:`LabGraph` to ``path`` (ONNX, opset 17, float32, dynamic
    batch and length).

    Raises:
        TypeError: as :class:`LabGraph`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    graph = LabGraph(model.cpu())
    feeds = _feeds(model, torch.tensor([[1, 2, 3, 1, 2]]))
    names = list(feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                     # the tracer's notes on shapes
        torch.onnx.export(
            graph, tuple(feeds.values()), str(path), dynamo=False, opset_version=17,
            input_names=names, output_names=["logits", "pattern", "z", "resid"],
            dynamic_axes={"tokens": {0: "B", 1: "T"}, "head_mask": {0: "B", 3: "T"}, "head_value": {0: "B", 3: "T"},
                          "resid_mask": {0: "B", 2: "T"}, "resid_value": {0: "B", 2: "T"},
                          "logits": {0: "B", 1: "T"}, "pattern": {0: "B", 3: "T", 4: "T"}, "z": {0: "B", 3: "T"},
                          "resid": {0: "B", 2: "T"}})
    return path


def _check_edits(model: TinyTransformer, generator: torch.Generator, T: int, source, means=None) -> list:
    """A few edits of each kind for :func:`check`, drawn with ``generator`` (mean ablation with
    ``means``, default :func:`attnlib.induction.head_means`)."""
    L, H = model.n_layers, model.n_heads
    pick = lambda n: int(torch.randint(n, (1,), generator=generator))    # noqa: E731
    return [
        [],
        [{"layer": pick(L), "head": pick(H), "mode": "zero"}],
        [{"layer": pick(L), "head": pick(H), "mode": "mean", "source": induction.head_means(model) if means is None else means}],
        [{"layer": pick(L), "head": pick(H), "mode": "patch", "source": source, "position": pick(T)}],
        [{"layer": pick(L + 1), "head": None, "mode": "patch", "source": source, "position": pick(T)}],
    ]


def _graph_inputs(model: TinyTransformer, tokens: torch.Tensor, edits: list) -> dict:
    """:class:`LabGraph`'s inputs for ``edits`` (the spec of :mod:`attnlib.edits`, checked):
    the same translation the page's worker makes."""
    from .edits import as_edits
    feeds = _feeds(model, tokens)
    for edit in as_edits(edits, model.n_layers, model.n_heads):
        at = slice(None) if edit.position is None else edit.position
        if edit.head is None:
            feeds["resid_mask"][:, edit.layer, at] = 1
            if edit.mode == "patch":
                feeds["resid_value"][:, edit.layer, at] = edit.source.resid_pre[edit.layer][:, at]
            continue
        feeds["head_mask"][:, edit.layer, edit.head, at] = 1
        if edit.mode == "mean":
            feeds["head_value"][:, edit.layer, edit.head, at] = edit.source[edit.layer, edit.head]
        elif edit.mode == "patch":
            feeds["head_value"][:, edit.layer, edit.head, at] = edit.source.z[edit.layer][:, edit.head, at]
    return {k: v.numpy() for k, v in feeds.items()}


def check(path, model: TinyTransformer, *, n: int = 8, seed: int = 0, tolerance: float = BUILD_TOLERANCE) -> dict:
    """Run the exported graph at ``path`` with onnxruntime (CPU) on ``n`` seeded random word
    sequences of random lengths (2 to ``max_len`` tokens), intact and with zero, mean and patch
    edits, and compare logits, attention weights and head outputs with
    :func:`attnlib.transformer.run`.

    Returns:
        ``{"max_logit_diff", "max_weight_diff", "runs"}`` (nats, probabilities, count).

    Raises:
        ValueError: a logit or weight differs by more than ``tolerance``; the message names the run.
        ImportError: ``onnxruntime`` is not installed.
    """
    import onnxruntime as ort

    tolerance = _validate.real(tolerance, "tolerance", low=0.0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model = model.cpu().eval()
    g = torch.Generator().manual_seed(seed)
    worst_logit = worst_weight = 0.0
    runs = 0
    for i in range(n):
        T = int(torch.randint(2, model.max_len + 1, (1,), generator=g))
        tokens = torch.randint(model.vocab_size, (2, T), generator=g)
        source = run(model, torch.randint(model.vocab_size, (2, T), generator=g))
        means = model.head_means(torch.randint(model.vocab_size, (8, model.max_len), generator=g))
        for edits in _check_edits(model, g, T, source, means):
            want = run(model, tokens, edits=edits)
            logits, pattern, z, _ = session.run(None, _graph_inputs(model, tokens, edits))
            d_logit = float(abs(logits - want.logits.numpy()).max())
            d_weight = max(float(abs(pattern - want.stacked("pattern").transpose(0, 1).numpy()).max()),
                           float(abs(z - want.stacked("z").transpose(0, 1).numpy()).max()))
            worst_logit, worst_weight, runs = max(worst_logit, d_logit), max(worst_weight, d_weight), runs + 1
            if max(d_logit, d_weight) > tolerance:
                raise ValueError(f"the exported lab model {Path(path).name} differs from PyTorch by "
                                 f"{max(d_logit, d_weight):.2e} (> {tolerance:g}) on sequence {i} "
                                 f"({T} tokens) with edits {[e for e in edits]!r}")
    return {"max_logit_diff": worst_logit, "max_weight_diff": worst_weight, "runs": runs}


def _site_key() -> str:
    """What decides the exported files: the trained runs' cache keys (configuration, the training
    sources, torch) and this module's source."""
    parts = []
    for n_layers in (2, 1):
        model = induction.build_model(n_layers)
        config = induction.TrainConfig(n_layers=n_layers, seed=0, steps=induction.STEPS, n_heads=model.n_heads,
                                       vocab_size=len(induction.vocabulary()), device=str(next(model.parameters()).device))
        parts.append(induction._cache_key(config))
    digest = hashlib.sha256(json.dumps([parts, _GRAPH_VERSION, torch.__version__]).encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def write_site_files(folder, *, cache=None, keep=None) -> dict:
    """Write what the page's circuit lab fetches into ``folder``: one ``<name>.onnx`` per model
    of :func:`lab_models` and ``tiny.json`` (the vocabulary, the sizes, and per model its step,
    file size and SHA-256 (and ``digest``, one SHA-256 over them all: the name of the reader's
    browser cache), its heads' induction and previous-token scores on the chapter's probe
    sequences, its :func:`attnlib.induction.head_means`, and :func:`check`'s figures).  With ``keep`` (a
    folder), each model's weights are also saved there as ``<name>.pt``
    (:meth:`TinyTransformer.save`).  With ``cache`` (a folder), the export and its checks are
    reused while the trained runs and this module are unchanged.

    Returns:
        the ``tiny.json`` dict.

    Raises:
        ValueError: an exported graph fails :func:`check`.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = _site_key()
    cached = Path(cache) / key if cache is not None else None
    if cached is not None and (cached / "tiny.json").is_file():
        source = cached
    else:
        source = cached if cached is not None else folder
        source.mkdir(parents=True, exist_ok=True)
        _, history2 = induction.trained(2)
        models = []
        for name, (model, step, scores) in lab_models().items():
            export(model, source / f"{name}.onnx")
            figures = check(source / f"{name}.onnx", model, seed=len(models))
            (source / "weights").mkdir(exist_ok=True)
            model.save(source / "weights" / f"{name}.pt")
            models.append({
                "name": name, "step": step, "n_layers": model.n_layers, "control": name == CONTROL,
                "bytes": (source / f"{name}.onnx").stat().st_size,
                "sha256": hashlib.sha256((source / f"{name}.onnx").read_bytes()).hexdigest(),
                **scores,
                "means": [round(float(x), 7) for x in induction.head_means(model).flatten()],
                "check": figures})
        some = models[0]
        probe = induction.repeated_sequences(1, seed=0)[0]
        info = {
            "graph_version": _GRAPH_VERSION, "vocabulary": induction.vocabulary(), "max_len": induction.SEQ_LEN,
            "n_heads": induction.N_HEADS, "d_model": induction.D_MODEL, "d_head": induction.D_MODEL // induction.N_HEADS,
            "steps": int(history2["probe_step"][-1]), "models": models, "tolerance": BUILD_TOLERANCE,
            "digest": hashlib.sha256("".join(m["sha256"] for m in models).encode()).hexdigest(),
            "example": induction.decode(probe),
            "uniform_induction": induction.uniform_induction_score(), "uniform_previous": induction.uniform_previous_score(),
        }
        (source / "tiny.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    if source != folder:
        for path in source.glob("*.onnx"):
            shutil.copyfile(path, folder / path.name)
        shutil.copyfile(source / "tiny.json", folder / "tiny.json")
    if keep is not None:
        keep = Path(keep)
        keep.mkdir(parents=True, exist_ok=True)
        for path in (source / "weights").glob("*.pt"):
            shutil.copyfile(path, keep / path.name)
    return json.loads((folder / "tiny.json").read_text(encoding="utf-8"))


def read_words(text) -> list:
    """The lab's reading of typed text: :func:`attnlib.corpus.words_of` (lower-cased words and
    punctuation marks), each checked against the model's vocabulary.

    Raises:
        TypeError: ``text`` not a str.
        ValueError: empty, longer than the model's context (``SEQ_LEN`` words), or a word not in
            the vocabulary (the message names it and suggests the closest words).
    """
    from . import corpus
    import difflib
    if not isinstance(text, str):
        raise TypeError(f"text must be a str of words, got {type(text).__name__}")
    found = corpus.words_of(text)
    if not found:
        raise ValueError("no words: type words of the Gettysburg Address, e.g. 'we are met on a great battle-field'")
    if len(found) > induction.SEQ_LEN:
        raise ValueError(f"{len(found)} words: the model reads at most {induction.SEQ_LEN}")
    vocab = induction.vocabulary()
    known = set(vocab)
    for w in found:
        if w not in known:
            near = difflib.get_close_matches(w, vocab, n=3, cutoff=0.6)
            raise ValueError(f"'{w}' is not in the model's vocabulary (the words of the Gettysburg Address)"
                             + (f"; did you mean {', '.join(repr(x) for x in near)}?" if near else ""))
    return found


@torch.no_grad()
def read(texts, model_name: str, variants) -> dict:
    """What a circuit-lab exercise's grader receives, computed in the kernel with PyTorch (the
    page computes the same dict with ``window.attnlibTiny``): for each text, its words and, per
    variant ``{"name", "edits"}`` (edits as :mod:`attnlib.edits`, ``mode`` "zero" or "mean"),
    the next-token loss at every position (nats; entry ``i`` is the loss of word ``i + 1``).

    Returns:
        ``{"texts", "runs": [{"words", "loss": {variant: [T - 1 floats]}}]}``, or
        ``{"texts", "error"}`` when a text is refused (:func:`read_words`'s message).
    """
    import torch.nn.functional as F
    model = _lab_model(model_name)                  # this one model, built once per process
    means = _lab_means(model_name)
    out = {"texts": list(texts), "runs": []}
    for text in texts:
        try:
            found = read_words(text)
        except ValueError as err:
            return {"texts": list(texts), "error": str(err)}
        tokens = induction.encode(found)[None]
        losses = {}
        for variant in variants:
            edits = [{**e, "source": means} if e.get("mode") == "mean" else e for e in variant["edits"]]
            logits = run(model, tokens, edits=edits).logits[0]
            losses[variant["name"]] = [round(float(x), 6) for x in F.cross_entropy(logits[:-1], tokens[0, 1:], reduction="none")]
        out["runs"].append({"words": found, "loss": losses})
    return out
