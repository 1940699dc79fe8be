"""Darcy data on irregular meshes: the same continuum samples on a mesh and its refinement.

Draws lognormal (or piecewise-constant) coefficients as functions, solves Darcy flow with P1
finite elements on an irregular mesh of the unit square and on its uniform refinement, and checks
that the two discretisations of each sample agree (relative L2 distance, computed with the
fine mesh's quadrature weights). Optionally writes a dataset file and reads it back lazily, and
draws a coefficient with its solution.

Run: ``python examples/darcy_data.py [--n 4] [--family lognormal] [--out fem_data/example.h5]
[--plot darcy.png]``
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import skfem
import torch

from geoattn.data import darcy_samples, preset
from geoattn.data.dataset import DarcyDataset
from geoattn.data.generate import generate_darcy
from geoattn.data.recipe import Recipe
from geoattn.mesh import families
from geoattn.train.loader import batches_of

log = logging.getLogger(__name__)

COARSE = {"family": "unit_square", "n": 32, "kind": "irregular", "seed": 0}
FINE = {**COARSE, "refine": 1}


def main(n: int = 4, family: str = "lognormal", seed: int = 0) -> dict[str, float]:
    """Mean relative L2 distance between the coarse and fine solutions of the same samples."""
    recipe = Recipe(meshes={"coarse": COARSE, "fine": FINE}, n=n, seed=seed, family=family)
    meshes = recipe.load_meshes()
    data = darcy_samples(meshes, n, seed, family, field=recipe.field(), dtype=torch.float64)
    coarse = skfem.Basis(families.to_skfem(meshes["coarse"]), skfem.ElementTriP1())
    to_fine = coarse.probes(meshes["fine"].points[:, :2].T)  # P1 interpolation [N_fine, N_coarse]
    dists = []
    for c, f in zip(data["coarse"], data["fine"]):
        w, u = f.weight.numpy(), f.y[:, 0].numpy()
        e = to_fine @ c.y[:, 0].numpy() - u
        dists.append(np.sqrt(np.sum(w * e**2) / np.sum(w * u**2)))
        log.info("sample: coarse %d nodes, fine %d nodes, relative L2 distance %.2e",
                 c.num_nodes, f.num_nodes, dists[-1])
    return {"cross_mesh_rel_l2": float(np.mean(dists))}


def write_and_read(out: Path, n: int, family: str) -> None:
    recipe = Recipe(meshes={"coarse": COARSE, "fine": FINE}, n=n, seed=0, family=family)
    generate_darcy(out, recipe)
    batch = batches_of(DarcyDataset(out, mesh="fine"), range(min(n, 4)))  # fields and their Mesh
    log.info("read back a batch of %d samples, %d nodes in all", batch.num_graphs, batch.mesh.num_nodes)


def plot(path: Path, family: str = "piecewise", seed: int = 0) -> None:
    """Draw one coefficient and its solution on the irregular mesh."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.tri import Triangulation

    mesh = families.unit_square(24, "irregular", seed=seed)
    sample = darcy_samples({"m": mesh}, 1, seed, family, field=preset("cao"))["m"][0]
    tri = Triangulation(sample.pos[:, 0], sample.pos[:, 1], sample.cells.numpy())
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), constrained_layout=True)
    for ax, values, title in zip(axes, (sample.x, sample.y), ("coefficient a", "solution u")):
        im = ax.tripcolor(tri, values[:, 0].numpy(), shading="gouraud", cmap="viridis")
        ax.triplot(tri, color="white", linewidth=0.2, alpha=0.6)
        ax.set_title(f"{title} ({family}, {sample.num_nodes} nodes)")
        ax.set_aspect("equal")
        ax.set_axis_off()
        fig.colorbar(im, ax=ax, shrink=0.85)
    fig.savefig(path, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("skfem").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--family", default="lognormal", choices=["lognormal", "piecewise"])
    parser.add_argument("--out", type=Path, help="also write a dataset file and read it back")
    parser.add_argument("--plot", type=Path, help="save a picture of a coefficient and its solution")
    args = parser.parse_args()
    result = main(args.n, args.family)
    log.info("mean relative L2 distance coarse vs fine: %.2e", result["cross_mesh_rel_l2"])
    if args.out:
        write_and_read(args.out, args.n, args.family)
    if args.plot:
        plot(args.plot)
