"""``geoattn predict``: run a trained model on mesh files meshio reads; write the predictions.

Example::

    geoattn predict --checkpoint run/best.pt --mesh results/ --merge-duplicates 1e-9 --reorient -o pred/
    geoattn predict --checkpoint run/best.pt --mesh 'runs/fine_*.vtu' -o pred/
    geoattn predict --checkpoint run/best.pt --mesh one.vtu -o one_pred.vtu

``--mesh`` takes files, folders (every mesh file in them and below) and glob patterns, as
``geoattn import`` does, and reads them with the same reader flags (``--merge-duplicates``,
``--reorient``, ``--cell-block``), all in one process. With one input file ``-o`` is the output
file (its format from its extension); with several, or when ``-o`` is a folder, each prediction is
written to ``OUT/<the input's file name>``.

A checkpoint knows its fields (the checkpoint holds their names; an older one, a ``fields.json``
beside it): the same named input fields are read, its global parameters are taken from ``--param
NAME=VALUE``, the mesh file's ``field_data`` or a ``params.csv`` / ``params.json`` beside it, and
the prediction is written beside the file's own fields, one point field per target under
``<target>_pred`` (``--suffix``), so the reference field stays in the output to compare with;
``--name`` names the outputs instead. Lists of names are comma-separated, and a repeated flag
appends. The meshes are written with the nodes the solver wrote (after ``--merge-duplicates`` the
prediction of a merged node is written at each of its copies). The outputs' folder is checked
before any work, only a finite prediction is written, and each file is written atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError, InputFilesError, MeshError, OutputError
from .options import NameList, Once, add_reader_args


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, action=Once,
                        help="checkpoint written by `geoattn train`, or a folder of ensemble members "
                             "member0/, member1/, ... (their mean is predicted)")
    parser.add_argument("--mesh", required=True, nargs="+", metavar="PATH",
                        help="mesh files with the input fields (.vtu, .msh, ...), folders or glob patterns")
    parser.add_argument("--field", action=NameList,
                        help="input point field(s), comma-separated (default: the fields the model was "
                             "trained on, for a dataset from `geoattn import`)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a global parameter's value (repeat for several; default: from each mesh "
                             "file's field_data or a parameter table beside it)")
    parser.add_argument("-o", "--output", required=True, action=Once,
                        help="output mesh file (one input; format from its extension), or a folder for "
                             "one output per input file")
    parser.add_argument("--name", action=NameList,
                        help="output field name(s), comma-separated, one per output channel or one for all "
                             "(default: <target><suffix> for the targets the model was trained on, else "
                             "prediction)")
    parser.add_argument("--suffix", default="_pred", action=Once,
                        help="appended to the target names to name the outputs (default: %(default)s)")
    add_reader_args(parser)
    parser.add_argument("--device", default="auto", action=Once,
                        help="cpu, cuda, cuda:N or auto: CUDA when available, else the CPU (default: auto)")


def _number(value, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{what} is {value!r}, not a number") from err


def _params(args: argparse.Namespace, names: list[str], path: Path, mesh) -> list[float]:
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
    import numpy as np

    from .importer import tables

    row = tables([path], names, None).get(str(path), {}) if names else {}
    values = []
    for key in names:
        if key not in given and key in row:
            given[key] = _number(row[key], f"{key} of {path} in its parameter table")
        if key in given:
            values.append(given[key])
        elif key in mesh.field_data and np.asarray(mesh.field_data[key]).size == 1:
            values.append(float(np.asarray(mesh.field_data[key]).reshape(-1)[0]))
        else:
            raise ConfigError(f"{path}: no value for the model's parameter {key!r} (not in its field_data "
                              f"nor in a params.csv / params.json beside it); give --param {key}=VALUE")
    return values


def _outputs(args: argparse.Namespace, files: list[Path]) -> list[Path]:
    """Where each prediction goes: ``-o`` itself for one input file (unless it is a folder),
    else ``-o/<input file name>``; checked before any work."""
    from ..train.checkpoint import check_writable

    out = Path(args.output)
    if len(files) == 1 and not out.is_dir() and not args.output.endswith(("/", "\\")):
        return [check_writable(out)]
    check_writable(out, folder=True)
    targets = [out / f.name for f in files]
    seen: dict[Path, Path] = {}
    for f, t in zip(files, targets):
        if t in seen:
            raise ConfigError(f"{seen[t]} and {f} would both be written to {t}; predict them into two folders")
        if t.resolve() == f.resolve():
            raise ConfigError(f"-o {out} would overwrite the input {f}; give another folder")
        seen[t] = f
    return targets


def _names(args: argparse.Namespace, stored: dict) -> list[str]:
    if args.name is not None:
        return args.name
    if stored.get("y"):
        if not args.suffix:
            raise ConfigError("--suffix must not be empty: the prediction would replace the reference field; "
                              "give --name to name the outputs")
        return [f"{y}{args.suffix}" for y in stored["y"]]
    return ["prediction"]


def run(args: argparse.Namespace) -> int:
    from ..mesh.io import read_meshio
    from ..train import load_trained
    from ..train.trainer import resolve_device
    from .importer import gather
    from .options import reader_options
    from .train import read_fields

    reader = reader_options(args)
    if reader.get("origin") == "auto":
        raise ConfigError("--origin auto is for geoattn import (the model applies the origin it was trained "
                          "with); give the point, --origin X,Y[,Z], for a model trained without one")
    files = gather(args.mesh)
    outputs = _outputs(args, files)
    op = load_trained(args.checkpoint, resolve_device(args.device))
    stored = read_fields(args.checkpoint, op) or {}
    fields = args.field or stored.get("x")
    if not fields:
        raise ConfigError("give the input field(s) with --field NAME")
    names = _names(args, stored)
    for k, (path, output) in enumerate(zip(files, outputs)):
        try:
            mesh = _predict_one(args, op, path, output, fields, names, stored, reader)
        except (MeshError, FileNotFoundError) as err:  # the other unreadable files named too, in one line
            unreadable = []
            for other in files[k + 1:]:
                try:
                    read_meshio(other)
                except (MeshError, FileNotFoundError) as bad:
                    unreadable.append(bad)
            if unreadable:
                done = f" (the {k} before the first were predicted and written)" if k else ""
                raise InputFilesError([err, *unreadable], len(files), note=done) from err
            raise
        print(f"wrote {output}: {', '.join(names)} on {len(mesh.points)} nodes")
    return 0


#: the output formats whose meshio writer writes an HDF5 file (the XDMF companion ``.h5``, MOAB,
#: MED, CGNS): HDF5 cannot recover from a write that fails (a full disk crashes the process), so
#: their room on the disk is checked before they are written
HDF5_FORMATS = (".xdmf", ".xmf", ".h5m", ".med", ".cgns")


def written_bytes(mesh) -> int:
    """An upper bound of the bytes meshio writes for ``mesh`` in an HDF5-backed format: its
    arrays uncompressed (points padded to 3-D float64), a quarter more and 64 KiB of metadata."""
    import numpy as np

    arrays = [np.asarray(b.data) for b in mesh.cells] + [np.asarray(v) for v in mesh.point_data.values()]
    arrays += [np.asarray(v) for blocks in mesh.cell_data.values() for v in blocks]
    raw = 24 * len(mesh.points) + sum(a.nbytes for a in arrays)
    return int(1.25 * raw) + 65536


def _predict_one(args, op, path: Path, output: Path, fields, names, stored: dict, reader: dict):
    """Predict on the mesh file ``path`` and write the result to ``output``; returns it."""
    import meshio

    from ..eval import predict_meshio
    from ..mesh import save_meshio
    from ..mesh.io import read_meshio
    from ..atomic import check_space
    from ..mesh.validation import located
    from ..train.checkpoint import atomic_path

    mesh = read_meshio(path)
    clash = [n for n in names if n in mesh.point_data]
    if clash:
        raise ConfigError(f"{path} already has a point field {clash[0]!r}; choose another --name or --suffix")
    params = _params(args, stored.get("params") or [], path, mesh)
    with located(str(path)):
        result = predict_meshio(op, mesh, fields, names, params=params, **reader)
    if output.suffix.lower() in HDF5_FORMATS:  # HDF5 cannot be guarded byte by byte here: room first
        check_space(output, written_bytes(result), "free some space or write the prediction elsewhere (-o)")
    with atomic_path(output) as tmp:
        try:
            save_meshio(tmp, result)
        except (meshio.ReadError, meshio.WriteError) as err:  # an unknown extension is a ReadError
            raise OutputError(f"cannot write {output}: {str(err).replace(str(tmp), str(output))}") from err
    return result
