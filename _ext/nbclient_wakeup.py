"""Client-side fix: nbclient never misses a reply that arrives while it sends on the same socket.

The bug (seen as chapter 1 stalling for exactly the cell timeout in about 18 % of builds, always
in its ``ipywidgets.interact`` cell, and then carrying on as if nothing had happened):

1. nbclient waits for a cell's ``execute_reply`` with ``await shell_channel.get_msg(timeout)``,
   an asyncio poll of the shell socket (``zmq.asyncio.Socket``).  pyzmq's asyncio layer wakes
   up when the socket's ``ZMQ_FD`` becomes readable.  That descriptor is *edge-triggered*: it
   signals a change of the socket's state once, and whoever processes the socket's pending
   commands next (any send, recv or ``ZMQ_EVENTS`` read) consumes the signal.
2. Meanwhile nbclient handles the cell's IOPub messages.  Its Output-widget stand-in
   (``nbclient/output_widget.py``) answers each output with a ``comm_msg`` on the *same* shell
   socket, through ``Session.send``, which sends on a raw ``zmq.Socket.shadow`` of the asyncio
   socket, bypassing pyzmq's asyncio bookkeeping.
3. When the reply has just arrived, that raw send consumes its wake-up.  The asyncio poll is
   never told, and only notices the waiting reply when its timeout fires (nbclient then finds
   the reply and continues: a silent stall of exactly the per-cell timeout).

The fix: after every ``Session.send`` / ``send_raw`` / ``recv`` on an asyncio socket, read the
socket's ``ZMQ_EVENTS`` through the asyncio socket itself.  pyzmq's ``zmq.asyncio.Socket.get``
then schedules its own event handler when a waiting poll or recv can now complete
(``_AsyncSocket.get`` -> ``_schedule_remaining_events``), which is exactly the re-check that
the raw send skipped.  Nothing else changes: messages, their order and timeouts are untouched.

Loaded by every path that executes notebooks:

* the book build (``make html`` / ``make book``): ``_config.yml`` lists this module as a Sphinx
  local extension, imported in the process where MyST-NB runs nbclient;
* ``make chapter``: ``_ext/execute_notebook.py``;
* ``bench/bench_book.py``: through ``_ext/execute_notebook.py``.

Tested by ``tests/test_nbclient_wakeup.py`` (a deterministic reproduction of the lost wake-up
with the installed jupyter_client and pyzmq, and repeated executions of an Output widget).

When to delete this module: when the upstream fixes are released and pinned in
``constraints.txt`` -- jupyter_client PR #1059 (``Session.send`` stops bypassing the asyncio
socket), or nbclient issue #312 / PR #311 (the Output widget stand-in), also reported as
nbconvert issue #2029.  ``tests/test_nbclient_wakeup.py::test_bug_still_reproduces_without_fix``
fails on that day and says so; then remove this file, its entry under ``local_extensions`` in
``_config.yml``, its import in ``_ext/execute_notebook.py``, and that test file.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import time

import zmq
import zmq.asyncio
from jupyter_client.session import Session

__all__ = ["install", "uninstall", "installed", "recheck_events", "count_lost_wakeups"]

_ORIGINALS: dict[str, object] = {}
_PATCHED = ("send", "send_raw", "recv")   # the Session methods that use a raw shadow socket


def recheck_events(socket) -> None:
    """Re-read ``ZMQ_EVENTS`` of an asyncio ``socket`` so pyzmq wakes its waiting polls/recvs.

    Does nothing for a socket that is not a ``zmq.asyncio.Socket``, is closed, or has never been
    awaited on (pyzmq has then registered no event loop for it).  From another thread than the
    socket's event loop, the re-check is handed to that loop.
    """
    if not isinstance(socket, zmq.asyncio.Socket) or socket.closed:
        return
    # pyzmq keeps the loop its reader is registered with here (None: never used with await)
    loop = getattr(socket, "_current_loop", None)
    if loop is None or loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        socket.get(zmq.EVENTS)   # zmq.asyncio.Socket.get(EVENTS) schedules the pending handlers
    else:
        loop.call_soon_threadsafe(_recheck_if_open, socket)


def _recheck_if_open(socket) -> None:
    if not socket.closed:
        socket.get(zmq.EVENTS)


def _wrap(name: str, original):
    @functools.wraps(original)
    def wrapper(self, stream, *args, **kwargs):
        try:
            return original(self, stream, *args, **kwargs)
        finally:
            recheck_events(stream)
    wrapper.__wrapped_by_nbclient_wakeup__ = True
    return wrapper


def install() -> None:
    """Patch ``jupyter_client.session.Session`` (idempotent; process-wide)."""
    if _ORIGINALS:
        return
    for name in _PATCHED:
        original = getattr(Session, name)
        _ORIGINALS[name] = original
        setattr(Session, name, _wrap(name, original))


def uninstall() -> None:
    """Undo :func:`install` (the tests measure the behaviour without the fix)."""
    for name, original in _ORIGINALS.items():
        setattr(Session, name, original)
    _ORIGINALS.clear()


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return bool(_ORIGINALS) and all(
        getattr(getattr(Session, n), "__wrapped_by_nbclient_wakeup__", False) for n in _PATCHED)


@contextlib.contextmanager
def count_lost_wakeups():
    """Count the lost wake-ups in the ``with`` block (a diagnostic for tests and benchmarks).

    Yields a list that receives one entry (the seconds waited) for each
    ``AsyncZMQSocketChannel.get_msg(timeout=t)`` that returned a message only after waiting its
    whole timeout ``t``: the message was there, but the asyncio poll was not woken for it.  (A
    slow reply returns before ``t``; one later than ``t`` makes ``get_msg`` raise
    ``queue.Empty``.)
    """
    from jupyter_client.channels import AsyncZMQSocketChannel

    original = AsyncZMQSocketChannel.get_msg
    lost: list[float] = []

    async def get_msg(self, timeout=None):
        t0 = time.monotonic()
        msg = await original(self, timeout)
        waited = time.monotonic() - t0
        # pyzmq's poll timer fires no earlier than int(timeout * 1000) ms: a message returned
        # after that long was only seen when the timer fired (a slow reply returns earlier)
        if timeout is not None and timeout > 0 and waited >= int(timeout * 1000) / 1000:
            lost.append(waited)
        return msg

    AsyncZMQSocketChannel.get_msg = get_msg
    try:
        yield lost
    finally:
        AsyncZMQSocketChannel.get_msg = original


def setup(app):
    """Sphinx entry point (``local_extensions`` in ``_config.yml``): MyST-NB executes the
    chapters with nbclient in the Sphinx process, so the patch covers the whole book build."""
    install()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
