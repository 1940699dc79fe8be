"""Time SpectralIntegral with dense and finufft transforms, forward and forward + backward.

One graph of ``N`` random nodes in the unit square, ``--channels`` channels in and out,
``--modes`` per dimension in 2-D (``M = (2K + 1)^2``), float32 on the CPU. Prints one row per
``N`` (best of ``--repeat`` runs, seconds), the crossover ``N`` above which finufft is faster
(log-linear interpolation of the time ratio between the measured sizes), and the speed-up at
the largest size timed with both. Dense is skipped above ``--dense-max`` nodes.

With ``--model-step`` it times instead a training step of ``mesh_fno`` on the shape of the CPU
race of ``darcy_compare.py`` (``--graphs`` copies of ``unit_square(--mesh-n, "irregular")``,
width 32, depth 3, ``--modes`` per dimension): process CPU time per step of the forward and
backward pass, and of the AdamW update, torch's default implementation and the fused one that
:class:`geoattn.train.Trainer` uses (mean of ``--repeat`` steps after five warm-up steps).

Usage::

    python benchmarks/spectral.py [--nodes 1000 3000 10000 30000 100000 1000000] [--threads 2]
    python benchmarks/spectral.py --model-step [--mesh-n 24 --graphs 4 --modes 3 --repeat 100]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
from timing import best_time, machine
from results_page import add_docs_argument, markdown_table, write_page

from geoattn.nn import SpectralIntegral

CPU = torch.device("cpu")


def _times(layer, x, pos, weight, repeat):
    forward = best_time(lambda: layer(x, pos, weight), CPU, repeat)

    def step():
        layer(x.requires_grad_(), pos, weight).square().sum().backward()

    return forward, best_time(step, CPU, repeat)


def _cpu_ms(fn, repeat: int) -> float:
    """Mean process CPU time of ``fn`` in milliseconds, after five untimed calls."""
    for _ in range(5):
        fn()
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - start) / repeat * 1e3


def model_step(mesh_n: int, graphs: int, modes: int, repeat: int) -> dict:
    """CPU milliseconds of a ``mesh_fno`` training step on ``graphs`` copies of one mesh."""
    from geoattn.mesh import Mesh, families, from_meshio
    from geoattn.models import build_model

    torch.manual_seed(0)
    data = from_meshio(families.unit_square(mesh_n, "irregular"))
    n = data.pos.shape[0]
    pos, weight = data.pos.repeat(graphs, 1), data.weight.repeat(graphs)
    batch = torch.arange(graphs).repeat_interleave(n)
    x, y = torch.randn(len(pos), 1), torch.randn(len(pos), 1)
    model = build_model("mesh_fno", in_channels=1, out_channels=1, width=32, depth=3, modes=modes)

    mesh = Mesh(pos, weight, batch=batch)

    def backward():
        model.zero_grad()
        ((model(x, mesh) - y).square() * weight[:, None]).sum().backward()

    report = {"nodes": n, "graphs": graphs, "modes": modes,
              "forward_backward_ms": _cpu_ms(backward, repeat)}
    for name, fused in (("adamw_default_ms", None), ("adamw_fused_ms", True)):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
        report[name] = _cpu_ms(optimizer.step, repeat)
    print(json.dumps(report, indent=2))
    return report


def crossover(nodes: list[int], ratio: list[float]) -> float | None:
    """First ``N`` where the dense / finufft time ratio reaches 1 (log-linear between sizes)."""
    for (n0, r0), (n1, r1) in zip(zip(nodes, ratio), zip(nodes[1:], ratio[1:])):
        if r0 < 1 <= r1:
            t = -math.log(r0) / (math.log(r1) - math.log(r0))
            return math.exp(math.log(n0) + t * (math.log(n1) - math.log(n0)))
    return nodes[0] if ratio and ratio[0] >= 1 else None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+",
                        default=[1000, 3000, 10_000, 30_000, 100_000, 1_000_000])
    parser.add_argument("--dense-max", type=int, default=100_000)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--modes", type=int, default=None,
                        help="modes per dimension (default 8; 3 with --model-step)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed runs (default 3; 100 steps with --model-step)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model-step", action="store_true",
                        help="time a mesh_fno training step instead (see the module's docstring)")
    parser.add_argument("--mesh-n", type=int, default=24)
    parser.add_argument("--graphs", type=int, default=4)
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    def page(table: str, notes: str = "") -> None:
        if args.docs:
            write_page(args.docs, "Spectral transforms: dense vs finufft (`benchmarks/spectral.py`)",
                       " ".join(["python", "benchmarks/spectral.py", *(sys.argv[1:] if argv is None else argv)]),
                       table, f"{machine(CPU)}, load average (1 min) {os.getloadavg()[0]:.1f}; "
                              f"recorded {time.strftime('%Y-%m-%d')}", notes)

    if args.model_step:
        report = model_step(args.mesh_n, args.graphs, args.modes or 3, args.repeat or 100)
        page(markdown_table(["quantity", "value"], [[k, f"{v:.3g}" if isinstance(v, float) else v]
                                                    for k, v in report.items()]))
        return report
    args.modes, args.repeat = args.modes or 8, args.repeat or 3
    gen = torch.Generator().manual_seed(0)
    layers = {b: SpectralIntegral(args.channels, args.channels, args.modes, 2, backend=b)
              for b in ("dense", "finufft")}
    layers["finufft"].load_state_dict(layers["dense"].state_dict())
    rows = []
    print(f"{'N':>9} {'dense fwd':>10} {'finufft fwd':>12} {'dense f+b':>10} {'finufft f+b':>12}")
    for n in args.nodes:
        pos = torch.rand(n, 2, generator=gen)
        weight = torch.full((n,), 1.0 / n)
        x = torch.randn(n, args.channels, generator=gen)
        row = {"nodes": n}
        for name, layer in layers.items():
            if name == "dense" and n > args.dense_max:
                continue
            repeat = args.repeat if n <= 100_000 else 1
            row[f"{name}_forward_s"], row[f"{name}_step_s"] = _times(layer, x, pos, weight, repeat)
        rows.append(row)
        cells = [row.get(k) for k in ("dense_forward_s", "finufft_forward_s", "dense_step_s",
                                      "finufft_step_s")]
        print(f"{n:>9} " + " ".join("         -" if c is None else f"{c:10.4f}" for c in cells))
    both = [r for r in rows if "dense_forward_s" in r]
    report = {"channels": args.channels, "modes": args.modes, "threads": args.threads, "rows": rows}
    for kind in ("forward", "step"):
        ratio = [r[f"dense_{kind}_s"] / r[f"finufft_{kind}_s"] for r in both]
        report[f"crossover_nodes_{kind}"] = crossover([r["nodes"] for r in both], ratio)
        report[f"speedup_{kind}_at_{both[-1]['nodes']}"] = ratio[-1]
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=2))
    page(markdown_table(["N", "dense fwd s", "finufft fwd s", "dense f+b s", "finufft f+b s"],
                        [[r["nodes"], *("-" if r.get(k) is None else f"{r[k]:.4f}" for k in
                                        ("dense_forward_s", "finufft_forward_s", "dense_step_s", "finufft_step_s"))]
                         for r in rows]),
         "; ".join(f"{k.replace('_', ' ')}: {'-' if v is None else f'{v:.3g}'}"
                   for k, v in report.items() if k != "rows") + ".")
    return report


if __name__ == "__main__":
    main()
