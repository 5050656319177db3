"""attnlib.encoder, the one path that reads the pretrained encoder: loading (offline, every file
checked against its sha256 manifest), one forward pass (text, pair, padded batch), the input of
every layer, per-head q, k, v and outputs, and what is read from a run.

The oracle throughout is the Hugging Face model called directly, the way its documentation
shows (eager attentions, hidden states, forward hooks), never attnlib's own path."""
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import attnlib
from attnlib.encoder import loading as enc_mod
from attnlib.encoder import readers
from attnlib.corpus import BEARS, PADDED_BATCH, PAIR, RUNNING
from attnlib.encoder import (
    DEFAULT_MODEL_MANIFEST, EncoderAttention, default_model_dir, embed, file_manifest, get_attentions,
    get_batch_attentions, head_outputs, head_projections, head_qkv, head_scores, layer_input, load_encoder,
    project_qkv, token_vectors, verify_files, weighted_value_norms,
)

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [RUNNING, BEARS["verb"], "Hello there!"]
N_LAYERS, N_HEADS, D_K = 6, 12, 32


pytestmark = pytest.mark.usefixtures("one_thread")


def hf_outputs(encoder, text, text_pair=None):
    """The oracle: the model called directly, the way its documentation shows."""
    model, tokenizer = encoder
    enc = tokenizer(text, text_pair, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    return tokenizer.convert_ids_to_tokens(enc["input_ids"][0]), out


def hf_context(encoder, text, layer):
    """The oracle for a layer's per-head outputs: its self-attention module's output, captured
    with a forward hook. Shapes: (H, T, d_v)."""
    model, tokenizer = encoder
    captured = {}
    hook = model.encoder.layer[layer].attention.self.register_forward_hook(
        lambda module, args, output: captured.update(out=output[0]))
    try:
        with torch.no_grad():
            model(**tokenizer(text, return_tensors="pt"))
    finally:
        hook.remove()
    out = captured["out"][0]                                         # (T, H * d_v)
    return torch.stack([out[:, h * D_K:(h + 1) * D_K] for h in range(N_HEADS)])  # (H, T, d_v)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def model_copy(tmp_path):
    """A copy of the shipped model folder; the 87 MiB weights file is a symbolic link (read
    through by the hash), so editing it needs a real copy (see test_corrupted_weights)."""
    src, dst = default_model_dir(), tmp_path / "model"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors"))
    (dst / "model.safetensors").symlink_to(src / "model.safetensors")
    return dst


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(enc_mod, "_CACHE", {})


# --- loading and integrity -------------------------------------------------------------------

def test_default_model_loads_offline(encoder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = encoder
    assert model.config.num_hidden_layers == N_LAYERS and model.config.num_attention_heads == N_HEADS
    assert model.config._attn_implementation == "eager"
    assert not model.training


def test_manifest_lists_every_file_of_the_shipped_folder():
    folder = default_model_dir()
    on_disk = {p.relative_to(folder).as_posix(): sha256(p) for p in folder.rglob("*") if p.is_file()}
    assert on_disk == DEFAULT_MODEL_MANIFEST == file_manifest(folder)
    for built_from in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                       "special_tokens_map.json", "vocab.txt"):
        assert built_from in DEFAULT_MODEL_MANIFEST
    assert verify_files(folder) == folder


def _edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config, indent=2))
    return sha256(path)


def test_edited_config_is_refused_by_name_with_both_digests(model_copy, monkeypatch, fresh_cache):
    actual = _edit_config(model_copy, layer_norm_eps=0.5)
    expected = DEFAULT_MODEL_MANIFEST["config.json"]
    with pytest.raises(ValueError, match=rf"config\.json has sha256 {actual}, expected {expected}"):
        verify_files(model_copy)
    monkeypatch.setattr(enc_mod, "default_model_dir", lambda: model_copy)
    with pytest.raises(ValueError, match=rf"config\.json has sha256 {actual}, expected {expected}"):
        load_encoder(device="cpu")                                  # the default id
    with pytest.raises(ValueError, match=r"config\.json has sha256"):
        load_encoder(model_copy, device="cpu")                      # the default folder, by its path
    assert enc_mod._CACHE == {}                                     # nothing refused was cached


def test_corrupted_weights_are_refused(tmp_path, monkeypatch, fresh_cache):
    dst = tmp_path / "model"
    shutil.copytree(default_model_dir(), dst)
    with open(dst / "model.safetensors", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00" * 16)
    monkeypatch.setattr(enc_mod, "default_model_dir", lambda: dst)
    with pytest.raises(ValueError, match=r"model\.safetensors has sha256 [0-9a-f]{64}, expected 53aa5117"):
        load_encoder(device="cpu")


@pytest.mark.parametrize("name", ["tokenizer.json", "vocab.txt", "1_Pooling/config.json"])
def test_missing_file_is_refused_by_name(model_copy, monkeypatch, fresh_cache, name):
    (model_copy / name).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{name} is missing"):
        verify_files(model_copy)
    monkeypatch.setattr(enc_mod, "default_model_dir", lambda: model_copy)
    with pytest.raises(FileNotFoundError, match=rf"{name} is missing"):
        load_encoder(device="cpu")


def test_unlisted_file_is_refused(model_copy):
    (model_copy / "added_tokens.json").write_text('{"[NEW]": 30522}')  # a file the tokenizer would read
    with pytest.raises(ValueError, match=r"files its manifest does not list, \['added_tokens.json'\]"):
        verify_files(model_copy)


def test_user_folder_loads_as_it_is_unless_a_manifest_is_given(model_copy, tmp_path, encoder, fresh_cache):
    """The documented policy for a folder of one's own: no manifest, no check; with one, the
    same check as the default model."""
    trusted = file_manifest(model_copy)                             # written while the copy is intact
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(trusted))
    model, tokenizer = load_encoder(model_copy, device="cpu", manifest=manifest_file)
    _, X = embed(RUNNING, model, tokenizer)
    torch.testing.assert_close(X, embed(RUNNING, *encoder)[1], rtol=0, atol=0)

    _edit_config(model_copy, layer_norm_eps=0.5)
    enc_mod._CACHE.clear()                                          # (a cached model was built from checked files)
    with pytest.raises(ValueError, match=r"config\.json has sha256"):
        load_encoder(model_copy, device="cpu", manifest=trusted)
    with pytest.raises(ValueError, match=r"config\.json has sha256"):
        load_encoder(model_copy, device="cpu", manifest=str(manifest_file))
    edited, edited_tok = load_encoder(model_copy, device="cpu")    # unverified, as documented
    assert edited.config.layer_norm_eps == 0.5
    assert (embed(RUNNING, edited, edited_tok)[1] - X).abs().max() > 0.01  # the edit changes every embedding


@pytest.mark.parametrize("manifest,err,match", [
    (["config.json"], TypeError, "manifest must be a dict"),
    ({}, ValueError, "at least one file"),
    ({"config.json": "abc"}, ValueError, "64-character"),
    ({"config.json": 5}, ValueError, "64-character"),
])
def test_bad_manifest(model_copy, manifest, err, match):
    with pytest.raises(err, match=match):
        verify_files(model_copy, manifest)


@pytest.mark.parametrize("entry", ["../outside/secret.txt", "sub/../../outside/secret.txt", "ABSOLUTE"])
def test_manifest_entries_outside_the_folder_are_refused_before_any_file_is_opened(tmp_path, monkeypatch,
                                                                                  fresh_cache, entry):
    """A manifest names files inside the model folder (issue 36): an entry that climbs out of it
    or is absolute would make verify_files read, and vouch for, a file elsewhere.  Here the entry
    names a real file outside the folder with its true digest, so only the path rule refuses it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not a model file")
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "config.json").write_text("{}")
    entry = str(outside / "secret.txt") if entry == "ABSOLUTE" else entry
    manifest = {"sub/config.json": sha256(folder / "sub" / "config.json"), entry: sha256(outside / "secret.txt")}
    opened = []
    monkeypatch.setattr(enc_mod, "sha256_file", lambda path: opened.append(path) or sha256(path))
    with pytest.raises(ValueError, match=rf"paths inside the model folder.*got {re.escape(repr(entry))}"):
        verify_files(folder, manifest)
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="paths inside the model folder"):
        load_encoder(folder, device="cpu", manifest=manifest_file)
    assert opened == []                                             # refused before any file was read
    assert verify_files(folder, {"sub/config.json": manifest["sub/config.json"]}) == folder   # the rule alone


def test_manifest_with_a_hub_id_is_refused():
    with pytest.raises(ValueError, match="manifest= checks the files of a local folder"):
        load_encoder("some-org/no-such-model-xyz", device="cpu", manifest=DEFAULT_MODEL_MANIFEST)


def test_unknown_model_offline_gives_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # empty cache
    with pytest.raises(OSError, match="not in the local Hugging Face cache"):
        load_encoder("some-org/no-such-model-xyz", device="cpu")
    with pytest.raises(TypeError, match="model id or a folder path"):
        load_encoder(3)
    with pytest.raises(ValueError, match="device must name a device"):
        load_encoder(device="gpu0")
    with pytest.raises(TypeError, match="device must be a torch.device"):
        load_encoder(device=1.5)


def test_default_device():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert attnlib.default_device().type == expected


# --- get_attentions --------------------------------------------------------------------------

@pytest.mark.parametrize("text", SENTENCES)
def test_single_sentence_matches_model_outputs(encoder, text):
    tokens, out = hf_outputs(encoder, text)
    att = get_attentions(text, model=encoder[0], tokenizer=encoder[1])
    T = len(tokens)
    assert att.tokens == tokens and att.sentence_b_start is None
    assert isinstance(att.attentions, tuple) and len(att.attentions) == N_LAYERS
    for ours, theirs in zip(att.attentions, out.attentions):
        assert ours.shape == (1, N_HEADS, T, T)
        assert torch.equal(ours, theirs)
        torch.testing.assert_close(ours.sum(-1), torch.ones(1, N_HEADS, T))
        assert not ours.requires_grad
    assert len(att.hidden_states) == N_LAYERS + 1
    for ours, theirs in zip(att.hidden_states, out.hidden_states):
        assert torch.equal(ours, theirs)
    assert att.stacked().shape == (N_LAYERS, N_HEADS, T, T)


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
    att = get_attentions(RUNNING)  # no model given: attnlib.encoder.load_encoder()
    model, _ = load_encoder()
    assert att.tokens[0] == "[CLS]" and att.attentions[0].device == model.device
    assert load_encoder() is load_encoder()  # the loader caches per (name, device, manifest)


def test_fresh_process_with_empty_hf_cache_and_no_network(tmp_path):
    """The default model needs neither the network nor the Hugging Face cache."""
    code = ("import attnlib; a = attnlib.encoder.get_attentions('time flies like an arrow', 'fruit flies like a banana'); "
            "print(a.sentence_b_start, len(a.attentions), tuple(a.attentions[0].shape))")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path),
               PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "7 6 (1, 12, 13, 13)"


def test_head_accessor(encoder):
    att = get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    assert torch.equal(att.head(-1, -1), att.attentions[5][0, 11])
    assert torch.equal(att.head(2, 3), att.attentions[2][0, 3])
    assert torch.equal(att.head(-6, -12), att.attentions[0][0, 0])
    with pytest.raises(IndexError, match=r"layer must be in 0..5 \(or -6..-1 from the end\), got 6"):
        att.head(6, 0)
    with pytest.raises(IndexError, match=r"head must be in 0..11 \(or -12..-1 from the end\), got -13"):
        att.head(0, -13)
    with pytest.raises(TypeError, match="layer must be an int"):
        att.head(1.0, 0)
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
    for call in (lambda **kw: get_attentions(RUNNING, **kw), lambda **kw: embed(RUNNING, **kw),
                 lambda **kw: head_qkv(RUNNING, 0, 0, **kw), lambda **kw: get_batch_attentions(PADDED_BATCH, **kw)):
        with pytest.raises(ValueError, match="pass both model and tokenizer"):
            call(model=encoder[0])
        with pytest.raises(ValueError, match="pass both model and tokenizer"):
            call(tokenizer=encoder[1])


def test_too_long_raises_or_truncates_with_warning(encoder, monkeypatch):
    model, tokenizer = encoder
    long_text = "the cat sat on the mat " * 100  # 600 words -> 602 tokens
    with pytest.raises(ValueError, match=r"602 tokens long but the model accepts at most 512 \(max_position_embeddings\)"):
        get_attentions(long_text, model=model, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="truncate must be True or False"):
        get_attentions(long_text, model=model, tokenizer=tokenizer, truncate="yes")
    monkeypatch.setattr(tokenizer, "model_max_length", 16)  # a short limit keeps the runs cheap
    with pytest.raises(ValueError, match="602 tokens long but the model accepts at most 16 .*model_max_length"):
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


def test_beyond_512_tokens_every_reader_names_the_limit(encoder):
    """embed, layer_input, head_qkv, head_outputs and the batch raised a size-mismatch
    RuntimeError from inside the embeddings; now a ValueError names the maximum and the count."""
    model, tokenizer = encoder
    text = "word " * 520                                            # 522 tokens
    for call in (lambda **kw: embed(text, model, tokenizer, **kw),
                 lambda **kw: layer_input(text, 3, model, tokenizer, **kw),
                 lambda **kw: head_qkv(text, 0, 3, model, tokenizer, **kw),
                 lambda **kw: head_outputs(text, 0, 3, model, tokenizer, **kw)):
        with pytest.raises(ValueError, match=r"522 tokens long but the model accepts at most 512 \(max_position_embeddings\)"):
            call()
    with pytest.raises(ValueError, match=r"longest text is 522 tokens long but the model accepts at most 512"):
        get_batch_attentions(["short", text], model=model, tokenizer=tokenizer)
    with pytest.warns(UserWarning, match="truncated from 522 to 512"):
        tokens, q, k, v = head_qkv(text, 0, 3, model, tokenizer, truncate=True)
    assert len(tokens) == 512 and q.shape == (512, D_K) and tokens[-1] == "[SEP]"
    with pytest.warns(UserWarning, match="truncated from 522 to 512"):
        batch = get_batch_attentions(["short", text], model=model, tokenizer=tokenizer, truncate=True)
    assert batch.attention_mask.shape == (2, 512) and batch.attention_mask[0].sum() == 3


def test_training_mode_is_refused(encoder):
    model, tokenizer = encoder
    model.train()
    try:
        with pytest.raises(ValueError, match="training mode"):
            get_attentions(RUNNING, model=model, tokenizer=tokenizer)
        with pytest.raises(ValueError, match="training mode"):
            head_qkv(RUNNING, 1, 1, model, tokenizer)
    finally:
        model.eval()


def test_model_without_attention_weights_is_refused(encoder):
    from transformers import AutoModel
    sdpa = AutoModel.from_pretrained(default_model_dir(), attn_implementation="sdpa").eval()
    with pytest.raises(ValueError, match="no attention weights.*eager"):
        get_attentions(RUNNING, model=sdpa, tokenizer=encoder[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available on this machine")
def test_cuda_model_gives_cuda_tensors_matching_cpu(encoder):
    model, tokenizer = load_encoder(device="cuda")
    att = get_attentions(RUNNING, model=model, tokenizer=tokenizer)
    ref = get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    assert att.attentions[0].device.type == "cuda"
    for a, b in zip(att.attentions, ref.attentions):
        torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-3)
    tokens, q, k, v = head_qkv(RUNNING, 4, 3, model, tokenizer)
    assert q.device.type == "cuda"
    torch.testing.assert_close((q @ k.T / math.sqrt(D_K)).softmax(-1).cpu(), ref.head(4, 3), atol=1e-4, rtol=1e-3)


# --- a padded batch ---------------------------------------------------------------------------

@pytest.mark.parametrize("side", ["right", "left"])
def test_batch_matches_the_model_called_with_its_mask(encoder, side):
    model, tokenizer = encoder
    enc = tokenizer(PADDED_BATCH, padding=True, padding_side=side, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    batch = get_batch_attentions(PADDED_BATCH, model=model, tokenizer=tokenizer, padding_side=side)
    assert torch.equal(batch.attention_mask, enc["attention_mask"])
    assert batch.tokens == [tokenizer.convert_ids_to_tokens(ids) for ids in enc["input_ids"]]
    assert batch.n_layers == N_LAYERS and batch.n_heads == N_HEADS
    for ours, theirs in zip(batch.attentions + batch.hidden_states, out.attentions + out.hidden_states):
        assert torch.equal(ours, theirs)
    # Invariants: no weight on a [PAD] key; with right padding the real tokens' outputs equal
    # the sentence run alone.  (Left padding moves them to later positions, and BERT's absolute
    # position embeddings see that: the documented caveat.)
    pad_keys = batch.attention_mask[:, None, None, :] == 0           # (B, 1, 1, T)
    for a in batch.attentions:
        assert a.masked_select(pad_keys).abs().max() < 1e-6
    short = PADDED_BATCH.index("Hello there!")
    alone = get_attentions("Hello there!", model=model, tokenizer=tokenizer).hidden_states[-1][0]
    real = batch.attention_mask[short].bool()
    gap = (batch.hidden_states[-1][short, real] - alone).abs().max().item()
    assert gap < 1e-4 if side == "right" else gap > 0.1


def test_batch_without_the_padding_mask(encoder):
    model, tokenizer = encoder
    enc = tokenizer(PADDED_BATCH, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**{**enc, "attention_mask": torch.ones_like(enc["attention_mask"])}, output_attentions=True)
    batch = get_batch_attentions(PADDED_BATCH, model=model, tokenizer=tokenizer, mask_padding=False)
    assert torch.equal(batch.attention_mask, enc["attention_mask"])  # still the tokenizer's mask
    for ours, theirs in zip(batch.attentions, out.attentions):
        assert torch.equal(ours, theirs)
    short = PADDED_BATCH.index("Hello there!")
    assert batch.attentions[0][short, :, :5, 5:].sum(-1).min() > 0   # real queries now reach [PAD] keys


@pytest.mark.parametrize("texts,kw,err,match", [
    ("Hello there!", {}, TypeError, "wrap a single text in a list"),
    ([], {}, ValueError, "at least one text"),
    (["fine", "  "], {}, ValueError, r"texts\[1\] must contain"),
    (["fine", 3], {}, TypeError, r"texts\[1\] must be a str"),
    (["fine"], {"padding_side": "middle"}, ValueError, "padding_side must be one of"),
    (["fine"], {"mask_padding": "no"}, TypeError, "mask_padding must be True or False"),
])
def test_batch_bad_input(encoder, texts, kw, err, match):
    with pytest.raises(err, match=match):
        get_batch_attentions(texts, model=encoder[0], tokenizer=encoder[1], **kw)


# --- layers and heads -------------------------------------------------------------------------

def test_layer_input_is_each_hidden_state(encoder):
    model, tokenizer = encoder
    tokens, out = hf_outputs(encoder, RUNNING)
    for layer in range(N_LAYERS + 1):
        got_tokens, X = layer_input(RUNNING, layer, model, tokenizer)
        assert got_tokens == tokens and torch.equal(X, out.hidden_states[layer][0])
    assert torch.equal(layer_input(RUNNING, -1, model, tokenizer)[1], out.last_hidden_state[0])
    with pytest.raises(IndexError, match=r"layer must be in 0..6 .* got 7"):
        layer_input(RUNNING, 7, model, tokenizer)
    with pytest.raises(TypeError, match="layer must be an int"):
        layer_input(RUNNING, "0", model, tokenizer)


def test_embed_is_the_input_of_layer_zero(encoder):
    model, tokenizer = encoder
    tokens, X = embed("The cat sat.", model, tokenizer)
    enc = tokenizer("The cat sat.", return_tensors="pt")
    with torch.no_grad():
        h0 = model(**enc, output_hidden_states=True).hidden_states[0][0]
        direct = model.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])[0]
    assert tokens == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    assert torch.equal(X, h0)
    torch.testing.assert_close(X, direct, atol=1e-6, rtol=0)


def _hf_embeddings(model, tokenizer, text, order=None, zero_positions=False):
    """The oracle: the model's own embedding module on the (reordered) token ids, on a copy whose
    position table is zeroed when ``zero_positions``."""
    import copy
    module = copy.deepcopy(model.embeddings) if zero_positions else model.embeddings
    enc = tokenizer(text, return_tensors="pt")
    ids, segments = enc["input_ids"], enc["token_type_ids"]
    if order is not None:
        ids, segments = ids[:, order], segments[:, order]
    with torch.no_grad():
        if zero_positions:
            module.position_embeddings.weight.zero_()
        return module(input_ids=ids, token_type_ids=segments)[0]       # (T, d_model)


@pytest.mark.parametrize("text", [RUNNING, BEARS["verb"]])
def test_embed_without_positions_is_the_embedding_layer_with_its_position_table_zeroed(encoder, text):
    model, tokenizer = encoder
    tokens, X0 = embed(text, model, tokenizer, positions=False)
    torch.testing.assert_close(X0, _hf_embeddings(model, tokenizer, text, zero_positions=True), atol=1e-6, rtol=0)
    assert tokens == embed(text, model, tokenizer)[0]
    assert (X0 - embed(text, model, tokenizer)[1]).abs().max() > 0.1      # the table does matter
    assert model.embeddings.position_embeddings.weight.abs().max() > 0   # the oracle zeroed a copy only


def test_embed_order_permutes_the_rows_without_positions_and_not_with_them(encoder):
    model, tokenizer = encoder
    tokens, X0 = embed(RUNNING, model, tokenizer, positions=False)
    T = len(tokens)
    order = torch.randperm(T, generator=torch.Generator().manual_seed(0))
    shuffled_tokens, X0_shuffled = embed(RUNNING, model, tokenizer, positions=False, order=order)
    assert shuffled_tokens == [tokens[i] for i in order]
    torch.testing.assert_close(X0_shuffled, X0[order], atol=0, rtol=0)      # equivariance of the input
    torch.testing.assert_close(X0_shuffled, _hf_embeddings(model, tokenizer, RUNNING, order, zero_positions=True),
                               atol=1e-6, rtol=0)
    # With positions, row i gets position i whatever token stands there: the model's own module
    # on the reordered ids, and no longer a permutation of the rows.
    _, X_shuffled = embed(RUNNING, model, tokenizer, order=order.tolist())
    torch.testing.assert_close(X_shuffled, _hf_embeddings(model, tokenizer, RUNNING, order), atol=1e-6, rtol=0)
    assert (X_shuffled - embed(RUNNING, model, tokenizer)[1][order]).abs().max() > 0.1
    # The identity order with positions is the default path: hidden_states[0] of the forward pass.
    torch.testing.assert_close(embed(RUNNING, model, tokenizer, order=tuple(range(T)))[1],
                               embed(RUNNING, model, tokenizer)[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("order,err,match", [
    ([0] * 13, ValueError, r"order must be a permutation of 0\.\.12 \(the text has 13 tokens"),
    (list(range(12)), ValueError, r"permutation of 0\.\.12"),
    (list(range(1, 14)), ValueError, r"permutation of 0\.\.12"),
    ([0.0] + list(range(1, 13)), TypeError, "order must hold ints, got float"),
    ([True] + list(range(1, 13)), TypeError, "order must hold ints, got bool"),
    (torch.arange(13.0), TypeError, "order must hold ints, got a tensor of dtype torch.float32"),
    (torch.arange(13)[None], ValueError, r"order must be 1-D \(13 positions\), got shape \(1, 13\)"),
    ("0123", TypeError, "order must be a list, tuple or 1-D integer tensor of 13 positions, got str"),
])
def test_embed_bad_order(encoder, order, err, match):
    with pytest.raises(err, match=match):
        embed(RUNNING, *encoder, positions=False, order=order)


def test_embed_bad_positions_and_training_mode(encoder):
    model, tokenizer = encoder
    with pytest.raises(TypeError, match="positions must be True or False, got str 'no'"):
        embed(RUNNING, model, tokenizer, positions="no")
    model.train()
    try:
        with pytest.raises(ValueError, match="training mode"):
            embed(RUNNING, model, tokenizer, positions=False)
    finally:
        model.eval()


def test_embed_without_positions_needs_an_absolute_position_table(encoder):
    from types import SimpleNamespace
    _, tokenizer = encoder
    rotary = SimpleNamespace(training=False, embeddings=None, device=torch.device("cpu"),
                             config=SimpleNamespace(position_embedding_type="rotary"))
    with pytest.raises(ValueError, match="BERT-style embedding layer.*position_embedding_type='rotary'"):
        embed(RUNNING, rotary, tokenizer, positions=False)


@pytest.mark.parametrize("bad,err", [("", ValueError), ("   ", ValueError), (3, TypeError), (None, TypeError)])
def test_embed_bad_input(encoder, bad, err):
    with pytest.raises(err):
        embed(bad, *encoder)


def test_head_projections_are_the_heads_column_blocks(encoder):
    model, _ = encoder
    for layer, head in [(0, 0), (3, 7), (5, 11)]:
        p = head_projections(model, layer, head)
        self_attn = model.encoder.layer[layer].attention.self
        for letter, lin in (("Q", self_attn.query), ("K", self_attn.key), ("V", self_attn.value)):
            blocks = lin.weight.detach().view(N_HEADS, D_K, -1)       # (H, d_k, d_model): rows of head h
            assert torch.equal(p[f"W_{letter}"], blocks[head].T)
            assert torch.equal(p[f"b_{letter}"], lin.bias.detach().view(N_HEADS, D_K)[head])
    neg = head_projections(model, -1, -1)
    assert all(torch.equal(neg[n], head_projections(model, 5, 11)[n]) for n in neg)


def test_head_projections_range_errors(encoder):
    with pytest.raises(IndexError, match=r"layer must be in 0..5 \(or -6..-1 from the end\), got 6"):
        head_projections(encoder[0], 6, 0)
    with pytest.raises(IndexError, match=r"head must be in 0..11 \(or -12..-1 from the end\), got 12"):
        head_projections(encoder[0], 0, 12)
    with pytest.raises(TypeError, match="head must be an int"):
        head_projections(encoder[0], 0, 1.5)


@pytest.mark.parametrize("layer", range(N_LAYERS))
def test_head_qkv_reproduces_eager_attention_in_every_layer(encoder, layer):
    """softmax(q k^T / sqrt(d_k)) from head_qkv equals the model's own eager weights in every
    layer (the input of layer l is hidden_states[l], not the embeddings), and the weights times
    v equal what the layer's self-attention outputs (a forward hook)."""
    model, tokenizer = encoder
    text = BEARS["object"]
    tokens, out = hf_outputs(encoder, text)
    context = hf_context(encoder, text, layer)                       # (H, T, d_v)
    for head in (0, 3, 7, 11):
        got_tokens, q, k, v = head_qkv(text, layer, head, model, tokenizer)
        assert got_tokens == tokens and q.shape == k.shape == v.shape == (len(tokens), D_K)
        weights = torch.softmax(q @ k.T / math.sqrt(D_K), dim=-1)
        torch.testing.assert_close(weights, out.attentions[layer][0, head], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(weights @ v, context[head], atol=1e-5, rtol=1e-4)
    _, q_all, k_all, v_all = head_qkv(text, layer, None, model, tokenizer)
    assert q_all.shape == (N_HEADS, len(tokens), D_K)
    weights_all = torch.softmax(q_all @ k_all.transpose(-2, -1) / math.sqrt(D_K), dim=-1)  # (H, T, T)
    torch.testing.assert_close(weights_all, out.attentions[layer][0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights_all @ v_all, context, atol=1e-5, rtol=1e-4)


def test_head_qkv_negative_layer_is_the_last_layers_input(encoder):
    model, tokenizer = encoder
    _, q5, k5, v5 = head_qkv(RUNNING, 5, 2, model, tokenizer)
    _, q, k, v = head_qkv(RUNNING, -1, -10, model, tokenizer)
    assert torch.equal(q, q5) and torch.equal(k, k5) and torch.equal(v, v5)


def test_head_qkv_bad_input(encoder):
    model, tokenizer = encoder
    with pytest.raises(TypeError, match="str"):
        head_qkv(42, 0, 0, model, tokenizer)
    with pytest.raises(ValueError, match="non-space"):
        head_qkv("   ", 0, 0, model, tokenizer)
    with pytest.raises(IndexError, match="layer must be in 0..5"):
        head_qkv("Hello there!", 6, 0, model, tokenizer)
    with pytest.raises(IndexError, match="head must be in 0..11"):
        head_qkv("Hello there!", 0, 12, model, tokenizer)
    with pytest.raises(TypeError, match="layer must be an int"):
        head_qkv("Hello there!", None, 0, model, tokenizer)


def test_project_qkv_checks_its_input(encoder):
    model, _ = encoder
    X = torch.randn(2, 5, 384)
    q, k, v = project_qkv(X, model, 0, None)
    assert q.shape == (2, N_HEADS, 5, D_K)
    q3, _, _ = project_qkv(X, model, 0, 3)
    assert torch.equal(q3, q[:, 3])
    with pytest.raises(TypeError, match="floating-point"):
        project_qkv(torch.ones(5, 384, dtype=torch.long), model, 0, 0)
    with pytest.raises(TypeError, match="model's dtype"):
        project_qkv(X.double(), model, 0, 0)
    with pytest.raises(ValueError, match=r"d_model = 384, got \(5, 383\)"):
        project_qkv(torch.randn(5, 383), model, 0, 0)
    with pytest.raises(ValueError, match=r"got \(384,\)"):
        project_qkv(torch.randn(384), model, 0, 0)
    with pytest.raises(ValueError, match="one device"):
        project_qkv(torch.randn(5, 384, device="meta"), model, 0, 0)


@pytest.mark.parametrize("layer", [0, 3, 5])
def test_head_outputs_are_the_layers_self_attention_output(encoder, layer):
    model, tokenizer = encoder
    text = BEARS["subject"]
    tokens, out = hf_outputs(encoder, text)
    x = out.hidden_states[layer][0]
    with torch.no_grad():
        v = model.encoder.layer[layer].attention.self.value(x)        # (T, H * d_v), an independent path
    v = torch.stack([v[:, h * D_K:(h + 1) * D_K] for h in range(N_HEADS)])  # (H, T, d_v)
    want = out.attentions[layer][0] @ v                               # eager weights x values
    got_tokens, got = head_outputs(text, layer, None, model, tokenizer)
    assert got_tokens == tokens and got.shape == (N_HEADS, len(tokens), D_K)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(head_outputs(text, layer, -1, model, tokenizer)[1], want[-1], atol=1e-5, rtol=1e-4)
    with pytest.raises(IndexError, match="head must be in 0..11"):
        head_outputs(text, layer, 12, model, tokenizer)


# --- read from a run ---------------------------------------------------------------------------

@pytest.mark.parametrize("layer", range(N_LAYERS))
def test_head_scores_softmax_is_the_models_attention(encoder, layer):
    model, tokenizer = encoder
    _, out = hf_outputs(encoder, BEARS["subject"])
    att = get_attentions(BEARS["subject"], model=model, tokenizer=tokenizer)
    for head in (2, 11):
        scores = head_scores(att, model, layer, head)
        torch.testing.assert_close(scores.softmax(dim=-1), out.attentions[layer][0, head], atol=1e-5, rtol=1e-4)
        assert attnlib.measures.asymmetry(scores).item() > 0.1  # W_Q != W_K, so the scores themselves are not symmetric


def test_head_scores_negative_and_bad_indices(encoder):
    model, tokenizer = encoder
    att = get_attentions(RUNNING, model=model, tokenizer=tokenizer)
    assert torch.equal(head_scores(att, model, -1, -1), head_scores(att, model, 5, 11))  # not hidden_states[-1]
    with pytest.raises(IndexError, match="layer must be in 0..5"):
        head_scores(att, model, 6, 0)
    with pytest.raises(IndexError, match="head must be in 0..11"):
        head_scores(att, model, 0, 12)
    with pytest.raises(TypeError, match="EncoderAttention"):
        head_scores(att.attentions, model, 0, 0)


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
    assert all_heads.shape == (12, len(att.tokens), len(att.tokens)) and not all_heads.requires_grad
    x = att.hidden_states[layer][0]
    with torch.no_grad():
        v_all = model.encoder.layer[layer].attention.self.value(x)  # (T, d_model), heads side by side
    total = dense.bias.detach().clone().expand(x.shape[0], -1).clone()
    for head in range(12):
        cols = slice(32 * head, 32 * head + 32)
        f = v_all[:, cols] @ dense.weight.detach()[:, cols].T  # (T, d_model)
        weights = att.head(layer, head)
        total += weights @ f
        norms = weighted_value_norms(att, model, layer, head)
        torch.testing.assert_close(norms, weights * f.norm(dim=-1), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(all_heads[head], norms)
    torch.testing.assert_close(total, captured["out"][0], atol=1e-4, rtol=1e-4)
    assert torch.equal(weighted_value_norms(att, model, -4, -1), weighted_value_norms(att, model, 2, 11))
    with pytest.raises(IndexError, match="layer must be in 0..5 .* got 6"):
        weighted_value_norms(att, model, 6)
    with pytest.raises(IndexError, match="head must be in 0..11 .* got 12"):
        weighted_value_norms(att, model, 0, 12)


def test_token_vectors_are_the_hidden_states_of_the_word(encoder):
    model, tokenizer = encoder
    texts = list(BEARS.values())
    positions, vectors = token_vectors(texts, "bears", model=model, tokenizer=tokenizer)
    assert positions == [4, 2, 2, 2] and vectors.shape == (4, 384)
    for text, pos, vec in zip(texts, positions, vectors):
        _, out = hf_outputs(encoder, text)
        assert torch.equal(vec, out.last_hidden_state[0, pos])
    _, first = token_vectors(texts[:1], "bears", layer=0, model=model, tokenizer=tokenizer)
    assert torch.equal(first[0], hf_outputs(encoder, texts[0])[1].hidden_states[0][0, 4])
    _, third = token_vectors(tuple(texts[:1]), "bears", layer=-4, model=model, tokenizer=tokenizer)
    assert torch.equal(third[0], hf_outputs(encoder, texts[0])[1].hidden_states[3][0, 4])
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
    kw = dict(model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="occurs 0 times"):
        token_vectors(["No such word here."], "bears", **kw)
    with pytest.raises(ValueError, match="occurs 2 times"):
        token_vectors(["Bears like bears."], "bears", **kw)
    with pytest.raises(IndexError, match=r"layer must be in 0..6 \(or -7..-1 from the end\), got 99"):
        token_vectors([text], "long", layer=99, **kw)
    with pytest.raises(TypeError, match="layer must be an int"):
        token_vectors([text], "long", layer="last", **kw)
    with pytest.raises(TypeError, match="wrap a single text in a list"):
        token_vectors(text, "long", **kw)
    with pytest.raises(ValueError, match="at least one text"):
        token_vectors([], "long", **kw)
    with pytest.raises(TypeError, match="word must be a str"):
        token_vectors([text], 3, **kw)
    with pytest.raises(ValueError, match="word must contain"):
        token_vectors([text], "  ", **kw)
    with pytest.raises(TypeError, match="text must be a str"):
        token_vectors([text, None], "long", **kw)


def test_encoder_attention_is_what_every_reader_returns(encoder):
    assert isinstance(get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1]), EncoderAttention)
    assert attnlib.encoder.EncoderAttention is EncoderAttention and attnlib.encoder.get_attentions is get_attentions
    for name in ("load_encoder", "embed", "head_projections", "get_attentions", "head_qkv", "token_vectors",
                 "layer_input", "project_qkv", "head_outputs", "get_batch_attentions"):
        assert not hasattr(attnlib, name), f"{name} reads the model: it lives in attnlib.encoder only"


# ---------------------------------------------------------------------- feed_forward
def test_feed_forward_against_the_written_formula_and_the_model():
    """Oracle 1: LayerNorm(h + GELU(h W1 + b1) W2 + b2) written out from the weights.
    Oracle 2: the model's own forward pass, whose layer output is the feed-forward block
    applied to the attention sub-layer's output (captured with a hook)."""
    import torch.nn.functional as F
    from attnlib.encoder import feed_forward
    model, tokenizer = attnlib.encoder.load_encoder()
    layer = 1
    block = model.encoder.layer[layer]
    captured = {}

    def keep(module, args, out):                                        # returns None: output untouched
        captured["h"] = (out[0] if isinstance(out, tuple) else out).detach()

    hook = block.attention.register_forward_hook(keep)
    try:
        att = attnlib.encoder.get_attentions(attnlib.corpus.RUNNING)
    finally:
        hook.remove()
    h = captured["h"][0]                                                # (T, d_model)
    ours = feed_forward(h, layer)
    assert torch.allclose(ours, att.hidden_states[layer + 1][0], atol=1e-5)
    inter, out = block.intermediate.dense, block.output
    written = F.layer_norm(h + F.gelu(h @ inter.weight.T + inter.bias) @ out.dense.weight.T + out.dense.bias,
                           (h.shape[-1],), out.LayerNorm.weight, out.LayerNorm.bias, out.LayerNorm.eps)
    assert torch.allclose(ours, written, atol=1e-5)


def test_feed_forward_is_position_wise():
    from attnlib.encoder import feed_forward
    tokens, X = attnlib.encoder.layer_input(attnlib.corpus.RUNNING, 1)
    changed = X.clone()
    changed[2] += 1.0
    diff = (feed_forward(changed, 1) - feed_forward(X, 1)).norm(dim=-1)
    assert diff[2] > 0.1 and torch.all(diff[torch.arange(len(tokens)) != 2] == 0)


@pytest.mark.parametrize("bad, layer, error", [
    (torch.zeros(3, 10), 0, ValueError), (torch.zeros(384), 0, ValueError),
    (torch.zeros(3, 384, dtype=torch.long), 0, TypeError), (torch.zeros(3, 384), 6, IndexError),
    (torch.zeros(3, 384), "0", TypeError),
])
def test_feed_forward_rejects(bad, layer, error):
    from attnlib.encoder import feed_forward
    with pytest.raises(error):
        feed_forward(bad, layer)


def test_token_vectors_refuses_a_word_the_tokenizer_does_not_know(encoder):
    """token_vectors(["I like 😀 a lot."], "🚀") returned the 😀's [UNK] as if the rocket were
    there (issue 29): a word that becomes [UNK] is refused, naming why."""
    model, tokenizer = encoder
    assert tokenizer.tokenize("\U0001F680") == [tokenizer.unk_token]
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        token_vectors(["I like \U0001F600 a lot."], "\U0001F680", model=model, tokenizer=tokenizer)


# --- errors found by fuzzing (issue 29): each names what was expected and what arrived -------
@pytest.mark.parametrize("name, content, match", [
    ("config.json", '{"model_type": "bert", "hidden_size": ', r"config\.json is corrupt: it is not valid JSON"),
    ("tokenizer.json", '{"version": "1.0", "truncation', r"tokenizer\.json is corrupt: it is not valid JSON"),
])
def test_corrupt_json_in_a_model_folder_is_named(model_copy, fresh_cache, name, content, match):
    """It said the Hub could not be reached (config.json) or raised a bare JSONDecodeError
    (tokenizer.json)."""
    (model_copy / name).write_text(content)
    with pytest.raises(ValueError, match=match):
        load_encoder(model_copy, device="cpu")


def test_damaged_weights_in_a_user_folder_are_named_not_blamed_on_the_hub(model_copy, fresh_cache):
    (model_copy / "model.safetensors").unlink()
    (model_copy / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"could not load the model folder .*missing or damaged \(SafetensorError"):
        load_encoder(model_copy, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_refused_before_any_file_is_read(monkeypatch, fresh_cache):
    read = []
    monkeypatch.setattr(enc_mod, "verify_files", lambda *a, **k: read.append(a))
    with pytest.raises(ValueError, match=r"device 'cuda' asks for CUDA, which this machine does not have"):
        load_encoder(device="cuda")
    assert read == []


def _nan32():
    return torch.full((32,), float("nan"))


@pytest.mark.parametrize("call, err, match", [
    (lambda m, t: readers.head_projections(None, 0, 0), TypeError, r"model must be a BERT-family encoder .*got NoneType"),
    (lambda m, t: readers.head_projections(t, 0, 0), TypeError, r"model must be a BERT-family encoder .*got BertTokenizer"),
    (lambda m, t: readers.get_attentions("a cat", model=t, tokenizer=m), TypeError, r"model must be a Hugging Face model .*got BertTokenizer"),
    (lambda m, t: readers.get_attentions("a cat", model=m, tokenizer=m), TypeError, r"tokenizer must be a Hugging Face tokenizer .*got BertModel"),
    (lambda m, t: readers.head_scores(readers.get_attentions("a cat", model=m, tokenizer=t), None, 0, 0), TypeError, r"model must be .*got NoneType"),
    (lambda m, t: readers.weighted_value_norms(readers.get_attentions("a cat", model=m, tokenizer=t), "bert", 0), TypeError, r"model must be .*got str"),
    (lambda m, t: readers.feed_forward(torch.randn(3, 384), 0, t), TypeError, r"model must be .*got BertTokenizer"),
    (lambda m, t: readers.project_qkv(torch.randn(3, 384), None, 0), TypeError, r"model must be .*got NoneType"),
    (lambda m, t: readers.ablated_outputs("a cat", 0, 0, replacement=float("nan"), model=m, tokenizer=t), TypeError,
     r"replacement must be a \(32,\) tensor .*got the number nan"),
    (lambda m, t: readers.ablated_outputs("a cat", 0, 0, replacement=_nan32(), model=m, tokenizer=t), ValueError,
     r"replacement must be finite; entries \[0, 1, 2, 3, 4\] \.\.\. are NaN or infinite"),
    (lambda m, t: readers.ablated_outputs("a cat", 0, 0, replacement=torch.zeros(5), model=m, tokenizer=t), ValueError,
     r"must be a \(32,\) tensor .*got shape \(5,\)"),
    (lambda m, t: readers.ablated_outputs("a cat", 0, 0, replacement=torch.empty(32, device="meta"), model=m, tokenizer=t),
     ValueError, r"replacement is a meta tensor"),
    (lambda m, t: verify_files(None), TypeError, r"folder must be a str or path of a model folder, got NoneType"),
    (lambda m, t: file_manifest(None), TypeError, r"folder must be a str or path of a model folder, got NoneType"),
    (lambda m, t: load_encoder("/no/such/folder", device="cpu"), FileNotFoundError, r"no model folder at /no/such/folder"),
])
def test_bad_arguments_get_errors_that_name_the_problem(encoder, call, err, match):
    with pytest.raises(err, match=match):
        call(*encoder)
