"""Training-step time: the data pipeline (DataLoader, lazily read file, per-mesh structure kept on
the mesh) against structure rebuilt in every step, and torch.compile against eager.

    python benchmarks/training_step.py --threads 1 --out bench_out

Part 1, the pipeline, for GNO and TNO, on Darcy samples on one irregular mesh written to a dataset
file (``geoattn generate``) and trained with :class:`geoattn.train.Trainer` for fixed epochs:

- ``rebuilt``: every sample read into a list up front, and every per-mesh structure (GNO's radius
  graph) rebuilt in every forward pass (the model given a new :class:`~geoattn.mesh.Mesh` each step);
- ``list``: the same list, structures built once per mesh (kept in the
  :class:`~geoattn.mesh.Mesh` the loader hands every sample on it);
- ``lazy``: the dataset file read a sample at a time (:class:`geoattn.data.DarcyDataset`);
- ``lazy+2 workers``: the same with two DataLoader worker processes reading ahead.

Part 2, torch.compile: the graph breaks of every model's forward pass
(:func:`torch._dynamo.explain`) on one mesh and on a batch of four, and the time of a training
step (forward, backward, AdamW) of TNO and GNO on a batch of four, compiled (inductor) against
eager, after warm-up steps that include the compilation (its time is reported too).

Reported: milliseconds per step (wall and process CPU), as a table and ``results.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

import torch

from geoattn.cli.main import main as cli
from geoattn.data import DarcyDataset
from geoattn.mesh import Mesh, families, save_meshio
from geoattn.models import MODELS, build_model
from geoattn.train import NormalizedOperator, Trainer
from geoattn.train.loader import collate
from results_page import add_docs_argument, markdown_table, write_page


def dataset_file(folder: Path, mesh_n: int, samples: int) -> Path:
    """A lognormal Darcy dataset on ``unit_square(mesh_n, "irregular")`` (made once)."""
    path = folder / f"darcy_{mesh_n}_{samples}.h5"
    if not path.exists():
        mesh = folder / f"square_{mesh_n}.vtu"
        save_meshio(mesh, families.unit_square(mesh_n, "irregular"))
        assert cli(["generate", "--mesh", f"train={mesh}", "--n", str(samples), "--family", "lognormal",
                    "--out", str(path), "--no-progress"]) == 0
    return path


def model_kwargs(name: str, scale: dict) -> dict:
    kw = dict(width=scale["width"], depth=scale["depth"])
    if name == "gno":
        kw["radius"] = 2.5 / scale["mesh_n"]
    if name in ("vit", "fano"):
        kw.update(num_patches=4, modes=1)
    return kw


def fresh_mesh(module: torch.nn.Module, args: tuple) -> tuple:
    """A forward pre-hook giving the model a new :class:`~geoattn.mesh.Mesh` (empty memo) in
    every call: its per-mesh structure is rebuilt every step."""
    x, mesh = args
    return x, Mesh(mesh.pos, mesh.weight, mesh.cells, batch=mesh.batch_vector, layout=mesh.layout)


def pipeline(path: Path, name: str, scale: dict) -> dict:
    """ms per step of each pipeline variant (fixed epochs, batch 4)."""
    lazy = DarcyDataset(path)
    in_memory = [lazy[i] for i in range(len(lazy))]
    variants = {"rebuilt": (in_memory, 0, True), "list": (in_memory, 0, False), "lazy": (lazy, 0, False),
                "lazy+2 workers": (lazy, 2, False)}
    out = {}
    for label, (samples, workers, rebuild) in variants.items():
        torch.manual_seed(0)
        model = build_model(name, in_channels=1, out_channels=1, **model_kwargs(name, scale))
        if rebuild:
            model.register_forward_pre_hook(fresh_mesh)
        trainer = Trainer(NormalizedOperator(model), epochs=scale["epochs"], batch_size=4, progress=False,
                          workers=workers)
        tic, cpu = time.perf_counter(), time.process_time()
        history = trainer.fit(samples)
        steps = scale["epochs"] * -(-len(samples) // 4)
        out[label] = {"ms_per_step": 1e3 * (time.perf_counter() - tic) / steps,
                      "cpu_ms_per_step": 1e3 * (time.process_time() - cpu) / steps,
                      "train_error": history[-1]["train"]}
    return out


def graph_breaks(name: str, scale: dict, batch: list) -> dict:
    """Graphs and graph breaks of one forward pass, on one mesh and on a batch of four."""
    result = {}
    for label, samples in (("one mesh", batch[:1]), ("batch of 4", batch)):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = build_model(name, in_channels=1, out_channels=1, **model_kwargs(name, scale))
        data = collate(samples)
        mesh = Mesh.from_sample(data)
        model.fit_mesh(Mesh.from_sample(samples[0]))
        model(data.x, mesh)  # warm-up: the mesh's structure into its memo
        try:
            explained = torch._dynamo.explain(model)(data.x, mesh)
            reasons = collections.Counter(r.reason.splitlines()[0][:90] for r in explained.break_reasons)
            result[label] = {"graphs": explained.graph_count, "breaks": explained.graph_break_count,
                             "reasons": dict(reasons.most_common(3))}
        except Exception as err:  # noqa: BLE001 - a model that does not compile is a result
            result[label] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"}
    return result


def step_times(name: str, scale: dict, batch: list, steps: int, warmup: int) -> dict:
    """ms per training step (batch of four), eager and compiled."""
    data = collate(batch)
    mesh = Mesh.from_sample(data)
    result = {}
    for label in ("eager", "compiled"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = build_model(name, in_channels=1, out_channels=1, **model_kwargs(name, scale))
        run = torch.compile(model) if label == "compiled" else model
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = (run(data.x, mesh) - data.y).square().mean()
            loss.backward()
            optimizer.step()

        tic = time.perf_counter()
        for _ in range(warmup):
            step()
        first = time.perf_counter() - tic
        tic, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
        result[label] = {"ms_per_step": 1e3 * (time.perf_counter() - tic) / steps,
                         "cpu_ms_per_step": 1e3 * (time.process_time() - cpu) / steps,
                         "warmup_s": first}
    result["speed-up"] = result["eager"]["ms_per_step"] / result["compiled"]["ms_per_step"]
    return result


def report(results: dict) -> str:
    lines = ["Pipeline: ms per training step (wall / CPU), batch 4", ""]
    lines.append(f"{'model':<8}{'variant':<18}{'ms':>9}{'CPU ms':>9}{'vs rebuilt':>11}")
    for name, rows in results["pipeline"].items():
        for label, r in rows.items():
            ratio = rows["rebuilt"]["ms_per_step"] / r["ms_per_step"]
            lines.append(f"{name:<8}{label:<18}{r['ms_per_step']:>9.1f}{r['cpu_ms_per_step']:>9.1f}{ratio:>10.2f}x")
    lines += ["", "Graph breaks of the forward pass (graphs / breaks)", ""]
    for name, rows in results["graph_breaks"].items():
        cells = [f"{k}: " + (f"{v['graphs']} / {v['breaks']}" if "graphs" in v else v["error"]) for k, v in rows.items()]
        lines.append(f"{name:<10}" + "   ".join(cells))
    lines += ["", "Training step, batch of 4: eager vs torch.compile (inductor)", ""]
    for name, r in results["compile"].items():
        lines.append(f"{name:<8} eager {r['eager']['ms_per_step']:.1f} ms, compiled {r['compiled']['ms_per_step']:.1f} ms "
                     f"(speed-up {r['speed-up']:.2f}x; warm-up incl. compilation {r['compiled']['warmup_s']:.0f} s)")
    lines.append("")
    lines.append(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load average "
                 f"{os.getloadavg()[0]:.1f} at the end")
    return "\n".join(lines)


def markdown(results: dict) -> str:
    """The tables of :func:`report` in markdown, one section per part run (for ``--docs``)."""
    parts = []
    if results["pipeline"]:
        parts.append("## Pipeline: ms per training step, batch 4\n\n" + markdown_table(
            ["model", "variant", "ms", "CPU ms", "vs rebuilt"],
            [[name, label, f"{r['ms_per_step']:.1f}", f"{r['cpu_ms_per_step']:.1f}",
              f"{rows['rebuilt']['ms_per_step'] / r['ms_per_step']:.2f}x"]
             for name, rows in results["pipeline"].items() for label, r in rows.items()]))
    if results["graph_breaks"]:
        parts.append("## Graph breaks of the forward pass\n\n" + markdown_table(
            ["model", "variant", "graphs / breaks"],
            [[name, k, f"{v['graphs']} / {v['breaks']}" if "graphs" in v else v["error"].replace("|", "/")]
             for name, rows in results["graph_breaks"].items() for k, v in rows.items()]))
    if results["compile"]:
        parts.append("## Training step, batch 4: eager vs torch.compile (inductor)\n\n" + markdown_table(
            ["model", "eager ms", "compiled ms", "speed-up", "warm-up incl. compilation s"],
            [[name, f"{r['eager']['ms_per_step']:.1f}", f"{r['compiled']['ms_per_step']:.1f}",
              f"{r['speed-up']:.2f}x", f"{r['compiled']['warmup_s']:.0f}"] for name, r in results["compile"].items()]))
    return "\n\n".join(parts)


SCALES = {"tiny": dict(mesh_n=6, samples=8, epochs=1, width=8, depth=1, steps=2, warmup=2),
          "cpu": dict(mesh_n=24, samples=64, epochs=3, width=32, depth=3, steps=20, warmup=3)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES))
    parser.add_argument("--out", type=Path, default=Path("bench_out"))
    parser.add_argument("--threads", type=int)
    parser.add_argument("--parts", nargs="+", default=["pipeline", "graph_breaks", "compile"])
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    scale = SCALES[args.scale]
    args.out.mkdir(parents=True, exist_ok=True)
    path = dataset_file(args.out, scale["mesh_n"], scale["samples"])
    ds = DarcyDataset(path)
    batch = [ds[i] for i in range(4)]
    results = {"scale": args.scale, **scale, "nodes": batch[0].num_nodes, "pipeline": {}, "graph_breaks": {},
               "compile": {}}
    if "pipeline" in args.parts:
        for name in ("gno", "tno"):
            results["pipeline"][name] = pipeline(path, name, scale)
    if "graph_breaks" in args.parts:
        for name in sorted(MODELS):
            results["graph_breaks"][name] = graph_breaks(name, scale, batch)
    if "compile" in args.parts:
        for name in ("tno", "gno"):
            results["compile"][name] = step_times(name, scale, batch, scale["steps"], scale["warmup"])
    text = report(results)
    print(text)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "table.txt").write_text(text + "\n")
    if args.docs:
        write_page(args.docs, "Training step: data pipeline, structure cache, torch.compile "
                              "(`benchmarks/training_step.py`)",
                   " ".join(["python", "benchmarks/training_step.py", *(sys.argv[1:] if argv is None else argv)]),
                   markdown(results), text.splitlines()[-1] + f"; recorded {time.strftime('%Y-%m-%d')}",
                   notes=f"Scale {args.scale}: {results['nodes']} nodes, {scale['samples']} samples.")
    return results


if __name__ == "__main__":
    main()
