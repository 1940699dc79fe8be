"""Kolmogorov flow (2-D Navier-Stokes on the torus): train on the uniform grid, evaluate on
scattered point sets never trained on, with and without quadrature weights.

    python benchmarks/kolmogorov.py --scale cpu --out bench_out/kolmogorov --figure docs/images/kolmogorov_transfer.png
    python benchmarks/kolmogorov.py --scale gpu --out bench_out/kolmogorov_gpu

The operator is the paper's one-step map :math:`\\omega(T) \\mapsto \\omega(T + \\Delta t)` of
Calvello, Kovachki, Levine and Stuart (§6.2.3): :math:`\\nu = 1/70`, forcing :math:`\\sin(4y)\\hat x`,
:math:`\\omega_0 \\sim \\mathcal N(0, 7^3(-\\Delta + 49 I)^{-5})`, :math:`T = 11`,
:math:`\\Delta t = 0.1` (:mod:`problems.navier_stokes`). Every pair is solved once, as a
trigonometric polynomial, and the *same* continuum pair is then read on every discretisation:

- ``grid``: the uniform training grid (trapezoid weights :math:`(2\\pi/n)^2`);
- ``grid x1.5``: a finer uniform grid;
- ``uniform``, ``graded``, ``patchy``: i.i.d. scattered points, as many as the training grid has
  nodes, from a constant density, a density 81 times higher near the origin than at
  :math:`(\\pi, \\pi)`, and one 9 times higher on :math:`[0, \\pi]^2` (periodic Voronoi weights);
- ``graded x4``: four times as many points from the graded density (the quadrature of the
  scattered sets converges as the points multiply; the node average does not).

Each model (``--models``, registered names of :func:`geoattn.models.build_model`) is trained once,
on the grid, with the relative :math:`H^1` loss (``--loss``) by :class:`geoattn.train.Trainer`, and
scored by the median (and mean) over the test pairs of the relative :math:`L^2` error, computed
with each discretisation's quadrature weights. The ablation feeds the same trained model the
node-average weights :math:`|D|/N` (:func:`geoattn.mesh.node_average_weights`) instead. The
``identity`` row predicts :math:`\\omega(T + \\Delta t) = \\omega(T)`; the ``linear part`` row adds
forcing and viscosity over the interval, exactly, and the ``Euler step`` row one explicit step of
the whole equation (:func:`physics_predictions`): how far a model gets without, and with, the
advection it has to learn.

``--scale cpu`` keeps the paper's flow, initial-condition measure, :math:`T` and :math:`\\Delta t`,
and shrinks everything else: the pairs are solved on a 64 x 64 grid in float32 (the 2/3 rule keeps
:math:`|k_j| \\le 21`; time step 1/64), the models train on the 32 x 32 grid (the paper: 416 x
416) with 160 training and 40 test pairs (the paper: 9000 / 500 / 500), width 32, depth 3 and
4 heads (the paper: 128 channels), for 10 epochs (AdamW with a one-cycle schedule, batch 4, peak
learning rate 1e-3). ``--scale gpu`` is the paper's size: 9000 training and 500 test pairs
(solved on a 128 x 128 grid in float64, read on the 416 x 416 grid), width 128, depth 6, 8 heads,
batch 4, learning rate 1e-3, 100 epochs (the paper gives no epoch count). TNO's attention is
quadratic in the nodes, so at 416^2 nodes it is left out of the default models of the gpu
scale; the paper's Kolmogorov models are ViT-NO, FANO, FNO and AFNO.

``darcy_calvello.py`` reuses this script's training and scoring functions.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import logging
import os
import statistics
import sys
import time
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch

from learning_curves import draw_learning_curves, time_table
from timing import machine as describe_machine
from results_page import add_docs_argument, markdown_table, write_page

from problems.navier_stokes import (LENGTH, KolmogorovSolver, PeriodicGaussianField, evaluate,
                                    grid_values, kolmogorov_pairs, pair_samples,
                                    periodic_voronoi_weights, scattered_points, torus_grid)
from geoattn.errors import ConfigError
from geoattn.mesh import Mesh, as_samples
from geoattn.models import MODELS, build_model
from geoattn.nn.spectral import resolved_modes
from geoattn.train import NormalizedOperator, Trainer, evaluate_errors, relative_l2

log = logging.getLogger("kolmogorov")

#: The paper's Table 3 (arXiv v3), Kolmogorov flow at 416 x 416: median relative L2 test error.
PAPER = {"vit": 1.07e-2, "fano": 6.34e-3, "fno": 1.52e-2, "afno": 3.99e-3}
#: the paper's modes per axis of the patched models' integral operators (ViT-NO 12, FANO 9); a patch
#: of 16 on the 416^2 grid resolves 25, on the cpu scale's 32^2 grid 1
PATCH_MODES = {"vit": 12, "fano": 9}


@dataclass
class Scale:
    """One run's sizes: solver grid and dtype, training grid, scattered points, pairs, training."""

    solver_n: int
    grid: int
    n_train: int
    n_test: int
    epochs: int
    points: int | None = None  # scattered points per set (default: grid ** 2)
    solver_dtype: str = "float64"
    time: float = 11.0
    interval: float = 0.1
    batch_size: int = 4
    lr: float = 1e-3
    width: int = 32
    depth: int = 3
    num_heads: int = 4
    models: tuple[str, ...] = ("tno", "galerkin", "slice", "mesh_fno")
    seconds: float | None = None  # training-time budget per model (epochs is then the most)
    target: str = "increment"  # what the model predicts: "increment" omega(T + dt) - omega(T), or "state"
    max_modes: int = 12  # the most modes per axis of a global spectral layer (the paper's FNO: 12)


SCALES = {
    "tiny": Scale(solver_n=16, grid=8, n_train=4, n_test=2, epochs=1, time=0.5, batch_size=2, width=8,
                  depth=1, num_heads=2, models=("galerkin",)),
    "cpu": Scale(solver_n=64, grid=32, n_train=160, n_test=40, epochs=10, solver_dtype="float32"),
    "gpu": Scale(solver_n=128, grid=416, n_train=9000, n_test=500, epochs=100, batch_size=4, width=128,
                 depth=6, num_heads=8, models=("galerkin", "slice", "mesh_fno")),
    # what a few minutes of a shared GPU afford (paper2d_gpu.sh): the gpu scale's pairs, read on the
    # 64 x 64 grid, 1000 + 100 of them, depth 4
    "gpu-lease": Scale(solver_n=128, grid=64, n_train=1000, n_test=100, epochs=100, batch_size=4, width=128,
                       depth=4, num_heads=8, models=("tno", "galerkin", "vit", "fano")),
}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_or_make(cache: Path | None, key: dict, make):
    """``make()`` (a dict of tensors), read from / written to ``cache`` under a hash of ``key``."""
    if cache is None:
        return make()
    name = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    path = Path(cache) / f"{key['kind']}_{name}.pt"
    if path.exists():
        log.info("reading %s", path)
        return torch.load(path, weights_only=True)
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(value, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)
    return value


def pairs(scale: Scale, seed: int, device: str, cache: Path | None = None) -> dict:
    """Fourier coefficients of ``omega(T)`` and ``omega(T + dt)`` for the training and test pairs."""
    key = {"kind": "kolmogorov", "seed": seed, "solver_n": scale.solver_n, "dtype": scale.solver_dtype,
           "time": scale.time, "interval": scale.interval, "n": scale.n_train + scale.n_test}

    def make():
        solver = KolmogorovSolver(scale.solver_n, dtype=getattr(torch, scale.solver_dtype), device=device)
        first, second = kolmogorov_pairs(key["n"], seed, time=scale.time, interval=scale.interval,
                                         field=PeriodicGaussianField(), solver=solver, show_progress=True)
        return {"first": first.cpu(), "second": second.cpu()}

    return load_or_make(cache, key, make)


def discretisations(scale: Scale, seed: int) -> dict[str, dict]:
    """``{name: {"pos", "weight", "cells", "grid"}}``: the training grid first, then the others."""
    out = {}
    for name, m in (("grid", scale.grid), ("grid x1.5", 2 * round(0.75 * scale.grid))):
        pos, weight, cells = torus_grid(m)
        out[name] = {"pos": pos, "weight": weight, "cells": cells, "grid": m}
    points = scale.points or scale.grid**2
    for k, (name, density, count) in enumerate((("uniform", "uniform", points), ("graded", "graded", points),
                                                ("patchy", "patchy", points), ("graded x4", "graded", 4 * points))):
        pos = scattered_points(count, density, seed=1000 * seed + k)
        out[name] = {"pos": torch.as_tensor(pos), "weight": torch.as_tensor(periodic_voronoi_weights(pos)),
                     "cells": None, "grid": None}
    return out


def samples_on(coefficients: dict, where: dict, rows: slice, device: str = "cpu") -> list:
    """:func:`pair_samples` of the pairs ``rows`` on one discretisation (the values computed on
    ``device``, the samples on the CPU)."""
    first, second = coefficients["first"][rows].to(device), coefficients["second"][rows].to(device)
    if where["grid"] is not None:
        x = grid_values(first, where["grid"]).reshape(len(first), -1)
        y = grid_values(second, where["grid"]).reshape(len(first), -1)
    else:
        pos = where["pos"].to(device)
        x, y = evaluate(first, pos), evaluate(second, pos)
    return pair_samples(x.cpu(), y.cpu(), where["pos"], where["weight"], where["cells"])


def model_kwargs(name: str, scale: Scale, nodes: int, period: float | None = None) -> dict:
    """Constructor arguments of a registered model at this scale: width and depth for all, heads
    for the attention models, for ``mesh_fno`` and the spectral decoder of ``galerkin`` (Cao's)
    the modes the training nodes resolve (:func:`geoattn.nn.spectral.resolved_modes`, at most
    ``scale.max_modes``, default 12 as in the paper's FNO), for the
    patched models (``vit``, ``fano``) 16 patches and the paper's modes (:data:`PATCH_MODES`), at
    most those their nodes resolve, and for every model that takes one the declared ``period``
    (Kolmogorov: the torus, ``LENGTH``; the nodes' bounding box is not the period), with, for the
    patched models, Remark 21's residual spectral layer on the whole torus (``final_modes``, the
    modes the training nodes resolve, at most ``scale.max_modes``)."""
    params = inspect.signature(MODELS[name].__init__).parameters
    kw = {"width": scale.width, "depth": scale.depth}
    most = max(1, min(getattr(scale, "max_modes", 12), resolved_modes(nodes, 2)))
    if "num_heads" in params:
        kw["num_heads"] = scale.num_heads
    if name == "mesh_fno":
        kw["modes"] = most
    if name == "galerkin":  # with Cao's spectral decoder
        kw.update(decoder="spectral", spectral={"modes": most,
                                                **({} if period is None else {"period": period})})
    if "num_patches" in params:  # ViT-NO, FANO: the paper's 16 patches and modes, at most what they resolve
        kw.update(num_patches=16, modes=min(PATCH_MODES[name], resolved_modes(nodes / 16, 2)))
    if period is not None and "period" in params:
        kw["period"] = period
        if "final_modes" in params:  # Remark 21: a residual spectral layer over the seams of the patches
            kw["final_modes"] = most
    return {k: v for k, v in kw.items() if k in params}


class IncrementOperator(torch.nn.Module):
    """The state after the interval from a model of the increment: ``x + op(x, mesh)``. Scored,
    and its node-average ablation taken (``unweighted``), like the operator it wraps."""

    def __init__(self, op: NormalizedOperator):
        super().__init__()
        self.op = op

    @property
    def unweighted(self) -> bool:
        return self.op.unweighted

    @unweighted.setter
    def unweighted(self, value: bool) -> None:
        self.op.unweighted = value

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        if query is not None:
            raise ConfigError("an increment model answers on its input mesh only; call it without query=")
        return x + self.op(x, mesh)


def increments(samples: list) -> list:
    """The samples with the increment ``y - x`` as their target."""
    out = []
    for d in samples:
        d = d.clone()
        d.y = d.y - d.x
        out.append(d)
    return out


def check_run_settings(folder: Path, settings: dict, defaults: dict | None = None) -> None:
    """Keep ``settings`` in ``folder/run.json``; refuse to resume a run made with other settings
    (the list of models run beside it, ``settings["scale"]["models"]``, is not one). A scale
    setting the stored run lacks (one added to the scale since) counts as its value in
    ``defaults``, the scale's defaults: the stored run was made with it."""
    path = folder / "run.json"
    settings = json.loads(json.dumps(settings))
    settings.get("scale", {}).pop("models", None)
    stored = json.loads(path.read_text()) if path.exists() else settings
    if "scale" in stored:
        stored["scale"] = {**json.loads(json.dumps(defaults or {})), **stored["scale"]}
    stored.get("scale", {}).pop("models", None)
    if stored != settings:
        raise ConfigError(f"{folder} holds a run with other settings ({path}); give another --out, or delete it")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1))


def train(name: str, kwargs: dict, samples: list, scale: Scale, device: torch.device, seed: int = 0,
          h1: bool = True, out: Path | None = None, curve_samples: list | None = None,
          ) -> tuple[torch.nn.Module, dict]:
    """Train one registered model on ``samples`` with :class:`geoattn.train.Trainer` (to the
    increment ``y - x`` when ``scale.target == "increment"``; the operator returned then adds
    the input back). With ``out``, checkpoints go to ``out`` and a run found there is resumed.
    With ``curve_samples``, the median relative L2 error on them is recorded after every epoch
    (``info["curve"]``: ``[(epoch, error)]``, epochs from 1)."""
    increment = getattr(scale, "target", "state") == "increment"
    if out is not None:
        defaults = {f.name: f.default for f in fields(scale) if f.default is not MISSING}
        check_run_settings(out, {"model": name, "kwargs": kwargs, "scale": asdict(scale), "h1": h1, "seed": seed},
                           defaults)
    torch.manual_seed(seed)
    model = build_model(name, in_channels=1, out_channels=1, dim=2, **kwargs)
    op = NormalizedOperator(model).to(device)
    scored = IncrementOperator(op) if increment else op
    trainer = Trainer(op, out, epochs=scale.epochs, batch_size=scale.batch_size, lr=scale.lr, h1=h1,
                      seed=seed, progress=out is None, seconds=getattr(scale, "seconds", None))
    curve = as_samples([d.to(device) for d in curve_samples]) if curve_samples else None

    def on_epoch(epoch: int, row: dict) -> None:
        row["test"] = statistics.median(evaluate_errors(scored, curve, scale.batch_size).tolist())
        log.info("%s epoch %d: train %.3e, test (median relative L2) %.3e, %.0f s", name, epoch + 1,
                 row["train"], row["test"], row["train_seconds"])

    training = [d.to(device) for d in samples]
    history = trainer.fit(increments(training) if increment else training, resume=out is not None,
                          on_epoch=on_epoch if curve is not None else None)
    info = {"parameters": sum(p.numel() for p in op.parameters() if p.requires_grad),
            "train_seconds": history[-1]["train_seconds"], "train_loss": history[-1]["train"],
            "epochs": len(history), "kwargs": kwargs, "target": "increment" if increment else "state",
            "curve": [(row["epoch"] + 1, row["test"]) for row in history if "test" in row]}
    return scored, info


@torch.no_grad()
def score(op: torch.nn.Module, sets: dict[str, list], device: torch.device, batch_size: int = 4) -> dict:
    """Per-sample relative L2 errors on every set, with the quadrature weights and with the
    node-average weights: ``{set: {"weighted": [S], "node_average": [S]}}``."""
    out = {}
    for name, samples in sets.items():
        samples = [d.to(device) for d in samples]
        row = {}
        for mode in ("weighted", "node_average"):
            op.unweighted = mode == "node_average"
            row[mode] = evaluate_errors(op, samples, batch_size).cpu().tolist()
        op.unweighted = False
        out[name] = row
    return out


def summary(errors: list[float]) -> tuple[float, float]:
    """Median and mean of per-sample errors."""
    return statistics.median(errors), statistics.fmean(errors)


def identity_errors(sets: dict[str, list]) -> dict[str, list[float]]:
    """Relative L2 errors of predicting the input itself (``y ~ x``), per set."""
    return {name: [float(relative_l2(d.x, d.y, Mesh(d.pos, d.weight))) for d in samples] for name, samples in sets.items()}


def energy_above(coefficients: dict, rows: slice, modes: tuple[int, ...]) -> dict[str, list[float]]:
    r"""The share of the squared :math:`L^2` and :math:`H^1` norms (summed over the pairs ``rows``)
    of :math:`\omega(T)` and of the increment :math:`\omega(T + \Delta t) - \omega(T)` in the
    modes :math:`\|k\|_\infty > K`, for each ``K`` of ``modes``: ``{"omega(T), L2": [...], ...}``.
    What a model that resolves ``K`` modes per axis cannot represent, and what weighs in the
    relative :math:`H^1` loss."""
    first = coefficients["first"][rows]
    fields = {"omega(T)": first, "increment": coefficients["second"][rows] - first}
    n = first.shape[-2]
    kx = torch.fft.fftfreq(n, 1.0 / n).reshape(-1, 1)
    ky = torch.arange(first.shape[-1], dtype=kx.dtype).reshape(1, -1)
    kinf, k2 = torch.maximum(kx.abs(), ky), kx**2 + ky**2
    halves = torch.where(ky > 0, 2.0, 1.0)  # the real FFT stores one of each conjugate pair
    out = {}
    for name, c in fields.items():
        power = (c.abs().double() ** 2).sum(0) * halves
        for norm, density in (("L2", power), ("H1", power * (1 + k2))):
            out[f"{name}, {norm}"] = [float(density[kinf > K].sum() / density.sum()) for K in modes]
    return out


def physics_predictions(coefficients: dict, rows: slice, scale: Scale) -> dict[str, torch.Tensor]:
    r"""Fourier coefficients of two predictions from the exact equations, for the pairs ``rows``:

    - ``linear part``: forcing and viscosity only, exactly integrated over the interval,
      :math:`e^{-\nu k^2 \Delta t}\hat\omega + \Delta t\,\hat f` (no advection);
    - ``Euler step``: one explicit step of the whole equation over the interval,
      :math:`e^{-\nu k^2 \Delta t}\hat\omega + \Delta t\,N(\hat\omega)`, with the solver's
      dealiased advection :math:`N`.

    They show how much of the increment a model must learn from the advection, the quadratic
    and nonlocal (Biot-Savart) term."""
    first = coefficients["first"][rows]
    solver = KolmogorovSolver(scale.solver_n, dtype=getattr(torch, scale.solver_dtype))
    first = first.to(solver.cdtype)
    decay = torch.exp(-solver.nu * solver.k2 * scale.interval)
    return {"linear part": decay * first + scale.interval * solver.forcing,
            "Euler step": decay * first + scale.interval * solver.tendency(first)}


def truncated_euler(coefficients: dict, rows: slice, scale: Scale, modes: tuple[int, ...]) -> dict[int, float]:
    r"""Median relative :math:`L^2` error (on the solver's grid) of the Euler step of
    :func:`physics_predictions` with the advection computed from :math:`\omega(T)` cut to the
    modes :math:`\|k\|_\infty \le K`, for each ``K`` of ``modes``: what one step of the exact
    equation scores when its derivatives see only ``K`` modes per axis, as a model's spectral layers
    or a coarser grid do."""
    first = coefficients["first"][rows]
    second = coefficients["second"][rows]
    solver = KolmogorovSolver(scale.solver_n, dtype=getattr(torch, scale.solver_dtype))
    first, second = first.to(solver.cdtype), second.to(solver.cdtype)
    n = first.shape[-2]
    kx = torch.fft.fftfreq(n, 1.0 / n).reshape(-1, 1)
    ky = torch.arange(first.shape[-1], dtype=kx.dtype).reshape(1, -1)
    kinf = torch.maximum(kx.abs(), ky)
    decay = torch.exp(-solver.nu * solver.k2 * scale.interval)
    out = {}
    for K in modes:
        step = decay * first + scale.interval * solver.tendency(first * (kinf <= K))
        a, b = grid_values(step, n), grid_values(second, n)
        out[K] = statistics.median(((a - b).flatten(1).norm(dim=1) / b.flatten(1).norm(dim=1)).tolist())
    return out


def physics_errors(coefficients: dict, where: dict[str, dict], rows: slice, scale: Scale,
                   tests: dict[str, list]) -> dict[str, dict[str, list[float]]]:
    """Relative L2 errors of :func:`physics_predictions` on every discretisation, per pair."""
    out = {}
    for name, predicted in physics_predictions(coefficients, rows, scale).items():
        out[name] = {}
        for s, w in where.items():
            as_pairs = {"first": predicted, "second": predicted}
            values = samples_on(as_pairs, w, slice(None))
            out[name][s] = [float(relative_l2(v.x, d.y, Mesh(d.pos, d.weight))) for v, d in zip(values, tests[s])]
    return out


def markdown(results: dict, reference: str = "grid", target: float = 1.25, paper: dict | None = None,
             baselines: tuple[str, ...] = (), paper_title: str = "paper (Table 3, 416 x 416 grid)") -> str:
    """Markdown tables: median relative L2 per model and set (with the quadrature weights and with
    the node average), the ratio of the worst set other than the uniform grids to the training
    set, whether it is within ``target``, one row per baseline (per-set errors in ``results``),
    and the paper's numbers."""
    sets = list(next(iter(results["models"].values()))["errors"])
    lines = []
    head = ["model", "weights"] + [f"{s} ({results['nodes'][s]})" for s in sets] + \
           [f"worst / {reference}", f"<= {target}x"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    others = [s for s in sets if s != reference and not s.startswith(reference)]
    for name, r in results["models"].items():
        for mode in ("weighted", "node_average"):
            med = {s: summary(r["errors"][s][mode])[0] for s in sets}
            worst = max(med[s] for s in others) / med[reference]
            label = "quadrature" if mode == "weighted" else "node average"
            ok = ("yes" if worst <= target else "no") if mode == "weighted" else ""
            lines.append("| " + " | ".join([name, label] + [f"{med[s]:.2e}" for s in sets]
                                           + [f"{worst:.2f}", ok]) + " |")
    for baseline in baselines:
        med = {s: statistics.median(results[baseline][s]) for s in sets}
        lines.append("| " + " | ".join([baseline, "quadrature"] + [f"{med[s]:.2e}" for s in sets] + ["", ""]) + " |")
    lines.append("")
    if paper:
        lines += [f"| {paper_title} | " + " | ".join(paper) + " |",
                  "|---|" + "---|" * len(paper),
                  "| median relative L2 | " + " | ".join(f"{v:.2e}" for v in paper.values()) + " |", ""]
    return "\n".join(lines)


def plot(coefficients: dict, results: dict, where: dict, op: NormalizedOperator, index: int, path: Path,
         title: str) -> None:
    """Input, increment, the model's error on the graded points (weighted and node-average) and
    the median errors per set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = 64
    pair = {k: v[index:index + 1] for k, v in coefficients.items()}
    first = grid_values(pair["first"], m)[0].numpy()
    second = grid_values(pair["second"], m)[0].numpy()
    sample = samples_on(pair, where, slice(0, 1))[0]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
    extent = (0, 2 * np.pi, 0, 2 * np.pi)
    im = axes[0].imshow(first.T, origin="lower", extent=extent, cmap="RdBu_r")
    axes[0].set_title(r"$\omega(T)$")
    fig.colorbar(im, ax=axes[0], shrink=0.8)
    im = axes[1].imshow((second - first).T, origin="lower", extent=extent, cmap="RdBu_r")
    axes[1].set_title(r"$\omega(T+\Delta t) - \omega(T)$")
    fig.colorbar(im, ax=axes[1], shrink=0.8)
    with torch.no_grad():
        pred = op(sample.x, Mesh(sample.pos, sample.weight))[:, 0]
    err = (pred - sample.y[:, 0]).abs().numpy()
    p = sample.pos.numpy()
    sc = axes[2].scatter(p[:, 0], p[:, 1], c=err, s=3, cmap="magma")
    axes[2].set_aspect("equal")
    axes[2].set_title(f"|error| on the graded points ({title})")
    fig.colorbar(sc, ax=axes[2], shrink=0.8)
    error_bars(axes[3], results, title)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def error_bars(ax, result: dict, title: str) -> None:
    """Median error per set, with the quadrature weights and with the node average, as bars."""
    sets = list(result["errors"])
    x = np.arange(len(sets))
    for k, mode in enumerate(("weighted", "node_average")):
        ax.bar(x + (k - 0.5) * 0.38, [summary(result["errors"][s][mode])[0] for s in sets], 0.38,
               label="quadrature weights" if mode == "weighted" else "node average")
    ax.set_xticks(x, sets, rotation=20, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median relative L2")
    ax.legend(fontsize=8)
    ax.set_title(title)


def save_png(fig, path: Path, colors: int = 256) -> None:
    """Save a figure as a PNG with a palette of ``colors`` colours (a third of the bytes)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=72)
    buffer.seek(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.open(buffer).convert("RGB").quantize(colors).save(path, optimize=True)


def parse_arguments(argv, doc: str, scales: dict, scale_cls, fields: tuple[str, ...],
                    models_help: str, cache_help: str, extra=None, script: str = "kolmogorov"):
    """The command line shared by this script and ``darcy_calvello.py``: ``(args, scale, names,
    device)``, with logging and torch threads set up (``extra(parser)`` adds further options;
    ``args.command`` is the command line, ``benchmarks/<script>.py`` and its arguments)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="cpu", choices=sorted(scales))
    parser.add_argument("--models", nargs="+", help=models_help)
    parser.add_argument("--device", default=default_device(), help="default: cuda if available, else cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loss", default="h1", choices=("h1", "l2"), help="training loss (default: h1, the paper's)")
    if extra is not None:
        extra(parser)
    for field in fields:
        parser.add_argument("--" + field.replace("_", "-"), type=int, help=f"override the scale's {field}")
    parser.add_argument("--lr", type=float, help="override the scale's peak learning rate")
    parser.add_argument("--seconds", type=float, help="training-time budget per model: the one-cycle schedule "
                        "follows the elapsed share of it and --epochs is the most (Trainer(seconds=))")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--cache", type=Path, help=cache_help)
    parser.add_argument("--out", type=Path, help="folder for results.json and table.md, and each model's run "
                        "in <out>/<model> (checkpoints, metrics.csv with the test error per epoch): "
                        "running the command again resumes the runs found there")
    parser.add_argument("--figure", type=Path, help="PNG path for the figure")
    parser.add_argument("--curves", type=Path, help="PNG path for the learning curves (needs --out)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if args.curves and not args.out:
        parser.error("--curves draws the test errors recorded in the runs under --out: give --out")
    args.command = " ".join(["python", f"benchmarks/{script}.py", *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("geoattn.train").setLevel(logging.INFO)  # one line per epoch
    torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in vars(args).items() if k in scale_cls.__dataclass_fields__ and v is not None}
    scale = replace(scales[args.scale], **overrides)
    names = args.models or list(scale.models)
    unknown = set(names) - set(MODELS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; registered: {sorted(MODELS)}")
    return args, scale, names, torch.device(args.device)


def train_models(names: list[str], kwargs_of, training: list, tests: dict, scale, device: torch.device,
                 seed: int, h1: bool, results: dict, logger: logging.Logger, out: Path | None = None) -> dict:
    """Train every model (``kwargs_of(name)``: its constructor keywords), score it on every test
    set into ``results["models"]``, and return the trained operators (on the CPU). With ``out``,
    each model's run lives in ``out/<name>`` (checkpoints, ``metrics.csv``, ``scores.json``): a
    run found there is resumed, a finished one only scored (or its scores read), and the test
    error on the training grid is recorded after every epoch (``info["curve"]``)."""
    operators = {}
    training_set = next(iter(tests))
    for name in names:
        folder = None if out is None else out / name
        op, info = train(name, kwargs_of(name), training, scale, device, seed, h1=h1, out=folder,
                         curve_samples=tests[training_set] if folder is not None else None)
        cached = None if folder is None else folder / "scores.json"
        if cached is not None and cached.exists() and json.loads(cached.read_text())["epochs"] == info["epochs"]:
            info["errors"] = json.loads(cached.read_text())["errors"]
        else:
            info["errors"] = score(op, tests, device, scale.batch_size)
            if cached is not None:
                cached.write_text(json.dumps({"epochs": info["epochs"], "errors": info["errors"]}))
        results["models"][name] = info
        operators[name] = op.cpu()
        logger.info("%s: %s", name, {s: round(summary(e["weighted"])[0], 5) for s, e in info["errors"].items()})
    return operators


def report(args, scale, device: torch.device, results: dict, table: str, data_seconds: float,
           tic: float, title: str = "Kolmogorov flow (`benchmarks/kolmogorov.py`)") -> float:
    """Print the table with a footer (scale, device, time, load) and write ``--out`` and the
    ``--docs`` page (headed ``title``); the total seconds."""
    total = time.perf_counter() - tic
    load = os.getloadavg()
    machine = describe_machine(device)
    footer = (f"scale {args.scale}: {asdict(scale)}; loss {args.loss}; device {device} ({machine}); data "
              f"{data_seconds:.0f} s; total {total:.0f} s; load average at the end {load[0]:.1f} / {load[2]:.1f} "
              "(1 / 15 min)")
    print(table)
    print(footer)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(
            {"scale": asdict(scale), "loss": args.loss, "device": str(device), "machine": machine,
             "data_seconds": data_seconds, "total_seconds": total, "load": load, "results": results}, indent=1))
        (args.out / "table.md").write_text(table + "\n" + footer + "\n")
    if args.docs:
        write_page(args.docs, title, args.command, table,
                   f"device {device} ({machine}), load average at the end "
                   f"{load[0]:.1f} / {load[2]:.1f} (1 / 15 min); recorded {time.strftime('%Y-%m-%d')}",
                   notes=f"Scale {args.scale}, loss {args.loss}; data {data_seconds:.0f} s, total {total:.0f} s.")
    results["total_seconds"] = total
    return total


def curves_section(args, results: dict, baselines: dict[str, float], title: str) -> str:
    """Draw the learning curves of ``results["models"]`` with ``baselines`` (``{label: error}``)
    to ``args.curves`` when given, and return the page's section on them: the figure's link (from
    the ``--docs`` page) and the time and error per model (:func:`learning_curves.time_table`)."""
    curves = {name: r["curve"] for name, r in results["models"].items() if r.get("curve")}
    if not curves:
        return ""
    lines = ["## Learning curves", ""]
    if args.curves:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2))
        draw_learning_curves(ax, curves, baselines)
        ax.set_title(title, fontsize=10)
        fig.tight_layout()
        save_png(fig, args.curves)
        plt.close(fig)
        link = os.path.relpath(args.curves, args.docs.parent if args.docs else Path.cwd())
        lines += [f"![learning curves]({Path(link).as_posix()})", ""]
    lines += ["Test error after every epoch (median relative L2 on the test pairs of the training grid); "
              "training time per model (over the sessions of a resumed run):", "", time_table(results["models"]), ""]
    return "\n".join(lines)


def best_model(results: dict, operators: dict) -> str:
    """The model with the lowest median error on the training discretisation ``grid``."""
    return min(operators, key=lambda n: summary(results["models"][n]["errors"]["grid"]["weighted"])[0])


def target_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", choices=("increment", "state"),
                        help="what the models predict: the increment omega(T + dt) - omega(T) (default; the "
                             "state is the input plus it) or the state omega(T + dt)")


def main(argv: list[str] | None = None) -> dict:
    args, scale, names, device = parse_arguments(
        argv, __doc__, SCALES, Scale, ("grid", "points", "n_train", "n_test", "epochs", "batch_size", "width", "depth",
                                    "max_modes"),
        "registered model names (default: the scale's)", "folder to keep the generated pairs in", extra=target_option)
    log.setLevel(logging.INFO)
    tic = time.perf_counter()
    coefficients = pairs(scale, args.seed, args.device, args.cache)
    data_seconds = time.perf_counter() - tic
    where = discretisations(scale, args.seed)
    train_rows, test_rows = slice(0, scale.n_train), slice(scale.n_train, scale.n_train + scale.n_test)
    training = samples_on(coefficients, where["grid"], train_rows, args.device)
    tests = {name: samples_on(coefficients, w, test_rows, args.device) for name, w in where.items()}
    log.info("data: %d + %d pairs in %.0f s (with the discretisations %.0f s)", scale.n_train, scale.n_test,
             data_seconds, time.perf_counter() - tic)
    results = {"nodes": {k: len(w["pos"]) for k, w in where.items()}, "models": {},
               "identity": identity_errors(tests), **physics_errors(coefficients, where, test_rows, scale, tests)}
    operators = train_models(names, lambda name: model_kwargs(name, scale, len(where["grid"]["pos"]), LENGTH),
                             training, tests, scale, device, args.seed, args.loss == "h1", results, log, args.out)
    table = markdown(results, paper=PAPER, baselines=("identity", "linear part", "Euler step"))
    modes = tuple(sorted({7, 12, scale.grid // 2 - 1}))
    shares = energy_above(coefficients, test_rows, modes)
    table += ("\n## Where the increment lives\n\nShare of the squared norm in the modes k with max(kx, ky) "
              f"above K in magnitude (test pairs; the {scale.grid}^2 grid resolves up to {scale.grid // 2 - 1}):\n\n"
              + markdown_table(["field, norm"] + [f"above K = {K}" for K in modes],
                               [[name] + [f"{v:.3f}" for v in values] for name, values in shares.items()]) + "\n")
    cut = tuple(sorted({5, 7, 12, scale.grid // 2 - 1, scale.solver_n // 3}))
    euler = truncated_euler(coefficients, test_rows, scale, cut)
    table += ("\n## What the modes a model sees allow\n\nMedian relative L2 error of one Euler step of the exact "
              "equation (the `Euler step` row, with the viscosity and forcing exact) when its advection is computed "
              f"from omega(T) cut to the modes max(|kx|, |ky|) <= K (test pairs, on the solver's {scale.solver_n}^2 grid, "
              f"which keeps K <= {scale.solver_n // 3}; the {scale.grid}^2 training grid holds K <= {scale.grid // 2 - 1}):\n\n"
              + markdown_table(["K"] + [str(K) for K in cut], [["Euler step"] + [f"{euler[K]:.3f}" for K in cut]]) + "\n")
    baselines = {name: statistics.median(results[name]["grid"]) for name in ("identity", "Euler step")}
    table += "\n" + curves_section(args, results, baselines, f"Kolmogorov flow, {scale.grid}^2 grid, "
                                    f"{scale.n_train} training pairs, target: {scale.target}")
    report(args, scale, device, results, table, data_seconds, tic,
           title=f"Kolmogorov flow, {scale.grid}^2 grid (`benchmarks/kolmogorov.py`)")
    if args.figure and operators:
        best = best_model(results, operators)
        plot(coefficients, results["models"][best], where["graded"], operators[best],
             scale.n_train, args.figure, best)
    return results


if __name__ == "__main__":
    main()
