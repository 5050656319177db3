"""Exercises of chapter 11, "Attention at scale".

* ``weights_memory``: the memory, in MiB, of one head's float32 ``(T, T)`` weight matrix.
* ``rescale_factor``: the factor the online softmax multiplies its running sum by when a new
  block raises the running maximum.
* ``state_per_query``: predict, then check on a real head, how many numbers per query row
  tiled attention carries from one key block to the next.
"""
from __future__ import annotations

import math

from .core import checker, grade_number
from .registry import define

__all__ = [
    "MEMORY_T", "check_weights_memory",
    "RESCALE_M_OLD", "RESCALE_L_OLD", "RESCALE_BLOCK_MAX", "check_rescale_factor",
    "STATE_LAYER", "STATE_HEAD", "STATE_BLOCK", "state_example", "check_state_per_query",
]

MIB = 2 ** 20


_REL = 5e-3  # relative tolerance of a typed size: 0.5 %


# ----------------------------------------------------------------------------- weights_memory
MEMORY_T = 8192


@checker
def check_weights_memory(answer, T: int = MEMORY_T):
    """Grade the size in MiB (2**20 bytes) of a float32 ``(T, T)`` weight matrix:
    ``T * T * 4 / 2**20``."""
    n_bytes = T * T * 4
    target = n_bytes / MIB
    return grade_number(
        answer, target,
        f"{T} x {T} = {T * T:,} weights of 4 bytes each: {n_bytes:,} bytes = "
        f"{target:g} MiB, for one head of one layer of one sequence. Doubling T quadruples it.",
        what="a size in MiB", rel_tol=_REL, unit="MiB",
        mistakes=[
            (n_bytes, "That is the size in bytes. Divide by 2**20 = 1,048,576 bytes per MiB."),
            (n_bytes / 1e6, "That is megabytes (10**6 bytes). A mebibyte (MiB) is 2**20 = 1,048,576 bytes."),
            (T * T / MIB, "That counts entries, not bytes: each float32 weight takes 4 bytes."),
            (T * T * 8 / MIB, "That would be float64 (8 bytes per entry); the weights here are float32, 4 bytes."),
            (T * T * 2 / MIB, "That would be a 2-byte type (float16/bfloat16); float32 takes 4 bytes per entry."),
            (n_bytes / 2 ** 30, "That is the size in GiB (2**30 bytes); the question asks for MiB (2**20 bytes)."),
            (T * 4 / MIB, "That is one row of the matrix (T entries). The weight matrix has T rows."),
            (T * T * 4 / 1024, "That is KiB (2**10 bytes). Divide once more by 1024 for MiB."),
        ],
        impossible=[(lambda v: v <= 0, "A matrix with T x T entries takes a positive amount of memory.")],
        otherwise=lambda v: f"{v:g} MiB is not it. Count the entries of a {T} x {T} matrix, multiply by "
                            "the bytes per float32 entry, and divide by the bytes in a MiB.",
        hint="MiB = bytes / 2**20; a float32 takes 4 bytes.")


define(11, "weights_memory", kind="number", precision='Graded within 0.5 %. You may write the unit (e.g. 12.5 MiB); another byte unit is converted.', title="The T × T matrix",
       question=(f"A sequence has T = {MEMORY_T} tokens. How much memory, in <b>MiB</b> (2<sup>20</sup> "
                 "bytes), does the float32 weight matrix A = softmax(S) of <b>one</b> head take?"),
       grade=check_weights_memory, label="MiB", placeholder="e.g. 12.5")


# ----------------------------------------------------------------------------- rescale_factor
RESCALE_M_OLD = 2.0       # running maximum after the blocks seen so far
RESCALE_L_OLD = 3.5       # running sum of exp(s - RESCALE_M_OLD) over those blocks
RESCALE_BLOCK_MAX = 5.0   # largest score of the new block


@checker
def check_rescale_factor(answer, m_old: float = RESCALE_M_OLD, l_old: float = RESCALE_L_OLD,
                         block_max: float = RESCALE_BLOCK_MAX):
    """Grade the factor ``exp(m_old - m_new)``, ``m_new = max(m_old, block_max)``, by which
    the online softmax multiplies its running sum ``l`` before adding the new block."""
    m_new = max(m_old, block_max)
    target = math.exp(m_old - m_new)
    return grade_number(
        answer, target,
        f"exp(m_old - m_new) = exp({m_old:g} - {m_new:g}) = {target:.4f}. The old sum "
        f"held terms exp(s - {m_old:g}); multiplying by exp({m_old:g} - {m_new:g}) turns "
        f"each into exp(s - {m_new:g}), relative to the new maximum.",
        what="a factor (a number)", rel_tol=1e-2,
        mistakes=[
            (math.exp(m_new - m_old), "That is exp(m_new - m_old), the inverse. The new maximum is larger, so "
                                      "every old term exp(s - m_old) must shrink, by a factor below 1."),
            (m_old - m_new, "That is the exponent m_old - m_new; the factor is exp of it."),
            (m_new - m_old, "That is the gap between the maxima; the factor is exp(m_old - m_new)."),
            (1.0, "Without rescaling, the old terms stay measured against the old maximum while new terms "
                  "use the new one: the sum would mix two references and the softmax would be wrong."),
            (m_old / m_new, "Maxima enter through exponentials, not ratios: the factor is exp(m_old - m_new)."),
            (l_old * target, "That is the rescaled sum l * exp(m_old - m_new), not the factor itself."),
            (math.exp(-m_new), "That uses only the new maximum. The old terms are exp(s - m_old); to make them "
                               "exp(s - m_new) multiply by exp(m_old - m_new)."),
        ],
        impossible=[(lambda v: v == 0, "A factor of 0 would throw away every score seen so far; their weights "
                                       "only shrink.")],
        otherwise=lambda v: f"{v:g} is not it. Write the old terms as exp(s - m_old) and ask what turns them "
                            "into exp(s - m_new).",
        hint="exp(s - m_new) = exp(s - m_old) * exp(m_old - m_new).")


define(11, "rescale_factor", kind="number", precision='Graded within 1 %; an expression such as exp(-2) is fine.', title="The rescaling factor",
       question=(f"The online softmax has seen some blocks of scores: running maximum m = {RESCALE_M_OLD:g}, "
                 f"running sum l = {RESCALE_L_OLD:g}. The next block's largest score is {RESCALE_BLOCK_MAX:g}. "
                 "By what <b>factor</b> must l be multiplied before the new block's terms are added?"),
       grade=check_rescale_factor, label="Factor", placeholder="a number, 4 digits")


# ----------------------------------------------------------------------------- state_per_query
# Predict, then check on a real head: attnlib.tiled_attention on layer 4, head 3 of the
# encoder (the running sentence), and the running state it really creates, counted by a probe.
STATE_LAYER, STATE_HEAD, STATE_BLOCK = 4, 3, 4


def state_example() -> dict:
    """The running state :func:`attnlib.tiled_attention` carries between key blocks on a real
    head (kernel only; torch imported here): layer :data:`STATE_LAYER`, head
    :data:`STATE_HEAD` of the encoder on :data:`attnlib.corpus.RUNNING`, blocks of
    :data:`STATE_BLOCK` keys.  A torch function mode records every tensor the function creates
    with ``torch.full`` / ``torch.zeros`` (the running maximum, sum and output of each query
    block, made once per query block and updated across its key blocks).

    Returns ``{"T", "d_k", "d_v", "block", "n_query_blocks", "state": [[shape...], ...] (the
    first query block's), "per_query" (numbers per query row), "matches_reference" (bool)}``.
    """
    import torch
    from torch.overrides import TorchFunctionMode

    from .. import corpus
    from ..attention import scaled_dot_product_attention
    from ..encoder import head_qkv
    from ..tiled import tiled_attention

    _, q, k, v = head_qkv(corpus.RUNNING, STATE_LAYER, STATE_HEAD)               # (T, d) each
    q, k, v = (t.detach().float().cpu() for t in (q, k, v))

    class Probe(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.made = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if func in (torch.full, torch.zeros):
                self.made.append(tuple(result.shape))
            return result

    with Probe() as probe:
        out = tiled_attention(q, k, v, block_size=STATE_BLOCK)
    T = q.shape[0]
    n_query_blocks = -(-T // STATE_BLOCK)
    first = probe.made[:len(probe.made) // n_query_blocks]                     # one query block's state
    rows = first[0][0]
    return {"T": T, "d_k": q.shape[-1], "d_v": v.shape[-1], "block": STATE_BLOCK,
            "n_query_blocks": n_query_blocks, "state": [list(s) for s in first],
            "per_query": sum(s[-1] for s in first) if all(s[0] == rows for s in first) else None,
            "matches_reference": bool(torch.allclose(out, scaled_dot_product_attention(q, k, v)[0], atol=1e-5))}


@checker
def check_state_per_query(answer, data=None):
    """Grade the number of values one query row carries between key blocks in tiled
    attention, against what :func:`state_example` measured on a real head (``data``): the
    running maximum, the running sum and ``d_v`` accumulated output values."""
    data = data or state_example()
    d_v, block, target = data["d_v"], data["block"], data["per_query"]
    shapes = ", ".join(str(tuple(s)) for s in data["state"])
    measured = (f"Measured: attnlib.tiled_attention on layer {STATE_LAYER}, head {STATE_HEAD} (T = {data['T']}, "
                f"d_v = {d_v}, blocks of {block} keys) creates, per block of query rows, running tensors of "
                f"shapes {shapes}: {target} numbers per query row.")
    return grade_number(
        answer, target,
        f"m (the running maximum), l (the running sum) and the {d_v} entries of the "
        f"unnormalised output acc: {target} numbers, whatever T_k is. " + measured,
        what="a count, a whole number", whole="count the numbers kept per query row.",
        mistakes=[
            (d_v, f"The {d_v} entries of the accumulated output are needed, but rescaling also "
                  "needs the running maximum m and the running sum l."),
            (d_v + 1, "One number is missing: both the running maximum m (for the rescaling) and "
                      "the running sum l (the softmax denominator) are kept."),
            (2, f"m and l give the softmax denominator, but the output needs the running "
                f"weighted sum of value rows too: {d_v} more numbers."),
            ((block, block + 2, block + d_v + 2, block * d_v),
             f"The {block} scores of a tile are used and discarded at once; only running "
             "quantities travel to the next key block."),
            ((data["T"], data["T"] + 2, data["T"] + d_v + 2),
             f"That grows with the length T = {data['T']}; the state per query does not depend on how many "
             "keys there are, which is the point of tiling."),
            ((data["d_k"] + 2, data["d_k"] + d_v + 2) if data["d_k"] != d_v else (data["d_k"] + d_v + 2,),
             f"The query itself (d_k = {data['d_k']} numbers) is read, not carried as running state; the "
             f"state is m, l and the {d_v} output entries."),
        ],
        otherwise=lambda v: f"{v} is not it. List what the update m, l, acc needs from the blocks "
                            "already processed.",
        hint="Look at the three running quantities of the update.")


define(11, "state_per_query", kind="number", precision='A whole number.', title="What travels between blocks",
       question=(f"Run <code>attnlib.tiled_attention</code> on the real queries, keys and values of layer "
                 f"{STATE_LAYER}, head {STATE_HEAD} on the running sentence (its value width d_v is printed above), with blocks of "
                 f"{STATE_BLOCK} keys. <b>Predict first:</b> how many numbers does it "
                 "keep for <b>one query row</b> between one key block and the next? Then check: your answer "
                 "is graded against the running tensors the function really creates on this head."),
       data=state_example, grade=check_state_per_query, label="Numbers", placeholder="a whole number")
