"""attnlib.masks.sliding_window_mask (chapter 12): against its definition written as a double
loop, the causal mask it becomes when the window covers everything, the keys each query sees,
the receptive field L (w - 1) + 1 of L stacked layers (reachability through the masks), and
PyTorch's kernel given the same mask."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.masks import sliding_window_mask


@pytest.mark.parametrize("T, w", [(1, 1), (5, 1), (5, 2), (7, 3), (6, 6), (4, 10)])
def test_equals_the_definition(T, w):
    expected = torch.tensor([[i - w < j <= i for j in range(T)] for i in range(T)], dtype=torch.bool)
    got = sliding_window_mask(T, w)
    assert got.dtype == torch.bool and torch.equal(got, expected)


@pytest.mark.parametrize("T", [0, 1, 6])
def test_window_covering_everything_is_causal(T):
    assert torch.equal(sliding_window_mask(T, max(T, 1)), attnlib.causal_mask(T))
    assert torch.equal(sliding_window_mask(T, T + 5), attnlib.causal_mask(T))


def test_keys_per_query():
    m = sliding_window_mask(12, 4)
    assert m.sum(-1).tolist() == [min(i + 1, 4) for i in range(12)]


@pytest.mark.parametrize("w, L", [(2, 1), (3, 2), (4, 3), (5, 4)])
def test_receptive_field_of_stacked_layers(w, L):
    """Position i receives from j after L layers iff a chain of L allowed hops leads there: the
    boolean L-th power of the mask.  The last query of a long sequence reaches L (w - 1) + 1."""
    T = 40
    m = sliding_window_mask(T, w).int()
    reach = torch.eye(T, dtype=torch.int64)
    for _ in range(L):
        reach = ((reach @ m.long()) > 0).long()
    assert int(reach[-1].sum()) == L * (w - 1) + 1


def test_attention_under_the_mask_equals_pytorch():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = sliding_window_mask(9, 3)
    out, weights = attnlib.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert float(weights[..., ~mask].abs().max()) == 0.0


@pytest.mark.parametrize("args, err", [((3, 0), ValueError), ((-1, 2), ValueError), ((3, 2.0), TypeError),
                                       (("3", 2), TypeError), ((3, True), TypeError)])
def test_bad_arguments(args, err):
    with pytest.raises(err):
        sliding_window_mask(*args)
