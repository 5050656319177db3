"""Exercises of chapter 1, "Attention is a weighted average".

* ``reachable``: which point can softmax attention over a triangle of values produce exactly?
* ``output``: the attention output for given scores and one-dimensional values.
"""
from __future__ import annotations

import math

from .core import checker, grade_choice, grade_number
from .registry import define

__all__ = [
    "REACHABLE_OPTIONS", "check_reachable", "OUTPUT_SCORES", "OUTPUT_VALUES",
    "output_answer", "check_output",
]

# ----------------------------------------------------------------------------- reachable
# Values: v1 = (0, 0), v2 = (4, 0), v3 = (0, 4).
REACHABLE_OPTIONS = ["(4, 0)", "(1, 1)", "(3, 3)", "(-1, 2)", "(2, 2)"]
_REACHABLE_FEEDBACK = {
    "(4, 0)": "(4, 0) is the vertex v2 itself. It needs weights (0, 1, 0), but softmax gives "
              "every token a weight exp(s_j) / sum > 0 for finite scores, so the output only "
              "approaches a vertex as one score goes to infinity; it never reaches it.",
    "(3, 3)": "(3, 3) lies outside the triangle: every convex combination of these values has "
              "x + y <= 4 (each vertex does), and 3 + 3 = 6.",
    "(-1, 2)": "(-1, 2) has a negative x, but every value has x >= 0, and an average with "
               "non-negative weights cannot go below the smallest value in any coordinate.",
    "(2, 2)": "(2, 2) lies on the edge between v2 and v3: it needs weights (0, 1/2, 1/2), i.e. "
              "exactly 0 on v1. Softmax never gives exactly 0 from finite scores, so the output "
              "is always strictly inside the triangle.",
}


@checker
def check_reachable(answer):
    """Grade the reachable-point question; the right answer is ``"(1, 1)"``."""
    return grade_choice(answer, REACHABLE_OPTIONS, "(1, 1)",
                        "(1, 1) = 1/2 v1 + 1/4 v2 + 1/4 v3, strictly inside the triangle; the "
                        "scores (ln 2, 0, 0) give exactly these weights.",
                        _REACHABLE_FEEDBACK, hint="Softmax weights are strictly positive and sum to 1.")


define(1, "reachable", kind="choice", title="Which points can attention reach?",
       question="Values v1 = (0, 0), v2 = (4, 0), v3 = (0, 4). Which point can softmax attention "
                "with finite scores produce <b>exactly</b>?",
       options=REACHABLE_OPTIONS, grade=check_reachable)


# ----------------------------------------------------------------------------- output
OUTPUT_SCORES = (1.0, 0.0, -1.0)
OUTPUT_VALUES = (2.0, 4.0, 10.0)


def output_answer() -> float:
    """The exact answer, ``softmax(OUTPUT_SCORES) @ OUTPUT_VALUES``, in float64 (stable:
    the largest score is subtracted before ``exp``)."""
    top = max(OUTPUT_SCORES)
    e = [math.exp(s - top) for s in OUTPUT_SCORES]
    return sum(w * v for w, v in zip(e, OUTPUT_VALUES)) / sum(e)


def _typical_mistakes() -> dict[str, float]:
    s, v = OUTPUT_SCORES, OUTPUT_VALUES
    return {
        "mean": sum(v) / len(v),
        "scores_as_weights": sum(a * b for a, b in zip(s, v)),
        "unnormalised": sum(math.exp(a) * b for a, b in zip(s, v)),
        "argmax": v[max(range(len(s)), key=lambda j: s[j])],
        "reversed": sum(a * b for a, b in zip([math.exp(x) for x in s], reversed(v)))
        / sum(math.exp(x) for x in s),
    }


@checker
def check_output(answer, tol: float = 0.01):
    """Grade the output question (tolerance ``tol``, default 0.01)."""
    truth, m = output_answer(), _typical_mistakes()
    low, high = min(OUTPUT_VALUES), max(OUTPUT_VALUES)
    return grade_number(
        answer, truth,
        f"softmax(1, 0, -1) = (0.665, 0.245, 0.090), and 0.665*2 + 0.245*4 + 0.090*10 = {truth:.3f}.",
        what="the output, a number such as 3.14", abs_tol=tol,
        mistakes=[
            (m["mean"], "That is the plain mean of the values: it treats every token alike. "
                        "Attention weights each value by softmax(s)_j."),
            (m["scores_as_weights"], "You used the raw scores as weights. Scores can be negative and do not "
                                     "sum to 1; softmax turns them into weights first."),
            (m["unnormalised"], "You used exp(s_j) without dividing by their sum, so the weights add up to "
                                "more than 1 and the result leaves the interval [2, 10]."),
            (m["argmax"], "That is the value of the highest score alone (a hard argmax). Softmax keeps "
                          "every token with a positive weight."),
            (m["reversed"], "The weights are paired with the wrong values: score s_j goes with value v_j."),
        ],
        impossible=[(lambda v: not low <= v <= high,
                     lambda v: f"{v:g} lies outside [2, 10]. A weighted average with non-negative "
                               "weights summing to 1 always lies between the smallest and largest value.")],
        otherwise=lambda v: f"{v:g} is inside [2, 10], as an average must be, but not the right one.",
        hint="Compute a = softmax(s) first, then sum a_j * v_j.")


define(1, "output", kind="number", precision='Give it to 2 decimal places (graded within 0.01).', title="Compute one output",
       question="Scores s = (1, 0, -1), values v = (2, 4, 10). What is "
                "∑<sub><i>j</i></sub> softmax(<i>s</i>)<sub><i>j</i></sub> <i>v</i><sub><i>j</i></sub>? (two decimals)",
       grade=check_output)
