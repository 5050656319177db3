"""The explorables on every screen: a phone's 390 px and a desktop's 1280 px, light and dark.

The figures are generated from real data (the fixtures of tests/test_browser.py) into a small
page styled by the book's own theme stylesheet (pydata-sphinx-theme, from the installed
package), inside a column like the book's; no book build is needed.  Checked in each of the
four settings: every explorable fits its column (nothing hidden in a scroll box, the page never
scrolls sideways) with no text under 9.5 px on screen, responds to its control, and every
piece of its text has a contrast of at least 4.5:1 (WCAG AA) against what is behind it, computed from the computed styles.

Also here (no browser): chapter 8's explorable and its static figure
(:func:`attnlib.plotting.draw_attention_graph`) share one drawing convention.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

import attnlib
from attnlib import explorables as xp

from test_browser import SET_RANGE, Visit, browser, figures, real, respond, serve  # noqa: F401  (fixtures)

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
VIEWPORTS = {"phone": (390, 844), "desktop": (1280, 900)}
THEMES = ("light", "dark")
MIN_CONTRAST = 4.5

# Contrast of every visible piece of text under `sel`: the text colour (SVG: its fill), with
# the opacity of the element and its ancestors, over the composite of the backgrounds of all
# its ancestors (from the page down), as WCAG 2 defines the ratio.
CONTRASTS = r"""(sel) => {
  const parse = (c) => { const m = /rgba?\(([^)]+)\)/.exec(c || ""); if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const over = (a, b) => [0, 1, 2].map(k => a[k] * a[3] + b[k] * (1 - a[3])).concat([1]);
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const chain = (el) => { const out = []; for (let n = el; n && n.nodeType === 1; n = n.parentElement) out.push(n); return out; };
  const out = [];
  for (const root of document.querySelectorAll(sel)) {
    for (const el of [root, ...root.querySelectorAll("*")]) {
      if (["STYLE", "SCRIPT", "NOSCRIPT", "OPTION", "title"].includes(el.tagName)) continue;
      const text = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join("").trim();
      if (!text || el.getClientRects().length === 0) continue;
      const cs = getComputedStyle(el);
      if (cs.visibility === "hidden") continue;
      const ancestors = chain(el);
      let bg = [255, 255, 255, 1];
      for (const n of ancestors.slice().reverse()) { const c = parse(getComputedStyle(n).backgroundColor); if (c && c[3] > 0) bg = over(c, bg); }
      let fg = parse(el instanceof SVGElement ? cs.fill : cs.color);
      if (!fg) continue;
      fg[3] *= ancestors.reduce((o, n) => o * parseFloat(getComputedStyle(n).opacity), 1);
      const l1 = lum(over(fg, bg)), l2 = lum(bg);
      out.push({id: root.id, text: text.slice(0, 40), ratio: (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05)});
    }
  }
  return out;
}"""

# Widths that show whether anything of a figure is cut or scrolled: the figure's content
# against its box, its box against the column, and the page against the window.
FIT = """(sel) => [...document.querySelectorAll(sel)].map(f => {
  const col = f.parentElement.getBoundingClientRect(), box = f.getBoundingClientRect();
  return {id: f.id, kind: f.dataset.kind, scroll: f.scrollWidth, client: f.clientWidth,
          right: box.right, column: col.right};
})"""
# The smallest text of each figure as drawn on screen, in CSS px: an SVG that shrinks to fit a
# column shrinks its text with it (font size x rendered width / viewBox width).
SMALLEST_TEXT = """(sel) => [...document.querySelectorAll(sel)].map(f => {
  let least = Infinity;
  for (const t of f.querySelectorAll("text")) {
    const svg = t.ownerSVGElement, vb = svg.viewBox.baseVal;
    const scale = vb && vb.width ? svg.getBoundingClientRect().width / vb.width : 1;
    if (t.textContent.trim() && t.getClientRects().length) least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * scale);
  }
  for (const e of f.querySelectorAll("*:not(svg *)")) {
    const own = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (own && e.getClientRects().length && !["STYLE", "SCRIPT", "OPTION"].includes(e.tagName)) least = Math.min(least, parseFloat(getComputedStyle(e).fontSize));
  }
  return {id: f.id, kind: f.dataset.kind, px: least};
})"""
MIN_TEXT_PX = 9.5  # the figures' smallest type is 10 px; a fitted SVG may shrink it by 5 %
PAGE_SCROLL = "() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]"



def theme_css() -> Path:
    import pydata_sphinx_theme

    css = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / "styles" / "pydata-sphinx-theme.css"
    if not css.is_file():
        pytest.skip(f"pydata-sphinx-theme's stylesheet not found at {css}")
    return css


@pytest.fixture(scope="module")
def column_page(figures, tmp_path_factory):
    """The explorables in a book-like column, styled by the real theme stylesheet."""
    folder = tmp_path_factory.mktemp("column")
    shutil.copy(theme_css(), folder / "theme.css")
    body = "\n".join(x.html for x in figures.values())
    for theme in THEMES:  # the theme is set before the figures render, as the book's <head> does
        (folder / f"{theme}.html").write_text(
            f'<!DOCTYPE html><html lang="en" data-theme="{theme}"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="theme.css"><title>explorables</title></head>'
            '<body><main class="bd-article" style="max-width: 740px; margin: 0 auto; padding: 0 1.5rem">'
            f"\n{body}\n</main></body></html>\n", encoding="utf-8")
    return serve(str(folder))


class ScreenVisit(Visit):
    """A page in a fresh context at one of VIEWPORTS, in the reader's colour scheme ``theme``
    (pydata-sphinx-theme's stored choice is set too, so the book opens in that theme);
    every non-local request is blocked and recorded, as in :class:`test_browser.Visit`."""

    def __init__(self, browser, url: str, viewport: str, theme: str):  # noqa: F811
        width, height = VIEWPORTS[viewport]
        self.errors, self.external, self.failed, self.dialogs = [], [], [], []
        self.context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=theme)
        self.context.add_init_script(f"try {{ localStorage.setItem('theme', '{theme}'); localStorage.setItem('mode', '{theme}'); }} catch (e) {{}}")
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.page.goto(url, wait_until="load")
        try:
            self.page.wait_for_load_state("networkidle", timeout=90000)
        except Exception as err:  # playwright's TimeoutError: once, on a loaded machine, a page took longer
            if "Timeout" not in str(err):
                raise
            self.page.reload(wait_until="load")                # a page that never settles fails here
            self.page.wait_for_load_state("networkidle", timeout=90000)



def check_explorables_on_screen(page, n: int, viewport: str, theme: str) -> None:
    """The page's ``n`` explorables fit their column (content vs box, box vs column), show no
    text under MIN_TEXT_PX, keep the page from scrolling sideways, keep every text at
    MIN_CONTRAST against its ground, and each responds to its control (shared with
    tests/test_page_steps.py)."""
    fits = page.evaluate(FIT, ".attnlib-xp")
    assert len(fits) == n
    cut = [f for f in fits if f["scroll"] > f["client"] + 1 or f["right"] > f["column"] + 1]
    assert not cut, f"{viewport}/{theme}: explorables wider than their column (content vs box, box vs column): {cut}"
    tiny = [t for t in page.evaluate(SMALLEST_TEXT, ".attnlib-xp") if t["px"] < MIN_TEXT_PX]
    assert not tiny, f"{viewport}/{theme}: text smaller than {MIN_TEXT_PX} px on screen: {tiny}"
    scroll_width, client_width = page.evaluate(PAGE_SCROLL)
    assert scroll_width <= client_width, f"{viewport}/{theme}: the page scrolls sideways ({scroll_width} > {client_width})"
    low = [c for c in page.evaluate(CONTRASTS, ".attnlib-xp") if c["ratio"] < MIN_CONTRAST]
    assert not low, f"{viewport}/{theme}: text below {MIN_CONTRAST}:1: " + "; ".join(
        f"{c['id'].split('-')[1]} {c['text']!r} {c['ratio']:.2f}" for c in low[:12])
    for f in fits:
        assert respond(page, f["id"], f["kind"]), f"{viewport}/{theme}: {f['kind']} did not respond"


SETTINGS = [(v, t) for v in VIEWPORTS for t in THEMES]


@pytest.mark.parametrize("viewport,theme", SETTINGS)
def test_explorables_fit_the_column_respond_and_are_readable(browser, column_page, figures, viewport, theme):  # noqa: F811
    visit = ScreenVisit(browser, column_page + f"{theme}.html", viewport, theme)
    try:
        page = visit.page
        assert page.get_attribute("html", "data-theme") == theme
        check_explorables_on_screen(page, len(figures), viewport, theme)
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


def _ink_rows(page, uid: str) -> tuple[float, float, float]:
    """Ink (total alpha) on the graph's canvas above and below its token line, and that line's y."""
    base = float(page.get_attribute(f"#{uid} [data-role=baseline]", "y1"))
    return page.evaluate("""([sel, base]) => { const c = document.querySelector(sel);
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, s = c.width / c.clientWidth;
      let above = 0, below = 0; const cut = Math.round(base * s), band = Math.ceil(4 * s);  /* half the widest stroke */
      for (let y = 0; y < c.height; y++) for (let x = 0; x < c.width; x++) {
        const a = d[4 * (y * c.width + x) + 3]; if (y < cut - band) above += a; else if (y > cut + band) below += a; }
      return [above, below, base]; }""", [f"#{uid} canvas", base])


def test_graph_explorable_draws_earlier_keys_above_like_the_static_figure(browser, real, tmp_path_factory):  # noqa: F811
    """Causal weights (every edge to an earlier key or itself) leave ink only above the line;
    strictly anti-causal weights (every edge to a later key) only below, as in chapter 8's
    static figures."""
    scores, T = real["scores"].double(), real["scores"].shape[0]
    earlier = attnlib.softmax(scores.masked_fill(~attnlib.causal_mask(T), float("-inf")))
    later_only = torch.ones(T, T, dtype=torch.bool).triu(1)  # key j > i; the last row has no key
    later = attnlib.softmax(scores.masked_fill(~later_only, float("-inf")))
    a, b = xp.graph_threshold(earlier, real["tokens"], threshold=0.0), xp.graph_threshold(later, real["tokens"], threshold=0.0)
    folder = tmp_path_factory.mktemp("graphs")
    (folder / "index.html").write_text(xp.standalone_page([a, b]), encoding="utf-8")
    visit = Visit(browser, serve(str(folder)) + "index.html")
    try:
        for x in (a, b):  # drop the edges of weight 0 (masked keys; for b also the self-loops)
            visit.page.evaluate(SET_RANGE, [f"#{x.uid}-threshold", 0.001])
        above, below, _ = _ink_rows(visit.page, a.uid)
        assert above > 0 and below == 0, f"edges to earlier keys: ink above {above}, below {below}"
        above, below, _ = _ink_rows(visit.page, b.uid)
        assert below > 0 and above == 0, f"edges to later keys: ink above {above}, below {below}"
        assert visit.errors == []
    finally:
        visit.close()


# ------------------------------------------------------------------ the shared convention (no browser)
def test_static_graph_figure_follows_the_explorables_convention():
    """draw_attention_graph bends an edge to an earlier key to the side named by
    GRAPH_EARLIER_SIDE, an edge to a later key to the other side, and colours by weight with
    GRAPH_CMAP from 0: the explorable of chapter 8 draws the same (its data carries the side)."""
    import inspect

    import matplotlib.pyplot as plt
    import networkx as nx
    from matplotlib.patches import FancyArrowPatch

    from attnlib.plotting import draw_attention_graph

    sides = {}
    for name, (i, j) in {"earlier": (2, 0), "later": (0, 2)}.items():
        g = nx.DiGraph()
        g.add_nodes_from([(k, {"token": t}) for k, t in enumerate(["a", "b", "c"])])
        g.add_edge(i, j, weight=0.8)
        fig = draw_attention_graph(g)
        ax = fig.axes[0]
        fig.canvas.draw()
        arcs = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
        assert len(arcs) == 1
        assert not ax.yaxis_inverted()
        ys = np.concatenate(arcs[0].get_path().to_polygons(closed_only=False))[:, 1]  # data coordinates, curve flattened
        sides[name] = "above" if ys.mean() > 0 else "below"     # the tokens sit on y = 0
        plt.close(fig)
    assert sides == {"earlier": xp.GRAPH_EARLIER_SIDE, "later": {"above": "below", "below": "above"}[xp.GRAPH_EARLIER_SIDE]}
    assert inspect.signature(draw_attention_graph).parameters["cmap"].default == xp.GRAPH_CMAP
    w = torch.tensor([[0.6, 0.4], [0.3, 0.7]])  # largest weight 0.7: the scale still ends at GRAPH_VMAX
    data = re.search(r"view\(root, (\{.*\}), UID\);", xp.graph_threshold(w, ["a", "b"]).html).group(1)
    assert f'"earlier":"{xp.GRAPH_EARLIER_SIDE}"' in data and f'"vmax":{xp.GRAPH_VMAX}' in data


def test_explorable_viridis_is_matplotlibs():
    """The colour stops in xp_core.js are matplotlib's viridis (the static figures' colour map)."""
    js = (ROOT / "attnlib" / "static" / "xp_core.js").read_text()
    stops = np.array(eval(re.search(r"var VIRIDIS = (\[\[.*?\]\]);", js, re.S).group(1)), dtype=float)
    want = matplotlib.colormaps[xp.GRAPH_CMAP](np.linspace(0, 1, len(stops)))[:, :3] * 255
    assert np.abs(stops - want).max() <= 1.0


@pytest.mark.parametrize("viewport,theme", [("desktop", "light"), ("phone", "dark")])
def test_axe_finds_no_serious_violation_in_the_explorables(browser, column_page, viewport, theme):  # noqa: F811
    """axe-core (with its experimental label-content-name-mismatch rule) on every explorable:
    no serious or critical violation (the book-wide run is tests/test_page_a11y.py)."""
    from axe_playwright_python.sync_playwright import Axe
    visit = ScreenVisit(browser, column_page + f"{theme}.html", viewport, theme)
    try:
        result = Axe().run(visit.page, context=".attnlib-xp",
                           options={"rules": {"label-content-name-mismatch": {"enabled": True}}}).response
    finally:
        visit.close()
    bad = [(v["id"], v["impact"], [n["target"] for n in v["nodes"][:3]]) for v in result["violations"]
           if v["impact"] in ("serious", "critical")]
    assert not bad, bad


OVERLAPS = """() => { const out = [];
  for (const svg of document.querySelectorAll('.attnlib-xp:not([data-kind=convex]) svg')) {
    const boxes = [...svg.querySelectorAll('text:not([transform])')].filter(t => t.textContent.trim())
      .map(t => ({t: t.textContent, r: t.getBoundingClientRect()})).filter(b => b.r.width > 0);
    for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
      const p = boxes[a].r, q = boxes[b].r;
      const w = Math.min(p.right, q.right) - Math.max(p.left, q.left), h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (w > 1 && h > 1) out.push([svg.closest('.attnlib-xp').dataset.kind, boxes[a].t, boxes[b].t, Math.round(h)]);
    }
  }
  return out; }"""


@pytest.fixture(scope="module")
def long_page(tmp_path_factory):
    """Chapter 7's case: a hover view of 31 tokens (a real sentence pair of the speech)."""
    from attnlib import corpus
    words = corpus.load_text().split()
    run = attnlib.encoder.get_attentions(" ".join(words[:14]), " ".join(words[14:27]))
    assert len(run.tokens) >= 30, len(run.tokens)
    folder = tmp_path_factory.mktemp("long")
    (folder / "index.html").write_text(xp.standalone_page([xp.head_hover(run.attentions[1][0, 3], run.tokens, query=5)]),
                                       encoding="utf-8")
    return serve(str(folder))


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_no_two_upright_labels_of_a_drawing_overlap(browser, column_page, long_page, figures, viewport):  # noqa: F811
    """Chapter 7's hover view put 10 px labels on 7 px cells at 390 px: a heatmap now labels
    one token in every few when its cells are narrower than a line of text.  (Not chapter 1's
    scatter of value vectors, whose labels sit at the points: two close points' labels touch;
    left for a label-placement pass.)"""
    overlaps = []
    for url in (column_page + "light.html", long_page + "index.html"):
        visit = ScreenVisit(browser, url, viewport, "light")
        try:
            overlaps += visit.page.evaluate(OVERLAPS)
        finally:
            visit.close()
    assert not overlaps, overlaps[:8]
