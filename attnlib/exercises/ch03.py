"""Chapter 3 exercises: reading ``out = A V`` by rows, by columns and entry by entry.

All data come from the pretrained encoder (layer 0, head 5, on the real sentence
"Hello there!", a 5-token example small enough to compute by hand).  Nothing is computed at
import time: :func:`example` runs the model the first time a builder or a test asks.
"""
from __future__ import annotations

import functools
import html
import math

from .core import checker, grade_choice, grade_number, parse_token, right, wrong
from .registry import define

__all__ = [
    "SENTENCE", "LAYER", "HEAD", "example", "row_entry_expected", "check_row_entry",
    "check_spread", "BIAS_OPTIONS", "bias_example", "check_bias", "claim_evidence", "check_claim", "CLAIM_OPTIONS",
]

SENTENCE = "Hello there!"  # attnlib.corpus.PADDED_BATCH[2]
LAYER, HEAD = 0, 5
QUERY = "!"                # the query whose output entry the learner computes
KEY = "there"              # the key whose value the learner perturbs in check_spread


@functools.lru_cache(maxsize=1)
def example() -> dict:
    """The real numbers every chapter-3 exercise shows, rounded to 2 decimals as printed.

    Returns a dict with ``tokens`` (list of T str), ``weights`` (T x T nested list, rows are
    queries), ``feature`` (the value column ``c`` with the largest spread over tokens),
    ``values`` (column ``c`` of ``V``, T numbers), ``query`` and ``key`` (positions).
    """
    from ..softmax import softmax
    from ..encoder import head_qkv

    tokens, q, k, v = head_qkv(SENTENCE, LAYER, HEAD)
    weights = softmax(q @ k.T / math.sqrt(q.shape[-1]))                  # (T, T)
    c = int(v.std(dim=0).argmax())                                         # most varied value feature
    return {
        "tokens": list(tokens),
        "weights": [[round(float(x), 2) for x in row] for row in weights.cpu()],
        "feature": c,
        "values": [round(float(x), 2) for x in v[:, c].cpu()],
        "query": tokens.index(QUERY),
        "key": tokens.index(KEY),
    }


def row_entry_expected(data: dict | None = None) -> float:
    """``out[i, c] = sum_j A[i, j] V[j, c]`` from the rounded numbers shown to the learner."""
    data = data or example()
    i = data["query"]
    return sum(a * x for a, x in zip(data["weights"][i], data["values"]))


@checker
def check_row_entry(answer, data: dict | None = None):
    """Grade ``out[query, c]`` computed by the row view."""
    data = data or example()
    tokens, A, vals, i = data["tokens"], data["weights"], data["values"], data["query"]
    expected = row_entry_expected(data)
    tok = tokens[i]
    terms = " + ".join(f"{a:.2f}*({x:.2f})" for a, x in zip(A[i], vals))
    column = sum(A[j][i] * vals[j] for j in range(len(tokens)))
    biggest = max(range(len(tokens)), key=lambda j: A[i][j])
    traps = [
        (column, f"You combined column {tok!r} of A (how much each query takes from key {tok!r}) "
                 f"with the values. The row view uses row {tok!r} of A: where query {tok!r} looks."),
        (sum(vals) / len(vals), "That is the plain average of the values. Attention averages "
                                "with unequal weights: use row %r of A." % tok),
        (sum(vals), "That is the sum of the values without weights. Multiply each value by its "
                    "weight from row %r of A first." % tok),
        (vals[i], f"That is token {tok!r}'s own value. Its output mixes all tokens' values, and "
                  f"it gives only {A[i][i]:.2f} of its attention to itself."),
        (A[i][i] * vals[i], "You kept only the diagonal term A[i, i] V[i, c]. Row i of A V sums "
                            "over every key j, not only j = i."),
        (A[i][biggest] * vals[biggest], f"You kept only the largest term (key {tokens[biggest]!r}). "
                                        "Add the other keys' contributions too."),
    ]
    return grade_number(
        answer, expected,
        f"out[{tok!r}, c] = {terms} = {expected:.3f}: a weighted average of the "
        "feature's values, weighted by where the query looks.",
        what="a number (the entry of A V)", abs_tol=0.01, rel_tol=0.01,
        mistakes=traps, mistake_tol=(0.004, 0.004),
        otherwise=lambda v: f"{v:g} is too {'large' if v > expected else 'small'} to be the row-view sum.",
        hint=f"Multiply each number in row {tok!r} of A by the value of the same key and add the T products.")


@checker
def check_spread(answer, data: dict | None = None):
    """Grade the query whose output moves most when ``V[key, c]`` grows by 1 (column view)."""
    data = data or example()
    tokens, A, j = data["tokens"], data["weights"], data["key"]
    pos, bad = parse_token(answer, tokens)
    if bad:
        return bad
    column = [A[i][j] for i in range(len(tokens))]
    best = max(range(len(tokens)), key=lambda i: column[i])
    key = tokens[j]
    if column[pos] >= column[best] - 1e-9:
        return right(f"Raising V[{key!r}, c] by 1 adds column {key!r} of A to out[:, c]; query "
                     f"{tokens[pos]!r} has the largest entry there ({column[pos]:.2f}), so its "
                     f"output moves by {column[pos]:.2f}.")
    if pos == j:
        return wrong(f"Token {key!r} owns that value, but its own query gives only "
                     f"{column[pos]:.2f} of its attention to key {key!r}: owning a value does "
                     "not mean reading it.",
                     hint=f"Look down column {key!r} of A, not along a row.")
    if A[j][pos] >= max(A[j]) - 1e-9:
        return wrong(f"That is where query {key!r} looks most (row {key!r} of A). The question is "
                     f"who reads key {key!r}: column {key!r}, where {tokens[pos]!r} has only "
                     f"{column[pos]:.2f}.")
    return wrong(f"Query {tokens[pos]!r} gives key {key!r} a weight of {column[pos]:.2f}, so its "
                 "output moves by only that much.",
                 hint=f"By the column view, out[:, c] changes by (column {key!r} of A) times the "
                      "change; find that column's largest entry.")


BIAS_OPTIONS = ("b_V, the same for every query", "T b_V, one b_V per key",
                "b_V times the sum of column i of A", "Nothing: the softmax removes it")


@functools.lru_cache(maxsize=1)
def bias_example() -> dict:
    """What the value bias ``b_V`` adds to the output of layer :data:`LAYER`, head :data:`HEAD`
    on :data:`SENTENCE` (kernel only): ``out = A (X W_V + b_V)`` against ``A (X W_V)``.

    Returns ``{"T", "d_v", "gap", "norm_b", "column_sums"}``: ``gap`` is the largest
    ``|out_with - out_without - b_V|`` over all queries and features, ``norm_b`` is
    ``||b_V||``, ``column_sums`` the ``T`` column sums of ``A`` (to show they are not 1).
    """
    from ..encoder import embed, head_projections, load_encoder
    from ..softmax import softmax

    model, tokenizer = load_encoder()
    tokens, x = embed(SENTENCE, model, tokenizer)                       # (T, d_model): layer 0's input
    p = {n: t.to(x.device) for n, t in head_projections(model, LAYER, HEAD).items()}
    q, k = x @ p["W_Q"] + p["b_Q"], x @ p["W_K"] + p["b_K"]             # (T, d_k)
    weights = softmax(q @ k.T / math.sqrt(q.shape[-1]))                  # (T, T)
    out_with = weights @ (x @ p["W_V"] + p["b_V"])                      # (T, d_v)
    out_without = weights @ (x @ p["W_V"])
    return {"T": len(tokens), "d_v": int(p["W_V"].shape[1]),
            "gap": float((out_with - out_without - p["b_V"]).abs().max()),
            "norm_b": float(p["b_V"].norm()),
            "column_sums": [round(float(c), 3) for c in weights.sum(0).cpu()]}


@checker
def check_bias(answer, data=None):
    """Grade "what does b_V add to row i of A V?"  Right: exactly b_V for every query (row view:
    the row of A sums to 1).  ``data`` from :func:`bias_example`."""
    data = data or bias_example()
    sums = ", ".join(f"{c:.2f}" for c in data["column_sums"])
    return grade_choice(
        answer, BIAS_OPTIONS, BIAS_OPTIONS[0],
        "Row view: row i of A V is sum_j A[i, j] (x_j W_V + b_V) = (row i of A X W_V) + "
        "(sum_j A[i, j]) b_V, and the weights sum to 1.",
        {BIAS_OPTIONS[1]: "Each key does bring one b_V, but weighted by A[i, j], and those weights sum to 1, not T.",
         BIAS_OPTIONS[2]: "Column sums of A say how much attention a key receives (here " + sums +
                          "); the bias of the values is averaged along a row, whose sum is 1.",
         BIAS_OPTIONS[3]: "The softmax acts on the scores, before the values are mixed; b_V is part of the "
                          "values. (A bias of the keys is what the softmax removes: q_i . b_K is the same for "
                          "every key of row i.)"},
        measured=(f"Measured on layer {LAYER}, head {HEAD}: out(with b_V) - out(without) differs from b_V "
                  f"by at most {data['gap']:.1e}, for |b_V| = {data['norm_b']:.2f}."))


def _matrix_html(data: dict) -> str:
    tokens = [html.escape(t) for t in data["tokens"]]
    head = "".join(f"<th>{t}</th>" for t in tokens)
    rows = "".join(
        f"<tr><th>{t}</th>" + "".join(f"<td>{a:.2f}</td>" for a in row) + "</tr>"
        for t, row in zip(tokens, data["weights"])
    )
    vals = "".join(f"<td>{x:.2f}</td>" for x in data["values"])
    return (f"<table><tr><th>A (query \\ key)</th>{head}</tr>{rows}"
            f"<tr><th>V[:, c]</th>{vals}</tr></table>")


def _row_entry_question(data) -> str:
    tok = data["tokens"][data["query"]]
    return (f"Layer {LAYER}, head {HEAD} on <i>{html.escape(SENTENCE)}</i>: the weights A and "
            f"value feature c = {data['feature']}. Compute out[{html.escape(repr(tok))}, c] by the "
            f"row view (use the numbers as printed).{_matrix_html(data)}")


def _spread_question(data) -> str:
    key = data["tokens"][data["key"]]
    return (f"Same head and sentence. If V[{html.escape(repr(key))}, c] grew by 1, whose output "
            f"out[query, c] would change the most?{_matrix_html(data)}")


define(3, "row_entry", kind="number", title="One entry of A V, by the row view",
       question=_row_entry_question, data=example, grade=check_row_entry, placeholder="e.g. 0.123")
define(3, "spread", kind="token", title="Where a value feature spreads (column view)",
       question=_spread_question, tokens=lambda data: data["tokens"], data=example, grade=check_spread)
define(3, "value_bias", kind="choice", title="What the value bias adds",
       question=(f"Layer {LAYER}, head {HEAD} on <i>{html.escape(SENTENCE)}</i>: the value vectors are "
                 "v_j = x_j W_V + b_V. Predict, then check: what does the bias b_V add to the output "
                 "row i of A V?"),
       options=BIAS_OPTIONS, data=bias_example, grade=check_bias)


# --------------------------------------------------------------- reading a head with evidence
# Layer 4, head 3: the head whose "it -> cat" weight the chapter tests.  Here the learner tests
# another claim about it on a sentence the chapter does not show.
EVIDENCE_LAYER, EVIDENCE_HEAD = 4, 3
EVIDENCE_SENTENCES = (
    "The cat sat on the mat because it was warm.",
    "The dog sat on the rug because it was warm.",
    "The mat was under the cat because it was warm.",
)
EVIDENCE_NOUNS = (("cat", "mat"), ("dog", "rug"), ("mat", "cat"))   # (subject, other noun) per sentence
CLAIM_OPTIONS = (
    "Supported: the subject gets more than the uniform weight 1/T in every sentence",
    "Refuted: in some sentence another noun gets more weight than the subject",
    "Undecided: only an ablation can test it",
    "Supported: the subject gets more than its position alone predicts",
)


@functools.lru_cache(maxsize=1)
def claim_evidence() -> dict:
    """The weights of the query "it" on the two nouns of each sentence of
    :data:`EVIDENCE_SENTENCES`, the uniform weight and what the position alone predicts, read
    from the pretrained encoder (layer 4, head 3) and rounded to 3 decimals as shown.

    Returns a dict with ``rows`` (one ``[sentence, subject, w_subject, other, w_other]`` per
    sentence), ``uniform`` (1/T) and ``positional`` (the positional baseline at the subject's
    offset, :func:`attnlib.evidence.positional_baseline`).
    """
    from .. import evidence

    rows = []
    for sentence, (subject, other) in zip(EVIDENCE_SENTENCES, EVIDENCE_NOUNS):
        (row,) = evidence.pair_weights([sentence], EVIDENCE_LAYER, EVIDENCE_HEAD, "it", [subject, other])
        rows.append([sentence, subject, round(row["weights"][subject], 3), other, round(row["weights"][other], 3)])
        T = row["n_tokens"]
    lift = evidence.positional_lift(EVIDENCE_LAYER, EVIDENCE_HEAD, [-6])[-6]
    return {"rows": rows, "uniform": round(1 / T, 3), "positional": round(lift / T, 3)}


@checker
def check_claim(answer, data: dict | None = None):
    """Grade the verdict on the claim "from 'it', layer 4 head 3 attends to the sentence's
    subject"; the messages quote the numbers of ``data`` (:func:`claim_evidence`)."""
    data = data or claim_evidence()
    losing = [r for r in data["rows"] if r[4] > r[2]]
    above = all(r[2] > data["uniform"] for r in data["rows"])
    if losing:
        s, subject, ws, other, wo = losing[0]
        counter = (f"In '{s}' the subject {subject!r} gets {ws:.3f} and {other!r} gets {wo:.3f}: "
                   "one minimal pair where the claim predicts the opposite is enough to refute it.")
    else:
        counter = "In every sentence the subject gets more weight than the other noun."
    feedback = {
        CLAIM_OPTIONS[0]: (f"Beating the uniform {data['uniform']:.3f} only shows that the head is not "
                           "ignoring its input; it says nothing about which property draws the weight. "
                           + counter if above else
                           f"Not even that holds: some subject gets less than the uniform {data['uniform']:.3f}."),
        CLAIM_OPTIONS[2]: ("An ablation tests what a head contributes to the output. The claim is about "
                           "where the head looks, and the weights answer that directly. " + counter),
        CLAIM_OPTIONS[3]: (f"Position alone predicts {data['positional']:.3f} six tokens back, so a large "
                           "weight shows that the content matters, but not which content. " + counter),
    }
    if not losing:  # the data would support the claim (never for the real model; kept for honesty)
        return grade_choice(answer, CLAIM_OPTIONS, CLAIM_OPTIONS[0], "Supported by these sentences.", {
            CLAIM_OPTIONS[1]: counter, CLAIM_OPTIONS[2]: feedback[CLAIM_OPTIONS[2]],
            CLAIM_OPTIONS[3]: feedback[CLAIM_OPTIONS[3]]})
    return grade_choice(answer, CLAIM_OPTIONS, CLAIM_OPTIONS[1],
                        counter + " The baselines (uniform, position) can only show that a head "
                        "prefers some content; the minimal pair decides which.", feedback,
                        hint="Compare the subject with the other noun sentence by sentence.")


def _claim_question(data) -> str:
    items = "".join(f"<li><i>{html.escape(s)}</i><br>subject {html.escape(sub)}: {ws:.3f}; "
                    f"other noun {html.escape(oth)}: {wo:.3f}</li>" for s, sub, ws, oth, wo in data["rows"])
    return (f"Claim: from the query <i>it</i>, layer {EVIDENCE_LAYER}, head {EVIDENCE_HEAD} attends to "
            f"the subject of the sentence. The weights of <i>it</i> on the two nouns of three sentences "
            f"(uniform 1/T = {data['uniform']:.3f}; position alone predicts {data['positional']:.3f} "
            f"six tokens back):<ul>{items}</ul>What does the evidence say about the claim?")


define(3, "claim", kind="choice", title="Test a claim about a head",
       question=_claim_question, data=claim_evidence, options=CLAIM_OPTIONS, grade=check_claim)
