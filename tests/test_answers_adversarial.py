"""Answers a reader (or a forger) can send that the graders must survive (issue 36): a pasted
megabyte read in linear time, right answers in the forms people paste or write (a byte-order
mark, zero-width characters, "25 positions", "#8", Swiss thousands), forged sentence readings
(NaN, True, infinity, rows of the wrong length) refused, and chapter 12's question escaping its
data.  Only graders that need no model run here (no encoder, no training)."""
import math
import signal


import pytest

from attnlib.exercises import check, definition
from attnlib.exercises import core
from attnlib.exercises.core import parse_model_answer, parse_number, read_number
from attnlib.exercises.page import render_html


# ------------------------------------------------------------------ the number reader's time
class _Overran(Exception):
    pass


#: A reader that has not answered after this many seconds is stopped and the test fails: a hang
#: guard, far from any duration a linear reader takes on a busy machine (milliseconds; the
#: timings are bench/bench_answers.py's) and far below what the quadratic readers took.
HANG_SECONDS = 60


def _finishes(fn, budget: float = HANG_SECONDS) -> bool:
    """Whether ``fn()`` returns before ``budget`` seconds (SIGALRM stops it otherwise: the re
    engine checks for signals), so that a quadratic reader fails this file instead of hanging it
    for hours.  No duration is asserted."""
    def stop(*_):
        raise _Overran

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            fn()
        except _Overran:
            return False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return True


MB = 1_000_000
# The worst cases of the reader before issue 36, which grew as n**2 (measured on a 2-core machine:
# "1"*n + "x" 12 s at n = 32,000 and 215 s at n = 100,000; "a"*n + "1" 60 s at n = 100,000): digits
# that the number pattern could split in n ways, letters that the unit pattern could split in n
# ways.  "digits only" was fast, but is a megabyte all the same.
PASTES = {
    "digits then a letter": lambda n: "1" * n + "x",
    "letters then a digit": lambda n: "a" * n + "1",
    "digits, spaces, a mark": lambda n: "1" * (n // 2) + " " * (n // 2) + "!",
    "digits, letters, a digit": lambda n: "1" * (n // 2) + "a" * (n // 2) + "1",
    "digits, a point, digits, a mark": lambda n: "1" * (n // 2) + "." + "1" * (n // 2) + "!",
    "digits only": lambda n: "1" * n,
    # issue 46 item 7's forms: dot groups, superscripts, LaTeX, a dollar-wrapped paste
    "dot groups then a mark": lambda n: "1" + ".111" * (n // 4) + "!",
    "superscripts then a letter": lambda n: "\u00b2" * n + "x",
    "LaTeX fractions left open": lambda n: "\\frac{1}{" * (n // 9) + "x",
    "LaTeX powers, spaces": lambda n: "10^ " * (n // 4) + "{",
    "dollars around braces": lambda n: "$" + "{" * n + "$",
}


@pytest.mark.parametrize("shape", PASTES)
def test_a_megabyte_paste_is_answered_at_once_with_a_reason(shape):
    text = PASTES[shape](MB)
    assert _finishes(lambda: check(12, "cache_bytes", text)), f"{shape}: no answer for 1 MB within {HANG_SECONDS} s"
    fb = check(12, "cache_bytes", text)
    assert not fb.correct and f"that answer is {len(text.strip()):,} characters long; a number is expected" in fb.text


@pytest.mark.parametrize("shape", [shape for shape in PASTES if shape != "digits only"])
def test_the_patterns_are_linear_even_without_the_length_limit(shape, monkeypatch):
    """The limit guards the reader; this guards its patterns, should the limit ever grow."""
    monkeypatch.setattr(core, "MAX_NUMBER_CHARS", 10 ** 9, raising=False)
    text = PASTES[shape](300_000)                   # a quadratic reader: over 10 minutes here
    assert _finishes(lambda: read_number(text)), f"{shape}: no answer for 300,000 characters within {HANG_SECONDS} s"


def test_the_length_limit_counts_after_stripping_and_says_why():
    assert check(12, "cache_bytes", " " * 5000 + "4" + "\n" * 5000).correct      # the answer is 1 character
    assert read_number("0" * 199 + "4")[0].value == 4.0                          # 200 characters: read
    reading, problem = read_number("0" * 200 + "4")
    assert reading is None and problem == ("that answer is 201 characters long; a number is expected "
                                           "(at most 200 characters)")
    assert check(12, "receptive_field", "2" * 201).text == (
        "Not yet. Expected a number of positions: that answer is 201 characters long; a number is expected "
        "(at most 200 characters).")


# ------------------------------------------------------------------ right answers, as people write them
# (typed, keyword arguments of read_number, value, a fragment of the note or "")
ACCEPTED = [
    ("\ufeff25", {}, 25.0, ""), ("25\ufeff", {}, 25.0, ""), ("\u200b0.5", {}, 0.5, ""), ("0.\u200c5", {}, 0.5, ""),
    ("1\u200d024", {}, 1024.0, ""), ("\u20608\u2060", {}, 8.0, ""), ("\ufeff\u200b 4 GiB", {"unit": "GiB"}, 4.0, ""),
    ("25 positions", {}, 25.0, "\u201cpositions\u201d was set aside"), ("8 tokens", {}, 8.0, "\u201ctokens\u201d"),
    ("3 heads", {}, 3.0, "\u201cheads\u201d"), ("12 words", {}, 12.0, "\u201cwords\u201d"),
    ("1 head", {}, 1.0, "\u201chead\u201d"), ("3.5 nats", {}, 3.5, "\u201cnats\u201d"),
    ("34 Numbers", {}, 34.0, "\u201cNumbers\u201d"), ("seven layers", {}, 7.0, "\u201clayers\u201d"),
    ("\u2248 25 positions.", {}, 25.0, "\u201cpositions\u201d"), ("1,024 keys", {}, 1024.0, "comma separates thousands"),
    ("#8", {}, 8.0, ""), ("# 8", {}, 8.0, ""), ("#13", {}, 13.0, ""),
    ("4'294'967'296", {}, 4294967296.0, "apostrophes separate thousands"),
    ("4\u2019294\u2019967\u2019296", {}, 4294967296.0, "apostrophes separate thousands"),
    ("1'024", {}, 1024.0, "apostrophe separates thousands"), ("-1'024.5", {}, -1024.5, "apostrophe"),
    ("4'294'967'296 bytes", {"unit": "GiB"}, 4.0, "converted from bytes to GiB"),
]


@pytest.mark.parametrize("typed,kwargs,value,note", ACCEPTED)
def test_right_answers_that_were_refused_are_read(typed, kwargs, value, note):
    reading, problem = read_number(typed, **kwargs)
    assert problem is None and reading is not None, (typed, problem)
    assert reading.value == pytest.approx(value, rel=1e-12), typed
    assert note in reading.note, (typed, reading.note)


# Still refused: ambiguous forms, and words that would change the number or its unit.
REFUSED = [
    ("5e", {}), ("5 e", {}), ("5E", {}), ("27.5 percent", {"share": True}), ("3 million", {}), ("2 thousand", {}),
    ("8 parsecs", {}), ("16 bits", {"unit": "MiB"}), ("##8", {}),
    ("1'5", {}), ("12'34", {}), ("1'024,5", {}), ("1'024'5", {}), ("1,024'000", {}), ("8 bytes", {}),
]


@pytest.mark.parametrize("typed,kwargs", REFUSED)
def test_ambiguous_or_unit_changing_forms_are_still_refused(typed, kwargs):
    reading, problem = read_number(typed, **kwargs)
    assert reading is None, (typed, reading)


@pytest.mark.parametrize("chapter,name,typed,note", [
    (12, "receptive_field", "25 positions", "Your answer was read as 25: the word \u201cpositions\u201d was set aside."),
    (12, "receptive_field", "\ufeff25", ""), (12, "receptive_field", "25\u200b", ""),
    (12, "gqa_head", "#3", ""), (12, "gqa_head", "3\u2060", ""),
    (12, "cache_bytes", "4'294'967'296 bytes", "read as 4: converted from bytes to GiB; the apostrophes separate thousands."),
    (12, "cache_bytes", "4\u2019294\u2019967\u2019296 B", "converted from B to GiB"),
    (12, "cache_bytes", "\ufeff4 GiB", ""),
])
def test_those_right_answers_are_graded_right_and_say_how_they_were_read(chapter, name, typed, note):
    fb = check(chapter, name, typed)
    assert fb.correct, fb.text
    assert note in fb.text


@pytest.mark.parametrize("typed", ["\u200b", "\ufeff \u200b\u2060 ", "\u200c\u200d"])
def test_an_answer_of_invisible_characters_is_empty(typed):
    assert check(12, "receptive_field", typed).message == "Please enter a number of positions; the answer is empty."


def test_a_count_word_is_said_even_when_the_answer_is_wrong():
    fb = check(12, "receptive_field", "30 positions")
    assert not fb.correct and "the word \u201cpositions\u201d was set aside" in fb.text


# ------------------------------------------------------------------ forged sentence readings
def _reading(rows, tokens=("[CLS]", "the", "cat", "sat", "[SEP]"), key="0:2"):
    return {"texts": ["the cat sat"], "runs": [{"tokens": list(tokens), "heads": {key: rows}}]}


def _uniform(T=5):
    return [[1 / T] * T for _ in range(T)]


NAN, INF = float("nan"), float("inf")
FORGED = {
    "NaN everywhere": [[NAN] * 5 for _ in range(5)],
    "one NaN row": _uniform()[:2] + [[NAN] * 5] + _uniform()[3:],
    "a NaN weight": _uniform()[:2] + [[1.0, 0.0, 0.0, NAN, 0.0]] + _uniform()[3:],
    "True and False": _uniform()[:2] + [[True, False, False, False, False]] + _uniform()[3:],
    "all bools": [[True, False, False, False, False] for _ in range(5)],
    "infinity": _uniform()[:2] + [[INF, -INF, 0.0, 0.0, 1.0]] + _uniform()[3:],
    "an int too large for a float": _uniform()[:2] + [[10 ** 400, 0, 0, 0, 1 - 10 ** 400]] + _uniform()[3:],
    "a text weight": _uniform()[:2] + [["1", 0.0, 0.0, 0.0, 0.0]] + _uniform()[3:],
    "a short row": _uniform()[:2] + [[1.0, 0.0, 0.0, 0.0]] + _uniform()[3:],
    "a long row": _uniform()[:2] + [[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]] + _uniform()[3:],
    "a row missing": _uniform()[:4],
    "a row too many": _uniform() + [[0.2] * 5],
    "negative weight": _uniform()[:2] + [[1.5, -0.5, 0.0, 0.0, 0.0]] + _uniform()[3:],
    "not summing to 1": _uniform()[:2] + [[0.9, 0.0, 0.0, 0.0, 0.0]] + _uniform()[3:],
}


@pytest.mark.parametrize("forgery", FORGED)
def test_a_forged_reading_of_the_previous_token_head_is_not_graded(forgery):
    fb = check(9, "break_previous", _reading(FORGED[forgery]))
    assert not fb.correct, fb.text
    assert fb.message == "The model's weights for layer 0, head 2 could not be read.", fb.text


@pytest.mark.parametrize("forgery", ["NaN everywhere", "True and False", "infinity", "a short row"])
def test_a_forged_reading_of_a_minimal_pair_is_not_graded(forgery):
    good = {"tokens": ["[CLS]", "the", "cat", "sat", "[SEP]"], "heads": {"3:11": _uniform()}}
    bad = {"tokens": ["[CLS]", "the", "dog", "sat", "[SEP]"], "heads": {"3:11": FORGED[forgery]}}
    fb = check(9, "flip_pair", {"texts": ["the cat sat", "the dog sat"], "runs": [good, bad]})
    assert not fb.correct and fb.message == "The model's weights for layer 3, head 11 could not be read.", fb.text


@pytest.mark.parametrize("run", [None, "x", [], 5, {"tokens": [], "heads": {"0:2": []}},
                                 {"tokens": [1, 2, 3, 4, 5], "heads": {"0:2": _uniform()}},
                                 {"tokens": ["a"] * 5, "heads": [_uniform()]}])
def test_a_malformed_run_is_read_as_such_not_as_a_crash(run):
    fb = check(9, "break_previous", {"texts": ["the cat sat"], "runs": [run]})
    assert not fb.correct and fb.message == "The model's reading of your sentence could not be read.", fb.text


def test_an_honest_reading_is_still_graded():
    rows = _uniform()
    rows[2] = [0.7, 0.1, 0.1, 0.05, 0.05]     # "cat" looks at [CLS], not at "the": the claim breaks
    fb = check(9, "break_previous", _reading(rows))
    assert fb.correct, fb.text
    texts, runs, problem = parse_model_answer(_reading(_uniform()), 1, [(0, 2)])
    assert problem is None and runs[0]["tokens"][0] == "[CLS]"


@pytest.mark.parametrize("losses", [[NAN, 1.0], [True, 1.0], [INF, 1.0], [-INF, 1.0], [1.0], [1.0, 1.0, 1.0], ["1", 1.0],
                                    [10 ** 400, 1.0], [-1, 1.0]])
def test_the_circuit_labs_reading_refuses_the_same_forgeries(losses):
    """Chapter 7's sentence answers (``model="tiny"``) have their own reader, ``ch07._lab_run``:
    the same rule (finite reals, no bools, one loss per predicted word)."""
    from attnlib.exercises import ch07

    variants = [{"name": "intact"}, {"name": "induction_off"}]
    answer = {"texts": ["a b c"], "runs": [{"words": ["a", "b", "c"],
                                            "loss": {"intact": [1.0, 1.0], "induction_off": losses}}]}
    words, loss, problem = ch07._lab_run(answer, variants)
    assert words is None and problem.message == "The model's losses for your words could not be read."


# ------------------------------------------------------------------ chapter 12's question escapes its data
HOSTILE_DATA = {"query": "<script>alert(1)</script>", "key": '"><img src=x onerror=alert(2)>', "i": "<b>i</b>",
                "j": "<i>", "shift": "<u>100</u>", "score": 0.1234, "shifted": 0.1234, "query_only": 0.5,
                "unrotated": 0.7}


def test_the_shifted_score_question_escapes_every_value_of_its_data():
    question = definition(12, "shifted_score").question_html(HOSTILE_DATA)
    for raw in ("<script>", "<img", "<b>i", "<i>", "<u>"):
        assert raw not in question, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in question and "&quot;&gt;&lt;img" in question
    assert "<b>0.1234</b>" in question        # the question's own markup stays
    page = render_html(12, "shifted_score", HOSTILE_DATA)  # (the data's JSON copy is page.py's to make safe)
    shown = page.split('class="attn-ex-question"', 1)[1].split("</div>", 1)[0]
    assert "<script" not in shown and "<img" not in shown and "&lt;script&gt;" in shown


def test_the_shifted_score_question_reads_as_before_on_real_data():
    data = {"query": "it", "key": "cat", "i": 7, "j": 2, "shift": 100, "score": -0.56789}
    assert definition(12, "shifted_score").question_html(data).startswith(
        "With rotary embeddings, the query \u201cit\u201d at position 7 and the key \u201ccat\u201d at position 2 "
        "have the scaled score <b>-0.5679</b> (the encoder's layer 0, head 3). Both tokens move 100 positions to "
        "the right. What is their score now?")


def test_parse_number_still_refuses_non_finite_and_bools():
    for bad in (NAN, INF, True, "nan", "-inf", "1e999"):
        value, fb = parse_number(bad)
        assert value is None and not fb.correct, bad
    assert math.isclose(parse_number("\ufeff0,5")[0], 0.5)


# ------------------------------------------------------------------ issue 46 item 7: more forms people write
# (typed, keyword arguments of read_number, the exact value, a fragment of the note or "")
NEW_FORMS = [
    ("one half", {}, 0.5, ""), ("a half", {}, 0.5, ""), ("One Half", {}, 0.5, ""), ("a quarter", {}, 0.25, ""),
    ("one quarter", {}, 0.25, ""), ("three quarters", {}, 0.75, ""), ("three-quarters", {}, 0.75, ""),
    ("a fourth", {}, 0.25, ""), ("three fourths", {}, 0.75, ""), ("one eighth", {}, 0.125, ""),
    ("five eighths", {}, 0.625, ""), ("\u2248 one half", {}, 0.5, ""),
    ("10\u207b\u00b3", {}, 1e-3, "expression"), ("2\u00b3\u2070", {}, 2.0 ** 30, "expression"),
    ("1.5\u00d710\u207b\u00b3", {}, 1.5e-3, "expression"), ("1.5 \u00d7 10\u207b\u00b3", {}, 1.5e-3, ""),
    ("3\u00b710^5", {}, 3e5, "expression"), ("10\u2079", {}, 1e9, ""), ("2\u207a\u00b9", {}, 2.0, ""),
    ("\\frac{1}{2}", {}, 0.5, "expression"), ("\\frac{3}{4}", {}, 0.75, ""), ("\\dfrac{1}{8}", {}, 0.125, ""),
    ("10^{-3}", {}, 1e-3, ""), ("2^{30}", {}, 2.0 ** 30, ""), ("1.5 \\times 10^{-3}", {}, 1.5e-3, ""),
    ("3 \\cdot 10^{5}", {}, 3e5, ""), ("$\\frac{1}{2}$", {}, 0.5, ""), ("$$2^{30}$$", {}, 2.0 ** 30, ""),
    ("$1.5 \\times 10^{-3}$", {}, 1.5e-3, ""), ("$0.25$", {}, 0.25, ""),
    ("4 gibibytes", {"unit": "GiB"}, 4.0, "gibibytes read as GiB"), ("4 GiBiByTeS", {"unit": "GiB"}, 4.0, ""),
    ("1 gibibyte", {"unit": "MiB"}, 1024.0, "converted from gibibyte to MiB"),
    ("256 Mebibytes", {"unit": "GiB"}, 0.25, "converted"), ("512 MEBIBYTE", {"unit": "MiB"}, 512.0, ""),
    ("1024 kibibytes", {"unit": "MiB"}, 1.0, "converted"), ("1 tebibyte", {"unit": "GiB"}, 1024.0, ""),
    ("4.294.967.296", {}, 4294967296.0, "the dots separate thousands"), ("1.024.000", {}, 1024000.0, "dots"),
    ("-1.000.000", {}, -1e6, "dots"), ("4.294.967.296 bytes", {"unit": "GiB"}, 4.0, "the dots separate thousands"),
    ("1.024", {}, 1.024, ""),                                    # one group: still a decimal point
]


@pytest.mark.parametrize("typed,kwargs,value,note", NEW_FORMS)
def test_more_forms_people_write_read_to_the_exact_value(typed, kwargs, value, note):
    reading, problem = read_number(typed, **kwargs)
    assert problem is None and reading is not None, (typed, problem)
    assert reading.value == value, (typed, reading.value, value)      # exact, not approximately
    assert note in reading.note, (typed, reading.note)


# Ambiguous, inexact or malformed: refused (a reason where there is one to give), never misread.
NEW_REFUSED = [
    ("half", {}), ("two halves", {}), ("one quarters", {}), ("five quarters", {}), ("zero quarters", {}),
    ("three quarter", {}), ("a quarters", {}), ("one and a half", {}),
    ("1.024.5", {}), ("12.345.6789", {}), ("1.02.400", {}), ("01.024.000", {}), ("1.024.000,5", {}),
    ("4..294.967", {}), ("1 024.000.000", {}),
    ("\u207b", {}), ("2\u207b", {}), ("x\u00b2", {}), ("10\u00b2\u00b2\u00b2\u00b2", {}),
    ("\\frac{1}{0}", {}), ("\\frac{{1}}{2}", {}), ("\\frac{1}", {}), ("\\sqrt{4}", {}), ("$", {}), ("$$", {}),
    ("$5", {}), ("5$", {}), ("\\frac{1}{2", {}), ("10^{", {}),
    ("4 gibibytes", {}), ("4 gibibits", {"unit": "GiB"}), ("4 gigabibytes", {"unit": "GiB"}),
]


@pytest.mark.parametrize("typed,kwargs", NEW_REFUSED)
def test_ambiguous_or_malformed_new_forms_are_refused(typed, kwargs):
    reading, problem = read_number(typed, **kwargs)
    assert reading is None, (typed, reading)


@pytest.mark.parametrize("typed", ["one third", "two thirds", "a fifth", "three tenths", "one sixth"])
def test_a_fraction_word_without_an_exact_value_is_refused_with_the_reason(typed):
    reading, problem = read_number(typed)
    assert reading is None and problem == (f"\u201c{typed}\u201d has no exact decimal value: write it as a fraction "
                                           f"or a decimal, e.g. 1/3 or 0.333")
    assert check(12, "receptive_field", typed).text.startswith("Not yet. Expected a number of positions: \u201c")


def test_a_byte_unit_word_where_the_question_has_none_says_so():
    assert read_number("4 gibibytes")[1] == "this answer is a plain number, without a unit like gibibytes"


@pytest.mark.parametrize("chapter,name,typed", [
    (12, "cache_bytes", "4 gibibytes"), (12, "cache_bytes", "4.294.967.296 bytes"), (12, "cache_bytes", "2\u00b3\u00b2 bytes"),
])
def test_the_new_forms_are_graded_right_where_the_answer_is_that_value(chapter, name, typed):
    """A new form of the right value is graded right by the exercise itself (chapter 12's KV cache
    is 4 GiB with the exercise's data: the existing ACCEPTED forms say so)."""
    assert check(chapter, name, typed).correct, check(chapter, name, typed).text
