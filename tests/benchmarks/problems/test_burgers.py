"""Burgers data: the Fourier series, the periodic Gaussian random field, the pseudo-spectral
solver against the Cole–Hopf exact solution, trapezoid weights, uniform and non-uniform grids."""

import math

import numpy as np
import pytest
import torch
from scipy.special import ive

from geoattn.mesh import periodic_weights
from problems.burgers import (FourierSeries, PeriodicGaussianRandomField, burgers_data,
                              circle_coordinates, cole_hopf, nonuniform_samples, on_circle,
                              periodic_trapezoid_weights, sampling_density, solve_burgers,
                              subsample, uniform_samples)

SINE = FourierSeries(np.array([0.0, -0.5j]))  # sin(2 pi x)


def bessel_solution(x, t, nu, modes=80):
    r"""Cole–Hopf for u0 = sin(2 pi x) in closed form: phi_0 = exp(cos(2 pi x) / (4 pi nu)) up to a
    constant, whose Fourier coefficients are modified Bessel functions I_k(1 / (4 pi nu)), so
    u = -2 nu phi_x / phi
      = 8 pi nu sum_k k I_k e^{-nu (2 pi k)^2 t} sin(2 pi k x) / (I_0 + 2 sum_k I_k e^{..} cos(2 pi k x))."""
    k = np.arange(1, modes)[:, None]
    a = 1.0 / (4 * math.pi * nu)
    damp = ive(k, a) * np.exp(-nu * (2 * math.pi * k) ** 2 * t)  # scaled I_k: the ratio is unchanged
    num = (k * damp * np.sin(2 * math.pi * k * x)).sum(0)
    den = ive(0, a) + 2 * (damp * np.cos(2 * math.pi * k * x)).sum(0)
    return 8 * math.pi * nu * num / den


def test_fourier_series_evaluation_grid_folding_and_calculus():
    rng = np.random.default_rng(0)
    c = rng.standard_normal((3, 9)) + 1j * rng.standard_normal((3, 9))
    c[:, 0] = c[:, 0].real
    f = FourierSeries(c)
    x = rng.random(50)
    k = np.arange(1, 9)
    slow = c[:, :1].real + 2 * np.real(c[:, 1:] @ np.exp(2j * math.pi * np.outer(k, x)))
    np.testing.assert_allclose(f(x), slow, atol=1e-12)
    # exact on any uniform grid, also coarser than the degree (point values alias)
    for n in (5, 8, 17, 64):
        np.testing.assert_allclose(f.on_grid(n), f(np.arange(n) / n), atol=1e-12)
    # derivative of a trigonometric polynomial by hand: d/dx 2Re(c e^{2 pi i k x})
    phase = np.exp(2j * math.pi * np.outer(k, x))
    np.testing.assert_allclose(f.derivative()(x), 2 * np.real((2j * math.pi * k * c[:, 1:]) @ phase), atol=1e-10)
    # antiderivative: F' = f, F(0) = 0, for the mean-zero part
    g = FourierSeries(np.concatenate([np.zeros((3, 1)), c[:, 1:]], 1))
    big = g.antiderivative()
    np.testing.assert_allclose(big(np.array([0.0])), 0.0, atol=1e-14)
    np.testing.assert_allclose(big.derivative()(x), g(x), atol=1e-12)
    with pytest.raises(ValueError, match="mean-zero"):
        f.antiderivative()
    with pytest.raises(ValueError, match="coefficients"):
        FourierSeries(np.zeros((2, 3, 4)))


def test_periodic_field_covariance_and_seeding():
    field = PeriodicGaussianRandomField(modes=12)
    # the benchmark's 625 (-Delta + 25 I)^-2: the eigenvalue of sqrt2 cos(2 pi k x) is 625 ((2 pi k)^2 + 25)^-2
    k = np.arange(1, 13)
    np.testing.assert_allclose(field.std**2, 625.0 / ((2 * math.pi * k) ** 2 + 25.0) ** 2, rtol=1e-14)
    pts = np.array([0.0, 0.1, 0.13, 0.5, 0.97])
    n = 4000
    vals = np.stack([field.sample(4, i)(pts) for i in range(n)])
    emp = vals.T @ vals / n
    exact = field.covariance(pts, pts)
    se = np.sqrt((np.outer(np.diag(exact), np.diag(exact)) + exact**2) / n)
    assert np.all(np.abs(emp - exact) < 4.5 * se), (emp - exact) / se
    # stationary: the variance is the same everywhere, sum_k 2 * 625 / ((2 pi k)^2 + 25)^2
    np.testing.assert_allclose(np.diag(exact), 2 * (field.std**2).sum(), rtol=1e-12)
    a = field.sample(4, 7)
    np.testing.assert_array_equal(a.coefficients, field.sample(4, 7).coefficients)
    assert not np.allclose(a.coefficients, field.sample(4, 8).coefficients)
    assert not np.allclose(a.coefficients, field.sample(5, 7).coefficients)
    np.testing.assert_array_equal(field.samples(4, [9, 7]).coefficients[1], a.coefficients)
    assert abs(a.on_grid(64).mean()) < 1e-15  # mean zero: the trapezoid rule is exact here


def test_cole_hopf_reference_matches_the_bessel_closed_form():
    x = np.arange(101) / 101
    for nu in (0.1, 0.02):
        for t in (0.05, 1.0):
            np.testing.assert_allclose(cole_hopf(SINE, x, nu, t), bessel_solution(x, t, nu), atol=1e-13)


@pytest.mark.parametrize("nu", [0.1, 0.02])
def test_solver_matches_cole_hopf_at_fourth_order_in_time(nu):
    x = np.arange(97) / 97
    exact = bessel_solution(x, 1.0, nu)
    errors = [np.abs(solve_burgers(SINE, nu, 1.0, grid=128, dt=dt)(x) - exact).max()
              for dt in (8e-3, 4e-3, 2e-3)]
    rate = np.polyfit(np.log([8e-3, 4e-3, 2e-3]), np.log(errors), 1)[0]
    assert 3.7 < rate < 4.3, (errors, rate)  # ETDRK4; measured 3.85 (nu = 0.1) and 3.95 (0.02)
    # measured at dt = 2e-3: 3.2e-13 (nu = 0.1) and 1.8e-11 (nu = 0.02)
    assert errors[-1] < (1e-12 if nu == 0.1 else 5e-11), errors


def test_solver_on_a_random_initial_condition_matches_cole_hopf():
    """Draws of the benchmark's initial data (341 modes, solved on 1024 points) against the exact
    solution of the same trigonometric polynomials. Measured: absolute 4e-12 and 3e-11,
    relative to max |u(1)| 1.5e-9 and 7e-9 at dt = 1e-3 (7e-9 and 7e-8 at the data's 2e-3)."""
    u0 = PeriodicGaussianRandomField(modes=341).samples(2, [0, 1])
    x = np.arange(257) / 257
    exact = cole_hopf(u0, x, 0.1, 1.0, quadrature=1 << 14)
    np.testing.assert_allclose(cole_hopf(u0, x, 0.1, 1.0, quadrature=1 << 15), exact, atol=1e-15)
    err = np.abs(solve_burgers(u0, 0.1, 1.0, grid=1024, dt=1e-3)(x) - exact).max(1)
    assert np.all(err < 5e-11) and np.all(err / np.abs(exact).max(1) < 2e-8), err


def test_solver_spatial_resolution_and_errors():
    # nu = 0.01 has a steep front: 128 points are too few (~1e-9), 256 converge (1e-11)
    x = np.arange(89) / 89
    exact = bessel_solution(x, 1.0, 0.01, modes=400)
    coarse = np.abs(solve_burgers(SINE, 0.01, 1.0, grid=128, dt=1e-3)(x) - exact).max()
    fine = np.abs(solve_burgers(SINE, 0.01, 1.0, grid=256, dt=1e-3)(x) - exact).max()
    assert fine < 3e-11 < 1e-10 < coarse, (coarse, fine)
    with pytest.raises(ValueError, match="grid > 30"):
        solve_burgers(FourierSeries(np.ones(11)), grid=30)
    with pytest.raises(ValueError, match="nu > 0"):
        solve_burgers(SINE, nu=0.0)
    # time 0 returns the initial data
    np.testing.assert_allclose(solve_burgers(SINE, time=0.0, grid=16)(x), np.sin(2 * math.pi * x), atol=1e-14)


def test_periodic_trapezoid_weights():
    rng = np.random.default_rng(3)
    x = np.sort(rng.random(40))
    w = periodic_trapezoid_weights(x)
    assert np.all(w > 0)
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-14)
    # a periodic piecewise-linear function with kinks at the nodes integrates exactly: the hat of node 5
    hat = np.zeros_like(x)
    hat[5] = 1.0
    np.testing.assert_allclose(w @ hat, 0.5 * (x[6] - x[4]), rtol=1e-14)
    # order of the nodes does not matter
    perm = rng.permutation(40)
    np.testing.assert_allclose(periodic_trapezoid_weights(x[perm]), w[perm])
    # uniform grid: 1 / n, exact for trigonometric polynomials of degree < n
    u = np.arange(16) / 16
    np.testing.assert_allclose(periodic_trapezoid_weights(u), 1 / 16)
    np.testing.assert_allclose(periodic_trapezoid_weights(u) @ np.cos(2 * math.pi * 7 * u) ** 2, 0.5, rtol=1e-13)
    # second order on a smoothly graded grid x = s + 0.15 sin(2 pi s) / (2 pi)
    f = lambda t: np.exp(np.sin(2 * math.pi * t))  # noqa: E731; integral I_0(1)
    errors = []
    for n in (32, 64, 128, 256):
        s = (np.arange(n) + 0.3) / n
        g = s + 0.15 * np.sin(2 * math.pi * s) / (2 * math.pi)
        errors.append(abs(periodic_trapezoid_weights(g) @ f(g) - ive(0, 1.0) * math.e))
    rate = -np.polyfit(np.log([32, 64, 128, 256]), np.log(errors), 1)[0]
    assert 1.9 < rate < 2.1, (errors, rate)
    with pytest.raises(ValueError, match="distinct"):
        periodic_trapezoid_weights([0.1, 0.2, 0.2])
    with pytest.raises(ValueError, match=r"\[0, 1"):
        periodic_trapezoid_weights([0.1, 1.0])


def test_periodic_weights_1d_is_the_burgers_trapezoid_rule():
    """geoattn.mesh.periodic_weights in 1-D is this periodic trapezoid rule."""
    x = np.sort(np.random.default_rng(0).random(30))
    np.testing.assert_allclose(periodic_weights(x[:, None], 1.0), periodic_trapezoid_weights(x), rtol=1e-14)


def test_uniform_and_nonuniform_samples():
    data = burgers_data(3, seed=1, grid=256, dt=4e-3)
    assert data.initial.modes == 85 and len(data) == 3
    fine = 1024
    ref0, ref1 = data.initial.on_grid(fine), data.solution.on_grid(fine)
    for n in (64, 128):
        uni = uniform_samples(data, n, dtype=torch.float64)
        # the benchmark's subsampling of the fine grid gives the same numbers
        np.testing.assert_allclose(np.stack([d.x[:, 0].numpy() for d in uni]), subsample(ref0, n), atol=1e-12)
        np.testing.assert_allclose(np.stack([d.y[:, 0].numpy() for d in uni]), subsample(ref1, n), atol=1e-12)
        assert torch.allclose(uni[0].weight, torch.full((n,), 1.0 / n, dtype=torch.float64))
    non = nonuniform_samples(data, 128, fine, dtype=torch.float64)
    again = nonuniform_samples(data, 128, fine, dtype=torch.float64)
    grid = np.arange(fine) / fine
    for s, d in enumerate(non):
        x = d.pos[:, 0].numpy()
        assert d.pos.shape == (128, 1) and np.all(np.diff(x) > 0)
        j = np.rint(x * fine).astype(int)
        np.testing.assert_allclose(x, grid[j], atol=1e-15)  # nodes of the fine grid
        np.testing.assert_allclose(d.x[:, 0].numpy(), ref0[s, j], atol=1e-12)
        np.testing.assert_allclose(d.y[:, 0].numpy(), ref1[s, j], atol=1e-12)
        np.testing.assert_allclose(d.weight.numpy(), periodic_trapezoid_weights(x))
        assert torch.equal(d.pos, again[s].pos)
    assert not torch.equal(non[0].pos, non[1].pos)
    assert not torch.equal(non[0].pos, nonuniform_samples(data, 128, fine, seed=9)[0].pos.double())
    # the grid follows the density: with a steeper solution (nu = 0.02) the quarter of the fine
    # points of highest density, which carries probability ~0.5, receives ~half of the nodes
    steep = burgers_data(3, seed=1, grid=256, dt=4e-3, nu=0.02)
    mass, frac = [], []
    for s, d in enumerate(nonuniform_samples(steep, 128, fine)):
        rho = sampling_density(steep.solution[s], grid, steep.nu)
        np.testing.assert_allclose(rho.sum(), 1.0)
        top = rho >= np.quantile(rho, 0.75)
        mass.append(rho[top].sum())
        frac.append(top[np.rint(d.pos[:, 0].numpy() * fine).astype(int)].mean())
    se = np.sqrt(sum(p * (1 - p) for p in mass) / 128) / 3
    assert abs(np.mean(frac) - np.mean(mass)) < 4 * se and np.mean(frac) > 0.4, (frac, mass)
    with pytest.raises(ValueError, match="density"):
        nonuniform_samples(data, 64, fine, density="target")
    with pytest.raises(ValueError, match="n < fine"):
        nonuniform_samples(data, fine, fine)
    with pytest.raises(ValueError, match="divide"):
        subsample(ref0, 100)


def test_circle_coordinates():
    pos = torch.tensor([[0.0], [0.25], [0.5], [0.999999]], dtype=torch.float64)
    c = circle_coordinates(pos)
    torch.testing.assert_close(c[:3], torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64),
                               atol=1e-15, rtol=0)
    # x = 0 and x -> 1 are neighbours: the chord between angles 0 and 2 pi (1 - 1e-6) is
    # 2 sin(pi 1e-6), to rounding (cos and sin of 2 pi x: a few ulps of 1)
    torch.testing.assert_close((c[3] - c[0]).norm(), torch.tensor(2 * math.sin(math.pi * 1e-6), dtype=torch.float64),
                               atol=1e-14, rtol=0)
    data = burgers_data(2, seed=0, grid=64, dt=1e-2)
    for a, b in zip(uniform_samples(data, 16), on_circle(uniform_samples(data, 16))):
        assert b.pos.shape == (16, 2)
        assert torch.equal(a.weight, b.weight) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
        torch.testing.assert_close(b.pos.norm(dim=1), torch.ones(16))
    with pytest.raises(ValueError, match=r"\[N, 1\]"):
        circle_coordinates(torch.zeros(3, 2))
