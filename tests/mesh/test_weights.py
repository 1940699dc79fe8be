import math

import numpy as np
import pytest
import torch

from geoattn.mesh import (families, from_meshio, integrate, node_average_weights, quadrature_weights,
                          weighted_mean)


def f_smooth(p):
    return np.exp(p[:, 0]) * np.cos(np.pi * p[:, 1] / 2)


F_EXACT = (math.e - 1) * 2 / math.pi


def slope(h, err):
    return np.polyfit(np.log(h), np.log(err), 1)[0]


@pytest.mark.parametrize("kind", ["structured", "irregular", "graded"])
def test_lumped_weights_converge_at_order_two(kind):
    ns = [8, 16, 32, 64]
    mesh = families.unit_square(ns[0], kind)
    errs, hs = [], []
    for level in range(len(ns)):
        data = from_meshio(mesh, dtype=torch.float64)
        p = data.pos.numpy()
        errs.append(abs(data.weight.numpy() @ f_smooth(p) - F_EXACT))
        hs.append(1.0 / ns[level])
        mesh = families.refine(mesh)
    rate = slope(hs, errs)
    assert abs(rate - 2.0) < 0.2, (kind, rate, errs)


def _cloud_errors(rule, sizes, density, reps=24):
    """RMS integration error of a smooth function on i.i.d. clouds with the given density."""
    rng = np.random.default_rng(1)
    out = []
    for n in sizes:
        sq = []
        for _ in range(reps):
            p = rng.random((n, 2))
            if density == "graded":
                p = p**1.5  # density ∝ (xy)^(-1/3), smooth and positive on the open square
            w = quadrature_weights(p, rule=rule, box=[[0, 0], [1, 1]]).numpy()
            sq.append((w @ f_smooth(p) - F_EXACT) ** 2)
        out.append(math.sqrt(np.mean(sq)))
    return np.array(out)


SIZES = [250, 1000, 4000]


@pytest.mark.slow
def test_voronoi_rule_converges_at_its_documented_rate():
    # Documented: at least O(N^(-1/2-1/d)) = O(N^-1) in 2-D (measured slopes are -1.1 to -1.5:
    # neighbouring cells' first-order errors partly cancel), so the fitted slope must be <= -0.85.
    sizes = [200, 800, 3200]
    err = _cloud_errors("voronoi", sizes, "graded", reps=16)
    rate = slope(sizes, err)
    assert rate < -0.85, (rate, err)


def test_knn_rule_converges_at_its_documented_rate():
    # Documented: O(N^-1/2) for any smooth density.
    err = _cloud_errors("knn", SIZES, "graded")
    rate = slope(SIZES, err)
    assert -0.75 < rate < -0.35, (rate, err)


def test_monte_carlo_rule_converges_for_uniform_but_not_for_graded_clouds():
    uniform = _cloud_errors("monte_carlo", SIZES, "uniform")
    assert -0.75 < slope(SIZES, uniform) < -0.3
    graded = _cloud_errors("monte_carlo", SIZES, "graded", reps=6)
    # |D|/N weights estimate E f(U^1.5) = ∫ f(u^1.5) du instead of ∫ f: the error tends to that bias.
    g, gw = np.polynomial.legendre.leggauss(40)
    u = np.stack(np.meshgrid(0.5 + 0.5 * g, 0.5 + 0.5 * g, indexing="ij"), -1).reshape(-1, 2)
    bias = abs(np.outer(gw, gw).ravel() / 4 @ f_smooth(u**1.5) - F_EXACT)
    assert bias > 0.03
    assert graded[-1] == pytest.approx(bias, rel=0.15)


def test_voronoi_weights_tile_the_box_and_match_1d_midpoints():
    p = np.random.default_rng(0).random((200, 2))
    w = quadrature_weights(p, rule="voronoi", box=[[0, 0], [1, 1]])
    assert float(w.sum()) == pytest.approx(1.0, rel=1e-12)
    x = np.array([[0.1], [0.5], [0.4], [0.95]])
    w1 = quadrature_weights(x, rule="voronoi", box=[[0.0], [1.0]]).numpy()
    np.testing.assert_allclose(w1, [0.25, 0.275, 0.2, 0.275])


def test_voronoi_3d_sums_to_volume():
    p = np.random.default_rng(0).random((300, 3))
    w = quadrature_weights(p, rule="voronoi", box=[[0, 0, 0], [1, 1, 1]])
    assert float(w.sum()) == pytest.approx(1.0, rel=1e-10)


def test_default_rules_and_dtype():
    p = torch.rand(50, 2, dtype=torch.float32)
    w = quadrature_weights(p)
    assert w.dtype == torch.float32 and torch.allclose(w, torch.full((50,), w[0].item()))
    assert quadrature_weights(p, volume=2.0).sum().item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="unknown quadrature rule"):
        quadrature_weights(p, rule="simpson")


def test_integrate_per_graph_and_weighted_mean():
    f = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    w = torch.tensor([0.5, 0.25, 0.25])
    batch = torch.tensor([0, 0, 1])
    torch.testing.assert_close(integrate(f, w), torch.tensor([2.5, 3.5]))
    torch.testing.assert_close(integrate(f, w, batch), torch.tensor([[1.25, 2.0], [1.25, 1.5]]))
    torch.testing.assert_close(weighted_mean(f, w, batch), torch.tensor([[5 / 3, 8 / 3], [5.0, 6.0]]))
    torch.testing.assert_close(weighted_mean(f[:, 0], w), torch.tensor(2.5))


def test_node_average_weights_single_graph():
    d = from_meshio(families.unit_square(8, "graded"), dtype=torch.float64)
    w = node_average_weights(d.weight)
    # |D| / N on every node: the lumped weights integrate 1 exactly, |D| = 1
    torch.testing.assert_close(w, torch.full_like(d.weight, 1.0 / d.num_nodes))
    torch.testing.assert_close(w.sum(), d.weight.sum())


def test_node_average_weights_batched_per_graph():
    a = from_meshio(families.unit_square(6, "graded"), dtype=torch.float64)
    b = from_meshio(families.l_shape(3), dtype=torch.float64)  # area 3
    weight = torch.cat([a.weight, b.weight])
    batch = torch.cat([torch.zeros(a.num_nodes, dtype=torch.long), torch.ones(b.num_nodes, dtype=torch.long)])
    w = node_average_weights(weight, batch)
    torch.testing.assert_close(w[:a.num_nodes], torch.full_like(a.weight, 1.0 / a.num_nodes))
    torch.testing.assert_close(w[a.num_nodes:], torch.full_like(b.weight, 3.0 / b.num_nodes))
    torch.testing.assert_close(integrate(torch.ones_like(w), w, batch), integrate(torch.ones_like(w), weight, batch))
    # same as the single-graph rule applied to each graph
    torch.testing.assert_close(w[a.num_nodes:], node_average_weights(b.weight))
