"""attnlib.inspect_model's measures against loops and the Hugging Face model's own outputs,
plus invariants, bad inputs and the chapter-8 figures.  (Reading the model, get_attentions and
the helpers that run it, is tested in test_encoder.py.)"""

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F

matplotlib.use("Agg")

from attnlib import head_plots  # noqa: E402
from attnlib.corpus import BEARS, RUNNING, SINK_PROBES  # noqa: E402
from attnlib.encoder import get_attentions, token_vectors  # noqa: E402
from attnlib.inspect_model import (  # noqa: E402
    asymmetry, attention_share, cosine_similarities, offset_share, sink_shares, token_groups, top_keys,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny inputs: one thread is as fast and avoids oversubscribing a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def hf_outputs(encoder, text, text_pair=None):
    """The oracle: the model called directly, the way its documentation shows."""
    model, tokenizer = encoder
    enc = tokenizer(text, text_pair, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    return tokenizer.convert_ids_to_tokens(enc["input_ids"][0]), out


def random_weights(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).softmax(dim=-1)


# --- measurement helpers --------------------------------------------------------------------

def test_token_groups():
    tokens = ["[CLS]", "well", ",", "hi", "!", "...", "[SEP]", "o", "'", "[SEP]"]
    groups = token_groups(tokens)
    assert groups == {"[CLS]": [0], "[SEP]": [6, 9], "punctuation": [2, 4, 5, 8]}
    assert token_groups(["<s>", "a", "</s>"], cls_token="<s>", sep_token="</s>") == {"<s>": [0], "</s>": [2], "punctuation": []}


def test_attention_share_against_loops():
    w = random_weights(2, 3, 5, 5)
    got = attention_share(w, [0, 4])
    want = np.zeros((2, 3))
    for a in range(2):
        for b in range(3):
            want[a, b] = np.mean([w[a, b, i, 0].item() + w[a, b, i, 4].item() for i in range(5)])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    torch.testing.assert_close(attention_share(w, range(5)), torch.ones(2, 3, dtype=torch.float64))
    assert torch.equal(attention_share(w, []), torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"key positions \[5\] are outside 0..4"):
        attention_share(w, [5])
    with pytest.raises(TypeError, match="must be a tensor"):
        attention_share(np.ones((3, 3)), [0])


def test_sink_shares_against_direct_model_calls(encoder):
    texts = SINK_PROBES[:2]
    got = sink_shares(texts, model=encoder[0], tokenizer=encoder[1])
    want = {"[CLS]": torch.zeros(6, 12), "[SEP]": torch.zeros(6, 12), "punctuation": torch.zeros(6, 12)}
    for text in texts:
        tokens, out = hf_outputs(encoder, text)
        A = torch.cat(out.attentions)  # (layers, heads, T, T)
        for name, members in (("[CLS]", {"[CLS]"}), ("[SEP]", {"[SEP]"}), ("punctuation", set(".,;:!?"))):
            indicator = torch.tensor([float(t in members) for t in tokens])  # (T,)
            want[name] += torch.einsum("lhij,j->lh", A, indicator) / len(tokens) / len(texts)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-5)
    reused = [get_attentions(t, model=encoder[0], tokenizer=encoder[1]) for t in texts]
    again = sink_shares(reused, model=encoder[0], tokenizer=encoder[1])  # results reused, same numbers
    assert all(torch.equal(again[name], got[name]) for name in got)
    with pytest.raises(ValueError, match="at least one sentence"):
        sink_shares([], model=encoder[0], tokenizer=encoder[1])


def test_offset_share_against_loops():
    w = random_weights(4, 6, 6, seed=1)
    for offset in (-2, -1, 0, 1, 3):
        want = [np.mean([w[h, i, i + offset].item() for i in range(6) if 0 <= i + offset < 6]) for h in range(4)]
        np.testing.assert_allclose(offset_share(w, offset).numpy(), want, atol=1e-12)
    with pytest.raises(ValueError, match="offset 6 leaves no query"):
        offset_share(w, 6)
    with pytest.raises(ValueError, match=r"square \(..., T, T\) tensor, got \(2, 3\)"):
        offset_share(torch.ones(2, 3), 1)


def test_asymmetry():
    w = random_weights(3, 4, 4, seed=2)
    want = [max(abs(w[b, i, j].item() - w[b, j, i].item()) for i in range(4) for j in range(4)) for b in range(3)]
    np.testing.assert_allclose(asymmetry(w).numpy(), want, atol=1e-15)
    s = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    assert asymmetry(s + s.T).item() == 0.0
    assert asymmetry((s + s.T).softmax(-1)).item() > 0  # a symmetric score matrix, row-normalised
    with pytest.raises(ValueError, match=r"square .* got \(3, 4\)"):
        asymmetry(torch.ones(3, 4))


def test_every_real_head_is_asymmetric(encoder):
    att = get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    assert asymmetry(att.stacked()).min().item() > 1e-3


def test_top_keys():
    row = torch.tensor([0.1, 0.5, 0.15, 0.25])
    assert top_keys(row, list("abcd"), k=2) == [(1, "b", pytest.approx(0.5)), (3, "d", pytest.approx(0.25))]
    assert len(top_keys(row, list("abcd"), k=10)) == 4
    with pytest.raises(ValueError, match="expected a \\(T_k,\\) row for 3 tokens"):
        top_keys(row, list("abc"))
    with pytest.raises(ValueError, match="k must be at least 1"):
        top_keys(row, list("abcd"), k=0)


def test_cosine_similarities_of_token_vectors(encoder):
    _, vectors = token_vectors(list(BEARS.values()), "bears", model=encoder[0], tokenizer=encoder[1])
    cos = cosine_similarities(vectors)
    want = F.cosine_similarity(vectors[:, None, :], vectors[None, :, :], dim=-1)
    torch.testing.assert_close(cos, want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(cos.diagonal(), torch.ones(4))
    with pytest.raises(ValueError, match=r"expected an \(N, d_model\) tensor"):
        cosine_similarities(vectors[0])


# --- figures --------------------------------------------------------------------------------

def test_figures_have_labels_and_colour_bars(encoder):
    att = get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    fig = head_plots.head_heatmap(att, -1, -1)
    ax = fig.axes[0]
    assert ax.get_title() == "layer 5, head 11: attention weights"
    assert [t.get_text() for t in ax.get_xticklabels()] == att.tokens and len(fig.axes) == 2
    grid = head_plots.layer_grid(att, 1)
    assert sum(a.get_title().startswith("head") for a in grid.axes) == 12
    assert [t.get_text() for t in grid.axes[0].get_yticklabels()] == att.tokens
    assert any(a.get_ylabel() == "attention weight" for a in grid.axes)  # the colour bar
    table = head_plots.head_table(torch.rand(6, 12), title="t", colorbar_label="share")
    assert table.axes[0].get_ylabel() == "layer" and len(table.axes[0].texts) == 72
    curves = head_plots.layer_curves(torch.rand(7, 2), ["a", "b"], ylabel="cosine", title="c")
    assert len(curves.axes[0].lines) == 2
    with pytest.raises(ValueError, match="expected \\(n_points, 3\\)"):
        head_plots.layer_curves(torch.rand(7, 2), ["a", "b", "c"], ylabel="y", title="t")
    with pytest.raises(IndexError):
        head_plots.layer_grid(att, 6)
    matplotlib.pyplot.close("all")
