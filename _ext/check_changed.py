"""`make check`: the quick loop for authors (a few minutes, not the full `make test`).

1. What changed: ``git diff --name-only HEAD`` (staged and unstaged), the untracked files git
   does not ignore, and, with ``--base REF``, every file changed since ``REF``.
2. The unit tests that touch it (``-m "not book"``; the book tests need the whole build):
   * a changed ``tests/test_*.py`` file itself;
   * for a changed ``attnlib`` module, every test file that imports or names it or any attnlib
     module that imports it, directly or through others (the package's import graph,
     :func:`import_graph`: a change to ``softmax`` reaches the tests of ``attention``, which
     imports it), and its doctests;
   * for a changed file of ``attnlib/static`` or ``_ext``, the test files that name it; for an
     ``_ext`` module, also those that name or import an ``_ext`` module importing it
     (``make_notebooks.py`` imports ``notebook_convert``);
   * for a changed chapter, the test files that name it and its exercises' tests.
3. One chapter executed in a fresh kernel, as the book build runs it (``_ext/execute_notebook.py``):
   the first changed chapter, else the chapter that names the changed modules most often,
   else chapter 1.
4. For each changed chapter, the book's references checked by Sphinx itself (:func:`check_references`):
   the whole book is read with the book's configuration and extensions but without executing
   anything or exporting the in-page models, and every warning about a reference (an unknown
   label, document, citation or term: ``{ref}``, ``{numref}``, ``{doc}``, ``{cite}``, ``{term}``)
   fails ``make check``.

It prints what it chose and why, then runs it; the exit status is 1 when a test or the chapter
fails.  Usage: ``.venv/bin/python _ext/check_changed.py [--base REF] [--jobs N] [--dry-run]``.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
CHAPTERS = ROOT / "chapters"


def git_lines(*args: str) -> list[str]:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def changed_files(base: str | None = None) -> list[str]:
    """Paths (relative to the repository) changed in the work tree, untracked ones included,
    and since ``base`` when given."""
    files = set(git_lines("diff", "--name-only", "HEAD"))
    files |= set(git_lines("ls-files", "--others", "--exclude-standard"))
    if base:
        files |= set(git_lines("diff", "--name-only", f"{base}...HEAD"))
    return sorted(f for f in files if (ROOT / f).exists())


def module_patterns(path: str) -> list[re.Pattern]:
    """Regexes that find a use of the attnlib module at ``path`` in a test's source."""
    parts = list(Path(path).with_suffix("").parts)             # ['attnlib', 'exercises', 'ch06']
    if parts[-1] == "__init__":
        parts = parts[:-1]
    dotted = ".".join(parts)
    pats = [re.compile(rf"\b{re.escape(dotted)}\b")]
    if len(parts) >= 2:
        parent, name = ".".join(parts[:-1]), parts[-1]
        pats.append(re.compile(rf"from\s+{re.escape(parent)}\s+import\s+[^\n]*\b{re.escape(name)}\b"))
        # the module reached through its package or a name re-exported at the top level:
        # kernels.triton_attention, attnlib.triton_attention(...)
        pats.append(re.compile(rf"\b(attnlib|{re.escape(parts[-2])})\.{re.escape(name)}\b"))
    if dotted == "attnlib":
        pats = [re.compile(r"^\s*(import attnlib|from attnlib import)", re.M)]
    return pats


def ext_users(module: str) -> set[str]:
    """``_ext/<module>.py`` and the ``_ext`` modules that import it, directly or through one
    another (``make_notebooks`` imports ``notebook_convert``), as ``{"notebook_convert", ...}``."""
    found, todo = {module}, [module]
    while todo:
        name = todo.pop()
        for f in (ROOT / "_ext").glob("*.py"):
            if f.stem not in found and re.search(rf"^\s*(from {re.escape(name)} import|import {re.escape(name)}\b)",
                                                  f.read_text(encoding="utf-8"), re.M):
                found.add(f.stem)
                todo.append(f.stem)
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """attnlib's import graph, read from the source (``ast``): ``{module: modules it imports}``,
    with dotted names (``attnlib.encoder.run``), every ``import`` and ``from ... import`` of an
    attnlib module counted, at the top of a module or inside a function (a function's import is
    an arrow too: it runs, and can close a circle, when the function runs)."""
    import ast
    files = {_module_name(p): p for p in sorted((ROOT / "attnlib").rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:                     # from attnlib import corpus: the module corpus
                    if f"{target}.{alias.name}" in files:
                        graph[module].add(f"{target}.{alias.name}")
                    elif target in files:
                        graph[module].add(target)
            elif isinstance(node, ast.Import):
                graph[module].update(a.name for a in node.names if a.name in files)
        graph[module].discard(module)
    return graph


def importers(module: str, graph: dict[str, set[str]] | None = None) -> set[str]:
    """``module`` and every attnlib module that imports it, directly or through others.  A
    package's ``__init__`` importing its own submodules does not count (``attnlib`` imports
    ``attnlib.kernels``, yet a change to the kernels does not reach every test)."""
    graph = import_graph() if graph is None else graph
    reverse: dict[str, set[str]] = {m: set() for m in graph}
    for m, targets in graph.items():
        for t in targets:
            if not t.startswith(m + "."):
                reverse.setdefault(t, set()).add(m)
    found, todo = {module}, [module]
    while todo:
        for user in reverse.get(todo.pop(), ()):
            if user not in found:
                found.add(user)
                todo.append(user)
    return found


REFERENCE_WARNING = re.compile(r"(undefined label|unknown document|reference target not found|"
                               r"could not find bibtex key|term not in glossary|failed to create a cross reference|"
                               r"Unknown interpreted text role|unknown target|Unknown directive type)", re.I)


def check_references(out: Path | None = None, root: Path = ROOT) -> tuple[int, list[str]]:
    """Read the whole book with Sphinx (``jupyter-book build``, the book's configuration and
    extensions) without executing a page (``execute_notebooks: off``) or exporting the in-page
    models (``ATTNLIB_PAGE_MODELS=off``), and return ``(exit status, the warnings about
    references)``.  Glue and output warnings of the unexecuted pages are expected and ignored;
    a broken ``{ref}``, ``{numref}``, ``{doc}``, ``{cite}`` or ``{term}`` is not.  ``root``: the
    book's folder (a copy, in the tests)."""
    import os
    import yaml
    out = root / "_build" / "check-refs" if out is None else out
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config["execute"]["execute_notebooks"] = "off"
    extensions = config["sphinx"].get("local_extensions") or {}
    config["sphinx"]["local_extensions"] = {name: str(root / folder) for name, folder in extensions.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "_config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    book = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run([str(book), "build", str(root), "--config", str(out / "_config.yml"), "--path-output",
                           str(out), "--builder", "html", "--nitpick", "-q"], cwd=root, capture_output=True,
                          text=True, env={**os.environ, "ATTNLIB_PAGE_MODELS": "off"})
    log = proc.stdout + proc.stderr
    found = [line.strip() for line in log.splitlines() if REFERENCE_WARNING.search(line)]
    return proc.returncode, found


def select(files: list[str]) -> tuple[list[str], list[str], list[str], list[str]]:
    """``(test files, doctest modules, chapters named by the change, reasons)``."""
    tests, doctests, reasons = set(), set(), []
    # tests/test_ci.py names files only as examples of this selection: it is not a test of them
    sources = {p: p.read_text(encoding="utf-8", errors="replace") for p in sorted(TESTS.glob("test_*.py"))
               if p.name != "test_ci.py"}
    chapter_hits: dict[str, int] = {}
    changed_chapters = []
    graph = import_graph()
    for f in files:
        p = Path(f)
        if p.parts[0] == "tests" and p.name.startswith("test_") and p.suffix == ".py":
            tests.add(f)
            reasons.append(f"{f}: changed")
        elif p.parts[0] == "attnlib" and p.suffix == ".py":
            module = _module_name(ROOT / f)
            reached = importers(module, graph) if module in graph else {module}
            pats = [pt for m in sorted(reached) for pt in module_patterns(m.replace(".", "/") + ".py")]
            hits = [str(t.relative_to(ROOT)) for t, src in sources.items() if any(pt.search(src) for pt in pats)]
            tests.update(hits)
            doctests.add(f)
            reasons.append(f"{f}: {len(hits)} test files use it or one of the {len(reached) - 1} modules "
                           f"that import it, and its doctests")
            name = p.stem if p.stem != "__init__" else p.parent.name
            for ch in CHAPTERS.glob("[0-9][0-9]_*.md"):
                n = len(re.findall(rf"\b{re.escape(name)}\b", ch.read_text(encoding="utf-8")))
                chapter_hits[str(ch.relative_to(ROOT))] = chapter_hits.get(str(ch.relative_to(ROOT)), 0) + n
        elif p.parts[0] in {"attnlib", "_ext"}:
            hits = [str(t.relative_to(ROOT)) for t, src in sources.items() if p.name in src]
            why = "name it"
            if p.parts[0] == "_ext" and p.suffix == ".py":
                users = ext_users(p.stem)
                named = re.compile(r"\b(" + "|".join(map(re.escape, sorted(users))) + r")(\.py\b|\s+import\b|\s+as\b|\s*$)", re.M)
                hits = [str(t.relative_to(ROOT)) for t, src in sources.items() if named.search(src)]
                why = "name or import it" + (f" or {', '.join(sorted(users - {p.stem}))}" if len(users) > 1 else "")
            if not hits and p.parts[:2] == ("attnlib", "static"):     # assets copied into pages by the build
                hits = [str(t.relative_to(ROOT)) for t in sources if t.name.startswith(("test_page_", "test_browser"))]
                why = "test pages (no test names it)"
            tests.update(hits)
            reasons.append(f"{f}: {len(hits)} test files {why}")
        elif p.parts[0] == "chapters" and p.suffix == ".md" and re.match(r"\d\d_", p.name):
            changed_chapters.append(f)
            number = p.name[:2]
            hits = [str(t.relative_to(ROOT)) for t, src in sources.items()
                    if p.stem in src or t.name == f"test_exercises_ch{number}.py"]
            tests.update(hits)
            reasons.append(f"{f}: {len(hits)} test files name it or test its exercises")
    chapters = changed_chapters or [c for c, n in sorted(chapter_hits.items(), key=lambda kv: -kv[1]) if n][:1]
    return sorted(tests), sorted(doctests), chapters, reasons


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="also count the commits since this git ref (e.g. origin/main)")
    ap.add_argument("--jobs", type=int, default=2, help="pytest workers (pytest-xdist)")
    ap.add_argument("--dry-run", action="store_true", help="print the selection, run nothing")
    args = ap.parse_args(argv)
    files = changed_files(args.base)
    tests, doctests, chapters, reasons = select(files)
    chapter = chapters[0] if chapters else "chapters/01_weighted_average.md"
    print(f"make check: {len(files)} changed files" + (f" (since {args.base} and in the work tree)" if args.base else
                                                        " (in the work tree; BASE=<ref> adds commits)"))
    for r in reasons:
        print("  " + r)
    print(f"  -> {len(tests)} test files, {len(doctests)} modules' doctests; chapter executed: {chapter}"
          + ("" if chapters else " (no changed chapter or module names one)"))
    if args.dry_run:
        print("\n".join(["tests:"] + tests + ["doctests:"] + doctests))
        return 0
    rc = 0
    if tests or doctests:
        cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "not book", "-p", "no:cacheprovider",
               *(["-n", str(args.jobs), "--dist", "loadfile"] if args.jobs > 1 else []),
               *tests, *(["--doctest-modules", *doctests] if doctests else [])]
        rc |= subprocess.run(cmd, cwd=ROOT).returncode
    rc |= subprocess.run([sys.executable, str(ROOT / "_ext" / "execute_notebook.py"), chapter,
                          "-o", str(ROOT / "_build" / "check.ipynb")], cwd=ROOT).returncode
    if any(f.startswith("chapters/") or f in ("intro.md", "references.bib", "_toc.yml") for f in files):
        print("make check: the book's references, read by Sphinx (nothing executed)")
        status, broken = check_references()
        for line in broken:
            print("  " + line)
        if broken:
            print(f"make check: {len(broken)} broken references")
            rc |= 1
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
