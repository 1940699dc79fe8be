"""Exact (P1) patch Fourier coefficients: against brute-force quadrature, and the same on a mesh and
its refinement where the nodal quadrature is not."""

import math

import numpy as np
import pytest
import torch

from geoattn.mesh import Mesh, families, from_meshio
from geoattn.mesh.partition import partition
from geoattn.models import ViTNO
from geoattn.nn.patch_attention import (cell_pieces, clipped_pieces, majority_patch, p1_patch_geometry,
                                        patch_coefficients)
from geoattn.nn.spectral import _zero_index, fourier_modes
from triangles import locate


def _mesh(n=8, kind="irregular", seed=0, refine=0):
    m = families.unit_square(n, kind, seed=seed)
    if refine:
        m = families.refine(m, refine)
    return from_meshio(m, dtype=torch.float64)


def _collapsed_gauss(n):
    """A rule on the reference triangle (Gauss-Legendre in collapsed coordinates): points as
    barycentric ``[Q, 3]``, weights summing to 1 (divide by nothing, multiply by the area)."""
    x, w = np.polynomial.legendre.leggauss(n)
    x, w = 0.5 * (x + 1), 0.5 * w
    u, v = np.meshgrid(x, x, indexing="ij")
    wu, wv = np.meshgrid(w, w, indexing="ij")
    s, t = u.ravel(), (v * (1 - u)).ravel()
    weight = (wu * wv * (1 - u)).ravel() * 2.0
    return np.stack([1 - s - t, s, t], 1), weight


def _brute_force(pos, cells, u, pieces, centroid, modes, num_patches, order=16):
    """sum over the pieces of patch p of int u_h(x) exp(-2 pi i m.(x - c_p)) dx by a collapsed
    Gauss rule of ``order``^2 points on each piece, u_h evaluated by locating the points in the
    mesh's triangles (not through the pieces' barycentric coordinates)."""
    bary, w = _collapsed_gauss(order)
    pos, cells, u = pos.numpy(), cells.numpy(), u.numpy()
    out = np.zeros((num_patches, len(modes), u.shape[1]), dtype=complex)
    parent = pos[cells[pieces.cell.numpy()]]
    corner = pieces.bary.numpy() @ parent  # (K, 3, 2)
    for k in range(len(corner)):
        e1, e2 = corner[k, 1] - corner[k, 0], corner[k, 2] - corner[k, 0]
        area = 0.5 * abs(e1[0] * e2[1] - e1[1] * e2[0])
        pts = bary @ corner[k]  # (Q, 2)
        lam, cell = locate(pos, cells, pts)
        uh = np.einsum("qa,qac->qc", lam, u[cells[cell]])  # (Q, C)
        p = int(pieces.patch[k])
        phase = np.exp(-2j * math.pi * (pts - centroid[p]) @ modes.T.astype(float))  # (Q, M)
        out[p] += area * np.einsum("q,qm,qc->mc", w, phase, uh)
    return out


def _setup(mesh, part, cut):
    pos, cells = mesh.pos, mesh.cells
    patch = part.transfer(pos)
    if cut:
        pieces = clipped_pieces(pos, cells, patch, part._tree)
    else:
        pieces = cell_pieces(cells, majority_patch(cells, patch))
    return patch, pieces


@pytest.mark.parametrize("cut", [True, False], ids=["rcb-clipped", "whole-cells"])
def test_p1_patch_coefficients_equal_brute_force_quadrature(cut):
    """For u_h piecewise linear on the mesh, the P1 coefficients of every patch are the integrals
    of u_h times exp(-2 pi i m.(x - c_p)) over its pieces, to 1e-10 in float64."""
    mesh = _mesh(8)
    part = partition(mesh.pos, mesh.weight, 4, method="rcb")
    patch, pieces = _setup(mesh, part, cut)
    modes = fourier_modes(2, 2)
    geo = p1_patch_geometry(mesh.pos, mesh.weight, mesh.cells, patch, 4, pieces, modes)
    torch.manual_seed(0)
    u = torch.randn(len(mesh.pos), 2, dtype=torch.float64)
    coeff = patch_coefficients(u, mesh.weight, geo.geometry, modes, _zero_index(modes), p1=geo)
    # the frame's centroids: x_i - xi_i for any node of the patch
    centroid = np.zeros((4, 2))
    for p in range(4):
        i = int(torch.nonzero(patch == p)[0])
        centroid[p] = (mesh.pos[i] - geo.geometry.frame.xi[i]).numpy()
    ref = _brute_force(mesh.pos, mesh.cells, u, pieces, centroid, modes.numpy(), 4)
    assert np.abs(coeff.numpy() - ref).max() < 1e-10 * np.abs(ref).max()
    # the pieces tile the domain; with cuts, each patch is exactly its RCB box in the square
    area = torch.zeros(4, dtype=torch.float64)
    corner = pieces.bary @ mesh.pos[mesh.cells[pieces.cell]]
    e1, e2 = corner[:, 1] - corner[:, 0], corner[:, 2] - corner[:, 0]
    area.index_add_(0, pieces.patch, 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).abs())
    assert abs(float(area.sum()) - 1.0) < 1e-12
    if cut:
        box = _boxes(part._tree, np.array([0.0, 0.0]), np.array([1.0, 1.0]), {})
        for p in range(4):
            lo, hi = box[p]
            assert abs(float(area[p]) - np.prod(hi - lo)) < 1e-12
            assert np.abs(centroid[p] - 0.5 * (lo + hi)).max() < 1e-12  # the box's centre


def _boxes(tree, lo, hi, out):
    if not hasattr(tree, "axis"):
        out[int(tree)] = (lo, hi)
        return out
    mid_hi, mid_lo = hi.copy(), lo.copy()
    mid_hi[tree.axis] = mid_lo[tree.axis] = tree.value
    _boxes(tree.left, lo, mid_hi, out)
    return _boxes(tree.right, mid_lo, hi, out)


def _refined_values(coarse, fine, u):
    """u_h of the coarse mesh at the fine mesh's nodes (exactly, by locating them)."""
    lam, cell = locate(coarse.pos.numpy(), coarse.cells.numpy(), fine.pos.numpy())
    return torch.from_numpy(np.einsum("na,nac->nc", lam, u.numpy()[coarse.cells.numpy()[cell]]))


def test_p1_patch_coefficients_agree_on_a_mesh_and_its_refinement_nodal_do_not():
    """One piecewise-linear function on a mesh and on its refinement, through ViT-NO's own patch
    structure (RCB partition fitted on the coarse mesh, transferred; the refined triangles cut
    along the same planes, so every patch is the same region): the P1 coefficients agree to
    1e-10, the nodal ones (the nodes' quadrature in each patch, weighted-centroid frames) differ by
    more than 1e-3."""
    coarse, fine = _mesh(8), _mesh(8, refine=1)
    torch.manual_seed(0)
    u = torch.randn(len(coarse.pos), 3, dtype=torch.float64)
    v = _refined_values(coarse, fine, u)
    out = {}
    for quadrature in ("p1", "nodal"):
        model = ViTNO(3, 1, width=8, depth=1, num_heads=2, num_patches=4, modes=2,
                      quadrature=quadrature).double()
        model.fit_mesh(Mesh.from_sample(coarse))
        layer, zero = model.lift.layer, model.lift._zero
        coeffs = []
        for d, x in ((coarse, u), (fine, v)):
            m = Mesh.from_sample(d)
            index = model.patch_index(m)
            if quadrature == "p1":
                coeffs.append(patch_coefficients(x, index.unit[1], index.p1.geometry, layer.mode_index, zero,
                                                 p1=index.p1))
            else:
                coeffs.append(patch_coefficients(x, index.unit[1], index.geometry, layer.mode_index, zero))
        out[quadrature] = float((coeffs[0] - coeffs[1]).abs().max() / coeffs[0].abs().max())
    assert out["p1"] < 1e-10, out
    assert out["nodal"] > 1e-3, out


def test_p1_patch_geometry_refuses_non_triangles():
    from geoattn.errors import UnsupportedCellError

    pos = torch.rand(4, 2, dtype=torch.float64)
    quads = torch.tensor([[0, 1, 2, 3]])
    with pytest.raises(UnsupportedCellError):
        p1_patch_geometry(pos, torch.ones(4), quads, torch.zeros(4, dtype=torch.long), 1,
                          cell_pieces(quads, torch.zeros(1, dtype=torch.long)), fourier_modes(1, 2))
