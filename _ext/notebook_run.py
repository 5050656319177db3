"""The execution step: the outputs of every code cell of a page, and its glued values.

:func:`executed_run` reuses myst-nb's executed notebook of the book build
(``_build/jupyter_execute/<page>.ipynb`` and its ``.glue.json``) when its code cells are the
page's current code cells; otherwise it runs the page's code cells, in learner form
(:func:`code_only`: the glue stand-in records the values as ``myst_nb.glue`` does), in a fresh
kernel with nbclient through ``execute_notebook.execute_chapter`` (the book's per-cell timeout
and the nbclient wake-up fix), in the page's folder so that relative paths resolve as in the book.

The outputs it returns are raw; ``notebook_convert.convert`` turns them into the learner's.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from notebook_convert import RECORD_ENV, glue_outputs, learner_source  # noqa: E402

EXECUTED = ROOT / "_build" / "jupyter_execute"
#: Jupyter Book's execution cache (``execute_notebooks: cache`` in _config.yml).
JUPYTER_CACHE = ROOT / "_build" / ".jupyter_cache"


def cached_outputs(nb, cache_dir: Path = JUPYTER_CACHE):
    """``nb`` with the outputs jupyter-cache keeps for its code, or None.  In cache mode myst-nb
    writes ``_build/jupyter_execute/<page>.ipynb`` without outputs (they live in the cache), so
    a learner's notebook made from that file alone would have none."""
    if not cache_dir.is_dir():
        return None
    try:
        from jupyter_cache import get_cache
        _, merged = get_cache(str(cache_dir)).merge_match_into_notebook(nb)
    except Exception:  # noqa: BLE001 - no record for this code (KeyError), an old cache, ...: execute instead
        return None
    return merged


def code_only(nb):
    """A copy of ``nb`` with only its code cells (what gets executed), in learner form."""
    import nbformat
    out = nbformat.v4.new_notebook(metadata=copy.deepcopy(nb.metadata))
    out.metadata.pop("jupytext", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(learner_source(cell.source), metadata=copy.deepcopy(cell.metadata))
            out.cells.append(new)
    return out


def executed_run(page: str, source_nb, executed_dir: Path | None, timeout: int | None, log) -> tuple[list, dict]:
    """The outputs of every code cell of ``page`` (in order) and its glued values.

    Reuses myst-nb's executed notebook of the book build when its code cells are the page's
    current code cells; otherwise executes the page with nbclient."""
    import nbformat
    codes = [c.source for c in source_nb.cells if c.cell_type == "code"]
    if executed_dir is not None:
        done = executed_dir / f"{page}.ipynb"
        if done.is_file():
            nb = nbformat.read(str(done), as_version=4)
            same = [c.source for c in nb.cells if c.cell_type == "code"] == codes
            if same and codes and not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
                nb = cached_outputs(nb, executed_dir.parent / ".jupyter_cache")   # cache mode: outputs kept there
                same = nb is not None
            if same:
                glue = glue_outputs(nb)
                sidecar = done.with_suffix(".glue.json")
                if sidecar.is_file():
                    for name, out in json.loads(sidecar.read_text()).items():
                        prefix = out.get("metadata", {}).get("scrapbook", {}).get("mime_prefix", "")
                        glue[name] = {k[len(prefix):] if prefix and k.startswith(prefix) else k: v
                                      for k, v in out.get("data", {}).items()}
                log(f"{page}: outputs of the book build ({done.relative_to(ROOT) if done.is_relative_to(ROOT) else done})")
                return [c.get("outputs", []) for c in nb.cells if c.cell_type == "code"], glue
            log(f"{page}: {done} does not match the source, or its outputs are not in the cache; executing it here")
    from execute_notebook import execute_chapter
    run = code_only(source_nb)
    os.environ[RECORD_ENV] = "1"      # the kernel inherits it: the glue stand-in records values
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / (Path(page).name + ".ipynb")
            nbformat.write(run, str(src))
            # the kernel runs in the page's folder, so that relative paths resolve as in the book
            result = execute_chapter(src, timeout=timeout, output=Path(tmp) / "executed.ipynb",
                                     cwd=(ROOT / page).parent)
            nb = nbformat.read(str(Path(tmp) / "executed.ipynb"), as_version=4)
    finally:
        os.environ.pop(RECORD_ENV, None)
    log(f"{page}: executed in {result['seconds']:.1f} s")
    return [c.get("outputs", []) for c in nb.cells], glue_outputs(nb)

