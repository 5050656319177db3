"""Convex hulls and convex combinations: the geometry behind "attention is a weighted
average" (chapter 1).

An attention output ``out_i = sum_j A[i, j] v_j`` with ``A[i, j] >= 0`` and
``sum_j A[i, j] = 1`` is a *convex combination* of the value rows, so it lies in their
convex hull.  This module computes 2-D hulls (for pictures) and a dimension-free test of
hull membership through support functions (for checking real 384-d outputs).

Shapes legend used across attnlib: ``B`` batch, ``H`` heads, ``T_q`` queries, ``T_k`` keys,
``d_k`` query/key width, ``d_v`` value width, ``d_model`` model width.
"""
from __future__ import annotations

import torch

from . import _validate

__all__ = ["convex_hull_2d", "in_convex_hull_2d", "support_excess", "barycentric", "in_convex_hull", "pca_2d"]


def _points(x, name: str, *, width: int | None = None) -> torch.Tensor:
    t = _validate.floating(x, name)
    if t.dim() != 2 or (width is not None and t.shape[1] != width):
        form = f"(N, {width})" if width is not None else "(N, d)"
        raise ValueError(f"{name} must have shape {form}, got {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one point, got shape {tuple(t.shape)}")
    if t.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the meta device")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return t


def _cross(o, a, b) -> float:
    """z-component of (a - o) x (b - o): > 0 when o -> a -> b turns counter-clockwise."""
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def convex_hull_2d(points) -> torch.Tensor:
    """Indices of the vertices of the convex hull of 2-D points, counter-clockwise.

    Andrew's monotone chain algorithm (A. M. Andrew, 1979, "Another efficient algorithm for
    convex hulls in two dimensions"), ``O(N log N)``.  Points on a hull edge but not at a
    corner are left out; duplicated points are reported once.  Degenerate inputs give a
    single index (all points equal) or the two end points (all points on one line).

    Shapes:
        points: ``(N, 2)``; result: ``(n_vertices,)`` int64 indices into ``points``, on the
        CPU, starting from the lowest-x (then lowest-y) point.

    Raises:
        TypeError: ``points`` is not a floating tensor or numpy array.
        ValueError: ``points`` is not ``(N, 2)`` with ``N >= 1``, or is not finite.

    >>> convex_hull_2d(torch.tensor([[0., 0.], [1., 0.], [1., 1.], [0., 1.], [.5, .5]]))
    tensor([0, 1, 2, 3])
    """
    pts = _points(points, "points", width=2).detach().to("cpu", torch.float64)
    coords = [tuple(p) for p in pts.tolist()]
    order = sorted(range(len(coords)), key=lambda i: coords[i])
    unique: list[int] = []
    for i in order:  # drop exact duplicates, keeping the first index
        if not unique or coords[unique[-1]] != coords[i]:
            unique.append(i)
    if len(unique) <= 2:
        return torch.tensor(unique, dtype=torch.int64)

    def chain(idx):
        out: list[int] = []
        for i in idx:
            while len(out) >= 2 and _cross(coords[out[-2]], coords[out[-1]], coords[i]) <= 0:
                out.pop()
            out.append(i)
        return out

    lower, upper = chain(unique), chain(unique[::-1])
    hull = lower[:-1] + upper[:-1]
    return torch.tensor(hull, dtype=torch.int64)


def in_convex_hull_2d(points, query, atol: float = 1e-9) -> torch.Tensor:
    """Whether each query point lies in the convex hull of ``points`` (boundary included).

    A point is inside a counter-clockwise convex polygon when it is on the left of (or on)
    every edge.  ``atol`` is the tolerance on the cross products, in squared units of the
    coordinates; raise it for float32 data.

    Shapes:
        points: ``(N, 2)``; query: ``(M, 2)``; result: ``(M,)`` bool on the CPU.

    Raises:
        TypeError: an input is not a floating tensor or numpy array; ``atol`` is not a real
            number.
        ValueError: an input is not ``(N, 2)`` / ``(M, 2)``, is empty or not finite, or
            ``atol`` is negative, NaN or infinite.

    Source: the orientation (cross-product) test of computational geometry, as in
    de Berg et al. (2008), *Computational Geometry*, chapter 1.

    >>> square = torch.tensor([[0., 0.], [1., 0.], [1., 1.], [0., 1.]], dtype=torch.float64)
    >>> in_convex_hull_2d(square, torch.tensor([[0.5, 0.5], [1 + 1e-6, 0.5]], dtype=torch.float64))
    tensor([ True, False])
    >>> in_convex_hull_2d(square, torch.tensor([[1 + 1e-6, 0.5]], dtype=torch.float64), atol=1e-5)
    tensor([True])
    """
    atol = _validate.real(atol, "atol", low=0.0)
    pts = _points(points, "points", width=2).detach().to("cpu", torch.float64)
    qs = _points(query, "query", width=2).detach().to("cpu", torch.float64)
    poly = pts[convex_hull_2d(pts)]                                   # (n_vertices, 2)
    if poly.shape[0] == 1:
        return (qs - poly[0]).norm(dim=1) <= atol ** 0.5
    a, b = poly, torch.roll(poly, -1, dims=0)                         # edges a -> b
    if poly.shape[0] == 2:                                            # a segment
        d = b[0] - a[0]
        rel = qs - a[0]
        cross = d[0] * rel[:, 1] - d[1] * rel[:, 0]
        t = rel @ d / (d @ d)
        return (cross.abs() <= atol) & (t >= -atol) & (t <= 1 + atol)
    edge = (b - a)[None]                                              # (1, n, 2)
    rel = qs[:, None, :] - a[None]                                    # (M, n, 2)
    cross = edge[..., 0] * rel[..., 1] - edge[..., 1] * rel[..., 0]   # (M, n)
    return (cross >= -atol).all(dim=1)


def support_excess(values, out, directions) -> torch.Tensor:
    """How far each point of ``out`` sticks out of the convex hull of ``values``, measured
    along the given directions; works in any dimension.

    For a direction ``u`` the hull reaches at most ``max_j u . v_j`` (its *support
    function*).  A point ``p`` in the hull satisfies ``u . p <= max_j u . v_j`` for every
    ``u``; a point outside violates it for some ``u`` (separating hyperplane theorem).  The
    result is ``max_u (u . p - max_j u . v_j)`` per point: ``<= 0`` (up to rounding) for
    every point inside, and a value ``> 0`` proves that the point is outside.  Directions
    are used as given (normalise them to read the result as a distance).

    Shapes:
        values: ``(T_k, d)``; out: ``(M, d)``; directions: ``(n_dirs, d)``; result ``(M,)``.

    The three inputs may differ in floating dtype (the result has the widest one) but must
    be on one device.

    Raises:
        TypeError: an input is not a floating tensor or numpy array.
        ValueError: an input is not 2-D, is empty or not finite; the widths differ; the
            inputs are on different devices.

    Source: support functions and the separating hyperplane theorem, Boyd & Vandenberghe
    (2004), *Convex Optimization*, section 2.5.

    >>> v = torch.tensor([[0., 0.], [1., 0.], [0., 1.]])
    >>> u = torch.tensor([[1., 0.], [0., 1.], [1., 1.]])
    >>> support_excess(v, torch.tensor([[0.2, 0.2], [1., 1.]]), u)  # inside, outside
    tensor([-0.6000,  1.0000])
    """
    v = _points(values, "values")
    p = _points(out, "out")
    u = _points(directions, "directions")
    if not (v.shape[1] == p.shape[1] == u.shape[1]):
        raise ValueError(
            "values, out and directions must share their width d: "
            f"values {tuple(v.shape)}, out {tuple(p.shape)}, directions {tuple(u.shape)}"
        )
    _validate.same_device(values=v, out=p, directions=u)
    dtype = torch.promote_types(torch.promote_types(v.dtype, p.dtype), u.dtype)
    v, p, u = v.to(dtype), p.to(dtype), u.to(dtype)
    reach = (v @ u.T).amax(dim=0)          # (n_dirs,): how far the hull reaches along each u
    return (p @ u.T - reach).amax(dim=1)   # (M,)


def barycentric(values, points):
    """Exact hull test in any dimension for affinely independent values: the weights
    ``lam`` with ``sum_j lam_j v_j = p`` and ``sum_j lam_j = 1`` (barycentric coordinates),
    and how far ``p`` is from the affine hull of the values.

    When the ``T_k`` values are affinely independent (possible only for ``T_k <= d + 1``,
    and true of real token vectors with ``T_k`` well below ``d``), these weights are unique,
    so ``p`` lies in the convex hull **exactly when** its residual is 0 and every weight is
    ``>= 0``.  This decides membership both ways, unlike :func:`support_excess`, which can
    prove a point outside but never inside.  For an attention output ``A[i] @ V`` the weights
    it returns are the attention weights themselves.

    Computed in float64 as the least-squares solution of the stacked system
    ``[V^T; 1^T] lam = [p; 1]``.

    Shapes:
        values: ``(T_k, d)``; points: ``(M, d)``.  Returns ``lam`` ``(M, T_k)`` and
        ``residual`` ``(M,)`` (Euclidean distance to the affine hull, in the units of the
        vectors), float64.

    Raises:
        TypeError: an input is not a floating tensor or numpy array.
        ValueError: an input is not 2-D, empty or not finite; the widths differ; the values
            are not affinely independent (the message says how many are).

    Source: barycentric coordinates of a simplex, e.g. Boyd & Vandenberghe (2004),
    *Convex Optimization*, section 2.1.4.

    >>> v = torch.tensor([[0., 0.], [1., 0.], [0., 1.]])
    >>> lam, res = barycentric(v, torch.tensor([[0.2, 0.3], [1., 1.]]))
    >>> lam.round(decimals=6), res.round(decimals=6)
    (tensor([[ 0.5000,  0.2000,  0.3000],
            [-1.0000,  1.0000,  1.0000]], dtype=torch.float64), tensor([0., 0.], dtype=torch.float64))
    """
    v = _points(values, "values")
    p = _points(points, "points")
    if v.shape[1] != p.shape[1]:
        raise ValueError(f"values and points must share their width d: values {tuple(v.shape)}, "
                         f"points {tuple(p.shape)}")
    _validate.same_device(values=v, points=p)
    v, p = v.double().cpu(), p.double().cpu()
    T_k = v.shape[0]
    system = torch.cat([v.T, torch.ones(1, T_k, dtype=torch.float64)])      # (d + 1, T_k)
    rank = int(torch.linalg.matrix_rank(system))
    if rank < T_k:
        raise ValueError(f"the {T_k} values are not affinely independent (the affine hull has dimension "
                         f"{rank - 1}, not {T_k - 1}), so their barycentric weights are not unique; "
                         "use support_excess to prove points outside")
    rhs = torch.cat([p.T, torch.ones(1, p.shape[0], dtype=torch.float64)])  # (d + 1, M)
    lam = torch.linalg.lstsq(system, rhs).solution.T                          # (M, T_k)
    residual = (lam @ v - p).norm(dim=-1)
    return lam, residual


def in_convex_hull(values, points, atol: float = 1e-6) -> torch.Tensor:
    """``True`` for each point inside the convex hull of affinely independent ``values``,
    decided exactly by :func:`barycentric`: residual ``<= atol * scale`` and every weight
    ``>= -atol``, where ``scale`` is the largest norm among the values (so ``atol`` is
    relative).

    Shapes:
        values ``(T_k, d)``, points ``(M, d)``; returns ``(M,)`` bool.

    Raises:
        as :func:`barycentric`; ValueError for a negative or non-finite ``atol``.

    >>> v = torch.tensor([[0., 0.], [1., 0.], [0., 1.]])
    >>> in_convex_hull(v, torch.tensor([[0.2, 0.3], [1., 1.]]))
    tensor([ True, False])
    """
    atol = _validate.real(atol, "atol", low=0.0)
    lam, residual = barycentric(values, points)
    scale = _validate.floating(values, "values").double().norm(dim=-1).max().cpu()
    return (residual <= atol * max(float(scale), 1.0)) & (lam >= -atol).all(dim=-1)


def pca_2d(points):
    """Project points onto their two principal directions, for drawing a hull in the plane.

    The map is affine, ``f(x) = (x - mu) P`` with ``mu`` the mean of the points and the two
    columns of ``P`` the top right-singular vectors of the centred points, so it commutes with
    convex combinations: ``f(sum_j a_j x_j) = sum_j a_j f(x_j)`` whenever ``sum_j a_j = 1``.
    (It does *not* preserve hull membership in the other direction: a point outside the hull
    can project inside the projected hull; use :func:`in_convex_hull` in the full space.)

    Shapes:
        points: ``(N, d)`` with ``N >= 2``, ``d >= 2``, floating.
        returns ``coords`` ``(N, 2)``, ``mu`` ``(d,)``, ``P`` ``(d, 2)`` (orthonormal columns)
        and ``explained``, the fraction of the total variance the two directions keep (a
        float in [0, 1]).

    Raises:
        TypeError: ``points`` is not a floating tensor or array.
        ValueError: not 2-D, fewer than 2 points or dimensions, not finite, or all points equal.

    Source: principal component analysis via the SVD (Pearson 1901; any linear-algebra text).
    """
    x = _points(points, "points")
    if x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError(f"points must have at least 2 rows and 2 columns, got {tuple(x.shape)}")
    mu = x.mean(dim=0)                                   # (d,)
    _, sing, vh = torch.linalg.svd(x - mu, full_matrices=False)
    total = (sing ** 2).sum()
    if total == 0:
        raise ValueError("points are all equal: there is no direction of variance to project on")
    P = vh[:2].T                                         # (d, 2)
    explained = float((sing[:2] ** 2).sum() / total)
    return (x - mu) @ P, mu, P, explained
