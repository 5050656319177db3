"""attnlib.induction and the attention-only TinyTransformer: the scores are what their
definitions say (hand-built patterns give known scores), ablation removes exactly the named
head (against a forward pass written with PyTorch's own fused attention), training is seeded
and reproducible, and bad inputs raise clear errors.  The full training run's figures are
checked over five seeds by bench/bench_induction.py, not here (no timed or long tests)."""
import math

import pytest
import torch
import torch.nn.functional as F

from attnlib import explorables, induction
from attnlib.corpus import load_text, words_of
from attnlib.edits import head_means
from attnlib.transformer import STATIC_BOOK_ENV, TinyTransformer, run

T = induction.SEQ_LEN
V = len(induction.vocabulary())


def small_model(n_layers=2, seed=0):
    return TinyTransformer(V, d_model=16, n_heads=2, n_layers=n_layers, max_len=T, seed=seed)


# ------------------------------------------------------------------ data
def test_vocabulary_is_the_speech():
    words = words_of(load_text("gettysburg"))
    assert induction.vocabulary() == sorted(set(words))
    assert induction.decode(induction.encode(words[:6])) == words[:6]
    with pytest.raises(ValueError, match="vocabulary"):
        induction.encode(["four", "zebra"])
    with pytest.raises(TypeError, match="list of words"):
        induction.encode("four score")


def test_repeated_sequences_are_distinct_words_repeated_once():
    x = induction.repeated_sequences(20, seed=3)
    assert x.shape == (20, T) and x.dtype == torch.long
    half = T // 2
    assert torch.equal(x[:, :half], x[:, half:])
    assert all(len(set(row[:half].tolist())) == half for row in x)
    assert torch.equal(x, induction.repeated_sequences(20, seed=3))
    assert not torch.equal(x, induction.repeated_sequences(20, seed=4))


def test_text_sequences_are_windows_of_the_speech_in_order():
    words = " ".join(words_of(load_text("gettysburg")))
    for row in induction.text_sequences(10, seed=1):
        assert " ".join(induction.decode(row)) in words


def _longest_repeat(row):
    """(length, distance) of the longest span that occurs twice without overlapping."""
    best = (0, 0)
    n = len(row)
    for d in range(1, n):
        run = 0
        for i in range(d, n):
            run = run + 1 if row[i] == row[i - d] else 0
            if run > best[0] and run <= d:
                best = (run, d)
    return best


def test_training_batches_repeat_a_span_at_varying_distances():
    x = induction.training_batch(64, torch.Generator().manual_seed(0))
    assert x.shape == (64, T) and int(x.max()) < V
    found = [_longest_repeat(row.tolist()) for row in x]
    assert all(length >= induction.SPAN_MIN for length, _ in found)
    distances = {d for _, d in found}
    assert len(distances) > 5, distances            # no fixed distance back solves the task
    assert sum(d > length for length, d in found) > 16, "the copy must often land after a gap"
    again = induction.training_batch(64, torch.Generator().manual_seed(0))
    assert torch.equal(x, again)


# ------------------------------------------------------------------ scores from hand-built patterns
class Patterned(TinyTransformer):
    """A TinyTransformer whose attention is a hand-built pattern computed from the tokens
    (an oracle independent of positions): per layer, one pattern per head."""

    def __init__(self, patterns):
        super().__init__(V, d_model=8, n_heads=len(patterns[0]), n_layers=len(patterns), max_len=T)
        self.patterns = patterns

    def forward(self, tokens, edits=()):
        B, n = tokens.shape
        weights = [torch.stack([torch.stack([make(row.tolist()) for row in tokens]) for make in layer], dim=1)
                   for layer in self.patterns]                               # each (B, H, n, n)
        return torch.zeros(B, n, V), weights


def induction_pattern(row):
    """Each query attends to the token after the last earlier occurrence of its token, else to itself."""
    n = len(row)
    w = torch.zeros(n, n)
    for i, tok in enumerate(row):
        earlier = [j for j in range(i) if row[j] == tok]
        w[i, earlier[-1] + 1 if earlier else i] = 1.0
    return w


def previous_pattern(row):
    n = len(row)
    w = torch.zeros(n, n)
    w[0, 0] = 1.0
    for i in range(1, n):
        w[i, i - 1] = 1.0
    return w


def uniform_pattern(row):
    n = len(row)
    w = torch.ones(n, n).tril()
    return w / w.sum(-1, keepdim=True)


def test_hand_built_heads_get_the_scores_their_definitions_give():
    model = Patterned([[previous_pattern, uniform_pattern], [induction_pattern, previous_pattern]])
    ind = induction.induction_scores(model)
    prev = induction.previous_token_scores(model)
    assert ind.shape == prev.shape == (2, 2)
    assert ind[1, 0] == pytest.approx(1.0)                          # perfect induction head
    assert ind[0, 0] == pytest.approx(0.0) and ind[1, 1] == pytest.approx(0.0)  # previous token: never
    assert ind[0, 1] == pytest.approx(induction.uniform_induction_score(), abs=1e-6)
    assert prev[0, 0] == pytest.approx(1.0) and prev[1, 1] == pytest.approx(1.0)
    assert prev[0, 1] == pytest.approx(induction.uniform_previous_score(), abs=1e-6)
    # the positional baseline: an induction head has nothing to find without a repeat
    base = induction.offset_baseline(model)
    assert base[1, 0] == pytest.approx(0.0) and base[0, 1] == pytest.approx(induction.uniform_induction_score(), abs=1e-6)


def test_uniform_scores_match_their_formula():
    assert induction.uniform_induction_score(4) == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert induction.uniform_previous_score(3) == pytest.approx((1 / 2 + 1 / 3) / 2)
    with pytest.raises(ValueError, match="even"):
        induction.uniform_induction_score(5)


def test_a_real_model_with_zero_queries_attends_uniformly():
    """Zero query projections make every score equal: the causal softmax is then uniform and
    the scores must equal their uniform baselines."""
    model = small_model()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.zero_()
            block.attn.q_proj.bias.zero_()
    torch.testing.assert_close(induction.induction_scores(model),
                               torch.full((2, 2), induction.uniform_induction_score()), atol=1e-6, rtol=0)
    torch.testing.assert_close(induction.previous_token_scores(model),
                               torch.full((2, 2), induction.uniform_previous_score()), atol=1e-6, rtol=0)


# ------------------------------------------------------------------ ablation against an independent forward pass
def reference_forward(model, tokens, ablate=()):
    """The model's forward pass written with F.scaled_dot_product_attention (PyTorch's fused
    kernel), with the named heads' outputs set to zero before W_O."""
    x = model.tok_emb(tokens) + model.pos_emb(torch.arange(tokens.shape[1]))
    for layer, block in enumerate(model.blocks):
        h = block.ln_attn(x)
        attn = block.attn
        B, n, d = h.shape
        q, k, v = (lin(h).view(B, n, attn.n_heads, attn.d_head).transpose(1, 2)
                   for lin in (attn.q_proj, attn.k_proj, attn.v_proj))
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)      # (B, H, n, d_head)
        for l, hd in ablate:
            if l == layer:
                heads[:, hd] = 0.0
        x = x + attn.out_proj(heads.transpose(1, 2).reshape(B, n, d))
    return model.unembed(model.ln_out(x))


@pytest.mark.parametrize("ablate", [(), [(0, 0)], [(0, 1)], [(1, 0)], [(1, 1)], [(0, 1), (1, 0)]])
def test_ablation_removes_exactly_the_named_heads(ablate):
    model = small_model(seed=2).eval()
    tokens = induction.repeated_sequences(4, seed=0)
    with torch.no_grad():
        logits = run(model, tokens, edits=[{"layer": l, "head": h, "mode": "zero"} for l, h in ablate]).logits
        expected = reference_forward(model, tokens, ablate)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_ablation_leaves_other_heads_and_earlier_layers_alone():
    model = small_model(seed=1).eval()
    tokens = induction.repeated_sequences(3, seed=1)
    with torch.no_grad():
        _, intact = model(tokens)
        late = run(model, tokens, edits=[{"layer": 1, "head": 0, "mode": "zero"}]).pattern
        early = run(model, tokens, edits=[{"layer": 0, "head": 1, "mode": "zero"}]).pattern
    assert all(torch.equal(a, b) for a, b in zip(intact, late))         # layer 1's outputs feed nothing's weights
    assert torch.equal(intact[0], early[0]) and not torch.allclose(intact[1], early[1])


def test_mean_ablation_uses_the_given_means():
    model = small_model(seed=4).eval()
    tokens = induction.repeated_sequences(3, seed=2)
    means = head_means(run(model, tokens))
    assert means.shape == (2, 2, 8)
    with torch.no_grad():
        mean = lambda source: [{"layer": 1, "head": 1, "mode": "mean", "source": source}]    # noqa: E731
        zero = run(model, tokens, edits=[{"layer": 1, "head": 1, "mode": "zero"}]).logits
        by_zero_means = run(model, tokens, edits=mean(torch.zeros_like(means))).logits
        by_means = run(model, tokens, edits=mean(means)).logits
    torch.testing.assert_close(zero, by_zero_means)
    assert not torch.allclose(zero, by_means)
    loss_zero = induction.repeated_loss(model, [{"layer": 1, "head": 1, "mode": "zero"}])
    loss_mean = induction.repeated_loss(model, [{"layer": 1, "head": 1, "mode": "mean"}])
    assert math.isfinite(loss_zero) and math.isfinite(loss_mean) and loss_zero != loss_mean


def test_repeated_loss_matches_cross_entropy_on_each_half():
    model = small_model(seed=5).eval()
    tokens = induction.repeated_sequences(induction.N_HELD_OUT, seed=0)
    with torch.no_grad():
        logits = reference_forward(model, tokens, [(1, 0)])
    n = T // 2
    second = F.cross_entropy(logits[:, n:-1].reshape(-1, V), tokens[:, n + 1:].reshape(-1)).item()
    first = F.cross_entropy(logits[:, :n - 1].reshape(-1, V), tokens[:, 1:n].reshape(-1)).item()
    assert induction.repeated_loss(model, [{"layer": 1, "head": 0, "mode": "zero"}]) == pytest.approx(second, rel=1e-5)
    assert induction.repeated_loss(model, [{"layer": 1, "head": 0, "mode": "zero"}], half="first") == pytest.approx(first, rel=1e-5)


# ------------------------------------------------------------------ training
def test_short_training_is_seeded_and_reproducible():
    # cache=False: the second run must train, not load the first from the trained-model cache
    m1, h1 = induction.train(n_layers=1, seed=3, steps=6, progress=False, cache=False)
    m2, h2 = induction.train(n_layers=1, seed=3, steps=6, progress=False, cache=False)
    m3, h3 = induction.train(n_layers=1, seed=4, steps=6, progress=False, cache=False)
    assert len(h1["loss"]) == 6 and h1["loss"] == h2["loss"] and h1["loss"] != h3["loss"]
    for (name, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), name
    assert h1["probe_step"] == [0, 6] and len(h1["induction"]) == 2 and h1["induction"][0].shape == (1, induction.N_HEADS)
    assert h1["config"] == induction.TrainConfig(n_layers=1, seed=3, steps=6, vocab_size=V, device="cpu") and not m1.training
    assert h1["loss"][-1] < h1["loss"][0]                              # it learns something
    # the first step's loss is the untrained model's on the first batch of the seeded stream
    batch = induction.training_batch(induction.BATCH_SIZE, torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, _ = induction.build_model(1, 3)(batch)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, V), batch[:, 1:].reshape(-1)).item()
    assert h1["loss"][0] == pytest.approx(expected, rel=1e-5)


def test_trained_reuses_the_last_run(monkeypatch):
    monkeypatch.setattr(induction, "STEPS", 3)
    model, history = induction.train(n_layers=1, seed=9, progress=False)
    assert induction.trained(1, 9)[0] is model


def test_static_book_prints_one_line(monkeypatch, capsys):
    monkeypatch.setenv(STATIC_BOOK_ENV, "1")
    induction.train(n_layers=1, seed=0, steps=2, progress=True, cache=False)
    out = capsys.readouterr()
    assert "1-layer model, seed 0: 2 steps in" in out.out and "\r" not in out.err


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("call, error, match", [
    (lambda m: induction.induction_scores("model"), TypeError, "TinyTransformer"),
    (lambda m: induction.induction_scores(m, seed=-1), ValueError, "non-negative"),
    (lambda m: induction.induction_scores(m, seed=1.5), TypeError, "seed"),
    (lambda m: induction.previous_token_scores(None), TypeError, "TinyTransformer"),
    (lambda m: induction.repeated_loss(m, [{"layer": 2, "head": 0, "mode": "zero"}]), IndexError, "layer"),
    (lambda m: induction.repeated_loss(m, [{"layer": 0, "head": 5, "mode": "zero"}]), IndexError, "head"),
    (lambda m: induction.repeated_loss(m, [1]), TypeError, "must be an object such as"),
    (lambda m: induction.repeated_loss(m, "0,1"), TypeError, "must be a list of edits"),
    (lambda m: induction.repeated_loss(m, [{"layer": 0, "head": 0, "mode": "patch"}]), ValueError, "needs a source"),
    (lambda m: induction.repeated_loss(m, [{"layer": 0, "head": None, "mode": "patch", "source": None}]), ValueError, "source"),
    (lambda m: induction.repeated_loss(m, half="third"), ValueError, "half"),
    (lambda m: induction.train(n_layers=0), ValueError, "n_layers"),
    (lambda m: induction.train(steps=1.5), TypeError, "steps"),
    (lambda m: induction.train(progress="yes"), TypeError, "progress"),
    (lambda m: induction.train(cache="yes"), TypeError, "cache"),
    (lambda m: m(torch.zeros(1, 4)), TypeError, "int64"),
    (lambda m: m(torch.zeros(1, T + 1, dtype=torch.long)), ValueError, "1 <= T"),
    (lambda m: m(torch.full((1, 4), V)), ValueError, "token ids"),
    (lambda m: run(m, torch.zeros(1, 4, dtype=torch.long), edits=[{"layer": 0, "head": 0, "mode": "mean",
                                                                   "source": torch.zeros(2, 2, 3, dtype=torch.long)}]),
     ValueError, "floating point"),
    (lambda m: TinyTransformer(V, d_model=10, n_heads=3), ValueError, "divisible"),
    (lambda m: induction.induction_scores(TinyTransformer(V, max_len=8)), ValueError, "max_len"),
])
def test_bad_inputs_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(small_model())


# ------------------------------------------------------------------ the explorable
def test_induction_heads_explorable_embeds_every_head():
    model = small_model(seed=0)
    tokens = induction.repeated_sequences(1, seed=0)[:, :12]
    weights = induction.head_patterns(model, tokens)
    x = explorables.induction_heads(weights, induction.decode(tokens[0]), query=5)
    assert x.kind == "hover" and x.n_tokens == 12
    assert x.html.count('"label":') == 4 and "layer 1, head 1" in x.html
    with pytest.raises(ValueError, match="one"):
        explorables.induction_heads([torch.ones(2, 2, 3, 3) / 3], ["a", "b", "c"])
    with pytest.raises(ValueError, match="sum to 1"):
        explorables.induction_heads([torch.ones(1, 2, 3, 3)], ["a", "b", "c"])
    with pytest.raises(TypeError, match="list"):
        explorables.induction_heads(torch.ones(1, 2, 3, 3), ["a", "b", "c"])
    with pytest.raises(ValueError, match="head must be in"):
        explorables.induction_heads(weights, induction.decode(tokens[0]), head=4)


# ------------------------------------------------------------------ the model and the text (moved from test_transformer.py)
def test_text_is_the_gettysburg_address():
    words = words_of(load_text("gettysburg"))
    assert words[:6] == ["four", "score", "and", "seven", "years", "ago"]
    assert words[-3:] == ["the", "earth", "."]
    assert "battle-field" in words and "--" in words


def test_words_of_splits_punctuation():
    assert words_of("The people, by the people.") == ["the", "people", ",", "by", "the", "people", "."]
    assert words_of("") == []
    assert words_of("Battle-field -- it's") == ["battle-field", "--", "it", "'", "s"]


def test_model_shapes_seed_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = TinyTransformer(50, d_model=16, n_heads=4, n_layers=2, max_len=10, seed=7)
    assert torch.equal(before, torch.rand(1)), "building a model must not consume the global RNG"
    b = TinyTransformer(50, d_model=16, n_heads=4, n_layers=2, max_len=10, seed=7)
    c = TinyTransformer(50, d_model=16, n_heads=4, n_layers=2, max_len=10, seed=8)
    assert torch.equal(a.blocks[0].attn.q_proj.weight, b.blocks[0].attn.q_proj.weight)
    assert not torch.equal(a.blocks[0].attn.q_proj.weight, c.blocks[0].attn.q_proj.weight)
    logits, weights = a(torch.randint(0, 50, (3, 10)))
    assert logits.shape == (3, 10, 50) and len(weights) == 2
    assert all(w.shape == (3, 4, 10, 10) for w in weights)
    assert (weights[0][..., ~torch.ones(10, 10, dtype=torch.bool).tril()] == 0).all(), "causal"


def test_model_is_causal_in_its_outputs():
    model = TinyTransformer(20, d_model=8, n_heads=2, max_len=6, seed=0)
    tokens = torch.randint(0, 20, (1, 6), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[0, 4] = (tokens[0, 4] + 1) % 20
    a, _ = model(tokens)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4], b[:, 4])


def test_stretch_boundaries_fall_anywhere():
    """Real word order (a bigram of the speech) must be as likely at every position of a
    training sequence: were the stretches always cut at the same positions, a head could learn
    from the position alone where the previous word is worth reading (the chapter's data
    paragraph says they are not)."""
    ids = induction._speech()[2].tolist()
    bigrams = set(zip(ids, ids[1:]))
    x = induction._chunked(4000, torch.Generator().manual_seed(0), repeat=False)     # (n, T), no copy
    rate = torch.tensor([[(a, b) in bigrams for a, b in zip(row[:-1].tolist(), row[1:].tolist())]
                         for row in x]).float().mean(0)                              # (T-1,) per position
    expected = (induction.CHUNK - 1) / induction.CHUNK                              # inside a stretch
    assert rate.min() > 0.8 * expected and rate.max() < 1.2 * expected + 0.05, rate


def test_training_probe_reads_the_right_offset_and_each_half():
    """The probe chapter 7 plots during training: induction at A[i, i - n + 1] of the second
    copy, previous-token share, and the loss of each copy, checked against hand-built heads and
    cross-entropy computed directly."""
    repeated = induction.repeated_sequences(8, seed=1)
    text = induction.text_sequences(8, seed=1)
    hand = Patterned([[previous_pattern, uniform_pattern], [induction_pattern, previous_pattern]])
    reading = induction._probe(hand, repeated, text)
    assert reading["induction"][1, 0] == pytest.approx(1.0)          # the token after the earlier occurrence
    assert reading["induction"][0, 0] == pytest.approx(0.0)          # a previous-token head: never
    assert reading["previous"][0, 0] == pytest.approx(1.0) and reading["previous"][1, 1] == pytest.approx(1.0)
    model = small_model(seed=5).eval()
    reading = induction._probe(model, repeated, text)
    with torch.no_grad():
        logits, _ = model(repeated)
    n = repeated.shape[1] // 2
    first = F.cross_entropy(logits[:, :n - 1].reshape(-1, V), repeated[:, 1:n].reshape(-1)).item()
    second = F.cross_entropy(logits[:, n:-1].reshape(-1, V), repeated[:, n + 1:].reshape(-1)).item()
    assert reading["first_half"] == pytest.approx(first, rel=1e-5)
    assert reading["second_half"] == pytest.approx(second, rel=1e-5)


@pytest.mark.parametrize("ids,error", [([-1], ValueError), ([10 ** 6], ValueError), ([1.7], TypeError), ("12", TypeError),
                                       ([True], TypeError), (torch.tensor([1.0]), TypeError), (7, TypeError)])
def test_decode_refuses_what_is_not_a_word_id(ids, error):
    """decode([-1]) returned the last word, decode([1.7]) the word at 1, decode("12") a list:
    each is now a clear error (issue 29)."""
    with pytest.raises(error):
        induction.decode(ids)


# ------------------------------------------------------------------ natural repeats, heads sweep
def _kinds_by_loops(tokens):
    """natural_repeats' three kinds, by plain loops over the positions."""
    out = []
    for row in tokens.tolist():
        kinds = []
        for i in range(len(row) - 1):
            earlier = [j for j in range(i) if row[j] == row[i]]
            if not earlier:
                kinds.append("first")
            elif any(row[j + 1] == row[i + 1] for j in earlier):
                kinds.append("same_next")
            else:
                kinds.append("other_next")
        out.append(kinds)
    return out


def test_natural_repeats_match_a_loop_and_partition_the_positions():
    g = torch.Generator().manual_seed(3)
    tokens = torch.cat([torch.randint(0, 6, (20, 12), generator=g), induction.text_sequences(8)[:, :12]])
    kinds = induction.natural_repeats(tokens)
    expected = _kinds_by_loops(tokens)
    for name, mask in kinds.items():
        assert mask.shape == (28, 11)
        assert mask.tolist() == [[k == name for k in row] for row in expected]
    assert (sum(m.int() for m in kinds.values()) == 1).all()
    hand = induction.natural_repeats(torch.tensor([[1, 2, 1, 2, 1, 3]]))     # a b a b a c
    assert hand["first"][0].tolist() == [True, True, False, False, False]
    assert hand["same_next"][0].tolist() == [False, False, True, True, False]   # a->b seen, b->a seen; a->c new
    assert hand["other_next"][0].tolist() == [False, False, False, False, True]
    with pytest.raises(TypeError):
        induction.natural_repeats(torch.zeros(2, 4))
    with pytest.raises(ValueError):
        induction.natural_repeats(torch.zeros(4, dtype=torch.long))


def test_natural_repeat_loss_splits_the_mean_loss():
    model = small_model().eval()
    out = induction.natural_repeat_loss(model)
    tokens = induction.text_sequences(induction.N_HELD_OUT)
    logits, _ = model(tokens)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
    n = out["counts"]
    assert sum(n.values()) == tokens.shape[0] * (T - 1)
    pooled = sum(out[k] * n[k] for k in n) / sum(n.values())
    assert pooled == pytest.approx(loss.item(), rel=1e-5)
    assert induction.natural_repeat_loss(model, [{"layer": 1, "head": 0, "mode": "zero"}])["first"] != out["first"]


def test_heads_sweep_results_match_the_module_and_a_rerun():
    """bench/results/heads.json was written with the module's settings, and its runs start as
    a re-run here does: the loss of the first two steps (initial weights, then one Adam step,
    neither of which depends on the schedule's length) for one head and for eight.  Another
    machine and torch version wrote the file, hence the tolerance."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "bench" / "results" / "heads.json").read_text())
    settings = data["meta"]["settings"]
    for key in ("SEQ_LEN", "CHUNK", "SPAN_MIN", "D_MODEL", "BATCH_SIZE", "LR", "N_HELD_OUT"):
        assert settings[key] == getattr(induction, key), key
    assert settings["STEPS"] == induction.STEPS and not settings["steps_reduced"]
    assert data["meta"]["device"] == "cpu"
    rows = {(r["n_heads"], r["seed"]): r for r in data["rows"]}
    assert {h for h, _ in rows} == {1, 4, 8} and len({s for _, s in rows}) >= 3
    for h in (1, 8):
        _, history = induction.train(2, 0, steps=2, progress=False, n_heads=h)
        assert history["config"].n_heads == h
        assert history["loss"] == pytest.approx(rows[(h, 0)]["early_loss"], abs=2e-3)
        assert rows[(h, 0)]["d_head"] == induction.D_MODEL // h


def test_scores_and_patterns_carry_no_autograd_graph():
    """The readings are measurements: a chapter calls .numpy() on them.  (head_patterns once lost
    its no_grad decorator to a function inserted above it, and chapter 7 failed at its cell.)"""
    model = induction.build_model(2)
    assert not induction.induction_scores(model).requires_grad
    assert not any(w.requires_grad for w in induction.head_patterns(model, induction.repeated_sequences(2)))
    induction.previous_token_scores(model).numpy()
