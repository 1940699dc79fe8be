"""LocalIntegral: a slow reference of its formula, exactness for constants, convergence to the
continuum integral under refinement, its hand-written backward, bad input."""

import math

import numpy as np
import pytest
import torch

from geoattn import testing
from geoattn.errors import ConfigError
from geoattn.mesh import families, from_meshio
from geoattn.nn import LocalIntegral
from geoattn.nn.local_integral import local_basis


def _layer(**kw):
    torch.manual_seed(0)
    return LocalIntegral(2, 3, 2, **{"radius": 0.3, **kw}).double()


def _reference_basis(z, r, rings, angles):
    """psi_b(z / r) written out from the formula, one offset at a time."""
    rho, theta = math.hypot(*z) / r, math.atan2(z[1], z[0])
    out = [max(0.0, 1 - rho)]
    for k in range(1, rings):
        radial = max(0.0, 1 - abs(rings * rho - k))
        for a in range(angles):
            gap = abs((theta - 2 * math.pi * a / angles + math.pi) % (2 * math.pi) - math.pi)
            out.append(radial * (1.0 if angles == 1 else max(0.0, 1 - gap * angles / (2 * math.pi))))
    return out


def _reference(layer, x, pos, weight):
    """sum_b M_b (sum_j w_j psi_b h_j) / (sum_j w_j psi_b), with plain loops over the nodes."""
    n, nb = len(pos), layer.num_basis
    means = np.zeros((n, nb, x.shape[1]))
    for i in range(n):
        num, den = np.zeros((nb, x.shape[1])), np.zeros(nb)
        for j in range(n):
            z = (pos[i] - pos[j]).tolist()
            if math.hypot(*z) > layer.radius:
                continue
            psi = np.array(_reference_basis(z, layer.radius, layer.rings, layer.angles))
            num += float(weight[j]) * psi[:, None] * x[j].numpy()
            den += float(weight[j]) * psi
        means[i] = np.where(den[:, None] > 0, num / np.where(den > 0, den, 1)[:, None], 0)
    m = layer.mix.weight.detach().numpy().reshape(layer.out_channels, nb, x.shape[1])
    return torch.from_numpy(np.einsum("obc,nbc->no", m, means))


@pytest.mark.parametrize("rings, angles", [(2, 4), (3, 3), (1, 1), (3, 1)])
def test_equals_slow_reference_in_a_batch_of_two_clouds(rings, angles):
    """A batch of two clouds (different sizes and weights; a node far from the rest, whose
    sectors hold no other node) equals the formula evaluated node by node for each cloud."""
    torch.manual_seed(1)
    clouds = [torch.rand(30, 2, dtype=torch.float64), torch.rand(17, 2, dtype=torch.float64) * 0.8]
    clouds[1][0] = torch.tensor([3.0, 3.0], dtype=torch.float64)  # isolated: only its own psi_0
    weights = [torch.rand(len(p), dtype=torch.float64) + 0.1 for p in clouds]
    xs = [torch.randn(len(p), 2, dtype=torch.float64) for p in clouds]
    layer = _layer(rings=rings, angles=angles)
    batch = torch.cat([torch.full((len(p),), g) for g, p in enumerate(clouds)])
    out = layer(torch.cat(xs), torch.cat(clouds), torch.cat(weights), batch)
    expected = torch.cat([_reference(layer, x, p, w) for x, p, w in zip(xs, clouds, weights)])
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    for g, (x, p, w) in enumerate(zip(xs, clouds, weights)):  # and each cloud alone
        start = sum(len(c) for c in clouds[:g])
        torch.testing.assert_close(layer(x, p, w), out[start:start + len(p)], rtol=1e-12, atol=1e-12)


def test_basis_vectorised_equals_formula():
    z = torch.randn(200, 2, dtype=torch.float64) * 0.2
    got = local_basis(z, 0.3, rings=3, angles=5)
    expected = torch.tensor([_reference_basis(row.tolist(), 0.3, 3, 5) for row in z], dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-14)


def test_every_mean_is_exact_for_constants():
    """Each row of the matrix sums to one wherever its basis function meets a node: the weighted
    mean of a constant is that constant on any mesh, at the boundary too."""
    mesh = from_meshio(families.unit_square(6, "graded"))
    layer = _layer(radius=0.4)
    matrix, _ = layer.matrix(mesh.pos.double(), mesh.weight.double())
    sums = matrix.to_dense().sum(1)
    nonzero = sums != 0
    torch.testing.assert_close(sums[nonzero], torch.ones_like(sums[nonzero]), rtol=0, atol=1e-13)
    assert nonzero.reshape(-1, layer.num_basis)[:, 0].all()  # psi_0 always meets the node itself


def _continuum_means(h, centre, r, rings, angles, points=12):
    """The ratio of the two integrals of every basis function over the ball around an interior
    point, by Gauss-Legendre on each polar cell between the basis' kinks (exact for polynomials
    in rho and theta of high degree; h is smooth)."""
    g, gw = np.polynomial.legendre.leggauss(points)
    rho_knots = np.linspace(0, 1, rings + 1) if rings > 1 else np.array([0.0, 1.0])
    theta_knots = np.linspace(-math.pi, math.pi, 2 * angles + 1)  # every multiple of the step
    num, den = 0.0, 0.0
    for r0, r1 in zip(rho_knots[:-1], rho_knots[1:]):
        for t0, t1 in zip(theta_knots[:-1], theta_knots[1:]):
            rho = (r0 + r1) / 2 + (r1 - r0) / 2 * g
            theta = (t0 + t1) / 2 + (t1 - t0) / 2 * g
            rr, tt = np.meshgrid(rho, theta, indexing="ij")
            ww = np.outer(gw, gw) * (r1 - r0) / 2 * (t1 - t0) / 2 * rr * r * r  # area element
            z = np.stack([rr * r * np.cos(tt), rr * r * np.sin(tt)], -1).reshape(-1, 2)
            psi = local_basis(torch.from_numpy(z), r, rings, angles).numpy()  # (P, B)
            num = num + (ww.reshape(-1, 1) * psi * h(centre - z)[:, None]).sum(0)
            den = den + (ww.reshape(-1, 1) * psi).sum(0)
    return num / den


def test_converges_to_the_continuum_means_under_refinement():
    """The weighted means of a smooth function at fixed interior nodes approach the exact
    continuum means (polar Gauss quadrature) at second order as the mesh is refined."""
    r, rings, angles = 0.25, 2, 4

    def h(p):
        return np.sin(3 * p[:, 0]) * np.cos(2 * p[:, 1]) + p[:, 0] ** 2

    layer = LocalIntegral(1, 1, 2, radius=r, rings=rings, angles=angles).double()
    base = families.unit_square(8, "irregular")
    pos0 = torch.from_numpy(base.points[:, :2])
    probe = torch.nonzero(((pos0 > r + 0.05) & (pos0 < 1 - r - 0.05)).all(1)).flatten()[::2]
    exact = np.stack([_continuum_means(h, pos0[i].numpy(), r, rings, angles) for i in probe.tolist()])
    errors, sizes = [], []
    for level in range(3):
        mesh = from_meshio(families.refine(base, level) if level else base)  # coarse nodes first
        pos, w = mesh.pos.double(), mesh.weight.double()
        matrix, _ = layer.matrix(pos, w)
        means = (matrix @ torch.from_numpy(h(pos.numpy()))[:, None]).reshape(len(pos), -1)[probe].numpy()
        errors.append(np.abs(means - exact).max())
        sizes.append(0.5 ** level)
    rate = testing.convergence_rate(sizes, errors)
    assert rate > 1.7 and errors[-1] < 3e-3, (rate, errors)  # measured: 2.6, 1.9e-3


def test_backward_is_the_transpose_product():
    layer = _layer(radius=0.5)
    pos = torch.rand(25, 2, dtype=torch.float64)
    w = torch.rand(25, dtype=torch.float64) + 0.1
    x = torch.randn(25, 2, dtype=torch.float64, requires_grad=True)
    batch = torch.tensor([0] * 12 + [1] * 13)
    assert torch.autograd.gradcheck(lambda x: layer(x, pos, w, batch), (x,))
    assert torch.autograd.gradcheck(lambda x: layer(x, pos, w), (x,))


def test_bad_input():
    with pytest.raises(ConfigError, match="radius"):
        LocalIntegral(1, 1, 2, radius=0)
    with pytest.raises(ConfigError, match="dim = 2"):
        LocalIntegral(1, 1, 3, radius=0.1, angles=4)
    assert LocalIntegral(1, 1, 3, radius=0.1).num_basis == 2  # isotropic rings in 3-D
    layer = _layer()
    with pytest.raises(ValueError, match="weight"):
        layer(torch.zeros(4, 2, dtype=torch.float64), torch.zeros(4, 2, dtype=torch.float64),
              torch.ones(3, dtype=torch.float64))
