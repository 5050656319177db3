"""The circuit lab's models: chapter 6's trained language model, at 16 moments of its training,
and the one-layer control, exported to ONNX at build time and shipped with the site.

1. ``builder-inited``: :func:`attnlib.circuit_lab.write_site_files` exports each model (from the
   trained runs: the trained-model cache, or training) and checks it against
   :func:`attnlib.transformer.run` with onnxruntime; the build fails when a logit differs by more
   than ``attnlib.circuit_lab.BUILD_TOLERANCE``.  The export is cached in ``_build/tiny-model/``
   while the trained runs and the exporter are unchanged (about 5 s when it runs).  Each
   exported checkpoint's weights are kept as ``_build/tiny/<name>.pt``
   (``TinyTransformer.load`` reads them).
2. ``html-page-context``: every page gets ``<meta name="attnlib-tiny-bytes">`` (the download
   size the lab's button states: the 17 models and the runtime).
3. ``build-finished``: copies the ``.onnx`` files, ``tiny.json``, the worker
   (``attnlib/static/tiny_worker.js`` as ``worker.js``) and ``worker_common.js`` into
   ``_static/tiny/``.

Nothing here is loaded by a page until the reader presses the lab's Load button.
"""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "attnlib" / "static"
SCRIPTS = {"worker.js": STATIC / "tiny_worker.js", "worker_common.js": STATIC / "worker_common.js"}


def first_use_bytes(info: dict) -> int:
    """What the circuit lab's first Load downloads: the 17 models and the runtime."""
    from browser_model import runtime_bytes          # _ext/ is on the path of local extensions
    return sum(m["bytes"] for m in info["models"]) + runtime_bytes()


def _export(app) -> None:
    if app.builder.format != "html":
        return
    from attnlib import circuit_lab

    build = Path(app.outdir).parent
    app.attnlib_tiny_dir = build / "tiny-model" / "site"
    app.attnlib_tiny_info = circuit_lab.write_site_files(app.attnlib_tiny_dir, cache=build / "tiny-model" / "cache",
                                                         keep=build / "tiny")


def _meta(app, pagename, templatename, context, doctree) -> None:
    info = getattr(app, "attnlib_tiny_info", None)
    if info is None:
        return
    size = first_use_bytes(info)
    context["metatags"] = context.get("metatags", "") + f'\n<meta name="attnlib-tiny-bytes" content="{size}">'


def _copy(app, exception) -> None:
    if exception is not None or getattr(app, "attnlib_tiny_info", None) is None:
        return
    target = Path(app.outdir) / "_static" / "tiny"
    target.mkdir(parents=True, exist_ok=True)
    for m in app.attnlib_tiny_info["models"]:
        shutil.copyfile(app.attnlib_tiny_dir / f"{m['name']}.onnx", target / f"{m['name']}.onnx")
    shutil.copyfile(app.attnlib_tiny_dir / "tiny.json", target / "tiny.json")
    for name, source in SCRIPTS.items():
        shutil.copyfile(source, target / name)


def setup(app):
    app.connect("builder-inited", _export)
    app.connect("html-page-context", _meta)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
