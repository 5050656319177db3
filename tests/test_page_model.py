"""The in-page model (chapter 9's model lab) in headless Chromium, with every outside request
blocked: the ONNX export run by onnxruntime-web in a Web Worker gives the tokens of the
model's tokenizer and every attention weight of held-out sentences within 2e-3 of
:func:`attnlib.encoder.run` (PyTorch), its head mask is zero ablation, and the lab's controls
work on a reader's own sentences, keep the page responsive and survive hostile input.

The site is assembled here as ``make book`` assembles it (``_ext/page_models.py``): the
export (cached in ``_build/browser-model/cache``), the worker, the tokenizer and the vendored
onnxruntime-web, under a page that carries the lab.  No book build is needed.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlib import corpus, encoder, evidence
from attnlib import explorables as xp
from attnlib.encoder import browser as browser_model
from attnlib.exercises import check, ch09
from attnlib.exercises.page import render_html
from attnlib.exercises.widgets import model_answer

from test_browser import Visit, browser, downloaded_bytes, ext, lab_site  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 2e-3            # the bound for held-out sentences (float16 weights)
# Held out: none of these is among browser_model.CHECK_SENTENCES (the build's own check).
HELD_OUT = [
    "The bears ate the honey before the keeper came back.",
    "She bears the weight of the whole family on her shoulders.",
    "Naïve café owners in Zürich sold 1,024 croissants on 3.5 days.",
    corpus.RUNNING,
    " ".join(corpus.load_text().split()[:70]),
]
PAIRS = [corpus.PAIR, ("Where is the station?", "It is two streets away, near the old bank.")]




@pytest.fixture(scope="module")
def site(tmp_path_factory):
    lab = xp.model_lab(*corpus.PAIR, mode="minimal", layer=0, head=2)
    # the sentence exercises graded in the page, as the book serves them (Pyodide + graders)
    exercises = "".join(render_html(9, name) for name in ("break_previous", "flip_pair"))
    out = lab_site(tmp_path_factory.mktemp("site"), "model",
                   lambda target: browser_model.write_site_files(target, cache=ROOT / "_build" / "browser-model" / "cache"),
                   lab.html + exercises, title="model lab")
    return {**out, "lab": lab}


@pytest.fixture(scope="module")
def lab(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "lab.html")
    visit.page.evaluate("() => window.attnlibModel.load()")
    yield visit
    visit.close()


RUN = """async ([a, b, batch]) => { const r = await window.attnlibModel.run(a, b, batch ? {batch: batch} : undefined);
  return {tokens: r.tokens, typeIds: r.typeIds, shape: r.shape, batch: r.batch, dModel: r.dModel,
          all: Array.from(r.all), hidden: Array.from(r.hidden)}; }"""


def page_run(page, a, b=None, batch=None) -> dict:
    out = page.evaluate(RUN, [a, b, batch])
    L, H, T, _ = out["shape"]
    out["all"] = np.array(out["all"], dtype=np.float32).reshape(out["batch"], L, H, T, T)
    out["hidden"] = np.array(out["hidden"], dtype=np.float32).reshape(out["batch"], L + 1, T, out["dModel"])
    return out


def test_model_json_describes_the_export_and_its_check(site):
    info = site["info"]
    assert (info["n_layers"], info["n_heads"], info["d_model"]) == (6, 12, 384)
    assert info["check"]["max_weight_diff"] <= browser_model.LONG_TOLERANCE
    assert info["files"]["encoder.onnx"]["bytes"] < 50e6             # the download budget
    assert info["tokenizer"]["maxLength"] == 512


@pytest.mark.parametrize("text", HELD_OUT)
def test_browser_weights_equal_pytorch_on_held_out_sentences(lab, text):
    got = page_run(lab.page, text)
    want = encoder.run(text)
    assert got["tokens"] == want.tokens
    assert got["typeIds"] == want.token_type_ids.tolist()
    diff = float(np.abs(got["all"][0] - want.stacked("pattern").numpy()).max())
    assert diff <= TOLERANCE, f"largest attention-weight difference {diff:.2e} on {text!r}"
    assert np.allclose(got["all"][0].sum(-1), 1.0, atol=1e-5)      # every row sums to 1
    assert lab.external == [] and lab.errors == []


@pytest.mark.parametrize("pair", PAIRS)
def test_browser_sentence_pair_has_segments_and_equal_weights(lab, pair):
    got = page_run(lab.page, *pair)
    want = encoder.run(*pair)
    assert got["tokens"] == want.tokens and got["typeIds"] == want.token_type_ids.tolist()
    assert 1 in got["typeIds"]
    assert float(np.abs(got["all"][0] - want.stacked("pattern").numpy()).max()) <= TOLERANCE


def test_zero_edits_on_the_page_are_zero_ablation_as_in_pytorch(lab):
    text, off = corpus.RUNNING, (2, 7)
    got = page_run(lab.page, text, None, [[], [{"layer": off[0], "head": off[1], "mode": "zero"}]])
    intact = encoder.run(text)
    ablated = encoder.run(text, edits=[{"layer": off[0], "head": off[1], "mode": "zero"}])
    assert float(np.abs(got["all"][0] - intact.stacked("pattern").numpy()).max()) <= TOLERANCE
    assert float(np.abs(got["all"][1] - ablated.stacked("pattern").numpy()).max()) <= TOLERANCE
    # layers up to the ablated one are untouched; later ones move (the ablation reaches them)
    assert np.array_equal(got["all"][0][: off[0] + 1], got["all"][1][: off[0] + 1])
    assert float(np.abs(got["all"][0][off[0] + 1:] - got["all"][1][off[0] + 1:]).max()) > 1e-3
    want_h = ablated.stacked("resid_pre").numpy()
    assert float(np.abs(got["hidden"][1] - want_h).max()) < 2e-2     # hidden states (not probabilities) in float16 weights


def test_lab_runs_a_readers_minimal_pair_and_ablation(lab):
    page = lab.page
    uid = lab.page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    root = f"#{uid}"
    page.check(f"{root} [data-role=mode-minimal]")                      # shows sentence B
    page.fill(f"{root} [data-role=text-a]", "The bears ate the honey.")
    page.fill(f"{root} [data-role=text-b]", "The dogs ate the honey.")
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran in the browser')")
    summary = page.inner_text(f"{root} [data-role=pair-summary]")
    assert "shared queries change their strongest key" in summary
    page.select_option(f"{root} [data-role=layer]", "1")
    page.select_option(f"{root} [data-role=head]", "4")
    readout = page.inner_text(f"{root} [data-role=readout-0]")
    assert "looks most at" in readout and "sums to 1.000" in readout
    # the page's readout names the strongest key PyTorch finds for the same query (the word that
    # differs, "bears" at position 2, is the query the readout opens on)
    assert readout.startswith("Query \u201cbears\u201d (position 2)"), readout
    r = encoder.run("The bears ate the honey.")
    row = r.head("pattern", 1, 4)[2]
    assert f"\u201c{r.tokens[int(row.argmax())]}\u201d (position {int(row.argmax())})" in readout
    page.click(f"{root} [data-role=ablate]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=ablation]').textContent.includes('ranks')")
    text = page.inner_text(f"{root} [data-role=ablation]")
    want = float(evidence.layer_ablation("The bears ate the honey.", 1, mode="zero")[4])
    got = float(page.get_attribute(f"{root} [data-role=ablation]", "data-change"))
    assert abs(got - want) < 5e-5 + 0.03 * want, (got, want)
    page.select_option(f"{root} [data-role=layer]", "5")                   # same run: every head was measured
    page.select_option(f"{root} [data-role=head]", "5")
    got = float(page.get_attribute(f"{root} [data-role=ablation]", "data-change"))
    want = float(evidence.layer_ablation("The bears ate the honey.", 5, mode="zero")[5])
    assert want > 0.05 and abs(got - want) < 5e-5 + 0.03 * want, (got, want)
    assert "computed in your browser" in text and "of 72" in text
    assert lab.errors == [] and lab.external == []


@pytest.mark.parametrize("pair", [("The cat sat, then it slept.", "The cat sat and then it slept."),
                                  ("The bears ate the honey.", "The dogs ate the honey."),
                                  ("Where is the station?", "Where is the old station?")])
def test_the_labs_minimal_pair_count_is_the_graders(lab, pair):
    """Issue 38 item 4: on the same pair the lab's table said 9 and the flip_pair grader 8 of 10
    (the table compared token text, the grader aligned positions and skipped close calls).  The
    table's count, on the page's own weights, now follows the grader's rule exactly."""
    from attnlib.exercises.core import pair_flips
    page = lab.page
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    page.check(f"{root} [data-role=mode-minimal]")
    page.fill(f"{root} [data-role=text-a]", pair[0])
    page.fill(f"{root} [data-role=text-b]", pair[1])
    page.evaluate("(sel) => { document.querySelector(sel).textContent = ''; }", f"{root} [data-role=status]")
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran')")
    page.select_option(f"{root} [data-role=layer]", "3")
    page.select_option(f"{root} [data-role=head]", "11")
    summary = page.inner_text(f"{root} [data-role=pair-summary]")
    a, b = page_run(page, pair[0]), page_run(page, pair[1])
    ra, rb = a["all"][0][3, 11].tolist(), b["all"][0][3, 11].tolist()
    aligned, flipped, close = pair_flips(a["tokens"], b["tokens"], ra, rb)    # the grader's rule, on the page's weights
    flips = len(flipped)
    assert summary.startswith(f"{flips} of {len(aligned)} shared queries change their strongest key"), (summary, flips, close)
    assert (f"; {close} more" in summary) == (close > 0), summary
    page.check(f"{root} [data-role=mode-one]")


def test_in_pair_mode_the_ablation_names_the_pairs_sentence_vector(lab):
    """Issue 38 item 5: with a sentence pair (one input) the readout said "sentence A's sentence
    vector"; it measures the pair's."""
    page = lab.page
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    page.check(f"{root} [data-role=mode-pair]")
    page.fill(f"{root} [data-role=text-a]", "Where is the station?")
    page.fill(f"{root} [data-role=text-b]", "It is two streets away.")
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran')")
    page.click(f"{root} [data-role=ablate]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=ablation]').textContent.includes('ranks')")
    text = page.inner_text(f"{root} [data-role=ablation]")
    assert "the pair's sentence vector" in text and "sentence A's" not in text
    page.check(f"{root} [data-role=mode-one]")


@pytest.mark.parametrize("hostile, message", [
    (" " * 40, "empty"),
    ("word " * 2000, "512"),
])
def test_lab_refuses_bad_input_with_a_message_and_keeps_the_last_result(lab, hostile, message):
    page = lab.page
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    page.check(f"{root} [data-role=mode-one]")
    page.fill(f"{root} [data-role=text-a]", "The cat sat.")
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran')")
    before = page.inner_text(f"{root} [data-role=readout-0]")
    page.fill(f"{root} [data-role=text-a]", hostile)
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Could not run')")
    assert message in page.inner_text(f"{root} [data-role=status]")
    assert page.inner_text(f"{root} [data-role=readout-0]") == before


@pytest.mark.parametrize("text", ["<script>alert(1)</script> and <img src=x onerror=alert(1)>",
                                  "שלום עולם and مرحبا بالعالم", "I 😀 café\u0000\u0007 日本語", "a" * 10000])
def test_lab_runs_hostile_text_as_text(lab, text):
    page = lab.page
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    page.check(f"{root} [data-role=mode-one]")
    page.fill(f"{root} [data-role=text-a]", text)
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran')")
    got = page_run(page, text)
    assert got["tokens"] == encoder.run(text).tokens
    assert lab.dialogs == [] and page.query_selector(f"{root} img") is None and lab.errors == []


def test_the_model_loads_and_runs_in_a_worker_not_on_the_main_thread(browser, site):  # noqa: F811
    """From "Load" to the first result, with the page's CPU throttled 4x (a mid-range phone):
    the model is fetched, compiled and run by the page's Web Worker (model/worker.js), and
    neither onnxruntime nor the model's files are ever loaded by the page's main thread (its
    own resource timeline lists none of them, and it has no onnxruntime global).  How long the
    main thread is busy along this path is a figure, measured by bench/bench_browser_model.py
    (its 'longest main-thread task' column), not asserted here: a time limit in a test fails
    on a loaded machine.  The taps are dispatched in the page (element.click())."""
    visit = Visit(browser, site["url"] + "lab.html")
    page = visit.page
    workers = []
    page.on("worker", lambda w: workers.append(w.url))
    visit.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 4})
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    status = f"document.querySelector('{root} [data-role=status]').textContent"
    page.evaluate(f"() => document.querySelector('{root} [data-role=load]').click()")
    page.wait_for_function(f"() => {status}.startsWith('The model is loaded')", timeout=60_000, polling=500)
    page.evaluate(f"() => document.querySelector('{root} [data-role=run]').click()")
    page.wait_for_function(f"() => {status}.startsWith('Ran')", polling=500)
    assert [u for u in workers if u.endswith("/model/worker.js")], f"no model worker started: {workers}"
    main_thread = page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)")
    loaded_here = [u for u in main_thread if re.search(r"(ort[^/]*\.(wasm|m?js)|encoder\.onnx|vocab\.txt)$", u)]
    assert loaded_here == [], f"the main thread loaded the model's files itself: {loaded_here}"
    assert page.evaluate("() => typeof window.ort") == "undefined", "onnxruntime ran on the main thread"
    assert visit.errors == [] and visit.failed == [] and visit.external == []
    visit.close()


def test_the_model_is_kept_by_the_browser_for_later_pages(browser, site):  # noqa: F811
    """Loaded once, the model comes from the browser's Cache Storage on the next page of the
    same visit: encoder.onnx is not requested again."""
    context = browser.new_context()
    requested = []
    context.on("request", lambda r: requested.append(r.url))
    for _ in range(2):
        page = context.new_page()
        page.goto(site["url"] + "lab.html", wait_until="load")
        page.evaluate("() => window.attnlibModel.load()")
        assert page.evaluate("async () => (await window.attnlibModel.run('The cat sat.')).tokens") == \
            ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
        page.close()
    assert sum(url.endswith("/encoder.onnx") for url in requested) == 1, requested
    context.close()


def test_a_failed_download_says_so_and_keeps_the_precomputed_views(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "lab.html")
    page = visit.page
    page.route("**/encoder.onnx", lambda route: route.fulfill(status=404, body="missing"))
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    before = page.inner_text(f"{root} [data-role=readout-0]")
    page.click(f"{root} [data-role=load]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Could not run')")
    status = page.inner_text(f"{root} [data-role=status]")
    assert "could not download" in status and "HTTP 404" in status
    assert page.inner_text(f"{root} [data-role=readout-0]") == before     # the PyTorch views stay
    page.select_option(f"{root} [data-role=head]", "5")                   # and stay usable
    assert page.inner_text(f"{root} [data-role=readout-0]") != before
    visit.close()


def test_the_load_button_states_what_first_use_downloads(browser, site):  # noqa: F811
    """Issue 38 item 5: the button said 45.9 MB while first use fetched 60.3 MB (the runtime was
    left out).  The stated size, the one the book's pages carry, is what a fresh page receives."""
    visit = Visit(browser, site["url"] + "lab.html")
    label = visit.page.inner_text(".attnlib-xp[data-kind=model] [data-role=load]")
    stated = int(visit.page.get_attribute('meta[name="attnlib-model-bytes"]', "content"))
    got = downloaded_bytes(visit.context, visit.page, "() => window.attnlibModel.load()")
    assert abs(got - stated) <= 0.005 * stated, (got, stated)
    assert f"({stated / 1e6:.1f} MB, once)" in label and stated > 55e6
    visit.close()


def test_lab_says_why_it_cannot_load_in_a_notebook_or_from_a_file(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "notebook.html")
    root = "#" + visit.page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    for role in ("load", "run", "ablate"):                               # no button that can only fail
        assert visit.page.is_hidden(f"{root} [data-role={role}]"), role
    status = visit.page.inner_text(f"{root} [data-role=status]")
    assert "not in a notebook" in status and "edit the sentences in the cell and run it again" in status
    visit.close()
    context = browser.new_context()
    page = context.new_page()
    page.goto((site["folder"] / "chapters" / "lab.html").as_uri())
    assert "opened from a file" in page.inner_text(".attnlib-xp[data-kind=model] [data-role=status]")
    context.close()


@pytest.mark.parametrize("name, texts", [
    ("break_previous", ["The cat sat on the mat."]),
    ("break_previous", [" ".join(corpus.load_text().split()[:150])]),
    ("break_previous", ["word " * 600]),
    ("flip_pair", ["The cat sat, then it slept.", "The cat sat and then it slept."]),
    ("flip_pair", ["The cat sat, then it slept.", "The dog sat, then it slept."]),
    ("flip_pair", ["The cat sat.", ""]),
])
def test_sentence_exercises_give_the_kernels_verdict_on_the_pages_model(lab, name, texts):
    """The reader types into the exercise, presses Check; the page's model reads the text and
    the course's checker (Pyodide) grades it: same verdict and message as the kernel's
    PyTorch reading graded in Python."""
    page = lab.page
    root = f'[data-exercise="9:{name}"]'
    for k, text in enumerate(texts):
        page.fill(f"{root} textarea >> nth={k}", text)
    page.click(f"{root} button.attn-ex-check")
    page.wait_for_selector(f"{root} .attn-ex-correct, {root} .attn-ex-wrong", timeout=180_000)
    shown = page.inner_text(f"{root} .attn-ex-feedback")
    reads = [ch09.PREV_HEAD] if name == "break_previous" else [ch09.FLIP_HEAD]
    expected = check(9, name, model_answer(texts, reads) if all(t.strip() for t in texts) else {"texts": texts})
    if name == "break_previous" and "512" in expected.message:   # the two tokenizers word their refusal differently
        assert shown.startswith("Not yet. The model could not read your text") and "512" in shown
        return
    # same words; numbers (two decimals) may differ by one unit in the last place (float16 weights)
    number = re.compile(r"\d+\.\d+")
    assert number.sub("#", shown) == number.sub("#", expected.text), (shown, expected.text)
    for a, b in zip(number.findall(shown), number.findall(expected.text)):
        assert abs(float(a) - float(b)) <= 0.011, (shown, expected.text)
    assert lab.errors == [] and lab.external == []


# ------------------------------------------------------------------ the lab as a reader meets it
# In a book-like column styled by the real theme stylesheet (as tests/test_page_explorables.py
# does for the other explorables), on a phone and a desktop, light and dark.
from test_page_explorables import CONTRASTS, MIN_CONTRAST, PAGE_SCROLL, SMALLEST_TEXT, ScreenVisit, theme_css  # noqa: E402

LAB = ".attnlib-xp[data-kind=model]"
PAIR_12 = ("The old keeper fed the bears some honey before winter.",     # 13 tokens each
           "The old keeper fed the dogs some honey before winter.")
LONG = " ".join(["The old keeper fed the bears some honey before the long winter came."] * 3)   # 44 tokens


@pytest.fixture(scope="module")
def themed(site):
    """The lab in the book's column and theme: chapters/{light,dark}-column.html of ``site``."""
    folder = site["folder"]
    shutil.copy(theme_css(), folder / "_static" / "theme.css")
    shutil.copy(ROOT / "_static" / "course-layout.css", folder / "_static" / "course-layout.css")   # the book's own layout
    size = ext("page_models").first_use_bytes(site["info"])
    for theme in ("light", "dark"):
        (folder / "chapters" / f"{theme}-column.html").write_text(
            f'<!DOCTYPE html><html lang="en" data-theme="{theme}" data-content_root="../"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="attnlib-model-bytes" content="{size}"><link rel="stylesheet" href="../_static/theme.css">'
            '<link rel="stylesheet" href="../_static/course-layout.css">'
            '<title>model lab</title></head><body><main class="bd-article" style="max-width: 740px; margin: 0 auto; '
            f'padding: 0 1.5rem"><h1 tabindex="-1">Lab</h1>\n{site["lab"].html}\n<p>After the lab.</p></main></body></html>\n',
            encoding="utf-8")
    return site["url"]


def _lab_run(page, a, b=None):
    """Type A (and B: a minimal pair) into the lab and press Run; wait for the result."""
    root = "#" + page.get_attribute(LAB, "id")
    page.check(f"{root} [data-role=mode-minimal]")                     # shows B, so it can be filled
    page.fill(f"{root} [data-role=text-a]", a)
    page.fill(f"{root} [data-role=text-b]", b or "")
    page.check(f"{root} [data-role={'mode-minimal' if b else 'mode-one'}]")
    page.evaluate("(sel) => { document.querySelector(sel).textContent = ''; }", f"{root} [data-role=status]")
    page.click(f"{root} [data-role=run]")
    page.wait_for_function("(sel) => document.querySelector(sel).textContent.startsWith('Ran in the browser')",
                           arg=f"{root} [data-role=status]", timeout=60_000)
    return root


# Where the lab's heatmaps sit: each canvas and its scroll region against the lab's box.
MAPS = """(sel) => { const f = document.querySelector(sel), box = f.getBoundingClientRect();
  return [...f.querySelectorAll('.xp-panel')].filter(p => !p.hidden).map(p => {
    const canvas = p.querySelector('canvas'), c = canvas.getBoundingClientRect(), s = canvas.closest('[role=region]');
    return {left: c.left - box.left, right: box.right - c.right, top: c.top, bottom: c.bottom,
            regionRight: box.right - s.getBoundingClientRect().right, scroll: s.scrollWidth, client: s.clientWidth,
            tabindex: s.getAttribute('tabindex'), label: s.getAttribute('aria-label') || ''}; }); }"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_lab_fits_a_phone_with_a_minimal_pair_and_scrolls_a_long_sentence_in_its_own_region(browser, themed, theme):  # noqa: F811
    visit = ScreenVisit(browser, themed + f"{theme}-column.html", "phone", theme)
    try:
        page = visit.page
        root = _lab_run(page, *PAIR_12)
        scroll_width, client_width = page.evaluate(PAGE_SCROLL)
        assert scroll_width <= client_width, f"the page scrolls sideways ({scroll_width} > {client_width})"
        fig = page.evaluate("(sel) => { const f = document.querySelector(sel); return [f.scrollWidth, f.clientWidth]; }", root)
        assert fig[0] <= fig[1], f"the lab scrolls sideways inside itself: {fig}"
        a, b = page.evaluate(MAPS, root)
        for m in (a, b):  # 13 tokens fit the phone's column: no scrolling, nothing outside the lab
            assert m["left"] >= 0 and m["right"] >= 0 and m["regionRight"] >= 0, m
            assert m["scroll"] <= m["client"], f"a 13-token heatmap should fit a phone's column: {m}"
        assert b["top"] >= a["bottom"], "the two heatmaps should stack on a phone"
        tiny = page.evaluate(SMALLEST_TEXT, root)[0]["px"]
        assert tiny >= 10, f"text of {tiny} px"
        _lab_run(page, LONG)
        scroll_width, client_width = page.evaluate(PAGE_SCROLL)
        assert scroll_width <= client_width, f"a long sentence makes the page scroll sideways ({scroll_width} > {client_width})"
        fig = page.evaluate("(sel) => { const f = document.querySelector(sel); return [f.scrollWidth, f.clientWidth]; }", root)
        assert fig[0] <= fig[1], f"a long sentence makes the whole lab scroll sideways: {fig}"
        (m,) = page.evaluate(MAPS, root)
        assert m["scroll"] > m["client"] and m["regionRight"] >= 0, f"the long heatmap should scroll in its own region: {m}"
        assert m["tabindex"] == "0" and "heatmap" in m["label"], m
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


SEVENTY = " ".join(["The old keeper fed the bears some honey before the long winter came."] * 5)   # 72 tokens


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_a_long_sentence_keeps_square_cells_and_a_tap_picks_the_row_under_it(browser, themed, viewport):  # noqa: F811
    """Issue 38 item 1: the book's layout capped canvases at 100% and squeezed a 70-token heatmap
    sideways (aspect 0.35), and a tap divided y by the x scale (row 17 picked query 27 or 62)."""
    visit = ScreenVisit(browser, themed + "light-column.html", viewport, "light")
    try:
        page = visit.page
        root = _lab_run(page, SEVENTY)
        canvas = f"{root} [data-role=map-0] canvas"
        size = page.evaluate(f"() => {{ const c = document.querySelector('{canvas}'), r = c.getBoundingClientRect(),"
                             f" b = document.querySelector('{root} [data-role=map-0]');"
                             "return [parseFloat(c.style.width), r.width, parseFloat(c.style.height), r.height, b.scrollWidth, b.scrollHeight,"
                             " c._geom.room + c._geom.T * c._geom.cell + 8]; }")
        assert abs(size[0] - size[1]) < 0.5 and abs(size[2] - size[3]) < 0.5, size      # the canvas is not squeezed
        assert size[4] == size[5] == size[6], size             # square cells: the box scrolls over a square heatmap
        page.evaluate(f"() => document.querySelector('{canvas}').scrollIntoView({{block: 'start'}})")
        box = page.query_selector(canvas).bounding_box()
        g = page.evaluate(f"() => document.querySelector('{canvas}')._geom")
        page.mouse.click(box["x"] + g["room"] + 2, box["y"] + g["room"] + 17.5 * g["cell"])   # row 17, first visible column
        assert page.eval_on_selector(f"{root} [data-role=query]", "e => e.value") == "17"
        assert visit.errors == []
    finally:
        visit.close()


def test_lab_controls_are_touch_sized_on_a_phone(browser, themed):  # noqa: F811
    visit = ScreenVisit(browser, themed + "light-column.html", "phone", "light")
    try:
        sizes = visit.page.evaluate("""(sel) => [...document.querySelectorAll(sel + ' button, ' + sel + ' input, ' + sel + ' select')]
          .filter(e => e.getClientRects().length).map(e => {
            const target = ['radio', 'checkbox'].includes(e.type) && e.labels.length ? e.labels[0] : e;  /* its label takes the tap */
            const r = target.getBoundingClientRect();
            return {what: e.dataset.role || e.type, w: r.width, h: r.height}; })""", LAB)
        assert len(sizes) >= 9
        small = [s for s in sizes if s["w"] < 44 or s["h"] < 44]
        assert not small, f"touch targets under 44 px on a phone: {small}"
    finally:
        visit.close()


ACTIVE = """() => { const e = document.activeElement, cs = getComputedStyle(e);
  return {role: e.dataset.role || e.getAttribute('role') || e.tagName, inLab: !!e.closest('.attnlib-xp'),
          ring: cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) >= 2 || cs.boxShadow !== 'none'}; }"""


def _accessible_name(page, cdp) -> str:
    """The accessible name Chromium computes for the focused element."""
    page.evaluate("() => { document.querySelectorAll('[data-probe]').forEach(e => e.removeAttribute('data-probe'));"
                  " document.activeElement.setAttribute('data-probe', ''); }")
    doc = cdp.send("DOM.getDocument", {"depth": 0})
    node = cdp.send("DOM.querySelector", {"nodeId": doc["root"]["nodeId"], "selector": "[data-probe]"})
    ax = cdp.send("Accessibility.getPartialAXTree", {"nodeId": node["nodeId"], "fetchRelatives": False})
    return next(n for n in ax["nodes"] if not n.get("ignored"))["name"]["value"]


def test_lab_works_by_keyboard_alone_and_names_every_control_by_its_visible_text(browser, themed):  # noqa: F811
    visit = ScreenVisit(browser, themed + "dark-column.html", "desktop", "dark")
    try:
        page = visit.page
        cdp = page.context.new_cdp_session(page)
        root = "#" + page.get_attribute(LAB, "id")
        # every control, with the text a sighted reader sees on it (a labelled control: its label)
        want = page.evaluate("""(sel) => [...document.querySelectorAll(sel + ' button, ' + sel + ' input, ' + sel + ' select, '
                                                                 + sel + ' [tabindex="0"]')]
          .filter(e => e.getClientRects().length && !(e.type === 'radio' && !e.checked)).map(e => ({
            role: e.dataset.role || e.getAttribute('role'),
            text: ((e.labels && e.labels.length ? e.labels[0].innerText : (e.tagName === 'BUTTON' ? e.innerText : '')) || '').trim()}))""", root)
        page.focus("h1")
        reached = {}
        for _ in range(40):
            page.keyboard.press("Tab")
            now = page.evaluate(ACTIVE)
            if not now["inLab"]:
                break
            assert now["ring"], f"no visible focus ring on {now['role']}"
            reached[now["role"]] = _accessible_name(page, cdp)
        for control in want:
            assert control["role"] in reached, f"{control['role']} cannot be reached with Tab (reached {list(reached)})"
            name = reached[control["role"]]
            assert name.strip(), f"{control['role']} has no accessible name"
            assert " ".join(control["text"].split()) in " ".join(name.split()), (control, name)
        # operate it: load, run a minimal pair, pick a query on the heatmap, switch a head off
        page.focus(f"{root} [data-role=load]")
        page.keyboard.press("Enter")
        page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('The model is loaded')",
                               timeout=60_000)
        assert page.evaluate(ACTIVE)["role"] == "text-a", "after loading, the focus should go on to the sentence"
        page.keyboard.type("The bears ate the honey.")
        page.keyboard.press("Shift+Tab")                                   # the mode's radio group: one sentence
        assert page.evaluate(ACTIVE)["role"] == "mode-one"
        page.keyboard.press("ArrowDown")                                   # a minimal pair: sentence B appears
        assert page.evaluate(ACTIVE)["role"] == "mode-minimal"
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        assert page.evaluate(ACTIVE)["role"] == "text-b"
        page.keyboard.press("Control+A")
        page.keyboard.type("The dogs ate the honey.")
        page.keyboard.press("Tab")
        assert page.evaluate(ACTIVE)["role"] == "run"
        page.keyboard.press("Enter")
        assert page.evaluate(ACTIVE)["role"] == "run", "the focus should stay on Run while the model runs"
        page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran in the browser')")
        assert page.evaluate(ACTIVE)["role"] == "run", "the focus should stay on Run after the run"
        page.focus(f"{root} [data-role=map-0]")
        before = page.input_value(f"{root} [data-role=query]")
        page.keyboard.press("ArrowDown")
        assert int(page.input_value(f"{root} [data-role=query]")) == int(before) + 1
        assert "looks most at" in page.inner_text(f"{root} [data-role=status]")
        page.focus(f"{root} [data-role=ablate]")
        page.keyboard.press("Space")
        page.wait_for_function(f"() => document.querySelector('{root} [data-role=ablation]').textContent.includes('ranks')")
        assert page.evaluate(ACTIVE)["role"] == "ablate", "the focus should stay on the ablation button"
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


# Every fillText on a canvas is recorded with its colour and font, so that the heatmap's labels
# (pixels, invisible to the DOM contrast check) can be checked like text.
RECORD_LABELS = """(() => { const draw = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (text) {
    (this.canvas.__labels = this.canvas.__labels || []).push({text: String(text), fill: String(this.fillStyle), font: this.font});
    return draw.apply(this, arguments); }; })();"""
LABEL_CONTRAST = """(sel) => {
  const parse = (c) => { if (c.startsWith('#')) return [1, 3, 5].map(k => parseInt(c.slice(k, k + 2), 16)).concat([1]);
    const p = /rgba?\\(([^)]+)\\)/.exec(c)[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const over = (a, b) => [0, 1, 2].map(k => a[k] * a[3] + b[k] * (1 - a[3])).concat([1]);
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const out = [];
  for (const c of document.querySelectorAll(sel + ' canvas')) {
    if (!c.getClientRects().length) continue;
    let bg = [255, 255, 255, 1];
    const chain = []; for (let n = c; n && n.nodeType === 1; n = n.parentElement) chain.push(n);
    for (const n of chain.reverse()) { const b = getComputedStyle(n).backgroundColor; if (b && b !== 'transparent') bg = over(parse(b), bg); }
    for (const l of c.__labels || []) {
      const fg = over(parse(l.fill), bg), l1 = lum(fg), l2 = lum(bg);
      out.push({text: l.text, fill: l.fill, px: parseFloat(/(\\d+(\\.\\d+)?)px/.exec(l.font)[1]),
                ratio: (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05)});
    }
  }
  return out; }"""


TWO_FRAMES = "() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)))"


@pytest.mark.parametrize("opened_in", ["dark", "light"])
def test_lab_text_and_heatmap_labels_are_legible_in_dark_mode(browser, themed, opened_in):  # noqa: F811
    """Dark from the start, or switched to dark after the lab has drawn (the theme's toggle)."""
    visit = ScreenVisit(browser, themed + f"{opened_in}-column.html", "desktop", opened_in)
    try:
        page = visit.page
        page.evaluate(RECORD_LABELS)
        root = _lab_run(page, "The bears ate the honey.", "The dogs ate the honey.")
        page.evaluate(TWO_FRAMES)                 # the repaints the run's layout scheduled are done, in the old theme
        page.evaluate("(sel) => document.querySelectorAll(sel + ' canvas').forEach(c => { c.__labels = []; })", root)
        if opened_in == "light":
            page.evaluate("() => document.documentElement.setAttribute('data-theme', 'dark')")
        else:
            page.select_option(f"{root} [data-role=head]", "3")
        page.wait_for_timeout(100)
        labels = page.evaluate(LABEL_CONTRAST, root)
        assert len(labels) >= 2 * 2 * 8, f"the heatmaps were not redrawn: {len(labels)} labels"
        low = [x for x in labels if x["ratio"] < MIN_CONTRAST]
        assert not low, f"heatmap labels under {MIN_CONTRAST}:1 in dark mode: {low[:6]}"
        assert min(x["px"] for x in labels) >= 10
        low = [c for c in page.evaluate(CONTRASTS, root) if c["ratio"] < MIN_CONTRAST]
        assert not low, f"text under {MIN_CONTRAST}:1 in dark mode: {low[:6]}"
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


def test_lab_speaks_through_one_polite_status_and_its_heatmap_names_head_and_strongest_key(lab):
    page = lab.page
    root = _lab_run(page, "The bears ate the honey.", "The dogs ate the honey.")
    live = page.evaluate("""(sel) => [...document.querySelectorAll(sel + ' [aria-live], ' + sel + ' [role=status], '
                                       + sel + ' [role=alert], ' + sel + ' [role=log]')]
                               .map(e => [e.dataset.role, e.getAttribute('aria-live') || e.getAttribute('role')])""", root)
    assert live == [["status", "polite"]], f"the lab should speak through one polite status line, not {live}"
    page.select_option(f"{root} [data-role=layer]", "1")
    page.select_option(f"{root} [data-role=head]", "4")
    r = encoder.run("The bears ate the honey.")
    row = r.head("pattern", 1, 4)[2]                   # the query the lab opens on: "bears", the word that differs
    strongest = f"\u201c{r.tokens[int(row.argmax())]}\u201d (position {int(row.argmax())}"
    said = page.inner_text(f"{root} [data-role=status]")
    assert "head 4" in said and strongest in said, said
    alt = page.get_attribute(f"{root} [data-role=map-0] canvas", "aria-label")
    assert "layer 1, head 4" in alt and "\u201cbears\u201d (position 2)" in alt and strongest in alt, alt
    # the progress bar and the radio group carry visible labels
    labelled = page.evaluate("""(sel) => { const p = document.querySelector(sel + ' [data-role=progress]');
      return [p.labels.length ? p.labels[0].textContent : '', document.querySelector(sel + ' fieldset legend').textContent]; }""", root)
    assert "Downloading the model" in labelled[0] and labelled[1] == "What to run", labelled
    assert lab.errors == [] and lab.external == []


@pytest.mark.parametrize("edit, message", [
    ({"layer": 0, "head": 1, "mode": "mean"}, "mean ablation and patching run in the kernel"),
    ({"layer": 6, "head": 1, "mode": "zero"}, "edit 0: layer 6 is outside 0..5 (or -6..-1 from the end)"),
    ({"layer": 0, "head": 1, "mode": "zero", "source": {}}, 'edit 0: mode "zero" takes no source'),
    ({"layer": 0, "head": 1, "mode": "zero", "position": 3}, "at every position"),
])
def test_the_page_encoder_names_the_edits_it_cannot_make(lab, edit, message):
    err = lab.page.evaluate("""async (edit) => { try { await window.attnlibModel.run('The cat sat.', null, {edits: [edit]});
      return null; } catch (e) { return e.message; } }""", edit)
    assert err is not None and message in err


# ------------------------------------------------- issue 38: long texts, honest baselines, the sweep
def _text_of(n_tokens: int) -> str:
    """Words of the Gettysburg Address (repeated) making a text of exactly ``n_tokens`` tokens
    with [CLS] and [SEP] (or one fewer where the next word takes two pieces)."""
    words, tokenizer = corpus.load_text().split() * 4, encoder.load_encoder(device="cpu")[1]
    lo, hi = 1, len(words)
    while lo < hi:                                           # the longest prefix within n_tokens
        mid = (lo + hi + 1) // 2
        if len(tokenizer(" ".join(words[:mid]))["input_ids"]) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


LONG_509 = _text_of(509)
# Every fillRect and fillText of a canvas is counted and recorded with where it lands on the
# canvas, in CSS pixels (the context's transform applied: the column labels are rotated).
RECORD_PAINT = """(() => { const P = CanvasRenderingContext2D.prototype, text = P.fillText, rect = P.fillRect;
  P.fillText = function (t, x, y) { const m = this.getTransform(), r = window.devicePixelRatio || 1;
    (this.canvas.__painted = this.canvas.__painted || []).push({text: String(t), x: (m.a * x + m.c * y + m.e) / r,
                                                                y: (m.b * x + m.d * y + m.f) / r});
    return text.apply(this, arguments); };
  P.fillRect = function () { this.canvas.__rects = (this.canvas.__rects || 0) + 1; return rect.apply(this, arguments); }; })();"""
WINDOW = """(sel) => { const box = document.querySelector(sel), c = box.querySelector('canvas'), b = box.getBoundingClientRect(),
    r = c.getBoundingClientRect(), g = c._geom;
  return {dpr: window.devicePixelRatio || 1, width: c.width, height: c.height, cssWidth: r.width, cssHeight: r.height,
          client: [box.clientWidth, box.clientHeight], scroll: [box.scrollWidth, box.scrollHeight], at: [box.scrollLeft, box.scrollTop],
          offset: [r.left - b.left - box.clientLeft, r.top - b.top - box.clientTop], rects: c.__rects || 0,
          painted: c.__painted || [], room: g.room, cell: g.cell, T: g.T}; }"""


def _short(token: str) -> str:
    return token if len(token) <= 14 else token[:13] + "\u2026"


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_a_509_token_heatmap_paints_only_its_window_and_keeps_its_labels_in_view(browser, themed, viewport):  # noqa: F811
    """Issue 38 items 1 and 3: at 509 tokens the heatmap was one canvas of 6,000+ px a side, all
    259,081 cells painted in one main-thread task of 0.4-1.2 s, its box scrolled sideways only and
    its labels scrolled away with the cells.  Now the canvas is the box's visible window: a paint
    fills the cells in view (not T^2), the backing store is no larger than the box, the box
    scrolls both ways over a square extent, the row and column labels of the cells in view are
    painted at its edges wherever it is scrolled (sticky), a click picks the row under it, and a
    query picked elsewhere is scrolled into view.  (How long the main thread is busy is measured
    by bench/bench_browser_model.py --long, not asserted here.)"""
    visit = ScreenVisit(browser, themed + "light-column.html", viewport, "light")
    try:
        page = visit.page
        page.evaluate(RECORD_PAINT)
        root = _lab_run(page, LONG_509)
        box = f"{root} [data-role=map-0]"
        tokens = encoder.run(LONG_509).tokens
        w = page.evaluate(WINDOW, box)
        T, room, cell = w["T"], w["room"], w["cell"]
        assert T == len(tokens) == 509
        assert w["width"] <= w["client"][0] * w["dpr"] + 1 and w["height"] <= w["client"][1] * w["dpr"] + 1, \
            f"the canvas is larger than its box: {w['width']}x{w['height']} for a {w['client']} box"
        assert abs(w["cssWidth"] * w["dpr"] - w["width"]) < 1.5 and abs(w["cssHeight"] * w["dpr"] - w["height"]) < 1.5   # not stretched
        assert w["scroll"][0] == w["scroll"][1] >= room + T * cell, f"square cells: the same extent both ways {w['scroll']}"
        assert w["scroll"][1] > w["client"][1] and w["scroll"][0] > w["client"][0], "the box should scroll both ways"
        assert 0 < w["rects"] < T * T / 20, f"{w['rects']} cells painted for a window of the heatmap"
        # scroll the box to the middle: the canvas stays over the box, its labels are the rows and columns in view
        sx, sy = 200 * cell + 5, 300 * cell + 5
        page.evaluate("([sel, x, y]) => { const b = document.querySelector(sel), c = b.querySelector('canvas');"
                      " c.__painted = []; c.__rects = 0; b.scrollTo(x, y); }", [box, sx, sy])
        page.wait_for_function("(sel) => (document.querySelector(sel).querySelector('canvas').__painted || []).length > 0", arg=box)
        page.wait_for_timeout(100)
        w = page.evaluate(WINDOW, box)
        assert w["at"] == [sx, sy], w["at"]
        assert abs(w["offset"][0]) < 1 and abs(w["offset"][1]) < 1, f"the canvas scrolled out of its box: {w['offset']}"
        assert 0 < w["rects"] < T * T / 20
        labels = w["painted"]
        for r in range(301, 305):                                    # row labels at the left edge, beside their rows
            y = room + r * cell + cell / 2 - sy
            assert any(abs(p["y"] - y) < 1 and p["x"] <= room and p["text"] == _short(tokens[r]) for p in labels), (r, tokens[r])
        for c in range(201, 205):                                    # column labels along the top, above their columns
            x = room + c * cell + cell / 2 - sx
            assert any(abs(p["x"] - x) < 1 and p["y"] <= room and p["text"] == _short(tokens[c]) for p in labels), (c, tokens[c])
        inside = [p for p in labels if not (-1 <= p["x"] <= w["cssWidth"] + 1 and -1 <= p["y"] <= w["cssHeight"] + 1)]
        assert not inside, f"labels painted outside the canvas: {inside[:4]}"
        # a click picks the row under it, wherever the box is scrolled
        rect = page.query_selector(f"{box} canvas").bounding_box()
        page.mouse.click(rect["x"] + room + 2, rect["y"] + room + 3.5 * cell)
        assert page.eval_on_selector(f"{root} [data-role=query]", "e => e.value") == str((sy + int(3.5 * cell)) // cell)
        # a query picked with the menu is scrolled into view
        page.select_option(f"{root} [data-role=query]", "40")
        w = page.evaluate(WINDOW, box)
        top = room + 40 * cell - w["at"][1]
        assert room <= top and top + cell <= w["client"][1], f"row 40 is out of view ({top} px; box {w['client']})"
        assert visit.errors == []
    finally:
        visit.close()


SHARE = re.compile(r"previous token: (-?\d+\.\d+) \| this sentence \(T = \d+\); (-?\d+\.\d+) \| (\d+) reference sentences")
#: the baselines table read cell by cell: "row header: value | its column's header; ..."
BASELINE_CELLS = """(sel) => { const t = document.querySelector(sel + ' [data-role=baselines] table');
  const cols = [...t.querySelectorAll('thead th')].map(th => th.textContent);
  return [...t.querySelectorAll('tbody tr')].map(tr => tr.querySelector('th').textContent + ': ' +
    [...tr.querySelectorAll('td')].map((td, i) => td.textContent + ' | ' + cols[i + 1]).join('; ')).join('\\n'); }"""


def _share(weights, tokens, offset):
    """The lab's offset preference, written here from its definition: the mean over ordinary
    (query, key = query + offset) pairs of (A[q, k] - 1/T) / (1 - 1/T)."""
    T = len(tokens)
    ordinary = [t not in ("[CLS]", "[SEP]", "[PAD]") for t in tokens]
    vals = [(float(weights[i][i + offset]) - 1 / T) / (1 - 1 / T) for i in range(T)
            if 0 <= i + offset < T and ordinary[i] and ordinary[i + offset]]
    return sum(vals) / len(vals)


def test_the_reference_offset_preference_is_the_per_sentence_definition():
    """explorables._offset_shares (batched, padding masked) against the definition applied to one
    PyTorch run per reference sentence; and the invariant the readout exists for: a head that
    puts all of every query's weight on the previous token scores 1 at any length, a uniform
    head 0."""
    got = xp._offset_shares([-1, 0, 1])                                # (L, H, 3)
    sums, counts = np.zeros((6, 12, 3)), np.zeros(3)
    for text in evidence.reference_sentences():
        r = encoder.run(text)
        T = len(r.tokens)
        a = r.stacked("pattern").double().numpy()
        ordinary = [t not in ("[CLS]", "[SEP]") for t in r.tokens]
        for k, o in enumerate((-1, 0, 1)):
            for i in range(T):
                if 0 <= i + o < T and ordinary[i] and ordinary[i + o]:
                    sums[:, :, k] += (a[:, :, i, i + o] - 1 / T) / (1 - 1 / T)
                    counts[k] += 1
    np.testing.assert_allclose(got.numpy(), sums / counts, atol=1e-5)
    for T in (13, 44, 509):
        tokens = ["[CLS]"] + ["w"] * (T - 2) + ["[SEP]"]
        prev = torch.zeros(1, 1, T, T)
        prev[0, 0, 0, 0] = 1.0
        for i in range(1, T):
            prev[0, 0, i, i - 1] = 1.0
        s, n = xp._offset_share_sums(prev, tokens, [-1, 1])
        np.testing.assert_allclose((s / n).numpy(), [[[1.0, -1 / (T - 1)]]], rtol=1e-12)
        s, n = xp._offset_share_sums(torch.full((1, 1, T, T), 1 / T, dtype=torch.float64), tokens, [-1])
        np.testing.assert_allclose((s / n).numpy(), [[[0.0]]], atol=1e-12)


def test_the_baselines_readout_does_not_grow_with_the_sentences_length(lab):
    """Issue 38 item 2: the readout gave T x weight, so a head that gives 1.000 to the previous
    token read 13.00x on a 13-token sentence against 43.64x on the reference sentences, and
    more on a longer one.  It now gives the offset preference, (A[q, q+o] - 1/T) / (1 - 1/T)
    averaged over the ordinary queries, for the reader's sentence (the page's own weights) and
    for the reference sentences (each at its own length): about 1.00 for the previous-token
    head here at 13 and at 35 tokens."""
    page = lab.page
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    ref = float(xp._offset_shares([-1])[0, 2, 0])
    seen = []
    for text in (PAIR_12[0], " ".join([PAIR_12[0]] * 3)):
        _lab_run(page, text)
        page.select_option(f"{root} [data-role=layer]", "0")
        page.select_option(f"{root} [data-role=head]", "2")
        said = page.inner_text(f"{root} [data-role=baselines]")
        m = SHARE.search(page.evaluate(BASELINE_CELLS, root))
        assert m, said
        got = page_run(page, text)
        assert float(m.group(1)) == pytest.approx(_share(got["all"][0][0, 2], got["tokens"], -1), abs=0.006), said
        assert float(m.group(2)) == pytest.approx(ref, abs=0.006) and m.group(3) == "18", said
        assert "1/T" in said, said
        seen.append(float(m.group(1)))
    assert seen[0] > 0.95 and abs(seen[0] - seen[1]) < 0.02, seen


# Issue 45 item 2: the lab on a phone.
CLIPPED_FIELDS = """(sel) => [...document.querySelectorAll(sel + ' [data-role^=text-]')].filter(f => f.offsetParent)
  .map(f => ({role: f.dataset.role, tag: f.tagName, scrollW: f.scrollWidth, clientW: f.clientWidth,
              scrollH: f.scrollHeight, clientH: f.clientHeight, right: f.getBoundingClientRect().right,
              page: document.documentElement.clientWidth}))"""
PAIR_LONG = ("The dog chased the ball because it was fast.", "The dog chased the ball because it was bored.")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_minimal_pairs_two_sentences_show_whole_on_a_phone(browser, themed, theme):  # noqa: F811
    """A one-line field showed "The dog chased the ball because" in both A and B at 390 px: the
    word that differs was out of sight.  Each field now shows all of its sentence (no hidden
    text either way), it still runs with Enter, and it grows as the reader types."""
    visit = ScreenVisit(browser, themed + f"{theme}-column.html", "phone", theme)
    try:
        page = visit.page
        root = _lab_run(page, *PAIR_LONG)
        fields = page.evaluate(CLIPPED_FIELDS, root)
        assert [f["role"] for f in fields] == ["text-a", "text-b"], fields
        for f in fields:
            assert f["scrollW"] <= f["clientW"] and f["scrollH"] <= f["clientH"] + 1, f"part of the sentence is hidden: {f}"
            assert f["right"] <= f["page"], f
        shown = [page.input_value(f"{root} [data-role={r}]") for r in ("text-a", "text-b")]
        assert shown == list(PAIR_LONG)
        before = page.evaluate(CLIPPED_FIELDS, root)[0]["clientH"]
        page.fill(f"{root} [data-role=text-a]", " ".join([PAIR_LONG[0]] * 3))
        grown = page.evaluate(CLIPPED_FIELDS, root)[0]
        assert grown["clientH"] > before and grown["scrollH"] <= grown["clientH"] + 1, (before, grown)
        page.fill(f"{root} [data-role=text-a]", "The cat sat on the mat.")   # Enter runs, and adds no line break
        page.evaluate("(sel) => { document.querySelector(sel).textContent = ''; }", f"{root} [data-role=status]")
        page.focus(f"{root} [data-role=text-a]")
        page.keyboard.press("Enter")
        page.wait_for_function("(sel) => document.querySelector(sel).textContent.startsWith('Ran in the browser')",
                               arg=f"{root} [data-role=status]", timeout=60_000)
        assert page.input_value(f"{root} [data-role=text-a]") == "The cat sat on the mat."
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


@pytest.mark.parametrize("texts, query, b_query", [
    (("The cat sat on the mat.", "The idea sat on the mat."), "cat", "idea"),       # a minimal pair: the word that differs
    (PAIR_LONG, "fast", "bored"),
    (("\u201cRun!\u201d she said.", None), "run", None),                           # punctuation first: the first word
    (("The dog chased the ball.", None), "dog", None),                             # not "the"
])
def test_the_readout_opens_on_the_query_a_reader_would_pick(lab, texts, query, b_query):
    """After every run the readout opened on position 1 ("looks most at [CLS] 1.000" for many
    heads).  It opens on the first word that differs in a minimal pair (and its counterpart in B),
    else the first content word."""
    page = lab.page
    root = _lab_run(page, *texts)
    readout = page.inner_text(f"{root} [data-role=readout-0]")
    assert readout.startswith(f"Query \u201c{query}\u201d"), readout
    shown = page.evaluate("(sel) => { const q = document.querySelector(sel); return q.options[q.selectedIndex].text; }",
                          f"{root} [data-role=query]")
    assert shown.endswith(": " + query), shown
    if b_query:
        b = page.inner_text(f"{root} [data-role=readout-1]")
        assert b.startswith(f"Query \u201c{b_query}\u201d") and f"in place of A\u2019s \u201c{query}\u201d" in b, b


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_baselines_are_a_labelled_table_that_fits_a_phone(browser, themed, theme):  # noqa: F811
    """The baselines were one 70-word sentence in which "here" named two numbers.  They are a
    table: a caption that gives the scale, a header cell over each column of numbers, a row
    header for each offset, and it fits the lab's column at 390 px."""
    visit = ScreenVisit(browser, themed + f"{theme}-column.html", "phone", theme)
    try:
        page = visit.page
        root = _lab_run(page, PAIR_12[0])
        page.select_option(f"{root} [data-role=layer]", "0")
        page.select_option(f"{root} [data-role=head]", "2")
        got = page.evaluate("""(sel) => { const b = document.querySelector(sel + ' [data-role=baselines]'),
            t = b.querySelector('table'), lab = document.querySelector(sel);
          if (!t) return null;
          return {caption: t.caption ? t.caption.textContent : '',
                  cols: [...t.querySelectorAll('thead th[scope=col]')].map(th => th.textContent),
                  rows: [...t.querySelectorAll('tbody tr')].map(tr => [tr.querySelector('th[scope=row]').textContent,
                          ...[...tr.querySelectorAll('td')].map(td => td.textContent)]),
                  right: t.getBoundingClientRect().right, labRight: lab.getBoundingClientRect().right,
                  scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth}; }""", root)
        assert got is not None, "the baselines are not a table"
        assert "1/T" in got["caption"] and "layer 0, head 2" in got["caption"], got["caption"]
        assert got["cols"] == ["key", "this sentence (T = 13)", "18 reference sentences"], got["cols"]
        assert [r[0] for r in got["rows"]] == ["previous token", "itself", "next token"], got["rows"]
        assert all(len(r) == 3 and all(re.fullmatch(r"-?\d\.\d\d", x) for x in r[1:]) for r in got["rows"]), got["rows"]
        assert got["right"] <= got["labRight"] and got["scroll"] <= got["client"], got
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


SWEEP_WATCH = """(sel) => { window.__said = []; window.__calls = [];
  new MutationObserver(() => window.__said.push(document.querySelector(sel + ' [data-role=status]').textContent))
    .observe(document.querySelector(sel + ' [data-role=status]'), {childList: true, characterData: true, subtree: true});
  const api = window.attnlibModel, run = api.__run || api.run; api.__run = run;
  api.run = function (a, b, options) {                       /* each call 400 ms slower: a long text's pace */
    if (options && options.batch) window.__calls.push(options.batch.length);
    return run.apply(api, arguments).then((r) => new Promise((ok) => setTimeout(() => ok(r), 400))); }; }"""


def test_the_72_head_sweep_shows_progress_and_cancels_by_keyboard_keeping_what_it_measured(lab):
    """Issue 38 item 3: switching off each of the 72 heads took 134 s on a 509-token text with no
    progress shown and no way to stop.  The sweep now says which head it is on (the progress
    bar and its label; the status line, the lab's live region, says it too), a Cancel button
    (one Tab after the sweep's button; Escape too) stops it and keeps the heads measured so
    far, which the readout reports as such, and the sweep's button then measures only the rest."""
    page = lab.page
    text = "The old keeper fed the bears some honey before the long winter came."
    root = _lab_run(page, text)
    page.evaluate(SWEEP_WATCH, root)
    try:
        page.focus(f"{root} [data-role=ablate]")
        page.keyboard.press("Space")
        page.wait_for_function("(sel) => /head (1[3-9]|[2-9]\\d) of 72/.test(document.querySelector(sel).textContent)",
                               arg=f"{root} [data-role=sweep-progress]", timeout=60_000)
        assert page.is_visible(f"{root} [data-role=cancel]")
        assert page.get_attribute(f"{root} [data-role=sweep-bar]", "aria-valuetext").endswith("of 72")
        page.keyboard.press("Tab")
        assert page.evaluate(ACTIVE)["role"] == "cancel", "Cancel should be one Tab after the sweep's button"
        page.keyboard.press("Enter")
        status = page.inner_text(f"{root} [data-role=status]")
        assert status.startswith("Stopped") and "kept" in status, status
        assert page.is_hidden(f"{root} [data-role=cancel]") and page.is_hidden(f"{root} [data-role=sweep-bar]")
        assert page.evaluate(ACTIVE)["role"] == "ablate", "the focus should go back to the sweep's button"
        measured = int(page.get_attribute(f"{root} [data-role=ablation]", "data-measured"))
        assert 12 <= measured < 72, measured
        page.wait_for_timeout(1200)                                # the run in flight is dropped, not counted
        assert int(page.get_attribute(f"{root} [data-role=ablation]", "data-measured")) == measured
        assert f"{measured} of the 72 heads" in page.inner_text(f"{root} [data-role=ablation]")
        said = page.evaluate("() => window.__said")
        assert any(re.search(r"head \d+ of 72", s) for s in said), said
        page.select_option(f"{root} [data-role=layer]", "0")     # a measured head: the value PyTorch gives
        page.select_option(f"{root} [data-role=head]", "3")
        got = float(page.get_attribute(f"{root} [data-role=ablation]", "data-change"))
        want = float(evidence.layer_ablation(text, 0, mode="zero")[3])
        assert abs(got - want) < 5e-5 + 0.03 * want, (got, want)
        # Escape also stops it; the button goes on from where it stopped
        page.evaluate("() => { window.__calls = []; }")
        page.focus(f"{root} [data-role=ablate]")
        page.keyboard.press("Enter")
        page.wait_for_function(f"() => document.querySelector('{root} [data-role=ablation]').textContent.includes('ranks')",
                               timeout=60_000)
        assert sum(page.evaluate("() => window.__calls")) == 72 - measured, "the sweep should measure only the heads it had not"
        page.select_option(f"{root} [data-role=layer]", "5")
        page.select_option(f"{root} [data-role=head]", "5")
        got = float(page.get_attribute(f"{root} [data-role=ablation]", "data-change"))
        want = float(evidence.layer_ablation(text, 5, mode="zero")[5])
        assert abs(got - want) < 5e-5 + 0.03 * want, (got, want)
        assert page.get_attribute(f"{root} [data-role=ablation]", "data-measured") == "72"
        page.evaluate("() => { window.__calls = []; }")
        _lab_run(page, "The cat sat on the mat.")
        page.focus(f"{root} [data-role=ablate]")
        page.keyboard.press("Enter")
        page.wait_for_function("(sel) => /head \\d+ of 72/.test(document.querySelector(sel).textContent)",
                               arg=f"{root} [data-role=sweep-progress]", timeout=60_000)
        page.keyboard.press("Escape")
        assert page.inner_text(f"{root} [data-role=status]").startswith("Stopped")
        assert lab.errors == []
    finally:
        page.evaluate("() => { const api = window.attnlibModel; if (api.__run) { api.run = api.__run; delete api.__run; } }")


def test_the_lab_opens_on_one_sentence_so_a_readers_first_sentence_runs_alone(browser, site):  # noqa: F811
    """Issue 38 item 5: the lab opened in minimal-pair mode (the chapter's pair), so the first
    sentence a reader typed ran beside the stale default sentence B.  It opens on one sentence;
    the build's pair stays on show until the reader runs, and "a minimal pair" brings sentence B
    back.  In a notebook, where nothing runs in the page, the form shows what the cell ran."""
    visit = Visit(browser, site["url"] + "lab.html")
    page = visit.page
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    try:
        assert page.is_checked(f"{root} [data-role=mode-one]") and page.is_hidden(f"{root} [data-role=text-b]")
        assert page.is_visible(f"{root} [data-role=map-1]"), "the build's minimal pair is still shown"
        page.evaluate("() => window.attnlibModel.load()")
        page.fill(f"{root} [data-role=text-a]", "The cat sat.")
        page.click(f"{root} [data-role=run]")
        page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran')")
        assert page.is_hidden(f"{root} [data-role=map-1]")
        assert "(6 tokens)" in page.inner_text(f"{root} [data-role=map-title-0]")
        page.check(f"{root} [data-role=mode-minimal]")
        assert page.input_value(f"{root} [data-role=text-b]") == corpus.PAIR[1]
    finally:
        visit.close()
    visit = Visit(browser, site["url"] + "notebook.html")
    try:
        assert visit.page.is_checked(".attnlib-xp[data-kind=model] [data-role=mode-minimal]")
    finally:
        visit.close()


@pytest.mark.parametrize("mode, texts, which", [("one", ["word " * 600, ""], "the text has 602"),
                                                ("minimal", ["The cat sat.", "word " * 700], "sentence B has 702"),
                                                ("pair", ["word " * 300, "word " * 300], "the two sentences have 603")])
def test_a_text_over_512_tokens_is_refused_with_what_to_do_on_the_page(lab, mode, texts, which):
    """Issue 38 item 5: past 512 tokens a reader must be told what to do in the page (shorten
    the text, by how much), never the kernel's "pass truncate=True"."""
    page = lab.page
    root = "#" + page.get_attribute(".attnlib-xp[data-kind=model]", "id")
    page.check(f"{root} [data-role=mode-{mode}]")
    page.fill(f"{root} [data-role=text-a]", texts[0])
    if mode != "one":
        page.fill(f"{root} [data-role=text-b]", texts[1])
    page.evaluate("(sel) => { document.querySelector(sel).textContent = ''; }", f"{root} [data-role=status]")
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Could not run')")
    said = page.inner_text(f"{root} [data-role=status]")
    assert which in said and "512 tokens or fewer" in said and "truncate" not in said, said
    page.check(f"{root} [data-role=mode-one]")


@pytest.mark.parametrize("text, n", [("word " * 200, 202), ("word " * 600, 602)])
def test_model_lab_in_a_notebook_says_how_long_a_sentence_it_shows(text, n):
    """In a notebook the lab refused a long sentence with "pass truncate=True" (model_lab takes
    no such argument) or "slice the sequence first"; it says the limit and the length."""
    with pytest.raises(ValueError) as err:
        xp.model_lab(text, ablation=False)
    said = str(err.value)
    assert f"sentence A has {n} tokens" in said and str(xp.MAX_TOKENS) in said, said
    assert "truncate" not in said and "slice" not in said, said
