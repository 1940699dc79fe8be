"""Darcy flow with the continuum-attention paper's covariance, trained with the H1 loss on a
uniform grid and evaluated on non-uniform meshes never trained on, with and without quadrature
weights.

    python benchmarks/darcy_calvello.py --scale cpu --out bench_out/darcy_calvello --figure docs/images/darcy_calvello_transfer.png
    python benchmarks/darcy_calvello.py --scale gpu --out bench_out/darcy_calvello_gpu

The problem is Table 1 of Calvello, Kovachki, Levine and Stuart (§6.2.2):
:math:`-\\nabla\\cdot(a\\nabla u) = 1` on the unit square, :math:`u = 0` on the boundary,
:math:`a = e^g`, :math:`g \\sim \\mathcal N(0, 48^2(-\\Delta + 12^2 I)^{-2})`
(:mod:`problems.calvello`). Each coefficient is one function, evaluated at the nodes of every
mesh (the input) and at the quadrature points of a fine reference mesh, where the P1 solution is
computed once and interpolated to the nodes of every mesh (the target): the targets of all meshes
are the same continuum solution, up to the reference's discretisation error, and a model's error
on a mesh is its own.

Meshes of the unit square (triangles):

- ``grid``: the uniform training grid (lumped P1 weights);
- ``grid x1.5``: a finer uniform grid;
- ``irregular``: a Delaunay mesh of jittered points (:func:`geoattn.mesh.families.unit_square`);
- ``boundary``: the grid mapped by :math:`s \\mapsto s - 0.6\\sin(2\\pi s)/(2\\pi)` on each axis,
  4 times finer at the boundary than in the middle;
- ``graded``: the grid mapped by :math:`s \\mapsto s^3` (cells shrink like :math:`h^3` toward a corner).

The models (``--models``, default TNO as in Table 1) are trained by :class:`geoattn.train.Trainer`
on the grid with the relative :math:`H^1` loss (P1 gradients on the cells) and scored as in
``kolmogorov.py``, whose training and scoring functions this script imports: median relative
:math:`L^2` error over the test samples with each mesh's weights, and the ablation with the
node-average weights fed to the same trained model.

``--scale cpu`` is a 32 x 32 grid, 200 training samples and a width-32 TNO (see :data:`SCALES`);
``--scale gpu`` is the paper's Table 1 setting: 64 x 64 grid, 3600 training and 200 test
samples, width 128, batch 2, learning rate 1e-3.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from problems.calvello import calvello_coefficient, calvello_field
from geoattn.data.darcy import DarcyProblem, sample_data
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.train import relative_l2
from kolmogorov import (best_model, curves_section, error_bars, load_or_make, markdown, model_kwargs,
                        parse_arguments, report, save_png, train_models)

log = logging.getLogger("darcy_calvello")

#: The paper's Table 1 (arXiv v3), lognormal Darcy on a 64 x 64 grid: median relative L2 test error.
PAPER = {"tno": 1.19e-2, "fno": 1.96e-2, "afno": 2.57e-2, "galerkin": 7.30e-2}


@dataclass
class Scale:
    """One run's sizes: training grid, reference mesh of the targets, samples, training."""

    grid: int
    reference: int
    n_train: int
    n_test: int
    epochs: int
    family: str = "lognormal"
    version: str = "v1"
    batch_size: int = 4
    lr: float = 1e-3
    width: int = 32
    depth: int = 3
    num_heads: int = 4
    models: tuple[str, ...] = ("tno",)
    seconds: float | None = None  # training-time budget per model (epochs is then the most)


SCALES = {
    "tiny": Scale(grid=6, reference=12, n_train=4, n_test=2, epochs=1, batch_size=2, width=8, depth=1,
                  num_heads=2),
    "cpu": Scale(grid=32, reference=128, n_train=200, n_test=50, epochs=12),
    "gpu": Scale(grid=64, reference=192, n_train=3600, n_test=200, epochs=100, batch_size=2, width=128,
                 depth=6, num_heads=8),
    # what a few minutes of a shared GPU afford (paper2d_gpu.sh): the paper's grid, a coarser
    # reference, 1000 + 100 samples, depth 4
    "gpu-lease": Scale(grid=64, reference=128, n_train=1000, n_test=100, epochs=100, batch_size=4, width=128,
                       depth=4, num_heads=8, models=("tno", "galerkin", "vit", "fano")),
}


def boundary_refined(n: int, amplitude: float = 0.6):
    """The ``n x n`` grid mapped by ``s - amplitude sin(2 pi s) / (2 pi)`` on each axis: cells
    ``(1 - amplitude) / (1 + amplitude)`` times smaller at the boundary than in the middle."""
    import skfem

    s = np.linspace(0.0, 1.0, n + 1)
    x = s - amplitude * np.sin(2 * np.pi * s) / (2 * np.pi)
    return families.from_skfem(skfem.MeshTri1.init_tensor(x, x))


def benchmark_meshes(n: int) -> dict:
    """The training grid first, then the meshes it is evaluated on."""
    return {"grid": families.unit_square(n), "grid x1.5": families.unit_square(round(1.5 * n)),
            "irregular": families.unit_square(n, "irregular", seed=1),
            "boundary": boundary_refined(n), "graded": families.unit_square(n, "graded")}


def solutions(scale: Scale, meshes: dict, seed: int, cache: Path | None = None) -> dict:
    """Coefficient at the nodes and the reference solution interpolated to the nodes, per mesh:
    ``{mesh: {"x": [S, N], "y": [S, N]}}`` for the training and test samples (in this order)."""
    key = {"kind": "darcy_calvello", "seed": seed, "grid": scale.grid, "reference": scale.reference,
           "family": scale.family, "version": scale.version, "n": scale.n_train + scale.n_test,
           "meshes": sorted(meshes)}

    def make():
        reference = DarcyProblem(families.unit_square(scale.reference))
        field = calvello_field(scale.version)
        probes = {name: reference.basis.probes(np.ascontiguousarray(m.points[:, :2].T)).tocsr()
                  for name, m in meshes.items()}
        out = {name: {"x": [], "y": []} for name in meshes}
        for i in range(key["n"]):
            a = calvello_coefficient(seed, i, scale.family, field)
            u = reference.solve(a)
            for name, m in meshes.items():
                out[name]["x"].append(a(m.points[:, :2]))
                out[name]["y"].append(probes[name] @ u)
        return {name: {k: torch.as_tensor(np.stack(v)) for k, v in d.items()} for name, d in out.items()}

    return load_or_make(cache, key, make)


#: every mesh is read centred on the square's middle (float32 keeps the graded meshes' corner nodes apart)
ORIGIN = (0.5, 0.5)


def samples(meshes: dict, values: dict, rows: slice) -> dict[str, list]:
    """:class:`~geoattn.mesh.MeshData` samples (lumped weights, cells) of ``rows`` on every mesh,
    read in the frame centred at :data:`ORIGIN`."""
    out = {}
    for name, m in meshes.items():
        base = from_meshio(m, origin=list(ORIGIN))
        out[name] = [sample_data(base, x, y) for x, y in zip(values[name]["x"][rows].numpy(),
                                                             values[name]["y"][rows].numpy())]
    return out


def fem_errors(scale: Scale, meshes: dict, values: dict, seed: int, rows: slice) -> dict[str, list[float]]:
    """Relative L2 errors of each mesh's own P1 solution against the targets (the reference
    solution): the accuracy of the classical solver on that mesh, for comparison."""
    field = calvello_field(scale.version)
    out = {}
    for name, m in meshes.items():
        problem, mesh = DarcyProblem(m), Mesh.from_sample(from_meshio(m, dtype=torch.float64))
        out[name] = [float(relative_l2(torch.as_tensor(problem.solve(calvello_coefficient(seed, i, scale.family, field))),
                                       values[name]["y"][i].double(), mesh))
                     for i in range(rows.start, rows.stop)]
    return out


def mean_errors(meshes: dict, values: dict, train_rows: slice, test_rows: slice) -> dict[str, list[float]]:
    """Relative L2 errors of predicting the mean of the training targets (on each mesh), whatever
    the coefficient: what a model that ignores its input scores."""
    out = {}
    for name, m in meshes.items():
        mesh = Mesh.from_sample(from_meshio(m, dtype=torch.float64))
        mean = values[name]["y"][train_rows].double().mean(0)  # quadrature-ok: mean over samples
        out[name] = [float(relative_l2(mean, y.double(), mesh)) for y in values[name]["y"][test_rows]]
    return out


def plot(meshes: dict, values: dict, result: dict, op, index: int, path: Path, title: str) -> None:
    """Coefficient and solution on the graded mesh, the model's error there, median errors per mesh."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.tri import Triangulation

    m = meshes["graded"]
    tri = Triangulation(m.points[:, 0], m.points[:, 1], m.cells_dict["triangle"])
    data = samples({"graded": m}, {"graded": values["graded"]}, slice(index, index + 1))["graded"][0]
    with torch.no_grad():
        pred = op(data.x, Mesh.from_sample(data))[:, 0]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
    for ax, field, label in ((axes[0], np.log(data.x[:, 0].numpy()), r"$\log a$ (graded mesh)"),
                             (axes[1], data.y[:, 0].numpy(), r"$u$"),
                             (axes[2], (pred - data.y[:, 0]).abs().numpy(), f"|error| ({title})")):
        im = ax.tripcolor(tri, field, shading="gouraud", cmap="magma" if ax is axes[2] else "viridis")
        ax.triplot(tri, lw=0.1, color="w", alpha=0.4)
        ax.set_aspect("equal")
        ax.set_title(label)
        fig.colorbar(im, ax=ax, shrink=0.8)
    error_bars(axes[3], result, title)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    def family(parser):
        parser.add_argument("--family", choices=("lognormal", "piecewise"),
                            help="coefficient map (default: lognormal)")

    args, scale, names, device = parse_arguments(
        argv, __doc__, SCALES, Scale, ("grid", "reference", "n_train", "n_test", "epochs", "batch_size", "width", "depth"),
        "registered model names (default: tno)", "folder to keep the generated samples in", extra=family,
        script="darcy_calvello")
    log.setLevel(logging.INFO)
    tic = time.perf_counter()
    meshes = benchmark_meshes(scale.grid)
    values = solutions(scale, meshes, args.seed, args.cache)
    train_rows, test_rows = slice(0, scale.n_train), slice(scale.n_train, scale.n_train + scale.n_test)
    training = samples({"grid": meshes["grid"]}, values, train_rows)["grid"]
    tests = samples(meshes, values, test_rows)
    data_seconds = time.perf_counter() - tic
    log.info("data: %d + %d samples in %.0f s", scale.n_train, scale.n_test, data_seconds)
    results = {"nodes": {k: len(m.points) for k, m in meshes.items()}, "models": {},
               "training mean": mean_errors(meshes, values, train_rows, test_rows),
               "P1 solve on the mesh": fem_errors(scale, meshes, values, args.seed, test_rows)}

    def kwargs_of(name: str) -> dict:
        kwargs = model_kwargs(name, scale, len(meshes["grid"].points))  # reads width, depth, num_heads
        if name == "mesh_fno":
            kwargs["padding"] = 0.25  # not periodic: FNO's domain padding
        return kwargs

    operators = train_models(names, kwargs_of, training, tests, scale, device, args.seed,
                             args.loss == "h1", results, log, args.out)
    table = markdown(results, baselines=("training mean", "P1 solve on the mesh"), paper=PAPER,
                     paper_title="paper (Table 1, 64 x 64 grid)")
    baselines = {"training mean": float(np.median(results["training mean"]["grid"])), "paper TNO (64^2)": PAPER["tno"]}
    table += "\n" + curves_section(args, results, baselines, f"Calvello's Darcy, {scale.grid}^2 grid, "
                                    f"{scale.n_train} training samples")
    report(args, scale, device, results, table, data_seconds, tic,
           title="Darcy with Calvello's covariance and the H¹ loss (`benchmarks/darcy_calvello.py`)")
    if args.figure and operators:
        best = best_model(results, operators)
        plot(meshes, values, results["models"][best], operators[best], scale.n_train, args.figure, best)
    return results


if __name__ == "__main__":
    main()
