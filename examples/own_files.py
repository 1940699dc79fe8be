"""Train on your own simulation files, end to end: mesh files from another tool to a prediction in ParaView.

Makes its own "simulation output" first, as an outside tool would: a plate with holes (the unit
square minus discs), meshed by gmsh when it is installed (else by an irregular triangulation of
the square with the holes cut out, ``mesher="families"``), a different mesh in every file, and on
it the heat equation

.. math::
    -\\nabla\\cdot(\\kappa \\nabla T) = \\text{load} \\ \\text{in the plate}, \\qquad T = 0
    \\ \\text{on its edges and the holes' edges},

solved with P1 finite elements (scikit-fem, :class:`geoattn.data.DarcyProblem`) for a lognormal
conductivity ``kappa`` and a global ``load``. Each file ``runs/*.vtu`` holds the point fields
``kappa`` (input) and ``T`` (target); the loads are in ``runs/params.csv``. The training files
have two holes at random positions; two held-out families make the test sets: ``fine_*`` (the
same layouts on finer meshes) and ``three_*`` (another layout: three holes).

Then the four commands of the guide (docs/own_files.rst) run in the work folder, through
:func:`geoattn.cli.main.main`: ``geoattn import``, ``train`` (a mesh FNO by default; ``model``
takes any name of :data:`geoattn.models.MODELS`), ``evaluate`` (one row per test set) and
``predict`` on a new design, written to ``prediction.vtu`` with the prediction as point
field ``T``.

Run: ``python examples/own_files.py [--folder own_files_run] [--epochs 50] [--model mesh_fno]``
(under a minute on one CPU core with the defaults).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import shlex
from pathlib import Path

import meshio
import numpy as np

from geoattn.cli.main import main as geoattn
from geoattn.data import DarcyProblem
from geoattn.data.darcy import coefficient
from geoattn.data.grf import preset
from geoattn.mesh.families import square_with_holes, unit_square

#: the test sets of the import: name and the files they take
TEST_SETS = {"fine": "runs/fine_*", "three": "runs/three_*"}


def commands(epochs: int = 50, width: int = 32, model: str = "mesh_fno") -> list[list[str]]:
    """The ``geoattn`` command lines the example runs in its folder (those of docs/own_files.rst)."""
    tests = [arg for name, files in TEST_SETS.items() for arg in ("--test", f"{name}={files}")]
    return [
        ["import", "runs/", "--x", "kappa", "--y", "T", "--params", "load", "--out", "plate.h5",
         *tests, "--split", "0.9,0.1"],
        ["train", "plate.h5", "--model", model, "--width", str(width), "--epochs", str(epochs), "--out", "run"],
        ["evaluate", "run/best.pt", "plate.h5", "--out", "scores"],
        ["predict", "--checkpoint", "run/best.pt", "--mesh", "new_design.vtu", "--param", "load=2.0",
         "-o", "prediction.vtu"],
    ]


def holes(rng: np.random.Generator, count: int, radius: float) -> list[tuple[float, float, float]]:
    """``count`` discs ``(cx, cy, r)`` at random positions, apart from each other and the edges."""
    found: list[tuple[float, float, float]] = []
    while len(found) < count:
        c = rng.uniform(radius + 0.1, 1 - radius - 0.1, size=2)
        if all(np.hypot(c[0] - x, c[1] - y) > 2 * radius + 0.08 for x, y, _ in found):
            found.append((float(c[0]), float(c[1]), radius))
    return found


def plate(discs: list[tuple[float, float, float]], h: float, mesher: str = "gmsh", seed: int = 0) -> meshio.Mesh:
    """The unit square minus ``discs``, triangles of edge about ``h``: meshed by gmsh, or with
    ``mesher="families"`` an irregular triangulation of the square (:func:`unit_square`, jittered
    by ``seed``) with the triangles whose centroid lies in a disc removed."""
    if mesher == "gmsh":
        return square_with_holes(discs, h)
    if mesher != "families":
        raise ValueError(f"mesher must be 'gmsh' or 'families', got {mesher!r}")
    square = unit_square(round(1 / h), "irregular", seed=seed)
    cells = square.cells_dict["triangle"]
    centroid = square.points[cells].mean(axis=1)  # [M, 2]
    inside = np.zeros(len(cells), dtype=bool)
    for cx, cy, r in discs:
        inside |= np.hypot(centroid[:, 0] - cx, centroid[:, 1] - cy) < r
    cells = cells[~inside]
    used, cells = np.unique(cells, return_inverse=True)
    return meshio.Mesh(square.points[used], [("triangle", cells.reshape(-1, 3))])


def simulate(mesh: meshio.Mesh, index: int, load: float, seed: int = 0) -> meshio.Mesh:
    """``mesh`` with point fields ``kappa`` (lognormal, sample ``index``) and ``T`` (the solution)."""
    kappa = coefficient(preset("cao"), seed, index, "lognormal")
    problem = DarcyProblem(mesh)
    points = np.pad(mesh.points, ((0, 0), (0, 3 - mesh.points.shape[1])))  # [N, 3]: VTU stores 3-D points
    return meshio.Mesh(points, mesh.cells,
                       point_data={"kappa": kappa(problem.nodes), "T": problem.solve(kappa, load)})


def write_files(folder: Path, train: int = 40, test: int = 6, h: float = 0.07, mesher: str = "gmsh",
                seed: int = 0) -> None:
    """``folder/runs/``: ``plate_*`` (two holes), ``fine_*`` (two holes, edge ``h / 2``) and
    ``three_*`` (three holes) files with their loads in ``params.csv``; ``folder/new_design.vtu``."""
    rng = np.random.default_rng(seed)
    runs = folder / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    plan = ([(f"plate_{i}", 2, h * rng.uniform(0.85, 1.15)) for i in range(train)]
            + [(f"fine_{i}", 2, h / 2) for i in range(test)] + [(f"three_{i}", 3, h) for i in range(test)])
    rows = []
    for index, (name, count, size) in enumerate(plan):
        load = float(rng.uniform(0.5, 2.0))
        mesh = plate(holes(rng, count, 0.12), size, mesher, seed=index)
        meshio.write(runs / f"{name}.vtu", simulate(mesh, index, load, seed))
        rows.append((f"{name}.vtu", f"{load:.6g}"))
    with open(runs / "params.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([("file", "load"), *rows])
    design = plate(holes(rng, 2, 0.12), h, mesher, seed=len(plan))  # a plate no file has
    meshio.write(folder / "new_design.vtu", simulate(design, len(plan), 2.0, seed))


def main(folder: str = "own_files_run", train: int = 40, test: int = 6, h: float = 0.07, epochs: int = 50,
         width: int = 32, model: str = "mesh_fno", mesher: str | None = None, seed: int = 0) -> dict[str, float]:
    """Write the files, run the four commands; returns the mean relative L2 error of each test
    set (from ``scores/sets.csv``) and ``"new_design"``, that of the prediction on the new plate."""
    mesher = mesher or ("gmsh" if importlib.util.find_spec("gmsh") else "families")
    folder = Path(folder).resolve()
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty; give a new folder")
    write_files(folder, train, test, h, mesher, seed)
    with contextlib.chdir(folder):
        for argv in commands(epochs, width, model):
            print("$ geoattn " + shlex.join(argv))
            if geoattn(argv) != 0:
                raise RuntimeError(f"geoattn {argv[0]} failed (its message is above)")
    with open(folder / "scores" / "sets.csv", newline="") as fh:
        errors = {row["set"]: float(row["mean"]) for row in csv.DictReader(fh)}
    truth = meshio.read(folder / "new_design.vtu")
    predicted = meshio.read(folder / "prediction.vtu").point_data["T_pred"]  # beside the reference T
    errors["new_design"] = relative_l2(truth, predicted)
    print(f"relative L2 error of prediction.vtu on the new design ({len(truth.points)} nodes): "
          f"{errors['new_design']:.4f}")
    return errors


def relative_l2(mesh: meshio.Mesh, predicted: np.ndarray) -> float:
    """:math:`\\|T_{pred} - T\\|_{L^2} / \\|T\\|_{L^2}` with the lumped P1 weights of ``mesh``."""
    tri = mesh.cells_dict["triangle"]
    a, b, c = (mesh.points[tri[:, k], :2] for k in range(3))
    (ux, uy), (vx, vy) = (b - a).T, (c - a).T
    area = 0.5 * np.abs(ux * vy - uy * vx)
    weight = np.bincount(tri.ravel(), np.repeat(area / 3, 3), minlength=len(mesh.points))
    truth = mesh.point_data["T"]
    return float(np.sqrt(weight @ (predicted - truth) ** 2 / (weight @ truth**2)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="own_files_run")
    parser.add_argument("--train", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--model", default="mesh_fno")
    parser.add_argument("--mesher", choices=["gmsh", "families"])
    args = parser.parse_args()
    main(args.folder, train=args.train, epochs=args.epochs, model=args.model, mesher=args.mesher)
