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
from ..mesh.mesh import Mesh
from ..nn.functional import num_graphs as count_graphs
from .base import NeuralOperator
from .encoder import CoordinateFeatures, PointwiseMLP

__all__ = ["GridStencil", "MultigridOperator", "Restriction", "VCycle", "check_box", "covering_box", "grid_stencil",
           "prolong_to_nodes", "restrict", "restriction", "simplex_points"]

#: margin of a fitted box on every side, as a fraction of the data's largest extent
BOX_MARGIN = 0.01
#: how far (as a fraction of the box's largest side) a node may lie outside the box and be read as
#: at its nearest point of the box
BOX_TOLERANCE = 1e-3

log = logging.getLogger(__name__)

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


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


def restriction(pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor | None, box: torch.Tensor,
                shape: Sequence[int], points_per_cell: int = 8) -> Restriction:
    r"""The map :math:`h \mapsto \big(\int_D \phi_c\, I_h h\big)_c` of one graph's node values
    to the first grid, with :math:`I_h h` the piecewise-linear interpolant on the mesh's simplex
    ``cells``, integrated by :func:`simplex_points` with ``k >= 2`` points per axis (exact for
    the affine :math:`\lambda_i`), ``k`` chosen so that the points are about ``points_per_cell``
    times as dense as the grid's cells (so the rule
    resolves :math:`\phi_c` on every mesh, however coarse or fine against the grid: the rule's
    error for the kinks of :math:`\phi_c` falls as ``points_per_cell ** -2``, and once the cells
    are finer than that, as :math:`h^2`); the measure
    is then the cells' and ``weight`` is not read. Without simplex cells (``None``, or cells of
    another kind), the nodes' quadrature: entries :math:`w_i \phi_c(x_i)`."""
    size = math.prod(shape)
    if cells is None or cells.shape[1] != pos.shape[1] + 1:
        stencil = grid_stencil(pos, None, box, shape, 1)
        rows = stencil.index.reshape(-1)
        cols = torch.arange(len(pos), device=pos.device).repeat_interleave(stencil.index.shape[1])
        vals = (weight[:, None] * stencil.value).reshape(-1)
    else:
        side = ((box[1] - box[0]) / torch.tensor(shape, dtype=pos.dtype, device=pos.device)).min()
        corners = pos[cells]
        diameter = (corners[:, :, None] - corners[:, None]).norm(dim=-1).amax()
        k = max(2, min(16, math.ceil(points_per_cell * float(diameter / side))))
        points, w, bary = simplex_points(pos, cells, k)
        stencil = grid_stencil(points, None, box, shape, 1)
        per = k ** (cells.shape[1] - 1)
        nodes = cells.repeat_interleave(per, 0)  # (Q, d + 1)
        c, v = stencil.index.shape[1], cells.shape[1]
        rows = stencil.index[:, :, None].expand(-1, c, v).reshape(-1)
        cols = nodes[:, None, :].expand(-1, c, v).reshape(-1)
        vals = (w[:, None, None] * stencil.value[:, :, None] * bary[:, None, :]).reshape(-1)
    matrix = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (size, len(pos)), check_invariants=True).coalesce()
    total = torch.zeros(size, dtype=pos.dtype, device=pos.device).index_add_(0, rows, vals)
    # copies: the coalesced matrix's index and value tensors keep the uncoalesced storage alive
    # (every quadrature point's entries, hundreds of times the matrix), which a mesh's memo holds
    (rows, cols), vals = matrix.indices().clone(), matrix.values().clone()
    return Restriction(rows, cols, vals, total, 1, tuple(shape))


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
        smoothing: residual convolutions per level and direction.

    Shapes:
        - ``[B, C, *shape]`` to ``[B, C, *shape]``, every ``shape[k]`` divisible by
          ``2 ** (levels - 1)``.
    """

    def __init__(self, width: int, dim: int, levels: int, smoothing: int):
        super().__init__()
        self.dim = dim
        self.down = nn.ModuleList(_Smoother(width, dim, smoothing) for _ in range(levels - 1))
        self.coarsest = _Smoother(width, dim, smoothing)
        self.merge = nn.ModuleList(_CONV[dim](2 * width, width, 1) for _ in range(levels - 1))
        self.up = nn.ModuleList(_Smoother(width, dim, smoothing) for _ in range(levels - 1))

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
    :math:`O(T k^d 2^d (d+1) C)` for :math:`T` cells, the cycles :math:`O(G\, 3^d C^2)` for the
    :math:`G` cells of the first grid: linear in :math:`N`.

    **Training.** The output :math:`Q(P g)` is a function between the nodes too, with as many
    values per channel as the first grid has cells. When that is about the number of nodes, a
    loss taken at the nodes alone leaves the output between them free, and a model fitted that
    way loses accuracy on any other mesh. Train it on the data's piecewise-linear interpolants
    at the nodes of the training mesh refined once (:func:`geoattn.data.refined_samples`), whose
    weighted nodal loss is the :math:`L^2(D)` error against the interpolant; or choose ``grid``
    with a few nodes per cell of the first grid.

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
            way up (default ``2``).
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

    Shapes:
        - input: ``x [N, C_in]`` on ``mesh``, a :class:`~geoattn.mesh.Mesh` of ``N`` nodes in
          ``d`` dimensions (one mesh or a batch, :meth:`~geoattn.mesh.Mesh.batch`; each graph has
          its own grid stack): ``model(x, mesh)``.
        - output: ``[N, C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 32,
                 depth: int = 4, grid: int | Sequence[int] = 16, levels: int = 3, smoothing: int = 2,
                 box: Sequence[Sequence[float]] | None = None, coordinate_features: dict | None = None):
        super().__init__()
        if dim not in _CONV:
            raise ConfigError(f"MultigridOperator supports dim 1, 2 or 3, got {dim}")
        shape = (grid,) * dim if isinstance(grid, int) else tuple(int(n) for n in grid)
        if len(shape) != dim or levels < 1 or smoothing < 0 or depth < 1 or any(
                n < 2 or n % 2 ** (levels - 1) or n // 2 ** (levels - 1) < 2 and levels > 1 for n in shape):
            raise ConfigError(f"need one grid size per axis (dim={dim}), each >= 2, divisible by 2 ** (levels - 1) "
                              f"and leaving >= 2 cells on the coarsest grid, levels >= 1, depth >= 1 and "
                              f"smoothing >= 0; got grid={grid}, levels={levels}, depth={depth}, smoothing={smoothing}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.shape, self.levels = shape, levels
        self.box: tuple | None = None  # the corners as floats, once fixed (the buffer's host copy)
        self.cell_volume = math.nan
        self.register_buffer("grid_box", torch.zeros(2, dim, dtype=torch.float64))  # zeros: not fixed yet
        if box is not None:
            self.set_box(box)
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, 2 * width, width)
        self.enter = _CONV[dim](width + 1, width, 1)
        self.cycles = nn.ModuleList(VCycle(width, dim, levels, smoothing) for _ in range(depth))
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
        key = ("multigrid.restriction", self.box, self.shape)

        def one(m: Mesh) -> Restriction:
            return restriction(m.pos.detach(), m.weight.detach(), m.cells, self._box(m), self.shape)

        def join(batch: Mesh, parts: list) -> Restriction:
            cells, nodes = math.prod(self.shape), batch.layout.offsets
            return Restriction(torch.cat([p.rows + g * cells for g, p in enumerate(parts)]),
                               torch.cat([p.cols + n for p, n in zip(parts, nodes)]),
                               torch.cat([p.values for p in parts]), torch.cat([p.total for p in parts]),
                               len(parts), self.shape)

        return mesh.structure(key, one, join)

    def _box(self, mesh: Mesh) -> torch.Tensor:
        return torch.tensor(self.box, dtype=mesh.pos.dtype, device=mesh.pos.device)

    def forward(self, x: torch.Tensor, mesh: Mesh) -> torch.Tensor:
        self.check_call(x, mesh)
        if self.box is None:  # neither given nor fitted: fitted to this (first) mesh
            self.fit_mesh(mesh)
        if not torch.compiler.is_compiling():
            self.check_inside(mesh)
        h = self.lift(self.inputs(x, mesh.pos))  # (N, C)
        mean, coverage = restrict(h, self.restriction(mesh), self.cell_volume)  # (B, C | 1, *shape)
        g = self.enter(torch.cat([mean, coverage], 1))  # (B, C, *shape)
        for k, (cycle, linear) in enumerate(zip(self.cycles, self.linears)):
            g = linear(g) + cycle(g)
            if k < len(self.cycles) - 1:
                g = F.gelu(g)
        return self.project(prolong_to_nodes(g, self.stencil(mesh)))  # (N, C_out)

    def extra_repr(self) -> str:
        return f"grid={self.shape}, levels={self.levels}, box={self.box}"
