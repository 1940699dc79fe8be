"""The peers of the Darcy race: other libraries' models behind geoattn's model interface.

Every adapter is a :class:`geoattn.models.NeuralOperator`: neuralop's FNO through a regular grid
(:class:`GridFNO`, ``forward(x, mesh)``: linear interpolation mesh -> grid -> mesh, the operators
kept in each mesh's memo) and, reading each graph's nodes from the mesh, neuralop's GINO on the
nodes (:class:`MeshGINO`) and NVIDIA PhysicsNeMo's Transolver on the nodes (:class:`Transolver`).
None of them takes the quadrature weights.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.spatial import Delaunay

from geoattn.mesh import Mesh
from geoattn.models import NeuralOperator

from .meshes import inside


# --------------------------------------------------------------------------------------------
# neuralop adapters: the geoattn model interface around GINO and grid FNO


def _graphs(x: torch.Tensor, pos: torch.Tensor, batch: torch.Tensor | None):
    """Split a flat batch into runs of graphs on one mesh: ``[(x [B, N, C], pos [N, d], slices)]``."""
    if batch is None:
        return [(x[None], pos, [slice(0, len(pos))])]
    counts = torch.bincount(batch).tolist()
    starts = np.cumsum([0] + counts)
    groups: list[tuple[list[torch.Tensor], torch.Tensor, list[slice]]] = []
    for b, n in enumerate(counts):
        sl = slice(int(starts[b]), int(starts[b]) + n)
        p = pos[sl]
        if groups and groups[-1][1].shape == p.shape and torch.equal(groups[-1][1], p):
            groups[-1][0].append(x[sl])
            groups[-1][2].append(sl)
        else:
            groups.append(([x[sl]], p, [sl]))
    return [(torch.stack(xs), p, sls) for xs, p, sls in groups]


class _MeshAdapter(NeuralOperator):
    """Runs ``self.run(x [B, N, C], pos [N, d]) -> [B, N, C_out]`` on every mesh of a flat batch.

    The quadrature weights are ignored: neither neuralop model takes them (that is part of what
    is measured).
    """

    def forward(self, x, mesh):
        out = x.new_empty(x.shape[0], self.out_channels)
        for xs, p, slices in _graphs(x, mesh.pos, mesh.batch_vector):
            y = self.run(xs, p)  # [B, N, C_out]
            for k, sl in enumerate(slices):
                out[sl] = y[k]
        return out


def _grid(pos: torch.Tensor, s: int) -> np.ndarray:
    """The vertex grid of ``s`` points per axis on the bounding box of ``pos`` ``[N, d]``, as
    points ``[s ** d, d]`` (ij order)."""
    lo, hi = pos.min(0).values.cpu().numpy(), pos.max(0).values.cpu().numpy()
    d = len(lo)
    axes = [np.linspace(lo[k], hi[k], s) for k in range(d)]
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, d)


def mesh_to_grid(pos: np.ndarray, grid: np.ndarray) -> coo_matrix:
    """Piecewise-linear interpolation from nodes to points as a sparse ``[G, N]`` matrix.

    The Delaunay triangulation (tetrahedralisation in 3-D) of the nodes and barycentric weights,
    as in scipy's ``LinearNDInterpolator``; a point outside the hull takes its nearest node.
    """
    d = pos.shape[1]
    tri = Delaunay(pos)
    simplex = tri.find_simplex(grid, tol=1e-10)
    rows, cols, vals = [], [], []
    inside = simplex >= 0
    t = tri.transform[simplex[inside]]  # [G_in, d + 1, d]
    lam = np.einsum("gij,gj->gi", t[:, :d], grid[inside] - t[:, d])  # [G_in, d]
    bary = np.concatenate([lam, 1 - lam.sum(1, keepdims=True)], 1)  # [G_in, d + 1]
    idx = np.flatnonzero(inside)
    rows.append(np.repeat(idx, d + 1))
    cols.append(tri.simplices[simplex[inside]].ravel())
    vals.append(bary.ravel())
    outside = np.flatnonzero(~inside)
    if len(outside):
        nearest = np.argmin(((grid[outside, None] - pos[None]) ** 2).sum(-1), 1)
        rows.append(outside), cols.append(nearest), vals.append(np.ones(len(outside)))
    return coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(len(grid), len(pos)))


def grid_to_mesh(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray, s: int) -> coo_matrix:
    """Multilinear (bilinear, trilinear) interpolation from the vertex grid of ``s`` points per
    axis on ``[lo, hi]`` to the nodes ``[N, d]``, ``[N, s ** d]``."""
    d = pos.shape[1]
    u = (pos - lo) / (hi - lo) * (s - 1)  # grid coordinates [N, d]
    i0 = np.clip(np.floor(u).astype(int), 0, s - 2)
    f = u - i0
    rows, cols, vals = [], [], []
    for corner in itertools.product((0, 1), repeat=d):
        c = np.asarray(corner)
        rows.append(np.arange(len(pos)))
        cols.append(np.ravel_multi_index(tuple((i0 + c).T), (s,) * d))
        vals.append(np.prod(np.where(c, f, 1 - f), axis=1))
    return coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(len(pos), s**d))


def _sparse(m: coo_matrix, like: torch.Tensor) -> torch.Tensor:
    index = torch.as_tensor(np.stack([m.row, m.col]), dtype=torch.long)
    return torch.sparse_coo_tensor(index, torch.as_tensor(m.data), m.shape, check_invariants=False).to(like).coalesce()


def cells_to_grid(pos: np.ndarray, cells: np.ndarray, grid: np.ndarray, s: int) -> coo_matrix:
    """Piecewise-linear interpolation ``[G, N]`` on the triangles ``cells`` of the mesh at the
    points of the ``s x s`` vertex grid ``grid`` (:func:`_grid`): a point in no triangle (a hole,
    outside the mesh) gets an empty row. Each triangle is tested against the grid points of its
    bounding box; a point on an edge takes its first triangle."""
    lo, hi = grid.min(0), grid.max(0)
    step = (hi - lo) / (s - 1)
    tri = pos[cells]  # [T, 3, 2]
    first = np.clip(np.ceil((tri.min(1) - lo) / step - 1e-9), 0, s - 1).astype(np.int64)  # [T, 2]
    last = np.clip(np.floor((tri.max(1) - lo) / step + 1e-9), 0, s - 1).astype(np.int64)
    span = np.maximum(last - first + 1, 0)  # [T, 2]
    count = span[:, 0] * span[:, 1]
    t = np.repeat(np.arange(len(cells)), count)  # one (triangle, grid point) pair per candidate
    k = np.arange(len(t)) - np.repeat(np.cumsum(count) - count, count)
    g = (first[t, 0] + k // span[t, 1]) * s + first[t, 1] + k % span[t, 1]  # grid index (ij order)
    a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]  # [P, 2] each
    e1, e2, q = b - a, c - a, grid[g] - a
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    l1 = (q[:, 0] * e2[:, 1] - q[:, 1] * e2[:, 0]) / det
    l2 = (e1[:, 0] * q[:, 1] - e1[:, 1] * q[:, 0]) / det
    bary = np.stack([1 - l1 - l2, l1, l2], 1)  # [P, 3]
    hit = np.flatnonzero((bary >= -1e-10).all(1))
    g, first_hit = np.unique(g[hit], return_index=True)
    hit = hit[first_hit]
    return coo_matrix((bary[hit].ravel(), (np.repeat(g, 3), cells[t[hit]].ravel())), shape=(len(grid), len(pos)))


def grid_operators(pos: np.ndarray, s: int, domain: str | None = None, cells: np.ndarray | None = None):
    """Interpolation ``[s**d, N]`` from the nodes ``[N, d]`` to the grid of ``s`` points per axis
    on their bounding box, back ``[N, s**d]``, and the grid's domain mask ``[s**d]`` (``None``
    without a domain; masks are 2-D only).

    With a ``domain`` (:func:`inside`), the rows of the grid points outside it are zero: FNO sees
    zero there, and the mask channel tells it where the domain ends. ``domain="cells"``: the
    domain is the mesh's own triangles ``cells`` (every sample its own domain), interpolated on
    them (:func:`cells_to_grid`)."""
    grid = _grid(torch.as_tensor(pos), s)
    if domain == "cells":
        if cells is None:
            raise ValueError("domain='cells' masks the grid by the mesh's triangles: give the cells")
        to_grid = cells_to_grid(pos, cells, grid, s)
        mask = np.zeros(len(grid), dtype=bool)
        mask[to_grid.row] = True
        return to_grid, grid_to_mesh(pos, grid.min(0), grid.max(0), s), mask
    to_grid = mesh_to_grid(pos, grid)
    mask = None
    if domain is not None:
        mask = inside(domain, grid)
        keep = mask[to_grid.row]
        to_grid = coo_matrix((to_grid.data[keep], (to_grid.row[keep], to_grid.col[keep])), shape=to_grid.shape)
    return to_grid, grid_to_mesh(pos, grid.min(0), grid.max(0), s), mask


class GridFNO(NeuralOperator):
    """neuralop's FNO on an ``s x s`` grid (``s x s x s`` with ``dim=3``), with linear
    interpolation mesh -> grid -> mesh.

    ``domain`` (a name of :func:`inside`): zero the grid points outside the domain and add a mask
    channel to FNO's input (``None``: the grid is the domain, no mask; ``"cells"``: each graph's
    domain is its own mesh's triangles, so every sample gets its own mask)."""

    model_name = "neuralop-fno"

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, grid: int = 32,
                 modes: int = 12, width: int = 32, depth: int = 4, domain: str | None = None):
        super().__init__()
        from neuralop.models import FNO

        self.in_channels, self.out_channels, self.dim, self.grid = in_channels, out_channels, dim, grid
        self.domain = domain
        self.hparams = dict(in_channels=in_channels, out_channels=out_channels, dim=dim, grid=grid,
                            modes=modes, width=width, depth=depth, domain=domain)
        if dim == 3 and domain is not None:
            raise ValueError("GridFNO masks 2-D domains only; in 3-D the grid is the mesh's bounding box")
        self.fno = FNO(n_modes=(modes,) * dim, in_channels=in_channels + (domain is not None),
                       out_channels=out_channels, hidden_channels=width, n_layers=depth)

    def _operators(self, mesh: Mesh) -> tuple:
        """The sparse interpolations of one graph to the grid and back, and its mask (or ``None``)."""
        pos = mesh.pos.detach().cpu().double().numpy()
        cells = None if mesh.cells is None else mesh.cells.cpu().numpy()
        to_grid, to_mesh, mask = grid_operators(pos, self.grid, self.domain, cells)
        mask = None if mask is None else torch.as_tensor(mask, dtype=mesh.dtype, device=mesh.device)
        return _sparse(to_grid, mesh.pos), _sparse(to_mesh, mesh.pos), mask

    def forward(self, x: torch.Tensor, mesh: Mesh) -> torch.Tensor:
        """Every graph interpolated to the grid with its own mesh's operators (kept in its memo),
        one FNO call on the stacked grids, each output read at its nodes."""
        s, shape = self.grid, (self.grid,) * self.dim
        ops = [m.structure(("grid_fno", s, self.domain), self._operators) for m in mesh.graphs()]
        xs = x.split(list(mesh.layout.counts))
        grids = []
        for xg, (to_grid, _, mask) in zip(xs, ops):
            g = torch.sparse.mm(to_grid, xg).T.reshape(1, -1, *shape)  # [1, C, s, s(, s)]
            if mask is not None:
                g = torch.cat([g, mask.reshape(1, 1, *shape)], 1)
            grids.append(g)
        y = self.fno(torch.cat(grids))  # [B, C_out, s, s(, s)]
        return torch.cat([torch.sparse.mm(to_mesh, y[k].reshape(-1, s**self.dim).T)  # [N_k, C_out]
                          for k, (_, to_mesh, _) in enumerate(ops)])


class Transolver(_MeshAdapter):
    """NVIDIA PhysicsNeMo's Transolver (Wu et al., ICML 2024) on the nodes, as its authors run it
    on irregular meshes: node coordinates as the embedding, the coefficient as the function input,
    no grid (``structured_shape=None``, ``unified_pos=False``), no quadrature weights (slice
    tokens are plain node averages). Width, depth, heads and slices are those of geoattn's
    ``slice`` model in the same race."""

    model_name = "physicsnemo-transolver"

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 32,
                 depth: int = 3, num_heads: int = 4, num_slices: int = 32):
        super().__init__()
        from physicsnemo_transolver import load_transolver

        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.hparams = dict(in_channels=in_channels, out_channels=out_channels, dim=dim, width=width,
                            depth=depth, num_heads=num_heads, num_slices=num_slices)
        self.net = load_transolver()(functional_dim=in_channels, out_dim=out_channels, embedding_dim=dim,
                                     n_layers=depth, n_hidden=width, n_head=num_heads, slice_num=num_slices,
                                     use_te=False)

    def run(self, x, pos):
        return self.net(x, embedding=pos[None].expand(x.shape[0], -1, -1))


def segment_reduce(src: torch.Tensor, indptr: torch.Tensor, reduction: str, use_scatter: bool = False):
    """Vectorised drop-in for ``neuralop.layers.segment_csr.segment_csr`` (same arguments, same values).

    neuralop's fallback without ``torch_scatter`` loops over the neighbourhoods in Python, which
    makes GINO's time on a CPU a measure of the interpreter; this is the same reduction as one
    ``index_add``, i.e. what ``torch_scatter.segment_csr`` computes.
    """
    point_dim = src.dim() - 2  # 1 when batched [B, n_reps, C], else 0
    ptr = indptr[0] if indptr.dim() == 2 else indptr  # batched row splits are repeats of one
    counts = ptr[1:] - ptr[:-1]  # [n_out]
    segment = torch.repeat_interleave(torch.arange(len(counts), device=src.device), counts)
    shape = list(src.shape)
    shape[point_dim] = len(counts)
    out = src.new_zeros(shape).index_add_(point_dim, segment, src)
    if reduction == "mean":
        out = out / counts.clamp(min=1).to(src.dtype).reshape(-1, 1)
    return out


class MeshGINO(_MeshAdapter):
    """neuralop's GINO: input GNO from the nodes to an ``s x s`` latent grid, FNO, output GNO."""

    model_name = "neuralop-gino"

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, grid: int = 32,
                 modes: int = 12, width: int = 32, depth: int = 4, radius: float = 0.1):
        super().__init__()
        import neuralop.layers.integral_transform as integral_transform
        from neuralop.models import GINO

        integral_transform.segment_csr = segment_reduce

        self.in_channels, self.out_channels, self.dim, self.grid = in_channels, out_channels, dim, grid
        self.hparams = dict(in_channels=in_channels, out_channels=out_channels, dim=dim, grid=grid,
                            modes=modes, width=width, depth=depth, radius=radius)
        self.gino = GINO(in_channels=in_channels, out_channels=out_channels, gno_coord_dim=dim,
                         in_gno_radius=radius, out_gno_radius=radius, fno_n_modes=(modes, modes),
                         fno_hidden_channels=width, fno_n_layers=depth, gno_embed_channels=16,
                         in_gno_channel_mlp_hidden_layers=[width, width],
                         out_gno_channel_mlp_hidden_layers=[2 * width, width],
                         gno_use_open3d=False, gno_use_torch_scatter=False)

    def run(self, x, pos):
        latent = torch.as_tensor(_grid(pos, self.grid), dtype=pos.dtype, device=pos.device)
        latent = latent.reshape(1, self.grid, self.grid, 2)  # [1, s, s, 2]
        return self.gino(input_geom=pos[None], latent_queries=latent, output_queries=pos[None], x=x)
