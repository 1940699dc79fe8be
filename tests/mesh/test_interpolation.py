import math

import numpy as np
import pytest
import torch

from geoattn.mesh import families, from_meshio, read_mesh
from geoattn.mesh.interpolation import linear_interpolation
from geoattn.testing import convergence_rate


def _linear(x):
    return 1 + 2 * x[:, 0] - 3 * x[:, 1]


def _smooth(x):
    return torch.sin(3 * x[:, 0]) * torch.cos(2 * x[:, 1])


@pytest.mark.parametrize("kind", ["irregular", "graded", "structured"])
def test_reproduces_linear_functions_inside_and_sums_to_one(kind):
    """Inside the domain the stencils are barycentric on the Delaunay triangulation: linear
    functions come back to rounding, also on the stretched cells of the graded mesh (which the
    bridging-simplex test must not mistake for gaps)."""
    data = from_meshio(families.unit_square(16, kind), dtype=torch.float64)
    points = torch.from_numpy(np.random.default_rng(0).uniform(0, 1, (3000, 2)))
    stencil = linear_interpolation(data.pos, points)
    assert stencil.index.shape == (3000, 3) and stencil.coeff.shape == (3000, 3)
    assert torch.allclose(stencil.coeff.sum(1), torch.ones(3000, dtype=torch.float64))
    assert (stencil.coeff >= 0).all()
    assert torch.allclose(stencil(_linear(data.pos)), _linear(points), atol=1e-12)
    # vector-valued nodal values interpolate per channel
    both = stencil(torch.stack([_linear(data.pos), 2 * _linear(data.pos)], 1))
    assert both.shape == (3000, 2) and torch.allclose(both[:, 1], 2 * both[:, 0])


def test_closest_point_extension_outside_converges_at_second_order():
    """Outside the unit square a point gets the value at its closest boundary point,
    u(clamp(y)), interpolated on the nearest boundary edge: second order under refinement."""
    points = torch.from_numpy(np.random.default_rng(1).uniform(-0.3, 1.3, (4000, 2)))
    exact = _smooth(points.clamp(0.0, 1.0))
    errors, hs = [], []
    for n in (8, 16, 32, 64):
        data = from_meshio(families.unit_square(n, "irregular"), dtype=torch.float64)
        errors.append((linear_interpolation(data.pos, points)(_smooth(data.pos)) - exact).abs().max().item())
        hs.append(1.0 / n)
    # the maximum error over irregular meshes carries each mesh's own constant (local orders
    # 1.4-2.4 between levels here), so the fitted order is 2 to within 0.4; first order fails
    assert abs(convergence_rate(hs, errors) - 2) < 0.4, errors
    # and the finest error is what the lowest order allowed gives from the coarsest, with 2x to spare
    assert errors[-1] < 2 * errors[0] * (hs[-1] / hs[0]) ** 1.6, errors


def test_holes_are_gaps_not_interpolated_across():
    """Delaunay simplices that bridge a hole of the disk cover nothing: a point in a hole takes
    its value from nodes of the hole's boundary next to its closest boundary point (at this mesh
    size, h = 0.08 on a hole of radius 0.2, the triangulation's hole boundary still cuts off
    ears of consecutive boundary nodes, chords O(h^2 / r) inside the circle), never from nodes
    across the hole."""
    data = read_mesh("meshes/disk_two_holes.msh")
    pos = data.pos.double()
    cx, cy, r = families.DISK_HOLES[0]
    centre = torch.tensor([cx, cy], dtype=torch.float64)
    angle = torch.linspace(0, 2 * math.pi, 13, dtype=torch.float64)[:-1]
    direction = torch.stack([torch.cos(angle), torch.sin(angle)], 1)
    stencil = linear_interpolation(pos, centre + 0.5 * r * direction)
    used = stencil.coeff > 1e-12
    nodes = pos[stencil.index]  # (12, 3, 2)
    radius = (nodes - centre).norm(dim=-1)
    assert ((radius - r).abs() < 1e-6)[used].all()  # only nodes on the hole's boundary
    closest = (centre + r * direction)[:, None, :]
    assert ((nodes - closest).norm(dim=-1) < 2 * 0.08)[used].all()  # next to the closest point
    value = stencil(_linear(pos))
    assert (value - _linear(centre + 0.5 * r * direction)).abs().max() > 0.2


def test_one_dimension_and_errors():
    x = torch.sort(torch.rand(40, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), 0).values
    q = torch.tensor([[-0.5], [0.3], [0.71], [2.0]], dtype=torch.float64)
    u = 2 * x[:, 0] + 1
    out = linear_interpolation(x, q)(u)
    assert torch.allclose(out[1:3], 2 * q[1:3, 0] + 1)  # inside: exact for linear functions
    assert torch.allclose(out[[0, 3]], u[[0, -1]])  # outside: the end points
    with pytest.raises(ValueError, match="share d"):
        linear_interpolation(x, torch.zeros(3, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="no nodes"):
        linear_interpolation(torch.zeros(0, 2), torch.zeros(3, 2))
