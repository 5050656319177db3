"""A screen reader and a keyboard can follow every page of the built book (``book``).

axe-core (the copy bundled by ``axe-playwright-python``, pinned in constraints.txt) runs on
every chapter, the preface and the references, at 1280 px in light mode and at 390 px in dark
mode (two of the four settings; the layout tests cover all four), with its experimental rule
``label-content-name-mismatch`` switched on (a control whose spoken name hides its visible
words).  No serious or critical violation is allowed; a minor or moderate one must be listed in
:data:`ACCEPTED` with the reason it stays.

The keyboard path: formulas are not Tab stops (MathJax's menu is taken out of the tab order in
``_config.yml``; a formula that scrolls sideways is one, as every scrolling box is), and a box
that scrolls sideways takes focus, so arrow keys can scroll it.
"""
from __future__ import annotations

import pytest

from test_browser import book, book_pages, browser, serve  # noqa: F401  (fixtures)
from test_page_explorables import ScreenVisit

SETTINGS = [("desktop", "light"), ("phone", "dark")]
AXE_OPTIONS = {"resultTypes": ["violations"], "rules": {"label-content-name-mismatch": {"enabled": True}}}
#: minor or moderate violations that stay, with the reason (rule id -> reason)
ACCEPTED: dict[str, str] = {}

# Every element in the tab order, in order: what it is, and whether it is maths.
TAB_STOPS = """() => [...document.querySelectorAll('a[href], button, input, select, textarea, summary, [tabindex]')]
  .filter(e => e.tabIndex >= 0 && !e.disabled && e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden')
  .map(e => ({tag: e.tagName.toLowerCase(), maths: !!e.closest('mjx-container'), scroll: e.hasAttribute('data-scroll-focus'),
              text: (e.getAttribute('aria-label') || e.textContent || '').trim().slice(0, 40)}))"""
# Boxes that scroll sideways but cannot take focus and hold nothing that can.
UNREACHABLE = """() => [...document.querySelectorAll('.bd-article *')].filter(e => {
    const s = getComputedStyle(e);
    if (!['auto', 'scroll'].includes(s.overflowX) || e.scrollWidth <= e.clientWidth + 1 || e.getClientRects().length === 0) return false;
    return e.tabIndex < 0 && !e.querySelector('a[href], button, input, select, textarea, [tabindex]:not([tabindex="-1"])');
  }).map(e => e.tagName.toLowerCase() + '.' + [...e.classList].join('.'))"""


def _pages(book):  # noqa: F811
    return [p.relative_to(book).as_posix() for p in book_pages()
            if p.name not in ("search.html", "genindex.html") and p.relative_to(book).parts[0] != "_build"]


def _settle(page):
    page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise ? MathJax.startup.promise : null")
    page.wait_for_timeout(1200)  # course-layout.js marks scrolling boxes on load and 150 ms after


@pytest.mark.book
@pytest.mark.parametrize("viewport,theme", SETTINGS)
def test_axe_finds_no_serious_violation_on_any_page(book, browser, viewport, theme):  # noqa: F811
    from axe_playwright_python.sync_playwright import Axe
    axe, base, serious, other, counts = Axe(), serve(str(book)), [], [], {}
    pages = _pages(book)
    assert len(pages) >= 12, pages
    for rel in pages:
        visit = ScreenVisit(browser, base + rel, viewport, theme)
        try:
            _settle(visit.page)
            violations = axe.run(visit.page, options=AXE_OPTIONS).response["violations"]
        finally:
            visit.close()
        counts[rel] = sum(len(v["nodes"]) for v in violations)
        for v in violations:
            where = f"{rel}: {v['id']} ({v['impact']}) x{len(v['nodes'])}: {v['nodes'][0]['target']}"
            if v["impact"] in ("serious", "critical"):
                serious.append(where)
            elif v["id"] not in ACCEPTED:
                other.append(where)
    print(f"axe-core violations per page at {viewport}/{theme}: {counts}")
    assert not serious, f"{viewport}/{theme}: serious or critical violations:\n" + "\n".join(serious)
    assert not other, f"{viewport}/{theme}: minor or moderate violations not in ACCEPTED:\n" + "\n".join(other)


@pytest.mark.book
def test_formulas_are_not_tab_stops_and_scrolling_boxes_are(book, browser):  # noqa: F811
    base, problems, stops = serve(str(book)), [], {}
    for rel in _pages(book):
        if not rel.startswith("chapters/"):
            continue
        for viewport in ("desktop", "phone"):
            visit = ScreenVisit(browser, base + rel, viewport, "light")
            try:
                _settle(visit.page)
                tab = visit.page.evaluate(TAB_STOPS)
                unreachable = visit.page.evaluate(UNREACHABLE)
            finally:
                visit.close()
            maths = [t for t in tab if t["maths"] and not t["scroll"]]
            stops[f"{rel}@{viewport}"] = len(tab)
            if maths:
                problems.append(f"{rel} {viewport}: {len(maths)} formulas in the tab order")
            if unreachable:
                problems.append(f"{rel} {viewport}: boxes that scroll but take no focus: {unreachable[:4]}")
    print("Tab stops per page:", stops)
    assert not problems, "\n".join(problems)


# The element that has focus after each Tab, and whether a focus indicator is drawn on it: an
# outline of at least 2 px, or a box shadow (the theme's own focus style on some controls).
FOCUS_SEEN = """() => {
  const e = document.activeElement, s = getComputedStyle(e);
  const ring = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2;
  return {text: (e.getAttribute('aria-label') || e.getAttribute('title') || e.textContent || e.tagName).trim().slice(0, 40),
          seen: ring || s.boxShadow !== 'none'};
}"""


@pytest.mark.book
@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_every_early_tab_stop_shows_where_the_focus_is(book, browser, viewport):  # noqa: F811
    """WCAG 2.4.7: a keyboard reader sees where the focus is.  The first 24 Tab stops of a
    chapter (the header's buttons, the sidebar toggle, the page's first links and boxes) each draw
    a focus indicator; the theme's header buttons drew none (found by a keyboard check at 390 px)."""
    visit = ScreenVisit(browser, serve(str(book)) + "chapters/09_real_model.html", viewport, "light")
    try:
        _settle(visit.page)
        unseen = []
        for _ in range(24):
            visit.page.keyboard.press("Tab")
            stop = visit.page.evaluate(FOCUS_SEEN)
            if not stop["seen"]:
                unseen.append(stop["text"])
    finally:
        visit.close()
    assert not unseen, f"Tab stops with no visible focus at {viewport}: {unseen}"

