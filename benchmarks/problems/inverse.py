r"""The inverse coefficient problem of Cao's Galerkin transformer paper (§5.3): recover the
piecewise-constant Darcy coefficient from a noisy measurement of the solution.

For :math:`-\nabla\cdot(a\nabla u) = 1` in :math:`D = (0, 1)^2`, :math:`u = 0` on
:math:`\partial D`, with :math:`a = 12` where a Gaussian random field is non-negative and
:math:`3` elsewhere (:class:`~geoattn.data.darcy.PiecewiseConstant`), the operator to learn is

.. math::
    u + \varepsilon\,\nu \;\longmapsto\; \Pi_c\, a,
    \qquad \nu(x_i) \sim \mathcal N(0, c_i) \text{ independent}, \quad
    c_i = \operatorname{Var}_{\text{training samples}}\, u(x_i),

from the solution on a fine input mesh, corrupted by noise of relative level :math:`\varepsilon`
(``0``, ``0.01``, ``0.1`` in the paper) whose variance at each node is the variance of the
training solutions there, to the coefficient on a coarser target mesh. The restriction
:math:`\Pi_c` is the average of :math:`a` against each hat function of the target mesh (the mesh
analogue of the paper's average pooling onto the coarse grid). The problem is ill-posed with
noise; the noise of each sample is drawn once, from a generator seeded by the sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import meshio
import numpy as np
import torch

from geoattn.data.darcy import DarcyProblem, PiecewiseConstant
from geoattn.data.grf import GaussianRandomField, preset
from geoattn.mesh import MeshData, from_meshio
from geoattn.mesh.families import to_skfem
from geoattn.optional import progress, require

skfem = require("skfem", "data", "the inverse coefficient problem")

#: The paper's noise levels :math:`\varepsilon`.
NOISE_LEVELS = (0.0, 0.01, 0.1)


@skfem.LinearForm
def _moment(v, w):
    return w.a * v


def hat_average(mesh: meshio.Mesh, coefficient, intorder: int = 8) -> np.ndarray:
    r"""The average of ``coefficient`` against each P1 hat function :math:`\varphi_j` of ``mesh``,

    .. math::
        (\Pi a)_j = \frac{\int_D a\, \varphi_j \,dx}{\int_D \varphi_j \,dx},

    by a quadrature rule of order ``intorder`` on every cell. It is the value of a constant
    :math:`a`, the value of :math:`a` at any node whose patch lies in one phase of a
    piecewise-constant :math:`a`, and :math:`a(x_j)` for an affine :math:`a` at a node whose patch
    is point-symmetric about it.

    Args:
        mesh (meshio.Mesh): a triangle or tetrahedron mesh.
        coefficient (callable): values at points ``[M, d] -> [M]``.
        intorder (int, optional): quadrature order per cell. (default: ``8``)

    Returns:
        nodal values ``[N]``.
    """
    return _hat_average(_hat_basis(mesh, intorder), coefficient)


def _hat_basis(mesh: meshio.Mesh, intorder: int):
    elements = {"triangle": skfem.ElementTriP1, "tetra": skfem.ElementTetP1}
    ctype = mesh.cells[-1].type
    if ctype not in elements:
        raise ValueError(f"the hat average needs a triangle or tetrahedron mesh, got cells {ctype!r}")
    return skfem.Basis(to_skfem(mesh), elements[ctype](), intorder=intorder)


def _hat_average(basis, coefficient) -> np.ndarray:
    x = basis.mapping.F(basis.X)  # [d, M, Q]
    a = np.asarray(coefficient(x.reshape(x.shape[0], -1).T), dtype=float).reshape(x.shape[1:])
    return skfem.asm(_moment, basis, a=a) / skfem.asm(_moment, basis, a=np.ones_like(a))


@dataclass
class InverseData:
    r"""Clean data of the inverse problem: the solutions on every input mesh
    (``solutions[name]`` ``[S, N]``), the restricted coefficients on the target mesh
    (``coefficients`` ``[S, N_c]``), and the stream ``seed`` and sample ``indices``."""

    solutions: dict[str, np.ndarray]
    coefficients: np.ndarray
    seed: int
    indices: np.ndarray

    def __len__(self) -> int:
        return len(self.indices)


class InverseProblem:
    r"""Darcy inverse coefficient identification between meshes: solutions on one or more input
    meshes, the coefficient on a target mesh.

    Args:
        meshes (Mapping[str, meshio.Mesh]): input meshes by name (triangles); every sample is
            solved on each, so the same continuum sample is seen on all of them.
        target (meshio.Mesh): the (coarser) mesh of the coefficient.
        field (GaussianRandomField, optional): the field whose sign sets the coefficient
            (default: the ``"cao"`` preset, :math:`(-\Delta + 9 I)^{-2}`).
        f (float or callable, optional): the source. (default: ``1.0``)
        high, low (float, optional): the coefficient's two values. (default: ``12`` and ``3``)
        intorder (int, optional): quadrature order of :func:`hat_average`. (default: ``8``)

    Shapes:
        - **clean(n, seed):** :class:`InverseData` with ``[S, N]`` per input mesh and ``[S, N_c]``.
        - **samples(...):** :class:`~geoattn.mesh.MeshData` with ``pos [N, 2]``, ``weight [N]``,
          ``cells``, ``x [N, 1]`` (noisy solution), ``y [N_c, 1]`` (coefficient),
          ``pos_query [N_c, 2]`` and ``weight_query [N_c]`` (the target mesh).
    """

    def __init__(self, meshes: Mapping[str, meshio.Mesh], target: meshio.Mesh,
                 field: GaussianRandomField | None = None, f=1.0, high: float = 12.0,
                 low: float = 3.0, intorder: int = 8):
        if not meshes:
            raise ValueError("give at least one input mesh")
        self.field = field or preset("cao")
        self.f, self.high, self.low, self.intorder = f, high, low, intorder
        self.meshes = dict(meshes)
        self.problems = {name: DarcyProblem(m) for name, m in self.meshes.items()}
        self.target = target
        self.bases = {name: from_meshio(m) for name, m in self.meshes.items()}
        self.target_base = from_meshio(target)
        self._target_basis = _hat_basis(target, intorder)

    def coefficient(self, seed: int, index: int):
        """The coefficient of sample ``index`` of the stream ``seed`` (a callable on points)."""
        if seed < 0 or index < 0:
            raise ValueError(f"seed and index must be non-negative, got {seed}, {index}")
        return PiecewiseConstant(self.field.sample(seed, index), self.high, self.low)

    def clean(self, n: int, seed: int, start: int = 0, show_progress: bool = False) -> InverseData:
        """Samples ``start .. start + n - 1``: solutions on every input mesh and the restricted
        coefficient on the target mesh."""
        if n < 1:
            raise ValueError(f"need at least one sample, got n={n}")
        indices = np.arange(start, start + n)
        sols = {name: np.empty((n, len(p.nodes))) for name, p in self.problems.items()}
        coef = np.empty((n, len(self.target.points)))
        for s, i in enumerate(progress(indices, enabled=show_progress, desc="darcy", leave=False)):
            a = self.coefficient(seed, int(i))
            for name, prob in self.problems.items():
                sols[name][s] = prob.solve(a, self.f)
            coef[s] = _hat_average(self._target_basis, a)
        return InverseData(sols, coef, seed, indices)

    def transfer(self, values: np.ndarray, source: str, dest: str) -> np.ndarray:
        """P1 interpolation of nodal ``values [..., N_source]`` from input mesh ``source`` to the
        nodes of input mesh ``dest`` (e.g. the noise variance of the training mesh)."""
        for name in (source, dest):
            if name not in self.problems:
                raise ValueError(f"unknown input mesh {name!r}; have {sorted(self.problems)}")
        probe = self.problems[source].basis.probes(self.problems[dest].nodes.T).tocsr()  # [N_dest, N_src]
        return np.asarray(probe @ np.asarray(values).T).T

    def samples(self, data: InverseData, mesh: str, noise: float = 0.0,
                variance: np.ndarray | None = None, dtype: torch.dtype | None = None) -> list[MeshData]:
        r"""The samples of ``data`` on input mesh ``mesh`` with noise of level ``noise``
        (:func:`add_noise`; ``variance`` per node of that mesh, required when ``noise > 0``)."""
        if mesh not in data.solutions:
            raise ValueError(f"unknown input mesh {mesh!r}; have {sorted(data.solutions)}")
        u = data.solutions[mesh]
        if noise:
            if variance is None:
                raise ValueError("noise > 0 needs the per-node variance (node_variance of the training solutions)")
            u = add_noise(u, variance, noise, data.seed, data.indices)
        dtype = dtype or torch.get_default_dtype()
        base, target = self.bases[mesh], self.target_base
        out = []
        for values, a in zip(u, data.coefficients):
            d = base.clone()
            d.x = torch.as_tensor(values[:, None], dtype=dtype)
            d.y = torch.as_tensor(a[:, None], dtype=dtype)
            d.pos = d.pos.to(dtype)
            d.weight = d.weight.to(dtype)
            d.pos_query = target.pos.to(dtype)
            d.weight_query = target.weight.to(dtype)
            out.append(d)
        return out


def node_variance(solutions: np.ndarray) -> np.ndarray:
    r"""The variance of the solutions at each node over the samples,
    :math:`c_i = \frac1S \sum_s (u_{s,i} - \bar u_i)^2` (``[S, N] -> [N]``)."""
    u = np.asarray(solutions, dtype=float)
    if u.ndim != 2 or u.shape[0] < 2:
        raise ValueError(f"need solutions [S, N] with S >= 2, got shape {u.shape}")
    return u.var(axis=0)


def add_noise(solutions: np.ndarray, variance: np.ndarray, noise: float, seed: int,
              indices) -> np.ndarray:
    r"""Noisy measurements :math:`\tilde u_{s,i} = u_{s,i} + \varepsilon \sqrt{c_i}\, \xi_{s,i}`.

    :math:`\xi_{s,\cdot} \sim \mathcal N(0, I)` is drawn from a generator seeded by
    ``(seed, indices[s], 2)`` only, so a sample's noise does not depend on the other samples, and
    the noise of two levels differs by the factor :math:`\varepsilon` alone.

    Args:
        solutions: clean values ``[S, N]``.
        variance: per-node variance ``[N]`` (:func:`node_variance` of the training solutions).
        noise: the level :math:`\varepsilon \ge 0`.
        seed: the stream seed.
        indices: the sample indices ``[S]``.

    Returns:
        ``[S, N]``.
    """
    u = np.asarray(solutions, dtype=float)
    c = np.asarray(variance, dtype=float)
    indices = np.asarray(indices).reshape(-1)
    if noise < 0 or not np.isfinite(noise):
        raise ValueError(f"the noise level must be finite and >= 0, got {noise}")
    if u.ndim != 2 or c.shape != (u.shape[1],) or len(indices) != u.shape[0]:
        raise ValueError(f"need solutions [S, N], variance [N] and indices [S]; got {u.shape}, "
                         f"{c.shape}, {indices.shape}")
    if np.any(c < 0) or not np.all(np.isfinite(c)):
        raise ValueError("the variance must be finite and non-negative")
    xi = np.stack([np.random.default_rng([int(seed), int(i), 2]).standard_normal(u.shape[1])
                   for i in indices])
    return u + noise * np.sqrt(c) * xi


__all__ = ["InverseData", "InverseProblem", "NOISE_LEVELS", "add_noise", "hat_average",
           "node_variance"]
