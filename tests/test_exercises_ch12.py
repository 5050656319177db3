"""Chapter 12 exercises: the checkers against independent oracles (attnlib's RoPE on the
encoder's own q and k, attnlib.kv_cache_bytes and the bytes of real KVCache tensors,
attnlib.kv_head_of and PyTorch's repeat_interleave layout) and the widgets end to end."""
import math

import numpy as np
import pytest
import torch

import attnlib
from attnlib.exercises import exercise_names
from attnlib.exercises.ch12 import (CACHE_MODEL, GQA, SHIFT, WINDOW, check_cache_bytes, check_gqa_head,
                                    check_receptive_field, check_shifted_score, shifted_score_data)
from attnlib.exercises.registry import exercise_data
from widget_checks import assert_widget_round_trip

BAD_INPUTS = [None, "", "   ", "abc", math.nan, math.inf, -math.inf, "nan", "inf", [1, 2], {"a": 1},
              b"7", True, np.zeros((2, 2)), torch.zeros(3), torch.zeros(3, 3, dtype=torch.complex64)]


@pytest.fixture(scope="module")
def shift_data():
    return exercise_data(12, "shifted_score")


def test_registered():
    assert exercise_names(12) == ["shifted_score", "cache_bytes", "gqa_head", "receptive_field"]


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=repr)
def test_bad_inputs_never_raise(bad, shift_data):
    for fb in (check_shifted_score(bad, shift_data), check_cache_bytes(bad), check_gqa_head(bad),
               check_receptive_field(bad)):
        assert not fb.correct and fb.message


# ----------------------------------------------------------------------------- shifted_score
def test_shift_data_is_rope_on_the_encoders_q_and_k(shift_data):
    tokens, q, k, _ = attnlib.encoder.head_qkv(SHIFT["text"], SHIFT["layer"], SHIFT["head"])
    i, j = tokens.index(SHIFT["query"]), tokens.index(SHIFT["key"])
    assert (shift_data["i"], shift_data["j"]) == (i, j)
    rotated_q = attnlib.apply_rope(q.double(), torch.arange(len(tokens)) + SHIFT["shift"])
    rotated_k = attnlib.apply_rope(k.double(), torch.arange(len(tokens)) + SHIFT["shift"])
    oracle = (rotated_q[i] @ rotated_k[j]).item() / math.sqrt(q.shape[-1])
    assert shift_data["shifted"] == pytest.approx(oracle, abs=1e-9)
    assert shift_data["score"] == pytest.approx(oracle, abs=1e-9)      # the point of the exercise
    assert abs(shift_data["query_only"] - shift_data["score"]) > 1e-2    # moving one token does change it


def test_shifted_score_feedback(shift_data):
    s = shift_data["score"]
    for answer in (s, f"{s:.4f}", f" {s:.3f} ", str(s).replace(".", ",")):
        assert check_shifted_score(answer, shift_data).correct, answer
    assert "only the query moved" in check_shifted_score(f"{shift_data['query_only']:.4f}", shift_data).message
    assert "without any rotation" in check_shifted_score(f"{shift_data['unrotated']:.4f}", shift_data).message
    assert "not cancel" not in check_shifted_score(7, shift_data).message
    assert not check_shifted_score(s + 0.05, shift_data).correct


# ----------------------------------------------------------------------------- cache_bytes
def _cache_gib_oracle(m):
    """The bytes of real bfloat16 KVCache tensors on the meta device (no memory), over all layers."""
    k = torch.empty(m["batch"], m["n_kv_heads"], m["T"], m["d_head"], dtype=torch.bfloat16, device="meta")
    per_layer = 2 * k.nelement() * k.element_size()
    assert per_layer * m["n_layers"] == attnlib.kv_cache_bytes(
        n_layers=m["n_layers"], n_kv_heads=m["n_kv_heads"], d_head=m["d_head"], T=m["T"], batch=m["batch"],
        bytes_per_number=m["bytes"])
    return per_layer * m["n_layers"] / 2 ** 30


def test_cache_right_answer_in_every_form():
    gib = _cache_gib_oracle(CACHE_MODEL)
    for answer in (gib, str(gib), f"{gib:.2f}", np.float64(gib), torch.tensor(gib)):
        fb = check_cache_bytes(answer)
        assert fb.correct and "GiB" in fb.message, answer


def test_cache_other_model():
    m = dict(CACHE_MODEL, n_kv_heads=2, T=1000)
    assert check_cache_bytes(_cache_gib_oracle(m), model=m).correct
    assert not check_cache_bytes(_cache_gib_oracle(CACHE_MODEL), model=m).correct


@pytest.mark.parametrize("factor, fragment", [
    (CACHE_MODEL["n_heads"] / CACHE_MODEL["n_kv_heads"], "query heads share"),
    (0.5, "only keys or only values"),
    (2, "2 bytes"),
    (1 / CACHE_MODEL["batch"], "one sequence"),
    (1 / CACHE_MODEL["n_layers"], "one layer"),
    (2 ** 30, "size in bytes"),
    (2 ** 30 / 1e9, "gigabytes"),
    (1024, "MiB"),
])
def test_cache_typical_mistakes(factor, fragment):
    fb = check_cache_bytes(_cache_gib_oracle(CACHE_MODEL) * factor)
    assert not fb.correct and fragment in fb.message, fb.message


def test_cache_nonsense():
    assert "positive" in check_cache_bytes(-1).message
    assert not check_cache_bytes(3.3).correct


# ----------------------------------------------------------------------------- gqa_head
def test_gqa_answer_is_kv_head_of_and_the_repeat_interleave_layout():
    H, H_kv, head = GQA["H"], GQA["H_kv"], GQA["head"]
    labels = torch.arange(H_kv).repeat_interleave(H // H_kv)           # PyTorch's enable_gqa layout
    answer = attnlib.kv_head_of(head, H, H_kv)
    assert answer == int(labels[head])
    assert check_gqa_head(answer).correct and check_gqa_head(str(answer)).correct
    for h in range(H):
        assert check_gqa_head(int(labels[h]), head=h).correct


@pytest.mark.parametrize("answer, fragment", [
    (GQA["head"] % GQA["H_kv"], "repeat_interleave"),
    (GQA["head"] // GQA["H_kv"], "group size"),
    (GQA["H_kv"], "only"),
    (-1, "only"),
    (2.5, "whole number"),
])
def test_gqa_typical_mistakes(answer, fragment):
    fb = check_gqa_head(answer)
    assert not fb.correct and fragment in fb.message, fb.message


# ----------------------------------------------------------------------------- receptive_field
def _reach(layers, window, T=64):
    """Positions that can reach the last token through `layers` masks: the boolean power."""
    m = attnlib.masks.sliding_window_mask(T, window).long()
    reach = torch.eye(T, dtype=torch.long)
    for _ in range(layers):
        reach = ((reach @ m) > 0).long()
    return int(reach[-1].sum())


def test_receptive_field_answer_is_the_reachability_of_the_masks():
    answer = _reach(WINDOW["layers"], WINDOW["window"])
    assert check_receptive_field(answer).correct and check_receptive_field(str(answer)).correct
    for L, w in [(1, 1), (1, 4), (3, 2), (4, 7)]:
        assert check_receptive_field(_reach(L, w), layers=L, window=w).correct


@pytest.mark.parametrize("answer, fragment", [
    (WINDOW["layers"] * WINDOW["window"], "itself once per layer"),
    (WINDOW["layers"] * (WINDOW["window"] - 1), "count the last token"),
    (WINDOW["window"], "one layer's window"),
    (WINDOW["window"] ** WINDOW["layers"], "do not multiply"),
    (0, "at least itself"),
    (24.5, "whole number"),
    (7, "not it"),
])
def test_receptive_field_typical_mistakes(answer, fragment):
    fb = check_receptive_field(answer)
    assert not fb.correct and fragment in fb.message, fb.message


@pytest.mark.parametrize("name, wrong_answer, fragment, right_answer", [
    ("receptive_field", "30", "itself once per layer", lambda: "25"),
    ("cache_bytes", "16", "query heads share", lambda: "4"),
    ("gqa_head", "5", "repeat_interleave", lambda: "3"),
    ("shifted_score", "99", "not it", lambda: f"{exercise_data(12, 'shifted_score')['score']:.4f}"),
])
def test_widgets(name, wrong_answer, fragment, right_answer):
    assert_widget_round_trip(12, name, wrong_answer, fragment, right_answer())
