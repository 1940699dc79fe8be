"""Does the multigrid need the domain's geometry as an input? The multigrid with and without the
distance of its first grid's cells to the boundary (``geometry="distance"``), and FNO through a
masked grid, on domains where every sample has its own.

    python benchmarks/geometry_input.py --seeds 0 1 --epochs 30 --out geo_out --docs docs/results/geometry_input.md

The data are the race's (:func:`darcy.race.race_data` at the ``race`` scale, ``--scale``): on ``random_holes``
every sample lies on the unit square without 1 to 3 discs of its own, on a mesh of its own (about
1 089 nodes); tested on 50 new domains at that size (``train``) and on the same domains meshed
1.5 times finer (``finer``). Every model is trained by :func:`darcy.race.run_family` as in the
race (the multigrid on the samples carried to their meshes refined once, FNO on the nodes), for
``--epochs`` epochs (the same for every model: an equal-epoch comparison; seconds per epoch are
reported beside it) or with ``--seconds`` of training time each. The models differ only in what
the multigrid's first grid sees of the domain: its covered fractions (``multigrid``), and also the
distance to the boundary (``multigrid-distance``). Each ``--seeds`` value seeds the models'
weights and sample order; the data are those of seed 0 for all. Each run is kept in
``OUT/<family>-<model>-s<seed>.json``; a rerun skips finished runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from darcy.race import SCALES, race_data, run_family
from results_page import add_docs_argument, markdown_table, write_page
from timing import machine as describe_machine

PEER = "neuralop-fno"
MODELS = ("multigrid", "multigrid-distance", PEER)


def run(args) -> list[dict]:
    """Every (family, seed, model) run, from ``args.out`` where kept."""
    scale = replace(SCALES[args.scale], epochs=args.epochs or 10**6, seconds=args.seconds)
    runs = []
    for family in args.families:
        data = None
        for seed in args.seeds:
            for name in args.models:
                path = args.out / f"{family}-{name}-s{seed}.json"
                if not path.exists():
                    data = data or race_data(family, scale, 0, args.domain)
                    result = run_family(family, scale, [name], torch.device("cpu"), seed=seed, domain=args.domain,
                                        data=data)
                    report, row = result["report"], result["models"][name]
                    record = {"family": family, "model": name, "seed": seed, "epochs": row["epochs"],
                              "seconds_per_epoch": row["seconds_per_epoch"],
                              "test": {mesh: report.mean(name, mesh) for mesh in report.nodes},
                              "load": os.getloadavg()[0]}
                    args.out.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(record))
                    print(family, name, seed, record["test"], file=sys.stderr)
                runs.append(json.loads(path.read_text()))
    return runs


def table(runs: list[dict]) -> str:
    """One row per family and model: the mean over the seeds of each mesh's error (each seed's in
    brackets), the ratio to FNO's on each mesh (the mean's), the finer / train ratio, epochs and
    seconds per epoch."""
    rows = []
    for family in dict.fromkeys(r["family"] for r in runs):
        of = {m: [r for r in runs if r["family"] == family and r["model"] == m] for m in MODELS}
        meshes = list(next(r for r in runs if r["family"] == family)["test"])
        mean = {m: {k: statistics.fmean(r["test"][k] for r in rs) for k in meshes} for m, rs in of.items() if rs}
        for m, rs in of.items():
            if not rs:
                continue
            cells = [f"{mean[m][k]:.4f} [" + " / ".join(f"{r['test'][k]:.4f}" for r in rs) + "]" for k in meshes]
            ratio = [f"{mean[m][k] / mean[PEER][k]:.2f}" if PEER in mean else "–" for k in meshes]
            rows.append([family, m, *cells, *ratio, f"{mean[m][meshes[-1]] / mean[m][meshes[0]]:.2f}",
                         f"{statistics.fmean(r['epochs'] for r in rs):.0f}",
                         f"{statistics.fmean(r['seconds_per_epoch'] for r in rs):.1f}"])
    head = ["family", "model", *[f"{k} (mean [seeds])" for k in meshes], *[f"{k} / FNO" for k in meshes],
            f"{meshes[-1]} / {meshes[0]}", "epochs", "s / epoch"]
    return markdown_table(head, rows)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="race", choices=list(SCALES), help="the race's scale (default race)")
    parser.add_argument("--domain", default="random_holes", help="the race's domain (default random_holes)")
    parser.add_argument("--families", nargs="+", default=["piecewise"], help="coefficient laws (default piecewise)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epochs", type=int, help="epochs per model (equal epochs)")
    parser.add_argument("--seconds", type=float, help="training time per model (equal time)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the runs (a rerun skips finished runs)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if (args.epochs is None) == (args.seconds is None):
        parser.error("give --epochs or --seconds")
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    tic = time.time()
    runs = run(args)
    text = table(runs)
    print(text)
    if args.docs:
        budget = f"{args.epochs} epochs" if args.epochs else f"{args.seconds:.0f} s"
        command = " ".join(["python", "benchmarks/geometry_input.py", *(argv if argv is not None else sys.argv[1:])])
        write_page(args.docs, "Geometry as an input: the multigrid with the distance to the boundary "
                   "(`benchmarks/geometry_input.py`)", command, text,
                   f"{describe_machine(torch.device('cpu'))}; {time.time() - tic:.0f} s in this call; load "
                   f"{os.getloadavg()[0]:.1f} at the end; recorded {time.strftime('%Y-%m-%d')}",
                   f"Domain {args.domain}; every model {budget}.")
    return runs


if __name__ == "__main__":
    main()
