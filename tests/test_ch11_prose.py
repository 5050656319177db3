"""Chapter 11's sentence about the measured exponent (issue 37 item 7): its wording is chosen by
code from the value the page prints, so it reads correctly whether the build measures an
exponent below 2, of 2 or above 2.  The function is taken from the chapter's own source (the
book's code, run as the book runs it)."""
import ast
import math
import re
from pathlib import Path

import pytest

CHAPTER = Path(__file__).resolve().parents[1] / "chapters" / "11_at_scale.md"
LEAD_IN = "The arithmetic grows exactly as $T^2$, and\n{glue:text}`live_slope_phrase`."


def _chapter_function(name: str):
    """The function ``name`` defined in one of the chapter's code cells, compiled alone."""
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", CHAPTER.read_text(encoding="utf-8"), flags=re.S)
    for cell in cells:
        body = "\n".join(line for line in cell.splitlines() if not line.startswith(":tags:"))
        for node in ast.parse(body).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                ns = {"math": math}
                exec(compile(ast.Module(body=[node], type_ignores=[]), CHAPTER.name, "exec"), ns)  # noqa: S102 - the book's own code
                return ns[name]
    raise AssertionError(f"{CHAPTER.name} defines no function {name!r}")


@pytest.fixture(scope="module")
def exponent_phrase():
    return _chapter_function("exponent_phrase")


def sentence(phrase: str) -> str:
    return f"The arithmetic grows exactly as T^2, and {phrase}."


def test_the_prose_glues_the_phrase_after_its_lead_in():
    text = CHAPTER.read_text(encoding="utf-8")
    assert LEAD_IN in text
    assert 'glue("live_slope_phrase", exponent_phrase(slope), display=False)' in text
    assert "{glue:text}`live_slope:.1f`" in text      # the precision the phrase compares at (digits=1)


@pytest.mark.parametrize("alpha, side, cost", [(1.6, "below 2", "less"), (2.4, "above 2", "more")])
def test_an_exponent_away_from_2_says_which_side_and_what_it_means(exponent_phrase, alpha, side, cost):
    phrase = exponent_phrase(alpha)
    assert f"is {side}:" in phrase and f"one score cost {cost} at the longer lengths" in phrase
    assert "matches" not in phrase
    assert sentence(phrase).count(".") == 1          # one sentence, ended by the prose's full stop


def test_an_exponent_of_2_says_the_arithmetic_alone_explains_it(exponent_phrase):
    phrase = exponent_phrase(2.0)
    assert phrase.startswith("the measured exponent matches it") and "about the same" in phrase
    assert not re.search(r"\b(above|below|more|less)\b", phrase)


@pytest.mark.parametrize("alpha, printed", [(1.96, "2.0"), (2.04, "2.0"), (2.049, "2.0"), (2.06, "2.1"), (1.94, "1.9")])
def test_the_wording_follows_the_number_as_printed(exponent_phrase, alpha, printed):
    """An exponent the page prints as 2.0 is read as 2, one it prints as 2.1 as above it."""
    assert f"{alpha:.1f}" == printed
    phrase = exponent_phrase(alpha)
    expected = "matches" if printed == "2.0" else ("above 2" if float(printed) > 2 else "below 2")
    assert expected in phrase


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_exponent_is_refused(exponent_phrase, bad):
    with pytest.raises(ValueError, match="finite"):
        exponent_phrase(bad)
