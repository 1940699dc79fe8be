"""The boundary of a simplex mesh, and the distance of any point to it.

A domain's boundary is the union of the facets of its cells that belong to one cell only: the
end nodes of an interval mesh, the boundary edges of a triangle mesh (the outer polygon and the
holes' polygons), the boundary triangles of a tetrahedral mesh. :func:`boundary_distance` gives
the Euclidean distance from points to that union exactly, so on two meshes of one polygonal
domain it is the same function, and on meshes of a curved domain it converges to the distance to
the domain's boundary as the boundary's chords do (second order in the edge length).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from ..errors import UnsupportedCellError

__all__ = ["boundary_distance", "boundary_facets"]


def boundary_facets(cells: np.ndarray) -> np.ndarray:
    """The facets ``[F, k - 1]`` (vertex indices, sorted in each row) of the simplex ``cells``
    ``[T, k]`` that belong to exactly one cell."""
    cells = np.asarray(cells)
    k = cells.shape[1]
    faces = np.sort(np.concatenate([np.delete(cells, j, axis=1) for j in range(k)]), axis=1)
    unique, counts = np.unique(faces, axis=0, return_counts=True)
    return unique[counts == 1]


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distances ``[M]`` of the points ``p [M, d]`` to the segments ``a b`` (``[M, d]`` each)."""
    ab = b - a
    length2 = np.einsum("md,md->m", ab, ab)
    t = np.clip(np.einsum("md,md->m", p - a, ab) / np.where(length2 > 0, length2, 1.0), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1)


def _triangle_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Distances ``[M]`` of the points ``p [M, 3]`` to the triangles ``a b c`` (``[M, 3]`` each):
    to the plane where the point's projection falls inside, else to the nearest edge."""
    u, v = b - a, c - a
    normal = np.cross(u, v)
    area2 = np.einsum("md,md->m", normal, normal)
    safe = np.where(area2 > 0, area2, 1.0)
    w = p - a
    # barycentric coordinates of the projection (Cramer's rule on the triangle's plane)
    beta = np.einsum("md,md->m", np.cross(w, v), normal) / safe
    gamma = np.einsum("md,md->m", np.cross(u, w), normal) / safe
    inside = (area2 > 0) & (beta >= 0) & (gamma >= 0) & (beta + gamma <= 1)
    plane = np.abs(np.einsum("md,md->m", w, normal)) / np.sqrt(safe)
    edges = np.minimum(np.minimum(_segment_distance(p, a, b), _segment_distance(p, b, c)), _segment_distance(p, c, a))
    return np.where(inside, plane, edges)


def boundary_distance(pos: np.ndarray, cells: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The distance ``[M]`` of each of ``points [M, d]`` to the boundary of the simplex mesh
    (nodes ``pos [N, d]``, ``cells [T, d + 1]``): exact, whether the point lies inside the
    domain or not.

    Each point's candidates are the boundary facets whose centroid lies within the distance to
    the nearest centroid plus the largest facet's radius (no facet outside can be nearer), so
    the cost is about the number of facets near each point, not all of them.

    Raises:
        UnsupportedCellError: cells other than the simplices of the space (intervals in 1-D,
            triangles in 2-D, tetrahedra in 3-D), or a mesh without boundary facets.
    """
    pos, cells = np.asarray(pos, dtype=np.float64), np.asarray(cells)
    points = np.asarray(points, dtype=np.float64).reshape(-1, pos.shape[1])
    d = pos.shape[1]
    if d not in (1, 2, 3) or cells.ndim != 2 or cells.shape[1] != d + 1:
        raise UnsupportedCellError(
            f"the distance to the boundary needs simplex cells of the space (intervals in 1-D, triangles in 2-D, "
            f"tetrahedra in 3-D); got cells of {cells.shape[-1] if cells.ndim == 2 else '?'} vertices in {d}-D")
    facets = boundary_facets(cells)
    if len(facets) == 0:
        raise UnsupportedCellError("the mesh has no boundary facets (a closed surface or no cells)")
    corners = pos[facets]  # [F, d, d]
    centroid = corners.mean(axis=1)
    radius = float(np.linalg.norm(corners - centroid[:, None], axis=-1).max())
    tree = cKDTree(centroid)
    nearest, _ = tree.query(points)
    lists = tree.query_ball_point(points, nearest + radius * (1 + 1e-9) + 1e-12)
    rows = np.repeat(np.arange(len(points)), [len(c) for c in lists])
    cols = np.concatenate([np.asarray(c, dtype=np.int64) for c in lists]) if len(points) else np.zeros(0, np.int64)
    p, f = points[rows], corners[cols]
    if d == 1:
        dist = np.abs(p[:, 0] - f[:, 0, 0])
    elif d == 2:
        dist = _segment_distance(p, f[:, 0], f[:, 1])
    else:
        dist = _triangle_distance(p, f[:, 0], f[:, 1], f[:, 2])
    out = np.full(len(points), np.inf)
    np.minimum.at(out, rows, dist)
    return out
