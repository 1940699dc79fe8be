"""Lorenz-63 and the controlled ODE as functions of time: integrator accuracy against an
independent reference and a closed form, per-sample seeding, time grids and their quadrature."""

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from geoattn.mesh import node_average_weights
from problems.odes import (ATOL, DT, HORIZON, RTOL, OPERATORS, TRANSFER_DTS, ControlledODE, Lorenz63,
                           check_times, nonuniform_grid, ode_samples, operator_data,
                           time_weights, uniform_grid)


def lorenz_rk4(initial: np.ndarray, h: float, horizon: float, every: int) -> np.ndarray:
    """Classical fixed-step RK4 for Lorenz-63 (sigma 10, rho 28, beta 8/3), written out here as
    an independent reference; states ``[B, 3]``, returns every ``every``-th step ``[B, M, 3]``."""
    def f(s):
        x, y, z = s[:, 0], s[:, 1], s[:, 2]
        return np.stack([10 * (y - x), x * (28 - z) - y, x * y - 8 / 3 * z], 1)

    s, out = np.array(initial, float), [np.array(initial, float)]
    for k in range(round(horizon / h)):
        k1 = f(s)
        k2 = f(s + h / 2 * k1)
        k3 = f(s + h / 2 * k2)
        k4 = f(s + h * k3)
        s = s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        if (k + 1) % every == 0:
            out.append(s)
    return np.stack(out, 1)


def test_lorenz_matches_an_independent_rk4_and_converges_with_the_tolerance():
    # every grid of the experiments (0.005, 0.0075, 0.01, 0.015, 0.02, eq. 41) lies on the
    # 0.0025 grid, which RK4 with h = 2.5e-4 hits exactly; its own error is ~1e-9 (checked by
    # halving h: the two references differ by 1.0e-9 at most)
    t = uniform_grid(0.0025)
    problem = Lorenz63()
    initial = np.stack([problem.initial(3, i) for i in range(3)])
    reference = lorenz_rk4(initial, 2.5e-4, HORIZON, 10)  # [3, 801, 3]
    scale = np.abs(reference).max()
    default = np.stack([problem.sample(3, i)(t) for i in range(3)])
    tight = np.stack([Lorenz63(rtol=1e-12, atol=1e-14).sample(3, i)(t) for i in range(3)])
    # rtol 1e-10 (the data): 3e-9 of the scale after the chaotic growth over T = 2
    assert np.abs(default - reference).max() < 2e-8 * scale
    # the difference is the integrator's tolerance: 100x tighter, ~100x closer
    assert np.abs(tight - reference).max() < 2e-10 * scale
    np.testing.assert_allclose(default[:, 0], initial, rtol=0, atol=1e-13)


def test_controlled_ode_closed_form_and_integrator():
    """dz = sin(z) du has z(t) = 2 arctan(tan(z0/2) exp(u(t) - u(0))): checked first to solve the
    ODE (finite differences), then used as the exact solution for the integrator."""
    for index, z0 in ((0, 1.0), (1, 1.0), (2, 2.5), (3, 0.2)):
        problem = ControlledODE(z0=z0)
        trajectory = problem.sample(7, index)
        t = np.linspace(0.0, HORIZON, 1001)
        u = trajectory.control(t)
        exact = lambda s: 2 * np.arctan(np.tan(z0 / 2) * np.exp(trajectory.control(s) - trajectory.control(0.0)))  # noqa: E731
        # the closed form solves dz/dt = sin(z) du/dt (central differences, error O(h^2) ~ 1e-8)
        h, inner = 1e-5, t[1:-1]
        dz = (exact(inner + h) - exact(inner - h)) / (2 * h)
        du = trajectory.eta * np.pi * np.cos(np.pi * np.outer(inner, trajectory.eta)) @ trajectory.xi
        np.testing.assert_allclose(dz, np.sin(exact(inner)) * du, rtol=0, atol=1e-6 * (1 + np.abs(du).max()))
        # the integrator reproduces it, at every time of a fine grid (dense output). DOP853 keeps
        # each step's local error near rtol |z| + atol; an error made at time s reaches time t
        # multiplied by dz(t)/dz(s) = sin z(t) / sin z(s) (differentiate the closed form), so the
        # global error is at most steps * (rtol max|z| + atol) * max sin z / min sin z.
        values = trajectory(t)
        np.testing.assert_array_equal(values[:, 0], u)
        z, steps = exact(t), len(trajectory.solution.ts) - 1
        bound = steps * (RTOL * np.abs(z).max() + ATOL) * np.sin(z).max() / np.sin(z).min()
        error = np.abs(values[:, 1] - z).max()
        assert error < bound
        # ... and the error is the integrator's: 1000x tighter tolerances give 100x less (or better)
        tight = ControlledODE(z0=z0, rtol=RTOL * 1e-3, atol=ATOL * 1e-3).sample(7, index)(t)[:, 1]
        assert np.abs(tight - z).max() < error / 100
        assert abs(values[0, 1] - z0) < 1e-14 and np.all((values[:, 1] > 0) & (values[:, 1] < np.pi))


def test_controlled_ode_control_distribution():
    # xi ~ N(0, 1), eta ~ U(0, 10): moments of 10 000 draws within 5 standard errors
    draws = [ControlledODE().control_parameters(0, i) for i in range(1000)]
    xi, eta = np.concatenate([d[0] for d in draws]), np.concatenate([d[1] for d in draws])
    n = len(xi)
    assert abs(xi.mean()) < 5 / np.sqrt(n) and abs(xi.var() - 1) < 5 * np.sqrt(2 / n)
    assert eta.min() >= 0 and eta.max() <= 10
    assert abs(eta.mean() - 5) < 5 * np.sqrt(100 / 12 / n)
    u = ControlledODE().sample(0, 0).control(np.array([0.0, 0.5]))
    assert u[0] == 0.0 and u[1] != 0.0


def test_lorenz_initial_conditions_and_operator_one_is_a_solution_operator():
    problem = Lorenz63()
    s0 = np.stack([problem.initial(1, i) for i in range(2000)])
    assert np.all(np.abs(s0[:, :2]) <= 15) and np.all((s0[:, 2] >= 0) & (s0[:, 2] <= 40))
    assert abs(s0[:, 2].mean() - 20) < 5 * 40 / np.sqrt(12 * 2000)
    # given x(t) and (y(0), z(0)), (y, z) solve the linear ODEs y' = x(rho - z) - y, z' = xy - beta z
    trajectory = problem.sample(1, 0)
    x = lambda s: trajectory(np.atleast_1d(s))[0, 0]  # noqa: E731

    def rhs(s, yz):
        return [x(s) * (28 - yz[1]) - yz[0], x(s) * yz[0] - 8 / 3 * yz[1]]

    t = nonuniform_grid()
    data = operator_data(trajectory, t, "lorenz1", dtype=torch.float64)
    again = solve_ivp(rhs, (0, HORIZON), data.x[0, 1:].numpy(), method="DOP853", t_eval=t,
                      rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(again.y.T, data.y.numpy(), rtol=0, atol=1e-6)


def test_samples_depend_only_on_seed_and_index():
    grids = {"train": uniform_grid(), "test": nonuniform_grid()}
    for operator in OPERATORS:
        five = ode_samples(operator, grids, 4, seed=2)
        late = ode_samples(operator, grids, 2, seed=2, start=2)
        for name in grids:
            for a, b in zip(five[name][2:], late[name]):
                for key in ("pos", "weight", "x", "y"):
                    assert torch.equal(a[key], b[key])
        other = ode_samples(operator, {"train": grids["train"]}, 1, seed=3)["train"][0]
        assert not torch.allclose(other.y, five["train"][0].y)
        # the same continuum sample on both grids: equal values at the shared times (every
        # time of the test grid is on the training grid, up to rounding of the times)
        shared = np.abs(grids["train"][:, None] - grids["test"][None]).min(1) < 1e-12
        assert shared.sum() == len(grids["test"])
        torch.testing.assert_close(five["train"][1].y[torch.as_tensor(shared)], five["test"][1].y)
    assert not np.array_equal(Lorenz63().initial(0, 1), Lorenz63().initial(1, 0))


def test_operator_data_fields():
    trajectory = Lorenz63().sample(0, 5)
    t = uniform_grid()
    values = trajectory(t)
    one = operator_data(trajectory, t, "lorenz1", dtype=torch.float64)
    assert one.x.shape == (201, 3) and one.y.shape == (201, 2) and one.pos.shape == (201, 1)
    np.testing.assert_array_equal(one.pos[:, 0].numpy(), t)
    np.testing.assert_allclose(one.x[:, 0].numpy(), values[:, 0])
    np.testing.assert_allclose(one.x[:, 1:].numpy(), np.broadcast_to(trajectory.initial[1:], (201, 2)), atol=1e-13)
    np.testing.assert_allclose(one.y.numpy(), values[:, 1:])
    two = operator_data(trajectory, t, "lorenz2")
    assert two.x.shape == (201, 1) and two.y.shape == (201, 1) and two.x.dtype == torch.float32
    cde = operator_data(ControlledODE().sample(0, 0), nonuniform_grid(), "cde")
    assert cde.x.shape == (151, 1) and abs(float(cde.weight.sum()) - HORIZON) < 1e-6
    assert {k: (s.in_channels, s.out_channels) for k, s in OPERATORS.items()} == {
        "lorenz1": (3, 2), "lorenz2": (1, 1), "cde": (1, 1)}


def test_paper_grids():
    t = nonuniform_grid(DT, HORIZON)  # eq. (41): dt on [0, T/2], 2 dt on [T/2, T]
    assert len(t) == 151 and t[0] == 0 and t[-1] == HORIZON and 1.0 in t
    steps = np.diff(t)
    np.testing.assert_allclose(steps[:100], DT, rtol=1e-9)
    np.testing.assert_allclose(steps[100:], 2 * DT, rtol=1e-9)
    assert len(uniform_grid(DT)) == 201
    for dt, n in zip(TRANSFER_DTS, (401, 268, 135, 101)):  # 0.0075 and 0.015 do not divide T = 2:
        g = uniform_grid(dt)  # a shorter last step keeps the interval [0, 2]
        assert len(g) == n and g[0] == 0 and g[-1] == HORIZON
        np.testing.assert_allclose(np.diff(g)[:-1], dt, rtol=1e-9)
        assert 0 < g[-1] - g[-2] <= dt * (1 + 1e-9)
    assert len(uniform_grid(0.1 * 3, 0.9)) == 4  # 0.3 * 3 rounds to 0.8999...; no sliver step


def test_trapezoid_weights_exact_for_affine_and_second_order():
    rng = np.random.default_rng(0)
    random = np.sort(np.concatenate([[0.0, 2.0], rng.uniform(0, 2, 30)]))
    for t in (uniform_grid(), nonuniform_grid(), uniform_grid(0.0075), random):
        w = time_weights(t, torch.float64).numpy()
        # the trapezoid rule written out
        hand = np.zeros(len(t))
        hand[:-1] += np.diff(t) / 2
        hand[1:] += np.diff(t) / 2
        np.testing.assert_allclose(w, hand, rtol=1e-13, atol=1e-16)
        # exact for degree 1: int_0^2 (3 - 2t) dt = 2
        assert abs(w @ (3 - 2 * t) - 2.0) < 1e-13
    # second order on the eq. (41) grids as dt halves; f = exp(t) sin(5t)
    f = lambda s: np.exp(s) * np.sin(5 * s)  # noqa: E731
    exact = (np.exp(2) * (np.sin(10) - 5 * np.cos(10)) + 5) / 26
    dts = np.array([0.04, 0.02, 0.01, 0.005])
    errors = [abs(time_weights(nonuniform_grid(dt), torch.float64).numpy() @ f(nonuniform_grid(dt)) - exact)
              for dt in dts]
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert 1.95 < slope < 2.05, slope
    # node-average weights (the ablation) do not converge on the non-uniform grid: they count the
    # first half twice as much as the second; on [0, 2] with f = 1 on [0, 1], 0 after -> 4/3, not 1
    step = lambda s: (s < 1).astype(float)  # noqa: E731
    for dt in (0.01, 0.0025):
        t = nonuniform_grid(dt)
        avg = node_average_weights(time_weights(t, torch.float64)).numpy()
        # the jump at t = 1 falls in one cell: an O(dt) error, at most dt (2x margin on ~0.9 dt)
        assert abs(avg @ step(t) - 4 / 3) < 2 * dt


def test_initial_condition_lift_is_separate_when_the_first_lift_layer_is_linear():
    """:func:`operator_data` documents that a model's lift of [x(t); y0; z0; t] is
    W_x x(t) + W_0 (y0, z0) + W_t t + b in its first layer; that holds because the layer is linear."""
    from geoattn.models import TNO

    model = TNO(3, 2, dim=1, width=16, depth=1, num_heads=2).double()
    first = model.lift[0]
    assert isinstance(first, torch.nn.Linear)
    data = operator_data(Lorenz63().sample(0, 0), uniform_grid(0.1), "lorenz1", dtype=torch.float64)
    features = model.inputs(data.x, data.pos)  # [x, y0, z0, t]
    W, b = first.weight, first.bias
    split = data.x[:, :1] @ W[:, :1].T + data.x[:, 1:3] @ W[:, 1:3].T + data.pos @ W[:, 3:].T + b
    torch.testing.assert_close(first(features), split)
    # the initial-condition part is one vector, the same at every time
    ic = data.x[:, 1:3] @ W[:, 1:3].T
    torch.testing.assert_close(ic, ic[:1].expand_as(ic))


def test_errors():
    with pytest.raises(ValueError, match="dt must be"):
        uniform_grid(0.0)
    with pytest.raises(ValueError, match="dt must be"):
        uniform_grid(3.0, 2.0)
    with pytest.raises(ValueError, match="horizon"):
        nonuniform_grid(0.01, -1.0)
    with pytest.raises(ValueError, match="strictly increasing; times 1 and 2"):
        check_times([0.0, 0.5, 0.5, 1.0])
    with pytest.raises(ValueError, match="finite"):
        time_weights([0.0, np.nan, 1.0])
    with pytest.raises(ValueError, match="at least two"):
        time_weights([0.0])
    trajectory = Lorenz63().sample(0, 0)
    with pytest.raises(ValueError, match=r"defined on \[0, 2.0\]; time 1 is 2.5"):
        trajectory([0.0, 2.5])
    with pytest.raises(ValueError, match=r"lie in \[0, 2.0\]"):
        operator_data(trajectory, [0.0, 1.0, 3.0], "lorenz2")
    with pytest.raises(ValueError, match="unknown operator 'lorenz3'"):
        operator_data(trajectory, uniform_grid(), "lorenz3")
    with pytest.raises(ValueError, match="needs components"):
        operator_data(trajectory, uniform_grid(), "cde")
    with pytest.raises(ValueError, match="maps lorenz trajectories"):
        ode_samples("lorenz1", {"a": uniform_grid()}, 1, 0, problem=ControlledODE())
    with pytest.raises(ValueError, match="non-negative"):
        Lorenz63().sample(-1, 0)
    with pytest.raises(ValueError, match="num_terms"):
        ControlledODE(num_terms=0).sample(0, 0)
