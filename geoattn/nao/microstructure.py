r"""Darcy microstructure tasks for kernel learning (NAO paper, §5.2, g -> p).

A task is one two-phase microstructure :math:`b = 12` where a Gaussian random field is
:math:`\ge 0`, else :math:`3` (:class:`~geoattn.data.darcy.PiecewiseConstant`), with many random
sources :math:`g_s` (draws of a second Gaussian random field) and their solutions
:math:`-\nabla\cdot(b\nabla p_s) = g_s`, :math:`p_s = 0` on :math:`\partial\Omega`, all solved with
one factorisation (:meth:`~geoattn.data.darcy.DarcyProblem.solve_many`). Fields are functions, so
the same task can be solved on any mesh of the unit square (training, refined, graded meshes).
The paper's data come from a 21 x 21 finite-difference grid; here P1 finite elements on irregular
meshes.

The reference kernel is the discrete Green's function: with lumped mass, :math:`p = A^{-1}
\operatorname{diag}(w) g`, so :math:`K(x_i, y_k) = (A^{-1})_{ik}` on interior nodes and 0 on the
boundary, in the quadrature form :math:`p(x_i) = \sum_k w_k K(x_i, y_k) g(y_k)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy.sparse.linalg import splu

from ..data.darcy import DarcyProblem, PiecewiseConstant
from ..data.grf import GaussianRandomField, preset

if TYPE_CHECKING:
    import meshio

__all__ = ["MicrostructureTask", "microstructure_tasks", "green_kernel"]


@dataclass
class MicrostructureTask:
    """One microstructure on one mesh: ``conductivity [N]`` at the nodes, sources ``g [N, S]``
    and solutions ``p [N, S]``."""

    conductivity: np.ndarray
    g: np.ndarray
    p: np.ndarray


def microstructure_tasks(mesh: meshio.Mesh, tasks: range | list[int], sources: int, seed: int = 0,
                         field: GaussianRandomField | None = None,
                         source_field: GaussianRandomField | None = None,
                         high: float = 12.0, low: float = 3.0) -> list[MicrostructureTask]:
    """Tasks ``tasks`` of the stream ``seed`` solved on ``mesh``; task ``t`` and its sources
    depend only on ``(seed, t)``, so any mesh sees the same continuum tasks.

    Args:
        mesh: triangle mesh of the unit square.
        tasks: task indices.
        sources: sources per task :math:`S`.
        seed: stream seed. (default: ``0``)
        field: GRF thresholded into the microstructure (default: ``"cao"`` preset).
        source_field: GRF of the sources (default: ``"cao"`` preset).
        high, low: the two conductivities. (default: ``12``, ``3``)
    """
    field = field or preset("cao")
    source_field = source_field or preset("cao")
    problem = DarcyProblem(mesh)
    out = []
    for t in tasks:
        b = PiecewiseConstant(field.sample(seed, t), high=high, low=low)
        srcs = [source_field.sample(seed + 7919, t * sources + s) for s in range(sources)]
        g = np.stack([s(problem.nodes) for s in srcs], 1)  # (N, S)
        out.append(MicrostructureTask(b(problem.nodes), g, problem.solve_many(b, srcs)))
    return out


def green_kernel(mesh: meshio.Mesh, conductivity) -> torch.Tensor:
    """The reference kernel ``[N, N]`` (float64): inverse interior stiffness matrix, 0 on the
    boundary rows and columns."""
    problem = DarcyProblem(mesh)
    inv = splu(problem.stiffness(conductivity)).solve(np.eye(len(problem.interior)))
    K = np.zeros((problem.basis.N, problem.basis.N))
    K[np.ix_(problem.interior, problem.interior)] = inv
    return torch.as_tensor(K)
