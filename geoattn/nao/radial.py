r"""The 1-D radial nonlocal-diffusion kernel problem of the NAO paper (Yu et al., §5.1, App. C.1).

Each system (task) :math:`\eta` is the nonlocal operator

.. math::
    f(x) = \int_{\mathbb{R}} \gamma_\eta(|y - x|)\,(u(y) - u(x))\,dy
         = \int_0^\delta \gamma_\eta(r)\, g[u](r, x)\,dr, \qquad
    g[u](r, x) = u(x + r) + u(x - r) - 2 u(x),

with :math:`\delta = 11`, loadings :math:`u_1 = \cos(x) 1_{[-\pi,\pi]}` and
:math:`u_2 = \sin(2x) 1_{[-\pi,\pi]}`, and kernels :func:`sine_kernel` (training
:math:`\eta \in \{1,2,3,4,6,7,8\}`, in-distribution test :math:`\eta = 5`) and :func:`ood1_kernel`.
The responses are computed by composite 16-point Gauss–Legendre quadrature on panels of length
:math:`\le 1/4` split at the jumps and kinks of :math:`g[u](\cdot, x)` (accurate to about
:math:`10^{-12}`; the paper uses adaptive Gauss–Kronrod), not by the Riemann sums the model uses.

Tokens (eq. (20)): the u-mesh (the model's source mesh) is the r-grid :math:`r_k = k\,\Delta r`, :math:`k = 1..N`,
:math:`N = \lfloor \delta/\Delta r \rfloor`, with weights :math:`\Delta r`; the features are
:math:`d` sample points :math:`x_j` (each "pair" is :math:`(g[u](\cdot, x_j), f(x_j))`); the f-mesh
(the model's query mesh) is a single point (coordinate 0, weight 1). The pairs of a task are all
:math:`(u_i, x_j)` with :math:`x_j = j \Delta x`, :math:`|j| \le \lceil (\pi + \delta)/\Delta x \rceil`
(the last point past which :math:`f` vanishes; :math:`\Delta x` is by default :math:`\Delta r`),
and sample :math:`s` takes from each loading's :math:`P_i` points the points
:math:`s, s+S, \dots`, :math:`d/n` of them for :math:`n` loadings, with one stride :math:`S` for
all (strided subsampling, as the authors' code). So feature :math:`j` of every sample holds the
same loading near the same point :math:`x`. At the paper's :math:`\Delta x = 0.0125` and
:math:`d = 302` this is the authors' layout: 2265 points per loading, 15 samples of
:math:`151 + 151` pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .model import TokenMesh

__all__ = ["RadialKernelProblem", "RadialSamples", "cosine_kernel", "diverse_kernels",
           "gaussian_kernel", "loading", "ood1_kernel", "polynomial_kernel", "response", "sine_kernel",
           "LOADINGS", "DELTA"]

DELTA = 11.0
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)


def sine_kernel(eta: float) -> Callable[[np.ndarray], np.ndarray]:
    r""":math:`\gamma_\eta(r) = e^{-\eta r} \sin(6 r)\, 1_{[0, 11]}(r)` (eq. (24))."""
    return lambda r: np.exp(-eta * r) * np.sin(6 * r) * ((r >= 0) & (r <= DELTA))


def ood1_kernel(r: np.ndarray) -> np.ndarray:
    r""":math:`\gamma(r) = r (11 - r) e^{-5 r} \sin(6 r)\, 1_{[0, 11]}(r)` (eq. (25))."""
    return r * (11 - r) * np.exp(-5 * r) * np.sin(6 * r) * ((r >= 0) & (r <= DELTA))


def cosine_kernel(eta: float) -> Callable[[np.ndarray], np.ndarray]:
    r""":math:`\gamma_\eta(r) = \frac{10 - r}{20} \cos(\eta r)\,(10 - r)\, 1_{[0, 10]}(r)`, the
    paper's cosine family (Table 2, :math:`\eta = 0, \dots, 6`), with the factor
    :math:`(10 - r)` appearing twice as printed."""
    return lambda r: (10 - r) ** 2 / 20 * np.cos(eta * r) * ((r >= 0) & (r <= 10))


def polynomial_kernel(eta: int) -> Callable[[np.ndarray], np.ndarray]:
    r""":math:`\gamma_\eta(r) = e^{-0.1 r} P_\eta((r - 10)/10)\, 1_{[0, 10]}(r)` with the Legendre
    polynomial :math:`P_\eta`, the paper's polynomial family (Table 2, :math:`\eta = 1, \dots, 7`)."""
    coef = np.zeros(int(eta) + 1)
    coef[-1] = 1.0
    return lambda r: (np.exp(-0.1 * r) * np.polynomial.legendre.legval((r - 10) / 10, coef)
                      * ((r >= 0) & (r <= 10)))


def diverse_kernels() -> list[Callable[[np.ndarray], np.ndarray]]:
    r"""The 21 training kernels of the paper's diverse set (Table 2): sine
    :math:`\eta \in \{1,2,3,4,6,7,8\}`, cosine :math:`\eta = 0..6`, polynomial :math:`\eta = 1..7`."""
    return ([sine_kernel(e) for e in (1, 2, 3, 4, 6, 7, 8)] + [cosine_kernel(e) for e in range(7)]
            + [polynomial_kernel(e) for e in range(1, 8)])


def gaussian_kernel(r: np.ndarray) -> np.ndarray:
    r""":math:`\gamma(r) = e^{-r^2/2}/\sqrt{2\pi}` (the paper's OOD2 kernel)."""
    return np.exp(-0.5 * r**2) / math.sqrt(2 * math.pi)


#: The two loadings of every task: ``cos(x)`` and ``sin(2x)`` cut off outside ``[-pi, pi]``.
LOADINGS = (lambda x: np.cos(x) * (np.abs(x) <= np.pi),
            lambda x: np.sin(2 * x) * (np.abs(x) <= np.pi))


def loading(u: Callable, r: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:math:`g[u](r, x) = u(x + r) + u(x - r) - 2 u(x)`, broadcast over ``r`` and ``x``."""
    return u(x + r) + u(x - r) - 2 * u(x)


def response(kernel: Callable, u: Callable, x: np.ndarray, delta: float = DELTA) -> np.ndarray:
    r""":math:`f(x) = \int_0^\delta \gamma(r) g[u](r, x)\,dr` at the points ``x [P]``, by composite
    Gauss–Legendre quadrature with panel edges at the cut-off points :math:`r = |x \pm \pi|`."""
    x = np.asarray(x, dtype=float)
    grid = np.linspace(0.0, delta, int(math.ceil(4 * delta)) + 1)  # panels of length <= 1/4
    kinks = np.clip(np.abs(np.stack([x - np.pi, x + np.pi], 1)), 0.0, delta)  # (P, 2)
    edges = np.sort(np.concatenate([np.broadcast_to(grid, (len(x), len(grid))), kinks], 1), 1)
    a, b = edges[:, :-1, None], edges[:, 1:, None]  # (P, panels, 1)
    r = 0.5 * (a + b) + 0.5 * (b - a) * _GL_NODES  # (P, panels, 16)
    vals = kernel(r) * loading(u, r, x[:, None, None])
    return np.sum(0.5 * (b - a) * _GL_WEIGHTS * vals, axis=(1, 2))


@dataclass
class RadialSamples:
    """Token tensors of one task: ``u [S, N, d]`` loadings on the r-grid, ``f [S, 1, d]``
    responses, the r-grid ``mesh`` (:class:`~geoattn.nao.TokenMesh`, ``pos [1, N, 1]``,
    ``weight [1, N]``), the one-point f-mesh ``mesh_query`` (``pos [1, 1, 1]``, ``weight [1, 1]``),
    and the true kernel on the r-grid ``kernel [N]``."""

    u: torch.Tensor
    f: torch.Tensor
    mesh: TokenMesh
    mesh_query: TokenMesh
    kernel: torch.Tensor


class RadialKernelProblem:
    """The radial kernel problem at one resolution :math:`\\Delta x = \\Delta r`.

    Args:
        dx (float, optional): spacing :math:`\\Delta r` of the r-grid (the mesh of the
            tokens). (default: ``0.0125``, the paper's)
        delta (float, optional): horizon :math:`\\delta`. (default: ``11.0``)
        loadings (sequence, optional): the functions :math:`u_i`. (default: :data:`LOADINGS`)
        x_spacing (float, optional): spacing of the sample points :math:`x_j` (the features).
            (default: ``dx``, as the paper). Keep it fixed to compare resolutions: the features
            of sample :math:`s` are then the same points on every r-grid, and only the mesh of
            the tokens changes.
    """

    def __init__(self, dx: float = 0.0125, delta: float = DELTA, loadings: Sequence = LOADINGS,
                 x_spacing: float | None = None):
        self.dx, self.delta, self.loadings = float(dx), float(delta), tuple(loadings)
        self.x_spacing = self.dx if x_spacing is None else float(x_spacing)
        self.r = self.dx * np.arange(1, int(math.floor(delta / dx + 1e-9)) + 1)  # (N,)
        half = int(math.ceil((np.pi + delta) / self.x_spacing - 1e-9))
        self.x = self.x_spacing * np.arange(-half, half + 1)  # f vanishes past the last point

    def pairs(self, kernel: Callable) -> tuple[np.ndarray, np.ndarray]:
        """All pairs of a task: loadings ``[N, P]`` on the r-grid and responses ``[P]``."""
        g = [loading(u, self.r[:, None], self.x[None, :]) for u in self.loadings]
        f = [response(kernel, u, self.x, self.delta) for u in self.loadings]
        return np.concatenate(g, 1), np.concatenate(f)

    def sample_pairs(self, d: int) -> np.ndarray:
        """The pairs of each sample, ``[S, d]`` indices into :meth:`pairs`: sample ``s`` takes the
        points ``s, s + S, ...`` of each loading, ``d / n`` of them for ``n`` loadings (the first
        ``d % n`` loadings one more), with the largest stride ``S`` that fits."""
        n, P = len(self.loadings), len(self.x)
        per = [d // n + (i < d % n) for i in range(n)]  # features per loading
        S = P // max(per)
        if S < 1:
            raise ValueError(f"a task has {P} points per loading at dx={self.x_spacing}, fewer than "
                             f"the {max(per)} features per loading of d={d}")
        return np.stack([np.concatenate([i * P + s + S * np.arange(k) for i, k in enumerate(per)])
                         for s in range(S)])

    def samples(self, kernel: Callable, d: int, dtype: torch.dtype = torch.float64) -> RadialSamples:
        """The samples of ``d`` strided pairs of one task (:meth:`sample_pairs`)."""
        g, f = self.pairs(kernel)
        idx = self.sample_pairs(d)  # (S, d)
        t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=dtype)  # noqa: E731
        return RadialSamples(u=t(g[:, idx].transpose(1, 0, 2)), f=t(f[idx][:, None, :]),
                             mesh=TokenMesh.of(t(self.r[:, None]), t(np.full(len(self.r), self.dx))),
                             mesh_query=TokenMesh.of(t(np.zeros((1, 1))), t(np.ones(1))),
                             kernel=t(kernel(self.r)))
