"""The fair Darcy race: geoattn's models against FNO through a grid on several domains, each model
given the same measured training time, and the error against the number of training samples.

    python benchmarks/darcy_race.py --out race_out --docs docs/results/darcy_race.md
    python benchmarks/darcy_race.py --domains square --n-train 50 100 200 400 --out samples_out \\
        --docs docs/results/darcy_samples.md

Every (domain, training-set size, model) is one process of ``darcy_compare.py`` with one torch
thread, ``--jobs`` of them at a time (two on a 2-core machine: both cores busy alike for every
model), each trained for ``--seconds`` of measured training time
(:class:`geoattn.train.Trainer`'s ``seconds``) at the ``race`` scale: the square's 1 089-node
irregular training mesh, 200 training and 50 test samples, width 32, 4 layers. FNO gets the
configuration its users would pick (:func:`darcy.race.peer_configuration`: a grid with about as
many points as the training mesh has nodes, neuralop's example modes, masked outside the domain).

Domains (:func:`darcy.meshes.benchmark_meshes`) and coefficient laws: ``square``,
``square_holes`` and ``pores`` (14 pores smaller than a cell of FNO's grid, meshes graded toward
them) with the piecewise law used while the multigrid model was designed, and ``heldout`` (a
quarter annulus with an elliptic hole) with the three-phase law, which were not used to choose
anything. The table gives each model's error on every mesh of the domain, its ratio to FNO's on
that mesh, its worst / training-mesh ratio and its time per epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from results_page import add_docs_argument, markdown_table, write_page

HERE = Path(__file__).resolve().parent
FAMILY = {"square": "piecewise", "square_holes": "piecewise", "pores": "piecewise", "heldout": "threephase"}
PEER = "neuralop-fno"


def run_one(domain: str, n_train: int, model: str, args) -> Path:
    """One model's run, in its own process; returns its ``results.json`` (kept: a rerun skips it)."""
    out = args.out / domain / f"n{n_train}" / model
    if (out / "results.json").exists():
        return out / "results.json"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE / "darcy_compare.py"), "--scale", args.scale, "--domain", domain,
           "--families", FAMILY[domain], "--models", model, "--n-train", str(n_train),
           "--seconds", str(args.seconds), "--threads", "1", "--device", args.device, "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    with open(out / "run.log", "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if code:
        raise RuntimeError(f"{domain} n={n_train} {model} failed (exit {code}); see {out / 'run.log'}")
    return out / "results.json"


def rows_of(path: Path) -> tuple[dict, dict]:
    """``(nodes per mesh, row of the model)`` of one run's ``results.json``."""
    run = json.loads(path.read_text())
    (family,) = run["results"].values()
    (row,) = family["models"].values()
    return family["nodes"], row


def race_table(results: dict, models: list[str]) -> str:
    """One section per domain: error on every mesh, ratio to FNO, worst / train, time per epoch."""
    parts = []
    for (domain, n_train), runs in results.items():
        nodes = next(iter(runs.values()))[0]
        meshes = list(nodes)
        peer = runs.get(PEER, (None, None))[1]
        head = ["model", "epochs", "s / epoch"] + [f"{m} ({nodes[m]})" for m in meshes] + ["worst / train"]
        if peer:
            head.append(f"/ {PEER} (per mesh)")
        body = []
        for model in models:
            if model not in runs:
                continue
            row = runs[model][1]
            errors = [row["test"][m] for m in meshes]
            cells = [model, row["epochs"], f"{row['seconds_per_epoch']:.2f}", *(f"{e:.4f}" for e in errors),
                     f"{max(errors[1:]) / errors[0]:.2f}"]
            if peer:
                cells.append(" / ".join(f"{e / peer['test'][m]:.2f}" for e, m in zip(errors, meshes)))
            body.append(cells)
        parts.append(f"## {domain}, {FAMILY[domain]} coefficients, {n_train} training samples\n\n"
                     + markdown_table(head, body))
        configs = [f"- `{model}`: `{runs[model][1]['config']}`" for model in models if model in runs]
        parts.append("Configurations:\n\n" + "\n".join(configs))
    return "\n\n".join(parts)


def samples_table(results: dict, models: list[str]) -> str:
    """Error on the training mesh and on the worst other mesh against the training-set size."""
    sizes = sorted({n for _, n in results})
    domain = next(iter(results))[0]
    head = ["training samples"] + [f"{m}: train mesh / worst mesh" for m in models]
    body = []
    for n in sizes:
        runs = results[(domain, n)]
        cells = [n]
        for model in models:
            row = runs[model][1] if model in runs else None
            errors = list(row["test"].values()) if row else []
            cells.append(f"{errors[0]:.4f} / {max(errors[1:]):.4f}" if row else "")
        body.append(cells)
    return f"## {domain}, {FAMILY[domain]} coefficients\n\n" + markdown_table(head, body)


def plot_samples(results: dict, models: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for model in models:
        points = sorted((n, runs[model][1]["test"]) for (_, n), runs in results.items() if model in runs)
        ax.loglog([n for n, _ in points], [list(t.values())[0] for _, t in points], "o-", label=f"{model}, train mesh")
        ax.loglog([n for n, _ in points], [max(list(t.values())[1:]) for _, t in points], "x--",
                  label=f"{model}, worst mesh")
    ax.set_xlabel("training samples")
    ax.set_ylabel("test relative L2 error")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="race", help="darcy_compare.py's scale (default race)")
    parser.add_argument("--domains", nargs="+", default=list(FAMILY), choices=list(FAMILY))
    parser.add_argument("--models", nargs="+", default=["multigrid", "mesh_fno", PEER])
    parser.add_argument("--n-train", nargs="+", type=int, default=[200], help="training-set sizes (default 200)")
    parser.add_argument("--seconds", type=float, default=300.0, help="training time per model (default 300)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True, help="folder of the runs (a rerun skips finished runs)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    jobs = [(d, n, m) for d in args.domains for n in args.n_train for m in args.models]
    tic = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        paths = list(pool.map(lambda job: run_one(*job, args), jobs))
    results: dict = {}
    for (domain, n, model), path in zip(jobs, paths):
        results.setdefault((domain, n), {})[model] = rows_of(path)
    curve = len(args.n_train) > 1
    table = samples_table(results, args.models) if curve else race_table(results, args.models)
    load = os.getloadavg()
    device = json.loads(paths[0].read_text())["machine"]
    machine = (f"{device}, {os.cpu_count()} cores; {args.jobs} runs at a time, one torch thread each; load average "
               f"{load[0]:.1f} / {load[2]:.1f} (1 / 15 min) at the end; {time.perf_counter() - tic:.0f} s in all")
    print(table)
    print(machine)
    if curve:
        plot_samples(results, args.models, args.out / "samples.png")
    if args.docs:
        title = "Darcy: error against training samples" if curve else "Darcy race: FNO through a grid, fairly configured"
        command = "python benchmarks/darcy_race.py " + " ".join(a for a in (argv or sys.argv[1:]))
        write_page(args.docs, title, command, table, machine,
                   notes=f"Each model trained for {args.seconds:g} s of measured training time on one thread.")
    return results


if __name__ == "__main__":
    main()
