"""One spectral layer on the torus, with the bounding box (``period=None``) and the declared period.

A torus stored without its closing nodes (``x_j = j/n``, ``j < n``) has a bounding box one grid
step short of the period, which changes with the resolution. This script passes the same
band-limited input (modes ``|m_k| <= 3``) through one :class:`~geoattn.nn.SpectralIntegral`
(fixed weights, ``--modes`` per dimension, float64) on uniform ``n x n`` grids of the unit torus
(``--grids``) and on an irregular periodic point set (``--cloud`` i.i.d. uniform points), all with
periodic quadrature weights (:func:`geoattn.mesh.periodic_weights`: the trapezoid rule on the
grids, periodic Voronoi cells on the cloud), and prints the relative L2 difference of each output
at the nodes of the coarsest grid from the finest grid's, before (``period=None``) and after
(``period=1``). It also prints the relative error of :class:`~geoattn.nn.SpectralSmoothing`
(Remark 21, ``eps = 1e-3``, ``alpha = 1.001``) against its multiplier
:math:`(1 + \\varepsilon |2\\pi m|^2)^{-\\alpha}` on the coarsest grid, before and after.

Usage::

    python benchmarks/torus.py [--grids 32 64 128] [--cloud 4096] [--modes 4] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np
import torch

from geoattn.mesh import periodic_weights
from geoattn.nn import SpectralIntegral, SpectralSmoothing
from results_page import add_docs_argument, markdown_table, write_page
from timing import machine


def grid(n: int) -> torch.Tensor:
    """The uniform grid ``j / n``, ``j < n``, of the unit torus, ``[n^2, 2]``."""
    axis = torch.arange(n, dtype=torch.float64) / n
    return torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)


def band_limited(pos: torch.Tensor) -> torch.Tensor:
    """Two channels of Fourier modes ``|m_k| <= 3`` on the unit torus, ``[N, 2]``."""
    x, y = 2 * math.pi * pos[:, 0], 2 * math.pi * pos[:, 1]
    return torch.stack([1 + torch.sin(x) + 0.5 * torch.cos(2 * x - 3 * y),
                        torch.cos(x + y) * torch.sin(2 * y)], 1)


def weights(pos: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(periodic_weights(pos.numpy(), 1.0))


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@torch.no_grad()
def run(grids: list[int], cloud: int, modes: int, seed: int) -> dict:
    """The differences for ``period=None`` and ``period=1`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    sets = {f"{n}x{n}": grid(n) for n in grids}
    if cloud:
        sets[f"cloud {cloud}"] = torch.as_tensor(rng.random((cloud, 2)))
    weight = {name: weights(pos) for name, pos in sets.items()}
    query = grid(min(grids))
    finest = f"{max(grids)}x{max(grids)}"
    x, y = 2 * math.pi * query[:, 0], 2 * math.pi * query[:, 1]
    wave = [(1, 0), (2, -3), (modes, modes)]  # retained modes, one per channel
    z = torch.stack([torch.cos(m * x + k * y + 0.3) for m, k in wave], 1)
    multiplier = torch.tensor([(1 + 1e-3 * (2 * math.pi) ** 2 * (m * m + k * k)) ** -1.001 for m, k in wave],
                              dtype=torch.float64)
    results = {}
    for label, period in (("before (period=None)", None), ("after (period=1.0)", 1.0)):
        torch.manual_seed(seed)
        layer = SpectralIntegral(2, 2, modes, 2, period=period).double()
        out = {name: layer(band_limited(pos), pos, weight[name], pos_query=query) for name, pos in sets.items()}
        row = {name: relative(out[name], out[finest]) for name in sets if name != finest}
        smoothing = SpectralSmoothing(modes, 2, eps=1e-3, alpha=1.001, period=period).double()
        row["smoothing"] = relative(smoothing(z, query, weight[f"{min(grids)}x{min(grids)}"]), z * multiplier)
        results[label] = row
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--cloud", type=int, default=4096, help="irregular periodic points (0: none)")
    parser.add_argument("--modes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    results = run(sorted(args.grids), args.cloud, args.modes, args.seed)
    if args.docs:
        columns = list(next(iter(results.values())))
        table = markdown_table(["layer", *columns],
                               [[label, *(f"{row[c]:.2e}" for c in columns)] for label, row in results.items()])
        write_page(args.docs, "One spectral layer on the torus, bounding box or period (`benchmarks/torus.py`)",
                   " ".join(["python", "benchmarks/torus.py", *(sys.argv[1:] if argv is None else argv)]), table,
                   f"{machine(torch.device('cpu'))}; recorded {time.strftime('%Y-%m-%d')}",
                   notes=f"Relative L2 difference from the {max(args.grids)}x{max(args.grids)} grid's output "
                         "at the coarsest grid's nodes (smoothing: from its multiplier).")
    if args.json:
        print(json.dumps(results, indent=2))
        return results
    finest = max(args.grids)
    columns = list(next(iter(results.values())))
    print(f"relative L2 difference from the {finest}x{finest} grid's output (smoothing: from its multiplier)")
    print(f"{'':<22}" + "".join(f"{c:>14}" for c in columns))
    for label, row in results.items():
        print(f"{label:<22}" + "".join(f"{row[c]:>14.2e}" for c in columns))
    return results


if __name__ == "__main__":
    main()
