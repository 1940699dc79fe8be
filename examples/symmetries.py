"""Train on the symmetries of the problem: Darcy flow on the square, its eight images for free.

Darcy flow with source 1 and zero boundary values on the unit square, with a coefficient drawn
from a Gaussian random field on the square, does not change under the square's eight symmetries
(rotations by quarter turns and reflections, :func:`geoattn.mesh.dihedral`): a solution carried
by one of them is the solution for the carried coefficient. A sample on a mesh, carried, is the
same values on the moved nodes (:func:`geoattn.mesh.augment` makes these samples and checks that
the maps carry the mesh's domain onto itself).

Two mesh-native FNOs are trained for the same number of optimiser steps on the same ``--train``
solved samples: one on the samples as they are, one on their eight images (an eighth of the
epochs). Both are scored on test samples of the training mesh and of a graded mesh, as they are
and averaged over the eight images (:func:`geoattn.train.symmetrize`, exactly invariant). The
last line gives how far each model's error moves when the test mesh is turned a quarter: the
averaged models' not at all.

Run: ``python examples/symmetries.py [--train 100] [--epochs 160]`` (a few minutes on one CPU
core; ``benchmarks/darcy_compare.py --symmetries`` is the full race).
"""

from __future__ import annotations

import argparse

import torch

from geoattn.data import darcy_samples
from geoattn.eval import cross_mesh_report
from geoattn.mesh import augment, dihedral, families
from geoattn.mesh.symmetry import transform
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, symmetrize


def main(train: int = 100, test: int = 10, epochs: int = 160, width: int = 16, depth: int = 2):
    square = dihedral(4, (0.5, 0.5))  # the identity first
    meshes = {"train": families.unit_square(12, "irregular"), "graded": families.unit_square(12, "graded")}
    train_set = darcy_samples({"train": meshes["train"]}, train, seed=0, family="lognormal")["train"]
    test_sets = darcy_samples(meshes, test, seed=0, family="lognormal", start=train)

    operators = {}
    for name, samples, n_epochs in (("plain", train_set, epochs),
                                    ("8 images", augment(train_set, square), max(1, epochs // len(square)))):
        torch.manual_seed(0)
        model = build_model("mesh_fno", in_channels=1, out_channels=1, dim=2, width=width, depth=depth, modes=3)
        operators[name] = NormalizedOperator(model)
        Trainer(operators[name], epochs=n_epochs, batch_size=4, lr=1e-3, progress=False).fit(samples)
        operators[name + ", averaged"] = symmetrize(operators[name], square)
    report = cross_mesh_report(operators, test_sets, reference="train")
    print(report.table())

    turned = {"graded": [transform(s, square[1]) for s in test_sets["graded"]]}
    moved = cross_mesh_report(operators, turned)
    shift = {name: abs(moved.mean(name, "graded") - report.mean(name, "graded")) for name in operators}
    print("error change on the graded mesh turned a quarter: "
          + ", ".join(f"{name} {value:.2e}" for name, value in shift.items()))
    return report, shift


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=160)
    args = parser.parse_args()
    main(train=args.train, epochs=args.epochs)
