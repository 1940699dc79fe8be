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


def fem_floor(domain: str, n_train: int, args) -> dict[str, float]:
    """How far each mesh's own test targets are from the twice-refined training mesh's solutions
    (``darcy_compare.py --fem-floor``), kept in ``OUT/DOMAIN/nN/floor.json``."""
    path = args.out / domain / f"n{n_train}" / "floor.json"
    if not path.exists():
        cmd = [sys.executable, str(HERE / "darcy_compare.py"), "--fem-floor", "--scale", args.scale, "--domain", domain,
               "--families", FAMILY[domain], "--n-train", str(n_train)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        line = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.strip().splitlines()[-1]
        floor = {k: float(v) for k, v in (item.split() for item in line.split(": ", 1)[1].split(", "))}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(floor))
    return json.loads(path.read_text())


def rows_of(path: Path) -> tuple[dict, dict]:
    """``(nodes per mesh, row of the model)`` of one run's ``results.json``."""
    run = json.loads(path.read_text())
    (family,) = run["results"].values()
    (row,) = family["models"].values()
    return family["nodes"], row


def race_table(results: dict, models: list[str], floors: dict | None = None) -> str:
    """One section per domain: error on every mesh, ratio to FNO, worst / train, time per epoch;
    with ``floors``, a last row with each mesh's finite-element floor (:func:`fem_floor`)."""
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
        floor = (floors or {}).get((domain, n_train))
        if floor:
            body.append(["FE floor of the targets", "", "", *(f"{floor[m]:.4f}" for m in meshes), ""]
                        + ([""] if peer else []))
        summary = ""
        if peer:
            ratios = {model: [runs[model][1]["test"][m] / peer["test"][m] for m in meshes]
                      for model in models if model in runs and model != PEER}
            summary = "\n\nError over FNO's, lowest to highest over the meshes: " + ", ".join(
                f"`{model}` {min(r):.2f}–{max(r):.2f}" for model, r in ratios.items()) + "."
        parts.append(f"## {domain}, {FAMILY[domain]} coefficients, {n_train} training samples\n\n"
                     + markdown_table(head, body) + summary)
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
    text = f"## {domain}, {FAMILY[domain]} coefficients\n\n" + markdown_table(head, body)
    for model in models:
        if model != PEER and all(m in results[(domain, n)] for n in sizes for m in (model, PEER)):
            ratios = [max(results[(domain, n)][model][1]["test"][k] / results[(domain, n)][PEER][1]["test"][k]
                          for k in results[(domain, n)][PEER][1]["test"]) for n in sizes]
            text += (f"\n\n`{model}`'s error over FNO's, the largest over the meshes: "
                     + ", ".join(f"{r:.2f} at {n}" for n, r in zip(sizes, ratios)) + " samples.")
    return text


def plot_samples(results: dict, models: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.ticker
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for model in models:
        points = sorted((n, runs[model][1]["test"]) for (_, n), runs in results.items() if model in runs)
        ax.loglog([n for n, _ in points], [list(t.values())[0] for _, t in points], "o-", label=f"{model}, train mesh")
        ax.loglog([n for n, _ in points], [max(list(t.values())[1:]) for _, t in points], "x--",
                  label=f"{model}, worst mesh")
    sizes = sorted({n for _, n in results})
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
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
    parser.add_argument("--floors", action="store_true",
                        help="also measure each mesh's finite-element floor: how far its own targets are from the "
                             "twice-refined training mesh's solutions (a row of the table)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the runs (a rerun skips finished runs)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    jobs = [(d, n, m) for d in args.domains for n in args.n_train for m in args.models]
    with ThreadPoolExecutor(args.jobs) as pool:
        paths = list(pool.map(lambda job: run_one(*job, args), jobs))
    results: dict = {}
    for (domain, n, model), path in zip(jobs, paths):
        results.setdefault((domain, n), {})[model] = rows_of(path)
    curve = len(args.n_train) > 1
    floors = {key: fem_floor(*key, args) for key in results} if args.floors and not curve else None
    table = samples_table(results, args.models) if curve else race_table(results, args.models, floors)
    runs = [json.loads(p.read_text()) for p in paths]
    loads = [r["load"][0] for r in runs]
    machine = (f"{runs[0]['machine']}, {os.cpu_count()} cores; {args.jobs} runs at a time, one torch thread each; "
               f"load average (1 min) at the end of each run {min(loads):.1f}–{max(loads):.1f}")
    print(table)
    print(machine)
    notes = f"Each model trained for {args.seconds:g} s of measured training time on one thread."
    if runs[0]["scale"].get("refine_data"):
        notes += (" geoattn's models train on the training samples carried to the training mesh refined once "
                  "(`geoattn.data.refined_samples`: the loss against the data's interpolants between the nodes "
                  "too); FNO on the samples as they are.")
    if args.floors and not curve:
        notes += (" The FE floor row is how far each mesh's own targets are from the twice-refined training "
                  "mesh's solutions: a mesh whose floor is above the training mesh's carries targets further "
                  "from the continuum, and every model's ratio there rises with it.")
    if curve:
        figure = args.docs.with_suffix(".png") if args.docs else args.out / "samples.png"
        plot_samples(results, args.models, figure)
        notes += f"\n\n![error against training samples]({figure.name})"
    if args.docs:
        title = "Darcy: error against training samples" if curve else "Darcy race: FNO through a grid, fairly configured"
        command = "python benchmarks/darcy_race.py " + " ".join(a for a in (argv or sys.argv[1:]))
        write_page(args.docs, title, command, table, machine, notes=notes)
    return results


if __name__ == "__main__":
    main()
