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
    advice: a chapter above readme_figures.HEAVY_MIB is named, one below is not."""
    mod = _module()
    binder = {"date": "d", "execute": {"notebooks": [
        {"notebook": "05_masking.ipynb", "seconds": 1.0, "ok": True, "peak_mib": mod.HEAVY_MIB + 1},
        {"notebook": "08_graphs.ipynb", "seconds": 1.0, "ok": True, "peak_mib": mod.HEAVY_MIB - 1}]},
        "server": {"rss_mib": 100}}
    text = " ".join(mod.memory_advice(binder))
    assert f"`05_masking.ipynb` ({mod.HEAVY_MIB + 1:,} MiB)" in text and "08_graphs.ipynb" not in text.split("passes")[1]
    assert f"needs {mod.HEAVY_MIB + 101:,} MiB" in text and "Shut Down Kernel" in text
    binder["execute"]["notebooks"][0]["peak_mib"] = 100
    assert "Chapters whose kernel passes" not in " ".join(mod.memory_advice(binder))
    mod._load = lambda name: binder if name == "binder.json" else None
    book = {"date": "d", "machine": "m", "chapters": [{"chapter": "chapters/08_graphs.md", "seconds": 1.0,
                                                       "peak_rss_mib": 500}]}
    assert f"| 500 | {mod.HEAVY_MIB - 1} |" in "\n".join(mod.book_section(book))
