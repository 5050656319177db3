"""The mistakes each code lab recognises, in a learner's words (the book lists them from here)."""
from __future__ import annotations

import math

import torch

__all__ = ["MISTAKES"]

#: ``log`` of the largest float32 / float64: ``exp`` of anything larger is ``inf``.
_EXP_LIMIT32 = math.log(torch.finfo(torch.float32).max)
_EXP_LIMIT64 = math.log(torch.finfo(torch.float64).max)

#: ``{lab: {key: (title, what it is, in a learner's words)}}``: every mistake a checker
#: recognises.  The book's lab sections list them with :func:`mistakes_markdown`.
MISTAKES: dict[str, dict[str, tuple[str, str]]] = {
    "softmax": {
        "wrong_axis": ("Softmax over the wrong axis",
                       "the result sums to 1 along another dimension than `dim` (columns instead of rows)."),
        "ignores_dim": ("The `dim` argument is ignored",
                        "the function always normalises the last dimension, whatever `dim` says."),
        "no_max_subtraction": ("No maximum subtracted",
                               f"`exp` of a score above about {_EXP_LIMIT32:.1f} (float32) or "
                               f"{_EXP_LIMIT64:.1f} (float64) is `inf`, and `inf / inf` is NaN; "
                               "subtracting each row's maximum first changes nothing mathematically "
                               "and prevents it."),
        "global_max": ("Maximum of the whole tensor subtracted",
                       "a row whose scores are far below the global maximum underflows to `0 / 0`; "
                       "subtract each row's own maximum."),
        "missing_keepdim": ("A reduction without `keepdim=True`",
                            "`sum` or `max` along `dim` drops that dimension, so dividing by it "
                            "broadcasts along the wrong axis (or fails)."),
        "max_returns_pair": ("`torch.max(x, dim)` used as a tensor",
                             "with a `dim` it returns `(values, indices)`; use `.values`, or `amax`."),
        "no_normalisation": ("Not normalised",
                             "the exponentials are returned without dividing by their sum."),
        "normalised_over_everything": ("Normalised over the whole tensor",
                                       "dividing by the sum of every entry makes the whole tensor, "
                                       "not each slice along `dim`, sum to 1."),
        "no_exp": ("No exponential",
                   "dividing the scores by their sum is not a softmax: weights can be negative "
                   "or above 1."),
        "log_softmax": ("Log-softmax returned",
                        "the result is the logarithm of the weights (all entries <= 0)."),
    },
    "attention": {
        "no_scaling": ("No scaling",
                       "the scores are `Q K^T`, not `Q K^T / sqrt(d_k)`; large `d_k` then "
                       "saturates the softmax."),
        "scaled_by_d_k": ("Scaled by d_k instead of sqrt(d_k)",
                          "dividing by `d_k` shrinks the scores too much, making the weights "
                          "too flat."),
        "scaled_up": ("Multiplied by sqrt(d_k)",
                      "the scores are multiplied by `sqrt(d_k)` instead of divided by it."),
        "other_scale": ("Another scale factor",
                        "the weights are a softmax of `c * Q K^T` with a `c` other than "
                        "`1 / sqrt(d_k)`."),
        "scaled_after_softmax": ("Scaled after the softmax",
                                 "dividing the weights by `sqrt(d_k)` makes rows sum to "
                                 "`1/sqrt(d_k)`; the scale belongs inside, on the scores."),
        "softmax_wrong_axis": ("Softmax over the wrong axis",
                               "the weights sum to 1 down each column (over queries); each row "
                               "(one query, over the keys) must sum to 1."),
        "mask_inverted": ("Mask inverted",
                          "True and False swapped: the keys the query may attend to are removed "
                          "and the others kept. Here `True` means *may attend*, as in PyTorch's "
                          "`scaled_dot_product_attention`."),
        "mask_ignored": ("Mask ignored", "the mask argument has no effect."),
        "mask_after_softmax": ("Masked after the softmax, not renormalised",
                               "zeroing weights after the softmax leaves rows that sum to less "
                               "than 1; mask the scores (with `-inf`) before it."),
        "mask_added": ("Boolean mask added to the scores",
                       "True becomes +1 and False 0: that nudges the scores instead of "
                       "removing keys."),
        "masked_to_zero": ("Masked scores set to 0",
                           "a score of 0 still has weight `exp(0)`; a removed key needs `-inf` "
                           "(or the dtype's minimum)."),
        "no_max_subtraction": ("Hand-written softmax without the maximum subtracted",
                               "large scores overflow `exp` to `inf` and the weights to NaN."),
        "scores_transposed": ("Scores transposed (K Q^T)",
                              "rows must be queries and columns keys: `scores = Q K^T`, shape "
                              "`(..., T_q, T_k)`."),
        "batched_transpose": ("Transposing the wrong dimensions of a batched tensor",
                              "`k.T`, `k.t()` or `k.transpose(0, 1)` works for one `(T_k, d_k)` "
                              "matrix but not for `(B, H, T_k, d_k)`; transpose the last two: "
                              "`k.transpose(-2, -1)`."),
        "mask_not_broadcast": ("A mask that does not broadcast",
                               "indexing `scores[~mask]` needs a mask of the scores' full shape; "
                               "`scores.masked_fill(~mask, float('-inf'))` or `torch.where` broadcast "
                               "a `(T_q, T_k)` or `(B, 1, 1, T_k)` mask."),
        "returns_swapped": ("`(weights, out)` returned",
                            "the contract returns `(out, weights)`, in that order."),
        "out_from_scores": ("Output from the scores",
                            "`out` must be `weights @ v`, the weights after the softmax, not the "
                            "scores."),
    },
    "causal_mask": {
        "inverted": ("Mask inverted",
                     "True marks the future (the cells to hide). In this course, as in "
                     "PyTorch's `scaled_dot_product_attention`, True means *may attend*."),
        "future_included": ("Future included (transposed)",
                            "True on and above the diagonal lets query `i` see keys `j > i`, "
                            "the tokens it must predict."),
        "diagonal_dropped": ("Diagonal dropped",
                             "query `i` may attend to itself (`j = i`); only `j > i` is hidden."),
        "off_by_one": ("Off by one",
                       "the boundary is shifted: keys `j <= i + 1` (or fewer) instead of `j <= i`."),
        "all_true": ("Nothing masked", "every cell is True, so every query sees the future."),
        "not_bool": ("Not a boolean mask",
                     "the cells are right but the dtype is not `torch.bool`; convert with "
                     "`.bool()`."),
        "additive": ("Additive mask returned",
                     "0 and `-inf` is the additive form; the contract asks for the boolean "
                     "one (True = may attend)."),
    },
    "split_heads": {
        "missing_transpose": ("Heads not moved before time",
                              "the result is `(B, T, H, d_head)`: after the reshape, "
                              "`transpose(1, 2)` gives `(B, H, T, d_head)`."),
        "mixes_tokens": ("A reshape that mixes tokens across heads",
                         "reshaping straight to `(B, H, T, d_head)` reads the numbers in memory "
                         "order, so a head gets pieces of several tokens. Split the features "
                         "first, `(B, T, H, d_head)`, then transpose."),
        "interleaved": ("Strided features",
                        "head `h` takes every `H`-th feature (`h, h + H, ...`) instead of the "
                        "contiguous slice `h*d_head : (h+1)*d_head`: the reshape was "
                        "`(B, T, d_head, H)`."),
        "heads_in_batch": ("Heads folded into the batch",
                           "the result is `(B*H, T, d_head)`; the contract keeps heads as their "
                           "own dimension, `(B, H, T, d_head)`."),
        "tokens_and_features_swapped": ("Tokens and features swapped",
                                        "the result is `(B, H, d_head, T)`: one transpose too many "
                                        "(or `permute(0, 2, 3, 1)`)."),
        "float_d_head": ("d_head computed with `/`",
                         "`d_model / n_heads` is a float; shapes need the integer `//`."),
    },
    "multi_head": {
        "split_mixes_tokens": ("A reshape that mixes tokens across heads",
                               "reshaping `(B, T, d_model)` straight to `(B, H, T, d_head)` reads the numbers "
                               "in memory order, so a head gets pieces of several tokens; reshape to "
                               "`(B, T, H, d_head)`, then `transpose(1, 2)`."),
        "split_interleaved": ("Strided features",
                              "head `h` takes every `H`-th feature instead of the contiguous slice "
                              "`h*d_head : (h+1)*d_head`."),
        "one_head": ("One head of width d_model",
                     "`n_heads` is ignored: a single softmax over all `d_model` features is one "
                     "attention pattern per query, not `H`."),
        "scaled_by_sqrt_d_model": ("Scaled by sqrt(d_model) instead of sqrt(d_head)",
                                   "each head's scores are dot products of `d_head` numbers, so they are "
                                   "divided by `sqrt(d_head)`; `sqrt(d_model)` makes every head's weights too flat."),
        "no_scaling": ("No scaling", "the scores are `Q_h K_h^T`, not `Q_h K_h^T / sqrt(d_head)`."),
        "softmax_wrong_dim": ("Softmax over the wrong axis",
                              "the weights sum to 1 down each column (over queries); each query's row, "
                              "over the keys (`dim=-1`), must sum to 1."),
        "no_out_proj": ("W_o forgotten",
                        "the concatenated heads are returned as they are; `W_o` mixes them into the output."),
        "out_proj_transposed": ("W_o transposed",
                                "`concat @ W_o.T`: in the row-vector convention the output is `concat @ W_o`."),
        "merge_without_transpose": ("Heads merged without moving them back",
                                    "`(B, H, T, d_head).reshape(B, T, d_model)` mixes tokens: transpose to "
                                    "`(B, T, H, d_head)` first, then reshape."),
        "merge_interleaved": ("Heads merged in the wrong order",
                              "the features of the heads are interleaved (`permute(0, 2, 3, 1)`) instead of "
                              "laid side by side, head 0's `d_head` features first."),
        "linear_convention": ("Weights used as nn.Linear stores them",
                              "`x @ W.T` is `nn.Linear`'s `(out, in)` convention; here the matrices are "
                              "given in the row-vector convention, `Q = x @ W_q`."),
        "float_d_head": ("d_head computed with `/`",
                         "`d_model / n_heads` is a float; shapes need the integer `//`."),
    },
    "online_softmax": {
        "no_rescale": ("Running sum and output never rescaled",
                       "when a later block raises the running maximum, what was accumulated "
                       "relative to the old maximum must be multiplied by "
                       "`exp(m_old - m_new)`."),
        "no_rescale_sum": ("Running sum not rescaled",
                           "the output accumulator is rescaled by `exp(m_old - m_new)` when the "
                           "maximum grows, but the running sum `l` is not."),
        "no_rescale_acc": ("Output accumulator not rescaled",
                           "the running sum is rescaled when the maximum grows, but the "
                           "weighted sum of values is not."),
        "inverted_rescale": ("Rescaled by exp(m_new - m_old)",
                             "the correction factor is inverted; it is `exp(m_old - m_new)`, at "
                             "most 1."),
        "block_max_only": ("Each block uses its own maximum",
                           "the exponentials of each block are taken relative to that block's "
                           "maximum, so blocks are summed on different scales; keep one running "
                           "maximum and rescale."),
        "normalises_each_block": ("Each block normalised separately",
                                  "a softmax within each block, summed over blocks, weighs every "
                                  "block as 1."),
        "no_final_division": ("No final division",
                              "the accumulated `sum_j exp(s_j - m) v_j` must be divided by the "
                              "running sum `l` at the end."),
        "max_starts_at_zero": ("Running maximum started at 0",
                               "start it at `-inf`: from 0, a query whose scores are all far below 0 "
                               "gets `exp(s - 0) = 0` for every key, and `0 / 0` is NaN."),
        "no_max": ("No running maximum",
                   "`exp` of large scores overflows to `inf` and the output to NaN."),
        "no_scaling": ("No scaling", "the scores are `q k^T`, not `q k^T / sqrt(d_k)`."),
        "scaled_by_d_k": ("Scaled by d_k instead of sqrt(d_k)",
                          "dividing by `d_k` makes the weights too flat."),
        "full_matrix": ("The whole score matrix at once",
                        "the function computes a `(T_q, T_k)` score matrix (or something as "
                        "large), in torch or NumPy; the point is never to hold it, only "
                        "`(T_q, block_size)` tiles, so its values are not graded until it is gone."),
    },
    "attention_backward": {
        "no_rowsum": ("The softmax's rowsum term left out",
                      "`dS = A * dA` treats each weight as if it moved alone; the softmax ties a row "
                      "together (its weights sum to 1), so `dS = A * (dA - rowsum(dA * A))`."),
        "rowsum_wrong_axis": ("Rowsum over the wrong axis",
                              "the correction `sum(dA * A)` must run over the keys of each query "
                              "(`dim=-1`, one number per row), not down the columns (`dim=-2`)."),
        "rowsum_no_keepdim": ("Rowsum without `keepdim=True`",
                              "`(dA * A).sum(-1)` has shape `(..., T_q)`; subtracting it from "
                              "`(..., T_q, T_k)` broadcasts it along the rows, so row `i` gets the "
                              "sums of other rows. Keep the dimension: `sum(-1, keepdim=True)`."),
        "no_scaling": ("1/sqrt(d_k) missing in dq and dk",
                       "the scores are `Q K^T / sqrt(d_k)`, so the chain rule multiplies `dS K` and "
                       "`dS^T Q` by `1/sqrt(d_k)` too."),
        "dv_not_transposed": ("dv = A d_out instead of A^T d_out",
                              "value row `j` receives the gradient of every query that read it, "
                              "weighted by column `j` of `A`: `dv = A^T d_out`, shape `(T_k, d_v)`."),
        "dk_not_transposed": ("dk = dS q instead of dS^T q",
                              "key `j` is scored against every query, so its gradient sums column `j` "
                              "of `dS`: `dk = dS^T q / sqrt(d_k)`, shape `(T_k, d_k)`."),
    },
    "rope": {
        "wrong_pairing": ("Adjacent coordinates paired",
                          "the rotation pairs `2m` with `2m + 1` (the RoFormer paper's layout); this "
                          "chapter (and Llama's code) pairs `m` with `m + d/2`. Both are RoPE, but for the "
                          "same vectors they give different results: pick the chapter's."),
        "frequency": ("Frequencies off",
                      "pair `m` turns by `10000^(-2m/d)` radians per position: the exponent is "
                      "`-2m/d` (a negative sign, and the 2), so the first pair turns fastest and the last "
                      "one slowest."),
        "sin_sign": ("Rotated the wrong way",
                     "the sine terms have the wrong sign, which rotates by minus the angle: "
                     "`out_m = x_m cos - x_(m+d/2) sin`, `out_(m+d/2) = x_m sin + x_(m+d/2) cos`."),
        "positions_off_by_one": ("Positions off by one",
                                 "the angle uses `position + 1` (or `- 1`): the token at position 0 "
                                 "must not be rotated at all. Use the given positions as they are."),
        "rotates_v": ("Values rotated too",
                      "RoPE rotates only the queries and keys, whose dot product then depends on the "
                      "offset; rotating `v` turns the outputs by each key's position."),
        "one_side_only": ("Only one of q and k rotated",
                          "the score depends on the offset only when both the query and the key are "
                          "rotated by their own positions."),
        "not_rotated": ("No rotation", "the positions have no effect: q and k are used as they are."),
        "no_scaling": ("No scaling", "the scores are `R(q) R(k)^T`, not divided by `sqrt(d_k)`."),
    },
    "kv_cache": {
        "not_appended": ("New key and value not kept",
                         "the caches come back as they went in: the next step would not see this "
                         "token. Return `torch.cat([cache_k, k_new], dim=-2)` (and the same for v)."),
        "appended_after": ("Attended before appending",
                           "the new query attends to the old cache only, so the token cannot see "
                           "itself; append first, then attend over all `T + 1` positions."),
        "causal_single_query": ("A causal mask on the single query",
                                "a top-left causal mask (`is_causal=True`, or `tril` of a `(1, T+1)` "
                                "grid) lets the one new query see key 0 only. The new token is the "
                                "last: every cached key lies in its past, so no mask is needed."),
        "wrong_concat_axis": ("Appended along the wrong axis",
                              "the caches are `(B, H, T, d)`: new positions go on the time axis, "
                              "`dim=-2` (or 2), not the batch, heads or feature axis."),
        "no_scaling": ("No scaling", "the scores are `q k^T`, not `q k^T / sqrt(d_k)`."),
    },
}
