"""Time to build radius and kNN graphs (and METIS / RCB partitions) on large point clouds.

The radius is chosen so that a ball holds about ``--neighbors`` nodes on average in the unit
square. Reports the best of ``--repeat`` runs, in seconds, as JSON.

Usage::

    python benchmarks/neighbors.py [--nodes 100000] [--neighbors 32] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import math

import torch
from timing import best_time

from geoattn.mesh import knn_graph, partition, radius, radius_graph

CPU = torch.device("cpu")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--neighbors", type=int, default=32)
    parser.add_argument("--parts", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(args.nodes, 2, generator=gen)
    weight = torch.full((args.nodes,), 1.0 / args.nodes)
    r = math.sqrt(args.neighbors / (math.pi * args.nodes))
    report = {"nodes": args.nodes, "radius": r}
    t = best_time(lambda: radius_graph(pos, r), CPU, args.repeat, warmup=False)
    report.update(radius_graph_s=t, radius_graph_edges=radius_graph(pos, r).shape[1])
    half = pos[: args.nodes // 2]
    t = best_time(lambda: radius(pos, half, r), CPU, args.repeat, warmup=False)
    report.update(radius_bipartite_half_s=t, radius_bipartite_edges=radius(pos, half, r).shape[1])
    report.update(knn_graph_16_s=best_time(lambda: knn_graph(pos, 16), CPU, args.repeat, warmup=False))
    t = best_time(lambda: partition(pos, weight, args.parts, method="rcb"), CPU, 1, warmup=False)
    report.update(rcb_partition_s=t, parts=args.parts)
    t = best_time(lambda: partition(pos, weight, args.parts), CPU, 1, warmup=False)
    report.update(metis_partition_knn_graph_s=t)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
