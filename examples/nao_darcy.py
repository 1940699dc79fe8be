"""NAO on Darcy microstructures: learn g -> p kernels on an irregular mesh, evaluate elsewhere.

Each system is one two-phase (12 / 3) microstructure with d random sources and their solutions;
the model is trained on an irregular mesh and evaluated, unchanged, on a refined mesh of the same
unseen microstructure. See ``benchmarks/nao.py darcy`` for the longer run recorded in the docs.
"""

import logging

import torch

from geoattn.data.microstructure import microstructure_tasks
from geoattn.eval.nao_metrics import operator_error
from geoattn.mesh import families, from_meshio
from geoattn.models import NAO

log = logging.getLogger("nao_darcy")


def main(n=8, tasks=4, d=10, epochs=5, seed=0):
    torch.manual_seed(seed)
    coarse = families.unit_square(n, kind="irregular", seed=1)
    meshes = {"train": coarse, "refined": families.refine(coarse, 1)}
    errors = {}
    model = NAO(d, dim=2, dk=8)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for name, mesh in meshes.items():
        data = microstructure_tasks(mesh, range(tasks + 1), sources=d, seed=seed)
        geo = from_meshio(mesh, dtype=torch.float32)
        g = torch.stack([torch.as_tensor(t.g, dtype=torch.float32) for t in data])  # (T, N, d)
        p = torch.stack([torch.as_tensor(t.p, dtype=torch.float32) for t in data]) * 100
        grid = (geo.pos[None], geo.weight[None])
        if name == "train":
            for _ in range(epochs):
                loss = operator_error(model.forward_dense(g[:tasks], p[:tasks], *grid), p[:tasks],
                                      geo.weight[None]).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            pred = model.forward_dense(g[tasks:], p[tasks:], *grid)
            errors[name] = float(operator_error(pred, p[tasks:], geo.weight[None]).mean())
        log.info("%s mesh (%d nodes): test E_f %.3f", name, g.shape[1], errors[name])
    return errors


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
