"""Chapter 9's pronoun study: the frozen set of minimal pairs and the every-head shift.

The set ``corpus.COREFERENCE_INANIMATE`` was committed before the model read it, and chapter 9's
one pre-specified test runs on it; these tests keep it frozen (its hash), keep it a set of
minimal pairs the encoder can read, and check :func:`attnlib.evidence.head_shifts` against the
one-head measurement it generalises (:func:`attnlib.evidence.referent_shifts`), its oracle.
"""
from __future__ import annotations

import hashlib

import pytest
import torch

from attnlib import corpus, evidence

#: SHA-256 of ``repr(corpus.COREFERENCE_INANIMATE)`` as committed in 732cd1c, before the test ran.
FROZEN_SHA256 = "78d00cb7caf917e6f15861f4b6c41e77901473fbed315e271aaea1cb5f3cb360"


def test_the_frozen_set_is_unchanged_since_it_was_committed():
    """Any edit of a pair (a word, the order, a referent) changes the hash: a frozen set that
    changes after its result is seen is no longer a test."""
    assert hashlib.sha256(repr(corpus.COREFERENCE_INANIMATE).encode()).hexdigest() == FROZEN_SHA256


def test_the_frozen_set_is_new_and_made_of_minimal_pairs_the_encoder_can_read(encoder):
    _, tokenizer = encoder
    pairs = corpus.COREFERENCE_INANIMATE
    assert len(pairs) == 16 and len({p[0] for p in pairs}) == 16
    earlier = {t for p in corpus.COREFERENCE_PAIRS + corpus.COREFERENCE_HELD_OUT for t in p[:2]}
    assert not earlier & {t for p in pairs for t in p[:2]}, "no sentence of the earlier sets"
    for text_a, text_b, ref_a, ref_b in pairs:
        words_a, words_b = text_a.split(), text_b.split()
        assert len(words_a) == len(words_b) and sum(a != b for a, b in zip(words_a, words_b)) == 1, text_a
        tokens_a, tokens_b = tokenizer.tokenize(text_a), tokenizer.tokenize(text_b)
        assert len(tokens_a) == len(tokens_b) and sum(a != b for a, b in zip(tokens_a, tokens_b)) == 1, text_a
        for tokens in (tokens_a, tokens_b):
            assert tokens.count("it") == tokens.count(ref_a) == tokens.count(ref_b) == 1 and ref_a != ref_b
        assert words_a.index(ref_a) < words_a.index(ref_b), "text_a's referent is the subject"


def test_head_shifts_equal_referent_shifts_for_every_head(encoder):
    """Oracle: the one-head measurement, head by head; one run per sentence gives the same."""
    model, tokenizer = encoder
    pairs = corpus.COREFERENCE_INANIMATE[:2] + corpus.COREFERENCE_PAIRS[:1]
    every = evidence.head_shifts(pairs, model=model, tokenizer=tokenizer)
    n_layers, n_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert every.shape == (len(pairs), n_layers, n_heads) and every.dtype == torch.float64
    for layer in range(n_layers):
        for head in range(n_heads):
            one = [r["shift"] for r in evidence.referent_shifts(pairs, layer, head, model=model, tokenizer=tokenizer)]
            assert every[:, layer, head].tolist() == pytest.approx(one, abs=1e-12), (layer, head)
    assert every.abs().max() > 0.01, "the shifts are not all zero"


def test_head_shifts_turn_round_when_the_referents_are_swapped(encoder):
    model, tokenizer = encoder
    pairs = corpus.COREFERENCE_INANIMATE[:3]
    swapped = [(a, b, rb, ra) for a, b, ra, rb in pairs]
    right = evidence.head_shifts(pairs, model=model, tokenizer=tokenizer)
    wrong = evidence.head_shifts(swapped, model=model, tokenizer=tokenizer)
    assert torch.allclose(wrong, -right, atol=1e-12)


def test_head_shifts_refuse_what_is_not_a_list_of_pairs(encoder):
    model, tokenizer = encoder
    with pytest.raises(TypeError, match="pairs must be"):
        evidence.head_shifts("The cat sat.", model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="does not occur"):
        evidence.head_shifts([("The cat sat.", "The dog sat.", "cat", "dog")], model=model, tokenizer=tokenizer)
