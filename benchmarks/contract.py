"""The operator contract's cost: torch.compile graph breaks and eager training-step time per model.

    python benchmarks/contract.py --out contract.json

For every registered model (small widths): the graph breaks of one forward pass
(:func:`torch._dynamo.explain`) on one mesh and on a batch of three meshes of different sizes,
and the wall time of an eager training step (forward, backward, AdamW) on a batch of four
samples on the 1 089-node irregular unit square. The script runs on the contract before and
after the ``Mesh`` value (``model(x, pos, weight, batch)`` or ``model(x, mesh)``), so the same
command on two commits compares them; run both in one session on an idle machine.
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

from results_page import add_docs_argument, markdown_table, write_page
from timing import machine

from geoattn import mesh as gmesh
from geoattn.mesh import families
from geoattn.models import MODELS, build_model

NEW = hasattr(gmesh, "Mesh")


def samples(n: int, count: int, seed: int = 0) -> list:
    """``count`` samples with random fields on ``unit_square(n, "irregular")``."""
    data = gmesh.from_meshio(families.unit_square(n, "irregular"))
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        s = data.clone()
        s.x = torch.randn(s.num_nodes, 1, generator=g)
        s.y = torch.randn(s.num_nodes, 1, generator=g)
        out.append(s)
    return out


def call(model, group: list, device="cpu"):
    """``model`` on the samples ``group`` (one mesh, or a batch), in the contract at hand."""
    group = [s.to(device) for s in group]
    if NEW:
        mesh = gmesh.Mesh.batch([gmesh.Mesh.from_sample(s) for s in group]) if len(group) > 1 else \
            gmesh.Mesh.from_sample(group[0])
        x = torch.cat([s.x for s in group])
        return lambda: model(x, mesh)
    from torch_geometric.data import Batch

    data = Batch.from_data_list(group)
    gmesh.register_meshes(model, group)
    args = (data.x, data.pos, data.weight) + ((data.batch,) if len(group) > 1 else ())
    return lambda: model(*args)


def kwargs(name: str) -> dict:
    kw = dict(in_channels=1, out_channels=1, width=16, depth=2)
    if name == "gno":
        kw["radius"] = 0.08
    if name in ("vit", "fano"):
        kw.update(num_patches=4, modes=1)
    return kw


def build(name: str, first, device="cpu"):
    torch.manual_seed(0)
    model = build_model(name, **kwargs(name))
    if hasattr(model, "fit_mesh"):
        if NEW:
            model.fit_mesh(gmesh.Mesh(first.pos, first.weight, first.cells))
        else:
            model.fit_mesh(first.pos, first.weight, first.cells)
    return model.to(device)


def graph_breaks(name: str) -> dict:
    out = {}
    three = [samples(n, 1)[0] for n in (16, 20, 24)]
    for label, group in (("one mesh", three[:1]), ("batch of 3 meshes", three)):
        torch._dynamo.reset()
        model = build(name, group[0])
        fn = call(model, group)
        fn()  # warm-up: per-mesh structure built (and kept, where the contract keeps it)
        try:
            explained = torch._dynamo.explain(fn)()
            reasons = collections.Counter(r.reason.splitlines()[0][:80] for r in explained.break_reasons)
            out[label] = {"breaks": explained.graph_break_count, "reasons": dict(reasons.most_common(3))}
        except Exception as err:  # noqa: BLE001 - a model that does not trace is a result
            out[label] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"}
    return out


def step_ms(name: str, steps: int, device="cpu") -> float:
    group = samples(32, 4)
    model = build(name, group[0], device)
    fn = call(model, group, device)
    y = torch.cat([s.y for s in group]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = (fn() - y).square().mean()
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    sync()
    tic = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return 1e3 * (time.perf_counter() - tic) / steps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=sorted(MODELS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path)
    p.add_argument("--device", default="cpu")
    p.add_argument("--parts", nargs="+", choices=("breaks", "steps"), default=["breaks", "steps"])
    p.add_argument("--compare", type=Path, metavar="JSON",
                   help="results (--out) of the same command on another commit, shown beside")
    add_docs_argument(p)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    rows = {}
    for name in args.models:
        rows[name] = {}
        line = f"{name:<10}"
        if "breaks" in args.parts:
            gb = rows[name]["graph_breaks"] = graph_breaks(name)
            cell = lambda r: r.get("breaks", r.get("error"))  # noqa: E731
            line += f" breaks one mesh {cell(gb['one mesh'])!s:<6} batch of 3 {cell(gb['batch of 3 meshes'])!s:<6}"
        if "steps" in args.parts:
            try:
                rows[name]["step_ms"] = step_ms(name, args.steps, args.device)
                line += f" step {rows[name]['step_ms']:.1f} ms ({args.device})"
            except Exception as err:  # noqa: BLE001 - a model that fails on the device is a result
                rows[name]["step_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"
                line += f" step failed ({rows[name]['step_error']})"
        print(line, flush=True)
    result = {"contract": "Mesh" if NEW else "(x, pos, weight, batch)", "load_start": load,
              "load_end": os.getloadavg()[0], "torch": torch.__version__, "models": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    if args.docs:
        before = json.loads(args.compare.read_text()) if args.compare else None
        write_page(args.docs, "The operator contract: graph breaks and training-step time (`benchmarks/contract.py`)",
                   " ".join(["python", "benchmarks/contract.py", *(argv if argv is not None else sys.argv[1:])]),
                   table(result, before), f"{machine(torch.device(args.device))}; load {load:.1f} at the start, "
                   f"{result['load_end']:.1f} at the end; torch {torch.__version__}")
    return result


def table(after: dict, before: dict | None = None) -> str:
    """Markdown: graph breaks (one mesh / a batch of 3 meshes) and ms per step, before -> after."""
    def cell(rows, name, key):
        row = (rows or {}).get("models", {}).get(name, {})
        if key == "step":
            return f"{row['step_ms']:.1f}" if "step_ms" in row else "-"
        r = row.get("graph_breaks", {}).get(key, {})
        return str(r.get("breaks", "error" if r else "-"))

    head = ["model", "breaks, one mesh", "breaks, batch of 3 meshes", "ms per step"]
    rows = []
    for name in after["models"]:
        cells = [cell(after, name, k) for k in ("one mesh", "batch of 3 meshes", "step")]
        if before is not None:
            cells = [f"{cell(before, name, k)} → {c}" for k, c in zip(("one mesh", "batch of 3 meshes", "step"), cells)]
        rows.append([name, *cells])
    note = (f"Before: {before['contract']}; after: {after['contract']}." if before else f"Contract: {after['contract']}.")
    return markdown_table(head, rows) + "\n\n" + note


if __name__ == "__main__":
    main()
