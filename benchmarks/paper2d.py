"""The 2-D paper experiments on one lent GPU, cut to a common deadline: learning curves (test error
per epoch, seconds per epoch) beside the baselines that need no training.

    python benchmarks/paper2d.py kolmogorov --scale gpu-lease --prepare --cache CACHE --out OUT
    python benchmarks/paper2d.py kolmogorov --scale gpu-lease --models tno,galerkin --cache CACHE --out OUT --deadline T
    python benchmarks/paper2d.py summary OUT

``benchmarks/paper2d_gpu.sh`` runs all four side by side. The experiments and their models:

- ``kolmogorov``: the one-step map of Kolmogorov flow (``kolmogorov.py``; Calvello et al. §6.2.3),
  TNO, Galerkin, ViT-NO and FANO on the uniform training grid, relative H1 loss;
- ``darcy``: lognormal Darcy with Calvello's covariance (``darcy_calvello.py``, their Table 1),
  the same four models and loss;
- ``inverse``: Cao's inverse coefficient problem without noise (``galerkin_experiments.py``,
  his Table 3), GT and FT with the cross-attention decoder, relative L2 loss;
- ``nao``: NAO's Darcy ``g -> p`` in-context problem (``nao.py darcy``; Yu et al. Table 3),
  Adam with the authors' step schedule on the operator error E_f.

``--prepare`` solves the samples into ``--cache`` (the Darcy and inverse solves in ``--workers``
processes, the Kolmogorov trajectories on ``--device``) and writes ``OUT/EXP/baselines.json``:
the relative L2 test errors of predicting the input (``identity``, Kolmogorov), the training
mean, and one explicit Euler step of the equations (Kolmogorov). A training run reads the cache,
trains its ``--models`` one after the other (``--prepare --models ...`` does both; a run
without ``--prepare`` waits for the cache), each with an equal share of the time left before
``--deadline`` (a Unix time), and writes ``OUT/EXP/MODEL/curve.csv`` as it goes: one row per
epoch with the median and mean relative L2 test error after it and the seconds it took, so a run
cut off keeps every epoch it finished. Kolmogorov and Darcy train with
:class:`geoattn.train.Trainer` under its time budget (``seconds=``: the one-cycle schedule follows
the elapsed share of the budget); its own ``metrics.csv`` (the test error in the loss's norm as
``val``) lies beside. Every file records the device and the torch version.

``--scale gpu-lease`` is the largest setting whose data and some epochs of each model fit about
seven minutes of a shared GPU (the presets are named in ``kolmogorov.py``,
``darcy_calvello.py`` and ``galerkin_experiments.py``, and :data:`NAO_SCALES` here); ``tiny`` runs
the same code path in seconds on a CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import multiprocessing
import os
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger("paper2d")

MODELS = {"kolmogorov": ("tno", "galerkin", "vit", "fano"), "darcy": ("tno", "galerkin", "vit", "fano"),
          "inverse": ("GT", "FT"), "nao": ("NAO",)}
#: the papers' test errors of the models run here (Calvello Tables 3 and 1, Cao Table 3 at noise 0,
#: NAO Table 3 g -> p)
PAPER = {"kolmogorov": {"vit": 1.07e-2, "fano": 6.34e-3}, "darcy": {"tno": 1.19e-2, "galerkin": 7.30e-2},
         "inverse": {"GT": 1.944e-2, "FT": 1.921e-2}, "nao": {"NAO": 3.19e-2}}
#: NAO Darcy settings: mesh ``unit_square(n, "irregular")``, microstructures (tasks) for training
#: and testing, sources per task, pairs per system d, key width dk, systems drawn per task, layers,
#: systems per step and Adam's learning rate (the paper: 21 x 21 nodes, 90 + 10 tasks of 100
#: sources, d = 50, dk = 40, lr 1e-2 times 0.9 every 100 epochs, batch 50, 10000 epochs)
NAO_SCALES = {
    "tiny": dict(n=6, tasks=4, test_tasks=2, sources=12, d=6, dk=4, perms=2, layers=1, batch=4, lr=1e-2, epochs=2),
    "gpu-lease": dict(n=20, tasks=90, test_tasks=10, sources=100, d=50, dk=40, perms=10, layers=2, batch=50,
                      lr=1e-2, epochs=10000),
}
RESERVE = 8.0  # seconds kept before the deadline for the last model's final scoring


def device_record(device: str) -> dict:
    """The device's name and the software that ran on it."""
    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return {"device": str(dev), "device_name": name, "torch": torch.__version__, "cuda": torch.version.cuda,
            "threads": torch.get_num_threads()}


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    os.replace(tmp, path)


def rel_l2(pred: torch.Tensor, target: torch.Tensor, weight: torch.Tensor) -> float:
    """Relative L2(D) error of one sample with the quadrature ``weight``."""
    pred, target, weight = pred.reshape(-1).double(), target.reshape(-1).double(), weight.reshape(-1).double()
    return float(((weight * (pred - target) ** 2).sum() / (weight * target**2).sum()).sqrt())


def stats(errors) -> dict:
    errors = [float(e) for e in errors]
    return {"median": statistics.median(errors), "mean": statistics.fmean(errors)}


class Curve:
    """``curve.csv`` of one model, one row per epoch, flushed as it is written."""

    FIELDS = ("epoch", "train", "test_median", "test_mean", "seconds", "elapsed")

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(path, "w", newline="")
        self.writer = csv.DictWriter(self.fh, fieldnames=self.FIELDS)
        self.writer.writeheader()
        self.fh.flush()
        self.start = time.perf_counter()

    def add(self, epoch: int, train: float, test: dict, seconds: float) -> None:
        self.writer.writerow({"epoch": epoch, "train": f"{train:.6g}", "test_median": f"{test['median']:.6g}",
                              "test_mean": f"{test['mean']:.6g}", "seconds": f"{seconds:.3f}",
                              "elapsed": f"{time.perf_counter() - self.start:.1f}"})
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def share(deadline: float, models_left: int) -> float:
    """Training seconds for the next model: an equal share of the time left (less the reserve
    for the last scoring and a tenth for the evaluations between epochs)."""
    return max(1.0, 0.9 * (deadline - time.time() - RESERVE) / models_left)


def parallel(function, chunks: list, workers: int) -> list:
    """``[function(c) for c in chunks]``, in ``workers`` forked processes when more than one."""
    if workers <= 1:
        return [function(c) for c in chunks]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.map(function, chunks)


def chunks_of(n: int, parts: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, max(1, min(parts, n)) + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


# --------------------------------------------------------------------------------------------
# Kolmogorov and Darcy (Calvello et al.): Trainer with a time budget


def kolmogorov_scale(name: str):
    import kolmogorov

    if name == "tiny":  # 16 x 16 grid: 16 patches of 16 nodes for ViT-NO and FANO
        return replace(kolmogorov.SCALES["tiny"], grid=16, epochs=2, models=MODELS["kolmogorov"])
    return kolmogorov.SCALES[name]


def darcy_scale(name: str):
    import darcy_calvello

    if name == "tiny":
        return replace(darcy_calvello.SCALES["tiny"], grid=12, reference=24, epochs=2, models=MODELS["darcy"])
    return darcy_calvello.SCALES[name]


def _darcy_chunk(args) -> dict:
    """Coefficients at the grid nodes and reference solutions interpolated there, samples lo..hi."""
    from problems.calvello import calvello_coefficient, calvello_field
    from geoattn.data.darcy import DarcyProblem
    from geoattn.mesh import families

    scale, seed, (lo, hi) = args
    torch.set_num_threads(1)
    reference = DarcyProblem(families.unit_square(scale.reference))
    grid = families.unit_square(scale.grid)
    probe = reference.basis.probes(np.ascontiguousarray(grid.points[:, :2].T)).tocsr()
    field = calvello_field(scale.version)
    x, y = [], []
    for i in range(lo, hi):
        a = calvello_coefficient(seed, i, scale.family, field)
        x.append(a(grid.points[:, :2]))
        y.append(probe @ reference.solve(a))
    return {"x": np.stack(x), "y": np.stack(y)}


def prepare_grid(experiment: str, scale, seed: int, device: str, workers: int) -> tuple[dict, dict]:
    """The cached data (Kolmogorov: Fourier coefficients; Darcy: grid values) and the baselines."""
    n = scale.n_train + scale.n_test
    if experiment == "kolmogorov":
        from problems.navier_stokes import KolmogorovSolver, PeriodicGaussianField, kolmogorov_pairs

        solver = KolmogorovSolver(scale.solver_n, dtype=getattr(torch, scale.solver_dtype), device=device)
        first, second = kolmogorov_pairs(n, seed, time=scale.time, interval=scale.interval,
                                         field=PeriodicGaussianField(), solver=solver, batch_size=256)
        data = {"first": first.cpu(), "second": second.cpu()}
    else:
        parts = parallel(_darcy_chunk, [(scale, seed, c) for c in chunks_of(n, 4 * max(1, workers))], workers)
        data = {k: torch.as_tensor(np.concatenate([p[k] for p in parts])) for k in ("x", "y")}
    return data, grid_baselines(experiment, scale, data)


def torus_training_grid(scale) -> dict:
    """The uniform training grid of the torus, as ``kolmogorov.discretisations`` gives it."""
    from problems.navier_stokes import torus_grid

    pos, weight, cells = torus_grid(scale.grid)
    return {"pos": pos, "weight": weight, "cells": cells, "grid": scale.grid}


def grid_samples(experiment: str, scale, data: dict, rows: slice) -> list:
    """Samples of ``rows`` on the training grid."""
    if experiment == "kolmogorov":
        import kolmogorov

        return kolmogorov.samples_on(data, torus_training_grid(scale), rows)
    from darcy_calvello import samples
    from geoattn.mesh import families

    return samples({"grid": families.unit_square(scale.grid)}, {"grid": {k: v for k, v in data.items()}},
                   rows)["grid"]


def grid_baselines(experiment: str, scale, data: dict) -> dict:
    """Relative L2 test errors (median, mean) of the predictions that need no training."""
    train_rows, test_rows = slice(0, scale.n_train), slice(scale.n_train, scale.n_train + scale.n_test)
    train, test = grid_samples(experiment, scale, data, train_rows), grid_samples(experiment, scale, data, test_rows)
    mean = torch.stack([d.y for d in train]).double().mean(0)  # quadrature-ok: mean over samples
    out = {"training mean": stats(rel_l2(mean, d.y, d.weight) for d in test)}
    if experiment == "kolmogorov":
        import kolmogorov

        out["identity"] = stats(rel_l2(d.x, d.y, d.weight) for d in test)
        step = kolmogorov.physics_predictions(data, test_rows, scale)["Euler step"]
        euler = kolmogorov.samples_on({"first": step, "second": step}, torus_training_grid(scale), slice(None))
        out["Euler step"] = stats(rel_l2(e.x, d.y, d.weight) for e, d in zip(euler, test))
    return out


def train_grid(experiment: str, scale, data: dict, names: list[str], out: Path, device: str, deadline: float,
               seed: int, record: dict) -> None:
    """Train each model with the Trainer under its share of the time left; the L2 test error is
    measured before the first step of every epoch (the model after the previous one) and at the end."""
    from kolmogorov import model_kwargs
    from geoattn.models import build_model
    from geoattn.train import NormalizedOperator, Trainer, evaluate_errors

    train_rows, test_rows = slice(0, scale.n_train), slice(scale.n_train, scale.n_train + scale.n_test)
    train = [d.to(device) for d in grid_samples(experiment, scale, data, train_rows)]
    test = [d.to(device) for d in grid_samples(experiment, scale, data, test_rows)]
    nodes = len(train[0].pos)
    for k, name in enumerate(names):
        kwargs = model_kwargs(name, scale, nodes)
        torch.manual_seed(seed)
        model = build_model(name, in_channels=1, out_channels=1, dim=2, **kwargs)
        op = NormalizedOperator(model).to(device)
        seconds = share(deadline, len(names) - k)
        folder = out / name
        curve = Curve(folder / "curve.csv")
        marks = {"tic": time.perf_counter()}

        def test_error():
            return stats(evaluate_errors(op, test, scale.batch_size).cpu().tolist())

        def on_step(epoch: int, step: int) -> None:
            if step == 0 and epoch > 0:
                curve.add(epoch - 1, math.nan, test_error(), time.perf_counter() - marks["tic"])
                marks["tic"] = time.perf_counter()

        info = {**record, "model": name, "kwargs": kwargs, "budget_seconds": seconds, "scale": asdict(scale),
                "parameters": sum(p.numel() for p in op.parameters() if p.requires_grad)}
        write_json(folder / "result.json", info)
        log.info("%s %s: %d parameters, %.0f s", experiment, name, info["parameters"], seconds)
        trainer = Trainer(op, folder, epochs=scale.epochs, batch_size=scale.batch_size, lr=scale.lr, h1=True,
                          seed=seed, progress=False, seconds=seconds, overwrite=True)
        history = trainer.fit(train, val=test, on_step=on_step)
        final = test_error()
        curve.add(len(history) - 1, history[-1]["train"], final, time.perf_counter() - marks["tic"])
        curve.close()
        info.update(epochs=len(history), test=final, seconds_per_epoch=stats(h["seconds"] for h in history),
                    train_h1=history[-1]["train"], test_h1=[h["val"] for h in history])
        write_json(folder / "result.json", info)
        del op, model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# the inverse problem (Cao): the cross-decoder loop with a time budget


def inverse_scale(name: str):
    from galerkin_experiments import SCALES

    return SCALES["inverse"][name]


def inverse_problem(scale):
    from problems.inverse import InverseProblem
    from geoattn.mesh import families

    # only the training mesh: the learning curve is measured there
    return InverseProblem({"train": families.unit_square(scale.mesh_n, "irregular", seed=0)},
                          families.unit_square(scale.target_n, "irregular", seed=2))


def _inverse_chunk(args) -> dict:
    scale, seed, (lo, hi) = args
    torch.set_num_threads(1)
    data = inverse_problem(scale).clean(hi - lo, seed, start=lo)
    return {"u": data.solutions["train"], "a": data.coefficients}


def prepare_inverse(scale, seed: int, workers: int) -> tuple[dict, dict]:
    n = scale.n_train + scale.n_test
    parts = parallel(_inverse_chunk, [(scale, seed, c) for c in chunks_of(n, 4 * max(1, workers))], workers)
    data = {k: torch.as_tensor(np.concatenate([p[k] for p in parts])) for k in ("u", "a")}
    weight = inverse_problem(scale).target_base.weight
    mean = data["a"][:scale.n_train].mean(0)  # quadrature-ok: mean over samples
    return data, {"training mean": stats(rel_l2(mean, a, weight) for a in data["a"][scale.n_train:])}


def inverse_samples(scale, data: dict, rows: slice, noise: float = 0.0) -> list:
    from problems.inverse import InverseData

    problem = inverse_problem(scale)
    indices = np.arange(rows.start, rows.stop)
    clean = InverseData({"train": data["u"][rows].numpy()}, data["a"][rows].numpy(), 0, indices)
    return problem.samples(clean, "train", noise)


def train_inverse(scale, data: dict, names: list[str], out: Path, device: str, deadline: float, seed: int,
                  record: dict) -> None:
    """GT and FT (cross decoder) by AdamW with a one-cycle schedule following the elapsed share of
    the time budget, gradient clipping 1, as :func:`galerkin_experiments.fit_cross`."""
    from galerkin_experiments import MODELS as ATTENTION, collate_cross, cross_errors, evaluate_cross
    from geoattn.models import GalerkinTransformer
    from geoattn.train import NormalizedOperator

    train = [d.to(device) for d in inverse_samples(scale, data, slice(0, scale.n_train))]
    test = [d.to(device) for d in inverse_samples(scale, data, slice(scale.n_train, scale.n_train + scale.n_test))]
    for k, name in enumerate(names):
        torch.manual_seed(seed)
        model = GalerkinTransformer(1, 1, dim=2, width=scale.width, depth=scale.depth, num_heads=scale.num_heads,
                                    attention=ATTENTION[name], decoder="cross")
        op = NormalizedOperator(model).to(device)
        op.x_normalizer.fit((d.x, d.weight) for d in train)
        op.y_normalizer.fit((d.y, d.weight_query) for d in train)
        lr = scale.fourier_lr if name == "FT" and scale.fourier_lr else scale.lr
        optimizer = torch.optim.AdamW(op.parameters(), lr=lr, weight_decay=1e-4)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=10_000)
        seconds = share(deadline, len(names) - k)
        folder = out / name
        curve = Curve(folder / "curve.csv")
        info = {**record, "model": name, "lr": lr, "budget_seconds": seconds, "scale": asdict(scale),
                "parameters": sum(p.numel() for p in op.parameters())}
        write_json(folder / "result.json", info)
        spent, epoch, history = 0.0, 0, []
        while spent < seconds and epoch < scale.epochs:
            tic = time.perf_counter()
            order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
            op.train()
            total = 0.0
            for i in range(0, len(train), scale.batch_size):
                errors = cross_errors(op, collate_cross([train[int(j)] for j in order[i:i + scale.batch_size]]).to(device))
                loss = errors.mean()  # quadrature-ok: mean over samples
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(op.parameters(), 1.0)
                optimizer.step()
                # the schedule's position is the elapsed share of the budget
                position = min((spent + time.perf_counter() - tic) / seconds, 1.0) * (schedule.total_steps - 1)
                schedule.last_epoch = int(position) - 1
                schedule.step()
                total += float(errors.detach().sum())
                if spent + time.perf_counter() - tic >= seconds:
                    break
            spent += time.perf_counter() - tic
            test_error = stats(evaluate_cross(op, test, scale.batch_size).cpu().tolist())
            curve.add(epoch, total / len(train), test_error, time.perf_counter() - tic)
            history.append({"seconds": time.perf_counter() - tic, "test": test_error})
            epoch += 1
        curve.close()
        info.update(epochs=epoch, test=history[-1]["test"] if history else None,
                    seconds_per_epoch=stats(h["seconds"] for h in history) if history else None)
        write_json(folder / "result.json", info)


# --------------------------------------------------------------------------------------------
# NAO Darcy (Yu et al.): in-context kernel learning, Adam with the authors' step schedule


def prepare_nao(s: dict, seed: int) -> tuple[dict, dict]:
    from geoattn.data.grf import GaussianRandomField
    from geoattn.mesh import families
    from geoattn.nao import microstructure_tasks

    mesh = families.unit_square(s["n"], kind="irregular", seed=1)
    tasks = microstructure_tasks(mesh, range(s["tasks"] + s["test_tasks"]), s["sources"], seed=seed,
                                 source_field=GaussianRandomField(alpha=2.0, tau=3.0))
    data = {"g": torch.as_tensor(np.stack([t.g for t in tasks])), "p": torch.as_tensor(np.stack([t.p for t in tasks]))}
    return data, {}


def nao_systems(s: dict, data: dict, tasks: range, perms: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``perms`` systems of ``d`` random sources of each task, scaled by the training set's std
    (as ``nao.py darcy``)."""
    g, p = data["g"], data["p"]
    gs, ps = float(g[:s["tasks"]].std()), float(p[:s["tasks"]].std())
    rng = np.random.default_rng(seed)
    u, f = [], []
    for t in tasks:
        for _ in range(perms):
            idx = torch.as_tensor(rng.permutation(s["sources"])[:s["d"]])
            u.append(g[t][:, idx] / gs)
            f.append(p[t][:, idx] / ps)
    return torch.stack(u).float(), torch.stack(f).float()


def train_nao(s: dict, data: dict, out: Path, device: str, deadline: float, seed: int, record: dict) -> None:
    from geoattn.mesh import families, from_meshio
    from geoattn.nao import NAO, TokenMesh, operator_error

    geo = from_meshio(families.unit_square(s["n"], kind="irregular", seed=1), dtype=torch.float32)
    u, f = (t.to(device) for t in nao_systems(s, data, range(s["tasks"]), s["perms"], seed))
    tu, tf = (t.to(device) for t in nao_systems(s, data, range(s["tasks"], s["tasks"] + s["test_tasks"]), 2, seed + 1))
    torch.manual_seed(seed)
    model = NAO(s["d"], dim=2, head_channels=s["dk"], layers=s["layers"]).to(device)
    mesh = TokenMesh.of(geo.pos.to(device), geo.weight.to(device))  # shared by every system

    optimizer = torch.optim.Adam(model.parameters(), lr=s["lr"], weight_decay=1e-6)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.9)
    seconds = share(deadline, 1)
    folder = out / "NAO"
    curve = Curve(folder / "curve.csv")
    info = {**record, "model": "NAO", "settings": s, "budget_seconds": seconds, "train_systems": len(u),
            "parameters": sum(p.numel() for p in model.parameters())}
    write_json(folder / "result.json", info)
    generator = torch.Generator().manual_seed(seed)
    spent, epoch, history = 0.0, 0, []
    while spent < seconds and epoch < s["epochs"]:
        tic = time.perf_counter()
        order = torch.randperm(len(u), generator=generator)
        total = 0.0
        model.train()
        for i in range(0, len(u), s["batch"]):
            idx = order[i:i + s["batch"]].to(device)
            loss = operator_error(model.forward_dense(u[idx], f[idx], mesh, mesh), f[idx], mesh.weight).mean()  # quadrature-ok: over systems
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += float(loss) * len(idx)
        schedule.step()
        spent += time.perf_counter() - tic
        model.eval()
        with torch.no_grad():
            test_error = stats(operator_error(model.forward_dense(tu, tf, mesh, mesh), tf, mesh.weight).cpu().tolist())
        seconds_epoch = time.perf_counter() - tic
        history.append(seconds_epoch)
        # every epoch while few, then every tenth (and the last): the curve stays small
        if epoch < 20 or epoch % 10 == 0 or spent >= seconds:
            curve.add(epoch, total / len(u), test_error, seconds_epoch)
        epoch += 1
    curve.close()
    info.update(epochs=epoch, test=test_error if history else None,
                seconds_per_epoch=stats(history) if history else None)
    write_json(folder / "result.json", info)


# --------------------------------------------------------------------------------------------


def scale_of(experiment: str, name: str):
    if experiment == "kolmogorov":
        return kolmogorov_scale(name)
    if experiment == "darcy":
        return darcy_scale(name)
    if experiment == "inverse":
        return inverse_scale(name)
    return dict(NAO_SCALES[name])


def run(args) -> None:
    scale = scale_of(args.experiment, args.scale)
    out = args.out / args.experiment
    cache = args.cache / f"{args.experiment}-{args.scale}-{args.seed}.pt"
    record = {"experiment": args.experiment, "scale_name": args.scale, "seed": args.seed, **device_record(args.device)}
    if args.prepare:
        tic = time.perf_counter()
        if args.experiment in ("kolmogorov", "darcy"):
            data, baselines = prepare_grid(args.experiment, scale, args.seed, args.device, args.workers)
        elif args.experiment == "inverse":
            data, baselines = prepare_inverse(scale, args.seed, args.workers)
        else:
            data, baselines = prepare_nao(scale, args.seed)
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save(data, cache.with_suffix(".tmp"))
        os.replace(cache.with_suffix(".tmp"), cache)
        write_json(out / "baselines.json", {**record, "data_seconds": time.perf_counter() - tic,
                                            "workers": args.workers, "baselines": baselines,
                                            "paper": PAPER[args.experiment]})
        log.info("%s: data in %.0f s; baselines %s", args.experiment, time.perf_counter() - tic, baselines)
        if args.models is None:
            return
    deadline = args.deadline if args.deadline is not None else time.time() + 3600
    while not cache.exists():  # another process is solving the samples
        if time.time() > deadline:
            raise TimeoutError(f"no data in {cache} by the deadline")
        time.sleep(0.5)
    data = torch.load(cache, weights_only=True)
    names = args.models.split(",") if args.models else list(MODELS[args.experiment])
    if args.experiment in ("kolmogorov", "darcy"):
        train_grid(args.experiment, scale, data, names, out, args.device, deadline, args.seed, record)
    elif args.experiment == "inverse":
        train_inverse(scale, data, names, out, args.device, deadline, args.seed, record)
    else:
        train_nao(scale, data, out, args.device, deadline, args.seed, record)


def read_curve(path: Path) -> list[dict]:
    with open(path) as fh:
        return [row for row in csv.DictReader(fh)]


def summary(folder: Path) -> str:
    """A compact report of every experiment and model under ``folder``: epochs, seconds per
    epoch, last and best median test error (relative L2), the baselines and the paper's."""
    lines = []
    for exp in sorted(p for p in folder.iterdir() if p.name in MODELS):
        base = json.loads((exp / "baselines.json").read_text()) if (exp / "baselines.json").exists() else {}
        head = f"== {exp.name}"
        if base:
            head += (f" ({base['device_name']}, torch {base['torch']}; data {base['data_seconds']:.0f} s) baselines: "
                     + ", ".join(f"{k} {v['median']:.3g}" for k, v in base["baselines"].items()))
            head += "; paper: " + ", ".join(f"{k} {v:.3g}" for k, v in base["paper"].items())
        lines.append(head)
        for model in sorted(p for p in exp.iterdir() if p.is_dir()):
            rows = read_curve(model / "curve.csv") if (model / "curve.csv").exists() else []
            info = json.loads((model / "result.json").read_text()) if (model / "result.json").exists() else {}
            if not rows:
                lines.append(f"  {model.name}: no epoch finished ({info.get('parameters', '?')} parameters)")
                continue
            tests = [float(r["test_median"]) for r in rows]
            secs = [float(r["seconds"]) for r in rows]
            done = "finished" if "epochs" in info else "cut off"
            lines.append(f"  {model.name}: {int(rows[-1]['epoch']) + 1} epochs ({done}), "
                         f"{statistics.median(secs):.2f} s/epoch, test median last {tests[-1]:.3g} "
                         f"best {min(tests):.3g}; curve " + " ".join(f"{t:.3g}" for t in tests[::max(1, len(tests) // 8)])
                         + f"; {info.get('parameters', '?')} params")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=sorted(MODELS) + ["summary"])
    parser.add_argument("folder", nargs="?", type=Path, help="summary: the results folder")
    parser.add_argument("--scale", default="gpu-lease", choices=("tiny", "gpu-lease"))
    parser.add_argument("--models", help="comma-separated (default: all of the experiment's)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--deadline", type=float, help="Unix time by which training ends")
    parser.add_argument("--prepare", action="store_true",
                        help="solve the samples into --cache and write the baselines (then train --models, if given); "
                             "without it, wait for the cache another process fills")
    parser.add_argument("--workers", type=int, default=1, help="processes solving Darcy / inverse samples")
    parser.add_argument("--cache", type=Path, default=Path("paper2d_cache"))
    parser.add_argument("--out", type=Path, default=Path("paper2d_out"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    torch.set_num_threads(1)
    if args.experiment == "summary":
        print(summary(args.folder))
        return
    run(args)


if __name__ == "__main__":
    main()
