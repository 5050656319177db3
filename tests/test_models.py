"""The pretrained-encoder loader: offline, hash-checked, eager attentions that match ours."""
import shutil

import pytest
import torch

import attnlib
from attnlib import models


def test_default_model_loads_offline(encoder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = encoder
    assert model.config.num_hidden_layers == 6 and model.config.num_attention_heads == 12
    assert model.config._attn_implementation == "eager"
    assert not model.training


def test_attentions_shape_and_rows_sum_to_one(encoder):
    model, tokenizer = encoder
    enc = tokenizer("The cat sat on the mat because it was warm.", return_tensors="pt")
    T = enc["input_ids"].shape[1]
    with torch.no_grad():
        attentions = model(**enc, output_attentions=True).attentions
    assert len(attentions) == 6
    for a in attentions:
        assert a.shape == (1, 12, T, T)
        torch.testing.assert_close(a.sum(-1), torch.ones(1, 12, T))


@pytest.mark.parametrize("layer,head", [(0, 0), (0, 7), (3, 11), (5, 5)])
def test_our_attention_reproduces_hugging_face_eager_weights(encoder, layer, head):
    """Q, K from attnlib.head_projections + attnlib.scaled_dot_product_attention == HF weights."""
    model, tokenizer = encoder
    enc = tokenizer("We watched the bears from a safe distance.", return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    X = out.hidden_states[layer][0]                      # (T, d_model): input of this layer
    P = attnlib.head_projections(model, layer, head)
    q, k, v = X @ P["W_Q"] + P["b_Q"], X @ P["W_K"] + P["b_K"], X @ P["W_V"] + P["b_V"]
    _, weights = attnlib.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(weights, out.attentions[layer][0, head], atol=1e-5, rtol=1e-4)


def test_embed_is_the_input_of_layer_zero(encoder):
    model, tokenizer = encoder
    tokens, X = attnlib.embed("The cat sat.", model, tokenizer)
    enc = tokenizer("The cat sat.", return_tensors="pt")
    with torch.no_grad():
        h0 = model(**enc, output_hidden_states=True).hidden_states[0][0]
    assert tokens == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    torch.testing.assert_close(X, h0)


@pytest.mark.parametrize("bad,err", [("", ValueError), ("   ", ValueError), (3, TypeError)])
def test_embed_bad_input(encoder, bad, err):
    with pytest.raises(err):
        attnlib.embed(bad, *encoder)


def test_head_projections_range_errors(encoder):
    with pytest.raises(ValueError, match=r"layer must be in 0..5, got 6"):
        attnlib.head_projections(encoder[0], 6, 0)
    with pytest.raises(ValueError, match=r"head must be in 0..11, got 12"):
        attnlib.head_projections(encoder[0], 0, 12)


def test_hash_verification_accepts_shipped_file():
    assert models.verify_weights(models.default_model_dir()).name == "model.safetensors"


def test_hash_refuses_corrupted_copy(tmp_path):
    src = models.default_model_dir()
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    data = bytearray((dst / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF                      # flip one byte in the middle
    (dst / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="refusing to load .* sha256 is"):
        models.verify_weights(dst)


def test_loader_refuses_corrupted_default(tmp_path, monkeypatch):
    """load_encoder() itself must refuse the default model when its file does not match."""
    dst = tmp_path / "model"
    shutil.copytree(models.default_model_dir(), dst)
    with open(dst / "model.safetensors", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00" * 16)
    monkeypatch.setattr(models, "default_model_dir", lambda: dst)
    monkeypatch.setattr(models, "_CACHE", {})
    with pytest.raises(ValueError, match="refusing to load"):
        attnlib.load_encoder(device="cpu")


def test_unknown_model_offline_gives_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # empty cache
    with pytest.raises(OSError, match="not in the local Hugging Face cache"):
        attnlib.load_encoder("some-org/no-such-model-xyz", device="cpu")


def test_default_device():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert attnlib.default_device().type == expected
