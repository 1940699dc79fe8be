"""The data path's cost: one mesh per sample against samples sharing one mesh, within a fit and in
a second fit and an evaluation on the same samples (issue 52).

    python benchmarks/data_path.py --threads 1 --compare 2e3fc7a --docs docs/results/data_path.md

For each model (``multigrid`` on the samples carried to the refined meshes, as ``docs/choosing.rst``
trains it, ``mesh_fno``, ``galerkin``, ``slice``) and each dataset -- ``shared``: Darcy samples on
one 1 089-node irregular mesh of the unit square; ``per-sample``: the same number of samples, each
on its own 1 024-node irregular mesh -- the public API as the docs show it:

1. ``Trainer(op, epochs=2, batch_size=4).fit(train)``: the first epoch builds each mesh's
   structure, the second is the steady step;
2. a second ``Trainer(op, epochs=1, ...).fit(train)`` on the same samples;
3. ``evaluate_errors(op, train)``.

Reported: milliseconds per optimiser step (epoch time / steps) and per evaluated sample, and the
ratio per node of ``per-sample`` to ``shared`` (each time divided by the nodes per sample). The
samples are given as the docs of the running geoattn say: a :class:`~geoattn.mesh.MeshSamples`
made once (:func:`geoattn.mesh.as_samples`) where it exists, else the list of samples.

``--many N`` adds the memory of a dataset of ``N`` meshes (one ~300-node mesh per sample,
``mesh_fno`` with exact P1 transforms evaluated on all of them twice through a :class:`~geoattn.mesh.MeshStore` bounded at
``--max-mib``): the structure the store keeps and the process's peak resident memory, against the
same with no bound.

``--compare REV`` runs the same measurement on geoattn as of git revision ``REV`` (a temporary git
worktree, imported in a subprocess), and the table gives both, side by side, from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from geoattn.mesh import Mesh

HERE = Path(__file__).resolve().parent
MODELS = ("multigrid", "mesh_fno", "galerkin", "slice")


def _datasets(n: int, seed: int = 0) -> dict[str, object]:
    from geoattn.data import darcy_samples
    from geoattn.mesh import families

    shared = list(darcy_samples({"m": families.unit_square(32, "irregular", seed=1)}, n, seed)["m"])
    own = []
    for i in range(n):
        mesh = families.unit_square(31, "irregular", seed=100 + i)
        own += list(darcy_samples({"m": mesh}, 1, seed, start=i)["m"])
    return {"shared": shared, "per-sample": own}


def _model(name: str):
    from geoattn.models import build_model

    if name == "multigrid":  # the first grid matched to the node count (docs/choosing.rst)
        return build_model(name, in_channels=1, out_channels=1, width=32, depth=4, grid=32, levels=4)
    return build_model(name, in_channels=1, out_channels=1, width=32, depth=3 if name != "mesh_fno" else 4)


def measure(models, n: int, threads: int) -> dict:
    import geoattn.mesh as gm
    from geoattn.data import refined_samples
    from geoattn.train import NormalizedOperator, Trainer, evaluate_errors

    torch.set_num_threads(threads)
    as_samples = getattr(gm, "as_samples", None)  # the recipe of the geoattn that runs
    data = _datasets(n)
    out = {}
    for name in models:
        for kind, samples in data.items():
            train = refined_samples(samples) if name == "multigrid" else samples
            if as_samples is not None:
                train = as_samples(train)
            nodes = sum(int(train[i].pos.shape[0]) for i in range(len(train))) / len(train)
            torch.manual_seed(0)
            op = NormalizedOperator(_model(name))
            steps = -(-len(train) // 4)
            first = Trainer(op, epochs=2, batch_size=4, progress=False).fit(train)
            second = Trainer(op, epochs=1, batch_size=4, progress=False).fit(train)
            tic = time.perf_counter()
            evaluate_errors(op, train, batch_size=4)
            evaluate = time.perf_counter() - tic
            out[f"{name}/{kind}"] = {
                "nodes": nodes, "first_epoch_ms": 1e3 * first[0]["seconds"] / steps,
                "steady_ms": 1e3 * first[1]["seconds"] / steps,
                "second_fit_ms": 1e3 * second[0]["seconds"] / steps,
                "evaluate_ms": 1e3 * evaluate / len(train)}
            print(name, kind, {k: round(v, 1) for k, v in out[f"{name}/{kind}"].items()}, flush=True)
    return out


def many_meshes(n: int, max_mib: float, threads: int) -> dict:
    """The memory a dataset of ``n`` meshes keeps after two evaluations of ``mesh_fno``: with the
    store bounded at ``max_mib`` MiB of derived structure, and unbounded (a subprocess each)."""
    out = {}
    for bound in (max_mib, None):
        code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import data_path; "
                f"print(data_path._many({n}, {bound!r}, {threads}))")
        text = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
        out["bounded" if bound else "unbounded"] = json.loads(text.strip().splitlines()[-1])
    return out


def _many(n: int, max_mib: float | None, threads: int) -> str:
    import resource

    from geoattn.data import darcy_samples
    from geoattn.mesh import MeshSamples, MeshStore, families
    from geoattn.models import build_model
    from geoattn.train import NormalizedOperator, evaluate_errors

    torch.set_num_threads(threads)
    samples = []
    for i in range(n):
        samples += list(darcy_samples({"m": families.unit_square(16, "irregular", seed=i)}, 1, 0, start=i)["m"])
    meshes = MeshStore([Mesh.from_sample(d) for d in samples],
                       max_bytes=None if max_mib is None else int(max_mib * 2**20))
    for k, d in enumerate(samples):
        d.mesh_id = k
    data = MeshSamples(samples, meshes)
    torch.manual_seed(0)
    op = NormalizedOperator(build_model("mesh_fno", in_channels=1, out_channels=1, width=32, depth=4,
                                        quadrature="p1")).eval()  # exact transforms: weights kept per mesh
    tic = time.perf_counter()
    for _ in range(2):
        evaluate_errors(op, data, batch_size=8)
    meshes.trim()
    return json.dumps({"meshes": n, "max_mib": max_mib, "structure_mib": meshes.structure_bytes / 2**20,
                       "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                       "seconds": time.perf_counter() - tic})


def _run_at(rev: str, args) -> dict:
    """The measurement on geoattn at git revision ``rev``, in a subprocess over a temporary worktree."""
    root = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), rev],
                       check=True, capture_output=True)
        try:
            result = Path(tmp) / "result.json"
            env = dict(os.environ, PYTHONPATH=str(tree))
            subprocess.run([sys.executable, __file__, "--measure-only", str(result), "--samples", str(args.samples),
                            "--threads", str(args.threads), "--models", *args.models], check=True, env=env, cwd=tmp)
            return json.loads(result.read_text())
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False)


def table(runs: dict[str, dict], models) -> str:
    sys.path.insert(0, str(HERE))
    from results_page import markdown_table

    rows = []
    for label, res in runs.items():
        for name in models:
            s, p = res[f"{name}/shared"], res[f"{name}/per-sample"]

            def per_node(key):
                return (p[key] / p["nodes"]) / (s[key] / s["nodes"])

            rows.append([label, f"`{name}`", f"{s['nodes']:.0f} / {p['nodes']:.0f}",
                         *(f"{s[k]:.0f} / {p[k]:.0f} ({per_node(k):.2f}x)"
                           for k in ("first_epoch_ms", "steady_ms", "second_fit_ms", "evaluate_ms"))])
    return markdown_table(["geoattn", "model", "nodes per sample (shared / per-sample)",
                           "ms per step, first epoch", "ms per step, steady", "ms per step, second fit",
                           "ms per sample, evaluate"], rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--compare", metavar="REV", help="also measure geoattn at this git revision")
    parser.add_argument("--many", type=int, metavar="N", help="also the memory of a dataset of N meshes")
    parser.add_argument("--max-mib", type=float, default=64.0, help="the store's bound for --many (MiB)")
    parser.add_argument("--out", type=Path, help="folder for results.json")
    parser.add_argument("--measure-only", type=Path, help=argparse.SUPPRESS)
    sys.path.insert(0, str(HERE))
    from results_page import add_docs_argument, write_page

    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if args.measure_only:
        args.measure_only.write_text(json.dumps(measure(args.models, args.samples, args.threads)))
        return 0
    runs = {}
    if args.compare:
        runs[f"`{args.compare}` (before)"] = _run_at(args.compare, args)
    runs["this tree"] = measure(args.models, args.samples, args.threads)
    text = table(runs, args.models)
    if args.many:
        from results_page import markdown_table

        many = runs["many meshes"] = many_meshes(args.many, args.max_mib, args.threads)
        text += "\n\n## A dataset of many meshes\n\n" + markdown_table(
            ["store", "meshes", "structure kept (MiB)", "peak resident memory (MiB)", "two evaluations (s)"],
            [[f"max_bytes = {r['max_mib']:g} MiB" if r["max_mib"] else "no bound", r["meshes"],
              f"{r['structure_mib']:.0f}", f"{r['peak_rss_mib']:.0f}", f"{r['seconds']:.0f}"] for r in many.values()])
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(runs, indent=1))
    if args.docs:
        command = "python benchmarks/data_path.py " + " ".join(argv if argv is not None else sys.argv[1:])
        machine = f"{os.cpu_count()} CPU cores, {args.threads} torch thread(s), torch {torch.__version__}"
        notes = ("Each cell: shared mesh / one mesh per sample (per-sample ÷ shared per node). The first epoch "
                 "builds each mesh's structure; the second fit and the evaluation run on the same samples, "
                 f"{args.samples} of them, batch 4.")
        write_page(args.docs, "The data path: one mesh per sample against a shared mesh", command, text,
                   machine, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
