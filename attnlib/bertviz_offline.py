"""bertviz's interactive views with no CDN: the same ``head_view`` / ``model_view``, offline.

bertviz (Vig 2019, "A Multiscale Visualization of Attention in the Transformer Model", ACL
demo) writes a ``<script src>`` for require.js and a ``require.config`` that loads d3 5.7.0 and
jQuery from cdnjs.  Offline, or in JupyterLab / Notebook 7 (which have no global require.js),
the view fails ("require is not defined", failed CDN look-ups).  These wrappers call bertviz
with ``html_action="return"`` and rewrite its HTML into one self-contained output:

1. ``<script data-attnlib-bertviz="begin">`` hides any AMD loader (``define``) for a moment,
   so that the libraries below register as plain globals, not as anonymous AMD modules;
2. ``<script data-attnlib-bertviz="d3">`` and ``="jquery"``: the course's own copies of d3
   5.7.0 and jQuery 3.7.1 (``attnlib/static/``, the same files as the book's
   ``_static/vendor/``; licences in ``LICENSE-content.md``), inlined;
3. ``="end"`` takes them into ``window.__attnlibBertviz``, restores the page's globals
   (``define``, ``d3``, ``$``/``jQuery`` via ``noConflict``);
4. bertviz's own view script, unchanged except that its ``require.config`` (the CDN
   addresses) is removed and ``require``/``requirejs`` are local stand-ins that hand it the
   two libraries, once the view comes within 800 px of the viewport (a page of several views
   draws none of them while it loads: chapter 9's two views are thousands of SVG elements);
5. the view's data (bertviz's ``params``: every weight shown) moves out of the script into a
   ``<script type="application/json">`` that is parsed only when the view is drawn, written
   once (bertviz 1.4 also pastes it into a comment of its script, which doubled a view's
   bytes) and, where every weight has at most a few decimals (a chapter rounds to 3), as whole
   thousandths that the view divides back (``0.149`` is sent as ``149``: ``149 / 1000`` is the
   same double).  :func:`params_of` reads them back.

The published page does not pay for the inlined copies: ``_ext/offline_book.py`` replaces
each inlined library by a ``<script src>`` of the vendored file (first view of a page) or
drops it (later views), with :func:`externalise`.
"""
from __future__ import annotations

import html
import json
import re
import uuid
from importlib import resources

from ._xp_html import safe_json

__all__ = ["head_view", "model_view", "offline_html", "externalise", "params_of", "OfflineView", "LIBRARIES"]

#: library name -> file in ``attnlib/static`` (and in the book's ``_static/vendor``)
LIBRARIES = {"d3": "d3.min.js", "jquery": "jquery.min.js"}
#: where the book vendors the same files (under ``_static/``)
BOOK_VENDOR = {"d3": "vendor/d3/d3.min.js", "jquery": "vendor/jquery/jquery.min.js"}

_BEGIN = """(function () {
  window.__attnlibBertvizSaved = {define: window.define, d3: window.d3, jQuery: window.jQuery};
  window.define = undefined; window.d3 = undefined;
})();"""
_END = """(function () {
  var saved = window.__attnlibBertvizSaved || {};
  var lib = window.__attnlibBertviz = window.__attnlibBertviz || {};
  if (window.d3) lib.d3 = window.d3;
  window.d3 = saved.d3;
  if (window.jQuery && window.jQuery !== saved.jQuery) {
    var jq = window.jQuery.noConflict(true);   // restores the page's own $ and jQuery
    if (!lib.jquery) lib.jquery = jq;
  }
  window.define = saved.define;
})();"""
_VIEW_PRELUDE = """(function () {
  var lib = window.__attnlibBertviz || {};
  var box = document.currentScript;              /* the view's box: the scrolling div before this script */
  while (box && !(box.classList && box.classList.contains("attnlib-bertviz"))) box = box.previousElementSibling;
  var require = {config: function () {}};
  var requirejs = function (names, body) {
    function draw() { body.apply(null, names.map(function (name) { return lib[name]; })); }
    if (!box || !window.IntersectionObserver) return draw();
    var near = new IntersectionObserver(function (entries) {   /* drawn when it comes near the viewport */
      if (!entries.some(function (e) { return e.isIntersecting; })) return;
      near.disconnect();
      draw();
    }, {rootMargin: "800px 0px"});
    near.observe(box);
  };
  var viewParams = function (id, scale) {          /* the view's data, parsed when it is drawn */
    var p = JSON.parse(document.getElementById(id).textContent);
    var back = function (x) { return Array.isArray(x) ? x.map(back) : x / scale; };
    if (scale) p.attention.forEach(function (a) { a.attn = back(a.attn); });
    return p;
  };
"""
_PARAMS = re.compile(r"\bconst params = ")
#: scales tried for the weights, smallest first: 10 ** d for d decimals
_SCALES = tuple(10 ** d for d in range(1, 7))
_REQUIRE_SCRIPT = re.compile(r"<script\s+src=\"[^\"]*require(?:\.min)?\.js\"\s*>\s*</script>")
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{.*?\}\);", re.S)
_VIEW_SCRIPT = re.compile(r"<script type=\"text/javascript\">(.*)</script>\s*$", re.S)
_SCRIPT_END = re.compile(r"</(script)", re.I)
_SELECT = re.compile(r'<select id="(layer|filter)"')
#: accessible names of bertviz's menus (its visible words "Layer:" and "Attention:" are not labels)
SELECT_NAMES = {"layer": "Layer", "filter": "Attention"}
#: the view sits in a box that scrolls sideways: the model view is wider than a phone's column
#: (one 80 px thumbnail per head); a keyboard reader scrolls it with the arrow keys once it has focus
_BOX = ('<div class="attnlib-bertviz" role="region" tabindex="0" aria-label="{name}" '
        'style="overflow-x:auto;max-width:100%;padding-bottom:4px">')
# A page's own "svg { max-width: 100% }" (the book's theme, JupyterLab) would squeeze the model
# view's 970 px drawing, which has no viewBox, into the column and cut off every head beyond
# the fourth: inside the box the drawing keeps its own width and the box scrolls.
# The box is the one that scrolls: a page that makes bertviz's own div a scroll container (the
# book's layout does, for views without the box) would leave the focused box with nothing to
# scroll and the arrow keys doing nothing (issue 38 item 6).
_STYLE = ("<style>.attnlib-bertviz svg { max-width: none !important; } "
          ".attnlib-bertviz div[id^='bertviz-'] { overflow: visible !important; max-width: none !important; }</style>")
_CUE = ('<p class="attnlib-bertviz-cue" style="font-size:0.9em;margin:0 0 0.3em">'
        'The view may be wider than the page: scroll it sideways (swipe, or Tab to it and use the arrow '
        'keys) to see every head.</p>')
_LIB_SCRIPT = re.compile(r'<script data-attnlib-bertviz="(d3|jquery)">.*?</script>', re.S)


def _library(name: str) -> str:
    return resources.files("attnlib").joinpath("static", LIBRARIES[name]).read_text(encoding="utf-8")


def offline_html(bertviz_html: str, name: str = "bertviz view") -> str:
    """bertviz's returned HTML (``html_action="return"``) rewritten to need no CDN, with
    named menus (``aria-label``, :data:`SELECT_NAMES`) and inside a box named ``name`` that
    scrolls sideways (a cue above says so), so a view wider than the column is never cut off.

    Raises:
        ValueError: the HTML does not have bertviz 1.4's layout (require.js tag, one view
            script with a ``require.config``), e.g. after a bertviz upgrade.
    """
    if not isinstance(bertviz_html, str):
        raise TypeError(f"bertviz_html must be a str, got {type(bertviz_html).__name__}")
    body, n_tags = _REQUIRE_SCRIPT.subn("", bertviz_html)
    m = _VIEW_SCRIPT.search(body)
    if n_tags != 1 or m is None:
        raise ValueError("expected bertviz 1.4's HTML: one require.js <script src> tag and one view script; "
                         f"found {n_tags} require.js tag(s) and {'a' if m else 'no'} view script")
    script, n_config = _REQUIRE_CONFIG.subn("", m.group(1))
    # bertviz writes the tokens into this script as JSON without escaping "</": a token such as
    # "</script><img src=x onerror=...>" would end the script and run as markup.  "<\/" is the
    # same string to JavaScript, and "</script" occurs nowhere else in the script.
    script = _SCRIPT_END.sub(r"<\\/\1", script).replace("<!--", "<\\!--")
    if n_config != 1:
        raise ValueError(f"expected one require.config(...) in bertviz's view script, found {n_config}")
    script, data = _params_out(script)
    libs = "".join(f'<script data-attnlib-bertviz="{lib}">{_library(lib)}</script>\n' for lib in LIBRARIES)
    markup = _SELECT.sub(lambda s: f'{s.group(0)} aria-label="{SELECT_NAMES[s.group(1)]}"', body[:m.start()])
    return (_STYLE + _CUE + _BOX.format(name=html.escape(name, quote=True)) + markup + "</div>\n"
            + f'<script data-attnlib-bertviz="begin">{_BEGIN}</script>\n{libs}'
            + f'<script data-attnlib-bertviz="end">{_END}</script>\n'
            + data
            + f'<script data-attnlib-bertviz="view">{_VIEW_PRELUDE}{script}\n}})();</script>\n')


def _scale(attention) -> int:
    """The smallest 10 ** d (d <= 6) at which every weight of ``attention`` is a whole number
    whose division by 10 ** d gives back the same float; 0 when there is none."""
    flat = []

    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        else:
            flat.append(x)

    for entry in attention:
        walk(entry["attn"])
    for scale in _SCALES:
        if all(isinstance(x, (int, float)) and round(x * scale) / scale == x for x in flat):
            return scale
    return 0


def _params_out(script: str) -> tuple[str, str]:
    """bertviz's view script with its ``params`` literal replaced by a read of a JSON script
    element (returned second); the copy bertviz pastes into a comment is dropped."""
    m = _PARAMS.search(script)
    if m is None:
        raise ValueError("expected bertviz 1.4's view script to define 'const params = {...}'")
    try:
        params, end = json.JSONDecoder().raw_decode(script, m.end())
    except json.JSONDecodeError as err:
        raise ValueError(f"bertviz's params are not JSON: {err}") from None
    literal = script[m.end():end]
    rest = script[end:].replace(literal, "PYTHON_PARAMS", 1)          # bertviz 1.4's comment holds a copy
    attention = params.get("attention") if isinstance(params, dict) else None
    if not isinstance(attention, list) or not all(isinstance(a, dict) and "attn" in a for a in attention):
        raise ValueError("expected bertviz 1.4's params: {'attention': [{'attn': ...}, ...], ...}")
    scale = _scale(attention)
    if scale:
        def whole(x):
            return [whole(y) for y in x] if isinstance(x, list) else round(x * scale)
        params = {**params, "attention": [{**a, "attn": whole(a["attn"])} for a in attention]}
    uid = f"attnlib-bertviz-params-{uuid.uuid4().hex[:12]}"
    data = f'<script type="application/json" id="{uid}" data-attnlib-bertviz="params">{safe_json(params)}</script>\n'
    return script[:m.end()] + f'viewParams("{uid}", {scale})' + rest, data


def params_of(view_html: str) -> list[dict]:
    """The ``params`` of each view in ``view_html`` as bertviz wrote them (weights as floats),
    read back from the JSON script elements :func:`offline_html` writes."""
    out = []
    for m in re.finditer(r'<script type="application/json" id="([^"]+)" data-attnlib-bertviz="params">(.*?)</script>',
                         view_html, re.S):
        params = json.loads(m.group(2))
        call = re.search(r'viewParams\("' + re.escape(m.group(1)) + r'", (\d+)\)', view_html)
        scale = int(call.group(1)) if call else 0
        if scale:
            def back(x):
                return [back(y) for y in x] if isinstance(x, list) else x / scale
            params["attention"] = [{**a, "attn": back(a["attn"])} for a in params["attention"]]
        out.append(params)
    return out


def externalise(page_html: str, to_static) -> str:
    """For the published page: the first inlined copy of each library becomes
    ``<script src="to_static(vendor path)">``, later copies are dropped (already loaded)."""
    seen: set[str] = set()

    def swap(m):
        name = m.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return f'<script data-attnlib-bertviz="{name}" src="{to_static(BOOK_VENDOR[name])}"></script>'

    return _LIB_SCRIPT.sub(swap, page_html)


class OfflineView:
    """A bertviz view as one HTML output (``_repr_html_``); ``.html`` holds the markup."""

    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"<bertviz view, offline: {len(self.html):,} characters of HTML>"


def head_view(*args, **kwargs) -> OfflineView:
    """``bertviz.head_view(...)`` with every script shipped by the course (no CDN).

    Takes bertviz's arguments (``attention``, ``tokens``, ``sentence_b_start``, ``layer``,
    ``heads``, ...; shapes: one ``(1, H, T, T)`` tensor per layer) and returns the view, which
    the notebook displays as the cell's value.  Raises what bertviz raises, and ``ValueError``
    if ``html_action`` is passed (the wrapper sets it)."""
    from bertviz import head_view as _head_view
    if "html_action" in kwargs:
        raise ValueError("html_action is set by attnlib.bertviz_offline; leave it out")
    return OfflineView(offline_html(_head_view(*args, html_action="return", **kwargs).data,
                                    "bertviz head view: queries on the left, keys on the right"))


def model_view(*args, **kwargs) -> OfflineView:
    """``bertviz.model_view(...)`` with every script shipped by the course (no CDN); see
    :func:`head_view`."""
    from bertviz import model_view as _model_view
    if "html_action" in kwargs:
        raise ValueError("html_action is set by attnlib.bertviz_offline; leave it out")
    return OfflineView(offline_html(_model_view(*args, html_action="return", **kwargs).data,
                                    "bertviz model view: one row per layer, one thumbnail per head"))
