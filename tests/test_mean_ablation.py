"""Mean ablation against an independent reference (issue 47 item 2), for each model of the course.

A mean ablation of head (l, h) replaces that head's output z by a constant: its mean over every
token of the model's reference inputs.  The reference here owes nothing to attnlib's edits or
head_means:

* the mean is computed by hand: for the tiny model, a forward pass written out from the weights;
  for the encoder, a forward hook of our own on Hugging Face's self-attention (its context layer
  is the heads' outputs side by side);
* the edited model is a copy whose head outputs a constant: the head's columns of W_O are set to
  zero and W_O applied to the constant is added to W_O's bias (W_O z_h + b with z_h = c is
  W_O[:, h] c + b for every token).

A mutant that put the means onto the wrong heads (or layers, or averaged the wrong axis) passed
155 tests when every reference came from head_means; these compare with the hand-made model.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from attnlib import corpus, encoder, transformer
from attnlib.transformer import TinyTransformer, run

pytestmark = pytest.mark.usefixtures("one_thread")


def _trained_like(seed=0):
    """A small TinyTransformer with weights moved away from initialisation (seeded)."""
    model = TinyTransformer(29, d_model=24, n_heads=3, n_layers=2, max_len=16, seed=seed)
    with torch.no_grad():
        g = torch.Generator().manual_seed(50 + seed)
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def _tiny_z_by_hand(model, tokens):
    """Every layer's heads' outputs, ``(B, H, T, d_head)`` each, from the weights alone."""
    B, T = tokens.shape
    x = model.tok_emb.weight[tokens] + model.pos_emb.weight[:T]
    zs = []
    for block in model.blocks:
        a = block.attn
        h = torch.nn.functional.layer_norm(x, (x.shape[-1],), block.ln_attn.weight, block.ln_attn.bias, block.ln_attn.eps)
        q, k, v = ((h @ lin.weight.T + lin.bias).view(B, T, a.n_heads, a.d_head).transpose(1, 2)
                   for lin in (a.q_proj, a.k_proj, a.v_proj))
        scores = q @ k.transpose(-2, -1) / math.sqrt(a.d_head)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        z = scores.softmax(-1) @ v                                         # (B, H, T, d_head)
        zs.append(z)
        x = x + z.transpose(1, 2).reshape(B, T, -1) @ a.out_proj.weight.T + a.out_proj.bias
    return zs


def _constant_head(linear, head: int, d_head: int, constant: torch.Tensor):
    """``linear`` (W_O) edited so that head ``head``'s input block is read as ``constant``."""
    cols = slice(head * d_head, (head + 1) * d_head)
    with torch.no_grad():
        linear.bias += linear.weight[:, cols] @ constant
        linear.weight[:, cols] = 0


@torch.no_grad()
@pytest.mark.parametrize("layer, head", [(0, 0), (0, 2), (1, 1), (1, 2)])
def test_tiny_model_mean_ablation_equals_a_model_whose_head_outputs_its_hand_computed_mean(layer, head):
    model = _trained_like()
    reference = transformer.reference_tokens(model)                        # the model's reference inputs
    mean = _tiny_z_by_hand(model, reference)[layer][:, head].reshape(-1, model.d_head).mean(0)   # (d_head,)
    oracle = copy.deepcopy(model)
    _constant_head(oracle.blocks[layer].attn.out_proj, head, model.d_head, mean)
    tokens = torch.randint(29, (3, 11), generator=torch.Generator().manual_seed(7))
    want = oracle(tokens)[0]
    for edit in ({"layer": layer, "head": head, "mode": "mean"},           # the default: the reference means
                 {"layer": layer, "head": head, "mode": "mean", "source": run(model, reference)}):
        got = run(model, tokens, edits=[edit]).logits
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    # and the test can tell heads apart: another head's mean gives other logits
    other = copy.deepcopy(model)
    _constant_head(other.blocks[layer].attn.out_proj, head, model.d_head,
                   _tiny_z_by_hand(model, reference)[layer][:, (head + 1) % 3].reshape(-1, model.d_head).mean(0))
    assert (other(tokens)[0] - want).abs().max() > 1e-3


def test_tiny_models_reference_inputs_are_chapter_6s_held_out_sequences():
    """The default mean is the one the circuit lab's page stores: chapter 7's held-out repeated
    sequences (seed 0) for a model of the chapter's vocabulary and length."""
    from attnlib import induction
    model = TinyTransformer(len(induction.vocabulary()), max_len=induction.SEQ_LEN)
    assert torch.equal(transformer.reference_tokens(model), induction.repeated_sequences(induction.N_HELD_OUT, 0))


@torch.no_grad()
@pytest.mark.parametrize("layer, head", [(1, 4), (4, 3)])
def test_encoder_mean_ablation_equals_a_model_whose_head_outputs_its_hooked_mean(encoder, layer, head):
    model, tokenizer = encoder
    H = model.config.num_attention_heads
    d_v = model.config.hidden_size // H
    captured = []
    handle = model.encoder.layer[layer].attention.self.register_forward_hook(
        lambda module, args, output: captured.append(output[0][0]))       # (T, H * d_v): the heads side by side
    try:
        for text in corpus.reference_sentences():
            model(**tokenizer(text, return_tensors="pt"))
    finally:
        handle.remove()
    mean = torch.cat(captured).view(-1, H, d_v)[:, head].mean(0)           # over every token of every sentence
    oracle = copy.deepcopy(model)
    _constant_head(oracle.encoder.layer[layer].attention.output.dense, head, d_v, mean)
    text = "The bears that the dog chased were tired."
    want = oracle(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]
    got = encoder_run(text, layer, head, model, tokenizer)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    neighbour = copy.deepcopy(model)
    _constant_head(neighbour.encoder.layer[layer].attention.output.dense, head, d_v,
                   torch.cat(captured).view(-1, H, d_v)[:, (head + 1) % H].mean(0))
    assert (neighbour(**tokenizer(text, return_tensors="pt")).last_hidden_state[0] - want).abs().max() > 1e-3


def encoder_run(text, layer, head, model, tokenizer):
    return encoder.run(text, edits=[{"layer": layer, "head": head, "mode": "mean"}], model=model,
                       tokenizer=tokenizer).resid_pre[-1]
