"""Real-browser tests: headless Chromium (Debian's ``chromium``, driven by Playwright's Python
package through ``executable_path``) against pages served on 127.0.0.1, with every request to
another host blocked and recorded.

(a) Each explorable on a page generated from real data: its output changes when its control
    changes, the JavaScript softmax equals :func:`attnlib.softmax`, ids never clash, and a
    token such as ``<img src=x onerror=alert(1)>`` stays text.
(b) ``book``: the built book (``_build/html``; built by tests/test_book.py earlier in the same
    ``make test`` run, or here when missing or older than its sources): every page loads with
    zero console errors, zero failed requests and zero requests leaving localhost; bertviz
    views draw their SVG; explorables respond; every image has alt text or a caption; every
    page is under 2 MB.

Chromium is looked up at ``$CHROMIUM``, ``/usr/bin/chromium``, then ``chromium``,
``chromium-browser`` and ``google-chrome`` on PATH.  Without it (or without the
``playwright`` package) the browser tests are skipped with the reason shown by ``make test``;
with ``ATTNLIB_REQUIRE_BROWSER=1`` (set by .ci/run) they fail instead.
"""
from __future__ import annotations

import functools
import html.parser
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch

import attnlib
from attnlib import corpus
from attnlib import explorables as xp

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
PROBE = "<img src=x onerror=alert(1)>"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]
MAX_PAGE_BYTES = 2 * 1024 * 1024


def find_chromium() -> str | None:
    candidates = [os.environ.get("CHROMIUM"), "/usr/bin/chromium"]
    candidates += [shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def browser_unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements.txt): browser tests skipped"
    if find_chromium() is None:
        return ("Chromium not found ($CHROMIUM, /usr/bin/chromium, chromium, chromium-browser, "
                "google-chrome): browser tests skipped; install it with `apt-get install chromium`")
    return None


@pytest.fixture(scope="module")
def browser():
    reason = browser_unavailable()
    if reason:
        if os.environ.get("ATTNLIB_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + " (ATTNLIB_REQUIRE_BROWSER=1)")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        yield b
        b.close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@functools.lru_cache(maxsize=None)
def serve(folder: str) -> str:
    """Serve ``folder`` on 127.0.0.1 from a daemon thread; returns the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


class Visit:
    """One page in a fresh browser context that blocks and records every non-local request."""

    def __init__(self, browser, url: str):
        self.errors, self.external, self.failed, self.dialogs = [], [], [], []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(url, wait_until="load")
        for attempt in range(3):  # a page may redirect (index.html -> intro.html): settle first
            self.page.wait_for_load_state("networkidle")
            try:
                self.page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise ? "
                                   "MathJax.startup.promise.then(() => true) : true")
                break
            except Exception as err:  # playwright.Error: the context went away in a navigation
                if "context was destroyed" not in str(err) or attempt == 2:
                    raise
        self.page.wait_for_load_state("networkidle")

    def _route(self, route):
        url = urlparse(route.request.url)
        if url.scheme in ("data", "blob", "about") or url.hostname == "127.0.0.1":
            route.continue_()
        else:
            self.external.append(route.request.url)
            route.abort()

    def close(self):
        self.context.close()


def ext(name: str):
    """A module of _ext/ (the book's Sphinx extensions), loaded as Jupyter Book loads it (with
    _ext/ on the path)."""
    import importlib.util
    import sys

    if str(ROOT / "_ext") not in sys.path:
        sys.path.insert(0, str(ROOT / "_ext"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "_ext" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def exercise_ext():
    """_ext/exercise_pages.py as a module (its write_assets puts the page's checker in a site)."""
    return ext("exercise_pages")


def lab_site(folder, model: str, write_files, body_html: str, *, title: str, exercises: bool = True) -> dict:
    """Assemble a site as ``make book`` does for the in-page model ``model`` (``_ext/page_models.py``):
    ``write_files(target)`` writes the model's files into ``_static/<folder>/`` and returns its
    description; the worker scripts and the vendored onnxruntime-web beside them; with
    ``exercises``, the page's checker (Pyodide and the graders); ``chapters/lab.html`` carries
    ``body_html`` and the model's ``<meta name="attnlib-<model>-bytes">``, and
    ``chapters/notebook.html`` the same page outside a book (no content root).

    Returns:
        ``{"folder", "url" (of chapters/), "info" (the description), "size" (the first-use bytes)}``.
    """
    pm = ext("page_models")
    spec = next(m for m in pm.MODELS if m.name == model)
    target = Path(folder) / "_static" / spec.folder
    info = write_files(target)
    pm.copy_scripts(model, target)                                    # as the build copies them
    shutil.copytree(ROOT / "_static" / "vendor" / "onnxruntime-web", Path(folder) / "_static" / "vendor" / "onnxruntime-web")
    size = pm.first_use_bytes(info)                                   # what the book's pages state
    script = ""
    if exercises:
        exercise_ext().write_assets(Path(folder) / "_static")
        (Path(folder) / "_static" / "vendor" / "pyodide").symlink_to(ROOT / "_static" / "vendor" / "pyodide",
                                                                     target_is_directory=True)
        script = '<script defer src="../_static/exercises/exercises.js"></script>'
    page = (f'<!DOCTYPE html>\n<html lang="en" data-content_root="../"><head><meta charset="utf-8">'
            f'<meta name="attnlib-{model}-bytes" content="{size}"><title>{title}</title>{script}</head>'
            f'<body><main>{body_html}</main></body></html>\n')
    (Path(folder) / "chapters").mkdir()
    (Path(folder) / "chapters" / "lab.html").write_text(page, encoding="utf-8")
    (Path(folder) / "chapters" / "notebook.html").write_text(page.replace(' data-content_root="../"', ""), encoding="utf-8")
    return {"folder": Path(folder), "url": serve(str(folder)) + "chapters/", "info": info, "size": size}


def downloaded_bytes(context, page, call: str) -> int:
    """Run ``call`` (JavaScript that loads an in-page model) in a fresh ``context`` and return the
    bytes of every response body it received (the page's and its worker's)."""
    finished = []
    context.on("requestfinished", lambda request: finished.append(request))
    page.evaluate(call)
    page.wait_for_timeout(300)                       # the last response events
    total = 0
    for q in finished:
        if q.url.endswith((".onnx", ".wasm", ".mjs", ".min.js", "vocab.txt")):
            body = q.sizes()["responseBodySize"]
            total += body if body > 0 else len(q.response().body())
    return total


# JavaScript helpers evaluated in the page.
SET_RANGE = """([sel, v]) => { const e = document.querySelector(sel); e.value = String(v);
  e.dispatchEvent(new Event('input', {bubbles: true})); return e.value; }"""
INK = """(sel) => { const c = document.querySelector(sel);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let ink = 0; for (let i = 3; i < d.length; i += 4) ink += d[i]; return ink; }"""  # total alpha on a canvas
WEIGHTS = "(sel) => [...document.querySelectorAll(sel)].map(e => parseFloat(e.getAttribute('data-weight')))"


def respond(page, uid: str, kind: str) -> bool:
    """Move the control of explorable ``uid`` once; True when its readout changed."""
    if kind == "model":  # chapter 9's lab: another head, read off the PyTorch run the page embeds
        before = page.inner_text(f"#{uid} [data-role=readout-0]")
        head = page.eval_on_selector(f"#{uid} [data-role=head]", "e => e.value")
        page.select_option(f"#{uid} [data-role=head]", "5" if head != "5" else "3")
        return page.inner_text(f"#{uid} [data-role=readout-0]") != before
    if kind == "tiny":  # chapter 7's circuit lab: another head, read off the PyTorch run the page embeds
        before = page.inner_text(f"#{uid} [data-role=head-readout]")
        head = page.eval_on_selector(f"#{uid} [data-role=head]", "e => e.value")
        page.select_option(f"#{uid} [data-role=head]", "1" if head != "1" else "2")
        return page.inner_text(f"#{uid} [data-role=head-readout]") != before
    if kind == "lm":  # chapter 10's lab: another head (before a load the page holds one head, and says so)
        before = page.inner_text(f"#{uid} [data-role=head-readout]")
        head = page.eval_on_selector(f"#{uid} [data-role=head]", "e => e.value")
        page.select_option(f"#{uid} [data-role=head]", "4" if head != "4" else "3")
        return page.inner_text(f"#{uid} [data-role=head-readout]") != before
    before = page.inner_text(f"#{uid} [data-role=readout]")
    if kind == "convex":
        page.evaluate(SET_RANGE, [f"#{uid}-score-0", 9])
    elif kind == "temperature":
        page.evaluate(SET_RANGE, [f"#{uid}-temperature", -2.5])
    elif kind == "mask":
        page.click(f"#{uid}-causal")
    elif kind == "graph":
        value = float(page.eval_on_selector(f"#{uid}-threshold", "e => e.value"))
        page.evaluate(SET_RANGE, [f"#{uid}-threshold", 0 if value > 0 else 0.2])
    elif kind == "hover":  # one head (chapter 9) or several with a head menu (chapter 7)
        q = page.get_attribute(f"#{uid}", "data-query")
        page.hover(f"#{uid} .xp-chip[data-j='{1 if q == '0' else 0}']")
    elif kind == "rope":
        page.evaluate(SET_RANGE, [f"#{uid}-offset", 5])
    elif kind in ("steps", "online"):  # chapters 2, 3 and 11: one step on (or back from the last)
        last = page.get_attribute(f"#{uid}-next", "aria-disabled") == "true"
        page.click(f"#{uid}-{'prev' if last else 'next'}")
    else:
        raise AssertionError(f"no control known for explorable kind {kind!r}")
    return page.inner_text(f"#{uid} [data-role=readout]") != before


# ---------------------------------------------------------------- (a) explorables on real data
@pytest.fixture(scope="module")
def real():
    """Real inputs: one head (layer 0, head 3) of the running sentence, and a left-padded
    real batch (so that causal + padding masks leave whole rows with no key)."""
    model, tokenizer = attnlib.encoder.load_encoder(device="cpu")
    tokens, q, k, v = attnlib.encoder.head_qkv(corpus.RUNNING, 0, 3, model, tokenizer)  # (T, d_k) each
    d_k = q.shape[-1]
    enc = attnlib.encoder.get_batch_attentions(corpus.PADDED_BATCH, model=model, tokenizer=tokenizer, padding_side="left")
    qp, kp, _ = attnlib.encoder.project_qkv(enc.hidden_states[0][2], model, 0, 3)  # "Hello there!" padded left
    tokens = list(tokens)
    tokens[2] = PROBE  # the escaping probe replaces "cat"
    centred = v - v.mean(0)
    v2 = centred @ torch.linalg.svd(centred, full_matrices=False).Vh[:2].T  # (T, 2): top two principal axes
    scores = q @ k.T / math.sqrt(d_k)
    return {
        "tokens": tokens, "raw": q @ k.T, "q": q, "k": k, "scores": scores, "weights": attnlib.softmax(scores), "v2": v2,
        "d_k": d_k, "pad_tokens": enc.tokens[2],
        "pad_scores": qp @ kp.T / math.sqrt(d_k), "pad_mask": enc.attention_mask[2],
    }


@pytest.fixture(scope="module")
def figures(real):
    r, it = real, real["tokens"].index("it")
    return {
        "convex": xp.convex_combination(r["v2"], r["tokens"], r["scores"][it]),
        "temperature": xp.temperature_explorer(r["raw"], r["tokens"], d_k=r["d_k"], query=it),
        "temperature2": xp.temperature_explorer(r["raw"][it], r["tokens"], d_k=r["d_k"]),
        "mask": xp.mask_explorer(r["pad_scores"], r["pad_tokens"], r["pad_mask"]),
        "graph": xp.graph_threshold(r["weights"], r["tokens"], threshold=0.1),
        "hover": xp.head_hover(r["weights"], r["tokens"], query=it),
        "heads": xp.induction_heads([a[:, :4] for a in attnlib.encoder.get_attentions(corpus.RUNNING).attentions[:2]],
                                    r["tokens"], query=it),
        "rope": xp.rope_offset(r["q"][it], r["k"][1], "it", r["tokens"][1]),
    }


@pytest.fixture(scope="module")
def explorer_page(browser, figures, tmp_path_factory):
    folder = tmp_path_factory.mktemp("explorables")
    (folder / "index.html").write_text(xp.standalone_page(figures.values()), encoding="utf-8")
    visit = Visit(browser, serve(str(folder)) + "index.html")
    yield visit
    visit.close()


def data_of(x) -> dict:
    return json.loads(re.search(r"view\(root, (\{.*\}), UID\);", x.html).group(1))


def as_scores(rows) -> torch.Tensor:
    """The page's embedded scores as float64, null -> -inf."""
    return torch.tensor([[-math.inf if s is None else s for s in row] for row in rows], dtype=torch.float64)


def test_page_renders_every_figure_offline_without_errors(explorer_page, figures):
    page = explorer_page.page
    assert page.eval_on_selector_all(".attnlib-xp[data-ready]", "els => els.map(e => e.id)") == [f.uid for f in figures.values()]
    ids = page.eval_on_selector_all("[id]", "els => els.map(e => e.id)")
    assert len(ids) == len(set(ids)), "duplicate element ids on the page"
    assert explorer_page.errors == [] and explorer_page.external == [] and explorer_page.failed == []


# Installed before the page's scripts: every layout read made while the document is still
# being parsed, and the task in which each figure got its first drawn node (one
# MutationObserver call per task that drew something).
PARSE_WATCH = """(() => {
  window.__parseReads = []; window.__drawn = {}; let batch = 0;
  for (const [proto, names] of [[Element.prototype, ['scrollWidth', 'clientWidth', 'clientHeight']],
                                [HTMLElement.prototype, ['offsetWidth', 'offsetHeight', 'offsetTop']]]) {
    for (const name of names) {
      const d = Object.getOwnPropertyDescriptor(proto, name);
      Object.defineProperty(proto, name, {configurable: true, enumerable: d.enumerable, set: d.set,
        get() { if (document.readyState === 'loading') window.__parseReads.push(name); return d.get.call(this); }});
    }
  }
  const rect = Element.prototype.getBoundingClientRect;
  Element.prototype.getBoundingClientRect = function () {
    if (document.readyState === 'loading') window.__parseReads.push('getBoundingClientRect');
    return rect.call(this); };
  new MutationObserver((records) => {
    batch += 1;
    for (const r of records) {
      const fig = r.target.closest && r.target.closest('.attnlib-xp');
      if (!fig || ![...r.addedNodes].some(n => n.nodeType === 1 && !['SCRIPT', 'STYLE', 'NOSCRIPT', 'FIGCAPTION'].includes(n.tagName))) continue;
      if (!(fig.id in window.__drawn)) window.__drawn[fig.id] = [batch, document.readyState];
    }
  }).observe(document, {childList: true, subtree: true});
})();"""


def test_figures_are_drawn_after_parsing_one_task_each(browser, figures, tmp_path_factory):
    """Issue 38, item 7: no figure reads the layout while the page parses (each such read laid
    out the page parsed so far, once per figure); each is drawn in a task of its own, in page
    order, and every one is drawn."""
    folder = tmp_path_factory.mktemp("parse_watch")
    (folder / "index.html").write_text(xp.standalone_page(figures.values()), encoding="utf-8")
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        context.add_init_script(PARSE_WATCH)
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(serve(str(folder)) + "index.html", wait_until="load")
        uids = [f.uid for f in figures.values()]
        page.wait_for_function("(n) => document.querySelectorAll('.attnlib-xp[data-ready]').length === n", arg=len(uids))
        assert page.evaluate("window.__parseReads") == [], "a figure read the layout while the page was parsed"
        drawn = page.evaluate("window.__drawn")
        assert sorted(drawn) == sorted(uids), drawn
        assert all(state != "loading" for _, state in drawn.values()), drawn
        batches = [drawn[u][0] for u in uids]
        assert batches == sorted(batches) and len(set(batches)) == len(uids), f"not one task per figure: {batches}"
        assert errors == []
    finally:
        context.close()


def test_escaping_probe_stays_text(explorer_page, figures):
    page = explorer_page.page
    assert page.eval_on_selector_all("img", "els => els.length") == 0, "a token was parsed as markup"
    assert explorer_page.dialogs == []
    hover = figures["hover"].uid
    assert page.eval_on_selector_all(f"#{hover} .xp-chip-tok", "els => els.map(e => e.textContent)")[2] == PROBE
    options = page.eval_on_selector_all(f"#{figures['temperature'].uid} option", "els => els.map(e => e.textContent)")
    assert options[2] == "2: " + PROBE


def test_temperature_js_softmax_equals_attnlib(explorer_page, figures):
    page, x = explorer_page.page, figures["temperature"]
    data, uid = data_of(x), x.uid
    rows = as_scores(data["scores"])
    seen = []
    for on in (True, False):
        if page.is_checked(f"#{uid}-scale") != on:
            page.click(f"#{uid}-scale")
        for pos in (-3, -1.2, 0.0, 0.9, 3):
            page.evaluate(SET_RANGE, [f"#{uid}-temperature", pos])
            divisor = float(page.get_attribute(f"#{uid}", "data-divisor"))
            assert divisor == pytest.approx(10 ** (pos / 1.5) * (math.sqrt(data["d_k"]) if on else 1), rel=1e-12)
            got = torch.tensor(page.evaluate(WEIGHTS, f"#{uid} rect[data-role=weight]"), dtype=torch.float64)
            want = attnlib.softmax(rows[data["query"]], temperature=divisor)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
            h = float(page.get_attribute(f"#{uid}", "data-entropy"))
            assert h == pytest.approx(attnlib.entropy(want).item(), abs=1e-9)
            seen.append(h)
    assert max(seen) > min(seen) + 1.0, "the entropy did not respond to the temperature"
    page.select_option(f"#{uid}-query", "0")
    got = torch.tensor(page.evaluate(WEIGHTS, f"#{uid} rect[data-role=weight]"), dtype=torch.float64)
    torch.testing.assert_close(got, attnlib.softmax(rows[0], temperature=10 ** 2), rtol=0, atol=1e-12)


def test_two_instances_do_not_share_state(explorer_page, figures):
    page, a, b = explorer_page.page, figures["temperature"].uid, figures["temperature2"].uid
    before = page.get_attribute(f"#{b}", "data-divisor")
    page.evaluate(SET_RANGE, [f"#{a}-temperature", -2])
    assert page.get_attribute(f"#{b}", "data-divisor") == before


def test_mask_toggles_recompute_renormalised_weights(explorer_page, figures, real):
    page, x = explorer_page.page, figures["mask"]
    data, uid = data_of(x), x.uid
    scores, T = as_scores(data["scores"]), len(data["tokens"])
    key_ok = real["pad_mask"].bool()[None, :]  # (1, T_k): padding keys removed
    for causal, padding in ((False, True), (True, True), (True, False), (False, False)):
        if page.is_checked(f"#{uid}-causal") != causal:
            page.click(f"#{uid}-causal")
        if page.is_checked(f"#{uid}-padding") != padding:
            page.click(f"#{uid}-padding")
        allowed = torch.ones(T, T, dtype=torch.bool)
        if causal:
            allowed &= attnlib.causal_mask(T)
        if padding:
            allowed &= key_ok
        want = attnlib.softmax(scores.masked_fill(~allowed, -math.inf))  # fully masked rows -> 0
        got = torch.tensor(page.evaluate(f"() => document.getElementById('{uid}').xpState.weights"), dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        assert int(page.get_attribute(f"#{uid}", "data-masked")) == int((~allowed).sum())
        if causal and padding:  # left padding: the first rows have no key left
            assert int((~allowed).all(-1).sum()) > 0 and bool((got[(~allowed).all(-1)] == 0).all())


def test_graph_threshold_counts_edges(explorer_page, figures):
    page, x = explorer_page.page, figures["graph"]
    w, uid = torch.tensor(data_of(x)["weights"], dtype=torch.float64), x.uid
    counts = []
    for t in (0.0, 0.05, 0.2, 0.5, 1.0):
        page.evaluate(SET_RANGE, [f"#{uid}-threshold", t])
        kept = int(page.get_attribute(f"#{uid}", "data-edges"))
        assert kept == page.evaluate(f"() => document.getElementById('{uid}').xpState.kept") == int((w >= t).sum())
        counts.append((kept, page.evaluate(INK, f"#{uid} canvas")))
    assert counts[0][0] == w.numel() and [c[0] for c in counts] == sorted((c[0] for c in counts), reverse=True)
    assert counts[2][0] < counts[0][0]
    assert counts[0][1] > counts[2][1] > 0 and counts[-1][1] == 0, f"ink drawn per threshold: {counts}"


def test_hover_highlights_the_row(explorer_page, figures):
    page, x = explorer_page.page, figures["hover"]
    w, uid = data_of(x)["weights"], x.uid
    for j in (0, 5, len(w) - 1):
        page.hover(f"#{uid} .xp-chip[data-j='{j}']")
        assert page.get_attribute(f"#{uid}", "data-query") == str(j)
        assert page.evaluate(WEIGHTS, f"#{uid} .xp-chip") == w[j]
        assert page.get_attribute(f"#{uid} [data-role=row]", "y") is not None


def test_heads_picker_shows_the_picked_heads_row(explorer_page, figures):
    """Chapter 7: pick a head in the menu, hover a token: the chips carry that head's row."""
    page, x = explorer_page.page, figures["heads"]
    heads, uid = data_of(x)["heads"], x.uid
    for h in (0, len(heads) - 1, 2):
        page.select_option(f"#{uid}-head", str(h))
        assert page.get_attribute(f"#{uid}", "data-head") == str(h)
        for j in (0, 4):
            page.hover(f"#{uid} .xp-chip[data-j='{j}']")
            assert page.evaluate(WEIGHTS, f"#{uid} .xp-chip") == heads[h]["weights"][j]
            assert heads[h]["label"] in page.inner_text(f"#{uid} [data-role=readout]")


TOP_OF_VIRIDIS = "rgb(253,231,37)"  # xp_core.js's viridis(1): the top of a heatmap's colour scale


def test_one_head_and_many_heads_share_the_view_and_its_scale(explorer_page, figures):
    """The same view draws chapter 9's one head (no menu; the scale ends at the head's largest
    weight) and chapter 7's heads (a menu; one scale 0..1 for every head)."""
    page, one, many = explorer_page.page, figures["hover"], figures["heads"]
    assert page.eval_on_selector_all(f"#{one.uid} select", "els => els.length") == 0
    assert page.eval_on_selector_all(f"#{many.uid}-head option", "els => els.map(e => e.textContent)") == \
        [h["label"] for h in data_of(many)["heads"]]
    fills = lambda uid: page.eval_on_selector_all(f"#{uid} rect[data-role=cell]", "els => els.map(e => e.getAttribute('fill'))")  # noqa: E731
    w = torch.tensor(data_of(one)["weights"]).flatten()
    got = fills(one.uid)
    assert len(got) == w.numel() and got[int(w.argmax())] == TOP_OF_VIRIDIS
    assert sum(f == TOP_OF_VIRIDIS for f in got) == int((w == w.max()).sum())
    for h, head in enumerate(data_of(many)["heads"]):
        page.select_option(f"#{many.uid}-head", str(h))
        w = torch.tensor(head["weights"]).flatten()
        got = fills(many.uid)
        assert [f == TOP_OF_VIRIDIS for f in got] == (w >= 0.999).tolist(), f"head {h}: the scale is not 0..1"
    assert explorer_page.errors == []


def test_hover_views_work_from_the_keyboard(explorer_page, figures):
    """Tab onto a token to pick the query; arrow keys in the head menu pick the head."""
    page = explorer_page.page
    page.mouse.move(0, 0)  # off every figure: a focus that scrolls must not slide a chip under the pointer
    for x in (figures["hover"], figures["heads"]):
        uid = x.uid
        page.focus(f"#{uid} .xp-chip[data-j='0']")
        assert page.get_attribute(f"#{uid}", "data-query") == "0"
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.getAttribute('data-j')") == "1"
        assert page.get_attribute(f"#{uid}", "data-query") == "1"
    uid, heads = figures["heads"].uid, data_of(figures["heads"])["heads"]
    page.select_option(f"#{uid}-head", "0")
    page.focus(f"#{uid}-head")
    page.keyboard.press("ArrowDown")
    assert page.get_attribute(f"#{uid}", "data-head") == "1"
    assert heads[1]["label"] in page.inner_text(f"#{uid} [data-role=readout]")
    assert page.evaluate(WEIGHTS, f"#{uid} .xp-chip") == heads[1]["weights"][1]


def test_convex_point_follows_the_sliders_and_stays_in_the_hull(explorer_page, figures):
    page, x = explorer_page.page, figures["convex"]
    data, uid = data_of(x), x.uid
    points = torch.tensor(data["points"], dtype=torch.float64)
    scores = torch.tensor(data["scores"], dtype=torch.float64)
    outs = []
    for k, value in ((0, 6.0), (4, -5.0), (len(scores) - 1, 7.5)):
        page.evaluate(SET_RANGE, [f"#{uid}-score-{k}", value])
        scores[k] = float(page.eval_on_selector(f"#{uid}-score-{k}", "e => e.value"))
        want = attnlib.softmax(scores)
        got = torch.tensor(page.evaluate(WEIGHTS, f"#{uid} [data-role=weight]"), dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        out = torch.tensor([float(v) for v in page.get_attribute(f"#{uid}", "data-out").split(",")], dtype=torch.float64)
        torch.testing.assert_close(out, want @ points, rtol=0, atol=1e-12)
        assert bool(attnlib.geometry.in_convex_hull_2d(points, out[None]).all())
        assert "inside the hull: yes" in page.text_content(f"#{uid} [data-role=readout]")
        outs.append(out)
    assert (outs[0] - outs[2]).abs().max() > 1e-3, "the averaged point did not move"
    page.click(f"#{uid} [data-role=reset]")
    torch.testing.assert_close(torch.tensor(page.evaluate(WEIGHTS, f"#{uid} [data-role=weight]"), dtype=torch.float64),
                               attnlib.softmax(torch.tensor(data["scores"], dtype=torch.float64)), rtol=0, atol=1e-12)


# --------------------------------------- the offline set-up itself (no browser, no build needed)
def _offline_ext():
    import importlib.util

    spec = importlib.util.spec_from_file_location("offline_book", ROOT / "_ext" / "offline_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BERTVIZ_OUTPUT = """<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js"></script>
<a href="https://github.com/jessevig/bertviz">bertviz</a><link rel="canonical" href="https://example.org/">
<script>require.config({
  paths: {
      d3: 'https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min',
    jquery: 'https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min',
  }
});</script>"""


def test_bertviz_cdn_addresses_become_local_and_links_stay():
    ext = _offline_ext()
    assert len(ext.external_resources(BERTVIZ_OUTPUT)) == 3  # require.js, d3, jQuery; not the links
    local = ext.localise(BERTVIZ_OUTPUT, lambda path: "../_static/" + path)
    assert ext.external_resources(local) == []
    assert "'../_static/vendor/d3/d3.min'" in local and "'../_static/vendor/jquery/jquery.min'" in local
    assert 'src="../_static/vendor/requirejs/require.js"' in local and "https://github.com/jessevig/bertviz" in local
    for target in ("vendor/requirejs/require.js", "vendor/d3/d3.min.js", "vendor/jquery/jquery.min.js"):
        assert (ROOT / "_static" / target).is_file(), target


@pytest.mark.parametrize("html_text", [
    '<img src="//cdn.example.org/a.png">', "<link href='https://fonts.example.org/x.css' rel='stylesheet'>",
    '<style>@import url("https://fonts.example.org/css");</style>', '<iframe src="https://example.org"></iframe>',
    "<script>requirejs.config({paths: {x: 'https://cdn.example.org/x'}})</script>",
])
def test_the_build_check_catches_every_kind_of_external_fetch(html_text):
    assert _offline_ext().external_resources(html_text) != []


def test_config_points_every_script_at_a_vendored_file():
    import yaml

    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]
    paths = [cfg["config"]["mathjax_path"], *cfg["config"]["nb_ipywidgets_js"]]
    assert all("://" not in p and (ROOT / "_static" / p).is_file() for p in paths), paths
    assert cfg["local_extensions"]["offline_book"].rstrip("/") == "_ext"
    for folder in (ROOT / "_static" / "vendor").iterdir():
        if folder.is_dir():
            assert any(f.name.startswith("LICENSE") for f in folder.iterdir()), f"no licence text in {folder}"


def test_page_scripts_are_deduplicated_and_the_widget_manager_is_located():
    from sphinx.builders.html._assets import _JavaScript

    ext = _offline_ext()
    thebe = _JavaScript("", body='const THEBE_JS_URL = "x"')
    scripts = [_JavaScript("_static/doctools.js"), thebe, _JavaScript("_static/vendor/requirejs/require.js"),
               _JavaScript("_static/vendor/html-manager/embed-amd.js"), _JavaScript("", priority=800, body=thebe.attributes["body"])]
    context = {"script_files": scripts, "pathto": lambda path, resource: "../" + path}
    ext._fix_scripts(None, "chapters/x", "page.html", context, None)
    bodies = [js.attributes.get("body", "") for js in context["script_files"]]
    assert sum("THEBE_JS_URL" in b for b in bodies) == 1
    names = [str(js.filename) for js in context["script_files"]]
    i = names.index("_static/vendor/requirejs/require.js")
    for name in ("base", "controls", "controls7", "libembed-amd"):
        assert f'/{name}": "../_static/vendor/html-manager/{name}"' in bodies[i + 1]
    assert "MathJax" in bodies[i + 2] and names[i + 3].endswith("embed-amd.js")


# ------------------------------------------------------------------------- (b) the built book
def _sources() -> list[Path]:
    files = [ROOT / n for n in ("_config.yml", "_toc.yml", "references.bib", "intro.md")]
    for folder, pattern in (("chapters", "*.md"), ("attnlib", "**/*.py"), ("attnlib/static", "*"), ("_ext", "*.py")):
        files += (ROOT / folder).glob(pattern)
    return [f for f in files if f.is_file()]


def book_pages() -> list[Path]:
    return sorted(p for p in HTML.rglob("*.html") if not {"_static", "_sources", "_images"} & set(p.relative_to(HTML).parts))


def _book_is_stale() -> bool:
    built = [p.stat().st_mtime for p in HTML.rglob("*.html")] if HTML.is_dir() else []
    return not (HTML / "index.html").is_file() or max(built) < max(f.stat().st_mtime for f in _sources())


@pytest.fixture(scope="module")
def book():
    """``_build/html``, rebuilt with ``make html`` only when missing or older than its sources.
    The page checks run in parallel (``make page-tests``): the rebuild holds a lock, so that two
    workers that find the book stale build it once, one after the other finding it fresh."""
    import fcntl
    (ROOT / "_build").mkdir(exist_ok=True)
    with open(ROOT / "_build" / ".book-build.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _book_is_stale():
                proc = subprocess.run(["make", "--no-print-directory", "html"], cwd=ROOT, capture_output=True, text=True)
                assert proc.returncode == 0, f"book build failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return HTML


class _Images(html.parser.HTMLParser):
    """Collects <img> tags with their alt text and whether they sit in a captioned <figure>."""

    def __init__(self):
        super().__init__()
        self.images, self.stack, self.figures = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self.figures.append({"caption": "", "images": [], "in_caption": False})
        elif tag == "figcaption" and self.figures:
            self.figures[-1]["in_caption"] = True
        elif tag == "img":
            img = {"src": a.get("src", ""), "alt": (a.get("alt") or "").strip(), "captioned": False}
            self.images.append(img)
            if self.figures:
                self.figures[-1]["images"].append(img)

    def handle_endtag(self, tag):
        if tag == "figcaption" and self.figures:
            self.figures[-1]["in_caption"] = False
        elif tag == "figure" and self.figures:
            fig = self.figures.pop()
            for img in fig["images"]:
                img["captioned"] = bool(fig["caption"].strip())

    def handle_data(self, data):
        if self.figures and self.figures[-1]["in_caption"]:
            self.figures[-1]["caption"] += data


def _meaningful_alt(img) -> bool:
    """Sphinx writes the file path as alt when none is given; that is not a description."""
    alt = img["alt"]
    return bool(alt) and not re.search(r"\.(png|jpe?g|svg|gif|webp)$", alt, re.I) and alt != img["src"]


@pytest.mark.book
def test_every_image_has_alt_text_or_a_caption(book):
    missing = []
    for page in book_pages():
        parser = _Images()
        parser.feed(page.read_text(encoding="utf-8"))
        missing += [f"{page.relative_to(book)}: {img['src']}" for img in parser.images
                    if not (_meaningful_alt(img) or img["captioned"])]
    assert not missing, ("images without alt text or a <figure> caption (give the cell `mystnb: figure: caption:` "
                         "or `mystnb: image: alt:` metadata):\n" + "\n".join(missing[:30]))


@pytest.mark.book
def test_every_page_is_under_2_mb(book):
    sizes = {p.relative_to(book).as_posix(): p.stat().st_size for p in book_pages()}
    assert sizes and all(s < MAX_PAGE_BYTES for s in sizes.values()), \
        {k: f"{v / 2**20:.2f} MiB" for k, v in sizes.items() if v >= MAX_PAGE_BYTES}


@pytest.mark.book
def test_every_page_loads_offline_with_a_clean_console(book, browser):
    base, problems = serve(str(book)), {}
    for page in book_pages():
        rel = page.relative_to(book).as_posix()
        visit = Visit(browser, base + rel)
        try:
            found = {"console": visit.errors, "external": visit.external, "failed": visit.failed}
            if any(found.values()):
                problems[rel] = {k: v[:5] for k, v in found.items() if v}
            if "bertviz-" in page.read_text(encoding="utf-8"):   # a view is drawn when it comes near the viewport
                visit.page.evaluate("async () => { for (const d of document.querySelectorAll('div[id^=bertviz-]')) {"
                                    " d.scrollIntoView(); await new Promise(r => setTimeout(r, 200)); } }")
                visit.page.wait_for_function(
                    "() => [...document.querySelectorAll('div[id^=bertviz-]')].every(d => d.querySelectorAll('svg *').length > 20)",
                    timeout=20000)
        finally:
            visit.close()
    assert not problems, json.dumps(problems, indent=1)


@pytest.mark.book
def test_book_explorables_respond_to_their_controls(book, browser):
    base, pages = serve(str(book)), [p for p in book_pages() if "attnlib-xp" in p.read_text(encoding="utf-8")]
    if not pages:
        pytest.skip("no page of the book holds an attnlib explorable yet")
    for page in pages:
        visit = Visit(browser, base + page.relative_to(book).as_posix())
        try:
            p = visit.page
            for uid, kind in p.eval_on_selector_all(".attnlib-xp", "els => els.map(e => [e.id, e.dataset.kind])"):
                assert p.get_attribute(f"#{uid}", "data-ready") == "1", f"{page.name}: {uid} did not render"
                assert respond(p, uid, kind), f"{page.name}: {kind} {uid} did not respond"
            assert visit.errors == [] and visit.external == []
        finally:
            visit.close()
