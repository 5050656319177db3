"""Exercises of chapter 5, "Masking".

* ``causal_cells``: toggle the cells of a score matrix that a causal mask removes.
* ``padding_zero_keys``: how many keys get weight exactly 0 for a padded sentence.
* ``fully_masked_row``: predict, then check on a real head, what attention returns for a query
  whose every key is masked.

The token lists are the real WordPiece tokens of the course's encoder (the chapter-5 tests
check them against the tokenizer), written out so that importing this module stays cheap.
"""
from __future__ import annotations

from .core import checker, grade_choice, grade_number, parse_matrix, right, wrong
from .registry import define

__all__ = [
    "CAUSAL_SENTENCE", "CAUSAL_TOKENS", "check_causal_cells",
    "PADDED_SENTENCE", "PADDED_TOKENS", "check_padding_zero_keys",
    "FULLY_MASKED_LAYER", "FULLY_MASKED_HEAD", "FULLY_MASKED_PAD", "FULLY_MASKED_OPTIONS",
    "fully_masked_example", "check_fully_masked_row",
]

# ----------------------------------------------------------------------------- causal_cells
CAUSAL_SENTENCE = "Attention is all you need."
# tokenizer(CAUSAL_SENTENCE) without [CLS] and [SEP]: one query row and one key column each.
CAUSAL_TOKENS = ("attention", "is", "all", "you", "need", ".")


def _cell(tokens, i: int, j: int) -> str:
    return f"(query '{tokens[i]}', key '{tokens[j]}')"


@checker
def check_causal_cells(answer, tokens=CAUSAL_TOKENS):
    """Grade a ``(T, T)`` boolean matrix that should be ``True`` exactly where a causal mask
    removes a score (key after query: ``j > i``), ``False`` where attention is allowed."""
    T = len(tokens)
    removed, problem = parse_matrix(answer, (T, T), kind="bool")
    if problem:
        return problem
    future = [[j > i for j in range(T)] for i in range(T)]  # the cells the mask removes
    cells = [(i, j) for i in range(T) for j in range(T)]
    if removed == future:
        return right(f"Exactly the {T * (T - 1) // 2} cells above the diagonal: query i may use "
                     "keys 0..i (itself and the past), never a later token.")
    if not any(removed[i][j] for i, j in cells):
        return wrong("Nothing is switched on. Switch on the cells whose key comes after the "
                     "query: those scores are set to -inf.")
    if all(removed[i][j] != future[i][j] for i, j in cells):
        return wrong("You switched on the cells the mask keeps (the diagonal and below). "
                     "Switch on the ones it removes instead: key after query.")
    if all(removed[i][j] == future[j][i] for i, j in cells):
        return wrong("You removed the past instead of the future. Rows are queries, columns are "
                     "keys: query i loses the keys to its right (j > i), the words not yet written.")
    parts = [f"{sum(removed[i][j] != future[i][j] for i, j in cells)} of {T * T} cells are wrong."]
    diag = [i for i in range(T) if removed[i][i]]
    if diag:
        parts.append(f"You removed the diagonal at {_cell(tokens, diag[0], diag[0])}: a token may "
                     "attend to itself; causal masking only hides later tokens.")
    past = [(i, j) for i, j in cells if removed[i][j] and not future[i][j] and i != j]
    if past:
        i, j = past[0]
        parts.append(f"Cell {_cell(tokens, i, j)} is in the past of '{tokens[i]}' "
                     f"({len(past)} such cell(s)): earlier keys stay visible, switch it off.")
    missed = [(i, j) for i, j in cells if future[i][j] and not removed[i][j]]
    if missed:
        i, j = missed[0]
        parts.append(f"Cell {_cell(tokens, i, j)} is in the future of '{tokens[i]}' "
                     f"({len(missed)} such cell(s) still off): switch it on, the mask removes it.")
    return wrong(" ".join(parts), hint="Cell (i, j) is removed exactly when j > i.")


define(5, "causal_cells", kind="matrix", title="Which scores does a causal mask remove?",
       question=(f"Scores of the sentence <i>{CAUSAL_SENTENCE}</i> (rows = queries, columns = keys). "
                 "Switch <b>on</b> every cell that a causal (look-ahead) mask sets to -inf before the "
                 "softmax, and leave the cells it keeps off."),
       rows=CAUSAL_TOKENS, cols=CAUSAL_TOKENS, grade=check_causal_cells)


# ----------------------------------------------------------------------------- padding_zero_keys
PADDED_SENTENCE = "Hello there!"
# Its row of tokenizer(attnlib.corpus.PADDED_BATCH, padding=True): the longest sentence of the
# batch has 12 tokens, so this 5-token sentence is padded with 7 [PAD] tokens.
PADDED_TOKENS = ("[CLS]", "hello", "there", "!", "[SEP]") + ("[PAD]",) * 7


@checker
def check_padding_zero_keys(answer, tokens=PADDED_TOKENS):
    """Grade the number of keys that get weight exactly 0 in every query row of the padded
    sentence ``tokens`` under its padding mask (the number of ``[PAD]`` tokens)."""
    T = len(tokens)
    n_pad = sum(t == "[PAD]" for t in tokens)
    n_real = T - n_pad
    return grade_number(
        answer, n_pad,
        f"The {n_pad} [PAD] keys: the attention_mask is 0 there, their scores become "
        f"-inf and their weights exactly 0; the {n_real} real tokens share the weight.",
        what="a count of keys, a whole number", whole="count the keys whose weight is exactly 0.",
        mistakes=[
            (n_real, f"{n_real} is the number of keys that are kept: {' '.join(tokens[:n_real])}. "
                     "The question asks for the keys that get weight zero."),
            (T, f"{T} is every key. Then the weights could not sum to 1; the real tokens "
                "(attention_mask 1) keep positive weight."),
            (0, "Softmax of finite scores is never 0, but the padding mask sets the scores "
                "of the [PAD] keys to -inf, and exp(-inf) = 0 exactly."),
            (n_pad + 2, "[CLS] and [SEP] are real tokens of the sentence (attention_mask 1 there): "
                        "the padding mask keeps them. Only [PAD] keys are removed."),
        ],
        impossible=[(lambda v: not 0 <= v <= T,
                     f"The padded sentence has {T} keys, so the count lies between 0 and {T}.")],
        otherwise=lambda v: f"{v} is not it. Count the positions where the attention_mask of "
                            f"'{PADDED_SENTENCE}' is 0.",
        hint="Tokens: " + " ".join(tokens))


define(5, "padding_zero_keys", kind="number", precision='A whole number.', title="Which keys does padding remove?",
       question=("The batch <code>attnlib.corpus.PADDED_BATCH</code> is tokenized with "
                 f"<code>padding=True</code>. Its row for <i>{PADDED_SENTENCE}</i> reads "
                 f"<code>{' '.join(PADDED_TOKENS)}</code>. Under its padding mask, how many keys get "
                 "weight <b>exactly 0</b> in every query row of this sentence?"),
       grade=check_padding_zero_keys, label="Keys", placeholder="a whole number")


# ----------------------------------------------------------------------------- fully_masked_row
# Predict, then check on a real head: layer 4, head 3 of the encoder on the running sentence,
# with its first FULLY_MASKED_PAD positions treated as left padding under a causal mask, so
# that those queries have no key left.
FULLY_MASKED_LAYER, FULLY_MASKED_HEAD, FULLY_MASKED_PAD = 4, 3, 3
FULLY_MASKED_OPTIONS = [
    "NaN in every entry",
    "the average of all value rows (uniform weights)",
    "a vector of zeros",
    "the value row of the query's own position",
]
_FULLY_MASKED_FEEDBACK = {
    FULLY_MASKED_OPTIONS[0]: "That is the textbook softmax: every exp(-inf) is 0, the sum is 0, "
                             "and 0/0 is NaN. attnlib (and PyTorch's kernel from version 2.5 on) "
                             "treats this row specially so that no NaN spreads through the network.",
    FULLY_MASKED_OPTIONS[1]: "That is what a large finite mask such as -1e9 in float32 gives: all "
                             "scores become equally tiny and softmax spreads the weight evenly, "
                             "so the query silently reads keys it was meant not to see.",
    FULLY_MASKED_OPTIONS[2]: "A zero output needs every weight of the row to be exactly 0; here the "
                             "measurement below says otherwise.",
    FULLY_MASKED_OPTIONS[3]: "No key is special here: the query's own position is masked like "
                             "every other key, so its value cannot be read either.",
}


def fully_masked_example() -> dict:
    """What a fully masked query row really gives on a real head (kernel only; torch imported
    here): layer :data:`FULLY_MASKED_LAYER`, head :data:`FULLY_MASKED_HEAD` on
    :data:`attnlib.corpus.RUNNING`, mask = causal and keys ``j >= FULLY_MASKED_PAD`` (left
    padding), so queries ``0 .. FULLY_MASKED_PAD - 1`` have every key masked.

    Returns ``{"torch", "T", "n_rows", "attnlib_absmax", "attnlib_nan", "torch_absmax",
    "torch_nan", "naive_nan", "finite_uniform_gap", "self_gap"}``: the largest entry and any
    NaN of those rows' outputs from :func:`attnlib.scaled_dot_product_attention`, from
    ``torch.nn.functional.scaled_dot_product_attention`` and from the textbook softmax; the
    largest distance of a ``-1e9``-masked row's weights from ``1/T``; and the distance of
    attnlib's output from the query's own value row.
    """
    import torch
    import torch.nn.functional as F

    from .. import corpus
    from ..attention import scaled_dot_product_attention
    from ..encoder import head_qkv
    from ..masks import causal_mask

    _, q, k, v = head_qkv(corpus.RUNNING, FULLY_MASKED_LAYER, FULLY_MASKED_HEAD)   # (T, d) each
    q, k, v = (t.detach().float().cpu() for t in (q, k, v))
    T, P = q.shape[0], FULLY_MASKED_PAD
    mask = causal_mask(T) & (torch.arange(T) >= P)[None, :]             # (T, T): left padding + causal
    rows = ~mask.any(-1)                                                # the queries with no key left
    out_lib, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    out_torch = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.T / q.shape[-1] ** 0.5
    naive = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v
    finite = torch.softmax(scores.masked_fill(~mask, -1e9), -1)
    sel = lambda t: t[rows]  # noqa: E731
    return {"torch": torch.__version__, "T": T, "n_rows": int(rows.sum()),
            "attnlib_absmax": float(sel(out_lib).abs().max()), "attnlib_nan": bool(sel(out_lib).isnan().any()),
            "torch_absmax": float(torch.nan_to_num(sel(out_torch), nan=0.0).abs().max()),
            "torch_nan": bool(sel(out_torch).isnan().any()), "naive_nan": bool(sel(naive).isnan().any()),
            "finite_uniform_gap": float((sel(finite) - 1 / T).abs().max()),
            "self_gap": float((sel(out_lib) - v[rows]).abs().max())}


def _fully_masked_truth(data: dict) -> str:
    """The option that describes attnlib's measured output of the fully masked rows."""
    if data["attnlib_nan"]:
        return FULLY_MASKED_OPTIONS[0]
    if data["attnlib_absmax"] == 0.0:
        return FULLY_MASKED_OPTIONS[2]
    if data["self_gap"] < 1e-6:
        return FULLY_MASKED_OPTIONS[3]
    return FULLY_MASKED_OPTIONS[1]


def _describe_output(absmax: float, nan: bool) -> str:
    return "NaN" if nan else ("exactly zero" if absmax == 0.0 else f"nonzero (largest |entry| {absmax:.3g})")


@checker
def check_fully_masked_row(answer, data=None):
    """Grade the fully-masked-row prediction against the measurement of
    :func:`fully_masked_example` (``data``): the option that describes what
    :func:`attnlib.scaled_dot_product_attention` returned for those rows ("a vector of zeros"
    as long as attnlib keeps its convention)."""
    data = data or fully_masked_example()
    truth = _fully_masked_truth(data)
    measured = (f"Measured on layer {FULLY_MASKED_LAYER}, head {FULLY_MASKED_HEAD} (the running sentence, its "
                f"first {FULLY_MASKED_PAD} positions as left padding under a causal mask: {data['n_rows']} "
                f"queries with no key): attnlib's output there is "
                f"{_describe_output(data['attnlib_absmax'], data['attnlib_nan'])}; PyTorch {data['torch']}'s "
                f"kernel gives {_describe_output(data['torch_absmax'], data['torch_nan'])}; the textbook "
                f"softmax gives {'NaN' if data['naive_nan'] else 'no NaN'}; a -1e9 mask gives weights within "
                f"{data['finite_uniform_gap']:.1e} of 1/T = 1/{data['T']}.")
    return grade_choice(answer, FULLY_MASKED_OPTIONS, truth,
                        "Its weights are all exactly 0, so its output, a weighted sum of the value "
                        "rows, is the zero vector: the course's convention, and PyTorch's from version "
                        "2.5 on." if truth == FULLY_MASKED_OPTIONS[2] else "That is what attnlib returned.",
                        {o: m for o, m in _FULLY_MASKED_FEEDBACK.items() if o != truth},
                        hint="The weights of a row whose every score is -inf are set to 0.", measured=measured)


define(5, "fully_masked_row", kind="choice", title="A row with nothing to attend to",
       question=(f"Take layer {FULLY_MASKED_LAYER}, head {FULLY_MASKED_HEAD} on the running sentence and treat "
                 f"its first {FULLY_MASKED_PAD} tokens as left padding under a causal mask: those "
                 f"{FULLY_MASKED_PAD} queries have <b>every</b> key masked. <b>Predict first:</b> what does "
                 "<code>attnlib.scaled_dot_product_attention</code> return as their output? Then check: "
                 "the answer is graded against what it really returned on this head."),
       options=FULLY_MASKED_OPTIONS, data=fully_masked_example, grade=check_fully_masked_row)
