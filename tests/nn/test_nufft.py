import math
import sys

import pytest
import torch

from geoattn.nn import nufft, spectral
from geoattn.nn.spectral import (PatchSpectralIntegral, SpectralIntegral, box_frame,
                                 fourier_coefficients, fourier_evaluate, fourier_modes, patch_frame)
from geoattn.optional import MissingDependencyError

# relative error (in norm) of finufft against the dense transforms, per dtype
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
CASES = [(1, (4,)), (2, (3, 2)), (3, (2, 1, 3))]


def rel(a, b):
    return ((a - b).abs().norm() / b.abs().norm()).item()


def _sample(dim, dtype, n=400, graphs=3, channels=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, dim, generator=gen, dtype=torch.float64).to(dtype)
    batch = torch.randint(0, graphs, (n,), generator=gen).sort().values
    weight = (torch.rand(n, generator=gen, dtype=torch.float64) / n).to(dtype)
    x = torch.randn(n, channels, generator=gen, dtype=torch.float64).to(dtype)
    return x, pos, weight, batch


@pytest.fixture
def finufft():
    return pytest.importorskip("finufft")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim,modes", CASES)
def test_coefficients_equal_dense_with_gradients(finufft, dim, modes, dtype):
    x, pos, weight, batch = _sample(dim, dtype)
    frame, m = box_frame(pos, batch), fourier_modes(modes, dim)
    x.requires_grad_()
    out = {b: fourier_coefficients(x, weight, frame, m, backend=b) for b in ("dense", "finufft")}
    assert out["finufft"].dtype == out["dense"].dtype
    assert rel(out["finufft"], out["dense"]) < TOL[dtype]
    gen = torch.Generator().manual_seed(1)
    probe = torch.randn(out["dense"].shape, dtype=out["dense"].dtype, generator=gen)
    grads = {b: torch.autograd.grad((c * probe).real.sum(), x)[0] for b, c in out.items()}
    assert rel(grads["finufft"], grads["dense"]) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim,modes", CASES)
def test_evaluation_equals_dense_with_gradients(finufft, dim, modes, dtype):
    _, pos, _, batch = _sample(dim, dtype)
    frame, m = box_frame(pos, batch), fourier_modes(modes, dim)
    gen = torch.Generator().manual_seed(2)
    coeff = torch.randn(3, len(m), 4, dtype=dtype.to_complex(), generator=gen).requires_grad_()
    out = {b: fourier_evaluate(coeff, frame, m, backend=b) for b in ("dense", "finufft")}
    assert out["finufft"].dtype == dtype
    assert rel(out["finufft"], out["dense"]) < TOL[dtype]
    probe = torch.randn(out["dense"].shape, dtype=dtype, generator=gen)
    grads = {b: torch.autograd.grad((v * probe).sum(), coeff)[0] for b, v in out.items()}
    assert rel(grads["finufft"], grads["dense"]) < TOL[dtype]


def test_transforms_are_adjoint(finufft):
    """<type1(c), f> = <c, type2(f)> with opposite signs: the pair the backward passes rely on."""
    gen = torch.Generator().manual_seed(3)
    points = 2 * math.pi * torch.rand(50, 2, dtype=torch.float64, generator=gen) - math.pi
    c = torch.randn(2, 50, dtype=torch.complex128, generator=gen)
    f = torch.randn(2, 5, 3, dtype=torch.complex128, generator=gen)
    lhs = (nufft.nufft_type1(points, c, (5, 3), isign=-1).conj() * f).sum()
    rhs = (c.conj() * nufft.nufft_type2(points, f, isign=1)).sum()
    assert abs(lhs - rhs) < 1e-10 * abs(lhs)


def test_points_requiring_grad_are_refused(finufft):
    points = torch.zeros(4, 1, requires_grad=True)
    with pytest.raises(ValueError, match="no gradient in the points"):
        nufft.nufft_type1(points, torch.ones(1, 4, dtype=torch.complex64), (3,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spectral_integral_backends_agree(finufft, dtype):
    x, pos, weight, batch = _sample(2, dtype, channels=3)
    torch.manual_seed(0)
    dense = SpectralIntegral(3, 5, (3, 2), 2, padding=0.25, backend="dense").to(dtype)
    fast = SpectralIntegral(3, 5, (3, 2), 2, padding=0.25, backend="finufft").to(dtype)
    fast.load_state_dict(dense.state_dict())
    assert "backend='finufft'" in repr(fast)
    query = torch.rand(60, 2, dtype=dtype) * 1.4 - 0.2  # partly outside the box: periodic extension
    batch_query = torch.arange(60) // 20
    layers = (dense, fast)
    outs = [layer(x, pos, weight, batch, pos_query=query, batch_query=batch_query) for layer in layers]
    assert rel(outs[1], outs[0]) < TOL[dtype]
    grads = [torch.autograd.grad(o.square().sum(), layer.mix.weight)[0] for o, layer in zip(outs, layers)]
    assert rel(grads[1], grads[0]) < TOL[dtype]


def test_patch_spectral_integral_backends_agree(finufft):
    x, pos, weight, _ = _sample(2, torch.float64, channels=2)
    patch = (pos[:, 0] > 0.5).long() + 2 * (pos[:, 1] > 0.5).long()
    torch.manual_seed(0)
    dense = PatchSpectralIntegral(2, 3, 2, 2, backend="dense").double()
    fast = PatchSpectralIntegral(2, 3, 2, 2, backend="finufft").double()
    fast.load_state_dict(dense.state_dict())
    outs = [layer(x, pos, weight, patch=patch, patch_length=0.5) for layer in (dense, fast)]
    assert rel(outs[1], outs[0]) < TOL[torch.float64]


def test_auto_follows_the_threshold(finufft, monkeypatch):
    x, pos, weight, batch = _sample(2, torch.float64)
    frame, m = box_frame(pos, batch), fourier_modes(2, 2)
    dense = fourier_coefficients(x, weight, frame, m, backend="dense")
    assert torch.equal(fourier_coefficients(x, weight, frame, m), dense)  # small: dense, exactly
    monkeypatch.setattr(spectral, "NUFFT_MIN_WORK", 1)
    monkeypatch.setattr(spectral, "NUFFT_MIN_MODES", len(m))  # no more modes than it: dense
    assert torch.equal(fourier_coefficients(x, weight, frame, m), dense)
    monkeypatch.setattr(spectral, "NUFFT_MIN_MODES", len(m) - 1)
    auto = fourier_coefficients(x, weight, frame, m)
    assert not torch.equal(auto, dense) and rel(auto, dense) < 1e-10
    # positions that need gradients stay dense
    pos_grad = pos.clone().requires_grad_()
    assert torch.equal(fourier_coefficients(x, weight, box_frame(pos_grad, batch), m), dense)


def test_empty_segments_and_bad_arguments(finufft):
    x, pos, weight, _ = _sample(1, torch.float64, n=30)
    patch = (pos[:, 0] > 0.5).long() * 2  # patches 0 and 2, patch 1 empty
    frame = patch_frame(pos, weight, patch, 0.5, num_patches=3)
    m = fourier_modes(2, 1)
    coeff = fourier_coefficients(x, weight, frame, m, backend="finufft")
    assert torch.equal(coeff[1], torch.zeros_like(coeff[1]))
    assert rel(coeff, fourier_coefficients(x, weight, frame, m, backend="dense")) < 1e-10
    with pytest.raises(ValueError, match="full mode box"):
        fourier_coefficients(x, weight, frame, m[1:], backend="finufft")
    with pytest.raises(ValueError, match="backend must be one of"):
        SpectralIntegral(1, 1, 2, 1, backend="fft")


def test_missing_finufft_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "finufft", None)  # what an uninstalled package looks like
    x, pos, weight, _ = _sample(1, torch.float64, n=20)
    with pytest.raises(MissingDependencyError, match=r"geoattn\[nufft\]"):
        fourier_coefficients(x, weight, box_frame(pos), fourier_modes(2, 1), backend="finufft")


def test_auto_without_finufft_is_dense(monkeypatch):
    monkeypatch.setitem(sys.modules, "finufft", None)
    monkeypatch.setattr(spectral, "NUFFT_MIN_WORK", 1)
    monkeypatch.setattr(spectral, "NUFFT_MIN_MODES", 0)
    x, pos, weight, batch = _sample(2, torch.float64)
    frame, m = box_frame(pos, batch), fourier_modes(2, 2)
    assert torch.equal(fourier_coefficients(x, weight, frame, m),
                       fourier_coefficients(x, weight, frame, m, backend="dense"))
