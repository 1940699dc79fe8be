"""Train a Transformer Neural Operator on an irregular mesh, evaluate it on refined and graded ones.

Darcy flow samples (lognormal coefficient) are solved on the irregular sample mesh for training,
and the *same* test samples are solved on the mesh refined once and twice and on a graded mesh.
The trained model is scored on each with the weighted relative L2(D) error.

Run: ``python examples/train_cross_mesh.py [--train 64] [--epochs 10] [--width 32]``
(the defaults take a minute or two on a laptop CPU; ``geoattn demo`` is the full version).
"""

from __future__ import annotations

import argparse

import meshio
import torch

from geoattn.data import darcy_samples
from geoattn.eval import cross_mesh_report
from geoattn.mesh import families
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer


def main(train: int = 64, test: int = 4, epochs: int = 10, width: int = 32, depth: int = 2,
         mesh_file: str = "meshes/square_irregular.vtu"):
    base = meshio.read(mesh_file)
    meshes = {"train": base, "refined x4": families.refine(base, 1), "refined x16": families.refine(base, 2),
              "graded": families.unit_square(16, "graded")}
    train_set = darcy_samples({"train": base}, train, seed=0, family="lognormal")["train"]
    test_sets = darcy_samples(meshes, test, seed=0, family="lognormal", start=train)

    torch.manual_seed(0)
    model = build_model("tno", in_channels=1, out_channels=1, dim=2, width=width, depth=depth)
    operator = NormalizedOperator(model)
    Trainer(operator, epochs=epochs, batch_size=4, lr=5e-3).fit(train_set)

    report = cross_mesh_report({"TNO": operator}, test_sets, reference="train")
    print(report.table())
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--width", type=int, default=32)
    args = parser.parse_args()
    main(train=args.train, epochs=args.epochs, width=args.width)
