"""``geoattn info MESH``: read, validate and summarise a mesh file."""

from __future__ import annotations

import argparse

import torch

from ..mesh import read_mesh
from ..mesh.io import MERGE_TOL
from ..mesh.surface import is_surface
from ..mesh.weights import RULES


def _block(value: str) -> str | int:
    """A cell block: its index in the file, or a cell type name."""
    return int(value) if value.lstrip("-").isdigit() else value


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mesh", help="any mesh file meshio reads (.vtu, .msh, .xdmf, ...)")
    parser.add_argument("--rule", default="lumped", choices=RULES,
                        help="quadrature rule (default: %(default)s; point clouds: monte_carlo; "
                             "point clouds on a surface in 3-D: surface_knn)")
    parser.add_argument("--merge-duplicates", nargs="?", type=float, const=MERGE_TOL, default=None,
                        metavar="TOL",
                        help="merge nodes closer than TOL times the bounding-box diagonal (default "
                             f"TOL {MERGE_TOL:g}), as in files that write every element's vertices "
                             "separately")
    parser.add_argument("--reorient", action="store_true",
                        help="reverse the vertex order of inverted cells (orient a surface "
                             "consistently) instead of refusing them")
    parser.add_argument("--cell-block", type=_block, default=None, metavar="NAME|INDEX",
                        help="the cell block to read when the file has several (a cell type such "
                             "as triangle, or a block index; default: the highest-dimensional cells)")


def run(args: argparse.Namespace) -> int:
    data = read_mesh(args.mesh, weights=args.rule, dtype=torch.float64,
                     merge_duplicates=args.merge_duplicates, reorient=args.reorient,
                     cell_block=args.cell_block)
    pos, w = data.pos, data.weight
    cells = getattr(data, "cells", None)
    surface = cells is not None and is_surface(data.cell_type, pos.shape[1])
    lines = [
        f"file        {args.mesh}",
        f"dimension   {pos.shape[1]}{'  (a surface)' if surface else ''}",
        f"nodes       {data.num_nodes}",
    ]
    if getattr(data, "merged_nodes", None) is not None:
        lines.append(f"merged      {data.merged_nodes} duplicate nodes")
    if cells is not None:
        lines.append(f"cells       {len(data.cells)} {data.cell_type}")
    lines += [
        f"bounding    {pos.min(0).values.tolist()} .. {pos.max(0).values.tolist()}",
        f"{'area' if surface or args.rule == 'surface_knn' else 'measure':<12}{float(w.sum()):.10g}"
        f"  ({args.rule} weights)",
        f"weights     min {float(w.min()):.3g}  max {float(w.max()):.3g}  ratio "
        f"{float(w.max() / w.min().clamp_min(1e-300)):.3g}",
        f"point data  {sorted(data.point_data)}",
    ]
    print("\n".join(lines))
    return 0
