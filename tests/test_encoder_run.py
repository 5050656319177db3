"""attnlib.encoder.run: one forward pass, read many ways, checked against oracles.

Oracles: Hugging Face's own eager forward pass (``output_attentions`` / ``output_hidden_states``
with no hooks), the head's maths written out from the model's weights, and a second model
whose weights are edited so that a head's value projection is zero (what zero ablation must
equal).  Every reader of attnlib.encoder is checked to be a view of the same run.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

import attnlib
from attnlib import corpus, evidence
from attnlib.encoder import run
from attnlib.edits import Edit, apply_head_edits
from attnlib.multihead import scale_heads

TEXT = corpus.RUNNING
PAIR = corpus.PAIR


@pytest.fixture(scope="module")
def model_tok(encoder):
    return encoder


@pytest.fixture(scope="module")
def hf(model_tok):
    """Hugging Face's forward pass, no hooks: the oracle."""
    model, tokenizer = model_tok
    enc = tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        return model(**enc, output_attentions=True, output_hidden_states=True)


def test_run_equals_hugging_face_weights_and_hidden_states(model_tok, hf):
    r = run(TEXT, model=model_tok[0], tokenizer=model_tok[1])
    assert r.tokens == model_tok[1].convert_ids_to_tokens(model_tok[1](TEXT)["input_ids"])
    for layer in range(6):
        torch.testing.assert_close(r["pattern", layer], hf.attentions[layer][0], rtol=0, atol=1e-6)
    for layer in range(7):
        torch.testing.assert_close(r["resid_pre", layer], hf.hidden_states[layer][0], rtol=0, atol=1e-5)
    assert r.stacked("pattern").shape == (6, 12, len(r.tokens), len(r.tokens))
    assert r.stacked("resid_pre").shape == (7, len(r.tokens), 384)


def test_q_k_v_scores_and_z_are_the_heads_maths_from_the_weights(model_tok):
    model, tokenizer = model_tok
    r = run(TEXT, model=model, tokenizer=tokenizer)
    for layer, head in [(0, 2), (4, 3), (5, 11)]:
        X = r["resid_pre", layer]                                          # (T, d_model)
        attn = model.encoder.layer[layer].attention.self
        cols = slice(head * 32, (head + 1) * 32)
        q = X @ attn.query.weight[cols].T + attn.query.bias[cols]
        k = X @ attn.key.weight[cols].T + attn.key.bias[cols]
        v = X @ attn.value.weight[cols].T + attn.value.bias[cols]
        for name, want in (("q", q), ("k", k), ("v", v)):
            torch.testing.assert_close(r.head(name, layer, head), want, rtol=0, atol=1e-4)
        scores = q @ k.T / math.sqrt(32)
        torch.testing.assert_close(r.head("attn_scores", layer, head), scores, rtol=0, atol=1e-4)
        torch.testing.assert_close(torch.softmax(scores, -1), r.head("pattern", layer, head), rtol=0, atol=1e-5)
        torch.testing.assert_close(r.head("z", layer, head), r.head("pattern", layer, head) @ v, rtol=0, atol=1e-4)


def test_every_reader_is_a_view_of_one_run(model_tok):
    model, tokenizer = model_tok
    kw = {"model": model, "tokenizer": tokenizer}
    r = run(TEXT, **kw)
    att = attnlib.encoder.get_attentions(TEXT, **kw)
    assert att.tokens == r.tokens
    assert all(torch.equal(a[0], p) for a, p in zip(att.attentions, r.pattern))
    tokens, q, k, v = attnlib.encoder.head_qkv(TEXT, 4, 3, **kw)
    assert torch.equal(q, r.head("q", 4, 3)) and torch.equal(v, r.head("v", 4, 3))
    _, X = attnlib.encoder.layer_input(TEXT, 3, **kw)
    assert torch.equal(X, r["resid_pre", 3])
    _, z = attnlib.encoder.head_outputs(TEXT, 2, **kw)
    assert torch.equal(z, r["z", 2])


def test_pair_gives_segments_and_sentence_b_start(model_tok):
    r = run(*PAIR, model=model_tok[0], tokenizer=model_tok[1])
    b = r.sentence_b_start
    assert r.tokens[b - 1] == "[SEP]" and r.token_type_ids[b:].eq(1).all() and r.token_type_ids[:b].eq(0).all()


def _without_value(model, layer: int, head: int):
    """The oracle of zero ablation: a copy of the encoder whose head (layer, head) has its value
    weights and bias zeroed (32 columns of W_V), so its output is exactly zero."""
    edited = copy.deepcopy(model)
    cols = slice(head * 32, (head + 1) * 32)
    with torch.no_grad():
        edited.encoder.layer[layer].attention.self.value.weight[cols] = 0
        edited.encoder.layer[layer].attention.self.value.bias[cols] = 0
    return edited


def test_zero_ablation_equals_a_model_whose_head_has_no_value(model_tok):
    """Oracle: zeroing value weights and bias of (layer, head) makes its output exactly zero."""
    model, tokenizer = model_tok
    layer, head = 2, 7
    edited = _without_value(model, layer, head)
    want = run(TEXT, model=edited, tokenizer=tokenizer)
    got = run(TEXT, edits=[{"layer": layer, "head": head, "mode": "zero"}], model=model, tokenizer=tokenizer)
    assert got.edits == (Edit(layer=layer, head=head, mode="zero"),)
    torch.testing.assert_close(got.output, want.output, rtol=0, atol=1e-5)
    assert got.head("z", layer, head).abs().max() == 0
    intact = run(TEXT, model=model, tokenizer=tokenizer)
    assert all(torch.equal(intact["pattern", l], got["pattern", l]) for l in range(layer + 1))
    assert (intact["pattern", layer + 1] - got["pattern", layer + 1]).abs().max() > 1e-4


def test_patching_a_head_with_its_own_output_changes_nothing_and_with_another_does(model_tok):
    model, tokenizer = model_tok
    kw = {"model": model, "tokenizer": tokenizer}
    a, b = run("The cat sat on the mat.", **kw), run("The dog sat on the mat.", **kw)
    same = run("The cat sat on the mat.", edits=[{"layer": 1, "head": 4, "mode": "patch", "source": a}], **kw)
    torch.testing.assert_close(same.output, a.output, rtol=0, atol=1e-6)
    patched = run("The cat sat on the mat.", edits=[{"layer": 1, "head": 4, "mode": "patch", "source": b}], **kw)
    torch.testing.assert_close(patched.head("z", 1, 4), b.head("z", 1, 4))
    assert (patched.output - a.output).abs().max() > 1e-4


def test_mean_ablation_uses_each_heads_own_mean(model_tok):
    model, tokenizer = model_tok
    texts = evidence.reference_sentences()[:4]
    means = attnlib.encoder.mean_head_outputs(texts, 3, model, tokenizer)         # (H, d_v)
    zs = torch.cat([run(t, model=model, tokenizer=tokenizer)["z", 3] for t in texts], dim=1)  # (H, tokens, d_v)
    torch.testing.assert_close(means, zs.mean(dim=1))
    assert (means[0] - means[5]).abs().max() > 1e-2                      # heads differ: a shared mean would be wrong
    zero = evidence.layer_ablation(TEXT, 3, mode="zero", model=model, tokenizer=tokenizer)
    mean = evidence.layer_ablation(TEXT, 3, mode="mean", texts=texts, model=model, tokenizer=tokenizer)
    assert (zero - mean).abs().max() > 1e-4                              # mode="mean" is not zero ablation
    for h in (0, 5):
        refs = [run(t, model=model, tokenizer=tokenizer) for t in texts]
        one = run(TEXT, edits=[{"layer": 3, "head": h, "mode": "mean", "source": refs}], model=model,
                  tokenizer=tokenizer).output
        intact = run(TEXT, model=model, tokenizer=tokenizer).output
        want = 1 - torch.nn.functional.cosine_similarity(intact.double().mean(0), one.double().mean(0), dim=0)
        assert abs(float(mean[h]) - float(want)) < 1e-9


def test_a_zero_edit_and_scale_heads_agree_and_touch_only_their_columns():
    """apply_head_edits (the one intervention of both models) against scale_heads (the in-page
    model's head_mask): the same zeros, only in the head's own columns, the input unchanged."""
    out = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))
    before = out.clone()
    replaced = apply_head_edits(out, 3, [Edit(layer=0, head=1, mode="zero")])
    scaled = scale_heads(out, torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]]))
    assert torch.equal(replaced, scaled)
    assert torch.equal(replaced[..., :4], out[..., :4]) and torch.equal(replaced[..., 8:], out[..., 8:])
    assert replaced[..., 4:8].abs().max() == 0
    means = torch.zeros(1, 3, 4)
    means[0, 2] = torch.arange(4.0)
    assert torch.equal(apply_head_edits(out, 3, [Edit(layer=0, head=2, mode="mean", source=means)])[..., 8:],
                       torch.arange(4.0).expand(2, 5, 4))
    assert torch.equal(out, before)                                      # the input is not changed
    with pytest.raises(ValueError, match="H \\* d_head"):
        apply_head_edits(torch.zeros(2, 5, 11), 3, [])
    with pytest.raises(ValueError, match="scale must be"):
        scale_heads(out, torch.ones(2, 5))


ZERO_1_1 = {"layer": 1, "head": 1, "mode": "zero"}


@pytest.mark.parametrize("kwargs, error, message", [
    ({"edits": "2,3"}, TypeError, "must be a list of edits"),
    ({"edits": [3]}, TypeError, "must be an object such as"),
    ({"edits": [{"layer": 6, "head": 0, "mode": "zero"}]}, IndexError, "layer"),
    ({"edits": [{"layer": 0, "head": 12, "mode": "zero"}]}, IndexError, "head"),
    ({"edits": [ZERO_1_1, dict(ZERO_1_1)]}, ValueError, "edits 0 and 1 both edit head"),
    ({"ablate": [(1, 1)]}, TypeError, "ablate"),
    ({"edits": [{"layer": 1, "head": 1, "mode": "mean", "source": torch.zeros(6, 12, 31, 2)}]}, ValueError, "d_head"),
])
def test_bad_interventions_name_what_was_expected(model_tok, kwargs, error, message):
    with pytest.raises(error, match=message):
        run(TEXT, model=model_tok[0], tokenizer=model_tok[1], **kwargs)


def test_run_indexing_names_the_valid_choices(model_tok):
    r = run(TEXT, model=model_tok[0], tokenizer=model_tok[1])
    with pytest.raises(ValueError, match="pattern"):
        r["weights", 0]
    with pytest.raises(IndexError):
        r["q", 6]
    with pytest.raises(KeyError, match="run\\['pattern', 3\\]"):
        r["q"]
    assert r["resid_pre", -1] is r.output


def test_the_encoders_run_reads_the_same_edit_spec_as_the_tiny_model(model_tok):
    """The residual stream patched from another run gives that run's output (at the output
    itself, and entering the last layer); an intact run's residual stream is Hugging Face's
    hidden states; a patch at one position leaves the earlier layers' other positions alone."""
    model, tokenizer = model_tok
    kw = {"model": model, "tokenizer": tokenizer}
    a, b = run("The cat sat on the mat.", **kw), run("The dog sat on the mat.", **kw)
    hf = model(**tokenizer("The cat sat on the mat.", return_tensors="pt"), output_hidden_states=True).hidden_states
    for l in range(7):
        torch.testing.assert_close(a.resid_pre[l], hf[l][0].detach(), rtol=0, atol=1e-6)
    for layer in (5, 6):
        patched = run("The cat sat on the mat.", edits=[{"layer": layer, "head": None, "mode": "patch", "source": b}], **kw)
        torch.testing.assert_close(patched.output, b.output, rtol=1e-5, atol=1e-5)
    i = a.tokens.index("cat")
    one = run("The cat sat on the mat.", edits=[{"layer": 2, "head": 3, "mode": "patch", "source": b, "position": i}], **kw)
    torch.testing.assert_close(one.head("z", 2, 3)[i], b.head("z", 2, 3)[i])
    others = [p for p in range(len(a.tokens)) if p != i]
    torch.testing.assert_close(one.head("z", 2, 3)[others], a.head("z", 2, 3)[others])
    assert (one.output - a.output).abs().max() > 1e-5


def test_the_model_labs_pair_ablation_scale_is_zero_ablation_of_the_pair(model_tok, monkeypatch):
    """explorables.model_lab in pair mode embeds, for every head, 1 - cos between the pair's mean
    output with and without that head; oracle: the head's value weights zeroed in a copy."""
    from attnlib import explorables
    model, tokenizer = model_tok
    seen = {}
    monkeypatch.setattr(explorables, "render", lambda kind, data, title, n: seen.setdefault("data", data))
    explorables.model_lab("The cat sat on the mat.", "It was warm.", mode="pair", model=model, tokenizer=tokenizer)
    change = seen["data"]["ablation"]["change"]
    assert len(change) == 6 * 12
    layer, head = 2, 7
    edited = _without_value(model, layer, head)
    intact = run("The cat sat on the mat.", "It was warm.", model=model, tokenizer=tokenizer).output.double().mean(0)
    ablated = run("The cat sat on the mat.", "It was warm.", model=edited, tokenizer=tokenizer).output.double().mean(0)
    want = float(1 - torch.nn.functional.cosine_similarity(intact, ablated, dim=0))
    assert change[layer * 12 + head] == pytest.approx(want, abs=2e-6)
    assert max(change) > 1e-4
