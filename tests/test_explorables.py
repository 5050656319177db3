"""attnlib.explorables without a browser: input checks, safe embedding, unique ids, and the
embedded data equal to the tensors given.  The browser tests (tests/test_browser.py) run the
JavaScript itself."""
import json
import math
import re

import numpy as np
import pytest
import torch

import attnlib
from attnlib import corpus
from attnlib import explorables as xp
from attnlib._xp_html import safe_json

PROBE = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def head(encoder):
    """Tokens and one real head (layer 0, head 3) of the running sentence."""
    model, tokenizer = encoder
    tokens, q, k, v = attnlib.encoder.head_qkv(corpus.RUNNING, 0, 3, model, tokenizer)  # (T, d_k) each
    raw = q @ k.T  # (T, T) unscaled dot products
    scores = raw / math.sqrt(q.shape[-1])
    return {"tokens": tokens, "raw": raw, "scores": scores, "weights": attnlib.softmax(scores), "q": q, "k": k, "v": v,
            "d_k": q.shape[-1]}


def embedded_data(x):
    """The JSON literal passed to view(...) inside the figure's script."""
    m = re.search(r"view\(root, (\{.*\}), UID\);", x.html)
    assert m, "the data literal was not found in the script"
    return json.loads(m.group(1))


def all_views(h, tokens=None):
    t = list(tokens or h["tokens"])
    v2 = h["v"][:, :2]
    return [
        xp.convex_combination(v2, t, h["scores"][8]),
        xp.temperature_explorer(h["raw"], t, d_k=h["d_k"], query=8),
        xp.mask_explorer(h["scores"], t, torch.ones(len(t), dtype=torch.long)),
        xp.graph_threshold(h["weights"], t),
        xp.head_hover(h["weights"], t),
        xp.score_steps(h["q"], h["k"], h["v"], t, query=8, key=2),
        xp.online_softmax_steps(h["q"], h["k"], h["v"], t, query=8, block_size=4),
    ]


def test_embedded_data_equals_the_tensors(head):
    conv, temp, mask, graph, hover, steps, online = all_views(head)
    d = embedded_data(steps)
    assert (d["query"], d["key"]) == (8, 2)
    for name in ("q", "k", "v"):
        np.testing.assert_allclose(np.array(d[name]), head[name].double().numpy(), rtol=1e-6, atol=1e-6)
    d = embedded_data(online)
    np.testing.assert_allclose(np.array(d["q"]), head["q"][8].double().numpy(), rtol=1e-6, atol=1e-6)
    assert d["block"] == 4 and d["sizes"][0] == 1 and d["sizes"][-1] == len(head["tokens"])
    d = embedded_data(temp)
    assert d["tokens"] == head["tokens"] and d["d_k"] == head["d_k"] and d["query"] == 8
    np.testing.assert_allclose(np.array(d["scores"]), head["raw"].double().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.array(embedded_data(graph)["weights"]), head["weights"].numpy(), atol=1e-7)
    np.testing.assert_allclose(np.array(embedded_data(conv)["points"]), head["v"][:, :2].numpy(), rtol=1e-6, atol=1e-6)
    hull = embedded_data(conv)["hull"]
    assert hull == attnlib.geometry.convex_hull_2d(head["v"][:, :2]).tolist()
    assert embedded_data(mask)["pad"] == [1] * len(head["tokens"])


def test_repr_html_is_one_self_contained_figure(head):
    for x in all_views(head):
        html = x._repr_html_()
        assert html.startswith(f'<figure class="attnlib-xp" id="{x.uid}"') and html.endswith("</figure>")
        assert html.count("<script>") == 1 and html.count("</script>") == 1
        assert not re.search(r"(src|href)\s*=", html), "an explorable must not load anything"
        assert set(re.findall(r"https?://[^\s\"']+", html)) <= {"http://www.w3.org/2000/svg"}
        assert len(html) < 200_000


def test_ids_are_unique_per_instance(head):
    a, b = (xp.head_hover(head["weights"], head["tokens"]) for _ in range(2))
    assert a.uid != b.uid and a.uid not in b.html


def test_tokens_cannot_escape_the_script(head):
    tokens = list(head["tokens"])
    tokens[1] = PROBE
    tokens[2] = "</script><script>alert(2)</script>&amp;"
    for x in all_views(head, tokens):
        literal = re.search(r"view\(root, (\{.*\}), UID\);", x.html).group(1)
        assert not set("<>&") & set(literal), "a raw '<', '>' or '&' inside the embedded data"
        assert PROBE not in x.html and "</script><script>" not in x.html
        assert embedded_data(x)["tokens"][1:3] == tokens[1:3]  # round-trips exactly
    assert safe_json(["a<b>&c\u2028"]) == '["a\\u003cb\\u003e\\u0026c\\u2028"]'
    caption = xp.head_hover(head["weights"], head["tokens"], title=PROBE).html
    assert "&lt;img src=x onerror=alert(1)&gt;" in caption and PROBE not in caption


def test_round_attentions_shrinks_bertviz_json(encoder):
    model, tokenizer = encoder
    att = attnlib.encoder.get_attentions(*corpus.PAIR, model=model, tokenizer=tokenizer).attentions
    small = xp.round_attentions(att)
    assert len(small) == len(att) and all(s.shape == a.shape and s.dtype == torch.float64 for s, a in zip(small, att))
    assert max((s - a.double()).abs().max().item() for s, a in zip(small, att)) <= 5e-4 + 1e-12
    assert len(json.dumps([s.tolist() for s in small])) < 0.4 * len(json.dumps([a.tolist() for a in att]))


def test_a_fully_masked_row_and_minus_inf_are_accepted(head):
    s = head["scores"].clone()
    s[0] = -math.inf
    assert embedded_data(xp.temperature_explorer(s, head["tokens"]))["scores"][0] == [None] * len(head["tokens"])
    assert embedded_data(xp.mask_explorer(s, head["tokens"]))["scores"][0][0] is None
    w = head["weights"].clone()
    w[0] = 0.0  # a fully masked row has weights 0
    xp.graph_threshold(w, head["tokens"])


T = 4
GOOD = torch.softmax(torch.randn(T, T, generator=torch.Generator().manual_seed(0)), -1)
TOK = ["a", "b", "c", "d"]


@pytest.mark.parametrize("call, error, message", [
    (lambda: xp.head_hover(GOOD.tolist(), TOK), TypeError, "torch.Tensor or numpy.ndarray, got list"),
    (lambda: xp.head_hover(GOOD.long(), TOK), TypeError, "floating-point"),
    (lambda: xp.head_hover(GOOD[None], TOK), ValueError, "shape (T_q, T_k)"),
    (lambda: xp.head_hover(GOOD[:, :3], TOK), ValueError, "square"),
    (lambda: xp.head_hover(GOOD * 2, TOK), ValueError, "row 0 sums to 2"),
    (lambda: xp.head_hover(GOOD - 0.5, TOK), ValueError, "non-negative"),
    (lambda: xp.head_hover(GOOD, TOK[:3]), ValueError, "expected 4, got 3"),
    (lambda: xp.head_hover(GOOD, "abcd"), TypeError, "list of str"),
    (lambda: xp.head_hover(GOOD, ["a", "b", 3, "d"]), TypeError, "tokens[2] must be a str, got int"),
    (lambda: xp.head_hover(GOOD, TOK, query=4), ValueError, "query must be in 0..3"),
    (lambda: xp.head_hover(GOOD, TOK, title=3), TypeError, "title"),
    (lambda: xp.graph_threshold(GOOD, TOK, threshold=1.5), ValueError, "threshold"),
    (lambda: xp.graph_threshold(torch.full((T, T), math.nan), TOK), ValueError, "NaN"),
    (lambda: xp.temperature_explorer(torch.randn(3, 4), TOK), ValueError, "square"),
    (lambda: xp.temperature_explorer(torch.randn(4), TOK, d_k=0), ValueError, "d_k must be >= 1"),
    (lambda: xp.temperature_explorer(torch.randn(4), TOK, d_k=2.0), TypeError, "d_k must be an int"),
    (lambda: xp.temperature_explorer(torch.randn(4), TOK, temperature=1000), ValueError, "[0.01, 100]"),
    (lambda: xp.temperature_explorer(torch.tensor([1.0, math.inf, 0, 0]), TOK), ValueError, "+inf"),
    (lambda: xp.mask_explorer(torch.randn(4, 4), TOK, torch.tensor([1, 2, 0, 1])), ValueError, "only 0 and 1"),
    (lambda: xp.mask_explorer(torch.randn(4, 4), TOK, torch.tensor([1, 1, 0])), ValueError, "(T_k,) or (1, T_k)"),
    (lambda: xp.mask_explorer(torch.randn(4, 4), TOK, [1, 1, 0, 0]), TypeError, "attention_mask must be a torch.Tensor"),
    (lambda: xp.convex_combination(torch.randn(4, 3), TOK, torch.randn(4)), ValueError, "(T_k, 2)"),
    (lambda: xp.convex_combination(torch.randn(4, 2), TOK, torch.randn(5)), ValueError, "must share T_k"),
    (lambda: xp.convex_combination(torch.randn(4, 2), TOK, torch.tensor([0.0, -math.inf, 1, 1])), ValueError, "finite"),
    (lambda: xp.head_hover(torch.eye(200), [str(i) for i in range(200)]), ValueError, "1 to 128 tokens"),
    (lambda: xp.round_attentions(torch.rand(1, 2, 3, 3)), TypeError, "list or tuple"),
    (lambda: xp.round_attentions([torch.rand(1, 2, 3, 3)], decimals=0), ValueError, "1..7"),
])
def test_bad_input_names_expected_and_actual(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_numpy_and_float32_float64_inputs_are_accepted():
    a = xp.head_hover(GOOD.numpy(), TOK)
    b = xp.head_hover(GOOD.double(), TOK)
    assert embedded_data(a)["weights"] == embedded_data(b)["weights"]


def test_head_hover_and_induction_heads_are_one_view(head):
    """Chapters 7 and 9 share one view (static/xp_hover.js): the same kind and the same script;
    one head's colour scale ends at its largest weight, several heads share the scale 0..1."""
    w = head["weights"]
    one = xp.head_hover(w, head["tokens"], query=2)
    many = xp.induction_heads([torch.stack([w, w.T.softmax(-1)])[None]], head["tokens"], head=1, query=2)
    assert one.kind == many.kind == "hover"
    script = lambda x: x.html.split("<script>")[1].split("var UID")[0]  # noqa: E731  the code before the data
    assert script(one) == script(many), "the two figures must run the same code"
    d1, d2 = embedded_data(one), embedded_data(many)
    assert d1["vmax"] == max(max(r) for r in d1["weights"]) == pytest.approx(w.max().item(), rel=1e-6)
    assert d2["vmax"] == 1.0 and d2["head"] == 1 and d2["query"] == 2
    assert [h["label"] for h in d2["heads"]] == ["layer 0, head 0", "layer 0, head 1"]
    np.testing.assert_allclose(np.array(d2["heads"][0]["weights"]), w.numpy(), atol=1e-7)
    np.testing.assert_allclose(np.array(d2["heads"][1]["weights"]), w.T.softmax(-1).numpy(), atol=1e-7)
    from attnlib._xp_html import STATIC_DIR
    views = sorted(p.name for p in STATIC_DIR.glob("xp_*.js"))
    assert "xp_heads.js" not in views and "xp_hover.js" in views
