"""Code labs: the learner writes the mechanism, a checker names the bug (chapters 4, 5, 6, 11, 12).

Each checker takes the learner's function, runs it on several seeded random inputs and real
ones (a head of the course's pretrained encoder on :data:`attnlib.corpus.RUNNING`), ordered
from the smallest to the largest, and compares the result with attnlib's own reference
(:func:`attnlib.softmax`, :func:`attnlib.scaled_dot_product_attention`,
:func:`attnlib.causal_mask`, :func:`attnlib.split_heads`, :func:`attnlib.tiled_attention`).
On the first input where the two differ, it recognises the classic mistakes listed in
:data:`MISTAKES` by computing each mistake's output on that input (a fingerprint) and naming
the one the learner's output matches, with that input, the expected and the actual result.

{LAB_TABLE}

Nothing the learner writes raises through a checker: an exception, a wrong type or shape, NaN
all become a :class:`LabFeedback` (a :class:`~attnlib.exercises.core.Feedback` that also
carries the key of its ``diagnosis``) naming the input that triggered it.  Rows whose every key
is masked are never used: they are outside every contract here.

What a checker promises, and no more: it catches accidental use of a library function that
does the lab's job and every mistake it names, and it closes the cheap routes around its
watches; it runs in the learner's own kernel, so a learner set on deceiving it can.  The
learner's function runs in a separate process, input after input: a forked child on Linux, a
worker spawned ahead of time on macOS and Windows (:mod:`._sandbox`); the references and the
comparisons stay in the kernel, which the function never touches.  No catchable signal, closed
descriptor, fork or setting of the child ends the kernel or changes its state: while a check
runs the kernel ignores every catchable signal that would end or stop it (all but ``SIGINT``,
the reader's interrupt, and the fault signals), and at the end every process the check
started is ended, in whatever session or group it moved to (on Linux; elsewhere those its
process group and ``psutil`` still reach).  What no process can stop, ``SIGKILL`` and
``SIGSTOP`` sent on purpose through ``ctypes``, is outside this promise.  In the child, while
the function runs, and while its result is serialised:

* a function of ``torch``, ``torch.Tensor``, ``torch.nn.functional``, ``numpy``, ``math``,
  ``pickle``, ``builtins`` or ``attnlib`` that it replaces or deletes is reported (diagnosis
  ``"tampered"``, the verdict of the whole check) and put back (a wrapper that a module
  imported during the call installs, as ``torch._dynamo`` does, is put back silently);
* what would do the lab's job is refused by family, not by exact name, with a message that says
  what to write instead (``"library_call"``): {NAME_SCOPE} whose name contains one of the
  lab's words, or is one of its whole names (the table's last column, made from each lab's
  :class:`Refusal`, as is the paragraph under each lab's mistakes in the book).  So
  ``torch.ops.aten._safe_softmax``, ``_masked_softmax``, ``torch.sparse.softmax``,
  ``nn.Softmax`` and SciPy's softmax are refused in the softmax lab as ``torch.softmax`` is,
  and every fused attention kernel, ``nn.MultiheadAttention`` and Hugging Face's attention
  functions in the attention labs.  Each is seen however it is reached: a torch function
  mode (which also sees a ``Tensor`` attribute read, such as ``grad_fn``), a dispatch mode
  that sees every ATen operation, also under ``DisableTorchFunction`` or through
  ``torch.ops``, and a profiler for Python functions, decompositions included.  The words are
  chosen so that no operation a right solution uses contains one (``exp``, ``amax``, ``sum``,
  ``masked_fill``, ``where``, ``matmul``, ``baddbmm``, ``einsum``, ``tril``, ``reshape``
  pass); ``grad``, which ``requires_grad`` contains, is refused only whole.  The backward lab
  also refuses building autograd's graph at all (any operation on a tensor that requires
  grad, seen by the dispatch mode even where the function mode is switched off), so
  autograd walked by hand (``grad_fn``, ``next_functions``, calling the graph's nodes) is
  refused however the graph is reached;
* a new thread or process, a signal to another process, ``torch.jit`` and ``torch.compile``
  are refused (``"not_allowed"``): they would run code where the watches cannot see;
* every record is also written at once to a pipe the parent reads, so erasing the child's
  own record afterwards hides nothing, and a reply that the check's own code did not write
  (found on the pipe in another form) is refused (``"tampered"``);
* in the online lab, every tensor a torch operation returns and every NumPy array made during
  the call (from the inputs, from lists, from bytes) is checked for scores over every key at
  once: a ``(T_q, T_k)`` matrix or a row of it (``"full_matrix"``, before any value is graded);
* ``stdout`` and ``stderr`` are captured: the feedback counts them and quotes the start;
* a Tensor subclass is named and never read (its code would run while the result is read),
  and a complex result is refused (``"wrong_type"``).

Each input has :data:`TIME_LIMIT_S` seconds of processor time, and a check
:data:`CHECK_TIME_LIMIT_S` in all (``"timed_out"``; the child and everything it started are
ended); the time a first-use import takes is not counted, so a right function is never told it
loops because a large library loaded; a function that waits without computing (``sleep``,
``input()``) is stopped after :data:`~._sandbox.WAIT_LIMIT_S` seconds and told so.  ``os._exit``
or a crash end the child only (``"exited"``); on Linux it may take
:data:`~._sandbox.CHILD_MEMORY_BYTES` of memory beyond the kernel's (``"memory"``); a
``KeyboardInterrupt`` or ``SystemExit`` it raises is reported, never raised in the kernel.  A
function that needs CUDA, which cannot start in a forked child, moves to a spawned worker.
Only with ``ATTNLIB_LAB_ISOLATION=inprocess``, or where no process can be started at all (the
feedback then says why), does the function run in the kernel itself: with the same watches,
plus refusals of what would end the kernel there (``os._exit``, ``os.close``, signal handlers
and timers, ``resource.setrlimit``) and the putting back of the kernel's settings, its
``sys.path``, its working directory and the code of every ``attnlib`` function; but without a
time or memory limit, and a crash in native code would end the kernel.

Unlike the rest of :mod:`attnlib.exercises` this subpackage needs torch (it runs the
learner's PyTorch code), so it is not shipped to the static page's Pyodide (only the
top-level modules of :mod:`attnlib.exercises` are) and is not imported by that package's
``__init__``; the page shows the lab's contract, its stub, the mistakes and a launch link.

Layout: :mod:`.mistakes` (:data:`MISTAKES`, what each lab names), :mod:`._sandbox` (running
the learner's function apart: child process, time limit, watches), :mod:`._core` (the
feedback type, calling the learner through the sandbox, comparing, choosing the mistake and
the input to show), and one module per lab (:mod:`.softmax`, :mod:`.attention`, :mod:`.causal`,
:mod:`.heads`, :mod:`.online`), each holding its inputs, the fingerprints of its mistakes
and its checker.

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key
width, ``d_v`` value width, ``d_model`` model width, ``d_head = d_model / H``.

>>> import attnlib, torch
>>> check_causal_mask(lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool))).correct
True
>>> check_causal_mask(attnlib.causal_mask).diagnosis  # the lab's job, done by the library
'library_call'
>>> check_softmax(lambda x, dim=-1: torch.ops.aten._safe_softmax(x, dim)).diagnosis  # refused by family
'library_call'
>>> fb = check_causal_mask(lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))
>>> fb.diagnosis, fb.message.splitlines()[0][:14]
('inverted', 'Mask inverted:')
"""
from __future__ import annotations

from ._core import ATOL, LABS, LARGE_SCORE, NAME_SCOPE, REAL_LAYER, RTOL, Lab, LabFeedback, Refusal, lab_table
from ._sandbox import CHECK_TIME_LIMIT_S, TIME_LIMIT_S
from .attention import check_attention
from .backward import check_attention_backward
from .causal import check_causal_mask
from .heads import check_split_heads
from .kv_lab import check_decode_step
from ._core import mistakes_markdown
from .mistakes import MISTAKES
from .multihead_lab import check_multi_head_attention
from .online import check_online_softmax_attention
from .rope_lab import check_apply_rope, check_rope_attention
from .softmax import check_softmax

__all__ = [
    "LabFeedback", "Lab", "Refusal", "LABS", "lab_table", "MISTAKES", "mistakes_markdown", "check_softmax", "check_attention",
    "check_causal_mask", "check_split_heads", "check_online_softmax_attention", "check_attention_backward",
    "check_multi_head_attention", "check_apply_rope", "check_rope_attention", "check_decode_step",
    "RTOL", "ATOL", "LARGE_SCORE", "REAL_LAYER", "TIME_LIMIT_S", "CHECK_TIME_LIMIT_S",
]

__doc__ = __doc__.replace("{LAB_TABLE}", lab_table([name for name in __all__ if name.startswith("check_")])).replace(
    "{NAME_SCOPE}", NAME_SCOPE.replace("`", "``"))

# Where checks run in a spawned worker (macOS, Windows), start the first one now, while the
# reader reads the lab: it imports torch in its own process, so the first check waits for nothing.
from ._sandbox import prestart as _prestart  # noqa: E402

_prestart()
