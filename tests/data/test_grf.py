"""Gaussian random fields as functions: covariance, eigenstructure, reproducibility."""

import numpy as np
import pytest
import torch

from geoattn.data.grf import PRESETS, GaussianRandomField, preset


def test_empirical_covariance_matches_truncated_series():
    field = GaussianRandomField(alpha=2.0, tau=3.0, modes=16)
    pts = np.array([[0.1, 0.2], [0.5, 0.5], [0.52, 0.47], [0.9, 0.05], [0.0, 1.0]])
    n = 4000
    vals = np.stack([field.sample(11, i)(pts) for i in range(n)])  # [n, 5]
    emp = vals.T @ vals / n  # mean zero by construction
    exact = field.covariance(pts, pts)
    # standard error of a sample second moment of a centred Gaussian pair
    se = np.sqrt((np.outer(np.diag(exact), np.diag(exact)) + exact**2) / n)
    assert np.all(np.abs(emp - exact) < 4.5 * se), (emp - exact) / se
    # the points are correlated: near points strongly, far points weakly
    corr = exact / np.sqrt(np.outer(np.diag(exact), np.diag(exact)))
    assert corr[1, 2] > 0.9 and abs(corr[0, 3]) < 0.5


def test_covariance_operator_eigenvalue_on_a_rectangle():
    """Applying C to cos(pi x / 2) cos(2 pi y) on [0,2]x[0,1] multiplies it by
    sigma^2 (pi^2/4 + 4 pi^2 + tau^2)^-alpha (Neumann eigenpair, written by hand)."""
    alpha, tau, sigma = 1.5, 2.0, 0.7
    field = GaussianRandomField(alpha, tau, sigma, box=((0, 0), (2, 1)), modes=(6, 5))
    nx, ny = 200, 100  # midpoint rule, exact for these trigonometric products
    xs, ys = (np.arange(nx) + 0.5) * 2 / nx, (np.arange(ny) + 0.5) / ny
    pts = np.stack(np.meshgrid(xs, ys, indexing="ij"), -1).reshape(-1, 2)
    phi = np.cos(np.pi * pts[:, 0] / 2) * np.cos(2 * np.pi * pts[:, 1])
    y = np.array([[0.3, 0.7], [1.7, 0.1]])
    applied = field.covariance(y, pts) @ (phi * (2 / (nx * ny)))
    phi_y = np.cos(np.pi * y[:, 0] / 2) * np.cos(2 * np.pi * y[:, 1])
    eig = sigma**2 * (np.pi**2 / 4 + 4 * np.pi**2 + tau**2) ** -alpha
    np.testing.assert_allclose(applied, eig * phi_y, rtol=1e-10, atol=1e-14)


def test_mean_zero_and_trace():
    """int_B g = 0 for every mean-zero sample; int_B C(x,x) dx = sum of the retained eigenvalues."""
    field = GaussianRandomField(alpha=2.0, tau=3.0, modes=8)
    n = 64
    g1 = (np.arange(n) + 0.5) / n
    pts = np.stack(np.meshgrid(g1, g1, indexing="ij"), -1).reshape(-1, 2)
    assert abs(field.sample(0, 5)(pts).mean()) < 1e-12
    k2 = (np.pi * np.arange(8)) ** 2
    eig = 3.0**2 * (k2[:, None] + k2[None, :] + 9.0) ** -2.0
    eig[0, 0] = 0.0
    trace = np.einsum("ii->", field.covariance(pts, pts)) / n**2
    np.testing.assert_allclose(trace, eig.sum(), rtol=1e-10)


def test_sample_depends_only_on_seed_and_index():
    field = preset("cao")
    x = np.random.default_rng(1).random((30, 2))
    y = np.random.default_rng(2).random((40, 2))
    a, b = field.sample(5, 3), field.sample(5, 3)
    np.testing.assert_array_equal(a.coefficients, b.coefficients)
    # the same function on two point sets: compare on the shared points
    both = np.concatenate([x, y])
    np.testing.assert_allclose(a(both)[:30], b(x), rtol=1e-13)
    assert not np.allclose(field.sample(5, 4)(x), a(x))
    assert not np.allclose(field.sample(6, 3)(x), a(x))
    # generating samples in another order does not change them
    late = [field.sample(5, i)(x) for i in (9, 3)]
    np.testing.assert_array_equal(late[1], a(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_matches_numpy(dtype):
    s = preset("calvello").sample(0, 0)
    x = np.random.default_rng(0).random((100, 2))
    t = s(torch.as_tensor(x, dtype=dtype))
    assert t.dtype == dtype and t.shape == (100,)
    torch.testing.assert_close(t, torch.as_tensor(s(x), dtype=dtype), rtol=1e-4 if dtype == torch.float32 else 1e-12, atol=1e-4)


def test_three_dimensional_field_matches_dense_basis():
    field = GaussianRandomField(alpha=2.5, tau=2.0, box=((0, 0, 0), (1, 2, 1)), modes=(3, 4, 5))
    s = field.sample(1, 2)
    x = np.random.default_rng(0).random((7, 3)) * [1, 2, 1]
    dense = np.zeros(7)
    for k in np.ndindex(3, 4, 5):
        phi = np.ones(7)
        for j, (kj, L) in enumerate(zip(k, (1, 2, 1))):
            phi *= (np.sqrt(1 / L) if kj == 0 else np.sqrt(2 / L)) * np.cos(np.pi * kj * x[:, j] / L)
        dense += s.coefficients[k] * phi
    np.testing.assert_allclose(s(x), dense, rtol=1e-12)


def test_presets_and_errors():
    assert preset("cao").sigma == pytest.approx(3.0)  # tau^(alpha - d/2)
    assert PRESETS["calvello"]["sigma"] == 48.0
    with pytest.raises(ValueError, match="unknown GRF preset"):
        preset("nope")
    with pytest.raises(ValueError, match="box"):
        GaussianRandomField(box=((0, 0), (0, 1)))
    with pytest.raises(ValueError, match="points must be"):
        preset("cao").sample(0, 0)(np.zeros((3, 1)))
    with pytest.raises(ValueError, match="2-D"):
        preset("cao").sample(0, 0)(np.zeros((3, 3)))  # a 2-D field is not silently read in 3-D
