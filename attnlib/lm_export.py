"""The language model (:mod:`attnlib.language_model`) written for the page, run at build time
(``_ext/page_models.py``), and checked.

The page runs the model one block at a time, so that a patching sweep can start each variant at
its first edited layer and recompute only the positions from the first token where the two
prompts differ (the earlier positions, and every earlier layer, are the same in both runs):

* ``block_NN.onnx`` (:class:`BlockGraph`, one per layer): the stream entering the block at ``t``
  new positions, their ``positions``, the keys and values of the ``P`` earlier positions, and
  the heads' edits -> the stream leaving the block, the new positions' keys (after RoPE) and
  values, the attention weights and the heads' outputs ``z`` (after the edits).
* ``unembed.onnx``: the final RMSNorm and the read-out by the tied embedding -> logits.
* ``embed.bin``: the token embedding as the file stores it (Q8_0: 32 int8 per block and a
  scale), held once: ``unembed.onnx`` reads it as external data and the page's worker reads the
  rows of the prompt's tokens from the same bytes.

Every linear layer is an onnxruntime ``MatMulNBits`` on the file's own quantized blocks: 4 bits
with a float zero point ``-m / d`` for Q4_1 (``w = d q + m = d (q - (-m / d))``) and 8 bits with
the zero point 128 for Q8_0, so the page's weights are the kernel's (the difference is float
rounding, about 1e-7 of a weight).  :func:`check` runs the graphs with onnxruntime as the page's
worker does (:class:`PageRunner`) against :func:`attnlib.language_model.run` and
:func:`attnlib.language_model.patch_sweep`, and the build fails above :data:`BUILD_TOLERANCE`.

Shapes legend: ``B`` batch, ``t`` new positions, ``P`` earlier positions, ``L`` layers, ``H``
query heads, ``H_kv`` key/value heads, ``d_head``, ``d_model``, ``V`` vocabulary.
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import language_model as lm
from . import site_files
from .attention import repeat_kv
from .edits import as_edits, graph_inputs
from .positions import rope_frequencies

__all__ = ["BUILD_TOLERANCE", "GRAPH_VERSION", "BlockGraph", "PageRunner", "export", "check", "write_site_files"]

#: Largest difference allowed between the page's model and the kernel's: logits and logit
#: differences (nats), attention weights.
BUILD_TOLERANCE = 1e-3
#: The exporter's version: part of the key of the exported files (bump when a graph changes).
GRAPH_VERSION = "1"
_BLOCK_Q4_1, _BLOCK_Q8_0 = 20, 34                                   # bytes per block of 32 weights


class BlockGraph(nn.Module):
    """One block of :class:`attnlib.language_model.LanguageModel` with earlier keys and values
    as inputs (a KV cache the page holds) and the heads' edits as inputs.

    Inputs:
        x ``(B, t, d_model)``: the stream entering the block (after any residual edit);
        positions ``(t,)`` int64: the new positions (``P .. P + t - 1``), for the causal mask;
        cos, sin ``(t, d_head)``: RoPE's tables at those positions (:func:`rope_tables`: angles in
        float64 as :func:`attnlib.positions.apply_rope` computes them, rounded to float32);
        past_k, past_v ``(B, H_kv, P, d_head)``: the earlier positions' keys (after RoPE) and values;
        head_mask ``(B, H, t)`` and head_value ``(B, H, t, d_head)``: where the mask is 1 the
        head's output ``z`` is replaced by the value (:func:`attnlib.edits.graph_inputs`).
    Outputs:
        x ``(B, t, d_model)``, k and v ``(B, H_kv, t, d_head)``, pattern ``(B, H, t, P + t)``,
        z ``(B, H, t, d_head)``.
    """

    def __init__(self, model: lm.LanguageModel, layer: int):
        super().__init__()
        self.block, self.config = model.blocks[layer].eval(), model.config

    def forward(self, x, positions, cos, sin, past_k, past_v, head_mask, head_value):
        b, a, c = self.block, self.block.attn, self.config
        B, t, _ = x.shape
        q, k, v, _ = a.project(b.attn_norm(x))                        # (B, H or H_kv, t, d_head)
        half = c.d_head // 2

        def rotate(u):                                                  # apply_rope's rotate-half layout
            return u * cos + torch.cat([-u[..., half:], u[..., :half]], dim=-1) * sin

        q, k = rotate(q), rotate(k)
        keys, values = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        keys, values = repeat_kv(q, keys, values)                       # (B, H, P + t, d_head)
        scores = q @ keys.transpose(-2, -1) / math.sqrt(c.d_head)
        key_pos = torch.arange(keys.shape[2], device=x.device)
        allowed = key_pos[None, :] <= positions[:, None]                # (t, P + t): the causal mask
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        z = weights @ values
        swap = head_mask[..., None]
        z = z * (1 - swap) + head_value * swap
        x = x + a.o_proj(z.transpose(1, 2).reshape(B, t, c.n_heads * c.d_head))
        return x + b.mlp(b.mlp_norm(x)), k, v, weights, z


def rope_tables(positions, config: lm.LMConfig):
    """RoPE's ``cos`` and ``sin`` ``(t, d_head)`` float32 at ``positions`` ``(t,)``: the angles
    ``p * theta_i`` in float64 (:func:`attnlib.positions.rope_frequencies`), both halves, as
    :func:`attnlib.positions.apply_rope` builds them; the page's worker computes the same from
    ``lm.json``'s ``inv_freq``."""
    inv_freq = rope_frequencies(config.d_head, config.rope_base).to(torch.float64)
    angles = torch.as_tensor(np.asarray(positions), dtype=torch.float64)[:, None] * inv_freq[None]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float().numpy(), angles.sin().float().numpy()


# ------------------------------------------------------------------ the file's quantized blocks
def _q4_1(raw: np.ndarray):
    """Q4_1 rows ``(N, n_blocks * 20)`` -> ``q (N, n_blocks, 32)`` uint8, ``d`` and ``m``
    ``(N, n_blocks)`` float32 (``w = d q + m``; ggml's layout: element ``j`` is the low nibble of
    byte ``j`` for ``j < 16``, the high nibble of byte ``j - 16`` otherwise)."""
    blocks = raw.reshape(raw.shape[0], -1, _BLOCK_Q4_1)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = blocks[..., 4:]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1), d, m


def _q8_0(raw: np.ndarray):
    """Q8_0 rows ``(N, n_blocks * 34)`` -> ``q (N, n_blocks, 32)`` int8 and ``d (N, n_blocks)``
    float32 (``w = d q``)."""
    blocks = raw.reshape(raw.shape[0], -1, _BLOCK_Q8_0)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    return blocks[..., 2:].copy().view(np.int8), d


def _matmul_nbits_4(q, d, m):
    """``MatMulNBits`` (bits 4, block 32) initialisers of Q4_1 blocks: packed ``B (N, n_blocks,
    16)`` (element ``2i`` in the low nibble), ``scales`` and float ``zero_points`` ``(N *
    n_blocks,)``; a block with ``d = 0`` holds ``m`` everywhere: scale 1, zero point ``-m``."""
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    flat = d == 0
    scale = np.where(flat, 1.0, d).astype(np.float32)
    zero = np.where(flat, -m, -m / np.where(flat, 1.0, d)).astype(np.float32)
    packed[flat] = 0
    return packed, scale.reshape(-1), zero.reshape(-1)


def _gguf_blocks() -> dict:
    """The file's quantized tensors as raw rows, named as :class:`LanguageModel`'s state dict,
    with ``W_Q`` and ``W_K``'s rows in the model's order (:func:`attnlib.language_model._unpermute`)."""
    import gguf

    reader = gguf.GGUFReader(str(lm.gguf_path()), "r")
    heads = {f: int(reader.fields[f].contents()) for f in ("llama.attention.head_count", "llama.attention.head_count_kv")}
    kinds = {"attn_q": "attn.q_proj", "attn_k": "attn.k_proj", "attn_v": "attn.v_proj", "attn_output": "attn.o_proj",
             "ffn_gate": "mlp.gate", "ffn_up": "mlp.up", "ffn_down": "mlp.down"}
    out = {}
    for tensor in reader.tensors:
        if tensor.name == "token_embd.weight":
            out["embed"] = (tensor.tensor_type.name, np.array(tensor.data))
            continue
        parts = tensor.name.split(".")
        if len(parts) != 4 or parts[2] not in kinds:
            continue
        raw = np.array(tensor.data)
        if parts[2] in ("attn_q", "attn_k"):
            n = heads["llama.attention.head_count" if parts[2] == "attn_q" else "llama.attention.head_count_kv"]
            order = lm._unpermute(torch.arange(raw.shape[0])[:, None], n)[:, 0].numpy()
            raw = raw[order]
        out[f"blocks.{parts[1]}.{kinds[parts[2]]}"] = (tensor.tensor_type.name, raw)
    del reader
    return out


def _replace_matmuls(onnx_model, weights: dict, quantized: dict, layer: int) -> int:
    """Swap each ``MatMul`` by a float initialiser equal to a linear layer's ``W^T`` for a
    ``MatMulNBits`` on that layer's quantized blocks; returns how many were swapped.

    Raises:
        ValueError: a MatMul initialiser matches no weight, or a weight's blocks do not rebuild it.
    """
    from onnx import helper, numpy_helper

    graph = onnx_model.graph
    inits = {i.name: i for i in graph.initializer}
    swapped = 0
    for node in list(graph.node):
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        wt = numpy_helper.to_array(inits[node.input[1]])             # (K, N): W^T
        name = next((n for n, w in weights.items() if w.shape == wt.T.shape and np.array_equal(w, wt.T)), None)
        if name is None:
            raise ValueError(f"block {layer}: a MatMul weight of shape {wt.shape} matches no linear layer")
        kind, raw = quantized[f"blocks.{layer}.{name}"]
        if kind != "Q4_1":
            raise ValueError(f"blocks.{layer}.{name} is {kind}; the exporter reads Q4_1")
        q, d, m = _q4_1(raw)
        rebuilt = (d[..., None] * q + m[..., None]).reshape(weights[name].shape)
        if not np.allclose(rebuilt, weights[name], rtol=0, atol=1e-6):
            raise ValueError(f"blocks.{layer}.{name}: the file's blocks do not rebuild the model's weight")
        packed, scales, zeros = _matmul_nbits_4(q, d, m)
        prefix = f"l{layer}.{name}"
        graph.initializer.extend([numpy_helper.from_array(packed, prefix + ".B"),
                                  numpy_helper.from_array(scales, prefix + ".scales"),
                                  numpy_helper.from_array(zeros, prefix + ".zero_points")])
        N, K = weights[name].shape
        new = helper.make_node("MatMulNBits", [node.input[0], prefix + ".B", prefix + ".scales", prefix + ".zero_points"],
                               list(node.output), name=prefix, domain="com.microsoft", K=K, N=N, bits=4, block_size=32)
        graph.node.insert(list(graph.node).index(node), new)
        graph.node.remove(node)
        graph.initializer.remove(inits.pop(node.input[1]))
        swapped += 1
    return swapped


def export(model: lm.LanguageModel, folder) -> dict:
    """Write ``block_NN.onnx`` (one per layer), ``unembed.onnx`` and ``embed.bin`` into
    ``folder`` (see the module docstring); returns ``{file name: bytes}``.

    Raises:
        ValueError: as :func:`_replace_matmuls`; the token embedding not Q8_0.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    c = model.config
    quantized = _gguf_blocks()
    B, t, P = 2, 3, 2
    cos, sin = (torch.from_numpy(a) for a in rope_tables(np.arange(P, P + t), c))
    example = (torch.zeros(B, t, c.d_model), torch.arange(P, P + t), cos, sin, torch.zeros(B, c.n_kv_heads, P, c.d_head),
               torch.zeros(B, c.n_kv_heads, P, c.d_head), torch.zeros(B, c.n_heads, t), torch.zeros(B, c.n_heads, t, c.d_head))
    names = ["x", "positions", "cos", "sin", "past_k", "past_v", "head_mask", "head_value"]
    for layer in range(c.n_layers):
        path = folder / f"block_{layer:02d}.onnx"
        graph = BlockGraph(model, layer).cpu()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                             # the tracer's notes on shapes
            torch.onnx.export(graph, example, str(path), dynamo=False, opset_version=17, input_names=names,
                              output_names=["x_out", "k", "v", "pattern", "z"],
                              dynamic_axes={"x": {0: "B", 1: "t"}, "positions": {0: "t"}, "cos": {0: "t"}, "sin": {0: "t"}, "past_k": {0: "B", 2: "P"},
                                            "past_v": {0: "B", 2: "P"}, "head_mask": {0: "B", 2: "t"},
                                            "head_value": {0: "B", 2: "t"}, "x_out": {0: "B", 1: "t"},
                                            "k": {0: "B", 2: "t"}, "v": {0: "B", 2: "t"},
                                            "pattern": {0: "B", 2: "t", 3: "T"}, "z": {0: "B", 2: "t"}})
        proto = onnx.load(str(path))
        weights = {n.removesuffix(".weight"): p.detach().cpu().numpy()
                   for n, p in model.blocks[layer].named_parameters() if p.dim() == 2}
        if _replace_matmuls(proto, weights, quantized, layer) != 7:
            raise ValueError(f"block {layer}: expected 7 linear layers in the exported graph")
        proto.opset_import.extend([helper.make_opsetid("com.microsoft", 1)])
        onnx.save(proto, str(path))
    # the token embedding, once: embed.bin = q + 128 (uint8, V x n_blocks x 32) then the scales (float32)
    kind, raw = quantized["embed"]
    if kind != "Q8_0":
        raise ValueError(f"the token embedding is {kind}; the exporter reads Q8_0")
    q8, d8 = _q8_0(raw)
    rebuilt = (d8[..., None] * q8).reshape(c.vocab_size, c.d_model)
    if not np.array_equal(rebuilt, model.embed.weight.detach().cpu().numpy()):
        raise ValueError("the file's embedding blocks do not rebuild the model's embedding")
    u8 = (q8.astype(np.int16) + 128).astype(np.uint8)
    (folder / "embed.bin").write_bytes(u8.tobytes() + d8.astype("<f4").tobytes())
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "t", c.d_model])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "t", c.vocab_size])
    norm_w = numpy_helper.from_array(model.norm.weight.detach().cpu().numpy(), "norm.weight")
    eps = numpy_helper.from_array(np.array(model.norm.eps, np.float32), "eps")
    table, scales = TensorProto(), TensorProto()
    for tensor, name, kind, dims, offset, length in (
            (table, "embed.B", TensorProto.UINT8, u8.shape, 0, u8.nbytes),
            (scales, "embed.scales", TensorProto.FLOAT, [d8.size], u8.nbytes, d8.size * 4)):
        tensor.name, tensor.data_type = name, kind
        tensor.dims.extend(dims)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "embed.bin"), ("offset", str(offset)), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["ms_eps"]),
             helper.make_node("Sqrt", ["ms_eps"], ["rms"]),
             helper.make_node("Div", ["x", "rms"], ["xn"]),
             helper.make_node("Mul", ["xn", "norm.weight"], ["h"]),
             helper.make_node("MatMulNBits", ["h", "embed.B", "embed.scales"], ["logits"], domain="com.microsoft",
                              K=c.d_model, N=c.vocab_size, bits=8, block_size=32)]
    g = helper.make_graph(nodes, "unembed", [x], [logits], [norm_w, eps, table, scales])
    unembed = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    unembed.ir_version = 8                                              # opset 17's, which onnxruntime-web 1.30 reads
    onnx.save(unembed, str(folder / "unembed.onnx"))
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.suffix in (".onnx", ".bin")}


# ------------------------------------------------------------------ the page's way of running it
class PageRunner:
    """The exported graphs run the way the page's worker runs them (``attnlib/static/lm_worker.js``):
    the embedding rows read from ``embed.bin``, the blocks one at a time with the residual edits
    applied between them, a cache of earlier keys and values, and the read-out.  Used by
    :func:`check`.

    Raises:
        ImportError: ``onnxruntime`` is not installed.
    """

    def __init__(self, folder, config: lm.LMConfig):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        folder = Path(folder)
        self.config = c = config
        self.blocks = [ort.InferenceSession(str(folder / f"block_{l:02d}.onnx"), options,
                                            providers=["CPUExecutionProvider"]) for l in range(c.n_layers)]
        self.unembed = ort.InferenceSession(str(folder / "unembed.onnx"), options, providers=["CPUExecutionProvider"])
        raw = np.fromfile(folder / "embed.bin", dtype=np.uint8)
        n = c.vocab_size * c.d_model
        self.table = raw[:n].reshape(c.vocab_size, c.d_model)
        self.scales = raw[n:].view("<f4").reshape(c.vocab_size, c.d_model // 32)

    def embed(self, ids) -> np.ndarray:
        """``(t,)`` ids -> ``(t, d_model)`` float32: ``(u - 128) * scale`` per block."""
        ids = np.asarray(ids)
        rows = self.table[ids].astype(np.float32).reshape(len(ids), -1, 32) - 128
        return (rows * self.scales[ids][..., None]).reshape(len(ids), -1).astype(np.float32)

    def run(self, ids, feeds: dict, *, start_layer: int = 0, x=None, past=None):
        """Run ``ids`` ``(T,)`` once per item of the batch of ``feeds`` (:func:`attnlib.edits.graph_inputs`
        as numpy, batch ``B``), from ``start_layer`` with the stream ``x`` ``(B, t, d_model)``
        entering it (default: the embedding) and ``past`` (per layer ``(k, v)`` of the first
        ``P`` positions; only positions ``P ..`` are computed).  Returns ``(logits (B, t, V),
        patterns, zs, streams, kv)``: per layer from ``start_layer``."""
        c = self.config
        B = feeds["head_mask"].shape[0]
        P = 0 if past is None else past[0][0].shape[2]
        T = len(ids)
        t = T - P
        if x is None:
            x = np.broadcast_to(self.embed(ids[P:]), (B, t, c.d_model)).astype(np.float32)
        positions = np.arange(P, T, dtype=np.int64)
        cos, sin = rope_tables(positions, c)
        patterns, zs, streams, kv = [], [], [], []
        for layer in range(start_layer, c.n_layers + 1):
            keep = feeds["resid_mask"][:, layer, P:, None]
            x = (x * (1 - keep) + feeds["resid_value"][:, layer, P:] * keep).astype(np.float32)
            streams.append(x)
            if layer == c.n_layers:
                break
            pk, pv = (np.zeros((B, c.n_kv_heads, 0, c.d_head), np.float32),) * 2 if past is None else \
                (np.broadcast_to(past[layer][0], (B, *past[layer][0].shape[1:])).astype(np.float32),
                 np.broadcast_to(past[layer][1], (B, *past[layer][1].shape[1:])).astype(np.float32))
            x, k, v, w, z = self.blocks[layer].run(None, {
                "x": x, "positions": positions, "cos": cos, "sin": sin, "past_k": pk, "past_v": pv,
                "head_mask": np.ascontiguousarray(feeds["head_mask"][:, layer, :, P:]),
                "head_value": np.ascontiguousarray(feeds["head_value"][:, layer, :, P:])})
            patterns.append(w)
            zs.append(z)
            kv.append((np.concatenate([pk, k], 2), np.concatenate([pv, v], 2)))
        logits = self.unembed.run(None, {"x": x})[0]
        return logits, patterns, zs, streams, kv


def _feeds(model, T: int, edits=(), B: int = 1) -> dict:
    c = model.config
    checked = as_edits(edits, c.n_layers, c.n_heads, T=T, reference=lambda: lm.reference_means(model))
    return {k: v.numpy() for k, v in graph_inputs(checked, n_layers=c.n_layers, n_heads=c.n_heads, d_head=c.d_head,
                                                  d_model=c.d_model, B=B, T=T).items()}


#: The prompts :func:`check` runs (the chapter's first IOI pair and a sentence of the corpus).
CHECK_TEXTS = ("When Mary and John went to the store, John gave a drink to",
               "The cat sat on the mat because it was warm.")


def check(folder, model: lm.LanguageModel, *, tolerance: float = BUILD_TOLERANCE) -> dict:
    """Run the exported graphs (:class:`PageRunner`) against the kernel's model: the logits and
    every layer's attention weights of :data:`CHECK_TEXTS`, intact and with a zeroed head, a
    head patched from the other prompt at one position and a residual patch; decoding the last
    token through the cache of the others; and a patching sweep of the first IOI pair over a
    few layers computed the page's way (earlier positions from the cache, each variant from its
    layer) against :func:`attnlib.language_model.patch_sweep`.

    Returns:
        ``{"max_logit_diff", "max_weight_diff", "max_metric_diff", "runs"}``.

    Raises:
        ValueError: a difference above ``tolerance``, naming the output and the run.
    """
    c = model.config
    runner = PageRunner(folder, c)
    worst = {"logits": 0.0, "pattern": 0.0, "metric": 0.0}
    runs = 0

    def compare(name, got, want, what):
        nonlocal runs
        d = float(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64)).max())
        worst[name] = max(worst[name], d)
        if not d <= tolerance:
            raise ValueError(f"the page's language model differs from the kernel's in {name} by {d:.2e} "
                             f"(> {tolerance:g}) on {what}")

    pair = lm.ioi_pair("Mary", "John", place="store", thing="drink")
    other = lm.run(model, lm.encode(pair["corrupted"]))
    for text in CHECK_TEXTS:
        ids = lm.encode(text)
        T = ids.numel()
        edit_lists = [[], [{"layer": 20, "head": 3, "mode": "zero"}], [{"layer": -1, "head": 0, "mode": "mean"}]]
        if T == other.tokens.shape[1]:
            edit_lists += [[{"layer": 23, "head": 3, "mode": "patch", "source": other, "position": -1}],
                           [{"layer": 12, "head": None, "mode": "patch", "source": other, "position": 9}]]
        for edits in edit_lists:
            want = lm.run(model, ids, edits=edits)
            logits, patterns, _, _, _ = runner.run(ids.numpy(), _feeds(model, T, edits))
            compare("logits", logits[0], want.logits[0], f"{text!r} with edits {len(edits)}")
            for layer in range(c.n_layers):
                compare("pattern", patterns[layer][0], want.pattern[layer][0], f"{text!r}, layer {layer}")
            runs += 1
        # the last token through the cache of the others
        _, _, _, _, kv = runner.run(ids.numpy()[:-1], _feeds(model, T - 1))
        logits, _, _, _, _ = runner.run(ids.numpy(), _feeds(model, T), past=kv)
        compare("logits", logits[0, -1], lm.run(model, ids).logits[0, -1], f"{text!r}, the last token through the cache")
        runs += 1
    # a sweep the page's way, on a few layers
    layers = [0, 23]
    want = lm.patch_sweep(model, pair["clean"], pair["corrupted"], pair["answers"], layers=layers)
    a, b = lm.encode(pair["clean"]).numpy(), lm.encode(pair["corrupted"]).numpy()
    p = int(np.nonzero(a != b)[0][0])
    good, bad = (lm.answer_token(x) for x in pair["answers"])
    T = len(a)
    full = {k: runner.run(ids, _feeds(model, T)) for k, ids in (("clean", a), ("corrupted", b))}
    for direction, base, src in (("denoise", "corrupted", "clean"), ("noise", "clean", "corrupted")):
        ids = a if base == "clean" else b
        _, _, zs, streams, kv = full[src]
        _, _, _, _, base_kv = full[base]
        prefix = [(k[:, :, :p], v[:, :, :p]) for k, v in base_kv]
        base_streams = full[base][3]
        for i, layer in enumerate(layers):
            places = [("heads", h) for h in range(c.n_heads)] if layer < c.n_layers else []
            places += [("resid", pos) for pos in range(p, T)]
            for kind, k in places:                      # one head, or the stream at one position
                f = _feeds(model, T)
                if kind == "heads":
                    f["head_mask"][0, layer, k], f["head_value"][0, layer, k] = 1, zs[layer][0, k]
                else:
                    f["resid_mask"][0, layer, k], f["resid_value"][0, layer, k] = 1, streams[layer][0, k]
                logits = runner.run(ids, f, start_layer=layer, x=base_streams[layer][:, p:], past=prefix)[0]
                compare("metric", logits[0, -1, good] - logits[0, -1, bad], want[direction][kind][i, k],
                        f"{direction}, {kind} {k} of layer {layer}")
                runs += 1
    return {"max_logit_diff": worst["logits"], "max_weight_diff": worst["pattern"],
            "max_metric_diff": worst["metric"], "runs": runs}


# ------------------------------------------------------------------ the site's files
def tokenizer_spec() -> dict:
    """The kernel's tokenizer as the page's ``bpe.js`` reads it: ``{"vocab": {symbol: id},
    "merges": [[a, b], ...] (in rank order), "added_tokens": [{"id", "content"}]}``."""
    spec = json.loads(lm.tokenizer().backend.to_str())
    return {"vocab": spec["model"]["vocab"], "merges": spec["model"]["merges"],
            "added_tokens": [{"id": t["id"], "content": t["content"]} for t in spec["added_tokens"]]}


#: The modules whose code the export runs: a change to their code (not a docstring or a comment)
#: exports the model again.
_EXPORT_READS = ("lm_export", "language_model", "edits", "attention", "positions", "kv_cache", "patching")


def _site_key() -> str:
    import onnx

    here = Path(__file__).parent
    code = {name: site_files.code_digest((here / f"{name}.py").read_text(encoding="utf-8")) for name in _EXPORT_READS}
    return hashlib.sha256(json.dumps([lm.GGUF_SHA256, GRAPH_VERSION, torch.__version__, onnx.__version__, code])
                          .encode()).hexdigest()[:16]


def write_site_files(folder, *, cache=None) -> dict:
    """Write what the page's language model fetches into ``folder``: the graphs and ``embed.bin``
    (:func:`export`), ``tokenizer.json`` (:func:`tokenizer_spec`) and ``lm.json`` (the sizes,
    RoPE's ``inv_freq``, per file its bytes and SHA-256 and one ``digest`` over them (the name of
    the reader's browser cache), the reference means a ``"mean"`` edit puts in, the chapter's
    first IOI pair and :func:`check`'s figures), through :func:`attnlib.site_files.write`;
    cached in ``cache`` while the file and the code the export runs are unchanged.

    Returns:
        the ``lm.json`` dict.

    Raises:
        ValueError: the export fails :func:`check`.
    """
    return site_files.write(folder, key=_site_key(), info_name="lm.json", produce=_produce, cache=cache)


def _produce(target: Path) -> dict:
    from .patching import MIN_GAP

    model = lm.load()
    c = model.config
    export(model, target)
    figures = check(target, model)
    (target / "tokenizer.json").write_text(json.dumps(tokenizer_spec(), ensure_ascii=False, separators=(",", ":")),
                                           encoding="utf-8")
    names = [f"block_{l:02d}.onnx" for l in range(c.n_layers)] + ["unembed.onnx", "embed.bin", "tokenizer.json"]
    files = {n: {"bytes": (target / n).stat().st_size, "sha256": hashlib.sha256((target / n).read_bytes()).hexdigest()}
             for n in names}
    pair = lm.ioi_pair("Mary", "John", place="store", thing="drink")
    return {
        "graph_version": GRAPH_VERSION, "gguf_sha256": lm.GGUF_SHA256, "files": files,
        "bytes": sum(f["bytes"] for f in files.values()),
        "digest": hashlib.sha256("".join(f["sha256"] for f in files.values()).encode()).hexdigest(),
        "n_layers": c.n_layers, "n_heads": c.n_heads, "n_kv_heads": c.n_kv_heads, "d_model": c.d_model,
        "d_head": c.d_head, "vocab_size": c.vocab_size, "rope_base": c.rope_base, "rms_eps": c.rms_eps,
        "inv_freq": [float(x) for x in rope_frequencies(c.d_head, c.rope_base).to(torch.float64)],
        "norm_weight": [float(x) for x in model.norm.weight.detach().cpu()],
        "max_tokens": PAGE_MAX_TOKENS, "first_ordinary_token": lm.FIRST_ORDINARY_TOKEN,
        "means": [round(float(x), 7) for x in lm.reference_means(model).flatten()],
        "example": {"clean": pair["clean"], "corrupted": pair["corrupted"], "answers": pair["answers"]},
        "min_gap": MIN_GAP, "tolerance": BUILD_TOLERANCE, "check": figures}


#: The longest prompt the page runs (tokens): :data:`attnlib.language_model.PAGE_MAX_TOKENS`.
PAGE_MAX_TOKENS = lm.PAGE_MAX_TOKENS
