"""Causal and padding masks, boolean <-> additive conversion (also of Hugging Face's finfo.min
masks), and the one mask-application path."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.masks import apply_mask, causal_block, prepare_mask

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("T_q,T_k", [(1, 1), (4, 4), (3, 6), (6, 3)])
def test_causal_mask_matches_torch_is_causal(T_q, T_k):
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(T_q, 4, generator=g), torch.randn(T_k, 4, generator=g), torch.randn(T_k, 2, generator=g)
    mask = attnlib.causal_mask(T_q, T_k)
    assert mask.shape == (T_q, T_k) and mask.dtype == torch.bool
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))
    for i in range(T_q):
        for j in range(T_k):
            assert bool(mask[i, j]) == (j <= i)


@pytest.mark.parametrize("q_start, q_end, k_start, k_end", [(0, 4, 0, 4), (3, 7, 0, 5), (2, 5, 4, 9), (6, 8, 1, 3),
                                                            (0, 3, 5, 8), (4, 4, 0, 3)])
def test_causal_block_is_a_tile_of_the_lower_triangle(q_start, q_end, k_start, k_end):
    full = torch.ones(10, 10, dtype=torch.bool).tril()                     # oracle: key j <= query i
    assert torch.equal(causal_block(q_start, q_end, k_start, k_end), full[q_start:q_end, k_start:k_end])


def test_causal_mask_device(device):
    assert attnlib.causal_mask(3, device=device).device.type == device.type
    assert attnlib.causal_mask(3, device="meta").device.type == "meta"


def test_causal_mask_of_length_zero_is_empty():
    assert attnlib.causal_mask(0).shape == (0, 0) and attnlib.causal_mask(0, 3).shape == (0, 3)


@pytest.mark.parametrize("bad, exc", [(-2, ValueError), (2.5, TypeError), ("3", TypeError), (True, TypeError),
                                      (None, TypeError)])
def test_causal_mask_bad_lengths(bad, exc):
    with pytest.raises(exc, match="T_q must be a non-negative int"):
        attnlib.causal_mask(bad)
    if bad is not None:                                      # T_k=None means T_k = T_q
        with pytest.raises(exc, match="T_k must be a non-negative int"):
            attnlib.causal_mask(3, bad)


@pytest.mark.parametrize("bad, exc", [(2.5, TypeError), (torch.zeros(2), TypeError), ("gpu", ValueError)])
def test_causal_mask_bad_device(bad, exc):
    with pytest.raises(exc, match="device"):
        attnlib.causal_mask(3, device=bad)


def test_padding_mask_from_real_tokenizer(encoder):
    _, tokenizer = encoder
    batch = ["Attention is all you need.", "Hello there!"]
    enc = tokenizer(batch, padding=True, return_tensors="pt")
    mask = attnlib.padding_mask(enc["attention_mask"])
    B, T = enc["input_ids"].shape
    assert mask.shape == (B, 1, 1, T) and mask.dtype == torch.bool
    assert torch.equal(mask[:, 0, 0], enc["attention_mask"].bool())
    # broadcasts against (B, H, T_q, T) scores, and padded keys get zero weight
    q = torch.randn(B, 12, T, 8, generator=torch.Generator().manual_seed(1))
    _, weights = attnlib.scaled_dot_product_attention(q, q, q, mask)
    assert (weights[1, :, :, ~enc["attention_mask"][1].bool()] == 0).all()


@pytest.mark.parametrize("bad,err", [
    (torch.ones(3), ValueError), (torch.ones(2, 3, 4), ValueError),
    (torch.tensor([[1, 2, 0]]), ValueError), (torch.tensor([[0.5, 1.0]]), ValueError), ([[1, 0]], TypeError),
    (None, TypeError)])
def test_padding_mask_errors(bad, err):
    with pytest.raises(err, match="attention_mask"):
        attnlib.padding_mask(bad)


def test_padding_mask_accepts_numpy_bool_and_meta():
    assert torch.equal(attnlib.padding_mask(np.array([[1, 0]]))[0, 0, 0], torch.tensor([True, False]))
    assert attnlib.padding_mask(torch.tensor([[True, False]])).shape == (1, 1, 1, 2)
    assert attnlib.padding_mask(torch.ones(2, 3, device="meta")).device.type == "meta"


# ---------------------------------------------------------------- bool <-> additive
def test_additive_boolean_round_trip_gives_same_attention():
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(2)) > 0.4
    additive = attnlib.to_additive(mask)
    assert additive.dtype == torch.float32 and set(additive.unique().tolist()) <= {0.0, float("-inf")}
    assert torch.equal(additive == 0, mask)
    assert torch.equal(attnlib.to_boolean(additive), mask)
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(5, 4, generator=g), torch.randn(7, 4, generator=g), torch.randn(7, 3, generator=g)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for m in (mask, additive):
        out, _ = attnlib.scaled_dot_product_attention(q, k, v, m)
        torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("dtype", [torch.float16, "float16", "bfloat16", torch.float64])
def test_to_additive_dtype_by_object_or_name(dtype):
    out = attnlib.to_additive(torch.tensor([True, False]), dtype)
    assert out.dtype == (getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    assert out.tolist() == [0.0, -math.inf]


@pytest.mark.parametrize("bad", ["int32", "half-ish", torch.int64, 3, None])
def test_to_additive_bad_dtype(bad):
    with pytest.raises(TypeError, match="dtype must be a floating"):
        attnlib.to_additive(torch.tensor([True]), bad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_to_boolean_recognises_finfo_min(dtype):
    lo = torch.finfo(dtype).min
    mask = torch.tensor([0.0, -2.5, -1e4 if dtype != torch.float16 else -1e3, lo, lo / 2, -math.inf],
                        dtype=torch.float64).to(dtype)
    mask = torch.cat([mask, (torch.tensor(lo, dtype=dtype) + torch.tensor(-3.0, dtype=dtype))[None]])  # ALiBi-style
    assert attnlib.to_boolean(mask).tolist() == [True, True, True, False, False, False, False]


def test_to_boolean_keeps_a_smaller_dtypes_minimum_as_a_bias():
    # documented: float16's minimum stored in a float32 mask is a finite bias, kept
    assert attnlib.to_boolean(torch.tensor([torch.finfo(torch.float16).min])).tolist() == [True]


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [True, False])
def test_to_boolean_of_hugging_face_masks_equals_their_boolean_masks(dtype, causal):
    """Oracle: transformers builds the same mask as bool (sdpa_mask) and as finfo.min floats
    (eager_mask); to_boolean must turn the second into the first."""
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function, eager_mask, sdpa_mask
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    fn = causal_mask_function if causal else bidirectional_mask_function
    common = dict(batch_size=3, q_length=5, kv_length=5, attention_mask=attention_mask, mask_function=fn)
    as_float = eager_mask(dtype=dtype, **common)
    as_bool = sdpa_mask(allow_is_causal_skip=False, allow_is_bidirectional_skip=False, **common)
    assert as_float.dtype == dtype and as_bool.dtype == torch.bool
    assert torch.equal(attnlib.to_boolean(as_float), as_bool.expand(as_float.shape))
    ours = attnlib.padding_mask(attention_mask)
    if causal:
        ours = attnlib.causal_mask(5) & ours
    assert torch.equal(attnlib.to_boolean(as_float), ours.expand(3, 1, 5, 5))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_to_boolean_refuses_nan_and_plus_inf(bad):
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        attnlib.to_boolean(torch.tensor([0.0, bad]))


def test_conversion_errors():
    with pytest.raises(TypeError, match="bool mask"):
        attnlib.to_additive(torch.zeros(2, 2))
    with pytest.raises(TypeError, match="float"):
        attnlib.to_boolean(torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        attnlib.to_boolean([0.0])


# ---------------------------------------------------------------- the one application path
def test_apply_mask_bool_sets_minus_inf_and_keeps_the_rest():
    scores = torch.arange(6.0).view(2, 3)
    keep = torch.tensor([[True, False, True], [False, False, True]])
    out = apply_mask(scores, keep)
    assert torch.equal(out.isneginf(), ~keep) and torch.equal(out[keep], scores[keep])
    assert apply_mask(scores, None) is scores


def test_apply_mask_float_is_added_in_the_scores_dtype():
    scores = torch.zeros(2, 2)
    bias = torch.tensor([[0.5, -1.0], [float("-inf"), 2.0]], dtype=torch.float64)
    out = apply_mask(scores, bias)
    assert out.dtype == torch.float32
    assert out.tolist() == [[0.5, -1.0], [float("-inf"), 2.0]]
    # broadcasting: a (T_k,) key bias over every query
    assert apply_mask(torch.zeros(3, 2), torch.tensor([0.0, -1.0])).tolist() == [[0.0, -1.0]] * 3


def test_prepare_mask_checks_and_reshapes():
    assert prepare_mask(None, (2,), 3, 4, "cpu") is None
    assert prepare_mask(torch.ones(4, dtype=torch.bool), (2,), 3, 4, "cpu").shape == (1, 4)
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        prepare_mask(None, (2,), 3, 4, "cpu", is_causal="no")
    with pytest.raises(ValueError, match="either mask or is_causal"):
        prepare_mask(torch.ones(3, 4, dtype=torch.bool), (2,), 3, 4, "cpu", is_causal=True)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) does not broadcast .* \(2, 3, 4\)"):
        prepare_mask(torch.ones(3, 5, dtype=torch.bool), (2,), 3, 4, "cpu")
    with pytest.raises(ValueError, match="mask is on meta but q, k, v are on cpu"):
        prepare_mask(torch.ones(3, 4, device="meta"), (2,), 3, 4, "cpu")
    with pytest.raises(TypeError, match="mask must be bool .* or floating point"):
        prepare_mask(torch.ones(3, 4, dtype=torch.int32), (2,), 3, 4, "cpu")
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        prepare_mask("causal", (2,), 3, 4, "cpu")


# ------------------------------------------------- where the causal triangle sits when T_q != T_k

ALIGN_SHAPES = [(1, 1), (4, 4), (3, 6), (1, 6), (6, 3), (2, 0), (0, 2)]


@pytest.mark.parametrize("T_q,T_k", ALIGN_SHAPES)
def test_causal_mask_alignments_equal_torchs_causal_biases(T_q, T_k):
    """top_left is torch's causal_upper_left (and is_causal=True), bottom_right its
    causal_lower_right: the same boolean matrix, cell for cell."""
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    assert torch.equal(attnlib.causal_mask(T_q, T_k, align="top_left"), causal_upper_left(T_q, T_k)._materialize())
    with pytest.warns(UserWarning) if T_q > T_k else _no_warning():
        lower_right = causal_lower_right(T_q, T_k)._materialize()
    assert torch.equal(attnlib.causal_mask(T_q, T_k, align="bottom_right"), lower_right)
    assert torch.equal(attnlib.causal_mask(T_q, T_k), attnlib.causal_mask(T_q, T_k, align="top_left"))   # the default


def _no_warning():
    import contextlib
    return contextlib.nullcontext()


@pytest.mark.parametrize("T_q,T_k", [(3, 6), (1, 6), (6, 3), (5, 5)])
def test_bottom_right_attention_equals_torchs_lower_right_kernel(T_q, T_k):
    """Attention under align="bottom_right" equals F.scaled_dot_product_attention with
    attn_mask=causal_lower_right (queries at positions T_k - T_q + i), and top_left equals
    is_causal=True; the two differ whenever T_q != T_k.  Fully masked rows (T_q > T_k) are
    zeros in attnlib; torch warns that its kernel may give NaN there, so they are compared only
    where torch's output is finite."""
    from torch.nn.attention.bias import causal_lower_right

    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, T_q, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, T_k, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, T_k, 5, generator=g, dtype=torch.float64)
    ours_br, _ = attnlib.scaled_dot_product_attention(q, k, v, mask=attnlib.causal_mask(T_q, T_k, align="bottom_right"))
    with pytest.warns(UserWarning) if T_q > T_k else _no_warning():
        torch_br = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T_q, T_k))
    live = attnlib.causal_mask(T_q, T_k, align="bottom_right").any(-1)         # (T_q,) rows with a key
    torch.testing.assert_close(ours_br[..., live, :], torch_br[..., live, :])
    assert torch.equal(ours_br[..., ~live, :], torch.zeros_like(ours_br[..., ~live, :]))
    ours_tl, _ = attnlib.scaled_dot_product_attention(q, k, v, mask=attnlib.causal_mask(T_q, T_k, align="top_left"))
    torch.testing.assert_close(ours_tl, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    gap = (ours_br - ours_tl).abs().max().item()
    assert (gap > 1e-3) == (T_q != T_k)


@pytest.mark.parametrize("T_q,T_k", [(3, 6), (6, 3), (4, 4), (1, 5)])
def test_bottom_right_is_the_formula(T_q, T_k):
    """Entry (i, j) is j <= T_k - T_q + i; the last query sees every key, top_left's first
    query sees key 0 only."""
    mask = attnlib.causal_mask(T_q, T_k, align="bottom_right")
    for i in range(T_q):
        for j in range(T_k):
            assert bool(mask[i, j]) == (j <= T_k - T_q + i)
    if T_q and T_k:
        assert bool(mask[-1].all())
        assert int(attnlib.causal_mask(T_q, T_k)[0].sum()) == 1


@pytest.mark.parametrize("bad", ["bottom-right", "lower_right", None, 1, "TOP_LEFT"])
def test_causal_mask_bad_align(bad):
    with pytest.raises(ValueError, match="align must be one of 'top_left', 'bottom_right'"):
        attnlib.causal_mask(2, 4, align=bad)


def test_causal_mask_bottom_right_device_and_empty(device):
    assert attnlib.causal_mask(2, 5, align="bottom_right", device=device).device.type == device.type
    assert attnlib.causal_mask(6, 3, align="bottom_right", device="meta").shape == (6, 3)
    assert attnlib.causal_mask(0, 4, align="bottom_right").shape == (0, 4)


# ------------------------------------------------- packed sequences: document (block-diagonal) masks

from attnlib.masks import document_ids, document_mask  # noqa: E402


@pytest.mark.parametrize("lengths", [[3], [3, 2], [1, 4, 2], [2, 2, 2, 1]])
@pytest.mark.parametrize("causal", [False, True])
def test_document_mask_is_block_diagonal(lengths, causal):
    """The oracle: torch.block_diag of one all-True block per document (lower triangles with
    causal=True)."""
    blocks = [torch.ones(n, n, dtype=torch.bool) for n in lengths]
    if causal:
        blocks = [b.tril() for b in blocks]
    expected = torch.block_diag(*blocks)
    got = document_mask(document_ids(lengths), causal=causal)
    assert got.dtype == torch.bool and torch.equal(got, expected)


def test_document_ids_and_batched_masks():
    assert document_ids([3, 1, 2]).tolist() == [0, 0, 0, 1, 2, 2]
    assert document_ids(torch.tensor([2, 2])).tolist() == [0, 0, 1, 1]
    ids = torch.stack([document_ids([2, 3]), document_ids([4, 1])])           # (B, T)
    mask = document_mask(ids, causal=True)
    assert mask.shape == (2, 1, 5, 5)
    for b in range(2):
        assert torch.equal(mask[b, 0], document_mask(ids[b], causal=True))
    # equal ids are one document wherever they stand
    assert document_mask(torch.tensor([0, 1, 0]))[0].tolist() == [True, False, True]


def _packed_case(lengths, d_k=8, d_v=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    return (torch.randn(2, T, d_k, generator=g, dtype=torch.float64), torch.randn(2, T, d_k, generator=g, dtype=torch.float64),
            torch.randn(2, T, d_v, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("causal", [False, True])
def test_packed_attention_equals_each_document_alone(causal):
    """Under the document mask every output equals the one of its document run alone
    (PyTorch's kernel on that document, with is_causal for the causal variant), and torch's
    kernel under the same mask agrees."""
    lengths = [4, 1, 6, 3]
    q, k, v = _packed_case(lengths)
    mask = document_mask(document_ids(lengths), causal=causal)
    out, weights = attnlib.scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    start = 0
    for n in lengths:
        s = slice(start, start + n)
        alone = F.scaled_dot_product_attention(q[:, s], k[:, s], v[:, s], is_causal=causal)
        torch.testing.assert_close(out[:, s], alone)
        assert not weights[:, s, :start].any() and not weights[:, s, start + n:].any()   # no weight outside it
        start += n


@pytest.mark.parametrize("causal", [False, True])
def test_no_leak_across_documents(causal):
    """Changing the keys, values and queries of document 0 changes no output of the other
    documents, to the last bit; without the mask (or with the plain causal mask) it changes them."""
    lengths = [5, 4, 3]
    q, k, v = _packed_case(lengths)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    g = torch.Generator().manual_seed(9)
    for t in (q2, k2, v2):
        t[:, 2] = torch.randn(t.shape[0], t.shape[-1], generator=g, dtype=t.dtype)   # one token of document 0
    mask = document_mask(document_ids(lengths), causal=causal)
    out, _ = attnlib.scaled_dot_product_attention(q, k, v, mask=mask)
    out2, _ = attnlib.scaled_dot_product_attention(q2, k2, v2, mask=mask)
    assert torch.equal(out[:, 5:], out2[:, 5:])                                   # documents 1 and 2 untouched
    assert (out[:, :5] - out2[:, :5]).abs().max() > 1e-3                          # document 0 did change
    plain = attnlib.causal_mask(12) if causal else None
    leak = (attnlib.scaled_dot_product_attention(q, k, v, mask=plain)[0]
            - attnlib.scaled_dot_product_attention(q2, k2, v2, mask=plain)[0])[:, 5:].abs().max()
    assert leak > 1e-3                                                           # the mask is what stops it


def test_document_mask_causal_is_refused_by_the_causal_lab():
    """document_mask(causal=True) builds its triangle with causal_mask, so a learner cannot hand
    it to the causal-mask lab in place of writing the mask."""
    from attnlib.exercises.labs import check_causal_mask

    fb = check_causal_mask(lambda T: document_mask(torch.zeros(T, dtype=torch.long), causal=True))
    assert not fb.correct and fb.diagnosis == "library_call"


@pytest.mark.parametrize("call, err, text", [
    (lambda: document_mask(torch.zeros(3)), TypeError, "integer document ids"),
    (lambda: document_mask(torch.zeros(3, dtype=torch.bool)), TypeError, "integer document ids"),
    (lambda: document_mask(torch.zeros(1, 2, 3, dtype=torch.long)), ValueError, r"\(T,\) or \(B, T\)"),
    (lambda: document_mask([0, 0, 1]), TypeError, "ids"),
    (lambda: document_mask(torch.zeros(3, dtype=torch.long), causal="yes"), TypeError, "causal must be True or False"),
    (lambda: document_ids([2, 0]), ValueError, r"lengths\[1\] must be a positive int"),
    (lambda: document_ids([]), ValueError, "at least one document"),
    (lambda: document_ids([2.0, 1]), TypeError, r"lengths\[0\] must be a positive int"),
    (lambda: document_ids(3), TypeError, "list, tuple or 1-D integer tensor"),
    (lambda: document_ids(torch.tensor([2.0])), TypeError, "1-D ints"),
])
def test_document_mask_errors(call, err, text):
    with pytest.raises(err, match=text):
        call()
