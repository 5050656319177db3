"""Chapter 8 exercises: attention matrices as graphs.

* ``sink``: pick the token that receives the most attention in a real head of the
  pretrained encoder (its largest weighted in-degree).  The answer is computed from the model
  when the exercise is built or checked, never stored; nothing runs at import time.
* ``acyclic``: switch on as many edges as possible while keeping the attention graph a DAG
  apart from self-loops (every maximal answer is a causal mask for some token order).
* ``rollout``: roll two small attention layers out by hand, with the residual term.
"""
from __future__ import annotations

import functools
import html

from .core import checker, grade_number, parse_matrix, parse_token, right, wrong
from .registry import define

__all__ = [
    "SINK_SENTENCE", "SINK_HEAD", "ACYCLIC_TOKENS", "ROLLOUT_LAYERS", "sink_case", "sink_data",
    "find_cycle", "topological_order", "rollout", "check_sink", "check_acyclic", "check_rollout",
]

# attnlib.corpus.RUNNING (a test checks it), written out so the graders need only the stdlib.
SINK_SENTENCE = "The cat sat on the mat because it was warm."
SINK_HEAD = (5, 4)  # (layer, head), 0-based as in get_attentions(...).head(layer, head)

ACYCLIC_TOKENS = ["[CLS]", "birds", "sing", "[SEP]"]

# Two head-averaged layers on the tokens ([CLS], rain); rows are queries and sum to 1.
ROLLOUT_LAYERS = ([[0.6, 0.4], [0.2, 0.8]], [[0.9, 0.1], [0.5, 0.5]])
ROLLOUT_RESIDUAL = 0.5


@functools.lru_cache(maxsize=1)
def sink_case():
    """Tokens of :data:`SINK_SENTENCE` and each token's share of the attention of head
    :data:`SINK_HEAD`: its weighted in-degree in the attention graph divided by ``T``
    (kernel only: runs the encoder).

    Shapes:
        returns ``(tokens, shares)``: ``T`` strings and ``T`` floats summing to 1.
    """
    from ..encoder import get_attentions, load_encoder
    from ..graphs import attention_graph, in_weight

    model, tokenizer = load_encoder(device="cpu")
    att = get_attentions(SINK_SENTENCE, model=model, tokenizer=tokenizer)
    tokens = att.tokens
    share = in_weight(attention_graph(att.head(*SINK_HEAD), tokens), share=True)  # (T_q, T_k) -> T shares
    return list(tokens), [float(share[i]) for i in range(len(tokens))]


def sink_data() -> dict:
    """The ``sink`` exercise's data: ``tokens`` and their ``shares`` (:func:`sink_case`)."""
    tokens, shares = sink_case()
    return {"tokens": tokens, "shares": shares}


@checker
def check_sink(answer, data=None):
    """``answer``: position (or unique text) of the token with the largest in-weight in
    layer 5, head 4 for :data:`SINK_SENTENCE`; ``data`` defaults to :func:`sink_data`."""
    data = data or sink_data()
    tokens, shares = data["tokens"], data["shares"]
    pos, problem = parse_token(answer, tokens)
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


def _edges(allowed) -> dict[int, list[int]]:
    """Out-neighbours ``i -> j`` (query ``i`` attends to key ``j``), self-loops left out."""
    T = len(allowed)
    return {i: [j for j in range(T) if allowed[i][j] and j != i] for i in range(T)}


def find_cycle(allowed):
    """A directed cycle of the graph with adjacency ``allowed`` (``T x T`` bools), self-loops
    ignored, as the list of its nodes (the first node is not repeated); ``None`` when there is
    none.  Depth-first search from node 0, neighbours in increasing order, like
    ``networkx.find_cycle`` on this graph."""
    out = _edges(allowed)
    state = {}  # node -> 1 on the current path, 2 finished

    def visit(node, path):
        state[node] = 1
        path.append(node)
        for nxt in out[node]:
            if state.get(nxt) == 1:
                return path[path.index(nxt):]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in range(len(allowed)):
        if start not in state:
            found = visit(start, [])
            if found:
                return found
    return None


def topological_order(allowed) -> list[int]:
    """Nodes of the acyclic graph ``allowed`` (self-loops ignored) ordered so that every edge
    ``u -> v`` has ``u`` before ``v`` (Kahn's algorithm, smallest free node first).

    Raises:
        ValueError: the graph has a cycle.
    """
    out = _edges(allowed)
    indegree = {n: 0 for n in out}
    for n in out:
        for m in out[n]:
            indegree[m] += 1
    order, free = [], sorted(n for n, d in indegree.items() if d == 0)
    while free:
        n = free.pop(0)
        order.append(n)
        for m in out[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                free.append(m)
                free.sort()
    if len(order) != len(out):
        raise ValueError("the graph has a directed cycle")
    return order


@checker
def check_acyclic(answer):
    """``answer``: a ``(4, 4)`` bool matrix over :data:`ACYCLIC_TOKENS`, ``True`` where query
    (row) may attend to key (column).  Correct: self-loops on, no other cycle, and the largest
    possible number of edges, ``T (T + 1) / 2``."""
    tokens, T = ACYCLIC_TOKENS, len(ACYCLIC_TOKENS)
    allowed, problem = parse_matrix(answer, (T, T))
    if problem:
        return problem
    missing = [tokens[i] for i in range(T) if not allowed[i][i]]
    if missing:
        return wrong(
            f"Switch on the self-loops too; these tokens cannot attend to themselves yet: "
            f"{', '.join(missing)}. A self-loop is not a cycle we need to avoid, and it keeps every "
            "row of the mask non-empty.",
        )
    cycle = find_cycle(allowed)
    if cycle:
        loop = " -> ".join([tokens[i] for i in cycle] + [tokens[cycle[0]]])
        return wrong(
            f"This graph has a directed cycle: {loop}. Information could flow around it, so "
            "no order of the tokens makes this mask causal.",
            hint="For every pair of tokens, keep at most one of the two directions.",
        )
    edges = _edges(allowed)
    n_edges, most = sum(len(v) for v in edges.values()), T * (T - 1) // 2
    order = topological_order(allowed)  # every edge u -> v has u before v
    if n_edges < most:
        i, j = next((order[a], order[b]) for a in range(T) for b in range(a + 1, T)
                    if order[b] not in edges[order[a]])
        return wrong(
            f"No cycle, good, but only {n_edges} of the {most} possible edges between different "
            f"tokens are on. You can still add {tokens[i]} -> {tokens[j]} without closing a cycle.",
            hint="Each pair of tokens can keep one of its two directions.",
        )
    if all(allowed[i][j] == (j <= i) for i in range(T) for j in range(T)):
        return right(f"This is the causal mask: every edge points to an earlier token, {n_edges + T} edges in all.")
    reading = ", ".join(tokens[n] for n in reversed(order))
    return right(
        f"Acyclic with all {n_edges + T} edges: it is the causal mask of the token order "
        f"({reading}), the reverse of a topological sort of the graph."
    )


def _matmul(a, b):
    return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def rollout(layers, residual: float = ROLLOUT_RESIDUAL):
    """Attention rollout in pure Python, the definition of :func:`attnlib.graphs.attention_rollout`:
    ``R = Â_{L-1} ... Â_1 Â_0`` (layers counted from 0) with ``Â = residual I + (1 - residual) A``, rows renormalised.

    Shapes:
        layers: ``L`` nested ``T x T`` lists (rows are queries); returns ``T x T``.
    """
    T = len(layers[0])
    rolled = [[float(i == j) for j in range(T)] for i in range(T)]
    for a in layers:
        a_hat = [[residual * (i == j) + (1 - residual) * a[i][j] for j in range(T)] for i in range(T)]
        a_hat = [[x / sum(row) for x in row] for row in a_hat]
        rolled = _matmul(a_hat, rolled)  # later layers multiply on the left
    return rolled


@checker
def check_rollout(answer):
    """``answer``: rollout entry ``R[1, 0]`` for :data:`ROLLOUT_LAYERS` with residual 0.5."""
    layers = [list(map(list, layer)) for layer in ROLLOUT_LAYERS]
    expected = rollout(layers)[1][0]
    return grade_number(
        answer, expected,
        f"R = Â1 Â0 with Â = 0.5 A + 0.5 I, and R[1, 0] = {expected:.3f}: the sum over the two "
        "paths rain -> [CLS] -> [CLS] and rain -> rain -> [CLS] of the products of their weights.",
        what="a share between 0 and 1", abs_tol=5e-3, share=True,
        mistakes=[
            (_matmul(layers[1], layers[0])[1][0], "That is A1 A0 without the residual term: add 0.5 I to each layer first."),
            (rollout(layers[::-1])[1][0], "That is Â0 Â1: the later layer (layer 1) multiplies on the left "
                                          "(row-vector convention)."),
            (rollout(layers[1:])[1][0], "That is layer 1 alone: roll both layers out."),
            (rollout(layers)[1][1], "That is R[1, 1], how much of 'rain' itself reaches 'rain'; the question "
                                    "asks for [CLS]."),
        ],
        impossible=[(lambda v: not 0.0 <= v <= 1.0,
                     lambda v: f"{v:g} is not a share: rollout rows are probability vectors, so entries lie in [0, 1].")],
        otherwise=lambda v: f"{v:g} is not R[1, 0].",
        hint="Â0 = 0.5 A0 + 0.5 I, Â1 = 0.5 A1 + 0.5 I, then R = Â1 Â0; read row 'rain', column '[CLS]'.")


define(8, "sink", kind="token", title="Find the sink in the graph",
       question=(f"Layer {SINK_HEAD[0]}, head {SINK_HEAD[1]} reading <i>{html.escape(SINK_SENTENCE)}</i>: "
                 "which token receives the most attention, i.e. has the largest weighted in-degree?"),
       tokens=lambda data: data["tokens"], data=sink_data, grade=check_sink)
define(8, "acyclic", kind="matrix", title="The largest acyclic attention graph",
       question=("Switch on edges (row = query, column = key) so that every token attends to itself, "
                 "the graph has no directed cycle apart from self-loops, and as many edges as possible "
                 "are on."),
       rows=ACYCLIC_TOKENS, cols=ACYCLIC_TOKENS, grade=check_acyclic)
(_a, _b), (_c, _d) = ROLLOUT_LAYERS[0]
(_e, _f), (_g, _h) = ROLLOUT_LAYERS[1]
define(8, "rollout", kind="number", precision='Give it to 2 decimal places (graded within 0.005); a percentage is read as a share.', title="Roll out two layers",
       question=(f"Tokens ([CLS], rain). Layer 0: A0 = [[{_a}, {_b}], [{_c}, {_d}]]; layer 1: A1 = "
                 f"[[{_e}, {_f}], [{_g}, {_h}]]. With residual 0.5, what is the rollout entry R[1, 0], "
                 "the share of the input [CLS] that reaches position 'rain' after layer 1 (layers "
                 "counted from 0)?"),
       grade=check_rollout, label="R[1, 0]")
