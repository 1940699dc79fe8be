"""The patches' reference grids of ``quadrature="tokens"``: the grid, its multilinear
interpolation, and patch attention on congruent patches against a slow reference."""

import math

import pytest
import torch

from geoattn.nn import PatchAttention
from geoattn.nn.patch_attention import (PatchSide, grid_stencil, patch_coefficients, reference_grid, token_mesh)
from geoattn.nn.spectral import _zero_index


def test_the_reference_grid_is_the_cell_centred_midpoint_grid_of_the_unit_box():
    grid = reference_grid(4, 2)
    assert grid.shape == (16, 2)
    axis = torch.tensor([-0.375, -0.125, 0.125, 0.375], dtype=torch.float64)
    assert torch.equal(grid[:4, 1], axis) and torch.equal(grid[::4, 0], axis)


def test_grid_stencil_reproduces_grid_values_and_linear_functions():
    """At the grid points the stencil is the identity; inside the grid's hull it reproduces every
    multilinear function exactly (here 1 + 2a - b + 3ab); outside, the value on the hull."""
    g = 5
    grid = reference_grid(g, 2)
    index, coeff = grid_stencil(grid, g)
    values = torch.randn(len(grid), dtype=torch.float64)
    assert torch.allclose((values[index] * coeff).sum(1), values, atol=1e-14)
    f = lambda p: 1 + 2 * p[:, 0] - p[:, 1] + 3 * p[:, 0] * p[:, 1]  # noqa: E731
    inside = (torch.rand(200, 2, dtype=torch.float64) - 0.5) * (1 - 1 / g)
    index, coeff = grid_stencil(inside, g)
    assert torch.allclose((f(grid)[index] * coeff).sum(1), f(inside), atol=1e-13)
    assert torch.allclose(coeff.sum(1), torch.ones(200, dtype=torch.float64))
    outside = torch.tensor([[0.7, 0.0]], dtype=torch.float64)
    index, coeff = grid_stencil(outside, g)
    edge = torch.tensor([[0.5 - 0.5 / g, 0.0]], dtype=torch.float64)
    assert torch.allclose((f(grid)[index] * coeff).sum(1), f(edge))


def test_the_grid_quadrature_gives_the_exact_coefficients_of_a_trigonometric_polynomial():
    """On G = 8 points per axis the midpoint rule integrates e^{2 pi i m xi} exactly for |m_k| < 8,
    so the patch coefficients of cos(2 pi (xi_1 + 2 xi_2)) are exactly 1/2 at +-(1, 2), 0 elsewhere."""
    from geoattn.nn.spectral import fourier_modes

    mesh = token_mesh(1, 2, 8, 2, torch.float64)
    modes = fourier_modes(2, 2)
    x = torch.cos(2 * math.pi * (mesh.pos[:, :1] + 2 * mesh.pos[:, 1:]))
    coeff = patch_coefficients(x, mesh.weight, mesh.geometry, modes, _zero_index(modes))
    expected = torch.zeros(len(modes), dtype=torch.complex128)
    for sign in (1, -1):
        expected[(modes == torch.tensor([sign, 2 * sign])).all(1)] = 0.5
    for p in range(2):
        assert torch.allclose(coeff[p, :, 0], expected, atol=1e-14)


def _slow(layer: PatchAttention, x, weight, b, p, g):
    """Patched attention on congruent patches with explicit loops over patches and points."""
    h, dk = layer.num_heads, layer.head_channels
    q, k, v = layer.q(x), layer.k(x), layer.v(x)
    out = torch.zeros_like(x)
    for graph in range(b):
        rows = lambda j: slice((graph * p + j) * g, (graph * p + j + 1) * g)  # noqa: E731
        for i in range(p):
            for head in range(h):
                c = slice(head * dk, (head + 1) * dk)
                s = torch.stack([(weight[rows(i), None] * q[rows(i), c] * k[rows(j), c]).sum()  # quadrature-ok
                                 for j in range(p)]) * layer.scale
                a = torch.softmax(s, 0)
                out[rows(i), c] = sum(a[j] * v[rows(j), c] for j in range(p))
    return layer.out(out)


@pytest.mark.parametrize("spectral_qkv", [False, True])
@torch.no_grad()
def test_congruent_attention_equals_the_identity_stencils_and_the_slow_reference(spectral_qkv):
    b, p, g = 2, 3, 5
    mesh = token_mesh(b, p, g, 2, torch.float64)
    torch.manual_seed(0)
    layer = PatchAttention(8, num_heads=2, modes=1, dim=2, spectral_qkv=spectral_qkv).double()
    x = torch.randn(len(mesh.pos), 8, dtype=torch.float64)
    fast = layer(x, mesh.pos, mesh.weight, mesh.batch,
                 patches=PatchSide(mesh.patch, 1.0, p, mesh.geometry, congruent=g * g))
    stencils = layer(x, mesh.pos, mesh.weight, mesh.batch, patches=PatchSide(mesh.patch, 1.0, p, mesh.geometry),
                     pairs=mesh.pairs)
    assert torch.allclose(fast, stencils, atol=1e-12)
    if not spectral_qkv:
        assert torch.allclose(fast, _slow(layer, x, mesh.weight, b, p, g * g), atol=1e-12)
