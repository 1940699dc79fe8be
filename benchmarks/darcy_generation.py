"""Darcy data generation speed: samples per second on a ~4k-node irregular mesh.

    python benchmarks/darcy_generation.py --n 200

Measures (1) the solver alone in this process (GRF evaluation at the quadrature points and the
nodes, assembly, sparse LU, solve) and (2) full generation into an HDF5 file with 1 process and
with every core, including process start-up and writing. Each process uses one BLAS thread.
"""

from __future__ import annotations

import os

# One BLAS thread per process: parallelism comes from processes (set before numpy loads).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from geoattn.data.darcy import DarcyProblem, solve_sample  # noqa: E402
from geoattn.data.generate import generate_darcy  # noqa: E402
from geoattn.data.recipe import Recipe  # noqa: E402

MESH = {"family": "unit_square", "n": 32, "kind": "irregular", "seed": 0, "refine": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="samples per measurement")
    parser.add_argument("--family", default="piecewise", choices=["piecewise", "lognormal"])
    args = parser.parse_args()
    load = os.getloadavg()
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

    cores = os.cpu_count() or 1
    rows = [("solver only, 1 process", solver)]
    with tempfile.TemporaryDirectory() as tmp:
        for workers in sorted({1, cores}):
            out = Path(tmp) / f"w{workers}.h5"
            t = time.perf_counter()
            generate_darcy(out, recipe, workers=workers, progress=False, xdmf=False)
            rows.append((f"generate to HDF5, {workers} process(es)", args.n / (time.perf_counter() - t)))

    print(f"mesh: irregular unit square, {nodes} nodes, {cells} triangles; {args.family}; "
          f"GRF modes {field.modes}; {args.n} samples")
    print(f"machine: {platform.processor() or platform.machine()}, {cores} cores, Python {platform.python_version()}")
    print(f"load average before the run: {load[0]:.1f} (1 min)")
    print(f"- solver CPU time: {1e3 * cpu_per_sample:.1f} ms per sample "
          f"(= {1 / cpu_per_sample:.1f} samples/s per fully available core)")
    for label, rate in rows:
        print(f"- {label}: {rate:.1f} samples/s (wall clock)")


if __name__ == "__main__":
    main()
