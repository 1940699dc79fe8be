"""Cell types and cell geometry: volumes, orientation, and lumped (vertex) mass.

Supported cell types use meshio's names and vertex orderings:

- ``line``: 1-D, 2 vertices, the segment ``[0, 1]``;
- ``triangle``: 2-D, 3 vertices, counter-clockwise;
- ``quad``: 2-D, 4 vertices, ``[0, 1]^2`` counter-clockwise (bilinear Q1 map);
- ``tetra``: 3-D, 4 vertices, positive orientation;
- ``hexahedron``: 3-D, 8 vertices, ``[0, 1]^3`` in VTK order, bottom face then top (trilinear).

The lumped mass weight of node ``i`` is :math:`w_i = \\int_D \\varphi_i\\,dx`, the integral of its
P1/Q1 hat function. Because the element maps are isoparametric, :math:`\\sum_i \\varphi_i = 1`
and :math:`\\sum_i x_i \\varphi_i = x`, so :math:`\\sum_i w_i f(x_i) = \\int_D f\\,dx` *exactly*
for every affine ``f``; for smooth ``f`` the error is :math:`O(h^2)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from ..errors import UnsupportedCellError


@dataclass(frozen=True)
class CellType:
    """Static description of a supported cell type."""

    name: str
    dim: int
    num_vertices: int
    simplex: bool


#: Topological dimension of every meshio cell type a mesh file may hold. Only the types in
#: :data:`CELL_TYPES` are supported; the others are known so that a reader can tell a mesh's
#: top-dimensional cells from its boundary blocks, and name what it cannot read.
CELL_DIMENSIONS: dict[str, int] = {
    "vertex": 0, "line": 1, "line3": 1, "triangle": 2, "triangle6": 2, "triangle7": 2,
    "quad": 2, "quad8": 2, "quad9": 2, "polygon": 2, "tetra": 3, "tetra10": 3, "hexahedron": 3,
    "hexahedron20": 3, "hexahedron27": 3, "wedge": 3, "wedge15": 3, "pyramid": 3, "pyramid13": 3,
}

#: The supported cell types, by meshio name.
CELL_TYPES: dict[str, CellType] = {
    name: CellType(name, CELL_DIMENSIONS[name], num_vertices, simplex)
    for name, num_vertices, simplex in (
        ("line", 2, True),
        ("triangle", 3, True),
        ("quad", 4, False),
        ("tetra", 4, True),
        ("hexahedron", 8, False),
    )
}

# Reference vertices of the tensor-product cells on [0, 1]^d, in meshio/VTK order.
_TENSOR_VERTICES = {
    "quad": np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=float),
    "hexahedron": np.array(
        [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]],
        dtype=float,
    ),
}


def cell_type(name: str) -> CellType:
    """Look up a supported cell type by its meshio name, or raise :class:`UnsupportedCellError`."""
    try:
        return CELL_TYPES[name]
    except KeyError:
        raise UnsupportedCellError(
            f"unsupported cell type {name!r}; supported types are {sorted(CELL_TYPES)}"
        ) from None


def _gauss_tensor(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Two-point Gauss rule per axis on ``[0, 1]^dim`` (exact for degree 3 in each variable)."""
    g = 0.5 - 0.5 / np.sqrt(3.0), 0.5 + 0.5 / np.sqrt(3.0)
    points = np.array(list(product(g, repeat=dim)))
    return points, np.full(len(points), 0.5**dim)


def _tensor_shape(name: str, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q1 shape functions and their reference gradients at points ``xi [P, d]``.

    Returns ``phi [P, V]`` and ``dphi [P, V, d]``.
    """
    ref = _TENSOR_VERTICES[name]  # (V, d)
    factors = ref[None] * xi[:, None] + (1 - ref[None]) * (1 - xi[:, None])  # (P, V, d)
    phi = factors.prod(-1)
    dphi = np.empty_like(factors)
    for k in range(ref.shape[1]):
        others = np.delete(factors, k, axis=-1).prod(-1)
        dphi[..., k] = others * (2 * ref[None, :, k] - 1)
    return phi, dphi


def _tensor_jacobians(pos: np.ndarray, cells: np.ndarray, name: str, xi: np.ndarray):
    """Jacobian determinants ``[M, P]`` and shape functions of a Q1 map at reference points."""
    phi, dphi = _tensor_shape(name, xi)
    x = pos[cells]  # (M, V, d)
    jac = np.einsum("mvi,pvk->mpik", x, dphi)  # (M, P, d, d)
    return np.linalg.det(jac), phi


def signed_volumes(pos: np.ndarray, cells: np.ndarray, name: str) -> np.ndarray:
    """Signed cell volumes ``[M]`` (length, area or volume).

    For simplices this is the signed measure (negative for a reversed orientation); for quads and
    hexahedra it is :math:`\\int_{\\hat K} \\det J`, which is negative for a reversed cell.
    Lines are signed only in 1-D.
    """
    pos = np.asarray(pos, dtype=float)
    cells = np.asarray(cells, dtype=np.int64)
    ct = cell_type(name)
    if name in _TENSOR_VERTICES:
        xi, gw = _gauss_tensor(ct.dim)
        det, _ = _tensor_jacobians(pos, cells, name, xi)
        return det @ gw
    x = pos[cells]  # (M, V, d)
    edges = x[:, 1:] - x[:, :1]  # (M, dim, d)
    if name == "line" and pos.shape[1] != 1:
        return np.linalg.norm(edges[:, 0], axis=-1)
    return np.linalg.det(edges) / {1: 1.0, 2: 2.0, 3: 6.0}[ct.dim]


def min_corner_jacobians(pos: np.ndarray, cells: np.ndarray, name: str) -> np.ndarray:
    """Smallest Jacobian determinant at the vertices of each cell ``[M]``.

    A simplex has a constant Jacobian (its signed volume times ``dim!``); a quad or hexahedron is
    valid (convex, not inverted) only where the determinant is positive at every vertex.
    """
    if name not in _TENSOR_VERTICES:
        ct = cell_type(name)
        return signed_volumes(pos, cells, name) * {1: 1.0, 2: 2.0, 3: 6.0}[ct.dim]
    det, _ = _tensor_jacobians(np.asarray(pos, float), np.asarray(cells, np.int64), name,
                               _TENSOR_VERTICES[name])
    return det.min(axis=1)


def lumped_mass(pos: np.ndarray, cells: np.ndarray, name: str) -> np.ndarray:
    """Lumped mass (vertex) weights ``w_i = ∫ φ_i dx`` of a single-type mesh, ``[N]``.

    Simplices give each vertex ``|K| / (dim + 1)``; quads and hexahedra integrate the Q1 hat
    functions against ``det J`` with a 2-point Gauss rule per axis, which is exact because the
    integrand has degree at most 3 in each reference variable.
    """
    pos = np.asarray(pos, dtype=float)
    cells = np.asarray(cells, dtype=np.int64)
    ct = cell_type(name)
    if name in _TENSOR_VERTICES:
        xi, gw = _gauss_tensor(ct.dim)
        det, phi = _tensor_jacobians(pos, cells, name, xi)
        local = np.einsum("mp,p,pv->mv", det, gw, phi)  # (M, V)
    else:
        vol = np.abs(signed_volumes(pos, cells, name))
        local = np.repeat(vol[:, None] / ct.num_vertices, ct.num_vertices, axis=1)
    weight = np.zeros(len(pos))
    np.add.at(weight, cells.ravel(), local.ravel())
    return weight


# Vertex permutations that reverse a cell's orientation.
_FLIP = {
    "triangle": [0, 2, 1],
    "quad": [0, 3, 2, 1],
    "tetra": [0, 2, 1, 3],
    "hexahedron": [0, 3, 2, 1, 4, 7, 6, 5],
}


def orient_cells(pos: np.ndarray, cells: np.ndarray, name: str) -> np.ndarray:
    """A copy of ``cells`` with every negatively oriented cell's vertex order reversed.

    Lines are returned unchanged (1-D segments carry no orientation). Non-convex quads and
    hexahedra stay invalid: reversing cannot make every corner Jacobian positive.
    """
    cells = np.array(cells, dtype=np.int64)
    if name in _FLIP:
        bad = min_corner_jacobians(pos, cells, name) < 0
        cells[bad] = cells[bad][:, _FLIP[name]]
    return cells


def first_clash(a: np.ndarray, b: np.ndarray, bad: np.ndarray) -> tuple[int, int, int]:
    """Of the cell pairs ``(a[k], b[k])`` flagged ``bad`` (at least one), the one whose later cell
    comes first: ``(k, later cell, earlier cell)``, so that an error names the cell that a reader
    walking the cells in order meets as the first conflicting one."""
    later = np.maximum(a, b)
    k = int(np.flatnonzero(bad)[np.argmin(later[bad])])
    return k, int(later[k]), int(min(a[k], b[k]))
