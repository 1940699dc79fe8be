"""The Darcy race: every model trained for the same budget on the same samples, then scored.

:class:`Scale` holds the sizes of one run (:data:`SCALES` its presets); :func:`model_factories`
builds every model of the race (geoattn's and the peers of :mod:`darcy.peers`);
:func:`peer_configuration` and :func:`multigrid_configuration` size FNO's grid and the multigrid's
grids from the training mesh's node count; :func:`run_family` trains every model on one
coefficient family, for the same number of epochs or the same measured training time
(:class:`geoattn.train.Trainer`'s ``seconds``), and scores it on every mesh of the domain.
"""

from __future__ import annotations

import ctypes
import gc
import inspect
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial import Delaunay

from geoattn.data import refined_samples
from geoattn.eval import CrossMeshReport, cross_mesh_report, training_size
from geoattn.mesh.interpolation import linear_interpolation
from geoattn.mesh.refinement import refine_to
from geoattn.mesh.symmetry import augment
from geoattn.models import MODELS, build_model
from geoattn.operators import RefinedOperator
from geoattn.nn.spectral import resolved_modes
from geoattn.train import NormalizedOperator, symmetrize, train_ensemble

from .meshes import (PER_SAMPLE, SYMMETRIES, benchmark_meshes, cell_size, coefficient_field, domain_dim,
                     reference_targets, solve_samples)
from .peers import GridFNO, MeshGINO, Transolver

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
    grid: int | None = None  # FNO's grid points per axis (None: matched to the training mesh's nodes)
    modes: int = 16  # FNO's n_modes per axis (neuralop's Darcy example: 16)
    seconds: float | None = None  # training time per model, measured by the trainer (None: ``epochs``)
    supersample: int = 1  # geoattn models compute on meshes refined to the training edge / this
    mix_resolution: float = 0.0  # share of training batches geoattn models compute on meshes refined to the edge / 2
    coarsen: float = 0.0  # share of training samples whose input geoattn models see through a thinned node set
    mesh_fno_modes: int | None = None  # mesh_fno's modes (None: :func:`mesh_fno_modes`)
    quadrature: str = "nodal"  # mesh_fno's forward transforms: nodal quadrature or exact on the P1 interpolant
    mesh_fno_local: float | None = None  # mesh_fno's local integral: its radius in training-mesh cells (None: none)
    symmetries: bool = False  # train every model on the training samples carried by the domain's symmetries
    validation: int = 0  # held-out samples on the training mesh: each model keeps its best epoch on them
    ensemble: int = 1  # members per model, each trained for 1 / ensemble of the budget; scored as their mean
    data_workers: int = 1  # processes solving the Darcy samples (the samples do not depend on it)
    refine_data: bool = False  # geoattn's models train on the samples carried to the training mesh refined once
    between_nodes: float | None = None  # geoattn's models train with Trainer(between_nodes=λ) (not with refine_data)


SCALES = {
    "tiny": Scale(mesh_n=6, n_train=4, n_test=2, epochs=1, batch_size=2, width=8, depth=1, grid=8, modes=3),
    "cpu": Scale(mesh_n=12, n_train=100, n_test=30, epochs=8, width=32, depth=3),
    "race": Scale(mesh_n=32, n_train=200, n_test=50, epochs=10**6, width=32, depth=4, seconds=300,
                  quadrature="p1", refine_data=True),
    "race-gpu": Scale(mesh_n=64, n_train=1000, n_test=200, epochs=10**6, batch_size=8, width=32, depth=4,
                      seconds=240, quadrature="p1", refine_data=True),
    "gpu": Scale(mesh_n=64, n_train=1000, n_test=200, epochs=300, batch_size=8, width=64, depth=4),
}


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


def training_nodes(mesh_n: int, domain: str = "square") -> int:
    """Nodes of the domain's training mesh."""
    return len(benchmark_meshes(mesh_n, domain)["train"].points)


def domain_box(mesh_n: int, domain: str = "square") -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The bounding box of all the domain's meshes, ``(lower, upper)`` corners."""
    dim = domain_dim(domain)
    points = np.concatenate([m.points[:, :dim] for m in benchmark_meshes(mesh_n, domain).values()])
    return tuple(map(float, points.min(0))), tuple(map(float, points.max(0)))


def peer_configuration(scale: Scale, domain: str = "square") -> dict:
    """FNO through a grid as its users would configure it: ``s`` grid points per axis with
    ``s = round(N ** (1 / d))`` for the ``N`` nodes of the training mesh in ``d`` dimensions
    (unless the scale fixes ``grid``), neuralop's example modes (``scale.modes``, at most
    ``s // 2``), 4 layers, the scale's width; masked outside the domain unless it is the square
    or the cube (by each sample's own mesh on the domains of :data:`PER_SAMPLE`)."""
    dim = domain_dim(domain)
    s = scale.grid or round(training_nodes(scale.mesh_n, domain) ** (1 / dim))
    mask = None if domain in ("square", "cube") else "cells" if domain in PER_SAMPLE else domain
    return dict(grid=s, modes=min(scale.modes, s // 2), width=scale.width, depth=4, domain=mask, dim=dim)


def multigrid_configuration(scale: Scale, domain: str = "square", levels: int = 4) -> dict:
    """The multigrid's first grid over the domain's bounding box, with about as many cells as the
    training mesh has nodes (a multiple of ``2 ** (levels - 1)`` per axis), ``levels`` grids, and
    one smoothing step on the first grid, two on the others (``docs/choosing.rst``: the first
    grid's convolutions are most of a step's cost)."""
    side = training_nodes(scale.mesh_n, domain) ** (1 / domain_dim(domain))
    levels = max(1, min(levels, int(np.log2(side / 2)) + 1))  # at least 2 cells on the coarsest grid
    step = 2 ** (levels - 1)
    grid = max(2 * step, step * round(side / step))
    return dict(grid=grid, levels=levels, smoothing=(1,) + (2,) * (levels - 1), box=domain_box(scale.mesh_n, domain))


class MixedResolution(RefinedOperator):
    """A model that, in training, computes each batch on the meshes refined to ``size`` with
    probability ``fraction`` (as :class:`~geoattn.operators.RefinedOperator`, read at the data's nodes) and on the
    meshes as they are otherwise; in evaluation always on the meshes as they are. It trains one
    model on two discretisations of the same samples, so that it cannot fit the errors of one."""

    def __init__(self, op: torch.nn.Module, size: float, fraction: float):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
        super().__init__(op, size)
        self.fraction = float(fraction)

    def forward(self, x: torch.Tensor, mesh, *, query=None) -> torch.Tensor:
        if self.training and float(torch.rand(())) < self.fraction:
            return super().forward(x, mesh, query=query)
        return self.op(x, mesh) if query is None else self.op(x, mesh, query=query)


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
        self.fraction, self.least, self.pool, self.seed = float(fraction), float(least), int(pool), int(seed)
        self.rng = np.random.default_rng(seed)

    def subsets(self, mesh) -> list:
        """The pool of interpolation stencils of ``mesh`` (one graph), kept in its memo."""
        key = ("coarsened_inputs", self.fraction, self.least, self.pool, self.seed)
        return mesh.structure(key, lambda m: self._pool(m.pos))

    def _pool(self, pos: torch.Tensor) -> list:
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
        return pool

    def __call__(self, module: torch.nn.Module, args: tuple):
        if not module.training or self.fraction == 0:
            return None
        x, mesh = args
        parts = []
        for gx, graph in zip(x.split(list(mesh.layout.counts)), mesh.graphs()):
            if float(torch.rand(())) < self.fraction:
                pool = self.subsets(graph)
                index, coeff = pool[int(torch.randint(len(pool), ()))]
                gx = (gx[index.to(x.device)] * coeff.to(x)[..., None]).sum(1)
            parts.append(gx)
        return (torch.cat(parts), mesh)


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


def model_factories(scale: Scale, names: list[str] | None = None, domain: str = "square",
                    peer: dict | None = None) -> dict[str, callable]:
    """Constructors of every model to compare (geoattn ones that exist, neuralop ones if installed).

    Every model gets the scale's ``width`` and ``depth``; the graph-kernel models (and GINO) a ball
    radius of 2.5 training-mesh cells; the patched models the patches and modes of
    :func:`patch_resolution`; the mesh-native FNO (``mesh_fno``) the modes of
    :func:`mesh_fno_modes`, at most half the grid FNO's ``modes`` (neuralop's ``n_modes`` counts
    frequencies of both signs, ``K`` here is the largest ``|m|``); the slice transformer (``slice``)
    its default heads and slices. ``peer``: FNO's configuration instead of :func:`peer_configuration`
    (e.g. :func:`darcy.tuning.select_peer`'s choice; GINO keeps the default's grid and modes)."""
    out = {}
    dim = domain_dim(domain)
    radius = 2.5 * cell_size(scale.mesh_n, domain)
    for name, cls in MODELS.items():  # the registry holds the field-to-field models only
        params = inspect.signature(cls.__init__).parameters
        # ball radius of the graph-kernel models (here and GINO's): 2.5 cells of the training mesh
        kw = {k: v for k, v in dict(width=scale.width, depth=scale.depth, radius=radius).items()
              if k in params}
        if "num_patches" in params:
            kw.update(patch_resolution(scale.mesh_n, domain))
        elif "levels" in params:
            kw.update(multigrid_configuration(scale, domain))
        elif "modes" in params:
            if "quadrature" in params:
                kw["quadrature"] = scale.quadrature
            if "local" in params and scale.mesh_fno_local:
                kw["local"] = {"radius": scale.mesh_fno_local * cell_size(scale.mesh_n, domain)}
            kw["modes"] = scale.mesh_fno_modes or mesh_fno_modes(scale.mesh_n, domain, max(1, scale.modes // 2),
                                                                 scale.supersample)
        out[name] = lambda name=name, kw=kw: build_model(name, in_channels=1, out_channels=1, dim=dim, **kw)
        if "geometry" in params:  # the same model seeing the distance to the boundary too
            out[f"{name}-distance"] = lambda name=name, kw=kw: build_model(
                name, in_channels=1, out_channels=1, dim=dim, geometry="distance", **kw)
    try:
        import neuralop  # noqa: F401
    except ImportError:
        log.warning("neuralop is not installed: skipping GINO and FNO (pip install 'geoattn[compare]')")
    else:
        fno = peer_configuration(scale, domain)
        gino = dict(grid=fno["grid"], modes=fno["modes"], width=scale.width)
        out["neuralop-gino"] = lambda: MeshGINO(in_channels=1, out_channels=1, radius=radius, **gino)
        out["neuralop-fno"] = lambda: GridFNO(in_channels=1, out_channels=1, **(peer or fno))
    from physicsnemo_transolver import load_transolver

    if load_transolver() is None:
        log.warning("NVIDIA PhysicsNeMo is not installed: skipping its Transolver (see "
                    "benchmarks/physicsnemo_transolver.py for the install command)")
    else:
        out["physicsnemo-transolver"] = lambda: Transolver(in_channels=1, out_channels=1, dim=dim,
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


def configuration(op: torch.nn.Module) -> str:
    """A model's configuration in one line: its class and its constructor's settings."""
    model = op.members[0] if hasattr(op, "members") else op
    model = getattr(model, "model", model)
    model = getattr(model, "op", model)  # inside a RefinedOperator / MixedResolution
    settings = getattr(model, "hparams", None)
    text = ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else model.extra_repr()
    return f"{type(model).__name__}({text})"


def race_data(family: str, scale: Scale, seed: int = 0, domain: str = "square") -> dict:
    """The samples of one race: ``{"train": [...], "test": {mesh: [...]}, "val": [...] or None,
    "refined": [...] or None}`` (``refined``: the training samples carried to their meshes refined
    once, made here only on the domains of :data:`PER_SAMPLE`, where every sample has its own
    mesh and the solving processes refine them; elsewhere :func:`run_family` refines the one
    training mesh). On those domains the test meshes are new domains at the training size
    (``"train"``) and the same domains meshed finer (``"finer"``), and ``scale.validation``
    samples lie on domains of their own too."""
    tic = time.perf_counter()
    workers = scale.data_workers
    if domain in PER_SAMPLE:
        from .random_holes import random_holes_samples, test_sizes

        nodes = (scale.mesh_n + 1) ** 2
        refine = ("train",) if scale.refine_data else ()
        train = random_holes_samples({"train": nodes}, scale.n_train, seed, family, workers=workers, refine=refine)
        test = random_holes_samples(test_sizes(nodes), scale.n_test, seed, family, start=scale.n_train,
                                    workers=workers)
        val = random_holes_samples({"train": nodes}, scale.validation, seed, family, workers=workers,
                                   start=scale.n_train + scale.n_test)["train"] if scale.validation else None
        data = dict(train=train["train"], test=test, val=val, refined=train.get("train_refined"))
    else:
        meshes = benchmark_meshes(scale.mesh_n, domain)
        field = coefficient_field(meshes)
        train = solve_samples({"train": meshes["train"]}, scale.n_train, seed, family, field, workers=workers)["train"]
        test = solve_samples(meshes, scale.n_test, seed, family, field, start=scale.n_train, workers=workers)
        val = solve_samples({"train": meshes["train"]}, scale.validation, seed, family, field,
                            start=scale.n_train + scale.n_test, workers=workers)["train"] if scale.validation else None
        data = dict(train=train, test=test, val=val, refined=None)
    log.info("%s: data in %.1f s", family, time.perf_counter() - tic)
    return data


def run_family(family: str, scale: Scale, names: list[str] | None, device: torch.device,
               seed: int = 0, domain: str = "square", reference: bool = False, resolve: bool = False,
               data: dict | None = None, peer: dict | None = None) -> dict:
    """Train every model on one coefficient family and score it on every mesh of the domain
    (with ``reference``, also against :func:`reference_targets`; with ``resolve``, also each
    model wrapped in :class:`geoattn.operators.RefinedOperator`). ``data``: the samples of
    :func:`race_data`, made already (default: made here); ``peer``: FNO's configuration
    (:func:`model_factories`)."""
    if domain in PER_SAMPLE and (reference or scale.symmetries):
        raise ValueError(f"the {domain!r} domain gives every sample its own domain: no reference targets "
                         "or symmetries")
    meshes = benchmark_meshes(scale.mesh_n, domain)
    data = data or race_data(family, scale, seed, domain)
    train, test, val = data["train"], data["test"], data["val"]
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
    # geoattn's models, with refine_data: the loss against the data's interpolants between the nodes too
    if scale.refine_data and scale.between_nodes is not None:
        raise ValueError("refine_data and between_nodes are two ways of training between the nodes: choose one")
    fine = (data.get("refined") or refined_samples(train)) if scale.refine_data else train
    size = supersampled_size(scale.mesh_n, domain, scale.supersample)
    for name, make in model_factories(scale, names, domain, peer).items():
        def build(name=name, make=make):
            model = make()
            if scale.supersample > 1 and name in MODELS:  # geoattn's own models; the peers see the nodes
                model = RefinedOperator(model, size)
            elif scale.mix_resolution > 0 and name in MODELS:
                model = MixedResolution(model, supersampled_size(scale.mesh_n, domain, 2), scale.mix_resolution)
            if scale.coarsen > 0 and name in MODELS:
                model.register_forward_pre_hook(CoarsenedInputs(scale.coarsen, seed=seed))
            return NormalizedOperator(model).to(device)  # patched models: the trainer fits the partition

        torch.manual_seed(seed)
        try:
            # each of the ensemble's members trains for its share of the budget, measured as it trains
            budget = None if scale.seconds is None else scale.seconds / scale.ensemble
            cpu = time.process_time()
            with PeakMemory(device) as mem:
                between = {"between_nodes": scale.between_nodes} if name in MODELS and scale.between_nodes is not None else {}
                ensemble = train_ensemble(build, fine if name in MODELS else train, val, **between,
                                          members=scale.ensemble, seed=seed, epochs=scale.epochs,
                                          seconds=budget, batch_size=scale.batch_size, lr=scale.lr,
                                          weight_decay=scale.weight_decay, progress=False,
                                          restore_best=bool(val))  # a validation set: its best
            cpu = time.process_time() - cpu
        except RuntimeError as err:  # out of memory (torch.OutOfMemoryError), a device error, a diverged loss
            fail(name, err)
            continue
        op = ensemble if scale.ensemble > 1 else ensemble.members[0]
        seconds = [h["seconds"] for history in ensemble.histories for h in history]
        epochs = len(ensemble.histories[0])  # of each member (the last one partial with a budget)
        rows[name] = {"parameters": sum(p.numel() for p in op.parameters() if p.requires_grad),
                      "epochs": epochs,
                      "seconds_per_epoch": float(np.median(seconds)),
                      "train_seconds": float(np.sum(seconds)),
                      "cpu_seconds_per_epoch": cpu / len(seconds),
                      "config": configuration(op),
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
        targets = reference_targets(meshes, scale, family, coefficient_field(meshes), seed)
        targets = {k: [d.to(device) for d in v] for k, v in targets.items()}
        scored["test_reference"] = cross_mesh_report(operators, targets, reference="train",
                                                     batch_size=scale.batch_size)
    if resolve:
        size = training_size(meshes["train"])
        resolved = {name: RefinedOperator(op, size).to(device) for name, op in operators.items()}
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
