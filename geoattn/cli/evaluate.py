"""``geoattn evaluate``: score a checkpoint on every mesh of a dataset file (cross-mesh report), or
on every named test set of a dataset file from ``geoattn import`` (one row per set).

A cross-mesh report compares the same samples on several meshes, sample ``i`` of each: meshes
holding different numbers of samples are refused, and so are files generated with other samples
(another seed, family or field: their recipes differ in more than their meshes). The sets of an
imported dataset are reported side by side, with a table of the files, worst first; a set that
holds the same samples as the first set (the same file names, in other folders: the same samples
on other meshes) gets its ratio to it, the samples paired by name. A model trained on meshes
imported with ``--origin`` scores only a dataset imported with the same origin. ``--out`` writes the tables (``sets.csv``, ``files.csv`` or
``crossmesh.csv``) and the figure ``errors.png`` (the error of every file against its node count,
or the mean error per mesh).
"""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .options import NameList, Once


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint written by `geoattn train` (best.pt / last.pt), or a folder of "
                        "ensemble members member0/, member1/, ... (each from `geoattn train --seed K --out "
                        "FOLDER/memberK`), scored as their mean")
    parser.add_argument("data", nargs="+", help="dataset file(s) with the same samples on several meshes, or "
                        "one dataset file from `geoattn import`")
    parser.add_argument("--sets", action=NameList, help="sets of a `geoattn import` file to score, comma-separated "
                        "(a repeated flag appends; default: its test sets; train and val may be named)")
    parser.add_argument("--meshes", action=NameList, help="mesh names to score, the reference first, "
                        "comma-separated (a repeated flag appends; default: all; the reference is a mesh named "
                        "*train*, else the first)")
    parser.add_argument("--first", type=int, help="score only the first N samples, N >= 1 (default: all)")
    parser.add_argument("--skip", type=int, default=0,
                        help="skip the first N samples, N >= 0 (e.g. training ones; default: 0)")
    parser.add_argument("--out", action=Once, help="folder for the tables (crossmesh.csv; sets.csv and files.csv "
                        "for a `geoattn import` file) and the figure errors.png (default: print only)")
    parser.add_argument("--device", default="auto", action=Once,
                        help="cpu, cuda, cuda:N or auto: CUDA when available, else the CPU (default: auto)")


def _mesh_names(value: list[str] | str | None, flag: str = "--meshes") -> list[str] | None:
    """The names of ``--sets`` / ``--meshes`` (:class:`~geoattn.cli.options.NameList`), ``None``
    when not given."""
    from .options import names

    return None if value is None else names(value, flag)


#: the entries of a ``geoattn generate`` recipe that do not change its samples: its meshes, its
#: name and its sample count (sample ``i`` depends on the seed and ``i`` alone)
MESH_ENTRIES = ("meshes", "name", "n")


def _samples_of(fh) -> dict | None:
    """What defines the samples of a ``geoattn generate`` file: its recipe but its meshes, name
    and count (``None`` for a file without a recipe)."""
    import json

    try:
        recipe = json.loads(str(fh.attrs["recipe"]))
    except (KeyError, ValueError):
        return None
    return {k: v for k, v in recipe.items() if k not in MESH_ENTRIES} if isinstance(recipe, dict) else None


def _check_paired(samples: dict) -> None:
    """Refuse dataset files that hold other samples: a cross-mesh report pairs sample ``i`` of
    every mesh, which only means something when they are the same samples."""
    known = {path: s for path, s in samples.items() if s is not None}
    if len(known) < 2:
        return
    (first, a), *rest = known.items()
    for path, b in rest:
        if b != a:
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            shown = ", ".join(f"{k} {a.get(k)!r} against {b.get(k)!r}" for k in differ[:3])
            raise ConfigError(f"{first} and {path} hold other samples ({shown}), but a cross-mesh report "
                              "pairs sample i of every mesh; score each file alone, or generate them with "
                              "one recipe (the same seed, family and field) on their meshes")


def _score_sets(args: argparse.Namespace, op, first: int | None, skip: int, out) -> int:
    """The report of the named sets of one version-2 dataset file."""
    from ..data.meshdataset import MeshDataset
    from ..eval import plot_split, split_report
    from ..train.checkpoint import atomic_path
    from .train import read_fields

    if len(args.data) != 1 or args.meshes is not None:
        raise ConfigError(f"{args.data[0]} is a dataset from `geoattn import`: give it alone, and pick its "
                          "sets with --sets, not --meshes")
    path = args.data[0]
    full = MeshDataset(path, params_as_channels=True)
    stored = read_fields(args.checkpoint, op)
    given = {"x": full.x_names, "y": full.y_names, "params": full.param_names}
    if stored is not None and stored != given:
        raise ConfigError(f"{args.checkpoint} was trained on fields {stored}, but {path} holds {given}")
    if hasattr(op, "frame"):
        held = {} if full.frame is None else {"origin": list(full.frame[0]), "scale": full.frame[1]}
        if dict(op.frame) != held:
            raise ConfigError(f"{args.checkpoint} was trained on meshes read with origin "
                              f"{op.frame.get('origin')}, but {path} holds them with origin {held.get('origin')} "
                              "(--origin of geoattn import); import its files again with the model's origin")
    names = _mesh_names(args.sets, "--sets") if args.sets is not None else full.test_sets
    if not names:
        raise ConfigError(f"{path} has no test set; score its validation samples with --sets val")
    unknown = [n for n in names if n not in full.splits]
    if unknown:
        raise ConfigError(f"{path} has no set {unknown[0]!r}; it holds {list(full.splits)}")
    sets, files = {}, {}
    for name in names:
        ds = MeshDataset(path, name, params_as_channels=True)
        if skip >= len(ds):
            raise ConfigError(f"--skip {skip} leaves no samples: set {name!r} of {path} has {len(ds)}")
        stop = len(ds) if first is None else min(len(ds), skip + first)
        sets[name] = [ds[i] for i in range(skip, stop)]
        files[name] = ds.sample_names[skip:stop]
    report = split_report({"model": op}, sets, names=files)
    print(report.table())
    print()
    print("files, worst first:")
    print(report.files_table(top=10))
    if out is not None:
        with atomic_path(out / "sets.csv") as tmp:
            report.write_csv(tmp)
        with atomic_path(out / "files.csv") as tmp:
            report.write_files_csv(tmp)
        with atomic_path(out / "errors.png") as tmp:
            plot_split(report, tmp)
        print(f"wrote {out / 'sets.csv'}, {out / 'files.csv'} and {out / 'errors.png'}")
    return 0


def run(args: argparse.Namespace) -> int:
    from ..data.dataset import DarcyDataset, open_dataset_file
    from ..data.meshdataset import MESH_FORMAT_VERSION, dataset_version
    from ..eval import cross_mesh_report, plot_errors
    from ..optional import require
    from ..train import load_trained
    from ..train.checkpoint import atomic_path, check_writable
    from ..train.trainer import resolve_device
    from .train import check_setting

    first = None if args.first is None else check_setting("--first", args.first, int, 1)
    skip = check_setting("--skip", args.skip, int, 0)
    wanted = _mesh_names(args.meshes)
    out = None if args.out is None else check_writable(args.out, folder=True)
    imported = dataset_version(args.data[0]) == MESH_FORMAT_VERSION
    if out is not None:
        require("matplotlib", "plot", "the errors.png of --out")  # fail now, not after scoring
    if imported or args.sets is not None:
        op = load_trained(args.checkpoint, resolve_device(args.device))
        return _score_sets(args, op, first, skip, out)
    op = load_trained(args.checkpoint, resolve_device(args.device))
    datasets, source, samples = {}, {}, {}
    for path in args.data:
        with open_dataset_file(path) as fh:
            names = sorted(fh["meshes"])
            samples[path] = _samples_of(fh)
        _check_paired(samples)
        for mesh in wanted or names:
            if mesh not in names:
                continue
            if mesh in datasets:
                raise ConfigError(f"mesh {mesh!r} is in both {source[mesh]} and {path}; "
                                  "give each dataset file once, with distinct mesh names")
            ds = DarcyDataset(path, mesh=mesh)
            if skip >= len(ds):
                raise ConfigError(f"--skip {skip} leaves no samples: mesh {mesh!r} of {path} has {len(ds)}")
            stop = len(ds) if first is None else min(len(ds), skip + first)
            datasets[mesh], source[mesh] = [ds[i] for i in range(skip, stop)], path
    missing = set(wanted or ()) - set(datasets)
    if missing or not datasets:
        raise ConfigError(f"meshes {sorted(missing)} not found in {args.data}" if missing
                          else f"no meshes to evaluate in {args.data}")
    reference = (wanted or [])[:1] or [m for m in datasets if "train" in m][:1] or [next(iter(datasets))]
    report = cross_mesh_report({"model": op}, datasets, reference=reference[0])
    print(report.table())
    if out is not None:
        with atomic_path(out / "crossmesh.csv") as tmp:
            report.write_csv(tmp)
        with atomic_path(out / "errors.png") as tmp:
            plot_errors(report, tmp)
        print(f"wrote {out / 'crossmesh.csv'} and {out / 'errors.png'}")
    return 0
