"""Accuracy and cost of geoattn's operators and of neuralop's GINO and FNO on irregular-mesh Darcy data.

    python benchmarks/darcy_compare.py --scale cpu --out bench_out --docs
    python benchmarks/darcy_compare.py --scale gpu --device cuda --out bench_out
    python benchmarks/darcy_compare.py --scale gpu --device cuda --seconds 300 --domain holes --out bench_out

Every model is trained by :class:`geoattn.train.Trainer` (AdamW, one-cycle schedule, same
learning rate, batch size and samples) on the weighted relative L2(D) error of its prediction at
the nodes of one irregular training mesh, and scored with the same metric
(:func:`geoattn.eval.cross_mesh_report`) on the training mesh and on other meshes of the domain
carrying the same continuum test samples (:func:`benchmark_meshes`).

Two ways to make the race fair:

- epochs (default): every model trains for the same number of epochs (``--epochs``);
- wall-clock budget (``--seconds S``): every model trains for about ``S`` seconds. The one-cycle
  schedule needs its total step count up front, so the epoch time ``t_epoch`` is measured first
  on throw-away epochs (:func:`budget_epochs`; the weights are then reset to their initial
  values), and the model trains for ``max(1, floor(S / t_epoch))`` epochs with the full one-cycle
  schedule: the same run as ``--epochs`` with that count. The probe is not part of the budget;
  the table reports the epochs done and the wall time they actually took (``train s``), so a
  budget missed because the machine's speed changed shows. On a shared machine, ``--clock cpu``
  times the probe epochs by the process's CPU time instead, which other work does not stretch.

Every model is scored after its last epoch, or with ``--validation K`` at its best epoch on ``K``
more samples of the training mesh (the same for every model; scored after every epoch, which
the CPU-clock probe counts), as a user keeping ``best.pt`` would. With ``--ensemble K`` every
model is ``K`` members (seeds ``0..K-1``), each trained for ``1/K`` of the budget (or for
``--epochs`` each without one), and their mean (:class:`geoattn.train.Ensemble`) is scored.

Each model is scored as soon as it is trained (its scores are logged then). A model that fails
(out of memory, a device error, non-finite scores) is left out and named in the table and in
``results.json``; the others go on. ``--data-workers K`` solves the Darcy samples in ``K``
processes (the same samples for any ``K``).

Domains (``--domain``): ``square`` (the unit square: irregular training mesh, its refinement, a
graded and a foreign irregular mesh), ``lshape`` (the L-shape ``[-1, 1]^2`` minus a quadrant:
jittered training mesh, its refinement, the structured mesh and a finer jittered one) and
``holes`` (the disk with two holes of ``meshes/disk_two_holes.msh``: that mesh, its refinement and
a perturbed copy; its size is fixed, ``--mesh-n`` does not change it). The coefficients come from
the same Gaussian random field preset on the domain's bounding box.

neuralop's models enter through small adapters with the geoattn model interface
``forward(x, pos, weight, batch)``:

- ``neuralop-gino``: GINO reads the nodes directly (its input GNO averages over radius balls,
  the latent FNO runs on a regular grid, its output GNO answers at the nodes);
- ``neuralop-fno``: the usual workaround for FNO on a mesh -- the input is linearly interpolated
  from the mesh to a regular grid (the piecewise-linear interpolation of scipy's
  ``LinearNDInterpolator``, stored as a sparse matrix), FNO runs on the grid, and its output is
  bilinearly interpolated back to the nodes, where the loss and the score are taken. On a
  domain that is not its bounding box (``lshape``, ``holes``) the grid points outside the domain
  are set to zero and a mask channel (1 inside, 0 outside) is added to FNO's input, so the model
  sees where the domain is and no value is extrapolated into a hole.

neuralop (``pip install 'geoattn[compare]'``) is needed only for those two models.

- ``physicsnemo-transolver``: NVIDIA PhysicsNeMo's Transolver on the nodes (coordinates as its
  embedding, no grid, no quadrature weights), with the width, depth, heads and slices of
  geoattn's ``slice`` model. It runs when PhysicsNeMo is installed; on a CPU-only torch that
  needs the install recipe and the torchvision stand-in of ``physicsnemo_transolver.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import inspect
import io
import json
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.spatial import Delaunay

from timing import machine as describe_machine

from geoattn.data.darcy import DarcyProblem, darcy_samples, sample_data, solve_sample
from geoattn.data.grf import preset
from geoattn.mesh.symmetry import augment, dihedral
from geoattn.eval import CrossMeshReport, ResolvedQuadrature, cross_mesh_report, training_size
from geoattn.mesh import families, from_meshio
from geoattn.mesh.interpolation import linear_interpolation
from geoattn.mesh.registry import mesh_key
from geoattn.mesh.refinement import refine_to
from geoattn.models import MODELS, NeuralOperator, build_model
from geoattn.nn.spectral import resolved_modes
from geoattn.train import NormalizedOperator, Trainer, symmetrize, train_ensemble

log = logging.getLogger("darcy_compare")


@dataclass
class Scale:
    """Sizes of one run: training mesh (``unit_square(mesh_n, "irregular")`` on the square, see
    :func:`benchmark_meshes`), samples, epochs or a wall-clock budget per model, widths."""

    mesh_n: int
    n_train: int
    n_test: int
    epochs: int
    batch_size: int = 4
    lr: float = 1e-3
    weight_decay: float = 1e-4  # AdamW's decoupled weight decay, the same for every model
    width: int = 32
    depth: int = 3
    grid: int = 32
    modes: int = 12
    seconds: float | None = None  # wall-clock budget per model (None: train for ``epochs``)
    supersample: int = 1  # geoattn models compute on meshes refined to the training edge / this
    mix_resolution: float = 0.0  # share of training batches geoattn models compute on meshes refined to the edge / 2
    coarsen: float = 0.0  # share of training samples whose input geoattn models see through a thinned node set
    mesh_fno_modes: int | None = None  # mesh_fno's modes (None: :func:`mesh_fno_modes`)
    quadrature: str = "nodal"  # mesh_fno's forward transforms: nodal quadrature or exact on the P1 interpolant
    mesh_fno_local: float | None = None  # mesh_fno's local integral: its radius in training-mesh cells (None: none)
    symmetries: bool = False  # train every model on the training samples carried by the domain's symmetries
    clock: str = "wall"  # what ``seconds`` counts: wall time, or the process's CPU time ("cpu")
    validation: int = 0  # held-out samples on the training mesh: each model keeps its best epoch on them
    ensemble: int = 1  # members per model, each trained for 1 / ensemble of the budget; scored as their mean
    data_workers: int = 1  # processes solving the Darcy samples (the samples do not depend on it)


SCALES = {
    "tiny": Scale(mesh_n=6, n_train=4, n_test=2, epochs=1, batch_size=2, width=8, depth=1, grid=8, modes=3),
    "cpu": Scale(mesh_n=12, n_train=100, n_test=30, epochs=8, width=32, depth=3, grid=16, modes=6),
    "gpu": Scale(mesh_n=64, n_train=1000, n_test=200, epochs=300, batch_size=8, width=64, depth=4,
                 grid=64, modes=16),
}


DOMAINS = ("square", "lshape", "holes")
HOLES_MESH = Path(__file__).resolve().parents[1] / "meshes" / "disk_two_holes.msh"
HOLES_H = 0.08  # target edge length of ``HOLES_MESH`` (meshes/generate.py)
#: Isometries that leave each domain, the Darcy problem (source 1, zero boundary values) and the
#: coefficient law on the domain's bounding box invariant (the holed disk has none but the identity).
SYMMETRIES = {"square": dihedral(4, (0.5, 0.5)), "lshape": dihedral(1, (0.0, 0.0), -np.pi / 4)}


def jitter(mesh, amplitude: float = 0.25, seed: int = 0):
    """A copy of a triangle mesh with every interior node moved by up to ``amplitude`` times its
    shortest incident edge per coordinate (boundary nodes stay, so the domain is unchanged); the
    amplitude is halved until every cell keeps its orientation."""
    m = families.to_skfem(mesh)
    p, t = m.p.T.copy(), m.t.T
    edges = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    length = np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)
    h = np.full(len(p), np.inf)
    np.minimum.at(h, edges[:, 0], length)
    np.minimum.at(h, edges[:, 1], length)
    move = np.random.default_rng(seed).uniform(-1, 1, p.shape) * h[:, None]
    move[m.boundary_nodes()] = 0.0

    def areas(q):
        a, b, c = q[t[:, 0]], q[t[:, 1]], q[t[:, 2]]
        return (b - a)[:, 0] * (c - a)[:, 1] - (b - a)[:, 1] * (c - a)[:, 0]

    sign = np.sign(areas(p))
    while amplitude > 1e-3 and np.any(np.sign(areas(p + amplitude * move)) != sign):
        amplitude /= 2
    return _triangles(p + amplitude * move, t)


def _triangles(points: np.ndarray, cells: np.ndarray):
    import skfem

    return families.from_skfem(skfem.MeshTri1(np.ascontiguousarray(points.T), np.ascontiguousarray(cells.T)))


def benchmark_meshes(n: int, domain: str = "square") -> dict[str, object]:
    """Meshes of one domain carrying the test samples; ``"train"`` is the training mesh.

    ``square``: the irregular training mesh, its uniform refinement, a graded mesh and a foreign
    irregular mesh; ``lshape``: a jittered mesh with ``n`` cells per unit, its refinement, the
    structured mesh and a jittered one with ``1.5 n``; ``holes``: ``meshes/disk_two_holes.msh``
    (fixed size, ``n`` is ignored), its refinement and a perturbed copy."""
    if domain == "square":
        train = families.unit_square(n, "irregular", seed=0)
        return {"train": train, "refined": families.refine(train, 1),
                "graded": families.unit_square(n, "graded"),
                "foreign": families.unit_square(round(1.5 * n), "irregular", seed=1)}
    if domain == "lshape":
        train = jitter(families.l_shape(n), seed=0)
        return {"train": train, "refined": families.refine(train, 1),
                "structured": families.l_shape(n),
                "foreign": jitter(families.l_shape(round(1.5 * n)), seed=1)}
    if domain == "holes":
        import meshio

        with contextlib.redirect_stdout(io.StringIO()):  # meshio's gmsh reader prints a blank line
            train = meshio.read(HOLES_MESH)
        train = _triangles(train.points[:, :2], train.cells_dict["triangle"])
        return {"train": train, "refined": families.refine(train, 1), "perturbed": jitter(train, seed=1)}
    raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")


def cell_size(n: int, domain: str = "square") -> float:
    """Typical edge length of the training mesh of :func:`benchmark_meshes`."""
    return HOLES_H if domain == "holes" else 1.0 / n


def inside(domain: str, points: np.ndarray) -> np.ndarray:
    """Which points ``[G, 2]`` lie in the (closed) domain."""
    x, y, tol = points[:, 0], points[:, 1], 1e-9
    if domain == "square":
        return np.ones(len(points), dtype=bool)
    if domain == "lshape":
        return ~((x > tol) & (y < -tol))
    if domain == "holes":
        keep = x**2 + y**2 <= (families.DISK_RADIUS + tol) ** 2
        for cx, cy, r in families.DISK_HOLES:  # the meshes' holes are polygons inscribed in
            sag = HOLES_H**2 / (4 * r)  # the circles: points within twice the chords' sagitta count as inside
            keep &= (x - cx) ** 2 + (y - cy) ** 2 >= (r - sag) ** 2
        return keep
    raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")


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

    def forward(self, x, pos, weight, batch=None):
        out = x.new_empty(x.shape[0], self.out_channels)
        for xs, p, slices in _graphs(x, pos, batch):
            y = self.run(xs, p)  # [B, N, C_out]
            for k, sl in enumerate(slices):
                out[sl] = y[k]
        return out


def _grid(pos: torch.Tensor, s: int) -> np.ndarray:
    """``s x s`` vertex grid on the bounding box of ``pos``, as points ``[s * s, 2]`` (ij order)."""
    lo, hi = pos.min(0).values.cpu().numpy(), pos.max(0).values.cpu().numpy()
    axes = [np.linspace(lo[k], hi[k], s) for k in range(2)]
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 2)


def mesh_to_grid(pos: np.ndarray, grid: np.ndarray) -> coo_matrix:
    """Piecewise-linear interpolation from nodes to points as a sparse ``[G, N]`` matrix.

    The Delaunay triangulation of the nodes and barycentric weights, as in scipy's
    ``LinearNDInterpolator``; a point outside the hull takes its nearest node.
    """
    tri = Delaunay(pos)
    simplex = tri.find_simplex(grid, tol=1e-10)
    rows, cols, vals = [], [], []
    inside = simplex >= 0
    t = tri.transform[simplex[inside]]  # [G_in, 3, 2]
    lam = np.einsum("gij,gj->gi", t[:, :2], grid[inside] - t[:, 2])  # [G_in, 2]
    bary = np.concatenate([lam, 1 - lam.sum(1, keepdims=True)], 1)  # [G_in, 3]
    idx = np.flatnonzero(inside)
    rows.append(np.repeat(idx, 3))
    cols.append(tri.simplices[simplex[inside]].ravel())
    vals.append(bary.ravel())
    outside = np.flatnonzero(~inside)
    if len(outside):
        nearest = np.argmin(((grid[outside, None] - pos[None]) ** 2).sum(-1), 1)
        rows.append(outside), cols.append(nearest), vals.append(np.ones(len(outside)))
    return coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(len(grid), len(pos)))


def grid_to_mesh(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray, s: int) -> coo_matrix:
    """Bilinear interpolation from the ``s x s`` vertex grid on ``[lo, hi]`` to the nodes, ``[N, s*s]``."""
    u = (pos - lo) / (hi - lo) * (s - 1)  # grid coordinates [N, 2]
    i0 = np.clip(np.floor(u).astype(int), 0, s - 2)
    f = u - i0
    rows, cols, vals = [], [], []
    for di in (0, 1):
        for dj in (0, 1):
            w = (f[:, 0] if di else 1 - f[:, 0]) * (f[:, 1] if dj else 1 - f[:, 1])
            rows.append(np.arange(len(pos)))
            cols.append((i0[:, 0] + di) * s + i0[:, 1] + dj)
            vals.append(w)
    return coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(len(pos), s * s))


def _sparse(m: coo_matrix, like: torch.Tensor) -> torch.Tensor:
    index = torch.as_tensor(np.stack([m.row, m.col]), dtype=torch.long)
    return torch.sparse_coo_tensor(index, torch.as_tensor(m.data), m.shape, check_invariants=False).to(like).coalesce()


def grid_operators(pos: np.ndarray, s: int, domain: str | None = None):
    """Interpolation ``[s*s, N]`` from the nodes to the ``s x s`` grid on their bounding box, back
    ``[N, s*s]``, and the grid's domain mask ``[s*s]`` (``None`` without a domain).

    With a ``domain`` (:func:`inside`), the rows of the grid points outside it are zero: FNO sees
    zero there, and the mask channel tells it where the domain ends."""
    grid = _grid(torch.as_tensor(pos), s)
    to_grid = mesh_to_grid(pos, grid)
    mask = None
    if domain is not None:
        mask = inside(domain, grid)
        keep = mask[to_grid.row]
        to_grid = coo_matrix((to_grid.data[keep], (to_grid.row[keep], to_grid.col[keep])), shape=to_grid.shape)
    return to_grid, grid_to_mesh(pos, grid.min(0), grid.max(0), s), mask


class GridFNO(_MeshAdapter):
    """neuralop's FNO on an ``s x s`` grid, with linear interpolation mesh -> grid -> mesh.

    ``domain`` (a name of :func:`inside`): zero the grid points outside the domain and add a mask
    channel to FNO's input (``None``: the grid is the domain, no mask)."""

    model_name = "neuralop-fno"

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, grid: int = 32,
                 modes: int = 12, width: int = 32, depth: int = 4, domain: str | None = None):
        super().__init__()
        from neuralop.models import FNO

        self.in_channels, self.out_channels, self.dim, self.grid = in_channels, out_channels, dim, grid
        self.domain = domain
        self.hparams = dict(in_channels=in_channels, out_channels=out_channels, dim=dim, grid=grid,
                            modes=modes, width=width, depth=depth, domain=domain)
        self.fno = FNO(n_modes=(modes, modes), in_channels=in_channels + (domain is not None),
                       out_channels=out_channels, hidden_channels=width, n_layers=depth)
        self._cache: dict[tuple, tuple] = {}

    def _operators(self, pos: torch.Tensor):
        key = (pos.shape[0], pos.device, pos.dtype, hash(pos.detach().cpu().numpy().tobytes()))
        if key not in self._cache:
            to_grid, to_mesh, mask = grid_operators(pos.detach().cpu().double().numpy(), self.grid, self.domain)
            mask = None if mask is None else torch.as_tensor(mask, dtype=pos.dtype, device=pos.device)
            self._cache[key] = (_sparse(to_grid, pos), _sparse(to_mesh, pos), mask)
        return self._cache[key]

    def forward(self, x, pos, weight, batch=None):
        """Every graph interpolated to the grid with its own mesh's operators, one FNO call on the
        stacked grids (a batch mixing meshes runs as one batch), each output read at its nodes."""
        runs = _graphs(x, pos, batch)
        ops = [self._operators(p) for _, p, _ in runs]
        grids = []
        for (xs, p, _), (to_grid, _, mask) in zip(runs, ops):
            b, n, c = xs.shape
            g = torch.sparse.mm(to_grid, xs.permute(1, 0, 2).reshape(n, b * c))  # [s*s, B*C]
            g = g.reshape(self.grid, self.grid, b, c).permute(2, 3, 0, 1)  # [B, C, s, s]
            if mask is not None:
                g = torch.cat([g, mask.reshape(1, 1, self.grid, self.grid).expand(b, 1, -1, -1)], 1)
            grids.append(g)
        y = self.fno(torch.cat(grids))  # [B_total, C_out, s, s]
        out, start = x.new_empty(x.shape[0], self.out_channels), 0
        for (xs, p, slices), (_, to_mesh, _) in zip(runs, ops):
            b, n = xs.shape[:2]
            yk = y[start:start + b].permute(2, 3, 0, 1).reshape(self.grid * self.grid, -1)  # [s*s, B*C_out]
            yk = torch.sparse.mm(to_mesh, yk).reshape(n, b, -1).permute(1, 0, 2)  # [B, N, C_out]
            for k, sl in enumerate(slices):
                out[sl] = yk[k]
            start += b
        return out


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


# --------------------------------------------------------------------------------------------
# the benchmark

def patch_resolution(mesh_n: int, domain: str = "square") -> dict[str, int]:
    """Patches and modes of the patched models (ViT-NO, FANO): the most patches of 64, 16, 4 or 1
    (the paper's order is 16 and more) that hold at least 9 nodes each, and the Fourier modes
    those nodes resolve (:func:`geoattn.nn.spectral.resolved_modes`; 0 keeps only each patch's
    mean). Patch attention moves values between patches by interpolation at full resolution; only
    the Fourier parts (ViT-NO's lift, FANO's Q, K, V) are limited by the modes, and with more modes
    than a patch's nodes resolve their coefficients are aliased on the training mesh and the
    trained models do not transfer."""
    nodes = len(benchmark_meshes(mesh_n, domain)["train"].points)
    for parts in (64, 16, 4, 1):
        if nodes / parts >= 9 or parts == 1:
            return {"num_patches": parts, "modes": resolved_modes(nodes / parts, 2)}


class MixedResolution(ResolvedQuadrature):
    """A model that, in training, computes each batch on the meshes refined to ``size`` with
    probability ``fraction`` (as :class:`ResolvedQuadrature`, read at the data's nodes) and on the
    meshes as they are otherwise; in evaluation always on the meshes as they are. It trains one
    model on two discretisations of the same samples, so that it cannot fit the errors of one."""

    def __init__(self, op: torch.nn.Module, meshes, size: float, fraction: float):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
        super().__init__(op, meshes, size)
        self.fraction = float(fraction)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        if self.training and float(torch.rand(())) < self.fraction:
            return super().forward(x, pos, weight, batch)
        return self.op(x, pos, weight, batch)


class CoarsenedInputs:
    """A forward pre-hook that, while its model trains, replaces each sample's input with
    probability ``fraction`` by the piecewise-linear interpolant of its values at a random subset
    of the nodes: the nodes are kept with a probability that ramps from ``q`` (drawn log-uniform in
    ``[least, 1]``) to 1 across the domain in a random direction, and the hull's vertices always.
    The model then sees inputs as a coarser or graded mesh shows them (resolved on nodes as dense
    as the training mesh's). Each mesh gets a pool of ``pool`` subsets, drawn once. In evaluation
    the inputs pass as they are; the hook adds nothing to the model's state or checkpoints.
    ``model.register_forward_pre_hook(CoarsenedInputs(p))``."""

    def __init__(self, fraction: float, least: float = 0.08, pool: int = 16, seed: int = 0):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
        if not 0.0 < least <= 1.0:
            raise ValueError(f"least must be in (0, 1], got {least!r}")
        self.fraction, self.least, self.pool = float(fraction), float(least), int(pool)
        self.rng = np.random.default_rng(seed)
        self.stencils: dict = {}  # mesh_key -> [(index [N, 3], coeff [N, 3])]

    def subsets(self, pos: torch.Tensor) -> list:
        """The pool of interpolation stencils of the mesh with nodes ``pos``."""
        key = mesh_key(pos)
        if key not in self.stencils:
            p = pos.detach().to("cpu", torch.float64)
            hull = np.unique(Delaunay(p.numpy()).convex_hull)
            pool = []
            for _ in range(self.pool):
                direction = self.rng.normal(size=p.shape[1])
                t = p.numpy() @ direction
                t = (t - t.min()) / (t.max() - t.min())
                q = np.exp(self.rng.uniform(np.log(self.least), 0.0))
                keep = self.rng.random(len(p)) < q + (1 - q) * t
                keep[hull] = True
                kept = np.flatnonzero(keep)
                interp = linear_interpolation(p[kept], p)
                pool.append((torch.as_tensor(kept)[interp.index], interp.coeff))
            self.stencils[key] = pool
        return self.stencils[key]

    def __call__(self, module: torch.nn.Module, args: tuple):
        if not module.training or self.fraction == 0:
            return None
        x, pos, weight, *rest = args
        batch = rest[0] if rest else None
        counts = [len(pos)] if batch is None else torch.bincount(batch).tolist()
        parts = []
        for gx, gpos in zip(x.split(counts), pos.split(counts)):
            if float(torch.rand(())) < self.fraction:
                pool = self.subsets(gpos)
                index, coeff = pool[int(torch.randint(len(pool), ()))]
                gx = (gx[index.to(x.device)] * coeff.to(x)[..., None]).sum(1)
            parts.append(gx)
        return (torch.cat(parts), pos, weight, *rest)


def supersampled_size(mesh_n: int, domain: str = "square", supersample: int = 1) -> float:
    """The longest edge the geoattn models compute on: the training mesh's over ``supersample``."""
    return training_size(benchmark_meshes(mesh_n, domain)["train"]) / supersample


def mesh_fno_modes(mesh_n: int, domain: str = "square", most: int | None = None, supersample: int = 1) -> int:
    """Modes of the mesh-native FNO: those the nodes it computes on resolve
    (:func:`geoattn.nn.spectral.resolved_modes`; with ``supersample`` > 1 the training mesh
    refined to :func:`supersampled_size`), at least 1 and at most ``most``."""
    train = benchmark_meshes(mesh_n, domain)["train"]
    if supersample > 1:
        train = refine_to(train, supersampled_size(mesh_n, domain, supersample))[0]
    modes = max(1, resolved_modes(len(train.points), 2))
    return modes if most is None else min(modes, most)


def model_factories(scale: Scale, names: list[str] | None = None, domain: str = "square") -> dict[str, callable]:
    """Constructors of every model to compare (geoattn ones that exist, neuralop ones if installed).

    Every model gets the scale's ``width`` and ``depth``; the graph-kernel models (and GINO) a ball
    radius of 2.5 training-mesh cells; the patched models the patches and modes of
    :func:`patch_resolution`; the mesh-native FNO (``mesh_fno``) the modes of
    :func:`mesh_fno_modes`, at most half the grid FNO's ``modes`` (neuralop's ``n_modes`` counts
    frequencies of both signs, ``K`` here is the largest ``|m|``); the slice transformer (``slice``)
    its default heads and slices."""
    out = {}
    radius = 2.5 * cell_size(scale.mesh_n, domain)
    for name, cls in MODELS.items():  # the registry holds the field-to-field models only
        params = inspect.signature(cls.__init__).parameters
        # ball radius of the graph-kernel models (here and GINO's): 2.5 cells of the training mesh
        kw = {k: v for k, v in dict(width=scale.width, depth=scale.depth, radius=radius).items()
              if k in params}
        if "num_patches" in params:
            kw.update(patch_resolution(scale.mesh_n, domain))
        elif "modes" in params:
            if "quadrature" in params:
                kw["quadrature"] = scale.quadrature
            if "local" in params and scale.mesh_fno_local:
                kw["local"] = {"radius": scale.mesh_fno_local * cell_size(scale.mesh_n, domain)}
            kw["modes"] = scale.mesh_fno_modes or mesh_fno_modes(scale.mesh_n, domain, max(1, scale.modes // 2),
                                                                 scale.supersample)
        out[name] = lambda name=name, kw=kw: build_model(name, in_channels=1, out_channels=1, dim=2, **kw)
    try:
        import neuralop  # noqa: F401
    except ImportError:
        log.warning("neuralop is not installed: skipping GINO and FNO (pip install 'geoattn[compare]')")
    else:
        common = dict(in_channels=1, out_channels=1, grid=scale.grid, modes=scale.modes, width=scale.width)
        out["neuralop-gino"] = lambda: MeshGINO(radius=radius, **common)
        out["neuralop-fno"] = lambda: GridFNO(domain=None if domain == "square" else domain, **common)
    from physicsnemo_transolver import load_transolver

    if load_transolver() is None:
        log.warning("NVIDIA PhysicsNeMo is not installed: skipping its Transolver (see "
                    "benchmarks/physicsnemo_transolver.py for the install command)")
    else:
        out["physicsnemo-transolver"] = lambda: Transolver(in_channels=1, out_channels=1, dim=2,
                                                           width=scale.width, depth=scale.depth)
    if names:
        missing = set(names) - set(out)
        if missing:
            raise ValueError(f"models {sorted(missing)} are not available; choose from {sorted(out)}")
        out = {k: v for k, v in out.items() if k in names}
    return out


class PeakMemory:
    """Peak memory of a block: CUDA allocator peak, or peak resident set size above the start (CPU,
    sampled every 5 ms after returning freed heap memory to the system)."""

    def __init__(self, device: torch.device):
        self.device, self.peak = device, 0

    def __enter__(self):
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            return self
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
        self.base, self._stop = self._rss(), threading.Event()
        self.peak = self.base
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self._rss())
        self.mib = (self.peak - self.base) / 2**20


def budget_epochs(op: NormalizedOperator, train: list, scale: Scale, seed: int = 0,
                  val: list | None = None) -> int:
    """Epochs that fit in ``scale.seconds``, from the time of throw-away epochs: one when it takes
    the whole budget or more, else at least two and up to ten until they add up to 5 % of the
    budget, timed by the median of all but the first one (which also pays one-time costs such as
    neighbour graphs and interpolation matrices). With ``scale.clock == "cpu"`` the epochs are
    timed by the process's CPU time from the first optimiser step on (the sample checks and the
    normaliser fits of each probe are not an epoch's work), which other work on a shared machine
    stretches less than the wall time (with one thread it is the wall time of an idle machine); with
    validation samples ``val`` the CPU time includes their scoring after the epoch (the wall time
    does not). The weights are then put back to their initial values."""
    tensors = [*op.parameters(), *op.buffers()]  # not state_dict: neuralop adds non-tensor entries
    initial = [t.detach().clone() for t in tensors]
    seconds = []
    while not seconds or (seconds[0] < scale.seconds and len(seconds) < 10
                          and (len(seconds) < 2 or sum(seconds) < scale.seconds / 20)):
        probe = Trainer(op, epochs=1, batch_size=scale.batch_size, lr=scale.lr, weight_decay=scale.weight_decay,
                        seed=seed, progress=False)
        first: list[float] = []  # CPU time at the first optimiser step: after the checks and normaliser fits
        wall = probe.fit(train, val, on_step=lambda epoch, step: first or first.append(time.process_time()))[-1]["seconds"]
        steps = -(-len(train) // scale.batch_size)
        # the first step's batch and forward pass come before the mark: count them as an average step
        cpu = (time.process_time() - first[0]) * steps / max(1, steps - 1) if steps > 1 else wall
        seconds.append(cpu if scale.clock == "cpu" else wall)
    with torch.no_grad():
        for t, t0 in zip(tensors, initial):
            t.copy_(t0)
    log.info("probe epochs: %s s (%s)", ", ".join(f"{s:.1f}" for s in seconds), scale.clock)
    return max(1, int(scale.seconds / float(np.median(seconds[1:] or seconds))))


def solve_samples(meshes: dict, n: int, seed: int, family: str, field, start: int = 0, workers: int = 1) -> dict:
    """:func:`geoattn.data.darcy.darcy_samples` of samples ``start .. start + n - 1``, solved by
    ``workers`` processes on contiguous chunks of the indices: sample ``i`` depends only on
    ``(seed, i)``, so the result is the same for every ``workers``. The processes send back the
    nodal values alone; the samples are built here, on the meshes' shared node data."""
    workers = max(1, min(workers, n))
    if workers == 1:
        return darcy_samples(meshes, n, seed, family, field, start=start)
    bounds = np.linspace(start, start + n, workers + 1).round().astype(int)
    # fresh processes with one thread each: the BLAS and OpenMP pools a process starts with would
    # otherwise each take every core (and gain almost nothing on these small solves)
    saved = {k: os.environ.get(k) for k in _ONE_THREAD}
    os.environ.update(_ONE_THREAD)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = list(pool.map(_solve_chunk, [(meshes, seed, family, field, int(a), int(b))
                                                 for a, b in zip(bounds[:-1], bounds[1:])]))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    bases = {name: from_meshio(mesh) for name, mesh in meshes.items()}
    return {name: [sample_data(bases[name], *values[name]) for part in parts for values in part]
            for name in meshes}


_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _solve_chunk(job) -> list[dict]:
    """The nodal values ``{mesh: (a, u)}`` of samples ``lo .. hi - 1``."""
    meshes, seed, family, field, lo, hi = job
    problems = {name: DarcyProblem(mesh) for name, mesh in meshes.items()}
    return [solve_sample(problems, field, seed, i, family) for i in range(lo, hi)]


def coefficient_field(meshes: dict):
    """The coefficient field preset on the bounding box of all the domain's meshes."""
    points = np.concatenate([m.points[:, :2] for m in meshes.values()])
    return preset("cao", box=(points.min(0), points.max(0)))


def reference_targets(meshes: dict, scale: Scale, family: str, field, seed: int = 0) -> dict[str, list]:
    """The test samples of every mesh, with targets from the solution on the training mesh
    refined twice, interpolated linearly to the mesh's nodes, instead of the mesh's own P1
    solution: a model scored against them is scored against (nearly) the continuum solution,
    the same function on every mesh."""
    test = solve_samples({**meshes, "reference": families.refine(meshes["train"], 2)}, scale.n_test, seed,
                   family, field, start=scale.n_train, workers=scale.data_workers)
    reference = test.pop("reference")
    out = {}
    for name, samples in test.items():
        out[name] = []
        stencil = linear_interpolation(reference[0].pos, samples[0].pos)  # one mesh pair: built once
        for d, r in zip(samples, reference):
            e = d.clone()
            e.y = stencil(r.y.double()).to(d.y.dtype)
            out[name].append(e)
    return out


def fem_floor(scale: Scale, family: str, domain: str = "square", seed: int = 0) -> dict[str, float]:
    """How far each mesh's own test targets (its P1 finite-element solutions) are from the
    solutions on the training mesh refined twice (:func:`reference_targets`): the mean weighted
    relative L2 difference at the mesh's nodes. A model scored on a mesh against its own targets
    cannot be told apart from this discretisation error below it."""
    meshes = benchmark_meshes(scale.mesh_n, domain)
    field = coefficient_field(meshes)
    own = solve_samples(meshes, scale.n_test, seed, family, field, start=scale.n_train, workers=scale.data_workers)
    floor = {}
    for name, samples in reference_targets(meshes, scale, family, field, seed).items():
        errors = []
        for d, r in zip(own[name], samples):
            w, u = d.weight.double()[:, None], r.y.double()
            errors.append(float(torch.sqrt((w * (d.y.double() - u) ** 2).sum() / (w * u ** 2).sum())))
        floor[name] = float(np.mean(errors))
    return floor


def run_family(family: str, scale: Scale, names: list[str] | None, device: torch.device,
               seed: int = 0, domain: str = "square", reference: bool = False, resolve: bool = False) -> dict:
    """Train every model on one coefficient family and score it on every mesh of the domain
    (with ``reference``, also against :func:`reference_targets`; with ``resolve``, also each
    model wrapped in :class:`geoattn.eval.ResolvedQuadrature`)."""
    meshes = benchmark_meshes(scale.mesh_n, domain)
    field = coefficient_field(meshes)
    tic = time.perf_counter()
    workers = scale.data_workers
    train = solve_samples({"train": meshes["train"]}, scale.n_train, seed, family, field, workers=workers)["train"]
    test = solve_samples(meshes, scale.n_test, seed, family, field, start=scale.n_train, workers=workers)
    val = solve_samples({"train": meshes["train"]}, scale.validation, seed, family, field,
                  start=scale.n_train + scale.n_test, workers=workers)["train"] if scale.validation else None
    log.info("%s: data in %.1f s", family, time.perf_counter() - tic)
    if scale.symmetries:
        train = augment(train, SYMMETRIES[domain])  # |G| images of every training sample, checked
    train = [d.to(device) for d in train]
    val = None if val is None else [d.to(device) for d in val]
    test = {k: [d.to(device) for d in v] for k, v in test.items()}
    rows, operators, failed = {}, {}, {}

    def fail(name: str, err: BaseException):  # the race goes on without the model, which is named
        failed[name] = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}"
        log.error("%s %s failed: %s", family, name, failed[name])
        rows.pop(name, None)
        operators.pop(name, None)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    report = CrossMeshReport({mesh: samples[0].num_nodes for mesh, samples in test.items()}, "train")
    size = supersampled_size(scale.mesh_n, domain, scale.supersample)
    for name, make in model_factories(scale, names, domain).items():
        def build(name=name, make=make):
            model = make()
            if scale.supersample > 1 and name in MODELS:  # geoattn's own models; the peers see the nodes
                model = ResolvedQuadrature(model, meshes.values(), size)
                model.register(train[:len(SYMMETRIES[domain])] if scale.symmetries else [])  # the images
            elif scale.mix_resolution > 0 and name in MODELS:
                model = MixedResolution(model, [], supersampled_size(scale.mesh_n, domain, 2), scale.mix_resolution)
                model.register(train[:len(SYMMETRIES[domain])] if scale.symmetries else train[:1])  # training meshes
            if scale.coarsen > 0 and name in MODELS:
                model.register_forward_pre_hook(CoarsenedInputs(scale.coarsen, seed=seed))
            return NormalizedOperator(model).to(device)  # patched models: the trainer fits the partition

        torch.manual_seed(seed)
        try:
            # each of the ensemble's members trains for its share of the budget
            epochs = scale.epochs if scale.seconds is None else budget_epochs(
                build(), train, replace(scale, seconds=scale.seconds / scale.ensemble), seed, val)
            cpu = time.process_time()
            with PeakMemory(device) as mem:
                ensemble = train_ensemble(build, train, val, members=scale.ensemble, seed=seed, epochs=epochs,
                                          batch_size=scale.batch_size, lr=scale.lr, weight_decay=scale.weight_decay,
                                          progress=False, restore_best=bool(val))  # a validation set: its best
            cpu = time.process_time() - cpu
        except RuntimeError as err:  # out of memory (torch.OutOfMemoryError), a device error, a diverged loss
            fail(name, err)
            continue
        op = ensemble if scale.ensemble > 1 else ensemble.members[0]
        seconds = [h["seconds"] for history in ensemble.histories for h in history]
        rows[name] = {"parameters": sum(p.numel() for p in op.parameters() if p.requires_grad),
                      "epochs": epochs,  # of each member
                      "seconds_per_epoch": float(np.median(seconds)),
                      "train_seconds": float(np.sum(seconds)),
                      "cpu_seconds_per_epoch": cpu / (epochs * scale.ensemble),
                      "peak_mib": mem.mib,
                      "train_error": float(np.mean([h[-1]["train"] for h in ensemble.histories]))}
        if val:
            best = [int(np.argmin([h["val"] for h in history])) for history in ensemble.histories]
            rows[name].update(best_epoch=best[0] + 1, val_error=ensemble.histories[0][best[0]]["val"])
            if scale.ensemble > 1:
                rows[name].update(best_epochs=[b + 1 for b in best],
                                  val_errors=[h[b]["val"] for h, b in zip(ensemble.histories, best)])
        operators[name] = op
        log.info("%s %s: %s", family, name, rows[name])
        try:  # scored as soon as trained (its line is in the log if the run is cut short)
            report.errors.update(cross_mesh_report({name: op}, test, reference="train",
                                                   batch_size=scale.batch_size).errors)
        except (RuntimeError, ValueError) as err:  # out of memory, non-finite errors
            fail(name, err)
            continue
        log.info("%s %s: test %s", family, name, {mesh: round(report.mean(name, mesh), 4) for mesh in report.nodes})
    scored = {"test": report}
    if reference:
        targets = reference_targets(meshes, scale, family, field, seed)
        targets = {k: [d.to(device) for d in v] for k, v in targets.items()}
        scored["test_reference"] = cross_mesh_report(operators, targets, reference="train",
                                                     batch_size=scale.batch_size)
    if resolve:
        size = training_size(meshes["train"])
        resolved = {name: ResolvedQuadrature(op, meshes.values(), size).to(device) for name, op in operators.items()}
        scored["test_resolved"] = cross_mesh_report(resolved, test, reference="train", batch_size=scale.batch_size)
        if reference:
            scored["test_reference_resolved"] = cross_mesh_report(resolved, targets, reference="train",
                                                                  batch_size=scale.batch_size)
    if scale.symmetries:  # every model also averaged over the domain's symmetries (inside the refinement)
        averaged = {"": {name: symmetrize(op, SYMMETRIES[domain]) for name, op in operators.items()}}
        if resolve:
            averaged["_resolved"] = {name: symmetrize(op, SYMMETRIES[domain]) for name, op in resolved.items()}
        samples = {"test": test, "test_reference": targets if reference else None}
        for key in [k for k, v in samples.items() if v is not None]:
            for how, ops in averaged.items():
                scored[key + how + "_symmetrized"] = cross_mesh_report(ops, samples[key], reference="train",
                                                                       batch_size=scale.batch_size)
    for name in operators:
        for key, rep in scored.items():
            rows[name][key] = errors = {mesh: rep.mean(name, mesh) for mesh in rep.nodes}
            rows[name]["worst_over_train" + key[len("test"):]] = max(list(errors.values())[1:]) / errors["train"]
            # every test sample's error, for statistics other than the mean (e.g. the RMS)
            rows[name].setdefault("samples", {})[key] = {mesh: e.tolist() for mesh, e in rep.errors[name].items()}
    return {"nodes": report.nodes, "models": rows, "failed": failed, "report": report, "operators": operators}


#: Scores besides the default one (each mesh's own targets), by result key, with their titles.
EXTRA_SCORES = {
    "test_reference": "against the twice-refined training mesh's solutions (`--reference-targets`)",
    "test_resolved": "each mesh refined to the training mesh's longest edge for the model, output "
                     "read at its own nodes (`--resolve-quadrature`)",
    "test_reference_resolved": "both (`--reference-targets --resolve-quadrature`)",
    "test_symmetrized": "averaged over the domain's symmetries (`--symmetries`)",
    "test_reference_symmetrized": "averaged over the domain's symmetries, against the twice-refined "
                                  "training mesh's solutions (`--symmetries --reference-targets`)",
    "test_resolved_symmetrized": "averaged over the domain's symmetries inside the refinement "
                                 "(`--symmetries --resolve-quadrature`)",
    "test_reference_resolved_symmetrized": "averaged over the domain's symmetries inside the refinement, "
                                           "against the twice-refined training mesh's solutions "
                                           "(`--symmetries --resolve-quadrature --reference-targets`)",
}


def markdown(results: dict, scale: Scale) -> str:
    """The results as a markdown table per family (model, cost, error on each mesh)."""
    out = []
    if scale.supersample > 1:
        out.append(f"geoattn's models compute on every mesh refined to the training mesh's longest edge / "
                   f"{scale.supersample} (`--supersample {scale.supersample}`); the other models see the nodes.\n")
    if scale.mix_resolution > 0:
        out.append(f"geoattn's models compute a share {scale.mix_resolution:g} of their training batches on the "
                   f"training mesh refined to half its longest edge (`--mix-resolution`); they are scored on the "
                   f"meshes as they are.\n")
    if scale.coarsen > 0:
        out.append(f"geoattn's models see a share {scale.coarsen:g} of their training inputs through a random "
                   f"subset of the nodes, interpolated back (`--coarsen`); they are scored on the inputs as they are.\n")
    if scale.symmetries:
        out.append("Every model trains on each training sample carried by the domain's symmetries "
                   "(`--symmetries`).\n")
    if scale.ensemble > 1:
        out.append(f"Every model is the mean of {scale.ensemble} members (`--ensemble {scale.ensemble}`), each "
                   f"trained for 1/{scale.ensemble} of the budget; epochs are each member's.\n")
    for family, res in results.items():
        meshes = list(res["nodes"])
        out.append(f"**{family}** coefficients (test relative L2(D) error, mean of {scale.n_test} samples):\n")
        head = ["model", "parameters", "epochs", "s / epoch", "train s", "CPU s / epoch", "peak MiB"] + [
            f"{m} ({res['nodes'][m]})" for m in meshes] + ["worst / train"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for name, r in res["models"].items():
            errs = [r["test"][m] for m in meshes]
            epochs = r.get("epochs", scale.epochs)
            cells = [name, f"{r['parameters']:,}", f"{epochs}", f"{r['seconds_per_epoch']:.2f}",
                     f"{r.get('train_seconds', epochs * r['seconds_per_epoch']):.1f}",
                     f"{r['cpu_seconds_per_epoch']:.2f}", f"{r['peak_mib']:.0f}"]
            cells += [f"{e:.4f}" for e in errs] + [f"{max(errs[1:]) / errs[0]:.2f}"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        best = [f"{name} {', '.join(map(str, r.get('best_epochs', [r['best_epoch']])))} of {r['epochs']} "
                f"(validation error {', '.join(f'{e:.4f}' for e in r.get('val_errors', [r['val_error']]))})"
                for name, r in res["models"].items() if "best_epoch" in r]
        if best:
            out.append(f"Scored at the best epoch on {scale.validation} validation samples (`--validation`): "
                       + ", ".join(best) + ".\n")
        if res.get("failed"):
            out.append("Failed, left out: " + "; ".join(f"`{name}` ({why})" for name, why in res["failed"].items())
                       + ".\n")
        for key, title in EXTRA_SCORES.items():
            if not all(key in r for r in res["models"].values()):
                continue
            out.append(f"**{family}**, {title}:\n")
            head = ["model"] + [f"{m} ({res['nodes'][m]})" for m in meshes] + ["worst / train"]
            out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for name, r in res["models"].items():
                errs = [r[key][m] for m in meshes]
                out.append("| " + " | ".join([name] + [f"{e:.4f}" for e in errs]
                                             + [f"{max(errs[1:]) / errs[0]:.2f}"]) + " |")
            out.append("")
    return "\n".join(out)


def table(results: dict) -> str:
    """Plain-text table for the terminal."""
    lines = []
    for family, res in results.items():
        meshes = list(res["nodes"])
        lines.append(f"{family}: " + ", ".join(f"{m} {n} nodes" for m, n in res["nodes"].items()))
        width = max(26, *(len(name) + 1 for name in res["models"]))
        lines.append(f"{'model':<{width}}{'params':>9}{'epochs':>7}{'s/epoch':>9}{'train s':>8}{'cpu s':>8}{'MiB':>7}"
                     + "".join(f"{m:>11}" for m in meshes) + f"{'worst/train':>12}")
        for name, r in res["models"].items():
            errs = [r["test"][m] for m in meshes]
            epochs = r.get("epochs", 0)
            lines.append(f"{name:<{width}}{r['parameters']:>9}{epochs:>7}{r['seconds_per_epoch']:>9.2f}"
                         f"{r.get('train_seconds', epochs * r['seconds_per_epoch']):>8.1f}"
                         f"{r['cpu_seconds_per_epoch']:>8.2f}{r['peak_mib']:>7.0f}"
                         + "".join(f"{e:>11.4f}" for e in errs) + f"{max(errs[1:]) / errs[0]:>12.2f}")
            for key in EXTRA_SCORES:
                if key in r:
                    extra = [r[key][m] for m in meshes]
                    label = "  " + key[len("test_"):].replace("_", ", ")
                    lines.append(f"{label:<{width}}{'':>48}" + "".join(f"{e:>11.4f}" for e in extra)
                                 + f"{max(extra[1:]) / extra[0]:>12.2f}")
            if "best_epochs" in r:
                lines.append(f"  the mean of {len(r['best_epochs'])} members, scored at epochs "
                             f"{', '.join(map(str, r['best_epochs']))} of {epochs}, their best on the validation samples "
                             f"({', '.join(f'{e:.4f}' for e in r['val_errors'])})")
            elif "best_epoch" in r:
                lines.append(f"  scored at epoch {r['best_epoch']} of {epochs}, its best on the validation "
                             f"samples ({r['val_error']:.4f})")
        lines += [f"{name:<{width}}failed: {why}" for name, why in res.get("failed", {}).items()]
    return "\n".join(lines)


def plot(results: dict, folder: Path, prefix: str = "darcy_compare") -> list[Path]:
    """Error vs mesh (one line per model) and error on the training mesh vs seconds per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fams = list(results)
    paths = []
    fig, axes = plt.subplots(1, len(fams), figsize=(5.2 * len(fams), 3.8), squeeze=False)
    for ax, family in zip(axes[0], fams):
        res = results[family]
        meshes = list(res["nodes"])
        for name, r in res["models"].items():
            ax.plot(range(len(meshes)), [r["test"][m] for m in meshes], "o-", label=name)
        ax.set_xticks(range(len(meshes)), [f"{m}\n({res['nodes'][m]})" for m in meshes])
        ax.set_yscale("log")
        ax.set_ylabel("test relative L2(D) error")
        ax.set_title(family)
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    paths.append(folder / f"{prefix}_mesh.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(fams), figsize=(5.2 * len(fams), 3.8), squeeze=False)
    for ax, family in zip(axes[0], fams):
        for name, r in results[family]["models"].items():
            ax.scatter(r["seconds_per_epoch"], r["test"]["train"], label=name)
            ax.annotate(name, (r["seconds_per_epoch"], r["test"]["train"]), fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("seconds per training epoch")
        ax.set_ylabel("test error, training mesh")
        ax.set_title(family)
    fig.tight_layout()
    paths.append(folder / f"{prefix}_time.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def combine(paths: list[Path], out: Path) -> dict:
    """Merge ``results.json`` files of runs with the same scale (e.g. models added later) into ``out``."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    if any(r["scale"] != runs[0]["scale"] or r.get("domain", "square") != runs[0].get("domain", "square")
           for r in runs):
        raise ValueError("can only combine runs of the same scale and domain")
    results = runs[0]["results"]
    for run in runs[1:]:
        for family, res in run["results"].items():
            results[family]["models"].update(res["models"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(markdown(results, Scale(**runs[0]["scale"])))
    plot(results, out)
    print(table(results))
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES))
    parser.add_argument("--families", nargs="+", default=["piecewise", "lognormal"])
    parser.add_argument("--models", nargs="+", help="subset of models (default: all available)")
    parser.add_argument("--device", default="cpu")
    for field in ("mesh_n", "n_train", "n_test", "epochs", "batch_size", "width", "depth", "grid", "modes",
                  "mesh_fno_modes"):
        parser.add_argument("--" + field.replace("_", "-"), type=int, help=f"override the scale's {field}")
    parser.add_argument("--quadrature", choices=["nodal", "p1"],
                        help="mesh_fno's Fourier coefficients: the nodal quadrature (default) or the exact "
                             "integral of the nodal values' piecewise-linear interpolant (MeshFNO quadrature='p1')")
    parser.add_argument("--mesh-fno-local", type=float, metavar="CELLS",
                        help="give mesh_fno a local integral in every block (MeshFNO local=...), its ball's "
                             "radius in cells of the training mesh (default: none)")
    parser.add_argument("--weight-decay", type=float,
                        help="AdamW's weight decay, the same for every model (default 1e-4)")
    parser.add_argument("--seconds", type=float,
                        help="wall-clock training budget per model (epochs follow from its speed; default: --epochs)")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="what --seconds counts: wall time, or the process's CPU time, which other work on a "
                             "shared machine does not stretch (use with --threads 1; default wall)")
    parser.add_argument("--domain", default="square", choices=DOMAINS, help="training domain (default square)")
    parser.add_argument("--out", type=Path, help="folder for results.json, table.md and the plots")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--data-workers", type=int,
                        help="processes solving the Darcy samples (the same samples for any number; default 1)")
    parser.add_argument("--combine", nargs="+", type=Path, metavar="RESULTS_JSON",
                        help="train nothing: merge the models of earlier runs of one scale into --out")
    parser.add_argument("--reference-targets", action="store_true",
                        help="also score every model against the twice-refined training mesh's solutions, "
                             "interpolated to each mesh (the same function on every mesh)")
    parser.add_argument("--resolve-quadrature", action="store_true",
                        help="also score every model on each mesh refined to the training mesh's longest edge "
                             "(input interpolated linearly to the new nodes, output read at the original ones)")
    parser.add_argument("--supersample", type=int, default=1, metavar="F",
                        help="geoattn models train and are scored on every mesh refined to the training mesh's "
                             "longest edge / F (geoattn.eval.ResolvedQuadrature: input interpolated linearly, "
                             "output read at the data's nodes); mesh_fno's modes follow the refined training "
                             "mesh (default 1: the meshes as they are)")
    parser.add_argument("--mix-resolution", type=float, metavar="P",
                        help="geoattn models compute a share P of their training batches on the training mesh "
                             "refined to half its longest edge (input interpolated linearly, output read at the "
                             "data's nodes), the others on the mesh as it is; scored on the meshes as they are "
                             "(default 0)")
    parser.add_argument("--coarsen", type=float, metavar="P",
                        help="share P of the training samples whose input geoattn's models see through a random "
                             "subset of the nodes, thinned harder toward one side, interpolated back (default 0)")
    parser.add_argument("--symmetries", action="store_true",
                        help="train every model on each training sample carried by the domain's symmetries "
                             "(SYMMETRIES: the square's 8, the L-shape's diagonal reflection), checked with "
                             "geoattn.mesh.symmetry; the epochs follow the larger set")
    parser.add_argument("--validation", type=int, metavar="K",
                        help="K more samples on the training mesh, scored after every epoch: each model is "
                             "tested at its best epoch on them (its best.pt), not its last (default 0: none)")
    parser.add_argument("--ensemble", type=int, metavar="K",
                        help="train K members of every model (seeds 0..K-1), each for 1/K of --seconds (or "
                             "--epochs each, without a budget), and score their mean (geoattn.train.Ensemble; "
                             "default 1)")
    parser.add_argument("--fem-floor", action="store_true",
                        help="train nothing: print how far each mesh's finite-element targets are from a "
                             "twice-refined solution (the error floor of the cross-mesh scores)")
    args = parser.parse_args(argv)
    if args.supersample < 1:
        parser.error(f"--supersample must be at least 1, got {args.supersample}")
    if args.ensemble is not None and args.ensemble < 1:
        parser.error(f"--ensemble must be at least 1, got {args.ensemble}")
    if args.mix_resolution is not None and not 0 <= args.mix_resolution <= 1:
        parser.error(f"--mix-resolution must be in [0, 1], got {args.mix_resolution}")
    if args.coarsen is not None and not 0 <= args.coarsen <= 1:
        parser.error(f"--coarsen must be in [0, 1], got {args.coarsen}")
    if args.mix_resolution and args.supersample > 1:
        parser.error("--mix-resolution trains on the meshes as they are and refined; --supersample on the refined "
                     "ones only: give one of them")
    if args.supersample > 1 and args.resolve_quadrature:
        parser.error("--supersample already scores every mesh refined (finer than --resolve-quadrature would); "
                     "give one of them")
    if args.symmetries and args.domain not in SYMMETRIES:
        parser.error(f"--symmetries: the {args.domain!r} domain has no symmetry but the identity; "
                     f"domains with symmetries: {sorted(SYMMETRIES)}")
    if args.combine:
        return combine(args.combine, args.out)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    if args.threads:
        torch.set_num_threads(args.threads)
    scale = replace(SCALES[args.scale], **{k: v for k, v in vars(args).items()
                                           if k in Scale.__dataclass_fields__ and v is not None})
    if args.fem_floor:
        floors = {f: fem_floor(scale, f, args.domain) for f in args.families}
        for family, floor in floors.items():
            print(f"{family}: " + ", ".join(f"{k} {v:.4f}" for k, v in floor.items()))
        return floors
    device = torch.device(args.device)
    tic = time.perf_counter()
    results = {f: run_family(f, scale, args.models, device, domain=args.domain, reference=args.reference_targets,
                             resolve=args.resolve_quadrature) for f in args.families}
    print(table(results))
    machine = describe_machine(device)
    load = os.getloadavg()
    print(f"scale {args.scale}: {asdict(scale)}; domain {args.domain}; device {device} ({machine}); total "
          f"{time.perf_counter() - tic:.0f} s; load average at the end {load[0]:.1f} / {load[2]:.1f} (1 / 15 min)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        plain = {f: {k: v for k, v in r.items() if k not in ("report", "operators")} for f, r in results.items()}
        (args.out / "results.json").write_text(json.dumps(
            {"scale": asdict(scale), "domain": args.domain, "device": str(device), "machine": machine, "load": load, "results": plain}, indent=1))
        (args.out / "table.md").write_text(markdown(results, scale))
        plot(results, args.out)
    return results


if __name__ == "__main__":
    main()
