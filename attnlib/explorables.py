"""Interactive figures that work without a kernel: chapters 1 to 12.

Each function takes real tensors and the matching token strings, checks them, and returns
an :class:`~attnlib._xp_html.Explorable`: a self-contained HTML + JavaScript figure with
its data embedded (no CDN, no network, no kernel).  In a notebook the last expression of a
cell displays it; in the published book MyST-NB keeps the ``text/html`` output, so the
sliders, toggles and hovering keep working in the static page.  The JavaScript mirrors
attnlib's maths (e.g. its softmax is :func:`attnlib.softmax`'s recipe: subtract the row
maximum, exponentiate, normalise, ``-inf`` -> weight 0, a fully masked row -> zeros); the
browser tests check it against :func:`attnlib.softmax` on real data.

Shapes legend: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys, ``d_k``
query/key width, ``d_v`` value width, ``d_model`` model width.  Every function takes one
head of one sentence: slice ``(B, H, T_q, T_k)`` weights with ``[b, h]`` first.
"""
from __future__ import annotations

import math
import numbers

import torch

from . import encoder, evidence
from ._xp_html import Explorable, render, standalone_page
from .exercises.core import CLOSE_CALL
from .devices import as_tensor
from .geometry import convex_hull_2d

__all__ = ["convex_combination", "temperature_explorer", "mask_explorer", "graph_threshold",
           "head_hover", "round_attentions", "model_lab", "circuit_lab", "Explorable", "standalone_page", "MAX_TOKENS",
           "GRAPH_EARLIER_SIDE", "GRAPH_CMAP", "GRAPH_VMAX"]

MAX_TOKENS = 128  # beyond this a figure stops being readable (and a page grows past ~1 MB)

# Chapter 8's drawing convention, shared with the static figure
# (:func:`attnlib.plotting.draw_attention_graph`; tests/test_explorables.py checks both):
# an edge to an earlier key bends above the token line, to a later key below; edges are
# coloured by weight with this colour map on a fixed scale from 0 to GRAPH_VMAX (weights are
# probabilities, so two heads' figures can be compared colour for colour).
GRAPH_EARLIER_SIDE = "above"
GRAPH_CMAP = "viridis"
GRAPH_VMAX = 1.0


def _float_tensor(x, name: str, form: str, dims: tuple[int, ...]) -> torch.Tensor:
    t = as_tensor(x, name)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor {form}, got dtype {t.dtype}")
    if t.dim() not in dims:
        raise ValueError(f"{name} must have shape {form}, got {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(t.shape)}")
    t = t.detach().to("cpu", torch.float64)
    if bool(torch.isnan(t).any()) or bool((t == math.inf).any()):
        raise ValueError(f"{name} must not contain NaN or +inf")
    return t


def _finite(t: torch.Tensor, name: str) -> None:
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite (no -inf here: pass unmasked values)")


def _tokens(tokens, T: int, what: str) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)):
        raise TypeError(f"tokens must be a list of str (one per {what}), got {type(tokens).__name__}")
    for i, tok in enumerate(tokens):
        if not isinstance(tok, str):
            raise TypeError(f"tokens[{i}] must be a str, got {type(tok).__name__}")
    if len(tokens) != T:
        raise ValueError(f"tokens must hold one str per {what}: expected {T}, got {len(tokens)}")
    if not 1 <= T <= MAX_TOKENS:
        raise ValueError(f"explorables show 1 to {MAX_TOKENS} tokens, got {T}: slice the sequence first")
    return list(tokens)


def _index(value, n: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= int(value) < n:
        raise ValueError(f"{name} must be in 0..{n - 1}, got {value}")
    return int(value)


def _title(title, default: str) -> str:
    if title is None:
        return default
    if not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    return title


def _numbers(t: torch.Tensor):
    """Nested lists of floats with 7 significant digits (float32 precision); -inf -> None."""
    if t.dim() == 0:
        v = t.item()
        return None if v == -math.inf else float(f"{v:.7g}")
    return [_numbers(row) for row in t] if t.dim() > 1 else [
        None if v == -math.inf else float(f"{v:.7g}") for v in t.tolist()]


def _stochastic(weights, name: str = "weights") -> torch.Tensor:
    w = _float_tensor(weights, name, "(T_q, T_k) with T_q = T_k", (2,))
    _finite(w, name)
    if w.shape[0] != w.shape[1]:
        raise ValueError(f"{name} must be square (T_q, T_k) with T_q = T_k (self-attention), got {tuple(w.shape)}")
    if bool((w < -1e-6).any()):
        raise ValueError(f"{name} must be non-negative (softmax output), min is {w.min().item():.3g}")
    sums = w.sum(-1)
    bad = ((sums - 1).abs() > 1e-3) & (sums.abs() > 1e-3)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(f"each row of {name} must sum to 1 (or 0 when fully masked); row {i} sums to {sums[i].item():.4f}")
    return w.clamp_min(0)


def _head_menu(stacked: torch.Tensor, name: str, layer, head, *, decimals: int, check=None):
    """Every head of ``stacked`` ``(n_layers, H, T_q, T_k)`` as a menu ``[{label, <name>}]``
    (labels ``"layer l, head h"``, values rounded to ``decimals``; ``-inf`` kept as null)
    and the index of ``(layer, head)`` in it (the last head when both are None)."""
    n_layers, n_heads = stacked.shape[:2]
    if stacked.shape[-1] != stacked.shape[-2]:
        raise ValueError(f"{name} must be square (n_layers, H, T_q, T_k) with T_q = T_k, got {tuple(stacked.shape)}")
    if (layer is None) != (head is None):
        raise ValueError(f"pass both layer and head (the head shown first), got layer={layer!r}, head={head!r}")
    layer = n_layers - 1 if layer is None else _index(layer, n_layers, "layer")
    head = n_heads - 1 if head is None else _index(head, n_heads, "head")
    menu = []
    for l in range(n_layers):
        for h in range(n_heads):
            x = stacked[l, h] if check is None else check(stacked[l, h], f"{name}[{l}][{h}]")
            menu.append({"label": f"layer {l}, head {h}", name: _numbers(torch.round(x, decimals=decimals))})
    return menu, layer * n_heads + head


def convex_combination(values_2d, tokens, scores, *, title: str | None = None) -> Explorable:
    """Chapter 1: drag each score; watch ``softmax(scores)`` and ``softmax(scores) @ values_2d``.

    Sliders set the scores of one query against ``T_k`` keys; bars show the softmax weights;
    a star marks the weighted average ``sum_j a_j v_j`` of the 2-D value points, which stays
    inside their convex hull (drawn, with a live check), Bahdanau et al. (2015), eq. (5)-(6).

    Shapes:
        values_2d: ``(T_k, 2)`` (e.g. value vectors projected onto two principal axes);
        scores: ``(T_k,)``; tokens: ``T_k`` str.

    Raises:
        TypeError: a non-tensor, non-float input, or tokens that are not a list of str.
        ValueError: wrong shapes, NaN or infinite entries, or ``len(tokens) != T_k``.

    >>> xp = convex_combination(torch.tensor([[0., 0.], [1., 0.], [0., 1.]]), ["a", "b", "c"],
    ...                         torch.tensor([0.5, -1.0, 2.0]))
    >>> xp.kind, xp.n_tokens
    ('convex', 3)
    """
    points = _float_tensor(values_2d, "values_2d", "(T_k, 2)", (2,))
    if points.shape[1] != 2:
        raise ValueError(f"values_2d must have shape (T_k, 2), got {tuple(points.shape)}")
    _finite(points, "values_2d")
    s = _float_tensor(scores, "scores", "(T_k,)", (1,))
    _finite(s, "scores")
    if s.shape[0] != points.shape[0]:
        raise ValueError(f"scores (T_k,) and values_2d (T_k, 2) must share T_k: {tuple(s.shape)} vs {tuple(points.shape)}")
    toks = _tokens(tokens, points.shape[0], "value point")
    hull = convex_hull_2d(points).tolist()
    data = {"tokens": toks, "points": _numbers(points), "scores": _numbers(s), "hull": hull}
    return render("convex", data, _title(title, "Scores \u2192 softmax weights \u2192 a point inside the hull"), len(toks))


def temperature_explorer(scores, tokens, d_k: int | None = None, *, query: int = 0,
                         temperature: float = 1.0, layer: int | None = None, head: int | None = None,
                         title: str | None = None) -> Explorable:
    """Chapter 4: a temperature slider (and a divide-by-``sqrt(d_k)`` toggle) on softmax.

    Shows ``softmax(scores / (tau * sqrt(d_k)))`` (or ``/ tau`` with the toggle off) as bars,
    with the row's entropy in nats against its maximum ``log(T_k)``.  Pass **unscaled** dot
    products ``q k^T`` with ``d_k`` to compare with and without the scaling of Vaswani et
    al. (2017), eq. (1); without ``d_k`` the toggle is hidden.  ``tau`` spans 0.01 to 100.

    With the scores of **every head**, ``(n_layers, H, T_q, T_k)`` (e.g. ``q @ k.transpose(-1, -2)``
    of :func:`attnlib.encoder.run`'s stacked ``q`` and ``k``), a menu picks the layer and head
    (labelled ``"layer l, head h"``, as :func:`induction_heads`), opening on ``layer``,
    ``head``; those scores are embedded rounded to 4 decimals to keep the page light.

    Shapes:
        scores: ``(T_k,)`` for one query, or ``(T_q, T_k)`` with ``T_q = T_k`` (a query menu
        appears), or ``(n_layers, H, T_q, T_k)`` (a head menu too); ``-inf`` entries are masked
        keys (weight 0).  tokens: ``T_k`` str.

    Raises:
        TypeError: non-tensor or non-float scores, tokens not a list of str, non-int
            ``d_k``/``query``/``layer``/``head``, non-number ``temperature``.
        ValueError: wrong shape, NaN or ``+inf``, ``len(tokens) != T_k``, ``d_k < 1``,
            ``query``, ``layer`` or ``head`` out of range, ``layer``/``head`` given with
            scores of one head, ``temperature`` outside [0.01, 100].

    >>> temperature_explorer(torch.tensor([2.0, 1.0, -1.0]), ["a", "b", "c"], d_k=4).kind
    'temperature'
    >>> temperature_explorer(torch.zeros(2, 3, 4, 4), list("abcd"), d_k=4, layer=1, head=2).kind
    'temperature'
    """
    s = _float_tensor(scores, "scores", "(T_k,), (T_q, T_k) or (n_layers, H, T_q, T_k)", (1, 2, 4))
    menu = None
    if s.dim() == 4:
        menu, pick = _head_menu(s, "scores", layer, head, decimals=4)
        s = s[pick // s.shape[1], pick % s.shape[1]]
    elif layer is not None or head is not None:
        raise ValueError(f"layer and head pick from scores of every head (n_layers, H, T_q, T_k), got {tuple(s.shape)}")
    rows = s.reshape(1, -1) if s.dim() == 1 else s
    if s.dim() == 2 and s.shape[0] != s.shape[1]:
        raise ValueError(f"2-D scores must be square (T_q, T_k) with T_q = T_k, got {tuple(s.shape)}; pass one row instead")
    toks = _tokens(tokens, rows.shape[1], "key")
    if d_k is not None:
        if isinstance(d_k, bool) or not isinstance(d_k, numbers.Integral):
            raise TypeError(f"d_k must be an int or None, got {type(d_k).__name__}")
        if d_k < 1:
            raise ValueError(f"d_k must be >= 1, got {d_k}")
    q = _index(query, rows.shape[0], "query")
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not 0.01 <= float(temperature) <= 100:
        raise ValueError(f"temperature must be in [0.01, 100], got {temperature}")
    data = {"tokens": toks, "scores": _numbers(rows), "d_k": None if d_k is None else int(d_k),
            "query": q, "temperature": float(temperature)}
    if menu is not None:
        data.update(heads=menu, head=pick)
        del data["scores"]  # the picked head's scores are in the menu
    return render("temperature", data, _title(title, "Temperature and the \u221ad\u2096 scaling"), len(toks))


def mask_explorer(scores, tokens, attention_mask=None, *, editable: bool = True,
                  title: str | None = None) -> Explorable:
    """Chapter 5: toggle a causal and a padding mask, and single cells, on a heatmap of
    attention weights.

    Masked scores are set to ``-inf`` before the row softmax, so their weights are exactly 0
    and the other keys of the row are renormalised; a row with every key masked gets all-zero
    weights (as :func:`attnlib.softmax` returns).  The causal mask hides keys ``j > i``; the
    padding mask hides keys whose ``attention_mask`` is 0, as :func:`attnlib.padding_mask`.
    With ``editable`` the reader also removes (or restores) single cells ``(i, j)``: a click
    or tap, or, in the grid (one Tab stop), the arrow keys and Space or Enter.  The cells
    combine with the two masks by logical *and* (a cell is kept when every mask keeps it).
    Focusing or hovering a cell reads out its score, its weight and what masks it, in a
    polite live region.

    Shapes:
        scores: ``(T_q, T_k)`` with ``T_q = T_k`` (``-inf`` entries stay masked);
        tokens: ``T_k`` str; attention_mask: ``(T_k,)`` or ``(1, T_k)`` of 0/1, or None.

    Raises:
        TypeError: non-tensor or non-float scores, tokens not a list of str, a mask that is
            not a tensor or numpy array, a non-bool ``editable``.
        ValueError: non-square scores, NaN or ``+inf``, a length mismatch, mask values
            other than 0 and 1.

    >>> mask_explorer(torch.zeros(3, 3), ["a", "b", "[PAD]"], torch.tensor([1, 1, 0])).kind
    'mask'
    """
    s = _float_tensor(scores, "scores", "(T_q, T_k) with T_q = T_k", (2,))
    if s.shape[0] != s.shape[1]:
        raise ValueError(f"scores must be square (T_q, T_k) with T_q = T_k (self-attention), got {tuple(s.shape)}")
    toks = _tokens(tokens, s.shape[1], "key")
    pad = None
    if attention_mask is not None:
        m = as_tensor(attention_mask, "attention_mask")
        if m.dim() == 2 and m.shape[0] == 1:
            m = m[0]
        if m.dim() != 1 or m.shape[0] != s.shape[1]:
            raise ValueError(f"attention_mask must have shape (T_k,) or (1, T_k) with T_k = {s.shape[1]}, "
                             f"got {tuple(as_tensor(attention_mask, 'attention_mask').shape)}")
        m = m.detach().cpu()
        if m.is_floating_point() and not bool(torch.isfinite(m).all()):
            raise ValueError("attention_mask must hold only 0 and 1, found NaN or infinity")
        if not bool(((m == 0) | (m == 1)).all()):
            raise ValueError(f"attention_mask must hold only 0 and 1, got values {sorted(set(m.tolist()))[:4]}")
        pad = [int(v) for v in m.tolist()]
    if not isinstance(editable, bool):
        raise TypeError(f"editable must be a bool, got {type(editable).__name__}")
    data = {"tokens": toks, "scores": _numbers(s), "pad": pad, "editable": editable}
    return render("mask", data, _title(title, "Causal and padding masks"), len(toks))


def graph_threshold(weights, tokens, *, threshold: float = 0.1, title: str | None = None) -> Explorable:
    """Chapter 8: the weight matrix as a directed graph, with a threshold slider.

    Drawn as the chapter's static figures (:func:`attnlib.plotting.draw_attention_graph`):
    nodes are the tokens in reading order; edge ``i -> j`` (query ``i`` attends to key
    ``j``, weight ``weights[i, j]``) is an arc above the line when ``j < i`` (an earlier
    key), below it when ``j > i``, a loop when ``i = j``; width, opacity and viridis colour
    grow with the weight, on a scale from 0 to 1 (a colour bar is drawn).
    The slider hides edges lighter than the threshold and counts the edges kept, as
    :func:`attnlib.graphs.attention_graph` does with its ``threshold``.  The figure is laid
    out for the width of the column it is shown in.

    Shapes:
        weights: ``(T_q, T_k)`` with ``T_q = T_k``, non-negative rows summing to 1 (or 0
        for a fully masked row); tokens: ``T_k`` str.

    Raises:
        TypeError: non-tensor or non-float weights, tokens not a list of str.
        ValueError: non-square, negative or non-finite weights, rows not summing to 1,
            a length mismatch, a threshold outside [0, 1].

    >>> graph_threshold(torch.full((2, 2), 0.5), ["a", "b"]).kind
    'graph'
    """
    w = _stochastic(weights)
    toks = _tokens(tokens, w.shape[1], "key")
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
    data = {"tokens": toks, "weights": _numbers(w), "threshold": float(threshold),
            "vmax": GRAPH_VMAX, "earlier": GRAPH_EARLIER_SIDE}
    return render("graph", data, _title(title, "The attention graph, thresholded"), len(toks))


def head_hover(weights, tokens, *, query: int = 0, layer: int | None = None, head: int | None = None,
               title: str | None = None) -> Explorable:
    """Chapter 9: hover over (or focus) a token to highlight its row of one head.

    The tokens are shown as a sentence; the hovered token is the query ``i`` and every
    token ``j`` is shaded by ``weights[i, j]`` with the number underneath, next to the
    head's full heatmap (colour scale from 0 to the head's largest weight) with row ``i``
    outlined and the three keys it weights most.  :func:`induction_heads` shows several heads
    in the same view, with a menu.

    With the weights of **every head**, ``(n_layers, H, T_q, T_k)``, a menu picks the layer and
    head (the pattern of :func:`induction_heads`), opening on ``layer``, ``head``; the weights
    are embedded rounded to 3 decimals and drawn on one colour scale from 0 to 1.

    Shapes:
        weights: ``(T_q, T_k)`` with ``T_q = T_k``, rows summing to 1, e.g.
        ``attentions[layer][0, head]`` from a Hugging Face model, or ``(n_layers, H, T_q, T_k)``
        (e.g. ``attnlib.encoder.run(text).stacked("pattern")``); tokens: ``T_k`` str.

    Raises:
        TypeError: non-tensor or non-float weights, tokens not a list of str, non-int
            ``query``, ``layer`` or ``head``.
        ValueError: non-square, negative or non-finite weights, rows not summing to 1,
            a length mismatch, ``query``, ``layer`` or ``head`` out of range, ``layer``/``head``
            given with the weights of one head.

    >>> head_hover(torch.eye(3), ["[CLS]", "hi", "[SEP]"], query=1).kind
    'hover'
    >>> head_hover(torch.eye(3).repeat(2, 4, 1, 1), ["[CLS]", "hi", "[SEP]"], layer=1, head=3).kind
    'hover'
    """
    w4 = _float_tensor(weights, "weights", "(T_q, T_k) or (n_layers, H, T_q, T_k)", (2, 4))
    if w4.dim() == 4:
        menu, pick = _head_menu(w4, "weights", layer, head, decimals=3, check=_stochastic)
        toks = _tokens(tokens, w4.shape[-1], "key")
        data = {"tokens": toks, "heads": menu, "head": pick, "query": _index(query, w4.shape[-2], "query"),
                "vmax": 1.0}  # weights are probabilities: one scale for every head, compared colour for colour
        return render("hover", data, _title(title, "Where each token looks: pick a layer and head"), len(toks))
    if layer is not None or head is not None:
        raise ValueError(f"layer and head pick from the weights of every head (n_layers, H, T_q, T_k), got {tuple(w4.shape)}")
    w = _stochastic(weights)
    toks = _tokens(tokens, w.shape[1], "key")
    rows = _numbers(w)
    data = {"tokens": toks, "weights": rows, "query": _index(query, w.shape[0], "query"),
            "vmax": max(max(row) for row in rows)}  # one head: the colour scale ends at its largest weight
    return render("hover", data, _title(title, "Where each token looks"), len(toks))


def round_attentions(attentions, decimals: int = 3) -> tuple[torch.Tensor, ...]:
    """Attention weights rounded for compact embedding, e.g. in bertviz's ``head_view``.

    bertviz writes every weight into the page as JSON; float32 values print with ~18
    characters each (``0.12345679104328156``), rounded float64 values with ~5
    (``0.123``).  Three decimals are finer than any colour in the view.

    Shapes:
        attentions: a sequence of ``(B, H, T_q, T_k)`` tensors, one per layer (a Hugging
        Face model's ``output.attentions``); result: the same shapes, float64 on the CPU.

    Raises:
        TypeError: not a list/tuple of floating tensors, or ``decimals`` not an int.
        ValueError: ``decimals`` outside 1..7.

    >>> round_attentions([torch.tensor([[[[0.123456, 0.876544]]]])])[0].tolist()
    [[[[0.123, 0.877]]]]
    """
    if not isinstance(attentions, (list, tuple)) or not attentions:
        raise TypeError(f"attentions must be a non-empty list or tuple of tensors, got {type(attentions).__name__}")
    if isinstance(decimals, bool) or not isinstance(decimals, numbers.Integral):
        raise TypeError(f"decimals must be an int, got {type(decimals).__name__}")
    if not 1 <= decimals <= 7:
        raise ValueError(f"decimals must be in 1..7, got {decimals}")
    out = []
    for i, a in enumerate(attentions):
        a = as_tensor(a, f"attentions[{i}]")
        if not a.is_floating_point():
            raise TypeError(f"attentions[{i}] must be floating point, got dtype {a.dtype}")
        out.append(torch.round(a.detach().to("cpu", torch.float64), decimals=int(decimals)))
    return tuple(out)


def induction_heads(layer_weights, tokens, *, head: int | None = None, query: int = 0,
                    title: str | None = None) -> Explorable:
    """Chapter 7: every head of a small model on one sequence; pick a head from a menu, then
    hover (or focus) a token to highlight its row: the view of :func:`head_hover` (the same
    ``'hover'`` explorable, ``static/xp_hover.js``), with a head menu when there are several.

    The menu lists the heads as ``"layer l, head h"``; the heatmap uses one fixed colour scale
    from 0 to 1 for every head, so that heads can be compared colour for colour.

    Shapes:
        layer_weights: a list of ``n_layers`` tensors ``(1, H, T, T)`` or ``(H, T, T)`` (one
        sequence; e.g. :func:`attnlib.induction.head_patterns`), rows summing to 1;
        tokens: ``T`` str.

    Raises:
        TypeError: not a list of floating tensors, tokens not a list of str, a non-int
            ``head`` or ``query``.
        ValueError: a batch of more than one sequence, layers of different shapes, weights
            that are not square, negative, non-finite or whose rows do not sum to 1; a length
            mismatch; ``head`` or ``query`` out of range.

    >>> w = [torch.eye(3)[None, None].repeat(1, 2, 1, 1)] * 2
    >>> induction_heads(w, ["a", "b", "c"]).kind
    'hover'
    """
    if not isinstance(layer_weights, (list, tuple)) or not layer_weights:
        raise TypeError(f"layer_weights must be a non-empty list of (1, H, T, T) tensors, one per layer, "
                        f"got {type(layer_weights).__name__}")
    heads, shape = [], None
    for layer, w in enumerate(layer_weights):
        w = _float_tensor(w, f"layer_weights[{layer}]", "(1, H, T, T) or (H, T, T)", (3, 4))
        if w.dim() == 4:
            if w.shape[0] != 1:
                raise ValueError(f"layer_weights[{layer}] holds {w.shape[0]} sequences; pass one: w[:1]")
            w = w[0]
        if shape is not None and tuple(w.shape) != shape:
            raise ValueError(f"every layer must have the same (H, T, T), got {shape} and {tuple(w.shape)}")
        shape = tuple(w.shape)
        for h in range(w.shape[0]):
            heads.append({"label": f"layer {layer}, head {h}",
                          "weights": _numbers(_stochastic(w[h], f"layer_weights[{layer}][{h}]"))})
    T = shape[-1]
    toks = _tokens(tokens, T, "key")
    start = len(heads) - 1 if head is None else _index(head, len(heads), "head")
    data = {"tokens": toks, "heads": heads, "head": start, "query": _index(query, T, "query"),
            "vmax": 1.0}  # weights are probabilities: one scale for every head, compared colour for colour
    return render("hover", data, _title(title, "Every head of the trained model: pick one, hover a token"), len(toks))
__all__ += ["induction_heads", "lm_lab"]


# ---------------------------------------------------------------------------- chapter 12: RoPE
def rope_offset(q, k, query: str = "query", key: str = "key", *, base: float = 10000.0,
                max_offset: int = 32, max_position: int = 512, position: int = 100,
                title: str | None = None) -> Explorable:
    """Chapter 12: drag the query's position ``i`` and the offset ``i - j``; watch the score of
    the rotated query and key, ``apply_rope(q, i) . apply_rope(k, j) / sqrt(d_k)``, which
    depends on the offset only (Su et al. 2021, eq. 16).  The curve shows the score against
    the offset for the current ``i``; moving ``i`` leaves it unchanged.  The JavaScript rotates
    in the rotate-half layout of :func:`attnlib.apply_rope` (the browser test compares it with
    :func:`attnlib.positions.rope_scores`).

    Shapes:
        q, k: ``(d_k,)`` with ``d_k`` even (one query and one key of one head, e.g. from
        :func:`attnlib.encoder.head_qkv`).

    Raises:
        TypeError: non-tensor or non-float q/k, non-str labels, non-int positions.
        ValueError: wrong shapes, an odd ``d_k``, NaN or infinity, ``base <= 1``, offsets or
            positions out of range (``1 <= max_offset <= max_position``,
            ``max_offset <= position <= max_position``).
    """
    qv = _float_tensor(q, "q", "(d_k,)", (1,))
    kv = _float_tensor(k, "k", "(d_k,)", (1,))
    _finite(qv, "q")
    _finite(kv, "k")
    if qv.shape != kv.shape or qv.shape[0] % 2 or qv.shape[0] == 0:
        raise ValueError(f"q and k must have the same even width d_k, got {tuple(qv.shape)} and {tuple(kv.shape)}")
    for name, value in (("query", query), ("key", key)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str (the token's text), got {type(value).__name__}")
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number above 1, got {base!r}")
    for name, value in (("max_offset", max_offset), ("max_position", max_position), ("position", position)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= max_offset <= max_position or not max_offset <= position <= max_position:
        raise ValueError(f"need 1 <= max_offset <= position <= max_position, got {max_offset}, {position}, {max_position}")
    data = {"q": _numbers(qv), "k": _numbers(kv), "query": query, "key": key, "base": float(base),
            "max_offset": int(max_offset), "max_position": int(max_position), "position": int(position)}
    return render("rope", data, _title(title, "Rotary embeddings: the score depends on i \u2212 j only"), 2)


__all__ += ["rope_offset"]


def _rounded(t: torch.Tensor, digits: int = 4) -> list:
    return [round(float(x), digits) for x in t.reshape(-1).tolist()]


_SPECIAL = ("[CLS]", "[SEP]", "[PAD]")


def _offset_share_sums(weights: torch.Tensor, tokens, offsets) -> tuple[torch.Tensor, torch.Tensor]:
    """The model lab's offset preference on one text, as sums and counts to pool over texts.

    For a query ``i`` and the key ``j = i + o`` (both ordinary tokens: not ``[CLS]``, ``[SEP]``
    or ``[PAD]``) of a text of ``T`` tokens (every token counted), the preference is
    ``(A[i, j] - 1/T) / (1 - 1/T)``: 0 at the uniform weight ``1/T`` (a head that ignores its
    input), 1 with all of the query's weight on that key, ``-1/(T - 1)`` with none.  Unlike the
    lift ``T * A[i, j]`` (:func:`attnlib.evidence.positional_lifts`), which grows with ``T``,
    its two reference points do not depend on the length, so a short sentence compares with
    longer reference sentences.  The page's ``offsetShare`` (``static/xp_model.js``) is the same
    formula on one text.

    Shapes:
        weights ``(L, H, T, T)`` rows summing to 1; tokens ``T`` str; returns the sums
        ``(L, H, len(offsets))`` float64 and the counts ``(len(offsets),)`` float64 (pairs per
        offset, the same for every head).

    Raises:
        ValueError: ``weights`` not ``(L, H, T, T)`` with ``T = len(tokens)``.
    """
    w = weights.double()
    T = len(tokens)
    if w.dim() != 4 or w.shape[-1] != T or w.shape[-2] != T:
        raise ValueError(f"weights must be (L, H, T, T) with T = len(tokens) = {T}, got {tuple(w.shape)}")
    ordinary = [i for i, t in enumerate(tokens) if t not in _SPECIAL]
    keep = set(ordinary)
    sums = torch.zeros(w.shape[0], w.shape[1], len(offsets), dtype=torch.float64)
    counts = torch.zeros(len(offsets), dtype=torch.float64)
    for k, o in enumerate(offsets):
        rows = [i for i in ordinary if i + o in keep]
        if rows:
            q = torch.tensor(rows)
            sums[:, :, k] = ((w[:, :, q, q + o] - 1 / T) / (1 - 1 / T)).sum(-1)
            counts[k] = len(rows)
    return sums, counts


def _offset_shares(offsets, *, texts=None, model=None, tokenizer=None) -> torch.Tensor:
    """The offset preference of :func:`_offset_share_sums` for every head, pooled over every
    (query, key) pair of ``texts`` (default :func:`attnlib.evidence.reference_sentences`), each
    text at its own length; one batched forward pass, padding masked.

    Shapes:
        returns ``(n_layers, H, len(offsets))`` float64 (unitless).

    Raises:
        ValueError: no pair of ordinary tokens at some offset in any text.
    """
    offsets = [int(o) for o in offsets]
    texts = evidence.reference_sentences() if texts is None else list(texts)
    batch = encoder.get_batch_attentions(texts, model=model, tokenizer=tokenizer)     # padding masked
    total, counts = None, torch.zeros(len(offsets), dtype=torch.float64)
    for b, tokens in enumerate(batch.tokens):
        T = int(batch.attention_mask[b].sum())                                        # real tokens come first
        weights = torch.stack([a[b, :, :T, :T] for a in batch.attentions]).cpu()      # (L, H, T, T)
        sums, n = _offset_share_sums(weights, tokens[:T], offsets)
        total = sums if total is None else total + sums
        counts += n
    if bool((counts == 0).any()):
        raise ValueError(f"no pair of ordinary tokens at offset(s) {[o for o, n in zip(offsets, counts) if n == 0]}")
    return total / counts


def model_lab(text: str, text_b: str | None = None, *, mode: str = "one", layer: int = 0, head: int = 0,
              ablation: bool = True, offsets=(-1, 0, 1), model=None, tokenizer=None) -> Explorable:
    """Chapter 9's model lab: the pretrained encoder on a sentence (or a minimal pair, or a
    sentence pair), any layer and head as a heatmap with its baselines, and one head switched
    off against the same measure for every head (the reference scale).

    The figure opens on runs of the kernel's PyTorch model (:func:`attnlib.encoder.run`).  In
    the published book a reader can load the same encoder into the page (ONNX, in a Web
    Worker; :mod:`attnlib.encoder.browser`) and run their own sentences; in a notebook, change
    the arguments and run the cell again.

    Args:
        text, text_b: sentence A, and sentence B for ``mode="minimal"`` (two runs side by side)
            or ``mode="pair"`` (one input, ``[CLS] A [SEP] B [SEP]``).
        layer, head: the head shown first.
        ablation: include the 72 single-head zero ablations of sentence A (cosine distance of
            the sentence vector, :func:`attnlib.evidence.layer_ablation` with ``mode="zero"``).
        offsets: offsets whose preference (:func:`_offset_share_sums`: 0 at the uniform weight
            ``1/T``, 1 with all of a query's weight on that key, whatever the length) the page
            compares with the same measure over the reference sentences.

    Shapes:
        embeds per run ``(n_layers, H, T, T)`` weights, rounded to 4 decimals.

    Raises:
        TypeError: a text is not a str.  ValueError: ``mode`` unknown; ``text_b`` missing for a
        pair; a text is empty or longer than :data:`MAX_TOKENS` tokens with ``[CLS]`` and
        ``[SEP]`` (the message says which and how long: the lab in the book's page reads up to
        512 once its model is loaded).  IndexError: ``layer`` or ``head`` outside the model.
    """
    mode = _validate_choice(mode)
    if mode != "one" and text_b is None:
        raise ValueError(f"mode={mode!r} compares two sentences: pass text_b")
    model, tokenizer = encoder.loading.model_and_tokenizer(model, tokenizer)
    n_layers, n_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    kw = {"model": model, "tokenizer": tokenizer}
    # the length first, in the reader's terms (encoder.run would say "pass truncate=True", an
    # argument the lab does not take, and a figure of more than MAX_TOKENS is unreadable)
    for name, parts in ([("the two sentences", (text, text_b))] if mode == "pair" else
                        [("sentence A", (text,))] + ([("sentence B", (text_b,))] if mode == "minimal" else [])):
        if all(isinstance(p, str) for p in parts):
            n = sum(len(tokenizer.tokenize(p)) for p in parts) + len(parts) + 1      # [CLS], one [SEP] each
            if n > MAX_TOKENS:
                raise ValueError(f"{name} {'have' if len(parts) > 1 else 'has'} {n} tokens with [CLS] and [SEP]; model_lab "
                                 f"shows at most {MAX_TOKENS} in a notebook: shorten {'them' if len(parts) > 1 else 'it'} "
                                 f"to {MAX_TOKENS} tokens or fewer (the lab in the book's page reads up to 512 once its "
                                 "model is loaded)")
    runs = ([encoder.run(text, text_b, **kw)] if mode == "pair"
            else [encoder.run(t, **kw) for t in ([text] if mode == "one" else [text, text_b])])
    for r in runs:
        _tokens(r.tokens, len(r.tokens), "token")
    layer = _index(layer if layer >= 0 else layer + n_layers, n_layers, "layer")
    head = _index(head if head >= 0 else head + n_heads, n_heads, "head")
    change = None
    if ablation:
        pair = (text, text_b) if mode == "pair" else (text, None)
        if pair[1] is None:
            change = torch.cat([evidence.layer_ablation(text, l, mode="zero", **kw) for l in range(n_layers)])
        else:  # a sentence pair: the same measure on the paired input
            intact = encoder.run(*pair, **kw).output.double()
            change = torch.tensor([float(1 - torch.nn.functional.cosine_similarity(
                intact.mean(0), encoder.run(*pair, edits=[{"layer": l, "head": h, "mode": "zero"}], **kw).output.double().mean(0), dim=0))
                for l in range(n_layers) for h in range(n_heads)])
    shares = _offset_shares(list(offsets), **kw)                            # (L, H, n_offsets)
    data = {
        "n_layers": n_layers, "n_heads": n_heads, "layer": layer, "head": head, "mode": mode,
        "textA": text, "textB": text_b or "",
        "runs": [{"tokens": r.tokens, "typeIds": r.token_type_ids.tolist(), "sentenceBStart": r.sentence_b_start,
                  "attentions": _rounded(r.stacked("pattern"))} for r in runs],
        "ablation": None if change is None else {"text": None, "change": _rounded(change, 6)},
        "close_call": CLOSE_CALL,           # the minimal-pair rule the flip_pair exercise grades with
        "offset_share": {"offsets": [int(o) for o in offsets], "values": _rounded(shares, 4),
                         "n_texts": len(evidence.reference_sentences())},
    }
    title = "The encoder on your own sentences: any layer and head, baselines, a minimal pair, a head switched off"
    return render("model", data, title, max(len(r.tokens) for r in runs))


def circuit_lab(words=None, corrupt=None, *, checkpoint: str | None = None, layer: int = 1,
                head: int | None = None) -> Explorable:
    """Chapter 7's circuit lab: the chapter's trained language model on a word sequence, at any of
    16 moments of its training or as the one-layer control; the loss on every word, any head's
    pattern, heads switched off (zero or mean), and activation patching between a clean and a
    corrupted sequence, scored on the clean sequence's copy target
    (:func:`attnlib.circuit_lab.pair_metric`: the logit of the word that followed the last word's
    earlier occurrence minus the mean logit, at the last position), with the heads switched off
    applied in every patched run (:func:`attnlib.circuit_lab.pair_tables`).

    The figure opens on a run PyTorch computed (:func:`attnlib.circuit_lab.lab_data`).  In the
    published book a reader loads the models into the page (ONNX, in a Web Worker) and does
    everything there; in a notebook, change the arguments and run the cell again.

    Args:
        words, corrupt: the clean sequence and its corrupted copy (one word changed, any word:
            the copy target's earlier copy, the last word's earlier occurrence, ...), each a str
            of words of the Gettysburg Address or a list of words; default: the first of the
            chapter's patching pairs.  A clean sequence with nothing to copy shows no metric and
            says why (:func:`attnlib.circuit_lab.copy_problem`).
        checkpoint: a model name of :func:`attnlib.circuit_lab.lab_models` (default: the last
            step of training).
        layer, head: the head shown first (default head: the induction head of layer 1).

    Raises:
        ValueError: a word not in the vocabulary, a sequence longer than 32 words, a pair that
            does not differ at exactly one position, an unknown checkpoint.
        IndexError: ``layer`` or ``head`` outside the model.
    """
    from . import circuit_lab as lab
    data = lab.lab_data(words, corrupt, model_name=checkpoint, layer=layer, head=head)
    title = "The circuit lab: chapter 7's model on your own sequence, at any step of training, with heads switched off and patched"
    return render("tiny", data, title, len(data["words"]))


def lm_lab(clean: str | None = None, corrupted: str | None = None, answers=None, *, layer: int = 23,
           head: int = 3) -> Explorable:
    """Chapter 10's language-model lab: SmolLM2-135M (:mod:`attnlib.language_model`) on a prompt,
    any head's pattern, heads switched off, and the patching sweep of every head and of the
    residual stream for a clean/corrupted pair (:func:`attnlib.language_model.patch_sweep`).

    The figure opens on the kernel's run of ``clean`` (one head's pattern and the five likeliest
    next tokens).  In the published book a reader loads the model into the page (ONNX with the
    file's 4-bit weights, in a Web Worker; :mod:`attnlib.lm_export`) and does everything there;
    in a notebook, use :mod:`attnlib.language_model` in the cells.

    Args:
        clean, corrupted, answers: the pair and its two one-token answers (default: the
            chapter's first IOI pair, " Mary" / " John").
        layer, head: the head shown first.

    Raises:
        ValueError: a prompt longer than :data:`attnlib.lm_export.PAGE_MAX_TOKENS` tokens, an
            answer that is not one token.  IndexError: ``layer`` or ``head`` outside the model.
    """
    from . import _validate
    from . import language_model as lm
    from .lm_export import PAGE_MAX_TOKENS
    pair = lm.ioi_pair("Mary", "John", place="store", thing="drink")
    clean = pair["clean"] if clean is None else _validate.text(clean, "clean")
    corrupted = pair["corrupted"] if corrupted is None else _validate.text(corrupted, "corrupted")
    answers = pair["answers"] if answers is None else list(answers)
    for answer in answers:
        lm.answer_token(answer)
    model = lm.load()
    layer, head = _validate.index(layer, model.n_layers, "layer"), _validate.index(head, model.n_heads, "head")
    tokens = lm.encode(clean)
    if tokens.numel() > PAGE_MAX_TOKENS:
        raise ValueError(f"the prompt is {tokens.numel()} tokens; the page's model reads at most {PAGE_MAX_TOKENS}")
    r = lm.run(model, tokens)
    probs = r.logits[0, -1].softmax(-1)
    top = probs.topk(5)
    tok = lm.tokenizer()
    data = {"tokens": [tok.token(i) for i in tokens.tolist()], "layer": layer, "head": head,
            "pattern": [[round(float(x), 4) for x in row] for row in r.pattern[layer][0, head]],
            "top": [[tok.token(int(i)), round(float(p), 4)] for p, i in zip(top.values, top.indices)],
            "clean": clean, "corrupted": corrupted, "answers": answers, "n_layers": model.n_layers,
            "n_heads": model.n_heads, "max_tokens": PAGE_MAX_TOKENS, "min_gap": _min_gap()}
    title = "The language-model lab: SmolLM2-135M on your own prompt, any head, heads switched off, and patching"
    return render("lm", data, title, tokens.numel())


def _min_gap() -> float:
    from .patching import MIN_GAP
    return MIN_GAP


def _validate_choice(mode):
    if mode not in ("one", "minimal", "pair"):
        raise ValueError(f"mode must be 'one', 'minimal' or 'pair', got {mode!r}")
    return mode


# ------------------------------------------------- chapters 2, 3 and 11: computations step by step
def _qkv_rows(q, k, v):
    """Checked float64 copies of self-attention ``q (T, d_k)``, ``k (T, d_k)``, ``v (T, d_v)``."""
    qv = _float_tensor(q, "q", "(T_q, d_k)", (2,))
    kv = _float_tensor(k, "k", "(T_k, d_k)", (2,))
    vv = _float_tensor(v, "v", "(T_k, d_v)", (2,))
    for t, name in ((qv, "q"), (kv, "k"), (vv, "v")):
        _finite(t, name)
    if qv.shape[1] != kv.shape[1]:
        raise ValueError(f"q and k must share d_k: q {tuple(qv.shape)} vs k {tuple(kv.shape)}")
    if kv.shape[0] != vv.shape[0]:
        raise ValueError(f"k and v must share T_k: k {tuple(kv.shape)} vs v {tuple(vv.shape)}")
    if qv.shape[0] != kv.shape[0]:
        raise ValueError(f"q and k must have one row per token (self-attention, T_q = T_k): "
                         f"q {tuple(qv.shape)} vs k {tuple(kv.shape)}")
    return qv, kv, vv


def score_steps(q, k, v, tokens, *, query: int = 0, key: int = 0, title: str | None = None) -> Explorable:
    """Chapters 2 and 3: one query-key computation of a real head, one step at a time.

    The reader picks a query token ``i`` and a key token ``j`` (two menus) and steps with
    Previous/Next through: the dot product ``q_i . k_j = sum_c q_ic k_jc`` (its ``d_k`` terms
    drawn as bars, with the count of positive terms and the three largest in size), the
    scaled score ``s_ij = q_i . k_j / sqrt(d_k)``, ``exp(s_ij - m_i)`` with the row maximum
    ``m_i = max_j s_ij`` subtracted, the sum of those exponentials over all keys, the weight
    ``a_ij`` (the ratio; :func:`attnlib.softmax`'s recipe), and the output row
    ``out_i = sum_j a_ij v_j``: its first four dimensions and its Euclidean norm, next to
    those of the key's own share ``a_ij v_j`` (Vaswani et al. 2017, eq. 1).  All arithmetic
    runs in the page in float64 on the embedded ``q, k, v``; the browser test compares it
    with PyTorch.

    Shapes:
        q: ``(T, d_k)``, k: ``(T, d_k)``, v: ``(T, d_v)``: one head of one sentence, e.g. from
        :func:`attnlib.encoder.head_qkv`; tokens: ``T`` str.

    Raises:
        TypeError: non-tensor or non-float q/k/v, tokens not a list of str, non-int
            ``query``/``key``.
        ValueError: wrong shapes, NaN or infinity, ``q`` and ``k`` not sharing ``d_k``,
            ``k`` and ``v`` not sharing ``T``, ``len(tokens) != T``, ``query`` or ``key``
            out of range.

    >>> x = torch.eye(3)
    >>> score_steps(x, x, x, ["a", "b", "c"], query=1, key=2).kind
    'steps'
    """
    qv, kv, vv = _qkv_rows(q, k, v)
    toks = _tokens(tokens, kv.shape[0], "token")
    data = {"tokens": toks, "q": _numbers(qv), "k": _numbers(kv), "v": _numbers(vv),
            "query": _index(query, qv.shape[0], "query"), "key": _index(key, kv.shape[0], "key")}
    return render("steps", data, _title(title, "One query and one key, step by step"), len(toks))


def online_softmax_steps(q, k, v, tokens, *, query: int = 0, block_size: int = 5,
                         title: str | None = None) -> Explorable:
    """Chapter 11: the online softmax of one query row, one block of keys at a time.

    The scores ``s_j = q_i . k_j / sqrt(d_k)`` of query ``i`` arrive in blocks of
    ``block_size`` keys (a menu changes the size).  Each Next folds one block into the
    running maximum ``m``, the running sum ``l = sum_j exp(s_j - m)`` and the running
    weighted sum of values ``acc = sum_j exp(s_j - m) v_j``, after rescaling the old ``l``
    and ``acc`` by ``exp(m_old - m_new)``, as :func:`attnlib.online_softmax_step` and
    :func:`attnlib.tiled_attention` do.  After the last block ``out = acc / l`` is set beside
    the output of the whole row's softmax, ``softmax(s) V``, with their largest difference.
    Four dimensions of ``acc`` and ``out`` and their norms are shown.  The arithmetic runs in
    the page in float64; the browser test compares it with attnlib.

    Shapes:
        q: ``(T, d_k)``, k: ``(T, d_k)``, v: ``(T, d_v)``: one head of one sentence, e.g.
        :func:`attnlib.encoder.head_qkv`; tokens: ``T`` str.  Only row ``query`` of ``q`` is
        embedded.

    Raises:
        TypeError: non-tensor or non-float q/k/v, tokens not a list of str, non-int
            ``query``/``block_size``.
        ValueError: wrong shapes, NaN or infinity, mismatched ``d_k`` or ``T``,
            ``query`` out of range, ``block_size`` outside ``1..T``.

    Source: Milakov & Gimelshein (2018), algorithm 3; Dao et al. (2022), algorithm 1.

    >>> x = torch.eye(4)
    >>> online_softmax_steps(x, x, x, list("abcd"), query=2, block_size=2).kind
    'online'
    """
    qv, kv, vv = _qkv_rows(q, k, v)
    toks = _tokens(tokens, kv.shape[0], "token")
    i = _index(query, qv.shape[0], "query")
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    T = kv.shape[0]
    if not 1 <= block_size <= T:
        raise ValueError(f"block_size must be in 1..{T} (T = {T} keys), got {block_size}")
    sizes = sorted({b for b in (1, 2, 3, 4, 5, 8, 16, 32, 64, 128) if b <= T} | {int(block_size), T})
    data = {"tokens": toks, "q": _numbers(qv[i]), "k": _numbers(kv), "v": _numbers(vv), "query": i,
            "block": int(block_size), "sizes": sizes}
    return render("online", data, _title(title, "The online softmax, one block of keys at a time"), len(toks))


__all__ += ["score_steps", "online_softmax_steps"]
