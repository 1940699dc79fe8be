"""Surface meshes: triangles and quads embedded in 3-D (the shape of car-body and wing datasets).

A surface cell has no volume and no sign of its own: its measure is its area, and its
orientation only means something relative to its neighbours (a consistently oriented surface
traverses every edge it shares with a neighbour in opposite directions). The lumped weight of a
node is the integral of its hat function over the surface,

.. math::
    w_i = \\int_S \\varphi_i\\,dA = \\sum_{K \\ni i} \\int_{\\hat K} \\hat\\varphi_i\\,
    \\lvert \\partial_\\xi x \\times \\partial_\\eta x \\rvert\\,d\\hat x,

which is :math:`|K|/3` per vertex of a flat triangle and, for a bilinear quad, is integrated with
the 2-point Gauss rule per axis (exact for a planar parallelogram). On a polyhedral approximation
of a smooth surface with mesh size ``h`` (an icosphere), :math:`\\sum_i w_i f(x_i)` converges to
:math:`\\int_S f\\,dA` at :math:`O(h^2)`: the polyhedron's area differs from the surface's by
:math:`O(h^2)`, and lumped P1 quadrature on it is second order.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import breadth_first_order, connected_components

from ..errors import InvertedCellError
from .cells import first_clash

#: Cell types that may form a surface in 3-D.
SURFACE_CELLS = ("triangle", "quad")

_G = (0.5 - 0.5 / np.sqrt(3.0), 0.5 + 0.5 / np.sqrt(3.0))
#: 2x2 Gauss points on ``[0, 1]^2`` (each of weight 1/4).
_GAUSS = np.array([(s, t) for s in _G for t in _G])  # [4, 2]


def is_surface(cell_type_name: str | None, dim: int) -> bool:
    """Whether cells of this type on ``dim``-D nodes form a surface (2-D cells in 3-D)."""
    return cell_type_name in SURFACE_CELLS and dim == 3


def _bilinear(xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q1 shape functions ``[P, 4]`` and their reference gradients ``[P, 4, 2]`` at ``xi [P, 2]``."""
    s, t = xi[:, 0], xi[:, 1]
    phi = np.stack([(1 - s) * (1 - t), s * (1 - t), s * t, (1 - s) * t], axis=1)
    ds = np.stack([-(1 - t), 1 - t, t, -t], axis=1)
    dt = np.stack([-(1 - s), -s, s, 1 - s], axis=1)
    return phi, np.stack([ds, dt], axis=2)


def corner_normals(pos: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """The normal ``(x_{v+1} - x_v) × (x_{v-1} - x_v)`` at each corner ``v`` of each cell,
    ``[M, V, 3]`` (twice the area of a triangle, for each of its corners)."""
    x = pos[cells]  # [M, V, 3]
    return np.cross(np.roll(x, -1, axis=1) - x, np.roll(x, 1, axis=1) - x)


def min_corner_areas(pos: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Smallest corner normal of each cell projected on the cell's mean unit normal, ``[M]``.

    For a triangle this is twice its area; a quad whose corners turn the same way (convex,
    not folded) has every projection positive, and a non-convex or bow-tie quad has one
    ``<= 0``. The surface analogue of the smallest corner Jacobian.
    """
    n = corner_normals(pos, cells)  # [M, V, 3]
    mean = n.sum(axis=1)  # [M, 3]
    norm = np.linalg.norm(mean, axis=1, keepdims=True)  # [M, 1]
    unit = np.divide(mean, norm, out=np.zeros_like(mean), where=norm > 0)
    return np.einsum("mvk,mk->mv", n, unit).min(axis=1)


def _local_mass(pos: np.ndarray, cells: np.ndarray, name: str) -> np.ndarray:
    """``∫_K φ_v dA`` for each cell and vertex, ``[M, V]``."""
    x = pos[cells]  # [M, V, 3]
    if name == "triangle":
        area = 0.5 * np.linalg.norm(np.cross(x[:, 1] - x[:, 0], x[:, 2] - x[:, 0]), axis=1)
        return np.repeat(area[:, None] / 3, 3, axis=1)
    phi, dphi = _bilinear(_GAUSS)
    tangents = np.einsum("mvk,pvr->mprk", x, dphi)  # [M, P, 2, 3]
    element = np.linalg.norm(np.cross(tangents[:, :, 0], tangents[:, :, 1]), axis=-1)  # [M, P]
    return 0.25 * element @ phi  # [M, V]


def surface_areas(pos: np.ndarray, cells: np.ndarray, name: str) -> np.ndarray:
    """Areas ``[M]`` of surface cells (triangles, or bilinear quads by 2x2 Gauss)."""
    return _local_mass(np.asarray(pos, float), np.asarray(cells, np.int64), name).sum(axis=1)


def surface_lumped_mass(pos: np.ndarray, cells: np.ndarray, name: str) -> np.ndarray:
    """Lumped mass weights ``w_i = ∫_S φ_i dA`` of a surface mesh, ``[N]``."""
    pos, cells = np.asarray(pos, float), np.asarray(cells, np.int64)
    weight = np.zeros(len(pos))
    np.add.at(weight, cells.ravel(), _local_mass(pos, cells, name).ravel())
    return weight


def _edges(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges ``[M * V, 2]`` of the cells in their vertex order, and the owning cell."""
    m, v = cells.shape
    directed = np.stack([cells, np.roll(cells, -1, axis=1)], axis=2).reshape(m * v, 2)
    return directed, np.repeat(np.arange(m), v)


def _shared_pairs(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of cells ``(a, b)`` sharing an edge (listed for edges shared by exactly two cells),
    whether they traverse it the same way (inconsistent orientation), and the edge."""
    directed, owner = _edges(cells)
    keys = np.sort(directed, axis=1)
    order = np.lexsort(keys.T[::-1])
    keys, directed, owner = keys[order], directed[order], owner[order]
    same = (keys[1:] == keys[:-1]).all(axis=1)  # [E - 1]
    before = np.concatenate([[False], same[:-1]])
    after = np.concatenate([same[1:], [False]])
    pair = np.flatnonzero(same & ~before & ~after)  # exactly two cells on the edge
    a, b = owner[pair], owner[pair + 1]
    clash = (directed[pair] == directed[pair + 1]).all(axis=1)
    return a, b, clash, keys[pair]


def check_surface_orientation(cells: np.ndarray) -> None:
    """Refuse a surface whose neighbouring cells are oriented inconsistently: two cells that
    share an edge must traverse it in opposite directions (their normals then point to the
    same side). Edges shared by more than two cells are not checked.

    Raises:
        InvertedCellError: naming the later cell of the first clashing pair and the edge.
    """
    a, b, clash, edge = _shared_pairs(np.asarray(cells, np.int64))
    if clash.any():
        k, later, earlier = first_clash(a, b, clash)
        raise InvertedCellError(
            f"cell {later} is oriented against its neighbour cell {earlier}: "
            f"both traverse their shared edge {edge[k].tolist()} the same way, so their normals "
            "point to opposite sides of the surface; pass reorient=True to from_meshio / read_mesh "
            "to orient every connected piece of the surface consistently")


def orient_surface(cells: np.ndarray) -> np.ndarray:
    """A copy of ``cells`` with each connected piece of the surface oriented consistently.

    Each piece keeps the orientation of its lowest-numbered cell; the others are reversed where
    needed so that neighbours traverse their shared edges in opposite directions.

    Raises:
        InvertedCellError: a piece is not orientable (a Möbius strip).
    """
    cells = np.array(cells, dtype=np.int64)
    m = len(cells)
    a, b, clash, _ = _shared_pairs(cells)
    graph = coo_matrix((np.ones(2 * len(a)), (np.concatenate([a, b]), np.concatenate([b, a]))),
                       shape=(m, m)).tocsr()
    relation = coo_matrix((np.concatenate([clash, clash]).astype(float) + 1,
                           (np.concatenate([a, b]), np.concatenate([b, a]))), shape=(m, m)).tocsr()
    flip = np.zeros(m, dtype=bool)
    count, labels = connected_components(graph, directed=False)
    firsts = np.full(count, m)
    np.minimum.at(firsts, labels, np.arange(m))
    for start in firsts:
        order, parent = breadth_first_order(graph, int(start), directed=False)
        rest = order[1:]
        against = np.asarray(relation[rest, parent[rest]]).ravel() == 2  # [len(rest)]
        for c, p, x in zip(rest.tolist(), parent[rest].tolist(), against.tolist()):
            flip[c] = flip[p] ^ x
    if (flip[a] ^ flip[b] != clash).any():
        k = int(np.flatnonzero(flip[a] ^ flip[b] != clash)[0])
        raise InvertedCellError(f"the surface containing cells {int(a[k])} and {int(b[k])} is not "
                                "orientable (a Möbius strip): no vertex order makes it consistent")
    reverse = [0] + list(range(cells.shape[1] - 1, 0, -1))  # keeps vertex 0, reverses the cycle
    cells[flip] = cells[flip][:, reverse]
    return cells
