"""bench/bench_cache.py (chapter 11's experiment on caches and fresh pages): the committed
result file is what its own summary function makes of its calls, and a small re-run on this
machine faults in one matrix of fresh pages per call that allocates one, and none for a call that
writes into a reused buffer (counts, not times: the timings are bench/bench_cache.py's)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "attention_cache.json"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_cache", ROOT / "bench" / "bench_cache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_summary_is_recomputed_from_its_calls():
    bench = _bench()
    data = json.loads(RESULT.read_text())
    assert bench.summarise(data["calls"]) == data["summary"]
    for T, s in data["summary"].items():
        assert s["n_fresh"] + s["n_reused"] == data["config"]["calls"]
        assert s["matrix_mib"] == int(T) ** 2 * 4 / 2 ** 20
    assert {c["level"] for c in data["meta"]["caches"]} >= {1, 2}
    assert data["meta"]["machine"]["cpu"] and len(data["meta"]["load_start"]) == 3


_FRESH = r"""
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("bench_cache", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
T = 4096
fresh = bench.measure(lambda: torch.empty(T, T).fill_(1.0), T * T, 3)
S, buf = torch.randn(T, T), torch.empty(T, T)
reused = bench.measure(lambda: torch.exp(S, out=buf), T * T, 3)
print(json.dumps({"fresh": fresh, "reused": reused}))
"""


def test_fresh_pages_are_counted_per_matrix():
    """A call that fills one new 64 MiB (T, T) float32 tensor (above glibc's largest mmap
    threshold, so always fresh memory) faults in one matrix of pages; one that writes into a
    reused buffer faults in none.  Measured in a fresh Python: a test process that other tests
    have used may hold a malloc state (a raised mmap threshold, a library's own setting) in
    which the new tensor reuses resident memory; that once made this test fail in CI."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _FRESH, str(ROOT / "bench" / "bench_cache.py")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(0.95 < c["fresh"] < 1.05 for c in out["fresh"]), out["fresh"]
    assert all(c["fresh"] < 0.01 for c in out["reused"]), out["reused"]
