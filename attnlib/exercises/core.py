"""Pure grading helpers for the exercises: the Python standard library only.

This module, the chapter modules' checkers and the registry run unchanged in two places: the
Jupyter kernel (behind the ipywidgets front end) and the reader's browser (in a vendored
Pyodide, behind the static page's front end).  So nothing here imports torch, numpy or
ipywidgets.  Arrays and tensors are still accepted in the kernel by duck typing: anything
with ``shape`` and ``tolist()`` (a numpy array or scalar, a torch tensor) is read through
``tolist()``.

Every checker ``check_<name>(answer) -> Feedback`` must never raise on learner input.  The
``parse_*`` helpers turn raw answers (numbers typed as text, nested lists, arrays, tensors,
``None``) into clean values, or into a ``Feedback`` that says what was expected;
:func:`checker` wraps a function so that even an unforeseen error becomes feedback.
"""
from __future__ import annotations

import functools
import math
import numbers
import re
from dataclasses import dataclass

__all__ = [
    "Feedback", "right", "wrong", "checker", "parse_number", "parse_matrix",
    "parse_choice", "parse_token", "grade_choice", "grade_number", "as_plain",
    "parse_model_answer", "head_key", "strongest", "align_tokens", "pair_flips", "CLOSE_CALL", "excerpt", "EXCERPT_CHARS",
    "read_number", "Reading", "BYTE_UNITS", "COUNT_WORDS", "MAX_NUMBER_CHARS", "finite_real",
    "unknown_word", "WORD_SHOWN",
]

#: Feedback quotes at most this many characters of a learner's answer (:func:`excerpt`).
EXCERPT_CHARS = 40

#: Two weights closer than this are "too close to call": a sentence exercise never rests its
#: verdict on them, so the kernel (PyTorch, float32) and the page (float16 weights, within
#: 2e-3 of PyTorch) give the same verdict.
CLOSE_CALL = 0.01


@dataclass(frozen=True)
class Feedback:
    """The result of checking one answer: ``correct``, a ``message`` that teaches, and an
    optional ``hint`` for the next try (shown only when the answer is not correct)."""

    correct: bool
    message: str
    hint: str | None = None

    @property
    def verdict(self) -> str:
        """``"Correct."`` or ``"Not yet."``: the first words every front end shows."""
        return "Correct." if self.correct else "Not yet."

    @property
    def text(self) -> str:
        """The whole message as a reader sees it, e.g. ``"Not yet. 0.4 is not it. Hint: ..."``.
        Both front ends (the notebook widget and the static page) show exactly this text."""
        out = f"{self.verdict} {self.message}"
        if self.hint and not self.correct:
            out += f" Hint: {self.hint}"
        return out

    def to_dict(self) -> dict:
        """JSON-ready form: ``correct``, ``message``, ``hint`` and the rendered ``text``."""
        return {"correct": self.correct, "message": self.message, "hint": self.hint, "text": self.text}


def excerpt(value, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` for quoting in feedback, cut to about ``limit`` characters: a longer
    answer is quoted by its start, an ellipsis and its length, so feedback never echoes a
    whole pasted essay.

    >>> excerpt("0.5")
    "'0.5'"
    >>> excerpt("x" * 1000, 10)
    "'xxxxxxxxxx…' (1,000 characters)"
    """
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(value) if isinstance(value, str) else text
    head = repr(text[:limit])
    return f"{head[:-1]}…{head[-1]} ({len(text):,} characters)"


def right(message: str) -> Feedback:
    return Feedback(True, message)


def wrong(message: str, hint: str | None = None) -> Feedback:
    return Feedback(False, message, hint)


def checker(func):
    """Decorator: any exception raised while checking becomes ``Feedback(correct=False)``
    with a message naming the problem, so a learner never sees a traceback."""

    @functools.wraps(func)
    def wrapper(answer, *args, **kwargs):
        try:
            result = func(answer, *args, **kwargs)
        except Exception as err:  # noqa: BLE001 - learner input must never raise
            return wrong(f"Your answer could not be checked ({type(err).__name__}: {excerpt(str(err), 200)[1:-1]}).")
        if not isinstance(result, Feedback):
            return wrong("The checker could not grade this answer.")
        return result

    return wrapper


def _is_array(value) -> bool:
    """A numpy array or scalar, or a torch tensor (duck-typed: ``shape`` and ``tolist``)."""
    return not isinstance(value, (str, bytes)) and hasattr(value, "shape") and callable(
        getattr(value, "tolist", None))


def _shape(value) -> tuple:
    try:
        return tuple(int(n) for n in value.shape)
    except (TypeError, ValueError):
        return ()


def as_plain(value):
    """``value`` with arrays and tensors turned into Python numbers / nested lists (via
    ``tolist()``); anything else is returned unchanged."""
    return value.tolist() if _is_array(value) else value


#: Byte units a size may be written in, in bytes (binary and decimal prefixes).
BYTE_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 10 ** 3, "kib": 2 ** 10, "mb": 10 ** 6, "mib": 2 ** 20,
              "gb": 10 ** 9, "gib": 2 ** 30, "tb": 10 ** 12, "tib": 2 ** 40}
_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i >= 2}
#: Words a count may be followed by ("25 positions", "3 heads"): set aside, and said so in the
#: note.  A whitelist, not any word: "27.5 percent" or "3 million" must not read as 27.5 or 3,
#: and a single letter ("5 e") is never one.
COUNT_WORDS = frozenset(
    "position positions token tokens head heads word words layer layers key keys query queries row rows "
    "column columns step steps entry entries element elements cell cells number numbers value values "
    "float floats dimension dimensions dim dims parameter parameters param params pair pairs vector vectors "
    "nat nats".split())
#: A typed number longer than this (after stripping) is refused before any pattern reads it.
MAX_NUMBER_CHARS = 200
_PREFIXES = ("\u2248", "\u2243", "~", "=", "about ", "approx. ", "approximately ", "roughly ")
#: Invisible characters a paste can carry (a byte-order mark, zero-width spaces and joiners).
_INVISIBLE = ("\ufeff", "\u200b", "\u200c", "\u200d", "\u2060")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Every pattern below is linear in its input: no two quantifiers can share the same characters
# (the length limit bounds them anyway; tests/test_answers_adversarial.py times them without it).
_SEPARATORS = ", _'\u2019"
_THOUSANDS = re.compile(r"[+-]?[1-9]\d{0,2}(?:([, _'\u2019])\d{3})(?:\1\d{3})*(?:\.\d+)?")
_DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+")
_PLAIN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_MAX_EXPRESSION = 80
#: Digits grouped by dots: two or more groups of exactly three digits (``4.294.967.296``); one
#: group (``1.024``) stays a decimal point.
_DOT_THOUSANDS = re.compile(r"[+-]?[1-9]\d{0,2}(?:\.\d{3}){2,}")
#: Byte units written out, as :data:`BYTE_UNITS` keys (singular or plural, any case).
_BYTE_WORDS = {f"{name}{s}": key for name, key in (("kibibyte", "kib"), ("mebibyte", "mib"), ("gibibyte", "gib"),
                                                   ("tebibyte", "tib")) for s in ("", "s")}
#: Superscript digits and signs (``10⁻³``, ``2³⁰``), read as an exponent ``^(...)``.
_SUPERSCRIPTS = {"\u2070": "0", "\u00b9": "1", "\u00b2": "2", "\u00b3": "3", "\u2074": "4", "\u2075": "5", "\u2076": "6",
                 "\u2077": "7", "\u2078": "8", "\u2079": "9", "\u207b": "-", "\u207a": "+"}
# Simple LaTeX: \frac{a}{b} (also \dfrac, \tfrac) with plain braces inside, x^{n}, \times, \cdot.
_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*\{([^{}\\]{1,40})\}\s*\{([^{}\\]{1,40})\}")
_LATEX_POWER = re.compile(r"\^\s*\{([^{}\\]{1,40})\}")
#: Fractions written in words, read only where the value is exact in binary floating point
#: (halves, quarters, eighths): "one third" has no exact value and is refused with a reason.
_FRACTION_WORDS = {"half": 2, "halves": 2, "quarter": 4, "quarters": 4, "fourth": 4, "fourths": 4,
                   "eighth": 8, "eighths": 8}
_INEXACT_FRACTION_WORDS = frozenset(
    "third thirds fifth fifths sixth sixths seventh sevenths ninth ninths tenth tenths".split())


@dataclass(frozen=True)
class Reading:
    """A typed number as read: its ``value`` (in the question's unit), the number of
    ``decimals`` written (``None`` for an expression, a word or scientific notation: no
    rounding is implied) and a ``note`` saying how an unusual form was read (or "")."""

    value: float
    decimals: int | None = None
    note: str = ""


def _word_number(text: str):
    """``"seven"`` -> 7, ``"sixty-six"`` -> 66, ``"one hundred"`` -> 100; else None."""
    t = text.lower().strip().replace("-", " ")
    if t in ("a hundred", "one hundred", "hundred"):
        return 100
    parts = t.split()
    if len(parts) == 1:
        return _WORDS.get(parts[0], _TENS.get(parts[0]))
    if len(parts) == 2 and parts[0] in _TENS and parts[1] in _WORDS and 0 < _WORDS[parts[1]] < 10:
        return _TENS[parts[0]] + _WORDS[parts[1]]
    return None


def _arithmetic(text: str):
    """The value of a small arithmetic expression (``64+2``, ``2**30``, ``8192^2*4/2^20``,
    ``exp(-3)``, ``1/8``), or None when ``text`` is not one.  Only numbers, + - * / ** ^ and
    parentheses, the constants e and pi and the functions exp, log (natural), ln, sqrt;
    exponents are bounded so no answer can make the checker compute for long."""
    import ast
    import warnings

    if len(text) > _MAX_EXPRESSION or not re.search(r"[-+*/^()]|exp|log|ln|sqrt|pi|\be\b", text):
        return None
    source = text.replace("^", "**").replace("\u00d7", "*").replace("\u00b7", "*").replace("\u2212", "-")
    try:
        with warnings.catch_warnings():         # "1nan": no SyntaxWarning on the learner's stderr
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError):
        return None
    functions = {"exp": math.exp, "log": math.log, "ln": math.log, "sqrt": math.sqrt}
    constants = {"e": math.e, "pi": math.pi}
    operators = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
                 ast.Div: lambda a, b: a / b, ast.Pow: lambda a, b: a ** b}

    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in constants:
            return constants[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = value(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in operators:
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and (abs(b) > 1024 or (a == 0 and b < 0)):
                raise ValueError("exponent out of range")
            return operators[type(node.op)](a, b)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions
                and len(node.args) == 1 and not node.keywords):
            return functions[node.func.id](value(node.args[0]))
        raise ValueError("not allowed")

    try:
        result = value(tree)
    except (ValueError, ZeroDivisionError, OverflowError, TypeError, RecursionError):
        return None
    return result if isinstance(result, float) and math.isfinite(result) else None


def _fraction_word(text: str):
    """``"one half"`` -> (0.5, None), ``"three quarters"`` -> (0.75, None), ``"one third"`` ->
    (None, why it is refused); else (None, None).  A numerator is ``a``, ``one`` or a number word
    below the denominator."""
    parts = text.lower().replace("-", " ").split()
    if len(parts) != 2:
        return None, None
    count = 1 if parts[0] == "a" else _WORDS.get(parts[0])
    if count is None or count < 1:
        return None, None
    if parts[1] in _INEXACT_FRACTION_WORDS:
        return None, (f"\u201c{text}\u201d has no exact decimal value: write it as a fraction or a decimal, "
                      f"e.g. 1/3 or 0.333")
    denominator = _FRACTION_WORDS.get(parts[1])
    if denominator is None or count >= denominator or (count == 1) != (parts[1] in ("half", "quarter", "fourth", "eighth")):
        return None, None
    return count / denominator, None


def _rewritten(t: str) -> str:
    """Simple LaTeX and superscript exponents as the plain arithmetic :func:`_arithmetic` reads
    (linear time): ``$...$`` dropped, ``\\frac{1}{2}`` -> ``(1)/(2)``, ``10^{-3}`` -> ``10^(-3)``,
    ``\\times``/``\\cdot`` -> ``×``, ``2³⁰`` -> ``2^(30)``.  Anything else is left as it is."""
    if len(t) > 1 and t.startswith("$") and t.endswith("$"):
        t = t.strip("$").strip()
    if "\\" in t or "{" in t:
        t = _LATEX_FRACTION.sub(r"(\1)/(\2)", t)
        t = _LATEX_POWER.sub(r"^(\1)", t)
        t = t.replace("\\times", "\u00d7").replace("\\cdot", "\u00d7").replace("\\,", "").replace("\\!", "")
        t = t.replace("\\left(", "(").replace("\\right)", ")").strip()
    if any(c in _SUPERSCRIPTS for c in t):
        out, inside = [], False
        for c in t:
            if c in _SUPERSCRIPTS:
                if not inside:
                    out.append("^(")
                    inside = True
                out.append(_SUPERSCRIPTS[c])
            else:
                if inside:
                    out.append(")")
                    inside = False
                out.append(c)
        if inside:
            out.append(")")
        t = "".join(out)
    return t


def _decimals(literal: str):
    """Digits written after the decimal point of a plain literal; None with an exponent."""
    if "e" in literal.lower():
        return None
    return len(literal.split(".", 1)[1]) if "." in literal else 0


def _visible(text: str) -> str:
    """``text`` without the invisible characters of :data:`_INVISIBLE` (linear time)."""
    for mark in _INVISIBLE:
        if mark in text:
            text = text.replace(mark, "")
    return text


def read_number(text: str, *, unit: str | None = None, share: bool = False):
    """Read a number as a person writes it: ``(Reading, None)`` or ``(None, problem)``,
    ``problem`` a sentence saying what could not be read.

    Accepted: a plain or signed number (``0.5``, ``-3``, ``.25``, ``1e-3``); a decimal comma
    (``0,5``); thousands separated by commas, spaces, underscores or apostrophes (``1,024``,
    ``4 294 967 296``, ``4'294'967'296``, also with ``’``; a comma followed by exactly three
    digits after a leading group of 1-3 digits is a thousands separator); thousands separated by
    dots where that is unambiguous, two or more groups of exactly three digits (``4.294.967.296``;
    ``1.024`` stays one point zero two four); a leading ``≈``,
    ``~``, ``=``, "about" or ``#`` (``#8``); one trailing full stop; a percentage (``27.5%``)
    where the answer is a ``share`` (read as 0.275); a byte unit (``256 MiB``, ``0.25 GiB``,
    ``268435456 bytes``, also written out: ``4 gibibytes``, ``256 Mebibytes``, ``1 kibibyte``,
    any case) where the question's ``unit`` is one, converted to it; one trailing
    word of :data:`COUNT_WORDS` (``25 positions``, ``3 heads``: set aside, and said so in the
    note); a small arithmetic expression (``64+2``, ``exp(-3)``, ``2^30``, ``3·10^5``,
    ``1.5×10^-3``), also with superscript exponents (``10⁻³``, ``2³⁰``, ``1.5×10⁻³``) or in simple
    LaTeX (``\\frac{1}{2}``, ``10^{-3}``, ``2^{30}``, ``1.5 \\times 10^{-3}``, ``\\cdot``, inside
    ``$...$`` or ``$$...$$``); a number word up to one hundred (``seven``, ``sixty-six``); a
    fraction in words whose value is exact (halves, quarters or fourths, eighths: ``one half``,
    ``a quarter``, ``three quarters``, ``three eighths``; the numerator ``a`` or a number word
    below the denominator).  Invisible characters a paste may carry (a
    byte-order mark, zero-width spaces and joiners) are dropped wherever they are.

    Refused, with ``problem`` saying why: text longer than :data:`MAX_NUMBER_CHARS` characters
    after stripping (checked before anything else, so that reading takes time linear in the
    length of any paste); infinity and NaN; a percentage where the answer is not a share; a byte
    unit where the question has none; a fraction in words with no exact value (``one third``,
    ``two fifths``: write ``1/3`` or ``0.333``).  Never evaluated as code: an expression is read
    by a small parser of numbers and the operators above.  Text that is none of the accepted forms gives
    ``(None, None)``: the caller says what was expected.

    >>> read_number("1,024")[0].value, read_number("0,125")[0].value, read_number("27.5%", share=True)[0].value
    (1024.0, 0.125, 0.275)
    >>> read_number("0.25 GiB", unit="MiB")[0].value
    256.0
    >>> read_number("25 positions")[0]
    Reading(value=25.0, decimals=0, note='the word “positions” was set aside')
    >>> read_number("4\u2019294\u2019967\u2019296")[0].value, read_number("#8")[0].value
    (4294967296.0, 8.0)
    >>> read_number("three quarters")[0].value, read_number("1.5×10⁻³")[0].value, read_number("$\\\\frac{1}{2}$")[0].value
    (0.75, 0.0015, 0.5)
    >>> read_number("4.294.967.296")[0], read_number("1.024")[0].value
    (Reading(value=4294967296.0, decimals=0, note='the dots separate thousands'), 1.024)
    >>> read_number("4 gibibytes", unit="MiB")[0].value, read_number("one third")[1]
    (4096.0, '“one third” has no exact decimal value: write it as a fraction or a decimal, e.g. 1/3 or 0.333')
    >>> read_number("7" * 300)[1]
    'that answer is 300 characters long; a number is expected (at most 200 characters)'
    """
    text = _visible(text).strip()
    if len(text) > MAX_NUMBER_CHARS:
        return None, (f"that answer is {len(text):,} characters long; a number is expected "
                      f"(at most {MAX_NUMBER_CHARS} characters)")
    t = " ".join(text.replace("\u00a0", " ").replace("\u202f", " ").replace("\u2009", " ").split())
    t = _rewritten(t.replace("\u2212", "-"))
    lowered = t.lower()
    for prefix in _PREFIXES:
        if lowered.startswith(prefix):
            t = t[len(prefix):].strip()
            lowered = t.lower()
            break
    if t.startswith("#"):
        t = t[1:].lstrip()
        lowered = t.lower()
    if lowered.lstrip("+-") in ("inf", "infinity", "nan", "∞"):
        return None, "a finite number is expected (infinity and NaN are not answers)"
    if len(t) > 1 and t.endswith(".") and not t.endswith(".."):
        t = t[:-1].rstrip()
    factor, notes = 1.0, []
    if t.endswith("%"):
        if not share:
            return None, "a percentage was written, but this answer is not a share: give the number itself"
        t, factor = t[:-1].rstrip(), 0.01
        notes.append("a percentage")
    start = len(t)                              # a trailing word: a scan, not a pattern (linear)
    while start and t[start - 1] in _LETTERS:
        start -= 1
    word, rest = t[start:], t[:start].rstrip()
    if word and rest and (word.lower() in BYTE_UNITS or word.lower() in _BYTE_WORDS):
        given = _BYTE_WORDS.get(word.lower(), word.lower())
        if unit is None or unit.lower() not in BYTE_UNITS:
            return None, f"this answer is a plain number, without a unit like {word}"
        t = rest
        factor *= BYTE_UNITS[given] / BYTE_UNITS[unit.lower()]
        if given != unit.lower():
            notes.append(f"converted from {word} to {unit}")
        elif word.lower() in _BYTE_WORDS:
            notes.append(f"{word} read as {unit}")
    elif word and rest and word.lower() in COUNT_WORDS:
        t = rest
        notes.append(f"the word \u201c{word}\u201d was set aside")
    word = _word_number(t)
    if word is not None:
        return Reading(float(word) * factor, None, "; ".join(notes)), None
    fraction, problem = _fraction_word(t)
    if problem:
        return None, problem
    if fraction is not None:
        return Reading(fraction * factor, None, "; ".join(notes)), None
    literal = None
    if _PLAIN.fullmatch(t):
        literal = t
    elif _DOT_THOUSANDS.fullmatch(t):
        literal = t.replace(".", "")
        notes.append("the dots separate thousands")
    elif _THOUSANDS.fullmatch(t):
        sep = next(c for c in t if c in _SEPARATORS)
        literal = t.replace(sep, "")
        if sep != " " and sep != "_":
            name = "comma" if sep == "," else "apostrophe"
            notes.append(f"the {name} separates thousands" if t.count(sep) == 1 else f"the {name}s separate thousands")
    elif _DECIMAL_COMMA.fullmatch(t):
        literal = t.replace(",", ".")
    if literal is not None:
        try:
            value = float(literal)
        except (ValueError, OverflowError):
            return None, "that number is too large to be one"
        decimals = _decimals(literal)
        if decimals is not None and factor == 0.01:
            decimals += 2                       # 27.5% = 0.275: two more decimals as a share
        elif factor != 1.0:
            decimals = None                     # a converted unit implies no rounding of the result
        return Reading(value * factor, decimals, "; ".join(notes)), None
    value = _arithmetic(t)
    if value is not None:
        return Reading(value * factor, None, "; ".join(notes + ["computed from your expression"])), None
    return None, None


def _read(answer, what: str, unit: str | None = None, share: bool = False):
    """``(Reading, None)`` for a finite real number, else ``(None, Feedback)``."""
    if answer is None or (isinstance(answer, str) and not _visible(answer).strip()):
        return None, wrong(f"Please enter {what}; the answer is empty.")
    if isinstance(answer, bool):
        return None, wrong(f"Expected {what}, got a yes/no value ({answer}).")
    if _is_array(answer):
        shape = _shape(answer)
        if math.prod(shape) != 1:
            return None, wrong(f"Expected {what}, got an array of shape {shape}.")
        answer = answer.tolist()
        while isinstance(answer, list):
            answer = answer[0]
        if isinstance(answer, bool):
            return None, wrong(f"Expected {what}, got a yes/no value ({answer}).")
    reading = None
    if isinstance(answer, str):
        reading, problem = read_number(answer, unit=unit, share=share)
        if problem:
            return None, wrong(f"Expected {what}: {problem}.")
        if reading is None:
            return None, wrong(f"Expected {what}, got the text {excerpt(answer)}.")
        answer = reading.value
    if not isinstance(answer, numbers.Real):
        return None, wrong(f"Expected {what}, got a {type(answer).__name__}.")
    try:
        value = float(answer)
    except OverflowError:
        return None, wrong(f"Expected {what}; that number is too large to be one.")
    if not math.isfinite(value):
        return None, wrong(f"Expected a finite number, got {value}.")
    return (reading if reading is not None else Reading(value)), None


def parse_number(answer, what: str = "a number", *, unit: str | None = None, share: bool = False):
    """Return ``(value, None)`` for a finite real number (int, float, a one-element
    array/tensor, or text as a person writes it: see :func:`read_number`, e.g. ``" 1,5 "``,
    ``"1,024"``, ``"27.5%"`` for a ``share``, ``"256 MiB"`` where ``unit`` is a byte unit,
    ``"exp(-3)"``, ``"seven"``), or ``(None, Feedback)`` describing what is wrong with
    ``answer``."""
    reading, problem = _read(answer, what, unit, share)
    return (None, problem) if problem else (reading.value, None)


def _cell(value, kind: str):
    """One matrix cell as a bool (``kind="bool"``) or float, or ``None`` if it is not one."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, numbers.Real) and value in (0, 1):
            return bool(value)
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def parse_matrix(answer, shape: tuple, *, kind: str = "bool"):
    """Return ``(rows, None)`` when ``answer`` is a matrix of the given ``shape`` (nested
    lists, a numpy array or a tensor), else ``(None, Feedback)``.

    ``rows`` is a list of ``shape[0]`` lists of ``shape[1]`` plain values: bools for
    ``kind="bool"`` (True/False or 0/1 cells), finite floats for ``kind="float"``.
    """
    n_rows, n_cols = shape
    if answer is None:
        return None, wrong(f"Please give a {n_rows} x {n_cols} matrix; the answer is empty.")
    answer = as_plain(answer)
    if isinstance(answer, tuple):
        answer = list(answer)
    if not isinstance(answer, list) or not all(isinstance(row, (list, tuple)) for row in answer):
        return None, wrong(f"Expected a {n_rows} x {n_cols} matrix of {kind} cells; could not read it.")
    widths = {len(row) for row in answer}
    if len(widths) > 1:
        return None, wrong(f"Expected a {n_rows} x {n_cols} matrix of {kind} cells; could not read it "
                           "(its rows have different lengths).")
    got = (len(answer), widths.pop() if widths else 0)
    if got != (n_rows, n_cols):
        return None, wrong(f"Expected a matrix of shape {(n_rows, n_cols)}, got shape {got}.")
    rows = [[_cell(v, kind) for v in row] for row in answer]
    if any(v is None for row in rows for v in row):
        if kind == "bool":
            return None, wrong("Expected True/False (or 0/1) cells; some cells are neither.")
        return None, wrong("Expected numeric cells; some cells are not numbers.")
    if kind != "bool" and not all(math.isfinite(v) for row in rows for v in row):
        return None, wrong("Every cell must be a finite number (no NaN or infinity).")
    return rows, None


def parse_choice(answer, options):
    """Return ``(answer, None)`` when ``answer`` is one of ``options``, else ``(None, Feedback)``."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong("Please choose one of the options.")
    try:
        known = answer in options
    except TypeError:  # unhashable answers against a set of options
        known = False
    if not known:
        shown = ", ".join(map(str, options))
        return None, wrong(f"{excerpt(answer)} is not one of the options ({shown}).")
    return answer, None


def parse_token(answer, tokens):
    """Accept a token position (an int, or a whole-number array/tensor scalar) or a token
    string that occurs exactly once in ``tokens``; return ``(position, None)`` or
    ``(None, Feedback)``.  Floats are refused: a position is never rounded."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None, wrong("Please pick a token.")
    if _is_array(answer) and _shape(answer) == ():
        answer = answer.tolist()
    if isinstance(answer, bool):
        return None, wrong("Expected a token or its position, got a yes/no value.")
    if isinstance(answer, numbers.Integral):
        if 0 <= int(answer) < len(tokens):
            return int(answer), None
        return None, wrong(f"Position {answer} is outside the sentence (0..{len(tokens) - 1}).")
    if isinstance(answer, float):
        return None, wrong(f"Expected a token or its position, got the number {answer}.")
    if isinstance(answer, str):
        hits = [i for i, t in enumerate(tokens) if t == answer.strip()]
        if len(hits) == 1:
            return hits[0], None
        if not hits:
            return None, wrong(f"{excerpt(answer)} is not a token of this sentence: {' '.join(tokens)}")
        return None, wrong(f"{excerpt(answer)} occurs {len(hits)} times; give its position instead ({hits}).")
    return None, wrong(f"Expected a token or its position, got a {type(answer).__name__}.")


def grade_choice(answer, options, correct, right_message: str, feedback: dict, hint: str | None = None,
                 measured: str | None = None) -> Feedback:
    """Grade a multiple-choice answer: ``right_message`` for ``correct``, the option's own
    explanation from ``feedback`` (what that choice gets wrong) for any other option, and the
    ``parse_choice`` message for an answer that is not an option at all.  ``measured`` (the
    real numbers behind the answer, e.g. ``"Measured on layer 0: ..."``) is appended, after a
    space, to the message of every option, right or wrong."""
    choice, problem = parse_choice(answer, options)
    if problem:
        return problem
    tail = "" if measured is None else " " + measured
    if choice == correct:
        return right(right_message + tail)
    return wrong(feedback[choice] + tail, hint=hint)


def _say(message, value) -> str:
    """A feedback message: ``message`` itself, or ``message(value)`` when it is callable."""
    return message(value) if callable(message) else message


def _rounded(reading: Reading, target: float, tol: float) -> bool:
    """``reading`` is ``target`` correctly rounded to the decimals it shows, and that precision
    is within the tolerance ``tol`` (a relative slack of 1e-9 absorbs binary floating point:
    0.28 - 0.275 is 0.005000000000000004)."""
    d = reading.decimals
    if d is None or d > 15:
        return False
    half = 0.5 * 10.0 ** -d
    return half <= tol * (1 + 1e-9) and abs(reading.value - target) <= half * (1 + 1e-9)


def _within(value: float, target: float, abs_tol: float, rel_tol: float) -> bool:
    """numpy.isclose's rule (not symmetric): ``|value - target| <= abs_tol + rel_tol * |target|``."""
    return abs(value - target) <= abs_tol + rel_tol * abs(target)


def grade_number(answer, target, right_message, *, what: str = "a number", abs_tol: float = 0.0,
                 rel_tol: float = 0.0, mistakes=(), mistake_tol=None, impossible=(),
                 whole: str | None = None, otherwise=None, hint: str | None = None,
                 unit: str | None = None, share: bool = False) -> Feedback:
    """Grade a typed number against the measured ``target``: the one body of every checker of
    kind ``number`` (predict, then check a value read from the exercise's data).

    The answer is read by :func:`parse_number` (a number, a one-element array or tensor, or
    text as a person writes it, see :func:`read_number`; ``unit`` is the question's byte unit,
    ``share`` says a percentage may be given); ``None``, unreadable text, NaN or infinity get
    its message, which names ``what`` was expected.  Then, in this order, the first rule that
    applies answers:

    1. ``whole``: when given, a number that is not whole is refused with
       ``"<value> is not a whole number: <whole>"``; from here on the value is an ``int``.
    2. Right: ``|value - target| <= abs_tol + rel_tol * |target|`` (numpy.isclose's rule; with
       both tolerances 0 only the exact value counts), feedback ``right_message``.  Also right:
       a typed answer with ``d`` decimals that is the target correctly rounded to ``d``
       decimals (``|value - target| <= 0.5 * 10**-d``, either way at an exact tie), when that
       precision is at least the tolerance's (``0.5 * 10**-d <= tol``): 0.27 and 0.28 are both
       right for 0.275 at a tolerance of 0.005, 0.3 is not.
    3. ``mistakes``: ``(values, message)`` or ``(values, message, hint)`` pairs, ``values`` one
       number or a tuple of numbers, each the result of one typical mistake; an answer within
       ``mistake_tol`` (``(abs_tol, rel_tol)``, default the right answer's tolerances) of one
       of them gets that mistake's message.  A mistake whose value lies within the right
       answer's tolerance of ``target`` is skipped: it cannot be told apart from the truth.
    4. ``impossible``: ``(predicate, message)`` pairs for values no answer can take (a negative
       loss, a share above 1); the first predicate that is true for the value answers.
    5. ``otherwise`` (with ``hint``): by default ``"<value> is too high."`` or ``"... too low."``.

    Every message may be a str or a function of the (parsed) value returning one, so that it
    can quote the learner's number.  Units: ``target``, the tolerances and the mistakes' values
    are in the unit of the question.

    Raises:
        TypeError: ``target`` is not a real number (a bug of the exercise, not of the learner;
            :func:`checker` turns it into feedback).
        ValueError: ``target`` is NaN or infinite, or a tolerance is negative.

    >>> grade_number("0,5", 0.5, "Yes.", abs_tol=0.01).text
    'Correct. Yes.'
    >>> grade_number(2, 0.5, "Yes.", mistakes=[(2.0, "That is 1/0.5.")]).text
    'Not yet. That is 1/0.5.'
    >>> grade_number("0.7", 0.5, "Yes.", abs_tol=0.01, hint="Divide 1 by 2.").text
    'Not yet. 0.7 is too high. Hint: Divide 1 by 2.'
    """
    if isinstance(target, bool) or not isinstance(target, numbers.Real):
        raise TypeError(f"target must be a real number, got {type(target).__name__}")
    if not math.isfinite(target):
        raise ValueError(f"target must be finite, got {target}")
    m_abs, m_rel = (abs_tol, rel_tol) if mistake_tol is None else mistake_tol
    if min(abs_tol, rel_tol, m_abs, m_rel) < 0:
        raise ValueError(f"tolerances must be >= 0, got abs_tol={abs_tol}, rel_tol={rel_tol}, "
                         f"mistake_tol={mistake_tol}")
    reading, problem = _read(answer, what, unit, share)
    if problem:
        return problem
    value = reading.value
    if whole is not None:
        if value != int(value):
            return wrong(f"{value:g} is not a whole number: {whole}")
        value = int(value)
    note = f" (Your answer was read as {value:g}: {reading.note}.)" if reading.note else ""
    if _within(value, target, abs_tol, rel_tol) or _rounded(reading, target, abs_tol + rel_tol * abs(target)):
        return right(_say(right_message, value) + note)
    for values, message, *extra in mistakes:
        for v in values if isinstance(values, (tuple, list)) else (values,):
            if _within(value, v, m_abs, m_rel) and not _within(v, target, abs_tol, rel_tol):
                return wrong(_say(message, value) + note, hint=extra[0] if extra else None)
    for is_impossible, message in impossible:
        if is_impossible(value):
            return wrong(_say(message, value) + note)
    if otherwise is None:
        otherwise = f"{value:g} is too {'high' if value > target else 'low'}."
    return wrong(_say(otherwise, value) + note, hint=hint)


def head_key(layer: int, head: int) -> str:
    """The key of one head in a sentence answer's ``heads`` map, e.g. ``"0:2"``."""
    return f"{int(layer)}:{int(head)}"


def finite_real(value) -> bool:
    """``value`` is a finite real number: an int or float (or another ``numbers.Real``) that is
    not a bool, not NaN and not infinite.  The rule for every number a front end reports (a
    weight, a loss): ``True`` is a ``numbers.Real`` and NaN passes every ``<`` test, so neither
    may stand for one.

    >>> [finite_real(v) for v in (0.5, 3, True, float("nan"), float("inf"), "0.5", 10 ** 400)]
    [True, True, False, False, False, False, False]
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except (OverflowError, TypeError, ValueError):
        return False


def _distribution(row, T: int) -> bool:
    """``row`` is a list of ``T`` finite, non-negative weights (not bools) summing to 1 within 1e-3."""
    return (isinstance(row, list) and len(row) == T and all(finite_real(w) and w >= 0 for w in row)
            and abs(sum(row) - 1) <= 1e-3)


def parse_model_answer(answer, n_texts: int, reads):
    """Return ``(texts, runs, None)`` for a sentence answer (see
    :data:`attnlib.exercises.registry.KINDS`), else ``(None, None, Feedback)``.

    ``runs[k]`` is a dict with ``tokens`` (``T >= 1`` str) and ``heads``: ``{"L:H": T rows of T
    weights}`` for every pair of ``reads``; each row must be a distribution: ``T`` finite,
    non-negative real weights (:func:`finite_real`: no NaN, no infinity, no ``True``/``False``)
    summing to 1 within 1e-3.  Feedback: the reader's text missing or empty, the model's error,
    or "... could not be read" for a reading that is missing, malformed or not a distribution."""
    if isinstance(answer, str):
        return None, None, wrong("This exercise is graded on what the model does with your sentence: "
                                 "write it in the box and press Check, so the model reads it first.")
    if not isinstance(answer, dict) or not isinstance(answer.get("texts"), list):
        return None, None, wrong("Your answer could not be read: expected your sentence and the model's reading of it.")
    texts = answer["texts"]
    if len(texts) != n_texts or not all(isinstance(t, str) for t in texts):
        return None, None, wrong(f"Please write {'one sentence' if n_texts == 1 else 'two sentences, A and B'}.")
    if any(not t.strip() for t in texts):
        return None, None, wrong("Please write a sentence: the box is empty.")
    if answer.get("error"):
        return None, None, wrong(f"The model could not read your text: {excerpt(str(answer['error']), 200)[1:-1]}.")
    runs = answer.get("runs")
    if not isinstance(runs, list) or len(runs) != n_texts:
        return None, None, wrong("The model's reading of your sentence is missing; press Check again.")
    for run in runs:
        tokens, heads = (run.get("tokens"), run.get("heads")) if isinstance(run, dict) else (None, None)
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens) \
                or not isinstance(heads, dict):
            return None, None, wrong("The model's reading of your sentence could not be read.")
        T = len(tokens)
        for layer, head in reads:
            rows = heads.get(head_key(layer, head))
            if not isinstance(rows, list) or len(rows) != T or not all(_distribution(r, T) for r in rows):
                return None, None, wrong(f"The model's weights for layer {layer}, head {head} could not be read.")
    return texts, runs, None


def strongest(row) -> tuple:
    """``(key, weight, margin)``: the position of the largest weight of ``row``, that weight,
    and how far it is ahead of the runner-up (``margin < CLOSE_CALL`` is a close call)."""
    order = sorted(range(len(row)), key=lambda j: -row[j])
    second = row[order[1]] if len(order) > 1 else 0.0
    return order[0], row[order[0]], row[order[0]] - second


def pair_flips(ta, tb, ra, rb) -> tuple:
    """The one minimal-pair rule (the flip_pair grader and chapter 9's lab table): ``(aligned,
    flips, close)`` for token lists ``ta``, ``tb`` and one head's weight rows ``ra``, ``rb``.
    ``aligned`` is :func:`align_tokens`; a shared query changes when its strongest key in B is not
    the partner of its strongest key in A; a change whose lead (:func:`strongest`) is under
    :data:`CLOSE_CALL` in either run is too close to call and only counted in ``close``.
    ``flips`` lists ``(i, j, key_a, weight_a, key_b, weight_b)``."""
    aligned = align_tokens(ta, tb)
    partner = dict(aligned)
    flips, close = [], 0
    for i, j in aligned:
        ka, wa, ma = strongest(ra[i])
        kb, wb, mb = strongest(rb[j])
        if partner.get(ka) == kb:
            continue
        if min(ma, mb) < CLOSE_CALL:
            close += 1
            continue
        flips.append((i, j, ka, wa, kb, wb))
    return aligned, flips, close


def align_tokens(a, b) -> list:
    """The longest common subsequence of two token lists, as ``[(i, j), ...]`` with
    ``a[i] == b[j]``: which positions of a minimal pair are "the same token"."""
    n, m = len(a), len(b)
    L = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            L[i][j] = L[i + 1][j + 1] + 1 if a[i] == b[j] else max(L[i + 1][j], L[i][j + 1])
    out, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif L[i + 1][j] >= L[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


# ------------------------------------------------------------------ the circuit lab's words

#: The longest stretch of an unknown word that :func:`unknown_word` quotes and compares.
WORD_SHOWN = 40


def unknown_word(word: str, vocabulary) -> str:
    """The circuit lab's message for a word that is not in its model's vocabulary, with up to
    three suggestions: :func:`difflib.get_close_matches` (cutoff 0.6) on the word's first
    :data:`WORD_SHOWN` characters (a longer word is quoted by them, "…" and its length).  The one definition of the refusal: the kernel's reader
    (:func:`attnlib.circuit_lab.read_words`) raises it, the lab's grader passes it on, and the
    page's reader (``attnlibTiny.words`` in ``static/xp_tiny.js``) mirrors it word for word.

    >>> print(unknown_word("natoin", ["nation", "war"]))
    “natoin” is not in the model's vocabulary (the 2 words and marks of the Gettysburg Address); did you mean “nation”?
    """
    import difflib
    vocabulary, word = list(vocabulary), str(word)
    shown = word[:WORD_SHOWN]
    near = difflib.get_close_matches(shown, vocabulary, n=3, cutoff=0.6)
    quoted = [f"\u201c{x}\u201d" for x in near]
    offer = "" if not quoted else quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    named = f"\u201c{word}\u201d" if len(word) <= WORD_SHOWN else f"\u201c{shown}\u2026\u201d ({len(word):,} characters)"
    return (f"{named} is not in the model's vocabulary (the {len(vocabulary)} words and marks of the "
            f"Gettysburg Address)" + (f"; did you mean {offer}?" if offer else ""))
