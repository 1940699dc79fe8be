"""``geoattn predict``: run a trained model on any mesh file meshio reads; write the prediction.

Reads the mesh and the input point field(s), computes quadrature weights, runs the model and
writes the mesh with the prediction (point data ``prediction``, or ``--name``) to ``-o``: one
point field ``[N]`` for a model with one output channel. A model trained on a dataset from
``geoattn import`` knows its fields (``fields.json`` beside its checkpoint): the same named input
fields are read, its global parameters are taken from ``--param NAME=VALUE`` or the mesh file's
``field_data``, and the prediction is written under the target names, one field per channel
(replacing fields of those names, e.g. the reference solution, in the output file). The
output's folder is checked before any work, only a finite prediction is written, and it is
written atomically: on any error no output file appears and an existing one is left as it was.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import meshio
import numpy as np

from ..errors import ConfigError, OutputError
from ..eval import predict_meshio
from ..mesh import save_meshio
from ..mesh.io import read_meshio
from ..mesh.validation import located
from ..train import load_trained
from ..train.checkpoint import atomic_path, check_writable
from ..train.trainer import resolve_device
from .importer import tables
from .train import add_device_arg, read_fields


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint written by `geoattn train`, or a folder of ensemble members "
                             "member0/, member1/, ... (their mean is predicted)")
    parser.add_argument("--mesh", required=True, help="mesh file with the input field (.vtu, .msh, ...)")
    parser.add_argument("--field", action="append",
                        help="input point field name (repeat for several channels; default: the fields the "
                             "model was trained on, for a dataset from `geoattn import`)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a global parameter's value (default: from the mesh file's field_data)")
    parser.add_argument("-o", "--output", required=True,
                        help="output mesh file in an existing folder (format from extension)")
    parser.add_argument("--name", help="name of the output field (default: the target names the model was "
                             "trained on, else prediction)")
    add_device_arg(parser, "auto")


def _number(value, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{what} is {value!r}, not a number") from err


def _params(args: argparse.Namespace, names: list[str], mesh: meshio.Mesh) -> list[float]:
    given = {}
    for spec in args.param:
        key, sep, value = spec.partition("=")
        try:
            given[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise ConfigError(f"--param must be NAME=NUMBER, got {spec!r}")
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ConfigError(f"--param {unknown[0]}: the model takes the parameters {names}")
    row = tables([Path(args.mesh)], names, None).get(str(Path(args.mesh)), {}) if names else {}
    values = []
    for key in names:
        if key not in given and key in row:
            given[key] = _number(row[key], f"{key} of {args.mesh} in its parameter table")
        if key in given:
            values.append(given[key])
        elif key in mesh.field_data and np.asarray(mesh.field_data[key]).size == 1:
            values.append(float(np.asarray(mesh.field_data[key]).reshape(-1)[0]))
        else:
            raise ConfigError(f"{args.mesh}: no value for the model's parameter {key!r} (not in its field_data "
                              f"nor in a params.csv / params.json beside it); give --param {key}=VALUE")
    return values


def run(args: argparse.Namespace) -> int:
    output = check_writable(args.output)
    if args.name is not None and not args.name.strip():
        raise ConfigError("--name must be a non-empty field name")
    stored = read_fields(args.checkpoint) or {}
    fields = args.field or stored.get("x")
    if not fields:
        raise ConfigError("give the input field(s) with --field NAME")
    names = [args.name] if args.name is not None else stored.get("y") or ["prediction"]
    op = load_trained(args.checkpoint, resolve_device(args.device))
    mesh = read_meshio(args.mesh)
    if args.name is not None and args.name in mesh.point_data:
        raise ConfigError(f"{args.mesh} already has a point field {args.name!r}; choose another --name")
    params = _params(args, stored.get("params") or [], mesh)
    with located(args.mesh):
        result = predict_meshio(op, mesh, fields, names, params=params)
    with atomic_path(output) as tmp:
        try:
            save_meshio(tmp, result)
        except (meshio.ReadError, meshio.WriteError) as err:  # an unknown extension is a ReadError
            raise OutputError(f"cannot write {output}: {str(err).replace(str(tmp), str(output))}") from err
    print(f"wrote {output}: {', '.join(names)} on {len(result.points)} nodes")
    return 0
