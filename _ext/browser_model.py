"""The in-page model: export the course's encoder to ONNX at build time and ship it with the site.

Chapter 8's model lab (``attnlib.explorables.model_lab``) lets a reader run the pretrained
encoder on their own sentences in the published page.  This extension:

1. ``builder-inited``: exports the encoder that ``attnlib.encoder.load_encoder()`` verifies to ONNX
   (float16 weights) and checks the exported graph against ``attnlib.encoder.run`` on fixed
   sentences with onnxruntime; the build fails when an attention weight differs by more than
   ``attnlib.encoder.browser.BUILD_TOLERANCE`` (``write_site_files``).  The export is cached
   in ``_build/browser-model/`` while the model's files and the exporter are unchanged (about
   20 s when it runs).
2. ``html-page-context``: every page gets ``<meta name="attnlib-model-bytes">`` (the download
   size the lab's button states: the model, its vocabulary and the runtime, :func:`runtime_bytes`).
3. ``build-finished``: copies ``encoder.onnx``, ``vocab.txt``, ``model.json``, the worker
   (``attnlib/static/model_worker.js`` as ``worker.js``) and the tokenizer
   (``attnlib/static/wordpiece.js``) into ``_static/model/``.  onnxruntime-web itself is the
   vendored ``_static/vendor/onnxruntime-web/`` (see ``_static/vendor/README.md``).

Nothing here is loaded by a page until the reader presses "Load the model".
"""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "attnlib" / "static"
#: What a worker fetches of the vendored onnxruntime-web (measured by bench/bench_circuit_lab.py
#: and bench/bench_browser_model.py from the responses): part of a lab's first download.
RUNTIME = ROOT / "_static" / "vendor" / "onnxruntime-web"
RUNTIME_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")


def runtime_bytes() -> int:
    """Bytes of the onnxruntime-web files a lab's worker fetches on first use."""
    return sum((RUNTIME / name).stat().st_size for name in RUNTIME_FILES)
SCRIPTS = {"worker.js": STATIC / "model_worker.js", "wordpiece.js": STATIC / "wordpiece.js",
           "worker_common.js": STATIC / "worker_common.js"}


def first_use_bytes(info: dict) -> int:
    """What the lab's first Load downloads: the model, its vocabulary and the runtime (the button
    once said 45.9 MB while first use fetched 60.3 MB)."""
    return info["files"]["encoder.onnx"]["bytes"] + info["files"]["vocab.txt"]["bytes"] + runtime_bytes()


def _export(app) -> None:
    if app.builder.format != "html":
        return
    from attnlib.encoder import browser

    staging = Path(app.outdir).parent / "browser-model"
    app.attnlib_model_dir = staging / "site"
    info = browser.write_site_files(app.attnlib_model_dir, cache=staging / "cache")
    app.attnlib_model_info = info


def _meta(app, pagename, templatename, context, doctree) -> None:
    info = getattr(app, "attnlib_model_info", None)
    if info is None:
        return
    size = first_use_bytes(info)
    context["metatags"] = context.get("metatags", "") + f'\n<meta name="attnlib-model-bytes" content="{size}">'


def _copy(app, exception) -> None:
    if exception is not None or getattr(app, "attnlib_model_info", None) is None:
        return
    target = Path(app.outdir) / "_static" / "model"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("encoder.onnx", "vocab.txt", "model.json"):
        shutil.copyfile(app.attnlib_model_dir / name, target / name)
    for name, source in SCRIPTS.items():
        shutil.copyfile(source, target / name)


def setup(app):
    app.connect("builder-inited", _export)
    app.connect("html-page-context", _meta)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
