"""Write the learners' notebooks: one ``.ipynb`` per chapter (and the preface) in ``_build/notebooks/``.

The chapters are MyST Markdown notebooks written for the book.  Opened as they are in JupyterLab
(jupytext), a learner sees raw MyST (``{glue:text}`` placeholders, directive fences, solutions in
plain sight, answer-checking ``remove-cell`` asserts) and every save rewrites the chapter
source.  This build tool writes a separate notebook per page instead, from the same sources and
the same executed run as the book.  It is the entry point; the work is done by three modules
beside it:

* ``notebook_run.py``, the execution step: the outputs and glued values of each page, from
  myst-nb's executed notebooks of the book build (``_build/jupyter_execute``, with their
  ``.glue.json``) when their code matches the sources, otherwise from executing the page here
  with nbclient (``_ext/execute_notebook.py``: the book's per-cell timeout and the nbclient
  wake-up fix).
* ``notebook_convert.py``, the converter: MyST Markdown and those outputs -> the learner's
  notebook (prose rendered as on the page, glued values filled in, solutions folded,
  plumbing collapsed, widget views replaced by a note to run the cell, ``from myst_nb import
  glue`` replaced by a stand-in so the notebooks run without the book tools).
* ``learner_files.py``, the rules that protect what a learner saved: a notebook the learner
  edited (its cells' sources, not its outputs: see ``fingerprint``) is never overwritten; the
  new version goes to a ``.new`` (then dated ``.new-<UTC time>``) copy beside it and a line
  names the files kept; ``--clean`` deletes only unedited notebooks.

The notebooks are signed (``nbformat.sign``) so that their HTML outputs (explorables, bertviz)
are trusted in the Jupyter of the user who built them, and JupyterLab in this environment is
set to save widget state with a notebook (:func:`save_widget_state_setting`).

Usage::

    .venv/bin/python _ext/make_notebooks.py [--executed _build/jupyter_execute] [--out DIR] [--clean] [PAGE ...]

``make notebooks`` runs it (``make clean`` with ``--clean``); Binder's ``postBuild`` runs it in the
lean learner environment.  The names other code imports from here (``toc_pages``,
``learner_outputs``, ``HEAVY_MIB``, ``MystToMarkdown`` ...) are re-exported from those modules.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# Re-exported: tests, bench/readme_figures.py and _ext/preexecute.py import these from here.
from learner_files import (  # noqa: E402,F401
    clean, fingerprint, learner_changed, new_version_path, new_versions, save_learner_notebook, write_notebook)
from notebook_convert import (  # noqa: E402,F401
    BINDER_CAP, BINDER_CPUS, BINDER_GUARANTEE, BINDER_RECORD, BINDER_SOURCE, GLUE_PREFIX, GLUE_SHIM, HEAVY_MIB,
    MODEL_CACHE_RECORD, RECORD_ENV, WIDGET_VIEW, GlueError, MystToMarkdown, book_labels, convert,
    format_plain_text, glue_outputs, header_cell, learner_outputs, learner_source, memory_note, notebook_name,
    only_applies, read_bib, reference_line, select_included, single_png, toc_pages, training_note)
from notebook_run import EXECUTED, code_only, executed_run  # noqa: E402,F401

OUT = ROOT / "_build" / "notebooks"


def build_notebook(page: str, executed_dir: Path | None = EXECUTED, timeout: int | None = None, log=print):
    """The learner notebook of ``page`` (e.g. ``"chapters/05_masking"``) as an nbformat node:
    its run (:func:`notebook_run.executed_run`) converted (:func:`notebook_convert.convert`)."""
    import jupytext
    source_nb = jupytext.read(ROOT / f"{page}.md")
    outputs, glue = executed_run(page, source_nb, executed_dir, timeout, log)
    return convert(page, source_nb, outputs, glue, log)


# --------------------------------------------------------------------------------------------
# JupyterLab in this environment
# --------------------------------------------------------------------------------------------

#: JupyterLab's ipywidgets setting that saves the widgets' state into the notebook on save.
#: With it, a reopened notebook draws its exercises from the saved state, disconnected from any
#: kernel, and the exercise's own note ("... run this cell again") shows; without it, JupyterLab
#: shows "Loading widget..." where each exercise was.
WIDGET_SETTINGS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}


def widget_settings_file() -> Path:
    """This environment's JupyterLab defaults for packages (``<app dir>/settings/overrides.d/``,
    read by jupyterlab_server; a learner's own settings still win)."""
    try:
        from jupyterlab.commands import get_app_dir
        app_dir = Path(get_app_dir())
    except ImportError:
        app_dir = Path(sys.prefix) / "share" / "jupyter" / "lab"
    return app_dir / "settings" / "overrides.d" / "attnlib-course.json"


def save_widget_state_setting(log=None) -> Path | None:
    """Write :data:`WIDGET_SETTINGS` into :func:`widget_settings_file` (once)."""
    log = log or print
    path = widget_settings_file()
    try:
        if path.is_file() and json.loads(path.read_text()) == WIDGET_SETTINGS:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(WIDGET_SETTINGS, indent=2) + "\n")
    except (OSError, ValueError) as err:
        log(f"(JupyterLab will not save the exercises' state: {err})")
        return None
    log(f"JupyterLab in this environment now saves widget state with a notebook ({path}): "
        "a reopened notebook shows its exercises with a note to run the cell")
    return path



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="*", help="pages of _toc.yml (default: all but the bibliography)")
    ap.add_argument("--out", default=str(OUT), help="output folder (default: _build/notebooks)")
    ap.add_argument("--executed", default=str(EXECUTED),
                    help="myst-nb's executed notebooks to reuse when they match (default: _build/jupyter_execute); "
                         "'' to execute every page here")
    ap.add_argument("--timeout", type=int, help="per-cell timeout in seconds (default: the book's)")
    ap.add_argument("--no-sign", action="store_true", help="do not sign the notebooks (outputs untrusted)")
    ap.add_argument("--clean", action="store_true",
                    help="delete the notebooks written here that nobody changed; keep (and name) the others "
                         "(needs only the standard library)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.clean:
        clean(out)
        return 0
    pages = [p.removesuffix(".md") for p in args.pages] or toc_pages()
    executed = Path(args.executed) if args.executed else None
    save_widget_state_setting()
    written = []
    for page in pages:
        nb = build_notebook(page, executed, args.timeout)
        path = save_learner_notebook(nb, out / notebook_name(page), sign=not args.no_sign)
        print(f"wrote {path}")
        written.append(path)
    print(f"wrote {len(written)} notebook{'' if len(written) == 1 else 's'} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
