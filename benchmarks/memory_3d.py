"""Peak memory and step time of every registered model training on tetrahedral meshes.

    python benchmarks/memory_3d.py --threads 1 --also tno:31 --docs docs/results/memory_3d.md

Each (model, mesh) runs in a fresh process, its address space capped at ``--cap`` GiB: the model
is built as ``geoattn train`` builds it (``build_model(name, in_channels=1, out_channels=1,
dim=3)``, every other option at its default, float32), fitted to the mesh (``fit_mesh``), and
takes two training steps (forward, relative L2 loss, backward, AdamW step) on a batch of two
samples on the tetrahedral unit cube ``unit_cube(n, "tetra")`` with its cells (``n = 12``: 2 197
nodes, ``n = 21``: 10 648 nodes). The first step builds the per-mesh structure the model keeps on
the mesh; the second is the steady state. ``--also MODEL:N`` adds rows, e.g. a cube on which a
model refuses to build its dense attention.

Reported per row: the resident memory before the steps (interpreter, torch, mesh, model) and the
process's peak resident memory (``VmHWM``), the seconds of each step, and a failure's one-line
error (an allocation over the cap, a size refusal, a crash).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time

import torch

from results_page import add_docs_argument, markdown_table, write_page

#: cells per side of the cubes measured by default, and their node counts ((n + 1)^3)
SIZES = (12, 21)
GIB = 1 << 30


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmHWM``, ``VmRSS``) in KiB (0 where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if field == "VmHWM" else 0


def cube_batch(n: int, samples: int = 2):
    """A batch of ``samples`` smooth input/target pairs on ``unit_cube(n, "tetra")``: ``(x, y, mesh)``."""
    from geoattn.mesh import Mesh, families

    mesh = Mesh.from_meshio(families.unit_cube(n, "tetra"), dtype=torch.float32)
    batch = Mesh.batch([mesh] * samples)
    p = batch.pos
    phase = torch.repeat_interleave(torch.arange(samples, dtype=p.dtype), torch.tensor(batch.layout.counts))
    x = torch.sin(math.pi * (p[:, :1] + phase[:, None] / samples)) * torch.cos(math.pi * p[:, 1:2])
    y = x * p[:, 2:3] + torch.sin(2 * math.pi * p[:, :1])
    return x, y, mesh, batch


def training_steps(name: str, n: int, steps: int = 2, threads: int = 1, **options) -> dict:
    """Build model ``name`` for 3-D fields (``options`` beyond the defaults) and take ``steps``
    training steps on :func:`cube_batch`; the peak resident memory and the seconds of each step."""
    from geoattn.models import build_model
    from geoattn.train.loss import relative_l2

    torch.set_num_threads(threads)
    x, y, mesh, batch = cube_batch(n)
    torch.manual_seed(0)
    model = build_model(name, in_channels=1, out_channels=1, dim=3, **options)
    model.fit_mesh(mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = {"nodes": mesh.num_nodes, "before_mib": status_kib("VmRSS") / 1024, "seconds": []}
    for _ in range(steps):
        tic = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = relative_l2(model(x, batch), y, batch)
        loss.backward()
        opt.step()
        out["seconds"].append(time.perf_counter() - tic)
    out["peak_mib"] = status_kib("VmHWM") / 1024
    out["loss"] = float(loss)
    return out


def child(name: str, n: int, threads: int, cap_gib: float, steps: int = 2) -> None:
    """One measurement, in this (fresh) process: a JSON line on stdout."""
    cap = int(cap_gib * GIB)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        result = training_steps(name, n, steps, threads=threads)
    except Exception as err:  # noqa: BLE001 - reported as the row's failure
        line = " ".join(str(err).split()) or type(err).__name__
        result = {"error": f"{type(err).__name__}: {line}", "peak_mib": status_kib("VmHWM") / 1024}
    print(json.dumps(result), flush=True)


def measure(name: str, n: int, threads: int, cap_gib: float, timeout: float, steps: int = 2) -> dict:
    """Run :func:`child` in a fresh interpreter; its result, or the way it ended."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, str(n), "--threads", str(threads),
           "--cap", str(cap_gib), "--steps", str(steps)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:g} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return {"error": f"crashed (exit status {proc.returncode}): {tail}"}


def is_refusal(error: str) -> bool:
    """Whether a failure is a model's own refusal of the mesh (a typed geoattn error), not a crash
    or an allocation over the cap."""
    return error.split(":")[0].endswith(("ConfigError", "MeshError", "TooLargeError", "DimensionError"))


def row(name: str, n: int, r: dict) -> list:
    nodes = (n + 1) ** 3
    peak = f"{r['peak_mib']:.0f}" if r.get("peak_mib") else "–"
    if "error" in r:
        state = "refused" if is_refusal(r["error"]) else "failed"
        return [f"`{name}`", nodes, "–", peak, "–", "–", f"{state}: {r['error'][:400].replace('|', '/')}"]
    seconds = [f"{s:.2f}" for s in r["seconds"][:2]]
    seconds += ["–"] * (2 - len(seconds))
    return [f"`{name}`", nodes, f"{r['before_mib']:.0f}", peak, *seconds, "ok"]


def spaced(k: int) -> str:
    """``k`` with its thousands apart: ``10 648``."""
    return f"{k:,}".replace(",", " ")


def summary(results: dict, models: list[str], sizes: list[int], fit_gib: float = 4.0) -> str:
    """One paragraph from the measurements: which models peak under ``fit_gib`` at the largest
    cube, which do not, and how the memory the steps add and the second step's time grow with
    the nodes between the smallest and the largest cube (as a power of the node ratio)."""
    small, large = min(sizes), max(sizes)
    ratio = (large + 1) ** 3 / (small + 1) ** 3
    fit, over, failed, growth = [], [], [], []
    for name in models:
        a, b = results.get(f"{name}/{small}", {}), results.get(f"{name}/{large}", {})
        if "error" in b:
            failed.append(f"`{name}` ({b['error'].split(':')[0]})")
            continue
        (fit if b["peak_mib"] < fit_gib * 1024 else over).append(f"`{name}` ({b['peak_mib'] / 1024:.1f} GiB)")
        if small != large and "error" not in a:
            mem = math.log(max(b["peak_mib"] - b["before_mib"], 1) / max(a["peak_mib"] - a["before_mib"], 1))
            time_ = math.log(b["seconds"][-1] / a["seconds"][-1])
            growth.append(f"`{name}` N^{mem / math.log(ratio):.1f} / N^{time_ / math.log(ratio):.1f}")
    parts = [f"At {spaced((large + 1) ** 3)} nodes (batch of 2), peak resident memory under {fit_gib:g} GiB: "
             + (", ".join(fit) or "none") + "."]
    if over:
        parts.append(f"Over {fit_gib:g} GiB: " + ", ".join(over) + ".")
    if failed:
        parts.append("Failed or refused: " + ", ".join(failed) + ".")
    if growth:
        parts.append(f"Growth from n = {small} to n = {large} cells per side ({ratio:.1f}x the nodes) of the memory the steps add "
                     "and of the second step's time, as powers of the node count: " + ", ".join(growth) + ".")
    for key, r in results.items():
        name, n = key.split("/")
        if int(n) not in sizes and "error" in r:
            state = "refused" if is_refusal(r["error"]) else "failed"
            parts.append(f"At {spaced((int(n) + 1) ** 3)} nodes `{name}` {state} ({r['error'].split(':')[0]}; "
                         "its message is in the table).")
    return " ".join(parts)


HEADER = ["model", "nodes", "before steps: MiB", "peak: MiB", "step 1: s", "step 2: s", "result"]


def main(argv=None) -> dict:
    from geoattn.models import MODELS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=sorted(MODELS))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="cells per cube side")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cap", type=float, default=8.0, help="address-space cap per run, GiB")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--steps", type=int, default=2, help="training steps per run")
    parser.add_argument("--also", nargs="*", default=[], metavar="MODEL:N",
                        help="further rows: MODEL on the cube of N cells per side (e.g. tno:31, where "
                             "dense attention refuses the mesh)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "N"),
                        help="take the steps of MODEL on the cube of N cells per side in this process "
                             "and print the result as one JSON line")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args.threads, args.cap, args.steps)
        return {}
    start_load = "/".join(f"{v:.1f}" for v in os.getloadavg())
    results, rows = {}, []
    runs = [(name, n) for name in args.models for n in args.sizes]
    runs += [(extra.split(":")[0], int(extra.split(":")[1])) for extra in args.also]
    for name, n in runs:
        r = measure(name, n, args.threads, args.cap, args.timeout, args.steps)
        results.setdefault(f"{name}/{n}", r)
        rows.append(row(name, n, r))
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    table = markdown_table(HEADER, rows)
    print(table)
    if args.docs:
        load = "/".join(f"{v:.1f}" for v in os.getloadavg())
        machine = (f"{os.cpu_count()} CPU cores ({platform.machine()}), torch {torch.__version__}, "
                   f"{args.threads} torch thread(s), address space capped at {args.cap:g} GiB per run, "
                   f"load average (1/5/15 min) {start_load} at the start and {load} at the end; "
                   f"{datetime.date.today().isoformat()}")
        argv_text = " ".join(sys.argv[1:] if argv is None else argv)
        write_page(args.docs, "Peak memory of one training step on tetrahedral meshes (`benchmarks/memory_3d.py`)",
                   f"python benchmarks/memory_3d.py {argv_text}", table, machine,
                   notes=summary(results, args.models, args.sizes))
    return results


if __name__ == "__main__":
    main()
