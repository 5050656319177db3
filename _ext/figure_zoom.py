"""Sphinx extension: every figure is shown in the rendering drawn for the reader's column, and
a tap opens a sharper one to zoom into.

The book's figures are drawn by :func:`attnlib.plotting.book_style`'s notebook formatter.  In
the book build (this extension sets :data:`attnlib.plotting.VARIANTS_ENV` before any kernel
starts) each figure's PNG output carries two more renderings of the same figure inside
private PNG chunks (:func:`attnlib.plotting.pack_variants`): ``phone``, redrawn for the
phone's column at 2x density, and ``zoom``, the desktop layout at 3x density.  Here, for
every image of a ``figure`` (the cell outputs MyST-NB wraps in a figure with their
``mystnb: figure:`` caption):

* the image becomes ``<picture><source media="PHONE_MEDIA" srcset="…-phone.png 2x"><img
  src="….png"></picture>``: a browser whose window matches :data:`PHONE_MEDIA` downloads the
  phone file only, any other the desktop file only;
* the image is a link (``<a class="figure-zoom">``) to the zoom file, which is downloaded
  only when the reader taps; a figure without variants links to its own PNG, as before;
* the ``_images/`` copy of the desktop PNG is written without the packed renderings (the
  page ships only what it shows), and the two renderings are written next to it as
  ``<name>-phone.png`` and ``<name>-zoom.png``.

Images already inside a link, and images outside figures, are left alone.
"""
from __future__ import annotations

import os
import posixpath
from pathlib import Path

from docutils import nodes

from attnlib.plotting import PHONE_DENSITY, VARIANTS_ENV, strip_variants, unpack_variants

TITLE = "Open the figure at full size"
# Windows narrower than this get the phone rendering: from 720 px up the article column is
# at least 688 CSS px (Chromium, pydata-sphinx-theme), wider than every desktop rendering.
PHONE_MEDIA = "(max-width: 719.98px)"


def variant_names(stem_name: str) -> dict[str, str]:
    """``{"phone": ..., "zoom": ...}``: the ``_images/`` file names of the renderings of the
    desktop image ``stem_name`` (``abc.png`` -> ``abc-phone.png``, ``abc-zoom.png``)."""
    stem, ext = posixpath.splitext(stem_name)
    return {"phone": f"{stem}-phone{ext}", "zoom": f"{stem}-zoom{ext}"}


def _variants_in(path: Path) -> frozenset[str]:
    try:
        data = path.read_bytes()
        return frozenset(unpack_variants(data)) if data[:8] == b"\x89PNG\r\n\x1a\n" else frozenset()
    except (OSError, ValueError):
        return frozenset()


class figure_link(nodes.General, nodes.Element):
    """A figure's image as a link (``href``) that opens its zoom file, wrapped in a
    ``<picture>`` with a ``<source>`` (``phone``: its srcset) when it has a phone rendering."""


def visit_figure_link(self, node: figure_link) -> None:
    self.body.append(f'<a class="figure-zoom reference internal image-reference" href="{node["href"]}" '
                     f'title="{TITLE}">')
    if node.get("phone"):
        self.body.append(f'<picture><source media="{PHONE_MEDIA}" srcset="{node["phone"]}">')


def depart_figure_link(self, node: figure_link) -> None:
    self.body.append("</picture></a>\n" if node.get("phone") else "</a>\n")


def picture_node(image: nodes.image, imgpath: str, names: dict[str, str], have: frozenset[str]) -> figure_link:
    """The node that replaces ``image`` (a node of a figure) in the doctree: a link to the
    zoom file when ``have`` holds ``zoom``, else to the image itself; with a ``<source>`` of
    the phone file at :data:`attnlib.plotting.PHONE_DENSITY` when ``have`` holds ``phone``.
    ``imgpath`` is the page's relative path to ``_images/``; ``names`` the desktop file
    (``"desktop"``) and :func:`variant_names`."""
    node = figure_link(href=posixpath.join(imgpath, names["zoom" if "zoom" in have else "desktop"]),
                       phone=(f"{posixpath.join(imgpath, names['phone'])} {PHONE_DENSITY}x"
                              if "phone" in have else ""))
    node += image.deepcopy()
    return node


def _link_figure_images(builder, doctree) -> None:
    found = builder.__dict__.setdefault("_figure_variants", {})   # desktop name -> (source, renderings)
    for image in list(doctree.findall(nodes.image)):
        if isinstance(image.parent, nodes.reference) or not isinstance(image.parent, nodes.figure):
            continue
        uri = image["uri"]
        if uri not in builder.images:   # not a local file (a URL): link it as it is
            link = nodes.reference("", "", internal=True, refuri=uri, reftitle=TITLE, classes=["figure-zoom"])
            image.replace_self(link)
            link.append(image)
            continue
        name = builder.images[uri]
        source = Path(builder.srcdir, uri)
        have = _variants_in(source) if name.lower().endswith(".png") else frozenset()
        if have:
            found[name] = (source, have)
        image.replace_self(picture_node(image, builder.imgpath, {"desktop": name, **variant_names(name)}, have))


def write_variants(outdir: Path, name: str, source: Path) -> list[str]:
    """Write the renderings packed in ``source`` to ``outdir`` (:func:`variant_names` of
    ``name``) and ``outdir/name`` as ``source`` without them.  Returns the names written.

    Raises:
        OSError: ``source`` cannot be read or ``outdir`` written.
        ValueError: ``source`` is not a PNG file.
    """
    data = source.read_bytes()
    written = []
    for key, png in unpack_variants(data).items():
        target = variant_names(name).get(key)
        if target:
            (outdir / target).write_bytes(png)
            written.append(target)
    (outdir / name).write_bytes(strip_variants(data))
    return [name, *written]


def _install(app) -> None:
    builder = app.builder
    if not hasattr(builder, "imgpath"):  # not an HTML builder
        return
    original_post, original_copy = builder.post_process_images, builder.copy_image_files

    def post_process_images(doctree):
        original_post(doctree)          # collects the images and sets their _images/ names
        _link_figure_images(builder, doctree)

    def copy_image_files():
        original_copy()
        outdir = Path(builder.outdir, builder.imagedir)
        for name, (source, _) in sorted(builder.__dict__.get("_figure_variants", {}).items()):
            write_variants(outdir, name, source)

    builder.post_process_images = post_process_images
    builder.copy_image_files = copy_image_files


def setup(app):
    os.environ[VARIANTS_ENV] = "1"   # before any kernel starts: figures carry their renderings
    app.add_node(figure_link, html=(visit_figure_link, depart_figure_link))
    app.connect("builder-inited", _install)
    return {"version": "2.0", "parallel_read_safe": True, "parallel_write_safe": True}
