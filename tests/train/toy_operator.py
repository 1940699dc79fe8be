"""The toy training data of the trainer tests (a plain module: ``conftest`` names clash across folders)."""

import torch

from geoattn.mesh import families, from_meshio


def toy_samples(n_samples: int = 8, n: int = 5, seed: int = 0):
    """A small smooth operator on an irregular mesh: x = a sin(pi x) + b y, y = x * (1 + x_coord)."""
    base = from_meshio(families.unit_square(n, "irregular", seed=seed))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_samples):
        a, b = torch.randn(2, generator=gen)
        d = base.clone()
        d.x = (a * torch.sin(torch.pi * d.pos[:, :1]) + b * d.pos[:, 1:])
        d.y = d.x * (1 + d.pos[:, :1])
        out.append(d)
    return out
