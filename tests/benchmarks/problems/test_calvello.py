"""Darcy flow with the continuum-attention paper's coefficient measures."""

import numpy as np
import pytest
import torch

from geoattn.errors import ConfigError
from geoattn.mesh import families
from problems.calvello import COVARIANCES, calvello_coefficient, calvello_darcy, calvello_field


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_covariance_operator_is_the_papers(version):
    # C cos(pi x) cos(2 pi y) = sigma^2 (pi^2 + 4 pi^2 + tau^2)^-2 cos(pi x) cos(2 pi y) for the
    # Neumann Laplacian: sigma, tau = 48, 12 (v1) or 12, 6 (v3), exponent -2
    field = calvello_field(version, modes=6)
    sigma, tau = COVARIANCES[version]["sigma"], COVARIANCES[version]["tau"]
    m = 40  # midpoint rule, exact for these cosine products
    g = (np.arange(m) + 0.5) / m
    pts = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    phi = np.cos(np.pi * pts[:, 0]) * np.cos(2 * np.pi * pts[:, 1])
    x = np.array([[0.3, 0.7], [0.9, 0.15]])
    applied = field.covariance(x, pts) @ phi / m**2
    eig = sigma**2 * (5 * np.pi**2 + tau**2) ** -2.0
    np.testing.assert_allclose(applied, eig * np.cos(np.pi * x[:, 0]) * np.cos(2 * np.pi * x[:, 1]), rtol=1e-10)
    # mean zero: the constant is in the kernel of C
    np.testing.assert_allclose(field.covariance(x, pts).sum(1) / m**2, 0.0, atol=1e-12)


def test_pointwise_variance_and_maps():
    field = calvello_field()
    centre = np.array([[0.5, 0.5]])
    variance = float(field.covariance(centre, centre)[0, 0])
    assert 1.1 < variance < 1.2  # sum over the cosine modes, 99 % of the untruncated series
    values = np.array([field.sample(4, i)(centre)[0] for i in range(2000)])
    assert abs(values.var() - variance) < 4 * variance * np.sqrt(2 / 2000)
    pts = np.random.default_rng(0).random((50, 2))
    g = field.sample(1, 2)(pts)
    np.testing.assert_allclose(calvello_coefficient(1, 2, "lognormal")(pts), np.exp(g), rtol=1e-13)
    np.testing.assert_array_equal(calvello_coefficient(1, 2, "piecewise")(pts), np.where(g >= 0, 12.0, 3.0))


def test_samples_are_the_same_continuum_sample_on_every_mesh():
    base = families.unit_square(8)
    meshes = {r: families.refine(base, r) for r in range(3)}  # 8, 16 and 32 cells per side
    data = calvello_darcy(meshes, 2, seed=3, dtype=torch.float64)
    coarse = data[0][1]
    n = coarse.num_nodes  # red refinement keeps the coarser nodes first
    for r in (1, 2):
        torch.testing.assert_close(data[r][1].x[:n], coarse.x, rtol=1e-12, atol=0)
    # the P1 solutions of one coefficient converge to each other under refinement (at the
    # coarse nodes: second order in h, measured ratio ~4 per halving)
    diffs = [float((data[r][1].y[:n] - data[2][1].y[:n]).norm() / data[2][1].y[:n].norm()) for r in (0, 1)]
    assert diffs[1] < diffs[0] / 2.5, diffs
    assert (coarse.x > 0).all() and coarse.cells.shape[1] == 3
    late = calvello_darcy({0: meshes[0]}, 1, seed=3, start=1, dtype=torch.float64)[0][0]
    torch.testing.assert_close(late.y, coarse.y)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="version"):
        calvello_field("v2")
    with pytest.raises(ConfigError, match="coefficient map"):
        calvello_coefficient(0, 0, "threshold")
    with pytest.raises(ConfigError, match="n >= 1"):
        calvello_darcy({"grid": families.unit_square(4)}, 0, seed=0)
