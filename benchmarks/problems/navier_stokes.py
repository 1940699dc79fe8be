r"""Two-dimensional incompressible Navier–Stokes on the torus: Kolmogorov flow in vorticity form.

On :math:`\mathbb T^2 = [0, 2\pi]^2` (periodic) the velocity :math:`u` with
:math:`\partial_t u + u\cdot\nabla u + \nabla p = \nu\Delta u + A\sin(n y)\,\hat x`,
:math:`\nabla\cdot u = 0`, has the vorticity :math:`\omega = \partial_x u_2 - \partial_y u_1`, which solves

.. math::
    \partial_t \omega + u\cdot\nabla\omega = \nu\Delta\omega - A n\cos(n y), \qquad
    u = (\partial_y\psi, -\partial_x\psi), \quad -\Delta\psi = \omega,

the setting of the Kolmogorov-flow experiment of Calvello, Kovachki, Levine and Stuart
(`arXiv:2406.06486 <https://arxiv.org/abs/2406.06486>`_, §6.2.3: :math:`n = 4`,
:math:`\nu = 1/70`, :math:`A = 1`, :math:`\omega_0 \sim \mathcal N(0, 7^3(-\Delta + 49 I)^{-5})`,
pairs :math:`(\omega(T), \omega(T + \Delta t))` with :math:`T = 11`, :math:`\Delta t = 0.1`).

- :class:`PeriodicGaussianField` draws mean-zero Gaussian fields on the torus as trigonometric
  polynomials, seeded per sample, evaluable at any points (:class:`PeriodicSample`).
- :class:`KolmogorovSolver` integrates the vorticity equation pseudo-spectrally on an
  :math:`n_g \times n_g` grid: exact derivatives and Poisson solve in Fourier space, products on
  the grid with the 2/3 rule (so the discrete equation is the Galerkin truncation to the modes
  :math:`|k_j| < n_g/3`, with no aliasing), and the integrating-factor fourth-order Runge–Kutta
  scheme of Lawson (diffusion integrated exactly, advection and forcing by RK4) with a fixed
  time step. The state is a trigonometric polynomial, so a solution can be evaluated exactly at
  any points (:func:`evaluate`).
- :func:`kolmogorov_pairs` generates the data pairs as Fourier coefficients; :func:`grid_values`
  and :func:`evaluate` give their values on the uniform grids of the torus (:func:`torus_grid`)
  and on scattered points (:func:`scattered_points`, with the periodic Voronoi weights of
  :func:`periodic_voronoi_weights`); :func:`pair_samples` makes the
  :class:`~geoattn.mesh.MeshData` samples.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from geoattn.errors import ConfigError
from geoattn.mesh import MeshData
from geoattn.mesh.validation import validate_points
from geoattn.optional import progress

log = logging.getLogger(__name__)

#: Side length of the torus :math:`[0, 2\pi]^2`.
LENGTH = 2.0 * math.pi


def _wavenumbers(modes: int) -> np.ndarray:
    """Integer wavenumbers ``-K..K``."""
    return np.arange(-modes, modes + 1)


class PeriodicGaussianField:
    r"""The mean-zero Gaussian measure :math:`\mathcal N(0, \sigma^2(-\Delta + \tau^2 I)^{-\alpha})`
    on the torus :math:`[0, 2\pi]^2`, as a truncated Karhunen–Loève (Fourier) series.

    The periodic Laplacian has the eigenfunctions :math:`e^{i k\cdot x}` with eigenvalues
    :math:`|k|^2`, :math:`k \in \mathbb Z^2`; orthonormal in :math:`L^2(\mathbb T^2)` they are
    :math:`\varphi_k = e^{ik\cdot x}/(2\pi)`. A sample is

    .. math::
        g(x) = \sum_{0 < \|k\|_\infty \le K} c_k\, e^{i k\cdot x}, \qquad
        c_{-k} = \overline{c_k}, \qquad
        \mathbb E|c_k|^2 = \frac{\lambda_k}{(2\pi)^2}, \qquad
        \lambda_k = \sigma^2 (|k|^2 + \tau^2)^{-\alpha},

    with :math:`c_k = (\lambda_k / 2)^{1/2} (\xi_k + i \eta_k)/(2\pi)` for :math:`k` in a half
    plane, :math:`\xi_k, \eta_k \sim \mathcal N(0, 1)` i.i.d.; the mode :math:`k = 0` is dropped
    (the measure lives on mean-zero functions). The :math:`c_k` are the Fourier coefficients
    :math:`(2\pi)^{-2}\int g\,e^{-ik\cdot x}dx`, and the covariance of the truncated series is
    :math:`C(x, y) = (2\pi)^{-2}\sum_k \lambda_k \cos(k\cdot(x - y))` (:meth:`covariance`).

    The defaults are the paper's :math:`7^3(-\Delta + 49 I)^{-5}`
    (:math:`\sigma = 7^{3/2}, \tau = 7, \alpha = 5`). This field is small (pointwise standard
    deviation about :math:`10^{-3}`): the Kolmogorov forcing, not the initial condition, sets the
    size of the flow at :math:`T = 11`, and the initial condition only decides which turbulent
    state it reaches.

    Args:
        alpha (float, optional): exponent :math:`\alpha`. (default: ``5.0``)
        tau (float, optional): :math:`\tau`. (default: ``7.0``)
        sigma (float, optional): amplitude :math:`\sigma`. (default: ``7 ** 1.5``)
        modes (int, optional): largest wavenumber :math:`K` per axis. (default: ``32``)

    Shapes:
        - **sample(seed, i)(points):** points :math:`[N, 2]` (numpy or torch) → values :math:`[N]`.
    """

    def __init__(self, alpha: float = 5.0, tau: float = 7.0, sigma: float = 7.0**1.5, modes: int = 32):
        if not modes >= 1:
            raise ConfigError(f"modes must be a positive integer, got {modes}")
        if not (alpha > 0 and sigma > 0 and tau >= 0):
            raise ConfigError(f"need alpha > 0, sigma > 0 and tau >= 0, got alpha={alpha}, "
                              f"sigma={sigma}, tau={tau}")
        self.alpha, self.tau, self.sigma, self.modes = float(alpha), float(tau), float(sigma), int(modes)
        k = _wavenumbers(self.modes)
        k2 = k[:, None] ** 2 + k[None, :] ** 2  # [2K+1, 2K+1]
        self.eigenvalues = self.sigma**2 * (k2 + self.tau**2) ** (-self.alpha)
        self.eigenvalues[self.modes, self.modes] = 0.0  # mean zero
        # one of each pair (k, -k): k_x > 0, or k_x = 0 and k_y > 0
        kx, ky = np.meshgrid(k, k, indexing="ij")
        self._half = (kx > 0) | ((kx == 0) & (ky > 0))

    def params(self) -> dict:
        """Constructor arguments (JSON-friendly), enough to rebuild the field."""
        return {"alpha": self.alpha, "tau": self.tau, "sigma": self.sigma, "modes": self.modes}

    def __repr__(self) -> str:
        return "PeriodicGaussianField(" + ", ".join(f"{k}={v}" for k, v in self.params().items()) + ")"

    def sample(self, seed: int, index: int) -> PeriodicSample:
        """Sample ``index`` of the stream ``seed``: depends on ``(seed, index)`` only."""
        if seed < 0 or index < 0:
            raise ConfigError(f"seed and index must be non-negative, got {seed}, {index}")
        rng = np.random.default_rng([int(seed), int(index), 2])
        xi = rng.standard_normal((2, *self.eigenvalues.shape))
        c = np.sqrt(self.eigenvalues / 2) * (xi[0] + 1j * xi[1]) / LENGTH
        c = np.where(self._half, c, 0.0)
        c = c + np.conj(c[::-1, ::-1])  # c_{-k} = conj(c_k): index -k is the reversed array
        return PeriodicSample(c)

    def covariance(self, x, y) -> np.ndarray:
        """Covariance ``C(x_i, y_j)`` of the truncated series, ``[N, 2] x [M, 2] -> [N, M]``."""
        x, y = np.asarray(x, float), np.asarray(y, float)
        k = _wavenumbers(self.modes)
        diff = x[:, None, :] - y[None, :, :]  # [N, M, 2]
        phase = k[:, None, None, None] * diff[..., 0] + k[None, :, None, None] * diff[..., 1]  # [2K+1, 2K+1, N, M]
        return np.einsum("ab,abnm->nm", self.eigenvalues, np.cos(phase)) / LENGTH**2


@dataclass
class PeriodicSample:
    r"""One trigonometric polynomial :math:`g(x) = \sum_{|k_j| \le K} c_k e^{ik\cdot x}` on the
    torus, with ``coefficients`` :math:`c_k` ``[2K+1, 2K+1]`` (index ``K + k``), callable on points.

    Shapes:
        - **input:** points :math:`[N, 2]` (numpy or torch)
        - **output:** values :math:`[N]`
    """

    coefficients: np.ndarray  # [2K+1, 2K+1] complex, Hermitian: c[-k] = conj(c[k])

    @property
    def modes(self) -> int:
        return (self.coefficients.shape[0] - 1) // 2

    def __call__(self, points):
        is_torch = isinstance(points, torch.Tensor)
        p = torch.as_tensor(points, dtype=torch.float64) if not is_torch else points.to(torch.float64)
        if p.dim() != 2 or p.shape[1] != 2:
            raise ConfigError(f"points must be [N, 2], got shape {tuple(p.shape)}")
        out = evaluate(torch.as_tensor(self.coefficients)[None], p, centred=True)[0]
        return out.to(points.dtype) if is_torch else out.numpy()

    def on_grid(self, n: int) -> np.ndarray:
        """Values on the ``n x n`` grid :math:`x_{ij} = 2\\pi (i, j)/n` ``[n, n]``, exact (an FFT)
        when ``n > 2K``."""
        if n <= 2 * self.modes:
            raise ConfigError(f"a grid of {n} points per side aliases the {self.modes} modes of "
                              f"the sample; use n > {2 * self.modes}")
        spec = np.zeros((n, n), dtype=complex)
        k = _wavenumbers(self.modes) % n
        spec[np.ix_(k, k)] = self.coefficients
        return np.fft.ifft2(spec).real * n * n


def evaluate(coefficients: torch.Tensor, points: torch.Tensor, centred: bool = False) -> torch.Tensor:
    r"""Values of trigonometric polynomials on the torus at any points.

    .. math::
        g_s(x) = \sum_k c_{s,k}\, e^{i k\cdot x}

    Args:
        coefficients: ``[S, n, n//2 + 1]`` complex, the ``rfft2`` layout of the solver (an
            :math:`n \times n` grid; see :meth:`KolmogorovSolver.to_spectral`), or with
            ``centred=True`` the full Hermitian array ``[S, 2K+1, 2K+1]`` (index ``K + k``).
        points: ``[N, 2]`` real.
        centred: the layout of ``coefficients``. (default: ``False``)

    Shapes:
        - output: ``[S, N]`` real, in the real dtype of ``points``.
    """
    points = torch.as_tensor(points)
    dtype = points.dtype if points.is_floating_point() else torch.float64
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    c = coefficients.to(device=points.device, dtype=cdtype)
    if centred:
        m = (c.shape[-1] - 1) // 2
        kx = ky = torch.arange(-m, m + 1, device=points.device, dtype=dtype)
        factor = torch.ones(c.shape[-1], device=points.device, dtype=dtype)
    else:
        n = c.shape[-2]
        kx = torch.fft.fftfreq(n, 1.0 / n, device=points.device, dtype=dtype)
        ky = torch.fft.rfftfreq(n, 1.0 / n, device=points.device, dtype=dtype)
        # rfft2 keeps k_y >= 0: the real part of 2 c_k e^{ikx} covers the pair (k, -k), except
        # for the self-conjugate columns k_y = 0 (and k_y = n/2), counted once
        factor = torch.full((len(ky),), 2.0, device=points.device, dtype=dtype)
        factor[0] = 1.0
        if n % 2 == 0:
            factor[-1] = 1.0
    ex = torch.exp(1j * points[:, 0:1].to(dtype) * kx).to(cdtype)  # [N, n_x]
    ey = torch.exp(1j * points[:, 1:2].to(dtype) * ky).to(cdtype) * factor  # [N, n_y]
    chunk = max(1, 2**24 // max(1, points.shape[0] * c.shape[-2]))  # samples per pass, bounds memory
    out = []
    for lo in range(0, c.shape[0], chunk):
        r = torch.einsum("sab,nb->sna", c[lo:lo + chunk], ey)  # [s, N, n_x]
        out.append(torch.einsum("sna,na->sn", r, ex).real)
    return torch.cat(out)


class KolmogorovSolver:
    r"""Pseudo-spectral solver of the forced vorticity equation on :math:`[0, 2\pi]^2`.

    .. math::
        \partial_t \hat\omega_k = -\nu|k|^2\hat\omega_k + N_k(\hat\omega), \qquad
        N(\hat\omega) = -P\,\mathcal F\big(u\cdot\nabla\omega\big) + \hat f, \qquad
        \hat\psi_k = \hat\omega_k / |k|^2,

    with :math:`u = (\partial_y\psi, -\partial_x\psi)` and :math:`\nabla\omega` computed exactly
    from the Fourier coefficients, the product taken on the grid, :math:`P` the 2/3-rule mask
    (:math:`|k_x|, |k_y| < n_g/3`, applied to the state and to the product: what remains is free
    of aliasing), and the forcing :math:`f = -A n\cos(n y)`. One step of length :math:`h` is
    Lawson's integrating-factor RK4 with :math:`E = e^{-\nu|k|^2 h/2}`:

    .. math::
        a &= N(\hat\omega), &\quad b &= N\big(E(\hat\omega + \tfrac h2 a)\big), &\quad
        c &= N\big(E\hat\omega + \tfrac h2 b\big), &\quad d &= N\big(E^2\hat\omega + h E c\big), \\
        \hat\omega &\leftarrow E^2\hat\omega + \tfrac h6\big(E^2 a + 2E(b + c) + d\big), &&&&

    exact for the diffusion, fourth order overall. The step is fixed (so a sample's trajectory
    does not depend on the others in its batch); after every output interval the Courant number
    :math:`h\max(|u_1|, |u_2|)/\Delta x` is checked and a :class:`~geoattn.errors.ConfigError`
    is raised when it exceeds ``max_courant`` (or when the state is not finite), instead of
    returning a blown-up field.

    Args:
        n (int, optional): grid points per side :math:`n_g` (even). (default: ``64``)
        nu (float, optional): viscosity :math:`\nu`. (default: ``1 / 70``)
        wavenumber (int, optional): forcing wavenumber :math:`n`. (default: ``4``)
        amplitude (float, optional): forcing amplitude :math:`A` (``0``: unforced). (default: ``1.0``)
        step (float, optional): time step :math:`h`. (default: ``None``: ``1 / n``, a Courant
            number below 0.5 for velocities up to about 3)
        max_courant (float, optional): largest Courant number allowed. (default: ``1.0``)
        dtype (torch.dtype, optional): real dtype of the grid values. (default: ``torch.float64``)
        device (torch.device, optional): where to compute. (default: CPU)

    Shapes:
        - **solve(omega0, times):** ``omega0 [B, n, n]`` (grid values) → ``[B, len(times), n, n]``.
        - spectral states: ``[B, n, n//2 + 1]`` complex (``torch.fft.rfft2`` layout).
    """

    def __init__(self, n: int = 64, nu: float = 1.0 / 70.0, wavenumber: int = 4, amplitude: float = 1.0,
                 step: float | None = None, max_courant: float = 1.0, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None):
        if n < 8 or n % 2:
            raise ConfigError(f"n must be an even number of grid points >= 8, got {n}")
        if not nu >= 0:
            raise ConfigError(f"the viscosity nu must be non-negative, got {nu}")
        if step is not None and not step > 0:
            raise ConfigError(f"the time step must be positive, got {step}")
        if dtype not in (torch.float32, torch.float64):
            raise ConfigError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.n, self.nu, self.wavenumber, self.amplitude = int(n), float(nu), int(wavenumber), float(amplitude)
        self.step = float(step) if step is not None else 1.0 / n
        self.max_courant, self.dtype = float(max_courant), dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        kx = torch.fft.fftfreq(n, 1.0 / n, dtype=dtype, device=self.device)
        ky = torch.fft.rfftfreq(n, 1.0 / n, dtype=dtype, device=self.device)
        self.kx, self.ky = kx[:, None], ky[None, :]  # [n, 1], [1, n//2+1]
        self.k2 = self.kx**2 + self.ky**2
        self.inverse_k2 = torch.where(self.k2 > 0, 1.0 / torch.where(self.k2 > 0, self.k2, 1.0), 0.0)
        self.mask = ((self.kx.abs() < n / 3) & (self.ky.abs() < n / 3)).to(dtype)  # 2/3 rule
        self._dx, self._dy = 1j * self.kx, 1j * self.ky  # spectral derivatives
        self._dy_over_k2, self._dx_over_k2 = self._dy * self.inverse_k2, -self._dx * self.inverse_k2
        y = torch.arange(n, dtype=dtype, device=self.device) * (LENGTH / n)
        forcing = -self.amplitude * self.wavenumber * torch.cos(self.wavenumber * y)
        self.forcing = self.to_spectral(forcing.expand(n, n)[None])[0] * self.mask  # [n, n//2+1]

    @property
    def grid(self) -> torch.Tensor:
        """Grid points ``[n * n, 2]`` in the order of a flattened ``[n, n]`` array (``ij``)."""
        return torus_grid(self.n, dtype=self.dtype, device=self.device)[0]

    def to_spectral(self, omega: torch.Tensor) -> torch.Tensor:
        """Fourier coefficients :math:`c_k` of grid values ``[B, n, n]`` (``rfft2 / n^2``)."""
        return torch.fft.rfft2(omega.to(self.dtype)) / self.n**2

    def to_grid(self, omega_hat: torch.Tensor) -> torch.Tensor:
        """Grid values ``[..., n, n]`` of Fourier coefficients ``[..., n, n//2 + 1]``."""
        return torch.fft.irfft2(omega_hat * self.n**2, s=(self.n, self.n))

    def velocity(self, omega_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Grid velocity :math:`(u_1, u_2) = (\\partial_y\\psi, -\\partial_x\\psi)`, each ``[B, n, n]``."""
        psi = omega_hat * self.inverse_k2
        return self.to_grid(1j * self.ky * psi), self.to_grid(-1j * self.kx * psi)

    def advection(self, omega_hat: torch.Tensor) -> torch.Tensor:
        """The dealiased :math:`P\\mathcal F(u\\cdot\\nabla\\omega)` ``[B, n, n//2 + 1]`` of a
        (dealiased) state."""
        # u = (psi_y, -psi_x), grad omega = (omega_x, omega_y): four inverse transforms in one call
        fields = torch.stack([self._dy_over_k2 * omega_hat, self._dx_over_k2 * omega_hat,
                              self._dx * omega_hat, self._dy * omega_hat])  # [4, B, n, n//2+1]
        u, v, wx, wy = self.to_grid(fields)
        return self.to_spectral(u * wx + v * wy) * self.mask

    def tendency(self, omega_hat: torch.Tensor) -> torch.Tensor:
        """The non-stiff part :math:`N(\\hat\\omega) = -P\\mathcal F(u\\cdot\\nabla\\omega) + \\hat f`."""
        return self.forcing - self.advection(omega_hat)

    def advance(self, omega_hat: torch.Tensor, steps: int, step: float | None = None) -> torch.Tensor:
        """``steps`` integrating-factor RK4 steps of length ``step`` (default: :attr:`step`)."""
        h = self.step if step is None else float(step)
        half = torch.exp(-self.nu * self.k2 * (h / 2))
        full = half * half
        w = omega_hat
        for _ in range(steps):
            a = self.tendency(w)
            b = self.tendency(half * (w + (h / 2) * a))
            c = self.tendency(half * w + (h / 2) * b)
            d = self.tendency(full * w + h * half * c)
            w = full * w + (h / 6) * (full * a + 2 * half * (b + c) + d)
        return w

    def courant(self, omega_hat: torch.Tensor) -> float:
        """The largest Courant number :math:`h \\max(|u_1|, |u_2|)\\, n / 2\\pi` of a batch."""
        u, v = self.velocity(omega_hat)
        return float(torch.maximum(u.abs().amax(), v.abs().amax())) * self.step * self.n / LENGTH

    def solve_spectral(self, omega_hat: torch.Tensor, times, show_progress: bool = False) -> torch.Tensor:
        """Coefficients ``[B, len(times), n, n//2 + 1]`` at the increasing ``times`` (from 0).

        Each interval between output times is covered by ``ceil(interval / step)`` equal steps;
        the initial state is first truncated to the 2/3-rule modes.
        """
        times = [float(t) for t in times]
        if any(t < 0 for t in times) or any(b < a for a, b in zip(times, times[1:])):
            raise ConfigError(f"times must be non-negative and increasing, got {times}")
        w = omega_hat.to(device=self.device, dtype=self.cdtype) * self.mask
        out, now = [], 0.0
        bar = progress(total=len(times), enabled=show_progress, desc="Navier-Stokes", unit="output")
        for t in times:
            if t > now:
                steps = math.ceil((t - now) / self.step - 1e-9)
                w = self.advance(w, steps, (t - now) / steps)
                now = t
                if not bool(torch.isfinite(torch.view_as_real(w)).all()):
                    raise ConfigError(f"the vorticity is not finite at t = {t:g}: the time step "
                                      f"{self.step:g} is too long for this flow; lower it")
                courant = self.courant(w)
                if courant > self.max_courant:
                    raise ConfigError(f"Courant number {courant:.2f} > {self.max_courant:g} at t = {t:g}: "
                                      f"the time step {self.step:g} is too long for this flow; lower it")
            out.append(w)
            bar.update()
        bar.close()
        return torch.stack(out, 1)

    def solve(self, omega0: torch.Tensor, times, show_progress: bool = False) -> torch.Tensor:
        """Grid vorticity ``[B, len(times), n, n]`` at ``times`` from grid values ``omega0 [B, n, n]``."""
        if omega0.dim() != 3 or omega0.shape[1:] != (self.n, self.n):
            raise ConfigError(f"omega0 must be [B, {self.n}, {self.n}], got {tuple(omega0.shape)}")
        hat = self.to_spectral(omega0.to(self.device))
        return self.to_grid(self.solve_spectral(hat, times, show_progress))

    def initial_spectral(self, samples) -> torch.Tensor:
        """Coefficients ``[B, n, n//2 + 1]`` of :class:`PeriodicSample` s, truncated to the
        modes the grid holds (:math:`|k_j| < n/2`; the 2/3 rule then keeps :math:`|k_j| < n/3`)."""
        out = torch.zeros(len(samples), self.n, self.n // 2 + 1, dtype=self.cdtype, device=self.device)
        for b, s in enumerate(samples):
            m = s.modes
            keep = min(m, (self.n - 1) // 2)
            k = np.arange(-keep, keep + 1)
            block = s.coefficients[m - keep:m + keep + 1, m:m + keep + 1]  # k_x in -keep..keep, k_y in 0..keep
            out[b, torch.as_tensor(k % self.n)[:, None], torch.arange(keep + 1)[None, :]] = torch.as_tensor(
                block, dtype=self.cdtype, device=self.device)
        return out


def kolmogorov_pairs(num: int, seed: int, start: int = 0, *, time: float = 11.0, interval: float = 0.1,
                     field: PeriodicGaussianField | None = None, solver: KolmogorovSolver | None = None,
                     batch_size: int = 64, show_progress: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Samples ``start .. start + num - 1`` of the pairs :math:`(\omega(T), \omega(T + \Delta t))`.

    Sample ``i`` starts from ``field.sample(seed, i)`` and depends on ``(seed, i)`` only.

    Args:
        num: number of pairs.
        seed: stream seed.
        start: index of the first sample. (default: ``0``)
        time: :math:`T`. (default: ``11.0``)
        interval: :math:`\Delta t`. (default: ``0.1``)
        field: the initial-condition measure (default: :class:`PeriodicGaussianField` ``()``,
            the paper's).
        solver: the solver (default: :class:`KolmogorovSolver` ``()``, 64 x 64, the paper's flow).
        batch_size: trajectories integrated together. (default: ``64``)
        show_progress: show a progress bar over batches. (default: ``False``)

    Returns:
        The Fourier coefficients of :math:`\omega(T)` and :math:`\omega(T + \Delta t)`, each
        ``[num, n, n//2 + 1]`` complex (evaluate them with :func:`evaluate` or
        ``solver.to_grid``).
    """
    if num < 1 or start < 0 or batch_size < 1:
        raise ConfigError(f"need num >= 1, start >= 0 and batch_size >= 1, got {num}, {start}, {batch_size}")
    if not (time >= 0 and interval > 0):
        raise ConfigError(f"need time >= 0 and interval > 0, got {time}, {interval}")
    field = field or PeriodicGaussianField()
    solver = solver or KolmogorovSolver()
    first, second = [], []
    for lo in progress(range(start, start + num, batch_size), enabled=show_progress, desc="Kolmogorov",
                       unit="batch"):
        ids = range(lo, min(lo + batch_size, start + num))
        w0 = solver.initial_spectral([field.sample(seed, i) for i in ids])
        w = solver.solve_spectral(w0, [time, time + interval])
        first.append(w[:, 0])
        second.append(w[:, 1])
    return torch.cat(first), torch.cat(second)


def grid_values(coefficients: torch.Tensor, m: int) -> torch.Tensor:
    r"""Values ``[S, m, m]`` on the ``m x m`` grid of the torus of (dealiased) coefficients
    ``[S, n, n//2 + 1]`` of an ``n``-grid: by zero-padding and an inverse FFT when ``m >= n``
    (exact), by taking every ``n/m``-th solver grid value when ``m`` divides ``n``, and by
    :func:`evaluate` otherwise."""
    n = coefficients.shape[-2]
    if m < 2:
        raise ConfigError(f"the grid needs m >= 2 points per side, got {m}")
    if m >= n:
        padded = coefficients.new_zeros(*coefficients.shape[:-2], m, m // 2 + 1)
        h = n // 2
        padded[..., :h, :h + 1] = coefficients[..., :h, :h + 1]  # k_x >= 0 (and k_y up to n/2)
        padded[..., m - h:, :h + 1] = coefficients[..., n - h:, :h + 1]  # k_x < 0
        return torch.fft.irfft2(padded * m * m, s=(m, m))
    if n % m == 0:
        grid = torch.fft.irfft2(coefficients * n * n, s=(n, n))
        return grid[..., :: n // m, :: n // m]
    pos = torus_grid(m, dtype=coefficients.real.dtype, device=coefficients.device)[0]
    return evaluate(coefficients, pos).reshape(-1, m, m)


def torus_grid(n: int, dtype: torch.dtype = torch.float64, device=None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The uniform ``n x n`` grid :math:`x_{ij} = 2\pi(i, j)/n` of the torus.

    Returns:
        ``pos [n*n, 2]`` (row ``i * n + j``), ``weight [n*n]`` all :math:`(2\pi/n)^2` (the
        trapezoid rule of the torus, exact for trigonometric polynomials of degree below ``n``),
        and ``cells [2 (n-1)^2, 3]``: two triangles per grid square not crossing the periodic
        seam, for P1 gradients (the :math:`H^1` loss); the seam strip of width :math:`2\pi/n`
        is left out of the gradient term.
    """
    if n < 2:
        raise ConfigError(f"the grid needs n >= 2 points per side, got {n}")
    x = torch.arange(n, dtype=dtype, device=device) * (LENGTH / n)
    pos = torch.stack(torch.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    weight = torch.full((n * n,), (LENGTH / n) ** 2, dtype=dtype, device=device)
    i, j = np.meshgrid(np.arange(n - 1), np.arange(n - 1), indexing="ij")
    a = (i * n + j).ravel()
    b, c, d = a + n, a + n + 1, a + 1  # (i+1, j), (i+1, j+1), (i, j+1): counter-clockwise
    cells = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    return pos, weight, torch.as_tensor(cells, dtype=torch.long, device=device)


#: Densities of :func:`scattered_points` (unnormalised, on the torus).
DENSITIES = ("uniform", "graded", "patchy")


def scattered_points(num: int, density: str = "uniform", seed: int = 0) -> np.ndarray:
    r"""``num`` i.i.d. points on the torus, drawn by rejection from a density.

    - ``"uniform"``: constant;
    - ``"graded"``: :math:`\rho \propto (1 + 0.8\cos x)(1 + 0.8\cos y)`, 81 times denser near
      the origin than at :math:`(\pi, \pi)`;
    - ``"patchy"``: 9 times denser on :math:`[0, \pi]^2` than elsewhere.

    Returns:
        ``[num, 2]`` float64.
    """
    if density not in DENSITIES:
        raise ConfigError(f"unknown density {density!r}; choose one of {DENSITIES}")
    if num < 1:
        raise ConfigError(f"need at least one point, got {num}")
    rng = np.random.default_rng([int(seed), 3])
    out = np.empty((0, 2))
    while len(out) < num:
        p = rng.uniform(0.0, LENGTH, (2 * num, 2))
        if density == "graded":
            rho = (1 + 0.8 * np.cos(p[:, 0])) * (1 + 0.8 * np.cos(p[:, 1])) / 1.8**2
        elif density == "patchy":
            rho = np.where((p < math.pi).all(1), 1.0, 1.0 / 9.0)
        else:
            rho = np.ones(len(p))
        out = np.concatenate([out, p[rng.uniform(size=len(p)) < rho]])
    return out[:num]


def periodic_voronoi_weights(pos, length: float = LENGTH) -> np.ndarray:
    r"""Areas of the Voronoi cells of points on the torus :math:`[0, L)^2` (periodic distance).

    The cloud is extended by its periodic copies (shifted by :math:`L` in each direction) that
    lie within a margin :math:`m` of the square; the cell of an original point is then its cell
    in the periodic Voronoi diagram as soon as every vertex :math:`v` of it is certified: the
    empty circle about :math:`v` through the point lies in :math:`[-m, L + m]^2`, where every
    copy is present. The margin starts at :math:`8L/\sqrt N` and doubles until all vertices are
    certified (at :math:`m \ge L` the 3 x 3 tiling is complete). The cells tile the torus, so the
    weights sum to :math:`L^2` (to rounding) and do not change when the cloud is translated
    modulo :math:`L`. As a quadrature rule it is exact for constants; for smooth periodic
    functions on i.i.d. clouds the measured error slopes are :math:`N^{-1.5}` (uniform cloud)
    and :math:`N^{-0.8}` (the 81:1 ``"graded"`` cloud of :func:`scattered_points`), for
    :math:`N = 250 \dots 4000`.

    Args:
        pos: points ``[N, 2]`` in :math:`[0, L)^2` (numpy or torch), pairwise distinct.
        length: side :math:`L` of the torus. (default: :math:`2\pi`)

    Returns:
        ``[N]`` float64 weights.
    """
    from scipy.spatial import Voronoi

    p = validate_points(pos)
    if p.shape[1] != 2:
        raise ConfigError(f"periodic Voronoi weights are for points [N, 2], got shape {p.shape}")
    if (p < 0).any() or (p >= length).any():
        i = int(np.flatnonzero(((p < 0) | (p >= length)).any(1))[0])
        raise ConfigError(f"point {i} at {p[i].tolist()} is outside the torus [0, {length:g})^2; "
                          "reduce the coordinates modulo the side first")
    n = len(p)
    if n < 3:
        raise ConfigError(f"the Voronoi rule needs at least 3 points, got {n}")
    shifts = np.array([(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)], dtype=float)
    margin = 8 * length / math.sqrt(n)
    while True:
        copies = (p[None] + shifts[:, None] * length).reshape(-1, 2)
        copies = copies[((copies > -margin) & (copies < length + margin)).all(1)]
        vor = Voronoi(np.concatenate([p, copies]))  # the originals first
        regions = [vor.regions[r] for r in vor.point_region[:n]]
        complete = margin >= length
        if all(r and -1 not in r for r in regions):
            size = max(len(r) for r in regions)
            index = np.array([r + [r[0]] * (size - len(r)) for r in regions])  # [N, size]
            v = vor.vertices[index]  # [N, size, 2]
            radius = np.linalg.norm(v - p[:, None], axis=-1)[..., None]  # empty-circle radii
            if complete or ((v - radius >= -margin) & (v + radius <= length + margin)).all():
                return _polygon_areas(vor.vertices, regions)
        elif complete:
            raise ConfigError("a Voronoi cell of the tiled cloud is unbounded; are the points distinct?")
        margin = min(2 * margin, length)


def _polygon_areas(vertices: np.ndarray, regions: list[list[int]]) -> np.ndarray:
    """Areas of convex polygons from unordered vertex lists (vertices sorted by angle, shoelace)."""
    size = max(len(r) for r in regions)
    index = np.array([r + [r[0]] * (size - len(r)) for r in regions])  # pad by repeating a vertex
    v = vertices[index]  # [N, size, 2]
    centre = v.mean(axis=1, keepdims=True)
    angle = np.arctan2(v[..., 1] - centre[..., 1], v[..., 0] - centre[..., 0])
    v = np.take_along_axis(v, np.argsort(angle, axis=1)[..., None], axis=1)  # counter-clockwise
    w = np.roll(v, -1, axis=1)
    return 0.5 * np.abs((v[..., 0] * w[..., 1] - w[..., 0] * v[..., 1]).sum(axis=1))


def pair_samples(x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                 cells: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> list[MeshData]:
    r"""Samples with input ``x`` and target ``y`` at the points ``pos`` (one tensor of each shared
    by all samples).

    Args:
        x, y: values ``[S, N]``, e.g. :math:`\omega(T)` and :math:`\omega(T + \Delta t)` from
            :func:`evaluate` or :func:`grid_values` (flattened) of :func:`kolmogorov_pairs`.
        pos: points ``[N, 2]`` on the torus.
        weight: their quadrature weights ``[N]``.
        cells: triangles ``[M, 3]`` for the :math:`H^1` loss (optional).
        dtype: floating dtype of the samples (default: torch's default dtype).

    Returns:
        ``S`` :class:`~geoattn.mesh.MeshData` with ``pos``, ``weight``, ``x [N, 1]``, ``y [N, 1]``
        (and ``cells``, ``cell_type="triangle"``).
    """
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    pos, weight = torch.as_tensor(pos), torch.as_tensor(weight)
    if x.dim() != 2 or x.shape != y.shape or x.shape[1] != len(pos):
        raise ConfigError(f"x and y must both be [S, N] with N = {len(pos)} points, got "
                          f"{tuple(x.shape)} and {tuple(y.shape)}")
    if weight.shape != (len(pos),):
        raise ConfigError(f"need one weight per point: {len(pos)} points, weight shape {tuple(weight.shape)}")
    dtype = dtype or torch.get_default_dtype()
    pos, weight, x, y = pos.to(dtype), weight.to(dtype), x.to(dtype), y.to(dtype)
    if cells is not None:
        cells = torch.as_tensor(cells, dtype=torch.long)
    out = []
    for s in range(len(x)):
        data = MeshData(pos=pos, weight=weight, x=x[s, :, None], y=y[s, :, None])
        if cells is not None:
            data.cells = cells
            data.cell_type = "triangle"
        out.append(data)
    return out


__all__ = ["DENSITIES", "LENGTH", "KolmogorovSolver", "PeriodicGaussianField", "PeriodicSample",
           "evaluate", "grid_values", "kolmogorov_pairs", "pair_samples", "periodic_voronoi_weights",
           "scattered_points", "torus_grid"]
