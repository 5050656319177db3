"""Trained models kept on disk, so that each is trained once and every later process loads it.

Chapter 7's language models take from under half a minute to a few minutes to train on a laptop
CPU (bench/results/model_cache.md).  The book build,
the tests, the learners' notebooks and Binder all need the same runs; this cache lets the first
process that trains a run store it and every later one load it in a fraction of a second.

An entry is keyed on everything that decides the result of a run (:func:`entry_key`):

* the run's configuration (for :func:`attnlib.induction.train`, its :class:`TrainConfig`:
  layers, heads, seed, steps, width, batch, learning rate, vocabulary, device type);
* the source of the code that trains and runs the model (the files named by
  :data:`attnlib.induction.TRAINING_SOURCES`, the training text included), as a SHA-256;
* the PyTorch version.

Change any of them and the key changes: the old entry is simply never read again.

Where it lives (:func:`cache_dir`): the folder named by the environment variable
``ATTNLIB_CACHE`` when it is set (CI's ``.ci/run`` sets it to the clone's ``_build/cache`` for the
book, the tests and the Binder test; the Makefile does not), otherwise the user's cache folder,
``$XDG_CACHE_HOME/attnlib`` or ``~/.cache/attnlib`` (on mybinder.org that is inside the image,
so the models trained while the image was built are there when a learner's session starts).
Set ``ATTNLIB_CACHE=off`` to neither read nor write.

An entry is one folder, ``<cache>/models/<key>/``, holding ``model.pt`` (``torch.save``; read
back with ``weights_only=True``, so it can hold tensors and plain data only, never code) and
``entry.json`` (the SHA-256 and size of ``model.pt``, what produced it, from which sources,
when).  :func:`store` writes both into a temporary folder and renames the folder into place in
one step, so a reader sees a whole entry or none, never a ``model.pt`` of one run beside the
record of another; if two processes store the same run at once, the first rename wins and the
second discards its copy.  Entries are readable by the group and others as the umask allows
(not 0600): a cache shared by a course's accounts works.  Storing an entry deletes the entries of
the same kind trained from other sources or another torch, which no key can reach any more (the
cache keeps one generation), and the leftovers of writes killed more than an hour ago; it never
deletes a lock another process holds.  :func:`load` checks the size, the digest and the key
recorded inside the file before it trusts an entry; an entry that fails is reported (one warning
naming the file and the reason) and treated as missing, so the run is trained again and stored
afresh.  A folder that cannot be written costs a warning, never a failed run.  A process about
to train a run first takes the entry's lock (:func:`lock`, ``<key>.lock`` beside the entry), so
that when several processes need the same run at once (the test workers, a notebook kernel),
one trains it and the others wait and then load it.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import contextlib
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

__all__ = ["ENV", "cache_dir", "source_digest", "file_sha256", "entry_key", "entry_path", "load", "store", "lock"]

#: The environment variable that names the cache folder (``off`` disables the cache).
ENV = "ATTNLIB_CACHE"
#: Bump when the layout of an entry changes (2: one folder per entry, renamed into place whole).
FORMAT = 2
#: Temporary folders of a write older than this (seconds) belong to a killed process.
STALE_WRITE_SECONDS = 3600


def cache_dir() -> Path | None:
    """The cache folder: ``$ATTNLIB_CACHE``, else ``$XDG_CACHE_HOME/attnlib``, else
    ``~/.cache/attnlib``; ``None`` when ``ATTNLIB_CACHE`` is ``off`` (or ``0``, ``none``)."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() in {"off", "0", "none", "false"}:
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "attnlib"


def source_digest(paths) -> str:
    """SHA-256 over the bytes of ``paths`` (each file's name and content, in the order given).

    Raises:
        FileNotFoundError: a path does not exist.
    """
    h = hashlib.sha256()
    for path in paths:
        path = Path(path)
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def file_sha256(path) -> str:
    """The SHA-256 of a file, hex, read in 1 MiB chunks.

    Raises:
        FileNotFoundError: no such file.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_key(kind: str, config: dict, sources) -> str:
    """The key of a run: a SHA-256 (first 32 hex digits) of ``kind``, ``config`` (a
    JSON-serialisable dict), :func:`source_digest` of ``sources`` (or ``sources`` itself when it
    is already a digest, a str) and ``torch.__version__``.

    Raises:
        TypeError: ``config`` not JSON-serialisable.
    """
    digest = sources if isinstance(sources, str) else source_digest(sources)
    blob = json.dumps({"format": FORMAT, "kind": kind, "config": config, "source": digest,
                       "torch": torch.__version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def entry_path(key: str) -> Path | None:
    """Where the entry ``key``'s weights live (``<cache>/models/<key>/model.pt``), ``None`` with
    the cache off.  The entry is the folder ``entry_path(key).parent``."""
    folder = cache_dir()
    return None if folder is None else folder / "models" / key / "model.pt"


def load(key: str):
    """The payload stored under ``key``, or ``None`` when there is none (or the cache is off).

    An entry whose size, SHA-256 or recorded key does not match, or that cannot be read, gives
    one ``UserWarning`` that names the file and the reason, and ``None``.
    """
    path = entry_path(key)
    if path is None or not path.parent.is_dir():
        return None
    try:
        meta = json.loads((path.parent / "entry.json").read_text(encoding="utf-8"))
        data = path.read_bytes()
        if len(data) != meta["bytes"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise ValueError("its size or SHA-256 differs from the record in entry.json")
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if not isinstance(payload, dict) or payload.get("key") != key:
            raise ValueError("the key recorded inside it is not its folder's name")
    except Exception as err:                      # a damaged or foreign entry: train again
        warnings.warn(f"ignoring the cached model {path}: {err}; it will be trained again", stacklevel=2)
        return None
    return payload


def _intact(entry: Path, key: str) -> bool:
    """Whether the entry folder's weights match its record and its key (no warning)."""
    try:
        meta = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
        data = (entry / "model.pt").read_bytes()
        return meta.get("key") == key and len(data) == meta["bytes"] and hashlib.sha256(data).hexdigest() == meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def store(key: str, payload: dict, *, describe: dict | None = None) -> Path | None:
    """Write ``payload`` (a dict of tensors and plain data; ``key`` is added to it) as the
    entry ``key``, atomically (one folder renamed into place).  Returns the path of its weights,
    or ``None`` when the cache is off or the folder cannot be written (then a ``UserWarning``
    says why)."""
    path = entry_path(key)
    if path is None:
        return None
    buffer = io.BytesIO()
    torch.save({**payload, "key": key}, buffer)
    data = buffer.getvalue()
    meta = {"key": key, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "torch": torch.__version__, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(describe or {})}
    models = path.parent.parent
    try:
        models.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=models, prefix=f".{key}.", suffix=".tmp"))
        try:
            os.chmod(scratch, 0o777 & ~_umask())              # mkdtemp makes 0700
            (scratch / "model.pt").write_bytes(data)          # open() honours the umask (not 0600)
            (scratch / "entry.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
            try:
                os.rename(scratch, path.parent)               # the whole entry appears at once
            except OSError:
                if not path.parent.is_dir():                  # not "another process stored it first"
                    raise
                if not _intact(path.parent, key):             # a damaged entry: set it aside, then replace it
                    aside = Path(tempfile.mkdtemp(dir=models, prefix=f".{key}.", suffix=".tmp")) / "old"
                    os.rename(path.parent, aside)
                    os.rename(scratch, path.parent)
                    shutil.rmtree(aside.parent, ignore_errors=True)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch, ignore_errors=True)
    except OSError as err:
        warnings.warn(f"could not store the trained model in {models}: {err}", stacklevel=2)
        return None
    _forget_stale(path.parent, meta)
    return path


def _remove_lock_if_free(lock_path: Path) -> None:
    """Delete a stale entry's lock file only while holding it: a lock another process holds (or
    waits for) is left alone."""
    try:
        import fcntl
        with open(lock_path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock_path.unlink()
    except (ImportError, OSError):
        pass


def _forget_stale(entry: Path, meta: dict) -> None:
    """Delete the entries of the same kind (``what``) trained from other sources (``source``, a
    digest) or another torch: no key can reach them again while the code stays as it is, so the
    cache holds one generation of each kind instead of growing with every edit.  Also delete the
    temporary folders of writes older than :data:`STALE_WRITE_SECONDS` (a process killed while
    writing) and the files of the first layout (``<key>.pt`` and ``<key>.json``)."""
    what, source = meta.get("what"), meta.get("source")
    models = entry.parent
    now = time.time()
    for other in models.iterdir():
        try:
            if other.name.startswith(".") and other.name.endswith(".tmp"):
                if now - other.stat().st_mtime > STALE_WRITE_SECONDS:
                    shutil.rmtree(other, ignore_errors=True) if other.is_dir() else other.unlink()
                continue
            if other.suffix == ".json" and other.is_file():          # the first layout's record
                old = json.loads(other.read_text(encoding="utf-8"))
                if old.get("what") == what:
                    other.with_suffix(".pt").unlink(missing_ok=True)
                    other.unlink()
                    _remove_lock_if_free(other.with_suffix(".lock"))
                continue
            if not other.is_dir() or other == entry:
                continue
            old = json.loads((other / "entry.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if what and source and old.get("what") == what and (old.get("source") != source
                                                            or old.get("torch") != meta.get("torch")):
            shutil.rmtree(other, ignore_errors=True)
            _remove_lock_if_free(models / f"{other.name}.lock")


@contextlib.contextmanager
def lock(key: str, *, waiting: str | None = None):
    """Hold the entry ``key``'s lock (an exclusive ``flock`` on ``<cache>/models/<key>.lock``)
    for the duration of the ``with`` block.  When another process holds it, ``waiting`` (if
    given) is printed once, then the call blocks until the lock is free.  Without a cache, on a
    system without ``fcntl`` (Windows), or where the folder cannot be written, it holds nothing."""
    path = entry_path(key)
    try:
        import fcntl
        if path is None:
            raise OSError("the cache is off")
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.parent.parent / f"{key}.lock", "a+")
    except (ImportError, OSError):
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            if waiting:
                print(waiting, file=sys.stdout, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
