"""Seconds per training step of the multigrid operator against FNO through a grid, before and
after a change of the model, side by side in one process.

    python benchmarks/multigrid_step.py --before 718e02d --docs docs/results/multigrid_step.md

One training step is what :class:`geoattn.train.Trainer` does per batch: the batch
:class:`~geoattn.mesh.Mesh` made from its members (:meth:`~geoattn.mesh.Mesh.batch`; the
members keep their memos), the forward pass, the weighted relative L2 loss, the backward pass
and an AdamW step; batch 4, one torch thread. Models as the race builds them on the square
(:func:`darcy.race.multigrid_configuration`, :func:`darcy.race.peer_configuration` at the
``race`` scale: the 1 089-node training mesh, width 32, 4 blocks; the model's default smoothing,
2 steps per level): ``multigrid`` of this checkout (also with ``--smoothing`` steps per level, the
race's ``1,2,2,2`` by default) and of the git revision ``--before``
(its ``geoattn/models/multigrid.py`` loaded beside this checkout's), and neuralop's FNO through
a 33 x 33 grid. Three cases:

- ``shared``: every sample on the training mesh;
- ``shared, refined``: every sample on the training mesh refined once (about 4x the nodes: what
  a model trained on :func:`geoattn.data.refined_samples` computes on);
- ``per sample``: every sample on a mesh of its own (irregular meshes of the square with about
  the same nodes, a pool of ``--pool`` meshes cycled through), their structure built in the
  warm-up (``per sample, cold``: the first pass over the pool, building it, after the shared
  cases' warm-up).

The models run round-robin, ``--rounds`` rounds of ``--steps`` steps; a row gives the median
over rounds of the mean step time. Random inputs and targets (a step's cost does not depend on
the values).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from darcy.meshes import benchmark_meshes
from darcy.peers import GridFNO
from darcy.race import SCALES, multigrid_configuration, peer_configuration
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import MODELS
from geoattn.operators import training_size
from geoattn.train import relative_l2
from results_page import add_docs_argument, markdown_table, write_page

ROOT = Path(__file__).resolve().parents[1]
MODULE = "geoattn/models/multigrid.py"


def multigrid_at(revision: str):
    """The ``MultigridOperator`` class of ``geoattn/models/multigrid.py`` at git ``revision``,
    loaded as a module of the installed package beside this checkout's (its registry entry
    restored afterwards)."""
    source = subprocess.run(["git", "show", f"{revision}:{MODULE}"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    name = "geoattn.models._multigrid_" + revision.replace("/", "_").replace("~", "_").replace("^", "_")
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "geoattn.models"
    sys.modules[name] = module
    saved = MODELS.pop("multigrid")
    try:
        exec(compile(source, f"{revision}:{MODULE}", "exec"), module.__dict__)
    finally:
        MODELS["multigrid"] = saved
    return module.MultigridOperator


def mesh_of(meshio_mesh) -> Mesh:
    d = from_meshio(meshio_mesh)
    return Mesh(d.pos, d.weight, d.cells)


def step_cases(mesh_n: int, pool: int, batch: int) -> dict[str, list[list[Mesh]]]:
    """Each case's batches, as lists of member meshes (one per sample)."""
    train = mesh_of(benchmark_meshes(mesh_n, "square")["train"])
    fine, _ = train.refined(training_size(benchmark_meshes(mesh_n, "square")["train"]) / 2)
    own = [mesh_of(families.unit_square(mesh_n, "irregular", seed=100 + k)) for k in range(pool)]
    return {"shared": [[train] * batch], "shared, refined": [[fine] * batch],
            "per sample": [own[k:k + batch] for k in range(0, pool - batch + 1, batch)]}


def timed_steps(model: torch.nn.Module, batches: list[list[Mesh]], steps: int) -> float:
    """Mean seconds of ``steps`` training steps cycling through ``batches``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    start = time.perf_counter()
    for k in range(steps):
        mesh = Mesh.batch(batches[k % len(batches)])
        x = torch.randn(mesh.num_nodes, 1)
        y = torch.randn(mesh.num_nodes, 1)
        loss = relative_l2(model(x, mesh), y, mesh)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def build_models(before: str | None, scale, smoothing: list[tuple[int, ...]]) -> dict[str, callable]:
    config = {k: v for k, v in multigrid_configuration(scale, "square").items() if k != "smoothing"}
    kw = dict(in_channels=1, out_channels=1, dim=2, width=scale.width, depth=scale.depth, **config)  # smoothing 2
    out = {"neuralop-fno": lambda: GridFNO(1, 1, **peer_configuration(scale, "square"))}
    if before:
        old = multigrid_at(before)
        out[f"multigrid @ {before}"] = lambda: old(**kw)
    out["multigrid"] = lambda: MODELS["multigrid"](**kw)
    for steps in smoothing:
        out[f"multigrid, smoothing={steps}"] = lambda steps=steps: MODELS["multigrid"](**kw, smoothing=steps)
    return out


def measure(models: dict, cases: dict, steps: int, rounds: int) -> dict[tuple[str, str], float]:
    """Median over ``rounds`` of each (model, case)'s mean step time, the models run round-robin;
    and each model's first pass over the per-sample pool (structure built), as ``per sample, cold``."""
    built = {name: make() for name, make in models.items()}
    times: dict[tuple[str, str], list[float]] = {}
    pool = cases["per sample"]
    for name, model in built.items():
        torch.manual_seed(0)
        for case in ("shared", "shared, refined"):
            timed_steps(model, cases[case], 2)  # warm-up: structure of the shared meshes, allocator
        times[(name, "per sample, cold")] = [timed_steps(model, pool, len(pool))]
    for _ in range(rounds):
        for case, batches in cases.items():
            for name, model in built.items():
                times.setdefault((name, case), []).append(timed_steps(model, batches, steps))
    return {key: statistics.median(v) for key, v in times.items()}


def table(result: dict, models: list[str], nodes: dict[str, int]) -> str:
    cases = ["shared", "shared, refined", "per sample", "per sample, cold"]
    peer = "neuralop-fno"
    head = ["model"] + [f"{c} ({nodes[c.split(',')[0] if c.startswith('per') else c]} nodes)" for c in cases] + \
        ["per sample / shared, per node"]
    rows = []
    for name in models:
        cells = [f"`{name}`"]
        for case in cases:
            s = result[(name, case)]
            base = result[(peer, case)] if (peer, case) in result else None
            cells.append(f"{1e3 * s:.1f} ms" + ("" if name == peer or base is None else f" ({s / base:.2f}x FNO)"))
        per_node = (result[(name, "per sample")] / nodes["per sample"]) / (result[(name, "shared")] / nodes["shared"])
        cells.append(f"{per_node:.2f}")
        rows.append(cells)
    return markdown_table(head, rows)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None, help="git revision whose multigrid is measured beside this one")
    parser.add_argument("--scale", default="race", choices=list(SCALES))
    parser.add_argument("--smoothing", nargs="*", default=["1,2,2,2"],
                        help="also the multigrid with these smoothing steps per level (comma-separated)")
    parser.add_argument("--steps", type=int, default=5, help="steps per round (default 5)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, models round-robin (default 5)")
    parser.add_argument("--pool", type=int, default=16, help="meshes of the per-sample case (default 16)")
    parser.add_argument("--threads", type=int, default=1)
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scale = SCALES[args.scale]
    smoothing = [tuple(int(k) for k in s.split(",")) for s in args.smoothing]
    cases = step_cases(scale.mesh_n, args.pool, scale.batch_size)
    nodes = {case: batches[0][0].num_nodes for case, batches in cases.items()}
    models = build_models(args.before, scale, smoothing)
    load = os.getloadavg()[0]
    result = measure(models, cases, args.steps, args.rounds)
    load = max(load, os.getloadavg()[0])
    text = table(result, list(models), nodes)
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
               f"{args.threads} torch thread(s); load average (1 min) up to {load:.1f} while it ran")
    print(text)
    print(machine)
    if args.docs:
        notes = (f"Batch {scale.batch_size}; median over {args.rounds} rounds of {args.steps} steps, the models "
                 "round-robin in one process. `per sample / shared, per node`: the step time per node with one "
                 "mesh per sample over the same with one shared mesh (structure built; `cold` is the first pass "
                 "over the pool's meshes, building it).")
        if args.before:
            notes += f" `multigrid @ {args.before}` is the model of that git revision."
        command = "python benchmarks/multigrid_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_page(args.docs, "Multigrid training step against FNO through a grid (`benchmarks/multigrid_step.py`)",
                   command, text, machine, notes=notes)
    return {"result": result, "nodes": nodes}


if __name__ == "__main__":
    main()
