"""Sphinx extension: every page loads only what it uses (issue 12: a chapter page at most
4 MB and 40 requests, all resources counted; ``bench/bench_pages.py`` measures it).

What the theme and the extensions put on every page, and what happens to it here:

* ``_static/scripts/fontawesome.js`` (1.5 MB; pydata-sphinx-theme's ``webpack-macros.html``
  template writes its ``<script>`` into every page).  It is Font Awesome's "SVG with
  JavaScript" build, which swaps each ``<i class="fa-...">`` for an inline SVG.  The theme's
  stylesheet already holds Font Awesome's CSS and ``@font-face`` rules, so without the script
  the same icons draw as font glyphs (the browser fetches only the icon fonts a page shows).
  Removed from every page.
* ``searchtools.js``, ``language_data.js`` and ``searchindex.js`` (the whole search index,
  75 KB and growing with the book) are loaded by the theme's layout on every page for its
  search-as-you-type mode.  This book keeps that mode off (``search_as_you_type`` false), so
  the search box only sends the reader to ``search.html``, which loads them itself.  Removed
  from every page but ``search.html`` (and kept everywhere if the mode is turned on).
* sphinx-thebe's script and stylesheet, and its inline ``THEBE_JS_URL`` settings: they serve
  the "Live Code" launch button, which exists only with ``launch_buttons: thebe: true``.
  Removed while thebe is off.
* sphinx-design's ``design-tabs.js`` and ``sphinx-design.min.css``: removed from a page whose
  body uses no sphinx-design component (no ``sd-`` class).

* The course's own ``course-layout.css`` and ``course-layout.js`` (about 22 KB together, on
  every page): written into the page as ``<style>`` and ``<script>`` blocks instead of two
  more requests (:func:`inline_course_layout`).

The first two are written by templates, so they are taken out of the written HTML at the end
of the build (:func:`slim_html`); a page where an expected tag is not found is reported as a
warning, which ``--warningiserror`` turns into a failed build, so a theme update that moves
them cannot go unnoticed.  The last two are Sphinx assets, dropped from the page's context
(:func:`_drop_unused_assets`).
"""
from __future__ import annotations

import re
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

_FONTAWESOME = re.compile(
    r"[ \t]*(?:<!--[^\n]*custom icons[^\n]*-->[ \t]*\n)?[ \t]*<script\b[^>]*\bsrc=\"[^\"]*scripts/fontawesome\.js[^\"]*\"[^>]*></script>[ \t]*\n?")
_SEARCH = re.compile(
    r"[ \t]*<script\b[^>]*\bsrc=\"[^\"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)[^\"]*\"[^>]*></script>[ \t]*\n?")
_THEBE_FILES = ("sphinx-thebe.js", "sphinx-thebe.css")
_DESIGN_FILES = ("design-tabs.js", "sphinx-design.min.css")


def slim_html(html: str, keep_search: bool = False) -> tuple[str, dict[str, int]]:
    """``html`` without the ``fontawesome.js`` script and, unless ``keep_search``, without
    the three search scripts.  Returns the new text and how many tags of each were removed
    (``{"fontawesome": n, "search": m}``)."""
    html, n_fa = _FONTAWESOME.subn("", html)
    n_search = 0
    if not keep_search:
        html, n_search = _SEARCH.subn("", html)
    return html, {"fontawesome": n_fa, "search": n_search}


_LAYOUT_CSS = re.compile(r'<link\b[^>]*\bhref="[^"]*_static/course-layout\.css(?:\?[^"]*)?"[^>]*/?>')
_LAYOUT_JS = re.compile(r'<script\b[^>]*\bsrc="[^"]*_static/course-layout\.js(?:\?[^"]*)?"[^>]*></script>')


def inline_course_layout(html: str, css: str, js: str) -> tuple[str, int]:
    """``html`` with the ``<link>`` of ``course-layout.css`` and the ``<script src>`` of
    ``course-layout.js`` replaced by the files' contents (``<style>``, ``<script>``).
    Returns the new text and how many of the two tags were replaced (2 on a themed page)."""
    html, n_css = _LAYOUT_CSS.subn(lambda m: f"<style>\n{css}</style>", html, count=1)
    html, n_js = _LAYOUT_JS.subn(lambda m: f"<script>\n{js}</script>", html, count=1)
    return html, n_css + n_js


def _name(asset) -> str:
    return str(getattr(asset, "filename", asset) or "").split("?")[0]


def _thebe_on(app) -> bool:
    launch = (app.config.html_theme_options or {}).get("launch_buttons", {}) or {}
    return bool(launch.get("thebe"))


def _drop_unused_assets(app, pagename, templatename, context, doctree):
    app._page_weight_written = getattr(app, "_page_weight_written", set()) | {pagename}
    drop = []
    if not _thebe_on(app):
        drop += _THEBE_FILES
    if "sd-" not in context.get("body", ""):
        drop += _DESIGN_FILES
    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if not _name(a).endswith(tuple(drop))
                            and not (not _thebe_on(app) and "THEBE_JS_URL" in str(getattr(a, "attributes", {}).get("body", "")))]


def _search_as_you_type(app) -> bool:
    return str((app.config.html_theme_options or {}).get("search_as_you_type", False)).lower() == "true"


def _slim_pages(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    keep_all = _search_as_you_type(app)
    outdir = Path(app.outdir)
    layout_css = (outdir / "_static" / "course-layout.css").read_text(encoding="utf-8")
    layout_js = (outdir / "_static" / "course-layout.js").read_text(encoding="utf-8")
    written = getattr(app, "_page_weight_written", set())  # this build's pages, not older ones
    app._page_weight_written = set()
    for pagename in sorted(written):
        page = outdir / f"{pagename}.html"
        if not page.is_file():
            continue
        text = page.read_text(encoding="utf-8")
        if "<head>" not in text:  # a redirect stub (index.html) has no theme head
            continue
        keep = keep_all or page.relative_to(outdir).as_posix() == "search.html"
        new, removed = slim_html(text, keep_search=keep)
        new, inlined = inline_course_layout(new, layout_css, layout_js)
        if inlined != 2:
            logger.warning("page_weight: %s: course-layout.css/.js tags not found to inline (%d of 2)",
                           page.relative_to(outdir), inlined)
        if removed["fontawesome"] != 1 or (not keep and removed["search"] != 3):
            logger.warning("page_weight: %s: expected 1 fontawesome.js and %s search <script> tags, removed %s; "
                           "the theme's templates changed, update _ext/page_weight.py",
                           page.relative_to(outdir), 0 if keep else 3, removed)
        if new != text:
            page.write_text(new, encoding="utf-8")


def setup(app):
    app.connect("html-page-context", _drop_unused_assets, priority=900)
    app.connect("build-finished", _slim_pages)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": False}
