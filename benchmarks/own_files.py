"""Own simulation files end to end: import, train and evaluate through the ``geoattn`` command, on
plates with holes, on closed surfaces, and the import's throughput.

    python benchmarks/own_files.py --scale tiny
    python benchmarks/own_files.py --scale cpu --out own_files_out --docs docs/results/own_files.md

Three parts, each through :func:`geoattn.cli.main.main` as a user would type the commands:

- **plates**: the heat problem of ``examples/own_files.py`` (the unit square minus two discs of
  radius 0.12, conductivity ``kappa`` lognormal, a global ``load``; T = 0 on every edge), one
  file per sample, every sample on its own gmsh mesh with its own hole positions (the scikit-fem
  fallback mesher without gmsh). ``geoattn import`` splits the training files 0.9 / 0.1 into
  ``train`` / ``val`` and makes three test sets: ``remeshed`` (hole positions of training
  samples, meshed again at 0.75 of the edge: a held-out mesh of a seen geometry, new
  coefficients), ``new_positions`` (two holes at positions no training file has) and
  ``three_holes`` (another layout). Each model trains with ``geoattn train`` and is scored with
  ``geoattn evaluate``.
- **surfaces**: a field on closed surfaces in 3-D, the unit sphere and the ellipsoid with
  semi-axes (1.3, 1, 0.7); every mesh an icosphere (:func:`geoattn.mesh.families.icosphere`)
  turned by a random rotation, then scaled onto the surface, so every sample has its own mesh of
  one of the two surfaces. The input is a random smooth function ``g`` of the ambient
  coordinates, the target the surface integral
  :math:`u(x) = \\int_S e^{-|x - y|^2 / (2 \\sigma^2)} g(y)\\, dS(y)`, :math:`\\sigma = 0.3`,
  computed on an icosphere of level 5 (10 242 nodes) of the same surface, so that the target is
  the continuum one on every mesh. Training meshes are of level 3 (642 nodes); the test sets are
  new samples on level 2 (``coarse``, 162 nodes), level 3 (``same_level``) and level 4
  (``fine``, 2 562 nodes) meshes.
- **throughput**: ``geoattn import`` of ``--files`` ``.vtu`` files of about ``--nodes`` nodes
  each (jittered triangulations of the square, a different mesh per file, one input and one
  target field), timed alone (the files are written first); files/s and MB/s of input read.

``--docs PATH`` writes the tables as a results page (``docs/results/own_files.md``).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import meshio
import numpy as np
import torch

from geoattn.cli.main import main as geoattn
from geoattn.mesh.families import icosphere, unit_square
from results_page import add_docs_argument, render_page, write_page

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("own_files")

_spec = importlib.util.spec_from_file_location("own_files_example", ROOT / "examples" / "own_files.py")
example = importlib.util.module_from_spec(_spec)  # the plate, its holes and the solver of the example
_spec.loader.exec_module(example)


@dataclass
class Scale:
    plates: int          # training files (split 0.9 / 0.1 into train / val)
    plate_test: int      # files per plate test set
    h: float             # training mesh edge
    surfaces: int
    surface_test: int
    epochs: int
    width: int
    files: int           # throughput: files imported
    nodes: int           # throughput: nodes per file


SCALES = {
    "tiny": Scale(plates=12, plate_test=2, h=0.15, surfaces=8, surface_test=2, epochs=2, width=8,
                  files=10, nodes=400),
    "cpu": Scale(plates=200, plate_test=20, h=0.07, surfaces=120, surface_test=10, epochs=40, width=32,
                 files=1000, nodes=5000),
}
SURFACES = {"sphere": (1.0, 1.0, 1.0), "ellipsoid": (1.3, 1.0, 0.7)}
SIGMA = 0.3


def run_cli(argv: list[str]) -> float:
    """Run ``geoattn ARGV``; the seconds it took (an error raises)."""
    log.info("$ geoattn %s", " ".join(argv))
    start = time.perf_counter()
    if geoattn(argv) != 0:
        raise RuntimeError(f"geoattn {' '.join(argv)} failed (its message is above)")
    return time.perf_counter() - start


def read_sets(path: Path) -> dict[str, dict]:
    """The rows of a ``sets.csv`` of ``geoattn evaluate``, by set name."""
    with open(path, newline="") as fh:
        return {row["set"]: row for row in csv.DictReader(fh)}


def train_and_score(folder: Path, data: Path, models: list[str], scale: Scale) -> dict[str, dict]:
    """``geoattn train`` each model on ``data``, ``geoattn evaluate`` it on the test sets (and val)."""
    results = {}
    for model in models:
        run = folder / f"run_{model}"
        seconds = run_cli(["train", str(data), "--model", model, "--width", str(scale.width),
                           "--epochs", str(scale.epochs), "--out", str(run), "--no-progress", "--overwrite"])
        sets = ",".join(["val", *test_sets(data)])
        run_cli(["evaluate", str(run / "best.pt"), str(data), "--sets", sets, "--out", str(run)])
        results[model] = {"train_s": seconds, "sets": read_sets(run / "sets.csv")}
    return results


def test_sets(data: Path) -> list[str]:
    from geoattn.data import MeshDataset

    return MeshDataset(data).test_sets


def write_plates(folder: Path, scale: Scale, mesher: str, seed: int = 0) -> None:
    """``folder``: ``plate_*`` (training), ``remeshed_*``, ``newpos_*``, ``three_*`` and ``params.csv``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    layouts = [example.holes(rng, 2, 0.12) for _ in range(scale.plates)]
    plan = [(f"plate_{i}", discs, scale.h * rng.uniform(0.85, 1.15)) for i, discs in enumerate(layouts)]
    plan += [(f"remeshed_{j}", layouts[j], 0.75 * scale.h) for j in range(scale.plate_test)]
    plan += [(f"newpos_{j}", example.holes(rng, 2, 0.12), scale.h) for j in range(scale.plate_test)]
    plan += [(f"three_{j}", example.holes(rng, 3, 0.12), scale.h) for j in range(scale.plate_test)]
    rows = []
    for index, (name, discs, h) in enumerate(plan):
        load = float(rng.uniform(0.5, 2.0))
        mesh = example.plate(discs, h, mesher, seed=index)
        meshio.write(folder / f"{name}.vtu", example.simulate(mesh, index, load, seed))
        rows.append((f"{name}.vtu", f"{load:.6g}"))
    with open(folder / "params.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([("file", "load"), *rows])


def rotation(rng: np.random.Generator) -> np.ndarray:
    """A uniformly random rotation of 3-D space (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def surface_mesh(axes, level: int, rng: np.random.Generator | None) -> meshio.Mesh:
    """An icosphere of ``level``, turned by a random rotation (none for ``rng=None``), scaled by ``axes``."""
    sphere = icosphere(level)
    turn = np.eye(3) if rng is None else rotation(rng)
    return meshio.Mesh(sphere.points @ turn.T * np.asarray(axes), sphere.cells)


def lumped_area(mesh: meshio.Mesh) -> np.ndarray:
    """Lumped P1 area weights of a triangulated surface ``[N]``."""
    tri = mesh.cells_dict["triangle"]
    p = mesh.points
    area = 0.5 * np.linalg.norm(np.cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]]), axis=1)
    return np.bincount(tri.ravel(), np.repeat(area / 3, 3), minlength=len(p))


class SmoothField:
    """:math:`g(x) = \\sum_k c_k \\sin(\\omega_k \\cdot x + \\varphi_k)`, 6 random waves of |ω| about 2."""

    def __init__(self, rng: np.random.Generator):
        self.omega = rng.standard_normal((6, 3)) * 1.5
        self.phase = rng.uniform(0, 2 * np.pi, 6)
        self.c = rng.standard_normal(6) / np.sqrt(6)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.sin(x @ self.omega.T + self.phase) @ self.c


def surface_integral(points: np.ndarray, fine: meshio.Mesh, weight: np.ndarray, g: np.ndarray) -> np.ndarray:
    """:math:`u(x_i) = \\sum_j w_j e^{-|x_i - y_j|^2 / (2\\sigma^2)} g(y_j)` over the fine mesh."""
    out = np.empty(len(points))
    for start in range(0, len(points), 512):
        x = points[start:start + 512]
        d2 = ((x[:, None, :] - fine.points[None, :, :]) ** 2).sum(-1)  # [B, M]
        out[start:start + 512] = np.exp(-d2 / (2 * SIGMA**2)) @ (weight * g)
    return out


def write_surfaces(folder: Path, scale: Scale, seed: int = 0) -> None:
    """``folder``: ``train_*`` (level 3), ``coarse_*`` (2), ``same_*`` (3), ``fine_*`` (4) files."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    fine = {name: surface_mesh(axes, 5, None) for name, axes in SURFACES.items()}
    weights = {name: lumped_area(m) for name, m in fine.items()}
    plan = [(f"train_{i}", 3) for i in range(scale.surfaces)]
    plan += [(f"{kind}_{j}", level) for kind, level in (("coarse", 2), ("same", 3), ("fine", 4))
             for j in range(scale.surface_test)]
    for index, (name, level) in enumerate(plan):
        shape = list(SURFACES)[index % len(SURFACES)]
        mesh = surface_mesh(SURFACES[shape], level, rng)
        g = SmoothField(rng)
        u = surface_integral(mesh.points, fine[shape], weights[shape], g(fine[shape].points))
        meshio.write(folder / f"{name}.vtu", meshio.Mesh(mesh.points, mesh.cells,
                                                         point_data={"g": g(mesh.points), "u": u}))


def write_throughput_files(folder: Path, files: int, nodes: int, seed: int = 0) -> int:
    """``files`` jittered triangulations of the square with about ``nodes`` nodes; their bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    n = max(2, round(np.sqrt(nodes)) - 1)
    for i in range(files):
        mesh = unit_square(n, "irregular", seed=seed + i)
        x, y = mesh.points[:, 0], mesh.points[:, 1]
        points = np.pad(mesh.points, ((0, 0), (0, 1)))  # [N, 3]
        meshio.write(folder / f"f{i:05d}.vtu", meshio.Mesh(points, mesh.cells, point_data={
            "a": np.exp(np.sin(3 * x + i) * np.cos(2 * y)), "u": x * (1 - x) * y * (1 - y)}))
    return sum(p.stat().st_size for p in folder.glob("*.vtu"))


def throughput(folder: Path, scale: Scale) -> dict:
    files = folder / "files"
    size = write_throughput_files(files, scale.files, scale.nodes)
    nodes = len(meshio.read(files / "f00000.vtu").points)
    seconds = run_cli(["import", str(files), "--x", "a", "--y", "u", "--out", str(folder / "t.h5"),
                       "--no-progress", "--overwrite"])
    return {"files": scale.files, "nodes": nodes, "input_MB": size / 1e6, "seconds": seconds,
            "files_per_s": scale.files / seconds, "MB_per_s": size / 1e6 / seconds,
            "output_MB": (folder / "t.h5").stat().st_size / 1e6}


def run(scale: Scale, models: list[str], out: Path, mesher: str, parts: list[str]) -> dict:
    results: dict = {"scale": asdict(scale), "models": models, "mesher": mesher, "threads": torch.get_num_threads()}
    if "plates" in parts:
        start = time.perf_counter()
        write_plates(out / "plates", scale, mesher)
        results["plates_files_s"] = time.perf_counter() - start
        data = out / "plates.h5"
        results["plates_import_s"] = run_cli([
            "import", str(out / "plates"), "--x", "kappa", "--y", "T", "--params", "load", "--out", str(data),
            "--test", "remeshed=remeshed_*", "--test", "new_positions=newpos_*", "--test", "three_holes=three_*",
            "--split", "0.9,0.1", "--no-progress", "--overwrite"])
        results["plates"] = train_and_score(out / "plates_runs", data, models, scale)
    if "surfaces" in parts:
        start = time.perf_counter()
        write_surfaces(out / "surfaces", scale)
        results["surfaces_files_s"] = time.perf_counter() - start
        data = out / "surfaces.h5"
        results["surfaces_import_s"] = run_cli([
            "import", str(out / "surfaces"), "--x", "g", "--y", "u", "--out", str(data),
            "--test", "coarse=coarse_*", "--test", "same_level=same_*", "--test", "fine=fine_*",
            "--split", "0.9,0.1", "--no-progress", "--overwrite"])
        results["surfaces"] = train_and_score(out / "surfaces_runs", data, models, scale)
    if "throughput" in parts:
        results["throughput"] = throughput(out / "throughput", scale)
    return results


def markdown(results: dict) -> str:
    """The tables of a run (the body of its results page), under a line of its settings."""
    scale = results["scale"]
    lines = [f"Mesher: {results['mesher']}; {scale['epochs']} epochs, width {scale['width']}; relative L2(D) "
             "error, mean over the set.", ""]
    for part, title in (("plates", f"Plates with holes: {scale['plates']} files, each its own mesh and hole positions"),
                        ("surfaces", f"Closed surfaces: {scale['surfaces']} files on spheres and ellipsoids")):
        if part not in results:
            continue
        lines += [f"## {title}", "",
                  f"Files written in {results[part + '_files_s']:.0f} s, imported in "
                  f"{results[part + '_import_s']:.1f} s.", "",
                  "| model | train s | " + " | ".join(
                      f"{name} ({row['samples']}, {row['min_nodes']}-{row['max_nodes']} nodes)"
                      for name, row in next(iter(results[part].values()))["sets"].items()) + " |",
                  "|---|---|" + "---|" * len(next(iter(results[part].values()))["sets"])]
        for model, r in results[part].items():
            lines.append(f"| {model} | {r['train_s']:.0f} | "
                         + " | ".join(f"{float(row['mean']):.4f}" for row in r["sets"].values()) + " |")
        lines.append("")
    if "throughput" in results:
        t = results["throughput"]
        lines += ["## Import throughput", "",
                  "| files | nodes per file | input MB | import s | files/s | MB/s | output MB |",
                  "|---|---|---|---|---|---|---|",
                  f"| {t['files']} | {t['nodes']} | {t['input_MB']:.0f} | {t['seconds']:.1f} | "
                  f"{t['files_per_s']:.1f} | {t['MB_per_s']:.1f} | {t['output_MB']:.0f} |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="tiny")
    parser.add_argument("--models", default="tno", help="comma-separated model names (default: %(default)s)")
    parser.add_argument("--epochs", type=int, help="override the scale's epochs")
    parser.add_argument("--parts", default="plates,surfaces,throughput")
    parser.add_argument("--mesher", choices=["gmsh", "families"],
                        help="default: gmsh when installed, else families")
    parser.add_argument("--out", type=Path, help="work folder, results.json (default: a temporary folder)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    scale = SCALES[args.scale]
    if args.epochs is not None:
        scale = replace(scale, epochs=args.epochs)
    mesher = args.mesher or ("gmsh" if importlib.util.find_spec("gmsh") else "families")
    models, parts = args.models.split(","), args.parts.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        results = run(scale, models, out, mesher, parts)
        (out / "results.json").write_text(json.dumps(results, indent=2))
    given = list(sys.argv[1:] if argv is None else argv)
    # the page names the output folder, not where it lay on the machine that ran it
    given = [Path(a).name if i and given[i - 1] == "--out" else a for i, a in enumerate(given)]
    command = " ".join(["python", "benchmarks/own_files.py", *given])
    title = "Own simulation files (`benchmarks/own_files.py`)"
    machine = f"CPU, {results['threads']} torch thread{'s' if results['threads'] > 1 else ''}"
    page = render_page(title, command, markdown(results), machine)
    print(page)
    if args.docs:
        write_page(args.docs, title, command, markdown(results), machine)
    return results


if __name__ == "__main__":
    main()
