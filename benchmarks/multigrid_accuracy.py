"""The multigrid's accuracy on every mesh of the square, by how it is trained: short trainings side
by side, the ratios of the errors on the refined, graded and foreign meshes to the training mesh's.

    python benchmarks/multigrid_accuracy.py --variants nodes refined query --seeds 0 1 --seconds 120 --out acc_out

Piecewise Darcy on the square (:func:`darcy.race.race_data` at the ``race`` scale: the 1 089-node
irregular training mesh, 200 training and 50 test samples per mesh), ``multigrid`` configured as
the race configures it (:func:`darcy.race.multigrid_configuration`), wrapped in
:class:`geoattn.train.NormalizedOperator`, trained by a plain loop (AdamW at 1e-3 with weight decay
1e-4, gradient norm clipped at 1, batch 4) for ``--seconds`` of training time (measured, on one
thread) with a one-cycle schedule in that time: the learning rate a function of the elapsed
fraction of the budget (cosine up from 1/25 of its peak over the first 30 %, then cosine down to
1e-4 of it), so a run on a loaded machine takes fewer steps, not a cut schedule; or, with
``--epochs``, for that many epochs, the same schedule over the steps. The variants
differ in the training loss only:

- ``nodes``: the weighted relative L2 error at the training mesh's nodes;
- ``refined``: the same on :func:`geoattn.data.refined_samples` (inputs and targets carried to
  the training mesh refined once: the model computes on 4x the nodes);
- ``query``: the inputs at the training mesh's nodes, the output read at the refined mesh's
  nodes (``model(x, mesh, query=fine)``) and scored there against the targets' piecewise-linear
  interpolants: the :math:`L^2(D)` error of the model's function against the interpolant, the
  inputs as the model sees them at test time;
- ``hybrid@LAMBDA`` (e.g. ``hybrid@0.25``): one query call as in ``query``, its output split (the
  refined mesh holds the training mesh's nodes first) into the training nodes, scored against the
  training targets with the training mesh's weights (the ``nodes`` loss), and the refined mesh's
  other nodes (the between-node term), scored against the targets' interpolants there with the
  refined mesh's weights of those nodes: the loss is the first plus ``LAMBDA`` times the second
  (:func:`geoattn.train.split_refined` and :func:`geoattn.train.between_nodes_loss`, the loss
  that ``Trainer(between_nodes=LAMBDA)`` and ``geoattn train --between-nodes LAMBDA`` train with);
- ``fno``: neuralop's FNO through a grid, the race's peer (:func:`darcy.race.peer_configuration`),
  on the nodes' loss, for a side-by-side on another ``--domain`` (and ``--family``).

The model has the default 2 smoothing steps per level; ``VARIANT:1,2,2,2`` gives it those per level. Each run writes
``OUT/<variant>-s<seed>.json``; a rerun skips finished runs. The table: the error on every mesh,
the worst / train ratio, epochs and seconds per epoch; the column ``refined, train inputs`` is the
refined mesh's error with the inputs taken on the training mesh (``query=`` the refined mesh: the
same test samples, the refined mesh holding the training mesh's nodes first), so that the
refined mesh's loss splits into the inputs' part and the output's; ``refined targets at train
nodes`` is the model's output on the training mesh scored against the refined mesh's targets at
the same nodes (the part of the refined mesh's error that the targets' own difference makes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from darcy.peers import GridFNO
from darcy.race import SCALES, multigrid_configuration, peer_configuration, race_data
from geoattn.data import refined_samples
from geoattn.mesh import Mesh
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, between_nodes_loss, relative_l2, split_refined
from results_page import markdown_table

MODES = ("nodes", "refined", "query", "hybrid", "fno")


def mesh_of(sample) -> Mesh:
    return Mesh(sample.pos, sample.weight, sample.cells)


def stacked(samples, ids, field):
    return torch.cat([getattr(samples[i], field) for i in ids])


def one_cycle(fraction: float, peak: float) -> float:
    """The learning rate at ``fraction`` of the budget (see the module docstring)."""
    import math

    if fraction < 0.3:
        return peak / 25 + (peak - peak / 25) * (1 - math.cos(math.pi * fraction / 0.3)) / 2
    t = min(1.0, (fraction - 0.3) / 0.7)
    return peak * 1e-4 + (peak - peak * 1e-4) * (1 + math.cos(math.pi * t)) / 2


def train_one(mode: str, smoothing, seed: int, data: dict, scale, seconds: float, epochs: int | None = None,
              domain: str = "square", lam: float | None = None) -> dict:
    """Train one variant; its errors on every test mesh and its timing (``lam``: the hybrid's
    weight of the between-node term)."""
    train = data["train"]
    fine_samples = refined_samples(train) if mode in ("refined", "query", "hybrid") else None
    coarse, fine = mesh_of(train[0]), (mesh_of(fine_samples[0]) if fine_samples is not None else None)
    torch.manual_seed(seed)
    if mode == "fno":
        op = NormalizedOperator(GridFNO(1, 1, **peer_configuration(scale, domain)))
    else:
        kw = dict(multigrid_configuration(scale, domain), width=scale.width, depth=scale.depth)
        kw["smoothing"] = smoothing or 2
        op = NormalizedOperator(build_model("multigrid", in_channels=1, out_channels=1, dim=2, **kw))
    fit = fine_samples if mode == "refined" else train
    op.x_normalizer.fit((d.x, d.weight) for d in fit)
    op.y_normalizer.fit((d.y, d.weight) for d in fit)
    op.fit_mesh(fine if mode == "refined" else coarse)
    b = scale.batch_size
    split = split_refined(Mesh.batch([coarse] * b), Mesh.batch([fine] * b)) if mode == "hybrid" else None
    opt = torch.optim.AdamW(op.parameters(), lr=scale.lr / 25, weight_decay=scale.weight_decay)
    gen = torch.Generator().manual_seed(seed)
    start, done, steps = time.perf_counter(), 0, 0
    op.train()
    total = None if epochs is None else epochs * (len(train) // b)
    while (time.perf_counter() - start < seconds) if total is None else steps < total:
        order = torch.randperm(len(train), generator=gen).tolist()
        for k in range(0, len(order) - b + 1, b):
            fraction = (time.perf_counter() - start) / seconds if total is None else steps / total
            if fraction >= 1:
                break
            for group in opt.param_groups:
                group["lr"] = one_cycle(fraction, scale.lr)
            ids = order[k:k + b]
            if mode in ("nodes", "fno"):
                mesh = Mesh.batch([coarse] * b)
                pred, y, at = op(stacked(train, ids, "x"), mesh), stacked(train, ids, "y"), mesh
            elif mode == "refined":
                mesh = Mesh.batch([fine] * b)
                pred, y, at = op(stacked(fine_samples, ids, "x"), mesh), stacked(fine_samples, ids, "y"), mesh
            else:
                mesh, at = Mesh.batch([coarse] * b), Mesh.batch([fine] * b)
                pred, y = op(stacked(train, ids, "x"), mesh, query=at), stacked(fine_samples, ids, "y")
            if mode == "hybrid":
                loss = between_nodes_loss(pred, y, mesh, split, lam)
            else:
                loss = relative_l2(pred, y, at)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(op.parameters(), 1.0)
            opt.step()
            steps += 1
        done += 1
    elapsed = time.perf_counter() - start

    def result(errors: dict) -> dict:
        return _record(mode, smoothing, seed, steps, len(train) // b, elapsed, errors, lam)

    op.eval()
    errors = {}
    with torch.no_grad():
        for name, samples in data["test"].items():
            mesh1 = mesh_of(samples[0])
            errs = []
            for k in range(0, len(samples), b):
                ids = list(range(k, min(k + b, len(samples))))
                mesh = Mesh.batch([mesh1] * len(ids))
                errs.append(relative_l2(op(stacked(samples, ids, "x"), mesh), stacked(samples, ids, "y"), mesh,
                                        reduction="none"))
            errors[name] = float(torch.cat(errs).mean())
        if domain != "square" or mode == "fno":  # the refined mesh holds the training nodes first; FNO has no query
            return result(errors)
        # the refined mesh's targets from the training mesh's inputs (the model's function read at
        # the refined nodes): what is left of the refined mesh's error once the inputs are the same
        train_mesh, fine_mesh = mesh_of(data["test"]["train"][0]), mesh_of(data["test"]["refined"][0])
        errs = []
        for k in range(0, len(data["test"]["train"]), b):
            ids = list(range(k, min(k + b, len(data["test"]["train"]))))
            at = Mesh.batch([fine_mesh] * len(ids))
            pred = op(stacked(data["test"]["train"], ids, "x"), Mesh.batch([train_mesh] * len(ids)), query=at)
            errs.append(relative_l2(pred, stacked(data["test"]["refined"], ids, "y"), at, reduction="none"))
        errors["refined, train inputs"] = float(torch.cat(errs).mean())
        errors["refined targets at train nodes"] = target_gap(data, op, b)
    return result(errors)


def _record(mode, smoothing, seed, steps, per_epoch, elapsed, errors, lam=None) -> dict:
    return {"mode": mode, "smoothing": smoothing, "lambda": lam, "seed": seed, "epochs": steps / per_epoch, "seconds": elapsed,
            "seconds_per_epoch": elapsed * per_epoch / steps, "test": errors, "load": os.getloadavg()[0]}


def target_gap(data: dict, op=None, b: int = 4) -> float:
    """The refined mesh's targets at the training mesh's nodes (its first nodes) against the
    model's outputs on the training mesh (``op``), or against the training mesh's own targets
    (``op=None``: how far the two meshes' finite-element solutions are apart there); the mean
    weighted relative L2 over the test samples, with the training mesh's weights."""
    train, fine = data["test"]["train"], data["test"]["refined"]
    mesh1 = mesh_of(train[0])
    errs = []
    for k in range(0, len(train), b):
        ids = list(range(k, min(k + b, len(train))))
        mesh = Mesh.batch([mesh1] * len(ids))
        y = torch.cat([fine[i].y[:mesh1.num_nodes] for i in ids])
        pred = stacked(train, ids, "y") if op is None else op(stacked(train, ids, "x"), mesh)
        errs.append(relative_l2(pred, y, mesh, reduction="none"))
    return float(torch.cat(errs).mean())


def parse(variant: str) -> tuple[str, tuple[int, ...] | None, float | None]:
    """``MODE[@LAMBDA][:S1,S2,...]`` into the mode, the smoothing steps per level and the
    hybrid's weight (required for ``hybrid``, refused for the others)."""
    head, _, steps = variant.partition(":")
    mode, at, lam = head.partition("@")
    if mode not in MODES:
        raise ValueError(f"variant {variant!r}: the mode must be one of {MODES}")
    if (mode == "hybrid") != bool(at):
        raise ValueError(f"variant {variant!r}: hybrid takes its weight as hybrid@LAMBDA, the others none")
    return mode, tuple(int(k) for k in steps.split(",")) if steps else None, float(lam) if at else None


def table(runs: list[dict]) -> str:
    meshes = list(runs[0]["test"])
    groups: dict[str, list[dict]] = {}
    for r in runs:
        name = r["mode"] + (f", λ={r['lambda']:g}" if r.get("lambda") is not None else "") + (f", smoothing={tuple(r['smoothing'])}" if r["smoothing"] else "")
        groups.setdefault(name, []).append(r)
    diagnostics = ["refined, train inputs", "refined targets at train nodes"]
    meshes = [m for m in meshes if m not in diagnostics]
    extra = [m for m in diagnostics if all(m in r["test"] for r in runs)]
    head = ["variant", "seeds", "epochs", "s / epoch"] + meshes + ["worst / train"] + extra
    rows = []
    for name, rs in groups.items():
        mean = {m: float(np.mean([r["test"][m] for r in rs])) for m in meshes}
        ratios = [max(r["test"][m] for m in meshes[1:]) / r["test"][meshes[0]] for r in rs]
        rows.append([name, len(rs), " / ".join(f"{r['epochs']:.1f}" for r in rs),
                     f"{np.mean([r['seconds_per_epoch'] for r in rs]):.2f}",
                     *(f"{mean[m]:.4f}" for m in meshes), " / ".join(f"{x:.2f}" for x in ratios),
                     *(f"{np.mean([r['test'][m] for r in rs]):.4f}" for m in extra)])
    return markdown_table(head, rows)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["nodes", "refined", "query"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--seconds", type=float, default=120.0, help="training time per run (default 120)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="train this many epochs instead, the schedule over the steps (equal epochs, not time)")
    parser.add_argument("--scale", default="race", choices=list(SCALES))
    parser.add_argument("--domain", default="square", help="the race's domain (default square)")
    parser.add_argument("--family", default="piecewise", help="the coefficient law (default piecewise)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scale = SCALES[args.scale]
    args.out.mkdir(parents=True, exist_ok=True)
    data = None
    runs = []
    for variant in args.variants:
        mode, smoothing, lam = parse(variant)
        for seed in args.seeds:
            path = args.out / f"{variant.replace(':', '-').replace(',', '').replace('@', '')}-s{seed}.json"
            if not path.exists():
                data = data or race_data(args.family, scale, 0, args.domain)
                run = train_one(mode, smoothing, seed, data, scale, args.seconds, args.epochs, args.domain, lam)
                path.write_text(json.dumps(run))
                print(variant, seed, run["test"], f"{run['seconds']:.0f} s", file=sys.stderr)
            runs.append(json.loads(path.read_text()))
    print(table(runs))
    if data is not None and args.domain == "square":
        print(f"the refined mesh's targets against the training mesh's, at the training nodes: {target_gap(data):.4f}")
    return runs


if __name__ == "__main__":
    main()
