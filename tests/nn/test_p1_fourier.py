"""The exact Fourier weights of the P1 hat functions: against nested high-order quadrature, the
analytic transform of a linear function, and the nodal quadrature's layout."""

import math

import pytest
import torch
from skfem.quadrature import get_quadrature
from skfem.refdom import RefTri

from geoattn.errors import UnsupportedCellError
from geoattn.mesh import families, from_meshio
from geoattn.nn.p1_fourier import SERIES_RADIUS, p1_fourier_basis
from geoattn.nn.spectral import box_frame, dense_basis, fourier_coefficients, fourier_modes


def _reference(pos, cells, xi, modes, splits):
    """The same integrals by a degree-19 rule on each triangle split into 4**splits (float64)."""
    x, w = (torch.tensor(a) for a in get_quadrature(RefTri, 19))
    subs = [torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)]
    for _ in range(splits):
        subs = [torch.stack(t) for a, b, c in subs
                for t in ((a, (a + b) / 2, (a + c) / 2), ((a + b) / 2, b, (b + c) / 2),
                          ((a + c) / 2, (b + c) / 2, c), ((a + b) / 2, (b + c) / 2, (a + c) / 2))]
    points = torch.cat([s[0][:, None] + (s[1] - s[0])[:, None] * x[0] + (s[2] - s[0])[:, None] * x[1]
                        for s in subs], 1)
    weights = torch.cat([w / len(subs) for _ in subs])  # every sub-triangle has 1/4**splits of the area
    lam = torch.stack([1 - points[0] - points[1], points[0], points[1]])  # (3, Q)
    corner = pos[cells]
    e1, e2 = corner[:, 1] - corner[:, 0], corner[:, 2] - corner[:, 0]
    area = 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).abs()
    angle = 2 * math.pi * torch.einsum("vq,tvd->tqd", lam, xi[cells]) @ modes.double().t()  # (T, Q, M)
    trig = torch.cat([angle.cos(), angle.sin()], -1)
    out = torch.zeros(len(pos), trig.shape[-1], dtype=torch.float64)
    for a in range(3):
        out.index_add_(0, cells[:, a], 2 * area[:, None] * torch.einsum("q,tqm->tm", weights * lam[a], trig))
    return out


@pytest.mark.parametrize("n, k, splits", [(12, 2, 0), (2, 9, 3)])
def test_equals_high_order_quadrature(n, k, splits):
    """Small cells (the series) and cells spanning several wavelengths (the matrix exponential):
    the weights equal nested degree-19 quadrature to rounding."""
    data = from_meshio(families.unit_square(n, "irregular", seed=2), dtype=torch.float64)
    xi = (data.pos + 0.1) / 1.3
    modes = fourier_modes(k, 2)
    phase = 2 * math.pi * xi[data.cells] @ modes.double().t()  # (T, 3, M)
    spread = (phase.amax(1) - phase.amin(1)).max()  # the largest phase difference across a triangle
    assert (spread <= SERIES_RADIUS) == (splits == 0)  # the second case takes the other branch
    exact = p1_fourier_basis(data.pos, data.cells, xi, modes, half=False)
    reference = _reference(data.pos, data.cells, xi, modes, splits)
    assert (exact - reference).abs().max() < 1e-13 * reference.abs().max()


def test_half_layout_is_that_of_the_dense_basis():
    data = from_meshio(families.unit_square(4, "irregular"), dtype=torch.float64)
    modes = fourier_modes(2, 2)
    full = p1_fourier_basis(data.pos, data.cells, data.pos, modes, half=False)
    half = p1_fourier_basis(data.pos, data.cells, data.pos, modes)
    m, zero = len(modes), len(modes) // 2
    assert half.shape == dense_basis(data.pos, modes).shape
    assert torch.equal(half, torch.cat([full[:, zero:m], full[:, m + zero + 1:]], 1))
    # mode 0 is the integral of the hat functions: the lumped P1 mass
    assert torch.allclose(half[:, 0], data.weight, rtol=1e-13)


def test_linear_function_has_its_exact_coefficients_on_any_mesh():
    """A linear u is its own P1 interpolant: its coefficients are exact on a coarse graded mesh
    (analytic integral), where the nodal quadrature is off by several percent."""
    mesh = from_meshio(families.unit_square(4, "graded"), dtype=torch.float64)
    u = (0.3 + 2.0 * mesh.pos[:, 0] - mesh.pos[:, 1])[:, None]
    box = (torch.zeros(1, 2, dtype=torch.float64), torch.full((1, 2), 1.25, dtype=torch.float64))
    frame, modes = box_frame(mesh.pos, box=box), fourier_modes(3, 2)
    weighted = p1_fourier_basis(mesh.pos, mesh.cells, frame.xi, modes)
    p1 = fourier_coefficients(u, mesh.weight, frame, modes, "dense", weighted=weighted)[0, :, 0]
    nodal = fourier_coefficients(u, mesh.weight, frame, modes, "dense")[0, :, 0]

    def one_d(k):  # int_0^1 e^{-2 pi i k x / L} dx and int_0^1 x e^{-2 pi i k x / L} dx
        if k == 0:
            return 1.0, 0.5
        a = -2j * math.pi * k / 1.25
        e = complex(math.cos(a.imag), math.sin(a.imag))
        return (e - 1) / a, e / a - (e - 1) / a ** 2

    exact = []
    for k1, k2 in modes.tolist():
        (i1, x1), (i2, x2) = one_d(k1), one_d(k2)
        exact.append((0.3 * i1 * i2 + 2.0 * x1 * i2 - i1 * x2) / 1.25 ** 2)
    exact = torch.tensor(exact, dtype=torch.complex128)
    assert (p1 - exact).abs().max() < 1e-13
    assert (nodal - exact).abs().max() > 1e-3 * exact.abs().max()


def test_weighted_basis_needs_dense_transforms_and_triangles():
    data = from_meshio(families.unit_square(3, "irregular"), dtype=torch.float64)
    frame, modes = box_frame(data.pos), fourier_modes(1, 2)
    weighted = p1_fourier_basis(data.pos, data.cells, frame.xi, modes)
    with pytest.raises(ValueError, match="dense"):
        fourier_coefficients(data.pos[:, :1], data.weight, frame, modes, "finufft", weighted=weighted)
    with pytest.raises(UnsupportedCellError, match="triangles"):
        p1_fourier_basis(data.pos, torch.tensor([[0, 1, 2, 3]]), frame.xi, modes)
