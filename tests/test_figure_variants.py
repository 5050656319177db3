"""Each book figure in three renderings (desktop, phone, zoom) and the Sphinx extension that
puts them on the page (``_ext/figure_zoom.py``).  Fast: no book build; the extension is run
on a one-page Sphinx project.  The built book is checked by ``test_page_figures.py``."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from attnlib.plotting import (  # noqa: E402
    DPI, MIN_TEXT_KEY, PHONE_DENSITY, PHONE_PX, VARIANT_KEY, VARIANTS_ENV, ZOOM_DENSITY, attention_heatmap,
    book_style, figure_png, pack_variants, panels, reflow_for_phone, render_png, render_variants, strip_variants,
    unpack_variants,
)

ROOT = Path(__file__).resolve().parents[1]
TOKENS = "[CLS] the cat sat on the mat because it was warm . [SEP]".split()
PHONE_FLOOR_PX = 9.0   # smallest text on screen at a 390 px window (issue 26)


@pytest.fixture(autouse=True)
def _style():
    with matplotlib.rc_context():
        book_style()
        yield
        plt.close("all")


@pytest.fixture(scope="module")
def variants():
    """The three renderings of two side-by-side heatmaps (drawn once for the module)."""
    with matplotlib.rc_context():
        book_style()
        fig, _ = two_heatmaps()
        before = render_png(fig)
        out = render_variants(fig)
        out["_after"] = render_png(fig)   # the figure drawn again after its phone reflow
        out["_before"] = before
        plt.close(fig)
    return out


def weights(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, n)) * 2
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def two_heatmaps():
    fig, axes = panels(2, ncols=2, panel_height=3.4)
    attention_heatmap(weights(6), TOKENS[:6], ax=axes[0], title="weights of one head")
    attention_heatmap(weights(6, 1), TOKENS[6:12], ax=axes[1], title="the same sentence, another head")
    return fig, axes


def info(png: bytes) -> tuple[dict, tuple[int, int], float]:
    with Image.open(io.BytesIO(png)) as im:
        return dict(im.text), im.size, float(im.info["dpi"][0])


def on_screen(png: bytes, density: float, column_css_px: float = PHONE_PX) -> float:
    """Smallest text in CSS px of ``png`` shown at ``density`` image px per CSS px, shrunk to
    ``column_css_px`` when wider."""
    text, (w, _), _ = info(png)
    css_w = w / density
    return float(text[MIN_TEXT_KEY]) / density * min(1.0, column_css_px / css_w)


# ---------------------------------------------------------------------- the three renderings
def test_render_variants_draws_desktop_phone_and_zoom_each_with_its_own_smallest_text(variants):
    v = {k: b for k, b in variants.items() if not k.startswith("_")}
    assert set(v) == {"desktop", "phone", "zoom"}
    for name, png in v.items():
        text, _, _ = info(png)
        assert text[VARIANT_KEY] == name and float(text[MIN_TEXT_KEY]) > 0, name
    (_, (dw, dh), ddpi), (_, (pw, ph), pdpi), (_, (zw, zh), zdpi) = (info(v[k]) for k in ("desktop", "phone", "zoom"))
    assert (ddpi, pdpi, zdpi) == pytest.approx((DPI, PHONE_DENSITY * DPI, ZOOM_DENSITY * DPI), abs=0.5)
    # the zoom file is the desktop layout at ZOOM_DENSITY x the pixels, text included
    assert zw == pytest.approx(ZOOM_DENSITY * dw, abs=ZOOM_DENSITY + 1)
    assert float(info(v["zoom"])[0][MIN_TEXT_KEY]) == pytest.approx(ZOOM_DENSITY * float(info(v["desktop"])[0][MIN_TEXT_KEY]), rel=1e-3)
    # the phone file fits the phone's column at its density, and its text is at least 9 px there
    assert pw / PHONE_DENSITY <= PHONE_PX
    assert on_screen(v["phone"], PHONE_DENSITY) >= PHONE_FLOOR_PX
    assert on_screen(v["desktop"], 1) < PHONE_FLOOR_PX       # what a phone showed before (about 5.8 px)
    assert ph / PHONE_DENSITY > dh                             # two panels stacked: taller than the desktop one
    # and the figure itself is left in its desktop layout
    assert variants["_after"] == variants["_before"]


def test_reflow_stacks_a_grid_in_reading_order_and_puts_colorbars_below():
    fig, (a, b) = two_heatmaps()
    fig.canvas.draw()
    left, right = a.get_position(), b.get_position()
    assert right.x0 > left.x1                                   # side by side
    restore = reflow_for_phone(fig)
    fig.canvas.draw()
    top, bottom = a.get_position(), b.get_position()
    assert bottom.y1 < top.y0                                   # a above b, one column
    cbars = [ax for ax in fig.axes if hasattr(ax, "_colorbar")]
    assert cbars and all(ax._colorbar.orientation == "horizontal" for ax in cbars)
    assert all(ax.get_position().y1 <= parent.get_position().y0 + 1e-6
               for ax, parent in zip(cbars, (a, b)))            # each bar under its heatmap
    restore()
    assert a.get_position().bounds == pytest.approx(left.bounds, abs=1e-3)
    assert b.get_position().bounds == pytest.approx(right.bounds, abs=1e-3)
    assert all(ax._colorbar.orientation == "vertical" for ax in cbars)


def test_reflowed_tick_labels_and_texts_do_not_touch():
    """Thirteen token labels under a heatmap half the desktop width: none overlaps another,
    no title runs past the figure, and the cell values that no longer fit are hidden."""
    fig = attention_heatmap(weights(13), TOKENS, title="attention of layer 5, head 11 over the running sentence")
    restore = reflow_for_phone(fig)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    for labels, along in ((ax.get_xticklabels(), 0), (ax.get_yticklabels(), 1)):
        boxes = sorted((t.get_window_extent(r).get_points()[:, along] for t in labels if t.get_text()),
                       key=lambda s: s[0])
        assert all(p[1] <= q[0] + 0.5 for p, q in zip(boxes, boxes[1:])), boxes
    assert ax.title.get_window_extent(r).width <= fig.bbox.width
    bar = next(a for a in fig.axes if hasattr(a, "_colorbar")).get_window_extent(r)
    assert all(t.get_window_extent(r).y0 >= bar.y1 + 2 for t in ax.get_xticklabels() if t.get_text())   # bar under the labels
    shown = [t.get_window_extent(r) for t in ax.texts if t.get_visible()]
    assert not any(p.overlaps(q) for i, p in enumerate(shown) for q in shown[i + 1:])
    restore()


# ---------------------------------------------------------------------- packing in the PNG
def test_pack_unpack_strip_round_trip_and_the_packed_png_still_opens(variants):
    v = variants
    packed = pack_variants(v["desktop"], {"phone": v["phone"], "zoom": v["zoom"]})
    assert unpack_variants(packed) == {"phone": v["phone"], "zoom": v["zoom"]}
    assert strip_variants(packed) == strip_variants(v["desktop"]) and unpack_variants(v["desktop"]) == {}
    assert strip_variants(v["desktop"]) == v["desktop"]          # nothing to strip: the same bytes
    with Image.open(io.BytesIO(packed)) as a, Image.open(io.BytesIO(v["desktop"])) as b:   # viewers ignore the chunks
        assert a.size == b.size and np.array_equal(np.asarray(a), np.asarray(b))
        assert a.text[VARIANT_KEY] == "desktop"
    with pytest.raises(ValueError, match="not a PNG"):
        unpack_variants(b"GIF89a")
    with pytest.raises(ValueError, match="truncated"):
        unpack_variants(packed[:-20])
    with pytest.raises(ValueError, match="variant names"):
        pack_variants(v["desktop"], {"": v["phone"]})


def test_the_notebook_gets_variants_only_in_the_book_build(monkeypatch):
    fig, _ = two_heatmaps()
    monkeypatch.delenv(VARIANTS_ENV, raising=False)
    assert unpack_variants(figure_png(fig)) == {}               # Binder, a local notebook: one rendering
    monkeypatch.setenv(VARIANTS_ENV, "1")
    assert set(unpack_variants(figure_png(fig))) == {"phone", "zoom"}


# ---------------------------------------------------------------------- the Sphinx extension
def test_the_extension_writes_a_picture_with_the_phone_source_and_links_the_zoom_file(tmp_path, variants):
    from sphinx.application import Sphinx

    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    v = variants
    (src / "fig.png").write_bytes(pack_variants(v["desktop"], {"phone": v["phone"], "zoom": v["zoom"]}))
    (src / "plain.png").write_bytes(v["desktop"])
    (src / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\nextensions = ['figure_zoom']\n")
    (src / "index.rst").write_text("Page\n====\n\n.. figure:: fig.png\n   :alt: two heatmaps of attention weights\n\n"
                                   "   Caption.\n\n.. figure:: plain.png\n   :alt: one figure without variants\n\n"
                                   "   Plain.\n")
    app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None, warning=sys.stderr,
                 freshenv=True)
    app.build()
    html = (out / "index.html").read_text()
    assert ('<a class="figure-zoom reference internal image-reference" href="_images/fig-zoom.png" '
            'title="Open the figure at full size"><picture><source media="(max-width: 719.98px)" '
            f'srcset="_images/fig-phone.png {PHONE_DENSITY}x"><img alt="two heatmaps of attention weights" '
            'src="_images/fig.png" />') in html
    assert html.count("</picture></a>") == 1
    assert 'href="_images/plain.png"' in html                   # no variants: links its own file, no <picture>
    images = out / "_images"
    shipped = (images / "fig.png").read_bytes()
    assert unpack_variants(shipped) == {} and len(shipped) < len((src / "fig.png").read_bytes())
    assert info(shipped)[0][VARIANT_KEY] == "desktop"
    assert (images / "fig-phone.png").read_bytes() == v["phone"]
    assert (images / "fig-zoom.png").read_bytes() == v["zoom"]
    assert not (images / "plain-phone.png").exists()


def test_learner_notebooks_keep_one_rendering(variants):
    """``_ext/make_notebooks.py`` reuses the book build's outputs: their PNGs lose the packed
    renderings."""
    import base64

    sys.path.insert(0, str(ROOT / "_ext"))
    from make_notebooks import learner_outputs, single_png

    v = variants
    packed = base64.b64encode(pack_variants(v["desktop"], {"phone": v["phone"]})).decode()
    assert base64.b64decode(single_png(packed)) == v["desktop"]
    plain = base64.b64encode(v["desktop"]).decode()
    assert single_png(plain) is plain
    out = learner_outputs([{"output_type": "display_data", "metadata": {},
                            "data": {"image/png": packed, "text/plain": "<Figure>"}}])
    assert base64.b64decode(out[0]["data"]["image/png"]) == v["desktop"]
