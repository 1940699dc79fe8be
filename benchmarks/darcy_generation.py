"""Darcy data generation speed: samples per second on a ~4k-node irregular mesh.

    python benchmarks/darcy_generation.py --n 200

Measures (1) the solver alone in this process (GRF evaluation at the quadrature points and the
nodes, assembly, sparse LU, solve) and (2) full generation into an HDF5 file with 1 process and
with every core, including process start-up and writing. Each process uses one BLAS thread.

    python benchmarks/darcy_generation.py --factorisation

times instead the sparse LU of one stiffness matrix on the same mesh refined 0 to 3 times, with the
interior nodes in the solver's order (reverse Cuthill-McKee, then SuperLU's minimum degree) and in
the mesh's own numbering (minimum degree alone), with the fill of each.
"""

from __future__ import annotations

import os

# One BLAS thread per process: parallelism comes from processes (set before numpy loads).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy.sparse.linalg import splu  # noqa: E402

from geoattn.data.darcy import FAMILIES, DarcyProblem, solve_sample  # noqa: E402
from geoattn.data.generate import generate_darcy  # noqa: E402
from geoattn.data.recipe import Recipe  # noqa: E402
from results_page import add_docs_argument, markdown_table, write_page  # noqa: E402

MESH = {"family": "unit_square", "n": 32, "kind": "irregular", "seed": 0, "refine": 1}


def _factor(matrix) -> tuple[float, int]:
    """CPU seconds of the solver's sparse LU of ``matrix`` (best of three) and its fill."""
    best = float("inf")
    for _ in range(3):
        cpu = time.process_time()
        lu = splu(matrix, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True})
        best = min(best, time.process_time() - cpu)
    return best, lu.L.nnz + lu.U.nnz


def factorisation(family: str, refinements=range(4), natural_up_to: int = 40_000) -> list[dict]:
    """The LU of one stiffness matrix per refinement of the benchmark mesh, in the solver's order
    of the interior nodes and in sorted order (skipped above ``natural_up_to`` unknowns)."""
    rows = []
    for refine in refinements:
        recipe = Recipe(meshes={"mesh": {**MESH, "refine": refine}}, n=1, seed=0, family=family)
        problem = DarcyProblem(recipe.load_meshes()["mesh"])
        matrix = problem.stiffness(FAMILIES[family](recipe.field().sample(0, 0)))
        order = np.argsort(problem.interior)  # the mesh's own numbering of the interior nodes
        row = {"nodes": len(problem.nodes), "unknowns": matrix.shape[0]}
        row["rcm_s"], row["rcm_fill"] = _factor(matrix)
        if matrix.shape[0] <= natural_up_to:
            row["sorted_s"], row["sorted_fill"] = _factor(matrix.tocsr()[order][:, order].tocsc())
        rows.append(row)
        print(f"- {row['nodes']} nodes ({row['unknowns']} unknowns): LU {1e3 * row['rcm_s']:.1f} ms, fill "
              f"{row['rcm_fill']:,} in the solver's order; "
              + (f"{1e3 * row['sorted_s']:.1f} ms, fill {row['sorted_fill']:,} in the mesh's numbering"
                 if "sorted_s" in row else "the mesh's numbering skipped (too slow)"), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="samples per measurement")
    parser.add_argument("--family", default="piecewise", choices=["piecewise", "lognormal"])
    parser.add_argument("--factorisation", action="store_true",
                        help="time the sparse LU on the mesh refined 0-3 times, in the solver's order of the "
                             "interior nodes and in the mesh's numbering")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    cores = os.cpu_count() or 1
    machine = f"{platform.processor() or platform.machine()}, {cores} cores, Python {platform.python_version()}"

    def page(table: str, notes: str) -> None:
        if args.docs:
            write_page(args.docs, "Darcy data generation (`benchmarks/darcy_generation.py`)",
                       " ".join(["python", "benchmarks/darcy_generation.py", *(sys.argv[1:] if argv is None else argv)]),
                       table, f"{machine}, load average {load[0]:.1f} (1 min) before the run; "
                              f"recorded {time.strftime('%Y-%m-%d')}", notes)

    if args.factorisation:
        print(f"sparse LU (CPU time, best of 3), {args.family}, load average {os.getloadavg()[0]:.1f} (1 min):")
        rows = factorisation(args.family)
        page(markdown_table(["nodes", "unknowns", "LU ms (solver's order)", "its fill", "LU ms (mesh's numbering)", "its fill"],
                            [[r["nodes"], r["unknowns"], f"{1e3 * r['rcm_s']:.1f}", f"{r['rcm_fill']:,}",
                              f"{1e3 * r['sorted_s']:.1f}" if "sorted_s" in r else "skipped",
                              f"{r['sorted_fill']:,}" if "sorted_s" in r else "-"] for r in rows]),
             f"Sparse LU of one stiffness matrix ({args.family}), CPU time, best of 3.")
        return
    recipe = Recipe(meshes={"mesh": MESH}, n=args.n, seed=0, family=args.family)
    meshes = recipe.load_meshes()
    problems = {"mesh": DarcyProblem(meshes["mesh"])}
    field = recipe.field()
    nodes, cells = len(meshes["mesh"].points), len(meshes["mesh"].cells[-1].data)

    t, cpu = time.perf_counter(), time.process_time()
    for i in range(args.n):
        solve_sample(problems, field, 0, i, args.family)
    solver = args.n / (time.perf_counter() - t)
    cpu_per_sample = (time.process_time() - cpu) / args.n

    rows = [("solver only, 1 process", solver)]
    with tempfile.TemporaryDirectory() as tmp:
        for workers in sorted({1, cores}):
            out = Path(tmp) / f"w{workers}.h5"
            t = time.perf_counter()
            generate_darcy(out, recipe, workers=workers, progress=False, xdmf=False)
            rows.append((f"generate to HDF5, {workers} process(es)", args.n / (time.perf_counter() - t)))

    print(f"mesh: irregular unit square, {nodes} nodes, {cells} triangles; {args.family}; "
          f"GRF modes {field.modes}; {args.n} samples")
    print(f"machine: {machine}")
    print(f"load average before the run: {load[0]:.1f} (1 min)")
    print(f"- solver CPU time: {1e3 * cpu_per_sample:.1f} ms per sample "
          f"(= {1 / cpu_per_sample:.1f} samples/s per fully available core)")
    for label, rate in rows:
        print(f"- {label}: {rate:.1f} samples/s (wall clock)")
    page(markdown_table(["measurement", "samples/s (wall clock)"], [[label, f"{rate:.1f}"] for label, rate in rows]),
         f"Irregular unit square, {nodes} nodes, {cells} triangles; {args.family}; GRF modes {field.modes}; "
         f"{args.n} samples. Solver CPU time {1e3 * cpu_per_sample:.1f} ms per sample.")


if __name__ == "__main__":
    main()
