"""attnlib.patching: clean/corrupted pairs that differ in one token, the logit difference, and
patch tables in both directions, checked against their definitions and invariants on a small
seeded model (no training)."""
import pytest
import torch

from attnlib import induction, patching
from attnlib.transformer import TinyTransformer, run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    V = len(induction.vocabulary())
    model = TinyTransformer(V, d_model=16, n_heads=2, n_layers=2, max_len=induction.SEQ_LEN, seed=3)
    with torch.no_grad():
        g = torch.Generator().manual_seed(5)
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    model.eval()
    pairs = patching.induction_pairs(8, seed=1)
    return model, pairs, run(model, pairs["clean"]), run(model, pairs["corrupt"])


def test_pairs_differ_in_exactly_one_token_a_word_the_sequence_lacks():
    pairs = patching.induction_pairs(16, seed=2)
    clean, corrupt, p, q = pairs["clean"], pairs["corrupt"], pairs["position"], pairs["query"]
    T = clean.shape[1]
    assert q == T - 2 and p == q - T // 2 + 1
    diff = clean != corrupt
    assert diff.sum(dim=1).tolist() == [1] * 16 and diff[:, p].all()
    for b in range(16):
        assert corrupt[b, p].item() not in clean[b].tolist()             # in the vocabulary, not in the sequence
        assert clean[b, q].item() == clean[b, q - T // 2].item()          # the query's word occurred before ...
        assert pairs["clean_next"][b] == clean[b, p]                       # ... followed by B
    assert torch.equal(patching.induction_pairs(16, seed=2)["corrupt"], corrupt)   # seeded
    with pytest.raises(ValueError, match="second copy"):
        patching.induction_pairs(4, query=3)


def test_logit_diff_is_the_mean_difference_of_two_logits(setup):
    model, pairs, clean, _ = setup
    q, b = pairs["query"], torch.arange(8)
    by_hand = (clean.logits[b, q, pairs["clean_next"]] - clean.logits[b, q, pairs["corrupt_next"]]).mean()
    assert patching.logit_diff(clean.logits, pairs) == pytest.approx(float(by_hand), rel=1e-6)
    assert patching.normalised(2.0, 3.0, 1.0) == 0.5


@pytest.mark.parametrize("clean, corrupted, message", [
    (2.0, 2.0, r"moves the metric by \+0.000 nats, less than 0.05"),
    (0.3 + 1e-12, 0.3, "less than 0.05"),                       # was 7e11 with no tolerance
    (1.0, 1.0 - (patching.MIN_GAP - 1e-9), "less than 0.05"),      # just under the tolerance
    (float("nan"), 0.0, "not a finite number"),
    (1.0, float("inf"), "not a finite number"),
])
def test_normalised_refuses_a_gap_under_its_tolerance_or_not_finite(clean, corrupted, message):
    with pytest.raises(ValueError, match=message):
        patching.normalised(1.0, clean, corrupted)
    assert patching.gap_problem(clean, corrupted) is not None


def test_normalised_at_the_tolerance_and_with_a_nan_patch():
    assert patching.normalised(1.0, 1.0, 1.0 - patching.MIN_GAP) == pytest.approx(1.0)   # exactly the tolerance: divided
    assert patching.gap_problem(1.0, 1.0 - patching.MIN_GAP) is None
    with pytest.raises(ValueError, match="patched metric is not a finite number"):
        patching.normalised(torch.tensor([0.5, float("nan")]), 1.0, 0.0)
    torch.testing.assert_close(patching.normalised(torch.tensor([0.5, 1.0]), 1.0, 0.0), torch.tensor([0.5, 1.0]))


def test_patching_every_head_from_the_run_itself_gives_its_own_metric(setup):
    """Invariant: a source equal to the base run changes nothing, in either table."""
    model, pairs, clean, corrupt = setup
    ld = patching.logit_diff(clean.logits, pairs)
    assert torch.allclose(patching.patch_table(model, pairs["clean"], clean, pairs), torch.full((2, 2), ld, dtype=torch.float64))
    res = patching.patch_table(model, pairs["corrupt"], corrupt, pairs, site="resid_pre")
    assert res.shape == (3, pairs["clean"].shape[1])
    assert torch.allclose(res, torch.full_like(res, patching.logit_diff(corrupt.logits, pairs)))


def test_denoising_the_residual_stream_restores_the_clean_metric_exactly_where_the_tokens_differ(setup):
    """The residual stream entering layer 0 is the embeddings: patching the clean one at the one
    corrupted position restores the clean metric (score 1), and any other position does nothing
    (score 0), since the two prompts agree there.  After the last block, only the query matters."""
    model, pairs, clean, corrupt = setup
    c, x = patching.logit_diff(clean.logits, pairs), patching.logit_diff(corrupt.logits, pairs)
    table = patching.normalised(patching.patch_table(model, pairs["corrupt"], clean, pairs, site="resid_pre"), c, x)
    p, q = pairs["position"], pairs["query"]
    assert table[0, p].item() == pytest.approx(1.0, abs=1e-5)
    others = [i for i in range(table.shape[1]) if i != p]
    assert table[0, others].abs().max() < 1e-5
    assert table[-1, q].item() == pytest.approx(1.0, abs=1e-5)
    assert table[-1, [i for i in range(table.shape[1]) if i != q]].abs().max() < 1e-5
    # positions before the corrupted token never matter at any layer (the causal mask)
    assert table[:, :p].abs().max() < 1e-5


def test_gaussian_noise_corrupts_one_position_off_the_embedding_distribution(setup):
    model, pairs, clean, _ = setup
    noisy = patching.gaussian_noise_source(clean, model, pairs["position"], scale=3.0, seed=0)
    p = pairs["position"]
    x0, n0 = clean.resid_pre[0], noisy.resid_pre[0]
    assert torch.equal(torch.cat([x0[:, :p], x0[:, p + 1:]], 1), torch.cat([n0[:, :p], n0[:, p + 1:]], 1))
    assert n0[:, p].norm(dim=-1).median() > 2 * patching.embedding_norms(model).median()
    edit = {"layer": 0, "head": None, "mode": "patch", "source": noisy, "position": p}
    noised = run(model, pairs["clean"], edits=[edit])
    assert not torch.allclose(noised.logits, clean.logits)
    with pytest.raises(ValueError, match="positive"):
        patching.gaussian_noise_source(clean, model, p, scale=0.0)
    with pytest.raises(TypeError, match="Run"):
        patching.gaussian_noise_source("clean", model, p)


def test_a_head_tables_entry_is_the_run_with_that_one_patch(setup):
    model, pairs, clean, corrupt = setup
    table = patching.patch_table(model, pairs["corrupt"], clean, pairs)
    for layer, head in ((0, 1), (1, 0)):
        one = run(model, pairs["corrupt"], edits=[{"layer": layer, "head": head, "mode": "patch", "source": clean}])
        assert table[layer, head].item() == pytest.approx(patching.logit_diff(one.logits, pairs), rel=1e-6)
    assert len({round(v, 6) for v in table.flatten().tolist()}) == 4      # each head its own entry
