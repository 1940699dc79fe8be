import math

import torch

from geoattn.mesh import families, from_meshio
from geoattn.train import GaussianNormalizer


def test_weighted_statistics_are_domain_averages_on_graded_mesh():
    d = from_meshio(families.refine(families.unit_square(8, "graded"), 2), dtype=torch.float64)
    u = d.pos[:, :1]
    norm = GaussianNormalizer(1).fit([(u, d.weight)])
    assert abs(float(norm.mean) - 0.5) < 1e-3                       # ∫ x dx = 1/2
    assert abs(float(norm.std) - math.sqrt(1 / 12)) < 2e-3  # Var x = 1/12; lumped x² is O(h²)
    assert abs(float(u.mean()) - 0.5) > 0.1                          # the node average is far off
    assert torch.allclose(norm.decode(norm.encode(u)), u)
    assert abs(float((norm.encode(u).squeeze() * d.weight).sum())) < 1e-10


def test_statistics_pool_samples_by_their_weights():
    a, b = torch.tensor([[1.0], [1.0]]), torch.tensor([[4.0]])
    norm = GaussianNormalizer(1).fit([(a, torch.tensor([0.5, 0.5])), (b, torch.tensor([3.0]))])
    assert abs(float(norm.mean) - (1 * 1 + 4 * 3) / 4) < 1e-12
