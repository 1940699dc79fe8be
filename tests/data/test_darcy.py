"""P1 Darcy solver: manufactured-solution convergence rates, multi-RHS path, cross-mesh agreement."""

import numpy as np
import pytest
import skfem
import torch
from skfem.helpers import dot

from geoattn.data.darcy import (TERCILE, DarcyProblem, Lognormal, PiecewiseConstant, ThreePhase, coefficient,
                                darcy_samples, solve_darcy, solve_darcy_many)
from geoattn.data.grf import preset
from geoattn.mesh import families

PI = np.pi


def a_2d(x):  # variable coefficient 1 + x + y^2
    return 1.0 + x[:, 0] + x[:, 1] ** 2


def u_2d(x):
    return np.sin(PI * x[:, 0]) * np.sin(PI * x[:, 1])


def f_2d(x):
    # -div(a grad u) = -(a_x u_x + a_y u_y) - a lap(u), with lap(u) = -2 pi^2 u
    sx, sy, cx, cy = np.sin(PI * x[:, 0]), np.sin(PI * x[:, 1]), np.cos(PI * x[:, 0]), np.cos(PI * x[:, 1])
    return -(PI * cx * sy + 2 * x[:, 1] * PI * sx * cy) + a_2d(x) * 2 * PI**2 * sx * sy


def grad_u_2d(x0, x1):
    return np.stack([PI * np.cos(PI * x0) * np.sin(PI * x1), PI * np.sin(PI * x0) * np.cos(PI * x1)])


def errors(mesh, uh, exact, exact_grad):
    """(L2 error, H1-seminorm error) of the P1 function ``uh`` with a 6th-order rule."""
    m = families.to_skfem(mesh)
    elem = skfem.ElementTriP1() if m.dim() == 2 else skfem.ElementTetP1()
    basis = skfem.Basis(m, elem, intorder=6)

    @skfem.Functional
    def l2(w):
        pts = w.x.reshape(w.x.shape[0], -1).T
        return (w.uh - exact(pts).reshape(w.uh.shape)) ** 2

    @skfem.Functional
    def h1(w):
        g = exact_grad(*w.x)
        d = w.uh.grad - g
        return dot(d, d)

    field = basis.interpolate(uh)
    return np.sqrt(l2.assemble(basis, uh=field)), np.sqrt(h1.assemble(basis, uh=field))


@pytest.mark.parametrize("kind", ["structured", "irregular", "graded"])
def test_manufactured_solution_rates_2d(kind):
    base = families.unit_square(8, kind, seed=1)
    hs, e0, e1 = [], [], []
    for level in range(1, 4):
        mesh = families.refine(base, level)
        uh = solve_darcy(mesh, a_2d, f_2d)
        l2, h1 = errors(mesh, uh, u_2d, grad_u_2d)
        hs.append(2.0**-level), e0.append(l2), e1.append(h1)
    rate0 = np.polyfit(np.log(hs), np.log(e0), 1)[0]
    rate1 = np.polyfit(np.log(hs), np.log(e1), 1)[0]
    assert 1.85 < rate0 < 2.2, (kind, e0)
    assert 0.9 < rate1 < 1.15, (kind, e1)


def test_manufactured_solution_rate_3d():
    def u(x):
        return np.prod(np.sin(PI * x), axis=1)

    def grad_u(x0, x1, x2):
        s, c = np.sin(PI * np.stack([x0, x1, x2])), np.cos(PI * np.stack([x0, x1, x2]))
        return PI * np.stack([c[0] * s[1] * s[2], s[0] * c[1] * s[2], s[0] * s[1] * c[2]])

    def a(x):
        return 2.0 + x[:, 0]

    def f(x):  # -(a_x u_x) - a lap(u), lap(u) = -3 pi^2 u
        return -grad_u(*x.T)[0] + a(x) * 3 * PI**2 * u(x)

    hs, e0 = [], []
    for n in (4, 8, 16):
        mesh = families.unit_cube(n)
        l2, _ = errors(mesh, solve_darcy(mesh, a, f), u, grad_u)
        hs.append(1.0 / n), e0.append(l2)
    assert 1.8 < np.polyfit(np.log(hs), np.log(e0), 1)[0] < 2.3, e0


def test_many_sources_match_single_solves():
    mesh = families.unit_square(12, "irregular")
    a = Lognormal(preset("cao").sample(3, 0))
    sources = [1.0, f_2d, preset("cao", tau=5.0).sample(9, 1)]
    many = solve_darcy_many(mesh, a, sources)
    assert many.shape == (len(mesh.points), 3)
    for j, f in enumerate(sources):
        np.testing.assert_allclose(many[:, j], solve_darcy(mesh, a, f), rtol=1e-10, atol=1e-14)


def test_constant_coefficient_scales_solution():
    mesh = families.unit_square(10, "irregular")
    u1 = solve_darcy(mesh, 1.0)
    np.testing.assert_allclose(solve_darcy(mesh, 4.0, f=2.0), u1 / 2.0, rtol=1e-12)
    # the FEM solution of -lap u = 1 on the unit square peaks near 0.07367 (series value)
    assert abs(u1.max() - 0.07367) < 5e-3


def test_coefficient_families_values_and_torch():
    g = preset("cao").sample(0, 2)
    x = np.random.default_rng(0).random((50, 2))
    np.testing.assert_allclose(Lognormal(g)(x), np.exp(g(x)))
    pw = PiecewiseConstant(g)(x)
    assert set(np.unique(pw)) <= {3.0, 12.0}
    np.testing.assert_array_equal(pw == 12.0, g(x) >= 0)
    xt = torch.as_tensor(x, dtype=torch.float32)
    assert PiecewiseConstant(g)(xt).dtype == torch.float32
    torch.testing.assert_close(Lognormal(g)(xt), torch.as_tensor(np.exp(g(x)), dtype=torch.float32))


def _phases(field, g, x):
    """The threephase values from a sample's values ``g`` at ``x`` and the field's variance from
    its covariance matrix (not the family's own contraction), and the points too close to a
    threshold for rounding to decide."""
    s = np.sqrt(np.diag(field.covariance(x, x)))
    z = g / s
    expected = np.where(z < -TERCILE, 1.0, np.where(z >= TERCILE, 25.0, 5.0))
    return expected, np.abs(np.abs(z) - TERCILE) < 1e-9


@pytest.mark.parametrize("field", [preset("cao"), preset("calvello", box=((0.0, 0.0), (2.0, 1.0)), modes=16)])
def test_threephase_is_the_sample_cut_at_its_terciles(field):
    from scipy.stats import norm

    assert TERCILE == pytest.approx(norm.ppf(2 / 3), abs=1e-15)
    x = np.random.default_rng(1).random((400, 2)) * (field.box[1] - field.box[0]) + field.box[0]
    for index in range(3):
        a = coefficient(field, 0, index, "threephase")
        values = a(x)
        assert set(np.unique(values)) == {1.0, 5.0, 25.0}
        expected, tie = _phases(field, field.sample(0, index)(x), x)
        assert tie.sum() == 0
        np.testing.assert_array_equal(values, expected)
        xt = torch.as_tensor(x, dtype=torch.float64)
        np.testing.assert_array_equal(a(xt).numpy(), expected)
        assert a(xt.float()).dtype == torch.float32
    # without a law the family takes the "cao" field's on the sample's box and modes
    g = preset("cao").sample(0, 5)
    u = x % 1.0
    np.testing.assert_array_equal(ThreePhase(g)(u), coefficient(preset("cao"), 0, 5, "threephase")(u))


def test_threephase_phases_have_probability_one_third():
    # One sample's phases at many points are strongly correlated (a few patches of the field's
    # length scale), so their fractions are far from binomial. Across samples they are: sample i
    # at its own uniform point is in each phase with probability exactly 1/3 (the thresholds are
    # the pointwise terciles), independently of the other samples, so each phase count of S
    # samples is Binomial(S, 1/3): standard deviation sqrt(S 2/9) = 25.8 for S = 3000, and
    # 5 standard deviations (129, a fraction of 0.043) fail with probability below 1e-6.
    field, n = preset("cao"), 3000
    points = np.random.default_rng(2).random((n, 2))
    values = np.array([ThreePhase(field.sample(7, i), field)(points[i:i + 1])[0] for i in range(n)])
    counts = np.array([(values == v).sum() for v in (1.0, 5.0, 25.0)])
    assert counts.sum() == n
    assert np.all(np.abs(counts - n / 3) < 5 * np.sqrt(n * 2 / 9)), counts


def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="triangle or tetrahedron"):
        DarcyProblem(families.unit_square(4, cell="quad"))
    with pytest.raises(ValueError, match="positive"):
        solve_darcy(families.unit_square(4), lambda x: x[:, 0] - 0.5)
    with pytest.raises(ValueError, match="unknown coefficient family"):
        coefficient(preset("cao"), 0, 0, "uniform")


@pytest.mark.slow
def test_same_sample_on_mesh_and_refinements_converges():
    """One continuum lognormal sample, solved on an irregular mesh and its refinements, agrees to
    FEM accuracy: the relative L2 distance to the finest solution falls like h^2."""
    base = families.unit_square(16, "irregular", seed=3)
    meshes = {f"r{k}": families.refine(base, k) for k in range(4)}
    data = darcy_samples(meshes, n=1, seed=7, family="lognormal", dtype=torch.float64)
    fine = families.to_skfem(meshes["r3"])
    ref = data["r3"][0].y[:, 0].numpy()
    w = data["r3"][0].weight.numpy()
    diffs = []
    for k in range(3):
        coarse = skfem.Basis(families.to_skfem(meshes[f"r{k}"]), skfem.ElementTriP1())
        on_fine = coarse.probes(fine.p) @ data[f"r{k}"][0].y[:, 0].numpy()
        diffs.append(np.sqrt(np.sum(w * (on_fine - ref) ** 2) / np.sum(w * ref**2)))
    # against the finest mesh the error ratio of consecutive levels approaches 4 (second order)
    # (measured: 1.3e-2, 3.3e-3, 7.7e-4 for 289, 1089, 4225 nodes against 16 641)
    assert diffs[0] < 2e-2 and diffs[1] < diffs[0] / 3.0 and diffs[2] < diffs[1] / 3.0, diffs
    # the coefficient at nodes is the same function on every mesh (coarse nodes come first)
    n0 = data["r0"][0].num_nodes
    torch.testing.assert_close(data["r3"][0].x[:n0], data["r0"][0].x)


@pytest.mark.parametrize("mesh", [families.unit_square(6, "irregular"), families.unit_cube(3)],
                         ids=["triangle", "tetra"])
def test_stiffness_equals_scikit_fem_assembly(mesh):
    """The cached contraction equals scikit-fem's own assembly of int a grad(u).grad(v)."""
    prob = DarcyProblem(mesh)
    a = Lognormal(preset("cao", box=((0,) * prob.nodes.shape[1], (1,) * prob.nodes.shape[1])).sample(0, 1))

    @skfem.BilinearForm
    def form(u, v, w):
        return a(w.x.reshape(w.x.shape[0], -1).T).reshape(w.x.shape[1:]) * dot(u.grad, v.grad)

    ref = skfem.asm(form, prob.basis)[prob.interior][:, prob.interior]
    diff = abs(prob.stiffness(a) - ref).max()
    assert diff < 1e-12 * abs(ref).max()


def test_interior_order_is_a_banded_permutation():
    """The interior nodes are numbered in reverse Cuthill-McKee order (SuperLU's minimum-degree
    ordering is fast from it): a permutation of the non-boundary nodes whose stiffness matrix has a
    far smaller bandwidth than in the refined mesh's own numbering, and the solution does not
    depend on it (checked against a solve in the sorted numbering)."""
    from scipy.sparse.linalg import spsolve

    prob = DarcyProblem(families.refine(families.unit_square(8, "irregular"), 2))
    np.testing.assert_array_equal(np.sort(prob.interior), np.setdiff1d(np.arange(prob.basis.N), prob.boundary))
    a = Lognormal(preset("cao", box=((0, 0), (1, 1))).sample(0, 1))
    k = prob.stiffness(a).tocoo()
    order = np.argsort(prob.interior)  # back to the sorted numbering
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    assert np.abs(k.row - k.col).max() < 0.2 * np.abs(rank[k.row] - rank[k.col]).max()
    sorted_k = k.tocsr()[order][:, order].tocsc()
    u = np.zeros(prob.basis.N)
    u[np.sort(prob.interior)] = spsolve(sorted_k, prob.load(1.0)[order])
    np.testing.assert_allclose(prob.solve(a), u, rtol=0, atol=1e-12 * np.abs(u).max())
