"""The online-softmax lab (chapter 11): ``check_online_softmax_attention``."""
from __future__ import annotations

import math

import torch

from ...softmax import softmax
from ...tiled import tiled_attention
from ._core import (
    READY_MADE_ATTENTION, REAL_LAYER, _as_tensor_result, _Case, _close, finite_tensor, _generic_tensor, _ints, Lab,
    _randn, _real_head, Refusal, register, _shape,
)

__all__ = ["check_online_softmax_attention"]


def _online_cases() -> list[_Case]:
    q_big = _ints(3, 4, seed=40, high=60)
    q_big[0] = -60.0                                                     # query 0: every score <= -60 * 40 / 2
    q_big[1] = 60.0                                                      # query 1: every score >= 60 * 40 / 2
    k_big = _ints(9, 4, seed=41, high=25) + 35.0                         # key entries in [10, 60]
    def real():
        _, q, k, v, _ = _real_head()
        return f"the real q, k, v of layer {REAL_LAYER}'s heads, shape {_shape(q)}, block_size=4", (q, k, v, 4)

    return [
        _Case("q = [[1]], k = [[0], [2], [1]], v = [[1], [2], [4]], block_size=1 (the scores rise, then fall)",
              (torch.tensor([[1.0]]), torch.tensor([[0.0], [2.0], [1.0]]), torch.tensor([[1.0], [2.0], [4.0]]), 1), {},
              True),
        _Case("q = [[3]], k = [[2], [0], [1]], v = [[1], [2], [4]], block_size=2", (
            torch.tensor([[3.0]]), torch.tensor([[2.0], [0.0], [1.0]]), torch.tensor([[1.0], [2.0], [4.0]]), 2), {},
            True),
        _Case("q (2, 4), k (5, 4), v (5, 3), block_size=2 (5 keys: blocks of 2, 2, 1)",
              (_randn(2, 4, seed=31), _randn(5, 4, seed=32), _randn(5, 3, seed=33), 2), {}),
        _Case("q (3, 4), k (4, 4), v (4, 2), block_size=8 (one block holds every key)",
              (_randn(3, 4, seed=34), _randn(4, 4, seed=35), _randn(4, 2, seed=36), 8), {}),
        _Case("q (2, 3, 5, 8), k (2, 3, 11, 8), v (2, 3, 11, 6) (B=2, H=3), block_size=4",
              (_randn(2, 3, 5, 8, seed=37), _randn(2, 3, 11, 8, seed=38), _randn(2, 3, 11, 6, seed=39), 4), {}),
        _Case("integer q (3, 4), k (9, 4) with entries up to 60 (query 0's scores all below -1000, query 1's "
              "all above 1000), v (9, 2), block_size=2", (q_big, k_big, _randn(9, 2, seed=42), 2), {}),
        _Case(None, make=real),
        _long_case(),
    ]


#: The long input: 256 keys in blocks of 16 for 32 queries of width 2, where a (32, 256) score
#: matrix is 8 times larger than the keys and 16 times larger than a tile.
_LONG = dict(T_q=32, T_k=256, d=2, block=16)


def _long_case() -> _Case:
    T_q, T_k, d, block = _LONG["T_q"], _LONG["T_k"], _LONG["d"], _LONG["block"]
    case = _Case(f"q ({T_q}, {d}), k ({T_k}, {d}), v ({T_k}, {d}), block_size={block} (a long sequence: {T_k} keys "
                 f"in {T_k // block} blocks; the ({T_q}, {T_k}) score matrix would be 16 times larger than a tile)",
                 (_randn(T_q, d, seed=43, scale=2.0), _randn(T_k, d, seed=44, scale=2.0), _randn(T_k, d, seed=45), block),
                 {})
    case.long = True
    return case


def _online_variant(q, k, v, block: int, *, scale: str = "ok", bug: str | None = None) -> torch.Tensor:
    """Attention by the online softmax with one mistake (``bug``) and a scale, in float64."""
    dtype = torch.float32 if bug == "max_starts_at_zero/32" else torch.float64   # underflows as in float32
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    d_k = q.shape[-1]
    c = {"ok": 1 / math.sqrt(d_k), "no_scaling": 1.0, "scaled_by_d_k": 1 / d_k}[scale]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    start = 0.0 if bug and bug.startswith("max_starts_at_zero") else float("-inf")
    m = torch.full((*lead, q.shape[-2], 1), start, dtype=dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros((*lead, q.shape[-2], v.shape[-1]), dtype=dtype)
    for s0 in range(0, k.shape[-2], block):
        s = (q @ k[..., s0:s0 + block, :].transpose(-2, -1)) * c        # (..., T_q, b)
        vb = v[..., s0:s0 + block, :]
        if bug == "normalises_each_block":
            acc = acc + softmax(s, dim=-1) @ vb
            continue
        if bug in ("no_max", "no_max/32"):                              # overflows as in float64 or float32
            p = torch.exp(s.float()).double() if bug == "no_max/32" else torch.exp(s)
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ vb
            continue
        bmax = s.amax(-1, keepdim=True)
        if bug == "block_max_only":
            p = torch.exp(s - bmax)
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ vb
            continue
        m_new = torch.maximum(m, bmax)
        corr = torch.exp(m - m_new)
        if bug == "inverted_rescale":                                    # 0 * exp(inf) = NaN at the start
            corr = torch.exp(m_new - m)
        elif bug == "inverted_rescale/finite":                          # state started from the first block
            corr = torch.where(torch.isneginf(m), torch.zeros_like(m), torch.exp(m_new - m))
        p = torch.exp(s - m_new)
        l = l * (1.0 if bug in ("no_rescale", "no_rescale_sum") else corr) + p.sum(-1, keepdim=True)
        acc = acc * (1.0 if bug in ("no_rescale", "no_rescale_acc") else corr) + p @ vb
        m = m_new
    if bug in ("normalises_each_block", "no_final_division"):
        return acc.double()
    return (acc / l).double()


_ONLINE_BUGS = ("no_rescale", "no_rescale_sum", "no_rescale_acc", "inverted_rescale", "inverted_rescale/finite",
                "block_max_only",
                "normalises_each_block", "no_final_division", "no_max", "no_max/32", "max_starts_at_zero",
                "max_starts_at_zero/32")


def _online_fingerprints(case: _Case) -> dict:
    q, k, v, block = case.args
    out = {}
    for scale in ("ok", "no_scaling", "scaled_by_d_k"):
        for bug in (None, *_ONLINE_BUGS):
            if scale == "ok" and bug is None:
                continue
            keys = tuple(x for x in (bug, None if scale == "ok" else scale) if x)
            out[keys] = _online_variant(q, k, v, block, scale=scale, bug=bug)
    return out


def _reference_online(case: _Case) -> torch.Tensor:
    """attnlib's tiled attention on ``case``, in float64."""
    q, k, v, block = case.args
    return tiled_attention(q.double(), k.double(), v.double(), block_size=block)


def _matrix_watch(case: _Case) -> dict | None:
    """What counts as a whole score matrix on ``case`` (see :class:`~._sandbox._Watch`): a
    result whose last two dimensions are ``(T_q, T_k)`` (or ``(T_k, T_q)``), where no tile or
    input can have that shape; a row of scores: any result with a dimension of ``T_k`` and none
    of the widths ``d_k``, ``d_v`` (what a query's scores over every key look like, or the
    whole matrix flattened, where ``T_k`` differs from every other size of the input: keys and
    values themselves keep their width); and on the long input (:data:`_LONG`), any tensor or
    array whose memory holds half a score matrix or more (no input, tile or running state comes
    close).  The watch sees every torch operation (also below ``torch.tensor`` and
    ``DisableTorchFunction``) and every NumPy array made during the call, from the inputs, from
    lists or from bytes, so it judges what the function computes, not how it builds it."""
    q, k, v, block = case.args
    T_q, T_k, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    spec = {}
    if T_k > block and T_q not in (1, T_k) and T_k not in (d_k, d_v):
        spec["shape"] = (T_q, T_k)
        spec["transposed"] = T_q not in (d_k, d_v, block)
    batch = tuple(q.shape[:-2]) + tuple(k.shape[:-2])
    if T_k > block and T_k not in (T_q, d_k, d_v, block) + batch:
        spec["row"] = {"T_k": T_k, "widths": (d_k, d_v)}
    if getattr(case, "long", False):
        spec["min_elements"] = T_q * T_k // 2
    return spec or None


CHECK_ONLINE_SOFTMAX_ATTENTION_DOC = """Check a learner's ``online_softmax_attention(q, k, v, block_size)`` against
    :func:`attnlib.tiled_attention` (exact attention without a mask).

    Contract: returns ``out = softmax(q k^T / sqrt(d_k)) v``, computed by visiting the keys
    and values in blocks of ``block_size`` rows (the last block may be shorter), keeping for
    every query a running maximum ``m``, a running sum ``l`` and a running weighted sum of
    value rows, both rescaled by ``exp(m_old - m_new)`` when the maximum grows; never holding
    a ``(T_q, T_k)`` score matrix, in torch or NumPy: every tensor the function's torch calls
    return and every array made from the inputs is watched, and a function that makes one is
    refused (``full_matrix``) before its values are graded.

    Inputs, smallest first: one query over three keys whose scores rise then fall
    (``block_size=1``), and fall then rise (``block_size=2``); ``T_k = 5`` in blocks of 2;
    a block larger than ``T_k``; batches of heads ``(2, 3, ...)``; integer-valued q and k
    whose scores reach about 1e4, with one query whose every score is below -1000 (a running
    maximum started at 0 underflows there); the real q, k, v of every head of one encoder
    layer; a long sequence (``T_q = 32``, ``T_k = 256``, blocks of 16), where any tensor or
    array half the size of the score matrix counts as holding it.

    The library calls that would do the work (``F.scaled_dot_product_attention``,
    ``nn.MultiheadAttention``, :func:`attnlib.tiled_attention` and attnlib's other attention
    functions, :func:`attnlib.online_softmax_step`, :func:`attnlib.online_softmax`) are refused
    (``library_call``).  The function runs apart from the grader (see :mod:`._sandbox`).

    Shapes:
        q: ``(..., T_q, d_k)``, k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``; result
        ``(..., T_q, d_v)``.

    Returns:
        :class:`LabFeedback`; keys of ``MISTAKES["online_softmax"]`` name the mistakes (a
        recurrence mistake and a scaling mistake together are recognised).  Never raises;
        a function that runs longer than :data:`TIME_LIMIT_S` seconds on an input is stopped.

    Source: Milakov & Gimelshein (2018), algorithm 3; Dao et al. (2022), "FlashAttention",
    algorithm 1.
    """

LAB = Lab(
    key="online_softmax", checker="check_online_softmax_attention", what="online softmax attention",
    writes='online_softmax_attention(q, k, v, block_size)',
    contract="unmasked attention, keys visited in blocks with a running max and sum",
    refusal=Refusal(
        about="the online softmax itself, so ready-made attention (F.scaled_dot_product_attention, "
              "nn.MultiheadAttention, attnlib.tiled_attention and attnlib's other attention functions) and attnlib's "
              "online softmax (online_softmax, online_softmax_step) are not accepted here",
        instead="Loop over blocks of keys, keeping for every query a running maximum, a running sum and a running "
                "output, rescaled by exp(m_old - m_new) when the maximum grows.",
        attnlib=("online_softmax",), **READY_MADE_ATTENTION),
    cases=_online_cases,
    reference=_reference_online,
    convert=lambda got, c, expected: _as_tensor_result(got, c, "online softmax attention"),
    right=_close,
    fingerprints=_online_fingerprints,
    matches=_close,
    usable=finite_tensor,
    generic=lambda c, expected, got: _generic_tensor(c, "output", expected, got),
    success=lambda cases: (f"Your online softmax attention matches attnlib.tiled_attention on all {len(cases)} "
                           "inputs, block by block, without ever holding the (T_q, T_k) score matrix."),
    matrix=_matrix_watch, doc=CHECK_ONLINE_SOFTMAX_ATTENTION_DOC)

check_online_softmax_attention = register(LAB)
