"""Chapter 4 exercises: temperature, the sqrt(d_k) scaling, and the entropy of a uniform row.

The temperature exercise uses real scores: layer 4, head 3 of the pretrained encoder on the
running sentence, the row of the query "warm".  They are computed the first time a builder
or test asks (:func:`temperature_example`), never at import.
"""
from __future__ import annotations

import functools
import html
import math

from .core import checker, parse_choice, parse_number, right, wrong
from .registry import define

__all__ = [
    "LAYER", "HEAD", "QUERY", "THRESHOLD", "temperature_example", "max_weight",
    "largest_temperature", "check_temperature", "SCALING_D_K", "SCALING_OPTIONS",
    "check_scaling", "UNIFORM_T", "check_uniform_entropy",
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


SCALING_D_K = 32  # the per-head width of the course's encoder
SCALING_OPTIONS = ("1 (no scaling)", "1/d_k", "1/sqrt(d_k)", "sqrt(d_k)")
_FACTOR = {
    "1 (no scaling)": lambda d: 1.0,
    "1/d_k": lambda d: 1.0 / d,
    "1/sqrt(d_k)": lambda d: 1.0 / math.sqrt(d),
    "sqrt(d_k)": lambda d: math.sqrt(d),
}


@checker
def check_scaling(answer, d_k: int = SCALING_D_K):
    """Grade the factor that keeps ``Var(factor * q . k)`` near 1 for unit-variance q, k."""
    choice, bad = parse_choice(answer, SCALING_OPTIONS)
    if bad:
        return bad
    factor = _FACTOR[choice](d_k)
    var = d_k * factor ** 2  # Var(q . k) = d_k for independent unit-variance entries
    if choice == "1/sqrt(d_k)":
        return right(f"Var(q . k) = d_k = {d_k}; multiplying by 1/sqrt(d_k) divides the variance "
                     f"by d_k, giving {var:.3g}. This is the scaling of 'Attention Is All You Need'.")
    if choice == "1 (no scaling)":
        return wrong(f"Unscaled, the variance of q . k is d_k = {var:.3g} (standard deviation "
                     f"{math.sqrt(var):.2g}): scores that large saturate the softmax, and its "
                     "gradients vanish.")
    if choice == "1/d_k":
        return wrong(f"Dividing by d_k divides the variance by d_k^2, leaving 1/d_k = {var:.3g} "
                     f"(standard deviation {math.sqrt(var):.2g}): the scores are squashed together "
                     "and the softmax is nearly uniform, whatever the keys say.")
    return wrong(f"Multiplying by sqrt(d_k) multiplies the variance by d_k, giving d_k^2 = {var:.3g} "
                 f"(standard deviation {math.sqrt(var):.2g}): even worse saturation than no scaling.")


UNIFORM_T = 13  # tokens of the running sentence, [CLS] and [SEP] included


@checker
def check_uniform_entropy(answer, T: int = UNIFORM_T):
    """Grade the entropy, in nats, of a uniform attention row over ``T`` keys (``log T``)."""
    value, bad = parse_number(answer, "an entropy in nats")
    if bad:
        return bad
    expected = math.log(T)
    if abs(value - expected) <= 0.01:
        return right(f"-sum (1/T) log(1/T) = log T = log {T} = {expected:.3f} nats, the largest "
                     f"entropy any row over {T} keys can have.")
    if abs(value - math.log2(T)) <= 0.01:
        return wrong(f"{value:g} is log2({T}): that is the entropy in bits. The course measures "
                     "entropy in nats (natural logarithm).")
    if abs(value - math.log10(T)) <= 0.01:
        return wrong(f"{value:g} is log10({T}). Entropy in nats uses the natural logarithm.")
    if abs(value - T) <= 0.01:
        return wrong(f"{T} is the number of keys. Entropy is -sum p log p; for a uniform row it is "
                     "the logarithm of that number.")
    if abs(value - 1 / T) <= 0.005:
        return wrong(f"{value:g} is each key's weight 1/T, not the entropy -sum p log p.")
    if abs(value) <= 0.01:
        return wrong("Entropy 0 belongs to a one-hot row (all weight on one key). A uniform row is "
                     "the least peaked, so its entropy is the largest possible.")
    if value < 0:
        return wrong("Entropy of a probability vector is never negative: each -p log p >= 0.")
    return wrong(f"{value:g} is not the entropy of a uniform row over {T} keys.",
                 hint="With p_j = 1/T for every key, -sum_j p_j log p_j simplifies to one logarithm.")


def _temperature_question(data) -> str:
    cells = "".join(f"<td>{html.escape(t)}<br>{s:.2f}</td>" for t, s in zip(data["tokens"], data["scores"]))
    return (f"Real scaled scores of the query {html.escape(repr(data['query']))} (layer {LAYER}, head "
            f"{HEAD}) over the {len(data['scores'])} keys:<table><tr>{cells}</tr></table>Give a "
            f"temperature τ such that the largest weight of softmax(scores / τ) is at least {THRESHOLD}.")


define(4, "temperature", kind="number", title="Sharpen a real attention row",
       question=_temperature_question, data=temperature_example,
       grade=lambda answer, data: check_temperature(answer, scores=data["scores"]),
       label="τ =", placeholder="e.g. 0.5")
define(4, "scaling", kind="choice", title="Choose the scaling",
       question=(f"The entries of q and k are independent with mean 0 and variance 1, and d_k = "
                 f"{SCALING_D_K}. By which factor should q . k be multiplied so that the scores have "
                 "variance close to 1?"),
       options=SCALING_OPTIONS, grade=check_scaling)
define(4, "uniform_entropy", kind="number", title="The most spread-out row",
       question=(f"An attention row spreads its weight evenly over T = {UNIFORM_T} keys. What is its "
                 "entropy in nats?"),
       grade=check_uniform_entropy, label="nats", placeholder="e.g. 1.5")
