"""Circuits read from the weights of an attention-only model (chapter 7).

A head of :class:`attnlib.transformer.TinyTransformer` is two low-rank matrices
(Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits", section 2):

* the **QK circuit** ``W_QK = W_Q^h (W_K^h)^T`` ``(d_model, d_model)``: the score of query
  vector ``x_i`` for key vector ``x_j`` is ``x_i W_QK x_j^T / sqrt(d_head)``;
* the **OV circuit** ``W_OV = W_V^h W_O^h`` ``(d_model, d_model)``: a key vector ``x_j``
  attended with weight ``A_ij`` adds ``A_ij x_j W_OV`` to the residual stream at ``i``.

Row-vector convention (the course's): ``W_Q^h = q_proj.weight[h*d_head:(h+1)*d_head].T``
``(d_model, d_head)`` and ``W_O^h = out_proj.weight[:, h*d_head:(h+1)*d_head].T``
``(d_head, d_model)``.  The block's LayerNorm gain is folded into ``W_Q, W_K, W_V`` (and the
final LayerNorm's gain into the unembedding); LayerNorm's division by each vector's spread,
its shift and the biases are left out, which is the usual approximation of the paper (its
models have no LayerNorm inside the circuit).  Every function reads the weights only: no
forward pass.

* :func:`qk_matrix`, :func:`ov_matrix`: the two circuits of one head.
* :func:`k_composition`: ``||W_QK^{h2} (W_OV^{h1})^T||_F / (||W_QK^{h2}||_F ||W_OV^{h1}||_F)``,
  how much of the layer-1 head ``h2``'s key side reads what the layer-0 head ``h1`` writes
  (the paper's K-composition score, from its section on two-layer attention-only models; its
  column-vector form is ``||W_QK^T W_OV||``).  :func:`random_composition` gives the same score for
  random Gaussian matrices of the same shapes, the baseline.
* :func:`full_ov`, :func:`eigen_positivity`: the full OV circuit ``E W_OV U`` ``(V, V)``
  (embedding to logits) and how much of its eigenvalue spectrum is positive, the paper's
  test for copying heads (positive eigenvalues); :func:`random_ov_positivity` the
  baseline with random ``W_V, W_O`` between the model's own ``E`` and ``U``.

Shapes legend: ``d_model`` model width, ``d_head = d_model / H``, ``V`` vocabulary.
"""
from __future__ import annotations

import torch

from . import _validate
from .transformer import TinyTransformer

__all__ = [
    "head_weights", "qk_matrix", "ov_matrix", "k_composition", "random_composition",
    "embedding_matrix", "unembedding_matrix", "full_ov", "eigen_positivity", "random_ov_positivity",
    "diagonal_top1",
]


def _model(model) -> TinyTransformer:
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be an attnlib.transformer.TinyTransformer, got {type(model).__name__}")
    return model


def _head(model, layer, head) -> tuple[int, int]:
    layer = _validate.index(layer, model.n_layers, "layer")
    head = _validate.index(head, model.n_heads, "head")
    return layer, head


@torch.no_grad()
def head_weights(model, layer: int, head: int) -> dict:
    """The four matrices of one head, float64 on the CPU, LayerNorm gain folded in.

    Returns:
        dict with ``W_Q``, ``W_K``, ``W_V`` ``(d_model, d_head)`` and ``W_O`` ``(d_head, d_model)``.

    Raises:
        TypeError: ``model`` not a TinyTransformer; ``layer`` or ``head`` not an int.
        IndexError: ``layer`` or ``head`` outside the model.
    """
    model = _model(model)
    layer, head = _head(model, layer, head)
    block = model.blocks[layer]
    gain = block.ln_attn.weight.detach().double().cpu()[:, None]           # (d_model, 1): diag(gamma) W
    rows = slice(head * model.d_head, (head + 1) * model.d_head)
    attn = block.attn
    W = {name: gain * getattr(attn, proj).weight.detach().double().cpu()[rows].T
         for name, proj in (("W_Q", "q_proj"), ("W_K", "k_proj"), ("W_V", "v_proj"))}
    W["W_O"] = attn.out_proj.weight.detach().double().cpu()[:, rows].T     # (d_head, d_model)
    return W


def qk_matrix(model, layer: int, head: int) -> torch.Tensor:
    """``W_QK = W_Q (W_K)^T`` ``(d_model, d_model)`` float64: score of ``x_i`` for ``x_j`` is
    ``x_i W_QK x_j^T / sqrt(d_head)`` (Elhage et al. 2021).  Raises as :func:`head_weights`."""
    W = head_weights(model, layer, head)
    return W["W_Q"] @ W["W_K"].T


def ov_matrix(model, layer: int, head: int) -> torch.Tensor:
    """``W_OV = W_V W_O`` ``(d_model, d_model)`` float64: an attended ``x_j`` writes
    ``x_j W_OV`` (Elhage et al. 2021).  Raises as :func:`head_weights`."""
    W = head_weights(model, layer, head)
    return W["W_V"] @ W["W_O"]


def _k_score(W_QK: torch.Tensor, W_OV: torch.Tensor) -> float:
    return (torch.linalg.norm(W_QK @ W_OV.T) / (torch.linalg.norm(W_QK) * torch.linalg.norm(W_OV))).item()


def k_composition(model, reader: tuple, writer: tuple) -> float:
    """K-composition score of head ``reader = (layer2, head2)`` with an earlier head ``writer =
    (layer1, head1)``: ``||W_QK^{reader} (W_OV^{writer})^T||_F / (||W_QK^{reader}||_F
    ||W_OV^{writer}||_F)``, in [0, 1]: 0 when the reader's keys ignore everything the writer
    writes (Elhage et al. 2021, two-layer models, composition; column form ``||W_QK^T W_OV||``).

    Raises:
        TypeError: as :func:`head_weights`; ``reader`` or ``writer`` not a pair.
        ValueError: the writer is not in an earlier layer than the reader.
        IndexError: a layer or head outside the model.
    """
    model = _model(model)
    (l2, h2), (l1, h1) = (_validate.head_pairs([p], model.n_layers, model.n_heads, name)[0]
                          for name, p in (("reader", reader), ("writer", writer)))
    if l1 >= l2:
        raise ValueError(f"the writer must be in an earlier layer than the reader, got writer layer {l1}, "
                         f"reader layer {l2}")
    return _k_score(qk_matrix(model, l2, h2), ov_matrix(model, l1, h1))


def random_composition(d_model: int, d_head: int, n: int = 200, seed: int = 0) -> torch.Tensor:
    """The K-composition score of random heads: ``n`` draws of Gaussian ``W_Q, W_K, W_V``
    ``(d_model, d_head)`` and ``W_O`` ``(d_head, d_model)``, the same shapes and ranks as a
    real head: the baseline of the score (a real pair near it shows no composition).

    Returns:
        ``(n,)`` float64 scores.

    Raises:
        TypeError / ValueError: a size not a positive int, ``d_head > d_model``.
    """
    d_model, d_head, n = (_validate.positive_int(v, name) for name, v in
                          (("d_model", d_model), ("d_head", d_head), ("n", n)))
    if d_head > d_model:
        raise ValueError(f"d_head must be at most d_model = {d_model}, got {d_head}")
    g = torch.Generator().manual_seed(_validate.non_negative_int(seed, "seed"))
    out = []
    for _ in range(n):
        Q, K, Vv = (torch.randn(d_model, d_head, generator=g, dtype=torch.float64) for _ in range(3))
        O = torch.randn(d_head, d_model, generator=g, dtype=torch.float64)
        out.append(_k_score(Q @ K.T, Vv @ O))
    return torch.tensor(out, dtype=torch.float64)


@torch.no_grad()
def embedding_matrix(model) -> torch.Tensor:
    """The token embeddings ``E`` ``(V, d_model)`` float64, each row centred and scaled to
    norm ``sqrt(d_model)`` (what LayerNorm does to a lone token vector before its gain).
    Raises ``TypeError`` where ``model`` is not a TinyTransformer."""
    E = _model(model).tok_emb.weight.detach().double().cpu()
    E = E - E.mean(dim=1, keepdim=True)
    return E / E.norm(dim=1, keepdim=True) * E.shape[1] ** 0.5


@torch.no_grad()
def unembedding_matrix(model) -> torch.Tensor:
    """The read-out ``U`` ``(d_model, V)`` float64 with the final LayerNorm's gain folded in:
    logits ``= x U`` (bias left out).  Raises ``TypeError`` where ``model`` is not a TinyTransformer."""
    model = _model(model)
    return model.ln_out.weight.detach().double().cpu()[:, None] * model.unembed.weight.detach().double().cpu().T


def full_ov(model, layer: int, head: int) -> torch.Tensor:
    """The full OV circuit ``E W_OV U`` ``(V, V)`` float64: entry ``(a, b)`` is how much
    attending to token ``a`` raises the logit of token ``b`` through this head alone
    (Elhage et al. 2021, the OV circuit).  Raises as :func:`head_weights`."""
    return embedding_matrix(model) @ ov_matrix(model, layer, head) @ unembedding_matrix(model)


def _positivity(small: torch.Tensor) -> dict:
    lam = torch.linalg.eigvals(small)                     # complex
    mag = lam.abs()
    total = mag.sum().item()
    return {"positive_share": (mag[lam.real > 0].sum() / total).item(),
            "eigen_ratio": (lam.real.sum() / total).item()}


def eigen_positivity(model, layer: int, head: int) -> dict:
    """How much the head copies: the eigenvalues ``lambda`` of the full OV circuit
    ``E W_V W_O U`` (its nonzero ones, computed from the same product in cyclic order,
    ``W_O U E W_V`` ``(d_head, d_head)``).

    Returns:
        dict with ``positive_share`` = ``sum |lambda| over Re lambda > 0 / sum |lambda|``
        (1: every eigenvalue positive, a copying head; about 0.5 for random matrices) and
        ``eigen_ratio`` = ``sum Re lambda / sum |lambda|`` in [-1, 1] (the summary statistic of
        Elhage et al. 2021 for copying heads).

    Raises:
        as :func:`head_weights`.
    """
    W = head_weights(model, layer, head)
    return _positivity(W["W_O"] @ unembedding_matrix(model) @ embedding_matrix(model) @ W["W_V"])


def random_ov_positivity(model, n: int = 200, seed: int = 0) -> torch.Tensor:
    """:func:`eigen_positivity`'s ``positive_share`` with random Gaussian ``W_V``
    ``(d_model, d_head)`` and ``W_O`` ``(d_head, d_model)`` between the model's own ``E`` and
    ``U``: the baseline a head that does not copy would get from the embeddings alone.

    Returns:
        ``(n,)`` float64 shares.

    Raises:
        TypeError: ``model`` not a TinyTransformer; ``n`` or ``seed`` not an int.
        ValueError: ``n < 1`` or ``seed < 0``.
    """
    model = _model(model)
    n = _validate.positive_int(n, "n")
    g = torch.Generator().manual_seed(_validate.non_negative_int(seed, "seed"))
    UE = unembedding_matrix(model) @ embedding_matrix(model)            # (d_model, d_model)
    d_model, d_head = UE.shape[0], model.d_head
    out = []
    for _ in range(n):
        Vv = torch.randn(d_model, d_head, generator=g, dtype=torch.float64)
        O = torch.randn(d_head, d_model, generator=g, dtype=torch.float64)
        out.append(_positivity(O @ UE @ Vv)["positive_share"])
    return torch.tensor(out, dtype=torch.float64)


def diagonal_top1(M: torch.Tensor) -> float:
    """Share of the rows of a square matrix ``(N, N)`` whose largest entry is on the diagonal
    (chance: ``1/N``).  For a token-space circuit: how often a token's own column wins.

    Raises:
        TypeError: not a tensor of real numbers (a list, a bool or complex tensor).
        ValueError: not square 2-D.
    """
    M = _validate.real_tensor(M, "M")
    if M.dim() != 2 or M.shape[0] != M.shape[1] or not M.shape[0]:
        raise ValueError(f"M must be a square (N, N) matrix, got shape {tuple(M.shape)}")
    return (M.argmax(dim=1) == torch.arange(M.shape[0], device=M.device)).double().mean().item()
