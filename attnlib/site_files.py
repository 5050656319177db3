"""What every in-page model writes for the published site, written one way.

The book ships two models that run in the reader's browser (chapter 9's encoder,
:mod:`attnlib.encoder.browser`; chapter 7's circuit lab, :mod:`attnlib.circuit_export`), and the
pretrained language model will be a third.  Each exports ONNX files, checks them against
PyTorch, and describes them in one JSON file the page's worker reads first.  :func:`write` is
that sequence once: the export runs in a cache folder named by a key of what it reads, and a
later build with the same key copies the cached files instead of exporting again.

A cache entry is complete or absent: the export writes into a temporary folder that one
``rename`` turns into the entry, after its description (the JSON file, written last) is in
place, so a build stopped mid-export leaves no entry a later build could take for a finished one.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["write", "code_digest"]


def write(folder, *, key: str, info_name: str, produce, cache=None, keep=None) -> dict:
    """Write one in-page model's files into ``folder`` and return its description.

    Args:
        folder: where the site's files go (created).
        key: what decides the files (the exporter's inputs, hashed); names the cache entry.
        info_name: the description's file name (e.g. ``"tiny.json"``), written by ``write``.
        produce: ``produce(target: Path) -> dict``: exports every file into ``target`` and returns
            the description, whose ``"files"`` (a list of names, or a dict keyed by them) names
            the files the site needs besides ``info_name``.  Anything else it writes into ``target`` stays in the cache only
            (``keep`` copies its ``weights/`` folder).
        cache: a folder for cache entries (``<cache>/<key>/``); without it, every call exports.
        keep: a folder that receives the ``weights/`` files of the entry, if any.

    Returns:
        the description (the JSON file's content).

    Raises:
        whatever ``produce`` raises (a failed check); then no cache entry is left behind.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entry = Path(cache) / key if cache is not None else None
    if entry is None or not (entry / info_name).is_file():
        parent = Path(cache) if cache is not None else folder.parent
        parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=parent))
        try:
            info = produce(scratch)
            if not isinstance(info, dict) or not isinstance(info.get("files"), (list, dict)):
                raise TypeError(f"produce must return a dict whose 'files' names the site's files, got {type(info).__name__}")
            (scratch / info_name).write_text(json.dumps(info, indent=1), encoding="utf-8")
            if entry is None:
                entry = scratch
            else:
                try:
                    os.rename(scratch, entry)
                except OSError:                         # another build finished the same entry first
                    shutil.rmtree(scratch, ignore_errors=True)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    info = json.loads((entry / info_name).read_text(encoding="utf-8"))
    for name in [*info["files"], info_name]:
        shutil.copyfile(entry / name, folder / name)
    if keep is not None and (entry / "weights").is_dir():
        keep = Path(keep)
        keep.mkdir(parents=True, exist_ok=True)
        for path in (entry / "weights").iterdir():
            shutil.copyfile(path, keep / path.name)
    if cache is None:
        shutil.rmtree(entry, ignore_errors=True)
    return info


def code_digest(source: str) -> str:
    r"""SHA-256 of a module's code with its docstrings and comments left out (its AST without the
    string that opens a module, class or function), so that rewording documentation does not
    change it.

    >>> code_digest('def f():\n    "Doc."\n    return 1  # note') == code_digest('def f():\n    return 1')
    True
    """
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()
