import numpy as np
import pytest
import torch

from geoattn.data.darcy import DarcyProblem, PiecewiseConstant
from geoattn.data.grf import preset
from geoattn.mesh import families, from_meshio
from geoattn.nao import green_kernel, microstructure_tasks
from geoattn.testing import convergence_rate

FIELDS = ("conductivity", "g", "p")


@pytest.fixture(scope="module")
def coarse():
    return families.unit_square(5, kind="irregular", seed=1)


def test_a_task_depends_only_on_the_seed_and_its_index(coarse):
    """Task 2 is the same whether generated alone or after tasks 0 and 1, and it is the same
    continuum task on a refined mesh: its conductivity and sources agree at the shared nodes."""
    together = microstructure_tasks(coarse, [0, 1, 2], sources=3, seed=3)
    alone, = microstructure_tasks(coarse, [2], sources=3, seed=3)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(alone, name), getattr(together[2], name))
    assert not np.array_equal(together[0].g, together[2].g)
    assert set(np.unique(alone.conductivity)) == {3.0, 12.0}
    fine, = microstructure_tasks(families.refine(coarse, 1), [2], sources=3, seed=3)
    n = len(alone.g)  # refinement keeps the coarse nodes first
    np.testing.assert_array_equal(fine.conductivity[:n], alone.conductivity)
    np.testing.assert_allclose(fine.g[:n], alone.g, rtol=0, atol=1e-12)
    other, = microstructure_tasks(coarse, [2], sources=3, seed=4)
    assert not np.array_equal(other.g, alone.g)


def test_green_kernel_is_the_inverse_interior_stiffness_and_zero_on_the_boundary(coarse):
    b = PiecewiseConstant(preset("cao").sample(3, 2))
    problem = DarcyProblem(coarse)
    G = green_kernel(coarse, b).numpy()
    inner = np.ix_(problem.interior, problem.interior)
    np.testing.assert_allclose(problem.stiffness(b) @ G[inner], np.eye(len(problem.interior)),
                               rtol=0, atol=1e-12)
    assert np.all(G[problem.boundary] == 0) and np.all(G[:, problem.boundary] == 0)
    np.testing.assert_allclose(G, G.T, rtol=0, atol=1e-14)


def test_solutions_are_the_green_kernel_applied_with_lumped_mass(coarse):
    """p = G diag(w) g, the quadrature form of the module docstring, holds up to the lumping of
    the load vector (the solver integrates g on the cells): that difference falls at second
    order under refinement. The microstructure is PiecewiseConstant(field.sample(seed, task))."""
    errors = []
    for level in range(3):
        mesh = families.refine(coarse, level) if level else coarse
        task, = microstructure_tasks(mesh, [1], sources=3, seed=3)
        problem = DarcyProblem(mesh)
        b = PiecewiseConstant(preset("cao").sample(3, 1))
        np.testing.assert_array_equal(b(problem.nodes), task.conductivity)
        assert np.all(task.p[problem.boundary] == 0)
        G = green_kernel(mesh, b)
        w = from_meshio(mesh, dtype=torch.float64).weight
        p = torch.as_tensor(task.p)
        errors.append(float((G @ (w[:, None] * torch.as_tensor(task.g)) - p).norm() / p.norm()))
    assert convergence_rate([1.0, 0.5, 0.25], errors) > 1.8
    assert errors[-1] < 0.015
