"""Chapter 8 exercises: reading the pretrained encoder's real heads.

The right answers are not stored here: each checker runs the course's encoder
(:func:`attnlib.load_encoder`) on the exercise's sentence and reads the head, so the answers
always agree with the model the chapter shows.  Nothing is computed at import time.
"""
from __future__ import annotations

import functools
import html

from .core import checker, parse_token, right, wrong
from .registry import define

__all__ = [
    "SINK_SENTENCE", "SINK_HEAD", "QUERY_SENTENCE", "QUERY_WORD", "QUERY_HEAD",
    "sink_case", "query_case", "sink_data", "query_data", "check_sink_token", "check_most_attended",
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


define(8, "sink_token", kind="token", title="Find the sink of a real head",
       question=(f"Layer 3, head 11 reading <i>{html.escape(SINK_SENTENCE)}</i>: which token receives "
                 "the most attention, averaged over all queries (the largest column mean)?"),
       tokens=lambda data: data["tokens"], data=sink_data, grade=check_sink_token)
define(8, "most_attended", kind="token", title="Predict the most-attended key",
       question=(f"Layer 1, head 8 reading <i>{html.escape(QUERY_SENTENCE)}</i>: which key does the "
                 f"query <b>{QUERY_WORD}</b> attend to most?"),
       tokens=lambda data: data["tokens"], data=query_data, grade=check_most_attended)
