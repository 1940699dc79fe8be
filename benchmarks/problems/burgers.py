r"""Viscous Burgers' equation on the periodic unit interval: initial data, a pseudo-spectral
solver, the Cole–Hopf exact solution, and samples on uniform and non-uniform grids.

.. math::
    \partial_t u + \partial_x \big(\tfrac12 u^2\big) = \nu\, \partial_{xx} u,
    \qquad x \in \mathbb{T} = [0, 1)\ \text{periodic}, \quad t \in (0, T],
    \qquad u(\cdot, 0) = u_0,

the benchmark of the Fourier neural operator and of Cao's Galerkin transformer (§5.1), whose
operator is :math:`u_0 \mapsto u(\cdot, 1)` with :math:`\nu = 0.1` and
:math:`u_0 \sim \mathcal N\big(0, 625(-\Delta + 25 I)^{-2}\big)`.

Everything here is a function before it is an array: a sample of the initial data and the
solution are :class:`FourierSeries` (trigonometric polynomials), evaluated exactly at any points,
so the same continuum sample is seen on a uniform grid of any size and on any non-uniform grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.fft
import torch

from geoattn.mesh import MeshData, periodic_weights
from geoattn.optional import progress

TWO_PI = 2.0 * math.pi


@dataclass
class FourierSeries:
    r"""Real trigonometric polynomials on the periodic unit interval, one per row.

    .. math::
        f(x) = c_0 + 2\,\operatorname{Re} \sum_{k=1}^{K} c_k\, e^{2\pi i k x},

    with complex :math:`c_k` (the imaginary part of :math:`c_0` is ignored). A batch of ``S``
    functions has coefficients ``[S, K + 1]``; one function ``[K + 1]``.

    Shapes:
        - **coefficients:** :math:`[S, K + 1]` or :math:`[K + 1]`, complex.
        - **__call__(points):** points :math:`[N]` (or :math:`[N, 1]`) → values :math:`[S, N]`
          (or :math:`[N]`).
    """

    coefficients: np.ndarray

    def __post_init__(self):
        c = np.asarray(self.coefficients, dtype=complex)
        if c.ndim not in (1, 2) or c.shape[-1] < 1:
            raise ValueError(f"coefficients must be [K + 1] or [S, K + 1], got shape {c.shape}")
        self.coefficients = c

    @property
    def modes(self) -> int:
        """The degree :math:`K`."""
        return self.coefficients.shape[-1] - 1

    def __len__(self) -> int:
        return 1 if self.coefficients.ndim == 1 else self.coefficients.shape[0]

    def __getitem__(self, index) -> FourierSeries:
        return FourierSeries(np.atleast_2d(self.coefficients)[index])

    def _rows(self) -> np.ndarray:
        return np.atleast_2d(self.coefficients)  # [S, K + 1]

    def _shaped(self, values: np.ndarray) -> np.ndarray:
        return values[0] if self.coefficients.ndim == 1 else values

    def __call__(self, points) -> np.ndarray:
        """Values at arbitrary points (direct sum, :math:`O(N K)` per function)."""
        x = np.asarray(points, dtype=float)
        if x.ndim == 2 and x.shape[1] == 1:
            x = x[:, 0]
        if x.ndim != 1:
            raise ValueError(f"points must be [N] or [N, 1], got shape {x.shape}")
        c = self._rows()
        k = np.arange(1, c.shape[1])
        out = np.empty((c.shape[0], len(x)))
        for start in range(0, len(x), 4096):  # [chunk, K] phases at a time
            phase = np.exp(1j * TWO_PI * np.outer(x[start:start + 4096], k))  # [n, K]
            out[:, start:start + 4096] = c[:, :1].real + 2.0 * (c[:, 1:] @ phase.T).real
        return self._shaped(out)

    def on_grid(self, n: int) -> np.ndarray:
        r"""Exact values at the uniform grid :math:`x_j = j / n`, :math:`j = 0, \dots, n - 1`, for
        any ``n``: the coefficients are folded onto the ``n`` discrete frequencies (aliasing is
        what point values on a coarse grid are) and summed by one inverse FFT."""
        if n < 1:
            raise ValueError(f"the grid needs n >= 1 points, got {n}")
        c = self._rows()
        k = np.arange(c.shape[1])
        bins = np.zeros((c.shape[0], n), dtype=complex)
        np.add.at(bins, (slice(None), k % n), c)
        np.add.at(bins, (slice(None), (-k[1:]) % n), np.conj(c[:, 1:]))
        bins[:, 0] -= 1j * c[:, 0].imag  # only Re c_0 belongs to f
        return self._shaped(np.fft.ifft(bins, axis=1).real * n)

    def derivative(self, order: int = 1) -> FourierSeries:
        """The ``order``-th derivative, :math:`c_k \\mapsto (2\\pi i k)^{\\text{order}} c_k`."""
        k = np.arange(self.modes + 1)
        return FourierSeries(self.coefficients * (1j * TWO_PI * k) ** order)

    def antiderivative(self) -> FourierSeries:
        r"""The antiderivative :math:`F(x) = \int_0^x f(s)\,ds` of a mean-zero series."""
        c = self._rows()
        if np.any(np.abs(c[:, 0].real) > 1e-12 * np.maximum(1.0, np.abs(c).max(1))):
            raise ValueError("only a mean-zero series (c_0 = 0) has a periodic antiderivative")
        k = np.arange(1, c.shape[1])
        out = np.zeros_like(c)
        out[:, 1:] = c[:, 1:] / (1j * TWO_PI * k)
        out[:, 0] = -2.0 * out[:, 1:].sum(1).real  # F(0) = 0
        return FourierSeries(self._shaped(out))


class PeriodicGaussianRandomField:
    r"""The Gaussian measure :math:`\mathcal N(0, \sigma^2(-\Delta + \tau^2 I)^{-\alpha})` on the
    periodic unit interval, mean zero, truncated to ``modes`` frequencies.

    The eigenfunctions of :math:`-\Delta` are :math:`\sqrt2\cos(2\pi k x)`, :math:`\sqrt2\sin(2\pi
    k x)` with eigenvalue :math:`(2\pi k)^2`, so a sample is

    .. math::
        u_0(x) = \sum_{k=1}^{K} \sigma\big((2\pi k)^2 + \tau^2\big)^{-\alpha/2}
        \sqrt2\,\big(\xi_k \cos(2\pi k x) + \eta_k \sin(2\pi k x)\big),
        \qquad \xi_k, \eta_k \sim \mathcal N(0, 1),

    and its covariance is :math:`C(x, y) = \sum_k 2\sigma^2((2\pi k)^2 + \tau^2)^{-\alpha}
    \cos(2\pi k (x - y))`. The constant mode is left out, as in the Burgers data of the Fourier
    neural operator: the mean of :math:`u` is conserved by Burgers' equation, and it is zero.
    The defaults :math:`\alpha = 2`, :math:`\tau = 5`, :math:`\sigma = 25` are the benchmark's
    :math:`625(-\Delta + 25 I)^{-2}`.

    Args:
        alpha (float, optional): smoothness exponent :math:`\alpha`. (default: ``2.0``)
        tau (float, optional): inverse length scale :math:`\tau`. (default: ``5.0``)
        sigma (float, optional): amplitude :math:`\sigma`. (default: ``25.0``)
        modes (int, optional): highest frequency :math:`K`. (default: ``682``, the most a
            dealiased solve on 2048 points keeps)

    Shapes:
        - **sample(seed, index):** a :class:`FourierSeries` with coefficients :math:`[K + 1]`.
    """

    def __init__(self, alpha: float = 2.0, tau: float = 5.0, sigma: float = 25.0, modes: int = 682):
        if modes < 1 or alpha <= 0 or sigma <= 0:
            raise ValueError(f"need modes >= 1, alpha > 0 and sigma > 0, got {modes}, {alpha}, {sigma}")
        self.alpha, self.tau, self.sigma, self.modes = float(alpha), float(tau), float(sigma), int(modes)
        k = np.arange(1, self.modes + 1)
        self.std = self.sigma * ((TWO_PI * k) ** 2 + self.tau**2) ** (-self.alpha / 2)  # [K]

    def __repr__(self) -> str:
        return (f"PeriodicGaussianRandomField(alpha={self.alpha}, tau={self.tau}, sigma={self.sigma}, "
                f"modes={self.modes})")

    def sample(self, seed: int, index: int) -> FourierSeries:
        """Sample ``index`` of the stream ``seed``: depends on ``(seed, index)`` only."""
        if seed < 0 or index < 0:
            raise ValueError(f"seed and index must be non-negative, got {seed}, {index}")
        xi = np.random.default_rng([int(seed), int(index)]).standard_normal((2, self.modes))
        c = np.zeros(self.modes + 1, dtype=complex)
        # sqrt(2)(xi cos + eta sin) = 2 Re(c e^{2 pi i k x}) with c = (xi - i eta) / sqrt(2)
        c[1:] = self.std * (xi[0] - 1j * xi[1]) / math.sqrt(2.0)
        return FourierSeries(c)

    def samples(self, seed: int, indices) -> FourierSeries:
        """Samples ``indices`` of the stream ``seed`` as one batch ``[S, K + 1]``."""
        return FourierSeries(np.stack([self.sample(seed, int(i)).coefficients for i in indices]))

    def covariance(self, x, y) -> np.ndarray:
        """Covariance ``C(x_i, y_j)`` of the truncated series, ``[N] x [M] -> [N, M]``."""
        x, y = np.asarray(x, float).reshape(-1), np.asarray(y, float).reshape(-1)
        k = np.arange(1, self.modes + 1)
        d = x[:, None, None] - y[None, :, None]  # [N, M, 1]
        return (2.0 * self.std**2 * np.cos(TWO_PI * k * d)).sum(-1)


def _etdrk4_coefficients(lin: np.ndarray, dt: float, points: int = 64):
    r"""The ETDRK4 coefficients of Cox and Matthews for the diagonal linear part ``lin``, by the
    contour integrals of Kassam and Trefethen (mean over ``points`` points of the unit circle
    around each :math:`h L`), which avoids the cancellation of the closed forms at small
    :math:`h L`."""
    z = lin[:, None] * dt + np.exp(2j * math.pi * (np.arange(points) + 0.5) / points)[None, :]  # [K, M]
    ez = np.exp(z)
    q = dt * ((np.exp(z / 2) - 1) / z).mean(1).real
    f1 = dt * ((-4 - z + ez * (4 - 3 * z + z**2)) / z**3).mean(1).real
    f2 = dt * ((2 + z + ez * (z - 2)) / z**3).mean(1).real
    f3 = dt * ((-4 - 3 * z - z**2 + ez * (4 - z)) / z**3).mean(1).real
    return np.exp(lin * dt), np.exp(lin * dt / 2), q, f1, f2, f3


def solve_burgers(u0: FourierSeries, nu: float = 0.1, time: float = 1.0, grid: int = 2048,
                  dt: float = 2e-3, chunk: int = 256, show_progress: bool = False) -> FourierSeries:
    r"""Solve viscous Burgers' equation from ``u0`` to ``time`` by a Fourier pseudo-spectral method.

    The Fourier coefficients :math:`\hat u_k`, :math:`0 \le k < \text{grid}/3`, evolve by

    .. math::
        \frac{d\hat u_k}{dt} = -\nu (2\pi k)^2 \hat u_k - \pi i k\, \widehat{(u^2)}_k ,

    the product :math:`u^2` computed on ``grid`` points and dealiased by the 2/3 rule (every
    frequency the grid keeps is exact), stepped by the fourth-order exponential time differencing
    Runge–Kutta scheme ETDRK4 (Cox and Matthews 2002): the stiff viscous part is integrated
    exactly, the nonlinear part to fourth order in ``dt``.

    Args:
        u0 (FourierSeries): initial data, one or a batch; its degree must satisfy
            ``3 * K < grid`` (the dealiased band holds it exactly).
        nu (float, optional): viscosity :math:`\nu`. (default: ``0.1``)
        time (float, optional): final time :math:`T`. (default: ``1.0``)
        grid (int, optional): collocation points of the nonlinear product. (default: ``2048``)
        dt (float, optional): largest time step; the step used is ``time / ceil(time / dt)``.
            (default: ``2e-3``)
        chunk (int, optional): functions solved together. (default: ``256``)
        show_progress (bool, optional): a progress bar over the time steps. (default: ``False``)

    Returns:
        :math:`u(\cdot, T)` as a :class:`FourierSeries` of degree ``ceil(grid / 3) - 1``, batched
        as ``u0``.
    """
    if nu <= 0 or time < 0 or dt <= 0:
        raise ValueError(f"need nu > 0, time >= 0 and dt > 0, got nu={nu}, time={time}, dt={dt}")
    keep = -(-grid // 3)  # frequencies 0 .. keep - 1 satisfy 3k < grid
    if u0.modes >= keep:
        raise ValueError(f"the initial data has degree {u0.modes}, but a dealiased solve on {grid} "
                         f"points keeps frequencies below {keep}; use grid > {3 * u0.modes}")
    if not np.all(np.isfinite(u0.coefficients)):
        raise ValueError("the initial data has non-finite coefficients")
    steps = max(1, math.ceil(time / dt - 1e-9)) if time > 0 else 0
    h = time / steps if steps else 0.0
    k = np.arange(keep)
    lin = -nu * (TWO_PI * k) ** 2
    e, e2, q, f1, f2, f3 = _etdrk4_coefficients(lin, h) if steps else (None,) * 6
    grad = -0.5j * TWO_PI * k  # d/dx of u^2 / 2, with the sign of the right-hand side

    def nonlinear(v):  # v: [S, keep] coefficients c_k
        u = scipy.fft.irfft(v, n=grid, axis=1) * grid  # [S, grid] values
        return grad * (scipy.fft.rfft(u * u, axis=1)[:, :keep] / grid)

    rows = np.atleast_2d(u0.coefficients)
    out = np.zeros((rows.shape[0], keep), dtype=complex)
    bar = progress(total=steps * math.ceil(len(rows) / chunk), enabled=show_progress,
                   desc="burgers", unit="step", leave=False)
    for start in range(0, len(rows), chunk):
        v = _pad(rows[start:start + chunk], keep)
        v[:, 0] = v[:, 0].real
        for _ in range(steps):
            nv = nonlinear(v)
            a = e2 * v + q * nv
            na = nonlinear(a)
            b = e2 * v + q * na
            nb = nonlinear(b)
            c = e2 * a + q * (2 * nb - nv)
            nc = nonlinear(c)
            v = e * v + f1 * nv + 2 * f2 * (na + nb) + f3 * nc
            bar.update()
        if not np.all(np.isfinite(v)):
            raise FloatingPointError(f"the Burgers solve blew up (dt={h:g}, grid={grid}); lower dt")
        out[start:start + chunk] = v
    bar.close()
    return FourierSeries(out[0] if u0.coefficients.ndim == 1 else out)


def _pad(c: np.ndarray, size: int) -> np.ndarray:
    """Coefficients ``[S, K + 1]`` zero-padded (or cut) to ``[S, size]``."""
    out = np.zeros((c.shape[0], size), dtype=complex)
    m = min(size, c.shape[1])
    out[:, :m] = c[:, :m]
    return out


def cole_hopf(u0: FourierSeries, points, nu: float = 0.1, time: float = 1.0,
              quadrature: int = 1 << 14) -> np.ndarray:
    r"""The exact solution of viscous Burgers' equation by the Cole–Hopf transform.

    With :math:`U_0(x) = \int_0^x u_0` (periodic, as :math:`u_0` has mean zero) and
    :math:`\varphi_0 = \exp(-U_0 / (2\nu))`, the heat equation :math:`\varphi_t = \nu\varphi_{xx}`
    gives :math:`\varphi(x, t) = \sum_k \hat\varphi_{0,k} e^{-\nu (2\pi k)^2 t} e^{2\pi i k x}`
    and :math:`u = -2\nu\, \varphi_x / \varphi`. The coefficients :math:`\hat\varphi_{0,k}` are
    computed by the trapezoid rule on ``quadrature`` points, which converges geometrically for the
    analytic periodic :math:`\varphi_0`; the tests check the result against the closed form of
    :math:`u_0 = \sin 2\pi x` (modified Bessel functions) to :math:`10^{-13}`.

    Args:
        u0 (FourierSeries): mean-zero initial data, one or a batch.
        points (array-like): where to evaluate, ``[N]``.
        nu, time: viscosity and time.
        quadrature (int, optional): trapezoid points for :math:`\hat\varphi_0`. (default: ``16384``)

    Returns:
        values ``[N]`` (or ``[S, N]`` for a batch).
    """
    antider = u0.antiderivative()
    big = np.atleast_2d(antider.on_grid(quadrature))  # [S, M]
    expo = -big / (2.0 * nu)
    phi0 = np.exp(expo - expo.max(1, keepdims=True))  # scaled: the ratio is unchanged
    coef = np.fft.rfft(phi0, axis=1)[:, : quadrature // 2] / quadrature  # c_k, k < M / 2
    k = np.arange(coef.shape[1])
    decay = np.exp(-nu * (TWO_PI * k) ** 2 * time)
    keep = max(2, int(np.count_nonzero(decay > 1e-40)))  # phi(t) = sum over these modes to 1e-40
    phi = FourierSeries(coef[:, :keep] * decay[:keep])
    values = -2.0 * nu * phi.derivative()(points) / phi(points)
    return values[0] if u0.coefficients.ndim == 1 else values


def periodic_trapezoid_weights(x, length: float = 1.0) -> np.ndarray:
    r"""Trapezoid weights of the periodic interval :math:`[0, L)` at the nodes ``x`` (any order).

    With the nodes sorted, :math:`x_{-1} = x_{N-1} - L` and :math:`x_N = x_0 + L`,

    .. math::
        w_i = \tfrac12 (x_{i+1} - x_{i-1}), \qquad \sum_i w_i = L,

    the composite trapezoid rule of the periodic piecewise-linear interpolant: exact for
    constants and for periodic piecewise-linear functions with kinks at the nodes, second order
    for smooth functions on any grid, and exact for trigonometric polynomials of degree below
    :math:`N` on a uniform grid (where :math:`w_i = L / N`). The 1-D case of
    :func:`geoattn.mesh.periodic_weights`.

    Args:
        x (array-like): nodes ``[N]`` (or ``[N, 1]``) in :math:`[0, L)`, distinct.
        length (float, optional): the period :math:`L`. (default: ``1.0``)

    Returns:
        weights ``[N]`` in the order of ``x``.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1 or len(x) < 1:
        raise ValueError(f"x must be a non-empty [N] or [N, 1] array, got shape {x.shape}")
    if not np.all(np.isfinite(x)) or x.min() < 0 or x.max() >= length:
        raise ValueError(f"nodes must lie in [0, {length}), got range [{x.min()}, {x.max()}]")
    order = np.argsort(x, kind="stable")
    xs = x[order]
    if len(xs) > 1 and np.any(np.diff(xs) <= 0):
        i = int(np.flatnonzero(np.diff(xs) <= 0)[0])
        raise ValueError(f"nodes must be distinct; {xs[i]} appears twice")
    # the 1-D case of geoattn.mesh.periodic_weights, with this function's checks and messages
    return periodic_weights(x[:, None], length)


def sampling_density(f: FourierSeries, points, nu: float = 0.1) -> np.ndarray:
    r"""The node density of Cao's non-uniform Burgers grids,
    :math:`\rho(x) \propto \sqrt{|f'(x)|^2 + \nu |f''(x)|^2}`, at ``points``, normalised to sum
    to one (a probability over the points)."""
    rho = np.sqrt(np.abs(f.derivative(1)(points)) ** 2 + nu * np.abs(f.derivative(2)(points)) ** 2)
    rho = np.atleast_2d(rho)
    total = rho.sum(1, keepdims=True)
    if np.any(total <= 0):
        raise ValueError("the density is zero everywhere (a constant function)")
    return rho[0] / total[0] if f.coefficients.ndim == 1 else rho / total


@dataclass
class BurgersData:
    r"""A set of Burgers samples as functions: initial data :math:`u_0` and solution
    :math:`u(\cdot, T)`, both :class:`FourierSeries` batches of ``S`` functions, the sample
    indices of the stream ``seed``, and the equation's parameters."""

    initial: FourierSeries
    solution: FourierSeries
    seed: int
    indices: np.ndarray
    nu: float
    time: float

    def __len__(self) -> int:
        return len(self.initial)


def burgers_data(n: int, seed: int, *, field: PeriodicGaussianRandomField | None = None,
                 nu: float = 0.1, time: float = 1.0, grid: int = 2048, dt: float = 2e-3,
                 start: int = 0, show_progress: bool = False) -> BurgersData:
    """Samples ``start .. start + n - 1`` of the stream ``seed``: initial data from ``field``
    (default: :class:`PeriodicGaussianRandomField` with ``modes = ceil(grid / 3) - 1``, the band a
    dealiased solve on ``grid`` points holds) solved by :func:`solve_burgers`."""
    if n < 1:
        raise ValueError(f"need at least one sample, got n={n}")
    field = field or PeriodicGaussianRandomField(modes=-(-grid // 3) - 1)
    indices = np.arange(start, start + n)
    u0 = field.samples(seed, indices)
    u1 = solve_burgers(u0, nu=nu, time=time, grid=grid, dt=dt, show_progress=show_progress)
    return BurgersData(u0, u1, seed, indices, nu, time)


def _sample(x: np.ndarray, u0: np.ndarray, u1: np.ndarray, dtype) -> MeshData:
    dtype = dtype or torch.get_default_dtype()
    return MeshData(pos=torch.as_tensor(x[:, None], dtype=dtype),
                    weight=torch.as_tensor(periodic_trapezoid_weights(x), dtype=dtype),
                    x=torch.as_tensor(u0[:, None], dtype=dtype),
                    y=torch.as_tensor(u1[:, None], dtype=dtype))


def subsample(values: np.ndarray, n: int) -> np.ndarray:
    """The benchmark's subsampling: every ``(G / n)``-th value of a uniform grid of ``G`` points
    (``values [..., G]``, ``n`` must divide ``G``)."""
    g = values.shape[-1]
    if n < 1 or g % n:
        raise ValueError(f"n={n} must divide the grid size {g}")
    return values[..., :: g // n]


def uniform_samples(data: BurgersData, n: int, dtype: torch.dtype | None = None) -> list[MeshData]:
    r"""Every sample on the uniform grid :math:`x_j = j / n` (exact values; the same numbers as
    :func:`subsample` of any finer uniform grid), with weights :math:`1 / n`.

    Returns:
        :class:`~geoattn.mesh.MeshData` samples with ``pos [n, 1]``, ``weight [n]``,
        ``x = u_0 [n, 1]`` and ``y = u(T) [n, 1]``.
    """
    x = np.arange(n) / n
    u0, u1 = np.atleast_2d(data.initial.on_grid(n)), np.atleast_2d(data.solution.on_grid(n))
    return [_sample(x, a, b, dtype) for a, b in zip(u0, u1)]


def nonuniform_samples(data: BurgersData, n: int, fine: int = 8192, density: str = "solution",
                       seed: int | None = None, dtype: torch.dtype | None = None) -> list[MeshData]:
    r"""Every sample on its own random non-uniform grid: ``n`` distinct nodes of the uniform fine
    grid of ``fine`` points, drawn without replacement with probabilities
    :math:`\propto \sqrt{|f'|^2 + \nu|f''|^2}` (:func:`sampling_density`), sorted, with
    :func:`periodic_trapezoid_weights`.

    This is the construction of Cao's non-uniform Burgers data, where :math:`f` is the initial
    data (``density="initial"``); ``"solution"`` (default) takes :math:`f = u(\cdot, T)`, which
    puts the nodes where the target varies (the initial data's second derivative is dominated by
    its finest modes, which makes ``"initial"`` grids close to uniformly random). The grid of
    sample ``i`` is drawn from a generator seeded by ``(seed, i, 1)`` (``seed`` defaults to the
    data's stream seed).

    Returns:
        :class:`~geoattn.mesh.MeshData` samples as :func:`uniform_samples`, with per-sample ``pos``.
    """
    if density not in ("solution", "initial"):
        raise ValueError(f"density must be 'solution' or 'initial', got {density!r}")
    if not 1 <= n < fine:
        raise ValueError(f"need 1 <= n < fine, got n={n}, fine={fine}")
    seed = data.seed if seed is None else seed
    grid = np.arange(fine) / fine
    source = data.solution if density == "solution" else data.initial
    u0, u1 = np.atleast_2d(data.initial.on_grid(fine)), np.atleast_2d(data.solution.on_grid(fine))
    out = []
    for s, i in enumerate(data.indices):
        one = source[s]
        rho = np.sqrt(one.derivative(1).on_grid(fine) ** 2 + data.nu * one.derivative(2).on_grid(fine) ** 2)
        if rho.sum() <= 0:
            raise ValueError(f"sample {i}: the density is zero everywhere")
        rng = np.random.default_rng([int(seed), int(i), 1])
        nodes = np.sort(rng.choice(fine, size=n, replace=False, p=rho / rho.sum()))
        out.append(_sample(grid[nodes], u0[s, nodes], u1[s, nodes], dtype))
    return out


def circle_coordinates(pos: torch.Tensor) -> torch.Tensor:
    r"""The periodic unit interval as the unit circle, :math:`x \mapsto (\cos 2\pi x, \sin 2\pi x)`
    (``[N, 1] -> [N, 2]``): coordinates in which every function a model builds from them is
    periodic, and the nodes :math:`x = 0` and :math:`x \to 1` are neighbours."""
    if pos.dim() != 2 or pos.shape[1] != 1:
        raise ValueError(f"pos must be [N, 1], got shape {tuple(pos.shape)}")
    angle = TWO_PI * pos
    return torch.cat([angle.cos(), angle.sin()], dim=1)


def on_circle(samples) -> list[MeshData]:
    """Copies of 1-D periodic samples with :func:`circle_coordinates` as ``pos`` (``[N, 2]``);
    the weights (of the integral over :math:`x \\in [0, 1)`) and the fields are unchanged."""
    out = []
    for d in samples:
        c = d.clone()
        c.pos = circle_coordinates(d.pos)
        out.append(c)
    return out


__all__ = ["BurgersData", "FourierSeries", "PeriodicGaussianRandomField", "burgers_data",
           "circle_coordinates", "cole_hopf", "nonuniform_samples", "on_circle",
           "periodic_trapezoid_weights", "sampling_density", "solve_burgers", "subsample",
           "uniform_samples"]
