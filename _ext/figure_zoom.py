"""Sphinx extension: every figure image is a link to its full-size file.

Figures are drawn for the desktop column and shown there at their natural size; on a phone
the page shrinks them to the column (max-width 100%), and a tap on the figure then opens
the PNG itself, at full size, where the browser can zoom it.  Sphinx links only images that
carry ``:scale:``, ``:width:`` or ``:height:`` (``html_scaled_image_link``); this extension
links the images of every ``figure`` (the cell outputs that MyST-NB wraps in a figure with
its ``mystnb: figure:`` caption), the same way: a ``reference`` node around the image whose
address is the copied file under ``_images/``.  Images already inside a link are left alone.
"""
from __future__ import annotations

import posixpath

from docutils import nodes

TITLE = "Open the figure at full size"


def _link_figure_images(builder, doctree) -> None:
    for image in list(doctree.findall(nodes.image)):
        if isinstance(image.parent, nodes.reference) or not isinstance(image.parent, nodes.figure):
            continue
        uri = image["uri"]
        target = posixpath.join(builder.imgpath, builder.images[uri]) if uri in builder.images else uri
        link = nodes.reference("", "", internal=True, refuri=target, reftitle=TITLE, classes=["figure-zoom"])
        image.replace_self(link)
        link.append(image)


def _install(app) -> None:
    builder = app.builder
    if not hasattr(builder, "imgpath"):  # not an HTML builder
        return
    original = builder.post_process_images

    def post_process_images(doctree):
        original(doctree)          # collects the images and sets their _images/ names
        _link_figure_images(builder, doctree)

    builder.post_process_images = post_process_images


def setup(app):
    app.connect("builder-inited", _install)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
