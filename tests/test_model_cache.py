"""The trained-model cache (attnlib.model_cache) and TinyTransformer.save / load: a run is
trained once and loaded everywhere else, its key changes with anything that decides the result,
a damaged entry is never trusted, and a file can hold no code."""
import json
import os
import pickle
import shutil
import stat
import time
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnlib import induction, model_cache
from attnlib.transformer import TinyTransformer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(model_cache.ENV, str(folder))
    monkeypatch.setattr(induction, "_RUNS", {})
    return folder


def _entries(folder: Path) -> list[Path]:
    """The weights of every entry (``<cache>/models/<key>/model.pt``)."""
    return sorted((folder / "models").glob("*/model.pt")) if (folder / "models").is_dir() else []


# ------------------------------------------------------------------ TinyTransformer.save / load
@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
def test_save_load_gives_the_same_model(tmp_path, positions):
    model = TinyTransformer(11, d_model=16, n_heads=2, n_layers=2, max_len=9, seed=3, positions=positions)
    with torch.no_grad():                                   # weights that differ from a fresh model's
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    model.save(tmp_path / "m.pt")
    again = TinyTransformer.load(tmp_path / "m.pt")
    tokens = torch.randint(0, 11, (3, 9), generator=torch.Generator().manual_seed(0))
    assert again.config() == model.config() and not again.training
    torch.testing.assert_close(again(tokens)[0], model.eval()(tokens)[0], rtol=0, atol=0)
    fresh = TinyTransformer(**model.config())
    assert not torch.equal(fresh(tokens)[0], model(tokens)[0])      # the weights came from the file


def test_load_refuses_what_save_did_not_write(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="expected a file of format 'attnlib.TinyTransformer/1'"):
        TinyTransformer.load(tmp_path / "other.pt")
    model = TinyTransformer(7, d_model=8, n_heads=2, n_layers=1, max_len=4)
    payload = model.to_payload()
    payload["config"] = {**payload["config"], "n_layers": 2}         # weights of one layer, config of two
    torch.save(payload, tmp_path / "mismatch.pt")
    with pytest.raises(ValueError, match="do not fit the stored config"):
        TinyTransformer.load(tmp_path / "mismatch.pt")
    payload = model.to_payload()
    del payload["config"]["positions"]
    torch.save(payload, tmp_path / "nokey.pt")
    with pytest.raises(ValueError, match="expected a config with keys"):
        TinyTransformer.load(tmp_path / "nokey.pt")
    (tmp_path / "text.pt").write_text("not a model")
    with pytest.raises(ValueError, match="not a file written by TinyTransformer.save"):
        TinyTransformer.load(tmp_path / "text.pt")
    with pytest.raises(FileNotFoundError):
        TinyTransformer.load(tmp_path / "missing.pt")


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo code ran > /dev/null",))


def test_a_model_file_cannot_run_code(tmp_path):
    """torch.load(weights_only=True): a pickle that would call a function is refused."""
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"format": TinyTransformer.FILE_FORMAT, "config": _Payload()}, f)
    with pytest.raises(ValueError, match="not a file written by TinyTransformer.save"):
        TinyTransformer.load(tmp_path / "evil.pt")


# ------------------------------------------------------------------ the cache
def test_a_run_is_trained_once_and_then_loaded(cache, capsys):
    model, history = induction.train(1, 5, steps=4, progress=False)
    assert history["cached"] is False and len(_entries(cache)) == 1
    again, history2 = induction.train(1, 5, steps=4, progress=True)
    assert history2["cached"] is True and "loaded from the trained-model cache" in capsys.readouterr().out
    tokens = induction.repeated_sequences(4)
    torch.testing.assert_close(again(tokens)[0], model(tokens)[0], rtol=0, atol=0)
    assert history2["loss"] == history["loss"] and history2["config"] == history["config"]
    for a, b in zip(history["induction"], history2["induction"]):
        assert torch.equal(a, b)
    assert history2["seconds"] == pytest.approx(history["seconds"])   # the time of the run that trained it
    # a different run is a different entry
    induction.train(1, 5, steps=3, progress=False)
    assert len(_entries(cache)) == 2


def test_cache_false_and_cache_off_store_nothing(cache, monkeypatch):
    induction.train(1, 0, steps=2, progress=False, cache=False)
    assert _entries(cache) == []
    monkeypatch.setenv(model_cache.ENV, "off")
    assert model_cache.cache_dir() is None
    _, history = induction.train(1, 0, steps=2, progress=False)
    assert history["cached"] is False and _entries(cache) == []


def test_default_folder_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(model_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache.cache_dir() == tmp_path / "xdg" / "attnlib"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert model_cache.cache_dir() == Path.home() / ".cache" / "attnlib"


def test_the_key_changes_with_config_source_and_torch(tmp_path, monkeypatch):
    src = tmp_path / "train.py"
    src.write_text("steps = 1\n")
    base = model_cache.entry_key("k", {"steps": 1}, [src])
    assert model_cache.entry_key("k", {"steps": 1}, [src]) == base
    assert model_cache.entry_key("k", {"steps": 2}, [src]) != base
    assert model_cache.entry_key("other", {"steps": 1}, [src]) != base
    src.write_text("steps = 1  # edited\n")
    assert model_cache.entry_key("k", {"steps": 1}, [src]) != base
    src.write_text("steps = 1\n")
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert model_cache.entry_key("k", {"steps": 1}, [src]) != base


def test_every_training_source_exists_and_covers_the_models_code():
    """TRAINING_SOURCES names real files, the training text among them, and every attnlib module
    that the model's forward pass and the training loop import."""
    names = {Path(p).name for p in induction.TRAINING_SOURCES}
    assert all(Path(p).is_file() for p in induction.TRAINING_SOURCES)
    assert "gettysburg.txt" in names
    # the modules the training path imports itself (attnlib/__init__ imports the rest of the package)
    import ast
    needed = set()
    for mod in ("induction", "transformer", "multihead", "attention", "kv_cache", "positions", "masks", "softmax",
                "measures", "evidence"):
        tree = ast.parse((ROOT / "attnlib" / f"{mod}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                needed |= {node.module} if node.module else {a.name for a in node.names}
    needed = {n.split(".")[0] for n in needed} - {"model_cache", "plotting", "encoder"}
    assert {f"{n}.py" for n in needed} <= names, sorted({f"{n}.py" for n in needed} - names)


def test_the_cached_run_loads_in_a_new_process_without_training(cache):
    """A second process finds the run: it loads it and never draws a training batch."""
    induction.train(1, 2, steps=5, progress=False)
    script = textwrap.dedent("""
        import attnlib.induction as ind
        def refuse(*a, **k):
            raise SystemExit("trained again")
        ind.training_batch = refuse
        model, history = ind.train(1, 2, steps=5, progress=False)
        print(history["cached"], round(history["loss"][-1], 6))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, model_cache.ENV: str(cache)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "True"


def test_a_damaged_entry_is_never_trusted(cache):
    model, history = induction.train(1, 1, steps=3, progress=False)
    (entry,) = _entries(cache)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="SHA-256 differs"):
        _, again = induction.train(1, 1, steps=3, progress=False)
    assert again["cached"] is False                             # trained again ...
    _, third = induction.train(1, 1, steps=3, progress=False)
    assert third["cached"] is True                              # ... and stored afresh
    # an entry renamed to another key is refused too
    (entry,) = _entries(cache)
    shutil.copytree(entry.parent, entry.parent.with_name("0" * 32))
    with pytest.warns(UserWarning, match="key recorded inside it"):
        assert model_cache.load("0" * 32) is None


def test_an_unwritable_cache_warns_and_the_run_still_returns(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(model_cache.ENV, str(blocker / "sub"))           # a folder below a file
    monkeypatch.setattr(induction, "_RUNS", {})
    with pytest.warns(UserWarning, match="could not store the trained model"):
        _, history = induction.train(1, 0, steps=2, progress=False)
    assert history["cached"] is False


def test_trained_after_a_restart_loads_and_says_so_when_it_must_train(cache, monkeypatch, capsys):
    monkeypatch.setattr(induction, "STEPS", 3)
    model, _ = induction.trained(1, 4)                  # nothing cached: it says so and trains
    out = capsys.readouterr()
    assert "not in the trained-model cache yet: training it now" in out.out and "3/3" in out.err
    monkeypatch.setattr(induction, "_RUNS", {})         # a kernel restart: the process forgets
    monkeypatch.setattr(induction, "training_batch", lambda *a: pytest.fail("trained again after a restart"))
    again, history = induction.trained(1, 4)
    assert history["cached"] is True and capsys.readouterr().out == ""
    tokens = induction.repeated_sequences(2)
    torch.testing.assert_close(again(tokens)[0], model(tokens)[0], rtol=0, atol=0)


def test_two_processes_that_need_the_same_run_train_it_once(cache):
    """The lock: two processes started together; one trains, the other waits and loads."""
    script = textwrap.dedent("""
        import attnlib.induction as ind
        model, history = ind.train(2, 7, steps=40, progress=False)
        print("cached" if history["cached"] else "trained")
    """)
    env = {**os.environ, model_cache.ENV: str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-1500:] for o in outs]
    assert sorted(o[0].strip() for o in outs) == ["cached", "trained"]
    assert len(_entries(cache)) == 1


def test_storing_a_run_forgets_the_runs_of_older_sources(cache, monkeypatch):
    """An edit of the training code changes every key; the entries of the old code are deleted
    when the first new one is stored, so the cache does not grow with every edit."""
    induction.train(1, 0, steps=2, progress=False)
    induction.train(1, 1, steps=2, progress=False)
    assert len(_entries(cache)) == 2
    monkeypatch.setattr(induction, "_SOURCES_DIGEST", "edited-" + induction._SOURCES_DIGEST)
    monkeypatch.setattr(induction, "_RUNS", {})
    _, history = induction.train(1, 0, steps=2, progress=False)
    assert history["cached"] is False                     # a new key: trained again
    assert len(_entries(cache)) == 1                      # the two entries of the old source are gone


def test_the_key_is_that_of_the_code_this_process_loaded(monkeypatch):
    """A training source edited while a process runs (another process, an editor) must not give
    that process's run, made by the code it loaded, the key of the edited code: the digest is
    taken when attnlib.induction is imported."""
    config = induction.TrainConfig(n_layers=1, seed=0, steps=2, vocab_size=len(induction.vocabulary()))
    assert induction._SOURCES_DIGEST == model_cache.source_digest(induction.TRAINING_SOURCES)
    before = induction._cache_key(config)
    monkeypatch.setattr(model_cache, "source_digest", lambda paths: "the files on disk changed")
    assert induction._cache_key(config) == before


# ------------------------------------------------------------------ issue 47: one atomic entry
def test_an_entry_is_one_folder_that_appears_whole_and_readable_by_the_group(cache):
    payload = {"weights": torch.arange(5.0)}
    old = os.umask(0o022)
    try:
        path = model_cache.store("a" * 32, payload, describe={"what": "test"})
    finally:
        os.umask(old)
    assert path == cache / "models" / ("a" * 32) / "model.pt"
    assert sorted(p.name for p in path.parent.iterdir()) == ["entry.json", "model.pt"]
    assert [p.name for p in (cache / "models").iterdir() if p.name.endswith(".tmp")] == []
    for item in (path.parent, path, path.parent / "entry.json"):
        assert stat.S_IMODE(item.stat().st_mode) & 0o044 == 0o044, (item, oct(item.stat().st_mode))  # not 0600
    assert torch.equal(model_cache.load("a" * 32)["weights"], payload["weights"])
    # a second store of the same run (another process finishing later) keeps the first, whole
    again = model_cache.store("a" * 32, {"weights": torch.zeros(5)}, describe={"what": "test"})
    assert again == path and torch.equal(model_cache.load("a" * 32)["weights"], payload["weights"])


def test_a_reader_never_sees_the_weights_of_one_write_beside_the_record_of_another(cache, monkeypatch):
    """The rename is the only step that makes an entry visible: a write stopped before it (a
    killed process) leaves no entry, only a temporary folder, which a later store removes once
    it is older than an hour (a fresh one may be another process's write in progress)."""
    real_rename = os.rename
    monkeypatch.setattr(model_cache.os, "rename", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        model_cache.store("b" * 32, {"w": torch.ones(2)}, describe={"what": "test"})
    monkeypatch.setattr(model_cache.os, "rename", real_rename)
    assert model_cache.load("b" * 32) is None and not (cache / "models" / ("b" * 32)).exists()
    # what a kill -9 leaves: a temporary folder nobody removes (no finally runs)
    killed = cache / "models" / f".{'c' * 32}.x1.tmp"
    killed.mkdir()
    (killed / "model.pt").write_bytes(b"half")
    fresh = cache / "models" / f".{'d' * 32}.x2.tmp"
    fresh.mkdir()
    an_hour_ago = time.time() - model_cache.STALE_WRITE_SECONDS - 60
    os.utime(killed, (an_hour_ago, an_hour_ago))
    model_cache.store("e" * 32, {"w": torch.ones(2)}, describe={"what": "test"})
    assert not killed.exists() and fresh.exists()


def test_forgetting_old_entries_never_touches_a_held_lock(cache):
    fcntl = pytest.importorskip("fcntl")
    model_cache.store("1" * 32, {"w": torch.ones(1)}, describe={"what": "kind", "source": "old"})
    model_cache.store("2" * 32, {"w": torch.ones(1)}, describe={"what": "kind", "source": "old"})
    held = cache / "models" / f"{'1' * 32}.lock"
    free = cache / "models" / f"{'2' * 32}.lock"
    free.write_text("")
    with open(held, "a+") as handle:                       # another process's lock, held
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        model_cache.store("3" * 32, {"w": torch.ones(1)}, describe={"what": "kind", "source": "new"})
        assert held.exists()                                # held: left alone
    assert not free.exists()                                # free: removed with its entry
    assert [p.parent.name for p in _entries(cache)] == ["3" * 32]
