"""Chapter 11 exercises: the checkers against independent oracles (the bytes of a real float32
tensor, attnlib's online-softmax step, the state tiled_attention really carries) and the
widgets end to end."""
import math

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from attnlib import online_softmax_step, tiled_attention
from attnlib.exercises import exercise_names
from attnlib.exercises.ch11 import (
    MEMORY_T, RESCALE_BLOCK_MAX, RESCALE_L_OLD, RESCALE_M_OLD, STATE_BLOCK, STATE_HEAD, STATE_LAYER,
    check_rescale_factor, check_state_per_query, check_weights_memory, state_example,
)
from widget_checks import assert_widget_round_trip

BAD_INPUTS = [None, "", "   ", "abc", math.nan, math.inf, -math.inf, "nan", "inf", [1, 2], {"a": 1},
              b"7", True, np.zeros((2, 2)), torch.zeros(3), torch.zeros(3, 3, dtype=torch.complex64)]
CHECKERS = [check_weights_memory, check_rescale_factor, check_state_per_query]


def test_registered():
    assert exercise_names(11) == ["weights_memory", "rescale_factor", "state_per_query"]


@pytest.mark.parametrize("check", CHECKERS)
@pytest.mark.parametrize("bad", BAD_INPUTS, ids=repr)
def test_bad_inputs_never_raise(check, bad):
    fb = check(bad)
    assert not fb.correct and fb.message


# ----------------------------------------------------------------------------- weights_memory
def _weights_mib_oracle(T: int) -> float:
    """The bytes of a real float32 (T, T) tensor, without allocating T * T numbers."""
    probe = torch.empty(T, T, dtype=torch.float32, device="meta")
    return probe.element_size() * probe.nelement() / 2 ** 20


def test_memory_right_answer_in_every_form():
    mib = _weights_mib_oracle(MEMORY_T)
    for answer in (mib, int(mib), str(mib), f" {mib:.1f} ", f"{mib:g}".replace(".", ","), np.float32(mib), torch.tensor(mib)):
        fb = check_weights_memory(answer)
        assert fb.correct and "MiB" in fb.message, answer


def test_memory_other_T():
    assert check_weights_memory(_weights_mib_oracle(1000), T=1000).correct
    assert not check_weights_memory(_weights_mib_oracle(MEMORY_T), T=1000).correct


@pytest.mark.parametrize("answer, fragment", [
    (MEMORY_T ** 2 * 4, "size in bytes"),
    (MEMORY_T ** 2 * 4 / 1e6, "megabytes"),
    (MEMORY_T ** 2 / 2 ** 20, "counts entries"),
    (MEMORY_T ** 2 * 8 / 2 ** 20, "float64"),
    (MEMORY_T ** 2 * 2 / 2 ** 20, "2-byte"),
    (MEMORY_T ** 2 * 4 / 2 ** 30, "GiB"),
    (MEMORY_T * 4 / 2 ** 20, "one row"),
    (MEMORY_T ** 2 * 4 / 2 ** 10, "KiB"),
    (-5, "positive"),
    (123, "not it"),
])
def test_memory_typical_mistakes(answer, fragment):
    fb = check_weights_memory(answer)
    assert not fb.correct and fragment in fb.message, fb


# ----------------------------------------------------------------------------- rescale_factor
def _rescale_oracle() -> float:
    """The correction attnlib's online-softmax step applies for the exercise's numbers."""
    m = torch.tensor(RESCALE_M_OLD, dtype=torch.float64)
    l = torch.tensor(RESCALE_L_OLD, dtype=torch.float64)
    block = torch.tensor([RESCALE_BLOCK_MAX - 1.5, RESCALE_BLOCK_MAX], dtype=torch.float64)
    _, _, correction = online_softmax_step(m, l, block)
    return correction.item()


def test_rescale_right_answer():
    factor = _rescale_oracle()
    assert 0 < factor < 1
    for answer in (factor, f"{factor:.4f}", f"{factor:.3f}", np.float64(factor)):
        fb = check_rescale_factor(answer)
        assert fb.correct and "exp(" in fb.message, answer


def test_rescale_when_the_maximum_does_not_grow():
    assert check_rescale_factor(1.0, m_old=4.0, block_max=1.0).correct


@pytest.mark.parametrize("answer, fragment", [
    (math.exp(RESCALE_BLOCK_MAX - RESCALE_M_OLD), "inverse"),
    (RESCALE_M_OLD - RESCALE_BLOCK_MAX, "exponent"),
    (RESCALE_BLOCK_MAX - RESCALE_M_OLD, "gap"),
    (1, "Without rescaling"),
    (RESCALE_M_OLD / RESCALE_BLOCK_MAX, "not ratios"),
    (RESCALE_L_OLD * math.exp(RESCALE_M_OLD - RESCALE_BLOCK_MAX), "rescaled sum"),
    (math.exp(-RESCALE_BLOCK_MAX), "only the new maximum"),
    (0, "throw away"),
    (0.7, "not it"),
])
def test_rescale_typical_mistakes(answer, fragment):
    fb = check_rescale_factor(answer)
    assert not fb.correct and fragment in fb.message, fb


# ----------------------------------------------------------------------------- state_per_query
class _StateProbe(TorchFunctionMode):
    """Counts the numbers in the running state tiled_attention creates (torch.full/zeros)."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in (torch.full, torch.zeros):
            self.numel += result.numel()
        return result


def _head_width() -> int:
    """d_v of the course's encoder, from its config (not from the exercise's measurement)."""
    from attnlib.encoder import load_encoder

    cfg = load_encoder()[0].config
    return cfg.hidden_size // cfg.num_attention_heads


def _state_oracle(d_v: int | None = None) -> int:
    """The running state attnlib.tiled_attention really allocates for one query block,
    divided by the block's rows (random inputs of the real head's width)."""
    d_v = d_v or _head_width()
    rows = STATE_BLOCK
    q, k, v = torch.randn(rows, 16), torch.randn(3 * STATE_BLOCK, 16), torch.randn(3 * STATE_BLOCK, d_v)
    with _StateProbe() as probe:
        tiled_attention(q, k, v, block_size=STATE_BLOCK)
    return probe.numel // rows


def test_state_example_is_the_real_head():
    """The measurement behind the exercise: the real head's width, its length, and the state
    the probe above counts; tiled_attention's output there equals PyTorch's SDPA."""
    from attnlib import corpus
    from attnlib.encoder import head_qkv

    data = state_example()
    _, q, k, v = head_qkv(corpus.RUNNING, STATE_LAYER, STATE_HEAD)
    assert (data["T"], data["d_v"], data["block"]) == (q.shape[0], v.shape[-1], STATE_BLOCK) == (
        q.shape[0], _head_width(), STATE_BLOCK)
    assert data["per_query"] == _state_oracle(data["d_v"]) and data["matches_reference"]
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=STATE_BLOCK),
                               torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-4)


def test_state_right_answer():
    n = _state_oracle()
    for answer in (n, float(n), str(n), f"{n}.0"):
        fb = check_state_per_query(answer)
        assert fb.correct and "whatever T_k is" in fb.message and "Measured" in fb.message, answer


def test_state_grade_follows_the_measurement():
    """Predict, then check: the target is the measured count, not a constant."""
    data = state_example()
    other = {**data, "d_v": 64, "per_query": 66, "state": [[4, 1], [4, 1], [4, 64]]}
    assert check_state_per_query(66, other).correct and not check_state_per_query(66, data).correct
    assert check_state_per_query(data["per_query"], data).correct


@pytest.mark.parametrize("answer, fragment", [
    ("d_v", "running maximum m and the running sum l"),
    ("d_v + 1", "One number is missing"),
    (2, "weighted sum of value rows"),
    (STATE_BLOCK, "used and discarded"),
    ("block * d_v", "used and discarded"),
    ("T", "grows with the length"),
    (34.5, "whole number"),
    (7, "not it"),
])
def test_state_typical_mistakes(answer, fragment):
    d_v, T = _head_width(), state_example()["T"]
    if isinstance(answer, str):
        answer = eval(answer, {"d_v": d_v, "T": T, "block": STATE_BLOCK})  # noqa: S307 - the test's own table
    fb = check_state_per_query(answer)
    assert not fb.correct and fragment in fb.message, fb


# ----------------------------------------------------------------------------- widgets
@pytest.mark.parametrize("name, wrong_answer, fragment, right_answer", [
    ("weights_memory", "268.435456", "megabytes", lambda: f"{_weights_mib_oracle(MEMORY_T):g}"),
    ("rescale_factor", "1", "Without rescaling", lambda: f"{_rescale_oracle():.4f}"),
    ("state_per_query", "2", "weighted sum of value rows", lambda: str(_state_oracle())),
])
def test_widgets(name, wrong_answer, fragment, right_answer):
    assert_widget_round_trip(11, name, wrong_answer, fragment, right_answer())
