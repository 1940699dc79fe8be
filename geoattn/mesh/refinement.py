"""Local refinement of a triangle mesh to a largest edge, with the P1 prolongation of nodal values.

A model trained on one mesh learns features that vary on that mesh's scale, and its integrals
(attention sums, spectral transforms) are quadratures over the nodes. On a mesh with cells much
larger than the training mesh's somewhere (the coarse corner of a graded mesh), those quadratures
alias the features, and the output moves, although every node's input is exact. Evaluating the
model on the mesh refined where it is coarser than the training mesh, with the input carried to the
new nodes by linear interpolation (no new data), and reading the output at the original nodes,
integrates the same features as on the training mesh. This is what FNO run through a fixed grid
does implicitly. ``benchmarks/darcy_compare.py --resolve-quadrature`` measures it.

:func:`refine_to` bisects the marked triangles (scikit-fem's red-green-blue refinement) until no
edge is longer than the size asked; new nodes are edge midpoints, appended after the original
nodes, so a nodal field of the refined mesh restricted to its first ``N`` rows lives on the
original nodes.
"""

from __future__ import annotations

import os

import meshio
import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree

from ..errors import ConfigError, TooLargeError, UnsupportedCellError


#: relative slack on ``size``: the halves of an edge may come out a rounding error longer than
#: half, and coordinates carried in float32 (as samples carry them) move edge lengths by about 1e-7
_ROUNDING = 1e-6


def longest_edges(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Length of the longest edge of every triangle ``[T]``."""
    p = np.asarray(points)[np.asarray(triangles)]  # [T, 3, d]
    edges = p - np.roll(p, 1, axis=1)
    return np.linalg.norm(edges, axis=-1).max(axis=1)


def _midpoint_prolongation(old, new) -> sp.csr_matrix:
    """``[N_new, N_old]``: identity on the old nodes, the mean of its edge's ends on each new one."""
    n_old, n_new = old.p.shape[1], new.p.shape[1]
    edges = old.facets  # [2, E]
    dist, which = cKDTree(old.p[:, edges].mean(axis=1).T).query(new.p[:, n_old:].T)
    scale = float(np.ptp(old.p, axis=1).max()) or 1.0
    if len(dist) and dist.max() > 1e-9 * scale:
        raise RuntimeError("a refined node is not the midpoint of an edge of the coarser mesh")
    rows = np.concatenate([np.arange(n_old), np.repeat(np.arange(n_old, n_new), 2)])
    cols = np.concatenate([np.arange(n_old), edges[:, which].T.reshape(-1)])
    vals = np.concatenate([np.ones(n_old), np.full(2 * (n_new - n_old), 0.5)])
    return sp.csr_matrix((vals, (rows, cols)), shape=(n_new, n_old))


def refine_to(mesh: meshio.Mesh, size: float, max_rounds: int = 12) -> tuple[meshio.Mesh, sp.csr_matrix]:
    """Refine the triangles of ``mesh`` with an edge longer than ``size`` until none is left
    (edges within a relative 1e-9 of ``size`` count as not longer: the halves of a mesh's edges
    pass ``size = longest / 2``).

    Args:
        mesh: a triangle mesh (its last cell block; boundary lines before it are ignored).
        size: the longest edge allowed (``> 0``), e.g. the longest edge of the training mesh
            (:func:`longest_edges` ``.max()``).
        max_rounds: refinement rounds at most (each halves the marked edges).

    Returns:
        ``(refined, P)``: the refined mesh, whose first ``N`` nodes are ``mesh``'s nodes in their
        order, and the sparse prolongation ``P [N_refined, N]`` of nodal values by linear
        interpolation (``P @ u`` is exact for linear ``u``). ``mesh`` fine enough already gives
        an equal mesh and the identity.

    Raises:
        ConfigError: ``size`` not positive, or not reached in ``max_rounds`` rounds.
        UnsupportedCellError: cells other than triangles.
        MissingDependencyError: scikit-fem (the ``data`` extra) is not installed.
    """
    from .families import from_skfem, to_skfem  # scikit-fem, imported when used
    if not size > 0:
        raise ConfigError(f"size must be positive, got {size}")
    if not mesh.cells or mesh.cells[-1].type != "triangle":
        found = sorted({block.type for block in mesh.cells})
        raise UnsupportedCellError(f"refine_to needs a triangle mesh, got cells {found}")
    current = to_skfem(mesh)
    nodes = refined_size(current.p.T, current.t.T, size)
    available = _available_memory()
    if available is not None and nodes * _BYTES_PER_NODE > available:
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
#: an upper estimate in bytes
_BYTES_PER_NODE = 2000


def refined_size(points: np.ndarray, triangles: np.ndarray, size: float) -> int:
    """About how many nodes :func:`refine_to` gives: a triangle whose longest edge ``L`` exceeds
    ``size`` is split about ``4 ** ceil(log2(L / size))`` times, and a triangle mesh has about
    half as many nodes as triangles."""
    ratio = longest_edges(points, triangles) / size
    with np.errstate(over="ignore"):
        rounds = np.ceil(np.log2(np.maximum(ratio / (1 + _ROUNDING), 1.0)))
        count = float(np.sum(4.0**rounds))
    return int(min(len(points) + count / 2, 2.0**62))


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
