"""Rendering behind :mod:`attnlib.explorables`: one self-contained ``<figure>`` per view.

Each explorable is a ``<figure>`` with a unique id, a scoped ``<style>``, a ``<noscript>``
note and one ``<script>``: an immediately invoked function holding the shared runtime
(``static/xp_core.js``), the view's code (``static/xp_<view>.js``) and the view's data as a
JSON literal.  The script queues the figure (``xpSchedule`` in ``xp_core.js``): it is drawn
in a task of its own once the page has been parsed, so no figure reads the layout while the
page parses (issue 38, item 7); its ``<figure>`` gets ``data-ready="1"`` when drawn.  Nothing
is fetched from the network and nothing is added to the page's global scope but that queue
(``window.__attnlibXp``), so the HTML works in a static page (a Jupyter Book built by MyST-NB) and in
JupyterLab alike, and any number of instances can share one page.

Safety: the JSON is written with ``<``, ``>`` and ``&`` (and U+2028/U+2029) escaped as
``\\u``-escapes (``\\u003c`` for ``<``), so no token can close the ``<script>`` element; the JavaScript inserts every
token with ``textContent``, never ``innerHTML``; the caption is HTML-escaped here.
"""
from __future__ import annotations

import html
import json
import uuid
from functools import lru_cache
from pathlib import Path

__all__ = ["Explorable", "safe_json", "render", "standalone_page", "STATIC_DIR"]

STATIC_DIR = Path(__file__).resolve().with_name("static")

_JSON_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                 ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    """Text of a file in ``attnlib/static`` (read once per process)."""
    path = STATIC_DIR / name
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise FileNotFoundError(f"attnlib's explorable asset {name!r} is missing from {STATIC_DIR}") from err
    if "</" in text or "<!--" in text:  # would end or confuse the inline <script>/<style>
        raise ValueError(f"{path} must not contain '</' or '<!--': it is inlined into an HTML element")
    return text


def safe_json(obj) -> str:
    """``obj`` as compact JSON that can sit inside an HTML ``<script>`` element.

    ``<``, ``>``, ``&``, U+2028 and U+2029 are written as ``\\u`` escapes, e.g. ``\\u003c`` for ``<`` (valid JSON and
    valid JavaScript), so a string such as ``"</script><img src=x onerror=alert(1)>"``
    cannot end the script or start markup.  NaN and infinities are refused (``ValueError``).

    >>> safe_json({"token": "</script>"})
    '{"token":"\\\\u003c/script\\\\u003e"}'
    """
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _JSON_ESCAPES:
        text = text.replace(raw, escaped)
    return text


class Explorable:
    """A self-contained interactive figure (HTML + JavaScript + data, no network, no kernel).

    Displays itself in Jupyter and in MyST-NB books through ``_repr_html_``.  Attributes:
    ``kind`` (the view's name), ``uid`` (the ``id`` of its ``<figure>``, unique per
    instance), ``n_tokens`` and ``html``.
    """

    def __init__(self, kind: str, uid: str, html_text: str, n_tokens: int):
        self.kind, self.uid, self.html, self.n_tokens = kind, uid, html_text, n_tokens

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"<attnlib explorable {self.kind!r}, T={self.n_tokens}, id={self.uid!r}, {len(self.html):,} characters>"

    def save(self, path) -> Path:
        """Write a standalone HTML page holding this figure; returns the path."""
        path = Path(path)
        path.write_text(standalone_page([self], title=self.kind), encoding="utf-8")
        return path


def render(kind: str, data: dict, title: str, n_tokens: int) -> Explorable:
    """Assemble the ``<figure>`` for view ``kind`` (``static/xp_<kind>.js``) around ``data``."""
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    uid = f"attnlib-{kind}-{uuid.uuid4().hex[:12]}"
    script = "\n".join([
        "(function () {",
        '"use strict";',
        _asset("xp_core.js"),
        _asset(f"xp_{kind}.js"),
        f"var UID = {json.dumps(uid)};",
        "var me = document.currentScript;",
        "var root = me && me.parentNode && me.parentNode.id === UID ? me.parentNode : document.getElementById(UID);",
        'if (root && !root.hasAttribute("data-queued")) {',
        '  root.setAttribute("data-queued", "1");',
        "  xpSchedule(root, function () {",
        f"    view(root, {safe_json(data)}, UID);",
        '    root.setAttribute("data-ready", "1");',
        "  });",
        "}",
        "})();",
    ])
    figure = (
        f'<figure class="attnlib-xp" id="{uid}" data-kind="{kind}">'
        f"<figcaption>{html.escape(title)}</figcaption>"
        f"<style>{_asset('xp.css')}</style>"
        "<noscript>This interactive figure needs JavaScript.</noscript>"
        f"<script>{script}</script></figure>"
    )
    return Explorable(kind, uid, figure, n_tokens)


def standalone_page(explorables, title: str = "attnlib explorables") -> str:
    """A complete HTML document holding the given explorables, one after another."""
    items = list(explorables)
    for x in items:
        if not isinstance(x, Explorable):
            raise TypeError(f"expected Explorable objects, got {type(x).__name__}")
    body = "\n".join(x.html for x in items)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"</head><body>\n{body}\n</body></html>\n")
