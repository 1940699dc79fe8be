r"""Mesh-native multigrid neural operator: V-cycles on grids of the domain, read from and
written to the nodes by quadrature and interpolation.

The coarse levels are regular grids over a box fixed at construction, so they are the same on
every mesh of the domain; the fine level is the mesh's nodes. The two are joined by a pair of
transfer operators that are discretisations of fixed continuum operators:

- :func:`grid_stencil`: the cell-centred, piecewise-(bi/tri)linear basis :math:`\phi_c` of the
  first grid at every node (``2^d`` cells and values per node, by index arithmetic);
- :func:`prolong_to_nodes`: the interpolant :math:`\sum_c \phi_c(x_i)\, g_c` at the nodes;
- :func:`restrict_to_grid`: the :math:`\phi_c`-weighted cell averages
  :math:`\int_D \phi_c u / \int_D \phi_c` by the nodes' quadrature, and the covered fraction
  :math:`\int_D \phi_c / |c|` of each cell.

The restriction is the quadrature-weighted adjoint of the prolongation, normalised per cell.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.utils import scatter

from ..errors import ConfigError
from ..mesh.mesh import Mesh
from ..nn.functional import num_graphs as count_graphs
from .base import NeuralOperator
from .encoder import CoordinateFeatures, PointwiseMLP

__all__ = ["GridStencil", "MultigridOperator", "VCycle", "grid_stencil", "prolong_to_nodes",
           "restrict_to_grid"]

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


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


def restrict_to_grid(h: torch.Tensor, weight: torch.Tensor, stencil: GridStencil,
                     cell_volume: float) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The :math:`\phi_c`-weighted cell averages of ``h`` and the covered fraction of each cell,

    .. math::
        (R h)_c = \frac{\sum_i w_i\, \phi_c(x_i)\, h_i}{\sum_i w_i\, \phi_c(x_i)}
        \approx \frac{\int_D \phi_c\, h}{\int_D \phi_c}, \qquad
        \kappa_c = \frac{\sum_i w_i\, \phi_c(x_i)}{|c|} \approx \frac{\int_D \phi_c}{\int \phi_c},

    (a cell that no node reaches has :math:`R h = 0` and :math:`\kappa = 0`), by one scatter:
    :math:`O(N 2^d C)`.

    Args:
        h: ``[N, C]``.
        weight: ``[N]``, the nodes' quadrature weights.
        stencil: :func:`grid_stencil` of the nodes.
        cell_volume: :math:`|c|`.

    Returns:
        ``(R h [B, C, *shape], kappa [B, 1, *shape])``.
    """
    size = stencil.num_graphs * math.prod(stencil.shape)
    mass = weight[:, None] * stencil.value  # (N, 2^d)
    index = stencil.index.reshape(-1)
    total = scatter(mass.reshape(-1), index, dim=0, dim_size=size, reduce="sum")  # (B G,)
    moment = scatter((mass[:, :, None] * h[:, None, :]).reshape(len(index), -1), index, dim=0,
                     dim_size=size, reduce="sum")  # (B G, C)
    mean = moment / torch.where(total > 0, total, 1)[:, None]  # no mass: 0, with finite gradients
    grid = mean.reshape(stencil.num_graphs, *stencil.shape, -1).movedim(-1, 1)  # (B, C, *shape)
    coverage = (total / cell_volume).reshape(stencil.num_graphs, 1, *stencil.shape)  # (B, 1, *shape)
    return grid, coverage


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
        h_0 = L(u, x), \qquad
        h_{\ell+1} = \sigma\big(W_\ell h_\ell + P\, V_\ell\, E_\ell(R h_\ell, \kappa)\big), \qquad
        \mathcal G(u) = Q(h_{\text{depth}}),

    with :math:`L, Q` pointwise MLPs, :math:`W_\ell` pointwise linear maps, :math:`\sigma` the
    GELU (none after the last block), and

    .. math::
        (R h)_c = \frac{\int_D \phi_c\, h\, dx}{\int_D \phi_c\, dx}, \qquad
        \kappa_c = \frac{1}{|c|}\int_D \phi_c\, dx, \qquad
        (P g)(x) = \sum_c \phi_c(x)\, g_c,

    where :math:`\phi_c` is the multilinear basis of the first grid's cell :math:`c`
    (:func:`grid_stencil`; a partition of unity on the box with :math:`\int \phi_c = |c|`):
    :math:`R` is a cell average (weighted by the hat :math:`\phi_c` rather than the cell's
    indicator), :math:`\kappa` the part of the cell inside the domain :math:`D` (1 inside, less
    at the boundary of a domain that is not the box), :math:`P` interpolation, and
    :math:`E_\ell` a :math:`1^d` convolution from ``C + 1`` to ``C`` channels. :math:`V_\ell`
    is a :class:`VCycle` on the grids of ``grid``, ``grid / 2``, ... cells per axis over
    ``box``: learned :math:`3^d` smoothers with residual connections, :math:`2^d` averaging down,
    multilinear prolongation up with skip connections.

    On a mesh, the integrals in :math:`R, \kappa` are the nodes' quadrature
    (:func:`restrict_to_grid`): :math:`\sum_i w_i \phi_c(x_i) h_i`. The integrand is continuous
    and piecewise smooth, so for smooth :math:`h` the lumped P1 quadrature of refined meshes
    converges to it at second order; everything after the restriction is a fixed map of grid
    functions, and :math:`P` is evaluated exactly at the nodes. As the mesh refines, the model
    therefore converges to the operator above. (The plain indicator average
    :math:`\sum_{i \in c} w_i h_i / \sum_{i \in c} w_i` bins whole node weights into cells: its
    error is first order and erratic in :math:`h`, and a cell holding no node is undefined.)
    The grids are fixed by ``box`` and ``grid``, not by any mesh; the stencil of the first grid
    at the nodes (index arithmetic) is kept in the :class:`~geoattn.mesh.Mesh`'s memo (for a
    batch, each member's in the member's), and nodes are never recognised by their
    coordinates. The transfers cost
    :math:`O(N 2^d C)` (one scatter, one gather), the cycles :math:`O(G\, 3^d C^2)` for the
    :math:`G` cells of the first grid, so the cost is linear in :math:`N`. Choose ``grid`` so
    that the coarsest mesh the model will see has a few nodes per cell of the first grid
    (:math:`\phi_c` spans two cells per axis).

    Args:
        in_channels: input function channels ``C_in``.
        out_channels: output function channels ``C_out``.
        dim: spatial dimension ``d``, 1, 2 or 3 (default ``2``).
        width: channels ``C`` (default ``32``).
        depth: blocks, one V-cycle each (default ``2``).
        grid: cells per axis of the first grid, an int or one per axis, each divisible by
            ``2 ** (levels - 1)`` and leaving at least 2 cells per axis on the first grid
            (default ``16``).
        levels: grids per V-cycle (default ``3``: ``16, 8, 4`` cells per axis).
        smoothing: residual :math:`3^d` convolutions per level, on the way down and again on the
            way up (default ``2``).
        box: corners ``((a_1, ..., a_d), (b_1, ..., b_d))`` of the box the grids cover, which
            should contain the domain (default ``None``: the unit cube :math:`[0, 1]^d`).
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).

    Shapes:
        - input: ``x [N, C_in]`` on ``mesh``, a :class:`~geoattn.mesh.Mesh` of ``N`` nodes in
          ``d`` dimensions (one mesh or a batch, :meth:`~geoattn.mesh.Mesh.batch`; each graph has
          its own grid stack): ``model(x, mesh)``.
        - output: ``[N, C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 32,
                 depth: int = 2, grid: int | Sequence[int] = 16, levels: int = 3, smoothing: int = 2,
                 box: Sequence[Sequence[float]] | None = None, coordinate_features: dict | None = None):
        super().__init__()
        if dim not in _CONV:
            raise ConfigError(f"MultigridOperator supports dim 1, 2 or 3, got {dim}")
        shape = (grid,) * dim if isinstance(grid, int) else tuple(int(n) for n in grid)
        if len(shape) != dim or levels < 1 or smoothing < 0 or any(
                n < 2 or n % 2 ** (levels - 1) for n in shape):
            raise ConfigError(f"need one grid size per axis (dim={dim}), each >= 2 and divisible by "
                              f"2 ** (levels - 1), levels >= 1 and smoothing >= 0; got grid={grid}, "
                              f"levels={levels}, smoothing={smoothing}")
        box = ((0.0,) * dim, (1.0,) * dim) if box is None else box
        corners = torch.tensor(box, dtype=torch.float64)
        if corners.shape != (2, dim) or not bool((corners[1] > corners[0]).all()):
            raise ConfigError(f"box must be ((a_1, ..., a_d), (b_1, ..., b_d)) with b > a and d={dim}, got {box}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.shape, self.levels, self.box = shape, levels, corners.tolist()
        self.cell_volume = float(torch.prod((corners[1] - corners[0]) / torch.tensor(shape)))
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, 2 * width, width)
        self.enter = nn.ModuleList(_CONV[dim](width + 1, width, 1) for _ in range(depth))
        self.cycles = nn.ModuleList(VCycle(width, dim, levels, smoothing) for _ in range(depth))
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.project = PointwiseMLP(width, 2 * width, out_channels)

    def stencil(self, pos: torch.Tensor | Mesh, batch: torch.Tensor | None = None) -> GridStencil:
        """The first grid's basis at the nodes (:func:`grid_stencil` on the model's box): of a
        :class:`~geoattn.mesh.Mesh` from its memo (for a batch, each member's from the member's
        memo, built there on first use; built now while the coordinates carry gradients), or of
        bare coordinates ``pos`` and ``batch``, built now."""
        if not isinstance(pos, Mesh):
            return self._grid_stencil(pos, batch)
        mesh = pos
        if mesh.pos.requires_grad and torch.is_grad_enabled():  # the stencil's values depend on pos
            return self._grid_stencil(mesh.pos, mesh.batch_vector, mesh.num_graphs)
        key = ("multigrid.stencil", tuple(map(tuple, self.box)), self.shape)
        if mesh.num_graphs == 1:
            return mesh.cached(key, lambda: self._grid_stencil(mesh.pos, None, 1))

        def assemble():
            parts = mesh.per_graph(key, lambda m: self._grid_stencil(m.pos, None, 1))
            cells = math.prod(self.shape)
            return GridStencil(torch.cat([p.index + g * cells for g, p in enumerate(parts)]),
                               torch.cat([p.value for p in parts]), len(parts), self.shape)

        return mesh.cached(key + ("batch",), assemble)

    def _grid_stencil(self, pos: torch.Tensor, batch: torch.Tensor | None,
                      num_graphs: int | None = None) -> GridStencil:
        box = torch.tensor(self.box, dtype=pos.dtype, device=pos.device)
        return grid_stencil(pos, batch, box, self.shape, num_graphs)

    def forward(self, x: torch.Tensor, mesh: Mesh) -> torch.Tensor:
        self.check_call(x, mesh)
        pos, weight = mesh.pos, mesh.weight
        h = self.lift(self.inputs(x, pos))  # (N, C)
        stencil = self.stencil(mesh)
        for k, (enter, cycle, linear) in enumerate(zip(self.enter, self.cycles, self.linears)):
            mean, coverage = restrict_to_grid(h, weight, stencil, self.cell_volume)  # (B, C | 1, *shape)
            g = cycle(enter(torch.cat([mean, coverage], 1)))  # (B, C, *shape)
            h = linear(h) + prolong_to_nodes(g, stencil)  # (N, C)
            if k < len(self.cycles) - 1:
                h = F.gelu(h)
        return self.project(h)

    def extra_repr(self) -> str:
        return f"grid={self.shape}, levels={self.levels}, box={self.box}"
