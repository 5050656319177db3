"""What a sceptical reader sees on the built book (``book``), in headless Chromium with every
non-local request blocked (tests/test_browser.py's set-up), beyond tests/test_page_layout.py:

* Display maths fits its column at 390 px and at 1280 px: a list of equations joined by
  \\qquad is packed into lines and a chain of relations is broken before its relations
  (course-layout.js), instead of scrolling inside its box.
* Inline maths wider than the column is not clipped: it becomes a block of its own that scrolls.
* The reflow only re-lays the maths out: the same glyphs, in the same order, as the equation
  drawn on one line at 1280 px; maths in a solution dropdown is laid out when it opens; and a window that gets wider again gets the one-line equation
  back.
* Every control on a phone (390 px) is a touch target of at least 44 x 44 CSS px: the header's
  icons, copy buttons, "Show code cell source" toggles, sliders, check boxes and radio buttons
  (through their labels), exercise buttons and inputs, explorable chips and menus.  Inline
  links in prose and the hover-only section anchors are exempt (WCAG 2.5.5); a solution's small
  toggle icon is exempt because its whole title (checked here) opens it.  The bigger targets
  leave every exercise inside its box (nothing in it scrolls sideways).
* A prose table of at most three columns fits a phone's column without scrolling.
* On a phone, a tap on a section in the "Contents" panel closes the panel and shows that
  section (the panel used to stay open over the page it had just scrolled).
* In dark mode no exercise sits on the light card the theme puts behind HTML outputs (the
  exercises draw their own dark box; the card framed it in light grey).
"""
from __future__ import annotations

import pytest

from test_browser import HTML, book, book_pages, browser, serve  # noqa: F401  (fixtures)
from test_page_explorables import ScreenVisit
from test_page_layout import LIGHT_CARDS

pytestmark = pytest.mark.book

# Waits for MathJax and for course-layout.js's reflow pass (window.courseMathReflowed).
SETTLE = """() => (window.MathJax && MathJax.startup && MathJax.startup.promise ? MathJax.startup.promise : Promise.resolve())
  .then(() => window.courseMathReflowed || null).then(() => true)"""
WIDE_MATHS = """() => [...document.querySelectorAll('.bd-article mjx-container[display=true]')]
  .filter(e => e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
  .map(e => `${e.scrollWidth} > ${e.clientWidth}: ` + (e.closest('div.math')?.getAttribute('data-tex') || e.textContent).trim().slice(0, 60))"""
# Inline maths that sticks out of the column (its line clips it: the reader loses the end).
CLIPPED_INLINE = """() => { const col = document.querySelector('.bd-article'); if (!col) return [];
  const right = col.getBoundingClientRect().right;
  return [...document.querySelectorAll('.bd-article mjx-container:not([display=true])')]
    .filter(e => e.getClientRects().length && !e.closest('table, .cell_output') && e.getBoundingClientRect().right > right + 1)
    .map(e => `${Math.round(e.getBoundingClientRect().width)} px: ` + e.textContent.trim().slice(0, 60)); }"""
# The glyphs of each display equation, in order (CHTML draws each character as an mjx-c with a
# class naming its code point), keyed by the equation's TeX source.
GLYPHS = """() => Object.fromEntries([...document.querySelectorAll('.bd-article div.math')].map((d, i) =>
  [d.getAttribute('data-tex') || String(i), [...d.querySelectorAll('mjx-c')].map(c => c.className).join(' ')]))"""
ROWS = """(key) => { const d = [...document.querySelectorAll('.bd-article div.math')].find(d => (d.getAttribute('data-tex') || '').includes(key));
  return d ? d.querySelectorAll('mjx-mtr').length : -1; }"""
# Controls under 44 x 44 CSS px.  A check box or radio button counts by its label when it has one.
SMALL_CONTROLS = """() => { const out = [];
  const sel = 'button, [role=button], input, select, summary, .bd-header-article a, .toggle.admonition > .admonition-title';
  for (let e of document.querySelectorAll(sel)) {
    if (e.closest('.bd-sidebar-primary, .bd-sidebar-secondary, dialog, .admonition-title a.headerlink')) continue;
    if (e.matches('.toggle-button') && e.closest('.admonition-title')) continue;  // its title is the target
    if (e.matches('input[type=hidden]')) continue;
    if ((e.type === 'radio' || e.type === 'checkbox') && e.labels && e.labels.length) e = e.labels[0];
    if (!e.getClientRects().length) continue;
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    if (!r.width || !r.height || cs.visibility === 'hidden' || cs.display === 'none') continue;
    if (r.width < 43.5 || r.height < 43.5)
      out.push(`${e.tagName.toLowerCase()}.${String(e.className).split(' ')[0]} ${Math.round(r.width)}x${Math.round(r.height)}`);
  }
  return [...new Set(out)]; }"""
# Bigger targets must not push an exercise's controls wider than its box (the data tables an
# exercise shows, which may scroll like any data table, and screen-reader-only text aside).
CROWDED = """() => [...document.querySelectorAll('.attn-exercise, .attn-exercise *')]
  .filter(e => !e.closest('table:not(.attn-ex-grid)') && e.getClientRects().length && e.clientWidth > 1 && e.scrollWidth > e.clientWidth + 1 && !(e instanceof SVGElement))
  .map(e => `${e.tagName.toLowerCase()}.${String(e.className).split(' ')[0]} ${e.scrollWidth} > ${e.clientWidth}`)"""
NARROW_TABLES = """() => [...document.querySelectorAll('.bd-article section table')]
  .filter(t => !t.closest('.cell_output') && t.getClientRects().length && t.rows.length && t.rows[0].cells.length <= 3)
  .map(t => { const box = t.closest('.pst-scrollable-table-container') || t.parentElement;
    return {overflow: Math.max(box.scrollWidth - box.clientWidth, t.scrollWidth - t.clientWidth),
            text: t.textContent.trim().replace(/\\s+/g, ' ').slice(0, 50)}; })
  .filter(t => t.overflow > 1)"""


def _pages(book):  # noqa: F811
    return [p.relative_to(book).as_posix() for p in book_pages()]


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_display_maths_fits_its_column(book, browser, viewport):  # noqa: F811
    base, problems = serve(str(book)), {}
    for rel in _pages(book):
        visit = ScreenVisit(browser, base + rel, viewport, "light")
        try:
            visit.page.evaluate(SETTLE)
            # open every solution dropdown: maths that was hidden at load must fit once shown
            for title in visit.page.query_selector_all(".toggle.admonition > .admonition-title"):
                title.click()
            visit.page.wait_for_timeout(800)
            visit.page.evaluate(SETTLE)
            if wide := visit.page.evaluate(WIDE_MATHS):
                problems[rel] = wide
            if clipped := visit.page.evaluate(CLIPPED_INLINE):
                problems[rel + " (inline, clipped)"] = clipped
            assert visit.errors == [], (rel, visit.errors)
        finally:
            visit.close()
    assert not problems, f"{viewport}: display maths scrolls inside its box instead of fitting: {problems}"


def test_reflowed_maths_keeps_its_glyphs_and_comes_back_on_a_wider_window(book, browser):  # noqa: F811
    url = serve(str(book)) + "chapters/02_queries_keys_values.html"
    visit = ScreenVisit(browser, url, "desktop", "light")
    try:
        visit.page.evaluate(SETTLE)
        wide = visit.page.evaluate(GLYPHS)
    finally:
        visit.close()
    visit = ScreenVisit(browser, url, "phone", "light")
    try:
        page = visit.page
        page.evaluate(SETTLE)
        narrow = page.evaluate(GLYPHS)
        key = r"S = \frac{Q K^\top}{\sqrt{d_k}}, \qquad A"  # three equations: one line at 1280 px, not at 390
        assert page.evaluate(ROWS, key) > 1, "the list S = ..., A = ..., out = ... was not broken into lines at 390 px"
        assert narrow.keys() == wide.keys()
        changed = [k.strip()[:50] for k in wide if wide[k] != narrow[k]]
        assert not changed, f"reflow changed the glyphs of: {changed}"
        page.set_viewport_size({"width": 1280, "height": 900})
        page.wait_for_timeout(600)  # the resize handler waits 200 ms
        page.evaluate(SETTLE)
        assert page.evaluate(ROWS, key) == 0, "at 1280 px the list S = ..., A = ..., out = ... did not come back to one line"
        assert page.evaluate(GLYPHS) == wide
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


def test_every_control_is_a_44_px_touch_target_on_a_phone(book, browser):  # noqa: F811
    base, problems = serve(str(book)), {}
    for rel in _pages(book):
        visit = ScreenVisit(browser, base + rel, "phone", "light")
        try:
            visit.page.evaluate(SETTLE)
            if small := visit.page.evaluate(SMALL_CONTROLS):
                problems[rel] = small[:8]
            if crowded := visit.page.evaluate(CROWDED):
                problems[rel + " (scrolls inside)"] = crowded[:5]
        finally:
            visit.close()
    assert not problems, f"controls smaller than 44 x 44 px, or exercise parts that scroll, at 390 px: {problems}"


def test_prose_tables_of_three_columns_fit_a_phone(book, browser):  # noqa: F811
    base, problems = serve(str(book)), {}
    for rel in _pages(book):
        visit = ScreenVisit(browser, base + rel, "phone", "light")
        try:
            if wide := visit.page.evaluate(NARROW_TABLES):
                problems[rel] = wide
        finally:
            visit.close()
    assert not problems, f"narrow tables that scroll at 390 px: {problems}"


def test_exercises_sit_on_the_dark_page_in_dark_mode(book, browser):  # noqa: F811
    pages = [p for p in book_pages() if "attn-exercise" in p.read_text(encoding="utf-8")]
    assert pages, "no page of the book holds an exercise"
    base, problems = serve(str(book)), []
    for path in pages:
        rel = path.relative_to(book).as_posix()
        visit = ScreenVisit(browser, base + rel, "phone", "dark")
        try:
            assert visit.page.get_attribute("html", "data-theme") == "dark"
            problems += [f"{rel}: {c}" for c in visit.page.evaluate(LIGHT_CARDS, ".attn-exercise")]
        finally:
            visit.close()
    assert not problems, "exercises on a light card in dark mode:\n" + "\n".join(problems[:10])


def test_a_section_chosen_in_the_contents_panel_closes_it_on_a_phone(book, browser):  # noqa: F811
    visit = ScreenVisit(browser, serve(str(book)) + "chapters/02_queries_keys_values.html", "phone", "light")
    try:
        page = visit.page
        page.click(".bd-header-article .secondary-toggle")
        page.wait_for_timeout(400)
        assert page.evaluate("() => !!document.querySelector('#pst-secondary-sidebar-modal[open]')"), "the panel did not open"
        target = page.eval_on_selector("#pst-secondary-sidebar-modal a[href^='#'] >> nth=3", "a => a.getAttribute('href')")
        page.click(f"#pst-secondary-sidebar-modal a[href='{target}']")
        page.wait_for_timeout(800)
        assert not page.evaluate("() => !!document.querySelector('#pst-secondary-sidebar-modal[open]')"), \
            "the contents panel stayed open over the section it scrolled to"
        top = page.evaluate("(id) => document.getElementById(id).getBoundingClientRect().top", target[1:])
        assert 0 <= top < 300, f"the chosen section is not at the top of the screen (top {top:.0f} px)"
        page.click(".theme-switch-button")  # the page under the closed panel takes taps again
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


# The data tables in exercise questions (chapter 3's weights A and values V[:, c]): at 390 px every
# column lies inside the table's box, with nothing behind a sideways scroll.  Exercise 3.1's
# answer needs row '!' of A to its last column, [SEP] (issue 38 item 9: it was hidden).
QUESTION_TABLES = """() => [...document.querySelectorAll('.attn-exercise .attn-ex-question table')]
  .filter(t => t.getClientRects().length)
  .map(t => { const box = t.getBoundingClientRect();
    return {exercise: t.closest('[data-exercise]')?.dataset.exercise || '?',
            overflow: t.scrollWidth - t.clientWidth,
            header: [...t.rows[0].cells].map(c => c.textContent.trim()),
            hidden: [...t.rows[0].cells].filter(c => c.getBoundingClientRect().right > box.right + 1)
                                        .map(c => c.textContent.trim())}; })"""


def test_exercise_question_tables_fit_a_phone(book, browser):  # noqa: F811
    rels = [p.relative_to(HTML).as_posix() for p in book_pages()]
    rels = [r for r in rels if "attn-ex-question" in (book / r).read_text(encoding="utf-8")]
    base, tables = serve(str(book)), []
    for rel in rels:
        visit = ScreenVisit(browser, base + rel, "phone", "light")
        try:
            tables += [dict(t, page=rel) for t in visit.page.evaluate(QUESTION_TABLES)]
        finally:
            visit.close()
    row_entry = [t for t in tables if t["exercise"] == "3:row_entry"]
    assert row_entry and row_entry[0]["header"][-1] == "[SEP]", row_entry   # the table the issue names is checked
    wide = [t for t in tables if t["overflow"] > 1 or t["hidden"]]
    assert not wide, "exercise tables that hide columns behind a sideways scroll at 390 px: " + "; ".join(
        f"{t['page']} {t['exercise']}: {t['overflow']} px, hidden {t['hidden']}" for t in wide)


# The theme's "Back to top" pill, shown while the reader scrolls up (issue 45 item 5).
PILL = """() => { const b = document.getElementById('pst-back-to-top'); if (!b) return null;
  const cs = getComputedStyle(b), r = b.getBoundingClientRect();
  return {shown: cs.display !== 'none' && cs.visibility !== 'hidden' && cs.opacity !== '0' && r.width > 0,
          rect: [r.left, r.top, r.right, r.bottom]}; }"""
# What the shown pill covers: figure captions, the labs' readouts and status lines, the focused element.
COVERED = """() => { const b = document.getElementById('pst-back-to-top'), cs = getComputedStyle(b);
  if (cs.display === 'none' || cs.visibility === 'hidden' || cs.opacity === '0') return [];
  const r = b.getBoundingClientRect(), hit = (e) => { const q = e.getBoundingClientRect();
    return q.width > 0 && q.left < r.right && r.left < q.right && q.top < r.bottom && r.top < q.bottom; };
  const out = [...document.querySelectorAll('figcaption, .attnlib-xp .xp-readout, .attnlib-xp [data-role=status]')]
    .filter(hit).map(e => e.tagName.toLowerCase() + ': ' + e.textContent.trim().slice(0, 60));
  const f = document.activeElement;
  if (f && f !== b && f !== document.body && hit(f)) out.push('the focused ' + f.tagName.toLowerCase());
  return out; }"""
# Scroll so that the element's middle is at height y of the viewport, arriving from below (the
# reader scrolls up: the theme shows the pill), and let the page handle the scroll.
SCROLL_TO = """async ([sel, i, y]) => { const e = document.querySelectorAll(sel)[i], q = e.getBoundingClientRect();
  const target = window.scrollY + q.top + q.height / 2 - y;
  const frame = () => new Promise(ok => requestAnimationFrame(() => requestAnimationFrame(ok)));
  window.scrollTo(0, target + 60); await frame(); window.scrollTo(0, target); await frame(); await frame(); }"""


def test_back_to_top_never_covers_a_caption_a_lab_readout_or_the_focus(book, browser, viewport="phone"):  # noqa: F811
    """The pill sat at 90vh across the column and covered lab readouts and figure captions on a
    phone.  On chapter 9, with each caption and each lab readout brought under the pill while the
    reader scrolls up, the pill covers none of them; nor the focused control; focused itself
    (keyboard), it shows and takes the reader to the top.  (sphinx-book-theme hides the pill
    from 1200 px up; the test runs at 390 px, where it covered most.)"""
    visit = ScreenVisit(browser, serve(str(book)) + "chapters/09_real_model.html", viewport, "light")
    try:
        page = visit.page
        page.evaluate("async () => { const frame = () => new Promise(ok => requestAnimationFrame(() => requestAnimationFrame(ok)));"
                      " window.scrollTo(0, 4000); await frame(); window.scrollTo(0, 3900); await frame(); }")
        pill = page.evaluate(PILL)
        assert pill and pill["shown"], f"the theme's pill should show while the reader scrolls up: {pill}"
        middle = (pill["rect"][1] + pill["rect"][3]) / 2
        problems = []
        for sel in ("figcaption", ".attnlib-xp[data-kind=model] .xp-readout", ".attnlib-xp[data-kind=model] [data-role=status]"):
            for i in range(page.evaluate("(s) => document.querySelectorAll(s).length", sel)):
                page.evaluate(SCROLL_TO, [sel, i, middle])
                problems += [f"{sel} #{i}: covers {c}" for c in page.evaluate(COVERED)]
        assert not problems, "\n".join(problems[:10])
        # a focused control under the pill is not covered
        lab = ".attnlib-xp[data-kind=model] [data-role=load]"
        page.focus(lab)
        page.evaluate(SCROLL_TO, [lab, 0, middle])
        assert page.evaluate(COVERED) == [], page.evaluate(COVERED)
        # over a caption, the focused pill shows, and Enter takes the reader to the top
        page.evaluate(SCROLL_TO, ["figcaption", 0, middle])
        page.evaluate("() => document.getElementById('pst-back-to-top').focus()")
        assert page.evaluate(PILL)["shown"], "the focused pill must show"
        page.keyboard.press("Enter")
        page.wait_for_function("() => window.scrollY === 0")
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()
