r"""Darcy flow :math:`-\nabla\cdot(a \nabla u) = f` in :math:`D`, :math:`u = 0` on :math:`\partial D`,
solved with P1 finite elements (scikit-fem) on triangle and tetrahedron meshes.

The coefficient is any callable on points, evaluated at the quadrature points of every cell (so a
field drawn once, e.g. a :class:`~geoattn.data.grf.GRFSample`, is the same continuum coefficient on
every mesh), and the coefficient families of the papers are :class:`Lognormal` and
:class:`PiecewiseConstant` push-forwards of a Gaussian random field (and :class:`ThreePhase` a
held-out one).
"""

from __future__ import annotations

import copy

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import meshio
import numpy as np
import torch
from scipy.sparse import csc_matrix, csr_matrix
from scipy.sparse.csgraph import reverse_cuthill_mckee
from scipy.sparse.linalg import splu

from ..mesh import MeshData, from_meshio
from ..mesh.mesh import Mesh
from ..mesh.samples import MeshSamples
from ..mesh.families import to_skfem
from ..optional import require
from .grf import GaussianRandomField, preset

skfem = require("skfem", "data", "the Darcy solver")
log = logging.getLogger(__name__)

_ELEMENTS = {"triangle": skfem.ElementTriP1, "tetra": skfem.ElementTetP1}


@skfem.LinearForm
def _load(v, w):
    return w.f * v


class DarcyProblem:
    r"""P1 finite-element discretisation of Darcy flow on one mesh, reusable across coefficients.

    .. math::
        \int_D a \nabla u_h \cdot \nabla v \,dx = \int_D f v \,dx
        \quad \forall v \in V_h \cap H^1_0(D),

    with :math:`a` and :math:`f` evaluated at the quadrature points of each cell (scikit-fem's
    default rule for P1, exact for quadratics). The basis, quadrature points, boundary degrees
    of freedom and the products :math:`|J|\,w_q\,\nabla\varphi_i\cdot\nabla\varphi_j` at every
    quadrature point are built once per mesh, so the stiffness matrix of a new coefficient is one
    contraction :math:`K_{ij} = \sum_{e,q} a(x_{e,q})\,|J_e| w_q \nabla\varphi_i\cdot\nabla\varphi_j`,
    followed by one sparse LU factorisation (minimum-degree ordering, started from the
    reverse Cuthill–McKee order of the interior nodes).

    Args:
        mesh (meshio.Mesh): a triangle (2-D) or tetrahedron (3-D) mesh; every boundary facet gets
            the homogeneous Dirichlet condition.
        intorder (int, optional): quadrature order (default: scikit-fem's default for P1).

    Shapes:
        - **solve(a, f):** nodal solution :math:`[N]` (numpy, float64).
        - **solve_many(a, sources):** :math:`[N, S]` for :math:`S` right-hand sides.
    """

    def __init__(self, mesh: meshio.Mesh, intorder: int | None = None):
        ctype = mesh.cells[-1].type
        if ctype not in _ELEMENTS:
            raise ValueError(f"Darcy needs a triangle or tetrahedron mesh, got cells {ctype!r}")
        self.mesh = to_skfem(mesh)
        kwargs = {} if intorder is None else {"intorder": intorder}
        self.basis = skfem.Basis(self.mesh, _ELEMENTS[ctype](), **kwargs)
        x = self.basis.mapping.F(self.basis.X)  # [d, M, Q]
        self.quad_shape = x.shape[1:]
        self.quad_points = x.reshape(x.shape[0], -1).T  # [M * Q, d]
        self.boundary = self.basis.get_dofs().all()
        # P1 gradients do not depend on the coefficient: keep dx * grad(phi_i) . grad(phi_j) at
        # every quadrature point, so a new coefficient costs one contraction (no re-assembly).
        grads = np.stack([self.basis.basis[i][0].grad for i in range(self.basis.Nbfun)])  # [V, d, M, Q]
        self._local = np.einsum("idmq,jdmq,mq->mqij", grads, grads, self.basis.dx)  # [M, Q, V, V]
        # The interior nodes in reverse Cuthill-McKee order of the matrix graph: SuperLU's minimum
        # degree ordering is fast from a banded start and slow from a scattered one (a twice-refined
        # mesh's numbering: 16 129 unknowns factor in 0.07 s instead of 1.1 s, the same fill).
        self.interior = np.setdiff1d(np.arange(self.basis.N), self.boundary)
        self._number_interior()
        n = len(self.interior)
        pattern = csr_matrix((np.ones(len(self._rows)), (self._rows, self._cols)), shape=(n, n))
        self.interior = self.interior[reverse_cuthill_mckee(pattern, symmetric_mode=True)]
        self._number_interior()
        self._loads: dict[float, np.ndarray] = {}

    def _number_interior(self) -> None:
        """Matrix rows and columns of the local entries, in the order of ``self.interior``."""
        index = np.full(self.basis.N, -1)
        index[self.interior] = np.arange(len(self.interior))
        dofs = index[self.basis.element_dofs.T]  # [M, V] interior numbering, -1 on the boundary
        rows = np.repeat(dofs[:, :, None], dofs.shape[1], 2)  # [M, V, V]
        cols = np.repeat(dofs[:, None, :], dofs.shape[1], 1)
        self._keep = ((rows >= 0) & (cols >= 0)).ravel()
        self._rows, self._cols = rows.ravel()[self._keep], cols.ravel()[self._keep]

    @property
    def nodes(self) -> np.ndarray:
        """Node coordinates ``[N, d]``."""
        return self.mesh.p.T

    def _at_quad(self, fn) -> np.ndarray:
        if np.isscalar(fn):
            return np.full(self.quad_shape, float(fn))
        values = np.asarray(fn(self.quad_points), dtype=float).reshape(self.quad_shape)  # [M, Q]
        if not np.all(np.isfinite(values)):
            raise ValueError("the coefficient or source is not finite at some quadrature point")
        return values

    def stiffness(self, coefficient):
        """Interior block of the stiffness matrix for the coefficient ``a`` (CSC), its rows and
        columns in the order of ``self.interior`` (a bandwidth-reducing order, not sorted)."""
        a = self._at_quad(coefficient)
        if np.any(a <= 0):
            raise ValueError(f"the coefficient must be positive; its minimum is {a.min():.3g}")
        data = np.einsum("mq,mqij->mij", a, self._local).ravel()[self._keep]
        n = len(self.interior)
        return csc_matrix((data, (self._rows, self._cols)), shape=(n, n))

    def load(self, f) -> np.ndarray:
        """Load vector ``int f v`` at the interior nodes (cached for constant ``f``)."""
        if np.isscalar(f):
            if f not in self._loads:
                self._loads[f] = self.load(lambda x: np.full(len(x), float(f)))
            return self._loads[f]
        return skfem.asm(_load, self.basis, f=self._at_quad(f))[self.interior]

    def solve(self, coefficient, f=1.0) -> np.ndarray:
        """Nodal solution ``[N]`` for one coefficient and one source."""
        return self.solve_many(coefficient, [f])[:, 0]

    def solve_many(self, coefficient, sources: Sequence) -> np.ndarray:
        """Nodal solutions ``[N, S]`` for one coefficient and ``S`` sources (one factorisation)."""
        # minimum degree on A^T + A with symmetric pivoting suits the SPD stiffness matrix
        lu = splu(self.stiffness(coefficient), permc_spec="MMD_AT_PLUS_A",
                  options={"SymmetricMode": True})
        rhs = np.stack([self.load(f) for f in sources], 1)  # [N_interior, S]
        u = np.zeros((self.basis.N, len(sources)))
        u[self.interior] = lu.solve(rhs)
        return u


def solve_darcy(mesh: meshio.Mesh, coefficient, f=1.0) -> np.ndarray:
    """Solve Darcy flow on ``mesh`` (see :class:`DarcyProblem`); returns nodal values ``[N]``."""
    return DarcyProblem(mesh).solve(coefficient, f)


def solve_darcy_many(mesh: meshio.Mesh, coefficient, sources: Sequence) -> np.ndarray:
    """Solve for many sources with one coefficient (one factorisation); returns ``[N, S]``."""
    return DarcyProblem(mesh).solve_many(coefficient, sources)


@dataclass
class Lognormal:
    r"""The lognormal coefficient :math:`a(x) = \exp(g(x))` of a field :math:`g`."""

    field: Callable

    def __call__(self, points):
        g = self.field(points)
        return torch.exp(g) if isinstance(g, torch.Tensor) else np.exp(g)


@dataclass
class PiecewiseConstant:
    r"""The two-valued coefficient :math:`a(x) = a_+` where :math:`g(x) \ge 0`, else :math:`a_-`."""

    field: Callable
    high: float = 12.0
    low: float = 3.0

    def __call__(self, points):
        g = self.field(points)
        if isinstance(g, torch.Tensor):
            return torch.where(g >= 0, self.high, self.low).to(g.dtype)
        return np.where(g >= 0, self.high, self.low)


#: :math:`\Phi^{-1}(2/3)`: a centred Gaussian lies below :math:`-q\sigma`, between :math:`\pm q\sigma`
#: and above :math:`q\sigma` with probability 1/3 each.
TERCILE = 0.43072729929545744


@dataclass
class ThreePhase:
    r"""The three-valued coefficient of a field :math:`g` thresholded at its pointwise terciles:
    :math:`a(x) = a_0` where :math:`g(x) < -q\,s(x)`, :math:`a_2` where :math:`g(x) \ge q\,s(x)`,
    else :math:`a_1`, with :math:`q = \Phi^{-1}(2/3)` (:data:`TERCILE`) and :math:`s(x)^2 =
    C(x, x)` the variance of the field's law at :math:`x`, so that each phase has probability
    exactly 1/3 at every point. The Neumann cosine fields are not stationary (the ``"cao"``
    field's standard deviation is about 0.16 at the square's centre and 0.47 at its corners), so
    fixed levels would not split the phases evenly.

    Args:
        field: a drawn field (a :class:`~geoattn.data.grf.GRFSample`).
        law: the field's law (default: the ``"cao"`` preset on the sample's box with its modes).
        values: :math:`(a_0, a_1, a_2)`. (default: ``(1, 5, 25)``, contrast 25)
    """

    field: Callable
    law: GaussianRandomField | None = None
    values: tuple[float, float, float] = (1.0, 5.0, 25.0)

    def __post_init__(self):
        if self.law is None:
            self.law = preset("cao", box=self.field.box, modes=self.field.coefficients.shape)

    def __call__(self, points):
        g = self.field(points)
        bound = TERCILE * _pointwise_std(self.law, points)
        low, mid, high = self.values
        if isinstance(g, torch.Tensor):
            return torch.where(g < -bound, low, torch.where(g >= bound, high, mid)).to(g.dtype)
        return np.where(g < -bound, low, np.where(g >= bound, high, mid))


def _pointwise_std(law: GaussianRandomField, points):
    r""":math:`s(x) = (\sum_k \mathrm{std}_k^2 \varphi_k(x)^2)^{1/2}` at ``points`` (numpy or torch):
    the contraction of a sample's evaluation with squared cosines and squared coefficients."""
    from .grf import _axis_cosines

    xp = torch if isinstance(points, torch.Tensor) else np
    if xp is np:
        points = np.asarray(points, dtype=float)
    cos = [c * c for c in _axis_cosines(law.box, points, law.modes, xp)]
    var = law.std**2
    if xp is torch:
        var = torch.as_tensor(var, dtype=points.dtype, device=points.device)
    n = points.shape[0]
    r = var.reshape(law.modes[0], -1).T @ cos[0]
    for c, m in zip(cos[1:], law.modes[1:]):
        r = xp.einsum("krn,kn->rn", r.reshape(m, -1, n), c)
    return xp.sqrt(r.reshape(n))


#: Coefficient families by name.
FAMILIES = {"lognormal": Lognormal, "piecewise": PiecewiseConstant, "threephase": ThreePhase}


def coefficient(field: GaussianRandomField, seed: int, index: int, family: str = "piecewise"):
    """Coefficient ``index`` of the stream ``seed`` in ``family`` (a callable on points)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown coefficient family {family!r}; choose one of {sorted(FAMILIES)}")
    if family == "threephase":  # thresholds from the law the sample is drawn from
        return ThreePhase(field.sample(seed, index), law=field)
    return FAMILIES[family](field.sample(seed, index))


def darcy_samples(meshes: Mapping[str, meshio.Mesh], n: int, seed: int, family: str = "piecewise",
                  field: GaussianRandomField | None = None, f=1.0, start: int = 0,
                  dtype: torch.dtype | None = None) -> dict[str, MeshSamples]:
    """Samples ``start .. start + n - 1`` solved on every mesh: the same continuum samples everywhere.

    Args:
        meshes: meshes by name (triangles or tetrahedra).
        n: number of samples.
        seed: stream seed; sample ``i`` depends only on ``(seed, i)``.
        family: ``"piecewise"`` (12 where the field is nonnegative, else 3), ``"lognormal"``
            (:math:`e^g`) or ``"threephase"`` (:class:`ThreePhase`: 1, 5 and 25 below, between
            and above the field's pointwise terciles, each phase with probability 1/3).
        field: the Gaussian random field (default: the ``"cao"`` preset on the unit square).
        f: source, a number or a callable on points. (default: ``1.0``)
        start: index of the first sample. (default: ``0``)
        dtype: floating dtype of the tensors (default: torch's default dtype).

    Returns:
        For each mesh name, a :class:`~geoattn.mesh.MeshSamples` on that one mesh: samples
        (:class:`~geoattn.mesh.MeshData`) with ``pos``, ``weight`` (lumped), ``cells``, ``x`` (the
        coefficient at the nodes, ``[N, 1]``), ``y`` (the solution, ``[N, 1]``) and
        ``mesh_id = 0``, and its one :class:`~geoattn.mesh.Mesh` in ``meshes``.
    """
    field = field or preset("cao")
    problems = {name: DarcyProblem(m) for name, m in meshes.items()}
    bases = {name: from_meshio(m, dtype=dtype) for name, m in meshes.items()}
    for base in bases.values():
        base.mesh_id = 0
    out: dict[str, list[MeshData]] = {name: [] for name in meshes}
    for i in range(start, start + n):
        for name, (x, y) in solve_sample(problems, field, seed, i, family, f).items():
            out[name].append(sample_data(bases[name], x, y))
    return {name: MeshSamples(out[name], [Mesh.from_sample(bases[name])]) for name in meshes}


def solve_sample(problems: Mapping[str, DarcyProblem], field: GaussianRandomField, seed: int,
                 index: int, family: str = "piecewise", f=1.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Sample ``index`` on every mesh: ``{name: (a at the nodes [N], u [N])}``."""
    a = coefficient(field, seed, index, family)
    return {name: (a(prob.nodes), prob.solve(a, f)) for name, prob in problems.items()}


def sample_data(base: MeshData, x: np.ndarray, y: np.ndarray) -> MeshData:
    """``base`` with ``x = a [N, 1]`` and ``y = u [N, 1]``: a shallow copy, so the samples on one
    mesh share its ``pos``, ``weight`` and ``cells`` tensors (and the trainer gives them one
    :class:`~geoattn.mesh.Mesh`, whose structure is built once); change them out of place."""
    data = copy.copy(base)
    data.x = torch.as_tensor(np.asarray(x).reshape(-1, 1), dtype=base.pos.dtype)
    data.y = torch.as_tensor(np.asarray(y).reshape(-1, 1), dtype=base.pos.dtype)
    return data


__all__ = ["DarcyProblem", "FAMILIES", "Lognormal", "PiecewiseConstant", "TERCILE", "ThreePhase",
           "coefficient", "darcy_samples", "sample_data", "solve_darcy", "solve_darcy_many", "solve_sample"]
