r"""Lorenz-63 and a controlled ODE as functions of time, seen on any time grid.

The one-dimensional experiments of *Continuum Attention for Neural Operators* (Calvello,
Kovachki, Levine, Stuart, `arXiv:2406.06486 <https://arxiv.org/abs/2406.06486>`_, §6.1): operators
between trajectories on :math:`[0, T]`, learned on a uniform time grid and evaluated on other
grids. Each trajectory is drawn once per sample (sample ``i`` of stream ``seed`` depends on
``(seed, i)`` only) and solved with an error-controlled integrator with dense output, so that it
is a *function* of time: the same continuum sample can be evaluated on the training grid, on a
finer or coarser one, or on the non-uniform grid of the paper's eq. (41).

Problems:

- :class:`Lorenz63`: :math:`\dot x = \sigma(y - x)`, :math:`\dot y = x(\rho - z) - y`,
  :math:`\dot z = xy - \beta z` with :math:`\sigma = 10, \rho = 28, \beta = 8/3`, and two operators,
  ``"lorenz1"``: :math:`\{x(t), y(0), z(0)\} \mapsto \{y(t), z(t)\}` (the solution operator of the
  linear ODEs for :math:`(y, z)` driven by :math:`x`) and ``"lorenz2"``: :math:`x(t) \mapsto y(t)`
  (learnable through synchronisation);
- :class:`ControlledODE`: :math:`dz = \sin(z)\,du` driven by the random control
  :math:`u(t) = \sum_{j=1}^{J} \xi_j \sin(\pi \eta_j t)`, and the operator ``"cde"``:
  :math:`u(t) \mapsto z(t)`.

A sample on a grid :math:`0 = t_1 < \dots < t_N = T` is a :class:`~torch_geometric.data.Data` with
``pos [N, 1]`` (the times), ``weight [N]`` (trapezoid weights, :func:`time_weights`), ``x`` (input
channels) and ``y`` (target channels); see :data:`OPERATORS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from scipy.integrate import solve_ivp
from torch_geometric.data import Data

from geoattn.mesh.weights import quadrature_weights
from geoattn.optional import progress as progress_bar

#: Time horizon :math:`T` and training step :math:`\Delta t` of the paper's experiments.
HORIZON, DT = 2.0, 0.01

#: The steps, besides :data:`DT`, on which the paper evaluates the models without retraining.
TRANSFER_DTS = (0.005, 0.0075, 0.015, 0.02)

#: Relative and absolute tolerance of the integrator (DOP853).
RTOL, ATOL = 1e-10, 1e-12


def _check_horizon(horizon: float) -> float:
    horizon = float(horizon)
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon must be a positive finite time, got {horizon}")
    return horizon


def uniform_grid(dt: float = DT, horizon: float = HORIZON) -> np.ndarray:
    r"""The times :math:`\{k \Delta t\}_{k \ge 0}` in :math:`[0, T)`, and :math:`T` (eq. 42).

    When :math:`\Delta t` divides :math:`T` this is the uniform grid of :math:`T / \Delta t + 1`
    nodes; otherwise (e.g. :math:`\Delta t = 0.0075`, :math:`T = 2`) the last step is shorter, so
    that every grid covers the same interval :math:`[0, T]`. A node closer than
    :math:`10^{-9} \Delta t` to :math:`T` is taken to be :math:`T`.

    Args:
        dt: the step :math:`\Delta t`. (default: :data:`DT`)
        horizon: :math:`T`. (default: :data:`HORIZON`)

    Shapes:
        - output: ``[N]`` (float64, increasing, first ``0``, last ``T``).
    """
    horizon, dt = _check_horizon(horizon), float(dt)
    if not (math.isfinite(dt) and 0 < dt <= horizon):
        raise ValueError(f"dt must be in (0, horizon = {horizon}], got {dt}")
    steps = math.floor(horizon / dt * (1 + 1e-12))  # whole steps that fit, robust to rounding
    times = dt * np.arange(steps + 1)
    if horizon - times[-1] > 1e-9 * dt:
        times = np.append(times, horizon)
    times[-1] = horizon
    return times


def nonuniform_grid(dt: float = DT, horizon: float = HORIZON) -> np.ndarray:
    r"""The non-uniform test grid of the paper's eq. (41): step :math:`\Delta t` on
    :math:`[0, T/2]`, step :math:`2\Delta t` on :math:`[T/2, T]`.

    Eq. (41) as printed, :math:`\{n\Delta t\}_{n=0}^{N/2} \cup \{2n\Delta t\}_{n=N/2+1}^{3N/4}`,
    reaches past :math:`T`; this is the reading the text describes ("the second half ... at a
    different spacing") and the experiment code uses. For :math:`\Delta t = 0.01`, :math:`T = 2`:
    101 nodes on the first half and 50 more on the second, 151 in all (against 201 for training).

    Args:
        dt: the step :math:`\Delta t` of the first half. (default: :data:`DT`)
        horizon: :math:`T`. (default: :data:`HORIZON`)

    Shapes:
        - output: ``[N]`` (float64, increasing, first ``0``, last ``T``).
    """
    horizon = _check_horizon(horizon)
    first = uniform_grid(dt, horizon / 2)
    second = horizon / 2 + uniform_grid(2 * dt, horizon / 2)[1:]
    second[-1] = horizon
    return np.concatenate([first, second])


def check_times(times, horizon: float | None = None) -> np.ndarray:
    """``times`` as a float64 array ``[N]`` if it is a valid time grid, else a :class:`ValueError`:
    at least two finite, strictly increasing times, within ``[0, horizon]`` when one is given."""
    t = np.asarray(times.detach().cpu() if isinstance(times, torch.Tensor) else times, dtype=float)
    t = t.reshape(-1) if t.ndim == 2 and t.shape[1] == 1 else t
    if t.ndim != 1 or t.size < 2:
        raise ValueError(f"times must be a 1-D grid of at least two times, got shape {np.shape(times)}")
    if not np.all(np.isfinite(t)):
        i = int(np.flatnonzero(~np.isfinite(t))[0])
        raise ValueError(f"times must be finite; time {i} is {t[i]}")
    steps = np.diff(t)
    if np.any(steps <= 0):
        i = int(np.flatnonzero(steps <= 0)[0])
        raise ValueError(f"times must be strictly increasing; times {i} and {i + 1} are {t[i]} and {t[i + 1]}")
    if horizon is not None and (t[0] < -1e-12 or t[-1] > horizon * (1 + 1e-12)):
        raise ValueError(f"times must lie in [0, {horizon}], got [{t[0]}, {t[-1]}]")
    return t


def time_weights(times, dtype: torch.dtype | None = None) -> torch.Tensor:
    r"""Trapezoid weights of a time grid: the lumped mass of its line cells
    (:func:`~geoattn.mesh.quadrature_weights`),

    .. math::
        w_1 = \tfrac12 (t_2 - t_1), \qquad w_k = \tfrac12 (t_{k+1} - t_{k-1}), \qquad
        w_N = \tfrac12 (t_N - t_{N-1}),

    so :math:`\sum_k w_k f(t_k)` is the trapezoid rule: exact for affine :math:`f`, second order
    for smooth :math:`f`. These are the weights of the paper's eqs. (58)-(59).

    Args:
        times: strictly increasing times ``[N]``.
        dtype: floating dtype (default: torch's default dtype).

    Shapes:
        - output: ``[N]``.
    """
    t = check_times(times)
    cells = np.stack([np.arange(len(t) - 1), np.arange(1, len(t))], 1)
    w = quadrature_weights(t[:, None], cells, "line")
    return w.to(dtype or torch.get_default_dtype())


def _rng(seed: int, index: int) -> np.random.Generator:
    if seed < 0 or index < 0:
        raise ValueError(f"seed and index must be non-negative, got {seed}, {index}")
    return np.random.default_rng([int(seed), int(index)])


class Trajectory:
    """A solved trajectory: a function of time, callable on any times in ``[0, horizon]``.

    Args:
        solution: the dense output of :func:`scipy.integrate.solve_ivp` (``sol(t) -> [C, N]``).
        horizon: the end time :math:`T`.
        initial: the initial state ``[C]``.
        names: the names of the components.

    Shapes:
        - **input:** times ``[N]``.
        - **output:** values ``[N, C]`` (float64), one column per name of :attr:`names`.
    """

    def __init__(self, solution, horizon: float, initial: np.ndarray, names: tuple[str, ...]):
        self.solution, self.horizon = solution, float(horizon)
        self.initial, self.names = np.asarray(initial, dtype=float), tuple(names)

    def _times(self, times) -> np.ndarray:
        """``times`` as a float64 array ``[N]``, or a :class:`ValueError` if one is not finite or
        lies outside ``[0, horizon]``."""
        t = np.asarray(times.detach().cpu() if isinstance(times, torch.Tensor) else times, dtype=float)
        t = t.reshape(-1)
        bad = ~np.isfinite(t) | (t < 0) | (t > self.horizon * (1 + 1e-12))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"the trajectory is defined on [0, {self.horizon}]; time {i} is {t[i]}")
        return t

    def __call__(self, times) -> np.ndarray:
        return self.solution(self._times(times)).T  # [N, C]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(horizon={self.horizon}, names={self.names})"


def _solve(rhs, initial, horizon: float, rtol: float, atol: float):
    sol = solve_ivp(rhs, (0.0, horizon), initial, method="DOP853", rtol=rtol, atol=atol,
                    dense_output=True)
    if not sol.success:
        raise RuntimeError(f"the integrator failed from {list(initial)}: {sol.message}")
    return sol.sol


@dataclass(frozen=True)
class Lorenz63:
    r"""The Lorenz-63 system with random initial conditions.

    .. math::
        \dot x = \sigma (y - x), \qquad \dot y = x (\rho - z) - y, \qquad \dot z = x y - \beta z,

    with :math:`x(0), y(0) \sim U(-15, 15)` and :math:`z(0) \sim U(0, 40)` (the paper does not give
    the distribution; these are the ranges of its experiment code), solved on :math:`[0, T]` by
    DOP853 (order 8) with dense output at relative tolerance ``rtol`` and absolute ``atol``.

    Args:
        sigma, rho, beta: the parameters (default: ``10``, ``28``, ``8/3``).
        horizon: :math:`T` (default: :data:`HORIZON`).
        xy_range: the range of :math:`x(0)` and :math:`y(0)` (default: ``(-15, 15)``).
        z_range: the range of :math:`z(0)` (default: ``(0, 40)``).
        rtol, atol: integrator tolerances (default: :data:`RTOL`, :data:`ATOL`).
    """

    sigma: float = 10.0
    rho: float = 28.0
    beta: float = 8.0 / 3.0
    horizon: float = HORIZON
    xy_range: tuple[float, float] = (-15.0, 15.0)
    z_range: tuple[float, float] = (0.0, 40.0)
    rtol: float = RTOL
    atol: float = ATOL

    def rhs(self, t: float, state: np.ndarray) -> np.ndarray:
        """The vector field :math:`f(x, y, z)`, ``[3] -> [3]`` (``t`` is unused: autonomous)."""
        x, y, z = state
        return np.array([self.sigma * (y - x), x * (self.rho - z) - y, x * y - self.beta * z])

    def initial(self, seed: int, index: int) -> np.ndarray:
        """The initial state ``[3]`` of sample ``index`` of stream ``seed``."""
        rng = _rng(seed, index)
        xy = rng.uniform(*self.xy_range, size=2)
        return np.array([xy[0], xy[1], rng.uniform(*self.z_range)])

    def sample(self, seed: int, index: int) -> Trajectory:
        """Sample ``index`` of stream ``seed`` (depends on ``(seed, index)`` only), solved:
        a :class:`Trajectory` with components ``("x", "y", "z")``."""
        s0 = self.initial(seed, index)
        return Trajectory(_solve(self.rhs, s0, _check_horizon(self.horizon), self.rtol, self.atol),
                          self.horizon, s0, ("x", "y", "z"))


class ControlTrajectory(Trajectory):
    r"""A solution of the controlled ODE with its control: columns ``("u", "z")``.

    Args:
        solution, horizon, initial: as :class:`Trajectory` (of :math:`z` alone).
        xi, eta: the control's amplitudes and frequencies ``[J]``.
    """

    def __init__(self, solution, horizon: float, initial: np.ndarray, xi: np.ndarray, eta: np.ndarray):
        super().__init__(solution, horizon, initial, ("u", "z"))
        self.xi, self.eta = np.asarray(xi, float), np.asarray(eta, float)

    def control(self, times) -> np.ndarray:
        r""":math:`u(t) = \sum_j \xi_j \sin(\pi \eta_j t)` at ``times [N]`` (exact), ``[N]``."""
        t = np.asarray(times, dtype=float).reshape(-1)
        return np.sin(np.pi * np.outer(t, self.eta)) @ self.xi

    def __call__(self, times) -> np.ndarray:
        t = self._times(times)
        return np.stack([self.control(t), self.solution(t).reshape(-1)], 1)


@dataclass(frozen=True)
class ControlledODE:
    r"""The controlled ODE :math:`dz = \sin(z)\,du`, :math:`z(0) = z_0`, with the random control

    .. math::
        u(t) = \sum_{j=1}^{J} \xi_j \sin(\pi \eta_j t), \qquad
        \xi_j \sim \mathcal N(0, 1), \quad \eta_j \sim U(0, J) \quad \text{i.i.d.}, \quad J = 10,

    solved as :math:`\dot z = \sin(z)\,\dot u(t)` by DOP853 with dense output. The paper gives no
    :math:`z_0`; its experiment code uses :math:`z_0 = 1` (and damps term :math:`j` by
    :math:`1/j`, which the paper does not: not done here). For :math:`z_0 \in (0, \pi)` the
    solution is :math:`z(t) = 2\arctan\big(\tan(z_0/2)\, e^{u(t) - u(0)}\big)`, which the tests use
    to check the integrator.

    Args:
        num_terms: :math:`J` (default: ``10``).
        z0: :math:`z_0` (default: ``1``).
        horizon: :math:`T` (default: :data:`HORIZON`).
        rtol, atol: integrator tolerances (default: :data:`RTOL`, :data:`ATOL`).
    """

    num_terms: int = 10
    z0: float = 1.0
    horizon: float = HORIZON
    rtol: float = RTOL
    atol: float = ATOL

    def control_parameters(self, seed: int, index: int) -> tuple[np.ndarray, np.ndarray]:
        r"""The amplitudes :math:`\xi` and frequencies :math:`\eta` (``[J]`` each) of sample
        ``index`` of stream ``seed``."""
        if self.num_terms < 1:
            raise ValueError(f"num_terms must be at least 1, got {self.num_terms}")
        rng = _rng(seed, index)
        xi = rng.standard_normal(self.num_terms)
        eta = rng.uniform(0.0, self.num_terms, self.num_terms)
        return xi, eta

    def sample(self, seed: int, index: int) -> ControlTrajectory:
        """Sample ``index`` of stream ``seed`` (depends on ``(seed, index)`` only), solved:
        a :class:`ControlTrajectory` with columns ``("u", "z")``."""
        xi, eta = self.control_parameters(seed, index)
        rate = np.pi * eta * xi  # du/dt = sum_j rate_j cos(pi eta_j t)

        def rhs(t, z):
            return np.sin(z) * (np.cos(np.pi * eta * t) @ rate)

        z0 = np.array([float(self.z0)])
        sol = _solve(rhs, z0, _check_horizon(self.horizon), self.rtol, self.atol)
        return ControlTrajectory(sol, self.horizon, z0, xi, eta)


@dataclass(frozen=True)
class OperatorSpec:
    """Which columns of a problem's trajectory are the input and the target of an operator, and
    which input columns are taken at ``t = 0`` only (broadcast over time)."""

    problem: str
    inputs: tuple[str, ...]
    targets: tuple[str, ...]
    initial: tuple[str, ...] = ()

    @property
    def in_channels(self) -> int:
        return len(self.inputs) + len(self.initial)

    @property
    def out_channels(self) -> int:
        return len(self.targets)


#: The operators of the paper's §6.1, by name.
OPERATORS: dict[str, OperatorSpec] = {
    "lorenz1": OperatorSpec("lorenz", inputs=("x",), targets=("y", "z"), initial=("y", "z")),
    "lorenz2": OperatorSpec("lorenz", inputs=("x",), targets=("y",)),
    "cde": OperatorSpec("cde", inputs=("u",), targets=("z",)),
}


def operator_spec(operator: str) -> OperatorSpec:
    """The :class:`OperatorSpec` of ``operator``, or a :class:`ValueError` naming the choices."""
    if operator not in OPERATORS:
        raise ValueError(f"unknown operator {operator!r}; choose one of {sorted(OPERATORS)}")
    return OPERATORS[operator]


def problem_of(operator: str) -> Lorenz63 | ControlledODE:
    """The problem (with the paper's parameters) whose trajectories ``operator`` maps."""
    return Lorenz63() if operator_spec(operator).problem == "lorenz" else ControlledODE()


def operator_data(trajectory: Trajectory, times, operator: str,
                  dtype: torch.dtype | None = None) -> Data:
    r"""One sample of ``operator`` on the time grid ``times``.

    The input channels are the trajectory's input components at the times, followed by the
    initial values the operator takes (``"lorenz1"``: :math:`y(0), z(0)`) as channels constant in
    time. The paper lifts the initial condition by a separate matrix :math:`W_{in,0}`; here the
    model's pointwise lift sees :math:`(x(t), y_0, z_0, t)` at every node, and as its first layer
    is linear (:class:`~geoattn.models.encoder.PointwiseMLP` starts with an
    :class:`~torch.nn.Linear`), its first pre-activation is

    .. math::
        W [x(t); y_0; z_0; t] + b = W_x\,x(t) + W_0\,(y_0, z_0) + W_t\,t + b,

    a separate lift :math:`W_0` of the initial condition added to the lift of the trajectory: the
    paper's :math:`W_{in}` and :math:`W_{in,0}`, which would not separate so if the first layer
    were not linear. The difference is where :math:`W_0 (y_0, z_0)` acts: at every time here, at
    one extra token at :math:`t = 0` in the paper, a point that a quadrature gives no weight to.

    Args:
        trajectory: a solved sample (:meth:`Lorenz63.sample` or :meth:`ControlledODE.sample`).
        times: the time grid ``[N]`` (strictly increasing, in ``[0, T]``).
        operator: a name of :data:`OPERATORS`.
        dtype: floating dtype of the tensors (default: torch's default dtype).

    Returns:
        :class:`~torch_geometric.data.Data` with ``pos [N, 1]`` (times), ``weight [N]``
        (:func:`time_weights`), ``x [N, C_in]`` and ``y [N, C_out]``.
    """
    spec = operator_spec(operator)
    missing = set(spec.inputs + spec.targets + spec.initial) - set(trajectory.names)
    if missing:
        raise ValueError(f"operator {operator!r} needs components {sorted(missing)}, but the "
                         f"trajectory has {list(trajectory.names)}")
    dtype = dtype or torch.get_default_dtype()
    t = check_times(times, trajectory.horizon)
    values = trajectory(t)  # [N, C]
    col = {name: k for k, name in enumerate(trajectory.names)}
    x = values[:, [col[c] for c in spec.inputs]]
    if spec.initial:
        start = trajectory(np.zeros(1))[0, [col[c] for c in spec.initial]]
        x = np.concatenate([x, np.broadcast_to(start, (len(t), len(start)))], 1)
    y = values[:, [col[c] for c in spec.targets]]
    return Data(pos=torch.as_tensor(t[:, None], dtype=dtype), weight=time_weights(t, dtype),
                x=torch.as_tensor(x, dtype=dtype), y=torch.as_tensor(y, dtype=dtype))


def ode_samples(operator: str, grids: Mapping[str, np.ndarray], n: int, seed: int, start: int = 0,
                problem: Lorenz63 | ControlledODE | None = None, dtype: torch.dtype | None = None,
                progress: bool = False) -> dict[str, list[Data]]:
    """Samples ``start .. start + n - 1`` of ``operator`` on every time grid: the same continuum
    trajectories on each.

    Args:
        operator: a name of :data:`OPERATORS`.
        grids: time grids by name (e.g. ``{"train": uniform_grid(0.01)}``).
        n: number of samples.
        seed: stream seed; sample ``i`` depends only on ``(seed, i)``.
        start: index of the first sample. (default: ``0``)
        problem: the problem (default: :func:`problem_of` ``(operator)``, the paper's parameters).
        dtype: floating dtype of the tensors (default: torch's default dtype).
        progress: show a progress bar (default: ``False``).

    Returns:
        For each grid name, a list of ``n`` samples of :func:`operator_data`.
    """
    spec = operator_spec(operator)
    problem = problem or problem_of(operator)
    kind = "lorenz" if isinstance(problem, Lorenz63) else "cde"
    if kind != spec.problem:
        raise ValueError(f"operator {operator!r} maps {spec.problem} trajectories, got a {type(problem).__name__}")
    if n < 0 or start < 0:
        raise ValueError(f"n and start must be non-negative, got {n}, {start}")
    grids = {name: check_times(t, problem.horizon) for name, t in grids.items()}
    out: dict[str, list[Data]] = {name: [] for name in grids}
    for i in progress_bar(range(start, start + n), enabled=progress, desc=operator, unit="trajectory",
                          leave=False):
        trajectory = problem.sample(seed, i)
        for name, t in grids.items():
            out[name].append(operator_data(trajectory, t, operator, dtype))
    return out


__all__ = ["ATOL", "DT", "HORIZON", "OPERATORS", "RTOL", "TRANSFER_DTS", "ControlTrajectory",
           "ControlledODE", "Lorenz63", "OperatorSpec", "Trajectory", "check_times",
           "nonuniform_grid", "ode_samples", "operator_data", "operator_spec", "problem_of",
           "time_weights", "uniform_grid"]
