import numpy as np
import pytest
import torch

from geoattn.mesh import families, from_meshio, lumped_mass, signed_volumes
from geoattn.mesh.cells import first_clash, min_corner_jacobians

# One mesh per supported cell type, distorted by a smooth non-affine map so that quads and
# hexahedra are genuinely bilinear/trilinear (not parallelograms).
def _distort(p):
    q = p.copy()
    q[:, 0] = p[:, 0] + 0.1 * np.sin(np.pi * p[:, 0]) * p[:, -1]
    return q


CASES = {
    "line": lambda: families.interval(13, "irregular"),
    "triangle": lambda: families.unit_square(7, "irregular"),
    "quad": lambda: families.unit_square(7, "graded", cell="quad"),
    "tetra": lambda: families.unit_cube(3),
    "hexahedron": lambda: families.unit_cube(3, "hexahedron"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lumped_weights_integrate_affine_functions_exactly(name):
    mesh = CASES[name]()
    d = {"line": 1, "triangle": 2, "quad": 2, "tetra": 3, "hexahedron": 3}[name]
    pos = _distort(mesh.points[:, :d]) if d > 1 else mesh.points[:, :1]
    cells = mesh.cells[0].data
    w = lumped_mass(pos, cells, name)
    volume = signed_volumes(pos, cells, name).sum()
    # ∫ 1 = |D| and ∫ x_k: compare against an exact per-cell rule (the sums of signed volumes and
    # of high-order Gauss integrals are independent of the lumped weights).
    assert np.isclose(w.sum(), volume, rtol=1e-13, atol=0)
    exact_first_moment = _first_moment(pos, cells, name)
    np.testing.assert_allclose(w @ pos, exact_first_moment, rtol=1e-12, atol=1e-14)


def _first_moment(pos, cells, name):
    """∫ x dx by a 3-point Gauss rule per axis on the reference cell (or vertex averages)."""
    from geoattn.mesh.cells import _TENSOR_VERTICES, _tensor_shape
    if name in _TENSOR_VERTICES:
        g, gw = np.polynomial.legendre.leggauss(3)
        g, gw = 0.5 + 0.5 * g, 0.5 * gw
        d = pos.shape[1]
        pts = np.array(np.meshgrid(*[g] * d, indexing="ij")).reshape(d, -1).T
        wts = np.prod(np.array(np.meshgrid(*[gw] * d, indexing="ij")).reshape(d, -1).T, axis=1)
        phi, dphi = _tensor_shape(name, pts)
        x = pos[cells]
        jac = np.linalg.det(np.einsum("mvi,pvk->mpik", x, dphi))
        xq = np.einsum("pv,mvi->mpi", phi, x)
        return np.einsum("mp,p,mpi->i", jac, wts, xq)
    vol = np.abs(signed_volumes(pos, cells, name))
    return (vol[:, None] * pos[cells].mean(axis=1)).sum(0)


def test_quad_weights_on_a_trapezoid_match_hand_computation():
    # Trapezoid (0,0), (2,0), (3,1), (0,1): area 5/2, ∫x = 19/6, ∫y = 4/3.
    pos = np.array([[0, 0], [2, 0], [3, 1], [0, 1.0]])
    w = lumped_mass(pos, [[0, 1, 2, 3]], "quad")
    assert np.isclose(w.sum(), 2.5)
    np.testing.assert_allclose(w @ pos, [19 / 6, 4 / 3], rtol=1e-14)


def test_orientation_sign():
    pos = np.array([[0, 0], [1, 0], [0, 1.0]])
    assert signed_volumes(pos, [[0, 1, 2]], "triangle")[0] == pytest.approx(0.5)
    assert signed_volumes(pos, [[0, 2, 1]], "triangle")[0] == pytest.approx(-0.5)
    # A non-convex ("arrow") quad has a negative Jacobian at its reflex corner.
    arrow = np.array([[0, 0], [2, 0], [0.5, 0.5], [0, 2.0]])
    assert min_corner_jacobians(arrow, [[0, 1, 2, 3]], "quad")[0] < 0


@pytest.mark.parametrize("name", ["triangle", "tetra", "hexahedron"])
def test_refine_keeps_geometry(name):
    mesh = {"triangle": lambda: families.unit_square(4, "graded"),
            "tetra": lambda: families.unit_cube(2),
            "hexahedron": lambda: families.unit_cube(2, "hexahedron")}[name]()
    fine = families.refine(mesh)
    a, b = from_meshio(mesh, dtype=torch.float64), from_meshio(fine, dtype=torch.float64)
    assert b.num_nodes > 3 * a.num_nodes
    assert float(b.weight.sum()) == pytest.approx(float(a.weight.sum()), rel=1e-13)


def test_first_clash_names_the_pair_whose_later_cell_comes_first():
    a, b = np.array([0, 7, 2, 1]), np.array([9, 3, 5, 4])
    bad = np.array([True, True, True, False])  # later cells 9, 7, 5; pair 3 is fine
    assert first_clash(a, b, bad) == (2, 5, 2)
