"""The converter: a chapter's MyST Markdown notebook and its executed outputs -> the learner's notebook.

Pure transformation: nothing here runs a kernel (``notebook_run.py`` provides the outputs) or
decides whether a file may be written (``learner_files.py``); ``make_notebooks.py`` joins the
three.  :func:`convert` builds the notebook:

* Markdown cells are parsed with markdown-it-py and the MyST plugins of ``mdit_py_plugins``
  (the parser MyST itself is built on; both come with jupytext, so the lean Binder has them).
  Every top-level directive and every role is rewritten into Markdown/HTML that JupyterLab and
  Notebook 7 render (:class:`MystToMarkdown`): glued values substituted (formatted as MyST-NB
  formats them), admonitions and exercise statements as quoted blocks, each ``solution``
  folded inside ``<details><summary>Solution ...</summary> ... </details>``, ``{cite}`` roles
  as "Author (Year)" with the cited works listed at the end, figures and glued images as cell
  attachments with their captions, ``{include}`` files inlined, MyST targets and comments
  dropped.  Maths stays ``$...$`` / ``$$...$$``.  Unknown directives keep their body under a
  bold title, unknown roles their text, so new MyST in a chapter degrades to readable text.
* Code cells keep their tags.  ``remove-cell`` / ``hide-cell`` cells (plumbing, glue records
  and answer-checking asserts) keep running but their source and outputs are collapsed
  (``jupyter.source_hidden`` / ``outputs_hidden``) and their outputs dropped; ``remove-input``
  and ``hide-input`` collapse the source only; ``remove-output`` drops outputs.  A figure
  cell's ``mystnb.figure.caption`` becomes a caption cell under it.
* Outputs (:func:`learner_outputs`): glue records dropped, the book's packed figure renderings
  reduced to one, widget views (exercises, interactive controls) replaced by a note to run the
  cell: a saved widget has no kernel behind it.
* ``from myst_nb import glue`` becomes a small stand-in (:data:`GLUE_SHIM`,
  :func:`learner_source`), so the notebooks run without the book tools (myst-nb, Sphinx);
  while this tool records a page's outputs, the stand-in also makes a training run log plain
  text instead of a progress-bar widget (:data:`STATIC_BOOK_ENV`), as in the book;
  jupytext metadata is dropped, so opening or saving a generated notebook never touches
  ``chapters/*.md``.
* The first cell (:func:`header_cell`) says where the notebook comes from and, for a chapter
  whose kernel peaked above :data:`HEAVY_MIB` in the Binder record, to run it alone.

Only the standard library is imported at module level (the rest inside the functions that
need it), so that ``make_notebooks.py --clean`` runs without the course's packages.
"""
from __future__ import annotations

import base64
import copy
import functools
import hashlib
import html
import json
import mimetypes
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

GLUE_PREFIX = "application/papermill.record/"   # myst_nb.ext.glue.GLUE_PREFIX
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
RECORD_ENV = "ATTNLIB_GLUE_RECORD"
#: attnlib.transformer.STATIC_BOOK_ENV (this module imports no attnlib): set, a training run
#: (``attnlib.induction.train``) logs one line of text instead of a tqdm progress-bar widget.
STATIC_BOOK_ENV = "ATTNLIB_STATIC_BOOK"

# Replaces `from myst_nb import glue` in the notebooks: the book's glue records a value for the
# prose; the prose of a generated notebook already shows the values, so in a learner's session
# it only displays what the book displays.  While this tool executes a page it records the
# values the way myst_nb.glue does (display_data with "scrapbook" metadata), and the page's
# training runs log plain text, as in the book build (``exercise_pages.py`` sets the same
# variable there): a progress-bar widget saved in the notebook has no kernel behind it and
# would show only "run this cell" where the run's log belongs (issue 38 item 12).  In a
# learner's own session nothing changes: the bar is live.
GLUE_SHIM = '''import os as _os
if _os.environ.get("%s"):   # `make notebooks` recording this notebook's outputs
    _os.environ["%s"] = "1"   # so the saved output of a training run is its log, as text


def glue(name, value, display=True):
    """The book's `glue` (myst_nb): the numbers it records are already written into this
    notebook's text (from the run that generated it); here it only shows `value` when
    display=True."""
    import os
    from IPython.core.formatters import format_display_data
    from IPython.display import display as show, publish_display_data
    if os.environ.get("%s"):
        data, _ = format_display_data(value)
        prefix = "" if display else "%s"
        publish_display_data({prefix + k: v for k, v in data.items()},
                             metadata={"scrapbook": {"name": name, "mime_prefix": prefix}})
    elif display:
        show(value)''' % (RECORD_ENV, STATIC_BOOK_ENV, RECORD_ENV, GLUE_PREFIX)
_GLUE_IMPORT = re.compile(r"^from myst_nb import glue[ \t]*(#.*)?$", re.M)

ADMONITIONS = {"admonition", "note", "tip", "hint", "important", "warning", "caution", "attention",
               "danger", "error", "seealso", "margin", "sidebar", "topic", "epigraph", "pull-quote",
               "highlights", "todo", "versionadded", "versionchanged", "deprecated"}
DROPPED_DIRECTIVES = {"bibliography", "toctree", "tableofcontents", "index", "meta", "rubric-hidden"}
#: The tags that an ``{only}`` directive's expression sees in a notebook (Sphinx sets the
#: builder's, e.g. ``html``, in the book): ``{only} html`` is page-only text, ``{only}
#: notebook`` notebook-only text (the book never shows it).
NOTEBOOK_TAGS = {"notebook", "ipynb", "jupyter"}


# --------------------------------------------------------------------------------------------
# The book's pages and the bibliography
# --------------------------------------------------------------------------------------------

def toc_pages() -> list[str]:
    """The pages of ``_toc.yml`` in order (``intro``, ``chapters/01_...``), without those that
    only hold the bibliography (their citations are listed in each notebook instead)."""
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return [p for p in pages if "{bibliography}" not in (ROOT / f"{p}.md").read_text(encoding="utf-8")]


@functools.lru_cache(maxsize=1)
def book_labels() -> dict:
    """Every ``(label)=`` target of the book's pages that names a heading: ``{label: (page, title)}``
    with ``page`` as in :func:`toc_pages` (``chapters/09_real_model``) and the heading's text, so
    that a ``{ref}`` without text reads as MyST renders it (the section's title), not as its label."""
    out = {}
    for md in [ROOT / "intro.md", *sorted((ROOT / "chapters").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        page = md.relative_to(ROOT).with_suffix("").as_posix()
        for m in re.finditer(r"^\(([\w:.-]+)\)=[ \t]*\n+#+[ \t]+(.+)$", text, re.M):
            out[m.group(1)] = (page, m.group(2).strip())
    return out


def _plain(value: str) -> str:
    """A BibTeX value as text: braces (which only protect case) dropped, white space collapsed."""
    return re.sub(r"\s+", " ", value.replace("{", "").replace("}", "")).strip()


def read_bib(path: Path) -> dict[str, dict[str, str]]:
    """The entries of a BibTeX file, read with pybtex: ``key -> {field: value}``, the people
    (``author``, ``editor``) as ``"Last, First and Last, First"``, braces kept out of values.
    The book itself formats its bibliography with sphinxcontrib-bibtex (which uses pybtex too)."""
    from pybtex.database import parse_file

    if not path.is_file():
        return {}
    entries: dict[str, dict[str, str]] = {}
    for key, entry in parse_file(str(path), bib_format="bibtex").entries.items():
        fields = {"ENTRYTYPE": entry.type.lower()}
        fields.update({name.lower(): _plain(value) for name, value in entry.fields.items()})
        for role, people in entry.persons.items():
            fields[role.lower()] = " and ".join(_plain(str(person)) for person in people)
        entries[key] = fields
    return entries


def _last_names(entry: dict) -> list[str]:
    names = []
    for person in re.split(r"\s+and\s+", entry.get("author") or entry.get("editor") or "Anonymous"):
        person = person.strip()
        names.append(person.split(",")[0].strip() if "," in person else person.split(" ")[-1])
    return names


def cite_author(entry: dict) -> str:
    """"Vaswani et al.", "Clark and Khandelwal", "Vig" (author-year style, as in the book)."""
    names = _last_names(entry)
    if len(names) > 2 or (names and names[-1] == "others"):
        return f"{names[0]} et al."
    return " and ".join(names)


def _full_name(person: str) -> str:
    """"Vaswani, Ashish" -> "Ashish Vaswani"."""
    last, comma, first = person.partition(",")
    return f"{first.strip()} {last.strip()}" if comma else person.strip()


def reference_line(key: str, entry: dict) -> str:
    """One line of a notebook's reference list: authors (year). Title. Venue."""
    people = [_full_name(p) for p in re.split(r"\s+and\s+", entry.get("author", "")) if p.strip()]
    people = ["others" if p == "others" else p for p in people]
    authors = ", ".join(people[:-1]) + (" and " if len(people) > 1 else "") + people[-1] if people else key
    venue = entry.get("journal") or entry.get("booktitle") or entry.get("publisher") or entry.get("howpublished", "")
    parts = [f"{authors} ({entry.get('year', 'n.d.')}).", f"*{entry.get('title', key)}*."]
    if venue:
        parts.append(f"{venue}.")
    url = entry.get("url") or (f"https://doi.org/{entry['doi']}" if entry.get("doi") else "")
    if url:
        parts.append(f"<{url}>")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------
# Glue values (as MyST-NB formats them)
# --------------------------------------------------------------------------------------------

def format_plain_text(text: str, fmt_spec: str) -> str:
    """``{glue:text}`name:fmt``` as MyST-NB renders it (myst_nb.core.variables.format_plain_text)."""
    from ast import literal_eval
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if fmt_spec == "":
        return str(value)
    type_char = fmt_spec[-1]
    if type_char == "s":
        value = str(value)
    elif type_char in "bcdoxX":
        value = int(value)
    elif type_char in "eEfFgGn%":
        value = float(value)
    return format(value, fmt_spec)


def glue_outputs(nb) -> dict[str, dict]:
    """``name -> mime bundle`` of every glued value recorded in the outputs of ``nb``."""
    found = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if out.get("output_type") == "display_data" and meta:
                prefix = meta.get("mime_prefix", "")
                found[meta["name"]] = {k[len(prefix):]: v for k, v in out.get("data", {}).items()
                                       if k.startswith(prefix)}
    return found


class GlueError(KeyError):
    """A page refers to a glued value that its executed run did not record."""


# --------------------------------------------------------------------------------------------
# MyST Markdown -> Jupyter Markdown
# --------------------------------------------------------------------------------------------

def _parser():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.amsmath import amsmath_plugin
    from mdit_py_plugins.colon_fence import colon_fence_plugin
    from mdit_py_plugins.deflist import deflist_plugin
    from mdit_py_plugins.dollarmath import dollarmath_plugin
    from mdit_py_plugins.front_matter import front_matter_plugin
    from mdit_py_plugins.myst_blocks import myst_block_plugin
    from mdit_py_plugins.myst_role import myst_role_plugin
    return (MarkdownIt("commonmark").use(front_matter_plugin).use(myst_block_plugin).use(myst_role_plugin)
            .use(colon_fence_plugin).use(dollarmath_plugin).use(amsmath_plugin).use(deflist_plugin)
            .enable("table"))


def split_directive(content: str) -> tuple[dict, str]:
    """A directive's options (``:key: value`` lines or a ``---`` YAML block) and its body."""
    lines = content.split("\n")
    options: dict = {}
    if lines and lines[0].strip() == "---":
        import yaml
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if end is not None:
            options = yaml.safe_load("\n".join(lines[1:end])) or {}
            lines = lines[end + 1:]
    else:
        while lines and re.match(r"^:[\w-]+:( |$)", lines[0]):
            key, _, value = lines.pop(0)[1:].partition(":")
            options[key.strip()] = value.strip()
    return options, "\n".join(lines).strip("\n")


def quote(text: str) -> str:
    """``text`` as a Markdown block quote (nested blocks keep working)."""
    text = re.sub(r"\n{3,}", "\n\n", text.strip("\n"))
    return "\n".join("> " + line if line.strip() else ">" for line in text.split("\n"))


class MystToMarkdown:
    """Rewrites the MyST of one page into Markdown that Jupyter renders.

    Args:
        glue: ``name -> mime bundle`` of the page's executed run.
        bib: the entries of ``references.bib``.
        source_dir: the page's folder (for ``{include}`` and image paths).

    After :meth:`render`, :attr:`cited` holds the citation keys met so far (in order) and
    :meth:`render` returns the cell's attachments alongside its text.
    """

    def __init__(self, glue: dict, bib: dict, source_dir: Path):
        self.glue, self.bib, self.source_dir = glue, bib, source_dir
        self.md = _parser()
        self.cited: list[str] = []
        self.exercises: dict[str, tuple[int, str]] = {}   # label -> (number, title)
        self.unknown: set[str] = set()
        self._attachments: dict = {}

    # ---- public -------------------------------------------------------------------------
    def render(self, text: str) -> tuple[str, dict]:
        """Markdown of one Markdown cell, and its attachments (``name -> {mime: base64}``)."""
        self._attachments = {}
        out = self._blocks(text)
        return out.strip("\n"), dict(self._attachments)

    def render_inline(self, text: str) -> str:
        """Markdown of a short text (a caption), attachments not allowed."""
        return self._blocks(text).strip("\n")

    # ---- blocks -------------------------------------------------------------------------
    def _blocks(self, text: str) -> str:
        lines = text.split("\n")
        tokens = self.md.parse(text)
        pieces: list[str] = []
        i, prev_end = 0, 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.level != 0 or tok.map is None:
                i += 1
                continue
            start, end = tok.map
            pieces.append("\n".join(lines[prev_end:start]))   # blank lines between blocks
            # the whole top-level block: up to its closing token at level 0
            j = i
            if tok.nesting == 1:
                depth = 0
                for j in range(i, len(tokens)):
                    depth += tokens[j].nesting
                    if depth == 0:
                        break
            block = tokens[i:j + 1]
            pieces.append(self._block(tok, block, lines[start:end]))
            prev_end = end
            i = j + 1
        pieces.append("\n".join(lines[prev_end:]))
        out = "\n".join(p for p in pieces if p is not None)
        return re.sub(r"\n{3,}", "\n\n", out)

    def _block(self, tok, block, lines: list[str]) -> str:
        if tok.type in ("myst_target", "myst_line_comment", "front_matter"):
            return ""
        if tok.type == "myst_block_break":
            return "---"
        if tok.type in ("fence", "colon_fence") and tok.info.strip().startswith("{"):
            m = re.match(r"\{([^}]+)\}\s*(.*)", tok.info.strip())
            options, body = split_directive(tok.content)
            return self._directive(m.group(1).strip(), m.group(2).strip(), options, body)
        text = "\n".join(lines)
        if tok.type in ("fence", "code_block", "math_block", "math_block_label", "amsmath", "html_block"):
            if tok.type == "math_block_label":   # $$ ... $$ (label): Jupyter has no labels
                text = re.sub(r"\$\$\s*\([^)]*\)\s*$", "$$", text.rstrip())
            return text
        for t in block:
            for child in (t.children or []) if t.type == "inline" else []:
                if child.type == "myst_role":
                    text = self._replace_role(text, child.meta["name"], child.content)
                elif child.type == "link_open":
                    text = self._relink(text, str(child.attrs.get("href", "")))
        return text

    def _relink(self, text: str, href: str) -> str:
        """A link to another page of the book (``[](chapters/02_x.md)``, ``[text](02_x.md)``)
        points to that page's notebook, and an empty text gets the page's title, as MyST does."""
        target, _, anchor = href.partition("#")
        if not target.endswith(".md") or re.match(r"^[a-z][\w+.-]*:", target):
            return text
        path = (self.source_dir / target).resolve()
        new = Path(target).stem + ".ipynb" + (f"#{anchor}" if anchor else "")
        title = Path(target).stem
        if path.is_file():
            m = re.search(r"^# (.+)$", path.read_text(encoding="utf-8"), re.M)
            title = m.group(1).strip() if m else title
            if "{bibliography}" in path.read_text(encoding="utf-8"):   # no notebook: each lists its own works
                new = "#Works-cited-in-this-notebook"
        return text.replace(f"[]({href})", f"[{title}]({new})").replace(f"]({href})", f"]({new})")

    def _label(self, label: str) -> str:
        """A bare ``{ref}`` as MyST renders it: the title of the section the label names, linked to
        that page's notebook (a label the book does not define stays as written, and is reported)."""
        target = book_labels().get(label)
        if target is None:
            self.unknown.add("{ref} " + label)
            return label
        page, title = target
        return f"[{title}]({Path(page).name}.ipynb)"

    def _replace_role(self, text: str, name: str, content: str) -> str:
        pattern = re.compile(r"\{" + re.escape(name) + r"\}(`+)" +
                             r"\s+".join(re.escape(part) for part in content.split()) + r"\1")
        return pattern.sub(lambda _m: self._role(name, content), text, count=1)

    # ---- directives ---------------------------------------------------------------------
    def _directive(self, name: str, arg: str, options: dict, body: str) -> str:
        name = name.lower()
        if name in DROPPED_DIRECTIVES:
            return ""
        if name == "only":
            return self._blocks(body) if only_applies(arg) else ""
        if name == "include":
            path = (self.source_dir / arg).resolve()
            return self._blocks(_strip_front_matter(path.read_text(encoding="utf-8")))
        if name == "literalinclude":
            return self._literalinclude(arg, options)
        if name == "exercise":
            number = len(self.exercises) + 1
            self.exercises[str(options.get("label", f"exercise-{number}"))] = (number, arg)
            head = f"**Exercise {number}" + (f": {arg}**" if arg else "**")
            return quote(head + "\n\n" + self._blocks(body))
        if name == "solution":
            number, title = self.exercises.get(arg, (None, ""))
            summary = f"<b>Solution</b> to Exercise {number}" if number else "<b>Solution</b>"
            summary += " (click to open)"
            return f"<details>\n<summary>{summary}</summary>\n\n{self._blocks(body)}\n\n</details>"
        if name in ("dropdown", "toggle") or (name in ADMONITIONS and "dropdown" in str(options.get("class", ""))):
            title = arg or name.capitalize()
            return f"<details>\n<summary>{html.escape(title)}</summary>\n\n{self._blocks(body)}\n\n</details>"
        if name in ADMONITIONS:
            title = arg if name == "admonition" else (name.capitalize() + (f": {arg}" if arg else ""))
            title = self._blocks(title).strip() if title else ""
            inner = self._blocks(body)
            return quote((f"**{title}**\n\n" if title else "") + inner)
        if name in ("math",):
            return f"$$\n{body}\n$$"
        if name in ("code-block", "code", "sourcecode", "code-cell"):
            return f"```{arg.split()[0] if arg else ''}\n{body}\n```"
        if name in ("figure", "image"):
            image = self._image_file(arg, options)
            caption = self._blocks(body).strip() if body else ""
            return image + (f"\n\n*Figure: {caption}*" if caption else "")
        if name.startswith("glue"):
            return self._glue_directive(name, arg, options, body)
        if name == "raw":
            return body if "html" in arg.lower() else ""
        if name == "epigraph":
            return quote(self._blocks(body))
        # an unknown directive: its title and body stay readable
        self.unknown.add(name)
        title = f"**{arg or name.capitalize()}**\n\n" if (arg or name) else ""
        return title + self._blocks(body)

    def _literalinclude(self, arg: str, options: dict) -> str:
        """A ``{literalinclude}`` as the book shows it: the selected code as a fenced block under
        a caption line naming the file (and the object), so that prose walking through the
        code has the code beside it.  Options as Sphinx reads them, in its order:
        ``:pyobject:``, ``:start-at:`` / ``:start-after:``, ``:end-at:`` / ``:end-before:``,
        ``:lines:``, ``:dedent:``; ``:language:`` and ``:caption:`` are shown."""
        path = (self.source_dir / arg).resolve()
        if not path.is_file():
            path = (ROOT / arg.lstrip("/")).resolve()
        code = select_included(path.read_text(encoding="utf-8"), options, str(arg))
        language = str(options.get("language", "python" if path.suffix == ".py" else ""))
        shown = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
        caption = f"`{shown}`"
        if options.get("pyobject"):
            caption += f", `{options['pyobject']}`"
        elif options.get("lines"):
            caption += f", lines {options['lines']}"
        if options.get("caption"):
            caption = f"{self._blocks(str(options['caption'])).strip()} ({caption})"
        fence = "````" if "```" in code else "```"
        return f"*{caption}:*\n\n{fence}{language}\n{code}\n{fence}"

    def _attach(self, mime: str, data_b64: str, stem: str, alt: str) -> str:
        ext = mimetypes.guess_extension(mime) or ".bin"
        fname = f"{stem}-{hashlib.sha256(data_b64.encode()).hexdigest()[:10]}{ext}"
        self._attachments[fname] = {mime: data_b64}
        return f"![{alt}](attachment:{fname})"

    def _image_file(self, arg: str, options: dict) -> str:
        alt = str(options.get("alt", ""))
        if re.match(r"https?://", arg):
            return f"![{alt}]({arg})"
        path = (self.source_dir / arg).resolve()
        if not path.is_file():
            path = (ROOT / arg.lstrip("/")).resolve()
        mime = mimetypes.guess_type(path.name)[0] or "image/png"
        return self._attach(mime, base64.b64encode(path.read_bytes()).decode(), path.stem, alt)

    def _glue(self, key: str) -> dict:
        if key not in self.glue:
            raise GlueError(f"glued value {key!r} was not recorded by the page's executed run")
        return self.glue[key]

    def _glue_directive(self, name: str, key: str, options: dict, body: str) -> str:
        data = self._glue(key)
        if name == "glue:math":
            return f"$$\n{data.get('text/latex', data.get('text/plain', '')).strip('$')}\n$$"
        out = self._bundle_markdown(data, key, str(options.get("alt", "")))
        if name == "glue:figure" and body:
            out += f"\n\n*Figure: {self._blocks(body).strip()}*"
        return out

    def _bundle_markdown(self, data: dict, key: str, alt: str = "") -> str:
        if "text/markdown" in data:
            return self._blocks(_join(data["text/markdown"]))
        for mime in ("image/png", "image/jpeg", "image/gif"):
            if mime in data:
                b64 = _join(data[mime]).replace("\n", "")
                return self._attach(mime, single_png(b64) if mime == "image/png" else b64, key, alt or key)
        if "image/svg+xml" in data:
            return self._attach("image/svg+xml", base64.b64encode(_join(data["image/svg+xml"]).encode()).decode(), key, alt or key)
        if "text/html" in data and "<script" not in _join(data["text/html"]):
            return _join(data["text/html"])
        if "text/latex" in data:
            return f"$$\n{_join(data['text/latex']).strip('$')}\n$$"
        return "```\n" + _join(data.get("text/plain", "")) + "\n```"

    # ---- roles --------------------------------------------------------------------------
    def _role(self, name: str, content: str) -> str:
        name = name.lower()
        if name in ("glue", "glue:", "glue:any", "glue:text"):
            key, _, fmt = content.partition(":")
            data = self._glue(key.strip())
            if name == "glue:text" or "text/markdown" not in data:
                return format_plain_text(_join(data.get("text/plain", "")), fmt)
            return _join(data["text/markdown"]).strip()
        if name == "glue:md":
            data = self._glue(content.partition(":")[0].strip())
            return self._blocks(_join(data.get("text/markdown", data.get("text/plain", "")))).strip()
        if name == "glue:math":
            data = self._glue(content.strip())
            return "$" + _join(data.get("text/latex", data.get("text/plain", ""))).strip("$") + "$"
        if name.startswith("cite"):
            return self._cite(name, content)
        if name == "math":
            return f"${content}$"
        if name == "eq":
            return f"({_target_text(content)})"
        if name in ("ref", "numref") and "<" not in content:     # a bare label: the section's title, linked
            return self._label(content.strip())
        if name in ("ref", "numref", "doc", "term", "any", "download", "prf:ref", "external"):
            return _target_text(content)
        if name in ("sub", "subscript"):
            return f"<sub>{html.escape(content)}</sub>"
        if name in ("sup", "superscript"):
            return f"<sup>{html.escape(content)}</sup>"
        if name == "abbr":
            return re.sub(r"\s*\(.*\)\s*$", "", content)
        if name == "kbd":
            return f"<kbd>{html.escape(content)}</kbd>"
        if name in ("code", "literal", "samp", "file", "command", "program", "envvar"):
            return f"`{content}`"
        self.unknown.add("{" + name + "}")
        return content

    def _cite(self, name: str, content: str) -> str:
        keys = [k.strip() for k in content.split(",") if k.strip()]
        parts = []
        for key in keys:
            if key not in self.cited:
                self.cited.append(key)
            entry = self.bib.get(key, {"author": key, "year": ""})
            author, year = cite_author(entry), entry.get("year", "n.d.")
            parts.append((author, year))
        variant = name.partition(":")[2]
        if variant in ("t", "ts", "alt", "alts"):
            return ", ".join(f"{a} ({y})" for a, y in parts)
        if variant in ("author", "authors"):
            return ", ".join(a for a, _ in parts)
        if variant in ("year", "yearpar"):
            return ", ".join(y for _, y in parts)
        return "(" + "; ".join(f"{a}, {y}" for a, y in parts) + ")"


def _line_numbers(spec: str, n: int) -> list[int]:
    """Sphinx's ``:lines:`` (``"1-3,7,10-"``, 1-based, inclusive) as 0-based indices."""
    out = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, _, b = part.partition("-")
            out += range(int(a) - 1 if a.strip() else 0, int(b) if b.strip() else n)
        else:
            out.append(int(part) - 1)
    if not out or min(out) < 0 or max(out) >= n:
        raise ValueError(f":lines: {spec} selects lines outside the {n} lines of the file")
    return out


def select_included(text: str, options: dict, name: str = "the file") -> str:
    """The part of ``text`` a ``{literalinclude}`` with ``options`` shows (Sphinx's
    LiteralIncludeReader order: pyobject, start, end, lines, dedent).

    Raises:
        ValueError: an object, a marker or a line range that the file does not have (the
            book build fails on it too), so that a notebook never shows the wrong code."""
    lines = text.splitlines()
    if options.get("pyobject"):
        import ast
        target = str(options["pyobject"]).split(".")
        body, node = ast.parse(text).body, None
        for part in target:
            node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                         and n.name == part), None)
            if node is None:
                raise ValueError(f":pyobject: {options['pyobject']} is not defined in {name}")
            body = node.body
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        lines = lines[start:node.end_lineno]
    for key in ("start-at", "start-after"):
        if options.get(key):
            i = next((i for i, ln in enumerate(lines) if str(options[key]) in ln), None)
            if i is None:
                raise ValueError(f":{key}: {options[key]!r} not found in {name}")
            lines = lines[i if key == "start-at" else i + 1:]
    for key in ("end-at", "end-before"):
        if options.get(key):
            i = next((i for i, ln in enumerate(lines) if str(options[key]) in ln), None)
            if i is None:
                raise ValueError(f":{key}: {options[key]!r} not found in {name}")
            lines = lines[:i + 1 if key == "end-at" else i]
    if options.get("lines"):
        lines = [lines[i] for i in _line_numbers(options["lines"], len(lines))]
    if options.get("dedent"):
        k = int(options["dedent"])
        lines = [ln[k:] if ln[:k].strip() == "" else ln.lstrip() for ln in lines]
    return "\n".join(lines).strip("\n")


def only_applies(expression: str, tags=NOTEBOOK_TAGS) -> bool:
    """Sphinx's ``only`` expression (tags with ``and``, ``or``, ``not``, parentheses) evaluated
    for a notebook."""
    words = re.findall(r"\(|\)|[\w.-]+", expression)
    code = " ".join(w if w in ("(", ")", "and", "or", "not") else str(w in tags) for w in words)
    try:
        return bool(eval(code or "False", {"__builtins__": {}}))  # noqa: S307 - only True/False/and/or/not
    except SyntaxError:
        return False


def _join(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _target_text(content: str) -> str:
    """``text <target>`` -> ``text``; ``target`` -> ``target``."""
    m = re.match(r"^(.*?)\s*<([^>]*)>$", content.strip(), re.S)
    return m.group(1) if m and m.group(1) else (m.group(2) if m else content)


def _strip_front_matter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end != -1:
            return text[end + 4:].lstrip("\n")
    return text



# --------------------------------------------------------------------------------------------
# Cells and outputs
# --------------------------------------------------------------------------------------------

def learner_source(source: str) -> str:
    """A code cell's source as the notebook runs it (the glue import replaced by GLUE_SHIM)."""
    return _GLUE_IMPORT.sub(lambda _m: GLUE_SHIM, source)



RUN_NOTE = {"text/markdown": "*(Run this cell to show the interactive widget: a saved widget has no kernel behind it.)*",
            "text/plain": "(Run this cell to show the interactive widget.)"}


def single_png(data_b64: str) -> str:
    """A figure PNG (base64) without the phone and zoom renderings the book build packs into
    it (:func:`attnlib.plotting.strip_variants`): a learner's notebook holds one rendering."""
    raw = base64.b64decode(data_b64)
    if b"atVr" not in raw:   # attnlib.plotting.CHUNK_TYPE: nothing packed (the common case outside the book)
        return data_b64
    from attnlib.plotting import strip_variants
    return base64.b64encode(strip_variants(raw)).decode("ascii")


def learner_outputs(outputs: list) -> list:
    """Outputs as the notebook keeps them: glue records dropped, widget views replaced by a
    note to run the cell (also their page-only HTML twin), errors kept."""
    import nbformat
    kept, noted = [], False
    for out in outputs:
        out = copy.deepcopy(out)
        meta = out.get("metadata", {})
        if "scrapbook" in meta:
            if meta["scrapbook"].get("mime_prefix"):
                continue
            meta.pop("scrapbook")
        data = out.get("data", {})
        if "image/png" in data:
            data["image/png"] = single_png(_join(data["image/png"]).replace("\n", ""))
        if WIDGET_VIEW in data:
            if not noted:
                kept.append(nbformat.v4.new_output("display_data", data=dict(RUN_NOTE)))
                noted = True
            continue
        kept.append(nbformat.from_dict(out))
    return kept


HIDDEN_CELL_NOTE = "# Set-up and checking code, hidden as in the book (click the bar to show it)."
HIDDEN_INPUT_NOTE = "# The code of the output below, hidden as in the book (click the bar to show it)."
HIDE_SOURCE = {"remove-cell", "hide-cell", "remove-input", "hide-input"}
HIDE_OUTPUT = {"remove-cell", "hide-cell", "remove-output", "hide-output"}
DROP_OUTPUT = {"remove-cell", "remove-output"}



# mybinder.org's resources per session, from its deployment configuration (the BinderHub chart
# values of jupyterhub/mybinder.org-deploy: singleuser memory guarantee "450M", limit "2G", CPU
# limit 1, as issue 45 reports them).  KubeSpawner reads "450M" and "2G" in powers of 1024
# (jupyterhub.traitlets.ByteSpecification): 450 MiB and 2 GiB.  The guarantee is memory the session
# always has; above it the session runs on memory its machine has spare (Kubernetes stops a pod above
# its request first when the machine runs short); at the limit the kernel is killed.  The ONE place
# for these figures: the notebooks' first cell (memory_note), bench/readme_figures.py (README) and
# bench/bench_binder.py (the kernels run on BINDER_CPUS core) read them from here.
BINDER_GUARANTEE, BINDER_CAP, BINDER_CPUS = 450 * 2**20, 2 * 2**30, 1
BINDER_SOURCE = ("mybinder.org's deployment configuration (jupyterhub/mybinder.org-deploy: memory guarantee 450M, "
                 "limit 2G, 1 CPU; M and G in powers of 1024)")
#: A kernel that peaks above this (MiB) needs more than the guarantee on its own: its notebook's
#: first cell and the README say to run that chapter alone.
HEAVY_MIB = BINDER_GUARANTEE // 2**20
BINDER_RECORD = ROOT / "bench" / "results" / "binder.json"
#: bench/bench_model_cache.py's record: how long chapter 7's runs take to train, and to load.
MODEL_CACHE_RECORD = ROOT / "bench" / "results" / "model_cache.json"
#: Code that trains or loads chapter 7's models (attnlib.induction.train / trained, and the
#: circuit lab, which loads them): a page whose code matches gets the trained-models note.
USES_TRAINED_MODELS = re.compile(r"\binduction\.train(?:ed)?\(|\bcircuit_lab\b")


def _binder_record(record: Path) -> dict:
    try:
        return json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def binder_peak_mib(page: str, record: Path = BINDER_RECORD) -> int | None:
    """The kernel peak (MiB) that ``bench/bench_binder.py`` recorded for ``page``'s notebook in
    the Binder environment, or ``None`` when there is no record of it."""
    try:
        rows = _binder_record(record)["execute"]["notebooks"]
    except (KeyError, TypeError):
        return None
    name = notebook_name(page)
    return next((int(r["peak_mib"]) for r in rows if r.get("notebook") == name and "peak_mib" in r), None)


def mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:,.0f} MiB"


def memory_note(page: str, record: Path = BINDER_RECORD) -> str:
    """A sentence for the notebook's first cell: its kernel's measured peak in the Binder
    environment against mybinder.org's guarantee and limit ('' when the record has no peak for it).
    Above :data:`HEAVY_MIB` the kernel alone needs more than the guarantee: run it alone."""
    peak = binder_peak_mib(page, record)
    if peak is None:
        return ""
    data = _binder_record(record)
    server = (data.get("server") or {}).get("rss_mib")
    when = f"{data.get('date', '')[:10]}, " if data.get("date") else ""
    measured = (f"this chapter's kernel needed up to {peak:,} MiB when it was run in the Binder environment "
                f"({when}`bench/results/binder.md`)"
                + (f", and JupyterLab's server {server:,} MiB more" if server else ""))
    if peak <= HEAVY_MIB and (peak + (server or 0)) * 2**20 <= BINDER_GUARANTEE:
        return (f"  **Memory:** {measured}: within the {mib(BINDER_GUARANTEE)} mybinder.org guarantees a session.")
    return (f"  **Memory:** {measured}; mybinder.org guarantees a session {mib(BINDER_GUARANTEE)} and stops the "
            f"kernel at {mib(BINDER_CAP)}.  Above the guarantee a session runs on memory its machine has spare, "
            "and it is the first to be stopped when that machine runs short, so keep this kernel the only one "
            "running: run it on its own.  JupyterLab keeps the kernel of a closed tab alive, so shut down the "
            "other notebooks' kernels first (**Kernel → Shut Down All Kernels** before you start, or the "
            "Running panel).")


def training_note(page: str, source_nb=None, record: Path = MODEL_CACHE_RECORD) -> str:
    """For a page whose code trains or loads chapter 7's models: what its first training cell will
    do (load them from the trained-model cache, or train them once), with the measured times of
    ``bench/bench_model_cache.py`` ('' for other pages)."""
    if source_nb is None:
        import jupytext
        source_nb = jupytext.read(ROOT / f"{page}.md")
    if not any(c.cell_type == "code" and USES_TRAINED_MODELS.search(c.source) for c in source_nb.cells):
        return ""
    try:
        mc = json.loads(record.read_text(encoding="utf-8"))
        runs = sorted(mc["rows"], key=lambda r: -r["n_layers"])
        m = mc["meta"]
        longest = max(r["train_seconds"] for r in runs)
        times = (" (" + " and ".join(f"the {r['n_layers']}-layer model took {r['train_seconds']:.0f} s" for r in runs)
                 + f", about {longest / 60:.1f} minutes at most, on one CPU thread here: {m['machine']}, {m['date']}, "
                 "`bench/results/model_cache.md`)")
    except (OSError, ValueError, KeyError, TypeError):
        times = ""
    return ("  **Trained models:** this chapter uses chapter 7's small trained models.  When they are in the "
            "trained-model cache (`$ATTNLIB_CACHE`, else `~/.cache/attnlib`; on Binder the image's, filled when it "
            "was built), its training cells load them in a fraction of a second and say \"loaded from the "
            "trained-model cache\", after a kernel restart too.  When they are not, the first such cell trains "
            f"them once, with a progress bar{times}, and stores them; later runs load them.")


def header_cell(page: str, source_nb=None):
    import nbformat
    text = (f"*A notebook of the course, generated by `make notebooks` from `{page}.md` (the book's "
            "source, which this notebook never changes: your edits and saves stay in this file; "
            "once you have changed it, `make notebooks` and `make clean` leave it alone, and a "
            "newer version of the course is written beside it as a `.new.ipynb` file).* "
            "Run it from the top: **Run → Run All Cells**.  Numbers quoted in the text come from "
            "the run that generated this notebook.  Cells shown as a bar with **⋯** are set-up "
            "and checking code (click the bar to open one); solutions are folded under "
            "**Solution**: open one when you want it." + memory_note(page) + training_note(page, source_nb))
    return nbformat.v4.new_markdown_cell(text, metadata={"tags": ["generated-note"]})



def notebook_name(page: str) -> str:
    """``chapters/05_masking`` -> ``05_masking.ipynb``; ``intro`` -> ``intro.ipynb``."""
    return Path(page).name + ".ipynb"


def convert(page: str, source_nb, outputs: list, glue: dict, log=print):
    """The learner notebook of ``page`` (e.g. ``"chapters/05_masking"``) as an nbformat node.

    Args:
        page: the page as in :func:`toc_pages` (its source is ``<page>.md``; includes, images
            and links resolve from its folder).
        source_nb: the page read by jupytext.
        outputs: the outputs of every code cell of ``source_nb``, in order (from
            ``notebook_run.executed_run``: the book build's run or one made here).
        glue: ``name -> mime bundle`` of the glued values of that run.
        log: where the names of constructs kept as plain text are reported.

    Raises:
        GlueError: the prose refers to a glued value that ``glue`` lacks.
    """
    import nbformat
    src_path = ROOT / f"{page}.md"
    renderer = MystToMarkdown(glue, read_bib(ROOT / "references.bib"), src_path.parent)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": source_nb.metadata.get("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"}),
                   "language_info": {"name": "python"},
                   "attnlib_course": {"source": f"{page}.md", "generated_by": "_ext/make_notebooks.py"}}
    nb.metadata["kernelspec"].setdefault("language", "python")
    nb.cells.append(header_cell(page, source_nb))
    code_index = 0
    for cell in source_nb.cells:
        if cell.cell_type == "markdown" or cell.cell_type == "raw":
            text, attachments = renderer.render(cell.source)
            if not text.strip() and not attachments:
                continue
            md = nbformat.v4.new_markdown_cell(text)
            if attachments:
                md["attachments"] = attachments
            nb.cells.append(md)
            continue
        tags = set(cell.metadata.get("tags", []))
        meta = {k: v for k, v in cell.metadata.items() if k not in ("mystnb",)}
        jmeta = {}
        if tags & HIDE_SOURCE:
            jmeta["source_hidden"] = True
        if tags & HIDE_OUTPUT:
            jmeta["outputs_hidden"] = True
        if jmeta:
            meta["jupyter"] = jmeta
            meta["collapsed"] = bool(jmeta.get("outputs_hidden"))
        source = learner_source(cell.source)
        if jmeta.get("source_hidden"):
            # JupyterLab shows a collapsed cell's first line: make it this note, not the code
            # (the first line of a checking cell can be an assert that gives an answer away)
            source = (HIDDEN_CELL_NOTE if tags & (HIDE_OUTPUT & HIDE_SOURCE) else HIDDEN_INPUT_NOTE) + "\n" + source
        code = nbformat.v4.new_code_cell(source, metadata=meta)
        outs = outputs[code_index] if code_index < len(outputs) else []
        code_index += 1
        code.outputs = [] if tags & DROP_OUTPUT else learner_outputs(outs)
        nb.cells.append(code)
        caption = (cell.metadata.get("mystnb", {}).get("figure", {}) or {}).get("caption")
        if caption and not tags & DROP_OUTPUT:
            nb.cells.append(nbformat.v4.new_markdown_cell(
                f"*Figure: {renderer.render_inline(caption).strip()}*", metadata={"tags": ["figure-caption"]}))
    if renderer.cited:
        lines = [f"* {reference_line(k, renderer.bib[k])}" if k in renderer.bib else f"* {k}" for k in renderer.cited]
        nb.cells.append(nbformat.v4.new_markdown_cell("## Works cited in this notebook\n\n" + "\n".join(lines),
                                                      metadata={"tags": ["references"]}))
    if renderer.unknown:
        log(f"{page}: kept as plain text (no special rendering): {', '.join(sorted(renderer.unknown))}")
    nbformat.validate(nb)
    return nb

