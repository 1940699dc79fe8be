"""Do random Fourier features of the coordinates help? The demo's recipe, with and without them.

Trains the same model on the demo's data (128 lognormal Darcy samples on the irregular 289-node
mesh, seeded) once per number of features and prints the test error on the demo's seven meshes.
Accuracy at a fixed number of epochs is deterministic, so the comparison does not depend on the
machine's load. Run ``python benchmarks/coordinate_features.py [--model tno] [--features 0 16]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from geoattn.cli.demo import Recipe, demo_meshes
from geoattn.data import darcy_samples
from geoattn.eval import cross_mesh_report
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer
from results_page import add_docs_argument, markdown_table, write_page
from timing import machine


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tno")
    parser.add_argument("--features", type=int, nargs="+", default=[0, 16])
    parser.add_argument("--scale", type=float, default=2.0, help="frequency scale (cycles per unit)")
    parser.add_argument("--epochs", type=int, default=Recipe.epochs)
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    recipe = Recipe()
    meshes = demo_meshes()
    train_name = next(iter(meshes))
    train = darcy_samples({train_name: meshes[train_name]}, recipe.train, seed=0,
                          family="lognormal")[train_name]
    test = darcy_samples(meshes, recipe.test, seed=0, family="lognormal", start=recipe.train)
    operators = {}
    for f in args.features:
        torch.manual_seed(0)
        model = build_model(args.model, in_channels=1, out_channels=1, dim=2, width=recipe.width,
                            depth=recipe.depth,
                            coordinate_features=dict(num_features=f, scale=args.scale) if f else None)
        op = NormalizedOperator(model)
        Trainer(op, epochs=args.epochs, batch_size=recipe.batch_size, lr=recipe.lr,
                progress=False).fit(train)
        operators[f"{args.model} F={f}"] = op.eval()
    report = cross_mesh_report(operators, test, reference=train_name)
    print(report.table())
    if args.docs:
        write_page(args.docs, "Coordinate features in the lift (`benchmarks/coordinate_features.py`)",
                   " ".join(["python", "benchmarks/coordinate_features.py", *(sys.argv[1:] if argv is None else argv)]),
                   markdown_table(["mesh", "nodes", *(f"{name} rel L2 (ratio)" for name in operators)],
                                  [[mesh, n, *(f"{report.mean(name, mesh):.4f} ({report.ratio(name, mesh):.2f})"
                                               for name in operators)] for mesh, n in report.nodes.items()]),
                   f"{machine(torch.device('cpu'))}; recorded {time.strftime('%Y-%m-%d')}",
                   notes=f"Mean relative L2(D) test error, {args.epochs} epochs; ratio to the training mesh.")
    return {name: {mesh: report.mean(name, mesh) for mesh in report.nodes} for name in operators}


if __name__ == "__main__":
    main()
