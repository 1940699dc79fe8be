"""``geoattn demo``: the main job.

Until the models land, the demo shows the quadrature rule that everything else stands on: one
smooth function integrated on uniform, irregular and graded meshes of the unit square with lumped
weights and with the plain node average, under refinement.
"""

from __future__ import annotations

import argparse
import math

import torch

from ..mesh import families, from_meshio, integrate


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="smaller meshes, seconds to run")


def _f(pos: torch.Tensor) -> torch.Tensor:
    return torch.exp(pos[:, 0]) * torch.cos(math.pi * pos[:, 1] / 2)


EXACT = (math.e - 1) * 2 / math.pi  # ∫_0^1 e^x dx · ∫_0^1 cos(πy/2) dy


def run(args: argparse.Namespace) -> int:
    sizes = (8, 16, 32) if args.quick else (8, 16, 32, 64, 128)
    print("geoattn demo: integrate f(x, y) = exp(x) cos(pi y / 2) over the unit square")
    print(f"exact value {EXACT:.10f}\n")
    print(f"{'mesh':<12}{'nodes':>8}{'weighted error':>17}{'node-average error':>21}")
    for kind in ("structured", "irregular", "graded"):
        for n in sizes:
            data = from_meshio(families.unit_square(n, kind), dtype=torch.float64)
            f = _f(data.pos)
            weighted = abs(float(integrate(f, data.weight)) - EXACT) / EXACT
            average = abs(float(f.mean()) - EXACT) / EXACT  # |D| = 1
            print(f"{kind:<12}{data.num_nodes:>8}{weighted:>17.2e}{average:>21.2e}")
    print("\nThe weighted error falls ~4x per refinement on every mesh; the node average does not "
          "converge on the graded mesh.\nThe full demo (training a neural operator and scoring it "
          "across meshes) arrives with the models.")
    return 0
