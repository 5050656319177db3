"""_ext/preexecute.py, the step of `make html` that executes the uncached pages in parallel before
Sphinx renders them (issue 47: had it found no page, the book would have built serially with no
word said).  The cache and the executor are stand-ins that record what they are asked; the
pages are the book's own."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _preexecute():
    sys.path.insert(0, str(ROOT / "_ext"))
    spec = importlib.util.spec_from_file_location("preexecute", ROOT / "_ext" / "preexecute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _toc_files() -> list[str]:
    """Every file of _toc.yml, read here independently of the script's own reader."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


def test_the_pages_are_every_executable_page_of_the_toc():
    pages = _preexecute().pages()
    expected = [ROOT / f"{f}.md" for f in _toc_files()
                if (ROOT / f"{f}.md").read_text(encoding="utf-8").startswith("---\njupytext")]
    assert pages == expected
    chapters = sorted(p.name for p in (ROOT / "chapters").glob("[0-9][0-9]_*.md"))
    assert sorted(p.name for p in pages if re.match(r"\d\d_", p.name)) == chapters and len(chapters) >= 10


class _Cache:
    def __init__(self, cached: set):
        self.cached, self.records = cached, []

    def add_nb_to_project(self, path, read_data):
        assert read_data == {"name": "myst_nb_md", "type": "plugin"}
        record = SimpleNamespace(pk=len(self.records) + 1, uri=str(path))
        self.records.append(record)
        return record

    def get_cached_project_nb(self, pk):
        return object() if pk in self.cached else None


@pytest.mark.parametrize("cached_names", [set(), {"01_weighted_average.md", "02_queries_keys_values.md"}])
def test_every_uncached_page_goes_to_the_parallel_executor(monkeypatch, capsys, cached_names):
    pre = _preexecute()
    import jupyter_cache
    import jupyter_cache.executors
    pages = pre.pages()
    cached = {i + 1 for i, p in enumerate(pages) if p.name in cached_names}
    cache, asked = _Cache(cached), {}

    class Executor:
        def run_and_cache(self, filter_pks, timeout, allow_errors):
            asked.update(pks=list(filter_pks), timeout=timeout, allow_errors=allow_errors)
            return SimpleNamespace(succeeded=list(filter_pks), excepted=[], errored=[])

    monkeypatch.setattr(jupyter_cache, "get_cache", lambda path: cache)
    monkeypatch.setattr(jupyter_cache.executors, "load_executor", lambda name, c, logger: asked.update(name=name) or Executor())
    for name in ("ATTNLIB_STATIC_BOOK", "ATTNLIB_FIGURE_VARIANTS"):
        monkeypatch.delenv(name, raising=False)
    assert pre.main(["--jobs", "2"]) == 0
    uncached = [r for r in cache.records if r.pk not in cached]
    assert asked["name"] == "local-parallel" and asked["allow_errors"] is False
    assert sorted(asked["pks"]) == sorted(r.pk for r in uncached) and len(uncached) == len(pages) - len(cached)
    assert "06_" in cache.records[asked["pks"][0] - 1].uri            # the slowest page first
    assert f"{len(uncached)} of {len(uncached)} pages executed in parallel" in capsys.readouterr().out


def test_one_job_executes_nothing_and_says_so(capsys):
    assert _preexecute().main(["--jobs", "1"]) == 0
    assert "one job, nothing to gain" in capsys.readouterr().out
