"""Gaussian random fields as functions: a truncated Karhunen–Loève (cosine) series.

A field is drawn once per sample as a finite set of random coefficients and can then be
evaluated at any points, so the *same* continuum sample can be discretised on any mesh of the
domain. This is what makes cross-mesh comparisons exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


def _as_box(box) -> np.ndarray:
    box = np.asarray(box, dtype=float)
    if box.ndim != 2 or box.shape[0] != 2 or np.any(box[1] <= box[0]):
        raise ValueError(f"box must be ((lo_1, ..., lo_d), (hi_1, ..., hi_d)) with hi > lo, got {box.tolist()}")
    return box


class GaussianRandomField:
    r"""The Gaussian measure :math:`\mathcal N(0, \sigma^2(-\Delta + \tau^2 I)^{-\alpha})` on a box,
    with the Neumann Laplacian, represented by its truncated Karhunen–Loève expansion.

    The eigenpairs of the Neumann Laplacian on :math:`B = \prod_j [l_j, h_j]`, :math:`L_j = h_j - l_j`,
    are products of cosines, and a sample is

    .. math::
        g(x) = \sum_{k \in \{0, \dots, m-1\}^d} \sigma\,(\lambda_k + \tau^2)^{-\alpha/2}\,
        \xi_k\, \varphi_k(x), \qquad
        \lambda_k = \sum_j \Big(\frac{\pi k_j}{L_j}\Big)^2, \qquad
        \varphi_k(x) = \prod_j c_{k_j} \cos\Big(\frac{\pi k_j (x_j - l_j)}{L_j}\Big),

    with :math:`\xi_k \sim \mathcal N(0, 1)` i.i.d., :math:`c_0 = L_j^{-1/2}` and
    :math:`c_{k} = (2 / L_j)^{1/2}` (so the :math:`\varphi_k` are orthonormal in :math:`L^2(B)`).
    The covariance of the truncated series is
    :math:`C(x, y) = \sum_k \sigma^2 (\lambda_k + \tau^2)^{-\alpha} \varphi_k(x) \varphi_k(y)`
    (:meth:`covariance`). With ``mean_zero=True`` the constant mode :math:`k = 0` is dropped.

    Args:
        alpha (float, optional): smoothness exponent :math:`\alpha`. (default: ``2.0``)
        tau (float, optional): inverse length scale :math:`\tau`. (default: ``3.0``)
        sigma (float, optional): amplitude :math:`\sigma`; ``None`` gives
            :math:`\tau^{\alpha - d/2}`, the convention of the Darcy benchmark data of the
            Fourier neural operator. (default: ``None``)
        box (array-like, optional): ``(lower corner, upper corner)`` of the box, which fixes
            ``d``. (default: ``((0, 0), (1, 1))``)
        modes (int or tuple, optional): modes per axis :math:`m`. (default: ``32``)
        mean_zero (bool, optional): drop the constant mode. (default: ``True``)

    Shapes:
        - **sample(seed, i)(points):** points :math:`[N, d]` (numpy or torch) → values :math:`[N]`
          of the same kind (torch: same device and floating dtype).
    """

    def __init__(self, alpha: float = 2.0, tau: float = 3.0, sigma: float | None = None,
                 box=((0.0, 0.0), (1.0, 1.0)), modes: int | tuple[int, ...] = 32,
                 mean_zero: bool = True):
        self.box = _as_box(box)
        self.dim = self.box.shape[1]
        self.alpha, self.tau = float(alpha), float(tau)
        self.sigma = float(tau ** (alpha - self.dim / 2) if sigma is None else sigma)
        self.modes = (int(modes),) * self.dim if np.isscalar(modes) else tuple(int(m) for m in modes)
        if len(self.modes) != self.dim or min(self.modes) < 1:
            raise ValueError(f"modes must be a positive int or one per axis ({self.dim}), got {modes}")
        self.mean_zero = bool(mean_zero)
        lengths = self.box[1] - self.box[0]
        grids = np.meshgrid(*[(np.pi * np.arange(m) / L) ** 2 for m, L in zip(self.modes, lengths)],
                            indexing="ij")
        lam = sum(grids)  # [m_1, ..., m_d]
        self.std = self.sigma * (lam + self.tau**2) ** (-self.alpha / 2)
        if self.mean_zero:
            self.std[(0,) * self.dim] = 0.0

    def params(self) -> dict:
        """Constructor arguments (JSON-friendly), enough to rebuild the field."""
        return {"alpha": self.alpha, "tau": self.tau, "sigma": self.sigma,
                "box": self.box.tolist(), "modes": list(self.modes), "mean_zero": self.mean_zero}

    def __repr__(self) -> str:
        p = self.params()
        return "GaussianRandomField(" + ", ".join(f"{k}={v}" for k, v in p.items()) + ")"

    def sample(self, seed: int, index: int) -> GRFSample:
        """Sample ``index`` of the stream ``seed``: depends on ``(seed, index)`` only."""
        if seed < 0 or index < 0:
            raise ValueError(f"seed and index must be non-negative, got {seed}, {index}")
        rng = np.random.default_rng([int(seed), int(index)])
        xi = rng.standard_normal(self.modes)
        return GRFSample(self.box, self.std * xi)

    def covariance(self, x, y) -> np.ndarray:
        """Covariance ``C(x_i, y_j)`` of the truncated series, ``[N, d] x [M, d] -> [N, M]``."""
        return (self.basis(x) * (self.std.ravel() ** 2)) @ self.basis(y).T

    def basis(self, points) -> np.ndarray:
        r"""The basis functions :math:`\varphi_k` at ``points``, ``[N, d] -> [N, prod(m)]`` (``k``
        in C order, the order of :attr:`std` raveled): a sample with coefficients ``c`` is
        ``basis(points) @ c.ravel()``."""
        return _basis(self.box, np.asarray(points, float), self.modes)


def _axis_cosines(box, points, modes, xp):
    """Per-axis normalised cosines ``c_k cos(pi k (x_j - l_j) / L_j)``, each ``[m_j, N]``.

    Uses the Chebyshev recurrence ``cos(k t) = 2 cos(t) cos((k-1) t) - cos((k-2) t)``: one cosine
    per point and axis instead of ``m_j``.
    """
    out = []
    for j, m in enumerate(modes):
        lo, length = float(box[0, j]), float(box[1, j] - box[0, j])
        c1 = xp.cos(math.pi * (points[:, j] - lo) / length)
        c = xp.empty((m, len(c1)), dtype=c1.dtype, **({} if xp is np else {"device": c1.device}))
        c[0] = 1.0
        if m > 1:
            c[1] = c1
        for k in range(2, m):
            c[k] = 2.0 * c1 * c[k - 1] - c[k - 2]
        c *= math.sqrt(2.0 / length)
        c[0] = 1.0 / math.sqrt(length)
        out.append(c)  # [m, N]
    return out


def _basis(box, points, modes) -> np.ndarray:
    """All tensor-product basis functions ``phi_k(x)`` ``[N, prod(m)]`` (C order of ``k``); small inputs only."""
    cos = [c.T for c in _axis_cosines(box, points, modes, np)]  # [N, m_j] each
    out = cos[0]
    for c in cos[1:]:
        out = (out[:, :, None] * c[:, None, :]).reshape(len(points), -1)
    return out


@dataclass
class GRFSample:
    r"""One drawn field :math:`g = \sum_k a_k \varphi_k`, callable on points.

    Evaluation contracts the coefficient tensor axis by axis,
    :math:`O(N \prod_j m_j)` operations and :math:`O(N \prod_{j>1} m_j)` memory.

    Shapes:
        - **input:** points :math:`[N, d]` (numpy or torch)
        - **output:** values :math:`[N]`
    """

    box: np.ndarray
    coefficients: np.ndarray  # [m_1, ..., m_d]

    def __call__(self, points):
        is_torch = isinstance(points, torch.Tensor)
        xp = torch if is_torch else np
        if not is_torch:
            points = np.asarray(points, dtype=float)
        if points.ndim != 2 or points.shape[1] != self.box.shape[1]:
            raise ValueError(f"points must be [N, {self.box.shape[1]}] (the field's box is "
                             f"{self.box.shape[1]}-D), got shape {tuple(points.shape)}; drop a "
                             "zero z-column of 2-D mesh points first")
        modes = self.coefficients.shape
        cos = _axis_cosines(self.box, points, modes, xp)
        coef = self.coefficients
        if is_torch:
            coef = torch.as_tensor(coef, dtype=points.dtype, device=points.device)
        n = points.shape[0]
        r = coef.reshape(modes[0], -1).T @ cos[0]  # [m_2 * ... * m_d, N]
        for c, m in zip(cos[1:], modes[1:]):
            r = xp.einsum("krn,kn->rn", r.reshape(m, -1, n), c)  # [m_{j+1} * ... * m_d, N]
        return r.reshape(n)


#: The papers' covariance parameters, as keyword arguments of :class:`GaussianRandomField`.
#:
#: - ``"cao"``: :math:`\alpha = 2, \tau = 3` (Darcy data of the Galerkin transformer and FNO papers);
#: - ``"calvello"``: :math:`48^2(-\Delta + 12^2 I)^{-2}` (continuum attention paper, Darcy).
PRESETS = {
    "cao": {"alpha": 2.0, "tau": 3.0},
    "calvello": {"alpha": 2.0, "tau": 12.0, "sigma": 48.0},
}


def preset(name: str, **overrides) -> GaussianRandomField:
    """A :class:`GaussianRandomField` with the parameters of :data:`PRESETS` ``[name]``."""
    if name not in PRESETS:
        raise ValueError(f"unknown GRF preset {name!r}; choose one of {sorted(PRESETS)}")
    return GaussianRandomField(**{**PRESETS[name], **overrides})


__all__ = ["GaussianRandomField", "GRFSample", "PRESETS", "preset"]
