"""One run and one edit vocabulary (attnlib.edits) for the course's models: attnlib.transformer.run
against the model's own forward pass and hand-written hooks, the edits' invariants (a head patched
with its own activation changes nothing; the residual stream patched from the clean run gives the
clean logits; zero ablation equals zeroed value weights; patching one position never changes an
earlier position's logits), and the encoder's run reading the same spec."""
import copy

import pytest
import torch

from attnlib import edits as E
from attnlib.transformer import TinyTransformer, run

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(positions="learned", seed=0):
    model = TinyTransformer(23, d_model=16, n_heads=4, n_layers=2, max_len=12, seed=seed, positions=positions)
    with torch.no_grad():                                   # weights away from initialisation, seeded
        g = torch.Generator().manual_seed(100 + seed)
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    return model.eval()


def _tokens(B=3, T=10, seed=1):
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ an intact run is the model's forward pass
@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
def test_an_intact_run_is_the_forward_pass_read_many_ways(positions):
    model, tokens = _model(positions), _tokens()
    r = run(model, tokens)
    logits, weights = model(tokens)
    torch.testing.assert_close(r.logits, logits, rtol=0, atol=0)
    for layer in range(2):
        torch.testing.assert_close(r["pattern", layer], weights[layer], rtol=0, atol=0)
        torch.testing.assert_close(torch.softmax(r["attn_scores", layer], dim=-1), r["pattern", layer],
                                   rtol=1e-5, atol=1e-6)
        attn, ln = model.blocks[layer].attn, model.blocks[layer].ln_attn
        x = ln(r["resid_pre", layer])
        q = attn.q_proj(x).view(3, 10, 4, 4).transpose(1, 2)                  # (B, H, T, d_head), by hand
        torch.testing.assert_close(r["q", layer], q)
        torch.testing.assert_close(r["z", layer], r["pattern", layer] @ r["v", layer], rtol=1e-5, atol=1e-6)
    assert r.n_layers == 2 and r.n_heads == 4 and len(r.resid_pre) == 3 and r.edits == ()
    assert tuple(r.head("z", 1, 2).shape) == (3, 10, 4) and tuple(r.stacked("pattern").shape) == (2, 3, 4, 10, 10)
    # the last residual entry, through the final LayerNorm and the read-out, gives the logits
    torch.testing.assert_close(model.unembed(model.ln_out(r.resid_pre[-1])), r.logits)


# ------------------------------------------------------------------ invariants of the edits
def test_a_head_patched_with_its_own_activation_changes_nothing():
    model, tokens = _model(), _tokens()
    clean = run(model, tokens)
    for layer in range(2):
        for head in range(4):
            same = run(model, tokens, edits=[{"layer": layer, "head": head, "mode": "patch", "source": clean}])
            torch.testing.assert_close(same.logits, clean.logits, rtol=0, atol=0)


def test_patching_the_residual_stream_from_the_clean_run_reproduces_the_clean_logits():
    model = _model()
    clean_tokens = _tokens(seed=1)
    corrupt_tokens = clean_tokens.clone()
    corrupt_tokens[:, 3] = (corrupt_tokens[:, 3] + 5) % 23                  # one token changed
    clean, corrupt = run(model, clean_tokens), run(model, corrupt_tokens)
    assert not torch.allclose(clean.logits, corrupt.logits)
    for layer in (1, 2):                                          # entering the last block; after it
        patched = run(model, corrupt_tokens, edits=[{"layer": layer, "head": None, "mode": "patch", "source": clean}])
        torch.testing.assert_close(patched.logits, clean.logits, rtol=1e-5, atol=1e-5)


def test_zero_ablation_equals_a_model_whose_heads_value_weights_are_zero():
    model, tokens = _model(), _tokens()
    layer, head, d_head = 1, 2, 4
    ablated = run(model, tokens, edits=[{"layer": layer, "head": head, "mode": "zero"}])
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        rows = slice(head * d_head, (head + 1) * d_head)          # the head's block of W_V's outputs
        zeroed.blocks[layer].attn.v_proj.weight[rows] = 0
        zeroed.blocks[layer].attn.v_proj.bias[rows] = 0
    torch.testing.assert_close(ablated.logits, zeroed(tokens)[0], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(ablated.logits, run(model, tokens).logits)


def test_a_run_agrees_with_a_hand_written_hook():
    """Mean ablation of one head, written as a plain forward pre-hook on W_O, against the run."""
    model, tokens, ref_tokens = _model(), _tokens(seed=1), _tokens(B=5, seed=7)
    ref = run(model, ref_tokens)
    layer, head, d_head = 0, 3, 4
    mean = ref["z", layer][:, head].mean(dim=(0, 1))                         # (d_head,) by hand
    def hook(module, args):
        out = args[0].clone()
        out[..., head * d_head:(head + 1) * d_head] = mean
        return (out,)
    handle = model.blocks[layer].attn.out_proj.register_forward_pre_hook(hook)
    try:
        by_hand = model(tokens)[0]
    finally:
        handle.remove()
    got = run(model, tokens, edits=[{"layer": layer, "head": head, "mode": "mean", "source": ref}])
    torch.testing.assert_close(got.logits, by_hand, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(E.head_means(ref)[layer, head], mean)


def test_head_means_are_each_heads_own():
    ref = run(_model(), _tokens(B=4, seed=3))
    means = E.head_means(ref)                                                # (n_layers, H, d_head)
    assert tuple(means.shape) == (2, 4, 4)
    for layer in range(2):
        for head in range(4):
            torch.testing.assert_close(means[layer, head], ref["z", layer][:, head].mean(dim=(0, 1)))
    assert not torch.allclose(means[0, 0], means[0, 1])


def test_patching_one_position_never_changes_earlier_logits():
    """The causal mask: an edit at position p reaches positions p.. only."""
    model = _model()
    tokens, other = _tokens(seed=1), _tokens(seed=2)
    clean, source = run(model, tokens), run(model, other)
    p = 6
    patched = run(model, tokens, edits=[{"layer": 0, "head": 1, "mode": "patch", "source": source, "position": p}])
    torch.testing.assert_close(patched.logits[:, :p], clean.logits[:, :p], rtol=0, atol=0)
    assert not torch.allclose(patched.logits[:, p:], clean.logits[:, p:])
    z = patched["z", 0][:, 1]
    torch.testing.assert_close(z[:, p], source["z", 0][:, 1, p])
    torch.testing.assert_close(z[:, :p], clean["z", 0][:, 1, :p])
    # a negative position counts from the end
    last = run(model, tokens, edits=[{"layer": 0, "head": 1, "mode": "zero", "position": -1}])
    torch.testing.assert_close(last.logits[:, :-1], clean.logits[:, :-1], rtol=0, atol=0)


def test_the_run_records_its_edits_and_leaves_the_model_unhooked():
    model, tokens = _model(), _tokens()
    r = run(model, tokens, edits=[{"layer": 1, "head": 0, "mode": "zero"}])
    assert r.edits == (E.Edit(layer=1, head=0, mode="zero"),)
    assert all(not b._forward_pre_hooks and not b.attn.out_proj._forward_pre_hooks for b in model.blocks)
    torch.testing.assert_close(run(model, tokens).logits, model(tokens)[0], rtol=0, atol=0)


# ------------------------------------------------------------------ bad edits
@pytest.mark.parametrize("edit, error, match", [
    ({"layer": 0, "head": 0, "mode": "erase"}, ValueError, "mode"),
    ({"layer": 0, "head": 0, "mode": "zero", "colour": 1}, ValueError, 'unknown key "colour"'),
    ({"head": 0, "mode": "zero"}, ValueError, 'needs "layer" and "mode"'),
    ({"layer": 0, "head": 0, "mode": "patch"}, ValueError, "needs a source"),
    ({"layer": 0, "head": None, "mode": "zero"}, ValueError, "can only be patched"),
    ({"layer": 2, "head": 0, "mode": "zero"}, IndexError, "layer"),
    ({"layer": 0, "head": 4, "mode": "zero"}, IndexError, "head"),
    ({"layer": 0, "head": 0, "mode": "zero", "position": 10}, IndexError, "outside the 10 tokens"),
    ({"layer": 0, "head": 0, "mode": "zero", "position": 1.5}, TypeError, "position"),
    ({"layer": 0, "head": 0, "mode": "patch", "source": "clean"}, TypeError, "source must be a run"),
    ("zero", TypeError, "must be an object such as"),
])
def test_a_bad_edit_is_named(edit, error, match):
    with pytest.raises(error, match=match):
        run(_model(), _tokens(), edits=[edit])


def test_an_edit_twice_and_a_source_of_another_length_are_refused():
    model = _model()
    zero = {"layer": 0, "head": 0, "mode": "zero"}
    with pytest.raises(ValueError, match=r"edits 0 and 1 both edit head \(0, 0\) at every position"):
        run(model, _tokens(), edits=[zero, dict(zero)])
    # one place named two ways (T = 10): refused whatever the order, never "the later one wins"
    last, nine = {**zero, "position": -1}, {**zero, "mode": "mean", "position": 9}
    for pair in ([last, nine], [nine, last]):
        with pytest.raises(ValueError, match="at position 9: the result would depend on their order"):
            run(model, _tokens(), edits=pair)
    with pytest.raises(ValueError, match="at position 3"):              # a whole-head edit covers every position
        run(model, _tokens(), edits=[{**zero, "position": 3}, {**zero, "mode": "mean"}])
    ok = run(model, _tokens(), edits=[{**zero, "position": 3}, {**zero, "mode": "mean", "position": 4}])
    assert [e.position for e in ok.edits] == [3, 4]
    short = run(model, _tokens(T=7))
    with pytest.raises(ValueError, match="same length"):
        run(model, _tokens(), edits=[{"layer": 0, "head": 0, "mode": "patch", "source": short}])
    with pytest.raises(ValueError, match="same length"):
        run(model, _tokens(), edits=[{"layer": 1, "head": None, "mode": "patch", "source": short}])
    with pytest.raises(TypeError, match="must be a list of edits"):
        run(model, _tokens(), edits={"layer": 0})
    with pytest.raises(TypeError, match="TinyTransformer"):
        run("model", _tokens())
