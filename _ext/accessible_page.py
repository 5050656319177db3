"""Sphinx extension: markup that screen readers and axe-core can follow, fixed where the
page is written (``html-page-context``, on the page's body).

1. MyST-NB's folded code cells are ``<summary aria-label="Toggle hidden content">`` around the
   visible words "Show code cell source": the label hides the words (a speech user saying
   "click show code cell source" reaches nothing; axe-core: label-content-name-mismatch).  The
   label is dropped, so the summary's name is its visible text.
2. docutils writes a bibliography as ``role="list"`` holding ``role="doc-biblioentry"``
   entries: a deprecated role that is not a list item (axe-core: aria-required-children,
   aria-deprecated-role).  The entries become ``role="listitem"``.

The page's script (``_static/course-layout.js``) does what needs the laid-out page: boxes that
scroll sideways take focus, the book's side panel is a named landmark, and the solution
toggles are named after the solution they open.
"""
from __future__ import annotations

import re

SUMMARY = re.compile(r'<summary aria-label="Toggle hidden content">')
BIBLIOENTRY = re.compile(r'(<div class="citation"[^>]*?) role="doc-biblioentry"')


def rewrite(body: str) -> str:
    """``body`` with the two fixes of the module docstring applied (idempotent)."""
    body = SUMMARY.sub("<summary>", body)
    return BIBLIOENTRY.sub(r'\1 role="listitem"', body)


def _page(app, pagename, templatename, context, doctree) -> None:
    if isinstance(context.get("body"), str):
        context["body"] = rewrite(context["body"])


def setup(app):
    app.connect("html-page-context", _page)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
