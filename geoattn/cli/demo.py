"""``geoattn demo``: train a Transformer Neural Operator on an irregular mesh, score it on others.

Generates Darcy flow samples (lognormal coefficient) on the irregular sample mesh
``meshes/square_irregular.vtu`` and the *same continuum samples* on its refinements (x4 and x16
nodes), on a strongly graded mesh, on another irregular mesh and on a coarser one; trains a TNO
with quadrature weights and the same TNO with node-average weights (the ablation); scores the
weighted TNO also through :class:`~geoattn.operators.RefinedOperator` (each mesh refined where it
is coarser than the training mesh, for the model's quadratures only); prints the cross-mesh
table; and writes a report folder with figures, metrics and ParaView files.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from pathlib import Path

import meshio
import torch

from ..eval import RefinedOperator, cross_mesh_report, plot_errors, plot_sample, training_size
from ..mesh import write_mesh
from ..models import build_model
from ..optional import require
from ..train import NormalizedOperator, Trainer
from ..train.checkpoint import check_writable
from .train import SEEDS, check_setting

log = logging.getLogger(__name__)
MESHES = Path(__file__).resolve().parents[2] / "meshes"


@dataclasses.dataclass
class Recipe:
    """Sizes of one demo run."""

    train: int = 128
    test: int = 16
    epochs: int = 30
    width: int = 32
    depth: int = 2
    lr: float = 5e-3
    batch_size: int = 8


QUICK = Recipe(train=16, test=2, epochs=2, width=16, depth=1, lr=5e-3)


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a small smoke run (about a minute)")
    parser.add_argument("--out", default="geoattn-demo", help="report folder (default: %(default)s)")
    parser.add_argument("--epochs", type=int, help="override the number of epochs (an integer >= 1)")
    parser.add_argument("--seed", type=int, default=0, help=f"data and training seed (0 to {SEEDS - 1}; default: 0)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.add_argument("--docs", metavar="PATH", help="also write the run's results page (markdown) to PATH, "
                        "e.g. docs/results/demo.md; it replaces the page there")


def _read(name: str) -> meshio.Mesh:
    path = MESHES / name
    return meshio.read(path) if path.exists() else None


def demo_meshes() -> dict[str, meshio.Mesh]:
    """The training mesh first, then the evaluation meshes of the same unit square."""
    from ..mesh import families

    train = _read("square_irregular.vtu") or families.unit_square(16, "irregular", seed=0)
    return {
        "train (irregular)": train,
        "refined x4": families.refine(train, 1),
        "refined x16": families.refine(train, 2),
        "graded": _read("square_graded.vtu") or families.unit_square(16, "graded"),
        "graded fine": _read("square_graded_refined.vtu") or families.unit_square(32, "graded"),
        "other irregular": families.unit_square(20, "irregular", seed=5),
        "coarser": families.unit_square(11, "irregular", seed=3),
    }


def run(args: argparse.Namespace) -> int:
    from ..data import darcy_samples

    require("matplotlib", "plot", "the demo's figures")  # fail now, not after training
    check_setting("--seed", args.seed, int, 0, SEEDS)
    recipe = QUICK if args.quick else Recipe()
    if args.epochs is not None:
        recipe = dataclasses.replace(recipe, epochs=check_setting("--epochs", args.epochs, int, 1))
    out = check_writable(args.out, folder=True)
    docs = check_writable(args.docs) if args.docs else None  # fail now, not after training
    out.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    meshes = demo_meshes()
    train_name = next(iter(meshes))
    print(f"geoattn demo: Darcy flow -div(a grad u) = 1 on the unit square, lognormal a; "
          f"{recipe.train} training samples on the irregular mesh, {recipe.test} test samples on "
          f"{len(meshes)} meshes")
    train = darcy_samples({train_name: meshes[train_name]}, recipe.train, seed=args.seed,
                          family="lognormal")[train_name]
    test = darcy_samples(meshes, recipe.test, seed=args.seed, family="lognormal", start=recipe.train)
    print(f"data generated in {time.perf_counter() - tic:.0f} s")

    operators = {}
    for label, unweighted in (("weighted", False), ("unweighted", True)):
        torch.manual_seed(args.seed)
        model = build_model("tno", in_channels=1, out_channels=1, dim=2, width=recipe.width,
                            depth=recipe.depth)
        op = NormalizedOperator(model, unweighted=unweighted)
        print(f"training the TNO with {'node-average' if unweighted else 'quadrature'} weights "
              f"({sum(p.numel() for p in model.parameters())} parameters, {recipe.epochs} epochs)")
        history = Trainer(op, out / label, epochs=recipe.epochs, batch_size=recipe.batch_size,
                          lr=recipe.lr, seed=args.seed, progress=not args.no_progress,
                          overwrite=True).fit(train)  # the report is redone on every run
        print(f"  final training error {history[-1]['train']:.4f}")
        operators[label] = op.eval()

    # the weighted model again, its quadratures taken on each mesh refined where it is coarser
    # than the training mesh (input interpolated linearly, output read at the mesh's nodes)
    operators = {"weighted": operators["weighted"],
                 "resolved": RefinedOperator(operators["weighted"], training_size(meshes[train_name])),
                 "unweighted": operators["unweighted"]}
    report = cross_mesh_report(operators, test, reference=train_name)
    print("\nmean relative L2(D) test error per mesh (ratio = error / error on the training mesh; "
          "resolved = the weighted model with each mesh refined to the training mesh's edge length for "
          "its quadratures)\n")
    print(report.table())
    report.write_csv(out / "crossmesh.csv")
    plot_errors(report, out / "errors.png")
    _write_samples(operators["weighted"], test, out)
    verdict = _verdict(report, train_name)
    if docs is not None:
        _write_page(docs, args, recipe, report, verdict, time.perf_counter() - tic)
    print(f"\nreport written to {out}/ (crossmesh.csv, errors.png, sample_*.png, *.vtu, "
          f"*/metrics.csv, */best.pt) in {time.perf_counter() - tic:.0f} s total")
    return 0


#: point fields of the demo's .vtu files; never ``x``, ``y`` or ``z``, which ParaView's readers
#: and filters take for coordinate arrays
SAMPLE_FIELDS = ("coefficient", "solution", "prediction", "error", "weight")


@torch.no_grad()
def _write_samples(op: NormalizedOperator, test: dict, out: Path) -> None:
    for k, (mesh, samples) in enumerate(test.items()):
        d = samples[0]
        pred = op(d.x, samples.meshes[d.mesh_id])
        stem = f"sample_{k}_{mesh.split(' ')[0]}{k}"
        fields = d.clone()
        del fields.x, fields.y  # written under descriptive names below, not as "x" and "y"
        write_mesh(out / f"{stem}.vtu", fields, point_data={
            "coefficient": d.x, "solution": d.y, "prediction": pred, "error": pred - d.y})
        if mesh.startswith(("train", "graded")):
            plot_sample(d, pred, out / f"{stem}.png", title=f"{mesh}: {d.num_nodes} nodes")


def _verdict(report, train_name: str) -> None:
    base = report.mean("weighted", train_name)
    worst = max(report.ratio("weighted", m) for m in report.nodes)
    resolved = max(report.ratio("resolved", m) for m in report.nodes)
    graded = [m for m in report.nodes if m.startswith("graded")]
    gain = min(report.mean("unweighted", m) / report.mean("weighted", m) for m in graded)
    text = (f"training-mesh error {base:.4f} (target <= 0.05: {'met' if base <= 0.05 else 'missed'}); "
            f"worst ratio on other meshes {worst:.2f}, resolved {resolved:.2f} "
            f"(target <= 1.25: {'met' if resolved <= 1.25 else 'missed'}); "
            f"node-average ablation / weighted on graded meshes >= {gain:.2f}x "
            f"(target > 1: {'met' if gain > 1 else 'missed'})")
    print("\n" + text)
    return text


def _write_page(path: Path, args: argparse.Namespace, recipe: Recipe, report, verdict: str, seconds: float) -> None:
    """The run's results page (``--docs``): the command, the machine, the settings, the table of
    :meth:`~geoattn.eval.CrossMeshReport.table` as markdown and the verdict; written atomically."""
    import datetime
    import os

    from ..atomic import atomic_path

    flags = ["--quick"] * args.quick + (["--epochs", str(args.epochs)] if args.epochs is not None else [])
    flags += (["--seed", str(args.seed)] if args.seed else []) + ["--no-progress"] * args.no_progress
    flags += ["--docs", str(args.docs)]
    head = "| mesh | nodes | " + " | ".join(f"{m} | ratio" for m in report.errors) + " |"
    rows = [f"| {mesh} | {n} | " + " | ".join(f"{report.mean(m, mesh):.4f} | {report.ratio(m, mesh):.2f}"
                                              for m in report.errors) + " |" for mesh, n in report.nodes.items()]
    lines = ["# `geoattn demo`: TNO on an irregular mesh, scored on seven meshes", "",
             f"Written by: `geoattn demo {' '.join(flags)}`", "",
             f"Machine: {os.cpu_count()} CPU cores, torch {torch.__version__}; {seconds:.0f} s wall; "
             f"recorded {datetime.date.today().isoformat()}", "",
             f"Lognormal Darcy, {recipe.train} training samples on `meshes/square_irregular.vtu`, TNO width "
             f"{recipe.width}, depth {recipe.depth}, {recipe.epochs} epochs, seed {args.seed}. Mean relative "
             "L²(D) test error; ratio = error / training-mesh error; \"resolved\" = the same model through "
             "`RefinedOperator`, each mesh refined to the training mesh's edge length for its quadratures.", "",
             head, "|" + "---|" * (2 + 2 * len(report.errors)), *rows, "", verdict[0].upper() + verdict[1:] + ".", ""]
    with atomic_path(Path(path)) as tmp:
        Path(tmp).write_text("\n".join(lines))
