"""The README's measured figures are the committed benchmark outputs, not numbers typed by hand."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "bench" / "readme_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_figures_match_the_benchmark_outputs():
    mod = _module()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert mod.BEGIN in readme and mod.END in readme, "README.md lost its figures markers"
    assert mod.replace_block(readme, mod.render()) == readme, \
        "README.md's measured figures differ from bench/results: run python bench/readme_figures.py"


def test_every_results_file_the_readme_quotes_exists_and_states_its_settings():
    for name, keys in (("book.json", ("date", "machine", "chapters")),
                       ("attention_cpu.json", ("meta", "config", "rows")),
                       ("explorables.json", ("date", "chromium", "runs", "repeats", "views")),
                       ("ci.json", ("meta", "phases", "total_seconds", "all_passed")),
                       ("model_cache.json", ("meta", "rows")),
                       ("language_model.json", ("machine", "repeats", "load_before", "load_after", "date", "tokenizer_first",
                                                "tokenizer_kept", "model_by_threads")),
                       ("lm_page.json", ("machine", "settings", "goals", "load_average_before", "load_average_after",
                                         "chromium", "date", "prompt_20", "pair")),
                       ("circuit_lab.json", ("machine", "settings", "repeats", "table_repeats", "path_repeats", "load_average_before",
                                             "load_average_after", "lab_bytes", "runtime_bytes", "goals"))):
        data = json.loads((ROOT / "bench" / "results" / name).read_text())
        for key in keys:
            assert key in data, f"bench/results/{name} has no {key!r}"


def test_a_changed_result_changes_the_readme(tmp_path, monkeypatch):
    # The check can fail: edit one measured time and the rendered section differs.
    mod = _module()
    before = mod.render()
    results = tmp_path / "results"
    results.mkdir()
    for f in (ROOT / "bench" / "results").glob("*.json"):
        (results / f.name).write_text(f.read_text())
    book = json.loads((results / "book.json").read_text())
    book["chapters"][0]["seconds"] += 1.0
    (results / "book.json").write_text(json.dumps(book))
    monkeypatch.setattr(mod, "RESULTS", results)
    assert mod.render() != before


def test_the_default_block_of_tiled_attention_is_the_one_the_benchmark_chose():
    """attnlib's default block size is read off the committed CPU benchmark, not picked by
    hand: re-measuring with a different outcome makes this fail until the default follows."""
    import attnlib
    from attnlib.tiled import DEFAULT_BLOCK_SIZE

    mod = _module()
    att = json.loads((ROOT / "bench" / "results" / "attention_cpu.json").read_text())
    assert len(att["config"]["block_sizes"]) >= 3 and att["config"].get("repeats", 1) >= 3
    assert mod.chosen_block(att) == DEFAULT_BLOCK_SIZE == mod._default_block()
    import inspect
    assert inspect.signature(attnlib.tiled_attention).parameters["block_size"].default == DEFAULT_BLOCK_SIZE


def test_the_block_choice_follows_the_measurement():
    # The rule can fail: make 1024 the fastest block everywhere and it is chosen.
    mod = _module()
    att = json.loads((ROOT / "bench" / "results" / "attention_cpu.json").read_text())
    for r in att["rows"]:
        if r["impl"] == "tiled-1024":
            r["time_ratio"] = 0.5
    assert mod.chosen_block(att) == 1024


def test_the_binder_memory_figures_name_the_chapters_to_run_alone():
    """The kernels' peaks of binder.json become the Binder column of the chapter table and the
    advice, against mybinder.org's guarantee and limit (notebook_convert's constants, with their
    source): a chapter above readme_figures.HEAVY_MIB is named, one below is not; when every
    kernel is above it, the README says every notebook says so."""
    mod = _module()
    binder = {"date": "d", "execute": {"notebooks": [
        {"notebook": "05_masking.ipynb", "seconds": 1.0, "ok": True, "peak_mib": mod.HEAVY_MIB + 1},
        {"notebook": "08_graphs.ipynb", "seconds": 1.0, "ok": True, "peak_mib": mod.HEAVY_MIB - 1}]},
        "server": {"rss_mib": 100}}
    text = " ".join(mod.memory_advice(binder))
    assert f"`05_masking.ipynb` ({mod.HEAVY_MIB + 1:,} MiB)" in text and "(`08_graphs" not in text.split("own (")[1]
    assert f"needs {mod.HEAVY_MIB + 101:,} MiB" in text and "Shut Down All Kernels" in text
    assert "guarantees a session 450 MiB of memory and 1 CPU" in text and "2,048 MiB" in text
    assert mod.BINDER_SOURCE in text
    binder["execute"]["notebooks"][1]["peak_mib"] = mod.HEAVY_MIB + 2
    assert "Every kernel needs more than the guarantee on its own" in " ".join(mod.memory_advice(binder))
    binder["execute"]["notebooks"][0]["peak_mib"] = binder["execute"]["notebooks"][1]["peak_mib"] = 100
    text = " ".join(mod.memory_advice(binder))
    assert "on its own" not in text and "stays within the guarantee" in text
    binder["execute"]["notebooks"][1]["peak_mib"] = mod.HEAVY_MIB - 1
    mod._load = lambda name: binder if name == "binder.json" else None
    book = {"date": "d", "machine": "m", "chapters": [{"chapter": "chapters/08_graphs.md", "seconds": 1.0,
                                                       "peak_rss_mib": 500}]}
    # book.json names a page the Binder record does not (05_masking): the columns are not joined
    table = "\n".join(mod.book_section(book))
    assert "| 500 |\n" in table + "\n" and "name different pages (05_masking)" in table
    book["chapters"].insert(0, {"chapter": "chapters/05_masking.md", "seconds": 1.0, "peak_rss_mib": 400})
    table = "\n".join(mod.book_section(book))
    assert f"| 500 | {mod.HEAVY_MIB - 1} |" in table and "different pages" not in table


def test_the_readmes_binder_prose_states_the_constants():
    """The hand-written Binder paragraph quotes mybinder.org's figures as notebook_convert defines them."""
    mod = _module()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    binder = readme[readme.index("**Binder.**"):readme.index("What the set-up installs")]
    assert (f"guarantees a\nsession {mod.BINDER_GUARANTEE // 2**20} MiB of memory and {mod.BINDER_CPUS} CPU and stops "
            f"it at {mod.BINDER_CAP // 2**30} GiB") in binder


def test_the_readmes_set_up_says_first_that_the_page_tests_need_chromium():
    """Issue 45 item 11: in the first lines of the set-up, how to get Chromium (Debian's package,
    or $CHROMIUM, where tests/test_browser.py looks), and that make test says when it skips them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme[readme.index("## The two commands"):]
    first = setup[:setup.index("Open the result")]
    assert "apt-get install chromium" in first and "CHROMIUM=" in first and "skipped" in first
    browser = (ROOT / "tests" / "test_browser.py").read_text()
    assert 'os.environ.get("CHROMIUM")' in browser and '"/usr/bin/chromium"' in browser
    make = (ROOT / "Makefile").read_text()
    recipe = make[make.index("\ntest: setup"):make.index("\nbook-tests:")]
    assert recipe.count("$(BROWSER_CHECK)") == 2 and "browser_unavailable()" in make
