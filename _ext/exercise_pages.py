"""Sphinx extension: exercises graded in the page, and the widget manager only where needed.

1. ``build-finished``: writes ``_static/exercises/`` into the book: ``exercises.js`` and
   ``exercises.css`` (from ``attnlib/static/``) and ``graders.json``, the source of the pure
   grader modules of ``attnlib/exercises`` (every module but ``widgets.py``), which the
   script writes into the vendored Pyodide (``_static/vendor/pyodide/``) on a reader's first
   interaction.  The notebook runs the very same files: one source of truth for grading.
2. ``html-page-context``: a page whose body holds an exercise (``data-exercise=``) gets the
   script and the stylesheet; other pages get neither.
3. ``html-page-context``: a page with no widget view in its body (no
   ``application/vnd.jupyter.widget-view+json``) does not load the Jupyter widget manager
   (require.js and embed-amd.js from ``nb_ipywidgets_js``) nor the widget state, which
   MyST-NB adds to every page whose notebook created a widget, even when the page shows the
   exercise's HTML instead (``nb_mime_priority_overrides`` puts ``text/html`` first).
4. ``setup``: sets ``ATTNLIB_STATIC_BOOK=1`` in the environment that the kernels executing
   the chapters inherit, so that ``attnlib.induction.train`` prints one line per run instead of a
   progress-bar widget (which would bring the widget manager back to chapter 7).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attnlib"
ASSETS = ("exercises.js", "grader_worker.js", "exercises.css")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_SCRIPTS = ("vendor/requirejs/require.js", "vendor/html-manager/embed-amd.js")


def grader_paths() -> list[str]:
    """Paths (relative to ``attnlib/``) of the modules the browser needs: every module of
    ``attnlib/exercises`` except the ipywidgets front end."""
    return sorted(f"exercises/{p.name}" for p in (PACKAGE / "exercises").glob("*.py") if p.name != "widgets.py")


def write_assets(static_dir: Path) -> Path:
    """Write ``exercises/{exercises.js, exercises.css, graders.json}`` under ``static_dir``
    (a book's ``_static``); returns that folder."""
    out = Path(static_dir) / "exercises"
    out.mkdir(parents=True, exist_ok=True)
    for name in ASSETS:
        shutil.copyfile(PACKAGE / "static" / name, out / name)
    sources = {p: (PACKAGE / p).read_text(encoding="utf-8") for p in grader_paths()}
    (out / "graders.json").write_text(json.dumps(sources), encoding="utf-8")
    return out


def _name(js) -> str:
    return str(getattr(js, "filename", js) or "")


def _page(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body") or ""
    if "data-exercise=" in body:
        app.add_css_file("exercises/exercises.css")
        app.add_js_file("exercises/exercises.js", defer="defer")
    files = context.get("script_files")
    if isinstance(files, list) and WIDGET_VIEW not in body:
        context["script_files"] = [
            js for js in files
            if not _name(js).endswith(WIDGET_SCRIPTS)
            and getattr(js, "attributes", {}).get("type") != WIDGET_STATE
        ]


def _finished(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        write_assets(Path(app.outdir) / "_static")


def setup(app):
    os.environ["ATTNLIB_STATIC_BOOK"] = "1"  # attnlib.transformer.STATIC_BOOK_ENV
    app.connect("html-page-context", _page, priority=800)
    app.connect("build-finished", _finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


def write_standalone(folder: Path, keys=None) -> Path:
    """A small site with every exercise (or those in ``keys``, ``(chapter, name)`` pairs) on
    one page, graded exactly as in the book: ``index.html``, ``_static/exercises/`` and
    ``_static/vendor/pyodide`` (a link to the vendored copy).  For the browser tests and
    ``bench/bench_exercises.py``; runs the encoder for the exercises that read it.  Returns
    the path of ``index.html``."""
    from attnlib.exercises import REGISTRY
    from attnlib.exercises.page import render_html

    folder = Path(folder)
    static = folder / "_static"
    write_assets(static)
    vendor = static / "vendor"
    vendor.mkdir(parents=True, exist_ok=True)
    link = vendor / "pyodide"
    if not link.exists():
        link.symlink_to(ROOT / "_static" / "vendor" / "pyodide", target_is_directory=True)
    keys = keys or [(c, n) for c in sorted(REGISTRY) for n in REGISTRY[c]]
    body = "\n".join(render_html(c, n) for c, n in keys)
    page = folder / "index.html"
    page.write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>Exercises</title><link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="_static/exercises/exercises.css">'
        '<script defer src="_static/exercises/exercises.js"></script>'
        f"</head><body><main>{body}</main></body></html>", encoding="utf-8")
    return page
