"""attnlib.edits at its public boundary (issue 36): apply_head_edits, apply_resid_edit and
head_means check what they are given with the library's error policy (TypeError for a wrong type,
ValueError for a wrong shape, IndexError for a head or layer outside the model; a negative index
counts from the end), instead of raising AttributeError or indexing the wrong head.  What the
edits compute is tested against independent oracles in tests/test_encoder_run.py and
tests/test_evidence.py."""
from types import SimpleNamespace

import pytest
import torch

from attnlib.edits import Edit, apply_head_edits, apply_resid_edit, as_edits, head_means

pytestmark = pytest.mark.usefixtures("one_thread")

OUT = torch.arange(2 * 5 * 12, dtype=torch.float32).reshape(2, 5, 12)       # (B, T, H * d_head), H = 3


def _fake_run(n_layers=2, B=2, T=5, H=3, d_head=4, d_model=12, seed=0):
    """The two activations an edit reads from its source, shaped as a run's."""
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(z=tuple(torch.randn(B, H, T, d_head, generator=g) for _ in range(n_layers)),
                           resid_pre=tuple(torch.randn(B, T, d_model, generator=g) for _ in range(n_layers + 1)))


@pytest.mark.parametrize("head, cols", [(-1, slice(8, 12)), (0, slice(0, 4)), (-3, slice(0, 4))])
def test_a_negative_head_counts_from_the_end(head, cols):
    edits = as_edits([{"layer": 0, "head": head, "mode": "zero"}], 2, 3)
    edited = apply_head_edits(OUT, 3, list(edits))
    assert torch.equal(edited[..., cols], torch.zeros(2, 5, 4))
    kept = torch.ones(12, dtype=torch.bool)
    kept[cols] = False
    assert torch.equal(edited[..., kept], OUT[..., kept])


def test_a_mean_and_a_patch_write_that_heads_own_values():
    run = _fake_run()
    means = head_means(run)                                                    # (n_layers, H, d_head)
    torch.testing.assert_close(means[1, 2], run.z[1][:, 2].reshape(-1, 4).mean(0))
    mean = apply_head_edits(OUT, 3, [Edit(layer=1, head=1, mode="mean", source=means)])
    assert torch.equal(mean[..., 4:8], means[1, 1].expand(2, 5, 4))
    patched = apply_head_edits(OUT, 3, [Edit(layer=1, head=2, mode="patch", source=run, position=-1)])
    assert torch.equal(patched[:, -1, 8:], run.z[1][:, 2, -1]) and torch.equal(patched[:, :-1], OUT[:, :-1])


@pytest.mark.parametrize("out, n_heads, edits, exc, match", [
    (OUT.tolist(), 3, [], TypeError, r"^out must be a torch.Tensor or numpy.ndarray, got list$"),
    (OUT.long(), 3, [], TypeError, r"out must be a floating-point tensor"),
    (OUT, 0, [], ValueError, r"n_heads must be a positive int, got 0"),
    (OUT, "3", [], TypeError, r"n_heads must be a positive int, got str"),
    (OUT, 5, [], ValueError, r"out must be \(B, T, H \* d_head\) with H = 5"),
    (OUT, 3, None, TypeError, r"edits must be a list of attnlib.edits.Edit, got NoneType"),
    (OUT, 3, [{"layer": 0, "head": 1, "mode": "zero"}], TypeError, r"edits\[0\] must be an attnlib.edits.Edit .*as_edits"),
    (OUT, 3, [Edit(0, 3, "zero")], IndexError, r"head must be in 0..2 \(as_edits normalises a negative head\), got 3"),
    (OUT, 3, [Edit(0, -4, "zero")], IndexError, r"head must be in 0..2 \(as_edits normalises a negative head\), got -4"),
    (OUT, 3, [Edit(0, 1.0, "zero")], TypeError, r"head must be an int, got float"),
    (OUT, 3, [Edit(0, None, "patch", source=_fake_run())], TypeError, r"residual stream: apply it with apply_resid_edit"),
    (OUT, 3, [Edit(2, 1, "mean", source=torch.zeros(2, 3, 4))], IndexError, r"layer must be in 0..1"),
    (OUT, 3, [Edit(0, 1, "mean", source=torch.zeros(2, 3, 7))], ValueError, r"means must be \(n_layers, H, d_head\)"),
    (OUT, 3, [Edit(0, 1, "mean", source=None)], TypeError, r"must be a run .* got NoneType"),
    (OUT, 3, [Edit(0, 1, "patch", source=[1, 2])], TypeError, r"source must be a run .* got list"),
    (OUT, 3, [Edit(0, 1, "zero", position=5)], IndexError, r"position 5 is outside the 5 tokens"),
])
def test_apply_head_edits_refuses_with_the_error_policy(out, n_heads, edits, exc, match):
    with pytest.raises(exc, match=match):
        apply_head_edits(out, n_heads, edits)


def test_apply_resid_edit_patches_and_refuses_with_the_error_policy():
    run = _fake_run()
    x = torch.zeros(2, 5, 12)
    assert torch.equal(apply_resid_edit(x, Edit(layer=-1, head=None, mode="patch", source=run)), run.resid_pre[2])
    bad = [
        (x.tolist(), Edit(0, None, "patch", source=run), TypeError, r"^x must be a torch.Tensor or numpy.ndarray"),
        (x, None, TypeError, r"edit must be an attnlib.edits.Edit"),
        (x, {"layer": 0, "head": None, "mode": "patch"}, TypeError, r"edit must be an attnlib.edits.Edit"),
        (x, Edit(0, 1, "zero"), ValueError, r"must patch the residual stream \(head None, mode 'patch'\)"),
        (x[0], Edit(0, None, "patch", source=run), ValueError, r"x must be \(B, T, d_model\)"),
        (x, Edit(3, None, "patch", source=run), IndexError, r"layer must be in 0..2"),
        (x, Edit(0, None, "patch", source="run"), TypeError, r"source must be a run .* got str"),
    ]
    for xx, edit, exc, match in bad:
        with pytest.raises(exc, match=match):
            apply_resid_edit(xx, edit)


@pytest.mark.parametrize("bad, exc, match", [
    (None, TypeError, r"head_means's run must be a run .* got NoneType"),
    ([1, 2], TypeError, r"got int"),
    (torch.zeros(3), TypeError, r"got Tensor"),
    ([], ValueError, r"at least one run"),
])
def test_head_means_refuses_what_is_not_a_run(bad, exc, match):
    with pytest.raises(exc, match=match):
        head_means(bad)


def test_as_edits_normalises_heads_and_checks_the_model_sizes():
    assert as_edits([{"layer": -1, "head": -1, "mode": "zero"}], 2, 4)[0] == Edit(layer=1, head=3, mode="zero")
    with pytest.raises(IndexError, match=r"edit 0: head -5 is outside 0..3 \(or -4..-1 from the end\)"):
        as_edits([{"layer": 0, "head": -5, "mode": "zero"}], 2, 4)
    with pytest.raises(TypeError, match=r"n_layers must be a positive int, got str"):
        as_edits([], "2", 4)
    with pytest.raises(ValueError, match=r"n_heads must be a positive int, got 0"):
        as_edits([], 2, 0)
