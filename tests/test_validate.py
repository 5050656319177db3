"""attnlib._validate: the one error policy (TypeError for type/dtype, ValueError for
shape/range/value, IndexError for a layer/head index), checked helper by helper."""
import math

import numpy as np
import pytest
import torch

from attnlib import _validate as V

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- tensors
def test_tensor_passes_tensors_through_and_wraps_numpy_without_copy():
    t = torch.zeros(3)
    assert V.tensor(t) is t
    a = np.zeros((2, 3))
    wrapped = V.tensor(a)
    a[0, 0] = 7.0
    assert wrapped.dtype == torch.float64 and wrapped[0, 0].item() == 7.0     # shares memory


def test_tensor_copies_arrays_with_negative_strides():
    a = np.arange(4.0)
    torch.testing.assert_close(V.tensor(np.flip(a)), torch.tensor([3.0, 2.0, 1.0, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("bad", [None, 3, 2.5, "x", [[1.0]], (1.0,), True])
def test_tensor_refuses_other_types_naming_the_argument(bad):
    with pytest.raises(TypeError, match=rf"^q must be a torch.Tensor or numpy.ndarray, got {type(bad).__name__}$"):
        V.tensor(bad, "q")


def test_tensor_refuses_object_and_string_arrays():
    for bad in (np.array([None, 1.0], dtype=object), np.array(["a", "b"])):
        with pytest.raises(TypeError, match=r"mask must hold numbers or booleans, got a numpy array of dtype"):
            V.tensor(bad, "mask")


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, torch.uint8])
def test_floating_refuses_other_dtypes(dtype):
    with pytest.raises(TypeError, match=rf"scores must be a floating-point tensor, got dtype {dtype}"):
        V.floating(torch.zeros(2, dtype=dtype), "scores")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_floating_accepts_every_float_dtype(dtype):
    assert V.floating(torch.zeros(2, dtype=dtype)).dtype == dtype


def test_min_dims_and_shape_of():
    assert V.shape_of(torch.zeros(2, 4, 5)) == (2, 4, 5)
    V.min_dims(torch.zeros(2, 3), 2, "q")
    with pytest.raises(ValueError, match=r"q must have at least 2 dimensions \(\.\.\., T, d\), got shape \(8,\)"):
        V.min_dims(torch.zeros(8), 2, "q", "(..., T, d)")


# ---------------------------------------------------------------- numbers
@pytest.mark.parametrize("good", [1, 7, np.int64(3), np.int32(2)])
def test_positive_int_accepts_ints(good):
    assert V.positive_int(good, "n") == int(good) and type(V.positive_int(good, "n")) is int


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError),
                                      ("3", TypeError), (None, TypeError), (torch.tensor(3), TypeError)])
def test_positive_int_refuses(bad, exc):
    with pytest.raises(exc, match=r"n_heads must be a positive int"):
        V.positive_int(bad, "n_heads")


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (0.0, TypeError), (False, TypeError)])
def test_non_negative_int(bad, exc):
    assert V.non_negative_int(0, "T") == 0
    with pytest.raises(exc, match="T must be a non-negative int"):
        V.non_negative_int(bad, "T")


@pytest.mark.parametrize("good, expected", [(2, 2.0), (0.5, 0.5), (np.float32(0.25), 0.25),
                                            (torch.tensor(1.5), 1.5), (torch.tensor([3.0]), 3.0)])
def test_real_accepts_numbers_real_and_one_element_tensors(good, expected):
    value = V.real(good, "scale")
    assert value == expected and type(value) is float


@pytest.mark.parametrize("bad", ["x", None, True, 1j, torch.ones(2), torch.tensor(True), [1.0],
                                 torch.zeros((), device="meta")])
def test_real_refuses_non_numbers(bad):
    with pytest.raises(TypeError, match=r"^scale must be a real number, got"):
        V.real(bad, "scale")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, torch.tensor(math.nan)])
def test_real_refuses_nan_and_infinity(bad):
    with pytest.raises(ValueError, match=r"scale must be a finite number"):
        V.real(bad, "scale")


def test_real_ranges():
    assert V.real(math.inf, "x", allow_inf=True) == math.inf
    assert V.real(0, "atol", low=0.0) == 0.0
    with pytest.raises(ValueError, match=r"temperature must be > 0.0, got 0.0"):
        V.real(0, "temperature", low=0.0, low_open=True)
    with pytest.raises(ValueError, match=r"atol must be >= 0.0, got -1.0"):
        V.real(-1, "atol", low=0.0)
    with pytest.raises(ValueError, match=r"p must be <= 1.0, got 1.5"):
        V.real(1.5, "p", high=1.0)


@pytest.mark.parametrize("good", [True, False, np.bool_(True)])
def test_flag_accepts_bools(good):
    assert V.flag(good, "is_causal") is bool(good)


@pytest.mark.parametrize("bad", ["no", "False", 1, 0, None, torch.tensor(True), [True]])
def test_flag_refuses_truthy_things(bad):
    with pytest.raises(TypeError, match=r"^is_causal must be True or False, got"):
        V.flag(bad, "is_causal")


# ---------------------------------------------------------------- indices and options
@pytest.mark.parametrize("value, expected", [(0, 0), (5, 5), (-1, 5), (-6, 0)])
def test_index_counts_negative_from_the_end(value, expected):
    assert V.index(value, 6, "layer") == expected


@pytest.mark.parametrize("bad, exc", [(6, IndexError), (-7, IndexError), (1.0, TypeError), (True, TypeError),
                                      ("0", TypeError)])
def test_index_refuses(bad, exc):
    with pytest.raises(exc, match="layer must be"):
        V.index(bad, 6, "layer")


def test_dim_normalises_and_refuses():
    assert V.dim(-1, 3) == 2 and V.dim(0, 0) == 0 and V.dim(-1, 0) == 0
    with pytest.raises(ValueError, match=r"dim must be in -3..2 for a 3-d tensor, got 3"):
        V.dim(3, 3)
    with pytest.raises(TypeError, match="dim must be an int"):
        V.dim(1.0, 3)


def test_choice_lists_the_options():
    assert V.choice("torch", ("reference", "torch"), "backend") == "torch"
    for bad in ("flash", None, ["torch"], 3):
        with pytest.raises(ValueError, match=r"backend must be one of 'reference', 'torch'; got"):
            V.choice(bad, ("reference", "torch"), "backend")


@pytest.mark.parametrize("good, expected", [(torch.float16, torch.float16), ("float16", torch.float16),
                                            ("bfloat16", torch.bfloat16), ("float", torch.float32)])
def test_float_dtype_accepts_dtypes_and_names(good, expected):
    assert V.float_dtype(good) == expected


@pytest.mark.parametrize("bad", ["int32", "nope", "cuda", torch.int64, torch.bool, 3, None, np.float32])
def test_float_dtype_refuses(bad):
    with pytest.raises(TypeError, match="dtype must be a floating"):
        V.float_dtype(bad)


def test_text():
    assert V.text("hi") == "hi"
    with pytest.raises(TypeError, match="text must be a str, got int"):
        V.text(3)
    with pytest.raises(ValueError, match="non-space"):
        V.text("  \n")


# ---------------------------------------------------------------- devices
def test_same_device_names_each_tensor():
    assert V.same_device(q=torch.zeros(1), k=torch.zeros(1)) == torch.device("cpu")
    with pytest.raises(ValueError, match=r"^q, k, v must be on one device, got q cpu, k meta, v cpu$"):
        V.same_device(q=torch.zeros(1), k=torch.zeros(1, device="meta"), v=torch.zeros(1))


def test_device_argument():
    assert V.device(None) is None
    assert V.device("cpu") == torch.device("cpu") and V.device(torch.device("meta")).type == "meta"
    for bad in (2.5, True, torch.zeros(1), ["cpu"]):
        with pytest.raises(TypeError, match="device must be a torch.device"):
            V.device(bad)
    with pytest.raises(ValueError, match="device must name a device"):
        V.device("gpu please")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            V.device("cuda")


# ---------------------------------------------------------------- probability vectors
def test_distribution_accepts_softmax_rows_zero_rows_and_rounding():
    g = torch.Generator().manual_seed(0)
    rows = torch.softmax(torch.randn(3, 4096, generator=g) * 5, dim=-1)           # float32 rounding
    accepted = [
        (rows, -1),
        (torch.zeros(2, 5), -1),                                                    # fully masked rows
        (torch.softmax(torch.randn(2, 7, generator=g), 0), 0),                    # along another dim
        (rows.bfloat16(), -1),                                                      # bf16 rounding
        (torch.empty(0, 3), -1),
        (torch.full((2, 3), 5.0, device="meta"), -1),                              # no values to check
    ]
    for p, dim in accepted:
        assert V.distribution(p, dim) is p                                          # returned as given


@pytest.mark.parametrize("bad, pattern", [
    ([math.nan, 0.5], r"must be probabilities, found nan"),
    ([math.inf, 0.0], r"must be probabilities, found inf"),
    ([-0.5, 1.5], r"non-negative\), found -0.5"),
    ([0.33, 0.33, 0.33], r"must sum to 1 along dim -1 \(within 0.001; .*found a sum of 0.99"),
    ([0.6, 0.6], r"found a sum of 1.2"),
])
def test_distribution_refuses_non_distributions(bad, pattern):
    with pytest.raises(ValueError, match=pattern):
        V.distribution(torch.tensor(bad, dtype=torch.float64), -1, "weights")


def test_distribution_tolerance_follows_the_dtype():
    assert V.DISTRIBUTION_ATOL == 1e-3
    off = torch.tensor([0.5, 0.5 + 3e-3])
    V.distribution(off.half(), -1)                      # within 4 eps(float16) = 3.9e-3
    with pytest.raises(ValueError, match="within 0.001"):
        V.distribution(off, -1)                         # float32: 1e-3


# ---------------------------------------------------------------- the policy, applied
import re  # noqa: E402

import attnlib  # noqa: E402
from attnlib import views  # noqa: E402

HOSTILE = [None, "x", True, 3, 2.5, math.nan, math.inf, -1, 0, [[1.0, 2.0]], torch.tensor(math.nan),
           torch.empty(0), torch.empty(3, 0), torch.empty(0, 4), torch.randn(4), torch.randn(2, 3, 4, 5, 6),
           np.zeros((3, 4)), np.zeros((3, 4), dtype=object), torch.ones(3, 4, dtype=torch.long),
           torch.ones(3, 4, dtype=torch.bool), torch.randn(3, 4, device="meta"),
           torch.randn(3, 4, dtype=torch.complex64), torch.randn(3, 4).half()]
_q, _k, _v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
_mha = attnlib.MultiHeadAttention(4, 2)
# (what is called, the argument that gets the hostile value, how)
TARGETS = [
    ("sdpa", "q", lambda h: attnlib.scaled_dot_product_attention(h, _k, _v)),
    ("sdpa", "k", lambda h: attnlib.scaled_dot_product_attention(_q, h, _v)),
    ("sdpa", "v", lambda h: attnlib.scaled_dot_product_attention(_q, _k, h)),
    ("sdpa", "mask", lambda h: attnlib.scaled_dot_product_attention(_q, _k, _v, h)),
    ("sdpa torch", "mask", lambda h: attnlib.scaled_dot_product_attention(_q, _k, _v, h, backend="torch")),
    ("sdpa", "scale", lambda h: attnlib.scaled_dot_product_attention(_q, _k, _v, scale=h)),
    ("sdpa", "is_causal", lambda h: attnlib.scaled_dot_product_attention(_q, _k, _v, is_causal=h)),
    ("sdpa", "backend", lambda h: attnlib.scaled_dot_product_attention(_q, _k, _v, backend=h)),
    ("tiled", "q", lambda h: attnlib.tiled_attention(h, _k, _v)),
    ("tiled", "mask", lambda h: attnlib.tiled_attention(_q, _k, _v, h)),
    ("tiled", "block_size", lambda h: attnlib.tiled_attention(_q, _k, _v, block_size=h)),
    ("tiled", "scale", lambda h: attnlib.tiled_attention(_q, _k, _v, scale=h)),
    ("attention_scores", "q", lambda h: attnlib.attention_scores(h, _k)),
    ("attention_scores", "scale", lambda h: attnlib.attention_scores(_q, _k, scale=h)),
    ("softmax", "scores", lambda h: attnlib.softmax(h)),
    ("softmax", "dim", lambda h: attnlib.softmax(_q, dim=h)),
    ("softmax", "temperature", lambda h: attnlib.softmax(_q, temperature=h)),
    ("entropy", "weights", lambda h: attnlib.entropy(h)),
    ("softmax_jacobian", "weights", lambda h: attnlib.softmax_jacobian(h)),
    ("causal_mask", "T_q", lambda h: attnlib.causal_mask(h)),
    ("causal_mask", "device", lambda h: attnlib.causal_mask(3, device=h)),
    ("padding_mask", "attention_mask", lambda h: attnlib.padding_mask(h)),
    ("to_additive", "mask", lambda h: attnlib.to_additive(h)),
    ("to_additive", "dtype", lambda h: attnlib.to_additive(torch.ones(2, dtype=torch.bool), dtype=h)),
    ("to_boolean", "mask", lambda h: attnlib.to_boolean(h)),
    ("online_softmax", "score_blocks", lambda h: attnlib.online_softmax(h)),
    ("online_softmax", "score_blocks", lambda h: attnlib.online_softmax([h])),
    ("online_softmax_step", "block", lambda h: attnlib.online_softmax_step(torch.zeros(3), torch.zeros(3), h)),
    ("split_heads", "x", lambda h: attnlib.split_heads(h, 2)),
    ("split_heads", "n_heads", lambda h: attnlib.split_heads(torch.zeros(2, 3, 4), h)),
    ("merge_heads", "x", lambda h: attnlib.merge_heads(h)),
    ("MultiHeadAttention", "d_model", lambda h: attnlib.MultiHeadAttention(h, 2)),
    ("MultiHeadAttention", "bias", lambda h: attnlib.MultiHeadAttention(4, 2, bias=h)),
    ("MultiHeadAttention", "query", lambda h: _mha(h)),
    ("MultiHeadAttention", "mask", lambda h: _mha(torch.zeros(1, 3, 4), mask=h)),
    ("MultiHeadAttention", "is_causal", lambda h: _mha(torch.zeros(1, 3, 4), is_causal=h)),
    ("MultiHeadAttention.projections", "head", lambda h: _mha.projections(h)),
    ("convex_hull_2d", "points", lambda h: attnlib.convex_hull_2d(h)),
    ("in_convex_hull_2d", "query", lambda h: attnlib.in_convex_hull_2d(torch.rand(5, 2), h)),
    ("in_convex_hull_2d", "atol", lambda h: attnlib.in_convex_hull_2d(torch.rand(5, 2), torch.zeros(1, 2), atol=h)),
    ("support_excess", "directions", lambda h: attnlib.support_excess(torch.rand(3, 4), torch.zeros(1, 4), h)),
    ("dot_product_view", "k", lambda h: views.dot_product_view(torch.rand(4, 4), h)),
    ("row_view", "weights", lambda h: views.row_view(h, torch.rand(4, 4))),
    ("column_view", "v", lambda h: views.column_view(torch.rand(4, 4), h)),
    ("outer_product_view", "v", lambda h: views.outer_product_view(torch.rand(4, 4), h)),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("what, arg, call", TARGETS, ids=[f"{w}-{a}" for w, a, _ in TARGETS])
def test_hostile_arguments_get_a_clear_error_or_a_result(what, arg, call):
    """Every hostile value either works (some are valid) or raises TypeError, ValueError or
    IndexError whose message names the argument; never an AttributeError, a RuntimeError
    from deep inside torch, or a silently wrong type of result."""
    for h in HOSTILE:
        try:
            call(h)
        except (TypeError, ValueError, IndexError) as err:
            assert re.search(rf"\b{re.escape(arg)}\b", str(err)), f"{what}({arg}={h!r:.40}): {err}"


# ---------------------------------------------------------------- errors found by fuzzing (issue 29)
def _meta(*shape):
    return torch.empty(*shape, device="meta")


def _fuzz_cases():
    import matplotlib
    matplotlib.use("Agg")
    import attnlib
    from attnlib import graphs, measures, plotting
    from attnlib.kv_cache import KVCache
    from attnlib.positions import apply_rope

    W = torch.softmax(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)), -1)
    toks = ["a", "b", "c", "d"]
    G = graphs.attention_graph(W, toks)
    q = torch.randn(3, 4)

    def cache_then(call):
        c = KVCache()
        c.append(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4))
        return call(c)

    meta_msg = r"is a meta tensor \(a shape, no values\)"
    cmap_msg = r"cmap 'nope' is not a matplotlib colormap"
    return [
        # meta tensors into helpers that read numbers (RuntimeError from torch's meta kernels)
        ("attention_graph(meta)", lambda: graphs.attention_graph(_meta(4, 4), toks), ValueError, meta_msg),
        ("score_graph(meta)", lambda: graphs.score_graph(_meta(4, 4), toks), ValueError, meta_msg),
        ("stationary_distribution(meta)", lambda: graphs.stationary_distribution(_meta(4, 4)), ValueError, meta_msg),
        ("attention_rollout(meta)", lambda: graphs.attention_rollout(_meta(2, 4, 4)), ValueError, meta_msg),
        ("layered_graph(meta)", lambda: graphs.layered_graph(_meta(2, 4, 4), toks), ValueError, meta_msg),
        ("received_attention(meta)", lambda: measures.received_attention(_meta(4, 4)), ValueError, meta_msg),
        ("attention_share(meta)", lambda: measures.attention_share(_meta(4, 4), [0]), ValueError, meta_msg),
        ("offset_share(meta)", lambda: measures.offset_share(_meta(4, 4), 1), ValueError, meta_msg),
        ("asymmetry(meta)", lambda: measures.asymmetry(_meta(4, 4)), ValueError, meta_msg),
        ("top_keys(meta)", lambda: measures.top_keys(_meta(4), toks), ValueError, meta_msg),
        ("cosine_similarities(meta)", lambda: measures.cosine_similarities(_meta(3, 4)), ValueError, meta_msg),
        ("apply_rope(positions meta)", lambda: apply_rope(torch.randn(2, 4), _meta(2)), ValueError, meta_msg),
        ("to_numpy(meta)", lambda: plotting.to_numpy(_meta(2)), ValueError, meta_msg),
        ("attention_heatmap(meta)", lambda: plotting.attention_heatmap(_meta(4, 4), toks), ValueError, meta_msg),
        ("weights_bar(meta)", lambda: plotting.weights_bar(_meta(4), toks), ValueError, meta_msg),
        ("head_table(meta)", lambda: plotting.head_table(_meta(2, 3), title="t", colorbar_label="c"), ValueError, meta_msg),
        ("layer_curves(meta)", lambda: plotting.layer_curves(_meta(2, 1), ["a"], ylabel="y", title="t"), ValueError, meta_msg),
        # bad colormaps (KeyError from matplotlib's registry)
        ("attention_heatmap(cmap)", lambda: plotting.attention_heatmap(W, toks, cmap="nope"), ValueError, cmap_msg),
        ("head_table(cmap)", lambda: plotting.head_table(W, title="t", colorbar_label="c", cmap="nope"), ValueError, cmap_msg),
        ("weights_bar(cmap)", lambda: plotting.weights_bar(W[0], toks, cmap="nope"), ValueError, cmap_msg),
        ("hull_plot(cmap)", lambda: plotting.hull_plot(torch.randn(4, 2), toks, W[0], cmap="nope"), ValueError, cmap_msg),
        ("draw_attention_graph(cmap)", lambda: plotting.draw_attention_graph(G, cmap="nope"), ValueError, cmap_msg),
        ("heatmap(cmap=3)", lambda: plotting.attention_heatmap(W, toks, cmap=3), TypeError, r"cmap must be a matplotlib colormap name"),
        ("heatmap(cmap close)", lambda: plotting.attention_heatmap(W, toks, cmap="viridi"), ValueError, r"did you mean 'viridis'"),
        # None where labels belong ("object of type 'NoneType' has no len()")
        ("attention_heatmap(tokens None)", lambda: plotting.attention_heatmap(W, None), TypeError, r"row_tokens must be a list of labels, one per position, got NoneType"),
        ("weights_bar(labels None)", lambda: plotting.weights_bar(W[0], None), TypeError, r"labels must be a list of labels.*got NoneType"),
        ("layer_curves(labels None)", lambda: plotting.layer_curves(W, None, ylabel="y", title="t"), TypeError, r"labels must be a list of labels.*got NoneType"),
        ("hull_plot(labels 'abcd')", lambda: plotting.hull_plot(torch.randn(4, 2), "abcd"), TypeError, r"wrap a single label in a list"),
        ("panels('3')", lambda: plotting.panels("3"), TypeError, r"n must be a positive int, got str '3'"),
        # devices, masks, flags
        ("sdpa(mask NaN)", lambda: attnlib.scaled_dot_product_attention(q, q, q, torch.full((3, 3), float("nan"))), ValueError, r"must not hold NaN or \+inf .*found nan at index \(0, 0\)"),
        ("sdpa(mask +inf)", lambda: attnlib.scaled_dot_product_attention(q, q, q, torch.tensor([0.0, float("inf"), 0.0]), backend="torch"), ValueError, r"found inf at index \(1,\)"),
        ("sdpa(float16, mask 1e9)", lambda: attnlib.scaled_dot_product_attention(q.half(), q.half(), q.half(), torch.full((3, 3), 1e9)), ValueError, r"beyond q's dtype rounds to \+-inf"),
        ("tiled(mask NaN)", lambda: attnlib.tiled_attention(q, q, q, torch.full((3, 3), float("nan"))), ValueError, r"must not hold NaN"),
        ("KVCache.attend(return_weights='yes')", lambda: cache_then(lambda c: c.attend(torch.randn(1, 1, 1, 4), return_weights="yes")), TypeError, r"return_weights must be True or False, got str 'yes'"),
        ("top_keys(NaN)", lambda: measures.top_keys(torch.tensor([float("nan"), 0.5, 0.5, 0.0]), toks), ValueError, r"weights_row holds NaN at positions \[0\]"),
        # second round: AttributeError / RuntimeError from inside torch, matplotlib or attnlib
        ("causal_block(end < start)", lambda: attnlib.masks.causal_block(2, 1, 0, 1), ValueError, r"q_end must be >= q_start, got q_start = 2, q_end = 1"),
        ("causal_block('a', ...)", lambda: attnlib.masks.causal_block("a", 1, 0, 1), TypeError, r"q_start must be a non-negative int, got str 'a'"),
        ("apply_mask(None, mask)", lambda: attnlib.masks.apply_mask(None, torch.ones(2, 2, dtype=torch.bool)), TypeError, r"scores must be a torch.Tensor .*got NoneType"),
        ("apply_mask(int mask)", lambda: attnlib.masks.apply_mask(torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.long)), TypeError, r"mask must be bool .*got dtype torch.int64"),
        ("rope_scores(dtypes differ)", lambda: attnlib.rope_scores(torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.float64), [0, 1], [0, 1]), TypeError, r"q and k must share a dtype, got q torch.float32, k torch.float64"),
        ("rope_scores(devices differ)", lambda: attnlib.rope_scores(torch.zeros(2, 4), _meta(2, 4), [0, 1], [0, 1]), ValueError, r"q, k must be on one device, got q cpu, k meta"),
        ("head_heatmap(None)", lambda: plotting.head_heatmap(None, 0, 0), TypeError, r"att must be an EncoderAttention .*got NoneType"),
        ("layer_grid(None)", lambda: plotting.layer_grid(None, 0), TypeError, r"att must be an EncoderAttention .*got NoneType"),
        ("attention_heatmap(fmt=3)", lambda: plotting.attention_heatmap(W, toks, fmt=3), TypeError, r"fmt must be a format string .*got int 3"),
        ("attention_heatmap(vmin='a')", lambda: plotting.attention_heatmap(W, toks, vmin="a"), TypeError, r"vmin must be a real number, got str 'a'"),
        ("draw_attention_graph(node_values list)", lambda: plotting.draw_attention_graph(G, node_values=[1, 2, 3, 4]), TypeError, r"node_values must be a dict .*got list"),
    ]


_CASES = _fuzz_cases()


@pytest.mark.parametrize("name, call, err, match", _CASES, ids=[c[0] for c in _CASES])
def test_fuzzed_inputs_get_errors_that_name_the_problem(name, call, err, match):
    import matplotlib.pyplot as plt
    try:
        with pytest.raises(err, match=match):
            call()
    finally:
        plt.close("all")


def test_neighbourhood_mask_on_cuda_is_built_there_or_refused_with_a_reason():
    """Without CUDA the request is refused in words; with it (make gpu-check) the mask is
    built on the GPU and equals the CPU one (the table above once assumed no GPU)."""
    import networkx as nx
    from attnlib import graphs
    G = nx.path_graph(3)
    if torch.cuda.is_available():
        on_gpu = graphs.neighbourhood_mask(G, device="cuda")
        assert on_gpu.device.type == "cuda"
        assert torch.equal(on_gpu.cpu(), graphs.neighbourhood_mask(G))
    else:
        with pytest.raises(ValueError, match=r"asks for CUDA, which this machine does not have"):
            graphs.neighbourhood_mask(G, device="cuda")


def test_heatmap_labels_nan_cells_as_nan():
    """A NaN cell was labelled 'inf' (only -inf was told apart)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from attnlib import plotting
    fig = plotting.attention_heatmap(torch.tensor([[float("nan"), float("-inf")], [float("inf"), 0.5]]), ["a", "b"])
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    plt.close(fig)
    assert texts == ["-inf", "0.50", "inf", "nan"]


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_real_tensor_refuses_bool_and_complex(dtype):
    with pytest.raises(TypeError, match=rf"^scale must be a tensor of real numbers \(int or float\), got dtype {dtype}$"):
        V.real_tensor(torch.zeros(2, dtype=dtype), "scale")


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float16, torch.float64])
def test_real_tensor_accepts_ints_and_floats(dtype):
    t = torch.zeros(2, dtype=dtype)
    assert V.real_tensor(t) is t
    with pytest.raises(TypeError, match=r"^M must be a torch.Tensor or numpy.ndarray, got list$"):
        V.real_tensor([1, 2], "M")
