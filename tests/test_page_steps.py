"""Issue 26's explorables in a browser, on standalone pages (no book build): the step-through of
one query-key computation (chapters 2 and 3), the online-softmax stepper (chapter 11), chapter 5's
cell-by-cell mask grid, the layer-and-head menus of chapters 4 and 9, and the hover views'
accessible names.

Each figure is built from real data: the running sentence (or chapter 11's two sentences)
through the pretrained encoder (:func:`attnlib.encoder.run`).  Checked here: the JavaScript's
arithmetic equals PyTorch's / attnlib's on the embedded numbers (float64, to 1e-12) and the
model's own float32 weights; the keyboard operates every control (Tab to it, keys to use it);
every control's accessible name contains its visible text and tokens are announced as words;
every figure fits a 390 px and a 1280 px column, light and dark, with text >= 9.5 px and a
contrast of at least 4.5:1 (the checks of tests/test_page_explorables.py).
"""
from __future__ import annotations

import json
import math
import re
import shutil

import pytest
import torch

import attnlib
from attnlib import corpus
from attnlib import explorables as xp

from test_browser import Visit, browser, explorer_page, figures, real, respond, serve  # noqa: F401  (fixtures)
from test_page_explorables import (CONTRASTS, FIT, MIN_CONTRAST, MIN_TEXT_PX, PAGE_SCROLL, SETTINGS,  # noqa: F401
                                   check_explorables_on_screen,
                                   SMALLEST_TEXT, ScreenVisit, THEMES, theme_css)

STATE = "(uid) => document.getElementById(uid).xpState"


def data_of(x) -> dict:
    return json.loads(re.search(r"view\(root, (\{.*\}), UID\);", x.html).group(1))


@pytest.fixture(scope="module")
def runs():
    """One run of the encoder on the running sentence and one on chapter 11's two sentences."""
    model, tokenizer = attnlib.encoder.load_encoder(device="cpu")
    text9 = corpus.SINK_PROBES[2] + " " + corpus.SINK_PROBES[5]
    return {"running": attnlib.encoder.run(corpus.RUNNING, model=model, tokenizer=tokenizer),
            "ch9": attnlib.encoder.run(text9, model=model, tokenizer=tokenizer),
            "padded": attnlib.encoder.get_batch_attentions(corpus.PADDED_BATCH, model=model, tokenizer=tokenizer,
                                                           padding_side="left"),
            "model": model}


@pytest.fixture(scope="module")
def figs(runs):
    r, r9 = runs["running"], runs["ch9"]
    tokens, it = r.tokens, r.tokens.index("it")
    qkv = lambda run, l, h: [run.head(n, l, h) for n in ("q", "k", "v")]  # noqa: E731  (T, d_k) each
    enc = runs["padded"]
    b = corpus.PADDED_BATCH.index("Hello there!")
    qp, kp, _ = attnlib.encoder.project_qkv(enc.hidden_states[0][b], runs["model"], 0, 3)
    all_scores = r.stacked("q") @ r.stacked("k").transpose(-1, -2)     # (L, H, T, T) raw dot products
    return {
        "steps": xp.score_steps(*qkv(r, 4, 3), tokens, query=it, key=tokens.index("cat")),
        "steps2": xp.score_steps(*qkv(r, 0, 2), tokens, query=tokens.index("mat"), key=5),
        "online": xp.online_softmax_steps(*qkv(r9, 0, 3), r9.tokens, query=r9.tokens.index("it"), block_size=5),
        "mask": xp.mask_explorer(qp @ kp.T / math.sqrt(qp.shape[-1]), enc.tokens[b], enc.attention_mask[b]),
        "mask_view": xp.mask_explorer(qp @ kp.T / math.sqrt(qp.shape[-1]), enc.tokens[b], editable=False),
        "hover": xp.head_hover(r.stacked("pattern"), tokens, layer=5, head=11, query=it),
        "hover1": xp.head_hover(r.head("pattern", 5, 11), tokens, query=it),
        "temperature": xp.temperature_explorer(all_scores, tokens, d_k=all_scores.shape[-1], layer=4, head=3, query=it),
    }


@pytest.fixture(scope="module")
def page(browser, figs, tmp_path_factory):  # noqa: F811
    folder = tmp_path_factory.mktemp("steps")
    (folder / "index.html").write_text(xp.standalone_page(figs.values()), encoding="utf-8")
    visit = Visit(browser, serve(str(folder)) + "index.html")
    yield visit
    assert visit.errors == [] and visit.external == [], (visit.errors, visit.external)
    visit.close()


def f64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ------------------------------------------------------------- one query and one key, step by step
def test_score_steps_arithmetic_equals_pytorch(page, figs, runs):
    p, x = page.page, figs["steps"]
    d, uid = data_of(x), x.uid
    q, k, v = f64(d["q"]), f64(d["k"]), f64(d["v"])
    d_k = q.shape[-1]
    scores = q @ k.T / math.sqrt(d_k)                     # (T, T)
    weights = attnlib.softmax(scores)                     # (T, T)
    out = weights @ v                                     # (T, d_v)
    model_pattern = runs["running"].head("pattern", 4, 3).double()
    T = len(d["tokens"])
    for i, j in ((d["query"], d["key"]), (0, T - 1), (5, 1), (T - 1, 8)):
        p.select_option(f"#{uid}-query", str(i))
        p.select_option(f"#{uid}-key", str(j))
        s = p.evaluate(STATE, uid)
        assert (s["query"], s["key"]) == (i, j)
        torch.testing.assert_close(f64(s["terms"]), q[i] * k[j], rtol=0, atol=1e-12)
        assert s["dot"] == pytest.approx((q[i] @ k[j]).item(), abs=1e-12)
        assert s["scaled"] == pytest.approx(scores[i, j].item(), abs=1e-12)
        assert s["rowMax"] == pytest.approx(scores[i].max().item(), abs=1e-12) and s["argmax"] == int(scores[i].argmax())
        assert s["expo"] == pytest.approx(torch.exp(scores[i, j] - scores[i].max()).item(), abs=1e-12)
        assert s["total"] == pytest.approx(torch.exp(scores[i] - scores[i].max()).sum().item(), abs=1e-12)
        assert s["weight"] == pytest.approx(weights[i, j].item(), abs=1e-12)
        assert s["weight"] == pytest.approx(model_pattern[i, j].item(), abs=1e-5)   # the model's own weight
        torch.testing.assert_close(f64(s["out"]), out[i], rtol=0, atol=1e-12)
        assert s["outNorm"] == pytest.approx(out[i].norm().item(), abs=1e-12)
        torch.testing.assert_close(f64(s["share"]), weights[i, j] * v[j], rtol=0, atol=1e-12)
    # the row chart: exp(s_j - max) at steps 3 and 4, the weights from step 5 on; hidden before
    p.select_option(f"#{uid}-query", "8")
    while p.get_attribute(f"#{uid}", "data-step") != "0":
        p.click(f"#{uid}-prev")
    row = f"#{uid} [data-role=row]"
    values = "(sel) => [...document.querySelectorAll(sel)].map(e => +e.getAttribute('data-value'))"
    assert not p.is_visible(row)
    for n in range(1, 6):
        p.click(f"#{uid}-next")
        assert p.is_visible(row) == (n >= 2)
        want = weights[8] if n >= 4 else torch.exp(scores[8] - scores[8].max())
        if n >= 2:
            torch.testing.assert_close(f64(p.evaluate(values, f"#{uid} [data-role=row-bar]")), want, rtol=0, atol=1e-12)
    while p.get_attribute(f"#{uid}", "data-step") != "0":
        p.click(f"#{uid}-prev")
    # the numbers the reader sees are these numbers, rounded
    p.select_option(f"#{uid}-query", str(d["query"]))
    p.select_option(f"#{uid}-key", str(d["key"]))
    s = p.evaluate(STATE, uid)
    for _ in range(5):
        p.click(f"#{uid}-next")
    text = p.inner_text(f"#{uid} [data-role=steps]")
    for value, digits in ((s["dot"], 3), (s["scaled"], 3), (s["total"], 4), (s["weight"], 4), (s["outNorm"], 3)):
        assert f"{value:.{digits}f}" in text, (value, text)
    assert "\u201cit\u201d" in text and "\u201ccat\u201d" in text


def test_score_steps_step_with_the_keyboard(page, figs):
    """Tab from the key menu to Previous and Next; Enter and Space step; the list shows steps
    1..n and the live region announces step n; the ends hold (aria-disabled, focus kept)."""
    p, uid = page.page, figs["steps2"].uid
    p.mouse.move(0, 0)
    p.focus(f"#{uid}-query")
    p.keyboard.press("ArrowDown")                                  # the select's own keys pick the query
    q = int(p.get_attribute(f"#{uid}", "data-query"))
    assert q == data_of(figs["steps2"])["query"] + 1
    p.keyboard.press("Tab")
    assert p.evaluate("() => document.activeElement.id") == f"{uid}-key"
    p.keyboard.press("Tab")
    assert p.evaluate("() => document.activeElement.id") == f"{uid}-prev"
    p.keyboard.press("Tab")
    assert p.evaluate("() => document.activeElement.id") == f"{uid}-next"
    assert p.get_attribute(f"#{uid}", "data-step") == "0"
    for n, key in enumerate(["Enter", "Space", "Enter", "Space", "Enter", "Enter"], start=1):
        p.keyboard.press(key)
        assert p.get_attribute(f"#{uid}", "data-step") == str(min(n, 5))
        shown = p.eval_on_selector_all(f"#{uid} [data-role=steps] li", "els => els.filter(e => !e.hidden).length")
        assert shown == min(n, 5) + 1
        assert p.inner_text(f"#{uid} [data-role=readout]").startswith(f"Step {min(n, 5) + 1} of 6")
    assert p.get_attribute(f"#{uid}-next", "aria-disabled") == "true"
    assert p.evaluate("() => document.activeElement.id") == f"{uid}-next"
    assert "out = " in p.inner_text(f"#{uid} [data-role=readout]")
    p.keyboard.press("Shift+Tab")
    p.keyboard.press("Enter")
    assert p.get_attribute(f"#{uid}", "data-step") == "4"
    assert p.get_attribute(f"#{uid} [data-role=readout]", "aria-live") == "polite"


# ------------------------------------------------------------------ chapter 11: the online softmax
def test_online_softmax_steps_equal_attnlib(page, figs):
    p, x = page.page, figs["online"]
    d, uid = data_of(x), x.uid
    q, k, v = f64(d["q"]), f64(d["k"]), f64(d["v"])
    T = k.shape[0]
    s = k @ q / math.sqrt(q.shape[0])                                    # (T,) the row of scores
    reference, _ = attnlib.scaled_dot_product_attention(q[None], k, v)  # (1, d_v), the direct formula
    assert d["block"] == 5 and {1, 5, T} <= set(d["sizes"])
    for block in (5, 1, 3, T):
        p.select_option(f"#{uid}-block", str(block))
        state = p.evaluate(STATE, uid)
        blocks = list(s.split(block))
        assert state["block"] == block and len(state["history"]) == len(blocks)
        m, l = torch.tensor(-math.inf, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
        acc = torch.zeros(v.shape[1], dtype=torch.float64)
        for b, (blk, h) in enumerate(zip(blocks, state["history"])):
            m_old = m
            m, l, factor = attnlib.online_softmax_step(m, l, blk)
            acc = factor * acc + torch.exp(blk - m) @ v[b * block:b * block + len(blk)]
            assert h["m"] == pytest.approx(m.item(), abs=1e-12) and h["l"] == pytest.approx(l.item(), rel=1e-12)
            assert h["factor"] == pytest.approx(factor.item(), abs=1e-12)
            assert (h["mOld"] is None and m_old.item() == -math.inf) or h["mOld"] == pytest.approx(m_old.item(), abs=1e-12)
            torch.testing.assert_close(f64(h["acc"]), acc, rtol=1e-12, atol=1e-12)
        tiled = attnlib.tiled_attention(q[None], k, v, block_size=block)[0]     # (d_v,)
        torch.testing.assert_close(f64(state["out"]), tiled, rtol=0, atol=1e-12)
        torch.testing.assert_close(f64(state["out"]), reference[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(f64(state["direct"]), reference[0], rtol=0, atol=1e-12)
        assert state["diff"] < 1e-12
    # step through it with the buttons: block 0 is the start, then one step per block, then the result
    p.select_option(f"#{uid}-block", "5")
    n_blocks = math.ceil(T / 5)
    for n in range(1, n_blocks + 2):
        p.click(f"#{uid}-next")
        assert p.get_attribute(f"#{uid}", "data-step") == str(n)
    text = p.inner_text(f"#{uid} [data-role=readout]")
    assert text.startswith(f"Step {n_blocks + 2} of {n_blocks + 2}. Result: out = acc / l")
    assert p.get_attribute(f"#{uid}-next", "aria-disabled") == "true"


def test_online_softmax_steps_show_the_rescaling(page, figs):
    """A step where the maximum grows shows a factor below 1 and the update of l in numbers."""
    p, uid = page.page, figs["online"].uid
    p.select_option(f"#{uid}-block", "5")
    history = p.evaluate(STATE, uid)["history"]
    grow = next(n for n, h in enumerate(history) if n > 0 and h["factor"] < 1)
    for _ in range(grow + 1):
        p.click(f"#{uid}-next")
    h, text = history[grow], p.inner_text(f"#{uid} [data-role=detail]")
    assert f"= {h['factor']:.4f}" in text and f"= {h['l']:.4f}" in text and f"{h['mOld']:.3f} \u2192 {h['m']:.3f}" in text


# ------------------------------------------------------------------- chapter 5: the mask grid
def _mask_weights(p, uid):
    return f64(p.evaluate(f"() => document.getElementById('{uid}').xpState.weights"))


def test_mask_cells_toggle_by_pointer_and_keyboard(page, figs):
    p, x = page.page, figs["mask"]
    d, uid = data_of(x), x.uid
    scores = torch.tensor([[-math.inf if s is None else s for s in row] for row in d["scores"]], dtype=torch.float64)
    T = scores.shape[0]
    pad = torch.tensor(d["pad"], dtype=torch.bool)
    removed = torch.zeros(T, T, dtype=torch.bool)

    def check(causal: bool, padding: bool):
        allowed = ~removed
        if causal:
            allowed &= attnlib.causal_mask(T)
        if padding:
            allowed &= pad[None, :]
        want = attnlib.softmax(scores.masked_fill(~allowed, -math.inf))   # a fully masked row -> zeros
        torch.testing.assert_close(_mask_weights(p, uid), want, rtol=0, atol=1e-12)
        assert int(p.get_attribute(f"#{uid}", "data-masked")) == int((~allowed).sum())
        return want

    p.mouse.move(0, 0)
    if p.is_checked(f"#{uid}-padding"):
        p.click(f"#{uid}-padding")
    check(False, False)
    # one Tab stop: from the button before the grid, Tab lands on the cursor cell (0, 0)
    p.focus(f"#{uid} [data-role=reset-cells]")
    p.keyboard.press("Tab")
    active = "() => [document.activeElement.getAttribute('data-i'), document.activeElement.getAttribute('data-j')]"
    assert p.evaluate(active) == ["0", "0"]
    assert p.eval_on_selector_all(f"#{uid} [role=gridcell][tabindex='0']", "els => els.length") == 1
    live = f"#{uid} [data-role=hover]"
    assert p.get_attribute(live, "aria-live") == "polite"
    assert "query \u201c" + d["tokens"][0] + "\u201d (0) \u2192 key \u201c" + d["tokens"][0] in p.inner_text(live)
    i_last = T - 1
    p.keyboard.press("End")                       # the row's last key
    p.keyboard.press("ArrowDown")
    p.keyboard.press("ArrowDown")
    p.keyboard.press("ArrowLeft")
    assert p.evaluate(active) == ["2", str(i_last - 1)]
    assert p.get_attribute(f"#{uid}", "data-cursor") == f"2,{i_last - 1}"
    assert p.eval_on_selector_all(f"#{uid} [role=gridcell][tabindex='0']", "els => els.map(e => e.dataset.i + ',' + e.dataset.j)") == \
        [f"2,{i_last - 1}"]
    p.keyboard.press("Space")
    removed[2, i_last - 1] = True
    check(False, False)
    assert "removed by hand" in p.inner_text(live) and "weight 0.0000" in p.inner_text(live)
    assert "removed by hand" in p.get_attribute(f"#{uid} [data-i='2'][data-j='{i_last - 1}']", "aria-label")
    p.keyboard.press("ArrowUp")
    p.keyboard.press("Enter")
    removed[1, i_last - 1] = True
    check(False, False)
    p.keyboard.press("Enter")                     # again: restored
    removed[1, i_last - 1] = False
    check(False, False)
    scrolled = p.evaluate("() => window.scrollY")
    p.keyboard.press("Space")                     # Space toggles in the grid and never scrolls the page
    p.keyboard.press("Space")
    assert p.evaluate("() => window.scrollY") == scrolled
    check(False, False)
    # the pointer: click every cell of the last row: a fully masked row gets weights 0
    for j in range(T):
        p.click(f"#{uid} [data-i='{i_last}'][data-j='{j}']")
        removed[i_last, j] = True
    got = check(False, False)
    assert bool((got[i_last] == 0).all())
    assert p.evaluate(active) == [str(i_last), str(T - 1)]           # the click moved the cursor there
    for causal, padding in ((True, False), (True, True), (False, True)):
        if p.is_checked(f"#{uid}-causal") != causal:
            p.click(f"#{uid}-causal")
        if p.is_checked(f"#{uid}-padding") != padding:
            p.click(f"#{uid}-padding")
        check(causal, padding)
    p.click(f"#{uid} [data-role=reset-cells]")
    removed[:] = False
    check(False, True)
    assert p.get_attribute(f"#{uid}", "data-off") == "0"


def test_the_mask_readout_answers_focus_too(page, figs):
    """Not editable: the grid still reads each cell out on focus (as on hover), but keys and
    clicks never change the weights."""
    p, x = page.page, figs["mask_view"]
    uid, tokens = x.uid, data_of(x)["tokens"]
    before = _mask_weights(p, uid)
    p.focus(f"#{uid}-causal")
    p.keyboard.press("Tab")                       # the padding box is disabled (no attention_mask): the grid
    assert p.evaluate("() => document.activeElement.getAttribute('role')") == "gridcell"
    assert p.inner_text(f"#{uid} [data-role=hover]").startswith(f"query \u201c{tokens[0]}\u201d (0) \u2192 key \u201c{tokens[0]}\u201d (0)")
    p.keyboard.press("ArrowRight")
    text = p.inner_text(f"#{uid} [data-role=hover]")
    assert text.startswith(f"query \u201c{tokens[0]}\u201d (0) \u2192 key \u201c{tokens[1]}\u201d (1): score ")
    p.keyboard.press("Space")
    p.click(f"#{uid} [data-i='3'][data-j='3']")
    assert torch.equal(_mask_weights(p, uid), before)
    assert p.eval_on_selector_all(f"#{uid} [data-role=reset-cells]", "els => els.length") == 0
    p.hover(f"#{uid} [data-i='2'][data-j='4']")
    assert p.inner_text(f"#{uid} [data-role=hover]").startswith(f"query \u201c{tokens[2]}\u201d (2) \u2192 key \u201c{tokens[4]}\u201d (4)")


# --------------------------------------------------------- chapters 4 and 9: a layer and head menu
def test_hover_head_menu_opens_on_the_chapters_head(page, figs, runs):
    p, x = page.page, figs["hover"]
    d, uid = data_of(x), x.uid
    pattern = runs["running"].stacked("pattern")                      # (L, H, T, T)
    L, H = pattern.shape[:2]
    assert len(d["heads"]) == L * H and d["head"] == 5 * H + 11
    assert p.eval_on_selector(f"#{uid}-head", "e => e.options[e.selectedIndex].textContent") == "layer 5, head 11"
    for layer, head in ((5, 11), (0, 2), (4, 3)):
        p.select_option(f"#{uid}-head", str(layer * H + head))
        p.hover(f"#{uid} .xp-chip[data-j='8']")
        got = f64(p.evaluate("(sel) => [...document.querySelectorAll(sel)].map(e => +e.dataset.weight)", f"#{uid} .xp-chip"))
        torch.testing.assert_close(got, pattern[layer, head, 8].double(), rtol=0, atol=5e-4 + 1e-12)  # 3 decimals
        assert p.inner_text(f"#{uid} [data-role=readout]").startswith(f"layer {layer}, head {head}: query")


def test_temperature_head_menu_uses_the_picked_heads_scores(page, figs):
    p, x = page.page, figs["temperature"]
    d, uid = data_of(x), x.uid
    assert d["head"] == 4 * 12 + 3 and p.get_attribute(f"#{uid}", "data-head") == str(4 * 12 + 3)
    for h in (4 * 12 + 3, 0, 71):
        p.select_option(f"#{uid}-head", str(h))
        divisor = float(p.get_attribute(f"#{uid}", "data-divisor"))
        got = f64(p.evaluate("(sel) => [...document.querySelectorAll(sel)].map(e => +e.getAttribute('data-weight'))",
                             f"#{uid} rect[data-role=weight]"))
        want = attnlib.softmax(f64(d["heads"][h]["scores"][d["query"]]), temperature=divisor)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        assert d["heads"][h]["label"] in p.inner_text(f"#{uid} [data-role=readout]")
    p.focus(f"#{uid}-head")
    p.keyboard.press("ArrowDown")
    assert p.get_attribute(f"#{uid}", "data-head") == "71"                 # already the last: stays
    p.keyboard.press("ArrowUp")
    assert p.get_attribute(f"#{uid}", "data-head") == "70"


# ------------------------------------------------------------- accessible names of every control
# The accessible name as the ARIA name computation gives it for these elements: aria-label, else
# aria-labelledby, else the <label>s of a form control, else the element's text.
NAMES = """(sel) => [...document.querySelectorAll(sel)].flatMap(fig => [...fig.querySelectorAll(
    'button, select, input, [role=button], [role=grid], [role=gridcell][tabindex="0"], [tabindex="0"]')].map(e => {
  let name = e.getAttribute('aria-label');
  if (!name && e.getAttribute('aria-labelledby'))
    name = e.getAttribute('aria-labelledby').split(/\\s+/).map(id => document.getElementById(id).textContent).join(' ');
  if (!name && e.labels && e.labels.length) name = [...e.labels].map(l => l.textContent).join(' ');
  if (!name) name = e.textContent;
  const visible = e.tagName === 'SELECT' || e.tagName === 'INPUT' ? (e.labels && e.labels.length ? [...e.labels].map(l => l.innerText).join(' ') : '')
                                                                : e.innerText;
  return {fig: fig.id, tag: e.tagName, role: e.getAttribute('role'), name: (name || '').replace(/\\s+/g, ' ').trim(),
          visible: (visible || '').replace(/\\s+/g, ' ').trim()};
}))"""


def test_every_control_has_a_name_that_contains_its_visible_text(page, figs):
    p = page.page
    p.mouse.move(0, 0)
    controls = p.evaluate(NAMES, ".attnlib-xp")
    assert len(controls) > 40
    bad = [c for c in controls if not c["name"] or any(w not in c["name"] for w in c["visible"].split())]
    assert not bad, bad[:6]


def test_every_control_of_the_older_explorables_is_named_too(explorer_page, figures):  # noqa: F811
    """Chapters 1, 4, 5, 7, 8, 9 and 12's explorables (tests/test_browser.py's page) by the same rule."""
    controls = explorer_page.page.evaluate(NAMES, ".attnlib-xp")
    assert {c["tag"] for c in controls} >= {"INPUT", "SELECT", "BUTTON", "SPAN"}
    bad = [c for c in controls if not c["name"] or any(w not in c["name"] for w in c["visible"].split())]
    assert not bad, bad[:6]
    chips = [c["name"] for c in controls if c["role"] == "button"]
    assert chips and not any(re.search(r"token \d", n) for n in chips)


def test_hover_tokens_are_announced_as_words(page, figs):
    """'it 0.59: weight from “it”; show where “it” looks', never 'token 8': the chip is named by
    its content, so the name begins with what it shows (word, then weight; axe-core's
    label-content-name-mismatch); a word that occurs twice carries its position; the current
    query is pressed."""
    p = page.page
    for name in ("hover", "hover1"):
        uid, tokens = figs[name].uid, data_of(figs[name])["tokens"]
        p.focus(f"#{uid} .xp-chip[data-j='8']")
        assert p.eval_on_selector_all(f"#{uid} .xp-chip[aria-label]", "els => els.length") == 0
        chips = p.locator(f"#{uid} .xp-chip")
        names = [re.sub(r"\s+", " ", chips.nth(i).evaluate("e => e.textContent")) for i in range(chips.count())]
        assert not any(re.search(r"token \d", a) for a in names)
        assert re.fullmatch(r"it\d\.\d\d: weight from \u201cit\u201d; show where \u201cit\u201d looks", names[8]), names[8]
        firsts = [i for i, t in enumerate(tokens) if t == "the"]
        assert len(firsts) == 2 and all(re.match(rf"the\d\.\d\d \(position {i}\): weight", names[i]) for i in firsts)
        assert names[2].startswith("cat")
        assert p.eval_on_selector_all(f"#{uid} .xp-chip[aria-pressed=true]", "els => els.map(e => e.dataset.j)") == ["8"]
        # Chromium's own accessibility tree names the chip from its content, word first
        chip = p.get_by_role("button", name=re.compile(r"^it \d\.\d\d ?: weight from \u201cit\u201d"))
        assert chip.count() >= 1


# ------------------------------------------------------------- every screen: 390 / 1280, light / dark
@pytest.fixture(scope="module")
def column(figs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("steps-column")
    shutil.copy(theme_css(), folder / "theme.css")
    body = "\n".join(x.html for x in figs.values())
    for theme in THEMES:
        (folder / f"{theme}.html").write_text(
            f'<!DOCTYPE html><html lang="en" data-theme="{theme}"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="theme.css"><title>steps</title></head>'
            '<body><main class="bd-article" style="max-width: 740px; margin: 0 auto; padding: 0 1.5rem">'
            f"\n{body}\n</main></body></html>\n", encoding="utf-8")
    return serve(str(folder))


@pytest.mark.parametrize("viewport,theme", SETTINGS)
def test_new_explorables_fit_respond_and_are_readable(browser, column, figs, viewport, theme):  # noqa: F811
    visit = ScreenVisit(browser, column + f"{theme}.html", viewport, theme)
    try:
        p = visit.page
        for x in figs.values():  # show every step's text (the last step of each stepper)
            while x.kind in ("steps", "online") and p.get_attribute(f"#{x.uid}-next", "aria-disabled") != "true":
                p.click(f"#{x.uid}-next")
        p.click(f"#{figs['mask'].uid} [data-i='1'][data-j='1']")  # a removed cell and its readout
        check_explorables_on_screen(p, len(figs), viewport, theme)
        assert visit.errors == [] and visit.external == []
    finally:
        visit.close()


# ------------------------------------------------------------------------ bad input, no browser
X3 = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("call, error, message", [
    (lambda: xp.score_steps(X3, X3[:, :3], X3, list("abc")), ValueError, "q and k must share d_k: q (3, 4) vs k (3, 3)"),
    (lambda: xp.score_steps(X3, X3, X3[:2], list("abc")), ValueError, "k and v must share T_k"),
    (lambda: xp.score_steps(X3[:2], X3, X3, list("abc")), ValueError, "T_q = T_k"),
    (lambda: xp.score_steps(X3, X3, X3, list("abc"), key=3), ValueError, "key must be in 0..2"),
    (lambda: xp.score_steps(X3, X3, X3, list("ab")), ValueError, "expected 3, got 2"),
    (lambda: xp.score_steps(X3.tolist(), X3, X3, list("abc")), TypeError, "torch.Tensor or numpy.ndarray"),
    (lambda: xp.score_steps(X3, X3 * math.inf, X3, list("abc")), ValueError, "must not contain NaN or +inf"),
    (lambda: xp.online_softmax_steps(X3, X3, X3, list("abc"), block_size=4), ValueError, "block_size must be in 1..3"),
    (lambda: xp.online_softmax_steps(X3, X3, X3, list("abc"), block_size=2.0), TypeError, "block_size must be an int"),
    (lambda: xp.online_softmax_steps(X3, X3, X3, list("abc"), query=-1), ValueError, "query must be in 0..2"),
    (lambda: xp.mask_explorer(torch.zeros(3, 3), list("abc"), editable=1), TypeError, "editable must be a bool"),
    (lambda: xp.head_hover(torch.eye(3), list("abc"), layer=0, head=0), ValueError, "every head (n_layers, H, T_q, T_k)"),
    (lambda: xp.head_hover(torch.eye(3).repeat(2, 2, 1, 1), list("abc"), layer=2, head=0), ValueError, "layer must be in 0..1"),
    (lambda: xp.head_hover(torch.eye(3).repeat(2, 2, 1, 1), list("abc"), layer=1), ValueError, "pass both layer and head"),
    (lambda: xp.head_hover(2 * torch.eye(3).repeat(2, 2, 1, 1), list("abc")), ValueError, "weights[0][0] must sum to 1"),
    (lambda: xp.temperature_explorer(torch.zeros(3, 3), list("abc"), head=1, layer=0), ValueError, "every head"),
    (lambda: xp.temperature_explorer(torch.zeros(2, 2, 3, 4), list("abcd"), layer=0, head=0), ValueError, "square"),
])
def test_bad_input_names_expected_and_actual(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_head_menus_embed_every_head_rounded(runs):
    r = runs["running"]
    pattern = r.stacked("pattern")
    d = data_of(xp.head_hover(pattern, r.tokens, layer=5, head=11))
    assert [h["label"] for h in d["heads"]][:2] == ["layer 0, head 0", "layer 0, head 1"] and d["vmax"] == 1.0
    got = torch.tensor([h["weights"] for h in d["heads"]], dtype=torch.float64).reshape(pattern.shape)
    assert (got - pattern.double()).abs().max() <= 5e-4 + 1e-9
    assert len(xp.head_hover(pattern, r.tokens, layer=5, head=11).html) < 150_000   # 72 heads, 13 tokens
    for layer, head in ((0, 2), (4, 3), (5, 0)):
        d = data_of(xp.head_hover(pattern, r.tokens, layer=layer, head=head))
        assert d["heads"][d["head"]]["label"] == f"layer {layer}, head {head}"
        torch.testing.assert_close(torch.tensor(d["heads"][d["head"]]["weights"], dtype=torch.float64),
                                   pattern[layer, head].double(), rtol=0, atol=5e-4 + 1e-9)
