r"""Mesh-native multigrid neural operator: V-cycles on grids of the domain, read from the mesh by
Galerkin integrals and written back by interpolation.

The grids are regular grids over a box, given at construction or fitted to the training data
(:func:`covering_box`) and then part of the model, so they are the same on every mesh of the
domain; the mesh enters only through a pair of transfer operators that discretise fixed
continuum operators:

- :func:`restriction`: the :math:`\phi_c`-weighted cell averages
  :math:`\int_D \phi_c\, I_h h / \int_D \phi_c` of the piecewise-linear interpolant
  :math:`I_h h` of node values, integrated cell by cell (:func:`simplex_points`), and the covered
  fraction :math:`\int_D \phi_c / |c|` of each grid cell (:func:`restrict` applies it);
- :func:`prolong_to_nodes`: the grid function's interpolant :math:`\sum_c \phi_c(x_i)\, g_c` at
  the nodes, with :func:`grid_stencil` the cell-centred multilinear basis :math:`\phi_c` there.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import logging

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, MeshMismatchError
from ..mesh.boundary import boundary_distance
from ..mesh.mesh import Mesh
from ..mesh.validation import checked_number
from ..nn.functional import num_graphs as count_graphs
from ..nn.sparse import SparseProduct, block_diagonal, csr_matrix
from .base import NeuralOperator
from .encoder import CoordinateFeatures, PointwiseMLP

__all__ = ["GridStencil", "MultigridOperator", "Restriction", "SparseMap", "VCycle", "check_box", "covering_box", "grid_stencil",
           "prolong_to_nodes", "restrict", "restriction", "restriction_entries", "simplex_points",
           "sparse_map"]

#: what the first grid may see of the domain besides its covered fractions (``geometry=``)
GEOMETRY = (None, "distance")
#: margin of a fitted box on every side, as a fraction of the data's largest extent
BOX_MARGIN = 0.01
#: how far (as a fraction of the box's largest side) a node may lie outside the box and be read as
#: at its nearest point of the box
BOX_TOLERANCE = 1e-3

log = logging.getLogger(__name__)

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}
_CHANNELS_LAST = {2: torch.channels_last, 3: torch.channels_last_3d}


def check_box(box, dim: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The corners ``((a_1, ..., a_d), (b_1, ..., b_d))`` of ``box`` as floats, after checking
    them: ``dim`` finite numbers each with :math:`b_k > a_k`, else :class:`~geoattn.errors.ConfigError`."""
    try:
        corners = torch.as_tensor(box, dtype=torch.float64).detach().cpu()
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(f"box must be ((a_1, ..., a_d), (b_1, ..., b_d)), two rows of {dim} numbers; "
                          f"got {box!r}") from err
    if corners.shape != (2, dim):
        raise ConfigError(f"box must be ((a_1, ..., a_d), (b_1, ..., b_d)) with d={dim}: two rows of {dim} numbers; "
                          f"got shape {tuple(corners.shape)}: {box!r}")
    if not bool(torch.isfinite(corners).all()):
        raise ConfigError(f"box must have finite corners, got {corners.tolist()}")
    if not bool((corners[1] > corners[0]).all()):
        raise ConfigError(f"box must have b_k > a_k on every axis (a positive extent), got {corners.tolist()}")
    lo, hi = corners.tolist()
    return tuple(lo), tuple(hi)


def covering_box(pos: torch.Tensor, margin: float = BOX_MARGIN) -> tuple[tuple[float, ...], tuple[float, ...]]:
    r"""A box around the nodes ``pos [N, d]``: their bounding box grown by ``margin`` times its
    largest extent :math:`L` on every side, its corners rounded outwards to multiples of
    :math:`10^{\lfloor \log_{10} L \rfloor - 2}` (the unit square gives
    :math:`[-0.01, 1.01]^2`, :math:`[0, 2] \times [0, 1]` gives
    :math:`[-0.02, 2.02] \times [-0.02, 1.02]`). Nodes that all coincide raise
    :class:`~geoattn.errors.ConfigError`."""
    p = pos.detach().to(torch.float64)
    if p.shape[0] == 0 or not bool(torch.isfinite(p).all()):
        raise ConfigError("cannot fit the multigrid's box: the mesh has no nodes or non-finite coordinates")
    lo, hi = p.amin(0), p.amax(0)
    extent = float((hi - lo).max())
    if not extent > 0:
        raise ConfigError(f"cannot fit the multigrid's box to nodes that all lie at {lo.tolist()}: pass box=")
    digits = 2 - math.floor(math.log10(extent))
    step = 10.0 ** -digits

    def rounded(x: float, up: bool) -> float:
        q = round(x / step, 6)  # a corner at a multiple of the step stays there
        return round((math.ceil(q) if up else math.floor(q)) * step, max(digits, 0))

    a = tuple(rounded(float(x) - margin * extent, False) for x in lo)
    b = tuple(rounded(float(x) + margin * extent, True) for x in hi)
    return check_box((a, b), p.shape[1])


class GridStencil(NamedTuple):
    """The first grid's basis at the nodes: ``index [N, 2^d]`` (flat cell of every corner in the
    batch's grid stack ``[B, *shape]``), ``value [N, 2^d]`` (:math:`\\phi_c(x_i)`, summing to 1
    over a node's corners), the number of graphs ``num_graphs`` and the grid ``shape``."""

    index: torch.Tensor
    value: torch.Tensor
    num_graphs: int
    shape: tuple[int, ...]


def grid_stencil(pos: torch.Tensor, batch: torch.Tensor | None, box: torch.Tensor,
                 shape: Sequence[int], num_graphs: int | None = None) -> GridStencil:
    r"""The cell-centred multilinear basis of a grid over ``box`` at the nodes.

    The grid has ``shape[k]`` cells of side :math:`H_k = (b_k - a_k) / n_k` along axis ``k`` and
    one value per cell, at its centre :math:`a + (j + \tfrac12) H`. Its interpolant is
    multilinear between the centres and constant past the outer centres (to the box's faces), so
    the basis :math:`\phi_c` is a partition of unity on the box with :math:`\int \phi_c = |c|`
    for every cell. Nodes outside the box are read as at their nearest point of the box.

    Args:
        pos: ``[N, d]``.
        batch: graph index of each node ``[N]`` (``None``: one graph); each graph has its grid.
        box: ``[2, d]``, the corners :math:`a, b`.
        shape: cells per axis, each ``>= 2``.
        num_graphs: number of graphs ``B`` (default: from ``batch``, a read from the device;
            a :class:`~geoattn.mesh.Layout` knows it).

    Returns:
        :class:`GridStencil`; ``O(N 2^d)`` index arithmetic, no per-mesh structure.
    """
    d = pos.shape[1]
    size = torch.tensor(shape, device=pos.device)
    lo, side = box[0].to(pos), (box[1] - box[0]).to(pos) / size.to(pos)
    t = (pos - lo) / side - 0.5  # (N, d) in units of cells, 0 at the first centre
    first = torch.minimum(t.detach().floor().long().clamp(min=0), size - 2)  # (N, d)
    frac = (t - first).clamp(0, 1)  # (N, d)
    strides = [math.prod(shape[k + 1:]) for k in range(d)]
    graph = (torch.zeros(len(pos), dtype=torch.long, device=pos.device) if batch is None else batch)
    index, value = [], []
    for corner in itertools.product((0, 1), repeat=d):
        flat = graph * math.prod(shape)
        phi = torch.ones_like(frac[:, 0])
        for k, bit in enumerate(corner):
            flat = flat + (first[:, k] + bit) * strides[k]
            phi = phi * (frac[:, k] if bit else 1 - frac[:, k])
        index.append(flat)
        value.append(phi)
    b = count_graphs(batch) if num_graphs is None else num_graphs
    return GridStencil(torch.stack(index, 1), torch.stack(value, 1), b, tuple(shape))


class Restriction(NamedTuple):
    r"""The first grid's cell averages as one sparse map ``[B G, N]`` of node values, as its
    nonzero entries: ``rows``, ``cols`` and ``values`` :math:`\int_D \phi_c \lambda_i` (or
    :math:`w_i \phi_c(x_i)` without cells), and ``total [B G]``, its row sums
    :math:`\int_D \phi_c`."""

    rows: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    total: torch.Tensor
    num_graphs: int
    shape: tuple[int, ...]


def simplex_points(pos: torch.Tensor, cells: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""A Gauss-Legendre rule of :math:`k^d` points on every simplex, in collapsed coordinates
    (the cube :math:`[0, 1]^d` mapped onto the simplex, with its Jacobian): exact for polynomials
    of degree up to :math:`2k - d`, and converging as :math:`k^{-2}` for integrands that are only
    continuous with kinks (the grid's bases): ``(points [T k^d, d], weights [T k^d],
    barycentric [T k^d, d + 1])``, the points of cell ``t`` at rows ``t k^d ...``; the weights of
    a cell sum to its volume."""
    t_count, d = cells.shape[0], cells.shape[1] - 1
    x, w = np.polynomial.legendre.leggauss(k)
    nodes = torch.tensor((x + 1) / 2, dtype=pos.dtype, device=pos.device)
    t = torch.stack(torch.meshgrid(*(nodes,) * d, indexing="ij"), -1).reshape(-1, d)  # (k^d, d)
    w1 = torch.tensor(w / 2, dtype=pos.dtype, device=pos.device)
    wt = torch.stack(torch.meshgrid(*(w1,) * d, indexing="ij"), -1).reshape(-1, d).prod(1)  # (k^d,)
    lam, rest, jac = [], torch.ones_like(t[:, 0]), torch.ones_like(t[:, 0])
    for m in range(d):  # lambda_{m+1} = t_m prod_{l<m} (1 - t_l)
        lam.append(t[:, m] * rest)
        jac = jac * rest
        rest = rest * (1 - t[:, m])
    bary = torch.stack([rest, *lam], 1)  # (k^d, d + 1), lambda_0 = 1 - sum of the others
    corners = pos[cells]  # (T, d + 1, d)
    volume = torch.linalg.det(corners[:, 1:] - corners[:, :1]).abs() / math.factorial(d)  # (T,)
    points = torch.einsum("qv,tvd->tqd", bary, corners).reshape(-1, d)
    weights = (volume[:, None] * math.factorial(d) * (wt * jac)[None]).reshape(-1)
    return points, weights, bary.repeat(t_count, 1)


#: the kept restriction may take at most this many bytes unless ``max_bytes`` says otherwise
RESTRICTION_MAX_BYTES = 4 * 2**30
#: pieces integrated at once (bounds the build's working memory)
_CHUNK = 8192

# Cutting a simplex whose vertices are sorted by a coordinate f at a plane f = s with m vertices
# at or below it: slots 0..d are the sorted vertices, then the points p_ij (i < j) of the edges,
# in the order of itertools.combinations; each piece is d + 1 slots.
_PAIRS = {d: list(itertools.combinations(range(d + 1), 2)) for d in (1, 2, 3)}


def _slot(d: int, i: int, j: int) -> int:
    return d + 1 + _PAIRS[d].index((i, j))


def _prism(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, ...]]:
    """The prism with triangles ``a``, ``b`` (edges ``a_i b_i``) as three tetrahedra."""
    return [(a[0], a[1], a[2], b[0]), (a[1], a[2], b[0], b[1]), (a[2], b[0], b[1], b[2])]


def _cut_table(d: int) -> dict[int, list[tuple[int, ...]]]:
    p = functools.partial(_slot, d)
    if d == 1:
        return {1: [(0, p(0, 1)), (p(0, 1), 1)]}
    if d == 2:
        return {1: [(0, p(0, 1), p(0, 2)), (1, 2, p(0, 2)), (1, p(0, 2), p(0, 1))],
                2: [(0, 1, p(1, 2)), (0, p(1, 2), p(0, 2)), (2, p(0, 2), p(1, 2))]}
    return {1: [(0, p(0, 1), p(0, 2), p(0, 3))] + _prism((1, 2, 3), (p(0, 1), p(0, 2), p(0, 3))),
            2: _prism((0, p(0, 2), p(0, 3)), (1, p(1, 2), p(1, 3))) + _prism((2, p(0, 2), p(1, 2)), (3, p(0, 3), p(1, 3))),
            3: [(3, p(0, 3), p(1, 3), p(2, 3))] + _prism((0, 1, 2), (p(0, 3), p(1, 3), p(2, 3)))}


# Red refinement: slots 0..d the vertices, then the edges' midpoints (same order as _PAIRS).
def _red_tables(d: int) -> list[list[tuple[int, ...]]]:
    """The children of a simplex under red refinement, one table per choice of the inner
    octahedron's diagonal in 3-D (``m02-m13``, ``m01-m23``, ``m03-m12``)."""
    m = functools.partial(_slot, d)
    if d == 1:
        return [[(0, m(0, 1)), (m(0, 1), 1)]]
    if d == 2:
        return [[(0, m(0, 1), m(0, 2)), (1, m(1, 2), m(0, 1)), (2, m(0, 2), m(1, 2)), (m(0, 1), m(1, 2), m(0, 2))]]
    corners = [(0, m(0, 1), m(0, 2), m(0, 3)), (1, m(0, 1), m(1, 2), m(1, 3)), (2, m(0, 2), m(1, 2), m(2, 3)),
               (3, m(0, 3), m(1, 3), m(2, 3))]
    tables = []
    for (a, b), ring in (((m(0, 2), m(1, 3)), (m(0, 1), m(0, 3), m(2, 3), m(1, 2))),
                         ((m(0, 1), m(2, 3)), (m(0, 2), m(0, 3), m(1, 3), m(1, 2))),
                         ((m(0, 3), m(1, 2)), (m(0, 1), m(0, 2), m(2, 3), m(1, 3)))):
        tables.append(corners + [(a, b, ring[i], ring[(i + 1) % 4]) for i in range(4)])
    return tables


def _refine(simplices: torch.Tensor, parent: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Red refinement of ``simplices [S, d + 1, D]`` (first ``d`` columns the coordinates, the rest
    carried along linearly): ``2^d`` children each, the shortest octahedron diagonal in 3-D."""
    mids = torch.stack([(simplices[:, i] + simplices[:, j]) / 2 for i, j in _PAIRS[d]], 1)
    ext = torch.cat([simplices, mids], 1)  # (S, slots, D)
    tables = _red_tables(d)
    if len(tables) == 1:
        choice = torch.zeros(len(simplices), dtype=torch.long, device=simplices.device)
    else:
        lengths = torch.stack([(ext[:, t[-1][0], :d] - ext[:, t[-1][1], :d]).norm(dim=-1) for t in tables], 1)
        choice = lengths.argmin(1)
    out, parents = [], []
    for c, table in enumerate(tables):
        sel = choice == c
        index = torch.tensor(table, device=simplices.device)  # (children, d + 1)
        out.append(ext[sel][:, index].reshape(-1, d + 1, ext.shape[-1]))
        parents.append(parent[sel].repeat_interleave(len(table)))
    return torch.cat(out), torch.cat(parents)


def _cut(simplices: torch.Tensor, parent: torch.Tensor, axis: int, plane: torch.Tensor,
         d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut ``simplices [S, d + 1, D]`` (each crossing its ``plane``, a value of coordinate ``axis``)
    into simplices on either side; the cut points lie exactly on the plane."""
    f = simplices[:, :, axis]
    order = f.argsort(1)
    v = simplices.gather(1, order[:, :, None].expand_as(simplices))  # sorted by f: (S, d + 1, D)
    f = v[:, :, axis]
    points = []
    for i, j in _PAIRS[d]:
        gap = f[:, j] - f[:, i]
        lam = ((plane - f[:, i]) / torch.where(gap > 0, gap, 1)).clamp(0, 1)
        p = v[:, i] + lam[:, None] * (v[:, j] - v[:, i])
        p[:, axis] = plane
        points.append(p)
    ext = torch.cat([v, torch.stack(points, 1)], 1)  # (S, slots, D)
    below = (f <= plane[:, None]).sum(1)  # m, 1..d: a count of the simplex's corners  # quadrature-ok
    out, parents = [], []
    for m, table in _cut_table(d).items():
        sel = below == m
        index = torch.tensor(table, device=simplices.device)
        out.append(ext[sel][:, index].reshape(-1, d + 1, ext.shape[-1]))
        parents.append(parent[sel].repeat_interleave(len(table)))
    return torch.cat(out), torch.cat(parents)


def _pieces(u: torch.Tensor, parent: torch.Tensor, sizes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Simplices ``u [S, d + 1, D]`` whose first ``d`` columns are coordinates in units of the
    grid's cells (the centres at the integers ``0 .. n_k - 1``), cut into pieces each inside
    one box between neighbouring centres (or past the outer ones) on every axis: red-refined
    until no simplex spans more than one cell on any axis, then cut at the centres' planes."""
    d = u.shape[1] - 1
    done_u, done_p = [], []
    while len(u):
        extent = (u[:, :, :d].amax(1) - u[:, :, :d].amin(1)).amax(1)
        large = extent > 1
        done_u.append(u[~large])
        done_p.append(parent[~large])
        u, parent = _refine(u[large], parent[large], d) if bool(large.any()) else (u[:0], parent[:0])
    u, parent = torch.cat(done_u), torch.cat(done_p)
    for axis, n in enumerate(sizes):
        done_u, done_p = [], []
        while len(u):
            f = u[:, :, axis]
            plane = (f.amin(1).floor() + 1).clamp(min=0)  # the first centre above the lowest vertex
            cross = (plane < f.amax(1)) & (plane <= n - 1)
            done_u.append(u[~cross])
            done_p.append(parent[~cross])
            u, parent = _cut(u[cross], parent[cross], axis, plane[cross], d) if bool(cross.any()) else (u[:0], parent[:0])
        u, parent = torch.cat(done_u), torch.cat(done_p)
    return u, parent


@functools.lru_cache(maxsize=None)
def _piece_rule(d: int) -> tuple[np.ndarray, np.ndarray]:
    r"""A rule on the unit simplex exact for polynomials of degree :math:`d + 1` (the multilinear
    :math:`\phi_c` times the affine :math:`\lambda_i`): Gauss-Jacobi in collapsed coordinates,
    :math:`k = \lceil (d + 2) / 2 \rceil` points per axis (degree :math:`2k - 1`):
    ``(barycentric [k^d, d + 1], weights [k^d])``, the weights summing to 1."""
    from scipy.special import roots_jacobi

    k = math.ceil((d + 2) / 2)
    axes = []
    for m in range(d):  # the collapsed coordinate t_m carries the weight (1 - t_m)^(d - 1 - m)
        x, w = roots_jacobi(k, d - 1 - m, 0)
        axes.append(((x + 1) / 2, w / 2 ** (d - m)))
    t = np.stack(np.meshgrid(*(a[0] for a in axes), indexing="ij"), -1).reshape(-1, d)
    w = np.stack(np.meshgrid(*(a[1] for a in axes), indexing="ij"), -1).reshape(-1, d).prod(1)
    lam, rest = [], np.ones(len(t))
    for m in range(d):
        lam.append(t[:, m] * rest)
        rest = rest * (1 - t[:, m])
    return np.stack([rest, *lam], 1), w / w.sum()


def _integrate_pieces(u: torch.Tensor, parent: torch.Tensor, cells: torch.Tensor, sizes: Sequence[int],
                      cell_volume: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The entries :math:`\int_P \phi_c \lambda_i` of pieces ``u [P, d + 1, d + d + 1]`` (grid-unit
    coordinates, then the barycentric coordinates in the parent cell), exactly up to rounding:
    ``(rows, cols, values)``, ``P 2^d (d + 1)`` each."""
    d = len(sizes)
    mu, omega = (torch.as_tensor(a, dtype=u.dtype, device=u.device) for a in _piece_rule(d))
    coords, bary = u[:, :, :d], u[:, :, d:]
    volume = torch.linalg.det(coords[:, 1:] - coords[:, :1]).abs() * (cell_volume / math.factorial(d))  # (P,)
    size = torch.tensor(sizes, device=u.device)
    # the piece's grid box from its corners' centroid (a point inside it, not an integral)  # quadrature-ok
    first = torch.minimum(coords.mean(1).floor().long().clamp(min=0), size - 2)  # (P, d)  # quadrature-ok
    points = torch.einsum("qv,pvd->pqd", mu, coords)  # (P, Q, d)
    frac = (points - first[:, None]).clamp(0, 1)  # (P, Q, d)
    factors = torch.stack([1 - frac, frac], -1)  # (P, Q, d, 2): the 1-D hats of the box's two corners
    phi = factors[:, :, 0]
    for k in range(1, d):  # corners in the order of itertools.product((0, 1), repeat=d)
        phi = (phi[:, :, :, None] * factors[:, :, k, None, :]).reshape(len(u), len(omega), -1)  # (P, Q, 2^k)
    strides = torch.tensor([math.prod(sizes[k + 1:]) for k in range(d)], device=u.device)
    offsets = torch.tensor(list(itertools.product((0, 1), repeat=d)), device=u.device) @ strides  # (2^d,)
    rows = (first @ strides)[:, None] + offsets  # (P, 2^d)
    # int_P phi_c lambda_i = |P| sum_q omega_q phi_c(x_q) sum_v mu_qv bary_vi
    at_points = torch.einsum("qv,pvi->pqi", mu, bary)  # (P, Q, d + 1): the parent's lambda_i at the points
    vals = torch.bmm((phi * omega[:, None]).transpose(1, 2), at_points) * volume[:, None, None]  # (P, 2^d, d + 1)
    rows = rows[:, :, None].expand_as(vals)
    cols = cells[parent][:, None, :].expand_as(vals)
    return rows.reshape(-1), cols.reshape(-1), vals.reshape(-1)


def restriction_entries(pos: torch.Tensor, cells: torch.Tensor, box: torch.Tensor, shape: Sequence[int]) -> int:
    r"""An upper bound on the entries that :func:`restriction` keeps for the simplex ``cells``
    (and on those it holds while it builds them), computed in :math:`O(T d)` before building:

    .. math::
        E = (d + 1) \sum_T \prod_{k=1}^d \big(\min(\lfloor u^+_{Tk} \rfloor, n_k - 2)
            - \max(\lfloor u^-_{Tk} \rfloor, 0) + 2\big),

    :math:`u^\pm_{Tk}` the extreme coordinates of cell :math:`T` along axis :math:`k` in units of
    the grid's cells from the first centre (each piece of :math:`T` adds the :math:`2^d` corners
    of its box times the :math:`d + 1` nodes of :math:`T`). For a mesh whose cells are smaller than
    the grid's, :math:`E \le (d + 1)\, 3^d\, T`; for a mesh coarser than the grid, about
    :math:`(d + 1)` times the grid cells the domain covers."""
    d = pos.shape[1]
    size = torch.tensor(shape, device=pos.device)
    lo, side = box[0].to(pos), (box[1] - box[0]).to(pos) / size.to(pos)
    total = 0
    for start in range(0, len(cells), 2**20):
        u = (pos[cells[start:start + 2**20]] - lo) / side - 0.5  # (T, d + 1, d)
        a = u.amin(1).floor().long().clamp(min=0, max=None)
        b = torch.minimum(u.amax(1).floor().long(), size - 2)
        total += int(((b - torch.minimum(a, size - 2)).clamp(min=0) + 2).prod(1).sum())
    return (d + 1) * total


def _coalesced(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, size: int, n: int):
    m = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (size, n), check_invariants=True).coalesce()
    return m.indices(), m.values()


def restriction(pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor | None, box: torch.Tensor,
                shape: Sequence[int], points_per_cell: int | None = None, *,
                max_bytes: int | None = None) -> Restriction:
    r"""The map :math:`h \mapsto \big(\int_D \phi_c\, I_h h\big)_c` of one graph's node values
    to the first grid, with :math:`I_h h` the piecewise-linear interpolant on the mesh's simplex
    ``cells`` (the measure is then the cells' and ``weight`` is not read).

    The entries :math:`\int_T \phi_c \lambda_i` are exact integrals (to rounding) on every mesh,
    however coarse or fine against the grid: each cell is red-refined until it spans at most one
    grid cell per axis, then cut at the planes of the grid's cell centres (where :math:`\phi_c`
    has its kinks) into simplices inside one box of :math:`\phi_c`'s pieces, on which
    :math:`\phi_c \lambda_i` is a polynomial of degree :math:`d + 1` that a rule of
    :math:`\lceil (d + 2) / 2 \rceil^d` points integrates exactly. A mesh finer than the grid
    has about :math:`T (1 + 2 h / H)^d` pieces for cells of size :math:`h` and grid cells of
    size :math:`H`. The build runs in chunks of cells (its working memory is bounded by the
    chunk, a few tens of MiB) and keeps at most :func:`restriction_entries` entries, each an
    ``int64`` row and column and a value (24 bytes in float64, 20 in float32): a build whose
    bound exceeds ``max_bytes`` (default :data:`RESTRICTION_MAX_BYTES`) is refused with
    :class:`~geoattn.errors.TooLargeError` before any work.

    ``points_per_cell`` (an int) selects the former rule instead, kept for checkpoints of earlier
    releases: :func:`simplex_points` with ``k`` points per axis, ``k`` about ``points_per_cell``
    times the mesh's largest cell diameter over the grid's smallest side (``2 <= k <= 16``),
    whose error for the kinks of :math:`\phi_c` falls as ``points_per_cell ** -2``.

    Without simplex cells (``None``, or cells of another kind), the nodes' quadrature: entries
    :math:`w_i \phi_c(x_i)`."""
    size = math.prod(shape)
    if cells is None or cells.shape[1] != pos.shape[1] + 1:
        stencil = grid_stencil(pos, None, box, shape, 1)
        rows = stencil.index.reshape(-1)
        cols = torch.arange(len(pos), device=pos.device).repeat_interleave(stencil.index.shape[1])
        vals = (weight[:, None] * stencil.value).reshape(-1)
        (rows, cols), vals = _coalesced(rows, cols, vals, size, len(pos))
    else:
        d = pos.shape[1]
        entries = restriction_entries(pos, cells, box, shape)
        limit = RESTRICTION_MAX_BYTES if max_bytes is None else max_bytes
        need = entries * (16 + pos.element_size())
        if need > limit:
            from ..errors import TooLargeError

            raise TooLargeError(
                f"the multigrid restriction of a mesh of {len(cells)} cells onto a {'x'.join(map(str, shape))} grid "
                f"may keep up to {entries} entries ({need / 2**30:.2f} GiB), over the limit of {limit / 2**30:.2f} GiB; "
                "give the model a coarser first grid (grid=), or coarsen the mesh")
        parts = []
        if points_per_cell is None:
            side = (box[1] - box[0]).to(pos) / torch.tensor(shape, dtype=pos.dtype, device=pos.device)
            cell_volume = float(side.prod())
            eye = torch.eye(d + 1, dtype=pos.dtype, device=pos.device)
            step = max(1, _CHUNK // 8)
            for start in range(0, len(cells), step):
                chunk = cells[start:start + step]
                u = torch.cat([(pos[chunk] - box[0].to(pos)) / side - 0.5, eye.expand(len(chunk), -1, -1)], -1)
                pieces, parent = _pieces(u, torch.arange(len(chunk), device=pos.device), shape)
                index, values = pos.new_zeros(2, 0, dtype=torch.long), pos.new_zeros(0)
                for at in range(0, len(pieces), _CHUNK):  # merged as they come: at most the chunk's bound
                    r, c, v = _integrate_pieces(pieces[at:at + _CHUNK], parent[at:at + _CHUNK], chunk, shape,
                                                cell_volume)
                    index, values = _coalesced(torch.cat([index[0], r]), torch.cat([index[1], c]),
                                               torch.cat([values, v]), size, len(pos))
                parts.append((index, values))
        else:
            side = ((box[1] - box[0]) / torch.tensor(shape, dtype=pos.dtype, device=pos.device)).min()
            corners = pos[cells]
            diameter = (corners[:, :, None] - corners[:, None]).norm(dim=-1).amax()
            k = max(2, min(16, math.ceil(points_per_cell * float(diameter / side))))
            step = max(1, _CHUNK * 8 // k ** d)
            for start in range(0, len(cells), step):
                chunk = cells[start:start + step]
                points, w, bary = simplex_points(pos, chunk, k)
                stencil = grid_stencil(points, None, box, shape, 1)
                nodes = chunk.repeat_interleave(k ** d, 0)  # (Q, d + 1)
                c, v = stencil.index.shape[1], chunk.shape[1]
                rows = stencil.index[:, :, None].expand(-1, c, v).reshape(-1)
                cols = nodes[:, None, :].expand(-1, c, v).reshape(-1)
                vals = (w[:, None, None] * stencil.value[:, :, None] * bary[:, None, :]).reshape(-1)
                parts.append(_coalesced(rows, cols, vals, size, len(pos)))
        index = torch.cat([p[0] for p in parts], 1)
        (rows, cols), vals = _coalesced(index[0], index[1], torch.cat([p[1] for p in parts]), size, len(pos))
    total = torch.zeros(size, dtype=pos.dtype, device=pos.device).index_add_(0, rows, vals)
    # copies: the coalesced matrix's index and value tensors keep the uncoalesced storage alive
    # (every quadrature point's entries, hundreds of times the matrix), which a mesh's memo holds
    return Restriction(rows.clone(), cols.clone(), vals.clone(), total, 1, tuple(shape))


def restrict(h: torch.Tensor, op: Restriction, cell_volume: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(R h [B, C, *shape], kappa [B, 1, *shape])`` of :class:`Restriction` ``op`` (cells that the
    domain does not reach: 0 and 0)."""
    moment = h.new_zeros(len(op.total), h.shape[1]).index_add_(0, op.rows, op.values[:, None].to(h) * h[op.cols])
    mean = moment / torch.where(op.total > 0, op.total, 1)[:, None]
    grid = mean.reshape(op.num_graphs, *op.shape, -1).movedim(-1, 1)
    return grid, (op.total / cell_volume).reshape(op.num_graphs, 1, *op.shape)


def prolong_to_nodes(grid: torch.Tensor, stencil: GridStencil) -> torch.Tensor:
    r"""The grid function's interpolant at the nodes, :math:`\sum_c \phi_c(x_i)\, g_c`:
    ``grid [B, C, *shape]`` to ``[N, C]`` in :math:`O(N 2^d C)`."""
    flat = grid.movedim(1, -1).reshape(-1, grid.shape[1])  # (B G, C)
    return (flat[stencil.index] * stencil.value[:, :, None]).sum(1)  # (N, C)  # quadrature-ok: over the 2^d corners


class SparseMap(NamedTuple):
    r"""A constant linear map of ``size`` rows, as a CSR ``matrix`` with its ``transpose`` (CSR
    too, for the backward pass) and as its entries ``rows``, ``cols``, ``values`` (for compiled
    graphs, which take no sparse tensors): :meth:`MultigridOperator.restriction_map`
    (``[B G, N]``, the rows of :class:`Restriction` divided by their sums
    :math:`\int_D \phi_c`, zero rows where the domain does not reach) and
    :meth:`MultigridOperator.prolongation_map` (``[N, B G]``, the values of
    :func:`grid_stencil`). One sparse product each way replaces the gather and scatter of
    :func:`restrict` and :func:`prolong_to_nodes`, which dominate the transfers' time on a CPU."""

    matrix: torch.Tensor
    transpose: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    size: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``matrix @ x`` with ``x [n, C]``, differentiable in ``x`` (in a compiled graph a gather
        and an ``index_add``, which the compiler fuses)."""
        if torch.compiler.is_compiling():
            return x.new_zeros(self.size, x.shape[1]).index_add_(0, self.rows, self.values[:, None].to(x) * x[self.cols])
        if self.matrix.dtype != x.dtype:
            return SparseProduct.apply(self.matrix.to(x.dtype), self.transpose.to(x.dtype), x)
        return SparseProduct.apply(self.matrix, self.transpose, x)


def sparse_map(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> SparseMap:
    """The :class:`SparseMap` of the entries ``(rows, cols, values)`` (summed where repeated)."""
    matrix = csr_matrix(rows, cols, values, shape)  # coalesced: repeated entries summed
    rows = torch.repeat_interleave(torch.arange(shape[0], device=rows.device), matrix.crow_indices().diff())
    cols, values = matrix.col_indices(), matrix.values()
    return SparseMap(matrix, csr_matrix(cols, rows, values, shape[::-1]), rows, cols, values, shape[0])


def _join_maps(parts: list[SparseMap], row_starts: Sequence[int], col_starts: Sequence[int],
               shape: tuple[int, int]) -> SparseMap:
    """The block-diagonal :class:`SparseMap` of a batch's members (block ``k`` at rows
    ``row_starts[k]``, columns ``col_starts[k]``)."""
    return SparseMap(block_diagonal([p.matrix for p in parts], list(col_starts), shape[1]),
                     block_diagonal([p.transpose for p in parts], list(row_starts), shape[0]),
                     torch.cat([p.rows + r for p, r in zip(parts, row_starts)]),
                     torch.cat([p.cols + c for p, c in zip(parts, col_starts)]),
                     torch.cat([p.values for p in parts]), shape[0])


class _Smoother(nn.Sequential):
    r"""``steps`` residual convolutions :math:`g \leftarrow g + S(\sigma(g))` with a learned
    :math:`3^d` stencil :math:`S` (zero outside the box)."""

    def __init__(self, width: int, dim: int, steps: int):
        super().__init__(*(_CONV[dim](width, width, 3, padding=1) for _ in range(steps)))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        for conv in self:
            g = g + conv(F.gelu(g))
        return g


class VCycle(nn.Module):
    r"""One V-cycle on a grid stack: smoothing and :math:`2^d` averaging down to the coarsest of
    ``levels`` grids, smoothing there, then multilinear prolongation up, each level joining its
    own smoothed state from the way down (a :math:`1^d` convolution of the two) and smoothing
    again (MgNO, He et al., `ICLR 2024 <https://arxiv.org/abs/2310.19809>`_, with a U-Net's skips).

    Args:
        width: channels ``C``.
        dim: spatial dimension (1, 2 or 3).
        levels: grids, each half the previous one's cells per axis.
        smoothing: residual convolutions per level and direction: one number for every level, or
            one per level, the first grid's first.

    Shapes:
        - ``[B, C, *shape]`` to ``[B, C, *shape]``, every ``shape[k]`` divisible by
          ``2 ** (levels - 1)``.
    """

    def __init__(self, width: int, dim: int, levels: int, smoothing: int | Sequence[int]):
        super().__init__()
        self.dim = dim
        steps = tuple(smoothing) if isinstance(smoothing, (list, tuple)) else (smoothing,) * levels
        if len(steps) != levels:
            raise ConfigError(f"smoothing needs one number per level ({levels}), got {smoothing!r}")
        self.down = nn.ModuleList(_Smoother(width, dim, steps[k]) for k in range(levels - 1))
        self.coarsest = _Smoother(width, dim, steps[-1])
        self.merge = nn.ModuleList(_CONV[dim](2 * width, width, 1) for _ in range(levels - 1))
        self.up = nn.ModuleList(_Smoother(width, dim, steps[k]) for k in range(levels - 1))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        skips = []
        for smooth in self.down:
            g = smooth(g)
            skips.append(g)
            g = _POOL[self.dim](g, 2)  # 2^d averaging: (B, C, *shape / 2)
        g = self.coarsest(g)
        for merge, smooth, skip in zip(self.merge[::-1], self.up[::-1], skips[::-1]):
            g = F.interpolate(g, scale_factor=2, mode=_LINEAR[self.dim], align_corners=False)
            g = smooth(merge(torch.cat([skip, g], 1)))  # (B, C, *shape of the level)
        return g


class MultigridOperator(NeuralOperator, name="multigrid"):
    r"""A multigrid neural operator (after MgNO, He et al.,
    `ICLR 2024 <https://arxiv.org/abs/2310.19809>`_) whose fine level is the mesh and whose
    coarse levels are grids of the domain, so it is one operator on every mesh:

    .. math::
        g_0 = E(R\, L(u, x),\ \kappa), \qquad
        g_{\ell+1} = \sigma\big(W_\ell\, g_\ell + V_\ell\, g_\ell\big), \qquad
        \mathcal G(u)(x) = Q\big((P g_{\text{depth}})(x)\big),

    with :math:`L, Q` pointwise MLPs, :math:`E` and :math:`W_\ell` :math:`1^d` convolutions,
    :math:`\sigma` the GELU (none after the last block), :math:`V_\ell` a :class:`VCycle` on the
    grids of ``grid``, ``grid / 2``, ... cells per axis over ``box`` (learned :math:`3^d`
    smoothers, :math:`2^d` averaging down, multilinear prolongation up with skips), and

    .. math::
        (R h)_c = \frac{\int_D \phi_c\, I_h h\, dx}{\int_D \phi_c\, dx}, \qquad
        \kappa_c = \frac{1}{|c|}\int_D \phi_c\, dx, \qquad
        (P g)(x) = \sum_c \phi_c(x)\, g_c,

    where :math:`\phi_c` is the multilinear basis of the first grid's cell :math:`c`
    (:func:`grid_stencil`; a partition of unity on the box with :math:`\int \phi_c = |c|`),
    :math:`I_h h` the piecewise-linear interpolant of the lifted node values on the mesh's cells,
    :math:`\kappa` the part of the cell inside the domain :math:`D` (1 inside, less at the
    boundary of a domain that is not the box).

    **Discretisation.** The mesh enters twice. The restriction integrates :math:`\phi_c I_h h`
    cell by cell with a rule that resolves :math:`\phi_c` on every mesh (:func:`restriction`), so
    two meshes that carry the same piecewise-linear function give the same grid values up to the
    rule's second-order error, however coarse or fine the mesh is against the grid (a mesh without
    cells falls back to the nodes' quadrature :math:`\sum_i w_i \phi_c(x_i) h_i`). Everything
    after it is a fixed map of grid functions, and :math:`P` is evaluated exactly at the nodes;
    as the mesh refines the model converges to the operator above. The grids are fixed by ``box``
    and ``grid``, not by any mesh; the restriction matrix and the stencil of the nodes are kept in
    the :class:`~geoattn.mesh.Mesh`'s memo (for a batch, each member's in the member's), and nodes
    are never recognised by their coordinates. The transfers cost :math:`O(N 2^d C)` and
    :math:`O(E\, C)` for the :math:`E` entries of the restriction, the cycles
    :math:`O(G\, 3^d C^2)` for the :math:`G` cells of the first grid: linear in :math:`N`.

    **Memory per mesh.** The memo of a mesh of :math:`N` nodes and :math:`T` simplex cells holds
    the stencil, :math:`2^d N` indices and values (:math:`12 \cdot 2^d N` bytes in float32), and
    the restriction, at most :math:`E` entries of two ``int64`` indices and a value
    (:math:`20 E` bytes in float32) plus :math:`G` totals, with
    :math:`E \le (d + 1)\, 3^d\, T` when the cells are smaller than the grid's
    (:func:`restriction_entries` gives the bound for any mesh; a restriction over
    :data:`RESTRICTION_MAX_BYTES` is refused before it is built, naming ``grid``). Building it
    takes a bounded working set on top (chunks of cells).

    **Training.** The output :math:`Q(P g)` is a function between the nodes too, with as many
    values per channel as the first grid has cells. When that is about the number of nodes, a
    loss taken at the nodes alone leaves the output between them free, and a model fitted that
    way loses accuracy on any other mesh. Train it on the data's piecewise-linear interpolants
    at the nodes of the training mesh refined once (:func:`geoattn.data.refined_samples`), whose
    weighted nodal loss is the :math:`L^2(D)` error against the interpolant; or take the loss at
    those nodes with the inputs on the data's own mesh, ``model(x, mesh, query=fine)``
    (``fine``: :meth:`~geoattn.mesh.Mesh.refined`, the targets carried by its prolongation); or
    choose ``grid`` with a few nodes per cell of the first grid.

    **Cost.** A training step is mostly the first grid's :math:`3^d` convolutions and their
    backward pass; ``smoothing=(1, 2, ...)`` halves the first grid's convolutions. The transfers are
    sparse products (:class:`SparseMap`) built once per mesh.

    Args:
        in_channels: input function channels ``C_in``.
        out_channels: output function channels ``C_out``.
        dim: spatial dimension ``d``, 1, 2 or 3 (default ``2``).
        width: channels ``C`` (default ``32``).
        depth: blocks, one V-cycle each (default ``4``).
        grid: cells per axis of the first grid, an int or one per axis, each divisible by
            ``2 ** (levels - 1)`` and leaving at least 2 cells per axis on the coarsest grid
            (default ``16``).
        levels: grids per V-cycle (default ``3``: ``16, 8, 4`` cells per axis).
        smoothing: residual :math:`3^d` convolutions per level, on the way down and again on the
            way up: one number for every level (default ``2``), or one per level, the first
            grid's first (``(1, 2, 2)``: one on the first grid, where the convolutions cost most).
        box: corners ``((a_1, ..., a_d), (b_1, ..., b_d))`` of the box the grids cover, finite
            with :math:`b_k > a_k` (default ``None``: fitted to the training data, like a
            normaliser, at the first :meth:`fit_mesh`, which :class:`~geoattn.train.Trainer`
            calls with the first training mesh, or else at the first call: the nodes' bounding
            box with a margin of 1 % of its largest extent, rounded outwards,
            :func:`covering_box`). The box is part of the model (the buffer ``grid_box``, saved
            in checkpoints). A mesh with nodes outside it (by more than 0.1 % of its largest
            side) is refused with :class:`~geoattn.errors.MeshMismatchError`: the grids say
            nothing there.
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).
        points_per_cell: ``None`` (default): the restriction's integrals over the cells are exact;
            an integer: the former Gauss rule of about that many points per grid cell and axis
            (:func:`restriction`), which checkpoints of earlier releases load with (8).
        geometry: ``None`` (default): the first grid sees the domain through :math:`\kappa`
            only; ``"distance"``: also through the distance :math:`\delta_c` of each cell's
            centre to the mesh's boundary (:func:`~geoattn.mesh.boundary.boundary_distance`,
            over the box's largest side), a further input channel of :math:`E`. It tells the
            cycles how far every cell is from a wall, however far past the first grid's cells
            that is; it needs the mesh's cells, and is the same function on every mesh of a
            polygonal domain.

    Shapes:
        - input: ``x [N, C_in]`` on ``mesh``, a :class:`~geoattn.mesh.Mesh` of ``N`` nodes in
          ``d`` dimensions (one mesh or a batch, :meth:`~geoattn.mesh.Mesh.batch`; each graph has
          its own grid stack): ``model(x, mesh)``; optionally ``query``, another mesh with
          one graph per graph of ``mesh``, inside the box: the output function read at its nodes
          (``model(x, mesh, query=fine)``, e.g. to take a loss between the nodes of ``mesh``).
        - output: ``[N, C_out]`` (``[Nq, C_out]`` with a query).
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 32,
                 depth: int = 4, grid: int | Sequence[int] = 16, levels: int = 3,
                 smoothing: int | Sequence[int] = 2,
                 box: Sequence[Sequence[float]] | None = None, coordinate_features: dict | None = None,
                 points_per_cell: int | None = None, geometry: str | None = None):
        super().__init__()
        if geometry not in GEOMETRY:
            raise ConfigError(f"geometry must be one of {GEOMETRY}, got {geometry!r}")
        if dim not in _CONV:
            raise ConfigError(f"MultigridOperator supports dim 1, 2 or 3, got {dim}")
        sizes = tuple(grid) if isinstance(grid, (list, tuple)) else (grid,) * dim
        shape = tuple(checked_number("grid", n, integer=True) for n in sizes)  # 8.5 or True: refused
        levels = checked_number("levels", levels, integer=True)
        steps = tuple(smoothing) if isinstance(smoothing, (list, tuple)) else (smoothing,) * max(levels, 1)
        steps = tuple(checked_number("smoothing", k, integer=True, positive=False) for k in steps)
        if len(shape) != dim or levels < 1 or len(steps) != levels or min(steps) < 0 or depth < 1 or any(
                n < 2 or n % 2 ** (levels - 1) or n // 2 ** (levels - 1) < 2 and levels > 1 for n in shape):
            raise ConfigError(f"need one grid size per axis (dim={dim}), each >= 2, divisible by 2 ** (levels - 1) "
                              f"and leaving >= 2 cells on the coarsest grid, levels >= 1, depth >= 1 and "
                              f"smoothing >= 0 (one number, or one per level); got grid={grid}, levels={levels}, depth={depth}, smoothing={smoothing}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.shape, self.levels = shape, levels
        if points_per_cell is not None and (isinstance(points_per_cell, bool) or not isinstance(points_per_cell, int)
                                            or points_per_cell < 1):
            raise ConfigError(f"points_per_cell must be None or an integer >= 1, got {points_per_cell!r}")
        self.points_per_cell = points_per_cell
        self.geometry = geometry
        self.box: tuple | None = None  # the corners as floats, once fixed (the buffer's host copy)
        self.cell_volume = math.nan
        self.register_buffer("grid_box", torch.zeros(2, dim, dtype=torch.float64))  # zeros: not fixed yet
        if box is not None:
            self.set_box(box)
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, 2 * width, width)
        self.enter = _CONV[dim](width + 1 + (geometry is not None), width, 1)
        self.cycles = nn.ModuleList(VCycle(width, dim, levels, steps) for _ in range(depth))
        self.linears = nn.ModuleList(_CONV[dim](width, width, 1) for _ in range(depth))
        self.project = PointwiseMLP(width, 2 * width, out_channels)

    # -- the box as model state ---------------------------------------------------------------
    def set_box(self, box) -> None:
        """Make ``box`` (``((a_1, ..., a_d), (b_1, ..., b_d))``, checked by :func:`check_box`)
        the box the grids cover."""
        self.box = check_box(box, self.dim)
        self.cell_volume = math.prod((b - a) / n for a, b, n in zip(*self.box, self.shape))  # a first grid's cell
        self.grid_box = torch.tensor(self.box, dtype=torch.float64, device=self.grid_box.device)

    def fit_mesh(self, mesh: Mesh) -> None:
        """Fix the box to the training :class:`~geoattn.mesh.Mesh` (all its graphs, for a batch):
        :func:`covering_box` of its nodes, unless the box is already fixed (given, fitted or
        loaded; see :class:`~geoattn.models.NeuralOperator`)."""
        if not isinstance(mesh, Mesh):
            raise TypeError(f"MultigridOperator.fit_mesh takes the training geoattn.mesh.Mesh, got {type(mesh).__name__}")
        if self.box is None:
            self.set_box(covering_box(mesh.pos))
            log.info("multigrid box fitted to the training mesh: %s", self.box)

    def _apply(self, fn, *args, **kwargs):
        box = self.grid_box
        out = super()._apply(fn, *args, **kwargs)
        self.grid_box = box.to(self.grid_box.device)  # moved, never cast: the box stays float64
        return out

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        name = f"{prefix}grid_box"
        if name not in state_dict:  # a checkpoint of a release without the buffer: its box, by default the unit cube
            box = self.box or ((0.0,) * self.dim, (1.0,) * self.dim)
            state_dict[name] = torch.tensor(box, dtype=torch.float64)
            self.hparams["box"] = box
            self.points_per_cell = self.hparams["points_per_cell"] = 8  # and its restriction's rule
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        corners = self.grid_box.detach().cpu()
        if bool((corners[1] > corners[0]).all()):
            self.set_box(corners)
        else:
            self.box = None

    def check_inside(self, mesh: Mesh) -> None:
        """Raise :class:`~geoattn.errors.MeshMismatchError` when nodes of ``mesh`` lie outside the
        box by more than ``BOX_TOLERANCE`` times its largest side, naming how far and the fix.
        The mesh's bounding box is kept in its memo (read from the device once per mesh)."""
        def bounds(m: Mesh) -> tuple:
            p = m.pos.detach()
            return tuple(p.amin(0).tolist()), tuple(p.amax(0).tolist()), m.num_nodes

        def join(batch: Mesh, parts: list) -> tuple:
            return (tuple(map(min, zip(*(p[0] for p in parts)))), tuple(map(max, zip(*(p[1] for p in parts)))),
                    sum(p[2] for p in parts))

        lo, hi, _ = mesh.structure(("bounds",), bounds, join)
        a, b = self.box
        side = max(y - x for x, y in zip(a, b))
        below = [x - p for x, p in zip(a, lo)]
        above = [p - y for y, p in zip(b, hi)]
        far = max(below + above)
        if far <= BOX_TOLERANCE * side:
            return
        axis = (below + above).index(far) % self.dim
        p = mesh.pos.detach()
        outside = ((p < torch.tensor(a, dtype=p.dtype, device=p.device) - BOX_TOLERANCE * side)
                   | (p > torch.tensor(b, dtype=p.dtype, device=p.device) + BOX_TOLERANCE * side)).any(1)
        raise MeshMismatchError(
            f"{int(outside.sum())} of {mesh.num_nodes} nodes lie outside the box {[list(a), list(b)]} that the "
            f"multigrid's grids cover, by up to {far:.4g} along axis {axis} ({100 * far / side:.3g} % of the box's "
            f"size; the mesh spans {[list(lo), list(hi)]}). The box was fixed on the training data; the model "
            "knows nothing outside it. Bring the mesh into the box (the same units and placement as the "
            "training data), or train a model on data that covers this domain (or give box= to cover it)")

    def stencil(self, mesh: Mesh) -> GridStencil:
        """The first grid's basis at the nodes (:func:`grid_stencil` on the model's box), kept in
        the memo of ``mesh`` (for a batch, each member's in the member's; built now, not kept,
        while the coordinates carry gradients)."""
        if mesh.pos.requires_grad and torch.is_grad_enabled():  # the stencil's values depend on pos
            return grid_stencil(mesh.pos, mesh.batch_vector, self._box(mesh), self.shape, mesh.num_graphs)
        key = ("multigrid.stencil", self.box, self.shape)

        def one(m: Mesh) -> GridStencil:
            return grid_stencil(m.pos, None, self._box(m), self.shape, 1)

        def join(batch: Mesh, parts: list) -> GridStencil:
            cells = math.prod(self.shape)
            return GridStencil(torch.cat([p.index + g * cells for g, p in enumerate(parts)]),
                               torch.cat([p.value for p in parts]), len(parts), self.shape)

        return mesh.structure(key, one, join)

    def restriction(self, mesh: Mesh) -> Restriction:
        """The first grid's :func:`restriction` of ``mesh`` (for a batch, the members' stacked
        block by block), kept in the memo."""
        key = ("multigrid.restriction", self.box, self.shape, self.points_per_cell)

        def one(m: Mesh) -> Restriction:
            return restriction(m.pos.detach(), m.weight.detach(), m.cells, self._box(m), self.shape,
                               self.points_per_cell)

        def join(batch: Mesh, parts: list) -> Restriction:
            cells, nodes = math.prod(self.shape), batch.layout.offsets
            return Restriction(torch.cat([p.rows + g * cells for g, p in enumerate(parts)]),
                               torch.cat([p.cols + n for p, n in zip(parts, nodes)]),
                               torch.cat([p.values for p in parts]), torch.cat([p.total for p in parts]),
                               len(parts), self.shape)

        return mesh.structure(key, one, join)

    def restriction_map(self, mesh: Mesh) -> SparseMap:
        """:meth:`restriction` as the :class:`SparseMap` of the cell averages, ``[B G, N]``, kept
        in the memo (for a batch, each member's in the member's, joined block by block)."""
        key = ("multigrid.restriction_map", self.box, self.shape, self.points_per_cell)
        cells = math.prod(self.shape)

        def one(m: Mesh) -> SparseMap:
            op = self.restriction(m)
            values = op.values / torch.where(op.total > 0, op.total, 1)[op.rows]
            return sparse_map(op.rows, op.cols, values, (cells, m.num_nodes))

        def join(batch: Mesh, parts: list) -> SparseMap:
            return _join_maps(parts, [g * cells for g in range(len(parts))], batch.layout.offsets,
                              (len(parts) * cells, batch.num_nodes))

        return mesh.structure(key, one, join)

    def coverage(self, mesh: Mesh) -> torch.Tensor:
        r"""The covered fractions :math:`\kappa_c` ``[B G]`` of :meth:`restriction`, kept in the memo."""
        key = ("multigrid.coverage", self.box, self.shape, self.points_per_cell)
        return mesh.structure(key, lambda m: self.restriction(m).total / self.cell_volume,
                              lambda batch, parts: torch.cat(parts))

    def boundary_distance(self, mesh: Mesh) -> torch.Tensor:
        r"""The distances :math:`\delta_c` ``[B G]`` of the first grid's cell centres to the
        boundary of each graph's mesh, over the box's largest side, kept in the memo
        (``geometry="distance"``)."""
        if mesh.cells is None:
            raise ConfigError("geometry='distance' needs the mesh's cells, which define its boundary; this mesh "
                              "has none (give the cells, or build the model with geometry=None)")
        key = ("multigrid.distance", self.box, self.shape)
        a, b = self.box
        side = max(y - x for x, y in zip(a, b))
        axes = [a_k + (torch.arange(n, dtype=torch.float64) + 0.5) * (b_k - a_k) / n
                for a_k, b_k, n in zip(a, b, self.shape)]
        centres = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, self.dim)  # C order

        def one(m: Mesh) -> torch.Tensor:
            dist = boundary_distance(m.pos.detach().cpu().double().numpy(), m.cells.cpu().numpy(), centres.numpy())
            return torch.as_tensor(dist / side, dtype=m.pos.dtype, device=m.pos.device)

        return mesh.structure(key, one, lambda batch, parts: torch.cat(parts))

    def prolongation_map(self, mesh: Mesh) -> SparseMap:
        """:meth:`stencil` as the :class:`SparseMap` of the interpolation to the nodes,
        ``[N, B G]``, kept in the memo like :meth:`restriction_map`."""
        key = ("multigrid.prolongation_map", self.box, self.shape)
        cells = math.prod(self.shape)

        def one(m: Mesh) -> SparseMap:
            st = self.stencil(m)
            rows = torch.arange(m.num_nodes, device=st.index.device).repeat_interleave(st.index.shape[1])
            return sparse_map(rows, st.index.reshape(-1), st.value.reshape(-1), (m.num_nodes, cells))

        def join(batch: Mesh, parts: list) -> SparseMap:
            return _join_maps(parts, batch.layout.offsets, [g * cells for g in range(len(parts))],
                              (batch.num_nodes, len(parts) * cells))

        return mesh.structure(key, one, join)

    def _box(self, mesh: Mesh) -> torch.Tensor:
        return torch.tensor(self.box, dtype=mesh.pos.dtype, device=mesh.pos.device)

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        self.check_call(x, mesh)
        if self.box is None:  # neither given nor fitted: fitted to this (first) mesh
            self.fit_mesh(mesh)
        out = mesh if query is None else query
        if query is not None and (not isinstance(query, Mesh) or query.num_graphs != mesh.num_graphs):
            raise MeshMismatchError(
                f"the query must be a geoattn.mesh.Mesh with one graph per graph of the input mesh "
                f"({mesh.num_graphs}); got {query!r}")
        if not torch.compiler.is_compiling():
            self.check_inside(mesh)
            if query is not None:
                self.check_inside(query)
        h = self.lift(self.inputs(x, mesh.pos))  # (N, C)
        # the kept sparse maps where the transfers are constants (not while the coordinates carry
        # gradients: the stencil's values depend on them)
        constant = not (torch.is_grad_enabled() and (mesh.pos.requires_grad or out.pos.requires_grad))
        b = mesh.num_graphs
        if constant:
            mean = self.restriction_map(mesh)(h).reshape(b, *self.shape, -1).movedim(-1, 1)  # (B, C, *shape)
            coverage = self.coverage(mesh).to(h.dtype).reshape(b, 1, *self.shape)
        else:
            mean, coverage = restrict(h, self.restriction(mesh), self.cell_volume)  # (B, C | 1, *shape)
        if self.geometry == "distance":
            distance = self.boundary_distance(mesh).to(h.dtype).reshape(b, 1, *self.shape)
            coverage = torch.cat([coverage, distance], 1)
        g = self.enter(torch.cat([mean, coverage], 1))  # (B, C, *shape)
        if self.dim > 1:  # the convolutions' fast layout on a CPU (channels last); the same values
            g = g.contiguous(memory_format=_CHANNELS_LAST[self.dim])
        for k, (cycle, linear) in enumerate(zip(self.cycles, self.linears)):
            g = linear(g) + cycle(g)
            if k < len(self.cycles) - 1:
                g = F.gelu(g)
        if constant:
            flat = g.movedim(1, -1).reshape(-1, g.shape[1])  # (B G, C)
            return self.project(self.prolongation_map(out)(flat))  # (N | Nq, C_out)
        return self.project(prolong_to_nodes(g, self.stencil(out)))  # (N | Nq, C_out)

    def extra_repr(self) -> str:
        geometry = "" if self.geometry is None else f", geometry={self.geometry!r}"
        return f"grid={self.shape}, levels={self.levels}, box={self.box}{geometry}"
