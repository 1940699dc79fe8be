"""``geoattn predict``: run a trained model on any mesh file meshio reads; write the prediction.

Reads the mesh and the input point field(s), computes quadrature weights, runs the model and
writes the mesh with the prediction (point data ``prediction``, or ``--name``) to ``-o``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import meshio

from ..eval import predict_meshio
from ..mesh import save_meshio
from ..train import load_operator


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint written by `geoattn train`")
    parser.add_argument("--mesh", required=True, help="mesh file with the input field (.vtu, .msh, ...)")
    parser.add_argument("--field", required=True, action="append",
                        help="input point field name (repeat for several channels)")
    parser.add_argument("-o", "--output", required=True, help="output mesh file (format from extension)")
    parser.add_argument("--name", default="prediction", help="name of the output field (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    op = load_operator(args.checkpoint)
    if not Path(args.mesh).exists():
        raise FileNotFoundError(f"no mesh file at {args.mesh}")
    result = predict_meshio(op, meshio.read(args.mesh), args.field, args.name)
    save_meshio(args.output, result)
    print(f"wrote {args.output}: {args.name} on {len(result.points)} nodes")
    return 0
