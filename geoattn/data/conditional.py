r"""Gaussian random fields conditioned on what a mesh sees of a sample.

A model that reads a coefficient at the nodes of a mesh knows the field :math:`g` of
:class:`~geoattn.data.grf.GaussianRandomField` only through those nodal values: their values for
a lognormal coefficient :math:`a = e^g`, their signs for a two-valued one
(:class:`~geoattn.data.darcy.PiecewiseConstant`). The conditional law of the field given that
information is what any predictor can know of the continuum coefficient, so averaging solutions
over draws from it gives the best prediction in mean square, and its error is a floor that no
model of those nodes can beat (``benchmarks/darcy_floor.py``).

- :class:`ValueConditionedField`: given :math:`g(x_i) = v_i`. The law is Gaussian and is sampled
  exactly by Matheron's rule: a prior draw corrected by the kriging of its residuals.
- :class:`SignConditionedField`: given :math:`\operatorname{sign} g(x_i)`. The law is the prior
  restricted to an intersection of half-spaces of the coefficients, sampled by elliptical slice
  sampling (Murray, Adams and MacKay, AISTATS 2010), a Markov chain that keeps the signs exactly.

Both work on the coefficients of the truncated Karhunen–Loève series and return
:class:`~geoattn.data.grf.GRFSample` objects, callable on any points, so each draw can be solved
on any mesh.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from .grf import GaussianRandomField, GRFSample


def _points(field: GaussianRandomField, points) -> np.ndarray:
    points = np.asarray(points, dtype=float)
    if points.ndim != 2 or points.shape[1] != field.dim or len(points) == 0:
        raise ValueError(f"points must be a non-empty [N, {field.dim}] array (the field is "
                         f"{field.dim}-D), got shape {points.shape}")
    return points


class ValueConditionedField:
    r"""The field :math:`g` given its values :math:`g(x_i) = v_i` at the points :math:`x_i`.

    With :math:`\Phi_{ik} = \varphi_k(x_i)` and the prior :math:`c \sim \mathcal N(0, S^2)` of the
    series coefficients, the conditional law is Gaussian, and a draw is (Matheron's rule)

    .. math::
        c = c_0 + S^2 \Phi^\top (\Phi S^2 \Phi^\top + \epsilon I)^{-1} (v - \Phi c_0),
        \qquad c_0 \sim \mathcal N(0, S^2),

    whose mean is the kriging interpolant (:meth:`mean`) and whose covariance is the prior's minus
    the part the values explain. :math:`\epsilon` is ``jitter`` times the mean prior variance at
    the points: it keeps the factorisation stable when the points outnumber the modes the field
    resolves, and the draws match the values to about ``jitter`` relative.

    Args:
        field: the prior.
        points: observation points ``[N, d]``.
        values: ``g`` at the points ``[N]``.
        jitter: relative regularisation :math:`\epsilon` (default ``1e-10``).
    """

    def __init__(self, field: GaussianRandomField, points, values, jitter: float = 1e-10):
        self.field = field
        self.points = _points(field, points)
        self.values = np.asarray(values, dtype=float).reshape(-1)
        if len(self.values) != len(self.points) or not np.all(np.isfinite(self.values)):
            raise ValueError(f"values must be {len(self.points)} finite numbers (one per point), "
                             f"got {len(self.values)}")
        self.variance = field.std.ravel() ** 2  # prior variance of each coefficient
        self.phi = field.basis(self.points)  # [N, K]
        gram = (self.phi * self.variance) @ self.phi.T  # prior covariance of the values
        gram[np.diag_indices_from(gram)] += jitter * max(float(np.trace(gram)) / len(gram), 1e-300)
        factor = cho_factor(gram)
        self.gain = cho_solve(factor, self.phi * self.variance).T  # [K, N]

    def _coefficients(self, c0: np.ndarray) -> GRFSample:
        c = c0 + self.gain @ (self.values - self.phi @ c0)
        return GRFSample(self.field.box, c.reshape(self.field.modes))

    def mean(self) -> GRFSample:
        """The conditional mean of the field (the kriging interpolant of the values)."""
        return self._coefficients(np.zeros(len(self.variance)))

    def sample(self, rng: np.random.Generator) -> GRFSample:
        """One exact draw from the conditional law."""
        return self._coefficients(np.sqrt(self.variance) * rng.standard_normal(len(self.variance)))


class SignConditionedField:
    r"""The field :math:`g` given the signs :math:`g(x_i) \ge 0` or :math:`< 0` at the points
    :math:`x_i` (what a :class:`~geoattn.data.darcy.PiecewiseConstant` coefficient at the nodes
    tells of it).

    The law is the prior restricted to the coefficients with those signs. :meth:`chain` samples it
    by elliptical slice sampling: from the state :math:`c`, draw :math:`\nu` from the prior and
    move to :math:`c\cos\theta + \nu\sin\theta`, shrinking the bracket of :math:`\theta` towards 0
    until every sign holds. Each move leaves the conditional law invariant, and the chain needs a
    start that has the signs: ``start``, for instance the sample the signs were read from (itself
    a draw of the conditional law, so the chain starts in equilibrium and ``burn`` only removes
    its memory of that sample).

    Args:
        field: the prior.
        points: observation points ``[N, d]``.
        start: a field with the observed signs at the points (a :class:`GRFSample` of ``field``).
        signs: the observed signs, booleans ``g >= 0`` ``[N]`` (default: those of ``start``).
    """

    def __init__(self, field: GaussianRandomField, points, start: GRFSample, signs=None):
        self.field = field
        self.points = _points(field, points)
        self.phi = field.basis(self.points)  # [N, K]
        self.std = field.std.ravel()
        self.start = np.asarray(start.coefficients, dtype=float).ravel()
        if self.start.shape != self.std.shape:
            raise ValueError(f"start has {self.start.size} coefficients, the field {self.std.size}")
        have = self.phi @ self.start >= 0
        self.signs = have if signs is None else np.asarray(signs, dtype=bool).reshape(-1)
        if self.signs.shape != have.shape:
            raise ValueError(f"signs must be one boolean per point ({len(have)}), got {self.signs.shape}")
        wrong = np.flatnonzero(have != self.signs)
        if len(wrong):
            raise ValueError(f"start does not have the observed signs at {len(wrong)} of {len(have)} "
                             f"points (first: {wrong[:5].tolist()})")

    def _holds(self, c: np.ndarray) -> bool:
        return bool(np.array_equal(self.phi @ c >= 0, self.signs))

    def chain(self, rng: np.random.Generator, n: int, burn: int = 1000,
              thin: int = 50) -> Iterator[GRFSample]:
        """``n`` draws of the conditional law: the states after ``burn`` moves, then every
        ``thin``-th move (consecutive states are correlated; ``thin`` sets how little)."""
        if n < 0 or burn < 0 or thin < 1:
            raise ValueError(f"need n >= 0, burn >= 0 and thin >= 1, got {n}, {burn}, {thin}")
        c = self.start.copy()
        for step in range(burn + n * thin):
            nu = self.std * rng.standard_normal(len(self.std))
            theta = rng.uniform(0.0, 2 * np.pi)
            low, high = theta - 2 * np.pi, theta
            while True:
                proposal = c * np.cos(theta) + nu * np.sin(theta)
                if self._holds(proposal):
                    c = proposal
                    break
                if theta < 0:
                    low = theta
                else:
                    high = theta
                theta = rng.uniform(low, high)  # the bracket shrinks to 0, where c itself holds
            if step >= burn and (step - burn + 1) % thin == 0:
                yield GRFSample(self.field.box, c.reshape(self.field.modes))


__all__ = ["SignConditionedField", "ValueConditionedField"]
