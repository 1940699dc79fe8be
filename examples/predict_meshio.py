"""Feed a meshio mesh to a trained model: weights are computed, the prediction comes back as point data.

Trains a tiny TNO (or loads ``--checkpoint``), builds a meshio mesh of the unit square that the
model has never seen, puts a coefficient field on it, and writes the prediction to a .vtu file
that ParaView opens.

Run: ``python examples/predict_meshio.py [--checkpoint run/best.pt] [-o prediction.vtu]``
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from geoattn.data import darcy_samples
from geoattn.eval import predict_meshio
from geoattn.mesh import families, save_meshio
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, load_operator


def tiny_operator(epochs: int = 3) -> NormalizedOperator:
    base = families.unit_square(10, "irregular", seed=1)
    samples = darcy_samples({"m": base}, 16, seed=0, family="lognormal")["m"]
    torch.manual_seed(0)
    operator = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=16, depth=1))
    Trainer(operator, epochs=epochs, batch_size=4, lr=5e-3, progress=False).fit(samples)
    return operator.eval()


def main(checkpoint: str | None = None, output: str | None = None):
    operator = load_operator(checkpoint) if checkpoint else tiny_operator()
    mesh = families.unit_square(14, "graded")                    # any meshio.Mesh will do
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    mesh.point_data = {"a": np.exp(np.sin(2 * np.pi * x) * np.cos(np.pi * y))}
    result = predict_meshio(operator, mesh, "a")                # weights computed inside
    if output:
        save_meshio(output, result)
    print(f"prediction on {len(result.points)} nodes: min {result.point_data['prediction'].min():.4f}, "
          f"max {result.point_data['prediction'].max():.4f}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint")
    parser.add_argument("-o", "--output", default="prediction.vtu")
    args = parser.parse_args()
    main(args.checkpoint, args.output)
