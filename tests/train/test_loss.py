import math

import torch

from geoattn.mesh import families, from_meshio
from geoattn.train import relative_h1, relative_l2


def _square(n, kind="graded", times=0):
    mesh = families.unit_square(n, kind)
    return from_meshio(families.refine(mesh, times) if times else mesh, dtype=torch.float64)


def test_relative_l2_matches_analytic_value_on_graded_mesh():
    # target x, prediction x + 0.1: ||0.1|| / ||x|| = 0.1 / sqrt(1/3) on the unit square
    exact = 0.1 / math.sqrt(1 / 3)
    errors = []
    for times in (0, 1, 2):
        d = _square(8, times=times)
        y = d.pos[:, :1]
        errors.append(abs(float(relative_l2(y + 0.1, y, d.weight)) - exact))
    assert errors[-1] < 1e-3 * exact
    assert errors[0] / errors[2] > 12  # second order: ~4x per refinement


def test_relative_l2_uniform_weights_is_plain_formula_and_batches_per_sample():
    torch.manual_seed(0)
    a, b = torch.randn(7, 2), torch.randn(7, 2)
    c, e = torch.randn(5, 2), torch.randn(5, 2)
    plain = lambda p, t: ((p - t).square().sum() / t.square().sum()).sqrt()
    assert torch.allclose(relative_l2(a, b, torch.full((7,), 0.3)), plain(a, b))
    batch = torch.tensor([0] * 7 + [1] * 5)
    weight = torch.cat([torch.full((7,), 0.1), torch.full((5,), 2.0)])
    per = relative_l2(torch.cat([a, c]), torch.cat([b, e]), weight, batch, reduction="none")
    assert torch.allclose(per, torch.stack([plain(a, b), plain(c, e)]))


def test_relative_h1_analytic():
    # u = x, prediction x + 0.1 y: (0.01/3 + 0.01) / (1/3 + 1) = 0.01 exactly in the continuum
    d = _square(16)
    y = d.pos[:, :1]
    err = relative_h1(y + 0.1 * d.pos[:, 1:], y, d.pos, d.weight, d.cells)
    assert abs(float(err) - 0.1) < 2e-3
