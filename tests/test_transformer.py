"""The small transformer, its look-back task, the text it reads and a short real training run.
The closeness measure and the ideal pattern are tested in test_measures.py."""
import math

import pytest
import torch

import attnlib
from attnlib.corpus import load_text, words_of
from attnlib.measures import pattern_closeness
from attnlib.transformer import IGNORE, LookBackTask, TinyTransformer, evaluate, train


@pytest.fixture(scope="module")
def words():
    return words_of(load_text("gettysburg"))


def test_text_is_the_gettysburg_address(words):
    assert words[:6] == ["four", "score", "and", "seven", "years", "ago"]
    assert words[-3:] == ["the", "earth", "."]
    assert "battle-field" in words and "--" in words


def test_words_of_splits_punctuation():
    assert words_of("The people, by the people.") == ["the", "people", ",", "by", "the", "people", "."]
    assert words_of("") == []
    assert words_of("Battle-field -- it's") == ["battle-field", "--", "it", "'", "s"]


def test_batch_targets_and_shuffling(words):
    task = LookBackTask(words, offsets=(1, 3), seq_len=8)
    tokens, targets = task.batch(16, torch.Generator().manual_seed(0))
    assert tokens.shape == (16, 8) and targets.shape == (16, 8, 2) and tokens.dtype == torch.long
    for b in range(16):
        for i in range(8):
            for j, o in enumerate((1, 3)):
                assert targets[b, i, j] == (tokens[b, i - o] if i >= o else IGNORE)
    # every shuffled sequence is a permutation of some window of the real text
    ids = task.ids.tolist()
    windows = {tuple(sorted(ids[s:s + 8])) for s in range(len(ids) - 7)}
    assert all(tuple(sorted(row)) in windows for row in tokens.tolist())
    again, _ = task.batch(16, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, again)


def test_unshuffled_batches_are_the_text_in_order(words):
    task = LookBackTask(words, offsets=(1,), seq_len=5, shuffle=False)
    tokens, _ = task.batch(4, torch.Generator().manual_seed(1))
    text = " ".join(words)
    for row in tokens:
        assert " ".join(task.decode(row)) in text


def test_model_shapes_seed_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = TinyTransformer(50, d_model=16, n_heads=4, n_layers=2, max_len=10, n_targets=3, seed=7)
    after = torch.rand(1)
    assert torch.equal(before, after), "building a model must not consume the global RNG"
    b = TinyTransformer(50, d_model=16, n_heads=4, n_layers=2, max_len=10, n_targets=3, seed=7)
    c = TinyTransformer(50, d_model=16, n_heads=4, n_layers=2, max_len=10, n_targets=3, seed=8)
    assert torch.equal(a.blocks[0].attn.q_proj.weight, b.blocks[0].attn.q_proj.weight)
    assert not torch.equal(a.blocks[0].attn.q_proj.weight, c.blocks[0].attn.q_proj.weight)
    logits, weights = a(torch.randint(0, 50, (3, 10)))
    assert logits.shape == (3, 10, 3, 50) and len(weights) == 2
    assert all(w.shape == (3, 4, 10, 10) for w in weights)
    assert (weights[0][..., ~attnlib.causal_mask(10)] == 0).all(), "causal by default"


def test_model_is_causal_in_its_outputs():
    model = TinyTransformer(20, d_model=8, n_heads=2, max_len=6, seed=0)
    tokens = torch.randint(0, 20, (1, 6), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[0, 4] = (tokens[0, 4] + 1) % 20
    a, _ = model(tokens)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4], b[:, 4])


def test_two_heads_learn_the_two_look_ups(words):
    """The chapter's claim on a shorter run: loss falls and each ideal pattern is found by a head."""
    task = LookBackTask(words, offsets=(1, 2), seq_len=12)
    model = TinyTransformer(len(task.vocab), d_model=32, n_heads=2, n_targets=2, max_len=12, seed=0)
    threads = torch.get_num_threads()
    history = train(model, task, steps=250, seed=0, progress=False)
    assert torch.get_num_threads() == threads
    assert len(history["loss"]) == 250
    assert history["loss"][0] > math.log(len(task.vocab)) - 1, "starts near chance"
    assert sum(history["loss"][-20:]) / 20 < 0.25
    result = evaluate(model, task)
    closeness = pattern_closeness(result["weights"][0], task.offsets)               # (H, 2)
    assert closeness[:, 0].max() > 0.9 and closeness[:, 1].max() > 0.9
    assert closeness[:, 0].argmax() != closeness[:, 1].argmax(), "the two jobs go to different heads"
    assert (result["accuracy"] > 0.95).all()


def test_one_head_cannot_do_both_jobs(words):
    task = LookBackTask(words, offsets=(1, 2), seq_len=12)
    model = TinyTransformer(len(task.vocab), d_model=32, n_heads=1, n_targets=2, max_len=12, seed=0)
    history = train(model, task, steps=250, seed=0, progress=False)
    assert sum(history["loss"][-20:]) / 20 > 0.5
    assert evaluate(model, task)["accuracy"].min() < 0.9


def test_training_is_reproducible_and_probe_is_recorded(words):
    task = LookBackTask(words, offsets=(1,), seq_len=6)
    runs = []
    for _ in range(2):
        model = TinyTransformer(len(task.vocab), d_model=16, n_heads=2, max_len=6, seed=3)
        runs.append(train(model, task, steps=12, seed=4, progress=False, probe_every=5,
                          probe=lambda m: m.pos_emb.weight.norm().item()))
    assert runs[0]["loss"] == runs[1]["loss"]
    assert runs[0]["probe_step"] == [0, 5, 10, 12] and len(runs[0]["probe"]) == 4


# ----------------------------------------------------------------------------- errors
def test_errors(words):
    with pytest.raises(ValueError, match=r"offsets must be ints in 1..7, got \(0, 2\)"):
        LookBackTask(words, offsets=(0, 2), seq_len=8)
    with pytest.raises(ValueError, match=r"need at least seq_len = 10 words, got 3"):
        LookBackTask(["a", "b", "c"], seq_len=10)
    with pytest.raises(ValueError, match=r"no text named 'nope'"):
        load_text("nope")
    with pytest.raises(ValueError, match=r"no text named '../data/gettysburg'"):
        load_text("../data/gettysburg")
    with pytest.raises(TypeError, match=r"name must be a str"):
        load_text(None)
    with pytest.raises(TypeError, match=r"text must be a str, got NoneType"):
        words_of(None)
    with pytest.raises(TypeError, match=r"words must be a list of words"):
        LookBackTask("four score and seven years ago our fathers", seq_len=4)
    with pytest.raises(TypeError, match=r"seq_len must be a positive int, got float"):
        LookBackTask(words, seq_len=8.0)
    with pytest.raises(ValueError, match=r"seq_len must be an int >= 2, got 1"):
        LookBackTask(words, offsets=(1,), seq_len=1)
    with pytest.raises(TypeError, match=r"offsets must be ints, got str"):
        LookBackTask(words, offsets=("1",), seq_len=8)
    with pytest.raises(ValueError, match=r"offsets must be ints in 1..7, got \(\)"):
        LookBackTask(words, offsets=(), seq_len=8)
    with pytest.raises(TypeError, match=r"shuffle must be True or False"):
        LookBackTask(words, seq_len=8, shuffle="no")
    with pytest.raises(TypeError, match=r"batch_size must be a positive int"):
        LookBackTask(words, seq_len=8).batch(None)
    with pytest.raises(TypeError, match=r"vocab_size must be a positive int, got float"):
        TinyTransformer(10.0)
    with pytest.raises(ValueError, match=r"n_layers must be a positive int, got 0"):
        TinyTransformer(10, n_layers=0)
    with pytest.raises(TypeError, match=r"causal must be True or False"):
        TinyTransformer(10, causal="yes")
    with pytest.raises(ValueError, match=r"d_mlp must be a non-negative int, got -1"):
        TinyTransformer(10, d_mlp=-1)
    model = TinyTransformer(10, d_model=8, n_heads=2, max_len=4)
    with pytest.raises(ValueError, match=r"tokens must be \(B, T\) with 1 <= T <= 4, got shape \(1, 5\)"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids must lie in 0..9, got 0..10"):
        model(torch.tensor([[0, 10]]))
    with pytest.raises(TypeError, match=r"tokens must be an int64 tensor of ids, got torch.float32"):
        model(torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"d_model = 10 is not divisible by n_heads = 4"):
        TinyTransformer(10, d_model=10, n_heads=4)
    with pytest.raises(ValueError, match=r"steps must be a positive int, got 0"):
        train(model, None, steps=0)
    with pytest.raises(TypeError, match=r"steps must be a positive int, got str"):
        train(model, None, steps="10")
    with pytest.raises(ValueError, match=r"lr must be > 0.0"):
        train(model, None, lr=0)
    with pytest.raises(TypeError, match=r"probe must be a function"):
        train(model, None, probe="closeness")
    with pytest.raises(TypeError, match=r"threads must be a positive int"):
        train(model, None, threads=1.5)
    with pytest.raises(TypeError, match=r"batch_size must be a positive int"):
        evaluate(model, None, batch_size="256")
