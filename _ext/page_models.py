"""The models that run in the published page, exported at build time and shipped with the site.

One extension for every in-page model (:data:`MODELS`): chapter 9's encoder
(:mod:`attnlib.encoder.browser`, into ``_static/model/``), chapter 7's circuit lab
(:mod:`attnlib.circuit_export`, into ``_static/tiny/``) and chapter 10's language model
(:mod:`attnlib.lm_export`, into ``_static/lm/``).  For each:

1. ``builder-inited``: its ``write_site_files`` exports the model to ONNX and checks the export
   against the kernel's ``run`` with onnxruntime; the build fails when the check fails.  The
   export is cached in ``_build/<staging>/cache/`` (:func:`attnlib.site_files.write`) while what
   it reads is unchanged.
2. ``html-page-context``: every page gets ``<meta name="attnlib-<name>-bytes">``, the download
   size the lab's button states (the model's files and the runtime, :func:`first_use_bytes`).
3. ``build-finished``: copies the model's files, its description and its worker scripts
   (``attnlib/static/``: the worker as ``worker.js``, ``worker_common.js``, ``edits.js``, ...)
   into ``_static/<folder>/``.  onnxruntime-web itself is the vendored
   ``_static/vendor/onnxruntime-web/`` (see ``_static/vendor/README.md``).

Nothing here is loaded by a page until the reader presses a lab's Load button.
"""

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "attnlib" / "static"
#: What a worker fetches of the vendored onnxruntime-web (measured by bench/bench_circuit_lab.py
#: and bench/bench_browser_model.py from the responses): part of a lab's first download.
RUNTIME = ROOT / "_static" / "vendor" / "onnxruntime-web"
RUNTIME_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
#: The scripts every model's worker loads beside its own.
COMMON_SCRIPTS = ("worker_common.js", "edits.js")


def runtime_bytes() -> int:
    """Bytes of the onnxruntime-web files a lab's worker fetches on first use."""
    return sum((RUNTIME / name).stat().st_size for name in RUNTIME_FILES)


def _write_encoder(site: Path, build: Path) -> dict:
    from attnlib.encoder import browser
    return browser.write_site_files(site, cache=build / "browser-model" / "cache")


def _write_lm(site: Path, build: Path) -> dict:
    from attnlib import lm_export
    return lm_export.write_site_files(site, cache=build / "lm-model" / "cache")


def _write_tiny(site: Path, build: Path) -> dict:
    from attnlib import circuit_export
    return circuit_export.write_site_files(site, cache=build / "tiny-model" / "cache", keep=build / "tiny")


@dataclass(frozen=True)
class PageModel:
    """One in-page model: its name (the meta tag's), its folder under ``_static/``, the staging
    folder under ``_build/``, the function that writes its site files, its description's file
    name and its worker script (``attnlib/static/``, served as ``worker.js``) and extra scripts."""

    name: str
    folder: str
    staging: str
    write: object
    info_name: str
    worker: str
    scripts: tuple = field(default=())

    def scripts_to_copy(self) -> dict:
        return {"worker.js": STATIC / self.worker,
                **{name: STATIC / name for name in (*COMMON_SCRIPTS, *self.scripts)}}


MODELS = (
    PageModel("model", "model", "browser-model", _write_encoder, "model.json", "model_worker.js", ("wordpiece.js",)),
    PageModel("tiny", "tiny", "tiny-model", _write_tiny, "tiny.json", "tiny_worker.js"),
    PageModel("lm", "lm", "lm-model", _write_lm, "lm.json", "lm_worker.js", ("bpe.js",)),
)


def copy_scripts(name: str, target) -> None:
    """Copy the worker scripts of the in-page model ``name`` into ``target``, as the build does
    (the tests and benches that assemble a site use it too)."""
    model = next((m for m in MODELS if m.name == name), None)
    if model is None:
        raise ValueError(f"no in-page model {name!r}; there are {[m.name for m in MODELS]}")
    for file, source in model.scripts_to_copy().items():
        shutil.copyfile(source, Path(target) / file)


def model_files(info: dict) -> list:
    """The names of a model's files in its description (``files``: a list, or a dict by name)."""
    return list(info["files"])


def first_use_bytes(info: dict, site: Path | None = None) -> int:
    """What a lab's first Load downloads: the model's files and the runtime (the encoder's
    button once said 45.9 MB while first use fetched 60.3 MB).  The sizes come from the
    description (``files`` with ``bytes``, or ``models`` with ``bytes``)."""
    if isinstance(info["files"], dict):
        size = sum(f["bytes"] for f in info["files"].values())
    else:
        size = sum(m["bytes"] for m in info["models"])
    return size + runtime_bytes()


def _export(app) -> None:
    if app.builder.format != "html" or os.environ.get("ATTNLIB_PAGE_MODELS") == "off":
        return                              # off: make check's reading of references only
    build = Path(app.outdir).parent
    app.attnlib_page_models = {}
    for m in MODELS:
        site = build / m.staging / "site"
        app.attnlib_page_models[m.name] = (site, m.write(site, build))


def _meta(app, pagename, templatename, context, doctree) -> None:
    for m in MODELS:
        entry = getattr(app, "attnlib_page_models", {}).get(m.name)
        if entry is not None:
            context["metatags"] = context.get("metatags", "") + \
                f'\n<meta name="attnlib-{m.name}-bytes" content="{first_use_bytes(entry[1])}">'


def _copy(app, exception) -> None:
    if exception is not None:
        return
    for m in MODELS:
        entry = getattr(app, "attnlib_page_models", {}).get(m.name)
        if entry is None:
            continue
        site, info = entry
        target = Path(app.outdir) / "_static" / m.folder
        target.mkdir(parents=True, exist_ok=True)
        for name in (*model_files(info), m.info_name):
            shutil.copyfile(site / name, target / name)
        for name, source in m.scripts_to_copy().items():
            shutil.copyfile(source, target / name)


def setup(app):
    app.connect("builder-inited", _export)
    app.connect("html-page-context", _meta)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
