"""Exercises of chapter 6, "Multi-head attention".

* ``head_params``: predict, then check on the encoder's first layer, how the number of
  parameters of a multi-head attention layer changes with the number of heads at a fixed
  ``d_model`` (:func:`head_params_data` counts them on real modules).
* ``torch_mask``: predict, then check on the encoder's first layer, which ``attn_mask`` makes
  ``torch.nn.MultiheadAttention`` apply an attnlib boolean mask (``True`` = may attend); the
  grade follows the measured outputs (:func:`torch_mask_data`).
"""
from __future__ import annotations

from .core import checker, grade_choice
from .registry import define

__all__ = [
    "HEAD_PARAMS_OPTIONS", "head_params_data", "head_params_answer", "check_head_params",
    "TORCH_MASK_OPTIONS", "torch_mask_data", "torch_mask_answer", "check_torch_mask",
]


def _r(x, digits: int = 3) -> float:
    return round(float(x), digits)


# ----------------------------------------------------------------------------- head_params
HEAD_PARAMS_OPTIONS = [
    "the same number of parameters",
    "12 times as many parameters",
    "12 times fewer parameters",
    "it depends on the length of the sentence",
]
_HEAD_PARAMS_FEEDBACK = {
    HEAD_PARAMS_OPTIONS[1]: "Each head does get its own W_Q, W_K and W_V, but each is only d_head = d_model / H "
                            "columns wide: the 12 narrow matrices sit side by side in one (d_model, d_model) "
                            "matrix, exactly the size of one wide head's.",
    HEAD_PARAMS_OPTIONS[2]: "The heads are narrower, but there are 12 of them: 12 matrices of d_head = d_model / 12 "
                            "columns fill the same (d_model, d_model) matrix as one head of width d_model.",
    HEAD_PARAMS_OPTIONS[3]: "Weights are fixed by the layer's shapes, never by the input: the same module reads a "
                            "sentence of any length. Only the attention weights (B, H, T, T) grow with T, and they "
                            "are computed, not learned.",
}


def head_params_data() -> dict:
    """The parameters of :class:`attnlib.MultiHeadAttention` with ``d_model = 384`` (the
    encoder's width) and 1, 12 and 384 heads, counted on real modules.

    Returns:
        dict with ``d_model``, ``heads`` (the head counts) and ``params`` (per count, the total
        number of parameters: weights and biases of W_Q, W_K, W_V and W_O).
    """
    from ..multihead import MultiHeadAttention

    heads = [1, 12, 384]
    params = [sum(p.numel() for p in MultiHeadAttention(384, h).parameters()) for h in heads]
    return {"d_model": 384, "heads": heads, "params": params}


def head_params_answer(data: dict) -> str:
    """The option the counted parameters support (12 heads against 1 head of width d_model)."""
    one, twelve = data["params"][0], data["params"][1]
    if one == twelve:
        return HEAD_PARAMS_OPTIONS[0]
    return HEAD_PARAMS_OPTIONS[1] if twelve > one else HEAD_PARAMS_OPTIONS[2]


@checker
def check_head_params(answer, data: dict | None = None):
    """Grade the parameter-count question against the counted modules (:func:`head_params_data`)."""
    data = data or head_params_data()
    counts = ", ".join(f"{h} head{'s' if h > 1 else ''}: {n:,}" for h, n in zip(data["heads"], data["params"]))
    return grade_choice(answer, HEAD_PARAMS_OPTIONS, head_params_answer(data),
                        "Splitting d_model into H heads of width d_model / H only regroups the columns of "
                        "W_Q, W_K and W_V: the matrices keep their shape (d_model, d_model), so the layer "
                        "keeps its parameters; what changes is how many separate weight rows each query computes.",
                        _HEAD_PARAMS_FEEDBACK,
                        measured=f"Counted on attnlib.MultiHeadAttention with d_model = {data['d_model']}: {counts}.",
                        hint="Write the shape of W_Q for one head of width d_head, then put the H heads' "
                             "matrices side by side.")


define(6, "head_params", kind="choice", title="How many parameters do more heads cost?",
       question=("Predict, then check. The encoder's layers have <i>d</i><sub>model</sub> = 384 and 12 heads of "
                 "width 32. Compared with one head of width 384 (the same <i>d</i><sub>model</sub>), a layer "
                 "with 12 heads has&hellip;"),
       options=HEAD_PARAMS_OPTIONS, data=head_params_data, grade=check_head_params)


# ----------------------------------------------------------------------------- torch_mask
TORCH_MASK_OPTIONS = [
    "attn_mask=allowed",
    "attn_mask=~allowed",
    "attn_mask=allowed.float()",
    "attn_mask=1 - allowed.float()",
]
_TORCH_MASK_FEEDBACK = {
    TORCH_MASK_OPTIONS[0]: "torch.nn.MultiheadAttention reads a boolean True as 'masked out', the "
                           "opposite of attnlib and F.scaled_dot_product_attention. Passing "
                           "allowed hides exactly the keys that should be visible.",
    TORCH_MASK_OPTIONS[2]: "A float mask is added to the scores: this adds 1 to the allowed "
                           "scores and 0 to the others, so nothing is removed (a forbidden key "
                           "needs -inf).",
    TORCH_MASK_OPTIONS[3]: "A float mask is added to the scores: this adds 1 to the forbidden "
                           "scores, which makes them more likely to be attended, not less.",
}


_MASK_MATCH = 1e-4   # max |difference| below which an option "computes the same attention"


def torch_mask_data() -> dict:
    """What each option of :data:`TORCH_MASK_OPTIONS` does on real input: layer 0 of the
    course's encoder, its four projections loaded into ``torch.nn.MultiheadAttention`` and
    into :class:`attnlib.MultiHeadAttention`, run on the embedded running sentence with the
    causal mask ``allowed``.

    Returns:
        dict with ``options`` (the option strings), ``gaps`` (per option, the largest
        ``|out_torch - out_attnlib|``, or None where PyTorch's output is not finite: a row
        whose every key is hidden), ``nan_rows`` (per option, the rows of PyTorch's output that
        are NaN), ``T`` (tokens) and ``torch`` (the version that produced them).
    """
    import torch

    from .. import corpus, encoder
    from ..masks import causal_mask
    from ..multihead import MultiHeadAttention

    model, _ = encoder.load_encoder()
    X = encoder.get_attentions(corpus.RUNNING).hidden_states[0].float().cpu()     # (1, T, 384)
    layer = model.encoder.layer[0].attention
    ours = MultiHeadAttention(384, 12).eval()
    with torch.no_grad():
        for mine, theirs in ((ours.q_proj, layer.self.query), (ours.k_proj, layer.self.key),
                             (ours.v_proj, layer.self.value), (ours.out_proj, layer.output.dense)):
            mine.load_state_dict({k: v.float().cpu() for k, v in theirs.state_dict().items()})
        theirs = torch.nn.MultiheadAttention(384, 12, batch_first=True).eval()
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
        T = X.shape[1]
        allowed = causal_mask(T)
        expected, _ = ours(X, mask=allowed)
        masks = [allowed, ~allowed, allowed.float(), 1 - allowed.float()]
        gaps, nan_rows = [], []
        for m in masks:
            out, _ = theirs(X, X, X, attn_mask=m, need_weights=False)
            bad = ~torch.isfinite(out[0]).all(-1)
            nan_rows.append(int(bad.sum()))
            gaps.append(None if bad.any() else _r((out - expected).abs().max().item(), 8))
    return {"options": list(TORCH_MASK_OPTIONS), "gaps": gaps, "nan_rows": nan_rows, "T": T,
            "torch": torch.__version__.split("+")[0]}


def torch_mask_answer(data: dict) -> str:
    """The option whose output matches attnlib's on the real layer (gap below 1e-4)."""
    close = [o for o, g in zip(data["options"], data["gaps"]) if g is not None and g < _MASK_MATCH]
    return close[0] if len(close) == 1 else TORCH_MASK_OPTIONS[1]


def _measured(data: dict) -> str:
    parts = []
    for option, gap, nan in zip(data["options"], data["gaps"], data["nan_rows"]):
        parts.append(f"{option}: " + (f"NaN in {nan} of {data['T']} rows (every key hidden there)" if gap is None
                                       else f"largest difference {gap:.1e}"))
    return (f"Measured on the encoder's first layer and the running sentence ({data['T']} tokens, causal mask, "
            f"torch {data['torch']}): " + "; ".join(parts) + ".")


@checker
def check_torch_mask(answer, data: dict | None = None):
    """Grade the mask-convention question against the real layer's outputs
    (:func:`torch_mask_data`): the right option is the one whose output matches attnlib's."""
    data = data or torch_mask_data()
    return grade_choice(answer, TORCH_MASK_OPTIONS, torch_mask_answer(data),
                        "PyTorch's module marks the keys to hide with True, so the mask is inverted. "
                        "An additive mask (0 where allowed, -inf elsewhere) works in both, unchanged.",
                        _TORCH_MASK_FEEDBACK, measured=_measured(data),
                        hint="Which convention does torch.nn.MultiheadAttention use for boolean masks? "
                             "Run the check cell below the question and compare the four outputs.")


define(6, "torch_mask", kind="choice", title="Two conventions for one mask",
       question=("Predict, then check. <code>allowed</code> is an attnlib boolean mask (<code>True</code> = the "
                 "query <b>may attend</b> to the key), here <code>attnlib.causal_mask(T)</code>. Which argument "
                 "makes <code>torch.nn.MultiheadAttention</code> compute the same attention as "
                 "<code>attnlib.MultiHeadAttention(...)(x, mask=allowed)</code> on the encoder's first layer? "
                 "Choose, then run the check cell, which compares all four on the real layer."),
       options=TORCH_MASK_OPTIONS, data=torch_mask_data, grade=check_torch_mask)


