"""attnlib.plotting: one figure helper, figures that show what they were given (labels, one
patch per edge, one colour bar), clear errors, and the rule that the maths never imports
plotting."""
import ast
import base64
import io
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import networkx as nx
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import attnlib  # noqa: E402
from attnlib import plotting  # noqa: E402
from attnlib.corpus import RUNNING  # noqa: E402
from attnlib.plotting import (  # noqa: E402
    BOOK_RC, COLUMN_PX, COLUMN_WIDTH, DPI, MIN_FONT_PT, MIN_TEXT_KEY, attention_heatmap, book_style, draw_attention_graph,
    draw_layered_graph, figure, head_heatmap, head_table, hull_plot, layer_curves, layer_grid, min_text_size, panels,
    render_png, text_size, to_numpy, weights_bar,
)

ROOT = Path(__file__).resolve().parents[1]
TOKENS = ["[CLS]", "the", "cat", "sat", "the", "[SEP]"]
T = len(TOKENS)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def random_weights(seed=0, T=T):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(T, T, generator=g), dim=-1)


# --- the figure helper -------------------------------------------------------------------------

def test_figure_makes_a_column_sized_figure_or_reuses_the_axes():
    fig, ax = figure()
    assert tuple(fig.get_size_inches()) == pytest.approx((COLUMN_WIDTH, 0.6 * COLUMN_WIDTH))
    assert fig.get_layout_engine() is not None  # constrained layout
    fig2, ax2 = figure(ax)
    assert fig2 is fig and ax2 is ax
    fig3, axes = figure(size=(4, 2), nrows=2, ncols=3, squeeze=False)
    assert axes.shape == (2, 3) and tuple(fig3.get_size_inches()) == pytest.approx((4, 2))
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        figure("ax")
    with pytest.raises(ValueError, match="grid needs a new figure"):
        figure(ax, nrows=2)
    with pytest.raises(TypeError, match="size must be"):
        figure(size=5)
    with pytest.raises(ValueError, match="positive"):
        figure(size=(0, 3))
    wide, _ = figure(size=(17, 4))                 # wider than the column: drawn at the column's width
    assert tuple(wide.get_size_inches()) == pytest.approx((COLUMN_WIDTH, 4))


# --- figures for the column: size, minimum text, mathtext ---------------------------------------

def png_chunks(data: bytes) -> dict:
    from PIL import Image
    with Image.open(io.BytesIO(data)) as im:
        return dict(im.text), im.size


def test_the_column_width_fits_the_measured_column():
    """A figure of COLUMN_WIDTH inches at DPI, plus render_png's 0.04 in padding on each side,
    is no wider than the page's column (measured in Chromium at a 1280 px window), and 8 pt
    at DPI is over 10 px."""
    assert (COLUMN_WIDTH + 0.08) * DPI <= COLUMN_PX
    assert MIN_FONT_PT * DPI / 72 >= 10.0


def test_render_png_raises_text_under_the_minimum_and_records_the_smallest():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.tick_params(labelsize=6)                               # 6 pt tick labels: too small
    ax.set_title("title", fontsize=5)
    ax.text(0.5, 0.5, "note", fontsize=4)
    ax.legend(["line"], fontsize=3)
    fig.colorbar(matplotlib.cm.ScalarMappable(), ax=ax).ax.tick_params(labelsize=5)
    assert min_text_size(fig) == 3
    log_fig, log_ax = plt.subplots(figsize=(4, 3))
    log_ax.loglog([1, 10, 100], [1, 10, 100])                   # tick labels: 10 with a mathtext superscript
    log_ax.set_xlabel("$d_k$ (log scale)", fontsize=MIN_FONT_PT)
    assert min_text_size(log_fig) == pytest.approx(0.7 * MIN_FONT_PT)   # the subscript k, the exponents
    text, _ = png_chunks(render_png(log_fig))
    assert float(text[MIN_TEXT_KEY]) >= MIN_FONT_PT * DPI / 72 - 0.01
    assert min(text_size(t) for t in log_ax.get_xticklabels() + [log_ax.xaxis.label] if t.get_text()) >= MIN_FONT_PT
    text, (width, _) = png_chunks(render_png(fig))
    assert float(text[MIN_TEXT_KEY]) == pytest.approx(MIN_FONT_PT * DPI / 72, abs=0.01)
    assert min_text_size(fig) == MIN_FONT_PT                  # every text, tick labels included
    assert width <= 4 * DPI + 8
    with pytest.raises(ValueError, match="positive"):
        render_png(fig, minimum=0)


def test_a_wrapped_title_with_maths_is_measured_line_by_line_without_a_glyph_warning(caplog):
    """The phone variant wraps long titles; a title with mathtext and a line break was parsed
    whole, which made matplotlib log "Font 'default' does not have a glyph for '\\n'" into the
    executed pages (chapters 1-5 and 12).  Each line is measured as matplotlib lays it out."""
    fig, ax = plt.subplots(figsize=(4, 3))
    title = ax.set_title("dense layer: one matrix\n$W_k$ for every input", fontsize=10)
    caplog.clear()
    with caplog.at_level("WARNING", logger="matplotlib"):
        size = text_size(title)
        render_png(fig)
    assert not [r for r in caplog.records if "glyph" in r.getMessage()], [r.getMessage() for r in caplog.records]
    assert size == pytest.approx(7.0)                         # the subscript k at mathtext's 0.7
    plain = ax.set_title("no maths\non two lines", fontsize=10)
    assert text_size(plain) == 10
    plt.close(fig)


def test_book_style_renders_every_notebook_figure_through_render_png():
    """In IPython, book_style() puts render_png behind the PNG of every figure displayed."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        with matplotlib.rc_context():
            book_style()
            assert {k: matplotlib.rcParams[k] for k in BOOK_RC} == BOOK_RC
            fig, ax = plt.subplots()
            ax.plot([1, 2])
            ax.set_title(r"$A = \mathrm{softmax}(QK^\top/\sqrt{d_k})$")
            ax.tick_params(labelsize=6)
            data, _ = shell.display_formatter.format(fig)
            text, _ = png_chunks(base64.b64decode(data["image/png"]))
            assert float(text[MIN_TEXT_KEY]) >= 10.0
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("size", [(6.0, 3.0), (COLUMN_WIDTH, 4.0)])
def test_mathtext_titles_are_typeset(size):
    """A title in mathtext is parsed (a bad one raises at draw time), not shown as ASCII."""
    with matplotlib.rc_context(BOOK_RC):
        fig, ax = plt.subplots(figsize=size)
        ax.set_title(r"$W_Q W_K^\top$, $\sqrt{d_k}$")
        fig.canvas.draw()
        bad, ax2 = plt.subplots()
        ax2.set_title(r"$\sqrt{d_k$")
        with pytest.raises(ValueError):
            bad.canvas.draw()


def test_panels_lays_out_a_column_wide_grid():
    fig, axes = panels(5, ncols=3, panel_height=2.0)
    assert len(axes) == 5 and len(fig.axes) == 5
    assert tuple(fig.get_size_inches()) == pytest.approx((COLUMN_WIDTH, 4.0))
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        panels(0)
    with pytest.raises(ValueError, match="panel_height"):
        panels(2, panel_height=0)


def test_every_figure_function_draws_for_the_column_with_readable_text(encoder):
    """Under the book's style, each figure function makes a figure no wider than the column
    whose smallest text is at least MIN_FONT_PT before render_png has anything to fix."""
    att = attnlib.encoder.get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    v = torch.tensor([[0., 0.], [4., 0.], [0., 4.]])
    w = torch.tensor([0.2, 0.3, 0.5])
    calls = {
        "attention_heatmap": lambda: attention_heatmap(random_weights(), TOKENS, title="t"),
        "attention_heatmap 13": lambda: attention_heatmap(att.head(0, 0), att.tokens),
        "hull_plot": lambda: hull_plot(v, list("abc"), weights=w, out=w @ v, title="t"),
        "weights_bar": lambda: weights_bar(w, list("abc"), title="t"),
        "head_heatmap": lambda: head_heatmap(att, 5, 11),
        "layer_grid": lambda: layer_grid(att, 1),
        "head_table": lambda: head_table(torch.rand(6, 12), title="t", colorbar_label="c"),
        "layer_curves": lambda: layer_curves(torch.rand(7, 2), ["a", "b"], ylabel="y", title="t"),
        "draw_attention_graph": lambda: draw_attention_graph(attnlib.graphs.attention_graph(att.head(5, 11), att.tokens)),
        "draw_layered_graph": lambda: draw_layered_graph(
            attnlib.graphs.layered_graph(torch.stack([att.head(i, 0) for i in range(3)]), att.tokens, threshold=0.1)),
    }
    problems = {}
    with matplotlib.rc_context(BOOK_RC):
        for name, call in calls.items():
            fig = call()
            width, smallest = fig.get_size_inches()[0], min_text_size(fig)
            if width > COLUMN_WIDTH + 1e-9 or smallest < MIN_FONT_PT:
                problems[name] = (round(float(width), 2), smallest)
            plt.close(fig)
    assert problems == {}


def test_every_figure_function_draws_into_a_given_axes(encoder):
    """Each figure function with an ``ax`` draws there and returns that Axes' figure."""
    att = attnlib.encoder.get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    G = attnlib.graphs.attention_graph(random_weights(), TOKENS)
    L = attnlib.graphs.layered_graph(torch.softmax(torch.randn(2, T, T), -1), TOKENS)
    v = torch.tensor([[0., 0.], [4., 0.], [0., 4.]])
    calls = [
        lambda ax: attention_heatmap(random_weights(), TOKENS, ax=ax),
        lambda ax: hull_plot(v, list("abc"), ax=ax),
        lambda ax: weights_bar(torch.tensor([0.2, 0.3, 0.5]), list("abc"), ax=ax),
        lambda ax: head_heatmap(att, 0, 0, ax=ax),
        lambda ax: head_table(torch.rand(6, 12), title="t", colorbar_label="c", ax=ax),
        lambda ax: layer_curves(torch.rand(7, 2), ["a", "b"], ylabel="y", title="t", ax=ax),
        lambda ax: draw_attention_graph(G, ax=ax),
        lambda ax: draw_layered_graph(L, ax=ax),
    ]
    for call in calls:
        fig, ax = plt.subplots()
        assert call(ax) is fig
        assert ax.has_data() or ax.texts or ax.patches
        plt.close(fig)


def test_no_maths_module_imports_plotting_or_matplotlib():
    """Plotting calls the maths; the maths never imports plotting (checked in the source and
    in a fresh process)."""
    offenders = []
    for path in (ROOT / "attnlib").rglob("*.py"):
        if "plotting" in path.parts or "exercises" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            if any(n.split(".")[0] == "matplotlib" or "plotting" in n.split(".") for n in names):
                offenders.append(path.relative_to(ROOT).as_posix())
    assert offenders == []
    code = "import sys, attnlib; print('matplotlib' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_old_module_paths_are_gone():
    for old in ("plot_hull", "head_plots", "graph_plots"):
        assert not (ROOT / "attnlib" / f"{old}.py").exists()
    assert (ROOT / "attnlib" / "plotting" / "__init__.py").exists()
    assert set(plotting.__all__) >= {"attention_heatmap", "hull_plot", "weights_bar", "head_heatmap", "layer_grid",
                                     "head_table", "layer_curves", "draw_attention_graph", "draw_layered_graph"}


# --- heatmaps ------------------------------------------------------------------------------------

def test_attention_heatmap_labels_values_and_masked_cells():
    w = random_weights(1)
    fig = attention_heatmap(w, TOKENS, title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "attention weight"
    assert len(ax.texts) == T * T and ax.texts[T + 2].get_text() == f"{w[1, 2].item():.2f}"  # row 1, column 2
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), w.numpy(), atol=1e-7)
    scores = torch.randn(3, 4).masked_fill(torch.tensor([[False, True, True, True]] * 3), float("-inf"))
    fig = attention_heatmap(scores, list("abc"), list("wxyz"))
    assert sum(t.get_text() == "-inf" for t in fig.axes[0].texts) == 9
    assert fig.axes[0].images[0].get_array().mask.sum() == 9   # masked cells drawn in the 'bad' colour


def test_to_numpy_converts_and_refuses_non_numbers():
    np.testing.assert_array_equal(to_numpy(torch.tensor([1, 2], dtype=torch.int64)), [1.0, 2.0])
    assert to_numpy(torch.ones(2, dtype=torch.bfloat16, requires_grad=True)).dtype == np.float64
    for bad in (None, "ab", [["a"]]):
        with pytest.raises(TypeError, match="tensor or an array of numbers"):
            to_numpy(bad)


@pytest.mark.parametrize("call, error, match", [
    (lambda: attention_heatmap(torch.rand(3), list("abc")), ValueError, r"\(T_q, T_k\) matrix"),
    (lambda: attention_heatmap(torch.rand(3, 3), list("ab")), ValueError, "labels do not match"),
    (lambda: attention_heatmap(None, list("ab")), TypeError, "got NoneType"),
    (lambda: attention_heatmap(torch.rand(2, 2), list("ab"), ax="x"), TypeError, "ax must be a matplotlib Axes"),
    (lambda: head_table(torch.rand(6), title="t", colorbar_label="c"), ValueError, r"\(n_layers, H\) table"),
    (lambda: layer_curves(torch.rand(7, 2), ["a", "b", "c"], ylabel="y", title="t"), ValueError, r"expected \(n_points, 3\)"),
    (lambda: draw_attention_graph(None), TypeError, "networkx graph"),
    (lambda: draw_attention_graph(attnlib.graphs.attention_graph(random_weights(10), TOKENS, threshold=0.99)), ValueError, "no edges"),
    (lambda: draw_attention_graph(nx.DiGraph([("a", "b")])), ValueError, "nodes 0..T-1"),
    (lambda: draw_layered_graph(attnlib.graphs.attention_graph(random_weights(), TOKENS)), ValueError, "layered_graph"),
    (lambda: draw_layered_graph(None), ValueError, "layered_graph"),
])
def test_figure_functions_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --- hull (chapter 1) ------------------------------------------------------------------------------

def test_hull_plot_draws_and_validates():
    v = torch.tensor([[0., 0.], [4., 0.], [0., 4.], [1., 1.]])
    w = torch.softmax(torch.tensor([1., 0.5, 0., 2.]), dim=0)  # the output is not on the diagonal x = y
    fig = hull_plot(v, ["a", "b", "c", "d"], weights=w, out=w @ v, title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["a", "b", "c", "d"]
    assert len(fig.axes) == 2                                   # the plot and its colour bar
    hull = ax.patches[0].get_xy()[:-1]                          # the shaded hull polygon (closed)
    assert sorted(map(tuple, hull.tolist())) == [(0.0, 0.0), (0.0, 4.0), (4.0, 0.0)]  # (1, 1) is inside
    star = ax.collections[-1].get_offsets()[0]
    np.testing.assert_allclose(star, (w @ v).numpy(), atol=1e-6)
    fig = weights_bar(w, ["a", "b", "c", "d"])
    assert len(fig.axes[0].patches) == 4
    np.testing.assert_allclose([p.get_height() for p in fig.axes[0].patches], w.numpy(), atol=1e-7)
    with pytest.raises(ValueError, match="T_k, 2"):
        hull_plot(torch.zeros(4, 3), list("abcd"))
    with pytest.raises(ValueError, match="labels"):
        hull_plot(v, ["a"])
    with pytest.raises(ValueError, match="weights"):
        hull_plot(v, list("abcd"), weights=torch.ones(3) / 3)
    with pytest.raises(ValueError, match="2-vector"):
        hull_plot(v, list("abcd"), out=torch.zeros(3))
    with pytest.raises(ValueError, match="T_k"):
        weights_bar(torch.ones(2, 2), ["a", "b"])


# --- heads (chapter 9) -------------------------------------------------------------------------------

def test_head_figures_have_labels_and_colour_bars(encoder):
    att = attnlib.encoder.get_attentions(RUNNING, model=encoder[0], tokenizer=encoder[1])
    fig = head_heatmap(att, -1, -1)
    ax = fig.axes[0]
    assert ax.get_title() == "layer 5, head 11: attention weights"
    assert [t.get_text() for t in ax.get_xticklabels()] == att.tokens and len(fig.axes) == 2
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), att.head(5, 11).numpy(), atol=1e-7)
    grid = layer_grid(att, 1)
    assert sum(a.get_title().startswith("head") for a in grid.axes) == 12
    assert tuple(grid.get_size_inches())[0] == pytest.approx(COLUMN_WIDTH)
    assert [t.get_text() for t in grid.axes[0].get_yticklabels()] == att.tokens
    assert any(a.get_ylabel() == "attention weight" for a in grid.axes)  # the colour bar
    np.testing.assert_allclose(np.asarray(grid.axes[3].images[0].get_array()), att.head(1, 3).numpy(), atol=1e-7)
    assert layer_grid(att, -1)._suptitle.get_text().startswith("layer 5")
    table = head_table(torch.rand(6, 12), title="t", colorbar_label="share")
    assert table.axes[0].get_ylabel() == "layer" and len(table.axes[0].texts) == 72
    curves = layer_curves(torch.rand(7, 2), ["a", "b"], ylabel="cosine", title="c")
    assert len(curves.axes[0].lines) == 2
    with pytest.raises(IndexError, match="layer must be in 0..5"):
        layer_grid(att, 6)
    with pytest.raises(TypeError, match="layer must be an int"):
        layer_grid(att, "1")
    with pytest.raises(TypeError, match="ncols must be a positive int"):
        layer_grid(att, 1, ncols=2.0)
    with pytest.raises(ValueError, match="ncols must be a positive int"):
        layer_grid(att, 1, ncols=0)


# --- graphs (chapter 8) -------------------------------------------------------------------------------

def test_draw_attention_graph_draws_every_edge_and_a_colorbar():
    G = attnlib.graphs.attention_graph(random_weights(10), TOKENS, threshold=0.2)
    fig = draw_attention_graph(G, node_values=attnlib.graphs.in_weight(G), title="t")
    ax = fig.axes[0]
    assert len(ax.patches) == G.number_of_edges()  # one arrow patch per edge, self-loops included
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "edge weight"
    assert sorted(t.get_text() for t in ax.texts) == sorted(TOKENS)
    S = attnlib.graphs.score_graph(torch.randn(T, T), TOKENS)
    fig = draw_attention_graph(S, cmap="cividis")
    assert fig.axes[1].get_ylabel() == "edge score"


def test_draw_layered_graph_labels_tokens_and_layers():
    L = attnlib.graphs.layered_graph(torch.softmax(torch.randn(3, T, T), -1), TOKENS, threshold=0.1)
    fig = draw_layered_graph(L, title="rollout paths")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == ["input", "after layer 0", "after layer 1", "after layer 2"]
