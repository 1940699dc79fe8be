"""NAO on Darcy microstructures: learn g -> p kernels on an irregular mesh, evaluate elsewhere.

Each system is one two-phase (12 / 3) microstructure with d random sources and their solutions;
the model is trained with :func:`geoattn.nao.fit_adam` on an irregular mesh and evaluated,
unchanged, on a refined mesh of the same unseen microstructure.

Run: ``python examples/nao_darcy.py [--n 8] [--tasks 4] [--epochs 5]`` (a few seconds;
``benchmarks/nao.py darcy`` is the longer run recorded in the docs).
"""

from __future__ import annotations

import argparse
import logging

import meshio
import torch

from geoattn.mesh import families, from_meshio
from geoattn.nao import NAO, TokenMesh, fit_adam, microstructure_tasks, operator_error

log = logging.getLogger(__name__)


def systems(mesh: meshio.Mesh, tasks: int, d: int, seed: int):
    """Sources ``g [tasks, N, d]``, solutions ``p`` (times 100) and the :class:`TokenMesh` of
    ``mesh``: one system per microstructure, its ``d`` sources the pairs."""
    data = microstructure_tasks(mesh, range(tasks), sources=d, seed=seed)
    geo = from_meshio(mesh, dtype=torch.float32)
    g = torch.stack([torch.as_tensor(t.g, dtype=torch.float32) for t in data])  # (T, N, d)
    p = torch.stack([torch.as_tensor(t.p, dtype=torch.float32) for t in data]) * 100
    return g, p, TokenMesh.of(geo.pos, geo.weight)


def main(n: int = 8, tasks: int = 4, d: int = 10, epochs: int = 5,
         seed: int = 0) -> dict[str, float]:
    """Returns the test E_f of the unseen microstructure on each mesh, ``{"train", "refined"}``."""
    torch.manual_seed(seed)
    coarse = families.unit_square(n, kind="irregular", seed=1)
    meshes = {"train": coarse, "refined": families.refine(coarse, 1)}
    model = NAO(d, dim=2, head_channels=8)
    errors = {}
    for name, mesh in meshes.items():
        g, p, token_mesh = systems(mesh, tasks + 1, d, seed)  # the last system is the test one
        if name == "train":
            fit_adam(model, g[:tasks], p[:tasks], token_mesh, epochs=epochs, seed=seed)
        with torch.no_grad():
            pred = model.forward_dense(g[tasks:], p[tasks:], token_mesh)
        errors[name] = float(operator_error(pred, p[tasks:], token_mesh.weight).mean())
        log.info("%s mesh (%d nodes): test E_f %.3f", name, g.shape[1], errors[name])
    return errors


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("skfem").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    main(n=args.n, tasks=args.tasks, epochs=args.epochs)
