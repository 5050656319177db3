"""attnlib.measures against independent oracles: hand-computed small cases, Python loops over
the definitions, torch's own cosine similarity, networkx's weighted in-degree, the pretrained
encoder's attention weights; plus invariants and hostile inputs."""
import networkx as nx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.corpus import SINK_PROBES
from attnlib.measures import (
    asymmetry, attention_share, cosine_similarities, offset_share,
    received_attention, sink_shares, token_groups, top_keys,
)


def random_weights(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).softmax(dim=-1).to(dtype)


# A 3 x 3 matrix small enough to check by hand; rows are queries and sum to 1.
HAND = torch.tensor([[0.5, 0.5, 0.0],
                     [0.2, 0.3, 0.5],
                     [0.9, 0.0, 0.1]], dtype=torch.float64)


# --- received_attention / attention_share ---------------------------------------------------

def test_received_attention_by_hand_and_against_loops():
    # column means, worked out by hand: (0.5 + 0.2 + 0.9) / 3, (0.5 + 0.3 + 0) / 3, (0 + 0.5 + 0.1) / 3
    torch.testing.assert_close(received_attention(HAND), torch.tensor([1.6, 0.8, 0.6], dtype=torch.float64) / 3)
    w = random_weights(2, 3, 5, 5)
    want = np.array([[[np.mean([w[a, b, i, j].item() for i in range(5)]) for j in range(5)]
                      for b in range(3)] for a in range(2)])
    np.testing.assert_allclose(received_attention(w).numpy(), want, atol=1e-12)


def test_received_attention_sums_to_one_and_follows_dtype_and_device(device):
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        w = random_weights(6, 12, 7, 7, dtype=dtype).to(device)
        got = received_attention(w)
        assert got.shape == (6, 12, 7) and got.dtype == dtype and got.device == w.device
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        torch.testing.assert_close(got.sum(-1).double().cpu(), torch.ones(6, 12, dtype=torch.float64),
                                   atol=tol, rtol=0)


def test_received_attention_is_networkx_in_degree_over_T():
    """Independent oracle: networkx's weighted in-degree of the attention graph, divided by T."""
    w = random_weights(6, 6, seed=3)
    graph = attnlib.graphs.attention_graph(w, list("abcdef"))
    in_degree = dict(graph.in_degree(weight="weight"))
    np.testing.assert_allclose(received_attention(w).numpy(), [in_degree[j] / 6 for j in range(6)], atol=1e-12)
    share = attnlib.graphs.in_weight(graph, share=True)
    np.testing.assert_allclose([share[j] for j in range(6)], [in_degree[j] / 6 for j in range(6)], atol=1e-12)


def test_attention_share_by_hand_and_against_loops():
    # keys {0, 2}: rows give 0.5, 0.7, 1.0, mean 2.2 / 3
    assert attention_share(HAND, [0, 2]).item() == pytest.approx(2.2 / 3, abs=1e-12)
    assert attention_share(HAND, 1).item() == pytest.approx(0.8 / 3, abs=1e-12)   # one int = one key
    w = random_weights(2, 3, 5, 5)
    got = attention_share(w, [0, 4])
    want = np.zeros((2, 3))
    for a in range(2):
        for b in range(3):
            want[a, b] = np.mean([w[a, b, i, 0].item() + w[a, b, i, 4].item() for i in range(5)])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    torch.testing.assert_close(attention_share(w, range(5)), torch.ones(2, 3, dtype=torch.float64))
    assert torch.equal(attention_share(w, []), torch.zeros(2, 3, dtype=torch.float64))
    # positions may come as a tensor or numpy array of ints
    torch.testing.assert_close(attention_share(w, torch.tensor([0, 4])), got)
    torch.testing.assert_close(attention_share(w, np.array([0, 4])), got)


def test_attention_share_of_disjoint_sets_adds_up():
    w = random_weights(4, 8, 8, seed=5)
    parts = attention_share(w, [0, 3]) + attention_share(w, [1, 2, 7]) + attention_share(w, [4, 5, 6])
    torch.testing.assert_close(parts, torch.ones(4, dtype=torch.float64))


# --- offset_share -------------------------------------------

def test_offset_share_by_hand_and_against_loops():
    # offset -1: HAND[1, 0] = 0.2, HAND[2, 1] = 0.0 -> 0.1; offset +1: 0.5, 0.5 -> 0.5; offset 0: 0.3
    assert offset_share(HAND, -1).item() == pytest.approx(0.1, abs=1e-12)
    assert offset_share(HAND, 1).item() == pytest.approx(0.5, abs=1e-12)
    assert offset_share(HAND, 0).item() == pytest.approx(0.3, abs=1e-12)
    assert offset_share(HAND, -2).item() == pytest.approx(0.9, abs=1e-12)
    w = random_weights(4, 6, 6, seed=1)
    for offset in (-5, -2, -1, 0, 1, 3, 5):
        want = [np.mean([w[h, i, i + offset].item() for i in range(6) if 0 <= i + offset < 6]) for h in range(4)]
        np.testing.assert_allclose(offset_share(w, offset).numpy(), want, atol=1e-12)


def test_offset_share_of_the_real_encoder_finds_its_previous_token_head(encoder):
    """The chapter's claim: layer 0, head 2 of the course's encoder looks at the previous token."""
    att = attnlib.encoder.get_attentions(SINK_PROBES[0], model=encoder[0], tokenizer=encoder[1])
    prev = offset_share(att.stacked(), -1)                    # (n_layers, H)
    assert prev.shape == (6, 12)
    assert prev[0, 2] > 0.5 and prev[0, 2] == prev[0].max()


# --- asymmetry / top_keys ------------------------------------------------------------------------

def test_asymmetry_by_hand_against_loops_and_relative():
    # largest |A_ij - A_ji| of HAND: |0.0 - 0.9| at (0, 2)
    assert asymmetry(HAND).item() == pytest.approx(0.9, abs=1e-12)
    assert asymmetry(HAND, relative=True).item() == pytest.approx(0.9 / 0.9, abs=1e-12)
    m = torch.tensor([[0.0, 4.0], [-2.0, 1.0]])
    assert asymmetry(m).item() == 6.0 and asymmetry(m, relative=True).item() == 1.5
    assert asymmetry(torch.zeros(3, 3), relative=True).item() == 0.0
    w = random_weights(3, 4, 4, seed=2)
    want = [max(abs(w[b, i, j].item() - w[b, j, i].item()) for i in range(4) for j in range(4)) for b in range(3)]
    np.testing.assert_allclose(asymmetry(w).numpy(), want, atol=1e-15)
    s = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    assert asymmetry(s + s.T).item() == 0.0
    assert asymmetry((s + s.T).softmax(-1)).item() > 0  # a symmetric score matrix, row-normalised


def test_every_real_head_is_asymmetric(encoder):
    att = attnlib.encoder.get_attentions(SINK_PROBES[1], model=encoder[0], tokenizer=encoder[1])
    assert asymmetry(att.stacked()).min().item() > 1e-3


def test_top_keys():
    row = torch.tensor([0.1, 0.5, 0.15, 0.25])
    assert top_keys(row, list("abcd"), k=2) == [(1, "b", pytest.approx(0.5)), (3, "d", pytest.approx(0.25))]
    assert [t for _, t, _ in top_keys(row, list("abcd"), k=10)] == ["b", "d", "c", "a"]


# --- token groups and sinks ----------------------------------------------------------------------

def test_token_groups():
    tokens = ["[CLS]", "well", ",", "hi", "!", "...", "[SEP]", "o", "'", "[SEP]", "«", "a.b"]
    groups = token_groups(tokens)
    assert groups == {"[CLS]": [0], "[SEP]": [6, 9], "punctuation": [2, 4, 5, 8, 10]}
    assert token_groups(["<s>", "a", "</s>"], cls_token="<s>", sep_token="</s>") == {"<s>": [0], "</s>": [2], "punctuation": []}


def test_sink_shares_against_direct_model_calls(encoder):
    model, tokenizer = encoder
    texts = SINK_PROBES[:2]
    got = sink_shares(texts, model=model, tokenizer=tokenizer)
    want = {"[CLS]": torch.zeros(6, 12), "[SEP]": torch.zeros(6, 12), "punctuation": torch.zeros(6, 12)}
    for text in texts:
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            out = model(**enc, output_attentions=True)
        tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
        A = torch.cat(out.attentions)  # (layers, heads, T, T)
        for name, members in (("[CLS]", {"[CLS]"}), ("[SEP]", {"[SEP]"}), ("punctuation", set(".,;:!?"))):
            indicator = torch.tensor([float(t in members) for t in tokens])  # (T,)
            want[name] += torch.einsum("lhij,j->lh", A, indicator) / len(tokens) / len(texts)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-5)
    reused = [attnlib.encoder.get_attentions(t, model=model, tokenizer=tokenizer) for t in texts]
    again = sink_shares(reused, model=model, tokenizer=tokenizer)  # results reused, same numbers
    assert all(torch.equal(again[name], got[name]) for name in got)


# --- cosine similarities ---------------------------------------------------------------------

def test_cosine_similarities_by_hand_and_against_torch():
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [-2.0, 0.0]])
    r = 2 ** -0.5
    torch.testing.assert_close(cosine_similarities(x), torch.tensor([[1.0, r, -1.0], [r, 1.0, -r], [-1.0, -r, 1.0]]))
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        v = torch.randn(5, 16, generator=g, dtype=torch.float64).to(dtype)
        got = cosine_similarities(v)
        assert got.dtype == dtype and got.shape == (5, 5)
        want = F.cosine_similarity(v.double()[:, None, :], v.double()[None, :, :], dim=-1)
        torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(got.diagonal().double(), torch.ones(5, dtype=torch.float64))
        torch.testing.assert_close(got, got.T)
    big = torch.full((2, 4), 1e30)   # no overflow: computed in float64, then cast back
    torch.testing.assert_close(cosine_similarities(big), torch.ones(2, 2))


def test_cosine_similarities_in_float32_are_exact_on_the_diagonal_and_never_beyond_one():
    """Computed in float64 and rounded once, a float32 result has exactly 1 on the diagonal and
    no entry beyond +-1 (computed in float32, some diagonal entries come out 1 +- 1 ulp)."""
    g = torch.Generator().manual_seed(3)
    v = torch.randn(64, 384, generator=g)
    got = cosine_similarities(v)
    assert torch.equal(got.diagonal(), torch.ones(64))
    assert got.abs().max().item() <= 1.0


def test_cosine_similarities_of_integers_is_an_error_not_a_rounded_matrix():
    with pytest.raises(TypeError, match=r"vectors must be a floating-point tensor, got dtype torch.int64"):
        cosine_similarities(torch.tensor([[1, 0], [1, 1]]))
    # the float version of the same vectors gives the real answer
    assert cosine_similarities(torch.tensor([[1, 0], [1, 1]]).float())[0, 1].item() == pytest.approx(2 ** -0.5)


# --- hostile inputs: clear errors, never a silently wrong number ------------------------------------

W = random_weights(4, 4, seed=9)

BAD_CALLS = [
    # received_attention / attention_share
    (lambda: received_attention(None), TypeError, r"weights must be a torch.Tensor or numpy.ndarray, got NoneType"),
    (lambda: received_attention([[0.5, 0.5]]), TypeError, "got list"),
    (lambda: received_attention(torch.ones(3, 3, dtype=torch.long)), TypeError, "floating-point .* torch.int64"),
    (lambda: received_attention(torch.ones(4)), ValueError, r"at least 2 dimensions .* got shape \(4,\)"),
    (lambda: received_attention(torch.zeros(0, 3)), ValueError, "empty"),
    (lambda: received_attention(torch.full((2, 2), float("nan"))), ValueError, "finite"),
    (lambda: received_attention(-W), ValueError, "non-negative"),
    (lambda: attention_share(W, [4]), ValueError, r"key positions \[4\] are outside 0..3"),
    (lambda: attention_share(W, [-1]), ValueError, r"outside 0..3"),
    (lambda: attention_share(W, [0, 0]), ValueError, "repeat"),
    (lambda: attention_share(W, "ab"), TypeError, "key_positions must be a list of ints, got str"),
    (lambda: attention_share(W, [1.0]), TypeError, "key_positions must be ints, got float"),
    (lambda: attention_share(W, [True]), TypeError, "got bool"),
    (lambda: attention_share(W, None), TypeError, "got NoneType"),
    # offset_share
    (lambda: offset_share(W, 4), ValueError, "offset 4 leaves no query"),
    (lambda: offset_share(torch.ones(2, 3), 1), ValueError, r"square \(..., T, T\) tensor with T >= 1, got shape \(2, 3\)"),
    (lambda: offset_share(W, 1.0), TypeError, "offset must be an int, got float"),
    (lambda: offset_share(W, "1"), TypeError, "offset must be an int, got str"),
    (lambda: offset_share(W.long(), 1), TypeError, "floating-point"),
    # asymmetry / top_keys
    (lambda: asymmetry(torch.ones(3, 4)), ValueError, r"square .* got shape \(3, 4\)"),
    (lambda: asymmetry(torch.ones(3, 3, dtype=torch.bool)), TypeError, "floating-point"),
    (lambda: asymmetry(torch.tensor([[0.0, float("-inf")], [1.0, 0.0]])), ValueError, "finite"),
    (lambda: asymmetry(W, relative="yes"), TypeError, "relative must be True or False"),
    (lambda: top_keys(W[0], list("abc")), ValueError, r"expected a \(T_k,\) row for 3 tokens"),
    (lambda: top_keys(W[0], list("abcd"), k=0), ValueError, "k must be a positive int, got 0"),
    (lambda: top_keys(W[0], list("abcd"), k="2"), TypeError, "k must be a positive int, got str"),
    (lambda: top_keys(None, list("abcd")), TypeError, "weights_row must be a torch.Tensor"),
    (lambda: top_keys(W[0], "abcd"), TypeError, "tokens must be a list of strings, got str"),
    # token_groups / sink_shares
    (lambda: token_groups("[CLS] hi [SEP]"), TypeError, "tokens must be a list of strings, got str"),
    (lambda: token_groups(None), TypeError, "got NoneType"),
    (lambda: token_groups([1, 2]), TypeError, "tokens must be strings, got int"),
    (lambda: token_groups(["a"], cls_token=None), TypeError, "cls_token must be a str"),
    (lambda: sink_shares("The cat sat."), TypeError, "texts must be a list of sentences, got str"),
    (lambda: sink_shares([]), ValueError, "at least one sentence"),
    # cosine_similarities
    (lambda: cosine_similarities(torch.ones(3)), ValueError, r"\(N, d_model\) tensor, got shape \(3,\)"),
    (lambda: cosine_similarities(torch.ones(2, 2, dtype=torch.bool)), TypeError, "floating-point"),
    (lambda: cosine_similarities(torch.tensor([[1.0, 0.0], [0.0, 0.0]])), ValueError, r"rows \[1\] .* length 0"),
    (lambda: cosine_similarities(torch.tensor([[1.0, float("nan")]])), ValueError, "finite"),
    (lambda: cosine_similarities("v"), TypeError, "got str"),
]


@pytest.mark.parametrize("call, error, match", BAD_CALLS, ids=range(len(BAD_CALLS)))
def test_hostile_inputs_get_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("size", [1e-6, 1e-3, 1.0])
def test_relative_asymmetry_is_one_for_a_one_sided_matrix_in_every_dtype(dtype, size):
    """[[0, a], [0, 0]] is as asymmetric as a matrix gets: relative asymmetry 1 whatever a and
    the dtype (float16 gave 0.002 for a = 1e-6: the scale was clamped to 6e-5) (issue 29)."""
    m = torch.tensor([[0.0, size], [0.0, 0.0]]).to(dtype)
    got = asymmetry(m, relative=True)
    assert got.dtype == dtype and float(got) == pytest.approx(1.0, rel=1e-3)
