"""Surface meshes (triangles and quads in 3-D) and point clouds on surfaces: area weights that
integrate over the surface at the rule's order, validation that makes sense on a surface, and
every model running on 3-D coordinates."""

import meshio
import numpy as np
import pytest
import torch

import geoattn
from geoattn.models import MODELS, build_model
from geoattn.mesh import (from_meshio, orient_surface, quadrature_weights, surface_areas,
                          validate_mesh)

families = pytest.importorskip("geoattn.mesh.families", exc_type=ImportError)


def _sphere(level: int) -> tuple[np.ndarray, np.ndarray]:
    m = families.icosphere(level)
    return m.points, m.cells[0].data


def test_icosphere_is_a_closed_outward_surface():
    pos, cells = _sphere(2)
    assert len(pos) == 10 * 4**2 + 2 and len(cells) == 20 * 4**2
    np.testing.assert_allclose(np.linalg.norm(pos, axis=1), 1.0, rtol=1e-14)
    normal = np.cross(pos[cells[:, 1]] - pos[cells[:, 0]], pos[cells[:, 2]] - pos[cells[:, 0]])
    assert (np.einsum("ij,ij->i", normal, pos[cells].mean(axis=1)) > 0).all()
    validate_mesh(pos, cells, "triangle", unused="error")  # consistent, non-degenerate


@pytest.mark.parametrize("f, exact", [(lambda p: np.ones(len(p)), 4 * np.pi),
                                      (lambda p: p[:, 2] ** 2, 4 * np.pi / 3),
                                      (lambda p: np.exp(p[:, 0]), 2 * np.pi * (np.e - 1 / np.e))])
def test_lumped_sphere_integrals_converge_at_second_order(f, exact):
    """Lumped P1 on the icosphere: the polyhedron's area and the P1 interpolant each miss by
    ``O(h^2)``, with h halving per level, so the error falls by 4 per level: the fitted slope
    of log(error) against log(h) is 2 within 0.1 (the levels used are in the asymptotic
    range: the ratios of successive errors are already 3.9-4.0 from level 2)."""
    errors, sizes = [], []
    for level in range(2, 6):
        data = from_meshio(families.icosphere(level), dtype=torch.float64)
        assert data.pos.shape[1] == 3
        p, w = data.pos.numpy(), data.weight.numpy()
        errors.append(abs(w @ f(p) - exact))
        sizes.append(2.0**-level)
    slope = np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert slope == pytest.approx(2.0, abs=0.1)
    assert errors[-1] < 2e-3 * exact


def _cube_surface(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The surface of [0, 1]^3 as n x n quads per face, outward, with shared nodes."""
    s = np.linspace(0, 1, n + 1)
    a, b = (g.ravel() for g in np.meshgrid(s, s, indexing="ij"))
    local = np.array([[i * (n + 1) + j, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1,
                       i * (n + 1) + j + 1] for i in range(n) for j in range(n)])
    points, cells = [], []
    for axis in range(3):
        for side in (0.0, 1.0):
            p = np.zeros((len(a), 3))
            u, v = (axis + 1) % 3, (axis + 2) % 3
            p[:, axis], p[:, u], p[:, v] = side, a, b
            q = local if side == 1.0 else local[:, [0, 3, 2, 1]]  # outward: (u, v, axis) is right-handed
            cells.append(q + sum(len(x) for x in points))
            points.append(p)
    points, cells = np.concatenate(points), np.concatenate(cells)
    return geoattn.mesh.merge_nodes(points, cells, {}, 1e-9)[:2]


def test_quad_surface_weights_are_exact_for_affine_functions():
    pos, cells = _cube_surface(4)
    data = from_meshio(meshio.Mesh(pos, [("quad", cells)]), dtype=torch.float64)
    w, p = data.weight.numpy(), data.pos.numpy()
    assert w.sum() == pytest.approx(6.0, rel=1e-13)
    assert w @ (1 + 2 * p[:, 0] - p[:, 2]) == pytest.approx(6 + 2 * 3 - 3, rel=1e-13)
    np.testing.assert_allclose(surface_areas(pos, cells, "quad"), 1 / 16, rtol=1e-13)


def test_scaled_surface_weights_are_areas():
    data = from_meshio(families.icosphere(2, radius=3.0), dtype=torch.float64)
    small = from_meshio(families.icosphere(2, radius=3.0), scale=3.0, dtype=torch.float64)
    torch.testing.assert_close(small.weight * 9.0, data.weight)  # areas scale by scale**2
    out = geoattn.mesh.to_meshio(small)
    np.testing.assert_allclose(out.point_data["weight"], data.weight.numpy(), rtol=1e-12)


def test_surface_validation():
    pos, cells = _sphere(1)
    flipped = cells.copy()
    flipped[5] = flipped[5][[0, 2, 1]]
    with pytest.raises(geoattn.InvertedCellError, match="oriented against its neighbour.*reorient=True"):
        validate_mesh(pos, flipped, "triangle")
    fixed = from_meshio(meshio.Mesh(pos, [("triangle", flipped)]), reorient=True)
    assert torch.equal(fixed.cells, torch.as_tensor(cells))  # each piece follows its first cell
    reversed_all = cells[:, [0, 2, 1]]
    validate_mesh(pos, reversed_all, "triangle")  # inward but consistent: a valid surface
    degenerate = np.concatenate([pos, [(pos[0] + pos[1]) / 2]])
    with pytest.raises(geoattn.DegenerateCellError, match="zero area"):
        validate_mesh(degenerate, np.concatenate([cells, [[0, 1, len(pos)]]]), "triangle")
    dart = np.array([[0, 0, 0], [2, 0, 0], [0.5, 0.5, 0.1], [0, 2, 0]], dtype=float)  # reflex corner 2
    with pytest.raises(geoattn.InvertedCellError, match="non-convex"):
        validate_mesh(dart, np.array([[0, 1, 2, 3]]), "quad")


def test_non_orientable_surface_is_refused():
    n = 24
    u = 2 * np.pi * np.arange(n) / n
    strip = []
    for s in (-0.3, 0.3):
        strip.append(np.c_[(1 + s * np.cos(u / 2)) * np.cos(u), (1 + s * np.cos(u / 2)) * np.sin(u),
                           s * np.sin(u / 2)])
    pos = np.concatenate(strip)  # node i at width -0.3, node n + i at +0.3
    cells = [[i, i + 1, n + i + 1] for i in range(n - 1)] + [[i, n + i + 1, n + i] for i in range(n - 1)]
    cells += [[n - 1, n, 0], [n - 1, 0, 2 * n - 1]]  # the half twist: u = 2 pi at -0.3 is node n
    cells = np.array(cells)
    validate_mesh(pos, cells[:-2], "triangle")  # the strip before the twist closes it
    with pytest.raises(geoattn.InvertedCellError, match="oriented against"):
        validate_mesh(pos, cells, "triangle")
    with pytest.raises(geoattn.InvertedCellError, match="not orientable"):
        orient_surface(cells)


def test_per_element_surface_merges():
    pos, cells = _sphere(2)
    points = pos[cells].reshape(-1, 3)
    split = np.arange(len(points)).reshape(-1, 3)
    with pytest.raises(geoattn.DuplicateNodeError, match="merge_duplicates"):
        from_meshio(meshio.Mesh(points, [("triangle", split)]))
    data = from_meshio(meshio.Mesh(points, [("triangle", split)]), merge_duplicates=True,
                       dtype=torch.float64)
    assert data.num_nodes == len(pos) and data.merged_nodes == len(points) - len(pos)
    assert float(data.weight.sum()) == pytest.approx(
        float(quadrature_weights(pos, cells, "triangle").sum()), rel=1e-12)


def test_tangential_p1_gradients_on_a_surface():
    """On a flat triangle in 3-D the P1 gradient of an affine u = a.x is a's projection on the
    triangle's plane, and the cell measure is its area (what the H1 loss integrates)."""
    from geoattn.mesh import p1_gradients

    pos, cells = _sphere(2)
    a = np.array([0.3, -1.0, 2.0])
    grad, area = p1_gradients(torch.tensor(pos @ a)[:, None], torch.tensor(pos), torch.tensor(cells))
    normal = np.cross(pos[cells[:, 1]] - pos[cells[:, 0]], pos[cells[:, 2]] - pos[cells[:, 0]])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    expected = a - (normal @ a)[:, None] * normal  # [M, 3]
    np.testing.assert_allclose(grad[:, 0].numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(area.numpy(), surface_areas(pos, cells, "triangle"), rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_surface_knn_weights_of_a_sphere_cloud(seed):
    """200 random points on the unit sphere: the box rules see a volume (7.77 for the bounding
    cube), the surface rule sees the area 4 pi. Tolerance 2 %: the rule's tangent-plane cells
    miss curvature and far Voronoi neighbours at this size by well under 1 %, and the sum of
    200 cell areas fluctuates by about the same."""
    p = np.random.default_rng(seed).standard_normal((200, 3))
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    w = quadrature_weights(p, rule="surface_knn").numpy()
    assert (w > 0).all()
    assert w.sum() == pytest.approx(4 * np.pi, rel=0.02)
    assert w @ p[:, 2] ** 2 == pytest.approx(4 * np.pi / 3, rel=0.03)
    assert float(quadrature_weights(p, rule="monte_carlo").sum()) > 7.5  # the bounding cube
    data = from_meshio(meshio.Mesh(p, [("vertex", np.arange(200)[:, None])]), weights="surface_knn",
                       dtype=torch.float64)
    np.testing.assert_allclose(data.weight.numpy(), w)


def test_surface_knn_refuses_plane_clouds():
    with pytest.raises(geoattn.DimensionError, match="3-D"):
        quadrature_weights(np.random.default_rng(0).random((50, 2)), rule="surface_knn")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_runs_on_a_sphere(name):
    """Each registered model built with dim=3 takes a surface mesh's 3-D coordinates and area
    weights."""
    torch.manual_seed(0)
    data = from_meshio(families.icosphere(2), dtype=torch.float32)
    x = data.pos[:, 2:] ** 2
    model = build_model(name, in_channels=1, out_channels=1, dim=3)
    model.eval()
    with torch.no_grad():
        out = model(x, data.pos, data.weight)
    assert out.shape == (data.num_nodes, 1) and torch.isfinite(out).all()
    assert model.hparams["dim"] == 3
