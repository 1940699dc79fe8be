"""Time and peak memory of refining a tetrahedral mesh, and of ``refined_samples`` on it.

    python benchmarks/refinement_3d.py --docs docs/results/refinement_3d.md

The mesh is the tetrahedral unit cube ``unit_cube(n, "tetra")`` (``n = 21``: 10 648 nodes),
refined once to half its longest edge (``factor`` 2). Each measurement runs in a fresh process:

- ``refine_to``: :func:`geoattn.mesh.refinement.refine_to` of the meshio mesh to ``size = L / 2``
  (the refined mesh and the prolongation, in float64);
- ``refined_samples``: :func:`geoattn.data.refined_samples` of ``--samples`` samples sharing the
  mesh (float32, one input and one target channel), which refines the mesh once through
  :meth:`geoattn.mesh.Mesh.refined` and carries every sample's ``x`` and ``y``.

Reported per row: the node counts before and after (and :func:`refined_size`'s estimate, the
figure the memory refusal uses), the seconds, the resident memory before the call and the
process's peak resident memory (``ru_maxrss``) after it: their difference is what the call needed at
most. The page also records the machine and its load (``os.getloadavg()``).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from results_page import add_docs_argument, markdown_table, write_page

HEADER = ["call", "nodes", "refined nodes", "estimate", "seconds", "RSS before (MiB)", "peak RSS (MiB)",
          "peak - before (MiB)"]


def resident_mib() -> float:
    """This process's resident memory now, in MiB (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    """This process's peak resident memory so far, in MiB (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(call: str, n: int, samples: int) -> dict:
    """One measurement, in this process: ``call`` on the cube with ``n`` cells a side."""
    from geoattn.data import refined_samples
    from geoattn.mesh import families, from_meshio
    from geoattn.mesh.refinement import longest_edges, refine_to, refined_size

    torch.set_num_threads(1)

    mesh = families.unit_cube(n, "tetra")
    size = float(longest_edges(mesh.points, mesh.cells[-1].data).max()) / 2
    out = {"nodes": len(mesh.points), "estimate": refined_size(mesh.points, mesh.cells[-1].data, size)}
    if call == "refine_to":
        out["before"] = resident_mib()
        tic = time.perf_counter()
        fine, _ = refine_to(mesh, size)
        out["seconds"] = time.perf_counter() - tic
        out["refined"] = len(fine.points)
    else:
        base = from_meshio(mesh, dtype=torch.float32)
        data = []
        for k in range(samples):
            d = base.clone()
            d.x = torch.sin((k + 1) * base.pos[:, :1]) * base.pos[:, 1:2]
            d.y = d.x * base.pos[:, 2:]
            data.append(d)
        out["before"] = resident_mib()
        tic = time.perf_counter()
        fine = refined_samples(data, 2.0)
        out["seconds"] = time.perf_counter() - tic
        out["refined"] = fine[0].num_nodes
    out["peak"] = peak_mib()
    return out


def measure(call: str, n: int, samples: int) -> dict:
    """:func:`run` in a fresh (spawned) interpreter, so that its peak is its own; its result, or
    its error in one line."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(run, call, n, samples).result()
        except Exception as err:  # noqa: BLE001 - reported as the row's failure
            return {"error": f"{type(err).__name__}: {' '.join(str(err).split())}"}


def row(call: str, r: dict) -> list:
    if "error" in r:
        return [call, "", "", "", r["error"], "", "", ""]
    return [f"`{call}`", r["nodes"], r["refined"], r["estimate"], f"{r['seconds']:.2f}", f"{r['before']:.0f}",
            f"{r['peak']:.0f}", f"{r['peak'] - r['before']:.0f}"]


def _load(averages) -> str:
    return "/".join(f"{v:.2f}" for v in averages)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=21, help="cells per cube side (21: 10 648 nodes)")
    parser.add_argument("--samples", type=int, default=8, help="samples on the mesh for refined_samples")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    results = {call: measure(call, args.n, args.samples) for call in ("refine_to", "refined_samples")}
    table = markdown_table(HEADER, [row(call, r) for call, r in results.items()])
    print(table)
    if args.docs:
        parts = [f"{os.cpu_count()} CPU cores ({platform.machine()})", f"Python {platform.python_version()}",
                 f"torch {torch.__version__}", "one thread per run",
                 f"load average (1, 5, 15 min) {_load(load_before)} before and {_load(os.getloadavg())} after",
                 datetime.date.today().isoformat()]
        machine = "; ".join(parts)
        notes = (f"The tetrahedral unit cube with {args.n} cells a side, refined once to half its longest edge "
                 f"(`refine_to(mesh, L / 2)`, and `refined_samples(samples, 2.0)` of {args.samples} float32 "
                 "samples sharing the mesh), each in a fresh process. *estimate* is `refined_size`, the node "
                 "count the memory refusal (`TooLargeError`) reads; *peak - before* is the most the call held "
                 "beyond what the process held before it.")
        argv_text = " ".join(sys.argv[1:] if argv is None else argv)
        write_page(args.docs, "Refining a tetrahedral mesh: time and peak memory (`benchmarks/refinement_3d.py`)",
                   f"python benchmarks/refinement_3d.py {argv_text}", table, machine, notes=notes)
    return results


if __name__ == "__main__":
    main()
