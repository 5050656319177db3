"""Sphinx extension: the built book loads nothing from other hosts.

By default Jupyter Book pages pull scripts from public CDNs: MathJax (Sphinx), require.js
and the ipywidgets HTML manager (MyST-NB, on pages with widget state), and bertviz's
require.js, d3 and jQuery (written by ``head_view`` / ``model_view`` into cell outputs).
The files are vendored under ``_static/vendor/`` (versions, sources and licences in
``_static/vendor/README.md``).  ``_config.yml`` points ``mathjax_path`` and
``nb_ipywidgets_js`` at them; this extension does the rest:

1. ``config-inited``: Jupyter Book adds *every* ``.js`` under ``_static/`` to every page;
   the vendored files are loaded on demand instead, so they are taken off that list.  The
   theme's default colour mode is set to "auto" (without one, pydata-sphinx-theme logs a
   console error on a reader's first visit).
2. ``html-page-context``: the d3 and jQuery copies that ``attnlib.bertviz_offline`` inlines
   into bertviz's views become ``<script src>`` of the vendored files (once per page); the
   CDN addresses that plain bertviz writes into cell outputs are
   replaced by the page-relative address of the vendored copy (e.g.
   ``../_static/vendor/d3/d3.min``), so chapters call bertviz exactly as in a notebook
   (where the CDN is reachable) and the book still works offline.
3. ``html-page-context`` (last): repeated inline scripts are dropped and require.js is told
   where the vendored widget manager lives (see :func:`_fix_scripts`).
4. ``build-finished``: every written page is checked; a ``<script src>``,
   stylesheet, ``<img>``, ``<iframe>`` or require.js path that still names another host
   is reported as a warning, which ``--warningiserror`` turns into a failed build.
"""
from __future__ import annotations

import re
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

VENDOR_PREFIX = "vendor/"

# CDN address (regular expression) -> file under _static/.  Require.js module paths are
# written without ".js" (require.js appends it), so the d3 and jQuery targets have none.
CDN_TO_LOCAL = [
    (re.compile(r"https://cdnjs\.cloudflare\.com/ajax/libs/require\.js/[0-9.]+/require(?:\.min)?\.js"),
     "vendor/requirejs/require.js"),
    (re.compile(r"https://cdnjs\.cloudflare\.com/ajax/libs/d3/5\.7\.0/d3\.min(?:\.js)?"), "vendor/d3/d3.min"),
    (re.compile(r"https://cdnjs\.cloudflare\.com/ajax/libs/jquery/[0-9.]+/jquery\.min(?:\.js)?"),
     "vendor/jquery/jquery.min"),
]

# Resources a browser fetches by itself (links, <a href>, are not fetched, so they are fine).
_URL = r"""((?:https?:)?//[^"'\s>)]+)"""
_TAG_SRC = re.compile(r"""<(?:script|img|iframe|audio|video|source|embed|track)\b[^>]*?\ssrc\s*=\s*["']?""" + _URL, re.I)
_LINK = re.compile(r"<link\b[^>]*>", re.I)
_LINK_FETCHED = re.compile(r"""\brel\s*=\s*["']?[^"'>]*\b(?:stylesheet|preload|modulepreload|icon)\b""", re.I)
_LINK_HREF = re.compile(r"""\bhref\s*=\s*["']?""" + _URL, re.I)
_CSS_URL = re.compile(r"""(?:@import\s+|url\(\s*)["']?""" + _URL, re.I)
_REQUIRE_CONFIG = re.compile(r"require(?:js)?\.config\(\s*\{(.*?)\}\s*\)", re.S)
_QUOTED_URL = re.compile(r"""["']((?:https?:)?//[^"']+)["']""")


def localise(html: str, to_static) -> str:
    """Replace the known CDN addresses in ``html`` by ``to_static(path_under_static)``."""
    for pattern, target in CDN_TO_LOCAL:
        html = pattern.sub(lambda _m, t=target: to_static(t), html)
    return html


def external_resources(html: str) -> list[str]:
    """Addresses on other hosts that a browser would fetch while loading ``html``: script,
    image and frame sources, stylesheets and preloads, CSS ``url()``/``@import`` and
    require.js ``paths``."""
    found = set(_TAG_SRC.findall(html)) | set(_CSS_URL.findall(html))
    for link in _LINK.findall(html):
        if _LINK_FETCHED.search(link):
            found.update(_LINK_HREF.findall(link))
    for block in _REQUIRE_CONFIG.findall(html):
        found.update(_QUOTED_URL.findall(block))
    return sorted(found)


# The AMD modules that embed-amd.js defines.  Each computes its webpack public path (where
# it loads its icon fonts from) from its own module URL, which require.js would otherwise
# resolve next to the page (e.g. chapters/@jupyter-widgets/controls.js): they are all
# mapped into the vendored folder, where the fonts are.  Nothing is fetched for them.
WIDGET_AMD_MODULES = ("@jupyter-widgets/base", "@jupyter-widgets/base7", "@jupyter-widgets/controls",
                      "@jupyter-widgets/controls7", "@jupyter-widgets/html-manager",
                      "@jupyter-widgets/html-manager/dist/libembed-amd")

# ipywidgets' HTML manager typesets widget labels with MathJax 2's ``MathJax.Hub.Queue``;
# Sphinx loads MathJax 3, which has no ``Hub``, so every widget page logged a TypeError.
# This shim maps the call onto MathJax 3's ``typesetPromise`` (non-enumerable, so MathJax's
# own configuration merge never sees it).
MATHJAX2_HUB_SHIM = """(function () {
  var hub = {Queue: function (job) {
    var mj = window.MathJax, el = job && job[2];
    if (!mj || !mj.startup || !mj.startup.promise) return;
    mj.startup.promise.then(function () {
      return mj.typesetPromise ? mj.typesetPromise(el ? [el] : undefined) : null;
    }).catch(function () {});
  }};
  function install() {
    var mj = window.MathJax;
    if (mj && !mj.Hub) Object.defineProperty(mj, "Hub", {value: hub, configurable: true});
  }
  install();
  document.addEventListener("DOMContentLoaded", install);
})();"""


def _drop_vendor_js(app, config) -> None:
    def is_vendor(entry) -> bool:
        name = entry[0] if isinstance(entry, (tuple, list)) else entry
        return isinstance(name, str) and name.startswith(VENDOR_PREFIX)

    config.html_js_files = [f for f in config.html_js_files if not is_vendor(f)]
    config.html_css_files = [f for f in config.html_css_files if not is_vendor(f)]
    # pydata-sphinx-theme logs "Got invalid theme mode" on a reader's first visit when no
    # default colour mode is set; "auto" follows the reader's system setting.
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def _page_context(app, pagename, templatename, context, doctree) -> None:
    if "body" in context and "pathto" in context:
        def to_static(path):
            return context["pathto"]("_static/" + path, 1)
        # bertviz views made offline by attnlib.bertviz_offline inline d3 and jQuery (a notebook
        # has nowhere else to load them from); the page loads the vendored files once instead.
        from attnlib.bertviz_offline import externalise
        context["body"] = externalise(localise(context["body"], to_static), to_static)


def _js_name(js) -> str:
    return str(getattr(js, "filename", js) or "")


def _fix_scripts(app, pagename, templatename, context, doctree) -> None:
    """Runs after every other ``html-page-context`` handler (priority 900).

    * Drops exact repeats of a script that differ only in priority: sphinx-thebe and
      sphinx-togglebutton register their inline configuration twice under Jupyter Book,
      and the repeated ``const THEBE_JS_URL`` is a SyntaxError in every page's console.
    * On pages with ipywidgets, maps :data:`WIDGET_AMD_MODULES` into the vendored folder
      (so that their icon fonts are found) and adds :data:`MATHJAX2_HUB_SHIM`.
    """
    files = context.get("script_files")
    if not isinstance(files, list):
        return
    seen, unique = set(), []
    for js in files:
        attrs = tuple(sorted(getattr(js, "attributes", {}).items()))
        key = (_js_name(js), attrs)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    names = [_js_name(js) for js in unique]
    require = next((i for i, n in enumerate(names) if n.endswith("vendor/requirejs/require.js")), None)
    if require is not None and any(n.endswith("vendor/html-manager/embed-amd.js") for n in names):
        folder = context["pathto"]("_static/vendor/html-manager", 1)
        paths = ", ".join(f'"{name}": "{folder}/{name.rsplit("/", 1)[-1]}"' for name in WIDGET_AMD_MODULES)
        body = "require.config({paths: {%s}});" % paths
        js = unique[require]
        make = type(js)
        priority = getattr(js, "priority", 500)
        unique[require + 1:require + 1] = [make("", priority=priority, body=body),
                                           make("", priority=priority, body=MATHJAX2_HUB_SHIM)]
    context["script_files"] = unique


def _check_pages(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    for page in sorted(out.rglob("*.html")):
        found = external_resources(page.read_text(encoding="utf-8", errors="replace"))
        if found:
            logger.warning("%s loads resources from other hosts (the book must work offline): %s",
                           page.relative_to(out), ", ".join(found[:5]))


def setup(app):
    app.connect("config-inited", _drop_vendor_js)
    app.connect("html-page-context", _page_context)
    app.connect("html-page-context", _fix_scripts, priority=900)
    app.connect("build-finished", _check_pages)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
