"""The multigrid operator: its transfers against loops over nodes and cells and against exact
integrals, convergence under refinement, the quadrature properties, batching, trained transfer
and linear cost."""

import itertools
import math

import numpy as np
import pytest
import torch
from smooth_inputs import smooth_input

from geoattn import testing
from geoattn.errors import ConfigError
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import MultigridOperator, build_model
from geoattn.models.multigrid import (grid_stencil, prolong_to_nodes, restrict, restriction, restriction_entries,
                                      simplex_points)


def _model(**kw):
    torch.manual_seed(0)
    return MultigridOperator(2, 1, **{"width": 8, "depth": 2, "grid": 4, "levels": 2, **kw}).double().eval()


def _phi_1d(t: float, j: int, n: int) -> float:
    """Cell ``j`` of ``n``'s basis function at ``t`` (in cell units from the box's face): the hat
    of half-width 1 around the centre ``j + 1/2``, equal to 1 past the outer centres."""
    if (j == 0 and t <= 0.5) or (j == n - 1 and t >= n - 0.5):
        return 1.0
    return max(0.0, 1.0 - abs(t - (j + 0.5)))


def _phi(x, cell, box, shape) -> float:
    r"""The multilinear basis :math:`\phi_c(x) = \prod_k \phi_{c_k}(x_k)`."""
    out = 1.0
    for k, (j, n) in enumerate(zip(cell, shape)):
        t = (min(max(float(x[k]), box[0][k]), box[1][k]) - box[0][k]) / ((box[1][k] - box[0][k]) / n)
        out *= _phi_1d(t, j, n)
    return out


def _nodal(h, pos, weight, batch, box, shape):
    """The restriction of every graph without cells (the nodes' quadrature), stacked."""
    volume = math.prod((b - a) / n for a, b, n in zip(*box, shape))
    corners = torch.tensor(box, dtype=pos.dtype)
    parts = [restrict(h[batch == g], restriction(pos[batch == g], weight[batch == g], None, corners, shape),
                      volume) for g in range(int(batch.max()) + 1)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _reference_restriction(h, pos, weight, batch, box, shape):
    """``sum_i w_i phi_c(x_i) h_i / sum_i w_i phi_c(x_i)`` and ``sum_i w_i phi_c(x_i) / |c|``,
    one cell and one node at a time."""
    graphs = int(batch.max()) + 1
    volume = math.prod((b - a) / n for a, b, n in zip(*box, shape))
    means, coverages = [], []
    for g in range(graphs):
        mean, coverage = [], []
        for cell in itertools.product(*(range(n) for n in shape)):
            mass, moment = 0.0, torch.zeros(h.shape[1], dtype=h.dtype)
            for i in range(len(pos)):
                if batch[i] == g:
                    mass = mass + weight[i] * _phi(pos[i], cell, box, shape)
                    moment = moment + weight[i] * _phi(pos[i], cell, box, shape) * h[i]
            mean.append(moment / mass if mass > 0 else moment)
            coverage.append(mass / volume)
        means.append(torch.stack(mean, -1).reshape(h.shape[1], *shape))
        coverages.append(torch.stack(coverage).reshape(1, *shape))
    return torch.stack(means), torch.stack(coverages)


def _reference_prolongation(grid, pos, batch, box, shape):
    """``sum_c phi_c(x_i) g_c`` for every node, summing over every cell."""
    rows = []
    for i in range(len(pos)):
        value = torch.zeros(grid.shape[1], dtype=grid.dtype)
        for cell in itertools.product(*(range(n) for n in shape)):
            value = value + _phi(pos[i], cell, box, shape) * grid[(int(batch[i]), slice(None), *cell)]
        rows.append(value)
    return torch.stack(rows)


@pytest.mark.parametrize("box, shape", [(((0.0, 0.0), (1.0, 1.0)), (4, 3)),
                                        (((-1.0, 0.0, 0.5), (1.0, 2.0, 1.0)), (2, 3, 2))])
def test_transfers_match_loops_over_nodes_and_cells(box, shape):
    """Without cells, the restriction (the nodes' quadrature) and the prolongation, outputs and
    gradients (in h and the grid values), equal the formulas evaluated cell by cell and node by
    node, to float64 rounding: each entry is a sum of at most N (here 30) terms of magnitude
    <= max |h| * max w, so the two summation orders differ by a few N eps; 1e-12 bounds that with
    room and catches any wrong corner, weight or normalisation (which move entries by O(1e-2) or
    more). Nodes outside the box and nodes of weight 0 are included, in two graphs."""
    gen = torch.Generator().manual_seed(0)
    d, n = len(shape), 30
    lo, hi = torch.tensor(box[0], dtype=torch.float64), torch.tensor(box[1], dtype=torch.float64)
    pos = lo + (hi - lo) * (1.2 * torch.rand(n, d, generator=gen, dtype=torch.float64) - 0.1)
    weight = torch.rand(n, generator=gen, dtype=torch.float64)
    weight[[3, 17]] = 0.0
    h = torch.randn(n, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    batch = torch.cat([torch.zeros(12, dtype=torch.long), torch.ones(n - 12, dtype=torch.long)])
    stencil = grid_stencil(pos, batch, torch.stack([lo, hi]), shape)
    mean, coverage = _nodal(h, pos, weight, batch, box, shape)
    ref_mean, ref_coverage = _reference_restriction(h, pos, weight, batch, box, shape)
    testing.assert_matches_reference(torch.cat([mean, coverage], 1), torch.cat([ref_mean, ref_coverage], 1),
                                     [h], generator=gen, atol=1e-12, rtol=0)
    grid = torch.randn(2, 3, *shape, generator=gen, dtype=torch.float64, requires_grad=True)
    testing.assert_matches_reference(prolong_to_nodes(grid, stencil),
                                     _reference_prolongation(grid, pos, batch, box, shape),
                                     [grid], generator=gen, atol=1e-12, rtol=0)


def _exact_hat_averages(f, n: int) -> torch.Tensor:
    r""":math:`\int \phi_c f / \int \phi_c` on the unit square's ``n x n`` grid, by 8-point
    Gauss-Legendre on each square of side ``1 / (2n)`` between the cells' centres and faces (on
    which :math:`\phi_c` is a polynomial of degree <= 1 per axis)."""
    x, w = (torch.tensor(a) for a in np.polynomial.legendre.leggauss(8))
    s = 1.0 / (2 * n)
    edges = torch.arange(2 * n, dtype=torch.float64) * s
    px = (edges[:, None] + (x[None, :] + 1) * s / 2).reshape(-1)  # (2n * 8,)
    pw = (w * s / 2).repeat(2 * n)
    grid = torch.stack(torch.meshgrid(px, px, indexing="ij"), -1).reshape(-1, 2)
    weight = torch.outer(pw, pw).reshape(-1)
    box = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    mean, _ = restrict(f(grid), restriction(grid, weight, None, box, (n, n)), 1.0 / n**2)
    return mean


def _square_mesh(t: int = 0, n: int = 4):
    return from_meshio(families.refine(families.unit_square(n, "irregular", seed=1), t), dtype=torch.float64)


UNIT = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


def _smooth(pos):
    return torch.stack([torch.sin(2 * pos[:, 0]) * torch.cos(3 * pos[:, 1]) + pos[:, 0] ** 2], 1)


def test_restriction_converges_at_second_order_to_hat_averages():
    r"""On red refinements of an irregular mesh, the restriction of a smooth function converges
    to its exact :math:`\phi_c`-weighted cell averages at second order in the mesh size (the
    interpolant's error), with cells and with the nodes' quadrature alike. With cells, the
    covered fraction of every cell is 1 up to the cell rule's error, which falls as the rule's
    points per grid cell squared (measured 2.6e-3-3.2e-3, 6.8e-4-9.6e-4 and 2.0e-4-2.6e-4 at 4, 8
    and 16: the bound 1.5e-3 at the default 8 has 50 % room), and the fractions add up to the
    box's area exactly."""
    n = 4
    exact = _exact_hat_averages(_smooth, n)
    errors, nodal_errors, h = [], [], []
    coverage_errors = {4: [], 8: [], 16: []}
    for t in range(1, 5):
        d = _square_mesh(t)
        mean, _ = restrict(_smooth(d.pos), restriction(d.pos, d.weight, d.cells, UNIT, (n, n)), 1.0 / n**2)
        nodal, _ = restrict(_smooth(d.pos), restriction(d.pos, d.weight, None, UNIT, (n, n)), 1.0 / n**2)
        errors.append(float((mean - exact).abs().max()))
        nodal_errors.append(float((nodal - exact).abs().max()))
        h.append(2.0**-t)
        for per_cell, found in coverage_errors.items():
            total = restriction(d.pos, d.weight, d.cells, UNIT, (n, n), per_cell).total
            assert abs(float(total.sum()) - 1.0) < 1e-13
            found.append(float((total * n**2 - 1).abs().max()))
    testing.assert_convergence_rate(h, errors, 2.0, tol=0.3)
    testing.assert_convergence_rate(h, nodal_errors, 2.0, tol=0.3)
    assert errors[-1] < 1e-3, errors
    worst = [max(coverage_errors[k]) for k in (4, 8, 16)]
    testing.assert_convergence_rate([1 / 4, 1 / 8, 1 / 16], worst, 2.0, tol=0.5)
    assert worst[1] < 1.5e-3, coverage_errors


def test_restriction_sums_are_exact_integrals():
    r"""With cells, :math:`\sum_i \int \phi_c \lambda_i = \int \phi_c` and
    :math:`\sum_c \int \phi_c \lambda_i = \int \lambda_i`, the lumped P1 weight of node
    ``i`` (a third of the areas of its triangles: the bases are partitions of unity and the rule
    integrates affine functions exactly): the row sums add up to the domain's area and the column
    sums equal those weights, to rounding (1e-13 for sums of about a thousand terms of size
    1e-3)."""
    d = from_meshio(families.l_shape(6), dtype=torch.float64)
    box = torch.tensor([[-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    op = restriction(d.pos, d.weight, d.cells, box, (8, 8))
    assert abs(float(op.total.sum()) - 3.0) < 1e-13
    columns = torch.zeros(len(d.pos), dtype=torch.float64).index_add_(0, op.cols, op.values)
    corners = d.pos[d.cells]
    area = 0.5 * torch.linalg.det(corners[:, 1:] - corners[:, :1]).abs()
    lumped = torch.zeros(len(d.pos), dtype=torch.float64).index_add_(0, d.cells.reshape(-1), area.repeat_interleave(3) / 3)
    torch.testing.assert_close(columns, lumped, atol=1e-13, rtol=0)


def test_simplex_rule_is_exact_to_degree_2k_minus_d_and_converges_on_kinks():
    r"""On a triangle, the rule's weights sum to its area, its points have the barycentric
    coordinates it returns, and it integrates every monomial :math:`x^a y^b` of degree up to
    :math:`2k - 2` exactly (1e-14; :math:`\int x^a y^b = a!\,b!/(a+b+2)!` on the unit
    triangle); on a tetrahedron to degree :math:`2k - 3` (:math:`a!b!c!/(a+b+c+3)!`). For the
    kinked :math:`|x - 0.3|` its error falls at least as :math:`k^{-2}` (Gauss points converge
    on a kink at that order, erratically with where the kink falls among them: measured
    :math:`e_k k^2` = 0.10, 0.092, 0.078, 0.024 at k = 4, 8, 16, 32; none may exceed 1.2 times
    the first)."""
    tri = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    for k in (2, 3, 4):
        points, weights, bary = simplex_points(tri, torch.tensor([[0, 1, 2]]), k)
        assert abs(float(weights.sum()) - 0.5) < 1e-14
        torch.testing.assert_close(bary @ tri, points, atol=1e-15, rtol=0)
        for a, b in itertools.product(range(2 * k - 1), repeat=2):
            if a + b <= 2 * k - 2:
                exact = math.factorial(a) * math.factorial(b) / math.factorial(a + b + 2)
                assert abs(float((weights * points[:, 0] ** a * points[:, 1] ** b).sum()) - exact) < 1e-14
    tet = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=torch.float64)
    points, weights, _ = simplex_points(tet, torch.tensor([[0, 1, 2, 3]]), 3)
    exact = 2 / math.factorial(5)  # x^2: 2! 0! 0! / 5!
    assert abs(float((weights * points[:, 0] ** 2).sum()) - exact) < 1e-14
    assert abs(float(weights.sum()) - 1 / 6) < 1e-14
    errors, ks = [], (4, 8, 16, 32)
    for k in ks:  # int_T |x - 0.3|: the part x > 0.3 and the part x < 0.3 in closed form
        points, weights, _ = simplex_points(tri, torch.tensor([[0, 1, 2]]), k)
        errors.append(abs(float((weights * (points[:, 0] - 0.3).abs()).sum()) - _kink_integral(0.3)))
    scaled = [e * k**2 for e, k in zip(errors, ks)]
    assert max(scaled) <= 1.2 * scaled[0] and errors[-1] < 1e-4, errors


def _kink_integral(s: float) -> float:
    r""":math:`\int_T |x - s|` on the unit triangle: :math:`\int_0^1 |x - s| (1 - x) dx`."""
    def F(x):  # antiderivative of (x - s)(1 - x)
        return -x**3 / 3 + (1 + s) * x**2 / 2 - s * x
    return (F(1) - F(s)) - (F(s) - F(0))


def test_restriction_sees_the_function_not_the_mesh():
    r"""The same piecewise-linear function held by a mesh and by its refinement (values carried
    by linear interpolation) gives the same grid values with cells, up to the cell rule's error,
    on a grid as fine as the mesh: the differences fall as the rule is refined (measured 4.4e-3,
    9.4e-4, 3.1e-4 at 2, 4 and 8 points per grid cell, for values of size 1: each must be 2.5
    times smaller than the last, and below 5e-4 at the default 8); the nodes' quadrature (the
    failing control) gives grid values that differ by over 1e-2."""
    coarse = _square_mesh(0, 8)
    fine = from_meshio(families.refine(families.unit_square(8, "irregular", seed=1), 1), dtype=torch.float64)
    values = torch.sin(5 * coarse.pos[:, :1]) + coarse.pos[:, 1:] ** 2
    from geoattn.mesh.interpolation import linear_interpolation

    on_fine = linear_interpolation(coarse.pos, fine.pos)(values)
    shape, volume = (8, 8), 1 / 64
    differences = []
    for per_cell in (2, 4, 8):
        a, _ = restrict(values, restriction(coarse.pos, coarse.weight, coarse.cells, UNIT, shape, per_cell), volume)
        b, _ = restrict(on_fine, restriction(fine.pos, fine.weight, fine.cells, UNIT, shape, per_cell), volume)
        differences.append(float((a - b).abs().max()))
    assert differences[-1] < 5e-4 and all(b < a / 2.5 for a, b in zip(differences, differences[1:])), differences
    a, _ = restrict(values, restriction(coarse.pos, coarse.weight, None, UNIT, shape), volume)
    b, _ = restrict(on_fine, restriction(fine.pos, fine.weight, None, UNIT, shape), volume)
    assert float((a - b).abs().max()) > 1e-2


def test_coverage_reads_the_domain_inside_the_box():
    r"""On the L-shaped domain in the box :math:`[-1, 1]^2` (4 x 4 cells), a cell whose basis
    function lies in the missing quadrant reads :math:`\kappa = 0` exactly and a restricted value
    of 0; cells inside read 1; the cell centred at ``(0.75, 0.25)``, whose hat reaches ``y =
    -0.25``, reads the fraction :math:`\int_{y > 0} \phi_c / \int \phi_c = 7/8`, and the one
    below it 1/8 (and (-0.25, 0.25), whose hat reaches the quadrant by 1/8 per axis, 63/64). With
    cells the domain is integrated exactly up to the cell rule's error for the bilinear
    :math:`\phi_c` (1e-3 bounds it here); the nodes' quadrature is off by up to 5e-3 at h = 1/8
    (1e-2 bounds that)."""
    d = from_meshio(families.l_shape(8), dtype=torch.float64)
    box = torch.tensor([[-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    ones = torch.ones(len(d.pos), 1, dtype=torch.float64)
    for cells, tol in ((d.cells, 1e-3), (None, 1e-2)):
        mean, coverage = restrict(ones, restriction(d.pos, d.weight, cells, box, (4, 4)), 0.25)
        assert coverage[0, 0, 3, 0] == 0 and mean[0, 0, 3, 0] == 0  # cell (x, y) = (0.75, -0.75)
        for cell, fraction in (((0, 3), 1.0), ((0, 1), 1.0), ((1, 2), 63 / 64), ((3, 2), 7 / 8), ((3, 1), 1 / 8)):
            assert abs(float(coverage[(0, 0, *cell)]) - fraction) < tol, (cell, coverage[0, 0])
        torch.testing.assert_close(mean[coverage > 0], torch.ones_like(mean[coverage > 0]))  # averages of 1


def test_untrained_model_converges_under_refinement_of_graded_mesh():
    testing.assert_model_converges(_model(), smooth_input, families.unit_square(4, "graded"))


def test_batched_equals_separate_and_hparams_rebuild(two_meshes):
    testing.assert_batched_equals_separate(_model(), two_meshes)
    assert build_model("multigrid", in_channels=1, out_channels=1).hparams["grid"] == 16


def test_quadrature_properties(two_meshes):
    """Renumbering nodes, appending nodes of weight 0 and splitting a node's weight between two
    copies change no output (the restriction sees the same measure); in a batch too."""
    model, gen = _model(), torch.Generator().manual_seed(0)
    d = two_meshes[1]
    testing.assert_permutation_equivariant(testing.mesh_layer(model), d.x, d.pos, d.weight, generator=gen)
    testing.assert_padding_invariant(testing.mesh_layer(model), d.x, d.pos, d.weight, generator=gen)
    testing.assert_duplication_invariant(testing.mesh_layer(model), d.x, d.pos, d.weight, index=7)
    samples = [(m.x, m.pos, m.weight) for m in two_meshes]
    testing.assert_batch_independent(testing.mesh_layer(model), samples)
    batch = torch.cat([torch.full((len(m.pos),), i) for i, m in enumerate(two_meshes)])
    x, pos, weight = (torch.cat(t) for t in zip(*samples))
    testing.assert_permutation_equivariant(testing.mesh_layer(model), x, pos, weight, batch, generator=gen)
    testing.assert_padding_invariant(testing.mesh_layer(model), x, pos, weight, batch, generator=gen)


def test_rejects_mismatched_inputs_and_bad_configurations():
    testing.assert_rejects_mismatched_inputs(_model())
    for bad in ({"grid": 6, "levels": 3}, {"grid": (4, 4, 4)}, {"grid": 1, "levels": 1},
                {"box": ((0.0, 0.0), (1.0, 0.0))}, {"box": ((0.0,), (1.0,))}, {"dim": 4}):
        with pytest.raises(ConfigError):
            MultigridOperator(1, 1, **bad)


def test_runs_in_one_and_three_dimensions():
    """The same construction on an interval and on a cube: finite outputs, and batched equals
    separate."""
    torch.manual_seed(0)
    line = MultigridOperator(1, 1, dim=1, width=4, grid=8, levels=3).double()
    pos = torch.rand(20, 1, dtype=torch.float64)
    out = line(pos.sin(), Mesh(pos, torch.full((20,), 0.05, dtype=torch.float64)))
    cube = MultigridOperator(1, 2, dim=3, width=4, grid=4, levels=2).double()
    pos = torch.rand(30, 3, dtype=torch.float64)
    x, w, batch = pos[:, :1], torch.full((30,), 1 / 15, dtype=torch.float64), (torch.arange(30) >= 15).long()
    both = cube(x, Mesh(pos, w, batch=batch))
    torch.testing.assert_close(both, torch.cat([cube(x[:15], Mesh(pos[:15], w[:15])), cube(x[15:], Mesh(pos[15:], w[15:]))]))
    assert out.shape == (20, 1) and both.shape == (30, 2) and torch.isfinite(both).all()


def test_forward_cost_is_linear_in_the_nodes():
    """The arithmetic of a forward pass on 4x the nodes (two red refinements) is at most 4x as
    much: the node work (lift, one scatter and one gather per block, projection) is O(N) and the
    grid work does not depend on N. Counted with torch's FLOP counter, which sees the matmuls and
    convolutions (the scatter and gather are index arithmetic, O(N) by construction and checked
    against the reference above), so the check is exact arithmetic, not a timing: any term that
    grows faster than N would push the count past the node ratio."""
    from torch.utils.flop_counter import FlopCounterMode

    model = MultigridOperator(2, 1, width=8, depth=2, grid=16, levels=3).eval()
    mesh = families.unit_square(8, "irregular", seed=1)
    counts = []
    for t in (2, 3):
        d = from_meshio(families.refine(mesh, t), dtype=torch.float32)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(smooth_input(d.pos), Mesh(d.pos, d.weight))
        counts.append((len(d.pos), counter.get_total_flops()))
    (n0, f0), (n1, f1) = counts
    assert n1 > 3.5 * n0 and f0 < f1 <= f0 * n1 / n0, counts


@pytest.mark.slow
def test_trained_model_keeps_its_error_on_refined_and_graded_meshes(darcy_transfer):
    """Regression: trained briefly on one irregular mesh (169 nodes, about 1.5 nodes per cell of
    the 8 x 8 first grid per axis), the error on a refined and on a graded mesh of the same
    continuum samples stays within 35 % of the training-mesh error, averaged over two
    initialisations. One initialisation's ratio is a property of its training trajectory, which
    floating-point reassociation (thread counts, BLAS kernels) changes: over seeds 0-3 it spread
    from 0.98 to 1.28 on the refined mesh, so a single seed against a tight bound passes or fails
    by rounding. The mean of two has a spread about 0.7x as wide; 1.35 bounds it with margin, and
    the exactness of the restriction itself is tested without training below."""
    ratios = {"refined": [], "graded": []}
    for seed in (0, 1):
        torch.manual_seed(seed)
        report = darcy_transfer(MultigridOperator(1, 1, width=16, depth=2, grid=8, levels=3))
        assert report.mean("model", "train") < 0.15, report.table()
        for mesh in ratios:
            ratios[mesh].append(report.ratio("model", mesh))
    for mesh, values in ratios.items():
        assert sum(values) / len(values) < 1.35, (mesh, values)


def test_exact_restriction_sees_only_the_function_in_two_and_three_dimensions():
    r"""The default restriction integrates :math:`\phi_c \lambda_i` exactly, on meshes finer and
    coarser than the grid: the covered fraction of every cell of a box the domain fills is 1, and
    the same piecewise-linear function on a mesh and on its refinement (2-D), or a linear function
    on two unrelated tetrahedral meshes of the cube, one coarser than the grid (3-D), gives the
    same grid values, to rounding (1e-13 for sums of up to a few thousand terms of size 1)."""
    coarse = _square_mesh(0, 8)
    fine = from_meshio(families.refine(families.unit_square(8, "irregular", seed=1), 1), dtype=torch.float64)
    from geoattn.mesh.interpolation import linear_interpolation

    values = torch.sin(5 * coarse.pos[:, :1]) + coarse.pos[:, 1:] ** 2
    on_fine = linear_interpolation(coarse.pos, fine.pos)(values)
    for shape in ((8, 8), (32, 32)):
        volume = 1 / math.prod(shape)
        a, ka = restrict(values, restriction(coarse.pos, coarse.weight, coarse.cells, UNIT, shape), volume)
        b, kb = restrict(on_fine, restriction(fine.pos, fine.weight, fine.cells, UNIT, shape), volume)
        torch.testing.assert_close(a, b, atol=1e-13, rtol=0)
        torch.testing.assert_close(ka, torch.ones_like(ka), atol=1e-13, rtol=0)
    cube = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=torch.float64)
    means = []
    for n in (2, 5):
        d = from_meshio(families.unit_cube(n), dtype=torch.float64)
        linear = d.pos @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64) + 0.25
        op = restriction(d.pos, d.weight, d.cells, cube, (4, 4, 4))
        mean, coverage = restrict(linear, op, 1 / 64)
        torch.testing.assert_close(coverage, torch.ones_like(coverage), atol=1e-13, rtol=0)
        assert len(op.values) <= restriction_entries(d.pos, d.cells, cube, (4, 4, 4))
        means.append(mean)
    torch.testing.assert_close(means[0], means[1], atol=1e-13, rtol=0)


def test_restriction_memory_is_bounded_and_a_large_one_is_refused():
    r"""On tetrahedral meshes finer than the grid the kept entries stay under the stated bound
    :func:`restriction_entries` :math:`\le (d + 1) 3^d T`, and a mesh's memo holds at most
    :math:`20 E + 4 G` bytes for the restriction plus :math:`12 \cdot 2^d N` for the stencil
    (float32); a restriction whose bound exceeds ``max_bytes`` is refused before it is built,
    naming its size and ``grid``."""
    from geoattn.errors import TooLargeError

    d = from_meshio(families.unit_cube(8), dtype=torch.float32)
    cube = torch.tensor([[0.0] * 3, [1.0] * 3])
    bound = restriction_entries(d.pos, d.cells, cube, (4, 4, 4))
    assert bound <= 4 * 27 * len(d.cells)
    model = MultigridOperator(1, 1, dim=3, width=4, depth=1, grid=4, levels=2, box=cube.tolist())
    mesh = Mesh(d.pos, d.weight, d.cells)
    model(d.pos[:, :1], mesh)
    assert len(model.restriction(mesh).values) <= bound
    assert mesh.memo_bytes() <= 20 * bound + 4 * 64 + 12 * 8 * len(d.pos) + 1024
    with pytest.raises(TooLargeError, match=r"up to \d+ entries .* GiB.*coarser first grid \(grid=\)"):
        restriction(d.pos, d.weight, d.cells, cube, (4, 4, 4), max_bytes=20 * bound // 2)


def test_sparse_transfers_equal_the_gather_and_scatter_in_values_and_gradients(two_meshes):
    """The model's CSR products (:meth:`MultigridOperator.transfers`, built once per mesh and
    joined block by block over a batch of two different meshes, with cells) give the outputs and
    parameter gradients of :func:`restrict` and :func:`prolong_to_nodes` (the path taken while
    the coordinates carry gradients) to float64 rounding."""
    model = _model()
    cells = [m.cells for m in two_meshes]
    parts = [Mesh(m.pos, m.weight, c) for m, c in zip(two_meshes, cells)]
    x = torch.cat([m.x for m in two_meshes])
    results = []
    for gather in (False, True):
        mesh = Mesh.batch([Mesh(p.pos.clone().requires_grad_(gather), p.weight, p.cells) for p in parts])
        model.zero_grad()
        out = model(x, mesh)
        (out.square() * torch.arange(len(out), dtype=out.dtype)[:, None]).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    (a, ga), (b, gb) = results
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
    assert model.restriction_map(parts[0]).matrix.layout == torch.sparse_csr


def test_query_reads_the_output_function_at_other_nodes(two_meshes):
    """With ``query=`` the model answers at the query mesh's nodes from the input mesh's values:
    at the refined mesh's nodes (the coarse nodes first) it gives the coarse mesh's own outputs
    there; the query of the mesh itself is the plain call; a batch equals its members; the
    answer is the same with the gather path (coordinates carrying gradients)."""
    model = _model()
    coarse, fine = (Mesh(m.pos, m.weight, m.cells) for m in two_meshes)
    x = two_meshes[0].x
    own = model(x, coarse)
    on_fine = model(x, coarse, query=fine)
    assert on_fine.shape == (fine.num_nodes, 1)
    torch.testing.assert_close(on_fine[:coarse.num_nodes], own, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model(x, coarse, query=coarse), own, rtol=1e-12, atol=1e-12)
    both = model(torch.cat([x, x]), Mesh.batch([coarse, coarse]), query=Mesh.batch([fine, coarse]))
    torch.testing.assert_close(both, torch.cat([on_fine, own]), rtol=1e-12, atol=1e-12)
    moving = Mesh(fine.pos.clone().requires_grad_(True), fine.weight, fine.cells)
    torch.testing.assert_close(model(x, coarse, query=moving), on_fine, rtol=1e-12, atol=1e-12)
    from geoattn.errors import MeshMismatchError
    with pytest.raises(MeshMismatchError, match="one graph per graph"):
        model(x, coarse, query=Mesh.batch([fine, fine]))


def test_smoothing_per_level():
    """``smoothing`` as one number per level (the first grid's first) builds those residual
    convolutions on each level, down and up; the same number on every level is the model of the
    single number (the same parameters, the same outputs); a wrong count is refused."""
    torch.manual_seed(0)
    a = MultigridOperator(1, 1, width=4, depth=1, grid=8, levels=3, smoothing=2)
    torch.manual_seed(0)
    b = MultigridOperator(1, 1, width=4, depth=1, grid=8, levels=3, smoothing=(2, 2, 2))
    assert a.state_dict().keys() == b.state_dict().keys()
    pos = torch.rand(40, 2)
    mesh = Mesh(pos, torch.full((40,), 1 / 40))
    torch.testing.assert_close(a(pos[:, :1], mesh), b(pos[:, :1], mesh))
    c = MultigridOperator(1, 1, width=4, depth=1, grid=8, levels=3, smoothing=(1, 0, 3))
    cycle = c.cycles[0]
    assert [len(s) for s in cycle.down] == [1, 0] and len(cycle.coarsest) == 3
    assert [len(s) for s in cycle.up] == [1, 0]
    assert c.hparams["smoothing"] in ((1, 0, 3), [1, 0, 3])
    rebuilt = build_model("multigrid", **c.hparams)
    assert rebuilt.state_dict().keys() == c.state_dict().keys()
    for bad in ((1, 2), (1, 2, 2, 2), (1, -1, 2)):
        with pytest.raises(ConfigError, match="smoothing"):
            MultigridOperator(1, 1, grid=8, levels=3, smoothing=bad)
