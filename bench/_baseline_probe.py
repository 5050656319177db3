"""Measuring instrument for bench/bench_figures.py --baseline: appended to the *old* revision's
attnlib/__init__.py in a scratch copy, it registers a PNG formatter that renders each
figure exactly as IPython's inline backend does (fig.dpi, bbox_inches="tight") and only adds
the smallest text size (image px) as the PNG text chunk ``attnlib:min-text-px``, measured as
attnlib.plotting.text_size does (the smallest letter or digit: mathtext sub- and superscripts
count at their drawn size).  Nothing in the picture changes; the current attnlib writes the
same chunk itself (render_png)."""


def _attnlib_probe():
    import base64
    import io

    import matplotlib.figure
    import matplotlib.pyplot as plt
    import matplotlib.text
    from matplotlib import cbook
    from matplotlib.font_manager import FontProperties
    from matplotlib.mathtext import MathTextParser
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    parser = MathTextParser("path")

    def size(t):
        s = t.get_text()
        if t.get_usetex() or not t.get_parse_math() or not cbook.is_math_text(s):
            return t.get_fontsize()
        try:
            glyphs = parser.parse(s, dpi=72, prop=FontProperties(size=10.0)).glyphs
        except ValueError:
            return t.get_fontsize()
        return t.get_fontsize() * min((g[1] for g in glyphs if chr(g[2]).isalnum()), default=10.0) / 10.0

    def fmt(fig, **kw):
        if not fig.axes and not fig.lines:
            return None
        fig.canvas.draw()
        sizes = [size(t) for t in fig.findobj(matplotlib.text.Text)
                 if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())]
        px = f"{min(sizes) * fig.dpi / 72:.2f}" if sizes else "none"
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight", facecolor=fig.get_facecolor(),
                    edgecolor=fig.get_edgecolor(), metadata={"attnlib:min-text-px": px})
        return base64.b64encode(buf.getvalue()).decode("ascii")

    plt.close(plt.figure())
    shell.display_formatter.formatters["image/png"].for_type(matplotlib.figure.Figure, fmt)


_attnlib_probe()
