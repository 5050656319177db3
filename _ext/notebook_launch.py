"""Sphinx extension: the book's Binder launch button opens the learner's notebook of the page.

sphinx-book-theme builds the button from the page's source (``?urlpath=lab/tree/chapters/
05_masking.md``), which JupyterLab opens as raw MyST text (or, with jupytext, as a notebook
whose autosave rewrites the chapter source).  Binder's ``postBuild`` writes the learners'
notebooks with ``_ext/make_notebooks.py`` into ``_build/notebooks/``; this extension points the
button there (``?urlpath=lab/tree/_build/notebooks/05_masking.ipynb``).  Jupyter Book 1 has no
setting for it, so the button's URL is rewritten in ``html-page-context`` after the theme
added it (the theme's handler runs at priority 501).
"""
from __future__ import annotations

import re
from pathlib import PurePosixPath

NOTEBOOKS = "_build/notebooks"
_URLPATH = re.compile(r"([?&]urlpath=)([^&]*)")


def notebook_urlpath(urlpath: str, pagename: str) -> str:
    """``lab/tree/chapters/05_masking.md`` -> ``lab/tree/_build/notebooks/05_masking.ipynb``
    (the interface prefix, ``lab/tree`` or ``tree``, is kept)."""
    prefix = "lab/tree" if urlpath.startswith("lab/") else "tree"
    return f"{prefix}/{NOTEBOOKS}/{PurePosixPath(pagename).name}.ipynb"


def _buttons(items):
    for item in items or []:
        if isinstance(item, dict):
            yield item
            yield from _buttons(item.get("buttons"))


def _rewrite(app, pagename, templatename, context, doctree) -> None:
    for button in _buttons(context.get("header_buttons")):
        url = button.get("url")
        if isinstance(url, str) and "/v2/" in url and "urlpath=" in url:
            button["url"] = _URLPATH.sub(lambda m: m.group(1) + notebook_urlpath(m.group(2), pagename), url)


def setup(app):
    app.connect("html-page-context", _rewrite, priority=600)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
