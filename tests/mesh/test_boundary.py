"""The distance to a mesh's boundary: exact on polygonal domains, with and without holes."""

import numpy as np
import pytest

from geoattn.errors import UnsupportedCellError
from geoattn.mesh import families
from geoattn.mesh.boundary import _segment_distance, _triangle_distance, boundary_distance, boundary_facets

#: every figure below is exact up to float64 rounding of a few operations on O(1) numbers
EXACT = 1e-12


def _box_distance(points: np.ndarray) -> np.ndarray:
    """Distance to the boundary of the unit cube [0, 1]^d, inside or outside."""
    inside = np.all((points >= 0) & (points <= 1), axis=1)
    to_faces = np.minimum(points, 1 - points).min(axis=1)
    outside = np.linalg.norm(np.maximum(np.maximum(-points, points - 1), 0), axis=1)
    return np.where(inside, to_faces, outside)


def _points(d: int, count: int = 400, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.4, 1.4, (count, d))  # inside and outside


@pytest.mark.parametrize("kind", ["structured", "irregular", "graded"])
def test_square_meshes_give_the_distance_to_the_square(kind):
    mesh = families.unit_square(9, kind)
    p = _points(2)
    np.testing.assert_allclose(boundary_distance(mesh.points[:, :2], mesh.cells[-1].data, p), _box_distance(p),
                               atol=EXACT)


def test_cube_and_interval():
    cube = families.unit_cube(3)
    p = _points(3)
    np.testing.assert_allclose(boundary_distance(cube.points, cube.cells[-1].data, p), _box_distance(p), atol=EXACT)
    line = families.interval(7, "irregular")
    x = _points(1)
    np.testing.assert_allclose(boundary_distance(line.points[:, :1], line.cells[-1].data, x), _box_distance(x),
                               atol=EXACT)


def _annulus(r0: float, r1: float, sides: int, rings: int):
    """Triangles between two regular ``sides``-gons of circumradii ``r0 < r1`` (a square hole's
    generalisation: the domain is the outer polygon without the inner one)."""
    angle = 2 * np.pi * np.arange(sides) / sides
    radii = np.linspace(r0, r1, rings + 1)
    pos = np.concatenate([np.stack([r * np.cos(angle), r * np.sin(angle)], 1) for r in radii])
    cells = []
    for i in range(rings):
        for j in range(sides):
            a, b = i * sides + j, i * sides + (j + 1) % sides
            cells += [[a, b, a + sides], [b, b + sides, a + sides]]
    return pos, np.array(cells)


def test_a_hole_counts_as_boundary():
    r0, r1, n = 0.3, 1.0, 12
    pos, cells = _annulus(r0, r1, n, 4)
    assert len(boundary_facets(cells)) == 2 * n  # the two polygons' edges, nothing inside
    apothem = np.cos(np.pi / n)
    # the centre, inside the hole: the inner polygon's apothem
    assert boundary_distance(pos, cells, [[0.0, 0.0]])[0] == pytest.approx(r0 * apothem, abs=EXACT)
    # on a vertex's ray at radius rho: the inner vertex (rho - r0) or the outer edge ((r1 - rho) cos(pi / n))
    rho = np.linspace(0.35, 0.95, 13)
    ray = np.stack([rho * np.cos(2 * np.pi / n), rho * np.sin(2 * np.pi / n)], 1)
    np.testing.assert_allclose(boundary_distance(pos, cells, ray), np.minimum(rho - r0, (r1 - rho) * apothem),
                               atol=EXACT)


@pytest.mark.parametrize("d", [2, 3])
def test_the_pruned_search_equals_every_facet(d):
    """The candidates kept by the centroid search give the minimum over all boundary facets."""
    mesh = families.unit_square(6, "irregular") if d == 2 else families.unit_cube(2)
    pos, cells = mesh.points[:, :d], mesh.cells[-1].data
    p = _points(d, 150, seed=1)
    f = pos[boundary_facets(cells)]  # [F, d, d]
    rows, cols = np.repeat(np.arange(len(p)), len(f)), np.tile(np.arange(len(f)), len(p))
    corners = f[cols]
    every = (_segment_distance(p[rows], corners[:, 0], corners[:, 1]) if d == 2 else
             _triangle_distance(p[rows], corners[:, 0], corners[:, 1], corners[:, 2]))
    np.testing.assert_allclose(boundary_distance(pos, cells, p), every.reshape(len(p), len(f)).min(1), atol=EXACT)


def test_triangle_distance_against_its_cases():
    a, b, c = np.array([[0.0, 0, 0]]), np.array([[1.0, 0, 0]]), np.array([[0.0, 1, 0]])
    cases = {(0.2, 0.2, 0.5): 0.5, (2.0, 0.0, 0.0): 1.0, (-1.0, -1.0, 1.0): np.sqrt(3.0),
             (1.0, 1.0, 0.0): np.sqrt(0.5)}
    for point, expected in cases.items():
        assert _triangle_distance(np.array([point]), a, b, c)[0] == pytest.approx(expected, abs=EXACT)


def test_refusals():
    quads = families.unit_square(3, cell="quad")
    with pytest.raises(UnsupportedCellError, match="simplex cells"):
        boundary_distance(quads.points[:, :2], quads.cells[-1].data, [[0.5, 0.5]])
