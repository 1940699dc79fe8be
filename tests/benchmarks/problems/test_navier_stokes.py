"""Kolmogorov flow: exact solutions, conservation, convergence in time and space, the
initial-condition measure, per-sample seeding, and periodic quadrature weights."""

import math

import numpy as np
import pytest
import torch

from geoattn.errors import ConfigError
from problems.navier_stokes import (LENGTH, KolmogorovSolver, PeriodicGaussianField, evaluate,
                                    grid_values, kolmogorov_pairs, pair_samples, periodic_voronoi_weights,
                                    scattered_points, torus_grid)


@pytest.fixture(autouse=True)
def _one_thread():
    # the solver's tensors are small: one thread avoids paying for idle threads on a busy machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _invariants(solver, w):
    """Enstrophy and energy (up to the factor (2 pi)^2 / 2) of coefficients in rfft layout."""
    both = torch.where(solver.ky > 0, 2.0, 1.0) * w.abs() ** 2  # the k_y < 0 half counts too
    return float(both.sum()), float((both * solver.inverse_k2).sum())


@pytest.mark.parametrize("k", [1, 3])
def test_taylor_green_vortex_decays_exactly(k):
    # omega = 2k cos(kx) cos(ky) e^{-2 nu k^2 t} solves the unforced equation: u . grad omega = 0
    # because omega = 2k^2 psi, so only the (exactly integrated) diffusion acts
    nu = 0.05
    solver = KolmogorovSolver(n=32, nu=nu, amplitude=0.0, step=0.01)
    pos = solver.grid
    w0 = (2 * k * torch.cos(k * pos[:, 0]) * torch.cos(k * pos[:, 1])).reshape(1, 32, 32)
    out = solver.solve(w0, [0.5, 1.0])
    for i, t in enumerate([0.5, 1.0]):
        exact = w0[0] * math.exp(-2 * nu * k * k * t)
        assert float((out[0, i] - exact).abs().max()) < 1e-10 * float(exact.abs().max())


def test_advection_term_matches_hand_computed_product():
    # omega = a cos x + b sin 2y: psi = a cos x + (b/4) sin 2y, u = (psi_y, -psi_x) =
    # ((b/2) cos 2y, a sin x), grad omega = (-a sin x, 2b cos 2y), so
    # u . grad omega = (3ab/2) sin x cos 2y (a sign error in u flips it)
    a, b = 0.7, -1.3
    solver = KolmogorovSolver(n=32)
    pos = solver.grid
    w = (a * torch.cos(pos[:, 0]) + b * torch.sin(2 * pos[:, 1])).reshape(1, 32, 32)
    advection = solver.to_grid(solver.advection(solver.to_spectral(w)))[0].reshape(-1)
    exact = 1.5 * a * b * torch.sin(pos[:, 0]) * torch.cos(2 * pos[:, 1])
    torch.testing.assert_close(advection, exact, atol=1e-12, rtol=0)
    u, v = solver.velocity(solver.to_spectral(w))
    torch.testing.assert_close(u[0].reshape(-1), 0.5 * b * torch.cos(2 * pos[:, 1]), atol=1e-12, rtol=0)
    torch.testing.assert_close(v[0].reshape(-1), a * torch.sin(pos[:, 0]), atol=1e-12, rtol=0)


def test_advection_of_a_random_field_equals_the_pointwise_product():
    # modes |k| <= 4 on a 32-grid: the product has modes <= 8 < 32/3, so the dealiased
    # pseudo-spectral product is the exact one; compare at random off-grid points
    solver = KolmogorovSolver(n=32)
    c = solver.initial_spectral([PeriodicGaussianField(alpha=1.0, tau=1.0, sigma=5.0, modes=4).sample(0, 0)])
    pts = torch.rand(200, 2, dtype=torch.float64) * LENGTH
    psi = c * solver.inverse_k2
    u = evaluate(1j * solver.ky * psi, pts)
    v = evaluate(-1j * solver.kx * psi, pts)
    wx = evaluate(1j * solver.kx * c, pts)
    wy = evaluate(1j * solver.ky * c, pts)
    got = evaluate(solver.advection(c), pts)
    torch.testing.assert_close(got, u * wx + v * wy, atol=1e-11, rtol=0)


def test_laminar_kolmogorov_flow_is_steady():
    # nu Delta omega - A n cos(n y) = 0 for omega = -(A / (nu n)) cos(n y) (a shear flow, no
    # advection): checks the sign and size of the forcing
    solver = KolmogorovSolver(n=16, amplitude=1.5, step=0.02)
    pos = solver.grid
    steady = (-1.5 / (solver.nu * 4) * torch.cos(4 * pos[:, 1])).reshape(1, 16, 16)
    out = solver.solve(steady, [1.0, 3.0])
    assert float((out[0] - steady).abs().max()) < 1e-10 * float(steady.abs().max())
    # and the forcing drives a fluid at rest toward it: a shear flow has no advection, so
    # d omega / dt = nu Delta omega - A n cos(n y) from rest gives
    # omega(t) = -A n cos(n y) (1 - exp(-nu n^2 t)) / (nu n^2), which the solver's integrating
    # factor reproduces to rounding (a few FFTs of 16^2 values: 1e-11 of the size is 1e4 eps)
    forcing = (-1.5 * 4 * torch.cos(4 * pos[:, 1])).reshape(16, 16)
    for t in (1e-3, 1.0):
        rest = solver.solve(torch.zeros(1, 16, 16), [t])[0, 0]
        exact = forcing * -math.expm1(-solver.nu * 16 * t) / (solver.nu * 16)
        torch.testing.assert_close(rest, exact, atol=1e-11 * float(exact.abs().max()), rtol=0)


def test_inviscid_dealiased_flow_conserves_energy_and_enstrophy():
    # the 2/3 rule makes the semi-discrete equation a Galerkin truncation, which conserves both
    # quadratic invariants; RK4 changes them by O(h^4) only (without dealiasing: ~20 %)
    solver = KolmogorovSolver(n=24, nu=0.0, amplitude=0.0, step=4e-3)
    w0 = solver.initial_spectral([PeriodicGaussianField(alpha=2.0, tau=3.0, sigma=30.0, modes=7).sample(1, 0)])
    w1 = solver.advance(w0, 250)
    assert float((w1 - w0).abs().norm() / w0.abs().norm()) > 0.5  # the flow did move
    for before, after in zip(_invariants(solver, w0), _invariants(solver, w1)):
        assert abs(after - before) < 1e-8 * before


def test_time_stepping_is_fourth_order():
    field = PeriodicGaussianField(alpha=3.0, tau=3.0, sigma=60.0, modes=8)
    solver = KolmogorovSolver(n=32)
    w0 = solver.initial_spectral([field.sample(2, 0), field.sample(2, 1)])
    reference = solver.advance(w0, 128, 1 / 128)
    steps = [8, 16, 32]
    errors = [float((solver.advance(w0, m, 1 / m) - reference).abs().norm() / reference.abs().norm())
              for m in steps]
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert -4.5 < slope < -3.5, errors


def test_spatial_resolution_converges_spectrally():
    # the same smooth initial condition, solved on 32^2, 64^2 and 128^2 grids up to t = 0.5 and
    # compared at random points: the 64-grid is closer to the 128-grid than the 32-grid by far
    field = PeriodicGaussianField(alpha=3.0, tau=3.0, sigma=60.0, modes=40)
    pts = torch.rand(300, 2, dtype=torch.float64) * LENGTH
    values = {}
    for n in (32, 64, 128):
        solver = KolmogorovSolver(n=n, step=1 / 64)
        values[n] = evaluate(solver.solve_spectral(solver.initial_spectral([field.sample(3, 0)]), [0.5])[:, 0], pts)
    e32 = float((values[32] - values[128]).norm() / values[128].norm())
    e64 = float((values[64] - values[128]).norm() / values[128].norm())
    assert e64 < e32 / 10 and e64 < 2e-3, (e32, e64)


def test_initial_condition_spectrum_matches_the_covariance():
    # E|c_k|^2 = sigma^2 (|k|^2 + tau^2)^-alpha / (2 pi)^2 for the Fourier coefficients of the
    # grid values (the paper's 7^3 (-Delta + 49 I)^-5)
    field = PeriodicGaussianField(modes=8)  # the paper's measure, modes |k_j| <= 8
    n, num = 24, 3000
    coef = np.stack([np.fft.fft2(field.sample(7, i).on_grid(n)) / n**2 for i in range(num)])
    for kx, ky in [(1, 0), (0, 2), (3, -1), (2, 5)]:
        power = np.abs(coef[:, kx % n, ky % n]) ** 2
        exact = 7.0**3 * (kx**2 + ky**2 + 49.0) ** -5 / LENGTH**2
        # |c_k|^2 is exponential with mean `exact`: the sample mean has standard error exact / sqrt(num)
        assert abs(power.mean() - exact) < 4 * exact / math.sqrt(num), (kx, ky, power.mean() / exact)
    assert np.abs(coef[:, 0, 0]).max() < 1e-15  # mean zero
    # the pointwise variance: sum of the eigenvalues over (2 pi)^2, about 1.07e-3 squared
    values = np.stack([field.sample(8, i)(np.array([[0.3, 5.0]]))[0] for i in range(num)])
    variance = field.eigenvalues.sum() / LENGTH**2
    assert abs(values.var() - variance) < 4 * variance * math.sqrt(2 / num)
    # with all modes (K = 32) the standard deviation is about 1.07e-3
    assert 1.0e-3 < math.sqrt(PeriodicGaussianField().eigenvalues.sum()) / LENGTH < 1.1e-3


def test_covariance_operator_has_the_fourier_eigenpairs():
    # int C(x, y) cos(k . y) dy = lambda_k cos(k . x) (midpoint rule, exact for trig polynomials)
    field = PeriodicGaussianField(alpha=2.0, tau=2.0, sigma=3.0, modes=4)
    m = 12
    g = (np.arange(m) + 0.5) * LENGTH / m
    y = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    x = np.array([[0.4, 1.1], [3.0, 5.5]])
    applied = field.covariance(x, y) @ np.cos(2 * y[:, 0] - y[:, 1]) * (LENGTH / m) ** 2
    eig = 3.0**2 * (5.0 + 4.0) ** -2.0
    np.testing.assert_allclose(applied, eig * np.cos(2 * x[:, 0] - x[:, 1]), rtol=1e-12)


def test_samples_are_functions_seeded_per_sample():
    field = PeriodicGaussianField(modes=6)
    a, b = field.sample(3, 5), field.sample(3, 5)
    np.testing.assert_array_equal(a.coefficients, b.coefficients)
    assert not np.allclose(field.sample(3, 6).coefficients, a.coefficients)
    assert not np.allclose(field.sample(4, 5).coefficients, a.coefficients)
    # a real trigonometric polynomial: grid values (FFT) equal pointwise evaluation, numpy = torch
    n = 16
    g = np.arange(n) * LENGTH / n
    pts = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    np.testing.assert_allclose(a.on_grid(n).reshape(-1), a(pts), atol=1e-17)
    np.testing.assert_allclose(a(torch.as_tensor(pts)).numpy(), a(pts), rtol=0, atol=0)
    # periodic: shifting by 2 pi changes nothing
    np.testing.assert_allclose(a(pts + LENGTH), a(pts), atol=1e-17)


def test_pairs_depend_only_on_seed_and_index():
    solver = KolmogorovSolver(n=16, dtype=torch.float64)
    kw = dict(time=0.5, interval=0.1, solver=solver, field=PeriodicGaussianField(modes=8))
    first, second = kolmogorov_pairs(4, seed=2, batch_size=3, **kw)
    late_first, late_second = kolmogorov_pairs(2, seed=2, start=2, batch_size=1, **kw)
    torch.testing.assert_close(late_first, first[2:], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(late_second, second[2:], rtol=1e-12, atol=1e-15)
    other, _ = kolmogorov_pairs(1, seed=3, **kw)
    assert not torch.allclose(other[0], first[0])
    # grid evaluation of the coefficients equals the solver's own grid values
    pos = solver.grid
    torch.testing.assert_close(evaluate(first, pos), solver.to_grid(first).reshape(4, -1), atol=1e-12, rtol=0)


def test_periodic_voronoi_weights_tile_the_torus_and_integrate_trig_polynomials():
    # on the grid every cell is a square of side 2 pi / n
    pos = torus_grid(8)[0].numpy()
    np.testing.assert_allclose(periodic_voronoi_weights(pos), (LENGTH / 8) ** 2, rtol=1e-10)
    # integral of f over the torus: (2 pi)^2 (1 + 1/4); the cosines integrate to zero
    f = lambda p: (1 + np.cos(p[:, 0]) * np.sin(2 * p[:, 1])) ** 2 + np.cos(p[:, 0]) + np.cos(p[:, 1])  # noqa: E731
    exact = LENGTH**2 * 1.25
    sizes = [250, 1000, 4000]
    for density, most in (("uniform", -1.2), ("graded", -0.6)):
        rms = []
        for num in sizes:
            errors = []
            for seed in range(4):
                p = scattered_points(num, density, seed=100 * seed + num)
                w = periodic_voronoi_weights(p)
                assert abs(w.sum() - LENGTH**2) < 1e-9 and (w > 0).all()
                errors.append((w @ f(p) - exact) / exact)
            rms.append(math.sqrt(np.mean(np.square(errors))))
        slope = np.polyfit(np.log(sizes), np.log(rms), 1)[0]
        assert slope < most and rms[-1] < 1e-2, (density, rms)
    # the rule is translation invariant on the torus (a rule clipped to a box is not)
    p = scattered_points(500, "patchy", seed=3)
    np.testing.assert_allclose(periodic_voronoi_weights((p + [1.0, 2.5]) % LENGTH),
                               periodic_voronoi_weights(p), rtol=1e-7, atol=1e-12)
    # the node average of the graded cloud is biased: E_rho[cos x] = 0.4, not 0
    p = scattered_points(4000, "graded", seed=1)
    assert abs(f(p).mean() * LENGTH**2 - exact) / exact > 0.4


def test_samples_on_the_grid_and_scattered_points():
    solver = KolmogorovSolver(n=16)
    first, second = kolmogorov_pairs(2, seed=0, time=0.2, interval=0.1, solver=solver,
                                     field=PeriodicGaussianField(modes=8))
    # grid values: subsampled (12 does not divide 16: evaluated), refined by zero padding, all exact
    for m in (8, 12, 16, 40):
        pos = torus_grid(m)[0]
        torch.testing.assert_close(grid_values(first, m).reshape(2, -1), evaluate(first, pos), atol=1e-12, rtol=0)
    pos, weight, cells = torus_grid(12)
    grid = pair_samples(grid_values(first, 12).reshape(2, -1), grid_values(second, 12).reshape(2, -1),
                        pos, weight, cells)
    assert len(grid) == 2 and grid[0].x.shape == (144, 1) and grid[0].cells.shape == (2 * 11**2, 3)
    p = torch.as_tensor(scattered_points(300, "patchy", seed=0))
    cloud = pair_samples(evaluate(first, p), evaluate(second, p), p,
                         torch.as_tensor(periodic_voronoi_weights(p)), dtype=torch.float64)
    assert "cells" not in cloud[0]
    torch.testing.assert_close(cloud[1].y[:, 0], evaluate(second[1:], p)[0])
    # the grid cells are positively oriented triangles covering the square minus the seam strip
    a, b, c = (pos[cells[:, i]] for i in range(3))
    area = 0.5 * ((b - a)[:, 0] * (c - a)[:, 1] - (b - a)[:, 1] * (c - a)[:, 0])
    assert (area > 0).all()
    torch.testing.assert_close(area.sum(), torch.tensor((LENGTH * 11 / 12) ** 2, dtype=area.dtype))


def test_bad_inputs_raise_config_errors():
    with pytest.raises(ConfigError, match="even"):
        KolmogorovSolver(n=33)
    with pytest.raises(ConfigError, match="viscosity"):
        KolmogorovSolver(nu=-1.0)
    with pytest.raises(ConfigError, match="outside the torus"):
        periodic_voronoi_weights(np.array([[0.1, 0.2], [7.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ConfigError, match="density"):
        scattered_points(10, "clustered")
    with pytest.raises(ConfigError, match="aliases"):
        PeriodicGaussianField(modes=8).sample(0, 0).on_grid(16)
    with pytest.raises(ConfigError, match="increasing"):
        KolmogorovSolver(n=16).solve(torch.zeros(1, 16, 16), [1.0, 0.5])
    # a step far too long for the flow is refused instead of returning a blown-up field
    solver = KolmogorovSolver(n=16, step=2.0)
    with pytest.raises(ConfigError, match="Courant|not finite"):
        solver.solve(torch.zeros(1, 16, 16), [20.0])
