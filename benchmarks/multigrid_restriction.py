"""Time and peak memory of building the multigrid's restriction (``geoattn.models.multigrid.restriction``)
on 2-D and 3-D meshes, each case in a fresh process under an address-space limit.

    python benchmarks/multigrid_restriction.py [--cases 2d-4225/64 3d-2197/12 ...] [--limit-gb 8]

Prints one row per case: nodes, cells, first grid, seconds, the process's peak resident memory
above what it held before the build (``resource.getrusage``), the entries kept and their bytes,
or the error that stopped the build. Run it against another checkout with ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

#: name -> (mesh, grid cells per axis); 2-D meshes of the unit square, 3-D of the unit cube (tetrahedra)
CASES = {
    "2d-4225/16": ("square", 64, 16),
    "2d-4225/64": ("square", 64, 64),
    "3d-2197/12": ("cube", 12, 12),
    "3d-10648/12": ("cube", 21, 12),
    "3d-10648/24": ("cube", 21, 24),
}


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        line = next(line for line in fh if line.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


def run_case(name: str) -> dict:
    """Build the restriction of case ``name`` once (in this process) and measure it."""
    import torch

    from geoattn.mesh import families, from_meshio
    from geoattn.models.multigrid import restriction

    torch.set_num_threads(1)
    kind, n, grid = CASES[name]
    mesh = families.unit_square(n, "irregular", seed=1) if kind == "square" else families.unit_cube(n)
    d = from_meshio(mesh, dtype=torch.float64)
    dim = d.pos.shape[1]
    box = torch.tensor([[0.0] * dim, [1.0] * dim], dtype=torch.float64)
    row = {"case": name, "nodes": len(d.pos), "cells": len(d.cells), "grid": grid}
    before = _rss_mib()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    try:
        op = restriction(d.pos, d.weight, d.cells, box, (grid,) * dim)
    except (MemoryError, RuntimeError) as err:
        row.update(seconds=time.perf_counter() - start, error=f"{type(err).__name__}: {str(err)[:160]}")
    else:
        row.update(seconds=time.perf_counter() - start, entries=len(op.values),
                   kept_mib=sum(t.numel() * t.element_size() for t in (op.rows, op.cols, op.values, op.total)) / 2**20)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row["peak_mib"] = max(peak, peak_before) - before
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--limit-gb", type=float, default=8.0, help="address-space limit of each case (default 8)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        limit = int(args.limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        print(json.dumps(run_case(args.one)))
        return
    print(f"| case | nodes | cells | grid | seconds | peak MiB | entries kept | kept MiB |  (limit {args.limit_gb:g} GB)")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.cases:
        done = subprocess.run([sys.executable, __file__, "--one", name, "--limit-gb", str(args.limit_gb)],
                              capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        if done.returncode or not lines:
            print(f"| {name} | | | | | | failed: rc {done.returncode} {done.stderr.strip().splitlines()[-1:]} | |")
            continue
        r = json.loads(lines[-1])
        kept = (f"{r['entries']} | {r['kept_mib']:.1f}" if "entries" in r else f"{r['error']} |")
        print(f"| {name} | {r['nodes']} | {r['cells']} | {r['grid']} | {r['seconds']:.2f} | {r['peak_mib']:.0f} | {kept} |")


if __name__ == "__main__":
    main()
