"""The inverse coefficient problem: consistency with the forward Darcy solver, the restriction of
the coefficient to the target mesh, the noise model and its seeding."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from geoattn.data.darcy import PiecewiseConstant, solve_darcy
from geoattn.data.grf import preset
from geoattn.mesh import families
from problems.inverse import InverseProblem, add_noise, hat_average, node_variance


@pytest.fixture(scope="module")
def problem():
    meshes = {"train": families.unit_square(12, "irregular", seed=0), "graded": families.unit_square(10, "graded")}
    return InverseProblem(meshes, families.unit_square(5, "irregular", seed=2))


@pytest.fixture(scope="module")
def clean(problem):
    return problem.clean(24, seed=3)


def test_clean_solutions_are_the_forward_solutions(problem, clean):
    for s in (0, 17):
        a = PiecewiseConstant(preset("cao").sample(3, s))
        for name, mesh in problem.meshes.items():
            np.testing.assert_allclose(clean.solutions[name][s], solve_darcy(mesh, a), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(clean.coefficients[s], hat_average(problem.target, a), rtol=1e-14)
    # later samples do not depend on the earlier ones
    late = problem.clean(2, seed=3, start=17)
    np.testing.assert_array_equal(late.solutions["train"][0], clean.solutions["train"][17])
    assert np.all((clean.coefficients >= 3 - 1e-12) & (clean.coefficients <= 12 + 1e-12))


def test_hat_average():
    mesh = families.unit_square(6)  # structured: every interior patch is point-symmetric about its node
    np.testing.assert_allclose(hat_average(mesh, lambda p: np.full(len(p), 7.5)), 7.5, rtol=1e-14)
    affine = lambda p: 1.0 + 2.0 * p[:, 0] - 3.0 * p[:, 1]  # noqa: E731
    pts = mesh.points[:, :2]
    interior = np.all((pts > 1e-9) & (pts < 1 - 1e-9), axis=1)
    np.testing.assert_allclose(hat_average(mesh, affine)[interior], affine(pts[interior]), atol=1e-13)
    # two phases split at x = 0.5 (a mesh line): nodes whose patch lies in one phase get its value,
    # nodes on the line the mean of the two weighted by their patch areas (here one half each)
    step = lambda p: np.where(p[:, 0] < 0.5, 3.0, 12.0)  # noqa: E731
    avg = hat_average(mesh, step)
    x = pts[:, 0]
    np.testing.assert_allclose(avg[x < 0.3], 3.0)
    np.testing.assert_allclose(avg[x > 0.7], 12.0)
    np.testing.assert_allclose(avg[np.isclose(x, 0.5) & interior], 7.5, rtol=1e-12)
    with pytest.raises(ValueError, match="triangle or tetrahedron"):
        hat_average(families.unit_square(3, cell="quad"), step)


def test_noise_statistics(problem, clean):
    u = clean.solutions["train"]
    c = node_variance(u)
    np.testing.assert_allclose(c, ((u - u.mean(0)) ** 2).mean(0), rtol=1e-12)
    noisy = add_noise(u, c, 0.1, clean.seed, clean.indices)
    boundary = problem.problems["train"].boundary
    np.testing.assert_array_equal(noisy[:, boundary], 0.0)  # u = 0 on every sample: no variance, no noise
    interior = problem.problems["train"].interior
    z = (noisy - u)[:, interior] / (0.1 * np.sqrt(c[interior]))  # standard normal, i.i.d.
    m = z.size
    assert abs(z.mean()) < 4 / np.sqrt(m), z.mean()
    assert abs(z.var() - 1) < 4 * np.sqrt(2 / m), z.var()
    # independent across nodes: neighbouring interior nodes are uncorrelated
    corr = np.corrcoef(z[:, :-1].ravel(), z[:, 1:].ravel())[0, 1]
    assert abs(corr) < 4 / np.sqrt(m)
    # the relative noise level of the paper: E||noise||^2 = eps^2 sum_i c_i
    ratio = ((noisy - u) ** 2).sum(1).mean() / (0.01 * c.sum())
    assert abs(ratio - 1) < 0.15, ratio


def test_noise_seeding_and_levels(clean):
    u = clean.solutions["train"]
    c = node_variance(u)
    a = add_noise(u, c, 0.01, 3, clean.indices)
    np.testing.assert_array_equal(a, add_noise(u, c, 0.01, 3, clean.indices))
    # the noise of a sample depends on (seed, index) only: not on the other samples or their order
    np.testing.assert_array_equal(add_noise(u[[5, 2]], c, 0.01, 3, clean.indices[[5, 2]]), a[[5, 2]])
    assert not np.allclose(add_noise(u, c, 0.01, 4, clean.indices), a)
    # two levels differ by the factor eps only
    np.testing.assert_allclose(add_noise(u, c, 0.1, 3, clean.indices) - u, 10 * (a - u), rtol=1e-12, atol=1e-16)
    np.testing.assert_array_equal(add_noise(u, c, 0.0, 3, clean.indices), u)
    with pytest.raises(ValueError, match=">= 0"):
        add_noise(u, c, -0.1, 3, clean.indices)
    with pytest.raises(ValueError, match="variance"):
        add_noise(u, c[:-1], 0.1, 3, clean.indices)
    with pytest.raises(ValueError, match="non-negative"):
        add_noise(u, -c, 0.1, 3, clean.indices)
    with pytest.raises(ValueError, match="S >= 2"):
        node_variance(u[:1])


def test_samples_and_transfer(problem, clean):
    c = node_variance(clean.solutions["train"])
    samples = problem.samples(clean, "train", 0.01, c)
    assert len(samples) == 24
    d = samples[7]
    n, nq = len(problem.meshes["train"].points), len(problem.target.points)
    assert d.x.shape == (n, 1) and d.pos.shape == (n, 2) and d.weight.shape == (n,)
    assert d.y.shape == (nq, 1) and d.pos_query.shape == (nq, 2) and d.weight_query.shape == (nq,)
    np.testing.assert_allclose(d.weight_query.sum().item(), 1.0, rtol=1e-6)
    noisy = add_noise(clean.solutions["train"], c, 0.01, clean.seed, clean.indices)
    np.testing.assert_allclose(d.x[:, 0].numpy(), noisy[7], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(d.y[:, 0].numpy(), clean.coefficients[7], rtol=1e-6)
    # batched with a query batch vector
    batch = Batch.from_data_list(samples[:3], follow_batch=["pos_query"])
    assert torch.equal(batch.pos_query_batch, torch.arange(3).repeat_interleave(nq))
    # P1 transfer between meshes is exact for affine fields
    affine = lambda p: 0.5 + p[:, 0] - 2 * p[:, 1]  # noqa: E731
    src, dst = problem.problems["train"].nodes, problem.problems["graded"].nodes
    np.testing.assert_allclose(problem.transfer(affine(src), "train", "graded"), affine(dst), atol=1e-12)
    with pytest.raises(ValueError, match="variance"):
        problem.samples(clean, "train", 0.1)
    with pytest.raises(ValueError, match="unknown input mesh"):
        problem.samples(clean, "other")
    with pytest.raises(ValueError, match="unknown input mesh"):
        problem.transfer(c, "train", "other")
