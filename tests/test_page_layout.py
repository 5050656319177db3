"""The built book on every screen (``book``): a phone's 390 px and a desktop's 1280 px, light
and dark, in headless Chromium with every non-local request blocked (tests/test_browser.py's
set-up and helpers).

* No page scrolls sideways (``document.scrollingElement``), in either theme.
* Navigation: at 390 px the hamburger opens the navigation drawer and the contents icon the
  "on this page" panel; at 1280 px the hamburger hides and shows the sidebar.
* Wide display maths and code never get cut: each either fits its box or scrolls inside it
  with a fade on the edge that hides more.
* Captions are body text: weight 400 or more, contrast at least 4.5:1.
* Every explorable fits its column, responds to its control, and its text has a contrast of
  at least 4.5:1, on the phone and in dark mode, where neither it nor a bertviz view sits on a
  light card (tests/test_page_explorables.py checks the
  same on a small generated page without the book).
* A click on the title of a solution dropdown (a link back to the exercise) opens the solution.
"""
from __future__ import annotations

import pytest

from test_browser import HTML, book, book_pages, browser, serve  # noqa: F401  (fixtures)
from test_page_explorables import (CONTRASTS, FIT, MIN_CONTRAST, PAGE_SCROLL, SMALLEST_TEXT, MIN_TEXT_PX,
                                   ScreenVisit, respond)

pytestmark = pytest.mark.book

# Display maths and code blocks wider than their box that either do not scroll or scroll with
# no visible cue (course-layout.js marks them with data-overflow; the CSS fades that edge).
CUT_BLOCKS = """() => [...document.querySelectorAll(
    '.bd-article mjx-container[display=true], .bd-article div.highlight pre, .bd-article .cell_output pre')]
  .filter(e => e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
  .filter(e => { const cs = getComputedStyle(e), mask = cs.maskImage || cs.webkitMaskImage || 'none';
    return !['auto', 'scroll'].includes(cs.overflowX) || !e.hasAttribute('data-overflow') || mask === 'none'; })
  .map(e => e.tagName + ': ' + e.textContent.trim().slice(0, 50))"""
CAPTIONS = """() => [...document.querySelectorAll('.bd-article figure figcaption p, .bd-article figure figcaption')]
  .filter(e => e.getClientRects().length).map(e => parseInt(getComputedStyle(e).fontWeight, 10))"""
# Light cards around a view in dark mode: ancestors (up to the article) whose background is
# light (relative luminance > 0.4), e.g. the card pydata-sphinx-theme puts behind HTML outputs.
LIGHT_CARDS = """(sel) => { const lum = (c) => { const m = /rgba?\\(([^)]+)\\)/.exec(c); if (!m) return 0;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number); if (p.length > 3 && p[3] === 0) return 0;
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(p[0]) + 0.7152 * f(p[1]) + 0.0722 * f(p[2]); };
  const out = [];
  for (const v of document.querySelectorAll(sel)) {
    for (let n = v.parentElement; n && !n.classList.contains('bd-article'); n = n.parentElement) {
      const bg = getComputedStyle(n).backgroundColor;
      if (lum(bg) > 0.4) { out.push((v.id || v.className) + ' in ' + n.className + ' ' + bg); break; }
    }
  }
  return out; }"""
SET_THEME = "(t) => document.documentElement.setAttribute('data-theme', t)"
VISIBLE = """(sel) => { const e = document.querySelector(sel); if (!e) return false;
  const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
  return r.width > 0 && r.height > 0 && r.right > 0 && r.left < innerWidth && cs.visibility !== 'hidden' && cs.display !== 'none'; }"""


def _pages(book):  # noqa: F811
    return [p.relative_to(book).as_posix() for p in book_pages()]


def _sideways(page) -> tuple[int, int] | None:
    scroll_width, client_width = page.evaluate(PAGE_SCROLL)
    return None if scroll_width <= client_width else (scroll_width, client_width)


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_no_page_scrolls_sideways_and_nothing_is_cut(book, browser, viewport):  # noqa: F811
    base, problems = serve(str(book)), {}
    for rel in _pages(book):
        visit = ScreenVisit(browser, base + rel, viewport, "light")
        try:
            page, found = visit.page, {}
            page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise ? MathJax.startup.promise : null")
            for theme in ("light", "dark"):
                page.evaluate(SET_THEME, theme)
                if (wide := _sideways(page)) is not None:
                    found[f"page scrolls sideways ({theme})"] = wide
                if low := [c for c in page.evaluate(CONTRASTS, ".bd-article figure figcaption") if c["ratio"] < MIN_CONTRAST]:
                    found[f"caption contrast ({theme})"] = [(c["text"], round(c["ratio"], 2)) for c in low[:3]]
            if cut := page.evaluate(CUT_BLOCKS):
                found["cut blocks"] = cut[:5]
            if thin := [w for w in page.evaluate(CAPTIONS) if w < 400]:
                found["caption weights"] = thin[:5]
            page.evaluate(SET_THEME, "light")
            if found:
                problems[rel] = found
        finally:
            visit.close()
    assert not problems, f"{viewport}: {problems}"


def _open_modal(page, toggle: str, dialog: str) -> bool:
    page.click(toggle)
    page.wait_for_timeout(400)
    return page.evaluate(f"() => !!document.querySelector('{dialog}[open]')")


def test_the_navigation_drawer_and_the_contents_panel_open_on_a_phone(book, browser):  # noqa: F811
    visit = ScreenVisit(browser, serve(str(book)) + "chapters/05_masking.html", "phone", "light")
    try:
        page = visit.page
        assert page.evaluate(VISIBLE, ".bd-header-article .primary-toggle"), "no visible hamburger at 390 px"
        assert page.eval_on_selector_all(".primary-toggle", "els => els.length") == 1, "a second (hidden) .primary-toggle"
        assert _open_modal(page, ".bd-header-article .primary-toggle", "#pst-primary-sidebar-modal"), "the drawer did not open"
        assert page.evaluate(VISIBLE, "#pst-primary-sidebar-modal .bd-sidebar-primary, #pst-primary-sidebar-modal nav"), \
            "the drawer opened empty"
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
        assert _open_modal(page, ".bd-header-article .secondary-toggle", "#pst-secondary-sidebar-modal"), \
            "the contents panel did not open"
        listed = page.evaluate("""() => { const h = document.querySelector('.bd-article section > h2');
          const title = h.textContent.replace(/#$/, '').trim().split(/\\s+/).slice(1, 4).join(' ');
          return document.querySelector('#pst-secondary-sidebar-modal').innerText.includes(title) ? '' : title; }""")
        assert listed == "", f"the contents panel does not list the page's first section ({listed!r})"
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


def test_the_sidebar_collapses_and_comes_back_on_a_desktop(book, browser):  # noqa: F811
    visit = ScreenVisit(browser, serve(str(book)) + "chapters/05_masking.html", "desktop", "light")
    try:
        page = visit.page
        assert page.evaluate(VISIBLE, "#pst-primary-sidebar")
        seen = []
        for _ in range(2):
            page.click(".bd-header-article .primary-toggle")
            page.wait_for_timeout(700)  # the theme animates the sidebar
            seen.append(page.evaluate(VISIBLE, "#pst-primary-sidebar"))
            assert not page.evaluate("() => !!document.querySelector('#pst-primary-sidebar-modal[open]')"), \
                "at 1280 px the hamburger opened the phone drawer"
        assert seen == [False, True], f"sidebar visible after each click: {seen}"
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_book_explorables_fit_respond_and_are_readable_in_both_themes(book, browser, viewport):  # noqa: F811
    pages = [p for p in book_pages() if "attnlib-xp" in p.read_text(encoding="utf-8")]
    assert pages, "no page of the book holds an explorable"
    base, problems = serve(str(book)), []
    for theme in ("light", "dark"):
        for path in pages:
            rel = path.relative_to(book).as_posix()
            visit = ScreenVisit(browser, base + rel, viewport, theme)
            try:
                page = visit.page
                assert page.get_attribute("html", "data-theme") == theme, f"{rel}: the page did not open in {theme} mode"
                fits = page.evaluate(FIT, ".attnlib-xp")
                problems += [f"{rel} {theme}: {f['kind']} wider than its column {f}" for f in fits
                             if f["scroll"] > f["client"] + 1 or f["right"] > f["column"] + 1]
                problems += [f"{rel} {theme}: {t['kind']} text of {t['px']:.1f} px" for t in page.evaluate(SMALLEST_TEXT, ".attnlib-xp")
                             if t["px"] < MIN_TEXT_PX]
                problems += [f"{rel} {theme}: {c['id'].split('-')[1]} {c['text']!r} contrast {c['ratio']:.2f}"
                             for c in page.evaluate(CONTRASTS, ".attnlib-xp") if c["ratio"] < MIN_CONTRAST]
                problems += [f"{rel} {theme}: {f['kind']} did not respond" for f in fits if not respond(page, f["id"], f["kind"])]
                if theme == "dark":
                    problems += [f"{rel}: light card in dark mode: {c}" for c in page.evaluate(LIGHT_CARDS, ".attnlib-xp, div[id^=bertviz-]")]
                assert visit.errors == [] and visit.external == [], (rel, visit.errors, visit.external)
            finally:
                visit.close()
    assert not problems, f"{viewport}:\n" + "\n".join(problems[:30])


def test_a_click_on_a_solution_title_opens_the_solution(book, browser):  # noqa: F811
    visit = ScreenVisit(browser, serve(str(book)) + "chapters/01_weighted_average.html", "desktop", "light")
    try:
        page = visit.page
        solution = page.eval_on_selector(".solution.dropdown", "e => e.id")
        sel = f"[id='{solution}']"
        body = f"{sel} > :not(.admonition-title)"
        assert not page.is_visible(body), "the solution is shown before any click"
        page.click(f"{sel} > .admonition-title a")
        page.wait_for_timeout(400)
        assert page.is_visible(body), "a click on the title's link did not open the solution"
        assert page.evaluate("() => location.hash") == "", "the click jumped to the exercise"
        page.click(f"{sel} > .admonition-title a")
        page.wait_for_timeout(400)
        assert not page.is_visible(body), "a second click did not close the solution"
        assert visit.errors == []
    finally:
        visit.close()
