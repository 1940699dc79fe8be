"""Quadrature weights on meshes and point clouds: integrate one function many ways.

Reads the sample meshes (structured, irregular and graded squares and their refinements),
integrates ``f(x, y) = exp(x) cos(pi y / 2)`` with lumped P1 weights and with the plain node
average, fits the convergence rate of the weighted rule, and compares the point-cloud rules on a
non-uniform random cloud.

Run: ``python examples/quadrature.py``
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from geoattn.mesh import integrate, quadrature_weights, read_mesh

MESHES = Path(__file__).resolve().parents[1] / "meshes"
EXACT = (math.e - 1) * 2 / math.pi


def f(pos):
    return torch.exp(pos[:, 0]) * torch.cos(math.pi * pos[:, 1] / 2)


def main() -> dict[str, float]:
    """Print a table and return the fitted rates of the weighted rule per mesh family."""
    rates = {}
    print(f"{'mesh':<30}{'nodes':>7}{'weighted':>11}{'node average':>14}")
    for family in ("structured", "irregular", "graded"):
        errors = []
        for suffix in ("", "_refined"):
            data = read_mesh(MESHES / f"square_{family}{suffix}.vtu", dtype=torch.float64)
            values = f(data.pos)
            weighted = abs(float(integrate(values, data.weight)) - EXACT)
            average = abs(float(values.mean()) - EXACT)  # |D| = 1: what an unweighted sum does
            errors.append(weighted)
            print(f"{'square_' + family + suffix:<30}{data.num_nodes:>7}{weighted:>11.2e}{average:>14.2e}")
        # the refined mesh splits every triangle in four: h halves exactly
        rates[family] = math.log2(errors[0] / errors[1])
    rng = np.random.default_rng(0)
    cloud = torch.as_tensor(rng.random((4000, 2)) ** 1.5)  # denser toward (0, 0)
    print("\nnon-uniform random cloud, 4000 points:")
    for rule in ("voronoi", "knn", "monte_carlo"):
        w = quadrature_weights(cloud, rule=rule, box=[[0, 0], [1, 1]])
        print(f"  {rule:<12} error {abs(float(integrate(f(cloud), w)) - EXACT):.2e}")
    print("\nfitted order in h of the lumped rule:", {k: round(v, 2) for k, v in rates.items()})
    return rates


if __name__ == "__main__":
    main()
