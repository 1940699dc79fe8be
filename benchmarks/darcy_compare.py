"""Accuracy and cost of geoattn's operators and of neuralop's GINO and FNO on irregular-mesh Darcy data.

    python benchmarks/darcy_compare.py --scale cpu --out bench_out --docs
    python benchmarks/darcy_compare.py --scale gpu --device cuda --out bench_out
    python benchmarks/darcy_compare.py --scale gpu --device cuda --seconds 300 --domain holes --out bench_out

Every model is trained by :class:`geoattn.train.Trainer` (AdamW, one-cycle schedule, same
learning rate, batch size and samples) on the weighted relative L2(D) error of its prediction at
the nodes of one irregular training mesh, and scored with the same metric
(:func:`geoattn.eval.cross_mesh_report`) on the training mesh and on other meshes of the domain
carrying the same continuum test samples (:func:`benchmark_meshes`).

Two ways to make the race fair:

- epochs (default): every model trains for the same number of epochs (``--epochs``);
- training-time budget (``--seconds S``): every model trains until its measured training time
  (the optimiser steps, not the scoring between epochs) reaches ``S`` seconds
  (:class:`geoattn.train.Trainer`'s ``seconds``); its one-cycle schedule follows the elapsed
  share of the budget, so no epoch count is guessed in advance. The table reports the epochs
  done and the training time they took (``train s``).

Every model is scored after its last epoch, or with ``--validation K`` at its best epoch on ``K``
more samples of the training mesh (the same for every model; scored after every epoch, outside
the budget), as a user keeping ``best.pt`` would. With ``--ensemble K`` every
model is ``K`` members (seeds ``0..K-1``), each trained for ``1/K`` of the budget (or for
``--epochs`` each without one), and their mean (:class:`geoattn.train.Ensemble`) is scored.

Each model is scored as soon as it is trained (its scores are logged then). A model that fails
(out of memory, a device error, non-finite scores) is left out and named in the table and in
``results.json``; the others go on. ``--data-workers K`` solves the Darcy samples in ``K``
processes (the same samples for any ``K``).

Domains (``--domain``): ``square`` (the unit square: irregular training mesh, its refinement, a
graded and a foreign irregular mesh), ``lshape`` (the L-shape ``[-1, 1]^2`` minus a quadrant:
jittered training mesh, its refinement, the structured mesh and a finer jittered one) and
``holes`` (the disk with two holes of ``meshes/disk_two_holes.msh``: that mesh, its refinement and
a perturbed copy; its size is fixed, ``--mesh-n`` does not change it). The coefficients come from
the same Gaussian random field preset on the domain's bounding box.

neuralop's models enter through small adapters with the geoattn model interface
``forward(x, mesh)``:

- ``neuralop-gino``: GINO reads the nodes directly (its input GNO averages over radius balls,
  the latent FNO runs on a regular grid, its output GNO answers at the nodes);
- ``neuralop-fno``: the usual workaround for FNO on a mesh -- the input is linearly interpolated
  from the mesh to a regular grid (the piecewise-linear interpolation of scipy's
  ``LinearNDInterpolator``, stored as a sparse matrix), FNO runs on the grid, and its output is
  bilinearly interpolated back to the nodes, where the loss and the score are taken. On a
  domain that is not its bounding box (``lshape``, ``holes``) the grid points outside the domain
  are set to zero and a mask channel (1 inside, 0 outside) is added to FNO's input, so the model
  sees where the domain is and no value is extrapolated into a hole.

neuralop (``pip install 'geoattn[compare]'``) is needed only for those two models.

- ``physicsnemo-transolver``: NVIDIA PhysicsNeMo's Transolver on the nodes (coordinates as its
  embedding, no grid, no quadrature weights), with the width, depth, heads and slices of
  geoattn's ``slice`` model. It runs when PhysicsNeMo is installed; on a CPU-only torch that
  needs the install recipe and the torchvision stand-in of ``physicsnemo_transolver.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from timing import machine as describe_machine

from darcy.meshes import DOMAINS, SYMMETRIES, fem_floor
from darcy.race import SCALES, Scale, run_family
from darcy.report import combine, markdown, plot, table

log = logging.getLogger("darcy_compare")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES))
    parser.add_argument("--families", nargs="+", default=["piecewise", "lognormal"])
    parser.add_argument("--models", nargs="+", help="subset of models (default: all available)")
    parser.add_argument("--device", default="cpu")
    for field in ("mesh_n", "n_train", "n_test", "epochs", "batch_size", "width", "depth", "grid", "modes",
                  "mesh_fno_modes"):
        parser.add_argument("--" + field.replace("_", "-"), type=int, help=f"override the scale's {field}")
    parser.add_argument("--quadrature", choices=["nodal", "p1"],
                        help="mesh_fno's Fourier coefficients: the nodal quadrature (default) or the exact "
                             "integral of the nodal values' piecewise-linear interpolant (MeshFNO quadrature='p1')")
    parser.add_argument("--mesh-fno-local", type=float, metavar="CELLS",
                        help="give mesh_fno a local integral in every block (MeshFNO local=...), its ball's "
                             "radius in cells of the training mesh (default: none)")
    parser.add_argument("--weight-decay", type=float,
                        help="AdamW's weight decay, the same for every model (default 1e-4)")
    parser.add_argument("--seconds", type=float,
                        help="training time per model, measured as it trains (--epochs becomes a cap; default: "
                             "train for --epochs)")
    parser.add_argument("--domain", default="square", choices=DOMAINS, help="training domain (default square)")
    parser.add_argument("--out", type=Path, help="folder for results.json, table.md and the plots")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--data-workers", type=int,
                        help="processes solving the Darcy samples (the same samples for any number; default 1)")
    parser.add_argument("--combine", nargs="+", type=Path, metavar="RESULTS_JSON",
                        help="train nothing: merge the models of earlier runs of one scale into --out")
    parser.add_argument("--reference-targets", action="store_true",
                        help="also score every model against the twice-refined training mesh's solutions, "
                             "interpolated to each mesh (the same function on every mesh)")
    parser.add_argument("--resolve-quadrature", action="store_true",
                        help="also score every model on each mesh refined to the training mesh's longest edge "
                             "(input interpolated linearly to the new nodes, output read at the original ones)")
    parser.add_argument("--supersample", type=int, default=1, metavar="F",
                        help="geoattn models train and are scored on every mesh refined to the training mesh's "
                             "longest edge / F (geoattn.eval.ResolvedQuadrature: input interpolated linearly, "
                             "output read at the data's nodes); mesh_fno's modes follow the refined training "
                             "mesh (default 1: the meshes as they are)")
    parser.add_argument("--mix-resolution", type=float, metavar="P",
                        help="geoattn models compute a share P of their training batches on the training mesh "
                             "refined to half its longest edge (input interpolated linearly, output read at the "
                             "data's nodes), the others on the mesh as it is; scored on the meshes as they are "
                             "(default 0)")
    parser.add_argument("--coarsen", type=float, metavar="P",
                        help="share P of the training samples whose input geoattn's models see through a random "
                             "subset of the nodes, thinned harder toward one side, interpolated back (default 0)")
    parser.add_argument("--refine-data", action="store_true", default=None,
                        help="geoattn's models train on the training samples carried to the training mesh refined "
                             "once by linear interpolation (geoattn.data.refined_samples): the loss against the "
                             "data's interpolants between the nodes too (the race scale sets it)")
    parser.add_argument("--symmetries", action="store_true",
                        help="train every model on each training sample carried by the domain's symmetries "
                             "(SYMMETRIES: the square's 8, the L-shape's diagonal reflection), checked with "
                             "geoattn.mesh.symmetry; the epochs follow the larger set")
    parser.add_argument("--validation", type=int, metavar="K",
                        help="K more samples on the training mesh, scored after every epoch: each model is "
                             "tested at its best epoch on them (its best.pt), not its last (default 0: none)")
    parser.add_argument("--ensemble", type=int, metavar="K",
                        help="train K members of every model (seeds 0..K-1), each for 1/K of --seconds (or "
                             "--epochs each, without a budget), and score their mean (geoattn.train.Ensemble; "
                             "default 1)")
    parser.add_argument("--fem-floor", action="store_true",
                        help="train nothing: print how far each mesh's finite-element targets are from a "
                             "twice-refined solution (the error floor of the cross-mesh scores)")
    args = parser.parse_args(argv)
    if args.supersample < 1:
        parser.error(f"--supersample must be at least 1, got {args.supersample}")
    if args.ensemble is not None and args.ensemble < 1:
        parser.error(f"--ensemble must be at least 1, got {args.ensemble}")
    if args.mix_resolution is not None and not 0 <= args.mix_resolution <= 1:
        parser.error(f"--mix-resolution must be in [0, 1], got {args.mix_resolution}")
    if args.coarsen is not None and not 0 <= args.coarsen <= 1:
        parser.error(f"--coarsen must be in [0, 1], got {args.coarsen}")
    if args.mix_resolution and args.supersample > 1:
        parser.error("--mix-resolution trains on the meshes as they are and refined; --supersample on the refined "
                     "ones only: give one of them")
    if args.supersample > 1 and args.resolve_quadrature:
        parser.error("--supersample already scores every mesh refined (finer than --resolve-quadrature would); "
                     "give one of them")
    if args.symmetries and args.domain not in SYMMETRIES:
        parser.error(f"--symmetries: the {args.domain!r} domain has no symmetry but the identity; "
                     f"domains with symmetries: {sorted(SYMMETRIES)}")
    if args.combine:
        return combine(args.combine, args.out)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    if args.threads:
        torch.set_num_threads(args.threads)
    scale = replace(SCALES[args.scale], **{k: v for k, v in vars(args).items()
                                           if k in Scale.__dataclass_fields__ and v is not None})
    if args.fem_floor:
        floors = {f: fem_floor(scale, f, args.domain) for f in args.families}
        for family, floor in floors.items():
            print(f"{family}: " + ", ".join(f"{k} {v:.4f}" for k, v in floor.items()))
        return floors
    device = torch.device(args.device)
    tic = time.perf_counter()
    results = {f: run_family(f, scale, args.models, device, domain=args.domain, reference=args.reference_targets,
                             resolve=args.resolve_quadrature) for f in args.families}
    print(table(results))
    machine = describe_machine(device)
    load = os.getloadavg()
    print(f"scale {args.scale}: {asdict(scale)}; domain {args.domain}; device {device} ({machine}); total "
          f"{time.perf_counter() - tic:.0f} s; load average at the end {load[0]:.1f} / {load[2]:.1f} (1 / 15 min)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        plain = {f: {k: v for k, v in r.items() if k not in ("report", "operators")} for f, r in results.items()}
        (args.out / "results.json").write_text(json.dumps(
            {"scale": asdict(scale), "domain": args.domain, "device": str(device), "machine": machine, "load": load, "results": plain}, indent=1))
        (args.out / "table.md").write_text(markdown(results, scale))
        plot(results, args.out)
    return results


if __name__ == "__main__":
    main()
