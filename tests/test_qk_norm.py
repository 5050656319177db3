"""QK-LayerNorm in the tiny model (chapter 4, issue 44 item 6)."""
import math

import pytest
import torch
import torch.nn.functional as F

from attnlib import induction
from attnlib.transformer import TinyTransformer, run


def _model(**kw):
    return TinyTransformer(11, d_model=16, n_heads=2, n_layers=2, max_len=8, seed=3, **kw)


def test_qk_norm_scores_against_a_direct_formula():
    """Each head's q and k pass through their LayerNorm before q k^T / sqrt(d_head): the scores
    of run() and the weights of forward() equal that formula computed here from the weights,
    and they differ from the model without the norms."""
    torch.manual_seed(0)
    model = _model(qk_norm=True)
    with torch.no_grad():                                   # gains and biases away from 1 and 0
        for block in model.blocks:
            for ln in (block.ln_q, block.ln_k):
                ln.weight.uniform_(0.5, 2.0)
                ln.bias.uniform_(-0.5, 0.5)
    tokens = torch.tensor([[1, 4, 2, 9, 4, 2, 7]])
    r = run(model, tokens)
    x = r["resid_pre", 0]
    block = model.blocks[0]
    h = block.ln_attn(x)
    d = model.d_head
    q = block.attn.q_proj(h).view(1, -1, 2, d).transpose(1, 2)
    k = block.attn.k_proj(h).view(1, -1, 2, d).transpose(1, 2)
    qn = F.layer_norm(q, (d,), block.ln_q.weight, block.ln_q.bias)
    kn = F.layer_norm(k, (d,), block.ln_k.weight, block.ln_k.bias)
    s = qn @ kn.transpose(-2, -1) / math.sqrt(d)
    T = tokens.shape[1]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    assert torch.allclose(r["attn_scores", 0], s, atol=1e-5)
    assert torch.allclose(r["pattern", 0], torch.softmax(s, -1), atol=1e-5)
    plain = _model()
    plain.load_state_dict({k_: v for k_, v in model.state_dict().items() if "ln_q" not in k_ and "ln_k" not in k_})
    assert not torch.allclose(run(plain, tokens)["attn_scores", 0], r["attn_scores", 0], atol=1e-3)


def test_qk_norm_keeps_the_other_weights_and_round_trips(tmp_path):
    a, b = _model(), _model(qk_norm=True)
    shared = {k: v for k, v in b.state_dict().items() if "ln_q" not in k and "ln_k" not in k}
    assert all(torch.equal(v, a.state_dict()[k]) for k, v in shared.items())        # no extra random draws
    assert "qk_norm" not in a.config() and b.config()["qk_norm"] is True
    b.save(tmp_path / "m.pt")
    c = TinyTransformer.load(tmp_path / "m.pt")
    tokens = torch.tensor([[1, 2, 3, 1, 2]])
    assert c.qk_norm and torch.equal(c(tokens)[0], b(tokens)[0])
    with pytest.raises(TypeError, match="qk_norm"):
        _model(qk_norm="yes")


def test_qk_norm_decodes_with_a_kv_cache_as_in_one_pass():
    model = _model(qk_norm=True).eval()
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9]])
    full, _ = model(tokens)
    cache = model.new_cache()
    steps = [model(tokens[:, i:i + 1], cache=cache)[0] for i in range(tokens.shape[1])]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_train_passes_qk_norm_to_the_model():
    model, history = induction.train(n_layers=1, seed=0, steps=2, progress=False, cache=False, qk_norm=True)
    assert model.qk_norm and history["config"].qk_norm
    again = induction.checkpoint(history, history["probe_step"][-1])
    assert again.qk_norm
