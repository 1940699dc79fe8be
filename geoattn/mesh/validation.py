"""Validation of meshes, point clouds, fields and quadrature weights.

Each check raises a specific :class:`~geoattn.errors.MeshError` subclass whose message names the
problem and the first offending index. Checks run in a fixed order (emptiness, finiteness, cell
type, dimension, index range, degeneracy, orientation, duplicates, unused nodes), so one input with
several defects always reports the same one first.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
from scipy.spatial import cKDTree

from ..errors import (
    CellIndexError,
    DegenerateCellError,
    DimensionError,
    DuplicateNodeError,
    EmptyMeshError,
    FieldLengthError,
    InvertedCellError,
    NonFiniteError,
    UnusedNodeError,
    UnusedNodeWarning,
    WeightError,
)
from .cells import cell_type, min_corner_jacobians

log = logging.getLogger(__name__)

#: Cells whose volume is below this fraction of ``h^dim`` (``h`` = bounding-box diagonal divided
#: by ``N^(1/dim)``, a typical spacing) count as degenerate.
DEGENERATE_TOL = 1e-10
#: Nodes closer than this fraction of the bounding-box diagonal count as duplicates.
DUPLICATE_TOL = 1e-12


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _as_numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


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


def validate_mesh(pos, cells=None, cell_type_name: str | None = None, *, unused: str = "warn",
                  duplicates: bool = True) -> None:
    """Validate a single-cell-type mesh (or, with ``cells=None``, a point cloud).

    Args:
        pos: node coordinates ``[N, d]``.
        cells: cell connectivity ``[M, V]`` (node indices), or ``None`` for a point cloud.
        cell_type_name: meshio cell type name (``"line"``, ``"triangle"``, ``"quad"``,
            ``"tetra"``, ``"hexahedron"``).
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
    if cells is not None:
        if cell_type_name is None:
            raise ValueError("cell_type_name is required when cells are given")
        ct = cell_type(cell_type_name)
        cells = _as_numpy(cells)
        if cells.ndim != 2 or cells.shape[1] != ct.num_vertices:
            raise DimensionError(
                f"{ct.name} cells must have shape [M, {ct.num_vertices}], got {tuple(cells.shape)}"
            )
        if cells.shape[0] == 0:
            raise EmptyMeshError(f"the mesh has no {ct.name} cells")
        if ct.dim != d:
            raise DimensionError(
                f"{ct.name} cells are {ct.dim}-D but the nodes are {d}-D; geoattn supports meshes "
                "whose cells fill their space (no surfaces in 3-D or curves in 2-D)"
            )
        if not np.issubdtype(cells.dtype, np.integer):
            raise CellIndexError(f"cell indices must be integers, got dtype {cells.dtype}")
        bad = ((cells < 0) | (cells >= n)).any(axis=1)
        if bad.any():
            i = _first(bad)
            raise CellIndexError(
                f"cell {i} refers to node indices {cells[i].tolist()} outside [0, {n})"
            )
        jac = min_corner_jacobians(pos, cells, ct.name)
        h = np.linalg.norm(np.ptp(pos, axis=0)) / max(n, 1) ** (1.0 / d)
        tiny = DEGENERATE_TOL * h**d
        if ct.name == "line" and d == 1:
            jac = np.abs(jac)  # 1-D segments carry no orientation
        bad = np.abs(jac) <= tiny
        if bad.any():
            i = _first(bad)
            raise DegenerateCellError(
                f"cell {i} (nodes {cells[i].tolist()}) has zero volume (Jacobian {jac[i]:.3g})"
            )
        bad = jac < 0
        if bad.any():
            i = _first(bad)
            raise InvertedCellError(
                f"cell {i} (nodes {cells[i].tolist()}) is inverted or non-convex (Jacobian "
                f"{jac[i]:.3g} < 0); pass reorient=True to from_meshio to fix reversed vertex order"
            )
    if duplicates and n > 1:
        tol = DUPLICATE_TOL * max(float(np.linalg.norm(np.ptp(pos, axis=0))), 1e-300)
        dist, idx = cKDTree(pos).query(pos, k=2)
        bad = dist[:, 1] <= tol
        if bad.any():
            i = _first(bad)
            other = int(idx[i, 1] if idx[i, 0] == i else idx[i, 0])  # ties may list i second
            raise DuplicateNodeError(f"node {i} duplicates node {other} at {pos[i].tolist()}")
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


def validate_weights(weight, num_nodes: int | None = None) -> None:
    """Check quadrature weights: a 1-D array, finite, non-negative, of length ``num_nodes``."""
    w = _as_numpy(weight)
    if w.ndim != 1:
        raise WeightError(f"weights must be a 1-D array [N], got shape {tuple(w.shape)}")
    if num_nodes is not None and w.shape[0] != num_nodes:
        raise WeightError(f"got {w.shape[0]} weights for {num_nodes} nodes")
    bad = ~np.isfinite(w)
    if bad.any():
        i = _first(bad)
        raise WeightError(f"weight {i} is not finite ({w[i]})")
    bad = w < 0
    if bad.any():
        i = _first(bad)
        raise WeightError(f"weight {i} is negative ({w[i]:.3g}); quadrature weights must be >= 0")


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
    """
    if getattr(data, "pos", None) is None:
        raise EmptyMeshError("the sample has no 'pos' attribute")
    pos = validate_points(data.pos)
    n = pos.shape[0]
    cells = getattr(data, "cells", None)
    if check_mesh:
        validate_mesh(pos, cells, getattr(data, "cell_type", None) if cells is not None else None,
                      unused="ignore")
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
