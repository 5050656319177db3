"""Chapter 10's language model in headless Chromium, every outside request blocked: the page's
tokenizer gives the kernel's token ids, the page's runs (onnxruntime-web, one block at a time,
the file's 4-bit weights) give the logits and attention weights of
:func:`attnlib.language_model.run` within ``lm_export.BUILD_TOLERANCE``, intact and with every
kind of edit, its patching sweep equals :func:`attnlib.language_model.patch_sweep`, Cancel stops
a sweep, and bad input gets a message with the last result kept.

The site is assembled here as ``make book`` assembles it (``_ext/page_models.py``): the export
(cached in ``_build/lm-model/cache``), the worker and the vendored onnxruntime-web, under a page
that carries the lab.  No book build is needed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnlib import explorables as xp
from attnlib import language_model as lm
from attnlib import lm_export
from attnlib.exercises import check
from attnlib.exercises.page import render_html

from test_browser import Visit, browser, lab_site  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
TOL = lm_export.BUILD_TOLERANCE
PAIR = lm.ioi_pair("Mary", "John", place="store", thing="drink")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return lab_site(tmp_path_factory.mktemp("lm_site"), "lm",
                    lambda target: lm_export.write_site_files(target, cache=ROOT / "_build" / "lm-model" / "cache"),
                    xp.lm_lab().html + render_html(10, "own_pair"), title="language model lab")


@pytest.fixture(scope="module")
def lab(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "lab.html")
    visit.page.evaluate("() => window.attnlibLM.load()")
    yield visit
    visit.close()


@pytest.fixture(scope="module")
def model():
    return lm.load()


def test_the_site_files_describe_the_model_and_its_check(site):
    info = site["info"]
    assert list(info["files"])[:2] == ["block_00.onnx", "block_01.onnx"] and len(info["files"]) == 33
    assert info["check"]["max_logit_diff"] <= TOL and info["check"]["max_metric_diff"] <= TOL
    assert info["bytes"] == sum(f["bytes"] for f in info["files"].values())
    assert site["size"] > info["bytes"]                                # the runtime is counted too
    assert len(info["means"]) == 30 * 9 * 64 and len(info["inv_freq"]) == 32


TOKENIZE = "async (texts) => { const out = []; for (const t of texts) out.push((await window.attnlibLM.tokenize(t)).ids); return out; }"


def test_the_page_tokenizer_gives_the_kernels_ids(lab):
    texts = [PAIR["clean"], "The cat sat on the mat because it was warm.", "naïve café, 日本語 and 👩‍💻 emoji",
             "it's 3.14159; they'll  say\n\tno", "<|endoftext|>text<|im_start|>", "  leading and trailing  "]
    got = lab.page.evaluate(TOKENIZE, texts)
    assert got == [lm.tokenizer().encode(t) for t in texts]
    assert lab.errors == [] and lab.external == []


RUN = """async ([text, edits]) => { const r = await window.attnlibLM.run(text, {edits});
  return {tokens: r.tokens, shape: r.shape, logits: Array.from(r.logits.subarray(r.logits.length - 49152)),
          attentions: Array.from(r.attentions)}; }"""


def test_page_runs_equal_the_kernels_with_every_kind_of_edit(lab, model):
    clean, corrupted = PAIR["clean"], PAIR["corrupted"]
    source = lm.run(model, lm.encode(corrupted))
    cases = [
        ([], []),
        ([{"layer": 23, "head": 3, "mode": "zero"}], [{"layer": 23, "head": 3, "mode": "zero"}]),
        ([{"layer": -1, "head": 4, "mode": "mean", "position": -1}], [{"layer": -1, "head": 4, "mode": "mean", "position": -1}]),
        ([{"layer": 20, "head": 0, "mode": "patch", "source": corrupted}],
         [{"layer": 20, "head": 0, "mode": "patch", "source": source}]),
        ([{"layer": 12, "head": None, "mode": "patch", "source": corrupted, "position": 9}],
         [{"layer": 12, "head": None, "mode": "patch", "source": source, "position": 9}]),
    ]
    tokens = lm.encode(clean)
    for page_edits, torch_edits in cases:
        got = lab.page.evaluate(RUN, [clean, page_edits])
        want = lm.run(model, tokens, edits=torch_edits)
        L, H, T, _ = got["shape"]
        assert (L, H, T) == (30, 9, tokens.numel())
        d_logit = float(np.abs(np.array(got["logits"]) - want.logits[0, -1].numpy()).max())
        d_weight = float(np.abs(np.array(got["attentions"]).reshape(L, H, T, T) - want.stacked("pattern")[:, 0].numpy()).max())
        assert max(d_logit, d_weight) <= TOL, (page_edits, d_logit, d_weight)
    assert lab.errors == [] and lab.external == []


PATCH = """async ([a, b, answers, layers]) => { const t = await window.attnlibLM.patch(a, b, {answers, layers});
  return {position: t.position, clean: t.clean, corrupted: t.corrupted, denoise: t.denoise, noise: t.noise,
          normalised: t.normalised, runs: t.runs}; }"""


def test_the_page_patching_sweep_equals_patch_sweep(lab, model):
    """Denoising and noising of every head of three layers and of the stream entering them at
    every position, against the kernel's full runs (attnlib.language_model.patch_sweep)."""
    layers = [0, 20, 23, 30]
    got = lab.page.evaluate(PATCH, [PAIR["clean"], PAIR["corrupted"], PAIR["answers"], layers])
    want = lm.patch_sweep(model, PAIR["clean"], PAIR["corrupted"], PAIR["answers"], layers=layers)
    assert got["position"] == want["position"] == 9
    assert abs(got["clean"] - want["clean"]) <= TOL and abs(got["corrupted"] - want["corrupted"]) <= TOL
    for direction in ("denoise", "noise"):
        for kind in ("heads", "resid"):
            have, ref = np.array(got[direction][kind]), want[direction][kind].numpy()
            assert have.shape == ref.shape and float(np.abs(have - ref).max()) <= TOL, (direction, kind)
            norm = np.array(got["normalised"][direction][kind])
            assert float(np.abs(norm - want["normalised"][direction][kind].numpy()).max()) <= TOL
    # the strongest head of chapter 10 restores most of the gap in the page too
    assert np.array(got["normalised"]["denoise"]["heads"])[2, 3] > 0.4
    assert lab.errors == [] and lab.external == []


def test_bad_input_is_refused_with_the_kernels_words(lab):
    def refusal(script, args):
        return lab.page.evaluate(f"async (a) => {{ try {{ await {script}; return null; }} catch (e) {{ return e.message; }} }}", args)

    long = " ".join(["word"] * 80)
    assert "the page's model reads at most 64" in refusal("window.attnlibLM.run(a)", long)
    assert "is empty" in refusal("window.attnlibLM.run(a)", "   ")
    assert "must be text" in refusal("window.attnlibLM.run(a)", 7)
    msg = refusal("window.attnlibLM.patch(a[0], a[1], {answers: a[2]})",
                  [PAIR["clean"], "When Mary and John went to the big store, John gave a drink to", PAIR["answers"]])
    assert msg.startswith("the clean and corrupted prompts must have the same number of tokens: 14 and 15")
    msg = refusal("window.attnlibLM.patch(a[0], a[1], {answers: a[2]})", [PAIR["clean"], PAIR["corrupted"], [" Mary", " Johnathan Smithers"]])
    with pytest.raises(ValueError) as kernel:
        lm.answer_token(" Johnathan Smithers")
    assert msg == str(kernel.value)
    assert "exactly one token" in refusal("window.attnlibLM.patch(a[0], a[0], {answers: a[1]})", [PAIR["clean"], PAIR["answers"]])
    assert "must be a list" in refusal("window.attnlibLM.run(a, {edits: {layer: 1}})", PAIR["clean"])
    msg = refusal("window.attnlibLM.run(a, {edits: [{layer: 40, head: 0, mode: 'zero'}]})", PAIR["clean"])
    assert "layer" in msg and "40" in msg
    assert lab.errors == [] and lab.dialogs == []


def test_cancel_stops_a_sweep(lab):
    msg = lab.page.evaluate("""async ([a, b, answers]) => {
        const run = window.attnlibLM.patch(a, b, {answers});
        await new Promise(r => setTimeout(r, 1500));
        await window.attnlibLM.cancel();
        try { await run; return "finished"; } catch (e) { return e.message; } }""",
                            [PAIR["clean"], PAIR["corrupted"], PAIR["answers"]])
    assert msg == "cancelled"
    # and the model still answers afterwards
    assert lab.page.evaluate(TOKENIZE, [PAIR["clean"]]) == [lm.tokenizer().encode(PAIR["clean"])]


def _root(page):
    return "#" + page.get_attribute(".attnlib-xp[data-kind=lm]", "id")


def test_the_lab_loads_runs_switches_a_head_off_and_keeps_the_last_result(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "lab.html")
    page = visit.page
    root = _root(page)
    assert f"({site['size'] / 1e6:.0f} MB, once)" in page.inner_text(f"{root} [data-role=load]")
    page.click(f"{root} [data-role=load]")
    page.wait_for_function(f"() => document.querySelector('{root}').getAttribute('data-loaded') === '1'", timeout=120_000)
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran 14 tokens')",
                           timeout=60_000)
    assert page.inner_text(f"{root} [data-role=top]").startswith("Next token: \u201c Mary\u201d")
    page.select_option(f"#{root[1:]}-layer", "23")
    page.select_option(f"#{root[1:]}-head", "3")
    assert "Head 23.3" in page.inner_text(f"{root} [data-role=head-readout]")
    page.check(f"#{root[1:]}-off")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=top]').textContent.includes('heads off: 23.3')",
                           timeout=60_000)
    before = page.inner_text(f"{root} [data-role=top]")
    page.fill(f"{root} [data-role=prompt]", " ".join(["word"] * 80))
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.includes('at most 64')",
                           timeout=60_000)
    assert page.inner_text(f"{root} [data-role=top]") == before and "The last result is kept" in page.inner_text(f"{root} [data-role=status]")
    assert visit.errors == [] and visit.external == [] and visit.dialogs == []
    visit.close()


@pytest.mark.parametrize("clean, corrupted", [
    ("When Anna and Tom went to the park, Tom gave a book to", "When Anna and Tom went to the park, Anna gave a book to"),
    ("Mary likes tea and John likes", "Mary likes tea and Mary likes"),
    ("When Anna and Tom went to the park, Tom gave a book to", "When Anna and Tom went to the big park, Anna gave a book to"),
])
def test_the_own_pair_exercise_gives_the_kernels_verdict_on_the_pages_model(lab, clean, corrupted):
    """The reader types a pair and presses Check; the page's model patches it and the course's
    checker (Pyodide) grades: the same verdict and message as the kernel's reading
    (language_model.pair_reading) graded in Python."""
    page = lab.page
    root = '[data-exercise="10:own_pair"]'
    boxes = page.query_selector_all(f"{root} textarea")
    boxes[0].fill(clean)
    boxes[1].fill(corrupted)
    page.click(f"{root} button.attn-ex-check")
    page.wait_for_selector(f"{root} .attn-ex-correct, {root} .attn-ex-wrong", timeout=180_000)
    shown = page.inner_text(f"{root} .attn-ex-feedback")
    expected = check(10, "own_pair", lm.pair_reading(clean, corrupted))
    assert shown == expected.text, (shown, expected.text)
    assert lab.errors == [] and lab.external == []
