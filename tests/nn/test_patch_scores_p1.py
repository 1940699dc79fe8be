"""Exact (P1) patch attention scores, ``s_pq = q_p^T M_p k~_q`` with the consistent mass matrices of
the patches' pieces of triangles: against brute-force quadrature, the same on a mesh and its
refinement where the nodal scores are not, and ViT-NO with ``scores="p1"``."""

import numpy as np
import pytest
import torch

from geoattn.mesh import Mesh, families, from_meshio
from geoattn.mesh.interpolation import linear_interpolation
from geoattn.mesh.partition import Partition, _Cut, partition
from geoattn.models import ViTNO
from geoattn.nn.patch_attention import cell_pieces, clipped_pieces, majority_patch
from geoattn.nn.patch_mass import mass_product, p1_patch_mass
from geoattn.nn.patch_pairs import pair_scores
from geoattn.testing import assert_batched_equals_separate
from triangles import locate


def _mesh(n=8, kind="irregular", seed=0, refine=0):
    m = families.unit_square(n, kind, seed=seed)
    if refine:
        m = families.refine(m, refine)
    return from_meshio(m, dtype=torch.float64)


def _gauss(order=4):
    """Collapsed Gauss-Legendre rule on the reference triangle: barycentric points ``[Q, 3]`` and
    weights summing to 1 (exact for polynomials of degree ``2 * order - 1``)."""
    x, w = np.polynomial.legendre.leggauss(order)
    x, w = 0.5 * (x + 1), 0.5 * w
    u, v = np.meshgrid(x, x, indexing="ij")
    wu, wv = np.meshgrid(w, w, indexing="ij")
    s, t = u.ravel(), (v * (1 - u)).ravel()
    return np.stack([1 - s - t, s, t], 1), (wu * wv * (1 - u)).ravel() * 2.0


def _brute_force_scores(pos, cells, q, k, pieces, num_patches):
    """s_pq = int over the pieces of patch p of q_h(x) (I_h k~_q)(x) dx, by a Gauss rule on every
    piece; q_h and I_h k~_q evaluated by locating the points in the mesh's triangles (not through
    the pieces' barycentric coordinates); k~_q(x_j) = k_h(x_j - c_p + c_q) read by
    linear_interpolation, with c_p the centroid of patch p's region (by the same rule)."""
    bary, w = _gauss()
    pos_np, cells_np = pos.numpy(), cells.numpy()
    corner = pieces.bary.numpy() @ pos_np[cells_np[pieces.cell.numpy()]]  # (K, 3, 2)
    e1, e2 = corner[:, 1] - corner[:, 0], corner[:, 2] - corner[:, 0]
    area = 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    pts = np.einsum("qa,kad->kqd", bary, corner)  # (K, Q, 2)
    patch = pieces.patch.numpy()
    size, moment = np.zeros(num_patches), np.zeros((num_patches, 2))
    np.add.at(size, patch, area)
    np.add.at(moment, patch, area[:, None] * np.einsum("q,kqd->kd", w, pts))
    centroid = moment / size[:, None]
    out = np.zeros((num_patches, num_patches))
    for p in range(num_patches):
        x = pts[patch == p].reshape(-1, 2)
        wx = (area[patch == p][:, None] * w[None]).reshape(-1)
        lam, cell = locate(pos_np, cells_np, x)
        vert = cells_np[cell]  # (M, 3)
        qh = np.einsum("ma,mac->mc", lam, q.numpy()[vert])
        for s in range(num_patches):
            moved = pos + torch.from_numpy(centroid[s] - centroid[p])
            k_moved = linear_interpolation(pos, moved)(k).numpy()  # k~_s at every node, in patch p's frame
            kh = np.einsum("ma,mac->mc", lam, k_moved[vert])
            out[p, s] = np.einsum("m,mc,mc->", wx, qh, kh)
    return out


@pytest.mark.parametrize("cut", [True, False], ids=["rcb-clipped", "whole-cells"])
def test_p1_scores_equal_brute_force_integrals(cut):
    """For random nodal q, k on an irregular mesh in 4 RCB patches, q_p^T M_p k~_q equals the
    integral of the product of the P1 interpolants over patch p's pieces, to 1e-10 in float64."""
    mesh = _mesh(6)
    part = partition(mesh.pos, mesh.weight, 4, method="rcb")
    patch = part.transfer(mesh.pos)
    if cut:
        pieces = clipped_pieces(mesh.pos, mesh.cells, patch, part._tree)
    else:
        pieces = cell_pieces(mesh.cells, majority_patch(mesh.cells, patch))
    mass = p1_patch_mass(mesh.pos, mesh.weight, mesh.cells, patch, 4, pieces)
    torch.manual_seed(0)
    q, k = torch.randn(len(mesh.pos), 3, dtype=torch.float64), torch.randn(len(mesh.pos), 3, dtype=torch.float64)
    score = pair_scores(mass_product(q, mass), k, mass.pairs)[..., 0]  # (P, P)
    ref = _brute_force_scores(mesh.pos, mesh.cells, q, k, pieces, 4)
    assert np.abs(score.numpy() - ref).max() < 1e-10 * np.abs(ref).max()
    # the rows of M_p sum to the integrals of the hats over D_p: all entries sum to the area
    assert abs(float(mass.value.sum()) - 1.0) < 1e-12


def _refined_values(coarse, fine, u):
    """u_h of the coarse mesh at the fine mesh's nodes, exactly (by locating them in its triangles)."""
    lam, cell = locate(coarse.pos.numpy(), coarse.cells.numpy(), fine.pos.numpy())
    return torch.from_numpy(np.einsum("na,nac->nc", lam, u.numpy()[coarse.cells.numpy()[cell]]))


def _scores(model, data, q, k):
    """The P1 and the nodal scores [P, P] of ViT-NO's attention on ``data``, through its patch index
    (coordinates and weights in units of the patch length)."""
    index = model.patch_index(Mesh.from_sample(data))
    p1 = pair_scores(mass_product(q, index.p1_mass), k, index.p1_mass.pairs)[..., 0]
    nodal = pair_scores(index.unit[1][:, None] * q, k, index.pairs)[..., 0]
    return p1, nodal


def _model():
    return ViTNO(3, 1, width=8, depth=1, num_heads=2, num_patches=4, modes=1, quadrature="p1",
                 scores="p1").double()


@pytest.mark.parametrize("kind", ["structured-boxes", "irregular-rcb"])
def test_p1_scores_agree_on_a_mesh_and_its_refinement_nodal_do_not(kind):
    """One continuous piecewise-linear pair (q, k) on a mesh and on its refinement, through ViT-NO's
    patch index: the P1 scores agree to 1e-12, the nodal ones differ by more than 1e-3. On a
    structured mesh cut into its four quarter boxes every moved key is P1 on the mesh as well, so
    the whole score matrix agrees; on an irregular mesh (the fitted RCB partition, triangles cut
    along its planes) the diagonal does (no move)."""
    structured = kind == "structured-boxes"
    coarse = _mesh(4, "structured") if structured else _mesh(8)
    fine = _mesh(4, "structured", refine=1) if structured else _mesh(8, refine=1)
    model = _model()
    if structured:
        tree = _Cut(0, 0.5, _Cut(1, 0.5, 0, 1), _Cut(1, 0.5, 2, 3))
        model.set_partition(Partition(torch.zeros(0, dtype=torch.long), 4, 0.5, "rcb", _tree=tree))
    else:
        model.fit_mesh(Mesh.from_sample(coarse))
    torch.manual_seed(0)
    q, k = torch.randn(len(coarse.pos), 3, dtype=torch.float64), torch.randn(len(coarse.pos), 3, dtype=torch.float64)
    (p1_c, nodal_c), (p1_f, nodal_f) = _scores(model, coarse, q, k), _scores(
        model, fine, _refined_values(coarse, fine, q), _refined_values(coarse, fine, k))
    if not structured:
        p1_c, p1_f, nodal_c, nodal_f = p1_c.diag(), p1_f.diag(), nodal_c.diag(), nodal_f.diag()
    scale = float(p1_c.abs().max())
    assert float((p1_c - p1_f).abs().max()) < 1e-12 * scale, (p1_c, p1_f)
    assert float((nodal_c - nodal_f).abs().max()) > 1e-3 * scale, (nodal_c, nodal_f)


def test_vit_p1_scores_forward_backward_batched():
    """ViT-NO with ``scores="p1"`` runs forward and backward, differs from the nodal scores with
    the same weights, and a batch equals its graphs run alone."""
    data = [_mesh(6, seed=1), _mesh(5, "graded"), _mesh(4, seed=2, refine=1)]
    for d in data:
        d.x = torch.stack([torch.sin(2 * d.pos[:, 0]) * torch.cos(d.pos[:, 1]), d.pos[:, 0] * d.pos[:, 1],
                           d.pos[:, 1]], 1)
    torch.manual_seed(0)
    model = _model()
    nodal = ViTNO(3, 1, width=8, depth=1, num_heads=2, num_patches=4, modes=1, quadrature="p1").double()
    nodal.load_state_dict(model.state_dict())
    model.fit_mesh(Mesh.from_sample(data[0]))
    nodal.fit_mesh(Mesh.from_sample(data[0]))
    m = Mesh.from_sample(data[0])
    out = model(data[0].x, m)
    assert not torch.allclose(out, nodal(data[0].x, m))
    out.square().sum().backward()
    attention = model.blocks[0].mixer.layer
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (attention.q.weight, attention.k.weight))
    model.eval()
    with torch.no_grad():
        assert_batched_equals_separate(model, data, atol=1e-10)
