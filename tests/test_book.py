"""The whole book: built exactly as `make book` builds it (every chapter executed, Sphinx
warnings and cell errors fatal), then its HTML checked.  Marked `book`; `make test` runs it."""
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"

pytestmark = pytest.mark.book


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


@pytest.fixture(scope="module")
def built_book():
    proc = subprocess.run(["make", "--no-print-directory", "html"], cwd=ROOT, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"book build failed (exit {proc.returncode}):\n{log[-6000:]}"
    return log


def test_every_toc_entry_exists_as_source():
    for f in toc_files():
        assert (ROOT / f"{f}.md").is_file(), f"_toc.yml lists {f} but {f}.md does not exist"


def test_build_succeeds_with_every_page(built_book):
    for f in toc_files():
        assert (HTML / f"{f}.html").is_file(), f"no HTML page for {f}"
    assert "build succeeded" in built_book


def test_pages_have_no_error_output_or_unresolved_glue(built_book):
    for f in toc_files():
        page = (HTML / f"{f}.html").read_text()
        assert "Traceback (most recent call last)" not in page, f"{f}: a traceback was rendered"
        assert "{glue" not in page, f"{f}: an unresolved glue reference"
        assert not re.search(r'class="[^"]*output[^"]*stderr[^"]*"[^>]*>\s*<pre>[^<]*(Error|Warning)', page), \
            f"{f}: a warning or error was printed to stderr"


def test_chapters_contain_hidden_solutions(built_book):
    for f in toc_files():
        if not re.match(r"chapters/\d\d_", f):   # numbered chapters (01..10, ...), not the references
            continue
        page = (HTML / f"{f}.html").read_text()
        assert page.count('class="solution') >= 2 or page.count("solution dropdown") >= 2, \
            f"{f}: expected at least two hidden solutions"


def test_sphinx_finds_every_page_already_executed(built_book):
    """make html executes the pages in parallel first (_ext/preexecute.py); Sphinx must then find
    each one in Jupyter Book's cache.  A page it executes itself means the pre-execution read the
    page differently from MyST-NB (its cache key missed), and the build lost its parallelism."""
    assert "preexecute:" in built_book
    executed_by_sphinx = re.findall(r"^(\S+\.md): Executing notebook", built_book, re.M)
    assert executed_by_sphinx == [], f"MyST-NB executed these itself: {executed_by_sphinx}"
    notebooks = [f for f in toc_files() if (ROOT / f"{f}.md").read_text().startswith("---\njupytext")]
    assert len(re.findall(r"Using cached notebook", built_book)) == len(notebooks) >= 11
