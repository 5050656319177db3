"""Page weight: what a reader's browser loads for each page of the built book.

Issue 12's budget: every chapter page at most 4,000,000 bytes and 40 requests, counting every
resource (uncompressed bodies), measured in headless Chromium with every non-local request
blocked.  ``bench/bench_pages.py`` records the same measurement in ``bench/results/``; this
test imports its :func:`measure`, so the two cannot drift.  On failure it prints, for each page
over budget, its totals per resource type and its biggest resources.

The static checks below (no browser) guard ``_ext/page_weight.py``: no page loads
``fontawesome.js``; the search scripts only on ``search.html``; thebe and sphinx-design assets
only where they are used.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_browser import book, book_pages, browser, serve  # noqa: E402,F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _load("bench_pages", ROOT / "bench" / "bench_pages.py")


def _ext():
    return _load("page_weight", ROOT / "_ext" / "page_weight.py")


# ------------------------------------------------------------ the extension's rewrite (no build)
HEAD = """  <link href="../_static/styles/pydata-sphinx-theme.css?digest=1" rel="stylesheet" />
  <!-- So that users can add custom icons -->
  <script defer src="../_static/scripts/fontawesome.js?digest=55c26ed414f5f8a31ebb"></script>
  <!-- Pre-loaded scripts that we'll load fully later -->
  <link rel="preload" as="script" href="../_static/scripts/bootstrap.js?digest=1" />
    <script src="../_static/searchtools.js"></script>
    <script src="../_static/language_data.js"></script>
    <script src="../searchindex.js"></script>
    <script src="../_static/doctools.js?v=9a2dae69"></script>
"""


def test_slim_html_drops_fontawesome_and_the_search_scripts_only():
    ext = _ext()
    new, removed = ext.slim_html(HEAD)
    assert removed == {"fontawesome": 1, "search": 3}
    assert "fontawesome" not in new and "search" not in new and "custom icons" not in new
    for kept in ("pydata-sphinx-theme.css", "bootstrap.js", "doctools.js", "Pre-loaded scripts"):
        assert kept in new, kept
    new, removed = ext.slim_html(HEAD, keep_search=True)  # search.html keeps its scripts
    assert removed == {"fontawesome": 1, "search": 0} and new.count("<script") == 4


def test_course_layout_files_are_written_into_the_page():
    ext = _ext()
    head = ('<link rel="stylesheet" type="text/css" href="../_static/course-layout.css?v=9ad60cdc" />\n'
            '<link rel="stylesheet" type="text/css" href="../_static/basic.css" />\n'
            '<script src="../_static/course-layout.js?v=617df5fd"></script>\n'
            '<script src="../_static/doctools.js?v=1"></script>\n')
    new, n = ext.inline_course_layout(head, "figcaption { font-weight: 400 }\n", "document.x = 1;\n")
    assert n == 2
    assert "<style>\nfigcaption { font-weight: 400 }\n</style>" in new
    assert "<script>\ndocument.x = 1;\n</script>" in new
    assert "course-layout" not in new and "basic.css" in new and "doctools.js" in new
    assert ext.inline_course_layout("<head></head>", "a", "b") == ("<head></head>", 0)


def test_the_installed_theme_still_writes_the_tags_the_extension_removes():
    """A theme update that renames or moves them would make the extension a silent no-op."""
    import pydata_sphinx_theme

    theme = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme"
    macros = (theme / "static" / "webpack-macros.html").read_text()
    assert _ext().slim_html(macros)[1]["fontawesome"] == 1
    layout = (theme / "layout.html").read_text()
    for name in ("searchtools.js", "language_data.js", "searchindex.js"):
        assert name in layout, name


# ------------------------------------------------------------------------- the built book
@pytest.mark.book
def test_pages_load_only_the_assets_they_use(book):
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    thebe = bool((config.get("launch_buttons") or {}).get("thebe"))
    problems = []
    for page in book_pages():
        rel, text = page.relative_to(book).as_posix(), page.read_text(encoding="utf-8")
        if "<head>" not in text:
            continue  # index.html: a redirect stub
        head = text.split("</head>")[0]
        if re.search(r'(?:href|src)="[^"]*course-layout\.(?:css|js)', head):
            problems.append(f"{rel}: fetches course-layout.css/.js (two requests) instead of inlining them")
        if "fontawesome.js" in head:
            problems.append(f"{rel}: loads _static/scripts/fontawesome.js (1.5 MB)")
        if rel != "search.html" and re.search(r"searchindex\.js|searchtools\.js", head):
            problems.append(f"{rel}: loads the search index / search tools (only search.html needs them)")
        if not thebe and "sphinx-thebe" in head:
            problems.append(f"{rel}: loads sphinx-thebe although launch_buttons.thebe is off")
        if "sd-" not in text.split("<body", 1)[1] and re.search(r"design-tabs\.js|sphinx-design\.min\.css", head):
            problems.append(f"{rel}: loads sphinx-design assets but uses no sphinx-design component")
    assert not problems, "\n".join(problems)


@pytest.mark.book
def test_every_page_is_within_the_weight_budget(book, browser):
    """Every page of the book (chapters, preface, references) within 4 MB and 40 requests: what the
    reader reads, the exercises' background checker apart (measured by bench/bench_first_check.py)."""
    base = serve(str(book))
    measured = [bench.measure(browser, base, page) for page in bench.pages_of(book)]
    assert measured and all(w.requests > 5 for w in measured), [(w.page, w.requests) for w in measured]
    over = [w for w in measured if w.bytes > bench.MAX_BYTES or w.requests > bench.MAX_REQUESTS]
    summary = "\n".join(f"  {w.page}: {w.bytes:,} bytes, {w.requests} requests" for w in measured)
    if over:
        pytest.fail(f"{len(over)} page(s) over the budget of {bench.MAX_BYTES:,} bytes and {bench.MAX_REQUESTS} "
                    f"requests (all resources, uncompressed bodies, network blocked).\nAll pages:\n{summary}\n\n"
                    + "\n\n".join(w.breakdown(12) for w in over)
                    + "\n\nRun `.venv/bin/python bench/bench_pages.py` for the full table (bench/results/pages.md).",
                    pytrace=False)
