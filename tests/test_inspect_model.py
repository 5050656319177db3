"""attnlib.inspect_model against the Hugging Face model's own outputs, plus invariants and
bad inputs.  The measures live in test_measures.py, the chapter-8 figures in test_plotting.py."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import attnlib
from attnlib.corpus import BEARS, PAIR, RUNNING
from attnlib.inspect_model import get_attentions, head_scores, token_vectors, weighted_value_norms
from attnlib.measures import asymmetry

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [RUNNING, BEARS["verb"], "Hello there!"]


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


# --- get_attentions -------------------------------------------------------------------------

@pytest.mark.parametrize("text", SENTENCES)
def test_single_sentence_matches_model_outputs(encoder, text):
    tokens, out = hf_outputs(encoder, text)
    att = get_attentions(text, model=encoder[0], tokenizer=encoder[1])
    T = len(tokens)
    assert att.tokens == tokens and att.sentence_b_start is None
    assert isinstance(att.attentions, tuple) and len(att.attentions) == encoder[0].config.num_hidden_layers == 6
    for ours, theirs in zip(att.attentions, out.attentions):
        assert ours.shape == (1, 12, T, T)
        assert torch.equal(ours, theirs)
        torch.testing.assert_close(ours.sum(-1), torch.ones(1, 12, T))
        assert not ours.requires_grad
    assert len(att.hidden_states) == 7
    assert torch.equal(att.hidden_states[-1], out.last_hidden_state)
    assert att.stacked().shape == (6, 12, T, T)


def test_pair_tokens_and_sentence_b_start(encoder):
    model, tokenizer = encoder
    tokens, out = hf_outputs(encoder, *PAIR)
    att = get_attentions(*PAIR, model=model, tokenizer=tokenizer)
    assert att.tokens == tokens
    n_first = len(tokenizer(PAIR[0])["input_ids"])  # [CLS] time flies like an arrow [SEP]
    assert att.sentence_b_start == n_first == 7
    assert att.tokens[att.sentence_b_start:] == tokenizer.convert_ids_to_tokens(tokenizer(PAIR[1])["input_ids"])[1:]
    for ours, theirs in zip(att.attentions, out.attentions):
        assert torch.equal(ours, theirs)


def test_defaults_to_the_course_encoder_offline(encoder):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    att = get_attentions(RUNNING)  # no model given: attnlib.load_encoder()
    model, _ = attnlib.load_encoder()
    assert att.tokens[0] == "[CLS]" and att.attentions[0].device == model.device
    assert attnlib.load_encoder() is attnlib.load_encoder()  # the loader caches per (name, device)


def test_fresh_process_with_empty_hf_cache_and_no_network(tmp_path):
    """The default model needs neither the network nor the Hugging Face cache."""
    code = ("import attnlib; a = attnlib.get_attentions('time flies like an arrow', 'fruit flies like a banana'); "
            "print(a.sentence_b_start, len(a.attentions), tuple(a.attentions[0].shape))")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path),
               PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "7 6 (1, 12, 13, 13)"


def test_head_accessor(encoder):
    att = get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    assert torch.equal(att.head(-1, -1), att.attentions[5][0, 11])
    assert torch.equal(att.head(2, 3), att.attentions[2][0, 3])
    with pytest.raises(IndexError, match="layer must be in -6..5, got 6"):
        att.head(6, 0)
    with pytest.raises(IndexError, match="head must be in -12..11, got 12"):
        att.head(0, 12)
    with pytest.raises(Exception):
        att.tokens = []  # frozen dataclass


@pytest.mark.parametrize("text,pair,err,match", [
    ("", None, ValueError, "text must contain"),
    ("   \n", None, ValueError, "text must contain"),
    (None, None, TypeError, "text must be a str, got NoneType"),
    (42, None, TypeError, "got int"),
    (b"bytes", None, TypeError, "got bytes"),
    (["a list"], None, TypeError, "got list"),
    ("fine", "", ValueError, "text_pair must contain"),
    ("fine", 3.5, TypeError, "text_pair must be a str, got float"),
])
def test_bad_text(encoder, text, pair, err, match):
    with pytest.raises(err, match=match):
        get_attentions(text, pair, model=encoder[0], tokenizer=encoder[1])


def test_model_and_tokenizer_come_together(encoder):
    with pytest.raises(ValueError, match="pass both model and tokenizer"):
        get_attentions(RUNNING, model=encoder[0])
    with pytest.raises(ValueError, match="pass both model and tokenizer"):
        get_attentions(RUNNING, tokenizer=encoder[1])


def test_too_long_raises_or_truncates_with_warning(encoder, monkeypatch):
    model, tokenizer = encoder
    long_text = "the cat sat on the mat " * 100  # 600 words -> 602 tokens
    with pytest.raises(ValueError, match="602 tokens long but the model accepts at most 512"):
        get_attentions(long_text, model=model, tokenizer=tokenizer)
    monkeypatch.setattr(tokenizer, "model_max_length", 16)  # a short limit keeps the runs cheap
    with pytest.raises(ValueError, match="602 tokens long but the model accepts at most 16"):
        get_attentions(long_text, model=model, tokenizer=tokenizer)
    with pytest.warns(UserWarning, match="truncated from 602 to 16 tokens"):
        att = get_attentions(long_text, model=model, tokenizer=tokenizer, truncate=True)
    assert att.tokens == tokenizer.convert_ids_to_tokens(tokenizer(long_text)["input_ids"][:15]) + ["[SEP]"]
    assert att.attentions[0].shape == (1, 12, 16, 16)
    with pytest.warns(UserWarning, match="truncated"):
        pair = get_attentions(long_text, "fruit flies like a banana", model=model, tokenizer=tokenizer, truncate=True)
    assert len(pair.tokens) == 16 and pair.tokens[pair.sentence_b_start:] == ["fruit", "flies", "like", "a", "banana", "[SEP]"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a text that fits gives no warning at all
        get_attentions("Hello there!", model=model, tokenizer=tokenizer, truncate=True)


def test_training_mode_is_refused(encoder):
    model, tokenizer = encoder
    model.train()
    try:
        with pytest.raises(ValueError, match="training mode"):
            get_attentions(RUNNING, model=model, tokenizer=tokenizer)
    finally:
        model.eval()


def test_model_without_attention_weights_is_refused(encoder):
    from transformers import AutoModel
    sdpa = AutoModel.from_pretrained(attnlib.models.default_model_dir(), attn_implementation="sdpa").eval()
    with pytest.raises(ValueError, match="no attention weights.*eager"):
        get_attentions(RUNNING, model=sdpa, tokenizer=encoder[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available on this machine")
def test_cuda_model_gives_cuda_tensors_matching_cpu(encoder):
    model, tokenizer = attnlib.load_encoder(device="cuda")
    att = get_attentions(RUNNING, model=model, tokenizer=tokenizer)
    ref = get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    assert att.attentions[0].device.type == "cuda"
    for a, b in zip(att.attentions, ref.attentions):
        torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("layer,head", [(0, 2), (3, 11), (5, 11)])
def test_head_scores_softmax_is_the_models_attention(encoder, layer, head):
    model, tokenizer = encoder
    _, out = hf_outputs(encoder, BEARS["subject"])
    att = get_attentions(BEARS["subject"], model=model, tokenizer=tokenizer)
    scores = head_scores(att, model, layer, head)
    torch.testing.assert_close(scores.softmax(dim=-1), out.attentions[layer][0, head], atol=1e-5, rtol=1e-4)
    assert asymmetry(scores).item() > 0.1  # W_Q != W_K, so the scores themselves are not symmetric


def test_weighted_value_norms_rebuild_the_attention_output(encoder):
    """Sum over heads and keys of A[i, j] f_h(x_j), plus the output bias, must equal what the
    model's output projection produces (captured with a hook)."""
    model, tokenizer = encoder
    layer = 2
    captured = {}
    dense = model.encoder.layer[layer].attention.output.dense
    handle = dense.register_forward_hook(lambda mod, inp, out: captured.setdefault("out", out.detach()))
    try:
        att = get_attentions(RUNNING, model=model, tokenizer=tokenizer)
    finally:
        handle.remove()
    all_heads = weighted_value_norms(att, model, layer)  # (H, T, T)
    assert all_heads.shape == (12, len(att.tokens), len(att.tokens))
    x = att.hidden_states[layer][0]
    v_all = model.encoder.layer[layer].attention.self.value(x)  # (T, d_model), heads side by side
    total = dense.bias.detach().clone().expand(x.shape[0], -1).clone()
    for head in range(12):
        cols = slice(32 * head, 32 * head + 32)
        f = v_all[:, cols] @ dense.weight[:, cols].T  # (T, d_model)
        weights = att.head(layer, head)
        total += weights @ f
        norms = weighted_value_norms(att, model, layer, head)
        torch.testing.assert_close(norms, weights * f.norm(dim=-1), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(all_heads[head], norms)
    torch.testing.assert_close(total, captured["out"][0], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="layer must be in 0..5, got 6"):
        weighted_value_norms(att, model, 6)
    with pytest.raises(ValueError, match="head must be in 0..11, got 12"):
        weighted_value_norms(att, model, 0, 12)


def test_token_vectors(encoder):
    model, tokenizer = encoder
    texts = list(BEARS.values())
    positions, vectors = token_vectors(texts, "bears", model=model, tokenizer=tokenizer)
    assert positions == [4, 2, 2, 2] and vectors.shape == (4, 384)
    for text, pos, vec in zip(texts, positions, vectors):
        _, out = hf_outputs(encoder, text)
        assert torch.equal(vec, out.last_hidden_state[0, pos])
    _, first = token_vectors(texts[:1], "bears", layer=0, model=model, tokenizer=tokenizer)
    assert torch.equal(first[0], hf_outputs(encoder, texts[0])[1].hidden_states[0][0, 4])
    _, every = token_vectors(texts, "bears", layer=None, model=model, tokenizer=tokenizer)
    assert every.shape == (7, 4, 384)
    assert torch.equal(every[-1], vectors) and torch.equal(every[0, 0], first[0])


def test_token_vectors_multi_piece_and_errors(encoder):
    model, tokenizer = encoder
    text = "The story was unbelievably long."
    (pos,), vec = token_vectors([text], "unbelievably", model=model, tokenizer=tokenizer)
    _, out = hf_outputs(encoder, text)
    n = len(tokenizer.tokenize("unbelievably"))
    assert n > 1
    torch.testing.assert_close(vec[0], out.last_hidden_state[0, pos:pos + n].mean(0))
    with pytest.raises(ValueError, match="occurs 0 times"):
        token_vectors(["No such word here."], "bears", model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="occurs 2 times"):
        token_vectors(["Bears like bears."], "bears", model=model, tokenizer=tokenizer)
