"""attnlib.KVCache and decoding: token-by-token through the cache equals one causal pass
(PyTorch's kernel) to 1e-5; nbytes is the exact memory; generate with and without a cache
gives the same tokens; grouped-query attention (attnlib.scaled_dot_product_attention with
enable_gqa) equals PyTorch's enable_gqa=True."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.attention import kv_head_of, repeat_kv, scaled_dot_product_attention
from attnlib.kv_cache import KVCache, kv_cache_bytes
from attnlib.transformer import generate


def _qkv(B, H, H_kv, T, d_k=8, d_v=6, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, d_k, generator=g, dtype=dtype), torch.randn(B, H_kv, T, d_k, generator=g, dtype=dtype),
            torch.randn(B, H_kv, T, d_v, generator=g, dtype=dtype))


@pytest.mark.parametrize("H, H_kv", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("prompt", [1, 5])
def test_decoding_through_the_cache_equals_one_causal_pass(H, H_kv, prompt):
    q, k, v = _qkv(2, H, H_kv, 13)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)   # (B, H, T, d_v)
    cache = KVCache()
    cache.append(k[:, :, :prompt], v[:, :, :prompt])                     # the prompt at once
    outs = [cache.attend(q[:, :, :prompt])]
    for t in range(prompt, 13):                                          # then one token at a time
        cache.append(k[:, :, t:t + 1], v[:, :, t:t + 1])
        outs.append(cache.attend(q[:, :, t:t + 1]))
    torch.testing.assert_close(torch.cat(outs, dim=2), reference, atol=1e-5, rtol=1e-5)
    assert len(cache) == 13


def test_nbytes_is_exact_and_linear_in_T():
    for dtype, size in ((torch.float32, 4), (torch.float16, 2)):
        cache = KVCache()
        assert cache.nbytes == 0 and len(cache) == 0
        _, k, v = _qkv(3, 2, 2, 10, d_k=8, d_v=6, dtype=dtype)
        sizes = []
        for t in range(10):
            cache.append(k[:, :, t:t + 1], v[:, :, t:t + 1])
            sizes.append(cache.nbytes)
            assert cache.nbytes == cache.keys.nelement() * cache.keys.element_size() \
                + cache.values.nelement() * cache.values.element_size()
        assert sizes == [(t + 1) * 3 * 2 * (8 + 6) * size for t in range(10)]


def test_kv_cache_bytes_formula():
    assert kv_cache_bytes(n_layers=32, n_kv_heads=8, d_head=128, T=8192) == 2 * 32 * 8 * 8192 * 128 * 2
    assert kv_cache_bytes(n_layers=2, n_kv_heads=3, d_head=4, T=5, batch=6, bytes_per_number=4) == 2 * 2 * 6 * 3 * 5 * 4 * 4
    # it is what KVCache.nbytes reports for a full model's caches
    caches = [KVCache() for _ in range(3)]
    for c in caches:
        c.append(torch.zeros(2, 4, 7, 16, dtype=torch.float16), torch.zeros(2, 4, 7, 16, dtype=torch.float16))
    assert sum(c.nbytes for c in caches) == kv_cache_bytes(n_layers=3, n_kv_heads=4, d_head=16, T=7, batch=2)
    with pytest.raises(ValueError, match="n_layers"):
        kv_cache_bytes(n_layers=0, n_kv_heads=1, d_head=1, T=1)
    with pytest.raises(TypeError, match="d_head"):
        kv_cache_bytes(n_layers=1, n_kv_heads=1, d_head=1.5, T=1)


def _model(**kw):
    args = dict(d_model=32, n_heads=4, n_layers=2, max_len=40, seed=3)
    args.update(kw)
    return attnlib.transformer.TinyTransformer(23, **args)


def test_forward_with_a_cache_equals_the_rows_of_one_causal_pass():
    """One forward pass: a prompt, then one token at a time through model(tokens, cache=...),
    gives the logits and the weights of one causal pass over the whole sequence."""
    model = _model().eval()
    tokens = torch.randint(0, 23, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full, full_w = model(tokens)                                     # (B, T, V), L x (B, H, T, T)
        caches = model.new_cache()
        rows, w_rows = [], []
        logits, w = model(tokens[:, :6], cache=caches)
        rows.append(logits)
        w_rows.append(torch.nn.functional.pad(w[1], (0, 17 - 6)))       # (B, H, 6, 6) -> (B, H, 6, 17)
        for t in range(6, 17):
            logits, w = model(tokens[:, t:t + 1], cache=caches)
            rows.append(logits)
            assert w[1].shape == (2, 4, 1, t + 1)                        # the new query over every cached key
            w_rows.append(torch.nn.functional.pad(w[1], (0, 17 - t - 1)))
    torch.testing.assert_close(torch.cat(rows, dim=1), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(w_rows, dim=2), full_w[1], atol=1e-5, rtol=1e-5)
    assert len(caches[0]) == 17
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 30, dtype=torch.long), cache=caches)
    with pytest.raises(TypeError, match="KVCache"):
        model(tokens, cache=[KVCache()])


def test_the_cache_keeps_its_own_copy_and_checks_widths():
    cache = KVCache()
    k, v = torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4)
    cache.append(k, v)
    k.zero_()                                                            # the caller reuses its buffer
    assert cache.keys.sum() == 24
    cache.append(k, v)
    k.fill_(5.0)
    assert cache.keys.sum() == 24 and len(cache) == 6
    with pytest.raises(ValueError, match="d_k = 4"):
        cache.attend(torch.zeros(1, 2, 1, 8))


def test_generate_with_and_without_cache_agree():
    model = _model(n_layers=1)
    prompt = torch.randint(0, 23, (3, 4), generator=torch.Generator().manual_seed(1))
    with_cache, caches = generate(model, prompt, 25, return_caches=True)
    without = generate(model, prompt, 25, use_cache=False)
    assert torch.equal(with_cache, without) and with_cache.shape == (3, 29)
    assert torch.equal(with_cache[:, :4], prompt)
    assert len(caches[0]) == 28                                           # the last token is never fed back


def test_generate_and_cache_errors():
    with pytest.raises(TypeError, match="TinyTransformer"):
        generate(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="max_len"):
        generate(_model(), torch.zeros(1, 2, dtype=torch.long), 39)
    cache = KVCache()
    with pytest.raises(ValueError, match="empty"):
        cache.attend(torch.zeros(1, 1, 1, 4))
    with pytest.raises(ValueError, match="4-D"):
        cache.append(torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))
    with pytest.raises(TypeError, match="floating"):
        cache.append(torch.zeros(1, 1, 3, 4, dtype=torch.long), torch.zeros(1, 1, 3, 4))
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
    with pytest.raises(ValueError, match="match the cache"):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 5))
    with pytest.raises(TypeError, match="float32"):
        cache.append(torch.zeros(1, 2, 1, 4, dtype=torch.float16), torch.zeros(1, 2, 1, 5, dtype=torch.float16))
    with pytest.raises(ValueError, match="only T = 3"):
        cache.attend(torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match="must divide"):
        cache.attend(torch.zeros(1, 3, 1, 4))


# ---- grouped-query attention ---------------------------------------------------------------

@pytest.mark.parametrize("H, H_kv", [(8, 8), (8, 4), (8, 2), (8, 1), (6, 3)])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_gqa_equals_torch_enable_gqa(H, H_kv, is_causal, backend):
    g = torch.Generator().manual_seed(H * 10 + H_kv)
    q = torch.randn(2, H, 9, 16, generator=g)
    k, v = torch.randn(2, H_kv, 11, 16, generator=g), torch.randn(2, H_kv, 11, 12, generator=g)
    out, weights = scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True, backend=backend)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    if backend == "reference":
        assert weights.shape == (2, H, 9, 11)


def test_kv_head_of_is_the_repeat_interleave_layout():
    for H, H_kv in ((8, 2), (12, 4), (4, 1), (4, 4)):
        k = torch.arange(H_kv, dtype=torch.float32).view(1, H_kv, 1, 1).expand(1, H_kv, 3, 2)
        repeated, _ = repeat_kv(torch.zeros(1, H, 3, 2), k, k)
        assert [int(repeated[0, h, 0, 0]) for h in range(H)] == [kv_head_of(h, H, H_kv) for h in range(H)]
    assert kv_head_of(-1, 8, 2) == 1
    with pytest.raises(IndexError):
        kv_head_of(8, 8, 2)


@pytest.mark.parametrize("call, err, text", [
    (lambda: scaled_dot_product_attention(torch.randn(1, 8, 3, 4), torch.randn(1, 3, 3, 4), torch.randn(1, 3, 3, 4),
                                          enable_gqa=True), ValueError, r"must divide .* H = 8, H_kv = 3"),
    (lambda: scaled_dot_product_attention(torch.randn(1, 8, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)),
     ValueError, "pass enable_gqa=True"),
    (lambda: scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), enable_gqa=True),
     ValueError, "at least 3 dimensions"),
    (lambda: scaled_dot_product_attention(torch.randn(1, 4, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 1, 3, 4),
                                          enable_gqa=True), ValueError, "same number of heads"),
    (lambda: scaled_dot_product_attention(torch.randn(1, 4, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4),
                                          enable_gqa="yes"), TypeError, "enable_gqa"),
    (lambda: kv_head_of(0, 6, 4), ValueError, "must divide"),
])
def test_gqa_errors(call, err, text):
    with pytest.raises(err, match=text):
        call()


def test_mqa_without_the_flag_still_broadcasts():
    """H_kv = 1 broadcasts over the heads, as before (and as in PyTorch without enable_gqa)."""
    q, k, v = _qkv(2, 4, 1, 6)
    out, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, enable_gqa=True), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("prompt,error", [(torch.tensor([[1, 10 ** 6]]), ValueError), (torch.tensor([[-1, 2]]), ValueError),
                                          (torch.tensor([[1.0, 2.0]]), TypeError),
                                          (torch.tensor([[1, 2]], dtype=torch.uint8), TypeError)])
def test_generate_checks_the_prompt_on_both_paths(prompt, error, use_cache):
    """The cached path used to skip the token-range check of the uncached one (an IndexError
    from F.embedding; floats and uint8 failed inside it): both paths now name the problem."""
    with pytest.raises(error, match="token ids must lie|int64 tensor of ids"):
        generate(_model(), prompt, 3, use_cache=use_cache)


# ---------------------------------------------------------------- preallocated, doubling storage (issue 29)
def _storage(t):
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_appends_hold_what_concatenation_holds_and_keep_dtype_and_device(dtype, device):
    """Oracle: torch.cat of everything appended.  Chunks of 3, 1, 0, 7, 1, ... tokens, growing
    the buffers several times; dtype and device kept; nbytes counts the T tokens held."""
    g = torch.Generator().manual_seed(40)
    cache, ks, vs = KVCache(), [], []
    for t in [3, 1, 0, 7, 1, 1, 1, 20, 2, 1]:
        k = torch.randn(2, 3, t, 5, generator=g).to(device=device, dtype=dtype)
        v = torch.randn(2, 3, t, 4, generator=g).to(device=device, dtype=dtype)
        cache.append(k, v)
        ks.append(k), vs.append(v)
        assert torch.equal(cache.keys, torch.cat(ks, dim=2)) and torch.equal(cache.values, torch.cat(vs, dim=2))
        assert cache.keys.dtype == dtype and cache.keys.device.type == device.type
        assert cache.nbytes == cache.keys.nelement() * cache.keys.element_size() \
            + cache.values.nelement() * cache.values.element_size()
        assert cache.capacity >= len(cache) and cache.allocated_nbytes == cache.nbytes * cache.capacity // len(cache)
    assert len(cache) == 37


def test_one_token_appends_reallocate_only_when_the_capacity_doubles():
    """n one-token appends: the buffers are reallocated about log2(n) times (concatenation
    allocated at every append), capacity is the next power of two, and the tokens copied by
    the growths sum to less than 2n."""
    cache, ptrs = KVCache(), []
    for t in range(300):
        cache.append(torch.full((1, 2, 1, 4), float(t)), torch.full((1, 2, 1, 3), float(-t)))
        ptrs.append(_storage(cache.keys))
    assert len(set(ptrs)) == 10                      # capacities 1, 2, 4, ..., 512: 9 growths
    assert cache.capacity == 512 and len(cache) == 300   # they copied 1 + 2 + ... + 256 = 511 < 2 * 300 tokens
    assert cache.keys[0, 1, :, 0].tolist() == [float(t) for t in range(300)]


def test_views_are_not_aliased_wrongly_across_appends_and_growth():
    """A view taken earlier keeps the tokens it showed, after an append in place and after a
    reallocation; the caller's tensors are copied, never aliased."""
    cache = KVCache()
    k0, v0 = torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2)
    cache.append(k0, v0)
    k0.fill_(99.0)                                   # the caller's tensor changes later
    assert (cache.keys == 1).all()
    early = cache.keys                               # (1, 1, 2, 2): capacity 2
    cache.append(torch.full((1, 1, 1, 2), 2.0), torch.full((1, 1, 1, 2), 2.0))   # grows to 4
    middle = cache.keys
    assert _storage(middle) != _storage(early) and early.shape[2] == 2 and (early == 1).all()
    new_k = torch.full((1, 1, 1, 2), 3.0)
    cache.append(new_k, new_k.clone())               # fits: written in place after the 3 held
    assert _storage(cache.keys) == _storage(middle)
    new_k.fill_(-5.0)
    assert middle.shape[2] == 3 and middle[0, 0, :, 0].tolist() == [1.0, 1.0, 2.0]
    assert cache.keys[0, 0, :, 0].tolist() == [1.0, 1.0, 2.0, 3.0]


def test_append_does_not_record_autograd_history():
    k = torch.randn(1, 2, 3, 4, requires_grad=True)
    cache = KVCache()
    cache.append(k, k * 2)
    cache.append(k[:, :, :1], k[:, :, :1] * 2)
    assert not cache.keys.requires_grad and not cache.values.requires_grad


@pytest.mark.parametrize("prompt, new", [(9, 4), (1, 12), (12, 1), (5, 8)])
def test_the_cache_applies_the_bottom_right_causal_mask(prompt, new):
    """A prompt of `prompt` tokens in the cache, then `new` tokens decoded one at a time or
    appended as one chunk: both equal one call with causal_mask(new, prompt + new,
    align="bottom_right") and PyTorch's causal_lower_right, and differ from the top-left mask
    (is_causal=True) whenever the cache held anything before."""
    from torch.nn.attention.bias import causal_lower_right

    T = prompt + new
    q, k, v = _qkv(2, 4, 2, T)
    q_new = q[:, :, prompt:]                                             # (B, H, new, d_k)
    one_call, _ = scaled_dot_product_attention(q_new, k, v, attnlib.causal_mask(new, T, align="bottom_right"),
                                               enable_gqa=True)
    torch.testing.assert_close(one_call, F.scaled_dot_product_attention(
        q_new, k, v, attn_mask=causal_lower_right(new, T), enable_gqa=True), atol=1e-5, rtol=1e-5)
    steps, chunk = KVCache(), KVCache()
    steps.append(k[:, :, :prompt], v[:, :, :prompt])
    chunk.append(k[:, :, :prompt], v[:, :, :prompt])
    outs = []
    for t in range(prompt, T):                                           # token by token
        steps.append(k[:, :, t:t + 1], v[:, :, t:t + 1])
        outs.append(steps.attend(q[:, :, t:t + 1]))
    chunk.append(k[:, :, prompt:], v[:, :, prompt:])                     # all new tokens at once
    torch.testing.assert_close(torch.cat(outs, dim=2), one_call, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(chunk.attend(q_new), one_call, atol=1e-6, rtol=1e-6)
    top_left, _ = scaled_dot_product_attention(q_new, k, v, is_causal=True, enable_gqa=True)
    assert (top_left - one_call).abs().max() > 1e-2


# ------------------------------------------------- issue 47: the width check on a later append
@pytest.mark.parametrize("which", ["k", "v"])
def test_a_later_append_of_another_width_is_refused_by_name(which):
    """The cache's d_k and d_v are fixed by its first append; a later append of another width is
    refused with the library's ValueError naming the cache's shape (without the check torch would
    raise a RuntimeError about a shape mismatch deep inside the copy)."""
    from attnlib import KVCache
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
    k, v = torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 5)
    if which == "k":
        k = torch.zeros(1, 2, 1, 6)
    else:
        v = torch.zeros(1, 2, 1, 6)
    with pytest.raises(ValueError, match=rf"{which} must match the cache's \(B, H_kv, ., d\) = \(1, 2, ., {4 if which == 'k' else 5}\)"):
        cache.append(k, v)
    assert cache.length == 3                                   # nothing was written
