"""attnlib.geometry against independent oracles: matplotlib's point-in-polygon test,
brute-force hull properties, and the convex-combination invariant of attention."""
import numpy as np
import pytest
import torch
from matplotlib.path import Path

import attnlib
from attnlib.geometry import convex_hull_2d, in_convex_hull_2d, support_excess

pytestmark = pytest.mark.usefixtures("one_thread")


def _cross(o, a, b):
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def test_square_with_interior_and_edge_points():
    pts = torch.tensor([[0., 0.], [2., 0.], [2., 2.], [0., 2.], [1., 1.], [1., 0.], [0.5, 1.5]])
    assert convex_hull_2d(pts).tolist() == [0, 1, 2, 3]  # interior and mid-edge points left out


@pytest.mark.parametrize("seed", range(5))
def test_hull_properties_brute_force(seed):
    gen = torch.Generator().manual_seed(seed)
    pts = torch.randn(40, 2, generator=gen, dtype=torch.float64)
    hull = convex_hull_2d(pts)
    poly = pts[hull].numpy()
    n = len(poly)
    # counter-clockwise and convex: every point is on the left of every edge
    for e in range(n):
        a, b = poly[e], poly[(e + 1) % n]
        for p in pts.numpy():
            assert _cross(a, b, p) >= -1e-12
    # every vertex is extreme: it lies outside the hull of the other points
    for e in range(n):
        others = np.delete(pts.numpy(), hull[e].item(), axis=0)
        assert not in_convex_hull_2d(torch.from_numpy(others), pts[hull[e]][None]).item()


@pytest.mark.parametrize("seed", range(3))
def test_in_hull_matches_matplotlib_path(seed):
    gen = torch.Generator().manual_seed(seed)
    pts = torch.randn(25, 2, generator=gen, dtype=torch.float64)
    queries = 2.5 * torch.rand(500, 2, generator=gen, dtype=torch.float64) - 1.25
    ours = in_convex_hull_2d(pts, queries).numpy()
    oracle = Path(pts[convex_hull_2d(pts)].numpy()).contains_points(queries.numpy())
    poly = pts[convex_hull_2d(pts)].numpy()
    # compare away from the boundary, where the two tests may legitimately differ
    dist = np.min([np.abs(_cross(poly[e], poly[(e + 1) % len(poly)], queries.numpy().T))
                   / np.linalg.norm(poly[(e + 1) % len(poly)] - poly[e]) for e in range(len(poly))], axis=0)
    far = dist > 1e-9
    assert far.sum() > 400
    assert (ours[far] == oracle[far]).all()


def test_softmax_attention_outputs_lie_in_hull_2d():
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(7, 2, generator=gen)
    q, k = torch.randn(50, 4, generator=gen), torch.randn(7, 4, generator=gen)
    out, weights = attnlib.scaled_dot_product_attention(q, k, v)
    assert in_convex_hull_2d(v, out, atol=1e-5).all()
    assert not in_convex_hull_2d(v, 3 * out.abs().max() * torch.ones(1, 2) + v.abs().max()).any()


def test_degenerate_hulls():
    same = torch.ones(4, 2)
    assert convex_hull_2d(same).tolist() == [0]
    assert in_convex_hull_2d(same, torch.tensor([[1., 1.], [1., 1.1]])).tolist() == [True, False]
    line = torch.tensor([[0., 0.], [1., 1.], [2., 2.], [0.5, 0.5]])
    assert sorted(convex_hull_2d(line).tolist()) == [0, 2]
    got = in_convex_hull_2d(line, torch.tensor([[1.5, 1.5], [3., 3.], [1., 0.]]))
    assert got.tolist() == [True, False, False]


def test_support_excess_any_dimension():
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(10, 64, generator=gen, dtype=torch.float64)
    weights = torch.softmax(torch.randn(5, 10, generator=gen, dtype=torch.float64), dim=-1)
    dirs = torch.randn(300, 64, generator=gen, dtype=torch.float64)
    assert (support_excess(v, weights @ v, dirs) <= 1e-12).all()
    # a point beyond the furthest value along the first direction is caught
    u = dirs[0]
    p = weights[0] @ v
    outside = (p + ((v @ u).max() - u @ p + 1.0) * u / (u @ u))[None]  # u . outside = max_j u . v_j + 1
    assert support_excess(v, outside, dirs).item() >= 1.0 - 1e-9
    # hand-computed: (1, 1) is outside the unit triangle by 1 along (1, 1)
    tri = torch.tensor([[0., 0.], [1., 0.], [0., 1.]])
    assert support_excess(tri, torch.tensor([[1., 1.]]), torch.tensor([[1., 1.]])).item() == pytest.approx(1.0)


@pytest.mark.parametrize("bad, err", [
    ([[0.0, 1.0]], TypeError),                       # a list, not a tensor
    (torch.zeros(3, 3), ValueError),                 # wrong width
    (torch.zeros(3), ValueError),                    # 1-D
    (torch.zeros(0, 2), ValueError),                 # empty
    (torch.zeros(3, 2, dtype=torch.int64), TypeError),
    (torch.tensor([[0.0, float("nan")]]), ValueError),
])
def test_bad_input(bad, err):
    with pytest.raises(err):
        convex_hull_2d(bad)


def test_width_mismatch_message():
    with pytest.raises(ValueError, match="share their width"):
        support_excess(torch.zeros(3, 4), torch.zeros(1, 5), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="atol"):
        in_convex_hull_2d(torch.zeros(3, 2), torch.zeros(1, 2), atol=-1.0)


# ---- atol: a point just outside the boundary is inside for a larger atol, outside for atol = 1e-9 or 0
_D = 1e-6
ATOL_CASES = {
    # hull kind: (points, a query 1e-6 outside, tolerance that admits it)
    "polygon": (torch.tensor([[0., 0.], [1., 0.], [1., 1.], [0., 1.]]), [1 + _D, 0.5], 1e-5),
    "segment": (torch.tensor([[0., 0.], [1., 0.], [0.5, 0.]]), [0.5, _D], 1e-5),   # collinear points
    "segment end": (torch.tensor([[0., 0.], [1., 0.]]), [1 + _D, 0.], 1e-5),
    "single point": (torch.tensor([[2., 3.], [2., 3.]]), [2., 3 + 1e-3], 1e-5),    # distance <= sqrt(atol)
}


@pytest.mark.parametrize("kind", ATOL_CASES)
def test_atol_decides_near_boundary_points(kind):
    points, query, admitting = ATOL_CASES[kind]
    points, query = points.double(), torch.tensor([query], dtype=torch.float64)
    assert in_convex_hull_2d(points, query, atol=admitting).tolist() == [True]
    assert in_convex_hull_2d(points, query, atol=0.0).tolist() == [False]
    assert in_convex_hull_2d(points, query).tolist() == [False]          # default atol 1e-9
    far = query + torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    assert in_convex_hull_2d(points, far, atol=admitting).tolist() == [False]


@pytest.mark.parametrize("bad, exc", [("1e-5", TypeError), (None, TypeError), (True, TypeError),
                                      (float("nan"), ValueError), (float("inf"), ValueError),
                                      (torch.ones(2), TypeError)])
def test_atol_must_be_a_finite_non_negative_number(bad, exc):
    with pytest.raises(exc, match="atol must be"):
        in_convex_hull_2d(torch.zeros(3, 2), torch.zeros(1, 2), atol=bad)


def test_support_excess_mixed_dtypes_and_devices():
    v = torch.tensor([[0., 0.], [1., 0.], [0., 1.]])
    u = torch.tensor([[1., 1.]], dtype=torch.float64)
    got = support_excess(v, torch.tensor([[1., 1.]]), u)
    assert got.dtype == torch.float64 and got.item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="meta"):
        support_excess(v, torch.zeros(1, 2), u.to("meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_inputs():
    v = torch.randn(6, 2, device="cuda")
    w = torch.softmax(torch.randn(4, 6, device="cuda"), dim=-1)
    assert in_convex_hull_2d(v, w @ v, atol=1e-5).all()
    e = support_excess(v, w @ v, torch.randn(20, 2, device="cuda"))
    assert e.device.type == "cuda" and (e <= 1e-5).all()


# --- barycentric / in_convex_hull: the exact test in any dimension ---------------------------

def test_barycentric_recovers_attention_weights_in_384_dimensions():
    from attnlib.geometry import barycentric, in_convex_hull
    g = torch.Generator().manual_seed(0)
    values = torch.randn(13, 384, generator=g, dtype=torch.float64)
    weights = torch.randn(5, 13, generator=g, dtype=torch.float64).softmax(-1)     # convex
    lam, residual = barycentric(values, weights @ values)
    torch.testing.assert_close(lam, weights, atol=1e-10, rtol=0)
    assert residual.max() < 1e-10
    assert in_convex_hull(values, weights @ values).all()
    doubled = 2 * weights                                   # sums to 2: off the affine hull
    negative = weights.clone(); negative[:, 0] -= 0.5; negative[:, 1] += 0.5   # sums to 1, one < 0
    assert not in_convex_hull(values, doubled @ values).any()
    assert not in_convex_hull(values, negative @ values).any()
    lam_neg, res_neg = barycentric(values, negative @ values)
    assert res_neg.max() < 1e-10 and (lam_neg[:, 0] < 0).all()   # on the affine hull, outside the simplex


def test_in_convex_hull_agrees_with_the_2d_test_on_a_triangle():
    from attnlib.geometry import in_convex_hull
    g = torch.Generator().manual_seed(1)
    triangle = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.5, 1.5]], dtype=torch.float64)
    points = torch.rand(400, 2, generator=g, dtype=torch.float64) * 2.4 - 0.2
    expected = in_convex_hull_2d(triangle, points)
    got = in_convex_hull(triangle, points, atol=1e-12)
    assert (got == expected).all() and 0 < int(got.sum()) < 400


def test_barycentric_refuses_affinely_dependent_values():
    from attnlib.geometry import barycentric
    square = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])    # 4 points in 2-D
    with pytest.raises(ValueError, match="not affinely independent"):
        barycentric(square, torch.tensor([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="share their width"):
        barycentric(square[:3], torch.zeros(1, 3))


# ---------------------------------------------------------------------- pca_2d
def test_pca_2d_against_numpy_and_the_affine_property():
    from attnlib.geometry import pca_2d
    g = torch.Generator().manual_seed(0)
    x = torch.randn(13, 50, generator=g, dtype=torch.float64) @ torch.randn(50, 50, generator=g, dtype=torch.float64)
    coords, mu, P, explained = pca_2d(x)
    xn = x.numpy()
    centred = xn - xn.mean(0)
    u, s, vt = np.linalg.svd(centred, full_matrices=False)              # oracle: numpy's SVD
    ref = centred @ vt[:2].T
    signs = np.sign((coords.numpy() * ref).sum(0))                      # singular vectors: up to sign
    assert np.allclose(coords.numpy() * signs, ref, atol=1e-8)
    assert np.isclose(explained, (s[:2] ** 2).sum() / (s ** 2).sum())
    assert torch.allclose(P.T @ P, torch.eye(2, dtype=torch.float64), atol=1e-12)
    a = torch.rand(13, generator=g, dtype=torch.float64).softmax(0)     # convex weights
    assert torch.allclose((a @ x - mu) @ P, a @ coords, atol=1e-8)      # affine maps commute with averages
    b = a.clone()
    b[0] += 1.0                                                         # weights summing to 2: no longer
    assert not torch.allclose((b @ x - mu) @ P, b @ coords, atol=1e-3)


@pytest.mark.parametrize("bad, error", [
    (torch.ones(5, 3), ValueError),                 # all points equal
    (torch.randn(1, 4), ValueError),                # one point
    (torch.randn(4, 1), ValueError),                # one dimension
    (torch.randn(2, 3, 4), ValueError),             # not 2-D
    (torch.tensor([[0.0, float("nan")], [1.0, 2.0]]), ValueError),
    (torch.ones(3, 3, dtype=torch.long), TypeError),
    ("points", TypeError),
])
def test_pca_2d_rejects(bad, error):
    from attnlib.geometry import pca_2d
    with pytest.raises(error):
        pca_2d(bad)
