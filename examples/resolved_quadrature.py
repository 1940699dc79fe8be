"""Evaluate a trained model on a graded mesh, as is and through ``RefinedOperator``, and train one
through it.

A mesh-native FNO is trained on a 169-node irregular mesh of the unit square (lognormal Darcy
samples), long enough to learn features on that mesh's scale. It is then scored on a graded mesh
of as many nodes, whose corner cells are about 3 times wider, in two ways:

- as is: its spectral transforms are quadratures over the graded nodes, which alias the features
  in the coarse corner;
- through :class:`geoattn.operators.RefinedOperator`: the graded mesh is refined where its edges are
  longer than the training mesh's, the input is interpolated linearly to the new nodes, and the
  output is read at the graded nodes.

A second model, with 3 modes instead of 2, is trained through ``RefinedOperator`` at half the
training mesh's edge (``supersampled``): it learns on the training mesh refined once (input
interpolated, loss at the data's nodes) and is scored on every mesh refined to that size, so the
quadrature it is scored with is the one it learned with, on every mesh.

Run: ``python examples/resolved_quadrature.py [--train 100] [--epochs 200]`` (about ten
minutes on one CPU core; ``benchmarks/darcy_compare.py --resolve-quadrature`` and
``--supersample 2`` are the full comparisons).
"""

from __future__ import annotations

import argparse

import torch

from geoattn.data import darcy_samples
from geoattn.eval import cross_mesh_report
from geoattn.operators import RefinedOperator, training_size
from geoattn.mesh import families
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer


def main(train: int = 100, test: int = 10, epochs: int = 200, width: int = 32, depth: int = 3,
         supersample: bool = True):
    meshes = {"train": families.unit_square(12, "irregular"), "graded": families.unit_square(12, "graded")}
    train_set = darcy_samples({"train": meshes["train"]}, train, seed=0, family="lognormal")["train"]
    test_sets = darcy_samples(meshes, test, seed=0, family="lognormal", start=train)

    torch.manual_seed(0)
    model = build_model("mesh_fno", in_channels=1, out_channels=1, dim=2, width=width, depth=depth, modes=2)
    operator = NormalizedOperator(model)
    Trainer(operator, epochs=epochs, batch_size=4, lr=1e-3, progress=False).fit(train_set)

    size = training_size(meshes["train"])
    operators = {"as is": operator, "resolved": RefinedOperator(operator, size)}
    if supersample:
        torch.manual_seed(0)
        model = build_model("mesh_fno", in_channels=1, out_channels=1, dim=2, width=width, depth=depth, modes=3)
        operators["supersampled"] = NormalizedOperator(RefinedOperator(model, size / 2))
        Trainer(operators["supersampled"], epochs=epochs, batch_size=4, lr=1e-3, progress=False).fit(train_set)
    report = cross_mesh_report(operators, test_sets, reference="train")
    print(report.table())
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--no-supersample", dest="supersample", action="store_false",
                        help="skip the model trained through RefinedOperator")
    args = parser.parse_args()
    main(train=args.train, epochs=args.epochs, supersample=args.supersample)
