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
            f"the mesh mixes {top}-D cell types {types}; geoattn needs one cell type per mesh "
            "(split quads into triangles or hexahedra into tetrahedra first, or pick one type "
            "with cell_block=)"
        )
    if types[0] not in CELL_TYPES:
        raise UnsupportedCellError(
            f"unsupported cell type {types[0]!r}; supported types are {sorted(CELL_TYPES)} "
            "(higher-order cells: keep only their vertices with a linear cell type)"
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


def from_meshio(mesh: meshio.Mesh, x: str | Sequence[str] | None = None,
                y: str | Sequence[str] | None = None, *, weights: str | None = "lumped",
                unused: str = "warn", reorient: bool = False, box=None,
                dtype: torch.dtype | None = None, origin=None, scale: float | None = None,
                merge_duplicates: float | bool | None = None, cell_block: str | int | None = None
                ) -> MeshData:
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
            (default ``None``: the highest-dimensional blocks).
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
    ctype, cells, blocks = _top_cells(mesh) if cell_block is None else _chosen_block(mesh, cell_block)
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

    x_names, y_names = _names(x), _names(y)
    data = MeshData(pos=cast_positions(pos, dtype))
    if frame is not None:
        data.frame = frame
    if merged is not None:
        data.merged_nodes = merged
    data.x = _stack_fields(point_data, x_names, n, dtype)
    data.y = _stack_fields(point_data, y_names, n, dtype)
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
            values = np.concatenate([np.asarray(per_block[i]) for i in blocks])
            validate_field(name, values, len(cells), "cells")
            cell_data[name] = torch.as_tensor(values)
        data.cell_data = cell_data
    if weights is not None:
        rule = weights if (cells is not None or weights != "lumped") else None
        weight = quadrature_weights(pos, cells, ctype, rule=rule, box=box)  # float64, from float64
        data.weight = cast_weights(weight.numpy(), dtype)
    return data


#: A cast may move a node by at most this fraction of the smallest distance between two nodes.
RESOLUTION_TOL = 1e-3


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
        spacing = side * float(cKDTree(local).query(local, k=2)[0][:, 1].min())
        rounding = 0.5 * info.eps * 2.0 ** np.ceil(np.log2(big))  # half the dtype's spacing at big
        if rounding > RESOLUTION_TOL * spacing > 0:  # coincident nodes are validate_mesh's to refuse
            centre = (pos.min(axis=0) + pos.max(axis=0)) / 2
            half = float(np.abs(pos - centre).max())
            centred = 0.5 * info.eps * 2.0 ** np.ceil(np.log2(half)) if half > 0 else 0.0
            fix = (f"the mesh is too fine for {dtype} wherever it lies: read it in float32 or "
                   "float64 (dtype=...)" if centred > RESOLUTION_TOL * spacing else
                   "centre the coordinates in float64 before the cast: pass origin= to from_meshio "
                   f"/ read_mesh (e.g. origin={np.round(centre, 3).tolist()}, the same for every "
                   "mesh of this domain), or read in float64 (dtype=torch.float64)")
            raise CoordinateRangeError(
                f"coordinates reach {big:.6g} but two nodes are only {spacing:.3g} apart: {dtype} "
                f"rounds coordinates there by up to {rounding:.3g}, which moves nodes by "
                f"{rounding / spacing:.1%} of their spacing{' (merges them)' if rounding >= spacing / 2 else ''}; "
                f"{fix}")
    return torch.as_tensor(pos, dtype=dtype)


def _numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def to_meshio(data, point_data: Mapping[str, object] | None = None,
              cell_data: Mapping[str, object] | None = None) -> meshio.Mesh:
    """Convert a sample to a :class:`meshio.Mesh` (for writing to .vtu, .xdmf, .msh, ...).

    The point fields written are the sample's ``point_data``, its ``x`` and ``y`` (as fields
    ``"x"`` and ``"y"``) and its ``weight``, then ``point_data`` given here (which wins on a name
    clash); likewise for cell fields. Points keep their dimension. A sample read in a frame
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
    for key in ("x", "y", "weight"):
        if getattr(data, key, None) is not None:
            fields[key] = _numpy(data[key])
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
        raise MeshFileError(f"cannot read mesh file {path}: meshio knows no format for the extension "
                            f"{path.suffix or '(none)'!r}; use one such as .vtu, .msh or .xdmf")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            mesh = meshio.read(path)
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
        hint = ("the file is empty" if size == 0 else
                f"{size} bytes: truncated, corrupted or not a {path.suffix} file?")
        raise MeshFileError(f"cannot read mesh file {path} ({hint}); meshio: {reason or type(err).__name__}"
                            ) from err
    if printed.getvalue().strip():
        log.warning("meshio, reading %s: %s", path, printed.getvalue().strip())
    return mesh


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
