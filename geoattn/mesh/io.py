"""meshio ⇄ :class:`MeshData` adapter.

meshio stores points as ``[N, 3]`` for most formats (2-D meshes get a zero z-column) and cells as
blocks by type. geoattn keeps the block(s) of the highest topological dimension, recognises the
spatial dimension from the cells (a zero z-column is dropped), validates everything, and computes
quadrature weights. Lower-dimensional blocks (boundary lines, vertices from gmsh) are dropped.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import (
    CoordinateRangeError,
    DimensionError,
    DuplicateNodeError,
    FieldLengthError,
    MeshFileError,
    TooFewNodesError,
    UnsupportedCellError,
)
from ..optional import require
from .cells import CELL_DIMENSIONS, CELL_TYPES, orient_cells
from .data import MeshData
from .surface import is_surface, orient_surface
from .validation import (
    located,
    unit_frame,
    validate_cells,
    validate_field,
    validate_mesh,
    validate_points,
)
from .weights import cast_weights, quadrature_weights

if TYPE_CHECKING:  # meshio is imported where a mesh is built, read or written
    import meshio

log = logging.getLogger(__name__)


def _names(spec: str | Sequence[str] | None) -> list[str]:
    if spec is None:
        return []
    return [spec] if isinstance(spec, str) else list(spec)


def _stack_fields(mesh_fields: Mapping[str, np.ndarray], names: list[str], num: int,
                  dtype: torch.dtype) -> torch.Tensor | None:
    if not names:
        return None
    cols = []
    for name in names:
        if name not in mesh_fields:
            raise FieldLengthError(
                f"point field {name!r} not found; the mesh has {sorted(mesh_fields)}"
            )
        validate_field(name, mesh_fields[name], num)
        cols.append(np.asarray(mesh_fields[name], dtype=float).reshape(num, -1))
    return torch.as_tensor(np.concatenate(cols, axis=1), dtype=dtype)


def _chosen_block(mesh: meshio.Mesh, cell_block: str | int) -> tuple[str, np.ndarray, list[int]]:
    """Cell type, connectivity and block indices of the block(s) picked by ``cell_block``: a
    block's index in ``mesh.cells``, or a cell type name (every block of that type)."""
    listing = ", ".join(f"{i}: {b.type} ({len(b.data)})" for i, b in enumerate(mesh.cells))
    if isinstance(cell_block, (int, np.integer)) and not isinstance(cell_block, bool):
        if not -len(mesh.cells) <= cell_block < len(mesh.cells):
            raise UnsupportedCellError(f"cell_block={cell_block} but the mesh has {len(mesh.cells)} "
                                       f"cell block(s): {listing or 'none'}")
        blocks = [int(cell_block) % len(mesh.cells)]
    else:
        blocks = [i for i, b in enumerate(mesh.cells) if b.type == cell_block]
        if not blocks:
            raise UnsupportedCellError(f"cell_block={cell_block!r} but the mesh has no such cells; its "
                                       f"cell blocks are {listing or 'none'}")
    ctype = mesh.cells[blocks[0]].type
    if ctype not in CELL_TYPES:
        raise UnsupportedCellError(
            f"unsupported cell type {ctype!r} in cell_block={cell_block!r}; supported types are "
            f"{sorted(CELL_TYPES)}")
    cells = np.concatenate([np.asarray(mesh.cells[i].data, dtype=np.int64) for i in blocks])
    return ctype, cells, blocks


def _top_cells(mesh: meshio.Mesh) -> tuple[str | None, np.ndarray | None, list[int]]:
    """Cell type, connectivity and block indices of the highest-dimensional cells."""
    dims = []
    for block in mesh.cells:
        if block.type not in CELL_DIMENSIONS:
            raise UnsupportedCellError(
                f"unsupported cell type {block.type!r}; supported types are {sorted(CELL_TYPES)}"
            )
        dims.append(CELL_DIMENSIONS[block.type])
    if not dims or max(dims) == 0:
        return None, None, []
    top = max(dims)
    blocks = [i for i, dm in enumerate(dims) if dm == top]
    types = sorted({mesh.cells[i].type for i in blocks})
    if len(types) > 1:
        raise UnsupportedCellError(
            f"the mesh mixes {top}-D cell types {types}; geoattn needs one cell type per mesh: "
            + ("read it with triangulate=True (--triangulate), which splits each quad into two triangles"
               if set(types) <= {"triangle", "quad"} else
               "read it with linearise=True (--linearise), which keeps the corner nodes of higher-order cells"
               if {LINEAR_CORNERS.get(t, t) for t in types} == {LINEAR_CORNERS.get(types[0], types[0])} else
               "convert it to one cell type first (hexahedra into tetrahedra, say)")
        )
    if types[0] not in CELL_TYPES:
        raise UnsupportedCellError(
            f"unsupported cell type {types[0]!r}; supported types are {sorted(CELL_TYPES)}"
            + (f" ({types[0]} is a higher-order cell: read it with linearise=True (--linearise), which "
               f"keeps its corner nodes as {LINEAR_CORNERS[types[0]]} cells)" if types[0] in LINEAR_CORNERS else "")
        )
    dropped = sorted({mesh.cells[i].type for i in range(len(dims)) if i not in blocks})
    if dropped:
        log.debug("dropping lower-dimensional cell blocks %s", dropped)
    cells = np.concatenate([np.asarray(mesh.cells[i].data, dtype=np.int64) for i in blocks])
    return types[0], cells, blocks


def _spatial_points(points: np.ndarray, dim: int | None) -> np.ndarray:
    """Drop trailing coordinate columns that are identically zero (beyond the cells' dimension)."""
    points = validate_points(points)
    if dim is None:  # point cloud: drop trailing zero columns
        dim = points.shape[1]
        while dim > 1 and not np.any(points[:, dim - 1]):
            dim -= 1
    if points.shape[1] < dim:
        raise DimensionError(f"{dim}-D cells need {dim} coordinates, the points have {points.shape[1]}")
    extra = points[:, dim:]
    if extra.size and np.abs(extra).max() > 1e-12 * max(np.abs(points).max(), 1.0):
        if dim == 2 and points.shape[1] == 3:  # a surface in 3-D
            return points
        i = int(np.flatnonzero(np.abs(extra).max(axis=1) > 0)[0])
        raise DimensionError(
            f"{dim}-D cells but coordinate column {dim} is not zero (node {i} at "
            f"{points[i].tolist()}); curves embedded in a higher dimension are not supported "
            "(surfaces of triangles or quads in 3-D are)"
        )
    return points[:, :dim]


#: Default relative distance of ``merge_duplicates=True``.
MERGE_TOL = 1e-9
#: Point fields may differ at merged nodes by this fraction of their largest magnitude.
MERGE_FIELD_TOL = 1e-6


def merge_nodes(points: np.ndarray, cells: np.ndarray | None, point_data: Mapping[str, np.ndarray],
                tol: float = MERGE_TOL, field_tol: float = MERGE_FIELD_TOL, *,
                checked: Collection[str] | None = None
                ) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray], int]:
    """Merge nodes closer than ``tol`` times the bounding-box diagonal into one.

    Solvers often write every element's vertices separately (a file with 5 340 points for 972
    vertices): the mesh then has no shared nodes, every node coincides with others, and
    :func:`~geoattn.mesh.validate_mesh` refuses it. Here each cluster of nodes within ``tol``
    of one another (transitively) becomes one node at their mean, numbered in the order of the
    cluster's first node; cells are renumbered, and each point field is averaged over the
    cluster after checking that it agrees there.

    Args:
        points: coordinates ``[N, d]``.
        cells: connectivity ``[M, V]`` or ``None``.
        point_data: point fields (first axis ``N``).
        tol: merge distance relative to the bounding-box diagonal of ``points``.
        field_tol: largest difference of a field within a cluster, relative to the field's
            largest magnitude (integer fields must agree exactly).
        checked: the fields that must agree (default ``None``: all); another field that differs
            at merged nodes is dropped from the result, with a logged note.

    Returns:
        ``(points [N', d], cells [M, V], point_data, merged)`` with ``merged = N - N'``.

    Raises:
        DuplicateNodeError: a field disagrees at nodes that are merged (naming the nodes).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    if not (isinstance(tol, (int, float)) and np.isfinite(tol) and tol >= 0):
        raise ValueError(f"merge_duplicates must be a distance >= 0 relative to the mesh size, got {tol!r}")
    points = validate_points(points)
    n = len(points)
    centre, side = unit_frame(points)
    local = (points - centre) / side
    radius = tol * max(float(np.linalg.norm(np.ptp(local, axis=0))), 1e-300)
    pairs = cKDTree(local).query_pairs(radius, output_type="ndarray")  # [P, 2]
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    count, labels = connected_components(graph, directed=False)
    first = np.full(count, n)
    np.minimum.at(first, labels, np.arange(n))
    rank = np.empty(count, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(count)
    new = rank[labels]  # [N]: the merged index of each node
    size = np.bincount(new, minlength=count).astype(float)  # [N']

    def mean(values: np.ndarray) -> np.ndarray:
        total = np.zeros((count,) + values.shape[1:])
        np.add.at(total, new, values)
        return total / size.reshape((-1,) + (1,) * (values.ndim - 1))

    merged_points = mean(points)
    fields = {}
    for name, values in point_data.items():
        values = np.asarray(values)
        validate_field(name, values, n)
        leader = values[first[np.argsort(first)]][new]  # each node's cluster's first node's value
        if np.issubdtype(values.dtype, np.integer) or values.dtype == bool:
            kept = values[first[np.argsort(first)]]
            differ = (values != leader).reshape(n, -1).any(axis=1)
        else:
            kept = mean(values.astype(np.float64))
            scale = float(np.abs(values).max()) if values.size else 0.0
            differ = (np.abs(values.astype(np.float64) - leader).reshape(n, -1).max(axis=1, initial=0.0)
                      > field_tol * max(scale, 1e-300))  # against the first node: never "nodes 0 and 0"
            kept = kept.astype(values.dtype, copy=False)
        if differ.any() and checked is not None and name not in checked:
            log.info("merge_duplicates: point field %r differs at merged nodes (an element-wise field) and "
                     "is not read: left out", name)
            continue
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            j = int(first[np.argsort(first)][new[i]])
            raise DuplicateNodeError(
                f"merge_duplicates: nodes {j} and {i} lie together at {points[i].tolist()} but their "
                f"field {name!r} differs ({np.asarray(values[j]).tolist()} against "
                f"{np.asarray(values[i]).tolist()}, beyond {field_tol:g} of its magnitude): the field "
                "is discontinuous there (an element-wise field), so merging would blur it; keep the "
                "nodes apart or drop the field")
        fields[name] = kept
    merged = n - count
    if cells is not None:
        cells = new[np.asarray(cells, dtype=np.int64)]
    if merged:
        log.info("merge_duplicates: merged %d of %d nodes into %d", merged, n, count)
    return merged_points, cells, fields, merged


#: Higher-order cell types and the linear type of their corner nodes, listed first in meshio's
#: (VTK's) vertex order.
LINEAR_CORNERS: dict[str, str] = {
    "line3": "line", "triangle6": "triangle", "triangle7": "triangle", "quad8": "quad",
    "quad9": "quad", "tetra10": "tetra", "hexahedron20": "hexahedron", "hexahedron27": "hexahedron",
}


def linearise_cells(mesh: meshio.Mesh) -> meshio.Mesh:
    """The mesh with every higher-order cell (:data:`LINEAR_CORNERS`: ``triangle6``, ``tetra10``,
    ...) replaced by the linear cell of its corner nodes, and the nodes that then belong to no
    cell (the mid-edge, mid-face and centre nodes) dropped with their point values; the other
    nodes are renumbered in order. Cell fields stay with their cells.

    The P1 (Q1) interpolant of a field on the corner nodes is what a linear mesh can hold: a
    quadratic field loses its curvature inside each cell, and curved cell edges become straight.
    """
    import meshio

    blocks = [(LINEAR_CORNERS.get(b.type, b.type),
               np.asarray(b.data, dtype=np.int64)[:, :CELL_TYPES[LINEAR_CORNERS[b.type]].num_vertices]
               if b.type in LINEAR_CORNERS else np.asarray(b.data, dtype=np.int64))
              for b in mesh.cells]
    higher = [np.asarray(b.data).ravel() for b in mesh.cells if b.type in LINEAR_CORNERS]
    if not higher:
        return mesh
    n = len(mesh.points)
    used = np.zeros(n, dtype=bool)
    for _, cells in blocks:
        used[cells.ravel()] = True
    dropped = np.zeros(n, dtype=bool)
    dropped[np.concatenate(higher)] = True
    keep = ~(dropped & ~used)  # a node kept by no linear cell goes; unused nodes stay as they were
    renumber = np.cumsum(keep) - 1
    log.info("linearise: %d higher-order node(s) dropped, %d of %d nodes kept", int((~keep).sum()),
             int(keep.sum()), n)
    return meshio.Mesh(mesh.points[keep], [(t, renumber[c]) for t, c in blocks],
                       point_data={k: np.asarray(v)[keep] for k, v in mesh.point_data.items()},
                       cell_data={k: list(v) for k, v in mesh.cell_data.items()},
                       field_data=dict(mesh.field_data))


def triangulate_quads(mesh: meshio.Mesh) -> meshio.Mesh:
    """The mesh with every ``quad`` split into the two triangles ``(0, 1, 2)`` and ``(0, 2, 3)``
    (same orientation, same nodes); a quad's cell fields go to both its triangles. A mixed
    triangle/quad mesh becomes one triangle mesh over the whole domain."""
    import meshio

    if not any(b.type == "quad" for b in mesh.cells):
        return mesh
    blocks = []
    for b in mesh.cells:
        cells = np.asarray(b.data, dtype=np.int64)
        if b.type == "quad":  # [M, 4] -> [2M, 3]: cell m gives rows 2m and 2m + 1
            cells = np.stack([cells[:, [0, 1, 2]], cells[:, [0, 2, 3]]], axis=1).reshape(-1, 3)
        blocks.append(("triangle" if b.type == "quad" else b.type, cells))
    cell_data = {k: [np.repeat(np.asarray(v), 2, axis=0) if b.type == "quad" else np.asarray(v)
                     for v, b in zip(per_block, mesh.cells)] for k, per_block in mesh.cell_data.items()}
    return meshio.Mesh(mesh.points, blocks, point_data=dict(mesh.point_data), cell_data=cell_data,
                       field_data=dict(mesh.field_data))


def cell_field_to_nodes(pos: np.ndarray, cells: np.ndarray, ctype: str, values: np.ndarray) -> np.ndarray:
    """A cell field carried to the nodes: at each node, the average of its cells' values weighted by
    the cells' volumes (areas on a surface), ``v_i = sum_c |c| v_c / sum_c |c|`` over the cells
    ``c`` that hold node ``i``. A field constant over the cells stays that constant, and a field
    sampled at cell centroids from an affine function is exact at interior nodes of a mesh
    symmetric about them. (PyVista's ``cell_data_to_point_data`` averages without the volumes.)

    Args:
        pos: coordinates ``[N, d]``; cells ``[M, V]`` of type ``ctype``; values ``[M, ...]``.

    Returns:
        ``[N, ...]`` float64; a node in no cell gets NaN (validation refuses it unless it is unused).
    """
    from .cells import signed_volumes
    from .surface import surface_areas

    measure = (surface_areas(pos, cells, ctype) if is_surface(ctype, pos.shape[1])
               else np.abs(signed_volumes(pos, cells, ctype)))  # [M]
    values = np.asarray(values, dtype=np.float64)
    flat = values.reshape(len(cells), -1)  # [M, C]
    total = np.zeros((len(pos), flat.shape[1]))
    mass = np.zeros(len(pos))
    for v in range(cells.shape[1]):
        np.add.at(total, cells[:, v], measure[:, None] * flat)
        np.add.at(mass, cells[:, v], measure)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = total / mass[:, None]
    return out.reshape((len(pos),) + values.shape[1:])


def _carried(mesh: meshio.Mesh, spec: bool | str | Sequence[str], blocks: list[int]
             ) -> dict[str, np.ndarray]:
    """The cell fields of the kept blocks that ``cell_to_point`` names, by name."""
    if spec is False or spec is None:
        return {}
    names = ([k for k in mesh.cell_data if not k.startswith("gmsh:")]  # gmsh's tags are not fields
             if spec is True else _names(spec))
    if not blocks and names:
        raise FieldLengthError(f"cell_to_point={spec!r} but the mesh has no cells")
    out = {}
    for name in names:
        if name not in mesh.cell_data:
            raise FieldLengthError(f"cell field {name!r} not found (cell_to_point); the mesh has cell fields "
                                   f"{sorted(mesh.cell_data)} and point fields {sorted(mesh.point_data)}")
        if name in mesh.point_data:
            raise FieldLengthError(f"cell_to_point: {name!r} is both a cell field and a point field; "
                                   "rename one")
        out[name] = np.concatenate([np.asarray(mesh.cell_data[name][i]) for i in blocks])
    return out


def _check_cover(mesh: meshio.Mesh, blocks: list[int], cell_block) -> None:
    """Refuse a ``cell_block`` whose cells leave out nodes that other blocks of the same or a
    higher dimension hold: the sample would cover only part of the domain."""
    chosen = np.zeros(len(mesh.points), dtype=bool)
    for i in blocks:
        chosen[np.asarray(mesh.cells[i].data).ravel()] = True
    dim = CELL_DIMENSIONS.get(mesh.cells[blocks[0]].type, 0)
    others = [i for i, b in enumerate(mesh.cells) if i not in blocks and CELL_DIMENSIONS.get(b.type, 0) >= dim]
    left = np.zeros(len(mesh.points), dtype=bool)
    for i in others:
        left[np.asarray(mesh.cells[i].data).ravel()] = True
    left &= ~chosen
    if left.any():
        names = sorted({mesh.cells[i].type for i in others})
        fix = ("triangulate=True (--triangulate) splits the quads into triangles and keeps them all"
               if {mesh.cells[blocks[0]].type, *names} <= {"triangle", "quad"} else
               "linearise=True (--linearise) reads higher-order cells as linear ones"
               if any(n in LINEAR_CORNERS for n in names) else "convert the other cells first")
        raise UnsupportedCellError(
            f"cell_block={cell_block!r} keeps {chosen.sum()} of {len(mesh.points)} nodes: {int(left.sum())} "
            f"nodes (the first is node {int(np.flatnonzero(left)[0])}) lie only in the other {'/'.join(names)} "
            f"cells, so the sample would cover part of the domain; {fix}")


def from_meshio(mesh: meshio.Mesh, x: str | Sequence[str] | None = None,
                y: str | Sequence[str] | None = None, *, weights: str | None = "lumped",
                unused: str = "warn", reorient: bool = False, box=None,
                dtype: torch.dtype | None = None, origin=None, scale: float | None = None,
                merge_duplicates: float | bool | None = None, cell_block: str | int | None = None,
                triangulate: bool = False, linearise: bool = False,
                cell_to_point: bool | str | Sequence[str] = False) -> MeshData:
    """Convert a :class:`meshio.Mesh` into a validated :class:`MeshData` sample with weights.

    Triangles or quads whose nodes do not lie in one coordinate plane form a surface in 3-D: the
    sample keeps ``pos [N, 3]`` and gets area weights (:mod:`~geoattn.mesh.surface`).

    Args:
        mesh: the mesh; its highest-dimensional cell blocks (one supported type) are kept, or
            those picked by ``cell_block``.
        x: point-data field name(s) stacked as input channels ``x [N, C_in]``.
        y: point-data field name(s) stacked as target channels ``y [N, C_out]``.
        weights: quadrature rule (see :func:`quadrature_weights`); ``"lumped"`` falls back to the
            point-cloud default when the mesh has no cells; ``None`` computes no weights.
        unused: handling of nodes in no cell: ``"warn"``, ``"error"`` or ``"ignore"``.
        reorient: reverse the vertex order of negatively oriented cells (triangles, quads,
            tetrahedra, hexahedra) instead of raising :class:`~geoattn.errors.InvertedCellError`;
            on a surface, orient every connected piece consistently with its lowest-numbered
            cell.
        merge_duplicates: merge nodes closer than this distance, relative to the bounding-box
            diagonal, into one (``True``: :data:`MERGE_TOL`; default ``None``: no merging, and
            coincident nodes raise :class:`~geoattn.errors.DuplicateNodeError`); see
            :func:`merge_nodes`. The number of nodes removed is logged and stored as
            ``data.merged_nodes``. When ``x`` or ``y`` is given only those fields must agree at
            merged nodes; another point field that differs there (an element-wise gradient or
            stress beside the solution) is left out of ``data.point_data``, with a logged note.
        cell_block: which cells to keep when the file has several blocks: a cell type name
            (``"triangle"``: every block of that type) or a block's index in ``mesh.cells``
            (default ``None``: the highest-dimensional blocks). Blocks that leave out nodes held by
            other blocks of the same or a higher dimension (the quads of a mixed triangle/quad
            mesh) are refused: the sample would cover part of the domain.
        triangulate: split every quad into two triangles (:func:`triangulate_quads`), so a mixed
            triangle/quad mesh is read whole as triangles (default ``False``).
        linearise: read higher-order cells (``triangle6``, ``tetra10``, ``quad9``, ...) as linear
            cells of their corner nodes, dropping the other nodes and their values
            (:func:`linearise_cells`; default ``False``).
        cell_to_point: cell fields to carry to the nodes (``True``: every cell field; or names),
            each as the volume-weighted average of the cells around a node
            (:func:`cell_field_to_nodes`). They become point fields of the same name (which ``x`` and
            ``y`` may then name) and leave ``cell_data``; a point field of that name is refused.
        box: domain box for the point-cloud rules.
        dtype: floating dtype of ``pos``, ``weight`` and fields (default: torch's default dtype).
        origin: a point ``[d]`` subtracted from the coordinates, in float64, before they are cast
            to ``dtype`` (default ``None``: none). Needed for coordinates far from the origin
            relative to the node spacing (geographic coordinates): in float32 they lose the
            differences between nodes, and such a mesh is refused unless an ``origin`` is given.
            Give every mesh of one domain the same origin (and scale), so that a model sees
            them in one frame.
        scale: a length the coordinates are divided by after subtracting ``origin`` (default
            ``None``: 1); the weights are then those of the scaled mesh (divided by
            ``scale ** d``). ``origin`` and ``scale`` are recorded as ``data.frame``, and
            :func:`to_meshio` writes the coordinates back in the original frame.

    Returns:
        ``MeshData`` with ``pos``, ``weight``, ``x``, ``y``, ``cells``, ``cell_type``,
        ``point_data`` (all other point fields) and ``cell_data`` (fields of the kept cells).

    Raises:
        CoordinateRangeError: the coordinates (after ``origin`` and ``scale``) overflow ``dtype``,
            or are so far from the origin that ``dtype`` cannot tell neighbouring nodes apart
            (:func:`cast_positions`); the message names the fix.
        WeightError: the weights underflow or overflow ``dtype`` (e.g. float16).
    """
    dtype = dtype or torch.get_default_dtype()
    if linearise:
        mesh = linearise_cells(mesh)
    if triangulate:
        mesh = triangulate_quads(mesh)
    ctype, cells, blocks = _top_cells(mesh) if cell_block is None else _chosen_block(mesh, cell_block)
    if cell_block is not None:
        _check_cover(mesh, blocks, cell_block)
    carried = _carried(mesh, cell_to_point, blocks)
    points = mesh.points
    point_data = {k: np.asarray(v) for k, v in mesh.point_data.items()}
    merged = None
    if merge_duplicates is not None and merge_duplicates is not False:
        if cells is not None:
            validate_cells(cells, len(points), ctype)  # before renumbering them
        tol = MERGE_TOL if merge_duplicates is True else merge_duplicates
        used = (set(_names(x)) | set(_names(y))) or None  # only the fields read must agree
        points, cells, point_data, merged = merge_nodes(points, cells, point_data, tol, checked=used)
    pos = _spatial_points(points, CELL_TYPES[ctype].dim if ctype else None)
    n = pos.shape[0]
    frame = None
    if origin is not None or scale is not None:
        pos, box, frame = _to_frame(pos, box, origin, scale)
    if cells is not None and reorient:
        validate_cells(cells, n, ctype, dim=pos.shape[1])  # before indexing pos with them
        cells = orient_surface(cells) if is_surface(ctype, pos.shape[1]) else orient_cells(pos, cells, ctype)
    validate_mesh(pos, cells, ctype, unused=unused)
    for name, values in carried.items():
        validate_field(name, values, len(cells), "cells")
        point_data[name] = cell_field_to_nodes(pos, cells, ctype, values)

    x_names, y_names = _names(x), _names(y)
    data = MeshData(pos=cast_positions(pos, dtype))
    if frame is not None:
        data.frame = frame
    if merged is not None:
        data.merged_nodes = merged
    data.x = _stack_fields(point_data, x_names, n, dtype)
    data.y = _stack_fields(point_data, y_names, n, dtype)
    if x_names:  # the channels' names, which to_meshio writes them under again
        data.x_names = tuple(x_names)
    if y_names:
        data.y_names = tuple(y_names)
    extra = {}
    for name, values in point_data.items():
        if name in x_names or name in y_names:
            continue
        validate_field(name, values, n)
        extra[name] = torch.as_tensor(values)
    data.point_data = extra
    if cells is not None:
        data.cells = torch.as_tensor(cells, dtype=torch.long)
        data.cell_type = ctype
        cell_data = {}
        for name, per_block in mesh.cell_data.items():
            if name in carried:
                continue
            values = np.concatenate([np.asarray(per_block[i]) for i in blocks])
            validate_field(name, values, len(cells), "cells")
            cell_data[name] = torch.as_tensor(values)
        data.cell_data = cell_data
    if weights is not None:
        rule = weights if (cells is not None or weights != "lumped") else None
        if rule is None and box is None:
            check_cloud_size(n, pos.shape[1])
        weight = quadrature_weights(pos, cells, ctype, rule=rule, box=box)  # float64, from float64
        data.weight = cast_weights(weight.numpy(), dtype)
    return data


#: A point cloud read without cells or a box takes its domain to be the nodes' bounding box, which
#: ``N`` nodes scattered over a ``d``-box span ``((N - 1) / (N + 1)) ** d`` of on average: a cloud
#: for which that is below this fraction is refused (2 nodes in 2-D would span 1/9 of it).
CLOUD_SPAN_MIN = 0.5


def check_cloud_size(n: int, d: int) -> None:
    """Refuse a point cloud of ``n`` nodes in ``d`` dimensions, read without cells or a box, whose
    bounding box would on average span less than :data:`CLOUD_SPAN_MIN` of its domain.

    Raises:
        TooFewNodesError: naming the count, the expected span and the ways out.
    """
    span = ((n - 1) / (n + 1)) ** d
    if span < CLOUD_SPAN_MIN:
        need = next(m for m in range(n, 10**6) if ((m - 1) / (m + 1)) ** d >= CLOUD_SPAN_MIN)
        raise TooFewNodesError(
            f"a point cloud of {n} node(s) in {d}-D without cells: its weights would be those of the nodes' "
            f"own bounding box, which {n} scattered nodes span only {span:.0%} of on average, so the "
            "weights would measure a fraction of the domain; write the file with its cells, give the "
            f"domain's box (box=[[lower...], [upper...]] to from_meshio / read_mesh), or sample at least {need} nodes")


#: A cast may move a node by at most this fraction of the distance to its nearest node (when
#: centring the coordinates would avoid it: a mesh far from the origin).
RESOLUTION_TOL = 1e-3
#: A cast of a mesh too fine for the dtype wherever it lies may move a node by at most this
#: fraction of the distance to its nearest node: two nodes can then neither merge nor cross.
CAST_MERGE_TOL = 0.25


def _to_frame(pos: np.ndarray, box, origin, scale) -> tuple[np.ndarray, object, tuple]:
    """``(pos - origin) / scale`` (and the same for ``box``) in float64, with the frame
    ``(origin, scale)`` as plain floats."""
    d = pos.shape[1]
    origin = np.zeros(d) if origin is None else np.asarray(origin, dtype=np.float64).reshape(-1)
    if origin.shape != (d,) or not np.isfinite(origin).all():
        raise DimensionError(f"origin must be {d} finite numbers for {d}-D nodes, got {origin.tolist()}")
    scale = 1.0 if scale is None else float(scale)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    if box is not None:
        box = (np.asarray(box, dtype=np.float64) - origin) / scale
    return (pos - origin) / scale, box, (tuple(origin.tolist()), scale)


def cast_positions(pos: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Float64 coordinates ``[N, d]`` as a tensor of ``dtype``, refusing a cast that loses them.

    A cast rounds each coordinate to the ``dtype``'s spacing at its magnitude (half a unit in the
    last place). That is refused when it could move a node by more than :data:`RESOLUTION_TOL`
    of the smallest distance between two nodes (coordinates far from the origin: the nodes of a
    mesh in geographic coordinates merge in float32), or when a coordinate overflows ``dtype``.

    Raises:
        CoordinateRangeError: naming the largest coordinate, the node spacing and the fix
            (``origin=`` / ``scale=``, or a wider dtype).
    """
    pos = validate_points(pos)
    info = torch.finfo(dtype)
    big = float(np.abs(pos).max())
    if big > info.max:
        raise CoordinateRangeError(
            f"coordinates reach {big:.3g}, out of the range of {dtype} (largest {info.max:.3g}): "
            "they are too large; rescale them (pass scale= to from_meshio / read_mesh, e.g. "
            f"scale={10 ** np.floor(np.log10(big)):.0e}) or read them in float64")
    if 0 < big < info.tiny:
        raise CoordinateRangeError(
            f"coordinates are at most {big:.3g}, below the range of {dtype} (smallest normal "
            f"{info.tiny:.3g}): they are too small; rescale them (pass scale= to from_meshio / "
            f"read_mesh, e.g. scale={10 ** np.floor(np.log10(big)):.0e})")
    if len(pos) > 1 and big > 0:
        from scipy.spatial import cKDTree

        centre, side = unit_frame(pos)
        local = (pos - centre) / side  # distances without underflow or overflow of their squares
        near = side * cKDTree(local).query(local, k=2)[0][:, 1]  # each node's nearest distance

        def ulp(x: np.ndarray) -> np.ndarray:  # half the dtype's spacing at each node's largest coordinate
            top = np.abs(x).max(axis=1)
            return np.where(top > 0, 0.5 * info.eps * 2.0 ** np.ceil(np.log2(np.where(top > 0, top, 1.0))), 0.0)

        ratio = np.where(near > 0, ulp(pos) / np.where(near > 0, near, 1.0), 0.0)  # coincident: validate_mesh's
        worst = int(np.argmax(ratio))
        spacing, rounding = float(near[worst]), float(ulp(pos[worst:worst + 1])[0])
        mid = (pos.min(axis=0) + pos.max(axis=0)) / 2
        centred = float(np.max(np.where(near > 0, ulp(pos - mid) / np.where(near > 0, near, 1.0), 0.0)))
        # far from the origin (centring helps): refused beyond RESOLUTION_TOL of the local spacing;
        # a graded mesh too fine for the dtype wherever it lies: refused only where nodes could merge or cross
        allowed = RESOLUTION_TOL if centred <= RESOLUTION_TOL or info.bits < 32 else CAST_MERGE_TOL
        if ratio[worst] > allowed:
            centre = mid
            wider = "float32 or float64 (dtype=...)" if info.bits < 32 else "float64 (dtype=torch.float64)"
            fix = (f"the mesh is too fine for {dtype} wherever it lies: read it in {wider}"
                   if centred > allowed else
                   "centre the coordinates in float64 before the cast: on the command line, import "
                   f"the files with geoattn import --origin {','.join(f'{v:.10g}' for v in centre)} (or "
                   "--origin auto; the model then applies it in geoattn predict); in Python, pass "
                   f"origin={[float(f'{v:.10g}') for v in centre]} to from_meshio / read_mesh (the same for "
                   "every mesh of this domain), or read in float64 (dtype=torch.float64)")
            raise CoordinateRangeError(
                f"coordinates reach {big:.6g}, and at node {worst} ({float(np.abs(pos[worst]).max()):.6g}) two "
                f"nodes are only {spacing:.3g} apart: {dtype} "
                f"rounds coordinates there by up to {rounding:.3g}, which moves nodes by "
                + (f"{rounding / spacing:.1%} of" if rounding < spacing else f"{rounding / spacing:.3g} times")
                + f" their spacing{' (merges them)' if rounding >= spacing / 2 else ''}; "
                f"{fix}")
    return torch.as_tensor(pos, dtype=dtype)


def _numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def to_meshio(data, point_data: Mapping[str, object] | None = None,
              cell_data: Mapping[str, object] | None = None) -> meshio.Mesh:
    """Convert a sample to a :class:`meshio.Mesh` (for writing to .vtu, .xdmf, .msh, ...).

    The point fields written are the sample's ``point_data``, its ``x`` and ``y`` and its
    ``weight``, then ``point_data`` given here (which wins on a name clash); likewise for cell
    fields. ``x`` and ``y`` are written under the names of the fields they were read from
    (``data.x_names``, ``data.y_names``, one field per channel), else as ``"input"`` and
    ``"target"``: never as ``"x"`` or ``"y"``, which ParaView's readers and filters take for
    coordinate arrays. Points keep their dimension. A sample read in a frame
    (``data.frame``, see :func:`from_meshio`) is written in the original coordinates, its
    weights in the original units.
    """
    import meshio

    pos = _numpy(data.pos)
    frame = getattr(data, "frame", None)
    if frame is not None:  # back to the coordinates the mesh was read in
        pos = pos.astype(np.float64) * frame[1] + np.asarray(frame[0])
    n = pos.shape[0]
    fields: dict[str, np.ndarray] = {k: _numpy(v) for k, v in (getattr(data, "point_data", None) or {}).items()}
    for key, default in (("x", "input"), ("y", "target")):
        values = getattr(data, key, None)
        if values is None:
            continue
        values, names = _numpy(values), getattr(data, f"{key}_names", None)
        columns = values.reshape(n, -1)
        if names and len(names) == columns.shape[1]:
            fields.update({name: columns[:, c] for c, name in enumerate(names)})
        else:
            fields[default] = values
    if getattr(data, "weight", None) is not None:
        fields["weight"] = _numpy(data.weight)
    if frame is not None and "weight" in fields:  # a weight is a volume: in the original units
        cells_dim = CELL_TYPES[data.cell_type].dim if getattr(data, "cells", None) is not None else pos.shape[1]
        fields["weight"] = fields["weight"].astype(np.float64) * frame[1] ** cells_dim
    fields.update({k: _numpy(v) for k, v in (point_data or {}).items()})
    for name, values in fields.items():
        validate_field(name, values, n)
    cells_attr = getattr(data, "cells", None)
    if cells_attr is None:
        if cell_data:
            raise FieldLengthError("cell_data given but the sample has no cells")
        return meshio.Mesh(pos, [("vertex", np.arange(n).reshape(-1, 1))], point_data=fields)
    cells = _numpy(cells_attr)
    cfields = {k: _numpy(v) for k, v in (getattr(data, "cell_data", None) or {}).items()}
    cfields.update({k: _numpy(v) for k, v in (cell_data or {}).items()})
    for name, values in cfields.items():
        validate_field(name, values, len(cells), "cells")
    return meshio.Mesh(pos, [(data.cell_type, cells)], point_data=fields,
                       cell_data={k: [v] for k, v in cfields.items()})


def read_meshio(path: str | Path) -> meshio.Mesh:
    """Read a mesh file with :func:`meshio.read`, turning every way it fails on a bad file into
    a :class:`~geoattn.errors.MeshFileError` that names the file and meshio's reason.

    meshio answers some bad files (an empty or truncated ``.vtu``) by printing its reason and
    calling ``sys.exit``, and others by whatever its parser raised (``ValueError``,
    ``UnicodeDecodeError``, XML ``ParseError``, ...). Here the ``SystemExit`` or exception is the
    chained cause, and what meshio printed while reading (its reasons on failure, warnings on
    success) goes to this module's logger instead of the console. The printing is captured with
    :func:`contextlib.redirect_stdout`, so output of other threads during a read lands there too.

    Raises:
        FileNotFoundError: no file at ``path``.
        MeshFileError: a folder, an extension meshio does not know, or a file meshio cannot parse.
    """
    import meshio

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no mesh file at {path}")
    if path.is_dir():
        raise MeshFileError(f"{path} is a folder, not a mesh file")
    suffixes = [s.lower() for s in path.suffixes]
    if not any("".join(suffixes[i:]) in meshio.extension_to_filetypes for i in range(len(suffixes))):
        vtk = {".vtp": "PolyData", ".vts": "StructuredGrid", ".vtr": "RectilinearGrid", ".vti": "ImageData",
               ".pvtu": "a parallel UnstructuredGrid"}.get(path.suffix.lower())
        raise MeshFileError(f"cannot read mesh file {path}: meshio knows no format for the extension "
                            f"{path.suffix or '(none)'!r}; use one such as .vtu, .msh or .xdmf"
                            + (f" (a VTK {vtk} file: pyvista reads it, and geoattn.mesh.from_pyvista takes "
                               "pyvista.read(path); or save it as .vtu with "
                               "pyvista.read(path).cast_to_unstructured_grid().save(...))" if vtk else ""))
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            try:
                mesh = meshio.read(path)
            except (SystemExit, Exception):
                mesh = _read_numpy_repr_msh(path)
                if mesh is None:
                    raise
    except (SystemExit, Exception) as err:
        said = "; ".join(line.strip().removeprefix("Error: ") for line in printed.getvalue().splitlines()
                         if line.strip())
        reason = said if isinstance(err, SystemExit) else f"{type(err).__name__}: {err}"
        size = path.stat().st_size
        if _vtu_without_cells(path):
            raise MeshFileError(
                f"cannot read mesh file {path}: it has no cells (NumberOfCells=\"0\"), a point "
                "cloud meshio cannot read from .vtu. Write point clouds with one 'vertex' cell per "
                "node (geoattn.mesh.write_mesh does) or build the sample from the points with "
                "geoattn.mesh.quadrature_weights, whose point-cloud rules ('voronoi' with the "
                "domain's box, 'knn', 'monte_carlo') weigh nodes without cells") from err
        views = _gmsh_views(path)
        if views:
            raise MeshFileError(
                f"cannot read mesh file {path}: it holds gmsh post-processing views ({views}), which "
                "meshio reads only in simple cases (one time step, one value per node or cell); the "
                f"mesh itself may be fine. meshio: {(reason or type(err).__name__).rstrip('.')}. Save the mesh and the "
                "fields again from gmsh as one step each (or export to .vtu) and read that") from err
        hint = ("the file is empty" if size == 0 else
                f"{size} bytes: meshio could not parse it; a damaged or truncated file, not a "
                f"{path.suffix} file, or a part of the format meshio does not read")
        raise MeshFileError(f"cannot read mesh file {path} ({hint}); meshio: {reason or type(err).__name__}"
                            ) from err
    if printed.getvalue().strip():
        log.warning("meshio, reading %s: %s", path, printed.getvalue().strip())
    return mesh


#: a NumPy scalar's ``repr`` (``np.float64(0.5)``), as meshio's ASCII gmsh writer puts values in
#: ``$NodeData`` / ``$ElementData`` under NumPy 2
_NUMPY_REPR = re.compile(rb"np\.(?:float|int|uint)\d*\(([^()\s]*)\)")


def _read_numpy_repr_msh(path: Path) -> meshio.Mesh | None:
    """An ASCII gmsh file whose field values meshio wrote as NumPy reprs (``1 np.float64(0.5)``,
    meshio's writer under NumPy 2), read with the plain numbers; ``None`` for any other file.

    meshio's own reader cannot parse such a file (its fields' sections look truncated), though
    the numbers are all there: the text is repaired in a temporary copy, never in place."""
    import tempfile

    import meshio

    if path.suffix.lower() != ".msh":
        return None
    with open(path, "rb") as fh:
        text = fh.read()
    if not text.startswith(b"$MeshFormat") or not _NUMPY_REPR.search(text):
        return None
    with tempfile.TemporaryDirectory() as folder:
        repaired = Path(folder) / path.name
        repaired.write_bytes(_NUMPY_REPR.sub(rb"\1", text))
        mesh = meshio.read(repaired)
    log.info("%s: field values written as NumPy reprs (np.float64(...), meshio's ASCII gmsh writer under "
             "NumPy 2) read as plain numbers", path)
    return mesh


def _gmsh_views(path: Path) -> str:
    """The post-processing sections of a gmsh ``.msh`` file (``"2 $NodeData"``), or ``""``."""
    if path.suffix.lower() != ".msh":
        return ""
    with open(path, "rb") as fh:
        text = fh.read()
    found = {s: text.count(b"\n$" + s.encode()) for s in ("NodeData", "ElementData", "ElementNodeData")}
    return ", ".join(f"{k} ${s}" for s, k in found.items() if k)


def _vtu_without_cells(path: Path) -> bool:
    """Whether ``path`` is a .vtu file whose every piece declares ``NumberOfCells="0"``."""
    if path.suffix.lower() != ".vtu":
        return False
    with open(path, "rb") as fh:
        head = fh.read(1 << 16).decode("latin-1")
    counts = re.findall(r'NumberOfCells\s*=\s*"(\d+)"', head)
    return bool(counts) and all(c == "0" for c in counts)


def read_mesh(path: str | Path, **kwargs) -> MeshData:
    """Read any meshio-supported file into a validated :class:`MeshData` (see :func:`from_meshio`).

    Errors about the file (:func:`read_meshio`) and about the mesh in it (a
    :class:`~geoattn.errors.MeshError` from validation) name the file.
    """
    mesh = read_meshio(path)
    with located(str(path)):
        return from_meshio(mesh, **kwargs)


def _gmsh_fields(fields: Mapping[str, list]) -> dict[str, list]:
    """Split fields (lists of per-block arrays) whose component count gmsh refuses into scalars."""
    out = {}
    for name, blocks in fields.items():
        flat = [np.asarray(b).reshape(len(b), -1) for b in blocks]
        if flat[0].shape[1] in (1, 3, 9):
            out[name] = blocks
            continue
        for c in range(flat[0].shape[1]):
            out[f"{name}[{c}]"] = [b[:, c] for b in flat]
    return out


def save_meshio(path: str | Path, mesh: meshio.Mesh, **kwargs) -> None:
    """Write a :class:`meshio.Mesh` so that ParaView, XDMF and gmsh readers accept it.

    Points are padded with zero columns to 3-D. For gmsh files (``.msh``, written as binary
    ``gmsh22`` unless ``file_format`` is given) fields whose component count gmsh does not allow
    (it takes 1, 3 or 9) are split into scalar fields ``name[0]``, ``name[1]``, ..., and missing
    physical/geometrical tags are set to 1.
    """
    import meshio

    path = Path(path)
    points = mesh.points
    if points.shape[1] < 3:
        points = np.pad(points, ((0, 0), (0, 3 - points.shape[1])))
    point_data, cell_data = dict(mesh.point_data), dict(mesh.cell_data)
    if path.suffix == ".msh":
        kwargs = {"file_format": "gmsh22", "binary": True, **kwargs}

        point_data = {k: v[0] for k, v in _gmsh_fields({k: [v] for k, v in point_data.items()}).items()}
        cell_data = _gmsh_fields(cell_data)
        ones = [np.ones(len(b.data), dtype=int) for b in mesh.cells]
        cell_data.setdefault("gmsh:physical", ones)
        cell_data.setdefault("gmsh:geometrical", ones)
    meshio.write(path, meshio.Mesh(points, mesh.cells, point_data=point_data, cell_data=cell_data),
                 **kwargs)


def write_mesh(path: str | Path, data, point_data=None, cell_data=None, **kwargs) -> None:
    """Write a sample with meshio; the format follows the file extension (see :func:`save_meshio`)."""
    save_meshio(path, to_meshio(data, point_data, cell_data), **kwargs)


def from_pyvista(grid, x: str | Sequence[str] | None = None, y: str | Sequence[str] | None = None,
                 **kwargs) -> MeshData:
    """Convert a PyVista mesh (``UnstructuredGrid``, ``PolyData`` surface, ...) into a validated
    :class:`MeshData` sample through meshio (see :func:`from_meshio` for the keywords).

    Needs the ``pyvista`` extra.
    """
    pv = require("pyvista", "pyvista", "PyVista conversion")
    if not isinstance(grid, pv.UnstructuredGrid):
        grid = grid.cast_to_unstructured_grid()
    return from_meshio(pv.to_meshio(grid), x, y, **kwargs)


def to_pyvista(data, point_data: Mapping[str, object] | None = None,
               cell_data: Mapping[str, object] | None = None):
    """Convert a sample to a :class:`pyvista.UnstructuredGrid` (fields as in :func:`to_meshio`),
    points padded with zero columns to 3-D. Needs the ``pyvista`` extra."""
    pv = require("pyvista", "pyvista", "PyVista conversion")
    mesh = to_meshio(data, point_data, cell_data)
    if mesh.points.shape[1] < 3:
        mesh.points = np.pad(mesh.points, ((0, 0), (0, 3 - mesh.points.shape[1])))
    return pv.from_meshio(mesh)
