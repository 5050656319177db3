"""Chapter 4 exercises: temperature, entropy when d_k doubles without rescaling, and the overflow
of a naive softmax, each predicted and then checked on real scores.

The temperature exercise uses real scores: layer 4, head 3 of the pretrained encoder on the
running sentence, the row of the query "warm".  They are computed the first time a builder
or test asks (:func:`temperature_example`), never at import.
"""
from __future__ import annotations

import functools
import html
import math

from .core import checker, grade_choice, parse_number, right, wrong
from .registry import define

__all__ = [
    "LAYER", "HEAD", "QUERY", "THRESHOLD", "temperature_example", "max_weight",
    "largest_temperature", "check_temperature", "WIDE_HEADS", "ENTROPY_OPTIONS", "entropy_example",
    "check_entropy_dk", "OVERFLOW_SHIFT", "OVERFLOW_OPTIONS", "overflow_example", "check_overflow",
]

LAYER, HEAD, QUERY = 4, 3, "warm"
THRESHOLD = 0.9


@functools.lru_cache(maxsize=1)
def temperature_example() -> dict:
    """Real scaled scores ``q . k_j / sqrt(d_k)`` of one query, rounded to 2 decimals as shown.

    Returns a dict with ``tokens`` (list of T str), ``query`` (str) and ``scores`` (T floats).
    """
    from .. import corpus
    from ..encoder import head_qkv

    tokens, q, k, _ = head_qkv(corpus.RUNNING, LAYER, HEAD)
    i = tokens.index(QUERY)
    scores = (q[i] @ k.T / math.sqrt(q.shape[-1])).cpu()  # (T,)
    return {"tokens": list(tokens), "query": QUERY, "scores": [round(float(s), 2) for s in scores]}


def max_weight(scores, temperature: float) -> float:
    """Largest entry of ``softmax(scores / temperature)``, computed stably in float64:
    ``1 / sum_j exp((s_j - s_max) / temperature)``.  Exact for tiny temperatures too (the
    exponents only go to ``-inf``, never to ``+inf``).

    Raises:
        ValueError: ``temperature`` is not a finite number > 0, or ``scores`` is empty.
    """
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    scores = [float(s) for s in scores]
    if not scores:
        raise ValueError("scores must hold at least one number")
    top = max(scores)
    return 1.0 / sum(math.exp((s - top) / temperature) for s in scores)


def largest_temperature(scores, threshold: float = THRESHOLD) -> float:
    """The largest temperature whose max weight still reaches ``threshold`` (bisection on a
    log scale; the max weight decreases as the temperature grows)."""
    lo, hi = 1e-6, 1e6
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if max_weight(scores, mid) >= threshold else (lo, mid)
    return lo


@checker
def check_temperature(answer, scores=None, threshold: float = THRESHOLD):
    """Grade a temperature: correct when ``max softmax(scores / answer) >= threshold``."""
    value, bad = parse_number(answer, "a temperature (a positive number)")
    if bad:
        return bad
    scores = temperature_example()["scores"] if scores is None else scores
    T = len(scores)
    if value == 0:
        return wrong("A temperature of 0 would divide the scores by zero. Think of it as a limit: "
                     "as the temperature goes to 0, softmax tends to the one-hot argmax. Give a "
                     "small positive number instead.")
    if value < 0:
        return wrong("A negative temperature flips the sign of every score, so the lowest score "
                     "would get the largest weight. Temperatures are positive.")
    top = max_weight(scores, value)
    best = largest_temperature(scores, threshold)
    if top >= threshold:
        return right(f"At temperature {value:g} the largest weight is {top:.3f} >= {threshold}. Any "
                     f"temperature up to about {best:.3f} works; lower ones sharpen further towards "
                     "the argmax.")
    if top < 1.5 / T:
        return wrong(f"At temperature {value:g} the largest weight is only {top:.3f}, close to the "
                     f"uniform 1/T = {1 / T:.3f}: dividing by a large temperature flattens the "
                     "scores. Move the temperature down, well below 1.")
    return wrong(f"At temperature {value:g} the largest weight is {top:.3f}, below {threshold}. "
                 "Lower the temperature: dividing by a smaller number spreads the scores apart "
                 "and sharpens the softmax.",
                 hint=f"The largest weight is 1 / sum_j exp((s_j - s_max) / τ): the other keys' terms "
                      f"may add up to at most 1/{threshold} - 1 = {1 / threshold - 1:.3f}.")


# ------------------------------------------------------------------ entropy when d_k doubles
# Predict, then check: two real heads of layer 4 side by side make one head of width 64; the
# scores keep the old divisor sqrt(32) instead of sqrt(64).
WIDE_HEADS = (3, 7)
ENTROPY_OPTIONS = ("It falls: the rows get more peaked", "It rises toward log T",
                   "It stays the same: the softmax ignores the scale", "It drops to exactly 0")


@functools.lru_cache(maxsize=1)
def entropy_example() -> dict:
    """Mean row entropy (nats) of a head of width ``d_k = 64`` built from heads
    :data:`WIDE_HEADS` of layer :data:`LAYER` on the running sentence, with the right scale
    ``1/sqrt(64)`` and with the old ``1/sqrt(32)`` (kernel only; torch imported here).

    Returns ``{"T", "d_k", "h_scaled", "h_unscaled", "log_T"}`` (floats in nats).
    """
    import torch

    from .. import corpus
    from ..encoder import head_qkv
    from ..softmax import entropy, softmax

    qs, ks = [], []
    for h in WIDE_HEADS:
        tokens, q, k, _ = head_qkv(corpus.RUNNING, LAYER, h)        # (T, 32) each
        qs.append(q)
        ks.append(k)
    q, k = torch.cat(qs, -1), torch.cat(ks, -1)                     # (T, 64): d_k doubled
    raw = (q @ k.T).cpu()                                           # (T, T) unscaled dot products
    d_k = q.shape[-1]
    return {"T": len(tokens), "d_k": d_k,
            "h_scaled": float(entropy(softmax(raw / math.sqrt(d_k))).mean()),
            "h_unscaled": float(entropy(softmax(raw / math.sqrt(d_k // 2))).mean()),
            "log_T": math.log(len(tokens))}


@checker
def check_entropy_dk(answer, data=None):
    """Grade "d_k doubles but the scores are still divided by sqrt(old d_k): what happens to
    the mean row entropy?"  Right: it falls (the scores are sqrt(2) times too large, and the
    entropy of softmax(beta s) decreases as beta grows).  ``data`` from :func:`entropy_example`."""
    data = data or entropy_example()
    return grade_choice(
        answer, ENTROPY_OPTIONS, ENTROPY_OPTIONS[0],
        "Doubling d_k doubles the variance of q . k, so with the old divisor the scores "
        "are about sqrt(2) times too large, and the entropy of softmax(beta s) falls as "
        "beta grows (its derivative is -beta Var(s) <= 0).",
        {ENTROPY_OPTIONS[1]: "Larger scores make the softmax more peaked, not more even; entropy moves "
                             "toward log T only when the scores shrink.",
         ENTROPY_OPTIONS[2]: "The softmax ignores a constant added to a row, not a factor: multiplying the "
                             "scores changes the weights.",
         ENTROPY_OPTIONS[3]: "Entropy 0 is a one-hot row, the limit of infinitely large scores; a factor of "
                             "sqrt(2) sharpens the rows without making them one-hot."},
        measured=(f"Measured on the encoder: {data['h_scaled']:.3f} nats with 1/sqrt({data['d_k']}), "
                  f"{data['h_unscaled']:.3f} with 1/sqrt({data['d_k'] // 2}); log T = {data['log_T']:.3f}."))


# ------------------------------------------------------------------ overflow of a naive softmax
OVERFLOW_SHIFT = 100.0
OVERFLOW_OPTIONS = ("The same weights as without the shift", "NaN in every entry",
                    "Uniform weights", "All the weight on the top key")


@functools.lru_cache(maxsize=1)
def overflow_example() -> dict:
    """The scores of :func:`temperature_example` plus :data:`OVERFLOW_SHIFT`, through a naive
    float32 ``exp(s) / sum(exp(s))`` and through :func:`attnlib.softmax` (kernel only).

    Returns ``{"shift", "naive" (T floats or None for NaN), "n_nan", "n_inf_exp", "stable_gap"}``:
    ``stable_gap`` is the largest difference between the stable softmax of the shifted and of
    the original scores.
    """
    import torch

    from ..softmax import softmax

    s = torch.tensor(temperature_example()["scores"], dtype=torch.float32)   # (T,)
    shifted = s + OVERFLOW_SHIFT
    e = torch.exp(shifted)                                                  # overflows float32
    naive = e / e.sum()
    return {"shift": OVERFLOW_SHIFT,
            "naive": [None if math.isnan(x) else float(x) for x in naive.tolist()],
            "n_nan": int(torch.isnan(naive).sum()), "n_inf_exp": int(torch.isinf(e).sum()),
            "stable_gap": float((softmax(shifted) - softmax(s)).abs().max())}


@checker
def check_overflow(answer, data=None):
    """Grade "what does a naive float32 softmax return on these scores + 100?"  Right: NaN
    (exp overflows to inf, and inf / inf is NaN).  ``data`` from :func:`overflow_example`."""
    data = data or overflow_example()
    return grade_choice(
        answer, OVERFLOW_OPTIONS, OVERFLOW_OPTIONS[1],
        "exp(s + 100) exceeds the largest float32 (about 3.4e38, e^88.7), so every "
        "exponential is inf and inf / inf = NaN.",
        {OVERFLOW_OPTIONS[0]: "Mathematically yes, the softmax ignores a constant added to a row; but the "
                              "naive formula never gets there in float32.",
         OVERFLOW_OPTIONS[2]: "A shift changes no difference between scores, so it cannot flatten the row; "
                              "and in float32 the naive formula fails before any weight is formed.",
         OVERFLOW_OPTIONS[3]: "A shift does not sharpen the row (a factor would); in float32 the naive formula "
                              "fails outright."},
        measured=(f"Measured: exp overflowed to inf for {data['n_inf_exp']} keys and the naive weights "
                  f"have {data['n_nan']} NaN entries; attnlib.softmax, which subtracts the row maximum "
                  f"first, returns the unshifted weights to {data['stable_gap']:.1e}."))


def _temperature_question(data) -> str:
    # a list that wraps on any screen (a one-row table would scroll sideways, and take a Tab stop)
    cells = "".join(f'<li><span class="attn-ex-key">{html.escape(t)}</span> {s:.2f}</li>'
                    for t, s in zip(data["tokens"], data["scores"]))
    return (f"Real scaled scores of the query {html.escape(repr(data['query']))} (layer {LAYER}, head "
            f"{HEAD}) over the {len(data['scores'])} keys (key, then its score):"
            f'<ul class="attn-ex-chips">{cells}</ul>Give a '
            f"temperature τ such that the largest weight of softmax(scores / τ) is at least {THRESHOLD}.")


define(4, "temperature", kind="number", precision='Any temperature that passes counts; 2 or 3 significant digits are enough.', title="Sharpen a real attention row",
       question=_temperature_question, data=temperature_example,
       grade=lambda answer, data: check_temperature(answer, scores=data["scores"]),
       label="τ =", placeholder="e.g. 0.5")
define(4, "entropy_dk", kind="choice", title="Double the head width, keep the old scale",
       question=(f"Put heads {WIDE_HEADS[0]} and {WIDE_HEADS[1]} of layer {LAYER} side by side: one head of "
                 "width d_k = 64 on the running sentence. Predict, then check: if its scores are still "
                 "divided by sqrt(32), the old d_k, instead of sqrt(64), how does the mean row entropy "
                 "compare with the correctly scaled head?"),
       options=ENTROPY_OPTIONS, data=entropy_example, grade=check_entropy_dk)
define(4, "overflow", kind="choice", title="Shift the scores by 100",
       question=("Add 100 to every score of the query 'warm' above (the row of the first exercise). "
                 "Predict, then check: what does a naive float32 softmax, exp(s) / sum(exp(s)), return?"),
       options=OVERFLOW_OPTIONS, data=overflow_example, grade=check_overflow)
