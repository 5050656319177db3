"""Execute the book's pages in parallel into Jupyter Book's execution cache, before `jupyter-book build`.

Jupyter Book 1 (MyST-NB, ``execute_notebooks: cache``) executes the pages one after the other,
inside Sphinx, and Sphinx cannot read in parallel here (``sphinx_multitoc_numbering`` does not
declare itself parallel-safe, and the build treats that warning as an error).  Most of a fresh
build is that execution, so ``make html`` first runs this script: every page whose code is not in
the cache (``_build/.jupyter_cache``) is executed by jupyter-cache's own parallel executor
(``local-parallel``, a pool of one process per CPU core), read with MyST-NB's own reader (the plugin
``myst_nb_md`` that MyST-NB uses for the cache), in the page's folder, with the book's per-cell
timeout, the nbclient wake-up fix and the environment the build's extensions set
(``ATTNLIB_STATIC_BOOK``, the figure renderings).  The build then finds every page in the cache
("Using cached notebook") and only renders.

A page that fails here is simply not cached: the build executes it again, in order, and fails
with its usual message naming the page and the cell.  So this script never fails the build; it
prints what it ran and how long it took.

Usage (``make html`` runs it):  .venv/bin/python _ext/preexecute.py [--jobs N]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

CACHE = ROOT / "_build" / ".jupyter_cache"
READER = {"name": "myst_nb_md", "type": "plugin"}   # MyST-NB's jupyter-cache reader (its read_fmt)


def pages() -> list[Path]:
    """The toc's MyST notebook pages (those with a jupytext header), in toc order."""
    from make_notebooks import toc_pages
    out = []
    for page in toc_pages():
        path = ROOT / f"{page}.md"
        if path.read_text(encoding="utf-8").startswith("---\njupytext"):
            out.append(path)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="1 turns it off; otherwise jupyter-cache's pool uses one process per CPU core")
    args = ap.parse_args(argv)
    if args.jobs < 2:
        print("preexecute: one job, nothing to gain; the build executes the pages")
        return 0
    # the environment the book build's extensions set before its kernels start
    from attnlib.plotting import VARIANTS_ENV
    from attnlib.transformer import STATIC_BOOK_ENV
    os.environ[STATIC_BOOK_ENV] = "1"          # _ext/exercise_pages.py
    os.environ[VARIANTS_ENV] = "1"             # _ext/figure_zoom.py
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import nbclient_wakeup
    nbclient_wakeup.install()                   # as _ext/nbclient_wakeup.py does in the Sphinx process
    from execute_notebook import book_cell_timeout
    from jupyter_cache import get_cache
    from jupyter_cache.executors import load_executor

    cache = get_cache(str(CACHE))
    records = [cache.add_nb_to_project(str(path), read_data=READER) for path in pages()]
    todo = [r for r in records if cache.get_cached_project_nb(r.pk) is None]
    if len(todo) < 2:
        print(f"preexecute: {len(records) - len(todo)} of {len(records)} pages cached; the build executes the rest")
        return 0
    # the slowest page first, so that the pool's two halves finish together (chapter 7 trains)
    todo.sort(key=lambda r: "06_" not in r.uri)
    logger = logging.getLogger("preexecute")
    logging.basicConfig(level=logging.WARNING, format="preexecute: %(message)s")
    start = time.perf_counter()
    executor = load_executor("local-parallel", cache, logger=logger)
    result = executor.run_and_cache(filter_pks=[r.pk for r in todo], timeout=book_cell_timeout(),
                                    allow_errors=False)
    seconds = time.perf_counter() - start
    failed = list(result.excepted) + list(result.errored)
    print(f"preexecute: {len(result.succeeded)} of {len(todo)} pages executed in parallel ({os.cpu_count()} processes) "
          f"in {seconds:.1f} s" + (f"; not cached (the build runs them and reports): {failed}" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
