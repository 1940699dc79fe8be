"""Time to build radius and kNN graphs (and METIS / RCB partitions) on large point clouds.

The radius is chosen so that a ball holds about ``--neighbors`` nodes on average in the unit
square. Every neighbour-search backend installed here (scipy always; pyg-lib and torch-cluster
when installed, or those named with ``--backends``) builds the same graphs on ``--device`` in one
run, so their speed-ups over scipy are ratios measured side by side; each backend's graphs are
checked equal to scipy's. Reports the best of ``--repeat`` runs, in seconds, as JSON.

Usage::

    python benchmarks/neighbors.py [--nodes 100000] [--neighbors 32] [--repeat 3] [--threads 2]
                                   [--device cpu|cuda] [--backends scipy torch-cluster]
                                   [--no-partitions]
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

from geoattn.mesh import knn_graph, partition, radius, radius_graph
from geoattn.mesh.neighbor_search import available_backends


def graph_times(pos: torch.Tensor, r: float, backend: str, repeat: int) -> tuple[dict, dict]:
    """Best times of the three graph builds through ``backend`` and the graphs themselves."""
    half = pos[: len(pos) // 2]
    builds = {
        "radius_graph": lambda: radius_graph(pos, r, backend=backend),
        "radius_bipartite_half": lambda: radius(pos, half, r, backend=backend),
        "knn_graph_16": lambda: knn_graph(pos, 16, backend=backend),
    }
    graphs = {name: build() for name, build in builds.items()}  # also the warm-up call
    times = {f"{name}_s": best_time(build, pos.device, repeat, warmup=False)
             for name, build in builds.items()}
    return times, graphs


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--neighbors", type=int, default=32)
    parser.add_argument("--parts", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backends", nargs="+", default=None,
                        help="default: every backend installed here")
    parser.add_argument("--no-partitions", action="store_true", help="time the graphs only")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(args.nodes, 2, generator=gen).to(device)
    r = math.sqrt(args.neighbors / (math.pi * args.nodes))
    backends = args.backends or available_backends()
    report = {"nodes": args.nodes, "radius": r, "device": machine(device), "backends": {}}
    reference = None
    for backend in ["scipy"] + [b for b in backends if b != "scipy"]:
        times, graphs = graph_times(pos, r, backend, args.repeat)
        if reference is None:
            reference = graphs
            report.update(radius_graph_edges=graphs["radius_graph"].shape[1],
                          radius_bipartite_edges=graphs["radius_bipartite_half"].shape[1])
        else:
            times["same_graphs_as_scipy"] = all(torch.equal(graphs[k], reference[k]) for k in graphs)
            times["speedup_over_scipy"] = {
                k: round(report["backends"]["scipy"][k] / v, 2) for k, v in times.items()
                if k.endswith("_s")}
        report["backends"][backend] = times
    if not args.no_partitions:
        cpu_pos = pos.cpu()
        weight = torch.full((args.nodes,), 1.0 / args.nodes)
        t = best_time(lambda: partition(cpu_pos, weight, args.parts, method="rcb"), cpu_pos.device, 1,
                      warmup=False)
        report.update(rcb_partition_s=t, parts=args.parts)
        t = best_time(lambda: partition(cpu_pos, weight, args.parts), cpu_pos.device, 1, warmup=False)
        report.update(metis_partition_knn_graph_s=t)
    print(json.dumps(report, indent=2))
    if args.docs:
        builds = [k for k in report["backends"]["scipy"] if k.endswith("_s")]
        table = markdown_table(
            ["backend", *(f"{k[:-2]} s" for k in builds), "same graphs as scipy"],
            [[b, *(f"{t[k]:.4f}" + (f" ({t['speedup_over_scipy'][k]}x)" if "speedup_over_scipy" in t else "")
                   for k in builds), t.get("same_graphs_as_scipy", "")] for b, t in report["backends"].items()])
        notes = (f"{args.nodes} nodes, radius {r:.4g} (about {args.neighbors} neighbours), "
                 f"{report['radius_graph_edges']} edges.")
        if not args.no_partitions:
            notes += (f" Partition into {args.parts} parts: RCB {report['rcb_partition_s']:.3f} s, METIS on the "
                      f"k-NN graph {report['metis_partition_knn_graph_s']:.3f} s.")
        write_page(args.docs, "Neighbour graphs and partitions (`benchmarks/neighbors.py`)",
                   " ".join(["python", "benchmarks/neighbors.py", *(sys.argv[1:] if argv is None else argv)]),
                   table, f"{report['device']}, load average (1 min) {os.getloadavg()[0]:.1f}; "
                          f"recorded {time.strftime('%Y-%m-%d')}", notes)
    return report


if __name__ == "__main__":
    main()
