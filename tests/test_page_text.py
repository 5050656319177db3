"""Clean text on the built pages (issue 12, "Clean pages"): titles and headings read right
where maths is not typeset (browser tab, sidebar, search results), the bibliography has no raw
TeX and clean labels, and no build-time status message is printed on a page.

Reads ``_build/html`` (rebuilt by the ``book`` fixture of test_browser.py when older than its
sources); no browser needed.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_browser import book, book_pages  # noqa: E402,F401  (fixture)

pytestmark = pytest.mark.book

# TeX written as plain text: a dollar, a backslash command, a one-letter subscript (d_k, W_Q,
# T_k; not an identifier such as tiled_attention), a caret (n^2) or braces.  Typeset forms
# use Unicode (√dₖ, −10⁹, n²).
RAW_TEX = re.compile(r"\$|\\[A-Za-z(\[]|\b[A-Za-z]_[A-Za-z0-9]\b|\w\^|[{}]")

# Messages about the build machine rather than the subject, seen on earlier builds, and the
# loader's own words when a model is not cached.  None belongs on a published page.
STATUS = [
    "Offline, so the checkpoint",
    "could not be loaded",
    "No GPU benchmark has been recorded",
    "could not load 'bert-base-uncased'",
    "not in the local Hugging Face cache",
    "HF_HUB_OFFLINE may be set",
    "Traceback (most recent call last)",
]

# pybtex's "alpha" labels: three letters of a lone author's surname (Str16), the initials of
# two to four authors (AZ20, CKLM19) or of the first three and "+" (VCC+18); two-digit year,
# optional a/b suffix.
LABEL = re.compile(r"^\[(?:[A-Z][a-zà-ž]{2}|[A-Z]{2,4}|[A-Z]{3,4}\+)\d{2}[a-z]?\]$")  # ALTJ+23: a hyphenated surname gives two initials (alpha.bst)


def _soup(page: Path) -> BeautifulSoup:
    return BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")


def _text(el) -> str:
    """Text of ``el`` as a reader without MathJax sees it (the page title, the search index):
    inline maths keeps its TeX source, e.g. ``\\(W_Q\\)``."""
    return " ".join(el.get_text(" ", strip=True).split())


def test_titles_headings_and_sidebar_entries_carry_no_raw_tex(book):
    bad = []
    for page in book_pages():
        soup, rel = _soup(page), page.relative_to(book).as_posix()
        if soup.title is None:
            continue  # index.html: a redirect stub
        places = [("title", soup.title)]
        places += [(h.name, h) for h in soup.select("main h1, main h2, main h3, main h4, main h5, main h6")]
        places += [("sidebar", a) for a in soup.select("nav.bd-links a, nav.bd-docs-nav a")]
        places += [("contents", a) for a in soup.select(".bd-toc-nav a, #pst-page-navigation-heading-2 ~ * a")]
        places += [("explorable title", t) for t in soup.select(".attnlib-xp > figcaption")]
        bad += [f"{rel} {where}: {_text(el)!r}" for where, el in places if RAW_TEX.search(_text(el))]
    assert not bad, "raw TeX where maths is not typeset (write √dₖ, −10⁹, or words):\n" + "\n".join(bad)


def test_the_search_index_titles_carry_no_raw_tex(book):
    text = (book / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(text[text.index("(") + 1:text.rindex(")")])
    titles = list(index.get("titles", [])) + list(index.get("alltitles", {}))
    assert len(titles) > 20, titles
    bad = [t for t in titles if RAW_TEX.search(t)]
    assert not bad, f"search results would show raw TeX: {bad}"


def test_no_build_time_status_message_on_any_page(book):
    found = []
    for page in book_pages():
        soup = _soup(page)
        for code in soup.select(".cell_input, div.highlight-python, div.highlight-ipython3"):
            code.decompose()  # the code a reader runs may name the error; its output may not
        text = " ".join(soup.get_text(" ").split())
        found += [f"{page.relative_to(book)}: {s!r}" for s in STATUS if s in text]
    assert not found, "build-time status messages printed on the page:\n" + "\n".join(found)


def test_no_page_shows_a_cells_error_stream(book):
    """A warning a library logs while a cell runs (matplotlib's "Font 'default' does not have a
    glyph for '\\n'", once on six chapters) reaches the page as a grey stderr box a reader cannot
    act on.  No page of the book shows one."""
    found = []
    for page in book_pages():
        for box in _soup(page).select(".output.stderr"):
            found.append(f"{page.relative_to(book)}: {' '.join(box.get_text(' ').split())[:160]!r}")
    assert not found, "stderr shown on the page:\n" + "\n".join(found)


def test_bibliography_labels_and_entries_are_clean(book):
    soup = _soup(book / "chapters" / "references.html")
    entries = soup.select(".citation-list > .citation")
    # list items of a list (docutils' deprecated doc-biblioentry role is rewritten by
    # _ext/accessible_page.py: axe-core's aria-required-children / aria-deprecated-role)
    assert all(e.get("role") == "listitem" for e in entries), {e.get("role") for e in entries}
    root = Path(__file__).resolve().parents[1]
    cited = set()  # the bibliography lists the works cited in the chapters
    for source in [root / "intro.md", *sorted((root / "chapters").glob("*.md"))]:
        for keys in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", source.read_text(encoding="utf-8")):
            cited |= {k.strip() for k in keys.split(",")}
    assert len(entries) == len(cited) > 10, (len(entries), sorted(cited))
    bad = []
    for entry in entries:
        label = entry.select_one(".label").get_text("", strip=True)
        body = _text(entry).removeprefix(_text(entry.select_one(".label"))).strip()
        if not LABEL.match(label):
            bad.append(f"label {label}: not an alpha label")
        if RAW_TEX.search(body.replace("arXiv:", "")) or "\\" in body:
            bad.append(f"{label}: raw TeX in {body!r}")
        if re.search(r"\? [a-z]", body):
            bad.append(f"{label}: a title's new sentence starts in lower case (protect it with braces): {body!r}")
        if re.search(r"\b\d+ edition\b", body):
            bad.append(f"{label}: edition as a bare number in {body!r}")
    assert not bad, "\n".join(bad)


def test_every_chapters_main_line_reads_in_35_minutes_at_130_words(book):
    """Issue 44 (and the curriculum): each chapter's main line, counted as the line under its title
    counts it (130 words a minute plus 15 s a figure; "Going further" apart), reads in 35 minutes
    or less; the old pages redirect to the renumbered ones, their #anchor kept."""
    chapters = sorted((book / "chapters").glob("[0-9][0-9]_*.html"))
    redirects = {"07_graphs.html": "08_graphs.html", "08_real_model.html": "09_real_model.html",
                 "09_at_scale.html": "11_at_scale.html", "10_position_decoding.html": "12_position_decoding.html",
                 "11_language_model.html": "10_language_model.html"}
    minutes = {}
    for page in chapters:
        if page.name in redirects:
            text = page.read_text(encoding="utf-8")
            assert f'var target = "{redirects[page.name]}"' in text and 'lang="en"' in text, page.name
            continue
        m = re.search(r'<p class="reading-time"[^>]*><em>Reading time: about (\d+) minutes?</em>', page.read_text(encoding="utf-8"))
        assert m, f"{page.name}: no reading-time line"
        minutes[page.name] = int(m.group(1))
    assert len(minutes) == 12, sorted(minutes)
    over = {name: m for name, m in minutes.items() if m > 35}
    assert not over, f"main lines over 35 minutes at 130 words a minute: {over}"
