"""Patches that survive mesh refinement: partition once, transfer, attend over patches.

A graded mesh of the unit square is split into patches of equal area (METIS, balanced by
quadrature weight). The partition is transferred to uniform refinements of the mesh, and one
fixed PatchAttention layer (a pointwise lift, then attention over patches: L2 scores on the
reference patch, each patch's values read in the others' frames by interpolation) reads the same
smooth function on every mesh. Its outputs at the coarse nodes converge to those on the finest
mesh, because every sum over nodes is a quadrature, the interpolation between patches is second
order and the patches are the same subdomains on every mesh (the quadrature over a patch whose
boundary cuts cells is first order, so the fitted order lies between 1 and 2).

Run: ``python examples/patches.py [--levels 3] [--patches 8] [--method metis|rcb]``
"""

from __future__ import annotations

import argparse
import logging

import torch

from geoattn import testing
from geoattn.mesh import families, from_meshio, partition
from geoattn.nn import PatchAttention, PatchSide

log = logging.getLogger(__name__)


def features(pos: torch.Tensor) -> torch.Tensor:
    x, y = pos[:, 0], pos[:, 1]
    return torch.stack([torch.sin(3 * x + y), x * x - y], 1)


def main(levels: int = 3, patches: int = 8, seed: int = 0, method: str = "metis") -> dict[str, float]:
    """Relative differences to the finest level and the order fitted from the second level on."""
    torch.manual_seed(seed)
    mesh = families.unit_square(8, "graded")
    coarse = from_meshio(mesh, dtype=torch.float64)
    part = partition(coarse.pos, coarse.weight, patches, cells=coarse.cells, method=method)
    lift = torch.nn.Linear(2, 8).double()
    attention = PatchAttention(8, num_heads=2).double()
    samples = testing.refinement_samples(mesh, range(levels + 2), features)
    outputs = []
    with torch.no_grad():
        for u, pos, w, _ in samples:
            patch = part.transfer(pos)  # the same subdomains on every mesh
            v = torch.tanh(lift(u))
            out = attention(v, pos, w, patches=PatchSide(patch, part.length, patches))
            outputs.append(out[:len(coarse.pos)])
    return testing.differences_to_finest(outputs, samples, skip=1, log=log)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=3)
    parser.add_argument("--patches", type=int, default=8)
    parser.add_argument("--method", default="metis", choices=["metis", "rcb"])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main(args.levels, args.patches, method=args.method)
