import math

import pytest
import torch

from geoattn.nao import kernel_error, operator_error, radial_density, recover_microstructure

f64 = dict(dtype=torch.float64)


def test_operator_error_is_the_weighted_relative_l2_error_averaged_over_pairs():
    """Two systems, an f-mesh of three nodes, two pairs: E_f by hand."""
    target = torch.tensor([[[1.0, 2.0], [2.0, 0.0], [0.0, 1.0]],
                           [[3.0, 1.0], [0.0, 1.0], [4.0, 1.0]]], **f64)  # (B, Nf, d)
    pred = target.clone()
    pred[0, :, 0] += torch.tensor([1.0, 0.0, 2.0], **f64)
    pred[1, :, 1] -= torch.tensor([0.0, 3.0, 0.0], **f64)
    w = torch.tensor([[0.5, 0.25, 0.25]], **f64)  # shared by both systems
    # system 0: pair 0 sqrt((0.5*1 + 0.25*4) / (0.5*1 + 0.25*4)) = 1, pair 1 exact
    # system 1: pair 0 exact, pair 1 sqrt(0.25*9 / (0.5 + 0.25 + 0.25)) = 1.5
    expected = torch.tensor([(1.0 + 0.0) / 2, (0.0 + 1.5) / 2], **f64)
    torch.testing.assert_close(operator_error(pred, target, w), expected, rtol=1e-14, atol=0)
    torch.testing.assert_close(operator_error(pred, target, w.expand(2, -1)), expected,
                               rtol=1e-14, atol=0)
    # the weights matter: uniform weights give system 1, pair 1: sqrt(9 / 3)
    uniform = operator_error(pred, target, torch.full((1, 3), 1 / 3, **f64))
    assert float(uniform[1]) == pytest.approx(math.sqrt(3.0) / 2, rel=1e-14)


def test_operator_error_on_a_one_point_f_mesh_is_over_the_samples():
    """Radial problem: the d pairs are samples f(x_j) of one function, so E_f is the relative
    l2 error over them (one number per system, whatever the point's weight)."""
    target = torch.tensor([[[1.0, 2.0, 2.0]], [[0.0, 3.0, 4.0]]], **f64)  # (B, 1, d), norms 3, 5
    pred = target + torch.tensor([[[0.0, 3.0, 4.0]], [[1.0, 0.0, 0.0]]], **f64)
    for weight in (torch.ones(1, 1, **f64), torch.full((2, 1), 0.1, **f64)):
        torch.testing.assert_close(operator_error(pred, target, weight),
                                   torch.tensor([5 / 3, 1 / 5], **f64), rtol=1e-14, atol=0)


def test_kernel_error_is_zero_for_the_true_kernel_and_weighted_by_rho():
    truth = torch.tensor([[[1.0, 2.0], [0.0, 1.0]]], **f64)  # (1, Nx, Ny)
    wx = torch.tensor([[0.5, 1.5]], **f64)
    wy = torch.tensor([[1.0, 3.0]], **f64)
    rho = torch.tensor([[2.0, 0.5]], **f64)
    kernel = torch.stack([truth[0], truth[0] + torch.tensor([[1.0, 0.0], [0.0, 2.0]], **f64)])
    E = kernel_error(kernel, truth, wx, wy, rho)
    assert E.shape == (2,) and float(E[0]) == 0.0
    # ||K||^2 = sum_ik wx_i wy_k rho_k K_ik^2, with wy * rho = (2, 1.5)
    norm2 = 0.5 * 2.0 * 1 + 0.5 * 1.5 * 4 + 1.5 * 1.5 * 1
    err2 = 0.5 * 2.0 * 1 + 1.5 * 1.5 * 4
    assert float(E[1]) == pytest.approx(math.sqrt(err2 / norm2), rel=1e-14)
    # rho = 1: the plain relative L2 error on the product mesh
    norm2 = 0.5 * 1.0 * 1 + 0.5 * 3.0 * 4 + 1.5 * 3.0 * 1
    err2 = 0.5 * 1.0 * 1 + 1.5 * 3.0 * 4
    assert float(kernel_error(kernel, truth, wx, wy)[1]) == pytest.approx(math.sqrt(err2 / norm2),
                                                                          rel=1e-14)


def test_radial_density_is_the_mean_one_sum_of_absolute_loadings():
    u = torch.tensor([[[1.0, -1.0], [0.0, 2.0], [-3.0, 0.0], [0.0, 0.0]],
                      [[2.0, 0.0], [2.0, 0.0], [2.0, 0.0], [2.0, 0.0]]], **f64)  # (B, N, d)
    rho = radial_density(u)
    torch.testing.assert_close(rho, torch.tensor([[2.0, 2.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]],
                                                 **f64) / torch.tensor([[7 / 4], [1.0]], **f64))
    torch.testing.assert_close(rho.mean(1), torch.ones(2, **f64))
    # the normalisation does not change E_K
    K, T = torch.rand(2, 1, 4, **f64), torch.rand(2, 1, 4, **f64)
    w, wx = torch.rand(1, 4, **f64), torch.ones(1, 1, **f64)
    torch.testing.assert_close(kernel_error(K, T, wx, w, rho), kernel_error(K, T, wx, w, 5 * rho))


def test_recover_microstructure_reads_the_phases_off_the_row_sums():
    """K = diag(1/b) R has row sums (R w)_i / b_i: the ratio to the reference is 1/b exactly,
    and the high phase (b = 12) is where it falls below 1/sqrt(12 * 3) = 1/6."""
    g = torch.Generator().manual_seed(0)
    reference = torch.rand(6, 5, generator=g, **f64) + 0.1  # positive row sums
    weight = torch.rand(5, generator=g, **f64) + 0.1
    b = torch.tensor([12.0, 3.0, 3.0, 12.0, 12.0, 3.0], **f64)
    is_high, ratio = recover_microstructure(reference / b[:, None], reference, weight)
    torch.testing.assert_close(ratio, 1 / b, rtol=1e-14, atol=0)
    assert is_high.tolist() == [True, False, False, True, True, False]
    # other phase values move the threshold: 1/sqrt(8 * 2) = 1/4
    is_high, _ = recover_microstructure(reference / torch.tensor([5.0, 3.0, 3.0, 5.0, 5.0, 3.0],
                                                                 **f64)[:, None],
                                        reference, weight, high=8.0, low=2.0)
    assert is_high.tolist() == [True, False, False, True, True, False]
