"""attnlib.evidence and encoder.ablated_outputs against independent oracles: the positional
lift against measures.offset_share on the ordinary-token block, minimal-pair weights against
the encoder's own weights, and head ablation against the same ablation done a second way
(editing the columns of the output projection W_O of a copy of the model)."""
import copy

import pytest
import torch

import attnlib
from attnlib import corpus, evidence
from attnlib.encoder import ablated_outputs, get_attentions, head_outputs
from attnlib.measures import offset_share

TEXTS = [corpus.RUNNING, "Most birds build their nests in early spring."]


def test_uniform_weight_and_its_errors():
    assert evidence.uniform_weight(13) == pytest.approx(1 / 13)
    with pytest.raises(ValueError, match="n_keys"):
        evidence.uniform_weight(0)
    with pytest.raises(TypeError, match="n_keys"):
        evidence.uniform_weight("13")


def test_token_position_refuses_a_repeated_or_missing_word():
    tokens = get_attentions(corpus.RUNNING).tokens
    assert evidence.token_position(tokens, "cat") == tokens.index("cat")
    with pytest.raises(ValueError, match="occurs 2 times"):
        evidence.token_position(tokens, "the")
    with pytest.raises(ValueError, match="does not occur"):
        evidence.token_position(tokens, "dog")
    with pytest.raises(ValueError, match="outside"):
        evidence.token_position(tokens, 99)
    with pytest.raises(TypeError, match="str or a position"):
        evidence.token_position(tokens, 2.0)


def test_reference_sentences_are_real_and_fit_the_model():
    sentences = evidence.reference_sentences()
    assert len(sentences) == 18 and all(isinstance(s, str) and len(s.split()) > 3 for s in sentences)
    assert sentences[:len(corpus.SINK_PROBES)] == list(corpus.SINK_PROBES)
    assert any(s.startswith("Four score and seven years ago") for s in sentences)


@pytest.mark.parametrize("layer,head", [(0, 2), (4, 3)])
def test_positional_lift_equals_offset_share_on_the_ordinary_tokens(encoder, layer, head):
    model, tokenizer = encoder
    offsets = [-3, -1, 0, 2]
    lift = evidence.positional_lift(layer, head, offsets, texts=TEXTS, model=model, tokenizer=tokenizer)
    # oracle: per text, the diagonal means of the block without [CLS] and [SEP], times T,
    # pooled over the texts with the number of pairs at each offset as weights
    for o in offsets:
        total, count = 0.0, 0
        for text in TEXTS:
            att = get_attentions(text, model=model, tokenizer=tokenizer)
            T = len(att.tokens)
            inner = att.head(layer, head)[1:-1, 1:-1].double()
            n = inner.shape[0] - abs(o)
            total += float(offset_share(inner, o)) * T * n
            count += n
        assert lift[o] == pytest.approx(total / count, rel=1e-5)
    base = evidence.positional_baseline(layer, head, -1, 13, texts=TEXTS, model=model, tokenizer=tokenizer)
    assert base == pytest.approx(lift[-1] / 13)


def test_positional_lift_errors(encoder):
    model, tokenizer = encoder
    with pytest.raises(TypeError, match="offsets"):
        evidence.positional_lift(0, 0, [1.5], texts=TEXTS, model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="offset"):
        evidence.positional_lift(0, 0, [40], texts=TEXTS, model=model, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="texts"):
        evidence.positional_lift(0, 0, [1], texts=corpus.RUNNING, model=model, tokenizer=tokenizer)
    with pytest.raises(IndexError, match="head"):
        evidence.positional_lift(0, 12, [1], texts=TEXTS, model=model, tokenizer=tokenizer)


def test_pair_weights_read_the_models_own_weights(encoder):
    model, tokenizer = encoder
    pair = [corpus.RUNNING, "The dog sat on the rug because it was warm."]
    rows = evidence.pair_weights(pair, 4, 3, "it", ["cat", "rug"], model=model, tokenizer=tokenizer)
    for row, text in zip(rows, pair):
        att = get_attentions(text, model=model, tokenizer=tokenizer)
        A = att.head(4, 3)
        i = att.tokens.index("it")
        for key, w in row["weights"].items():
            if key in att.tokens:
                assert w == pytest.approx(float(A[i, att.tokens.index(key)]), abs=0)
            else:
                assert w is None
        assert row["uniform"] == pytest.approx(1 / len(att.tokens)) and row["n_tokens"] == len(att.tokens)
    with pytest.raises(ValueError, match="occurs 2 times"):
        evidence.pair_weights(pair[:1], 4, 3, "it", ["the"], model=model, tokenizer=tokenizer)


def _ablated_by_w_o(model, tokenizer, text, layer, head, replacement):
    """The same ablation done on the weights: zero the head's columns of W_O in a copy of the
    model and, for a mean ablation, add W_O[:, cols] @ replacement to the projection's bias."""
    twin = copy.deepcopy(model)
    dense = twin.encoder.layer[layer].attention.output.dense
    d_v = model.config.hidden_size // model.config.num_attention_heads
    cols = slice(head * d_v, (head + 1) * d_v)
    with torch.no_grad():
        if replacement is not None:
            dense.bias += dense.weight[:, cols] @ replacement
        dense.weight[:, cols] = 0.0
    return get_attentions(text, model=twin, tokenizer=tokenizer).hidden_states[-1][0]


@pytest.mark.parametrize("mean", [False, True])
def test_ablation_equals_editing_the_output_projection(encoder, mean):
    model, tokenizer = encoder
    layer, head = 4, 3
    replacement = head_outputs(corpus.SINK_PROBES[0], layer, head, model, tokenizer)[1].mean(0) if mean else None
    tokens, intact, ablated = ablated_outputs(corpus.RUNNING, layer, head, replacement=replacement,
                                              model=model, tokenizer=tokenizer)
    assert tokens == get_attentions(corpus.RUNNING, model=model, tokenizer=tokenizer).tokens
    assert torch.equal(intact, get_attentions(corpus.RUNNING, model=model, tokenizer=tokenizer).hidden_states[-1][0])
    oracle = _ablated_by_w_o(model, tokenizer, corpus.RUNNING, layer, head, replacement)
    torch.testing.assert_close(ablated, oracle, atol=2e-5, rtol=1e-4)
    assert (ablated - intact).abs().max() > 1e-3  # the head matters at all


def test_ablated_outputs_refuses_a_bad_replacement(encoder):
    model, tokenizer = encoder
    with pytest.raises(ValueError, match=r"\(32,\)"):
        ablated_outputs(corpus.RUNNING, 4, 3, replacement=torch.zeros(31), model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="finite"):
        ablated_outputs(corpus.RUNNING, 4, 3, replacement=torch.full((32,), float("nan")), model=model,
                        tokenizer=tokenizer)
    with pytest.raises(IndexError, match="head"):
        ablated_outputs(corpus.RUNNING, 4, 12, model=model, tokenizer=tokenizer)


def test_head_ablation_and_its_layer_baseline(encoder):
    model, tokenizer = encoder
    zero = evidence.head_ablation(corpus.RUNNING, 4, 3, mode="zero", model=model, tokenizer=tokenizer)
    tokens, intact, ablated = ablated_outputs(corpus.RUNNING, 4, 3, model=model, tokenizer=tokenizer)
    cos = torch.nn.functional.cosine_similarity(intact.double(), ablated.double(), dim=-1)
    torch.testing.assert_close(zero["token_change"], (1 - cos).cpu())
    assert 0 < zero["sentence_change"] < 2
    per_head = evidence.layer_ablation(corpus.RUNNING, 4, mode="zero", model=model, tokenizer=tokenizer)
    assert per_head.shape == (12,) and per_head[3] == pytest.approx(zero["sentence_change"])
    with pytest.raises(ValueError, match="mode"):
        evidence.head_ablation(corpus.RUNNING, 4, 3, mode="half", model=model, tokenizer=tokenizer)


def test_mean_ablation_puts_each_heads_own_mean_in_its_place(encoder):
    """head_ablation(mode="mean") against the ablation done on the weights (as _ablated_by_w_o)
    with that head's own mean output over the reference text, read with head_outputs, not
    through attnlib.edits: a mean of another head (head 0's for every head, issue 36) fails."""
    model, tokenizer = encoder
    text, reference, layer = "Most birds build their nests in early spring.", corpus.SINK_PROBES[0], 4
    _, z = head_outputs(reference, layer, None, model, tokenizer)                  # (H, T, d_v)
    intact = get_attentions(text, model=model, tokenizer=tokenizer).hidden_states[-1][0].double()
    twin = copy.deepcopy(model)
    dense, original = twin.encoder.layer[layer].attention.output.dense, model.encoder.layer[layer].attention.output.dense
    cos = torch.nn.functional.cosine_similarity
    for head in (2, 7):
        cols = slice(head * z.shape[-1], (head + 1) * z.shape[-1])
        with torch.no_grad():
            dense.weight.copy_(original.weight)
            dense.bias.copy_(original.bias + original.weight[:, cols] @ z[head].mean(0))
            dense.weight[:, cols] = 0.0
        oracle = get_attentions(text, model=twin, tokenizer=tokenizer).hidden_states[-1][0].double()
        result = evidence.head_ablation(text, layer, head, mode="mean", texts=[reference], model=model,
                                        tokenizer=tokenizer)
        torch.testing.assert_close(result["token_change"], (1 - cos(intact, oracle, dim=-1)).cpu(), atol=2e-6, rtol=1e-3)
        assert result["sentence_change"] == pytest.approx(float(1 - cos(intact.mean(0), oracle.mean(0), dim=0)),
                                                          rel=1e-3, abs=2e-7)


def test_mean_head_outputs_of_a_padded_batch_equal_the_texts_run_alone(encoder):
    model, tokenizer = encoder
    from attnlib.encoder import mean_head_outputs
    texts = [corpus.RUNNING, "Hello there!", corpus.SINK_PROBES[2]]  # unequal lengths: padding
    alone = torch.cat([head_outputs(t, 2, None, model, tokenizer)[1] for t in texts], dim=1).mean(dim=1)  # (H, d_v)
    torch.testing.assert_close(mean_head_outputs(texts, 2, model, tokenizer), alone, atol=1e-5, rtol=1e-4)


def test_pair_weights_refuses_one_str_instead_of_reading_it_letter_by_letter():
    """pair_weights("Hello", ...) ran the model on the five one-letter texts 'H', 'e', ...
    (issue 29): one str is refused with a message saying to wrap it in a list."""
    with pytest.raises(TypeError, match="wrap a single text in a list"):
        evidence.pair_weights("Hello", 0, 2, 0, [1])


def test_ablation_table_is_layer_ablation_for_every_layer(encoder):
    """The table's mean outputs come from one run per text for all layers; layer_ablation's
    from encoder.mean_head_outputs, layer by layer: the two must agree."""
    model, tokenizer = encoder
    texts = ["Hello there!", corpus.SINK_PROBES[0]]          # unequal lengths: the mean is over tokens, pooled
    table = evidence.ablation_table(corpus.RUNNING, texts=texts, model=model, tokenizer=tokenizer)
    assert table.shape == (6, 12) and table.dtype == torch.float64
    for layer in (0, 4):
        torch.testing.assert_close(table[layer], evidence.layer_ablation(corpus.RUNNING, layer, texts=texts, model=model,
                                                                         tokenizer=tokenizer), atol=1e-6, rtol=1e-4)
    zero = evidence.ablation_table(corpus.RUNNING, mode="zero", model=model, tokenizer=tokenizer)
    assert zero[4, 3] == pytest.approx(evidence.head_ablation(corpus.RUNNING, 4, 3, mode="zero", model=model,
                                                              tokenizer=tokenizer)["sentence_change"])
    with pytest.raises(ValueError, match="mode"):
        evidence.ablation_table(corpus.RUNNING, mode="half", model=model, tokenizer=tokenizer)


def _patched_by_hook(model, tokenizer, clean, corrupt, layer, head, i):
    """Activation patching done without attnlib's intervention: a forward hook on the
    self-attention of ``layer`` writes the corrupt run's slice of head ``head`` at token ``i``
    (read from Hugging Face's own module output) into the clean run."""
    d_v = model.config.hidden_size // model.config.num_attention_heads
    cols = slice(head * d_v, (head + 1) * d_v)
    block = model.encoder.layer[layer].attention.self
    seen = {}
    handle = block.register_forward_hook(lambda m, a, out: seen.__setitem__("z", out[0].detach().clone()))
    try:
        with torch.no_grad():
            model(**tokenizer(corrupt, return_tensors="pt"))
    finally:
        handle.remove()

    def patch(module, args, out):
        edited = out[0].clone()
        edited[0, i, cols] = seen["z"][0, i, cols]
        return (edited,) + tuple(out[1:])

    handle = block.register_forward_hook(patch)
    try:
        with torch.no_grad():
            return model(**tokenizer(clean, return_tensors="pt"), output_hidden_states=True).hidden_states
    finally:
        handle.remove()


def test_patching_effects_equal_a_patch_made_by_hand(encoder):
    model, tokenizer = encoder
    clean, corrupt = "The cat sat on the mat.", "The idea sat on the mat."
    with torch.no_grad():
        o_clean = model(**tokenizer(clean, return_tensors="pt"), output_hidden_states=True).hidden_states
        o_corrupt = model(**tokenizer(corrupt, return_tensors="pt"), output_hidden_states=True).hidden_states
    for depth in (6, 1):
        result = evidence.patching_effects(clean, corrupt, "sat", depth=depth, layers=[0], model=model,
                                           tokenizer=tokenizer)
        i = result["position"]
        assert result["tokens"][i] == "sat" and result["depth"] == depth
        delta = (o_corrupt[depth][0, i] - o_clean[depth][0, i]).double()
        assert result["difference"] == pytest.approx(float(delta.norm()), rel=1e-5)
        for head in (2, 7):
            patched = _patched_by_hook(model, tokenizer, clean, corrupt, 0, head, i)[depth][0, i].double()
            oracle = float((patched - o_clean[depth][0, i].double()) @ delta / (delta @ delta))
            assert result["effect"][0, head].item() == pytest.approx(oracle, abs=1e-4)
        assert torch.isnan(result["effect"][1:]).all()             # layers not patched
    # layer 0, head 2 (the previous-token head) carries most of what layer 0 writes into "sat"
    first = evidence.patching_effects(clean, corrupt, "sat", depth=1, model=model, tokenizer=tokenizer)["effect"][0]
    assert int(first.argmax()) == 2 and first[2] > 0.5


def test_patching_effects_errors(encoder):
    model, tokenizer = encoder
    kw = dict(model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="same number of tokens"):
        evidence.patching_effects("The cat sat.", "The big cat sat.", "sat", **kw)
    with pytest.raises(ValueError, match="no difference"):
        evidence.patching_effects("The cat sat.", "The cat sat.", "sat", **kw)
    with pytest.raises(ValueError, match="occurs 2 times"):
        evidence.patching_effects(corpus.RUNNING, corpus.RUNNING.replace("warm", "soft"), "the", **kw)
    with pytest.raises(IndexError, match="cannot change"):
        evidence.patching_effects("The cat sat.", "The dog sat.", "sat", depth=2, layers=[3], **kw)
    with pytest.raises(IndexError, match="depth"):
        evidence.patching_effects("The cat sat.", "The dog sat.", "sat", depth=0, **kw)
    with pytest.raises(TypeError):
        evidence.patching_effects(None, "The dog sat.", "sat", **kw)


def _blobs(n_groups=12, per_group=10, n_classes=3, d=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, n_classes, (n_groups * per_group,), generator=gen)
    groups = torch.arange(n_groups).repeat_interleave(per_group)
    signal = torch.nn.functional.one_hot(labels, d).float() * 3.0
    noise = torch.randn(n_groups * per_group, d, generator=gen)
    return signal + noise, noise, labels, groups


def test_probe_accuracy_reads_a_linear_signal_and_nothing_from_noise():
    signal, noise, labels, groups = _blobs()
    acc = evidence.probe_accuracy(torch.stack([signal, noise]), labels, groups)
    assert acc.shape == (2,) and acc.dtype == torch.float64
    assert acc[0] > 0.95 and acc[1] < 0.6                        # 3 classes: chance is about 1/3
    alone = evidence.probe_accuracy(signal[None], labels, groups)  # problems in a batch do not interact
    assert alone[0] == acc[0]


def test_probe_accuracy_tests_on_unseen_groups_only():
    """Features that name the group and labels drawn per group: a probe tested on tokens of
    groups it was trained on would score near 1; on unseen groups it cannot beat chance."""
    gen = torch.Generator().manual_seed(1)
    groups = torch.arange(16).repeat_interleave(8)
    per_group = torch.randint(0, 2, (16,), generator=gen)
    labels = per_group[groups]
    features = torch.nn.functional.one_hot(groups, 16).float() + 0.01 * torch.randn(128, 16, generator=gen)
    acc = evidence.probe_accuracy(features[None], labels, groups)
    assert acc[0] < 0.75


def test_probe_accuracy_errors():
    signal, _, labels, groups = _blobs()
    with pytest.raises(TypeError, match="features"):
        evidence.probe_accuracy(signal, labels, groups)             # (N, d): no probe axis
    with pytest.raises(TypeError, match="labels"):
        evidence.probe_accuracy(signal[None], labels.float(), groups)
    with pytest.raises(ValueError, match="labels"):
        evidence.probe_accuracy(signal[None], labels[:-1], groups)
    with pytest.raises(ValueError, match="groups"):
        evidence.probe_accuracy(signal[None], labels, groups[:-1])
    with pytest.raises(ValueError, match="n_folds"):
        evidence.probe_accuracy(signal[None], labels, groups, n_folds=1)
    with pytest.raises(ValueError, match="empty"):
        evidence.probe_accuracy(signal[None], labels, torch.zeros_like(groups))
    bad = signal.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        evidence.probe_accuracy(bad[None], labels, groups)


def test_tagged_features_are_the_runs_queries_at_each_words_first_piece(encoder):
    model, tokenizer = encoder
    sentences = ["The/DET hikers/NOUN saw/VERB bears/NOUN ./PUNCT", "Birds/NOUN sing/VERB ./PUNCT"]
    data = evidence.tagged_features(sentences, model=model, tokenizer=tokenizer)
    assert data["tags"] == ["DET", "NOUN", "PUNCT", "VERB"] and data["words"][:2] == ["The", "hikers"]
    assert data["labels"].tolist() == [0, 1, 3, 1, 2, 1, 3, 2] and data["groups"].tolist() == [0] * 5 + [1] * 3
    assert data["q"].shape == (6, 12, 8, 32) and data["x"].shape == (6, 8, 384)
    run = attnlib.encoder.run("The hikers saw bears .", model=model, tokenizer=tokenizer)
    pieces = run.tokens                                           # a word split in pieces: its first piece
    first = [1] + [1 + sum(len(tokenizer.tokenize(w)) for w in ["The", "hikers", "saw", "bears"][:n]) for n in range(1, 5)]
    assert [pieces[i] for i in first][0] == "the"
    torch.testing.assert_close(data["q"][3, 5, :5], run.head("q", 3, 5)[first])
    torch.testing.assert_close(data["k"][1, 0, :5], run.head("k", 1, 0)[first])
    torch.testing.assert_close(data["x"][2, :5], run.resid_pre[2][first])
    with pytest.raises(ValueError, match="word/TAG"):
        evidence.tagged_features(["The cat/NOUN"], model=model, tokenizer=tokenizer)


def test_pos_probe_matches_the_committed_bench_table(encoder):
    """bench/bench_pos_probe.py wrote the chapter's table of every layer; layer 2 re-run here."""
    import json
    from pathlib import Path
    model, tokenizer = encoder
    record = json.loads((Path(__file__).resolve().parents[1] / "bench" / "results" / "pos_probe.json").read_text())
    data = evidence.tagged_features(model=model, tokenizer=tokenizer)
    result = evidence.pos_probe(data, [2], **record["settings"])
    for name in ("q", "k", "random", "shuffled"):
        assert result[name][0].mean().item() == pytest.approx(record["per_layer"][name][2]["mean"], abs=0.02)
    assert result["majority"] == pytest.approx(record["majority"])
    assert result["q"].mean() > result["random"].mean() > 3 * result["shuffled"].mean()


# ------------------------------------------------------------- the sign test and the minimal pairs (issue 37)
def _hand_two_sided(n, p, outcomes):
    """The two-sided p-value written out by hand: the listed outcomes' probabilities, summed."""
    import math
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in outcomes)


def test_binomial_test_equals_values_computed_by_hand():
    # symmetric: 9 of 10 heads, two-sided = 2 (C(10,9) + C(10,10)) / 2**10
    assert evidence.binomial_test(9, 10) == pytest.approx(22 / 1024, rel=1e-12)
    assert evidence.binomial_test(9, 10, alternative="greater") == pytest.approx(11 / 1024, rel=1e-12)
    assert evidence.binomial_test(1, 10, alternative="less") == pytest.approx(11 / 1024, rel=1e-12)
    # chapter 9's count: 11 of 16, two-sided = 2 (C(16,11) + ... + C(16,16)) / 2**16 = 2 * 6885 / 65536
    assert evidence.binomial_test(11, 16) == pytest.approx(2 * 6885 / 65536, rel=1e-12)
    assert evidence.binomial_test(8, 16) == 1.0                       # the most likely count: nothing is rarer
    # scipy's documented example (binomtest(3, n=15, p=0.1, alternative='greater') = 0.18406106910639106),
    # and 1 - P(0) - P(1) - P(2) by hand
    by_hand = 1 - 0.9 ** 15 - 15 * 0.1 * 0.9 ** 14 - 105 * 0.01 * 0.9 ** 13
    assert evidence.binomial_test(3, 15, 0.1, alternative="greater") == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(0.18406106910639106, rel=1e-12)
    # asymmetric two-sided: k = 6 of 10 at p = 0.3; the outcomes no more likely than 6 are 0 and 6..10
    assert evidence.binomial_test(6, 10, 0.3) == pytest.approx(_hand_two_sided(10, 0.3, [0, 6, 7, 8, 9, 10]),
                                                               rel=1e-12)
    assert evidence.binomial_test(1, 10, 0.3) == pytest.approx(_hand_two_sided(10, 0.3, [0, 1, 5, 6, 7, 8, 9, 10]),
                                                               rel=1e-12)


def test_binomial_test_against_scipy_when_installed():
    stats = pytest.importorskip("scipy.stats")
    for k, n, p in [(0, 1, 0.5), (11, 16, 0.5), (3, 15, 0.1), (6, 10, 0.3), (1, 10, 0.3), (40, 50, 0.7), (2, 30, 0.2)]:
        for alternative in ("two-sided", "greater", "less"):
            ours = evidence.binomial_test(k, n, p, alternative=alternative)
            assert ours == pytest.approx(stats.binomtest(k, n, p, alternative=alternative).pvalue, rel=1e-9)


def test_binomial_test_errors():
    with pytest.raises(ValueError, match="k must be in"):
        evidence.binomial_test(11, 10)
    with pytest.raises(ValueError, match="n must be a positive"):
        evidence.binomial_test(0, 0)
    with pytest.raises(TypeError, match="k must be"):
        evidence.binomial_test(2.0, 10)
    with pytest.raises(ValueError, match="p must be <= 1"):
        evidence.binomial_test(2, 10, 1.5)
    with pytest.raises(ValueError, match="alternative"):
        evidence.binomial_test(2, 10, alternative="two_sided")


def test_sign_test_counts_signs_drops_zeros_and_is_symmetric():
    diffs = [0.3, 0.1, -0.2, 0.05, 0.0, 0.4, 0.2, 0.1, 0.3, 0.7, 0.01]
    result = evidence.sign_test(diffs)
    assert (result["n"], result["n_positive"], result["n_negative"], result["n_zero"]) == (10, 9, 1, 1)
    assert result["p_value"] == pytest.approx(22 / 1024, rel=1e-12)        # the zero carries no sign
    assert evidence.sign_test(torch.tensor(diffs, dtype=torch.float64))["p_value"] == result["p_value"]
    flipped = [-d for d in diffs]
    assert evidence.sign_test(flipped, alternative="less")["p_value"] == \
        evidence.sign_test(diffs, alternative="greater")["p_value"] == pytest.approx(11 / 1024, rel=1e-12)
    # only the signs count: scaling or reshaping the positive differences changes nothing
    assert evidence.sign_test([d * 100 if d > 0 else d for d in diffs]) == result


def test_sign_test_errors():
    with pytest.raises(ValueError, match="non-zero"):
        evidence.sign_test([0.0, 0.0])
    with pytest.raises(ValueError, match="finite"):
        evidence.sign_test([0.1, float("nan")])
    with pytest.raises(TypeError, match="sequence"):
        evidence.sign_test("0.1 0.2")
    with pytest.raises(TypeError, match="real number"):
        evidence.sign_test([0.1, "0.2"])
    with pytest.raises(ValueError, match="1-D"):
        evidence.sign_test(torch.ones(2, 2))


@pytest.mark.parametrize("name", ["COREFERENCE_PAIRS", "COREFERENCE_HELD_OUT"])
def test_coreference_pairs_are_minimal_pairs_the_encoder_can_read(encoder, name):
    _, tokenizer = encoder
    pairs = getattr(corpus, name)
    assert len(pairs) >= 12
    assert len({pair[0] for pair in pairs}) == len(pairs)
    for text_a, text_b, ref_a, ref_b in pairs:
        words_a, words_b = text_a.split(), text_b.split()
        assert len(words_a) == len(words_b) and sum(a != b for a, b in zip(words_a, words_b)) == 1, text_a
        tokens_a, tokens_b = tokenizer.tokenize(text_a), tokenizer.tokenize(text_b)
        assert len(tokens_a) == len(tokens_b) and sum(a != b for a, b in zip(tokens_a, tokens_b)) == 1, text_a
        for tokens in (tokens_a, tokens_b):
            assert tokens.count("it") == tokens.count(ref_a) == tokens.count(ref_b) == 1 and ref_a != ref_b


def test_referent_shifts_read_the_models_own_weights(encoder):
    model, tokenizer = encoder
    pairs = corpus.COREFERENCE_PAIRS[:2] + (("The cat sat on the mat because it was tired.",
                                             "The cat sat on the mat because it was soft.", "cat", "mat"),)
    rows = evidence.referent_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    for row, (text_a, text_b, ref_a, ref_b) in zip(rows, pairs):
        w = {}
        for name, text in (("a", text_a), ("b", text_b)):       # oracle: the model's own weights
            att = get_attentions(text, model=model, tokenizer=tokenizer)
            A, t = att.head(4, 3), att.tokens
            w[name] = {n: float(A[t.index("it"), t.index(n)]) for n in (ref_a, ref_b)}
        assert row["weights_a"] == w["a"] and row["weights_b"] == w["b"]
        gain_a, gain_b = w["a"][ref_a] - w["b"][ref_a], w["b"][ref_b] - w["a"][ref_b]
        assert row["gain_a"] == pytest.approx(gain_a, abs=1e-12) and row["gain_b"] == pytest.approx(gain_b, abs=1e-12)
        assert row["shift"] == pytest.approx((gain_a + gain_b) / 2, abs=1e-12)
        assert row["winner_a"] == max(w["a"], key=w["a"].get) and row["winner_b"] == max(w["b"], key=w["b"].get)
        assert row["moved"] == (row["winner_a"] != row["winner_b"])
    # the book's pair: 'mat' gains where it is the referent, the winner stays 'cat'
    book = rows[-1]
    assert book["gain_b"] > 0.03 and book["winner_a"] == book["winner_b"] == "cat" and not book["moved"]


def test_referent_shifts_swap_sign_when_the_pair_is_read_backwards(encoder):
    """Naming the wrong referents (each text's referent swapped) must turn every shift round."""
    model, tokenizer = encoder
    pairs = corpus.COREFERENCE_PAIRS[:3]
    swapped = [(a, b, rb, ra) for a, b, ra, rb in pairs]
    right = evidence.referent_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    wrong = evidence.referent_shifts(swapped, 4, 3, model=model, tokenizer=tokenizer)
    for r, w in zip(right, wrong):
        assert w["shift"] == pytest.approx(-r["shift"], abs=1e-12)


def test_the_held_out_pairs_share_no_sentence_with_the_first_set():
    first = {text for pair in corpus.COREFERENCE_PAIRS for text in pair[:2]}
    assert not first & {text for pair in corpus.COREFERENCE_HELD_OUT for text in pair[:2]}


def test_control_shifts_read_the_other_words_of_the_sentence(encoder):
    """Oracle: every control query's shift from the model's own weights; the pronoun's shift is
    referent_shifts'; the control queries are the words once in both texts, minus [CLS], [SEP],
    the pronoun and the nouns (so never the changed word)."""
    model, tokenizer = encoder
    pairs = corpus.COREFERENCE_PAIRS[:2] + corpus.COREFERENCE_HELD_OUT[:1]
    rows = evidence.control_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    own = evidence.referent_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    for row, mine, (text_a, text_b, ref_a, ref_b) in zip(rows, own, pairs):
        att_a = get_attentions(text_a, model=model, tokenizer=tokenizer)
        att_b = get_attentions(text_b, model=model, tokenizer=tokenizer)
        A, B, ta, tb = att_a.head(4, 3), att_b.head(4, 3), list(att_a.tokens), list(att_b.tokens)
        changed = {a for a, b in zip(ta, tb) if a != b} | {b for a, b in zip(ta, tb) if a != b}
        want_queries = [t for t in ta if ta.count(t) == 1 and tb.count(t) == 1
                        and t not in ("[CLS]", "[SEP]", "it", ref_a, ref_b)]
        assert row["queries"] == want_queries and not changed & set(row["queries"]) and len(want_queries) >= 3
        for q in want_queries:
            i, j = ta.index(q), tb.index(q)
            gain_a = float(A[i, ta.index(ref_a)]) - float(B[j, tb.index(ref_a)])
            gain_b = float(B[j, tb.index(ref_b)]) - float(A[i, ta.index(ref_b)])
            assert row["shifts"][q] == pytest.approx((gain_a + gain_b) / 2, abs=1e-6)
        assert row["mean"] == pytest.approx(sum(row["shifts"].values()) / len(want_queries), abs=1e-12)
        assert row["pronoun"] == mine["shift"] and row["excess"] == pytest.approx(mine["shift"] - row["mean"], abs=1e-12)


def test_control_shifts_vanish_when_nothing_changes_and_turn_with_the_referents(encoder):
    model, tokenizer = encoder
    text = corpus.COREFERENCE_PAIRS[0][0]
    same = evidence.control_shifts([(text, text, "trophy", "suitcase")], 4, 3, model=model, tokenizer=tokenizer)[0]
    assert all(v == 0 for v in same["shifts"].values()) and same["pronoun"] == 0 and same["excess"] == 0
    pairs = corpus.COREFERENCE_HELD_OUT[:2]
    right = evidence.control_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    swapped = evidence.control_shifts([(a, b, rb, ra) for a, b, ra, rb in pairs], 4, 3, model=model, tokenizer=tokenizer)
    for r, w in zip(right, swapped):
        assert w["mean"] == pytest.approx(-r["mean"], abs=1e-12) and w["excess"] == pytest.approx(-r["excess"], abs=1e-12)


def test_query_key_shifts_cross_the_models_own_queries_and_keys(encoder):
    """Oracle: the crossed weights from q and k as the model computed them (HF eager attention's
    softmax(q k^T / sqrt(d_k)) reproduces its weights); the split is exact, and each side's share
    is the mean of its two crossings."""
    model, tokenizer = encoder
    pairs = corpus.COREFERENCE_PAIRS[:2] + corpus.COREFERENCE_HELD_OUT[:1]
    rows = evidence.query_key_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    own = evidence.referent_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    for row, mine, (text_a, text_b, ref_a, ref_b) in zip(rows, own, pairs):
        ra, rb = (attnlib.encoder.run(x, model=model, tokenizer=tokenizer) for x in (text_a, text_b))
        i, ja, jb = ra.tokens.index("it"), ra.tokens.index(ref_a), ra.tokens.index(ref_b)
        q = {"a": ra.head("q", 4, 3)[i].double(), "b": rb.head("q", 4, 3)[i].double()}
        K = {"a": ra.head("k", 4, 3).double(), "b": rb.head("k", 4, 3).double()}
        W = {(x, y): torch.softmax(K[y] @ q[x] / 32 ** 0.5, -1) for x in "ab" for y in "ab"}
        torch.testing.assert_close(W["a", "a"].float(), ra.head("pattern", 4, 3)[i], atol=1e-6, rtol=0)
        torch.testing.assert_close(W["b", "b"].float(), rb.head("pattern", 4, 3)[i], atol=1e-6, rtol=0)

        def shift(u, v):
            return (float(u[ja] - v[ja]) + float(v[jb] - u[jb])) / 2

        assert row["shift"] == pytest.approx(mine["shift"], abs=1e-6)
        assert row["shift_query"] == pytest.approx((shift(W["a", "a"], W["b", "a"]) + shift(W["a", "b"], W["b", "b"])) / 2, abs=1e-12)
        assert row["shift_key"] == pytest.approx((shift(W["a", "a"], W["a", "b"]) + shift(W["b", "a"], W["b", "b"])) / 2, abs=1e-12)
        assert row["shift_query"] + row["shift_key"] == pytest.approx(row["shift"], abs=1e-12)


def test_query_key_shifts_give_each_side_only_what_it_changes(encoder):
    """A pair whose two texts are the same gives zero everywhere; swapping the named referents
    turns every share round."""
    model, tokenizer = encoder
    text = corpus.COREFERENCE_PAIRS[0][0]
    same = evidence.query_key_shifts([(text, text, "trophy", "suitcase")], 4, 3, model=model, tokenizer=tokenizer)[0]
    assert same["shift"] == same["shift_query"] == same["shift_key"] == 0
    pairs = corpus.COREFERENCE_HELD_OUT[:2]
    right = evidence.query_key_shifts(pairs, 4, 3, model=model, tokenizer=tokenizer)
    swapped = evidence.query_key_shifts([(a, b, rb, ra) for a, b, ra, rb in pairs], 4, 3, model=model, tokenizer=tokenizer)
    for r, w in zip(right, swapped):
        assert w["shift_query"] == pytest.approx(-r["shift_query"], abs=1e-12)
        assert w["shift_key"] == pytest.approx(-r["shift_key"], abs=1e-12)


def test_query_key_shifts_errors(encoder):
    model, tokenizer = encoder
    with pytest.raises(ValueError, match="tokenize to"):
        evidence.query_key_shifts([("The cat ate because it was hungry.", "The cat ate because it was very hungry.",
                                    "cat", "hungry")], 4, 3, model=model, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="pairs"):
        evidence.query_key_shifts([("a", "b")], 4, 3, model=model, tokenizer=tokenizer)


def test_control_shifts_errors(encoder):
    model, tokenizer = encoder
    with pytest.raises(ValueError, match="no word"):
        evidence.control_shifts([("cat it dog", "cat it dog", "cat", "dog")], 4, 3, model=model, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="pairs"):
        evidence.control_shifts("not pairs", 4, 3, model=model, tokenizer=tokenizer)


def test_referent_shifts_errors(encoder):
    model, tokenizer = encoder
    with pytest.raises(TypeError, match="pairs"):
        evidence.referent_shifts(("a", "b", "c", "d"), 4, 3, model=model, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="pairs"):
        evidence.referent_shifts([("The cat sat.", "The dog sat.", "cat")], 4, 3, model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="lacks"):
        evidence.referent_shifts([("The cat sat because it was tired.", "The dog sat because it was tired.",
                                   "cat", "dog")], 4, 3, model=model, tokenizer=tokenizer)
    with pytest.raises(IndexError):
        evidence.referent_shifts(corpus.COREFERENCE_PAIRS[:1], 6, 3, model=model, tokenizer=tokenizer)


# ------------------------------------------------------------- Hewitt & Liang's control task (issue 37)
def test_control_labels_give_one_label_per_word_type_drawn_from_the_tags():
    words = ["The", "cat", "the", "dog", "Cat", ".", "a", "dog", "."]
    labels = torch.tensor([0, 1, 0, 1, 1, 2, 0, 1, 2])
    control = evidence.control_labels(words, labels, seed=3)
    assert control.dtype == torch.int64 and control.shape == labels.shape
    by_type = {}
    for w, c in zip(words, control.tolist()):
        assert by_type.setdefault(w.lower(), c) == c              # one label per type, case ignored
    assert torch.equal(control, evidence.control_labels(words, labels, seed=3))           # seeded
    assert torch.equal(control, evidence.control_labels(list(reversed(words)), labels.flip(0), seed=3).flip(0))
    # drawn from the empirical distribution: a tag that never occurs is never drawn
    many = [f"w{i}" for i in range(2000)]
    drawn = evidence.control_labels(many, torch.tensor([0] * 1500 + [2] * 500), seed=0)
    assert set(drawn.tolist()) == {0, 2} and 0.70 < (drawn == 0).double().mean().item() < 0.80
    seeds = {tuple(evidence.control_labels(many[:50], torch.tensor([0, 1] * 25), seed=s).tolist()) for s in range(3)}
    assert len(seeds) == 3
    # case is ignored, as the uncased tokenizer reads words: 'W7' and 'w7' are one type
    cased = [f"W{i}" for i in range(50)] + [f"w{i}" for i in range(50)]
    control = evidence.control_labels(cased, torch.tensor([0, 1, 2, 3] * 25), seed=0)
    assert torch.equal(control[:50], control[50:]) and len(set(control.tolist())) > 1


def test_control_labels_errors():
    with pytest.raises(TypeError, match="words"):
        evidence.control_labels("the cat", torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="labels"):
        evidence.control_labels(["the", "cat"], torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="same non-zero length"):
        evidence.control_labels(["the", "cat"], torch.tensor([0, 1, 1]))


def test_a_probe_memorises_the_control_task_only_on_word_types_it_has_seen():
    """Features that identify the word type (one-hot) let a probe learn the control task for
    types in its training folds and nothing for unseen ones: the control task measures memory."""
    gen = torch.Generator().manual_seed(0)
    seen_types = [f"s{i}" for i in range(8)]                     # each in every fold
    words, groups = [], []
    for g in range(8):
        words += seen_types + [f"u{g}_{i}" for i in range(8)]     # 8 types seen only in this group
        groups += [g] * 16
    labels = torch.randint(0, 4, (len(words),), generator=gen)
    control = evidence.control_labels(words, labels, seed=1)
    types = sorted(set(words))
    onehot = torch.zeros(len(words), len(types))
    onehot[torch.arange(len(words)), torch.tensor([types.index(w) for w in words])] = 1.0
    groups = torch.tensor(groups)
    acc_seen, acc_unseen = [], []
    for mask_name in ("seen", "unseen"):
        keep = torch.tensor([w.startswith("s") == (mask_name == "seen") for w in words])
        acc = evidence.probe_accuracy(onehot[keep][None], control[keep], groups[keep], steps=200)
        (acc_seen if mask_name == "seen" else acc_unseen).append(float(acc))
    assert acc_seen[0] == 1.0                                     # every seen type memorised
    assert acc_unseen[0] < 0.6                                    # unseen types: no better than guessing the tag mix


def test_pos_probe_control_task_is_probe_accuracy_on_control_labels(encoder):
    model, tokenizer = encoder
    data = evidence.tagged_features(model=model, tokenizer=tokenizer)
    result = evidence.pos_probe(data, [2])
    control = evidence.control_labels(data["words"], data["labels"], seed=0)
    q, k = data["q"][2], data["k"][2]                             # (H, N, d_k)
    direct = evidence.probe_accuracy(torch.cat([q, k]), control, data["groups"]).reshape(2, -1)
    assert torch.allclose(result["control"][0], direct[0]) and torch.allclose(result["control_k"][0], direct[1])
    assert result["control_random"].shape == result["random"].shape
    assert (result["q"] - result["control"]).min() > 0.3         # selective: tags, not memorised words
