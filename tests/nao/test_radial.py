import numpy as np
import pytest
import torch
from scipy.integrate import quad

from geoattn.nao.radial import (LOADINGS, RadialKernelProblem, cosine_kernel, diverse_kernels,
                                loading, ood1_kernel, polynomial_kernel, response, sine_kernel)


@pytest.mark.parametrize("kernel", [sine_kernel(2.0), ood1_kernel, cosine_kernel(3.0),
                                    polynomial_kernel(4)])
@pytest.mark.parametrize("u", LOADINGS)
def test_response_matches_adaptive_quadrature(kernel, u):
    x = np.array([-13.0, -3.5, -1.0, 0.3, 2.9, 7.7])
    ref = [quad(lambda r: kernel(r) * loading(u, r, xi), 0, 11,
                points=[abs(xi - np.pi), abs(xi + np.pi), 10.0],
                limit=400, epsabs=1e-12, epsrel=1e-11)[0] for xi in x]
    np.testing.assert_allclose(response(kernel, u, x), ref, atol=1e-10)


def test_diverse_kernels_are_the_papers_formulas():
    r = np.array([0.0, 2.5, 9.0, 10.5])
    t = (r - 10) / 10
    np.testing.assert_allclose(cosine_kernel(2.0)(r), [5.0, 7.5**2 / 20 * np.cos(5.0), 0.05 * np.cos(18.0), 0])
    np.testing.assert_allclose(polynomial_kernel(2)(r), np.exp(-0.1 * r) * (3 * t**2 - 1) / 2 * (r <= 10))
    np.testing.assert_allclose(polynomial_kernel(3)(r), np.exp(-0.1 * r) * (5 * t**3 - 3 * t) / 2 * (r <= 10))
    assert len(diverse_kernels()) == 21


def test_response_of_a_smooth_loading_is_analytic():
    """u = cos on all of R: g = 2 cos(x)(cos r - 1), so f(x) = 2 cos(x) int_0^11 gamma(r)(cos r - 1) dr."""
    eta = 3.0
    c = quad(lambda r: np.exp(-eta * r) * np.sin(6 * r) * (np.cos(r) - 1), 0, 11, limit=200)[0]
    x = np.linspace(-5, 5, 7)
    np.testing.assert_allclose(response(sine_kernel(eta), np.cos, x), 2 * np.cos(x) * c, atol=1e-12)


def test_samples_are_strided_pairs_and_the_model_riemann_sum_approximates_f():
    prob = RadialKernelProblem(dx=0.05)
    s = prob.samples(sine_kernel(5.0), d=100)
    S, N, d = s.u.shape
    assert (N, d) == (220, 100) and s.f.shape == (S, 1, d) and S == len(prob.x) // 50
    # the r-grid r_k = k dx with weights dx, and the one-point f-mesh (coordinate 0, weight 1)
    assert s.mesh.pos.shape == (1, N, 1) and s.mesh.weight.shape == (1, N)
    torch.testing.assert_close(s.mesh.pos[0, :, 0], 0.05 * torch.arange(1, N + 1, dtype=s.u.dtype))
    assert bool((s.mesh.weight == 0.05).all())
    assert s.mesh_query.pos.tolist() == [[[0.0]]] and s.mesh_query.weight.tolist() == [[1.0]]
    # the true kernel in the model's quadrature form reproduces f to Riemann-sum accuracy
    pred = (s.mesh.weight[0] * s.kernel) @ s.u  # (S, d)
    err = (pred - s.f[:, 0]).norm() / s.f.norm()
    assert err < 0.1  # about 7.5 % at dx = 0.05: the jumps of u make the Riemann sum first order
    fine = RadialKernelProblem(dx=0.0125).samples(sine_kernel(5.0), d=100)
    err_fine = ((fine.mesh.weight[0] * fine.kernel) @ fine.u - fine.f[:, 0]).norm() / fine.f.norm()
    assert err_fine < err / 2  # first order (jumps of u): the error falls with dx


def test_each_feature_holds_one_loading_near_one_point_in_every_sample():
    """The authors' layout at the paper's dx = 0.0125, d = 302: 2265 points per loading (|x| up
    to the last grid point past which f vanishes), 15 samples of 151 + 151 pairs that use every
    pair once; feature j of every sample is loading 1 (j < 151) or 2 at x_j + s dx, s < 15."""
    prob = RadialKernelProblem(dx=0.0125)
    assert len(prob.x) == 2265 and prob.x[-1] > np.pi + prob.delta > prob.x[-2]
    n, P = 2, len(prob.x)
    s = prob.samples(sine_kernel(5.0), 302)
    assert s.u.shape == (15, 880, 302)
    idx = prob.sample_pairs(302)
    g, f = prob.pairs(sine_kernel(5.0))
    torch.testing.assert_close(s.u, torch.as_tensor(g[:, idx]).permute(1, 0, 2), rtol=0, atol=0)
    torch.testing.assert_close(s.f[:, 0], torch.as_tensor(f[idx]), rtol=0, atol=0)
    assert sorted(idx.ravel().tolist()) == list(range(n * P))  # every pair once
    loading_of, point_of = idx // P, idx % P
    assert (loading_of[:, :151] == 0).all() and (loading_of[:, 151:] == 1).all()
    assert (point_of - point_of[0] == np.arange(15)[:, None]).all()
    # an odd d: the first loading takes one feature more
    odd = prob.samples(sine_kernel(5.0), 301)
    assert odd.u.shape[2] == 301 and odd.u.shape[0] == P // 151


def test_fixed_x_spacing_gives_the_same_features_on_every_r_grid():
    """With x_spacing fixed, sample s has the same points x_j (so the same responses) at every
    resolution, and its loadings agree wherever the r-grids share nodes."""
    coarse = RadialKernelProblem(dx=0.1, x_spacing=0.05).samples(sine_kernel(3.0), 40)
    fine = RadialKernelProblem(dx=0.05, x_spacing=0.05).samples(sine_kernel(3.0), 40)
    assert coarse.u.shape[1] * 2 == fine.u.shape[1] and coarse.u.shape[0] == fine.u.shape[0]
    torch.testing.assert_close(coarse.f, fine.f, rtol=0, atol=0)
    torch.testing.assert_close(coarse.u, fine.u[:, 1::2], rtol=0, atol=1e-15)
    default = RadialKernelProblem(dx=0.1).samples(sine_kernel(3.0), 40)  # x-grid follows dx
    assert default.f.shape[0] != fine.f.shape[0]
