"""Page load leaves the main thread free (issue 38, item 7): what guarantees it, not how long
it takes (``bench/bench_page_load.py`` measures the tasks; a threshold would flake on a loaded
2-core machine).

Checked on a generated page that loads what a page of the book loads for its maths and its
wide boxes: the MathJax configuration of ``_config.yml`` (as Sphinx and MyST write it), the
vendored MathJax, and ``_static/course-layout.css`` / ``.js`` written into the page as
``_ext/page_weight.py`` writes them; many formulas (Sphinx's ``span.math`` / ``div.math``),
a long list of equations for the phone's reflow, and a wide code block far below the fold.
No book build is needed.

* MathJax loads its ``ui/lazy`` extension from the vendored copy (nothing from another host).
* Formulas are typeset near the viewport first and in small batches, one task each: with the
  page's idle callbacks held back, the formulas far below stay placeholders, and one of them is
  typeset when the reader scrolls to it.  With idle time, every formula is typeset, and
  ``MathJax.startup.promise`` settles only then (the book's other checks wait on it).
* Wide boxes are measured after load, never in the ``DOMContentLoaded`` handler, and every one
  that scrolls becomes a Tab stop wherever it is on the page.
* A long list of equations far below the fold is still reflowed on a phone.

``book``: the same on two chapters of the built book.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from test_browser import HTML, Visit, book, book_pages, browser, serve  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "_static" / "vendor" / "mathjax"
N_PARAGRAPHS = 120       # one inline formula each; a display formula every third: 160 formulas
PHONE = {"width": 390, "height": 844}
# What MyST-Parser adds to the configuration (myst_parser/sphinx_ext/mathjax.py): MathJax
# reads maths only inside these classes; the chapter's top section carries the ignore class.
MYST_CLASSES = "tex2jax_process|mathjax_process|math|output_area"

# Records, from before the page's first script, every formula as MathJax inserts it: the
# formula's number (data-k of its holder) and the batch (one MutationObserver call per task
# that typeset something).  Also counts the layout reads made while DOMContentLoaded is
# dispatched (window capture listener first, window bubble listener last).
RECORD = """(() => {
  window.__typeset = []; window.__batches = 0; window.__dclReads = []; let inDCL = false;
  window.addEventListener('DOMContentLoaded', () => { inDCL = true; }, true);
  window.addEventListener('DOMContentLoaded', () => { inDCL = false; });
  for (const [proto, names] of [[Element.prototype, ['scrollWidth', 'clientWidth', 'scrollLeft', 'clientHeight']],
                                [HTMLElement.prototype, ['offsetWidth', 'offsetHeight', 'offsetTop']]]) {
    for (const name of names) {
      const d = Object.getOwnPropertyDescriptor(proto, name);
      Object.defineProperty(proto, name, {configurable: true, enumerable: d.enumerable, set: d.set,
        get() { if (inDCL) window.__dclReads.push(name); return d.get.call(this); }});
    }
  }
  const rect = Element.prototype.getBoundingClientRect;
  Element.prototype.getBoundingClientRect = function () { if (inDCL) window.__dclReads.push('getBoundingClientRect'); return rect.call(this); };
  new MutationObserver((records) => {
    let here = [];
    for (const r of records) for (const n of r.addedNodes) {
      if (n.nodeType !== 1) continue;
      const found = n.matches('mjx-container[jax]') ? [n] : [...n.querySelectorAll('mjx-container[jax]')];
      for (const c of found) { const h = c.closest('[data-k]'); if (h) here.push(+h.dataset.k); }
    }
    if (here.length) { window.__batches += 1; for (const k of here) window.__typeset.push([k, window.__batches]); }
  }).observe(document, {childList: true, subtree: true});
})();"""
NO_IDLE = "window.requestIdleCallback = function () { return 0; }; window.cancelIdleCallback = function () {};"
SETTLED = ("() => MathJax.startup.promise.then(() => window.courseMathReflowed || null)"
           ".then(() => new Promise(r => setTimeout(r, 300))).then(() => true)")
TYPESET = "(k) => { const h = document.querySelector(`[data-k='${k}']`); return !!h.querySelector('mjx-container[jax] mjx-c'); }"
LAZY = "(k) => !!document.querySelector(`[data-k='${k}'] mjx-lazy`)"


def mathjax_config() -> dict:
    """``window.MathJax`` as the book writes it: ``_config.yml``'s ``mathjax3_config`` with
    MyST's class list."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    mj = json.loads(json.dumps(config["sphinx"]["config"].get("mathjax3_config") or {}))
    mj.setdefault("options", {})["processHtmlClass"] = MYST_CLASSES
    return mj


def page_html() -> str:
    css = (ROOT / "_static" / "course-layout.css").read_text(encoding="utf-8")
    js = (ROOT / "_static" / "course-layout.js").read_text(encoding="utf-8")
    body, k = [], 0
    for i in range(N_PARAGRAPHS):
        body.append(f'<p>Paragraph {i}: the weight <span class="math notranslate nohighlight" data-k="{k}">'
                    f'\\(w_{{{i}}} = e^{{s_{{{i}}}}} / \\sum_j e^{{s_j}}\\)</span> of token {i}, '
                    'a sentence long enough to wrap on a phone and to give the page some height.</p>')
        k += 1
        if i % 3 == 2:
            body.append(f'<div class="math notranslate nohighlight" data-k="{k}">'
                        f'\\[A_{{{i}}} = \\mathrm{{softmax}}\\left(\\frac{{Q_{{{i}}} K^\\top}}{{\\sqrt{{d_k}}}}\\right)\\]</div>')
            k += 1
    long_list = ("Q = X W_Q, \\qquad K = X W_K, \\qquad V = X W_V, \\qquad S = \\frac{Q K^\\top}{\\sqrt{d_k}}, "
                 "\\qquad A = \\mathrm{softmax}(S), \\qquad \\mathrm{out} = A V")
    body.append(f'<div class="math notranslate nohighlight" data-k="{k}" id="long-list">\\[{long_list}\\]</div>')
    body.append('<div class="highlight" id="wide-code"><pre>' + "wide_code_line = " + " + ".join(f"x{j}" for j in range(80))
                + "</pre></div>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>lazy maths</title>"
            f"<script>window.MathJax = {json.dumps(mathjax_config())}</script>"
            '<script defer="defer" src="_static/vendor/mathjax/tex-mml-chtml.js"></script>'
            f"<style>\n{css}</style><script>\n{js}</script></head>"
            '<body><main><article class="bd-article" role="main">'
            '<section class="tex2jax_ignore mathjax_ignore" id="top"><h1>Lazy maths</h1>\n'
            + "\n".join(body) + "\n</section></article></main></body></html>\n")


N_FORMULAS = N_PARAGRAPHS + N_PARAGRAPHS // 3 + 1


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("page_load")
    (folder / "_static" / "vendor").mkdir(parents=True)
    os.symlink(VENDOR, folder / "_static" / "vendor" / "mathjax")
    (folder / "page.html").write_text(page_html(), encoding="utf-8")
    return serve(str(folder)) + "page.html"


class Load:
    """A fresh context at ``viewport`` with RECORD (and, with ``idle=False``, no idle callbacks)
    installed before the page's scripts; every request to another host fails the test."""

    def __init__(self, browser, url: str, viewport=PHONE, idle: bool = True):  # noqa: F811
        self.context = browser.new_context(viewport=viewport)
        self.context.add_init_script(RECORD if idle else RECORD + NO_IDLE)
        self.external, self.errors = [], []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.goto(url, wait_until="load")

    _route = Visit._route   # every request to another host is recorded and refused

    def close(self):
        self.context.close()


def test_mathjax_loads_its_lazy_extension_from_the_book():
    config = mathjax_config()
    assert "ui/lazy" in config.get("loader", {}).get("load", []), "_config.yml's mathjax3_config does not load ui/lazy"
    assert (VENDOR / "ui" / "lazy.js").is_file(), "ui/lazy.js is not vendored under _static/vendor/mathjax/ui/"
    assert "pageReady" in (ROOT / "_static" / "course-layout.js").read_text(encoding="utf-8")


def test_formulas_are_typeset_near_the_viewport_first_in_small_batches(browser, site):  # noqa: F811
    load = Load(browser, site)
    try:
        page = load.page
        assert page.evaluate(SETTLED)
        order = page.evaluate("window.__typeset")
        batches = page.evaluate("window.__batches")
        first = {}
        for k, batch in order:
            first.setdefault(k, batch)
        assert sorted(first) == list(range(N_FORMULAS)), "not every formula was typeset"
        sizes = [sum(1 for b in first.values() if b == n) for n in range(1, batches + 1)]
        assert max(sizes) <= 24, f"a batch typeset {max(sizes)} formulas in one task (at most 24): {sizes[:12]}"
        # the first batch is near the top of the page; the last formulas come in the last batches
        assert max(k for k, b in first.items() if b == 1) < N_FORMULAS // 4, sorted(k for k, b in first.items() if b == 1)
        assert first[N_FORMULAS - 2] > first[0]
        assert page.evaluate("() => MathJax.startup.document.lazyList !== undefined"), "ui/lazy is not loaded"
        assert load.external == [] and load.errors == [], (load.external, load.errors)
    finally:
        load.close()


def test_formulas_far_below_wait_until_the_reader_scrolls_to_them(browser, site):  # noqa: F811
    load = Load(browser, site, idle=False)     # no idle time: only what the reader sees is typeset
    try:
        page = load.page
        page.wait_for_function(TYPESET, arg=0, timeout=30_000)
        page.wait_for_timeout(800)
        last, middle = N_FORMULAS - 2, N_FORMULAS // 2
        assert page.evaluate(LAZY, last), "a formula at the bottom of the page was typeset at load"
        assert page.evaluate(LAZY, middle)
        page.eval_on_selector(f"[data-k='{last}']", "e => e.scrollIntoView()")
        page.wait_for_function(TYPESET, arg=last, timeout=30_000)
        assert page.evaluate(f"() => !!document.querySelector(\"[data-k='{last}'] mjx-assistive-mml\")"), \
            "the formula scrolled to has no assistive MathML"
        assert page.evaluate(LAZY, middle), "a formula nowhere near the viewport was typeset"
        assert load.external == [] and load.errors == [], (load.external, load.errors)
    finally:
        load.close()


def test_startup_promise_settles_when_every_formula_is_typeset(browser, site):  # noqa: F811
    load = Load(browser, site)
    try:
        page = load.page
        state = page.evaluate("""() => MathJax.startup.promise.then(() => ({
            lazy: document.querySelectorAll('mjx-lazy').length,
            typeset: [...document.querySelectorAll('[data-k]')].filter(h => h.querySelector('mjx-container[jax] mjx-c')).length,
            assistive: document.querySelectorAll('[data-k] mjx-assistive-mml').length}))""")
        assert state == {"lazy": 0, "typeset": N_FORMULAS, "assistive": N_FORMULAS}, state
    finally:
        load.close()


def test_wide_boxes_are_measured_after_load_and_all_become_tab_stops(browser, site):  # noqa: F811
    load = Load(browser, site)
    try:
        page = load.page
        assert page.evaluate(SETTLED)
        page.wait_for_function("() => document.querySelector('#wide-code pre').getAttribute('tabindex') === '0'",
                               timeout=10_000)
        assert page.evaluate("window.__dclReads") == [], "layout was read in the DOMContentLoaded handler"
        code = page.eval_on_selector("#wide-code pre", "e => [e.getAttribute('data-overflow'), e.getAttribute('role')]")
        assert code == ["right", "region"], code
        assert page.evaluate("() => document.querySelector('#wide-code pre').getBoundingClientRect().top > innerHeight * 3")
    finally:
        load.close()


def test_a_long_list_far_below_is_still_reflowed_on_a_phone(browser, site):  # noqa: F811
    load = Load(browser, site)
    try:
        page = load.page
        assert page.evaluate(SETTLED)
        div = page.eval_on_selector("#long-list", """d => ({reflowed: d.hasAttribute('data-reflowed'),
            rows: d.querySelectorAll('mjx-mtr').length, fits: d.querySelector('mjx-container').scrollWidth <= d.clientWidth + 1})""")
        assert div == {"reflowed": True, "rows": div["rows"], "fits": True} and div["rows"] > 1, div
    finally:
        load.close()


# --- the built book ---------------------------------------------------------------------------

@pytest.mark.book
@pytest.mark.parametrize("rel", ["chapters/02_queries_keys_values.html", "chapters/11_at_scale.html"])
def test_book_pages_typeset_their_maths_lazily(book, browser, rel):  # noqa: F811
    text = (book / rel).read_text(encoding="utf-8")
    assert '"ui/lazy"' in text, f"{rel}: the page's MathJax configuration does not load ui/lazy"
    context = browser.new_context(viewport=PHONE)
    context.add_init_script(NO_IDLE)
    try:
        page = context.new_page()
        page.goto(serve(str(book)) + rel, wait_until="load")
        page.wait_for_function("() => document.querySelectorAll('.bd-article mjx-container[jax]').length > 0", timeout=30_000)
        page.wait_for_timeout(800)
        lazy = page.evaluate("() => document.querySelectorAll('.bd-article mjx-lazy').length")
        assert lazy > 0, f"{rel}: every formula was typeset at load"
        page.evaluate("() => [...document.querySelectorAll('.bd-article mjx-lazy')].pop().scrollIntoView()")
        page.wait_for_function("(n) => document.querySelectorAll('.bd-article mjx-lazy').length < n", arg=lazy, timeout=30_000)
    finally:
        context.close()
