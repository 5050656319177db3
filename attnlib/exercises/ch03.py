"""Chapter 3 exercises: reading ``out = A V`` by rows, by columns and entry by entry.

All data come from the pretrained encoder: layer 0, head 5 on the real sentence "Hello there!",
a 5-token example small enough to compute by hand (row and column view), and layer 4, head 3,
the head the chapter reads, on the running sentence (a longer key) and on two other sentences
(a claim tested with evidence).  Nothing is computed at
import time: :func:`example` runs the model the first time a builder or a test asks.
"""
from __future__ import annotations

import functools
import html
import math

from .core import checker, grade_choice, grade_number, parse_number, parse_token, right, wrong
from .registry import define

__all__ = [
    "SENTENCE", "LAYER", "HEAD", "example", "row_entry_expected", "check_row_entry",
    "check_spread", "longer_key_example", "check_longer_key", "claim_evidence", "check_claim", "CLAIM_OPTIONS",
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


define(3, "row_entry", kind="number", precision='Give it to 2 decimal places (graded within 0.01, plus 1 % of the answer).', title="One entry of A V, by the row view",
       question=_row_entry_question, data=example, grade=check_row_entry, placeholder="e.g. 0.123")
define(3, "spread", kind="token", title="Where a value feature spreads (column view)",
       question=_spread_question, tokens=lambda data: data["tokens"], data=example, grade=check_spread)
# --------------------------------------------------------------- a longer key (dot-product view)
# Layer 4, head 3 on the running sentence, the head the chapter reads: what happens to the
# weights on one key when that key vector is made twice as long?
LONGER_LAYER, LONGER_HEAD = 4, 3
LONGER_KEY = "warm"
LONGER_SCALE = 2.0


@functools.lru_cache(maxsize=1)
def longer_key_example() -> dict:
    """The scores and weights of every query on the key :data:`LONGER_KEY` in layer
    :data:`LONGER_LAYER`, head :data:`LONGER_HEAD` on the running sentence, before and after
    that key vector is multiplied by :data:`LONGER_SCALE` (all other queries and keys kept),
    read from the pretrained encoder (kernel only; the page embeds the result).

    Returns a dict with ``tokens`` (T str), ``key`` (the key's position), ``scores`` (the T
    scaled scores ``S[i, key] = q_i . k_key / sqrt(d_k)``, rounded to 3 decimals as shown),
    ``before`` and ``after`` (the T weights ``A[i, key]``, rounded to 4 decimals), ``grew``
    (the queries whose weight on the key grew, computed from the unrounded weights) and
    ``uniform`` (1/T).
    """
    from ..corpus import RUNNING
    from ..encoder import head_qkv
    from ..softmax import softmax

    tokens, q, k, v = head_qkv(RUNNING, LONGER_LAYER, LONGER_HEAD)         # (T, d_k) each
    j = tokens.index(LONGER_KEY)
    scale = math.sqrt(q.shape[-1])
    longer = k.clone()
    longer[j] = LONGER_SCALE * k[j]                                         # only key j changes
    before = softmax(q @ k.T / scale, dim=-1)[:, j]                         # (T,)
    after = softmax(q @ longer.T / scale, dim=-1)[:, j]                     # (T,)
    return {
        "tokens": list(tokens),
        "key": j,
        "scores": [round(float(s), 3) for s in (q @ k[j] / scale).cpu()],
        "before": [round(float(a), 4) for a in before.cpu()],
        "after": [round(float(a), 4) for a in after.cpu()],
        "grew": [i for i in range(len(tokens)) if float(after[i]) > float(before[i])],
        "uniform": round(1 / len(tokens), 3),
    }


def _name(tokens, i: int) -> str:
    """Query ``i`` by its token, with its position where the token occurs twice ('the' at 1 and 5)."""
    return tokens[i] if tokens.count(tokens[i]) == 1 else f"{tokens[i]} ({i})"


def _names(tokens, rows) -> str:
    return ", ".join(_name(tokens, i) for i in rows)


@checker
def check_longer_key(answer, data: dict | None = None):
    """Grade the number of queries whose weight on the key grows when the key vector is made
    :data:`LONGER_SCALE` times longer.  Right: the queries whose score with the key is positive
    (dot-product view: the key's column of scores is multiplied by the scale, and a softmax
    weight rises with its own score).  The messages quote ``data`` (:func:`longer_key_example`)."""
    value, bad = parse_number(answer, "a count of queries, a whole number")
    if bad:
        return bad
    data = data or longer_key_example()
    tokens, j, S = data["tokens"], data["key"], data["scores"]
    T, key, grew = len(tokens), tokens[data["key"]], data["grew"]
    fell = [i for i in range(T) if i not in grew]
    n = len(grew)
    if value != int(value):
        return wrong(f"{value:g} is not a whole number: count the queries whose weight on {key!r} grows.")
    value = int(value)
    moved = "; ".join(f"{_name(tokens, i)} {data['before'][i]:.4f} -> {data['after'][i]:.4f}"
                      for i in sorted(range(T), key=lambda i: S[i])[:2] + sorted(range(T), key=lambda i: -S[i])[:2])
    measured = (f"Measured on the head: the weight on {key!r} grew for {_names(tokens, grew)} and fell for "
                f"{_names(tokens, fell)} (e.g. {moved}).")
    if value == n:
        return right(f"The {n} queries whose score with {key!r} is positive. S[i, {key!r}] = "
                     f"q_i . k_{key} / sqrt(d_k) is linear in k_{key}, so a key {LONGER_SCALE:g} times as long "
                     "multiplies that one score of every row by "
                     f"{LONGER_SCALE:g}; the other scores of the row stay. A softmax weight rises and falls "
                     "with its own score, so it grows where the score was positive (the query and the key "
                     "point the same way) and shrinks where it was negative. " + measured)
    if not 0 <= value <= T:
        return wrong(f"The sentence has {T} queries, so the count lies between 0 and {T}.")
    weakest = min(grew, key=lambda i: abs(S[i]))                        # the smallest positive score
    traps = [
        (T, f"Not every query: a longer key makes every score q_i . k_{key} larger in size, and for the "
            f"{len(fell)} queries with a negative score ({_names(tokens, fell)}) that means more negative. "
            "Those queries give the key even less weight. " + measured),
        (len(fell), f"{len(fell)} is the number of queries whose weight on {key!r} falls (their score with it is "
                    "negative). The question asks for the queries whose weight grows. " + measured),
        (0, "The softmax renormalises each row, but only one score of the row changes, not all of them by the "
            "same amount, so the weights do move. " + measured),
        (n - 1, f"Every positive score counts, however small: the query {_name(tokens, weakest)} has "
                f"S = {S[weakest]:+.3f} and its weight still grows ({data['before'][weakest]:.4f} -> "
                f"{data['after'][weakest]:.4f})" + (f"; and the query {key!r} reads its own key too "
                f"(S = {S[j]:+.3f}, {data['before'][j]:.4f} -> {data['after'][j]:.4f})." if j in grew else ".")),
    ]
    for trap, message in traps:
        if value == trap:
            return wrong(message)
    side = "many" if value > n else "few"
    return wrong(f"{value} is too {side}.",
                 hint=f"Only column {key!r} of S changes, and each of its entries is multiplied by "
                      f"{LONGER_SCALE:g}. In which rows does that raise the score?")


def _longer_key_question(data) -> str:
    tokens, j = data["tokens"], data["key"]
    key = html.escape(tokens[j])
    rows = "".join(f"<tr><th>{html.escape(t)}</th><td>{s:+.3f}</td><td>{a:.3f}</td></tr>"
                   for t, s, a in zip(tokens, data["scores"], data["before"]))
    return (f"Layer {LONGER_LAYER}, head {LONGER_HEAD} (the head this chapter reads) on the running "
            f"sentence. For each query i: its scaled score S[i, {key}] = q<sub>i</sub> &middot; "
            f"k<sub>{key}</sub> / &radic;d<sub>k</sub> with the key <i>{key}</i>, and its weight "
            f"A[i, {key}].<table><tr><th>query i</th><th>S[i, {key}]</th><th>A[i, {key}]</th></tr>{rows}"
            f"</table>Predict, then check: if the key vector k<sub>{key}</sub> were multiplied by "
            f"{LONGER_SCALE:g} (every other query and key unchanged), for how many of the "
            f"{len(tokens)} queries would the weight on <i>{key}</i> grow?")


define(3, "longer_key", kind="number", precision='A whole number.', title="A longer key: who reads it more?",
       question=_longer_key_question, data=longer_key_example, grade=check_longer_key,
       placeholder="e.g. 4")


# --------------------------------------------------------------- reading a head with evidence
# Layer 4, head 3: the head whose "it -> cat" weight chapter 9 tests (its section ch9-coref).  Here
# the learner tests another claim about it, with two sentences chapter 3 does not show.
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
        counter = (f"In '{s}' the subject {subject!r} gets {ws:.3f} and {other!r} gets {wo:.3f}. The claim "
                   "is about every sentence, so one counterexample, a sentence where it predicts the "
                   "opposite, is enough to refute it.")
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
                        "prefers some content; a sentence where the claim and the head disagree shows "
                        "that it is not the content claimed.", feedback,
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
