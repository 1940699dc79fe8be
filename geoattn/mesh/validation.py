"""Validation of meshes, point clouds, fields and quadrature weights.

Each check raises a specific :class:`~geoattn.errors.MeshError` subclass whose message names the
problem and the first offending index. Checks run in a fixed order (emptiness, finiteness, cell
type, dimension, index range, repeated cells, degeneracy, orientation, duplicate nodes, cells
overlapping through a facet, unused nodes), so one input with several defects always reports the
same one first. Geometry is computed in float64 on the nodes centred and scaled to unit size
(:func:`unit_frame`), so a mesh far from the origin or in tiny or huge units validates as the
same mesh at the origin in unit size.

The checks are vectorised and cheap: :func:`validate_weights` is ``O(N)`` in torch on the
weights' own device (the model wrapper runs it on every call), :func:`validate_cells` is one sort
of the cells, and :func:`validate_sample` with ``check_mesh=False`` (what the trainer runs on every
sample) skips only the geometric checks of the mesh (cell volumes, coincident nodes).
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Iterator

import numpy as np
import torch
from scipy.spatial import cKDTree

from ..errors import (
    CellIndexError,
    CoordinateRangeError,
    DegenerateCellError,
    DimensionError,
    DuplicateCellError,
    DuplicateNodeError,
    EmptyMeshError,
    FieldLengthError,
    GeoattnError,
    InvertedCellError,
    NonFiniteError,
    OverlappingCellsError,
    UnusedNodeError,
    UnusedNodeWarning,
    WeightError,
)
from .cells import CELL_TYPES, CellType, cell_type, first_clash, min_corner_jacobians
from .surface import check_surface_orientation, is_surface, min_corner_areas

log = logging.getLogger(__name__)

#: Cells whose volume is below this fraction of ``h^dim`` (``h`` = bounding-box diagonal divided
#: by ``N^(1/dim)``, a typical spacing) count as degenerate.
DEGENERATE_TOL = 1e-10
#: Nodes closer than this fraction of the bounding-box diagonal count as duplicates.
DUPLICATE_TOL = 1e-12
#: The supported cell type of cells that carry no name, by (spatial dimension, vertices per cell).
_CELL_TYPE_BY_SHAPE = {(ct.dim, ct.num_vertices): ct for ct in CELL_TYPES.values()}


def _as_numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def _first(mask) -> int:
    return int(np.flatnonzero(_as_numpy(mask))[0])


@contextlib.contextmanager
def located(where: str) -> Iterator[None]:
    """Prefix the message of any :class:`~geoattn.errors.GeoattnError` raised inside with
    ``where`` (``"training sample 3"``, a file name), keeping its type and chaining the original.
    """
    try:
        yield
    except GeoattnError as err:
        raise type(err)(f"{where}: {err}") from err


def validate_points(pos) -> np.ndarray:
    """Check a point array ``[N, d]``: non-empty, 2-D shaped, ``1 <= d <= 3``, finite.

    Returns the points as a float64 numpy array.
    """
    pos = _as_numpy(pos)
    if pos.ndim != 2:
        raise DimensionError(f"positions must have shape [N, d], got shape {tuple(pos.shape)}")
    if pos.shape[0] == 0:
        raise EmptyMeshError("the mesh has no nodes")
    if not 1 <= pos.shape[1] <= 3:
        raise DimensionError(f"positions must have 1 to 3 columns, got {pos.shape[1]}")
    pos = pos.astype(np.float64, copy=False)
    bad = ~np.isfinite(pos).all(axis=1)
    if bad.any():
        i = _first(bad)
        raise NonFiniteError(f"node {i} has a non-finite coordinate {pos[i].tolist()}")
    return pos


def unit_frame(pos: np.ndarray) -> tuple[np.ndarray, float]:
    """The centre ``[d]`` of the bounding box of ``pos [N, d]`` and its largest side, in float64:
    ``(pos - centre) / scale`` lies in ``[-1/2, 1/2]^d``, so the geometry (differences of nearby
    coordinates, cell volumes) is computed without the cancellation that coordinates far from
    the origin cause (``scale`` is ``1`` for a single point).

    Raises:
        CoordinateRangeError: the coordinates are so large that their extent overflows float64,
            or its ``d``-th power (a volume) does.
    """
    low, high = pos.min(axis=0), pos.max(axis=0)
    with np.errstate(over="ignore", invalid="ignore"):
        side = float((high - low).max())
        measure = float(np.float64(side) ** pos.shape[1])
    if not math.isfinite(measure):
        big = float(np.abs(pos).max())
        raise CoordinateRangeError(
            f"coordinates reach {big:.3g}: the mesh's extent or volume ({pos.shape[1]}-D) overflows "
            "float64, so no weight can be computed; the coordinates are too large, rescale them "
            "(e.g. to kilometres, or pass scale= to from_meshio / read_mesh)")
    return (low + high) / 2, (side if side > 0 else 1.0)


def validate_cells(cells, num_nodes: int, cell_type_name: str | None = None, *,
                   dim: int | None = None) -> CellType:
    """Check cell connectivity: the shape its cell type needs, integer node indices in
    ``[0, num_nodes)``, and no cell listed twice (the same vertex set, in any order, which would
    count its mass twice in every weight and integral).

    Args:
        cells: node indices ``[M, V]``.
        num_nodes: number of nodes ``N``.
        cell_type_name: meshio cell type name (default ``None``: inferred from ``V`` and ``dim``).
        dim: spatial dimension of the nodes, checked against the cell type's (default ``None``:
            not checked).

    Returns:
        The :class:`~geoattn.mesh.cells.CellType` of the cells.

    Raises:
        DimensionError: wrong shape, or cells of another dimension than the nodes.
        EmptyMeshError: no cells.
        CellIndexError: non-integer indices, or an index outside ``[0, num_nodes)``.
        DuplicateCellError: a cell repeats an earlier one (both indices named).
    """
    cells = _as_numpy(cells)
    if cell_type_name is None:
        shape = (dim, cells.shape[1] if cells.ndim == 2 else None)
        if shape not in _CELL_TYPE_BY_SHAPE:
            raise DimensionError(
                f"cells of shape {tuple(cells.shape)} on {dim}-D nodes are no supported cell type "
                f"({', '.join(f'{ct.name}: [M, {ct.num_vertices}] in {ct.dim}-D' for ct in CELL_TYPES.values())})"
            )
        ct = _CELL_TYPE_BY_SHAPE[shape]
    else:
        ct = cell_type(cell_type_name)
    if cells.ndim != 2 or cells.shape[1] != ct.num_vertices:
        raise DimensionError(
            f"{ct.name} cells must have shape [M, {ct.num_vertices}], got {tuple(cells.shape)}"
        )
    if cells.shape[0] == 0:
        raise EmptyMeshError(f"the mesh has no {ct.name} cells")
    if dim is not None and ct.dim != dim and not is_surface(ct.name, dim):
        raise DimensionError(
            f"{ct.name} cells are {ct.dim}-D but the nodes are {dim}-D; geoattn supports meshes "
            "whose cells fill their space and surfaces of triangles or quads in 3-D (no curves "
            "in 2-D or 3-D)"
        )
    if not np.issubdtype(cells.dtype, np.integer):
        raise CellIndexError(f"cell indices must be integers, got dtype {cells.dtype}")
    bad = ((cells < 0) | (cells >= num_nodes)).any(axis=1)
    if bad.any():
        i = _first(bad)
        raise CellIndexError(
            f"cell {i} refers to node indices {cells[i].tolist()} outside [0, {num_nodes})"
        )
    vertex_sets = np.sort(cells, axis=1)  # [M, V]
    order = np.lexsort(vertex_sets.T[::-1])  # stable: equal sets keep their cell order
    repeats = (vertex_sets[order[1:]] == vertex_sets[order[:-1]]).all(axis=1)  # [M - 1]
    if repeats.any():
        j = int(order[1:][repeats].min())
        i = _first((vertex_sets == vertex_sets[j]).all(axis=1))
        raise DuplicateCellError(
            f"cell {j} (nodes {cells[j].tolist()}) repeats cell {i} (nodes {cells[i].tolist()}): "
            "a cell listed twice counts its mass twice; remove the repeat"
        )
    return ct


def validate_mesh(pos, cells=None, cell_type_name: str | None = None, *, unused: str = "warn",
                  duplicates: bool = True) -> None:
    """Validate a single-cell-type mesh (or, with ``cells=None``, a point cloud).

    Args:
        pos: node coordinates ``[N, d]``.
        cells: cell connectivity ``[M, V]`` (node indices), or ``None`` for a point cloud.
        cell_type_name: meshio cell type name (``"line"``, ``"triangle"``, ``"quad"``,
            ``"tetra"``, ``"hexahedron"``); default ``None``: inferred from ``V`` and ``d``.
        unused: what to do with nodes that belong to no cell: ``"warn"`` (default: an
            :class:`~geoattn.errors.UnusedNodeWarning`; such nodes get zero lumped weight, so they
            drop out of every integral), ``"error"`` (:class:`~geoattn.errors.UnusedNodeError`) or
            ``"ignore"``.
        duplicates: check for coincident nodes (:class:`~geoattn.errors.DuplicateNodeError`).

    Raises:
        MeshError: the specific subclass for the first defect found.
    """
    if unused not in ("warn", "error", "ignore"):
        raise ValueError(f"unused must be 'warn', 'error' or 'ignore', got {unused!r}")
    pos = validate_points(pos)
    n, d = pos.shape
    centre, scale = unit_frame(pos)
    local = (pos - centre) / scale  # geometry in float64 without cancellation far from the origin
    surface = False
    if cells is not None:
        ct = validate_cells(cells, n, cell_type_name, dim=d)
        cells = _as_numpy(cells)
        surface = is_surface(ct.name, d)
        jac = min_corner_areas(local, cells) if surface else min_corner_jacobians(local, cells, ct.name)
        h = np.linalg.norm(np.ptp(local, axis=0)) / max(n, 1) ** (1.0 / ct.dim)
        tiny = DEGENERATE_TOL * h**ct.dim
        if ct.name == "line" and d == 1:
            jac = np.abs(jac)  # 1-D segments carry no orientation
        what = "area" if surface else "volume"
        bad = np.abs(jac) <= tiny
        if bad.any():
            i = _first(bad)
            raise DegenerateCellError(
                f"cell {i} (nodes {cells[i].tolist()}) has zero {what} (Jacobian "
                f"{jac[i] * scale**ct.dim:.3g})"
            )
        bad = jac < 0
        if bad.any():
            i = _first(bad)
            fix = ("a surface quad whose corners turn different ways is folded; split it into "
                   "triangles" if surface else
                   "pass reorient=True to from_meshio / read_mesh to fix reversed vertex order")
            raise InvertedCellError(
                f"cell {i} (nodes {cells[i].tolist()}) is inverted or non-convex (Jacobian "
                f"{jac[i] * scale**ct.dim:.3g} < 0); {fix}"
            )
    if duplicates and n > 1:
        tol = DUPLICATE_TOL * max(float(np.linalg.norm(np.ptp(local, axis=0))), 1e-300)
        tree = cKDTree(local)
        dist, idx = tree.query(local, k=2)
        bad = dist[:, 1] <= tol
        if bad.any():
            i = _first(bad)
            other = int(idx[i, 1] if idx[i, 0] == i else idx[i, 0])  # ties may list i second
            count = int(bad.sum())
            raise DuplicateNodeError(
                f"node {i} duplicates node {other} at {pos[i].tolist()} ({count} of {n} nodes "
                "coincide with another). A solver that writes every element's vertices separately "
                "gives such files: pass merge_duplicates=1e-9 (a distance relative to the mesh's "
                "bounding-box diagonal) to read_mesh / from_meshio, or --merge-duplicates on the "
                "command line, to merge coincident nodes")
    if surface:
        check_surface_orientation(cells)  # the surface analogue of overlapping cells
    elif cells is not None:
        check_overlaps(local, cells, ct.name)  # after duplicates: a duplicate node often shows as one
    if cells is not None and unused != "ignore":
        used = np.zeros(n, dtype=bool)
        used[cells.ravel()] = True
        if not used.all():
            i = _first(~used)
            msg = f"{int((~used).sum())} node(s) belong to no cell, the first is node {i}"
            if unused == "error":
                raise UnusedNodeError(msg)
            warnings.warn(msg + "; they get zero quadrature weight", UnusedNodeWarning,
                          stacklevel=2)


#: The facets of each cell type, as vertex positions in its meshio/VTK vertex order.
FACETS = {
    "line": ((0,), (1,)),
    "triangle": ((0, 1), (1, 2), (2, 0)),
    "quad": ((0, 1), (1, 2), (2, 3), (3, 0)),
    "tetra": ((1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2)),
    "hexahedron": ((0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)),
}


def _facet_normals(pos: np.ndarray, facets: np.ndarray) -> np.ndarray:
    """A normal ``[F, d]`` of each facet ``[F, k]`` (not normalised; for a quad face the cross
    product of its diagonals)."""
    p = pos[facets]  # [F, k, d]
    if pos.shape[1] == 1:
        return np.ones((len(facets), 1))
    if pos.shape[1] == 2:
        e = p[:, 1] - p[:, 0]
        return np.stack([-e[:, 1], e[:, 0]], axis=1)
    if facets.shape[1] == 4:
        return np.cross(p[:, 2] - p[:, 0], p[:, 3] - p[:, 1])
    return np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])


def check_overlaps(pos: np.ndarray, cells: np.ndarray, cell_type_name: str) -> None:
    """Refuse cells that overlap through a facet: a facet (edge, face) shared by more than two
    cells, or shared by two cells that lie on the same side of it.

    In a conforming mesh every interior facet has exactly one cell on each side and a boundary
    facet one cell, so the cells tile the domain once and their volumes add up to its measure.
    A cell folded over its neighbour, or a cell laid over cells that share its facets, breaks
    that: the domain is covered twice there and every lumped weight of it counts twice. Layers
    of cells that share no facet at all (two meshes stacked, a cell laid over others) are found
    for simplices (triangles, tetrahedra, lines) by :func:`check_stacked_cells`.

    Args:
        pos: node coordinates ``[N, d]`` (best centred and scaled, see :func:`unit_frame`).
        cells: valid, positively oriented cells ``[M, V]``.
        cell_type_name: their meshio cell type.

    Raises:
        OverlappingCellsError: naming the first offending cell (the later of the two cells that
            overlap) and the facet.
    """
    table = np.asarray(FACETS[cell_type_name])  # [nf, k]
    m, nf = len(cells), len(table)
    facets = cells[:, table].reshape(m * nf, -1)  # [M * nf, k]
    owner = np.repeat(np.arange(m), nf)  # [M * nf]
    keys = np.sort(facets, axis=1)
    order = np.lexsort(keys.T[::-1])
    keys, facets, owner = keys[order], facets[order], owner[order]
    same = (keys[1:] == keys[:-1]).all(axis=1)  # [M * nf - 1]: facet j equals facet j + 1
    if not same.any():
        return
    third = same[:-1] & same[1:]  # three cells on one facet
    if third.any():
        j = int(np.flatnonzero(third)[np.argmin(owner[2:][third])])
        raise OverlappingCellsError(
            f"cell {int(owner[j + 2])} overlaps cells {int(owner[j])} and {int(owner[j + 1])}: the "
            f"facet with nodes {keys[j].tolist()} belongs to 3 or more cells (a facet bounds at "
            "most two cells of a conforming mesh); remove or fix the overlapping cells")
    pairs = np.flatnonzero(same)  # facets pairs[k] and pairs[k] + 1 are shared by two cells
    centroid = pos[cells].mean(axis=1)  # [M, d]
    a, b = owner[pairs], owner[pairs + 1]
    normal = _facet_normals(pos, facets[pairs])  # [P, d]
    base = pos[facets[pairs]].mean(axis=1)  # [P, d]
    side_a = np.einsum("pd,pd->p", normal, centroid[a] - base)
    side_b = np.einsum("pd,pd->p", normal, centroid[b] - base)
    bad = side_a * side_b > 0
    if bad.any():
        k, later, earlier = first_clash(a, b, bad)
        raise OverlappingCellsError(
            f"cell {later} overlaps cell {earlier}: both lie on the same side "
            f"of their shared facet with nodes {keys[pairs[k]].tolist()}, so they cover part of the "
            "domain twice; remove or fix the overlapping cell")
    check_stacked_cells(pos, cells, cell_type_name)


#: neighbouring cells (by centroid) in which :func:`check_stacked_cells` looks for each centroid
STACK_NEIGHBOURS = 12


def check_stacked_cells(pos: np.ndarray, cells: np.ndarray, cell_type_name: str) -> None:
    """Refuse simplices that lie over others without sharing a facet: the centroid of a cell
    must lie inside no other cell (in a conforming mesh the cells' interiors are disjoint). Each
    centroid is tested against the cells of the :data:`STACK_NEIGHBOURS` nearest centroids (the
    cell holding a point has its centroid near it), by barycentric coordinates: ``O(M log M)``.
    Other cell types are not checked here."""
    if cell_type_name not in ("line", "triangle", "tetra") or len(cells) < 2:
        return
    d = pos.shape[1]
    if cells.shape[1] != d + 1:
        return
    p = pos[cells]  # (M, d + 1, d)
    centroid = p.mean(axis=1)  # (M, d)
    k = min(STACK_NEIGHBOURS, len(cells))
    _, near = cKDTree(centroid).query(centroid, k=k)  # (M, k)
    near = near.reshape(len(cells), k)
    edges = (p[:, 1:] - p[:, :1]).transpose(0, 2, 1)  # (M, d, d): columns are the edges from node 0
    try:
        inverse = np.linalg.inv(edges)  # (M, d, d)
    except np.linalg.LinAlgError:
        return  # a degenerate cell: refused by its own check
    for start in range(0, len(cells), 1 << 15):  # in blocks: memory O(block * k * d^2)
        rows = slice(start, start + (1 << 15))
        nb = near[rows]
        rel = centroid[rows, None, :] - p[nb][:, :, 0, :]  # (m, k, d): each centroid from the other cell's node 0
        lam = np.einsum("mkij,mkj->mki", inverse[nb], rel)  # (m, k, d): barycentric coordinates but node 0's
        inside = (lam > 1e-9).all(-1) & (lam.sum(-1) < 1 - 1e-9) & (nb != np.arange(len(cells))[rows, None])
        if inside.any():
            a = start + int(np.flatnonzero(inside.any(1))[0])
            b = int(near[a][inside[a - start]][0])
            raise OverlappingCellsError(
                f"cells {min(a, b)} and {max(a, b)} overlap without sharing a facet (the centroid of cell {a} "
                f"is inside cell {b}), so they cover part of the domain twice and its weights count twice; "
                "remove the cells laid over the mesh (a second mesh stacked on it)")


def _graph_count(batch, num_nodes: int, num_graphs: int | None) -> int:
    """Check a batch vector (one graph index in ``[0, num_graphs)`` per node, ``num_nodes > 0``);
    return the number of graphs ``B``."""
    if (not isinstance(batch, torch.Tensor) or batch.dim() != 1 or batch.shape[0] != num_nodes
            or batch.is_floating_point() or batch.is_complex() or batch.dtype == torch.bool):
        got = f"{batch.dtype} of shape {tuple(batch.shape)}" if isinstance(batch, torch.Tensor) else type(batch).__name__
        raise FieldLengthError(f"batch must be an integer tensor [{num_nodes}] (the graph of each node), got {got}")
    low, high = torch.stack(torch.aminmax(batch)).tolist()
    if low < 0 or (num_graphs is not None and high >= num_graphs):
        i = _first((batch < 0) | (batch >= (num_graphs if num_graphs is not None else high + 1)))
        raise FieldLengthError(f"batch gives node {i} the graph index {int(batch[i])}, outside "
                               f"[0, {num_graphs if num_graphs is not None else 'B'})")
    return high + 1 if num_graphs is None else num_graphs


def validate_weights(weight, num_nodes: int | None = None, *, batch=None,
                     num_graphs: int | None = None) -> None:
    """Check quadrature weights: one real number per node, finite, ``>= 0``, with a positive total
    for every sample (the measure :math:`|D|` of its domain, which normalisers and relative
    errors divide by).

    The check runs in torch on the weights' device in :math:`O(N)`, with one host
    synchronisation (one more with ``batch`` and no ``num_graphs``) when the weights are fine;
    only a failure looks up the offending index.

    Args:
        weight: weights ``[N]`` (tensor or array).
        num_nodes: the number of nodes ``N`` they must match (default ``None``: not checked).
        batch: graph index of each node ``[N]``, for a total per graph (default ``None``: one
            sample).
        num_graphs: number of graphs ``B`` (default: ``batch.max() + 1``).

    Raises:
        WeightError: naming the first non-finite or negative weight (and its graph), or the first
            graph whose weights are all zero.
        FieldLengthError: ``batch`` is not one graph index in ``[0, B)`` per node.
    """
    try:
        w = torch.as_tensor(weight)
    except (TypeError, ValueError, RuntimeError) as err:
        raise WeightError(f"weights must be an array of real numbers, got {type(weight).__name__}: {err}") from err
    if w.is_complex() or w.dtype == torch.bool:
        raise WeightError(f"weights must be real numbers, got dtype {w.dtype}")
    if w.dim() != 1:
        raise WeightError(f"weights must be a 1-D array [N], got shape {tuple(w.shape)}")
    n = w.shape[0]
    if num_nodes is not None and n != num_nodes:
        raise WeightError(f"got {n} weights for {num_nodes} nodes")
    if n == 0:
        raise WeightError("got no weights; a sample needs nodes with a positive total weight")
    acc = w.to(torch.promote_types(w.dtype, torch.float32))
    if batch is None:
        mass = acc.sum().reshape(1)  # quadrature-ok: the total weight |D| itself
    else:
        mass = acc.new_zeros(_graph_count(batch, n, num_graphs)).index_add_(0, batch, acc)  # [B]
    if len(mass):
        # NaN propagates through min and sum and fails every comparison; +inf shows in the mass
        low, mass_low, mass_high = torch.stack([acc.min(), mass.min(), mass.max()]).tolist()
        if low >= 0 and mass_low > 0 and mass_high < math.inf:
            return

    def where(i: int) -> str:
        if batch is None:
            return ""
        g = int(batch[i])
        return f" (node {int((batch[:i] == g).sum())} of graph {g})"

    bad = ~torch.isfinite(w)
    if bad.any():
        i = _first(bad)
        raise WeightError(f"weight {i}{where(i)} is not finite ({w[i].item()})")
    bad = w < 0
    if bad.any():
        i = _first(bad)
        raise WeightError(f"weight {i}{where(i)} is negative ({w[i].item():.3g}); quadrature weights "
                          "must be >= 0")
    g = _first(~(mass > 0) | (mass == math.inf))
    size = n if batch is None else int((batch == g).sum())
    which = "the sample" if batch is None else f"graph {g}"
    if mass[g] > 0:
        raise WeightError(f"{which} has total weight {mass[g].item()} (overflow); rescale its weights")
    nodes = f"{size} nodes, every weight zero" if size else "no nodes"
    raise WeightError(f"{which} has total weight 0 ({nodes}); a sample needs a positive total weight, "
                      "the measure |D| of its domain")


def validate_field(name: str, values, num_rows: int, what: str = "nodes") -> None:
    """Check that a field has one row per node (or cell) and only finite values."""
    v = _as_numpy(values)
    if v.ndim == 0 or v.shape[0] != num_rows:
        shape = tuple(v.shape)
        raise FieldLengthError(f"field {name!r} has shape {shape} but the mesh has {num_rows} {what}")
    if np.issubdtype(v.dtype, np.floating) or np.issubdtype(v.dtype, np.complexfloating):
        bad = ~np.isfinite(v.reshape(num_rows, -1)).all(axis=1)
        if bad.any():
            i = _first(bad)
            raise NonFiniteError(f"field {name!r} is not finite at row {i}")


def validate_sample(data, *, check_mesh: bool = True) -> None:
    """Validate a :class:`~torch_geometric.data.Data` sample: ``pos``, ``weight``, ``x``, ``y``,
    ``cells`` (if present) and the stored point and cell fields.

    ``check_mesh=False`` skips the geometric checks of the mesh (cell volumes and orientation,
    coincident nodes: a k-d tree per sample); the cells are still checked for shape, index range
    and repeats (:func:`validate_cells`), which is what losses and batching rely on.
    """
    if getattr(data, "pos", None) is None:
        raise EmptyMeshError("the sample has no 'pos' attribute")
    pos = validate_points(data.pos)
    n = pos.shape[0]
    cells = getattr(data, "cells", None)
    ctype = getattr(data, "cell_type", None) if cells is not None else None
    if check_mesh:
        validate_mesh(pos, cells, ctype, unused="ignore")
    elif cells is not None:
        validate_cells(cells, n, ctype, dim=pos.shape[1])
    if getattr(data, "weight", None) is not None:
        validate_weights(data.weight, n)
    for key in ("x", "y"):
        if getattr(data, key, None) is not None:
            validate_field(key, data[key], n)
    for name, values in (getattr(data, "point_data", None) or {}).items():
        validate_field(name, values, n)
    if cells is not None:
        for name, values in (getattr(data, "cell_data", None) or {}).items():
            validate_field(name, values, len(cells), "cells")


def _cell_measures(pos: torch.Tensor, cells: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The size of every cell ``[T]`` (length, area or volume, unsigned) and its dimension, from
    the cells' shape: simplices of any embedding (``k <= d + 1`` nodes) by the Gram determinant of
    their edges from node 0; quadrilaterals (``d = 2, k = 4``) by their diagonals; hexahedra
    (``k = 8``) by the corner Jacobian at node 0 (VTK order); 4 nodes in 3-D count as a
    tetrahedron or, when flat, as a quadrilateral."""
    d, k = pos.shape[1], cells.shape[1]
    wide = torch.float32 if pos.device.type == "mps" else torch.float64
    p = pos.detach().to(wide)[cells]  # (T, k, d)

    def gram(edges: torch.Tensor) -> torch.Tensor:  # (T, m, d) -> (T,)
        g = edges @ edges.transpose(1, 2)  # (T, m, m)
        return torch.linalg.det(g).clamp(min=0).sqrt()

    if k == 8 and d == 3:
        return gram(p[:, [1, 3, 4]] - p[:, :1]), 3
    quad = p.new_zeros(0)
    if k == 4 and d >= 2:
        a, b = p[:, 2] - p[:, 0], p[:, 3] - p[:, 1]  # the diagonals: area = |a x b| / 2
        quad = 0.5 * gram(torch.stack([a, b], 1))
        if d == 2:
            return quad, 2
    if 2 <= k <= d + 1:
        size = gram(p[:, 1:] - p[:, :1])
        return (torch.maximum(size, quad) if len(quad) else size), k - 1
    return p.new_ones(len(cells)), d  # a shape with no rule here: validate_mesh judges it


def check_mesh_tensors(pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor | None = None,
                       batch: torch.Tensor | None = None, *, values: bool = True) -> None:
    """Check that the tensors of a :class:`~geoattn.mesh.Mesh` fit together: one device (not
    ``meta``), one floating dtype for ``pos`` and ``weight``; cells of integer node indices in
    ``[0, N)``, none degenerate (a length, area or volume below :data:`DEGENERATE_TOL` of a typical
    spacing's); a batch vector of integer graph indices, non-negative and sorted.

    The dtype and device checks read no device; with ``values`` (default), the index range, the
    cells' sizes and the batch order are checked in :math:`O(N + T)` on the tensors' device with
    one host synchronisation; only a failure looks up the first offending index.

    Raises:
        DeviceError, DTypeError, CellIndexError, DegenerateCellError, BatchOrderError,
        FieldLengthError: naming the cause and what to do.
    """
    from ..errors import BatchOrderError, DeviceError, DTypeError

    named = [("pos", pos), ("weight", weight), ("cells", cells), ("batch", batch)]
    named = [(k, t) for k, t in named if t is not None]
    devices = {t.device for _, t in named}
    if len(devices) > 1:
        where = ", ".join(f"{k} on {t.device}" for k, t in named)
        raise DeviceError(f"a Mesh's tensors must be on one device, got {where}; move them first, "
                          f"e.g. Mesh(pos.to(dev), weight.to(dev), ...) or mesh.to(dev)")
    if pos.device.type == "meta":
        raise DeviceError("the Mesh's tensors are on the meta device, which holds no values; build it "
                          "from real tensors (e.g. after module.to_empty(device=...) and loading the values)")
    if not pos.is_floating_point():
        raise DTypeError(f"pos must be a floating tensor (float32 or float64), got {pos.dtype}; "
                         "convert with pos.to(torch.float32) or .double()")
    if weight.dtype != pos.dtype:
        raise DTypeError(f"weight is {weight.dtype} but pos is {pos.dtype}: a Mesh has one floating dtype; "
                         f"convert with weight.to(pos.dtype)")
    if cells is not None and (cells.is_floating_point() or cells.is_complex() or cells.dtype == torch.bool):
        raise CellIndexError(f"cells must hold integer node indices, got dtype {cells.dtype}; convert "
                             "whole-number indices with cells.long()")
    if batch is not None and (batch.is_floating_point() or batch.is_complex() or batch.dtype == torch.bool):
        raise FieldLengthError(f"batch must hold integer graph indices, got dtype {batch.dtype}; convert "
                               "whole numbers with batch.long(), or build batches with Mesh.batch")
    if not values:
        return
    n = pos.shape[0]
    flags, tol = [], 0.0
    has_cells = cells is not None and cells.numel() > 0
    if has_cells:
        if n == 0:
            raise CellIndexError(f"{len(cells)} cells index a mesh without nodes")
        low, high = torch.aminmax(cells)
        flags += [low >= 0, high < n]
        size, tdim = _cell_measures(pos, cells.clamp(0, n - 1))
        span = (pos.detach().amax(0) - pos.detach().amin(0)).to(size.dtype)
        h = span.norm() / max(n, 1) ** (1.0 / max(tdim, 1))
        tol = DEGENERATE_TOL * h ** tdim
        flags += [size.min() > tol]
    if batch is not None and n > 1:
        flags += [batch[0] >= 0, (batch[1:] >= batch[:-1]).all()]
    elif batch is not None and n == 1:
        flags += [batch[0] >= 0]
    if not flags or all(torch.stack(flags).tolist()):
        return
    if has_cells:
        bad = (cells < 0) | (cells >= n)
        if bool(bad.any()):
            t, j = (int(v) for v in torch.nonzero(bad)[0])
            raise CellIndexError(f"cell {t} refers to node {int(cells[t, j])}, outside [0, {n}) (the mesh has "
                                 f"{n} nodes); the cells do not belong to these nodes, or index from 1: "
                                 "give cells that index pos from 0")
        small = size <= tol
        if bool(small.any()):
            t = _first(small)
            raise DegenerateCellError(f"cell {t} (nodes {cells[t].tolist()}) has size {abs(float(size[t])):.3g}, "
                                      f"numerically zero for {tdim}-D cells at this spacing; remove it, or merge "
                                      "its coincident nodes (geoattn.mesh.merge_nodes)")
    if bool(batch[0] < 0):
        raise FieldLengthError(f"batch gives node 0 the graph index {int(batch[0])}; graph indices start at 0")
    i = _first(batch[1:] < batch[:-1]) + 1
    raise BatchOrderError(f"the batch vector is not sorted: node {i} has graph {int(batch[i])} after graph "
                          f"{int(batch[i - 1])}; sort the nodes by graph, or build the batch with Mesh.batch")


def checked_number(name: str, value, *, integer: bool = False, positive: bool = True,
                   minimum: float | None = None, below: float | None = None) -> float | int:
    """``value`` of the numeric option ``name`` as a Python ``float`` (``int`` with ``integer``),
    from any real number type (``int``, ``float``, NumPy scalars, 0-d arrays and tensors).

    Refused with :class:`~geoattn.errors.ConfigError` naming the option and the value: booleans,
    complex numbers, strings and other types; NaN and infinities; with ``positive`` (default),
    values ``<= 0``; values below ``minimum``; values not below ``below`` (a dropout rate of 1);
    with ``integer``, a number that is not whole (``8.5`` for a grid size).
    """
    import numbers

    from ..errors import ConfigError

    raw = value
    if torch.is_tensor(value) or isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise ConfigError(f"{name} must be one number, got an array of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{name} must be a real number, got {type(raw).__name__} {raw!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, got {number}")
    if integer:
        if number != int(number):
            raise ConfigError(f"{name} must be a whole number, got {number}; give e.g. {name}={max(int(number), 1)}")
        number = int(number)
    if positive and number <= 0:
        raise ConfigError(f"{name} must be > 0, got {number}")
    if minimum is not None and below is not None and not minimum <= number < below:
        raise ConfigError(f"{name} must be in [{minimum:g}, {below:g}), got {number:g}")
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name} must be >= {minimum:g}, got {number:g}")
    if below is not None and number >= below:
        raise ConfigError(f"{name} must be < {below:g}, got {number:g}")
    return number
