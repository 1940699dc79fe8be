"""``geoattn predict``: run a trained model on any mesh file meshio reads; write the prediction.

Reads the mesh and the input point field(s), computes quadrature weights, runs the model and
writes the mesh with the prediction (point data ``prediction``, or ``--name``) to ``-o``. The
output's folder is checked before any work, only a finite prediction is written, and it is
written atomically: on any error no output file appears and an existing one is left as it was.
"""

from __future__ import annotations

import argparse

import meshio

from ..errors import ConfigError, OutputError
from ..eval import predict_meshio
from ..mesh import save_meshio
from ..mesh.io import read_meshio
from ..mesh.validation import located
from ..train import load_trained
from ..train.checkpoint import atomic_path, check_writable
from ..train.trainer import resolve_device
from .train import add_device_arg


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint written by `geoattn train`, or a folder of ensemble members "
                             "member0/, member1/, ... (their mean is predicted)")
    parser.add_argument("--mesh", required=True, help="mesh file with the input field (.vtu, .msh, ...)")
    parser.add_argument("--field", required=True, action="append",
                        help="input point field name (repeat for several channels)")
    parser.add_argument("-o", "--output", required=True,
                        help="output mesh file in an existing folder (format from extension)")
    parser.add_argument("--name", default="prediction", help="name of the output field (default: %(default)s)")
    add_device_arg(parser, "auto")


def run(args: argparse.Namespace) -> int:
    output = check_writable(args.output)
    if not args.name.strip():
        raise ConfigError("--name must be a non-empty field name")
    op = load_trained(args.checkpoint, resolve_device(args.device))
    mesh = read_meshio(args.mesh)
    if args.name in mesh.point_data:
        raise ConfigError(f"{args.mesh} already has a point field {args.name!r}; choose another --name")
    with located(args.mesh):
        result = predict_meshio(op, mesh, args.field, args.name)
    with atomic_path(output) as tmp:
        try:
            save_meshio(tmp, result)
        except (meshio.ReadError, meshio.WriteError) as err:  # an unknown extension is a ReadError
            raise OutputError(f"cannot write {output}: {str(err).replace(str(tmp), str(output))}") from err
    print(f"wrote {output}: {args.name} on {len(result.points)} nodes")
    return 0
