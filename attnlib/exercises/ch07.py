"""Chapter 7 exercises: attention matrices as graphs.

* ``sink``: pick the token that receives the most attention in a real head of the
  pretrained encoder (its largest weighted in-degree).  The answer is computed from the model
  when the exercise is built or checked, never stored; nothing runs at import time.
* ``acyclic``: switch on as many edges as possible while keeping the attention graph a DAG
  apart from self-loops (every maximal answer is a causal mask for some token order).
* ``rollout``: roll two small attention layers out by hand, with the residual term.
"""
from __future__ import annotations

import functools

import networkx as nx
import torch

from ..corpus import RUNNING
from ..graphs import attention_graph, attention_rollout, in_weight, is_dag_without_self_loops
from ..encoder import get_attentions, load_encoder
from . import register
from .core import checker, parse_matrix, parse_number, parse_token, right, wrong
from .widgets import MatrixToggleExercise, NumberExercise, TokenExercise

__all__ = [
    "SINK_SENTENCE", "SINK_HEAD", "ACYCLIC_TOKENS", "ROLLOUT_LAYERS", "sink_case",
    "check_sink", "check_acyclic", "check_rollout",
]

SINK_SENTENCE = RUNNING
SINK_HEAD = (5, 4)  # (layer, head), 0-based as in get_attentions(...).head(layer, head)

ACYCLIC_TOKENS = ["[CLS]", "birds", "sing", "[SEP]"]

# Two head-averaged layers on the tokens ([CLS], rain); rows are queries and sum to 1.
ROLLOUT_LAYERS = ([[0.6, 0.4], [0.2, 0.8]], [[0.9, 0.1], [0.5, 0.5]])


@functools.lru_cache(maxsize=1)
def sink_case():
    """Tokens of :data:`SINK_SENTENCE` and each token's share of the attention of head
    :data:`SINK_HEAD`: its weighted in-degree in the attention graph divided by ``T``.

    Shapes:
        returns ``(tokens, shares)``: ``T`` strings and ``T`` floats summing to 1.
    """
    model, tokenizer = load_encoder(device="cpu")
    att = get_attentions(SINK_SENTENCE, model=model, tokenizer=tokenizer)
    tokens = att.tokens
    share = in_weight(attention_graph(att.head(*SINK_HEAD), tokens), share=True)  # (T_q, T_k) -> T shares
    return list(tokens), [share[i] for i in range(len(tokens))]


def _position(answer, tokens):
    if isinstance(answer, float):
        return None, wrong(f"Expected a token or its position, got the number {answer}.")
    return parse_token(answer, tokens)


@checker
def check_sink(answer):
    """``answer``: position (or unique text) of the token with the largest in-weight in
    layer 5, head 4 for :data:`SINK_SENTENCE`."""
    tokens, shares = sink_case()
    pos, problem = _position(answer, tokens)
    if problem:
        return problem
    best = max(range(len(tokens)), key=shares.__getitem__)
    got, top = shares[pos], shares[best]
    if pos == best:
        return right(
            f"{tokens[pos]!r} receives {got:.0%} of all the attention in this head (its weighted "
            f"in-degree {got * len(tokens):.2f} out of {len(tokens)}), more than any other token. "
            "Some heads of the last layer park their attention on a content word rather than on [CLS]."
        )
    if tokens[pos] == "[CLS]":
        return wrong(
            f"[CLS] is the sink of most heads of this model, but here it receives {got:.0%}; "
            f"another token receives {top:.0%}.",
            hint="Count the arcs that arrive at each token, weighted by their width.",
        )
    rank = 1 + sum(share > got for share in shares)
    if rank == 2:
        return wrong(
            f"{tokens[pos]!r} is a sink too, the second strongest: it receives {got:.0%}. One "
            f"token receives more, {top:.0%}.",
            hint="Follow the thickest arcs: where do most of them end?",
        )
    return wrong(
        f"{tokens[pos]!r} receives {got:.1%} of the attention; the sink receives {top:.0%}. Every "
        "token sends out exactly 1, so compare what arrives (column sums), not what leaves.",
        hint="Count the arcs that arrive at each token, weighted by their width.",
    )


def _without_self_loops(graph) -> nx.DiGraph:
    core = nx.DiGraph(graph)
    core.remove_edges_from(list(nx.selfloop_edges(core)))
    return core


@checker
def check_acyclic(answer):
    """``answer``: a ``(4, 4)`` bool matrix over :data:`ACYCLIC_TOKENS`, ``True`` where query
    (row) may attend to key (column).  Correct: self-loops on, no other cycle, and the largest
    possible number of edges, ``T (T + 1) / 2``."""
    tokens, T = ACYCLIC_TOKENS, len(ACYCLIC_TOKENS)
    allowed, problem = parse_matrix(answer, (T, T))
    if problem:
        return problem
    missing = [tokens[i] for i in range(T) if not allowed[i, i]]
    if missing:
        return wrong(
            f"Switch on the self-loops too; these tokens cannot attend to themselves yet: "
            f"{', '.join(missing)}. A self-loop is not a cycle we need to avoid, and it keeps every "
            "row of the mask non-empty.",
        )
    graph = attention_graph(allowed.double(), tokens)
    core = _without_self_loops(graph)
    if not is_dag_without_self_loops(graph):
        cycle = nx.find_cycle(core)
        loop = " -> ".join([tokens[i] for i, _ in cycle] + [tokens[cycle[0][0]]])
        return wrong(
            f"This graph has a directed cycle: {loop}. Information could flow around it, so "
            "no order of the tokens makes this mask causal.",
            hint="For every pair of tokens, keep at most one of the two directions.",
        )
    n_edges, most = core.number_of_edges(), T * (T - 1) // 2
    order = list(nx.topological_sort(core))  # every edge u -> v has u before v
    if n_edges < most:
        i, j = next((order[a], order[b]) for a in range(T) for b in range(a + 1, T)
                    if not core.has_edge(order[a], order[b]))
        return wrong(
            f"No cycle, good, but only {n_edges} of the {most} possible edges between different "
            f"tokens are on. You can still add {tokens[i]} -> {tokens[j]} without closing a cycle.",
            hint="Each pair of tokens can keep one of its two directions.",
        )
    if all(bool(allowed[i, j]) == (j <= i) for i in range(T) for j in range(T)):
        return right(f"This is the causal mask: every edge points to an earlier token, {n_edges + T} edges in all.")
    reading = ", ".join(tokens[n] for n in reversed(order))
    return right(
        f"Acyclic with all {n_edges + T} edges: it is the causal mask of the token order "
        f"({reading}), the reverse of a topological sort of the graph."
    )


@checker
def check_rollout(answer):
    """``answer``: rollout entry ``R[1, 0]`` for :data:`ROLLOUT_LAYERS` with residual 0.5."""
    value, problem = parse_number(answer, "a share between 0 and 1")
    if problem:
        return problem
    layers = torch.tensor(ROLLOUT_LAYERS, dtype=torch.float64)
    expected = attention_rollout(layers)[1, 0].item()
    if abs(value - expected) <= 5e-3:
        return right(
            f"R = Â2 Â1 with Â = 0.5 A + 0.5 I, and R[1, 0] = {expected:.3f}: the sum over the two "
            "paths rain -> [CLS] -> [CLS] and rain -> rain -> [CLS] of the products of their weights."
        )
    wrong_answers = {
        "no_residual": (layers[1] @ layers[0])[1, 0].item(),
        "order": attention_rollout(layers.flip(0))[1, 0].item(),
        "last": attention_rollout(layers[1:])[1, 0].item(),
        "entry": attention_rollout(layers)[1, 1].item(),
    }
    messages = {
        "no_residual": "That is A2 A1 without the residual term: add 0.5 I to each layer first.",
        "order": "That is Â1 Â2: the later layer multiplies on the left (row-vector convention).",
        "last": "That is the last layer alone: roll both layers out.",
        "entry": "That is R[1, 1], how much of 'rain' itself reaches 'rain'; the question asks for [CLS].",
    }
    for key, wrong_value in wrong_answers.items():
        if abs(value - wrong_value) <= 5e-3:
            return wrong(messages[key])
    if not 0.0 <= value <= 1.0:
        return wrong(f"{value:g} is not a share: rollout rows are probability vectors, so entries lie in [0, 1].")
    return wrong(
        f"{value:g} is not R[1, 0].",
        hint="Â1 = 0.5 A1 + 0.5 I, Â2 = 0.5 A2 + 0.5 I, then R = Â2 Â1; read row 'rain', column '[CLS]'.",
    )


@register(7, "sink")
def sink_exercise():
    tokens, _ = sink_case()
    layer, head = SINK_HEAD
    return TokenExercise(
        f"Layer {layer}, head {head} reading <i>{SINK_SENTENCE}</i>: which token receives the most "
        "attention, i.e. has the largest weighted in-degree?",
        tokens, check_sink, title="Find the sink in the graph",
    )


@register(7, "acyclic")
def acyclic_exercise():
    return MatrixToggleExercise(
        "Switch on edges (row = query, column = key) so that every token attends to itself, the "
        "graph has no directed cycle apart from self-loops, and as many edges as possible are on.",
        ACYCLIC_TOKENS, ACYCLIC_TOKENS, check_acyclic, title="The largest acyclic attention graph",
    )


@register(7, "rollout")
def rollout_exercise():
    (a, b), (c, d) = ROLLOUT_LAYERS[0]
    (e, f), (g, h) = ROLLOUT_LAYERS[1]
    return NumberExercise(
        f"Tokens ([CLS], rain). Layer 1: A1 = [[{a}, {b}], [{c}, {d}]]; layer 2: A2 = "
        f"[[{e}, {f}], [{g}, {h}]]. With residual 0.5, what is the rollout entry R[1, 0], the "
        "share of the input [CLS] that reaches position 'rain' after layer 2?",
        check_rollout, label="R[1, 0]", title="Roll out two layers",
    )
