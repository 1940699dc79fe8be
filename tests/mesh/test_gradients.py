import math

import pytest
import torch

from geoattn.mesh import families, from_meshio, p1_gradients


def _affine(pos, slope):
    return pos @ torch.as_tensor(slope, dtype=pos.dtype) + 0.5


def test_p1_gradients_exact_for_linear_functions():
    d = from_meshio(families.unit_square(6, "irregular"), dtype=torch.float64)
    u = torch.stack([3 * d.pos[:, 0] - 2 * d.pos[:, 1], d.pos[:, 1]], 1)
    grad, volume = p1_gradients(u, d.pos, d.cells)
    assert torch.allclose(grad[:, 0], torch.tensor([3.0, -2.0], dtype=torch.float64).expand(len(grad), 2))
    assert torch.allclose(grad[:, 1], torch.tensor([0.0, 1.0], dtype=torch.float64).expand(len(grad), 2))
    assert abs(float(volume.sum()) - 1.0) < 1e-12


@pytest.mark.parametrize("mesh, slope", [
    (lambda: families.interval(9, "irregular"), [2.5]),
    (lambda: families.unit_cube(3), [1.0, -2.0, 0.25]),
])
def test_p1_gradients_exact_in_1d_and_3d(mesh, slope):
    d = from_meshio(mesh(), dtype=torch.float64)
    grad, volume = p1_gradients(_affine(d.pos, slope), d.pos, d.cells)
    torch.testing.assert_close(grad[:, 0], torch.tensor(slope, dtype=torch.float64).expand(len(grad), -1))
    assert float(volume.sum()) == pytest.approx(1.0, rel=1e-12)


def test_p1_gradient_seminorm_converges_for_a_smooth_function():
    # |u|_{H^1}^2 of u = sin(pi x) sin(pi y) on the unit square is pi^2 / 2. With e = u - I_h u,
    # |I_h u|^2 - |u|^2 = ||grad e||^2 - 2 (grad u, grad e) = ||grad e||^2 + 2 (lap u, e) (e = 0 on
    # the boundary, where u vanishes): both O(h^2), so second order, 4x per refinement.
    exact = math.pi**2 / 2
    mesh, errors = families.unit_square(8, "irregular"), []
    for _ in range(3):
        d = from_meshio(mesh, dtype=torch.float64)
        u = torch.sin(math.pi * d.pos[:, 0]) * torch.sin(math.pi * d.pos[:, 1])
        grad, volume = p1_gradients(u, d.pos, d.cells)
        errors.append(abs(float((grad.square().sum((1, 2)) * volume).sum()) - exact))
        mesh = families.refine(mesh)
    assert errors[0] / errors[1] > 3.5 and errors[1] / errors[2] > 3.5, errors


def test_p1_gradients_reject_non_simplex_cells():
    d = from_meshio(families.unit_square(3, cell="quad"), dtype=torch.float64)
    with pytest.raises(ValueError, match="simplex cells with 3 vertices"):
        p1_gradients(d.pos[:, 0], d.pos, d.cells)
