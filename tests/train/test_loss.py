import math

import torch

import pytest

from geoattn.mesh import Mesh, families, from_meshio
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
        errors.append(abs(float(relative_l2(y + 0.1, y, Mesh.from_sample(d))) - exact))
    assert errors[-1] < 1e-3 * exact
    assert errors[0] / errors[2] > 12  # second order: ~4x per refinement


def test_relative_l2_uniform_weights_is_plain_formula_and_batches_per_sample():
    torch.manual_seed(0)
    a, b = torch.randn(7, 2), torch.randn(7, 2)
    c, e = torch.randn(5, 2), torch.randn(5, 2)
    plain = lambda p, t: ((p - t).square().sum() / t.square().sum()).sqrt()
    first, second = Mesh(torch.randn(7, 2), torch.full((7,), 0.3)), Mesh(torch.randn(5, 2), torch.full((5,), 2.0))
    assert torch.allclose(relative_l2(a, b, first), plain(a, b))
    per = relative_l2(torch.cat([a, c]), torch.cat([b, e]), Mesh.batch([first, second]), reduction="none")
    assert torch.allclose(per, torch.stack([plain(a, b), plain(c, e)]))
    # each graph of a batch is its member alone
    assert torch.allclose(per[1], relative_l2(c, e, second))


def test_relative_h1_analytic():
    # u = x, prediction x + 0.1 y: (0.01/3 + 0.01) / (1/3 + 1) = 0.01 exactly in the continuum
    d = _square(16)
    y = d.pos[:, :1]
    err = relative_h1(y + 0.1 * d.pos[:, 1:], y, Mesh.from_sample(d))
    assert abs(float(err) - 0.1) < 2e-3


def test_relative_h1_per_graph_of_a_batch_and_needs_cells():
    d, e = _square(6), _square(4, "irregular")
    meshes = [Mesh.from_sample(d), Mesh.from_sample(e)]
    f = [m.pos[:, :1] ** 2 + 1 for m in meshes]
    g = [m.pos[:, 1:] + m.pos[:, :1] for m in meshes]
    per = relative_h1(torch.cat(f), torch.cat(g), Mesh.batch(meshes), reduction="none")
    alone = torch.stack([relative_h1(a, b, m) for a, b, m in zip(f, g, meshes)])
    assert torch.allclose(per, alone, rtol=1e-12)
    with pytest.raises(ValueError, match="cells"):
        relative_h1(f[0], g[0], Mesh(meshes[0].pos, meshes[0].weight))


def test_the_former_loss_calls_warn_and_agree():
    d = _square(6)
    mesh, y = Mesh.from_sample(d), d.pos[:, :1] + 1
    pred = y + 0.1 * d.pos[:, 1:]
    with pytest.warns(DeprecationWarning, match="relative_l2"):
        old = relative_l2(pred, y, d.weight)
    assert torch.equal(old, relative_l2(pred, y, mesh))
    with pytest.warns(DeprecationWarning, match="relative_h1"):
        old = relative_h1(pred, y, d.pos, d.weight, d.cells)
    assert torch.equal(old, relative_h1(pred, y, mesh))
