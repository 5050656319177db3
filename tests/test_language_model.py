"""The course's language model (attnlib.language_model, issue 43): SmolLM2-135M-Instruct read from
its 4-bit GGUF file and run by attnlib's own parts, against Hugging Face's LlamaForCausalLM
(eager attention) loading the same file; the tokenizer against the file's tokenizer as
transformers builds it; the run, the edits and the KV cache against independent references.

The prompts are drawn with a seeded generator from the course's real texts and from the whole
vocabulary; none is written here by hand."""
from __future__ import annotations

import copy
import math
import random

import pytest
import torch

from attnlib import corpus, kv_head_of
from attnlib import language_model as lm

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return lm.load()


@pytest.fixture(scope="module")
def hf():
    """transformers' Llama on the same GGUF file, eager attention (it forms the weights)."""
    from transformers import AutoModelForCausalLM
    path = lm.gguf_path()
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, torch_dtype=torch.float32,
                                                attn_implementation="eager").eval()


def _texts() -> list[str]:
    return [corpus.load_text(name) for name in ("gettysburg",)] + corpus.reference_sentences() + \
        [t for pair in corpus.COREFERENCE_PAIRS for t in pair[:2]]


def _prompts(n: int = 4, seed: int = 43) -> list[torch.Tensor]:
    """Seeded prompts: windows of real text (random start and length) and random token ids."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    words = " ".join(_texts()).split()
    out = []
    for _ in range(n):
        start, length = rng.randrange(len(words) - 60), rng.randint(5, 40)
        out.append(lm.encode(" ".join(words[start:start + length])))
    out.append(torch.randint(lm.LMConfig().vocab_size, (24,), generator=g))
    return out


# ------------------------------------------------------------------ the oracle
def test_logits_and_every_layers_weights_equal_transformers(model, hf):
    worst_logit = worst_weight = 0.0
    for tokens in _prompts():
        with torch.no_grad():
            want = hf(tokens[None], output_attentions=True)
        got = lm.run(model, tokens)
        worst_logit = max(worst_logit, float((got.logits - want.logits).abs().max()))
        for layer in range(model.n_layers):
            worst_weight = max(worst_weight, float((got.pattern[layer] - want.attentions[layer]).abs().max()))
    assert worst_logit <= 1e-4 and worst_weight <= 1e-4, (worst_logit, worst_weight)


def test_the_weights_are_the_files_dequantized_values(model, hf):
    """Every matrix equals transformers' reading of the file exactly (same dequantization; W_Q
    and W_K put back in rotate-half order), and the read-out is the token embedding (tied)."""
    ours = lm.from_transformers(hf).state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(value, ours[name]), name
    assert model.config == lm.LMConfig() and sum(p.numel() for p in model.parameters()) == 134_515_008


def test_the_tokenizer_is_the_files_on_real_text():
    """On the course's own pages (prose, code, LaTeX, tables, Unicode: about 700 KB) and its texts."""
    from pathlib import Path
    from transformers import AutoTokenizer
    path = lm.gguf_path()
    theirs = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    root = Path(__file__).resolve().parents[1]
    text = "\n".join([p.read_text(encoding="utf-8") for p in sorted((root / "chapters").glob("*.md"))] + _texts())
    ours = lm.tokenizer().encode(text)
    assert ours == theirs(text)["input_ids"] and len(ours) > 100_000
    for sentence in _texts()[1:]:
        assert lm.encode(sentence).tolist() == theirs(sentence)["input_ids"]
        assert lm.tokenizer().decode(lm.encode(sentence)) == sentence
    assert lm.encode(" Mary").tolist() == [5099]                      # one token, with its space


# ------------------------------------------------------------------ the run
def test_a_run_reads_the_forward_pass_many_ways(model):
    tokens = _prompts(1)[0]
    r = lm.run(model, tokens)
    logits, weights = model(tokens)
    assert torch.equal(r.logits, logits) and all(torch.equal(a, b) for a, b in zip(r.pattern, weights))
    T = tokens.shape[0]
    assert r.n_layers == 30 and r.n_heads == 9 and len(r.resid_pre) == 31
    assert tuple(r.q[0].shape) == (1, 9, T, 64) and tuple(r.k[0].shape) == (1, 3, T, 64) == tuple(r.v[0].shape)
    for layer in (0, 17, 29):
        torch.testing.assert_close(torch.softmax(r.attn_scores[layer], -1), r.pattern[layer], atol=1e-6, rtol=1e-5)
        v = r.v[layer].repeat_interleave(3, dim=1)                      # query head h reads v head h // 3
        torch.testing.assert_close(r.z[layer], r.pattern[layer] @ v, atol=1e-5, rtol=1e-5)
        assert torch.equal(r.head("k", layer, 7), r.k[layer][:, kv_head_of(7, 9, 3)])
    torch.testing.assert_close(model.norm(r.resid_pre[-1]) @ model.embed.weight.T, r.logits)


def test_decoding_with_the_kv_cache_equals_the_full_pass(model):
    """Token by token with attnlib's KVCache (3 key/value heads per layer, not 9) against one
    full pass over the same tokens: within 1e-5 in float64 (the mechanism), and within float32
    rounding in float32 (matrix products of another shape round differently; over 30 layers the
    logits, of size about 20, move by up to 1e-4)."""
    tokens = _prompts(1, seed=7)[0]
    for dtype, tol in ((torch.float64, 1e-5), (torch.float32, 3e-4)):
        m = copy.deepcopy(model).to(dtype) if dtype != torch.float32 else model
        full, _ = m(tokens)
        cache = m.new_cache()
        steps = [m(tokens[i:i + 1][None], cache=cache)[0][0, -1] for i in range(len(tokens))]
        torch.testing.assert_close(torch.stack(steps), full[0], atol=tol, rtol=0)
        assert all(c.keys.shape == (1, 3, len(tokens), 64) and c.keys.dtype == dtype for c in cache)
        del m
    assert lm.generate(model, tokens, 5).tolist() == lm.generate(model, tokens, 5, use_cache=False).tolist()


def _zeroed_columns(model, layer: int, head: int, constant=None):
    """A copy whose query head's block of W_O reads a constant (zeros by default): its columns
    zeroed and, for a constant c, W_O[:, head] c added as a bias (a Linear without one gets it)."""
    other = copy.deepcopy(model)
    o = other.blocks[layer].attn.o_proj
    cols = slice(head * model.d_head, (head + 1) * model.d_head)
    with torch.no_grad():
        shift = None if constant is None else o.weight[:, cols] @ constant
        o.weight[:, cols] = 0
    if shift is not None:
        o.register_forward_hook(lambda module, args, out: out + shift)
    return other


def test_zero_and_mean_ablation_equal_models_built_by_hand(model, hf):
    tokens = _prompts(1, seed=3)[0]
    layer, head = 17, 4
    zero = lm.run(model, tokens, edits=[{"layer": layer, "head": head, "mode": "zero"}]).logits
    torch.testing.assert_close(zero, _zeroed_columns(model, layer, head)(tokens)[0], atol=1e-5, rtol=1e-5)
    # the mean: from transformers' own o_proj input, over every token of the reference sentences
    captured = []
    hook = hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(lambda m, a: captured.append(a[0][0]))
    try:
        with torch.no_grad():
            for text in corpus.reference_sentences():
                hf(lm.encode(text)[None])
    finally:
        hook.remove()
    mean = torch.cat(captured).view(-1, 9, 64)[:, head].mean(0)
    got = lm.run(model, tokens, edits=[{"layer": layer, "head": head, "mode": "mean"}]).logits
    torch.testing.assert_close(got, _zeroed_columns(model, layer, head, mean)(tokens)[0], atol=1e-4, rtol=1e-4)


def test_patching_invariants(model):
    clean, corrupt = lm.encode("When Mary and John went to the store, John gave a drink to"), \
        lm.encode("When Mary and John went to the store, Mary gave a drink to")
    assert clean.shape == corrupt.shape and int((clean != corrupt).sum()) == 1
    c, x = lm.run(model, clean), lm.run(model, corrupt)
    same = lm.run(model, clean, edits=[{"layer": 20, "head": 3, "mode": "patch", "source": c}])
    assert torch.equal(same.logits, c.logits)                           # a head patched with itself
    back = lm.run(model, corrupt, edits=[{"layer": 12, "head": None, "mode": "patch", "source": c}])
    torch.testing.assert_close(back.logits, c.logits, atol=1e-4, rtol=1e-4)   # the whole stream: the clean run
    p = int((clean != corrupt).nonzero())
    early = lm.run(model, corrupt, edits=[{"layer": 5, "head": None, "mode": "patch", "source": c, "position": p}])
    assert torch.equal(early.logits[0, :p], x.logits[0, :p])            # nothing before the patched position moves


def test_bad_input_is_named(model, monkeypatch):
    with pytest.raises(TypeError, match="int64 tensor of ids"):
        lm.run(model, [1, 2, 3])
    with pytest.raises(ValueError, match="token ids must lie in 0..49151"):
        lm.run(model, torch.tensor([49152]))
    with pytest.raises(TypeError, match="LanguageModel"):
        lm.run("model", torch.tensor([1]))
    with pytest.raises(ValueError, match="at least one non-space character"):
        lm.encode("")
    monkeypatch.setattr(lm, "GGUF_SHA256", "0" * 64)
    lm._sha256.cache_clear()
    with pytest.raises(ValueError, match="not the file the course was written for"):
        lm.gguf_path()


def test_many_edited_runs_at_once_equal_one_run_each(model):
    """run_variants (each item its own edits, through edits.graph_inputs, in batches) against
    run(edits=...) one list at a time, for every kind of edit and a mix."""
    clean, corrupt = lm.encode("When Mary and John went to the store, John gave a drink to"), \
        lm.encode("When Mary and John went to the store, Mary gave a drink to")
    source = lm.run(model, clean)
    lists = [[], [{"layer": 3, "head": 2, "mode": "zero"}], [{"layer": 20, "head": -1, "mode": "mean", "position": -1}],
             [{"layer": 14, "head": 5, "mode": "patch", "source": source}],
             [{"layer": 9, "head": None, "mode": "patch", "source": source, "position": 10}],
             [{"layer": 30, "head": None, "mode": "patch", "source": source, "position": -1},
              {"layer": 0, "head": 0, "mode": "zero"}, {"layer": 29, "head": 8, "mode": "patch", "source": source}]]
    batched = lm.run_variants(model, corrupt, lists, batch_size=4)
    for edits, got in zip(lists, batched):
        torch.testing.assert_close(got, lm.run(model, corrupt, edits=edits).logits[0], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(lm.run_variants(model, corrupt, lists, last=True), batched[:, -1])


def test_the_patching_sweep_is_the_single_runs_and_names_bad_pairs(model):
    """patch_sweep's tables are the metric of single patched runs (spot-checked: heads and
    positions drawn with a seeded generator), its normalisation is patching.normalised's, and a
    bad pair or answer is named."""
    from attnlib import patching
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    layers = [0, 11, 23, 30]                       # a few layers: the whole sweep is 1,400 runs
    sweep = lm.patch_sweep(model, clean, corrupt, [" Mary", " John"], layers=layers)
    assert sweep["layers"] == layers and tuple(sweep["denoise"]["heads"].shape) == (3, 9)
    assert tuple(sweep["noise"]["resid"].shape) == (4, 14)
    a, b = lm.encode(clean), lm.encode(corrupt)
    good, bad = lm.answer_token(" Mary"), lm.answer_token(" John")

    def metric(tokens, edits):
        logits = lm.run(model, tokens, edits=edits).logits[0, -1]
        return float(logits[good] - logits[bad])

    assert sweep["position"] == 9 and sweep["clean"] > 3 > -3 > sweep["corrupted"] and sweep["problem"] is None
    source = {"denoise": lm.run(model, a), "noise": lm.run(model, b)}
    base = {"denoise": b, "noise": a}
    g = torch.Generator().manual_seed(11)
    for direction in ("denoise", "noise"):
        for _ in range(2):
            i, h = int(torch.randint(3, (1,), generator=g)), int(torch.randint(9, (1,), generator=g))
            want = metric(base[direction], [{"layer": layers[i], "head": h, "mode": "patch", "source": source[direction]}])
            assert abs(float(sweep[direction]["heads"][i, h]) - want) < 1e-3
            i, t = int(torch.randint(4, (1,), generator=g)), int(torch.randint(a.numel(), (1,), generator=g))
            want = metric(base[direction], [{"layer": layers[i], "head": None, "mode": "patch", "source": source[direction],
                                              "position": t}])
            assert abs(float(sweep[direction]["resid"][i, t]) - want) < 1e-3
    # the stream at the changed position, early, carries the whole difference; at the last position, late, too
    torch.testing.assert_close(sweep["normalised"]["denoise"]["resid"][0, 9], torch.tensor(1.0, dtype=torch.float64), atol=1e-3, rtol=0)
    torch.testing.assert_close(sweep["normalised"]["denoise"]["resid"][3, -1], torch.tensor(1.0, dtype=torch.float64), atol=1e-3, rtol=0)
    torch.testing.assert_close(sweep["normalised"]["noise"]["heads"],
                               patching.normalised(sweep["noise"]["heads"], sweep["clean"], sweep["corrupted"]))
    with pytest.raises(ValueError, match="same number of tokens"):
        lm.patch_sweep(model, clean, "When Mary and John went to the big store, John gave a drink to", [" Mary", " John"])
    with pytest.raises(ValueError, match="differ in exactly one token; they differ in 0"):
        lm.patch_sweep(model, clean, clean, [" Mary", " John"])
    with pytest.raises(ValueError, match="must be one token"):
        lm.patch_sweep(model, clean, corrupt, [" Mary", " Johnathan Smithers"])


def test_head_scores_follow_their_definitions_on_hand_made_patterns():
    """Patterns built by hand (a perfect induction head, a previous-token head, a sink, a uniform
    head) get the scores their definitions give, and the uniform head its baselines."""
    T, n = 8, 4
    induction, previous, sink = torch.zeros(T, T), torch.zeros(T, T), torch.zeros(T, T)
    for i in range(T):
        induction[i, i - n + 1 if i >= n else i] = 1
        previous[i, max(i - 1, 0)] = 1
        sink[i, 0] = 1
    uniform = torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None]
    w = [torch.stack([induction, previous, sink, uniform])[None]]        # one layer, 4 heads, B = 1
    s = lm.head_scores(w)
    assert s["induction"][0].tolist()[:3] == [1.0, 0.0, 0.0] and s["previous"][0, 1] == 1 and s["first"][0, 2] == 1
    assert abs(float(s["induction"][0, 3]) - s["uniform_induction"]) < 1e-6
    assert abs(float(s["previous"][0, 3]) - s["uniform_previous"]) < 1e-6
    assert abs(s["uniform_induction"] - sum(1 / (i + 1) for i in range(n, T)) / n) < 1e-12
    with pytest.raises(ValueError, match="even length"):
        lm.head_scores([torch.zeros(1, 1, 5, 5)])


def test_the_model_copies_on_repeated_random_tokens(model):
    """On repeated random tokens the second copy is predicted far better than the first, and
    some heads put most of their weight where induction would (a held-out check of what the
    module docstring and the chapter report: seeds other than the bench's)."""
    tokens = lm.repeated_random_tokens(4, 20, seed=101)
    assert torch.equal(tokens[:, :20], tokens[:, 20:]) and int(tokens.min()) >= lm.FIRST_ORDINARY_TOKEN
    r = lm.run(model, tokens)
    loss = torch.nn.functional.cross_entropy(r.logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(),
                                             reduction="none").view(4, -1)
    assert float(loss[:, 20:].mean()) < float(loss[:, :19].mean()) / 2
    s = lm.head_scores(r.pattern)
    assert float(s["induction"].max()) > 10 * s["uniform_induction"]


def test_ioi_pairs_change_one_token_and_name_their_positions():
    """ioi_pair: the corrupted prompt differs from the clean one in one token, S2, which becomes
    IO; name_positions finds IO, S1, S2 and END in the tokens; bad input is named."""
    for name, pairs in lm.ioi_sets().items():
        assert len(pairs) == 4, name
        for p in pairs:
            a, b = lm.encode(p["clean"]), lm.encode(p["corrupted"])
            assert a.shape == b.shape and int((a != b).sum()) == 1
            at = lm.name_positions(a.tolist(), p)
            toks = [lm.tokenizer().token(i) for i in a.tolist()]
            assert toks[at["IO"]] == " " + p["io"] and toks[at["S1"]] == toks[at["S2"]] == " " + p["s"]
            assert at["IO"] < at["S1"] < at["S2"] < at["END"] == len(toks) - 1
            assert int((a != b).nonzero()) == at["S2"] and lm.tokenizer().token(int(b[at["S2"]])) == " " + p["io"]
            assert p["answers"] == [" " + p["io"], " " + p["s"]]
    with pytest.raises(KeyError, match="template must be one of"):
        lm.ioi_pair("Mary", "John", "C")
    with pytest.raises(ValueError, match="expected ' Mary' once and ' Bob' twice"):
        lm.name_positions(lm.encode("Mary met John.").tolist(), {"io": "Mary", "s": "Bob"})
