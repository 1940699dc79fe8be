"""Local refinement to a largest edge, and the P1 prolongation of nodal values."""

import numpy as np
import pytest
import torch

from geoattn.errors import ConfigError, UnsupportedCellError
from geoattn.mesh import families, from_meshio
from geoattn.mesh.refinement import longest_edges, refine_to


def _edges(mesh):
    return longest_edges(mesh.points[:, :2], mesh.cells[-1].data)


def test_graded_mesh_refined_to_the_training_size_keeps_its_nodes_and_area():
    graded = families.unit_square(12, "graded")
    size = _edges(families.unit_square(12, "irregular")).max()
    refined, prolong = refine_to(graded, size)
    assert _edges(graded).max() > size >= _edges(refined).max()
    n = len(graded.points)
    np.testing.assert_array_equal(refined.points[:n], graded.points)  # original nodes first, in order
    assert prolong.shape == (len(refined.points), n)
    # only the coarse part is refined: the fine corner's cells are untouched
    assert len(refined.points) < len(families.refine(graded, 2).points)
    area = from_meshio(refined, dtype=torch.float64).weight.sum()
    assert float(area) == pytest.approx(1.0, rel=1e-12)


def test_prolongation_is_linear_interpolation():
    """Exact for linear functions; on a quadratic, the midpoint value misses by h^2/4 times the
    second derivative along the edge, so it is exactly the edge average, not the function."""
    mesh = families.unit_square(6, "irregular")
    refined, prolong = refine_to(mesh, 0.5 * _edges(mesh).max())
    p, q = mesh.points[:, :2], refined.points[:, :2]
    linear = lambda z: 1.5 - 2.0 * z[:, 0] + 0.25 * z[:, 1]  # noqa: E731
    np.testing.assert_allclose(prolong @ linear(p), linear(q), atol=1e-13)
    np.testing.assert_allclose(prolong.sum(axis=1), 1.0)  # rows are convex combinations
    assert (prolong.getnnz(axis=1) <= 2).all()
    square = lambda z: z[:, 0] ** 2  # noqa: E731
    assert np.abs(prolong @ square(p) - square(q)).max() > 1e-4  # a quadratic is not reproduced


def test_fine_enough_mesh_is_left_alone():
    mesh = families.unit_square(5, "irregular")
    refined, prolong = refine_to(mesh, _edges(mesh).max())
    np.testing.assert_array_equal(refined.points, mesh.points)
    np.testing.assert_array_equal(prolong.toarray(), np.eye(len(mesh.points)))


def test_bad_input():
    mesh = families.unit_square(3)
    with pytest.raises(ConfigError, match="size must be positive"):
        refine_to(mesh, 0.0)
    with pytest.raises(ConfigError, match="remain after 1 rounds"):
        refine_to(mesh, 1e-3, max_rounds=1)
    with pytest.raises(UnsupportedCellError, match="triangle"):
        refine_to(families.unit_square(2, cell="quad"), 0.1)
