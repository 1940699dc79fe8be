"""Refinement of tetrahedral meshes to a largest edge, the P1 prolongation, and samples carried to
the refined mesh: the same proofs as on triangles, one dimension up."""

import math

import meshio
import numpy as np
import pytest
import torch

import geoattn
from geoattn import testing
from geoattn.data import refined_samples
from geoattn.errors import ConfigError, UnsupportedCellError
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.mesh.refinement import longest_edges, refine_to, refined_size
from geoattn.operators import training_size

#: the relative slack refine_to allows on ``size`` (an edge's halves may round a little longer)
SLACK = 1e-6


def _cube(n: int = 3, seed: int | None = 0) -> meshio.Mesh:
    """The unit cube's tetrahedra with ``n`` cells a side, interior nodes moved by up to a fifth
    of the spacing (each tetrahedron keeps its orientation), so that edges differ in length and
    the bisection's closure also splits edges made in the same round."""
    mesh = families.unit_cube(n)
    if seed is None:
        return mesh
    p = mesh.points.copy()
    inner = ((p > 0) & (p < 1)).all(axis=1)
    p[inner] += np.random.default_rng(seed).uniform(-0.2, 0.2, (inner.sum(), 3)) / n
    cells = mesh.cells[-1].data
    assert (_volumes(p, cells) > 0).all()
    return meshio.Mesh(p, [("tetra", cells)])


def _volumes(points, cells) -> np.ndarray:
    c = points[cells]  # [T, 4, 3]
    return np.linalg.det(c[:, 1:] - c[:, :1]) / 6


def _size(mesh) -> float:
    return float(longest_edges(mesh.points, mesh.cells[-1].data).max())


def _linear(z):
    return 1.5 - 2.0 * z[:, 0] + 0.25 * z[:, 1] + 0.75 * z[:, 2]


def test_prolongation_is_exact_for_linear_fields_and_keeps_the_nodes():
    """``P`` interpolates linearly: a linear field is reproduced to float64 rounding (each row is
    a convex combination of O(1) values, composed over a few rounds: a few ulp, bounded by 1e-12),
    and a quadratic is not (the midpoint of an edge of length ``h`` misses ``x^2`` by ``h_x^2 / 4``,
    at least 1e-3 here), so ``P`` is interpolation and not the function."""
    mesh = _cube()
    fine, prolong = refine_to(mesh, _size(mesh) / 2)
    n = len(mesh.points)
    np.testing.assert_array_equal(fine.points[:n], mesh.points)  # original nodes first, unchanged
    np.testing.assert_array_equal(prolong[:n].toarray(), np.eye(n))
    assert len(fine.points) > 3 * n
    np.testing.assert_allclose(prolong @ _linear(mesh.points), _linear(fine.points), rtol=0, atol=1e-12)
    assert prolong.min() >= 0
    np.testing.assert_allclose(prolong.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    # the irregular cube's closure bisects an edge made in the same round: such a node is the
    # midpoint of no edge of the coarser mesh and takes its barycentric coordinates in a cell
    assert (prolong.getnnz(axis=1) > 2).any()
    square = lambda z: z[:, 0] ** 2  # noqa: E731
    assert np.abs(prolong @ square(mesh.points) - square(fine.points)).max() > 1e-3


def test_refined_cube_fills_the_cube_and_meets_the_size():
    """The children tile the parents: the lumped weights (a quarter of each cell's volume per
    vertex) sum to the cube's volume 1, to the rounding of summing about 1e4 terms (< 1e-12);
    every edge is at most ``size`` (with refine_to's relative slack); and :func:`refined_size`
    estimates the node count within a factor of 2."""
    mesh = _cube()
    size = _size(mesh) / 2
    fine, _ = refine_to(mesh, size)
    assert (_volumes(fine.points, fine.cells[-1].data) > 0).all()
    assert float(from_meshio(fine, dtype=torch.float64).weight.sum()) == pytest.approx(1.0, rel=0, abs=1e-12)
    assert _size(fine) <= size * (1 + SLACK)
    estimate = refined_size(mesh.points, mesh.cells[-1].data, size)
    assert 0.5 * len(fine.points) <= estimate <= 2 * len(fine.points)


def test_graded_refinement_is_conforming():
    """Refining only the coarse part of a graded cube leaves no hanging node: every face of the
    result is shared by exactly two tetrahedra, or by one and then lies on the cube's boundary (a
    hanging node would leave an interior face with one tetrahedron on either side). The volume is
    still 1 (rounding, < 1e-12) and the lumped rule integrates a linear field exactly (its value
    at each cell's centroid times the volume): ``int (1.5 - 2x + y/4 + 3z/4) = 1.5 - 1 + 1/8 + 3/8 = 1``."""
    x = np.linspace(0.0, 1.0, 6) ** 2
    mesh = families.from_skfem(families.skfem.MeshTet1.init_tensor(x, x, x))
    edges = longest_edges(mesh.points, mesh.cells[-1].data)
    size = 0.5 * (edges.min() + edges.max())
    fine, _ = refine_to(mesh, size)
    tets = fine.cells[-1].data
    assert (longest_edges(mesh.points, mesh.cells[-1].data) <= size).any()  # a part left as it was
    assert len(fine.points) < len(families.refine(mesh, 1).points)
    faces = np.sort(tets[:, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]].reshape(-1, 3), axis=1)
    unique, count = np.unique(faces, axis=0, return_counts=True)
    assert count.max() == 2
    corners = fine.points[unique[count == 1]]  # [F, 3, 3]
    on_boundary = ((corners == 0) | (corners == 1)).all(axis=1).any(axis=1)
    assert on_boundary.all()
    weight = from_meshio(fine, dtype=torch.float64).weight.numpy()
    assert weight.sum() == pytest.approx(1.0, rel=0, abs=1e-12)
    assert weight @ _linear(fine.points) == pytest.approx(1.0, rel=0, abs=1e-12)


def test_lumped_norm_of_a_smooth_field_converges_at_second_order():
    r"""The lumped quadrature :math:`\sum_i w_i u(x_i)^2` of :math:`u = e^{x + y/2 - z/3}` on the
    cube refined to half, a quarter and an eighth of its edge tends to :math:`\int u^2 =
    \frac{e^2 - 1}{2} (e - 1) \frac{3}{2} (1 - e^{-2/3})` at order 2 in the edge length (the lumped
    P1 rule's order for a smooth integrand), measured by the slope of the log errors (within 0.3)."""
    exact = (math.e**2 - 1) / 2 * (math.e - 1) * 1.5 * (1 - math.exp(-2 / 3))
    mesh = _cube(2, seed=None)
    errors = []
    for factor in (2, 4, 8):
        data = from_meshio(refine_to(mesh, _size(mesh) / factor)[0], dtype=torch.float64)
        u = torch.exp(data.pos[:, 0] + data.pos[:, 1] / 2 - data.pos[:, 2] / 3)
        errors.append(abs(float((data.weight * u**2).sum()) - exact))
    testing.assert_convergence_rate([1 / 2, 1 / 4, 1 / 8], errors, 2.0, tol=0.3)


def _interpolate(points, cells, values, query):
    """The P1 interpolant of ``values`` at ``query``: the slow, obvious way (every point against
    every cell, barycentric coordinates)."""
    out = np.empty((len(query), values.shape[1]))
    c = points[cells]  # [T, 4, 3]
    inverse = np.linalg.inv(np.swapaxes(c[:, 1:] - c[:, :1], 1, 2))  # [T, 3, 3]
    for k, q in enumerate(query):
        lam = np.einsum("tij,tj->ti", inverse, q - c[:, 0])
        lam = np.concatenate([1 - lam.sum(axis=1, keepdims=True), lam], axis=1)  # [T, 4]
        t = int(np.argmax(lam.min(axis=1)))
        assert lam[t].min() > -1e-12
        out[k] = lam[t] @ values[cells[t]]
    return out


def test_refined_samples_of_tetrahedral_samples():
    """``refined_samples`` of samples on a tetrahedral mesh: each new node that halves an edge of
    the sample's mesh holds the mean of that edge's two ends' ``x`` and ``y`` (1e-15: one addition
    and one halving), every node holds the P1 interpolant of the sample (against the slow
    reference, 1e-13 for a few rounds of midpoints), the original nodes come first with their
    values, the weights sum to the volume, and samples on one mesh share the refined mesh."""
    mesh = _cube(2, seed=1)
    base = Mesh.from_meshio(mesh, dtype=torch.float64)
    samples = []
    for k in range(2):
        d = geoattn.mesh.from_meshio(mesh, dtype=torch.float64)
        d.x = torch.sin((k + 1) * 3 * d.pos[:, :1]) + d.pos[:, 1:2] * d.pos[:, 2:]
        d.y = torch.cat([d.pos[:, :1] * d.pos[:, 1:2] ** 2 + k, torch.cos(d.pos[:, 2:])], dim=1)
        samples.append(d)
    fine = refined_samples(samples, 2.0)
    assert fine[0].pos is fine[1].pos and fine[0].cells is fine[1].cells
    assert fine[0].cells.shape[1] == 4 and fine[0].pos.shape[1] == 3
    assert abs(float(fine[0].weight.sum()) - 1.0) < 1e-12
    assert training_size(Mesh(fine[0].pos, fine[0].weight, fine[0].cells)) <= training_size(base) / 2 * (1 + SLACK)
    n = base.num_nodes
    cells = mesh.cells[-1].data
    edges = np.unique(np.sort(cells[:, [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]].reshape(-1, 2), axis=1), axis=0)
    midpoints = mesh.points[edges].mean(axis=1)
    for d, f in zip(samples, fine):
        torch.testing.assert_close(f.pos[:n], d.pos, rtol=0, atol=0)
        for key in ("x", "y"):
            torch.testing.assert_close(f[key][:n], d[key], rtol=0, atol=0)
            gap = np.abs(f.pos[n:].numpy()[:, None] - midpoints[None]).max(axis=-1)  # [M, E]
            node, edge = np.nonzero(gap < 1e-12)
            assert len(node) > 0.5 * len(edges)
            mean = d[key].numpy()[edges[edge]].mean(axis=1)
            np.testing.assert_allclose(f[key].numpy()[n + node], mean, rtol=0, atol=1e-15)
            reference = _interpolate(mesh.points, cells, d[key].numpy(), f.pos.numpy())
            np.testing.assert_allclose(f[key].numpy(), reference, rtol=0, atol=1e-13)


def test_other_cells_are_refused_naming_what_is_accepted():
    """Hexahedra, surfaces (triangles in 3-D) and lines: each entry point says it takes triangles
    in 2-D or tetrahedra in 3-D; a refinement too large for memory is refused in 3-D as in 2-D."""
    hexes = families.unit_cube(2, "hexahedron")
    accepted = r"triangles \(cells \[T, 3\] in 2-D\) or tetrahedra \(cells \[T, 4\] in 3-D\)"
    with pytest.raises(UnsupportedCellError, match=accepted + r", got cells \['hexahedron'\]"):
        refine_to(hexes, 0.1)
    with pytest.raises(UnsupportedCellError, match=accepted):
        training_size(hexes)
    with pytest.raises(UnsupportedCellError, match="Mesh.refined needs " + accepted + ", got 3-D cells of 8 nodes"):
        Mesh.from_meshio(hexes).refined(0.1)
    sample = geoattn.mesh.from_meshio(hexes, dtype=torch.float64)
    sample.x = sample.y = sample.pos[:, :1]
    with pytest.raises(ConfigError, match="sample 0: refined_samples needs " + accepted):
        refined_samples([sample])
    sphere = families.icosphere(1)
    with pytest.raises(UnsupportedCellError, match=accepted + ", got triangle cells on a surface"):
        refine_to(sphere, 0.1)
    with pytest.raises(UnsupportedCellError, match="got 3-D cells of 3 nodes"):
        Mesh.from_meshio(sphere).refined(0.1)
    with pytest.raises(UnsupportedCellError, match=accepted + r", got cells \['line'\]"):
        refine_to(families.interval(4), 0.1)
    with pytest.raises(geoattn.TooLargeError, match=r"would give about [0-9.]+e\+1[5-9] nodes"):
        refine_to(_cube(2, seed=None), 1e-5)
