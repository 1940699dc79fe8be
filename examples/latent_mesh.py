"""Run a trained ViT-NO on other meshes of its domain as is and through ``LatentMeshOperator``.

A ViT-NO (4 patches, each patch's Fourier lift and attention scores integrated exactly on the
piecewise-linear interpolants, ``quadrature="p1"``, ``scores="p1"``) is trained on a 289-node
irregular mesh of the unit square (lognormal Darcy samples) and scored on the same test samples
on that mesh refined once, on a graded mesh and on another irregular mesh, in two ways:

- as is: the model computes its features at the other mesh's nodes. Its integrals are exact, but
  its nonlinear features are evaluated, integrated and interpolated at other nodes than it
  learned with, and its error moves;
- through :class:`geoattn.operators.LatentMeshOperator` on the training mesh: the input is
  interpolated onto the training mesh, the model runs there, and its output is interpolated back,
  as FNO runs through its grid. On the training mesh itself the two are the same.

Run: ``python examples/latent_mesh.py [--train 96] [--epochs 25]`` (about a minute on one CPU
core; ``benchmarks/vit_transfer.py`` is the full study, over several seeds).
"""

from __future__ import annotations

import argparse

import torch

from geoattn.data import darcy_samples
from geoattn.eval import cross_mesh_report
from geoattn.mesh import families
from geoattn.models import build_model
from geoattn.operators import LatentMeshOperator
from geoattn.train import NormalizedOperator, Trainer


def main(train: int = 96, test: int = 8, epochs: int = 25, n: int = 16, width: int = 32):
    irregular = families.unit_square(n, "irregular", seed=0)
    meshes = {"train": irregular, "refined": families.refine(irregular, 1),
              "graded": families.unit_square(n, "graded"),
              "foreign": families.unit_square(round(1.5 * n), "irregular", seed=1)}
    train_set = darcy_samples({"train": meshes["train"]}, train, seed=0, family="lognormal")["train"]
    test_sets = darcy_samples(meshes, test, seed=0, family="lognormal", start=train)

    torch.manual_seed(0)
    model = build_model("vit", in_channels=1, out_channels=1, width=width, depth=2, num_heads=4, num_patches=4,
                        modes=2, quadrature="p1", scores="p1")
    operator = NormalizedOperator(model)
    Trainer(operator, epochs=epochs, batch_size=4, lr=3e-3, progress=False).fit(train_set)
    latent = LatentMeshOperator(operator, train_set.meshes[0])
    report = cross_mesh_report({"as is": operator, "latent": latent}, test_sets, reference="train")
    print(report.table())
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=96)
    parser.add_argument("--epochs", type=int, default=25)
    args = parser.parse_args()
    main(train=args.train, epochs=args.epochs)
