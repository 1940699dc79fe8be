"""Periodic domains: declared periods in the spectral layers and periodic quadrature weights.

A torus is stored without its closing nodes (x_j = j/n, j < n). With ``period=`` the spectral
layers work on the torus itself; with ``period=None`` (the bounding box, one grid step short of the
period) the same checks fail, which the controls assert.
"""

import math

import numpy as np
import pytest
import torch

from geoattn.errors import ConfigError, MeshError
from geoattn.mesh import Mesh, periodic_weights
from geoattn.models import MeshFNO, build_model
from geoattn.nn.spectral import (PatchSpectralIntegral, SpectralIntegral, SpectralSmoothing,
                                 bounding_box, box_frame, fourier_coefficients, fourier_evaluate)
from geoattn.testing import assert_convergence_rate

#: float64 rounding of a quadrature and a series over at most 128^2 nodes and (2K+1)^2 modes,
#: relative: a random walk of N roundings is about sqrt(N) eps ~ 3e-14, measured 1e-15 to 1e-14;
#: the bound leaves a margin of 10 over the worst case
ROUNDING = 3e-13


def torus_grid(n, period=(1.0, 1.0), origin=(0.0, 0.0)):
    """The uniform grid x_j = a + j L / n, j < n, per axis (no closing nodes), ``[n^2, 2]``."""
    axes = [a + torch.arange(n, dtype=torch.float64) * p / n for p, a in zip(period, origin)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 2)


def deformed_grid(n):
    """A smooth periodic deformation of the uniform grid: not a tensor grid, so the periodic
    Voronoi rule weights it."""
    s = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    s1, s2 = torch.meshgrid(s, s, indexing="ij")
    x1 = s1 + 0.08 * torch.sin(2 * math.pi * s2) / (2 * math.pi)
    x2 = s2 + 0.08 * torch.sin(2 * math.pi * s1) / (2 * math.pi)
    return torch.stack([x1.ravel() % 1.0, x2.ravel() % 1.0], 1)


def weights(pos, period=1.0):
    return torch.as_tensor(periodic_weights(pos.numpy(), period))


def band_limited(pos, period=(1.0, 1.0)):
    """Two channels of modes |m_k| <= 3 on the torus."""
    x, y = 2 * math.pi * pos[:, 0] / period[0], 2 * math.pi * pos[:, 1] / period[1]
    return torch.stack([1 + torch.sin(x) + 0.5 * torch.cos(2 * x - 3 * y), torch.cos(x + y) * torch.sin(2 * y)], 1)


def smooth(pos):
    """Smooth periodic, not band-limited (analytic: coefficients decay geometrically)."""
    x, y = 2 * math.pi * pos[:, 0], 2 * math.pi * pos[:, 1]
    return torch.stack([torch.exp(torch.sin(x) + 0.5 * torch.cos(x + y)), torch.cos(y) * torch.exp(torch.cos(x))], 1)


def relative(a, b):
    return float((a - b).norm() / b.norm())


# --- periodic quadrature weights ---------------------------------------------------------------

def test_periodic_weights_uniform_grid_is_exact_for_trigonometric_polynomials():
    pos = torus_grid(16, (1.0, 2.0)).numpy()
    w = periodic_weights(pos, (1.0, 2.0))
    np.testing.assert_allclose(w, 2.0 / 256, rtol=1e-15)  # |T| / N exactly
    # cos^2 2pi(7x + 3y/2) has modes up to 14 < 16 in x: integral |T| / 2, exact to rounding (1e-16 per term)
    f = np.cos(2 * math.pi * (7 * pos[:, 0] + 3 * pos[:, 1] / 2)) ** 2
    assert abs(w @ f - 1.0) < 1e-13
    # mode 16 aliases to 0 on 16 nodes: the rule's degree is exactly below n
    assert abs(w @ np.cos(2 * math.pi * 16 * pos[:, 0]) - 2.0) < 1e-13


def test_periodic_voronoi_weights_tile_the_torus_and_converge_at_second_order():
    rng = np.random.default_rng(1)
    cloud = rng.random((300, 2)) * [1.0, 2.0]
    w = periodic_weights(cloud, (1.0, 2.0))
    assert (w > 0).all() and abs(w.sum() - 2.0) < 1e-12  # the cells tile the torus (rounding 1e-15)
    # translation modulo the period changes nothing (the cells of the same points)
    shifted = (cloud + [0.37, 1.21]) % [1.0, 2.0]
    np.testing.assert_allclose(periodic_weights(shifted, (1.0, 2.0)), w, rtol=1e-9, atol=1e-14)
    # 3-D: cells tile the box torus
    cube = rng.random((200, 3)) * [1.0, 2.0, 0.5]
    assert abs(periodic_weights(cube, [1.0, 2.0, 0.5]).sum() - 1.0) < 1e-12
    # on the smoothly deformed grid: second order, measured 1.97
    f = lambda p: np.exp(np.sin(2 * math.pi * p[:, 0]) + 0.5 * np.cos(2 * math.pi * (p[:, 0] + p[:, 1])))  # noqa: E731
    exact = periodic_weights(torus_grid(64).numpy(), 1.0) @ f(torus_grid(64).numpy())  # spectral, to 1e-16
    ns = [16, 32, 64]
    errors = [abs(periodic_weights(deformed_grid(n).numpy(), 1.0) @ f(deformed_grid(n).numpy()) - exact) for n in ns]
    assert_convergence_rate([1 / n for n in ns], errors, expected=2.0, tol=0.3)


def test_periodic_weights_refuse_points_off_the_torus_and_duplicates():
    with pytest.raises(MeshError, match="outside the torus"):
        periodic_weights(np.array([[0.1, 0.2], [1.0, 0.5], [0.3, 0.3]]), 1.0)
    with pytest.raises(MeshError, match="more than once"):
        periodic_weights(np.array([[0.1, 0.2], [0.5, 0.5], [0.1, 0.2], [0.7, 0.9]]), 1.0)
    with pytest.raises(ValueError, match="period"):
        periodic_weights(np.array([[0.1, 0.2]]), -1.0)
    # an origin shifts the torus
    w = periodic_weights(torus_grid(8, origin=(-0.5, -0.5)).numpy(), 1.0, origin=-0.5)
    np.testing.assert_allclose(w, 1 / 64, rtol=1e-15)


# --- the spectral layers on a torus --------------------------------------------------------------

def _layer(period, **kw):
    torch.manual_seed(0)
    return SpectralIntegral(2, 3, 4, 2, period=period, **kw).double()


@torch.no_grad()
def test_spectral_integral_agrees_between_grids_of_a_torus():
    """Band-limited input: the coefficients are exact on every uniform grid, so 32^2, 64^2 and
    128^2 agree to rounding at the same output points; the bounding box (period=None) differs
    by a grid step per resolution, and the outputs by percents (measured 12.6 % at 32^2)."""
    query = torch.rand(50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for period, close in ((1.0, True), (None, False)):
        layer = _layer(period)
        out = {n: layer(band_limited(torus_grid(n)), torus_grid(n), weights(torus_grid(n)), pos_query=query)
               for n in (32, 64, 128)}
        diffs = [relative(out[n], out[128]) for n in (32, 64)]
        if close:
            assert max(diffs) < ROUNDING, diffs
        else:  # the failing control
            assert min(diffs) > 0.02, diffs


@torch.no_grad()
def test_spectral_integral_agrees_on_a_rectangular_torus_and_any_origin():
    period = (1.0, 2.5)
    layer = _layer(period)
    coarse, fine = torus_grid(24, period), torus_grid(48, period)
    out = layer(band_limited(coarse, period), coarse, weights(coarse, period))
    ref = layer(band_limited(fine, period), fine, weights(fine, period), pos_query=coarse)
    assert relative(out, ref) < ROUNDING
    # the torus [a, a + L): the same periodic function on shifted nodes, the same output there
    shifted = torus_grid(24, period, origin=(-0.3, 1.1))
    moved = layer(band_limited(shifted, period), shifted, weights(coarse, period))
    assert relative(moved, layer(band_limited(coarse, period), coarse, weights(coarse, period),
                                 pos_query=shifted)) < ROUNDING


@torch.no_grad()
def test_spectral_integral_converges_spectrally_on_uniform_grids():
    """Smooth periodic input: the trapezoid rule's error (the aliasing of modes n - K) falls
    geometrically with n; measured 8e-3, 9e-7, 1e-11 at n = 8, 12, 16 against 256^2."""
    query = torus_grid(16)
    for period in (1.0, None):
        layer = _layer(period)
        ref = layer(smooth(torus_grid(256)), torus_grid(256), weights(torus_grid(256)), pos_query=query)
        errors = [relative(layer(smooth(torus_grid(n)), torus_grid(n), weights(torus_grid(n)), pos_query=query), ref)
                  for n in (8, 12, 16)]
        if period is not None:
            # each 4 more nodes per axis gain at least 1e3 (measured 1e4 to 6e4), faster than any power
            assert errors[1] < 1e-3 * errors[0] and errors[2] < 1e-3 * errors[1], errors
        else:  # the failing control: first order in the box error, measured 0.9, 0.5, 0.4
            assert errors[2] > 0.1, errors


@torch.no_grad()
def test_spectral_integral_converges_at_the_voronoi_order_on_a_deformed_torus_grid():
    """Irregular periodic points with periodic Voronoi weights: second order (measured 1.97),
    against the uniform 128^2 grid (exact to 1e-14 for this input, see the test above)."""
    query, ns = torus_grid(16), [16, 32, 64]
    layer = _layer(1.0)
    ref = layer(smooth(torus_grid(128)), torus_grid(128), weights(torus_grid(128)), pos_query=query)
    errors = [relative(layer(smooth(deformed_grid(n)), deformed_grid(n), weights(deformed_grid(n)),
                             pos_query=query), ref) for n in ns]
    assert_convergence_rate([1 / n for n in ns], errors, expected=2.0, tol=0.3)
    # the failing control: the bounding box of the same points misses the torus by up to a grid
    # step, an error far above the quadrature's (measured 0.19, 0.027, 0.0021: 135 times the
    # periodic error at 64^2; asserted 30 times)
    box = _layer(None)
    control = relative(box(smooth(deformed_grid(64)), deformed_grid(64), weights(deformed_grid(64)),
                           pos_query=query), ref)
    assert control > 30 * errors[-1], (control, errors)


@torch.no_grad()
def test_smoothing_is_the_multiplier_on_a_torus():
    """Remark 21 on the torus [0, 1) x [0, 2): (1 + eps |2 pi m / L|^2)^(-alpha) on every retained
    mode, to rounding; the bounding box gives another multiplier (off by 7 % here)."""
    period, eps, alpha = (1.0, 2.0), 1e-3, 1.001
    pos = torus_grid(32, period)
    x, y = 2 * math.pi * pos[:, 0] / period[0], 2 * math.pi * pos[:, 1] / period[1]
    modes = [(1, 0), (2, -3), (4, 4), (0, 1)]
    z = torch.stack([torch.cos(m * x + k * y + 0.3) for m, k in modes], 1)  # one mode per channel
    factor = torch.tensor([(1 + eps * ((2 * math.pi * m / period[0]) ** 2 + (2 * math.pi * k / period[1]) ** 2))
                           ** -alpha for m, k in modes], dtype=torch.float64)
    expected = z * factor
    smoothed = SpectralSmoothing(4, 2, eps=eps, alpha=alpha, period=period).double()(z, pos, weights(pos, period))
    assert relative(smoothed, expected) < ROUNDING
    box = SpectralSmoothing(4, 2, eps=eps, alpha=alpha).double()(z, pos, weights(pos, period))
    assert relative(box, expected) > 0.02  # the failing control


def test_period_none_is_the_bounding_box_bit_for_bit():
    torch.manual_seed(3)
    pos, w, x = torch.rand(40, 2), torch.rand(40), torch.randn(40, 2)
    layer = SpectralIntegral(2, 3, 2, 2, padding=0.25, period=None, backend="dense")
    lo, hi = bounding_box(pos, torch.zeros(40, dtype=torch.long), 1, w)
    frame = box_frame(pos, box=(lo, lo + 1.25 * (hi - lo)))
    coeff = layer.mix(fourier_coefficients(x, w, frame, layer.mode_index, "dense"))
    assert torch.equal(layer(x, pos, w), fourier_evaluate(coeff, frame, layer.mode_index, "dense"))


def test_period_arguments_are_checked():
    with pytest.raises(ValueError, match="no boundary to pad"):
        SpectralIntegral(1, 1, 2, 2, padding=0.25, period=1.0)
    with pytest.raises(ValueError, match="period"):
        SpectralIntegral(1, 1, 2, 2, period=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="period"):
        SpectralSmoothing(2, 2, period=0.0)
    with pytest.raises(ValueError, match="own frame"):
        PatchSpectralIntegral(1, 1, 2, 2, period=1.0)
    assert SpectralIntegral(1, 1, 2, 2, period=1.0).period == (1.0, 1.0)
    assert "period=(1.0, 2.0)" in repr(SpectralIntegral(1, 1, 2, 2, period=(1, 2)))
    assert "period=(1.0, 1.0)" in repr(SpectralSmoothing(2, 2, period=1.0))
    assert "period" not in repr(SpectralIntegral(1, 1, 2, 2))


# --- MeshFNO on a torus ---------------------------------------------------------------------------

@torch.no_grad()
def test_mesh_fno_on_a_torus_agrees_between_grids_and_rebuilds_from_hparams():
    """With a period the lift sees (cos, sin) of the coordinates, every hidden function is smooth
    on the torus, and the model agrees between 32^2, 64^2 and 128^2 to rounding; without, the
    padded bounding box and the coordinate seam leave percents (measured 3.8 % and 1.3 %)."""
    for period in (1.0, None):
        torch.manual_seed(0)
        model = MeshFNO(2, 1, width=12, depth=2, modes=3, period=period).double().eval()
        out = {n: model(smooth(torus_grid(n)), Mesh(torus_grid(n), weights(torus_grid(n)))).reshape(n, n)
               for n in (32, 64, 128)}
        diffs = [relative(out[n], out[128][:: 128 // n, :: 128 // n]) for n in (32, 64)]
        if period is not None:
            assert max(diffs) < ROUNDING, diffs
        else:  # the failing control
            assert min(diffs) > 0.005, diffs
    assert model.hparams["period"] is None and model.spectral[0].padding == 0.25
    torch.manual_seed(0)
    model = MeshFNO(2, 1, width=12, depth=2, modes=3, period=1.0).double().eval()
    assert model.hparams["period"] == 1.0 and all(s.period == (1.0, 1.0) and s.padding == 0.0
                                                  for s in model.spectral)
    rebuilt = build_model("mesh_fno", **model.hparams).double().eval()
    rebuilt.load_state_dict(model.state_dict())
    pos = torus_grid(16)
    assert torch.equal(rebuilt(smooth(pos), Mesh(pos, weights(pos))), model(smooth(pos), Mesh(pos, weights(pos))))
    with pytest.raises(ConfigError, match="no boundary to pad"):
        MeshFNO(2, 1, period=1.0, padding=0.25)
