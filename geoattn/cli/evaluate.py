"""``geoattn evaluate``: score a checkpoint on every mesh of a dataset file (cross-mesh report)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..eval import cross_mesh_report, plot_errors
from ..train import load_operator


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint written by `geoattn train` (best.pt / last.pt)")
    parser.add_argument("data", nargs="+", help="dataset file(s) with the same samples on several meshes")
    parser.add_argument("--meshes", help="comma-separated mesh names to score, the reference first "
                        "(default: all; the reference is a mesh named *train*, else the first)")
    parser.add_argument("--first", type=int, help="score only the first N samples (default: all)")
    parser.add_argument("--skip", type=int, default=0, help="skip the first N samples (e.g. training ones)")
    parser.add_argument("--out", help="folder for crossmesh.csv and errors.png (default: print only)")


def run(args: argparse.Namespace) -> int:
    from ..data.dataset import DarcyDataset, open_dataset_file

    op = load_operator(args.checkpoint)
    wanted = args.meshes.split(",") if args.meshes else None
    datasets = {}
    for path in args.data:
        with open_dataset_file(path) as fh:
            names = sorted(fh["meshes"])
        for mesh in wanted or names:
            if mesh not in names:
                continue
            ds = DarcyDataset(path, mesh=mesh)
            stop = len(ds) if args.first is None else min(len(ds), args.skip + args.first)
            datasets[mesh] = [ds[i] for i in range(args.skip, stop)]
    missing = set(wanted or ()) - set(datasets)
    if missing or not datasets:
        raise ValueError(f"meshes {sorted(missing)} not found in {args.data}" if missing
                         else f"no samples to evaluate in {args.data}")
    first = (wanted or [])[:1] or [m for m in datasets if "train" in m][:1] or [next(iter(datasets))]
    report = cross_mesh_report({"model": op}, datasets, reference=first[0])
    print(report.table())
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        report.write_csv(out / "crossmesh.csv")
        plot_errors(report, out / "errors.png")
    return 0
