"""Local refinement of a triangle or tetrahedral mesh to a largest edge, with the P1 prolongation
of nodal values.

A model trained on one mesh learns features that vary on that mesh's scale, and its integrals
(attention sums, spectral transforms) are quadratures over the nodes. On a mesh with cells much
larger than the training mesh's somewhere (the coarse corner of a graded mesh), those quadratures
alias the features, and the output moves, although every node's input is exact. Evaluating the
model on the mesh refined where it is coarser than the training mesh, with the input carried to the
new nodes by linear interpolation (no new data), and reading the output at the original nodes,
integrates the same features as on the training mesh. This is what FNO run through a fixed grid
does implicitly. ``benchmarks/darcy_compare.py --resolve-quadrature`` measures it.

:func:`refine_to` refines the marked cells until no edge is longer than the size asked: triangles
by scikit-fem's red-green-blue refinement, tetrahedra by its longest-edge bisection (a tetrahedron
halves all its edges in about three rounds, into about eight children). New nodes are edge
midpoints, appended after the original nodes, so a nodal field of the refined mesh restricted to
its first ``N`` rows lives on the original nodes.
"""

from __future__ import annotations

import itertools
import os

import meshio
import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree

from ..errors import ConfigError, TooLargeError, UnsupportedCellError


#: relative slack on ``size``: the halves of an edge may come out a rounding error longer than
#: half, and coordinates carried in float32 (as samples carry them) move edge lengths by about 1e-7
_ROUNDING = 1e-6


#: the simplices refined, by meshio cell type: the number of vertices and the spatial dimension
SIMPLICES = {"triangle": (3, 2), "tetra": (4, 3)}
#: what the refusals name
ACCEPTED = "triangles (cells [T, 3] in 2-D) or tetrahedra (cells [T, 4] in 3-D)"


def simplex_type(dim: int, cells, who: str) -> str:
    """The meshio name (``"triangle"``, ``"tetra"``) of ``cells [T, k]`` in ``dim`` dimensions;
    :class:`~geoattn.errors.UnsupportedCellError` naming ``who`` and what it accepts for no cells
    or any other cells."""
    corners = None if cells is None else cells.shape[1]
    name = next((name for name, shape in SIMPLICES.items() if shape == (corners, dim)), None)
    if name is None:
        got = "no cells" if corners is None else f"{dim}-D cells of {corners} nodes"
        raise UnsupportedCellError(f"{who} needs {ACCEPTED}, got {got}")
    return name


def meshio_simplex_type(mesh: meshio.Mesh, who: str) -> str:
    """:func:`simplex_type` of a meshio mesh's last cell block: triangles whose nodes leave the
    plane ``z = 0`` (a surface) are refused too."""
    block = mesh.cells[-1] if mesh.cells else None
    if block is None or block.type not in SIMPLICES:
        found = sorted({b.type for b in mesh.cells}) if mesh.cells else "none"
        raise UnsupportedCellError(f"{who} needs {ACCEPTED}, got cells {found}")
    dim = SIMPLICES[block.type][1]
    if np.any(np.asarray(mesh.points)[:, dim:] != 0):
        raise UnsupportedCellError(f"{who} needs {ACCEPTED}, got {block.type} cells on a surface "
                                   f"(nodes off the plane z = 0)")
    return block.type


def longest_edges(points: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Length of the longest edge of every simplex ``[T]``: the 3 edges of a triangle
    (``cells [T, 3]``), the 6 of a tetrahedron (``cells [T, 4]``)."""
    p = np.asarray(points)[np.asarray(cells)]  # [T, k, d]
    pairs = np.array(list(itertools.combinations(range(p.shape[1]), 2)))  # [k(k-1)/2, 2]
    edges = p[:, pairs[:, 0]] - p[:, pairs[:, 1]]  # [T, E, d]
    return np.linalg.norm(edges, axis=-1).max(axis=1)


def _midpoint_prolongation(old, new) -> sp.csr_matrix:
    """``[N_new, N_old]``: identity on the old nodes, and on each new node the coarser mesh's
    linear interpolant there: the mean of its edge's ends for the midpoint of an edge of ``old``
    (every new node of a triangle refinement); a tetrahedron bisected twice in one round of
    scikit-fem's closure may also get the midpoint of an edge made in that round, which lies in
    one coarser cell and takes its barycentric coordinates there."""
    n_old, n_new = old.p.shape[1], new.p.shape[1]
    if n_new < n_old or not np.array_equal(new.p[:, :n_old], old.p):
        raise RuntimeError("the refined mesh does not keep the coarser mesh's nodes first, in order")
    edges = old.edges if old.p.shape[0] == 3 else old.facets  # [2, E]: in 2-D the facets are the edges
    dist, which = cKDTree(old.p[:, edges].mean(axis=1).T).query(new.p[:, n_old:].T)
    scale = float(np.ptp(old.p, axis=1).max()) or 1.0
    on_edge = dist <= 1e-9 * scale
    nodes = n_old + np.flatnonzero(on_edge)
    rows = np.concatenate([np.arange(n_old), np.repeat(nodes, 2)])
    cols = np.concatenate([np.arange(n_old), edges[:, which[on_edge]].T.reshape(-1)])
    vals = np.concatenate([np.ones(n_old), np.full(2 * len(nodes), 0.5)])
    inner = n_old + np.flatnonzero(~on_edge)
    cells, coords = _locate(old.p.T, old.t.T, new.p[:, inner].T, 1e-9)
    rows = np.concatenate([rows, np.repeat(inner, coords.shape[1])])
    cols = np.concatenate([cols, cells.reshape(-1)])
    vals = np.concatenate([vals, coords.reshape(-1)])
    keep = vals != 0
    return sp.csr_matrix((vals[keep], (rows[keep], cols[keep])), shape=(n_new, n_old))


def _locate(points: np.ndarray, cells: np.ndarray, query: np.ndarray, tol: float):
    """The vertices ``[M, k]`` of a simplex of ``cells`` holding each ``query`` point and the
    point's barycentric coordinates ``[M, k]`` in it (those below ``tol`` set to 0).

    A simplex holding a point has its centroid within its own largest centroid-to-vertex
    distance of it, so the candidates are the cells with a centroid that close; of those, the one
    whose smallest coordinate is largest. Meant for few points (each checks every candidate)."""
    if len(query) == 0:
        return np.zeros((0, cells.shape[1]), dtype=np.int64), np.zeros((0, cells.shape[1]))
    corners = points[cells]  # [T, k, d]
    centroids = corners.mean(axis=1)
    reach = float(np.linalg.norm(corners - centroids[:, None], axis=-1).max())
    found, coords = [], []
    for point, near in zip(query, cKDTree(centroids).query_ball_point(query, reach * (1 + 1e-9))):
        c = corners[near]  # [C, k, d]
        # solve for the coordinates of all but the first vertex: [C, d, d] @ [C, d] = [C, d]
        lam = np.linalg.solve(np.swapaxes(c[:, 1:] - c[:, :1], 1, 2), (point - c[:, 0])[..., None])[..., 0]
        lam = np.concatenate([1 - lam.sum(axis=1, keepdims=True), lam], axis=1)  # [C, k]
        best = int(np.argmax(lam.min(axis=1)))
        if lam[best].min() < -tol:
            raise RuntimeError("a refined node lies outside the coarser mesh")
        found.append(cells[near[best]])
        coords.append(np.where(lam[best] < tol, 0.0, lam[best]) / lam[best][lam[best] >= tol].sum())
    return np.array(found), np.array(coords)


def refine_to(mesh: meshio.Mesh, size: float, max_rounds: int | None = None) -> tuple[meshio.Mesh, sp.csr_matrix]:
    """Refine the triangles or tetrahedra of ``mesh`` with an edge longer than ``size`` until none
    is left (edges within a relative 1e-6 of ``size`` count as not longer: the halves of a mesh's
    edges pass ``size = longest / 2``).

    Args:
        mesh: a triangle mesh in 2-D or a tetrahedral mesh in 3-D (its last cell block; boundary
            cells before it are ignored).
        size: the longest edge allowed (``> 0``), e.g. the longest edge of the training mesh
            (:func:`longest_edges` ``.max()``).
        max_rounds: refinement rounds at most; a round halves every edge of a marked triangle, and
            the longest edge of a marked tetrahedron (default: 12 for triangles, 36 for
            tetrahedra, about twelve halvings of every edge).

    Returns:
        ``(refined, P)``: the refined mesh, whose first ``N`` nodes are ``mesh``'s nodes in their
        order, and the sparse prolongation ``P [N_refined, N]`` of nodal values by linear
        interpolation (``P @ u`` is exact for linear ``u``). ``mesh`` fine enough already gives
        an equal mesh and the identity.

    Raises:
        ConfigError: ``size`` not positive, or not reached in ``max_rounds`` rounds.
        UnsupportedCellError: cells other than triangles or tetrahedra (quads, hexahedra, lines).
        TooLargeError: the refined mesh would not fit in the memory available
            (:func:`refined_size`).
        MissingDependencyError: scikit-fem (the ``data`` extra) is not installed.
    """
    from .families import from_skfem, to_skfem  # scikit-fem, imported when used
    if not size > 0:
        raise ConfigError(f"size must be positive, got {size}")
    cell_type = meshio_simplex_type(mesh, "refine_to")
    if max_rounds is None:
        max_rounds = 12 if cell_type == "triangle" else 36
    current = to_skfem(mesh)
    nodes = refined_size(current.p.T, current.t.T, size)
    available = _available_memory()
    if available is not None and nodes * _BYTES_PER_NODE[cell_type] > available:
        raise TooLargeError(_too_large(nodes, size, available))
    prolongation = sp.identity(current.p.shape[1], format="csr")
    try:
        for _ in range(max_rounds):
            marked = np.flatnonzero(longest_edges(current.p.T, current.t.T) > size * (1 + _ROUNDING))
            if len(marked) == 0:
                return from_skfem(current), prolongation
            finer = current.refined(marked)
            prolongation = (_midpoint_prolongation(current, finer) @ prolongation).tocsr()
            current = finer
    except MemoryError as err:
        raise TooLargeError(_too_large(nodes, size, available)) from err
    raise ConfigError(f"cells longer than {size} remain after {max_rounds} rounds of refinement")


#: memory a refined node costs while refining (skfem's arrays, the prolongation, its products),
#: an upper estimate in bytes; a tetrahedral mesh has about three times as many cells per node,
#: each with twice the edges (``benchmarks/refinement_3d.py`` measures it)
_BYTES_PER_NODE = {"triangle": 2000, "tetra": 6000}


def refined_size(points: np.ndarray, cells: np.ndarray, size: float) -> int:
    """About how many nodes :func:`refine_to` gives, for triangles (``cells [T, 3]``) or
    tetrahedra (``cells [T, 4]``).

    The rule: halving every edge of a simplex makes ``2 ** d`` children (4 triangles, 8
    tetrahedra), so a cell whose longest edge ``L`` exceeds ``size`` becomes about
    ``(2 ** d) ** ceil(log2(L / size))`` cells; a triangle mesh has about half as many nodes as
    triangles, and a tetrahedral mesh about a fifth as many nodes as tetrahedra (six tetrahedra
    per node in the limit of uniform refinement; a fifth errs towards more nodes)."""
    cells = np.asarray(cells)
    children, cells_per_node = (4.0, 2.0) if cells.shape[1] == 3 else (8.0, 5.0)
    ratio = longest_edges(points, cells) / size
    with np.errstate(over="ignore"):
        rounds = np.ceil(np.log2(np.maximum(ratio / (1 + _ROUNDING), 1.0)))
        count = float(np.sum(children**rounds))
    return int(min(len(points) + count / cells_per_node, 2.0**62))


def _available_memory() -> int | None:
    """The physical memory available now, in bytes (``None`` where the system does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not Linux
        return None


def _too_large(nodes: int, size: float, available: int | None) -> str:
    have = f" ({available / 2**30:.3g} GiB available)" if available is not None else ""
    return (f"refining to edges of at most {size:.3g} would give about {nodes:.3g} nodes, which do "
            f"not fit in memory{have}; refine to a larger size or a part of the mesh")
