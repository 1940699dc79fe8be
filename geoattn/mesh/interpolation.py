r"""Piecewise-linear interpolation of nodal values at arbitrary points of a point cloud's domain.

:func:`linear_interpolation` returns, for every evaluation point :math:`y`, ``d + 1`` node indices
and coefficients with :math:`u(y) \approx \sum_k \beta_k u_{j_k}`: the P1 (barycentric)
interpolant on the Delaunay triangulation of the nodes (in 1-D, the piecewise-linear interpolant
between neighbouring nodes). The coefficients sum to one (constants are reproduced exactly) and
are non-negative, and linear functions are reproduced exactly wherever the point is covered; the
error of a smooth function is :math:`O(h^2)`.

Points that are not covered by the domain get the value at the closest point of the domain's
boundary (the closest-point, constant-along-normals extension), interpolated linearly on the
boundary facet nearest to them among those at their nearest node (in 1-D, the end point). A point
is not covered when it lies outside the convex hull of the nodes, or in a Delaunay simplex that
bridges a gap of the domain (a hole, the missing corner of an L-shape): a simplex whose longest
edge exceeds ``gap`` times the local node spacing of its vertices (the median length of a vertex's
Delaunay edges, which measures stretched cells in their long direction). Under refinement the
bridging simplices eventually all fail this test, so the interpolant converges to the
closest-point extension of the continuum function, at second order away from corners of the
boundary (in 3-D the projection onto a boundary triangle is approximate: the barycentric
coordinates of the projection onto its plane, clipped to the triangle).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from scipy.spatial import ConvexHull, Delaunay, cKDTree

__all__ = ["Interpolation", "linear_interpolation"]


class Interpolation(NamedTuple):
    """Interpolation stencils: ``index [M, d + 1]`` (node indices) and ``coeff [M, d + 1]``
    (coefficients summing to one), so that :math:`u(y_m) \\approx \\sum_k` ``coeff[m, k] *
    u[index[m, k]]``."""

    index: torch.Tensor
    coeff: torch.Tensor

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        """Interpolated values ``[M, ...]`` of nodal ``values [N, ...]``."""
        coeff = self.coeff.to(values.dtype).view(*self.coeff.shape, *([1] * (values.dim() - 1)))
        return (values[self.index] * coeff).sum(1)


def _local_spacing(simplices: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Median length of the Delaunay edges at every node (the local mesh size; on stretched cells
    the median is the long side, since a node has as many long edges as short ones)."""
    v = simplices.shape[1]
    a, b = np.triu_indices(v, 1)
    edges = np.unique(np.sort(np.concatenate([simplices[:, [i, j]] for i, j in zip(a, b)]), 1), axis=0)
    length = np.sqrt(((p[edges[:, 0]] - p[edges[:, 1]]) ** 2).sum(1))
    node = np.concatenate([edges[:, 0], edges[:, 1]])
    length = np.concatenate([length, length])
    order = np.lexsort((length, node))
    node, length = node[order], length[order]
    count = np.bincount(node, minlength=len(p))
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    spacing = np.full(len(p), np.inf)
    has = count > 0
    spacing[has] = length[start[has] + (count[has] - 1) // 2]
    return spacing


def _interval(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """1-D stencils between neighbouring nodes; ``covered`` is False outside ``[min, max]``."""
    order = np.argsort(p[:, 0], kind="stable")
    x = p[order, 0]
    right = np.clip(np.searchsorted(x, q[:, 0], side="right"), 1, len(x) - 1)
    left = right - 1
    span = x[right] - x[left]
    t = np.where(span > 0, (q[:, 0] - x[left]) / np.where(span > 0, span, 1.0), 0.0)
    index = np.stack([order[left], order[right]], axis=1)
    coeff = np.stack([1.0 - t, t], axis=1)
    covered = (q[:, 0] >= x[0]) & (q[:, 0] <= x[-1])
    return index, coeff, covered


def _in_hull(tri: Delaunay, q: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """Whether each point lies strictly inside the convex hull of the triangulated nodes. Points on
    the hull (to rounding) count as outside: their projection onto the boundary facets is exact,
    whereas ``find_simplex`` may miss them and fall back to its brute-force search."""
    equations = ConvexHull(tri.points).equations  # (F', d + 1): normal . x + offset <= 0 inside
    scale = np.abs(tri.points).max() if len(tri.points) else 1.0
    out = np.empty(len(q), dtype=bool)
    for lo in range(0, len(q), chunk):
        part = q[lo:lo + chunk]
        out[lo:lo + chunk] = (part @ equations[:, :-1].T + equations[:, -1] < -1e-10 * scale).all(1)
    return out


def _simplices(p: np.ndarray, q: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Barycentric stencils on the Delaunay triangulation; ``covered`` excludes bridging simplices."""
    tri = Delaunay(p)
    # find_simplex falls back to a brute-force search for points outside the hull: test those first
    simplex = np.full(len(q), -1, dtype=np.int64)
    hull = _in_hull(tri, q)
    simplex[hull] = tri.find_simplex(q[hull])
    inside = simplex >= 0
    s = np.where(inside, simplex, 0)
    transform = tri.transform[s]  # (M, d + 1, d)
    b = np.einsum("mij,mj->mi", transform[:, :-1], q - transform[:, -1])
    coeff = np.concatenate([b, 1.0 - b.sum(1, keepdims=True)], axis=1)
    index = tri.simplices[s]
    spacing = _local_spacing(tri.simplices, p)
    verts = p[tri.simplices]  # (S, d + 1, d)
    edges = verts[:, :, None, :] - verts[:, None, :, :]
    longest = np.sqrt((edges ** 2).sum(-1)).max(axis=(1, 2))
    solid = longest <= gap * spacing[tri.simplices].max(1)
    covered = inside & solid[s]
    return index, np.clip(coeff, 0.0, 1.0), covered, tri.simplices[solid]


def _boundary_facets(simplices: np.ndarray) -> np.ndarray:
    """Facets ``[F, d]`` that belong to exactly one of ``simplices`` ``[S, d + 1]``."""
    v = simplices.shape[1]
    facets = np.concatenate([np.delete(simplices, i, axis=1) for i in range(v)])
    facets = np.sort(facets, axis=1)
    unique, count = np.unique(facets, axis=0, return_counts=True)
    return unique[count == 1]


def _project_to_boundary(p: np.ndarray, q: np.ndarray, nearest: np.ndarray,
                         facets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stencils of the closest point on the boundary facets at each point's nearest node.

    Returns ``index [M, d]``, ``coeff [M, d]`` and ``found [M]`` (False where the nearest node
    is on no boundary facet: those keep the nearest node's value)."""
    m, d = q.shape
    owner = facets.ravel()
    facet_id = np.repeat(np.arange(len(facets)), d)
    order = np.argsort(owner, kind="stable")
    owner, facet_id = owner[order], facet_id[order]
    start = np.searchsorted(owner, nearest, side="left")
    stop = np.searchsorted(owner, nearest, side="right")
    found = stop > start
    best_index = np.zeros((m, d), np.int64)
    best_coeff = np.zeros((m, d))
    best_dist = np.full(m, np.inf)
    for offset in range(int((stop - start).max(initial=0))):
        has = start + offset < stop
        rows = np.flatnonzero(has)
        f = facets[facet_id[start[rows] + offset]]  # (r, d)
        a = p[f[:, 0]]
        edges = p[f[:, 1:]] - a[:, None, :]  # (r, d - 1, d)
        rhs = q[rows] - a
        gram = np.einsum("rid,rjd->rij", edges, edges)
        t = np.linalg.solve(gram, np.einsum("rid,rd->ri", edges, rhs)[..., None])[..., 0] \
            if d > 1 else np.zeros((len(rows), 0))
        bary = np.clip(np.concatenate([1.0 - t.sum(1, keepdims=True), t], axis=1), 0.0, None)
        bary /= bary.sum(1, keepdims=True)
        point = np.einsum("ri,rid->rd", bary, p[f])
        dist = ((point - q[rows]) ** 2).sum(1)
        better = dist < best_dist[rows]
        r = rows[better]
        best_index[r], best_coeff[r], best_dist[r] = f[better], bary[better], dist[better]
    return best_index, best_coeff, found


def linear_interpolation(pos: torch.Tensor, points: torch.Tensor, gap: float = 2.0) -> Interpolation:
    """Piecewise-linear interpolation stencils of the nodes ``pos`` at ``points``.

    Args:
        pos: node coordinates ``[N, d]``, ``d`` in 1–3, distinct.
        points: evaluation points ``[M, d]``.
        gap: a Delaunay simplex whose longest edge exceeds ``gap`` times the local spacing of its
            vertices bridges a gap of the domain and covers nothing (default ``2.0``).

    Returns:
        an :class:`Interpolation` on ``pos.device`` (coefficients in ``pos.dtype``); points not
        covered by the domain take the value of their nearest node.
    """
    if pos.dim() != 2 or points.dim() != 2 or pos.shape[1] != points.shape[1]:
        raise ValueError(f"pos [N, d] and points [M, d] must share d, got {tuple(pos.shape)} and "
                         f"{tuple(points.shape)}")
    n, d = pos.shape
    if n == 0:
        raise ValueError("cannot interpolate from a mesh with no nodes")
    p = pos.detach().to("cpu", torch.float64).numpy()
    q = points.detach().to("cpu", torch.float64).numpy()
    solid = None
    if n <= d:  # too few nodes for a simplex: nearest node everywhere
        index, coeff, covered = np.zeros((len(q), d + 1), np.int64), np.zeros((len(q), d + 1)), \
            np.zeros(len(q), bool)
    elif d == 1:  # outside the interval the nearest node is the closest boundary point
        index, coeff, covered = _interval(p, q)
    else:
        index, coeff, covered, solid = _simplices(p, q, gap)
    if not covered.all():
        out = np.flatnonzero(~covered)
        _, nearest = cKDTree(p).query(q[out])
        index[out] = nearest[:, None]
        coeff[out] = 0.0
        coeff[out, 0] = 1.0
        if solid is not None and len(solid):
            facet_index, facet_coeff, found = _project_to_boundary(p, q[out], nearest,
                                                                   _boundary_facets(solid))
            rows = out[found]
            index[rows, :d], coeff[rows, :d], coeff[rows, d] = facet_index[found], facet_coeff[found], 0.0
            index[rows, d] = index[rows, 0]
    coeff /= coeff.sum(1, keepdims=True)
    return Interpolation(torch.from_numpy(np.ascontiguousarray(index)).to(pos.device),
                         torch.from_numpy(coeff).to(pos.device, pos.dtype))
