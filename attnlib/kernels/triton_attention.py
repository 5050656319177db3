"""A FlashAttention forward kernel in Triton (chapter 11), written to be read.

One **program** (a block of GPU threads scheduled on one streaming multiprocessor) computes
``BLOCK_M`` rows of the output of one (batch, head).  It loads its block of queries once,
then walks over the keys and values ``BLOCK_N`` rows at a time.  For each tile it computes the
``(BLOCK_M, BLOCK_N)`` scores with ``tl.dot``, updates the running maximum ``m``, the running
sum ``l`` and the unnormalised output ``acc`` exactly as the online softmax of chapter 11
(:func:`attnlib.online_softmax_step`), and moves on.  The tiles live in registers and shared
memory (SRAM); the only writes to main memory (HBM) are the output and, per query, the
log-sum-exp ``m + log(l)``, which a backward pass would use to recompute the weights.
Nothing of size ``T_q x T_k`` is ever written.

On a machine without CUDA the kernel runs under Triton's interpreter (``TRITON_INTERPRET=1``
must be set before ``@triton.jit`` runs, so this module sets it before importing triton),
which executes the same block operations with numpy: slow, but the same arithmetic, so the
kernel can be tested on a CPU.  The interpreter's ``tl.dot`` in bfloat16 gives wrong results,
so bfloat16 is refused there.

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key
width, ``d_v`` value width.

Source: Dao et al. (2022), "FlashAttention: Fast and Memory-Efficient Exact Attention with
IO-Awareness", Algorithm 1 (forward pass), in the loop order of FlashAttention-2 (Dao 2023:
queries in the outer loop, one program per query block) and of Triton's fused-attention
tutorial.
"""
from __future__ import annotations

import math
import os

import torch

import sys

_TRITON_WAS_LOADED = "triton" in sys.modules
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # must precede @triton.jit below

try:
    import triton
    import triton.language as tl
except ImportError as err:                            # pragma: no cover - only without triton
    from . import INSTALL_HINT
    raise ImportError(INSTALL_HINT) from err

if _TRITON_WAS_LOADED and not torch.cuda.is_available() \
        and type(tl.zeros).__name__ != "InterpretedFunction":
    raise RuntimeError(
        "triton was imported (by another module) before attnlib could set TRITON_INTERPRET=1, so its "
        "library functions are compiled-only and cannot run on this machine without CUDA. Import attnlib "
        "before that module, or start Python with TRITON_INTERPRET=1 in the environment.")

from .. import _validate
from ..attention import check_qkv, resolve_scale

__all__ = ["triton_attention", "INTERPRETED", "DEFAULT_BLOCK_M", "DEFAULT_BLOCK_N"]

#: True when this process runs the kernel under Triton's CPU interpreter.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEFAULT_BLOCK_M = 64   # query rows per program
DEFAULT_BLOCK_N = 64   # key rows per step of the inner loop


@triton.jit
def _flash_forward(
    Q, K, V, Out, Lse,                                  # pointers to the first element of each tensor
    stride_qz, stride_qm, stride_kz, stride_kn, stride_vz, stride_vn, stride_oz, stride_om,
    T_q, T_k, d_k, d_v, scale,                          # runtime sizes; scale = 1/sqrt(d_k) by default
    IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr,
):
    # Which tile is mine: program (m, z) owns query rows m*BLOCK_M .. m*BLOCK_M + BLOCK_M - 1
    # of the z-th (batch, head) pair.  The GPU runs many programs at once, one per SM slot.
    start_m = tl.program_id(0)
    z = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)          # (BLOCK_M,) query indices
    offs_n = tl.arange(0, BLOCK_N)                              # (BLOCK_N,) key indices within a tile
    offs_dk = tl.arange(0, BLOCK_DK)                            # widths padded to a power of 2
    offs_dv = tl.arange(0, BLOCK_DV)

    # Load my query block once, HBM -> SRAM/registers; rows past T_q and columns past d_k
    # read as 0 (they never reach the output).
    q_ptrs = Q + z * stride_qz + offs_m[:, None] * stride_qm + offs_dk[None, :]
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < T_q) & (offs_dk[None, :] < d_k), other=0.0)

    # The running statistics of the online softmax, in float32, one per query row.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)   # running maximum
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)                 # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)       # running sum of exp(s - m) v

    # With a causal mask (top-left aligned, query i sees keys 0..i) the key tiles that lie
    # wholly in my block's future are skipped: the loop stops at the last key I can see.
    hi = T_k
    if IS_CAUSAL:
        hi = tl.minimum(T_k, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n                                 # (BLOCK_N,) key indices of this tile
        # Load one tile of keys (transposed, (BLOCK_DK, BLOCK_N)) and values (BLOCK_N, BLOCK_DV).
        k = tl.load(K + z * stride_kz + cols[None, :] * stride_kn + offs_dk[:, None],
                    mask=(cols[None, :] < T_k) & (offs_dk[:, None] < d_k), other=0.0)
        v = tl.load(V + z * stride_vz + cols[:, None] * stride_vn + offs_dv[None, :],
                    mask=(cols[:, None] < T_k) & (offs_dv[None, :] < d_v), other=0.0)
        # One tile of scores on the tensor cores, accumulated in float32.
        s = tl.dot(q, k, input_precision=PRECISION) * scale     # (BLOCK_M, BLOCK_N)
        keep = cols[None, :] < T_k                              # keys past the end do not exist
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        # The online-softmax update: new maximum, rescale what was summed, add this tile.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)                             # exp(m_old - m_new) <= 1
        p = tl.exp(s - m_new[:, None])                          # (BLOCK_M, BLOCK_N) unnormalised weights
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    # Normalise once, at the end, and write the output block and the log-sum-exp to HBM.
    out = acc / l_i[:, None]
    o_ptrs = Out + z * stride_oz + offs_m[:, None] * stride_om + offs_dv[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=(offs_m[:, None] < T_q) & (offs_dv[None, :] < d_v))
    tl.store(Lse + z * T_q + offs_m, m_i + tl.log(l_i), mask=offs_m < T_q)


def _block(value, name: str, default: int) -> int:
    if value is None:
        return default
    value = _validate.positive_int(value, name)
    if value < 16 or value & (value - 1):
        raise ValueError(f"{name} must be a power of 2 of at least 16 (tl.dot's smallest tile), got {value}")
    return value


def triton_attention(q, k, v, is_causal: bool = False, *, scale: float | None = None,
                     block_m: int | None = None, block_n: int | None = None, return_lse: bool = False):
    """Exact attention ``softmax(Q K^T * scale) V`` computed by a FlashAttention forward kernel
    in Triton: tiled, with the online softmax, never forming the ``T_q x T_k`` matrix.

    ``is_causal=True`` masks keys after the query, aligned to the top-left corner (query ``i``
    sees keys ``0 .. i``), as ``torch.nn.functional.scaled_dot_product_attention`` and
    :func:`attnlib.scaled_dot_product_attention`.  Any ``T_q, T_k`` (not only multiples of the
    block) and any ``d_k, d_v`` up to 256.  Scores, softmax statistics and the output are
    accumulated in float32; for float16 the weights are rounded to float16 before the product
    with ``V``, as in FlashAttention.

    Where it runs: on a CUDA device when the inputs are there; without CUDA, under Triton's
    CPU interpreter (slow: use small inputs), float32 and float16 only.

    Args:
        block_m, block_n: query rows per program and key rows per tile (powers of 2, at
            least 16; default 64 and 64).
        return_lse: also return the log-sum-exp of each query's scaled scores,
            ``m + log(l) = logsumexp_j(S_ij)`` (natural log, float32); ``-inf`` for no key.

    Shapes:
        q ``(..., T_q, d_k)``, k ``(..., T_k, d_k)``, v ``(..., T_k, d_v)`` with the same
        leading dimensions (e.g. ``(B, H)``; no broadcasting).  Returns ``out``
        ``(..., T_q, d_v)`` in q's dtype, and with ``return_lse`` also ``lse`` ``(..., T_q)``.

    Raises:
        ImportError: triton is not installed (it has no macOS or Windows wheels).
        TypeError: as :func:`attnlib.check_qkv`; bfloat16 under the interpreter (its
            bfloat16 ``tl.dot`` is wrong), float64 (not a tensor-core type).
        ValueError: as :func:`attnlib.check_qkv`; leading dimensions that differ; ``d_k`` or
            ``d_v`` above 256; CPU tensors on a machine that runs the compiled kernel (move
            them to CUDA) or CUDA tensors under the interpreter; bad block sizes.

    Source: Dao et al. (2022), "FlashAttention", Algorithm 1; Dao (2023), "FlashAttention-2",
    Algorithm 1 (loop order and the log-sum-exp output).
    """
    q, k, v = check_qkv(q, k, v)
    is_causal = _validate.flag(is_causal, "is_causal")
    return_lse = _validate.flag(return_lse, "return_lse")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(f"q, k and v must have the same leading dimensions (no broadcasting in the kernel): "
                         f"q {_validate.shape_of(q)}, k {_validate.shape_of(k)}, v {_validate.shape_of(v)}")
    if q.dtype == torch.float64:
        raise TypeError("triton_attention takes float32, float16 or bfloat16 (tensor-core types), got float64")
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise TypeError("bfloat16 is refused under Triton's CPU interpreter: its bfloat16 tl.dot gives wrong "
                        "results. Use float32 or float16 on the CPU, or bfloat16 on a CUDA GPU.")
    if INTERPRETED and q.device.type != "cpu":
        raise ValueError(f"the kernel runs under Triton's CPU interpreter in this process; q must be on the "
                         f"CPU, got {q.device}")
    if not INTERPRETED and q.device.type != "cuda":
        raise ValueError(f"the compiled Triton kernel needs CUDA tensors, got {q.device}; move q, k, v to "
                         "'cuda' (or set TRITON_INTERPRET=1 before importing attnlib to interpret on the CPU)")
    d_k, d_v = q.shape[-1], v.shape[-1]
    if max(d_k, d_v) > 256:
        raise ValueError(f"d_k and d_v must be at most 256 (one tile holds a whole row), got d_k={d_k}, d_v={d_v}")
    scale = resolve_scale(scale, d_k)
    block_m = _block(block_m, "block_m", DEFAULT_BLOCK_M)
    block_n = _block(block_n, "block_n", DEFAULT_BLOCK_N)

    lead, T_q, T_k = q.shape[:-2], q.shape[-2], k.shape[-2]
    n = math.prod(lead)
    out = torch.zeros(*lead, T_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.full((*lead, T_q), float("-inf"), dtype=torch.float32, device=q.device)
    if n == 0 or T_q == 0 or T_k == 0 or d_v == 0:   # nothing to attend to: out 0, lse -inf
        return (out, lse) if return_lse else out
    q3, k3, v3 = (x.reshape(n, x.shape[-2], x.shape[-1]).contiguous() for x in (q, k, v))  # (B*H, T, d)
    o3 = out.view(n, T_q, d_v)
    grid = (triton.cdiv(T_q, block_m), n)               # one program per (query block, batch-head)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"   # float32 exactly, not TF32
    _flash_forward[grid](
        q3, k3, v3, o3, lse,
        q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
        o3.stride(0), o3.stride(1),
        T_q, T_k, d_k, d_v, scale,
        IS_CAUSAL=is_causal, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_DK=max(16, triton.next_power_of_2(d_k)), BLOCK_DV=max(16, triton.next_power_of_2(d_v)),
        PRECISION=precision,
    )
    return (out, lse) if return_lse else out
