"""Samples carried to a refined mesh: the same piecewise-linear functions, a loss that converges
to the L2 norm of the interpolant, shared meshes, refused input."""

import pytest
import torch

from geoattn.data import darcy_samples, refined_samples
from geoattn.errors import ConfigError
from geoattn.mesh import families, from_meshio
from geoattn.mesh.interpolation import linear_interpolation


def _samples(n: int = 6, count: int = 3):
    mesh = from_meshio(families.unit_square(n, "irregular", seed=2), dtype=torch.float64)
    out = []
    for k in range(count):
        d = mesh.clone()
        d.pos, d.weight, d.cells = mesh.pos, mesh.weight, mesh.cells  # the samples share the mesh's tensors
        d.x = torch.sin((k + 1) * 3 * mesh.pos[:, :1]) + mesh.pos[:, 1:]
        d.y = mesh.pos[:, :1] * mesh.pos[:, 1:] ** 2 + k
        out.append(d)
    return out


def _interpolant_norm(d) -> float:
    r""":math:`\int_D (I_h u)^2` exactly: on each triangle
    :math:`|T| (\sum_i u_i^2 + (\sum_i u_i)^2) / 12`."""
    u = d.y[:, 0][d.cells]  # (T, 3)
    corners = d.pos[d.cells]
    area = 0.5 * torch.linalg.det(corners[:, 1:] - corners[:, :1]).abs()
    return float((area * ((u**2).sum(1) + u.sum(1) ** 2) / 12).sum())


def test_refined_samples_hold_the_same_functions():
    """At the refined mesh's nodes the values are the coarse interpolant's (compared with an
    independent point location, to float64 rounding), the original nodes come first with their
    values, affine data stay affine, and the weights still sum to the area."""
    samples = _samples()
    fine = refined_samples(samples)
    for d, f in zip(samples, fine):
        assert f.num_nodes > 3 * d.num_nodes
        torch.testing.assert_close(f.pos[: d.num_nodes], d.pos)
        located = linear_interpolation(d.pos, f.pos)
        torch.testing.assert_close(f.x, located(d.x), atol=1e-13, rtol=0)
        torch.testing.assert_close(f.y, located(d.y), atol=1e-13, rtol=0)
        assert abs(float(f.weight.sum()) - 1.0) < 1e-13
    affine = samples[0].clone()
    affine.y = 0.3 + 2 * affine.pos[:, :1] - affine.pos[:, 1:]
    f = refined_samples([affine])[0]
    torch.testing.assert_close(f.y, 0.3 + 2 * f.pos[:, :1] - f.pos[:, 1:], atol=1e-13, rtol=0)


def test_loss_on_refined_samples_converges_to_the_interpolants_norm():
    r"""The lumped quadrature of the refined samples, :math:`\sum_j w_j (I_h u)(x_j)^2`, tends to
    the exact :math:`\int (I_h u)^2` at second order in the refined mesh's size (``factor`` 2, 4,
    8, 16 halve it), while the coarse mesh's own lumped sum keeps its error: the loss measures the
    interpolant between the nodes, not only at them."""
    (d,) = _samples(count=1)
    exact = _interpolant_norm(d)
    errors = [abs(float((f.weight * f.y[:, 0] ** 2).sum()) - exact)
              for f in (refined_samples([d], factor)[0] for factor in (2, 4, 8, 16))]
    from geoattn import testing

    testing.assert_convergence_rate([1 / 2, 1 / 4, 1 / 8, 1 / 16], errors, 2.0, tol=0.3)
    coarse = abs(float((d.weight * d.y[:, 0] ** 2).sum()) - exact)
    assert errors[-1] < coarse / 50, (errors, coarse)


def test_samples_on_one_mesh_share_the_refined_mesh():
    fine = refined_samples(_samples())
    assert fine[0].pos is fine[1].pos and fine[0].weight is fine[2].weight and fine[1].cells is fine[2].cells
    meshes = {"a": families.unit_square(4, "irregular"), "b": families.unit_square(5, "irregular")}
    darcy = darcy_samples(meshes, 2, seed=0, family="lognormal")
    both = refined_samples(darcy["a"] + darcy["b"])
    assert both[0].pos is both[1].pos and both[1].pos is not both[2].pos


def test_refuses_what_it_cannot_carry():
    (d,) = _samples(count=1)
    with pytest.raises(ConfigError, match="factor"):
        refined_samples([d], 0.5)
    no_cells = d.clone()
    del no_cells.cells
    with pytest.raises(ConfigError, match="sample 1: .*triangle"):
        refined_samples([d, no_cells])
    extra = d.clone()
    extra.mask = torch.ones(d.num_nodes, 1)
    with pytest.raises(ConfigError, match="mask"):
        refined_samples([extra])
