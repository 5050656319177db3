"""Chapter 9 exercises: reading the pretrained encoder's real heads.

The right answers are not stored here: each checker runs the course's encoder
(:func:`attnlib.encoder.load_encoder`) on the exercise's sentence and reads the head, so the answers
always agree with the model the chapter shows.  Nothing is computed at import time.
"""
from __future__ import annotations

import functools
import html

from .core import (CLOSE_CALL, checker, grade_choice, head_key, pair_flips, parse_model_answer, parse_token,
                   right, strongest, wrong)
from .registry import define

__all__ = [
    "SINK_SENTENCE", "SINK_HEAD", "QUERY_SENTENCE", "QUERY_WORD", "QUERY_HEAD",
    "sink_case", "query_case", "sink_data", "query_data", "check_sink_token", "check_most_attended",
    "CLAIM_HEAD", "CLAIM_SENTENCES", "CLAIM_OPTIONS", "claim_evidence", "check_claim",
    "PREV_HEAD", "check_break_previous", "FLIP_HEAD", "check_flip_pair",
]

# Exercise "sink_token": the punctuation head found by the chapter's sink table.
SINK_SENTENCE = "After the storm, the village was quiet; nobody spoke."
SINK_HEAD = (3, 11)  # (layer, head)

# Exercise "most_attended": the next-token head found by the chapter's offset table.
QUERY_SENTENCE = "The bears fished for salmon in the river."
QUERY_WORD = "salmon"
QUERY_HEAD = (1, 8)  # (layer, head)


@functools.lru_cache(maxsize=1)
def sink_case():
    """Tokens of :data:`SINK_SENTENCE` and the attention each token receives in head
    :data:`SINK_HEAD`, averaged over the queries (column means, each in [0, 1]).

    Shapes:
        returns ``(tokens, received)`` with ``received`` a list of ``T`` floats.
    """
    from ..encoder import get_attentions, load_encoder
    from ..measures import received_attention

    model, tokenizer = load_encoder(device="cpu")
    att = get_attentions(SINK_SENTENCE, model=model, tokenizer=tokenizer)
    received = received_attention(att.head(*SINK_HEAD))  # (T_k,): mean over queries
    return list(att.tokens), [float(x) for x in received]


@functools.lru_cache(maxsize=1)
def query_case():
    """Tokens of :data:`QUERY_SENTENCE`, the position of :data:`QUERY_WORD`, and that query's
    row of weights in head :data:`QUERY_HEAD`.

    Shapes:
        returns ``(tokens, query_position, row)`` with ``row`` a list of ``T`` floats summing to 1.
    """
    from ..encoder import get_attentions, load_encoder

    model, tokenizer = load_encoder(device="cpu")
    att = get_attentions(QUERY_SENTENCE, model=model, tokenizer=tokenizer)
    i = att.tokens.index(QUERY_WORD)
    return list(att.tokens), i, [float(x) for x in att.head(*QUERY_HEAD)[i]]


def sink_data() -> dict:
    """The ``sink_token`` exercise's data: ``tokens`` and ``received`` (:func:`sink_case`)."""
    tokens, received = sink_case()
    return {"tokens": tokens, "received": received}


def query_data() -> dict:
    """The ``most_attended`` exercise's data: ``tokens``, ``query`` (position) and ``row``
    (:func:`query_case`)."""
    tokens, i, row = query_case()
    return {"tokens": tokens, "query": i, "row": row}


@checker
def check_sink_token(answer, data=None):
    """``answer``: the position (or text) of the token that receives the most attention,
    averaged over queries, in layer 3, head 11 for :data:`SINK_SENTENCE`; ``data`` defaults
    to :func:`sink_data`."""
    data = data or sink_data()
    tokens, received = data["tokens"], data["received"]
    pos, problem = parse_token(answer, tokens)
    if problem:
        return problem
    best = max(range(len(tokens)), key=received.__getitem__)
    got, top = received[pos], received[best]
    cls_share = received[tokens.index("[CLS]")]
    if pos == best:
        return right(
            f"{tokens[pos]!r} receives {got:.0%} of this head's attention, averaged over the "
            f"{len(tokens)} queries: more than any other token ([CLS] gets {cls_share:.0%}). This "
            "head parks its attention on the final punctuation mark, not on [CLS]."
        )
    if tokens[pos] == "[CLS]":
        return wrong(
            f"[CLS] is the sink of most heads in this model, but here it receives only {got:.0%}; "
            f"another token receives {top:.0%}.",
            hint="Look at the sink table's punctuation panel: what is special about layer 3, head 11?",
        )
    if tokens[pos] in {",", ";", ".", "[SEP]"}:
        return wrong(
            f"{tokens[pos]!r} is the right kind of token (a punctuation or separator sink), but it "
            f"receives {got:.0%} on average; the strongest sink receives {top:.0%}.",
            hint="Compare the three punctuation marks and [SEP]: which one ends the sentence?",
        )
    return wrong(
        f"{tokens[pos]!r} receives only {got:.1%} of the attention on average, while the sink "
        f"receives {top:.0%}. Sinks in this head are not content words.",
        hint="Column means: average each key's column over all queries.",
    )


@checker
def check_most_attended(answer, data=None):
    """``answer``: the position (or text) of the key that the query "salmon" attends to most
    in layer 1, head 8 for :data:`QUERY_SENTENCE`; ``data`` defaults to :func:`query_data`."""
    data = data or query_data()
    tokens, i, row = data["tokens"], data["query"], data["row"]
    pos, problem = parse_token(answer, tokens)
    if problem:
        return problem
    best = max(range(len(tokens)), key=row.__getitem__)
    got, top = row[pos], row[best]
    if pos == best:
        return right(
            f"{tokens[pos]!r} gets {got:.0%} of the query {QUERY_WORD!r}'s attention, the largest "
            f"weight in the row (the next token, {tokens[i + 1]!r}, gets {row[i + 1]:.0%})."
        )
    if pos == i + 1:
        return wrong(
            f"Good reasoning: {tokens[pos]!r} is the next token and gets {got:.0%}, far more than "
            f"the other words. But one key gets more: {top:.0%}.",
            hint="A head can have a job and still park spare attention on the model's usual sink.",
        )
    if pos == i - 1:
        return wrong(
            f"{tokens[pos]!r} is the previous token, which is layer 0, head 2's job; here it gets "
            f"{got:.1%}. Layer 1, head 8 looks the other way.",
        )
    if pos == i:
        return wrong(f"The query attends to itself with weight {got:.1%} here; another key gets {top:.0%}.")
    return wrong(
        f"{tokens[pos]!r} gets {got:.1%} of the query's attention; the most-attended key gets {top:.0%}.",
        hint="Recall what this head does on average, and where this model parks spare attention.",
    )


define(9, "sink_token", kind="token", title="Find the sink of a real head",
       question=(f"Layer 3, head 11 reading <i>{html.escape(SINK_SENTENCE)}</i>: which token receives "
                 "the most attention, averaged over all queries (the largest column mean)?"),
       tokens=lambda data: data["tokens"], data=sink_data, grade=check_sink_token)
define(9, "most_attended", kind="token", title="Predict the most-attended key",
       question=(f"Layer 1, head 8 reading <i>{html.escape(QUERY_SENTENCE)}</i>: which key does the "
                 f"query <b>{QUERY_WORD}</b> attend to most?"),
       tokens=lambda data: data["tokens"], data=query_data, grade=check_most_attended)


# ----------------------------------------------------------------------------- claim
# The baseline method applied to the chapter's own anecdote: layer 1, head 9 links "time" with
# "flies" in "time flies".  Is it a "subject head"?
CLAIM_HEAD = (1, 9)
CLAIM_SENTENCES = (                      # (sentence, subject of "flies" or None, another noun or None)
    ("Time flies like an arrow.", "time", None),
    ("Fruit flies like a banana.", None, "fruit"),
    ("The river flies over the bird.", "river", "bird"),
    ("The old bird slowly flies over the river.", "bird", "river"),
)
CLAIM_OPTIONS = (
    "Supported: the subject gets more than the uniform weight 1/T in most sentences",
    "Refuted: the weight follows the token just before 'flies', subject or not",
    "Supported: the subject beats the other noun in every sentence",
    "Undecided: only an ablation can test where a head looks",
)


@functools.lru_cache(maxsize=1)
def claim_evidence() -> dict:
    """The evidence for "layer 1, head 9 makes 'flies' look at its subject", read from the
    encoder (kernel only) and rounded to 3 decimals as shown.

    Returns ``rows``: one dict per sentence of :data:`CLAIM_SENTENCES` with ``text``,
    ``uniform`` (1/T), ``previous`` (the token before "flies") and ``w_previous``, and
    ``subject`` / ``other`` with their weights (``None`` where the sentence has none); and
    ``lift``: the positional lift ``{-2, -1, +1}`` of the head over the reference sentences
    (:func:`attnlib.evidence.positional_lift`, multiples of the uniform weight).
    """
    from .. import evidence
    from ..encoder import get_attentions

    layer, head = CLAIM_HEAD
    rows = []
    for text, subject, other in CLAIM_SENTENCES:
        keys = [k for k in (subject, other) if k]
        (row,) = evidence.pair_weights([text], layer, head, "flies", keys)
        i = row["tokens"].index("flies")
        w_prev = float(get_attentions(text).head(layer, head)[i, i - 1])
        rows.append({"text": text, "uniform": round(row["uniform"], 3), "previous": row["tokens"][i - 1],
                     "w_previous": round(w_prev, 3),
                     "subject": subject, "w_subject": None if subject is None else round(row["weights"][subject], 3),
                     "other": other, "w_other": None if other is None else round(row["weights"][other], 3)})
    lift = evidence.positional_lift(layer, head, [-2, -1, 1])
    return {"rows": rows, "lift": {str(k): round(v, 2) for k, v in lift.items()}}


@checker
def check_claim(answer, data=None):
    """Grade the verdict on "layer 1, head 9 makes 'flies' look at its subject"; the messages
    quote the numbers of ``data`` (:func:`claim_evidence`)."""
    data = data or claim_evidence()
    rows, lift = data["rows"], data["lift"]
    far = [r for r in rows if r["subject"] and r["subject"] != r["previous"]]
    near_not_subject = [r for r in rows if r["subject"] is None and r["other"] == r["previous"]]
    evidence_text = (f"Over the reference sentences the head gives the previous token {lift['-1']:.1f} times "
                     f"the uniform weight (two back: {lift['-2']:.1f}, next: {lift['1']:.2f}).")
    if far:
        r = far[0]
        evidence_text += (f" In '{r['text']}' the subject {r['subject']!r} is not next to 'flies' and gets "
                          f"{r['w_subject']:.3f} (uniform {r['uniform']:.3f}), while {r['previous']!r}, the "
                          f"token before 'flies', gets {r['w_previous']:.3f}.")
    if near_not_subject:
        r = near_not_subject[0]
        evidence_text += (f" In '{r['text']}' {r['other']!r} is no subject, yet as the token before 'flies' "
                          f"it gets {r['w_previous']:.3f}, {r['w_previous'] / r['uniform']:.1f} times the uniform "
                          f"{r['uniform']:.3f}: above uniform, as in the chapter's pair, where the weight on "
                          "'fruit' is read the same way.")
    refuted = bool(far) and all(r["w_previous"] > (r["w_subject"] or 0) for r in far)
    correct = CLAIM_OPTIONS[1] if refuted else CLAIM_OPTIONS[0]
    feedback = {
        CLAIM_OPTIONS[0]: "Beating the uniform weight only shows the head is not ignoring its input. " + evidence_text,
        CLAIM_OPTIONS[1]: evidence_text,
        CLAIM_OPTIONS[2]: ("The other noun is never adjacent to 'flies', so this comparison cannot tell "
                           "subjecthood from position. " + evidence_text),
        CLAIM_OPTIONS[3]: ("The claim is about where the head looks, and the weights answer that directly; "
                           "an ablation would test what the head contributes. " + evidence_text),
    }
    return grade_choice(answer, CLAIM_OPTIONS, correct,
                        "Refuted. " + evidence_text + " The positional baseline predicts the 'subject' "
                        "weights, and the minimal pair that moves the subject away breaks them.",
                        feedback, hint="Find a sentence where the subject is not the token just before 'flies'.")


def _claim_question(data) -> str:
    items = []
    for r in data["rows"]:
        parts = [f"token before 'flies', {html.escape(r['previous'])}: {r['w_previous']:.3f}"]
        if r["subject"]:
            parts.append(f"subject {html.escape(r['subject'])}: {r['w_subject']:.3f}")
        if r["other"] and r["other"] != r["previous"]:
            parts.append(f"other noun {html.escape(r['other'])}: {r['w_other']:.3f}")
        items.append(f"<li><i>{html.escape(r['text'])}</i> (uniform {r['uniform']:.3f})<br>" + "; ".join(parts) + "</li>")
    lift = data["lift"]
    return (f"Claim: layer {CLAIM_HEAD[0]}, head {CLAIM_HEAD[1]} makes the verb <i>flies</i> look at its "
            f"subject (the chapter saw <i>time flies</i> give <i>time</i> a large weight). Positional baseline "
            f"over the reference sentences: the previous token gets {lift['-1']:.1f} times the uniform weight, "
            f"two back {lift['-2']:.1f}, the next {lift['1']:.2f}. Weights of the query <i>flies</i>:"
            f"<ul>{''.join(items)}</ul>What does the evidence say about the claim?")


define(9, "claim", kind="choice", title="Test the 'subject head' reading",
       question=_claim_question, data=claim_evidence, options=CLAIM_OPTIONS, grade=check_claim)



# ----------------------------------------------------------------------------- your own sentences
# Graded on the model's reading of a sentence the reader writes: PyTorch in the kernel, the
# in-page model on the page (chapter 9's lab).  Verdicts never rest on a close call
# (core.CLOSE_CALL), so both give the same one.
_SPECIAL = ("[CLS]", "[SEP]", "[PAD]")
PREV_HEAD = (0, 2)     # the previous-token head of the chapter
FLIP_HEAD = (3, 11)    # the punctuation head of the chapter


@checker
def check_break_previous(answer):
    """``answer``: one sentence with the model's reading of head :data:`PREV_HEAD`.  Right when
    some ordinary word whose previous token is ordinary too gives its largest weight, clearly
    (by at least :data:`CLOSE_CALL`), to a key other than the previous token."""
    texts, runs, problem = parse_model_answer(answer, 1, [PREV_HEAD])
    if problem:
        return problem
    tokens, rows = runs[0]["tokens"], runs[0]["heads"][head_key(*PREV_HEAD)]
    T = len(tokens)
    held, close, breaks = 0, 0, []
    for i in range(2, T):
        if tokens[i] in _SPECIAL or tokens[i - 1] in _SPECIAL:
            continue
        key, weight, margin = strongest(rows[i])
        if key == i - 1:
            held += 1
        elif margin < CLOSE_CALL:
            close += 1
        else:
            breaks.append((i, key, weight))
    if breaks:
        i, key, weight = breaks[0]
        where = "later in the text" if key > i else ("itself" if key == i else "earlier in the text")
        return right(
            f"In your {T}-token text, {len(breaks)} of {held + len(breaks) + close} words do not give the previous "
            f"token their largest weight. The first is {tokens[i]!r} (position {i}): it gives {weight:.2f} to "
            f"{tokens[key]!r} (position {key}, {where}) and {rows[i][i - 1]:.2f} to the previous token "
            f"{tokens[i - 1]!r}. A claim about a head holds on the inputs it was tested on; "
            + ("this model was fine-tuned on inputs of at most 128 tokens (its model card says so), and past "
               "that length this head stops tracking the previous token: the claim holds only within the "
               "lengths the model was trained on." if T > 128 else
               "find what your sentence has that the reference sentences lack.")
        )
    if held == 0:
        return wrong("Your text has no word with an ordinary word before it, so there is nothing to test.",
                     hint="Write a sentence of several words.")
    return wrong(
        f"In your {T}-token text all {held} words that have a word before them give it their largest weight"
        + (f" ({close} by less than {CLOSE_CALL}, too close to call)" if close else "")
        + ": on this input the claim holds. Changing which words you use will not break a positional head.",
        hint="A positional head reads the position table. Which positions has it never seen in training? "
             "Try a much longer text: paste a few paragraphs.",
    )


@checker
def check_flip_pair(answer):
    """``answer``: two sentences A and B with the model's reading of head :data:`FLIP_HEAD`.
    Right when the token lists differ by one token (replaced, inserted or deleted) and some
    query present in both clearly (by at least :data:`CLOSE_CALL` in both) prefers a different key."""
    texts, runs, problem = parse_model_answer(answer, 2, [FLIP_HEAD])
    if problem:
        return problem
    (ta, tb), key = (runs[0]["tokens"], runs[1]["tokens"]), head_key(*FLIP_HEAD)
    ra, rb = runs[0]["heads"][key], runs[1]["heads"][key]
    aligned, flips, close = pair_flips(ta, tb, ra, rb)
    changed = max(len(ta), len(tb)) - len(aligned)
    if changed == 0:
        return wrong("A and B are read as the same tokens: change one word.")
    if changed > 1:
        return wrong(
            f"A and B differ in {changed} tokens ({len(ta)} and {len(tb)} tokens, {len(aligned)} shared). A minimal "
            "pair changes one thing, so that any change in the head can be put down to it.",
            hint="Change, add or remove a single word or punctuation mark (a long word may be several tokens).")
    if flips:
        i, j, ka, wa, kb, wb = flips[0]
        return right(
            f"Query {ta[i]!r}: in A its strongest key is {ta[ka]!r} ({wa:.2f}), in B {tb[kb]!r} ({wb:.2f}); "
            f"{len(flips)} of the {len(aligned)} shared queries change their preferred key. One changed "
            "token moved where this head looks: that is the evidence a minimal pair gives, and the start of "
            "a claim about what the head attends to."
        )
    return wrong(
        f"None of the {len(aligned)} queries the two sentences share changes its strongest key in layer "
        f"{FLIP_HEAD[0]}, head {FLIP_HEAD[1]}" + (f" ({close} changes were too close to call)" if close else "")
        + ". The change you made does not touch what this head looks for.",
        hint="This head sends its attention to punctuation: add or remove a comma, or turn one into a word.",
    )


define(9, "break_previous", kind="sentence", reads=[PREV_HEAD], n_texts=1,
       title="Break the previous-token claim",
       question=("Layer 0, head 2 gives the token just before each word the largest weight, on every "
                 "sentence the chapter tried. Write a text in which some word (not [CLS] or [SEP]) clearly "
                 "gives its largest weight to a different token. The model reads your text, then the checker "
                 "reads the head."),
       grade=check_break_previous)
define(9, "flip_pair", kind="sentence", reads=[FLIP_HEAD], n_texts=2,
       title="A minimal pair that moves a head",
       question=("Write two sentences that differ in one token (one word or punctuation mark replaced, added "
                 "or removed) such that in layer 3, head 11 some query the two share changes which key it "
                 "attends to most."),
       grade=check_flip_pair)
