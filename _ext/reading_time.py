"""Sphinx extension: each chapter's reading time, stated under its title (issue 37 item 10).

The line is computed from the page as it is built, in one place, so that no chapter source
holds it and it follows every edit of the text.  The rule (:data:`RULE`, the line's tooltip;
the preface says it too, gluing :data:`WORDS_PER_MINUTE` and :data:`SECONDS_PER_FIGURE`):

* **words**: the words of the page's prose at :data:`WORDS_PER_MINUTE` a minute.  A word is a
  run of non-space characters holding a letter or a digit (a number is a word, a dash is not);
  glued values are counted as they read on the page, and a formula, inline or displayed,
  counts as one word.
* **figures**: :data:`SECONDS_PER_FIGURE` seconds for each image the page shows (a figure in
  the prose or in a code cell's output).
* **not counted**: code cells (their code and their outputs, printed text and interactive
  views included: running and reading them is the reader's own pace) except the captions of
  the figures they draw; code blocks; raw HTML; and whatever is folded until the reader opens
  it (the solutions, any dropdown).  Cells removed from the page (``remove-cell``) are not in
  it at all.

The total is rounded to the nearest minute (at least 1).  Sections whose title begins with
:data:`GOING_FURTHER` are optional (issue 37 item 10): the line gives the main line's time and,
apart, what those sections add, so that a reader can plan the chapter without them.

How: on ``doctree-resolved`` (glued values pasted, ``{only}`` resolved, outputs chosen: the
page as it will be written), a paragraph is inserted after the title of the page's first
section, on every page whose name matches the ``reading_time_pages`` setting (default: the
chapters, ``chapters/NN_...``).  It is HTML (raw, for the tooltip); other builders skip it.
The learners' notebooks are made from the sources (``_ext/notebook_convert.py``), not from
this doctree, so they are unchanged: a notebook is read while running its cells, which this
rule leaves out on purpose.

Only the standard library is imported at module level (docutils inside the functions), so that
a kernel can import the constants (the preface does, also in Binder's lean environment).
"""
from __future__ import annotations

import html
import re

#: Words of technical prose read in a minute (a common planning figure for technical text;
#: general prose is read faster).
WORDS_PER_MINUTE = 130
#: Seconds allowed for looking at one figure.
SECONDS_PER_FIGURE = 15
#: Pages that get the line (their Sphinx docnames): the numbered chapters.
DEFAULT_PAGES = r"^chapters/\d\d_"
#: The class of the inserted paragraph.
CLASS = "reading-time"
#: How the title of an optional section begins; its words and figures are counted apart.
GOING_FURTHER = "Going further"

RULE = (f"Words of prose at {WORDS_PER_MINUTE} a minute, plus {SECONDS_PER_FIGURE} s for each figure. "
        "Code cells (their code and outputs, except figure captions), code blocks and folded "
        "solutions are not counted; a formula counts as one word.")

_WORD = re.compile(r"\S*\w\S*")
_FORMULA = " f "   # one word where a formula was, apart from its neighbours


def reading_minutes(words: int, figures: int) -> int:
    """Minutes to read ``words`` words and look at ``figures`` figures, by :data:`RULE`,
    rounded to the nearest minute and at least 1.

    Raises:
        TypeError: a count that is not an int.
        ValueError: a negative count.
    """
    for name, value in (("words", words), ("figures", figures)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < 0:
            raise ValueError(f"{name} must be non-negative, got {value}")
    seconds = words * 60 / WORDS_PER_MINUTE + figures * SECONDS_PER_FIGURE
    return max(1, int(seconds / 60 + 0.5))


def count_words(text: str) -> int:
    """Words in ``text``: runs of non-space characters that hold a letter or a digit."""
    return len(_WORD.findall(text))


def _is_folded(node) -> bool:
    return "dropdown" in node.get("classes", []) or "toggle-hidden" in node.get("classes", [])


def _is_code_cell(node) -> bool:
    return node.get("nb_element") == "cell_code" or "cell" in node.get("classes", [])


def _prose(node, out: list[str]) -> None:
    """Append the countable text under ``node`` to ``out`` (blocks separated by spaces)."""
    from docutils import nodes
    if isinstance(node, nodes.Text):
        out.append(str(node))
        return
    if isinstance(node, (nodes.math, nodes.math_block)):
        out.append(_FORMULA)
        return
    if isinstance(node, (nodes.literal_block, nodes.raw, nodes.comment, nodes.system_message,
                         nodes.substitution_definition, nodes.target, nodes.image)):
        return
    if isinstance(node, nodes.Element):
        if _is_folded(node):
            return
        if _is_code_cell(node):
            for caption in node.findall(nodes.caption):       # a figure's caption is prose
                if not any(_is_folded(a) for a in _ancestors(caption, node)):
                    out.append(" ")
                    _prose(caption, out)
                    out.append(" ")
            return
        block = not isinstance(node, nodes.Inline)
        if block:
            out.append(" ")
        for child in node.children:
            _prose(child, out)
        if block:
            out.append(" ")


def _ancestors(node, stop):
    node = node.parent
    while node is not None and node is not stop:
        yield node
        node = node.parent


def count(doctree) -> tuple[int, int]:
    """``(words, figures)`` of a page's doctree, by :data:`RULE` (see the module's docstring)."""
    from docutils import nodes
    out: list[str] = []
    _prose(doctree, out)
    figures = sum(1 for img in doctree.findall(nodes.image)
                  if not any(_is_folded(a) for a in _ancestors(img, None)))
    return count_words("".join(out)), figures


def count_optional(doctree) -> tuple[int, int, int]:
    """``(words, figures, sections)`` of the page's optional sections (title beginning with
    :data:`GOING_FURTHER`), counted as :func:`count` counts; one nested in another is part of
    it, not counted again."""
    from docutils import nodes
    words = figures = n = 0
    for section in doctree.findall(nodes.section):
        title = section[0] if section.children and isinstance(section[0], nodes.title) else None
        if title is None or not title.astext().strip().startswith(GOING_FURTHER):
            continue
        if any(isinstance(a, nodes.section) and a[0].astext().strip().startswith(GOING_FURTHER)
               for a in _ancestors(section, None) if a.children and isinstance(a[0], nodes.title)):
            continue
        w, f = count(section)
        words, figures, n = words + w, figures + f, n + 1
    return words, figures, n


def _counts(words: int, figures: int) -> str:
    text = f"{words:,} word{'' if words == 1 else 's'}"
    if figures:
        text += f", {figures} figure{'' if figures == 1 else 's'}"
    return text


def line_html(words: int, figures: int, optional: tuple[int, int, int] = (0, 0, 0)) -> str:
    """The paragraph shown under the title: the minutes of the main line (``words`` and
    ``figures`` without the ``optional`` ones: ``(words, figures, sections)``), the counts, and
    what the optional "Going further" sections add when there are any; the rule as its tooltip."""
    minutes = reading_minutes(words, figures)
    line = (f'<p class="{CLASS}" title="{html.escape(RULE)}"><em>Reading time: about {minutes} '
            f'minute{"" if minutes == 1 else "s"}</em> ({_counts(words, figures)})')
    o_words, o_figures, sections = optional
    if sections:
        more = reading_minutes(o_words, o_figures)
        line += (f"; the optional &#8220;{GOING_FURTHER}&#8221; section{'s add' if sections > 1 else ' adds'} "
                 f"about {more} minute{'' if more == 1 else 's'} more ({_counts(o_words, o_figures)})")
    return line + "</p>\n"


def insert_line(doctree) -> object | None:
    """Count ``doctree`` and insert the reading-time line after its first section's title;
    returns the inserted node (``None`` when the page has no titled section)."""
    from docutils import nodes
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None or not section.children or not isinstance(section[0], nodes.title):
        return None
    words, figures = count(doctree)
    optional = count_optional(doctree)
    line = nodes.raw("", line_html(words - optional[0], figures - optional[1], optional), format="html")
    section.insert(1, line)
    return line


def _resolved(app, doctree, docname: str) -> None:
    if re.search(app.config.reading_time_pages, docname):
        insert_line(doctree)


def setup(app):
    app.add_config_value("reading_time_pages", DEFAULT_PAGES, "html")
    app.connect("doctree-resolved", _resolved)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
