"""Chapter 7's circuit lab in headless Chromium, with every outside request blocked: the
exported checkpoints run by onnxruntime-web in a Web Worker give the logits, the attention
weights and the per-word loss of :func:`attnlib.transformer.run` (PyTorch) within
``circuit_export.BUILD_TOLERANCE`` on seeded random sequences, intact and with every kind of edit;
the page's patching table equals :func:`attnlib.patching.patch_table`; the lab's controls work on
a reader's own words and refuse bad input with a message, keeping the last result.

The site is assembled here as ``make book`` assembles it (``_ext/page_models.py``): the export
(cached in ``_build/tiny-model/cache``), the worker and the vendored onnxruntime-web, under a
page that carries the lab.  No book build is needed.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import circuit_export, circuit_lab, induction, patching
from attnlib import explorables as xp
from attnlib.exercises import ch07, check
from attnlib.exercises.page import render_html
from attnlib.transformer import TinyTransformer, run

from test_browser import Visit, browser, downloaded_bytes, lab_site, serve  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
TOL = circuit_export.BUILD_TOLERANCE
LAB_EXERCISES = ("copy_wrong", "feeder_matters")




@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    keep = folder / "weights"
    # the lab's two exercises are graded in the page as the book serves them (Pyodide + graders)
    out = lab_site(folder, "tiny",
                   lambda target: circuit_export.write_site_files(target, cache=ROOT / "_build" / "tiny-model" / "cache",
                                                                  keep=keep),
                   xp.circuit_lab().html + "".join(render_html(7, name) for name in LAB_EXERCISES), title="circuit lab")
    return {**out, "keep": keep}


@pytest.fixture(scope="module")
def lab(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "lab.html")
    visit.page.evaluate("() => window.attnlibTiny.load()")
    yield visit
    visit.close()


@pytest.fixture(scope="module")
def models():
    return circuit_lab.lab_models()


RUN = """async ([words, options]) => { const r = await window.attnlibTiny.run(words, options);
  return {tokens: r.tokens, shape: r.shape, logits: Array.from(r.logits), attentions: Array.from(r.attentions),
          loss: Array.from(r.loss)}; }"""


def page_run(page, words, checkpoint, edits=None) -> dict:
    out = page.evaluate(RUN, [words, {"checkpoint": checkpoint, "edits": edits or []}])
    L, H, T, _ = out["shape"]
    out["logits"] = np.array(out["logits"], dtype=np.float32).reshape(T, -1)
    out["attentions"] = np.array(out["attentions"], dtype=np.float32).reshape(L, H, T, T)
    out["loss"] = np.array(out["loss"], dtype=np.float32)
    return out


def random_words(generator, T):
    vocab = induction.vocabulary()
    return [vocab[i] for i in torch.randint(len(vocab), (T,), generator=generator).tolist()]


def test_the_site_files_describe_every_model_and_its_check(site, models):
    info = site["info"]
    assert [m["name"] for m in info["models"]] == list(models)
    assert len(info["models"]) == circuit_lab.N_CHECKPOINTS + 1 and info["models"][-1]["control"]
    assert all(m["check"]["max_logit_diff"] <= TOL and m["check"]["runs"] >= 40 for m in info["models"])
    assert sum(m["bytes"] for m in info["models"]) <= 6e6                     # the issue's download budget
    assert info["vocabulary"] == induction.vocabulary()
    # the weights kept beside the export load with TinyTransformer.load and are the checkpoints
    for name, (model, _, _) in list(models.items())[::5]:
        loaded = TinyTransformer.load(site["keep"] / f"{name}.pt")
        assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_page_runs_equal_pytorch_on_seeded_random_sequences_and_edits(lab, models):
    """Random sequences of random lengths at random checkpoints (a generator seeded here; no
    sequence is written by hand), each with a random edit of every kind."""
    g = torch.Generator().manual_seed(2026)
    names = list(models)
    for trial in range(6):
        name = names[int(torch.randint(len(names), (1,), generator=g))]
        model = models[name][0]
        L, H = model.n_layers, model.n_heads
        T = int(torch.randint(2, 33, (1,), generator=g))
        words, source = random_words(g, T), random_words(g, T)
        ids, src = induction.encode(words)[None], induction.encode(source)[None]
        pick = lambda n: int(torch.randint(n, (1,), generator=g))    # noqa: E731
        l, h, p = pick(L), pick(H), pick(T)
        cases = [
            ([], []),
            ([{"layer": l, "head": h, "mode": "zero"}], [{"layer": l, "head": h, "mode": "zero"}]),
            ([{"layer": l, "head": h, "mode": "mean"}], [{"layer": l, "head": h, "mode": "mean"}]),
            ([{"layer": l, "head": h, "mode": "patch", "source": source, "position": p}],
             [{"layer": l, "head": h, "mode": "patch", "source": run(model, src), "position": p}]),
            ([{"layer": pick(L + 1), "head": None, "mode": "patch", "source": source, "position": p}], None),
        ]
        cases[4] = (cases[4][0], [{**cases[4][0][0], "source": run(model, src)}])
        for page_edits, torch_edits in cases:
            got = page_run(lab.page, words, name, page_edits)
            want = run(model, ids, edits=torch_edits)
            assert got["tokens"] == words
            d_logit = float(np.abs(got["logits"] - want.logits[0].numpy()).max())
            d_weight = float(np.abs(got["attentions"] - want.stacked("pattern")[:, 0].numpy()).max())
            loss = F.cross_entropy(want.logits[0, :-1], ids[0, 1:], reduction="none").numpy()
            d_loss = float(np.abs(got["loss"] - loss).max()) if T > 1 else 0.0
            assert max(d_logit, d_weight, d_loss) <= TOL, (name, T, page_edits, d_logit, d_weight, d_loss)
    assert lab.errors == [] and lab.external == []


PATCH = """async ([a, b, name, edits]) => window.attnlibTiny.patch(a, b, {checkpoint: name, edits: edits})"""


def _match_pair():
    """The chapter's first pair with the match corrupted instead: the last word's earlier occurrence."""
    clean, corrupt = circuit_lab.default_pair()
    p = circuit_lab.copy_target(clean)
    match = list(clean)
    match[p - 1] = corrupt[p]
    return clean, match


OFF = [{"layer": 1, "head": 0, "mode": "zero"}, {"layer": 0, "head": 3, "mode": "mean"}]
PAIRS = {"token": circuit_lab.default_pair, "match": _match_pair}


@pytest.mark.parametrize("kind, edits", [("token", []), ("match", []), ("match", OFF)])
def test_the_page_patching_table_equals_the_kernels(lab, models, kind, edits):
    """attnlibTiny.patch against circuit_lab.pair_tables (PyTorch) on the chapter's pair at the last
    checkpoint, corrupted at the copy target (token) or at the last word's earlier occurrence
    (match), with and without heads switched off: the copy target, both reference metrics, every
    head and every residual position both ways, the normalised scores, the switched-off heads'
    empty cells and the range warning."""
    clean, corrupt = PAIRS[kind]()
    name = list(models)[-2]
    got = lab.page.evaluate(PATCH, [clean, corrupt, name, edits])
    want = circuit_lab.pair_tables(clean, corrupt, name, edits=edits)
    for key in ("position", "target", "match", "copy_problem", "off", "problem", "runs"):
        page_key = {"target_position": "targetPosition", "copy_problem": "copyProblem"}.get(key, key)
        assert got[page_key] == want[key], key
    assert got["targetPosition"] == want["target_position"] and got["copyProblem"] is None
    assert abs(got["clean"] - want["clean"]) <= TOL and abs(got["corrupted"] - want["corrupted"]) <= TOL
    gap = abs(want["clean"] - want["corrupted"])
    worst = {}
    for key in ("denoise", "noise"):
        for part in ("heads", "resid"):
            have, ref = np.array(got[key][part], dtype=float), np.array(want[key][part], dtype=float)
            assert have.shape == ref.shape and (np.isnan(have) == np.isnan(ref)).all(), (key, part)
            worst[key, part] = float(np.nanmax(np.abs(have - ref)))
            assert worst[key, part] <= 10 * TOL, (key, part, worst)
            have_n = np.array(got["normalised"][key][part], dtype=float)
            ref_n = np.array(want["normalised"][key][part], dtype=float)
            assert (np.isnan(have_n) == np.isnan(ref_n)).all() and float(np.nanmax(np.abs(have_n - ref_n))) <= 20 * TOL / gap
    print(kind, edits and "off", {f"{k[0]} {k[1]}": f"{v:.1e}" for k, v in worst.items()},
          f"clean {abs(got['clean'] - want['clean']):.1e}", f"corrupted {abs(got['corrupted'] - want['corrupted']):.1e}")
    # the page's warning is the kernel's sentence on the page's numbers, and warns where the kernel does
    assert got["rangeProblem"] == circuit_lab.range_problem(got["normalised"])
    assert (got["rangeProblem"] is None) == (want["range_problem"] is None)
    if kind == "token" and not edits:                       # the chapter's patching, as patch_table computes it
        model = models[name][0]
        a, b = induction.encode(clean)[None], induction.encode(corrupt)[None]
        pairs = {"query": a.shape[1] - 1, "clean_next": a[:, want["target_position"]]}
        ra, rb = run(model, a), run(model, b)
        for key, target, source in (("denoise", b, ra), ("noise", a, rb)):
            for site in ("z", "resid_pre"):
                ref = patching.patch_table(model, target, source, pairs, site=site, metric=patching.copy_logit).numpy()
                have = np.array(got[key]["heads" if site == "z" else "resid"])
                assert float(np.abs(have - ref).max()) <= 10 * TOL, (key, site)
        den = np.array(got["normalised"]["denoise"]["heads"])
        assert den[-1].max() > 0.3                            # the induction head restores the most on its own
    if kind == "match" and not edits:                         # the previous-token head appears
        den = np.array(got["normalised"]["denoise"]["heads"])
        assert int(np.argmax(den[0])) == int(np.argmax(models[name][2]["previous"][0])) and den[0].max() > 0.5
    if edits:
        assert want["range_problem"] is not None              # this pair with these heads off leaves the range
    assert lab.errors == []


@pytest.mark.parametrize("words", ["we are met we", "we are we are met we", "we are met", "we are met met",
                                   "we met are met met", "we", "that nation , or any nation so conceived"])
def test_the_pages_copy_target_and_its_message_are_the_kernels(lab, words):
    seq = words.split()
    got = lab.page.evaluate("(w) => [window.attnlibTiny.copyTarget(w), window.attnlibTiny.copyProblem(w)]", seq)
    assert got == [circuit_lab.copy_target(seq), circuit_lab.copy_problem(seq)]


def test_the_pages_range_warning_is_the_kernels(lab):
    assert lab.page.evaluate("() => window.attnlibTiny.NORMALISED_RANGE") == list(circuit_lab.NORMALISED_RANGE)
    g = torch.Generator().manual_seed(7)
    for scale in (0.3, 0.6, 1.0, 3.0):
        tables = {key: {"heads": (torch.randn(2, 4, generator=g) * scale + 0.5).tolist(),
                        "resid": (torch.randn(3, 5, generator=g) * scale + 0.5).tolist()} for key in ("denoise", "noise")}
        tables["noise"]["heads"][1][0] = float("nan")                       # a head switched off
        got = lab.page.evaluate("(t) => window.attnlibTiny.rangeProblem(t)", tables)
        assert got == circuit_lab.range_problem(tables), scale


def test_the_page_says_when_there_is_nothing_to_copy_and_runs_nothing(lab):
    words = "we are met on a great battle-field of that war".split()
    bad = list(words)
    bad[3] = "nation"
    got = lab.page.evaluate(PATCH, [words, bad, None, []])
    assert got["copyProblem"] == circuit_lab.copy_problem(words) is not None
    assert got["runs"] == 0 and got["normalised"] is None and got["clean"] is None and got["rangeProblem"] is None


def test_a_patch_from_a_run_with_heads_off_patches_that_run(lab, models):
    """A result of run() with heads switched off, given as a patch's source, patches that run's
    activations (as a kernel Run does), not the intact run's."""
    words = "we are met on a great battle-field".split()
    other = "we are met on a brave battle-field".split()
    name = list(models)[-2]
    model = models[name][0]
    off = [{"layer": 0, "head": 1, "mode": "zero"}]
    got = lab.page.evaluate("""async ([w, o, off]) => {
      const src = await window.attnlibTiny.run(o, {edits: off});
      const r = await window.attnlibTiny.run(w, {edits: [{layer: 1, head: 2, mode: "patch", source: src}]});
      return Array.from(r.logits); }""", [words, other, off])
    source = run(model, induction.encode(other)[None], edits=off)
    want = run(model, induction.encode(words)[None], edits=[{"layer": 1, "head": 2, "mode": "patch", "source": source}])
    assert float(np.abs(np.array(got).reshape(len(words), -1) - want.logits[0].numpy()).max()) <= TOL


def _root(page):
    return "#" + page.get_attribute(".attnlib-xp[data-kind=tiny]", "id")


def _status(page, root):
    return page.inner_text(f"{root} [data-role=status]")


def test_the_lab_runs_a_readers_sequence_steps_ablation_and_patching(browser, site, models):  # noqa: F811
    visit = Visit(browser, site["url"] + "lab.html")
    page = visit.page
    root = _root(page)
    page.click(f"{root} [data-role=load]")
    page.wait_for_function(f"() => document.querySelector('{root}').getAttribute('data-loaded') === '1'", timeout=60_000)
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran')")
    words = "we are met on a great battle-field of that war"
    page.fill(f"{root} [data-role=words]", words)
    page.click(f"{root} [data-role=repeat]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Ran 20 words')")
    readout = page.inner_text(f"{root} [data-role=loss-readout]")
    seq = words.split() * 2
    name = list(models)[-2]
    model = models[name][0]
    ids = induction.encode(seq)
    loss = F.cross_entropy(run(model, ids[None]).logits[0, :-1], ids[1:], reduction="none")
    kinds = induction.natural_repeats(ids[None])["same_next"][0]
    assert f"Words copying predicts ({int(kinds.sum())}): mean {float(loss[kinds].mean()):.2f}" in readout
    # step 0: the untrained model; the readout follows the checkpoint
    page.evaluate("([sel]) => { const e = document.querySelector(sel); e.value = '0'; e.dispatchEvent(new Event('input', {bubbles: true})); }",
                  [f"{root} [data-role=step]"])
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.includes('at step 0')")
    model0 = models["step-0"][0]
    loss0 = F.cross_entropy(run(model0, ids[None]).logits[0, :-1], ids[1:], reduction="none")
    assert f"mean {float(loss0[kinds].mean()):.2f}" in page.inner_text(f"{root} [data-role=loss-readout]")
    # back to the end, switch the induction head off
    page.evaluate("([sel, v]) => { const e = document.querySelector(sel); e.value = v; e.dispatchEvent(new Event('input', {bubbles: true})); }",
                  [f"{root} [data-role=step]", str(circuit_lab.N_CHECKPOINTS - 1)])
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.includes('at step {induction.STEPS}')")
    head = int(np.argmax(models[name][2]["induction"][-1]))
    page.click(f"{root} [data-role='off-1.{head}']")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.includes('Heads off')")
    off = F.cross_entropy(run(model, ids[None], edits=[{"layer": 1, "head": head, "mode": "zero"}]).logits[0, :-1], ids[1:], reduction="none")
    change = float(off[kinds].mean() - loss[kinds].mean())
    assert change > 0.5 and f"moved by +{change:.2f} nats" in page.inner_text(f"{root} [data-role=loss-readout]")
    page.click(f"{root} [data-role='off-1.{head}']")
    # patching: corrupt the word after the last word's earlier occurrence, then the whole table
    page.click(f"{root} [data-role=patch-run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Patched')")
    assert page.query_selector(f"{root} [data-role=table-den-heads] table") is not None
    assert "Denoising" in page.inner_text(f"{root} [data-role=patch-summary]")
    assert visit.errors == [] and visit.external == [] and visit.dialogs == []
    visit.close()


def _wait_status(page, root, js_test):
    page.wait_for_function(f"() => {{ const t = document.querySelector('{root} [data-role=status]').textContent; return {js_test}; }}",
                           timeout=60_000)


def test_the_lab_says_when_nothing_can_be_copied_and_patches_the_match_with_heads_off(browser, site, models):  # noqa: F811
    """The reader's path through the new readout: a sequence with nothing to copy gets the message
    and no table; the match corruption with head 1.0 switched off patches with it off in every run,
    says so, names heads once in words, marks its cells "off", and warns that scores leave
    [-0.5, 1.5]; switching the head back on removes the stale table."""
    visit = Visit(browser, site["url"] + "lab.html")
    page = visit.page
    root = _root(page)
    page.click(f"{root} [data-role=load]")
    page.wait_for_function(f"() => document.querySelector('{root}').getAttribute('data-loaded') === '1'", timeout=60_000)
    _wait_status(page, root, "t.startsWith('Ran')")
    # nothing to copy
    words = "we are met on a great battle-field of that war".split()
    page.fill(f"{root} [data-role=words]", " ".join(words))
    page.click(f"{root} [data-role=run]")
    _wait_status(page, root, "t.startsWith('Ran 10 words')")
    page.select_option(f"{root} [data-role=patch-position]", "3")
    page.select_option(f"{root} [data-role=patch-word]", "nation")
    page.wait_for_selector(f"{root} [data-role=pair-readout][data-copy-problem]")
    problem = circuit_lab.copy_problem(words)
    assert page.inner_text(f"{root} [data-role=pair-readout]").startswith(f"No metric: {problem}.")
    page.click(f"{root} [data-role=patch-run]")
    _wait_status(page, root, "t.startsWith('Not patched')")
    assert page.inner_text(f"{root} [data-role=patch-summary]") == f"No patching table: {problem}."
    assert page.query_selector(f"{root} [data-role=patch-tables] table") is None
    # the match corruption, head 1.0 off
    clean, match = _match_pair()
    p = circuit_lab.copy_target(clean) - 1
    page.fill(f"{root} [data-role=words]", " ".join(clean))
    page.click(f"{root} [data-role=run]")
    _wait_status(page, root, f"t.startsWith('Ran {len(clean)} words')")
    page.click(f"{root} [data-role='off-1.0']")
    _wait_status(page, root, "t.includes('Heads off: 1.0')")
    page.select_option(f"{root} [data-role=patch-position]", str(p))
    page.select_option(f"{root} [data-role=patch-word]", match[p])
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=pair-readout]').textContent.includes('match corruption')")
    name = list(models)[-2]
    want = circuit_lab.pair_tables(clean, match, name, edits=[{"layer": 1, "head": 0, "mode": "zero"}])
    readout = page.inner_text(f"{root} [data-role=pair-readout]")
    assert f"the logit of the copy target \u201c{want['target']}\u201d minus the mean logit" in readout
    assert "Heads switched off in both runs (zero): 1.0." in readout
    page.click(f"{root} [data-role=patch-run]")
    _wait_status(page, root, "t.startsWith('Patched')")
    assert "heads 1.0 off in every run" in _status(page, root)
    summary = page.inner_text(f"{root} [data-role=patch-summary]")
    assert "Heads switched off in every run, the patch sources included (zero): 1.0" in summary
    den = np.array(want["normalised"]["denoise"]["heads"])
    l, h = np.unravel_index(np.nanargmax(den), den.shape)
    assert f"head {l}.{h} (layer {l}, head {h}) alone closes the largest share of the gap, " in summary
    shown = float(summary.split("largest share of the gap, ")[1].split(";")[0])
    assert abs(shown - den[l, h]) <= 0.0051, (shown, den[l, h])
    warning = page.inner_text(f"{root} [data-role=patch-warning]")
    assert want["range_problem"] is not None and warning.startswith("Careful: some normalised scores leave [-0.5, 1.5] (lowest ")
    lows = [float(x) for x in (warning.split("lowest ")[1].split(",")[0], warning.split("highest ")[1].split(")")[0])]
    wants = [float(x) for x in (want["range_problem"].split("lowest ")[1].split(",")[0],
                                want["range_problem"].split("highest ")[1].split(")")[0])]
    assert np.allclose(lows, wants, atol=0.0101), (lows, wants)
    cells = page.eval_on_selector_all(f"{root} [data-role=table-den-heads] tr", "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))")
    assert cells[2][1] == "off" and cells[1][1] != "off"                  # layer 1, head 0; layer 0, head 0
    # switching the head back on removes the table patched with it off
    page.click(f"{root} [data-role='off-1.0']")
    _wait_status(page, root, "t.startsWith('Ran') && !t.includes('Heads off')")
    assert page.query_selector(f"{root} [data-role=patch-summary]") is None
    assert visit.errors == [] and visit.external == [] and visit.dialogs == []
    visit.close()


@pytest.mark.parametrize("text, message", [
    ("we are met on a great battel-field", "did you mean \u201cbattle-field\u201d"),
    ("the " * 40, "at most 32"),
    ("   ", "no words"),
    ("<img src=x onerror=alert(1)> nation", "not in the model's vocabulary"),
])
def test_bad_input_gets_a_message_and_keeps_the_last_result(lab, text, message):
    page = lab.page
    root = _root(page)
    before = page.inner_text(f"{root} [data-role=loss-readout]")
    page.fill(f"{root} [data-role=words]", text)
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.includes('keeps the last run')")
    assert message in _status(page, root)
    assert page.inner_text(f"{root} [data-role=loss-readout]") == before
    assert lab.dialogs == [] and page.query_selector(f"{root} img") is None


def test_in_a_notebook_the_lab_says_to_edit_the_cell_and_offers_no_dead_buttons(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "notebook.html")
    page = visit.page
    root = _root(page)
    assert "edit the cell" in _status(page, root)
    for role in ("load", "run", "repeat", "random", "patch-run"):
        assert not page.is_visible(f"{root} [data-role={role}]"), role
    assert visit.errors == []
    visit.close()


@pytest.mark.parametrize("name, text", [
    ("copy_wrong", "we are met on a great battle-field of that war . we are met on a great battle-field of that nation"),
    ("copy_wrong", "we are met on a great battle-field we are met on a great battle-field"),
    ("feeder_matters", "we are met on a great battle-field we are met on a great battle-field"),
    ("feeder_matters", "we are met on a great battel-field"),
    ("copy_wrong", "fourscore and seven years ago"),
])
def test_lab_exercises_give_the_kernels_verdict_on_the_pages_model(lab, name, text):
    """The reader types words into the exercise and presses Check; the page's models read them
    and the course's checker (Pyodide) grades: the same verdict and message as the kernel's
    PyTorch reading (circuit_lab.read) graded in Python."""
    page = lab.page
    root = f'[data-exercise="7:{name}"]'
    page.fill(f"{root} textarea", text)
    page.click(f"{root} button.attn-ex-check")
    page.wait_for_selector(f"{root} .attn-ex-correct, {root} .attn-ex-wrong", timeout=180_000)
    shown = page.inner_text(f"{root} .attn-ex-feedback")
    data = ch07.lab_data()
    expected = check(7, name, circuit_lab.read([text], data["checkpoint"], data["variants"]), data)
    if "error" in circuit_lab.read([text], data["checkpoint"], data["variants"]):
        assert "did you mean \u201c" in shown        # the refusal is one definition: the lab's suggestions, word for word
    assert shown == expected.text, (shown, expected.text)
    assert lab.errors == [] and lab.external == []


# ------------------------------------------------------------------ the lab as a reader meets it
def _themed_page(site, theme):
    from test_page_explorables import theme_css
    folder = site["folder"]
    shutil.copy(theme_css(), folder / "_static" / "theme.css")
    shutil.copy(ROOT / "_static" / "course-layout.css", folder / "_static" / "course-layout.css")   # the book's own layout
    html = (folder / "chapters" / "lab.html").read_text(encoding="utf-8")
    html = html.replace("<title>", '<meta name="viewport" content="width=device-width, initial-scale=1">'
                        '<link rel="stylesheet" href="../_static/theme.css">'
                        '<link rel="stylesheet" href="../_static/course-layout.css"><title>')
    html = html.replace('<html lang="en"', f'<html lang="en" data-theme="{theme}"').replace(
        "<main>", '<main class="bd-article" style="max-width: 740px; margin: 0 auto; padding: 0 1.5rem">')
    (folder / "chapters" / f"{theme}-column.html").write_text(html, encoding="utf-8")
    return site["url"] + f"{theme}-column.html"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_on_a_phone_the_heatmap_keeps_square_cells_scrolls_and_a_tap_picks_its_row(browser, site, theme):  # noqa: F811
    """At 390 px in the theme's column: the heatmap is drawn at its own size (never squeezed by
    the theme's max-width), its region scrolls sideways, the page does not, and a tap on a row
    selects that row's word."""
    visit = Visit(browser, _themed_page(site, theme))
    page = visit.page
    page.set_viewport_size({"width": 390, "height": 844})
    root = _root(page)
    canvas = f"{root} [data-role=map] canvas"
    drawn, shown = page.evaluate(f"() => {{ const c = document.querySelector('{canvas}');"
                                 "return [parseFloat(c.style.width), c.getBoundingClientRect().width]; }")
    assert abs(drawn - shown) < 0.5, (drawn, shown)
    region = page.evaluate(f"() => {{ const r = document.querySelector('{root} [data-role=map]');"
                           "return [r.scrollWidth, r.clientWidth]; }")
    assert region[0] > region[1]                                           # 31 words: the region scrolls
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    # tap the middle of row 17 (the geometry the view drew: label room, then square cells)
    g = page.evaluate(f"() => document.querySelector('{canvas}')._geom")
    page.evaluate(f"() => window.scrollTo(0, document.querySelector('{canvas}').getBoundingClientRect().top + window.scrollY - 40)")
    box = page.query_selector(canvas).bounding_box()
    page.mouse.click(box["x"] + g["room"] + 2, box["y"] + g["room"] + 17.5 * g["cell"])
    words = circuit_lab.default_pair()[0]
    assert f"From \u201c{words[17]}\u201d (word 17)" in page.inner_text(f"{root} [data-role=head-readout]")
    assert visit.errors == []
    visit.close()


def test_a_damaged_model_file_is_refused_and_old_caches_are_deleted(browser, site, tmp_path):  # noqa: F811
    """The worker checks every file against the SHA-256 in tiny.json (a stale or damaged copy is
    refused with a message naming it), and a load deletes the caches of earlier builds."""
    folder = tmp_path / "damaged"
    shutil.copytree(site["folder"], folder, symlinks=True)
    victim = folder / "_static" / "tiny" / "step-1200.onnx"
    data = bytearray(victim.read_bytes())
    data[-100] ^= 0xFF
    victim.write_bytes(bytes(data))
    visit = Visit(browser, serve(str(folder)) + "chapters/lab.html")
    page = visit.page
    error = page.evaluate("""async () => { await caches.open('attnlib-tiny-from-an-old-build');
      try { await window.attnlibTiny.load(); return null; } catch (e) { return e.message; } }""")
    assert error is not None and "step-1200.onnx arrived damaged or out of date" in error
    assert "attnlib-tiny-from-an-old-build" not in page.evaluate("() => caches.keys()")
    visit.close()
    # the intact site loads, and its cache is named by the digest of every model's SHA-256
    visit = Visit(browser, site["url"] + "lab.html")
    visit.page.evaluate("() => window.attnlibTiny.load()")
    names = visit.page.evaluate("() => caches.keys()")
    assert f"attnlib-tiny-{site['info']['digest'][:16]}" in names
    visit.close()


def test_a_patch_source_given_as_text_or_a_result_works_and_a_bad_one_is_named(lab):
    words = "we are met on a great battle-field".split()
    other = "we are met on a great battle-field".replace("great", "brave")
    got = lab.page.evaluate("""async ([w, o]) => {
      const a = await window.attnlibTiny.run(w, {edits: [{layer: 0, head: 1, mode: "patch", source: o}]});
      const src = await window.attnlibTiny.run(o);
      const b = await window.attnlibTiny.run(w, {edits: [{layer: 0, head: 1, mode: "patch", source: src}]});
      let err = null;
      try { await window.attnlibTiny.run(w, {edits: [{layer: 0, head: 1, mode: "patch", source: {}}]}); } catch (e) { err = e.message; }
      return [Array.from(a.logits).slice(0, 5), Array.from(b.logits).slice(0, 5), err]; }""", [words, other])
    assert got[0] == got[1]
    assert got[2] is not None and "the run to patch from" in got[2]


@pytest.mark.parametrize("width, theme", [(1280, "light"), (390, "dark")])
def test_axe_finds_nothing_in_the_loaded_lab_with_its_tables(browser, site, width, theme):  # noqa: F811
    """axe-core on the lab after a reader has loaded it, switched a head off, patched, opened the
    vocabulary and typed a word it refuses (the book-wide axe test sees only its first view): no
    violation at all."""
    from axe_playwright_python.sync_playwright import Axe
    from test_page_a11y import AXE_OPTIONS
    visit = Visit(browser, _themed_page(site, theme))
    page = visit.page
    page.set_viewport_size({"width": width, "height": 900})
    root = _root(page)
    page.click(f"{root} [data-role=load]")
    page.wait_for_function(f"() => document.querySelector('{root}').getAttribute('data-loaded') === '1'", timeout=60_000)
    page.click(f"{root} [data-role='off-1.0']")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.includes('Heads off')")
    page.click(f"{root} [data-role=patch-run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=status]').textContent.startsWith('Patched')")
    page.click(f"{root} [data-role=vocab] summary")                    # the vocabulary open, and an error shown
    page.fill(f"{root} [data-role=words]", "we are natoin")
    page.click(f"{root} [data-role=run]")
    page.wait_for_function(f"() => document.querySelector('{root} [data-role=words]').getAttribute('aria-invalid') === 'true'")
    violations = Axe().run(page, context=root, options=AXE_OPTIONS).response["violations"]
    assert violations == [], [(v["id"], v["impact"], v["nodes"][0]["target"]) for v in violations]
    visit.close()


def test_the_load_button_states_what_first_use_downloads(browser, site):  # noqa: F811
    visit = Visit(browser, site["url"] + "lab.html")
    label = visit.page.inner_text(f"{_root(visit.page)} [data-role=load]")
    stated = int(visit.page.get_attribute('meta[name="attnlib-tiny-bytes"]', "content"))
    got = downloaded_bytes(visit.context, visit.page, "() => window.attnlibTiny.load()")
    assert abs(got - stated) <= 0.005 * stated, (got, stated)
    assert f"({stated / 1e6:.1f} MB, once)" in label and stated > 14e6        # the models and the runtime
    visit.close()


# ------------------------------------------------- issue 47: the patching tolerance, the same on the page
@pytest.mark.parametrize("clean, corrupted", [(2.0, 2.0), (0.3 + 1e-12, 0.3), (1.0, 1.0 - 0.049), (1.0, 0.95),
                                              (1.0, 0.9), (-3.2, 1.5), (0.02, -0.02)])
def test_the_page_refuses_to_normalise_where_the_kernel_does(lab, site, clean, corrupted):
    """attnlibTiny.gapProblem (what the patching readout shows instead of normalised scores, which
    become NaN) says what patching.gap_problem says, word for word, with tiny.json's tolerance."""
    assert site["info"]["min_gap"] == patching.MIN_GAP
    got = lab.page.evaluate("([c, x, g]) => window.attnlibTiny.gapProblem(c, x, g)", [clean, corrupted, site["info"]["min_gap"]])
    assert got == patching.gap_problem(clean, corrupted)
    if got is not None:
        with pytest.raises(ValueError, match="divide by noise"):
            patching.normalised(0.5, clean, corrupted)


# ------------------------------------------------- issue 45 item 3: the lab as a reader meets it (UI)
def test_the_pages_refusal_of_an_unknown_word_is_the_kernels_word_for_word(lab):
    """attnlibTiny.unknownWord (difflib's get_close_matches ported) says what ch07.unknown_word
    says, on misspellings made by a seeded generator from the vocabulary (one edit each) and on
    words with no suggestion or longer than the message quotes."""
    vocab = induction.vocabulary()
    g = torch.Generator().manual_seed(45)
    letters = "abcdefghijklmnopqrstuvwxyz-"
    words = ["fourscore", "gettysburg", "x" * 60, "battel-field", "\u00e9t\u00e9"]
    for i in torch.randint(len(vocab), (80,), generator=g).tolist():
        w, k = vocab[i], int(torch.randint(4, (1,), generator=g))
        at = int(torch.randint(len(w) + 1, (1,), generator=g))
        c = letters[int(torch.randint(len(letters), (1,), generator=g))]
        w = [w[:at] + c + w[at:], w[:at] + w[at + 1:], w[:at] + c + w[at + 1:], w[:at][::-1] + w[at:]][k]
        if w and w not in vocab:
            words.append(w)
    got = lab.page.evaluate("([ws, v]) => ws.map(w => window.attnlibTiny.unknownWord(w, v))", [words, vocab])
    want = [ch07.unknown_word(w, vocab) for w in words]
    assert got == want
    assert sum("did you mean" in m for m in want) > 40 and sum(" or " in m for m in want) > 5


def _press_until(page, target_js, limit=40):
    """Tab until document.activeElement satisfies target_js (the keyboard path a reader takes)."""
    for _ in range(limit):
        if page.evaluate(f"() => {{ const a = document.activeElement; return !!({target_js}); }}"):
            return True
        page.keyboard.press("Tab")
    return False


def test_by_keyboard_load_keeps_focus_in_the_lab_the_vocabulary_inserts_and_errors_mark_the_field(browser, site):  # noqa: F811
    """Keyboard only: after Load, focus is in the lab (the status line) and the next Tab goes on
    to Words; the vocabulary opens, filters and inserts a word at the caret (Enter on a word, or
    in Find); a refused word is an error (\"Error:\", aria-invalid, described by the message),
    cleared when the field is fixed; the layer menu lists only the chosen model's layers; the head
    readout names a head as layer.head."""
    visit = Visit(browser, site["url"] + "lab.html")
    page = visit.page
    root = _root(page)
    words = page.locator(f"{root} [data-role=words]")
    assert _press_until(page, "a.getAttribute('data-role') === 'load'")
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => document.querySelector('{root}').getAttribute('data-loaded') === '1'", timeout=60_000)
    _wait_status(page, root, "t.startsWith('Ran')")
    assert page.evaluate(f"() => document.activeElement === document.querySelector('{root} [data-role=status]')")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.getAttribute('data-role')") == "words"
    # the head readout names the head as layer.head
    head = page.inner_text(f"{root} [data-role=head-readout]")
    l, h = head.split()[1].split(".")
    assert head.startswith(f"Head {l}.{h} (layer {l}, head {h}; step ")
    # the vocabulary: open it, find, insert at the caret
    vocab = induction.vocabulary()
    assert page.locator(f"{root} [data-role=vocab-list] button").count() == len(vocab)
    assert not page.is_visible(f"{root} [data-role=vocab-list]")
    words.fill("we are met on a great")
    page.evaluate("([sel]) => document.querySelector(sel).setSelectionRange(6, 6)", [f"{root} [data-role=words]"])
    assert _press_until(page, "a.tagName === 'SUMMARY'")
    page.keyboard.press("Enter")
    assert page.is_visible(f"{root} [data-role=vocab-list]")
    page.keyboard.press("Tab")
    page.keyboard.type("bat")
    match = [w for w in vocab if "bat" in w]
    assert page.inner_text(f"{root} [data-role=vocab-count]").startswith(f"{len(match)} of {len(vocab)} match")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.getAttribute('data-word')") == match[0]
    page.keyboard.press("Enter")
    assert words.input_value() == f"we are {match[0]} met on a great"
    assert f"Inserted \u201c{match[0]}\u201d" in _status(page, root)
    page.keyboard.press("Shift+Tab")                       # back to Find: Enter there inserts the first match
    page.keyboard.press("Control+a")
    page.keyboard.type("nati")
    page.keyboard.press("Enter")
    assert words.input_value() == f"we are {match[0]} nation met on a great"
    assert page.evaluate(f"() => document.querySelector('{root}').getAttribute('data-loaded')") == "1"
    # an error marks the field and says so; fixing the field clears it
    words.fill("we are natoin")
    page.click(f"{root} [data-role=run]")
    _wait_status(page, root, "t.includes('keeps the last run')")
    status = page.locator(f"{root} [data-role=status]")
    assert _status(page, root).startswith("Error: " + ch07.unknown_word("natoin", vocab))
    assert "xp-error" in status.get_attribute("class")
    assert words.get_attribute("aria-invalid") == "true"
    assert status.get_attribute("id") in words.get_attribute("aria-describedby").split()
    words.fill("we are nation")
    assert words.get_attribute("aria-invalid") is None
    assert status.get_attribute("id") not in words.get_attribute("aria-describedby").split()
    assert "xp-error" not in status.get_attribute("class")
    # the layer menu follows the model: the control has one layer
    options = f"() => Array.from(document.querySelectorAll('{root} [data-role=layer] option')).map(o => o.value)"
    assert page.evaluate(options) == ["0", "1"]
    page.check(f"{root} [data-role=control]")
    _wait_status(page, root, "t.includes('one-layer control')")
    assert page.evaluate(options) == ["0"]
    assert page.inner_text(f"{root} [data-role=head-readout]").startswith("Head 0.")
    page.uncheck(f"{root} [data-role=control]")
    _wait_status(page, root, "t.includes('at step')")
    assert page.evaluate(options) == ["0", "1"]
    assert visit.errors == [] and visit.external == [] and visit.dialogs == []
    visit.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_on_a_phone_the_tables_titles_wrap_and_the_changed_word_is_marked_and_in_view(browser, site, theme):  # noqa: F811
    """At 390 px: every patching table's title wraps inside the column; in the residual-stream
    tables the changed word's column is marked (\u25c6, a frame) and scrolled into view inside its
    own region; the open vocabulary fits; the error text has 4.5:1 contrast or more."""
    visit = Visit(browser, _themed_page(site, theme))
    page = visit.page
    page.set_viewport_size({"width": 390, "height": 844})
    root = _root(page)
    page.click(f"{root} [data-role=load]")
    page.wait_for_function(f"() => document.querySelector('{root}').getAttribute('data-loaded') === '1'", timeout=60_000)
    _wait_status(page, root, "t.startsWith('Ran')")
    page.click(f"{root} [data-role=patch-run]")
    _wait_status(page, root, "t.startsWith('Patched')")
    clean, corrupt = circuit_lab.default_pair()
    p = circuit_lab.corrupted_position(induction.encode(clean), induction.encode(corrupt))
    titles = page.evaluate(f"""() => Array.from(document.querySelectorAll('{root} .xp-table-title')).map(t => {{
        const r = t.getBoundingClientRect(); return [t.scrollWidth <= t.clientWidth, r.left >= 0, r.right <= 390]; }})""")
    assert len(titles) == 4 and all(all(t) for t in titles), titles
    for role in ("table-den-resid", "table-noi-resid"):
        got = page.evaluate(f"""() => {{ const w = document.querySelector('{root} [data-role={role}]'),
            th = w.querySelector('th[data-changed]'), a = w.getBoundingClientRect(), b = th.getBoundingClientRect();
            return [w.scrollWidth > w.clientWidth, w.scrollLeft, b.left >= a.left, b.right <= a.right, th.textContent,
                    Array.from(th.parentNode.cells).indexOf(th) - 1,
                    getComputedStyle(th).borderLeftStyle, document.getElementById(w.getAttribute('aria-labelledby')).textContent]; }}""")
        assert got[0] and got[1] > 0 and got[2] and got[3], got               # scrolled, and the column in view
        assert got[4].startswith("\u25c6 ") and got[5] == p and got[6] == "solid", got
        assert f"\u25c6 marks word {p}, \u201c{clean[p]}\u201d, the word the corruption changed" in got[7]
    page.click(f"{root} [data-role=vocab] summary")
    assert page.is_visible(f"{root} [data-role=vocab-list]")
    page.fill(f"{root} [data-role=words]", "we are natoin")
    page.click(f"{root} [data-role=run]")
    _wait_status(page, root, "t.includes('keeps the last run')")
    ratio = page.evaluate(f"""() => {{
      const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number).map(c => {{ c /= 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; }});
      const lum = s => {{ const [r, g, b] = rgb(s); return 0.2126 * r + 0.7152 * g + 0.0722 * b; }};
      const st = document.querySelector('{root} [data-role=status]');
      let bg = null;
      for (let e = st; e && !bg; e = e.parentElement) {{ const c = getComputedStyle(e).backgroundColor; if (!/rgba\\(.*, 0\\)$/.test(c) && c !== 'transparent') bg = c; }}
      const a = lum(getComputedStyle(st).color), b = lum(bg || 'rgb(255,255,255)');
      return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); }}""")
    assert ratio >= 4.5, ratio
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    assert visit.errors == []
    visit.close()
