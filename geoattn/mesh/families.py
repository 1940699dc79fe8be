"""Mesh families of standard domains, for examples, tests, benchmarks and dataset generation.

Each function returns a :class:`meshio.Mesh` with positively oriented cells; feed it to
:func:`~geoattn.mesh.from_meshio` or write it with :func:`meshio.write`. A family is indexed by
a resolution ``n`` (cells per unit length), and :func:`refine` splits every cell into ``2^d``
children (red refinement: about ``2^d`` times the nodes) on the same geometry, which is the
"uniform refinement" convergence studies need even for irregular and graded meshes.

This module needs scikit-fem (``pip install 'geoattn[data]'``); :mod:`geoattn.mesh` loads it on
first use, so the rest of the package does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.spatial import Delaunay

from ..optional import require
from .cells import CELL_DIMENSIONS, orient_cells

if TYPE_CHECKING:
    import meshio

skfem = require("skfem", "data", "geoattn.mesh.families (mesh families, refinement, Darcy data)")

_SKFEM = {"line": skfem.MeshLine1, "triangle": skfem.MeshTri1, "quad": skfem.MeshQuad1,
          "tetra": skfem.MeshTet1, "hexahedron": skfem.MeshHex1}
# skfem's hexahedron vertex order differs from meshio/VTK; skfem's own converters know both.
_TO_MESHIO_HEX = [0, 3, 6, 2, 1, 5, 7, 4]


def _mesh(points: np.ndarray, cells: np.ndarray, cell_type: str) -> meshio.Mesh:
    import meshio

    points = np.asarray(points, dtype=float)
    return meshio.Mesh(points, [(cell_type, orient_cells(points, cells, cell_type))])


def from_skfem(m) -> meshio.Mesh:
    """Convert a scikit-fem mesh (``p [d, N]``, ``t [V, M]``) to a positively oriented meshio mesh."""
    for name, cls in _SKFEM.items():
        if isinstance(m, cls):
            cells = m.t.T
            if name == "hexahedron":
                cells = cells[:, _TO_MESHIO_HEX]
            return _mesh(m.p.T, cells, name)
    raise TypeError(f"unsupported scikit-fem mesh type {type(m).__name__}")


def to_skfem(mesh: meshio.Mesh):
    """Convert a single-type meshio mesh (as from this module) to a scikit-fem mesh."""
    block = mesh.cells[-1]
    cells = np.asarray(block.data)
    if block.type == "hexahedron":
        cells = cells[:, np.argsort(_TO_MESHIO_HEX)]
    dim = CELL_DIMENSIONS[block.type]
    return _SKFEM[block.type](np.ascontiguousarray(mesh.points[:, :dim].T), np.ascontiguousarray(cells.T))


def refine(mesh: meshio.Mesh, times: int = 1) -> meshio.Mesh:
    """Uniformly (red) refine a single-type mesh ``times`` times, keeping its geometry."""
    m = to_skfem(mesh)
    for _ in range(times):
        m = m.refined()
    return from_skfem(m)


def interval(n: int = 32, kind: str = "structured", seed: int = 0) -> meshio.Mesh:
    """The unit interval with ``n`` line cells: ``"structured"``, ``"irregular"`` or ``"graded"``."""
    x = _axis(n, kind, seed)
    return _mesh(x[:, None], np.stack([np.arange(n), np.arange(1, n + 1)], 1), "line")


def _axis(n: int, kind: str, seed: int) -> np.ndarray:
    x = np.linspace(0.0, 1.0, n + 1)
    if kind == "irregular":
        x[1:-1] += np.random.default_rng(seed).uniform(-0.3, 0.3, n - 1) / n
    elif kind == "graded":
        x = x**GRADING
    elif kind != "structured":
        raise ValueError(f"kind must be 'structured', 'irregular' or 'graded', got {kind!r}")
    return x


#: Exponent of the grading map ``(x, y) -> (x^p, y^p)`` of the graded families.
GRADING = 3.0


def unit_square(n: int = 16, kind: str = "structured", cell: str = "triangle",
                seed: int = 0) -> meshio.Mesh:
    """The unit square with about ``n`` cells per side.

    Args:
        n: cells per side.
        kind: ``"structured"`` (tensor grid, each square split in two), ``"irregular"`` (Delaunay
            triangulation of grid points jittered by up to 30 % of the spacing; boundary points
            move only along the boundary), or ``"graded"`` (the structured grid mapped by
            ``(x, y) -> (x^3, y^3)``: cells shrink like ``h^3`` toward the corner ``(0, 0)``).
        cell: ``"triangle"`` or ``"quad"`` (``"quad"`` with ``"structured"``/``"graded"`` only).
        seed: jitter seed of the irregular family.
    """
    if cell == "quad":
        if kind == "irregular":
            raise ValueError("the irregular family is a Delaunay triangulation: use cell='triangle'")
        x = _axis(n, kind, seed)
        return from_skfem(skfem.MeshQuad1.init_tensor(x, x))
    if cell != "triangle":
        raise ValueError(f"cell must be 'triangle' or 'quad', got {cell!r}")
    if kind != "irregular":
        x = _axis(n, kind, seed)
        return from_skfem(skfem.MeshTri1.init_tensor(x, x))
    g = np.linspace(0.0, 1.0, n + 1)
    pts = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    jitter = np.random.default_rng(seed).uniform(-0.3, 0.3, pts.shape) / n
    on_edge = (pts == 0.0) | (pts == 1.0)
    jitter[on_edge] = 0.0  # boundary nodes slide along the boundary only; corners stay
    pts = pts + jitter
    return _mesh(pts, Delaunay(pts).simplices, "triangle")


def l_shape(n: int = 8) -> meshio.Mesh:
    """The L-shaped domain ``[-1, 1]^2`` minus ``(0, 1] x [-1, 0)`` (area 3), ``n`` cells per unit."""
    x = np.linspace(-1.0, 1.0, 2 * n + 1)
    m = skfem.MeshTri1.init_tensor(x, x)
    centre = m.p[:, m.t].mean(axis=1)
    keep = ~((centre[0] > 0) & (centre[1] < 0))
    t = m.t[:, keep]
    used, t = np.unique(t, return_inverse=True)
    return _mesh(m.p[:, used].T, t.reshape(3, -1).T, "triangle")


def unit_cube(n: int = 6, cell: str = "tetra") -> meshio.Mesh:
    """The unit cube with ``n`` cells per side, ``"tetra"`` or ``"hexahedron"``."""
    x = np.linspace(0.0, 1.0, n + 1)
    cls = {"tetra": skfem.MeshTet1, "hexahedron": skfem.MeshHex1}[cell]
    return from_skfem(cls.init_tensor(x, x, x))


#: Geometry of :func:`disk_with_holes`: outer radius and ``(cx, cy, r)`` of each hole.
DISK_RADIUS = 1.0
DISK_HOLES = ((-0.4, 0.0, 0.2), (0.35, 0.3, 0.15))


def disk_with_holes(h: float = 0.1) -> meshio.Mesh:
    """The unit disk with two circular holes, meshed by gmsh with target edge length ``h``.

    Needs the ``gmsh`` Python package (``pip install geoattn[meshgen]``); the repository ships a
    pre-generated copy in ``meshes/``.
    """
    def geometry(occ):
        disk = occ.addDisk(0, 0, 0, DISK_RADIUS, DISK_RADIUS)
        occ.cut([(2, disk)], [(2, occ.addDisk(cx, cy, 0, r, r)) for cx, cy, r in DISK_HOLES])

    return _gmsh_triangles("disk_with_holes", geometry, h, h_min=h)


def square_with_holes(holes, h: float = 0.1) -> meshio.Mesh:
    """The unit square without the discs ``holes`` (``(cx, cy, r)`` each), meshed by gmsh with
    edge lengths up to ``h``. Needs the ``gmsh`` Python package (``pip install geoattn[meshgen]``).
    """
    def geometry(occ):
        square = occ.addRectangle(0, 0, 0, 1, 1)
        occ.cut([(2, square)], [(2, occ.addDisk(cx, cy, 0, r, r)) for cx, cy, r in holes])

    return _gmsh_triangles("square_with_holes", geometry, h)


def _gmsh_triangles(name: str, geometry, h: float, h_min: float | None = None) -> meshio.Mesh:
    """The triangle mesh gmsh makes of the plane surface ``geometry(occ)`` builds (OpenCASCADE),
    edge lengths up to ``h`` (and at least ``h_min``), unused nodes dropped, cells oriented."""
    gmsh = require("gmsh", "meshgen", name)
    gmsh.initialize(["-noenv"])
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.add(name)
        geometry(gmsh.model.occ)
        gmsh.model.occ.synchronize()
        gmsh.model.addPhysicalGroup(2, [t for _, t in gmsh.model.getEntities(2)], 1)
        gmsh.option.setNumber("Mesh.CharacteristicLengthMax", h)
        if h_min is not None:
            gmsh.option.setNumber("Mesh.CharacteristicLengthMin", h_min)
        gmsh.model.mesh.generate(2)
        tags, coords, _ = gmsh.model.mesh.getNodes()
        types, _, node_tags = gmsh.model.mesh.getElements(2)
        tri = np.asarray(node_tags[list(types).index(2)], dtype=np.int64).reshape(-1, 3)
    finally:
        gmsh.finalize()
    order = np.argsort(tags)
    tri = order[np.searchsorted(tags, tri, sorter=order)]  # gmsh node tags -> row indices
    used, tri = np.unique(tri, return_inverse=True)
    return _mesh(np.asarray(coords).reshape(-1, 3)[used, :2], tri.reshape(-1, 3), "triangle")


def icosphere(level: int = 2, radius: float = 1.0) -> meshio.Mesh:
    """A triangulated sphere in 3-D (a surface mesh): the icosahedron, each triangle split into
    four ``level`` times, with the new vertices pushed out onto the sphere.

    ``10 * 4**level + 2`` nodes, ``20 * 4**level`` triangles, all oriented with outward normals;
    the mesh size halves with each level, so lumped quadrature on it converges to the sphere's
    integrals at second order.
    """
    import meshio

    t = (1 + 5**0.5) / 2
    points = np.array([[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t],
                       [0, -1, -t], [0, 1, -t], [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]],
                      dtype=float)
    cells = np.array([[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9],
                      [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2],
                      [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5], [2, 4, 11], [6, 2, 10],
                      [8, 6, 7], [9, 8, 1]])
    for _ in range(level):
        edges = np.sort(cells[:, [[0, 1], [1, 2], [2, 0]]].reshape(-1, 2), axis=1)  # [3M, 2]
        unique, inverse = np.unique(edges, axis=0, return_inverse=True)
        mid = len(points) + inverse.reshape(-1, 3)  # [M, 3]: midpoints of edges 01, 12, 20
        points = np.concatenate([points, points[unique].mean(axis=1)])
        a, b, c = cells.T
        ab, bc, ca = mid.T
        cells = np.concatenate([np.stack(s, axis=1) for s in
                                ((a, ab, ca), (ab, b, bc), (ca, bc, c), (ab, bc, ca))])
        points = points / np.linalg.norm(points, axis=1, keepdims=True)
    points = radius * points / np.linalg.norm(points, axis=1, keepdims=True)
    return meshio.Mesh(points, [("triangle", cells)])
