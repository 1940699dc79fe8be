"""``geoattn import``: build a dataset file (format version 2) from your own simulation files.

One mesh file per sample (anything meshio reads: .vtu, .msh, .xdmf, ...), each with the named
point fields; the meshes may differ from file to file. Example::

    geoattn import runs/*.vtu --x kappa --y T --params load --out plate.h5 --split 0.8,0.1,0.1
    geoattn import runs/ --x kappa --y T --test fine='runs/fine_*' --out plate.h5

``PATH`` is a file, a folder (every mesh file in it and below) or a glob pattern. Global
parameters (``--params``) come from each file's ``field_data``, else from a table: ``--params-file``
or a ``params.csv`` / ``params.json`` beside the files, one row per file name (CSV: a ``file``
column, or the first column, and one column per parameter; JSON: ``{"name.vtu": {"load": 1.5}}``
or a list of such rows with a ``"file"`` key).

Splits: the files matched by a ``--test NAME=GLOB`` form the test set ``NAME`` (one per mesh
family, say); the others are shuffled with ``--seed`` and split by ``--split`` into ``train``,
``val`` and, with a third fraction, ``test`` (default ``0.8,0.1,0.1``, or ``0.9,0.1`` with
``--test``).

A bad file (unreadable, a missing field, a field of the wrong length, an invalid mesh, a missing
parameter) stops the import with one line naming the file and the problem, and nothing is
written. Ctrl-C keeps the samples read so far in ``OUT.partial``; the same command resumes.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import glob
import json
import logging
import os
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..paths import symlink_loop
from .options import NameList, add_reader_args, reader_options
from .options import names as option_names

log = logging.getLogger(__name__)
INTERRUPTED = "; run the same command again to resume"
TABLES = ("params.csv", "params.json")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="mesh files, folders or glob patterns")
    parser.add_argument("--x", required=True, action=NameList,
                        help="input point field(s), comma-separated (a repeated flag appends)")
    parser.add_argument("--y", required=True, action=NameList,
                        help="target point field(s), comma-separated (a repeated flag appends)")
    parser.add_argument("--params", action=NameList,
                        help="global parameter(s) per file, comma-separated (a repeated flag appends)")
    parser.add_argument("--params-file", help="CSV or JSON table of the parameters, one row per file name "
                        "(default: a params.csv or params.json beside the files)")
    parser.add_argument("--out", required=True, help="the dataset file to write (.h5)")
    parser.add_argument("--split", help="fractions TRAIN,VAL[,TEST] of the files not in a --test set "
                        "(default: 0.8,0.1,0.1; 0.9,0.1 with --test)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split's shuffle (default: %(default)s)")
    parser.add_argument("--test", action="append", default=[], metavar="NAME=GLOB",
                        help="a named test set: the files matching GLOB (repeat for several sets)")
    add_reader_args(parser)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    parser.add_argument("--no-progress", action="store_true")


def names(text: list[str] | str | None, flag: str) -> list[str]:
    """Comma-separated names, each once (``[]`` for ``None``); see :func:`geoattn.cli.options.names`."""
    return option_names(text, flag)


def _is_mesh_file(path: Path) -> bool:
    import meshio

    suffixes = [s.lower() for s in path.suffixes]
    return any("".join(suffixes[i:]) in meshio.extension_to_filetypes for i in range(len(suffixes)))


def _walk(folder: Path, pick=_is_mesh_file, skipped: list[Path] | None = None) -> list[Path]:
    """The files in ``folder`` and below that ``pick`` accepts, entering every real folder once:
    a link to a folder already seen (``latest -> run_1``) or a loop of links is not followed
    again. The other files (but hidden ones and parameter tables) are appended to ``skipped``."""
    found, seen, links = [], set(), []

    def walk(top, follow: bool) -> None:
        for root, dirs, names in os.walk(top, followlinks=follow):
            real = os.path.realpath(root)
            if real in seen:
                dirs[:] = []
                continue
            seen.add(real)
            dirs.sort()
            links.extend(Path(root) / d for d in dirs if (Path(root) / d).is_symlink())
            found.extend(Path(root) / n for n in sorted(names) if pick(Path(root) / n))
            if skipped is not None:
                skipped.extend(Path(root) / n for n in sorted(names) if not n.startswith(".")
                               and n not in TABLES and not pick(Path(root) / n))

    walk(folder, False)  # the real folders first, so that a file is named without a link
    for link in links:
        walk(link, True)
    return sorted(p for p in found if p.is_file())


def _match(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Whether the path ``parts`` matches the glob ``pattern`` (parts; ``**`` any folders)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return (bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0])
            and (not parts[0].startswith(".") or pattern[0].startswith("."))
            and _match(parts[1:], pattern[1:]))


def _glob(pattern: str) -> list[Path]:
    """The files matching the glob ``pattern``; ``**`` enters every real folder once (unlike
    :func:`glob.glob`, which follows a loop of links until the system refuses)."""
    parts = Path(pattern).parts
    if "**" not in parts:
        return [Path(p) for p in sorted(glob.glob(pattern)) if Path(p).is_file()]
    k = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    root = Path(*parts[:k]) if k else Path(".")
    return [f for f in _walk(root, pick=lambda _: True) if _match(f.relative_to(root).parts, parts[k:])]


def gather(paths: list[str], skipped: list[Path] | None = None) -> list[Path]:
    """The mesh files that ``paths`` name (files, folders, glob patterns), each real file once,
    in order.

    Paths are compared by their real path (links resolved): a file reached twice, through a
    link such as ``latest -> run_1``, a loop of links or two patterns, is one sample, named by
    the path that goes through no link when there is one; so no file lands in two splits.
    Files in a folder that meshio cannot read by their extension are appended to ``skipped``."""
    files: dict[str, Path] = {}
    twice = 0
    for text in paths:
        path = Path(text)
        if glob.has_magic(text):
            found = _glob(text)
            if not found:
                raise ConfigError(f"no file matches {text!r}")
        elif path.is_dir():
            left: list[Path] = []
            found = _walk(path, skipped=left)
            if not found:
                raise ConfigError(f"no mesh file in folder {path}" + (f" ({skipped_note(left)})" if left else ""))
            if skipped is not None:
                skipped.extend(left)
        elif path.exists():
            found = [path]
        else:
            loop = symlink_loop(path)
            raise FileNotFoundError(f"no mesh file at {path}" + (f": a loop of links, {loop}" if loop else ""))
        for f in found:
            real = os.path.realpath(f)
            if real not in files:
                files[real] = f
                continue
            twice += 1
            if os.path.abspath(files[real]) != real and os.path.abspath(f) == real:
                files[real] = f  # the name without a link
    if twice:
        log.info("%d path(s) reached a file already found (through links or two patterns); each file "
                 "is imported once", twice)
    return list(files.values())


def skipped_note(files: list[Path], shown: int = 5) -> str:
    """One line naming the files a folder held that are not mesh files meshio reads."""
    kinds = sorted({f.suffix.lower() or "(no extension)" for f in files})
    names = ", ".join(str(f) for f in files[:shown]) + (f" and {len(files) - shown} more" if len(files) > shown else "")
    return (f"skipped {len(files)} file(s) meshio does not read ({', '.join(kinds)}): {names}"
            + ("; .vtp and other VTK XML files other than .vtu: convert them to .vtu with pyvista"
               if any(k in (".vtp", ".vts", ".vtr", ".vti", ".pvtu") for k in kinds) else ""))


def read_table(path: Path) -> dict[str, dict]:
    """Rows of a CSV or JSON parameter table, by file name."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read parameter table {path}: {err.strerror or err}") from err
    try:
        if path.suffix.lower() == ".json":
            rows = json.loads(text)
            if isinstance(rows, dict):
                rows = [{"file": k, **v} for k, v in rows.items()]
            return {str(r.pop("file")): r for r in rows}
        reader = csv.DictReader(text.splitlines())
        key = "file" if "file" in (reader.fieldnames or []) else (reader.fieldnames or [None])[0]
        if key is None:
            raise ValueError("no columns")
        return {row.pop(key).strip(): row for row in reader}
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(f"parameter table {path} is not a table of one row per file ({err})") from err


def tables(files: list[Path], params: list[str], given: str | None) -> dict[str, dict]:
    """The parameter row of each file (by its path as given), from ``given`` or the tables beside it."""
    if not params:
        return {}
    fixed = read_table(Path(given)) if given else None
    beside: dict[Path, dict | None] = {}
    out = {}
    for f in files:
        if fixed is not None:
            table = fixed
        else:
            if f.parent not in beside:
                found = [f.parent / t for t in TABLES if (f.parent / t).is_file()]
                beside[f.parent] = read_table(found[0]) if found else None
            table = beside[f.parent]
        if table is not None:
            row = table.get(f.name, table.get(str(f)))
            if row is not None:
                out[str(f)] = row
    return out


def splits(files: list[Path], tests: list[str], fractions: str | None, seed: int) -> dict[str, list[int]]:
    """Sample indices by split name: the ``--test`` sets, then ``train``/``val``/``test`` by
    fractions of the rest, shuffled with ``seed``."""
    named: dict[str, str] = {}
    for spec in tests:
        name, sep, pattern = spec.partition("=")
        name = name.strip()
        if not sep or not name or not pattern:
            raise ConfigError(f"--test must be NAME=GLOB, got {spec!r}")
        if name in named or name in ("train", "val"):
            raise ConfigError(f"--test name {name!r} is given twice or is train/val")
        named[name] = pattern
    out: dict[str, list[int]] = {}
    rest = []
    for i, f in enumerate(files):
        match = next((n for n, p in named.items()
                      if fnmatch.fnmatch(f.as_posix(), p) or fnmatch.fnmatch(f.name, p)), None)
        if match is None:
            rest.append(i)
        else:
            out.setdefault(match, []).append(i)
    empty = [n for n in named if n not in out]
    if empty:
        raise ConfigError(f"--test {', '.join(f'{n}={named[n]}' for n in empty)} matches no file")
    text = fractions or ("0.9,0.1" if named else "0.8,0.1,0.1")
    try:
        parts = [float(v) for v in text.split(",")]
    except ValueError:
        parts = []
    if not 2 <= len(parts) <= 3 or any(not 0 <= p <= 1 for p in parts) or abs(sum(parts) - 1) > 1e-6:
        raise ConfigError(f"--split must be 2 or 3 fractions in [0, 1] summing to 1, got {text!r}")
    if len(parts) == 3 and parts[2] > 0 and "test" in named:
        raise ConfigError("--split has a test fraction and a --test set is named 'test'; rename one")
    order = [rest[i] for i in np.random.default_rng(seed).permutation(len(rest))]
    counts = [round(p * len(order)) for p in parts[1:]]
    train = len(order) - sum(counts)
    if train < 1:
        raise ConfigError(f"--split {text} leaves no training file of the {len(order)} not in a test set")
    out["train"] = sorted(order[:train])
    out["val"] = sorted(order[train:train + counts[0]])
    if len(counts) == 2 and counts[1]:
        out["test"] = sorted(order[train + counts[0]:])
    return {k: out[k] for k in ["train", "val", *[k for k in out if k not in ("train", "val")]]}


def options(args: argparse.Namespace) -> dict:
    """The mesh reader's options given on the command line (:func:`geoattn.cli.options.reader_options`)."""
    return reader_options(args)


def centre(path: Path, reader: dict) -> list[float]:
    """The centre of the bounding box of the nodes of the mesh file ``path`` (read with the
    reader options ``reader``, but for ``origin``), rounded to 3 significant digits of its
    extent: ``--origin auto``."""
    import torch

    from ..mesh.io import from_meshio, read_meshio
    from ..mesh.validation import located

    with located(str(path)):
        pos = from_meshio(read_meshio(path), weights=None, dtype=torch.float64, unused="ignore",
                          **{k: v for k, v in reader.items() if k != "origin"}).pos.numpy()
    lo, hi = pos.min(axis=0), pos.max(axis=0)
    step = 10.0 ** np.floor(np.log10(max(float((hi - lo).max()), 1e-300))) / 100  # rounded: a readable origin
    return [float(v) for v in np.round((lo + hi) / 2 / step) * step]


def run(args: argparse.Namespace) -> int:
    from ..data.meshdataset import write_mesh_dataset

    x, y = names(args.x, "--x"), names(args.y, "--y")
    params = names(args.params, "--params")
    reader = options(args)
    skipped: list[Path] = []
    files = gather(args.paths, skipped)
    if skipped:
        print(skipped_note(skipped))
    if reader.get("origin") == "auto":
        reader["origin"] = centre(files[0], reader)
        print(f"--origin auto: {','.join(f'{v:.12g}' for v in reader['origin'])} (the centre of {files[0]}'s "
              "nodes), subtracted from every file's coordinates and recorded in the dataset")
    parts = splits(files, args.test, args.split, args.seed)
    rows = tables(files, params, args.params_file)
    path = write_mesh_dataset(args.out, files, x=x, y=y, params=params, splits=parts, tables=rows,
                              options=reader, progress=not args.no_progress, overwrite=args.overwrite)
    sizes = ", ".join(f"{k} {len(v)}" for k, v in parts.items())
    print(f"wrote {path}: {len(files)} samples ({sizes}); x {x}, y {y}" + (f", params {params}" if params else ""))
    return 0
