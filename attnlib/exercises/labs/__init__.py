"""Code labs: the learner writes the mechanism, a checker names the bug (chapters 4, 5, 6, 9).

Each checker takes the learner's function, runs it on several seeded random inputs and real
ones (a head of the course's pretrained encoder on :data:`attnlib.corpus.RUNNING`), ordered
from the smallest to the largest, and compares the result with attnlib's own reference
(:func:`attnlib.softmax`, :func:`attnlib.scaled_dot_product_attention`,
:func:`attnlib.causal_mask`, :func:`attnlib.split_heads`, :func:`attnlib.tiled_attention`).
On the first input where the two differ, it recognises the classic mistakes listed in
:data:`MISTAKES` by computing each mistake's output on that input (a fingerprint) and naming
the one the learner's output matches, with that input, the expected and the actual result.

| checker | the learner writes | contract |
|---|---|---|
| :func:`check_softmax` | ``softmax(x, dim=-1)`` | same shape; entries in [0, 1]; sum 1 along ``dim``; no overflow at 1e4 |
| :func:`check_attention` | ``attention(q, k, v, mask=None) -> (out, weights)`` | ``softmax(Q K^T / sqrt(d_k))`` with a boolean mask (True = may attend) |
| :func:`check_causal_mask` | ``causal_mask(T)`` | ``(T, T)`` bool, True where ``j <= i`` |
| :func:`check_split_heads` | ``split_heads(x, n_heads)`` | ``(B, T, d_model) -> (B, H, T, d_head)`` |
| :func:`check_online_softmax_attention` | ``online_softmax_attention(q, k, v, block_size)`` | unmasked attention, keys visited in blocks with a running max and sum |

Nothing the learner writes raises through a checker: an exception, a wrong type or shape, NaN
all become a :class:`LabFeedback` (a :class:`~attnlib.exercises.core.Feedback` that also
carries the key of its ``diagnosis``) naming the input that triggered it.  Inputs are copied
before each call, so a function that works in place cannot corrupt the reference.  Rows whose
every key is masked are never used: they are outside every contract here.

Unlike the rest of :mod:`attnlib.exercises` this subpackage needs torch (it runs the
learner's PyTorch code), so it is not shipped to the static page's Pyodide (only the
top-level modules of :mod:`attnlib.exercises` are) and is not imported by that package's
``__init__``; the page shows the lab's contract, its stub, the mistakes and a launch link.

Layout: :mod:`.mistakes` (:data:`MISTAKES`, what each lab names), :mod:`._core` (the
feedback type, calling the learner safely, comparing, choosing the mistake and the input to
show), and one module per lab (:mod:`.softmax`, :mod:`.attention`, :mod:`.causal`,
:mod:`.heads`, :mod:`.online`), each holding its inputs, the fingerprints of its mistakes
and its checker.

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key
width, ``d_v`` value width, ``d_model`` model width, ``d_head = d_model / H``.

>>> import attnlib, torch
>>> check_causal_mask(attnlib.causal_mask).correct
True
>>> fb = check_causal_mask(lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))
>>> fb.diagnosis, fb.message.splitlines()[0][:14]
('inverted', 'Mask inverted:')
"""
from __future__ import annotations

from ._core import ATOL, LARGE_SCORE, REAL_LAYER, RTOL, LabFeedback
from .attention import check_attention
from .causal import check_causal_mask
from .heads import check_split_heads
from .mistakes import MISTAKES, mistakes_markdown
from .online import check_online_softmax_attention
from .softmax import check_softmax

__all__ = [
    "LabFeedback", "MISTAKES", "mistakes_markdown", "check_softmax", "check_attention",
    "check_causal_mask", "check_split_heads", "check_online_softmax_attention",
    "RTOL", "ATOL", "LARGE_SCORE", "REAL_LAYER",
]
