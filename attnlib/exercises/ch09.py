"""Exercises of chapter 9, "Attention at scale".

* ``weights_memory``: the memory, in MiB, of one head's float32 ``(T, T)`` weight matrix.
* ``rescale_factor``: the factor the online softmax multiplies its running sum by when a new
  block raises the running maximum.
* ``state_per_query``: how many numbers per query row tiled attention carries from one key
  block to the next.
"""
from __future__ import annotations

import math

from .core import checker, grade_number
from .registry import define

__all__ = [
    "MEMORY_T", "check_weights_memory",
    "RESCALE_M_OLD", "RESCALE_L_OLD", "RESCALE_BLOCK_MAX", "check_rescale_factor",
    "STATE_D_V", "STATE_BLOCK", "check_state_per_query",
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


define(9, "weights_memory", kind="number", precision='Graded within 0.5 %. You may write the unit (e.g. 12.5 MiB); another byte unit is converted.', title="The T × T matrix",
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


define(9, "rescale_factor", kind="number", precision='Graded within 1 %; an expression such as exp(-2) is fine.', title="The rescaling factor",
       question=(f"The online softmax has seen some blocks of scores: running maximum m = {RESCALE_M_OLD:g}, "
                 f"running sum l = {RESCALE_L_OLD:g}. The next block's largest score is {RESCALE_BLOCK_MAX:g}. "
                 "By what <b>factor</b> must l be multiplied before the new block's terms are added?"),
       grade=check_rescale_factor, label="Factor", placeholder="a number, 4 digits")


# ----------------------------------------------------------------------------- state_per_query
STATE_D_V = 64
STATE_BLOCK = 128


@checker
def check_state_per_query(answer, d_v: int = STATE_D_V, block: int = STATE_BLOCK):
    """Grade the number of values one query row carries between key blocks in tiled
    attention: the running maximum, the running sum and ``d_v`` accumulated output values."""
    target = d_v + 2
    return grade_number(
        answer, target,
        f"m (the running maximum), l (the running sum) and the {d_v} entries of the "
        f"unnormalised output acc: {target} numbers, whatever T_k is.",
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
        ],
        otherwise=lambda v: f"{v} is not it. List what the update m, l, acc needs from the blocks "
                            "already processed.",
        hint="Look at the three running quantities of the update.")


define(9, "state_per_query", kind="number", precision='A whole number.', title="What travels between blocks",
       question=(f"Tiled attention with d_v = {STATE_D_V} and blocks of {STATE_BLOCK} keys. How many numbers "
                 "does it keep for <b>one query row</b> between one key block and the next?"),
       grade=check_state_per_query, label="Numbers", placeholder="a whole number")
