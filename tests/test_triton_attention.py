"""attnlib.triton_attention, the FlashAttention forward kernel in Triton, against PyTorch's
scaled_dot_product_attention (1e-5 in float32), its log-sum-exp against torch.logsumexp of the
scores.  On a CPU it runs under Triton's interpreter, which is slow: every case is small
(the whole file runs in well under a minute) and uses 16-wide blocks so that a T of 40 or 50
crosses several blocks and ends in a partial one."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib import kernels

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed (Linux only)")

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def _qkv(lead, T_q, T_k, d_k, d_v, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, T_q, d_k, generator=g)
    k = torch.randn(*lead, T_k, d_k, generator=g)
    v = torch.randn(*lead, T_k, d_v, generator=g)
    return (x.to(DEVICE, dtype) for x in (q, k, v))


def _scores(q, k, is_causal):
    s = (q.double() @ k.double().transpose(-2, -1)) / q.shape[-1] ** 0.5
    if is_causal:
        s = s.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return s


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("T_q, T_k", [(40, 40), (17, 50), (50, 17), (1, 33)])
def test_float32_equals_torch_sdpa_and_lse(is_causal, T_q, T_k):
    q, k, v = _qkv((2, 2), T_q, T_k, 24, 20, seed=T_q + T_k)
    out, lse = attnlib.triton_attention(q, k, v, is_causal, block_m=16, block_n=16, return_lse=True)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert lse.shape == (2, 2, T_q) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.double(), torch.logsumexp(_scores(q, k, is_causal), -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_m, block_n", [(32, 16), (16, 32)])
def test_causal_with_unequal_blocks(block_m, block_n):
    """The causal loop skips the key tiles in a query block's future; its bound must be in
    query rows, whatever the key tile size."""
    q, k, v = _qkv((1, 1), 70, 70, 16, 16, seed=block_m)
    out = attnlib.triton_attention(q, k, v, True, block_m=block_m, block_n=block_n)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)


def test_default_blocks_scale_and_3d_input():
    q, k, v = _qkv((3,), 70, 70, 16, 16, seed=5)
    out = attnlib.triton_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_float16(is_causal):
    q, k, v = _qkv((1, 2), 40, 40, 32, 32, dtype=torch.float16, seed=7)
    out = attnlib.triton_attention(q, k, v, is_causal, block_m=16, block_n=16)
    assert out.dtype == torch.float16
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=is_causal)
    torch.testing.assert_close(out.float(), expected, atol=2e-3, rtol=2e-3)


def test_empty_inputs_follow_attnlib_conventions():
    q, k, v = _qkv((1,), 3, 0, 8, 4)
    out, lse = attnlib.triton_attention(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros(1, 3, 4, device=DEVICE)) and bool(torch.isneginf(lse).all())


@pytest.mark.skipif(CUDA, reason="the interpreter refuses bfloat16; a GPU runs it")
def test_bfloat16_is_refused_under_the_interpreter():
    q, k, v = _qkv((1,), 4, 4, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16 is refused under Triton's CPU interpreter"):
        attnlib.triton_attention(q, k, v)


@pytest.mark.parametrize("kwargs, err, text", [
    (dict(block_m=24), ValueError, "power of 2"),
    (dict(block_n=8), ValueError, "power of 2"),
    (dict(is_causal="yes"), TypeError, "is_causal"),
])
def test_argument_errors(kwargs, err, text):
    q, k, v = _qkv((1,), 4, 4, 16, 16)
    with pytest.raises(err, match=text):
        attnlib.triton_attention(q, k, v, **kwargs)


def test_shape_and_dtype_errors():
    q, k, v = _qkv((2,), 4, 4, 16, 16)
    with pytest.raises(ValueError, match="same leading dimensions"):
        attnlib.triton_attention(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="d_k"):
        attnlib.triton_attention(q, k[..., :8], v)
    with pytest.raises(TypeError, match="float64"):
        attnlib.triton_attention(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match="at most 256"):
        attnlib.triton_attention(*_qkv((1,), 2, 2, 300, 8))


def test_missing_triton_gives_a_clear_import_error(monkeypatch):
    monkeypatch.setattr(kernels, "triton_available", lambda: False)
    with pytest.raises(ImportError, match="Linux only"):
        attnlib.triton_attention(torch.zeros(2, 16), torch.zeros(2, 16), torch.zeros(2, 16))


@pytest.mark.skipif(CUDA, reason="the interpreter is chosen only without CUDA")
def test_interpreter_is_chosen_at_import_and_a_late_choice_is_explained():
    """Importing attnlib sets TRITON_INTERPRET=1; if triton was imported before (here by Hugging
    Face's Llama code) without it, the first call says what happened instead of failing inside."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    call = "attnlib.triton_attention(torch.zeros(1, 4, 16), torch.zeros(1, 4, 16), torch.zeros(1, 4, 16))"
    ok = subprocess.run([sys.executable, "-c", f"import attnlib, torch, os; import transformers.models.llama.modeling_llama; "
                         f"print(os.environ['TRITON_INTERPRET'], {call}.shape)"], env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("1 torch.Size([1, 4, 16])"), ok.stderr[-2000:]
    late = subprocess.run([sys.executable, "-c", f"import transformers.models.llama.modeling_llama, attnlib, torch; {call}"],
                          env=env, capture_output=True, text=True)
    assert late.returncode != 0 and "Import attnlib before that module" in late.stderr, late.stderr[-2000:]
