"""``geoattn info MESH``: read, validate and summarise a mesh file."""

from __future__ import annotations

import argparse

import torch

from ..mesh import read_mesh
from ..mesh.weights import RULES


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mesh", help="any mesh file meshio reads (.vtu, .msh, .xdmf, ...)")
    parser.add_argument("--rule", default="lumped", choices=RULES,
                        help="quadrature rule (default: %(default)s; point clouds: monte_carlo)")


def run(args: argparse.Namespace) -> int:
    data = read_mesh(args.mesh, weights=args.rule, dtype=torch.float64)
    pos, w = data.pos, data.weight
    lines = [
        f"file        {args.mesh}",
        f"dimension   {pos.shape[1]}",
        f"nodes       {data.num_nodes}",
    ]
    if getattr(data, "cells", None) is not None:
        lines.append(f"cells       {len(data.cells)} {data.cell_type}")
    lines += [
        f"bounding    {pos.min(0).values.tolist()} .. {pos.max(0).values.tolist()}",
        f"measure     {float(w.sum()):.10g}  ({args.rule} weights)",
        f"weights     min {float(w.min()):.3g}  max {float(w.max()):.3g}  ratio "
        f"{float(w.max() / w.min().clamp_min(1e-300)):.3g}",
        f"point data  {sorted(data.point_data)}",
    ]
    print("\n".join(lines))
    return 0
