"""Activation patching on the tiny causal language model, the way interpretability research does
it (chapter 7): clean and corrupted prompts that differ in one token, a metric linear in the
logits, and patches in both directions.

* :func:`induction_pairs`: held-out repeated sequences (:func:`attnlib.induction.repeated_sequences`)
  and the same sequences with one token of the first copy replaced by another word of the
  vocabulary that the sequence does not contain (symmetric token replacement: the corrupted
  prompt is as ordinary an input as the clean one).  At the query position ``q`` of the second
  copy, induction predicts the token that followed the earlier occurrence: ``B`` in the clean
  prompt, its replacement ``B'`` in the corrupted one.
* :func:`logit_diff`: ``logit[B] - logit[B']`` at ``q``, averaged over the batch (nats: logits
  are log-probabilities up to a constant per position, so a difference of logits is a
  log-odds).  :func:`normalised`: ``(patched - corrupted) / (clean - corrupted)``, 1 where the
  patch restores the clean behaviour, 0 where it changes nothing.
* :func:`patch_table`: the metric when one activation at a time (every head's output ``z``, or
  the residual stream entering every layer at every position) is taken from a source run.
  *Denoising* patches clean activations into the corrupted run (is this component
  **sufficient** to restore the behaviour?); *noising* patches corrupted activations into the
  clean run (is it **necessary**?).
* :func:`gaussian_noise_source`: the older corruption (Meng et al. 2022): Gaussian noise, three
  times the spread of the token embeddings, added to the embedding of the corrupted position;
  off the distribution the model was trained on, as :func:`embedding_norms` shows.

Sources: Meng et al. (2022), causal tracing; Wang et al. (2023), IOI; Heimersheim & Nanda (2024),
"How to use and interpret activation patching"; Zhang & Nanda (2024), "Towards best practices of
activation patching in language models".

Shapes legend: ``B`` batch, ``T`` tokens, ``H`` heads, ``L`` layers, ``V`` vocabulary.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from . import _validate
from .transformer import Run, TinyTransformer, run

__all__ = ["induction_pairs", "match_pairs", "logit_diff", "copy_logit", "normalised", "gap_problem", "MIN_GAP",
           "patch_table", "gaussian_noise_source", "embedding_norms"]


def induction_pairs(n: int = 64, seed: int = 0, *, query: int | None = None) -> dict:
    """Clean and corrupted prompts that differ in exactly one token, for the induction task.

    The clean prompts are ``induction.repeated_sequences(n, seed)``: ``T/2`` distinct words,
    then the same words again.  The query ``q`` (default ``T - 2``) sits in the second copy; its
    word occurred at ``q - T/2``, followed there by ``B`` at ``p = q - T/2 + 1``.  The corrupted
    prompt replaces ``B`` at ``p`` (first copy only) by a word ``B'`` drawn (seeded) from the
    vocabulary words absent from that sequence.

    Returns:
        dict with ``clean``, ``corrupt`` ``(B, T)`` int64, ``query`` (int), ``position`` (``p``),
        ``clean_next``, ``corrupt_next`` ``(B,)`` int64 (``B`` and ``B'``).

    Raises:
        TypeError: ``n``, ``seed`` or ``query`` not an int.  ValueError: ``query`` not in the
            second copy (``T/2 + 1 .. T - 2``: it needs a next word in the first copy and one
            position after it).
    """
    from . import induction
    n = _validate.positive_int(n, "n")
    seed = _validate.non_negative_int(seed, "seed")
    clean = induction.repeated_sequences(n, seed)                         # (B, T)
    B, T = clean.shape
    half = T // 2
    q = T - 2 if query is None else _validate.non_negative_int(query, "query")
    if not half + 1 <= q <= T - 2:
        raise ValueError(f"query must be in the second copy, {half + 1}..{T - 2}, got {q}")
    p = q - half + 1
    g = torch.Generator().manual_seed(10_000 + seed)
    V = len(induction.vocabulary())
    corrupt = clean.clone()
    for b in range(B):
        absent = torch.ones(V, dtype=torch.bool)
        absent[clean[b]] = False
        choices = torch.nonzero(absent).flatten()
        corrupt[b, p] = choices[torch.randint(len(choices), (1,), generator=g)]
    return {"clean": clean, "corrupt": corrupt, "query": q, "position": p,
            "clean_next": clean[:, p].clone(), "corrupt_next": corrupt[:, p].clone()}


def match_pairs(n: int = 64, seed: int = 0, *, query: int | None = None) -> dict:
    """The *match corruption*: the clean prompts of :func:`induction_pairs` (same ``n``, ``seed``
    and ``query``), with the query word's earlier occurrence ``A`` (at ``q - T/2``, first copy
    only) replaced by a word ``A'`` the sequence does not contain.  In ``... A' B ... A`` the
    query's word has no earlier occurrence, so there is nothing to copy: the pair changes
    *where* an induction head can look, not *what* it would copy, and the previous-token head
    (which writes "my previous word is ``A``" into the key at ``B``) is on its path.

    Returns:
        dict with ``clean``, ``corrupt`` ``(B, T)`` int64, ``query`` (int), ``position`` (the
        replaced position, ``q - T/2``), ``clean_next`` ``(B,)`` (``B``, the copy target) and
        ``corrupt_next`` ``(B,)`` (``A'``, the replacement; no metric reads it).

    Raises:
        as :func:`induction_pairs`.
    """
    from . import induction
    base = induction_pairs(n, seed, query=query)
    clean, q = base["clean"], base["query"]
    half = clean.shape[1] // 2
    a = q - half
    g = torch.Generator().manual_seed(20_000 + seed)
    V = len(induction.vocabulary())
    corrupt = clean.clone()
    for b in range(clean.shape[0]):
        absent = torch.ones(V, dtype=torch.bool)
        absent[clean[b]] = False
        choices = torch.nonzero(absent).flatten()
        corrupt[b, a] = choices[torch.randint(len(choices), (1,), generator=g)]
    return {"clean": clean, "corrupt": corrupt, "query": q, "position": a,
            "clean_next": base["clean_next"], "corrupt_next": corrupt[:, a].clone()}


def copy_logit(logits: torch.Tensor, pairs: dict) -> float:
    """``logit[B] - mean(logits)`` at the query position, averaged over the batch (nats): how
    much the model favours the copy target ``B`` over the average word.  Linear in the logits,
    like :func:`logit_diff`, and it needs no second answer, so it reads a corruption after which
    the model has nothing particular to predict (:func:`match_pairs`).

    Shapes:
        logits: ``(B, T, V)``.
    """
    at = logits[:, pairs["query"]]                                          # (B, V)
    idx = torch.arange(at.shape[0])
    return float((at[idx, pairs["clean_next"]] - at.mean(-1)).mean())


def logit_diff(logits: torch.Tensor, pairs: dict) -> float:
    """``logit[B] - logit[B']`` at the query position, averaged over the batch (nats).

    Shapes:
        logits: ``(B, T, V)``.
    """
    at = logits[:, pairs["query"]]                                          # (B, V)
    idx = torch.arange(at.shape[0])
    return float((at[idx, pairs["clean_next"]] - at[idx, pairs["corrupt_next"]]).mean())


#: The smallest gap ``|clean - corrupted|`` (nats) that :func:`normalised` divides by.  Below it
#: the corruption barely moves the metric, and a normalised score is a ratio of two numbers of the
#: size of float32 rounding and of what one changed word does by chance: ``normalised(1.0, 0.3 +
#: 1e-12, 0.3)`` would be 7e11.  The circuit lab's page uses the same value (``tiny.json``).
MIN_GAP = 0.05


def gap_problem(clean, corrupted, min_gap: float = MIN_GAP) -> str | None:
    """Why ``clean`` and ``corrupted`` cannot normalise a patching score, in words, or ``None``:
    one of them is not a finite number, or they are less than ``min_gap`` nats apart.  The page
    shows the same sentence (``attnlib/static/xp_tiny.js``)."""
    clean, corrupted = float(clean), float(corrupted)
    if not (math.isfinite(clean) and math.isfinite(corrupted)):
        return f"the clean ({clean}) or corrupted ({corrupted}) metric is not a finite number"
    if abs(clean - corrupted) < min_gap:
        return (f"the corruption moves the metric by {clean - corrupted:+.3f} nats, less than {min_gap:g}: "
                f"a normalised score would divide by noise")
    return None


def normalised(patched, clean: float, corrupted: float, *, min_gap: float = MIN_GAP):
    """``(patched - corrupted) / (clean - corrupted)``: 1 = the clean behaviour, 0 = the corrupted.

    Args:
        patched: a metric or a tensor of them (nats).  clean, corrupted: the two reference metrics.
        min_gap: the smallest ``|clean - corrupted|`` divided by (:data:`MIN_GAP`).

    Raises:
        ValueError: the two references closer than ``min_gap`` or not finite (:func:`gap_problem`
            says which); ``patched`` not finite (a NaN would pass through as a score).

    >>> normalised(2.0, 3.0, 1.0)
    0.5
    """
    problem = gap_problem(clean, corrupted, _validate.real(min_gap, "min_gap", low=0.0))
    if problem is not None:
        raise ValueError(problem)
    finite = bool(torch.isfinite(torch.as_tensor(patched, dtype=torch.float64)).all())
    if not finite:
        raise ValueError("the patched metric is not a finite number (NaN or infinite): nothing to normalise")
    return (patched - corrupted) / (clean - corrupted)


def patch_table(model: TinyTransformer, tokens: torch.Tensor, source: Run, pairs: dict, *, site: str = "z",
                extra_edits=(), metric=logit_diff) -> torch.Tensor:
    """The metric (``metric(logits, pairs)``, :func:`logit_diff` unless told) of ``model`` on
    ``tokens`` with one activation at a time taken from ``source``: each head's output
    (``site="z"``, every position), each head's output at one position at a time
    (``site="z_pos"``), or the residual stream entering each layer at each position
    (``site="resid_pre"``; layer ``L`` is the stream after the last block).  ``extra_edits``
    are applied in every run (a noise corruption, for instance).

    Shapes:
        returns ``(L, H)`` for ``"z"``, ``(L, H, T)`` for ``"z_pos"``, ``(L + 1, T)`` for
        ``"resid_pre"``; nats.

    Raises:
        ValueError: ``site`` unknown; as :func:`attnlib.transformer.run`.
        TypeError: ``metric`` not callable.
    """
    site = _validate.choice(site, ("z", "z_pos", "resid_pre"), "site")
    if not callable(metric):
        raise TypeError(f"metric must be a function metric(logits, pairs) -> float, got {type(metric).__name__}")
    extra = list(extra_edits)
    T = tokens.shape[1]
    if site in ("z", "z_pos"):
        shape = (model.n_layers, model.n_heads) + ((T,) if site == "z_pos" else ())
        table = torch.zeros(shape, dtype=torch.float64)
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                for pos in (range(T) if site == "z_pos" else (None,)):
                    edit = {"layer": layer, "head": head, "mode": "patch", "source": source}
                    if pos is not None:
                        edit["position"] = pos
                    value = metric(run(model, tokens, edits=extra + [edit]).logits, pairs)
                    table[(layer, head) + ((pos,) if pos is not None else ())] = value
        return table
    table = torch.zeros(model.n_layers + 1, T, dtype=torch.float64)
    for layer in range(model.n_layers + 1):
        for pos in range(T):
            edit = {"layer": layer, "head": None, "mode": "patch", "source": source, "position": pos}
            table[layer, pos] = metric(run(model, tokens, edits=extra + [edit]).logits, pairs)
    return table


def embedding_norms(model: TinyTransformer) -> torch.Tensor:
    """The norm of every token embedding (the rows of ``tok_emb``). Shapes: ``(V,)``."""
    return model.tok_emb.weight.detach().norm(dim=-1)


def gaussian_noise_source(clean: Run, model: TinyTransformer, position: int, *, scale: float = 3.0,
                          seed: int = 0) -> Run:
    """A run to patch the residual stream's layer-0 entry from: ``clean`` with Gaussian noise
    of standard deviation ``scale`` times the spread of the token embeddings (the standard
    deviation of all their entries; Meng et al. 2022 use 3) added at ``position``.  Use it as
    ``{"layer": 0, "head": None, "mode": "patch", "source": noisy, "position": position}``.

    Raises:
        TypeError: ``clean`` not a :class:`attnlib.transformer.Run`.  ValueError: ``scale``
            not positive.
    """
    if not isinstance(clean, Run):
        raise TypeError(f"clean must be an attnlib.transformer.Run, got {type(clean).__name__}")
    scale = _validate.real(scale, "scale", low=0.0)
    if scale == 0:
        raise ValueError("scale must be positive")
    sigma = float(model.tok_emb.weight.detach().std())
    x0 = clean.resid_pre[0].clone()                                        # (B, T, d_model)
    g = torch.Generator().manual_seed(seed)
    x0[:, position] += scale * sigma * torch.randn(x0[:, position].shape, generator=g).to(x0)
    return dataclasses.replace(clean, resid_pre=(x0,) + tuple(clean.resid_pre[1:]))
