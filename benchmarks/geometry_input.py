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

With ``--tune-peer SECONDS``, FNO is the best of modes {8, 12, 16} x width {32, 64} (``--tune-modes``,
``--tune-widths``) on a validation split of seed 0's training samples
(:func:`darcy.tuning.select_peer`: each candidate trained for ``SECONDS``, once per family, before
the race and outside every model's budget; kept in ``OUT/peer-<family>-<key>.json``); its runs are
kept in ``OUT/<family>-neuralop-fno-tuned<SECONDS>-s<seed>.json`` with the selection, and the page
names the selected configuration and gives every candidate's validation error.
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
from darcy.tuning import select_peer
from results_page import add_docs_argument, markdown_table, write_page
from timing import machine as describe_machine

PEER = "neuralop-fno"
MODELS = ("multigrid", "multigrid-distance", PEER)


def run(domain: str, families: list[str], seeds: list[int], models: list[str], out: Path, scale,
        tune: float | None = None, tune_modes=(8, 12, 16), tune_widths=(32, 64), cache: Path | None = None,
        reference: bool = False, kept_only: bool = False, selection: dict | None = None) -> list[dict]:
    """Every (family, seed, model) run on ``domain`` at ``scale`` (a :class:`darcy.race.Scale`),
    from ``out`` where kept; ``tune``: FNO's candidates' seconds (:func:`darcy.tuning.select_peer`,
    its selection kept in ``cache``, default ``out``); ``reference``: each model also scored
    against the solutions on the training mesh refined twice (:func:`darcy.meshes.reference_targets`,
    kept as the run's ``"reference"``); ``kept_only``: train nothing, return the kept runs;
    ``selection``: ``{family: select_peer's result}`` made already (then ``tune`` names it)."""
    runs, chosen = [], selection or {}
    for family in families:
        data, selection = None, chosen.get(family)
        for seed in seeds:
            for name in models:
                tuned = tune is not None and name == PEER
                path = out / f"{family}-{name}{f'-tuned{tune:g}' if tuned else ''}-s{seed}.json"
                if kept_only and not path.exists():
                    continue
                if not path.exists():
                    data = data or race_data(family, scale, 0, domain)
                    if tuned and selection is None:  # once per family, on seed 0's data, its time not counted
                        selection = select_peer(data, scale, domain, tune, tune_modes, tune_widths,
                                                family=family, cache=cache or out)
                    result = run_family(family, scale, [name], torch.device("cpu"), seed=seed, domain=domain,
                                        data=data, peer=selection["best"] if tuned else None, reference=reference)
                    report, row = result["report"], result["models"][name]
                    record = {"family": family, "model": name, "seed": seed, "epochs": row["epochs"],
                              "seconds_per_epoch": row["seconds_per_epoch"],
                              "test": {mesh: report.mean(name, mesh) for mesh in report.nodes},
                              "load": os.getloadavg()[0]}
                    if reference:
                        record["reference"] = row["test_reference"]
                    if tuned:
                        record["tuning"] = {"seconds": tune, "best": selection["best"],
                                            "candidates": selection["candidates"]}
                    out.mkdir(parents=True, exist_ok=True)
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
            best = rs[0].get("tuning", {}).get("best")
            label = f"{m} (tuned: modes {best['modes']}, width {best['width']})" if best else m
            rows.append([family, label, *cells, *ratio, f"{mean[m][meshes[-1]] / mean[m][meshes[0]]:.2f}",
                         f"{statistics.fmean(r['epochs'] for r in rs):.0f}",
                         f"{statistics.fmean(r['seconds_per_epoch'] for r in rs):.1f}"])
    head = ["family", "model", *[f"{k} (mean [seeds])" for k in meshes], *[f"{k} / FNO" for k in meshes],
            f"{meshes[-1]} / {meshes[0]}", "epochs", "s / epoch"]
    return markdown_table(head, rows)


def tuning_table(runs: list[dict]) -> str:
    """One row per family and FNO candidate of ``--tune-peer``: its validation error, epochs and
    training seconds (or why it was skipped), the selected one marked."""
    rows = []
    for family in dict.fromkeys(r["family"] for r in runs):
        tuning = next((r["tuning"] for r in runs if r["family"] == family and "tuning" in r), None)
        for c in tuning["candidates"] if tuning else []:
            chosen = (c["modes"], c["width"]) == (tuning["best"]["modes"], tuning["best"]["width"])
            scored = [f"{c['val_error']:.4f}", c["epochs"], f"{c['train_seconds']:.1f}"] if "val_error" in c \
                else [f"skipped: {c['skipped']}", "–", "–"]
            rows.append([family, c["modes"], c["width"], *scored, "selected" if chosen else ""])
    return markdown_table(["family", "FNO modes", "width", "validation error", "epochs", "train s", ""], rows)


def budget(args) -> str:
    """Each model's budget as the command line gave it: ``N epochs`` or ``S s``."""
    return f"{args.epochs} epochs" if args.epochs else f"{args.seconds:.0f} s"


def write_race_page(path: Path, script: str, argv: list[str] | None, title: str, text: str, tic: float,
                    notes: str) -> None:
    """Write the results page of ``benchmarks/<script>.py`` run with ``argv`` (default the
    command line's), begun at ``tic``: the machine, the time in the call, the load at its end."""
    command = " ".join(["python", f"benchmarks/{script}.py", *(argv if argv is not None else sys.argv[1:])])
    write_page(path, f"{title} (`benchmarks/{script}.py`)", command, text,
               f"{describe_machine(torch.device('cpu'))}; {time.time() - tic:.0f} s in this call; load "
               f"{os.getloadavg()[0]:.1f} at the end; recorded {time.strftime('%Y-%m-%d')}", notes)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="race", choices=list(SCALES), help="the race's scale (default race)")
    parser.add_argument("--domain", default="random_holes", help="the race's domain (default random_holes)")
    parser.add_argument("--mesh-n", type=int, help="the training mesh's size (cells per side on the square and "
                        "the cube; default the scale's)")
    parser.add_argument("--families", nargs="+", default=["piecewise"], help="coefficient laws (default piecewise)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epochs", type=int, help="epochs per model (equal epochs)")
    parser.add_argument("--seconds", type=float, help="training time per model (equal time)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the runs (a rerun skips finished runs)")
    parser.add_argument("--tune-peer", type=float, metavar="SECONDS",
                        help="race the best FNO of modes {8, 12, 16} x width {32, 64} on a validation split, "
                             "each candidate trained SECONDS (not counted in the race)")
    parser.add_argument("--tune-modes", nargs="+", type=int, default=[8, 12, 16], help="FNO's candidate modes")
    parser.add_argument("--tune-widths", nargs="+", type=int, default=[32, 64], help="FNO's candidate widths")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if (args.epochs is None) == (args.seconds is None):
        parser.error("give --epochs or --seconds")
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    tic = time.time()
    scale = replace(SCALES[args.scale], epochs=args.epochs or 10**6, seconds=args.seconds)
    scale = replace(scale, mesh_n=args.mesh_n or scale.mesh_n)
    runs = run(args.domain, args.families, args.seeds, args.models, args.out, scale, args.tune_peer,
               args.tune_modes, args.tune_widths)
    text = table(runs)
    tuned = any("tuning" in r for r in runs)
    if tuned:
        text += "\n\nFNO's candidates on the validation split (the last fifth of seed 0's training samples):\n\n"
        text += tuning_table(runs)
    print(text)
    if args.docs:
        write_race_page(args.docs, "geometry_input", argv, "Geometry as an input: the multigrid with the "
                        "distance to the boundary", text, tic,
                        f"Domain {args.domain}; every model {budget(args)}."
                        + (f" FNO tuned: the best of modes {args.tune_modes} x width {args.tune_widths} on a "
                           f"validation split of the training samples, each candidate trained {args.tune_peer:g} s "
                           "outside the budget." if tuned else ""))
    return runs


if __name__ == "__main__":
    main()
