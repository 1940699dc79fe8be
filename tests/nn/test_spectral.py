import math

import pytest
import torch

from geoattn.mesh import families, from_meshio, partition
from geoattn.nn.spectral import (PatchSpectralIntegral, SpectralIntegral, SpectralSmoothing,
                                 box_frame, dense_basis, fourier_coefficients, fourier_evaluate,
                                 fourier_modes, patch_frame, resolved_modes)
from geoattn.testing import (assert_batch_independent, assert_convergence_rate,
                             assert_duplication_invariant, assert_padding_invariant,
                             assert_permutation_equivariant, refinement_samples)

# u(x, y) = 1 + cos 2pi(x + 2y) + 0.5 sin 2pi(3x - y): its Fourier coefficients on [0, 1]^2
TRIG = {(0, 0): 1.0, (1, 2): 0.5, (-1, -2): 0.5, (3, -1): 0.25 / 1j, (-3, 1): -0.25 / 1j}


def trig(pos):
    x, y = pos[:, 0], pos[:, 1]
    u = 1 + torch.cos(2 * math.pi * (x + 2 * y)) + 0.5 * torch.sin(2 * math.pi * (3 * x - y))
    return u[:, None]


def test_modes_symmetric_order():
    m = fourier_modes((2, 1), 2)
    assert m.shape == (15, 2)
    assert torch.equal(m.flip(0), -m)
    with pytest.raises(ValueError, match="modes"):
        fourier_modes((2, 1), 3)


def test_coefficients_of_trig_polynomial_converge_at_order_two():
    modes = fourier_modes(3, 2)
    exact = torch.tensor([TRIG.get(tuple(m), 0.0) for m in modes.tolist()], dtype=torch.complex128)
    errors, hs = [], []
    for u, pos, w, h in refinement_samples(families.unit_square(6, "irregular", seed=3), [1, 2, 3], trig):
        coeff = fourier_coefficients(u, w, box_frame(pos), modes)[0, :, 0]
        errors.append((coeff - exact).abs().max().item())
        hs.append(h)
    assert errors[-1] < 3e-3
    assert_convergence_rate(hs, errors, expected=2.0, tol=0.25)


def _slow_spectral(layer, x, pos, w, pos_query):
    """Direct double sum of the truncated Fourier integral operator on the bounding box."""
    lo, hi = pos.min(0).values, pos.max(0).values
    side = hi - lo
    r = torch.view_as_complex(layer.mix.weight.detach())  # (M, C_in, C_out)
    out = torch.zeros(len(pos_query), r.shape[-1], dtype=torch.float64)
    for mi, m in enumerate(layer.mode_index.tolist()):
        m = torch.tensor(m, dtype=torch.float64)
        coeff = torch.zeros(x.shape[1], dtype=torch.complex128)
        for i in range(len(pos)):
            coeff += w[i] * x[i] * torch.exp(-2j * math.pi * torch.dot(m, (pos[i] - lo) / side))
        coeff = coeff / side.prod()
        for n in range(len(pos_query)):
            out[n] += (coeff @ r[mi] * torch.exp(2j * math.pi * torch.dot(m, (pos_query[n] - lo) / side))).real
    return out


def _exponentials(xi, modes):
    """e^{2 pi i m . xi} [N, M], complex128."""
    return torch.exp(2j * math.pi * (xi.double() @ modes.double().t()))


@pytest.mark.parametrize("order", ["symmetric", "shuffled"])
def test_dense_transforms_equal_the_sums_over_every_mode(order):
    # the symmetric order transforms the mode 0 and half of the others (u(-m) = conj u(m) for
    # real u); any other order sums over all modes: both are the complex sums over every mode
    torch.manual_seed(0)
    modes = fourier_modes((2, 3), 2)
    if order == "shuffled":
        modes = modes[torch.randperm(len(modes))]
    pos, w = torch.rand(40, 2, dtype=torch.float64), torch.rand(40, dtype=torch.float64)
    x = torch.randn(40, 3, dtype=torch.float64)
    batch = torch.tensor([0] * 25 + [1] * 15)
    frame = box_frame(pos, batch)
    e = _exponentials(frame.xi, modes)  # (N, M)
    coeff = fourier_coefficients(x, w, frame, modes, "dense")
    for g in range(2):
        nodes = batch == g
        expected = (e[nodes].conj().t() @ (w[nodes, None] * x[nodes]).to(e.dtype)) / frame.volume[g]
        torch.testing.assert_close(coeff[g], expected, atol=1e-13, rtol=0)
    # any coefficients, not only those of a real function: Re sum_m c(m) e_m
    c = torch.randn(2, len(modes), 3, dtype=torch.complex128)
    out = fourier_evaluate(c, frame, modes, "dense")
    expected = torch.einsum("nm,nmc->nc", e, c[batch]).real
    torch.testing.assert_close(out, expected, atol=1e-13, rtol=0)
    # a basis computed once gives the same transforms; one of another shape is refused
    basis = dense_basis(frame.xi, modes)
    assert basis.shape == (40, len(modes) if order == "symmetric" else 2 * len(modes))
    assert torch.equal(fourier_coefficients(x, w, frame, modes, "dense", basis), coeff)
    assert torch.equal(fourier_evaluate(c, frame, modes, "dense", basis), out)
    with pytest.raises(ValueError, match="dense_basis"):
        fourier_evaluate(c, frame, modes, "dense", basis[:, :-1])


def test_layers_share_a_basis_of_the_same_modes_and_padding():
    torch.manual_seed(0)
    first, second = SpectralIntegral(2, 3, 2, 2, padding=0.5), SpectralIntegral(2, 3, 2, 2, padding=0.5)
    pos, w, x = torch.rand(30, 2), torch.rand(30), torch.randn(30, 2)
    batch = torch.tensor([0] * 10 + [1] * 20)
    basis = first.basis(pos, w, batch)
    assert torch.equal(second(x, pos, w, batch, basis=basis), second(x, pos, w, batch))
    query = torch.rand(5, 2)
    torch.testing.assert_close(second(x, pos, w, batch, basis=basis, pos_query=query,
                                      batch_query=torch.tensor([0, 0, 1, 1, 1])),
                               second(x, pos, w, batch, pos_query=query,
                                      batch_query=torch.tensor([0, 0, 1, 1, 1])))
    for other in (SpectralIntegral(2, 3, 2, 2, padding=0.25), SpectralIntegral(2, 3, 1, 2, padding=0.5)):
        with pytest.raises(ValueError, match="other modes or padding"):
            other(x, pos, w, batch, basis=basis)
    periodic = SpectralIntegral(2, 3, 2, 2, period=1.0)
    with pytest.raises(ValueError, match="another period"):
        periodic(x, pos, w, batch, basis=SpectralIntegral(2, 3, 2, 2).basis(pos, w, batch))
    with pytest.raises(ValueError, match="another period"):
        SpectralIntegral(2, 3, 2, 2, period=2.0)(x, pos, w, batch, basis=periodic.basis(pos, w, batch))


def test_spectral_integral_equals_direct_sum_and_any_output_points():
    layer = SpectralIntegral(2, 3, modes=(2, 1), dim=2).double()
    pos = torch.rand(30, 2, dtype=torch.float64) * torch.tensor([2.0, 0.5], dtype=torch.float64)
    x, w = torch.randn(30, 2, dtype=torch.float64), torch.rand(30, dtype=torch.float64)
    pos_query = torch.rand(7, 2, dtype=torch.float64)
    expected = _slow_spectral(layer, x, pos, w, pos_query)
    assert torch.allclose(layer(x, pos, w, pos_query=pos_query), expected, atol=1e-12)
    assert torch.allclose(layer(x, pos, w), _slow_spectral(layer, x, pos, w, pos), atol=1e-12)
    # batched: two graphs with their own boxes, outputs on a second point set per graph
    pos2 = torch.rand(20, 2, dtype=torch.float64) + 3.0
    x2, w2 = torch.randn(20, 2, dtype=torch.float64), torch.rand(20, dtype=torch.float64)
    batch = torch.cat([torch.zeros(30), torch.ones(20)]).long()
    batch_query = torch.tensor([0] * 7 + [1] * 4)
    out = layer(torch.cat([x, x2]), torch.cat([pos, pos2]), torch.cat([w, w2]), batch,
                pos_query=torch.cat([pos_query, pos2[:4]]), batch_query=batch_query)
    assert torch.allclose(out[:7], expected, atol=1e-12)
    assert torch.allclose(out[7:], _slow_spectral(layer, x2, pos2, w2, pos2[:4]), atol=1e-12)
    with pytest.raises(ValueError, match="give both batch and batch_query"):
        layer(torch.cat([x, x2]), torch.cat([pos, pos2]), torch.cat([w, w2]), batch,
              pos_query=pos_query)


def test_identity_weights_reproduce_trig_polynomial_at_new_points():
    layer = SpectralIntegral(1, 1, modes=3, dim=2).double()
    with torch.no_grad():
        layer.mix.weight.zero_()
        layer.mix.weight[..., 0] = 1.0  # R(m) = 1: projection on the modes
    probe = torch.rand(50, 2, dtype=torch.float64)
    errors = []
    for times in (2, 3):  # the error is the quadrature error of the 49 coefficients: O(h^2)
        data = from_meshio(families.refine(families.unit_square(8, "irregular"), times), dtype=torch.float64)
        out = layer(trig(data.pos), data.pos, data.weight, pos_query=probe)
        errors.append((out - trig(probe)).abs().max().item())
    assert errors[1] < 1e-2 and errors[1] < errors[0] / 3


def test_smoothing_multiplies_modes_analytically():
    layer = SpectralSmoothing(modes=3, dim=2, eps=1e-2, alpha=1.5)

    def damp(m):
        return (1 + 1e-2 * (2 * math.pi) ** 2 * (m[0] ** 2 + m[1] ** 2)) ** -1.5

    errors = []
    for level in (2, 3):
        data = from_meshio(families.refine(families.unit_square(8, "irregular"), level), dtype=torch.float64)
        x, y = data.pos[:, 0], data.pos[:, 1]
        exact = (1 + damp((1, 2)) * torch.cos(2 * math.pi * (x + 2 * y))
                 + 0.5 * damp((3, 1)) * torch.sin(2 * math.pi * (3 * x - y)))
        out = layer(trig(data.pos), data.pos, data.weight)
        errors.append((out[:, 0] - exact).abs().max().item())
    # the error is two quadrature errors of the 49 coefficients (the identity's and the damped
    # part's), O(h^2): halving h divides it by 4, and a bound of 1/2 leaves a factor 2. (The
    # multiplier itself is checked to rounding on a periodic grid in test_periodic.py.)
    assert errors[1] < errors[0] / 2, errors
    assert "eps=0.01" in repr(layer)
    with pytest.raises(ValueError, match="positive"):
        SpectralSmoothing(2, 2, eps=0.0)


def test_smoothing_is_the_identity_as_eps_vanishes_on_non_periodic_fields():
    """A smooth non-periodic field (its periodic extension jumps across the box) is changed by
    O(eps): the smoothing corrects only the retained modes, by a multiplier of size
    alpha eps |2 pi m / L|^2. (Truncating to the retained modes, as earlier versions did, changed
    such fields by 2-10 % even at eps = 1e-12.)"""
    data = from_meshio(families.unit_square(16, "irregular"), dtype=torch.float64)
    x, y = data.pos[:, 0], data.pos[:, 1]
    field = torch.stack([torch.exp(x) * y, x * x + 0.3 * y], 1)
    change = []
    for eps in (1e-6, 1e-10, 1e-12):
        out = SpectralSmoothing(modes=4, dim=2, eps=eps)(field, data.pos, data.weight)
        change.append(((out - field).norm() / field.norm()).item())
    assert change[2] < 1e-9 and change[0] < 1e-3
    assert change[0] / change[1] == pytest.approx(1e4, rel=1e-3)  # linear in eps


def test_patch_spectral_integral_equals_per_patch_reference():
    torch.manual_seed(1)
    data = from_meshio(families.unit_square(6, "irregular"), dtype=torch.float64)
    part = partition(data.pos, data.weight, 4, cells=data.cells)
    layer = PatchSpectralIntegral(2, 2, modes=1, dim=2).double()
    x = torch.randn(len(data.pos), 2, dtype=torch.float64)
    out = layer(x, data.pos, data.weight, patch=part.assignment, patch_length=part.length)
    for p in range(4):
        idx = (part.assignment == p).nonzero().squeeze(1)
        pos_p, w_p = data.pos[idx], data.weight[idx]
        c = (w_p[:, None] * pos_p).sum(0) / w_p.sum()
        # one patch alone, shifted so its box is the reference box [-L/2, L/2] about c
        lo = c - part.length / 2
        ref = SpectralIntegral(2, 2, modes=1, dim=2).double()
        ref.load_state_dict(layer.state_dict())
        box_pos = torch.cat([pos_p, lo[None], (lo + part.length)[None]])
        box_w = torch.cat([w_p, torch.zeros(2, dtype=torch.float64)])
        # the two zero-weight corners fix the bounding box without entering the quadrature
        frame = box_frame(box_pos, box=(lo[None], (lo + part.length)[None]))
        box_x = torch.cat([x[idx], torch.zeros(2, 2, dtype=torch.float64)])
        coeff = ref.mix(fourier_coefficients(box_x, box_w, frame, ref.mode_index))
        expected = fourier_evaluate(coeff, frame, ref.mode_index)[:len(idx)]
        assert torch.allclose(out[idx], expected, atol=1e-12)
    # a batch of two graphs (the second shifted, other values): each graph's patches alone
    x2 = torch.randn_like(x)
    batch = torch.cat([torch.zeros(len(x)), torch.ones(len(x))]).long()
    out2 = layer(torch.cat([x, x2]), torch.cat([data.pos, data.pos + 2.0]),
                 torch.cat([data.weight, data.weight]), batch,
                 patch=torch.cat([part.assignment, part.assignment]), patch_length=part.length)
    assert torch.allclose(out2[:len(x)], out, atol=1e-12)
    alone = layer(x2, data.pos + 2.0, data.weight, patch=part.assignment, patch_length=part.length)
    assert torch.allclose(out2[len(x):], alone, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spectral_integral_properties(dtype):
    layer = SpectralIntegral(3, 2, modes=2, dim=2).to(dtype)
    data = from_meshio(families.unit_square(6, "irregular"), dtype=dtype)
    x = torch.randn(len(data.pos), 3, dtype=dtype)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else {}
    assert_permutation_equivariant(layer, x, data.pos, data.weight, **tol)
    assert_duplication_invariant(layer, x, data.pos, data.weight, 5, **tol)
    assert_padding_invariant(layer, x, data.pos, data.weight, **tol)
    other = from_meshio(families.unit_square(4, "irregular", seed=2), dtype=dtype)
    assert_batch_independent(layer, [(x, data.pos, data.weight),
                                     (torch.randn(len(other.pos), 3, dtype=dtype), other.pos, other.weight)],
                             **tol)
    assert layer(x, data.pos, data.weight).dtype == dtype
    assert "modes=2" in repr(layer)


def test_resolved_modes_is_the_largest_oversampled_mode_count():
    """(s (2K + 1))^d <= n: the boundaries of the rule, in 1D, 2D and 3D, and s = 1."""
    assert [resolved_modes(n, 2) for n in (9, 35, 36, 99, 100, 1056)] == [0, 0, 1, 1, 2, 7]
    assert resolved_modes(5, 1) == 0 and resolved_modes(6, 1) == 1 and resolved_modes(10, 1) == 2
    assert resolved_modes(215, 3) == 0 and resolved_modes(216, 3) == 1
    assert resolved_modes(8, 2, oversampling=1) == 0 and resolved_modes(9, 2, oversampling=1) == 1
    with pytest.raises(ValueError):
        resolved_modes(100, 2, oversampling=0.5)


@pytest.mark.parametrize("num_patches", [4, 16])
def test_patch_coefficients_are_aliased_beyond_the_resolved_modes(num_patches):
    """Per-patch quadrature coefficients of a smooth function on a 169-node irregular mesh, RCB
    patches transferred to its third refinement (9 409 nodes) as reference. Modes up to
    ``resolved_modes(N / P)`` are within 20 % of the reference; modes two rings further are
    wrong by more than 100 % (aliasing): measured 0.04 / 0.13 and 2.2 / 4.2 (|m| = 3, 4) with
    4 patches of 42 nodes, 0.16 and 2.2-11.7 (|m| >= 2) with 16 patches of 10 nodes."""
    mesh = families.unit_square(12, "irregular", seed=0)
    coarse = from_meshio(mesh, dtype=torch.float64)
    fine = from_meshio(families.refine(mesh, 3), dtype=torch.float64)
    part = partition(coarse.pos, coarse.weight, num_patches, method="rcb")
    modes = fourier_modes(4, 2)
    ring = modes.abs().max(-1).values

    def coefficients(d):
        u = torch.sin(2 * math.pi * d.pos[:, :1]) * torch.cos(3 * math.pi * d.pos[:, 1:]) + d.pos[:, :1] ** 2
        frame = patch_frame(d.pos, d.weight, part.transfer(d.pos), part.length, None, num_patches)
        return fourier_coefficients(u, d.weight, frame, modes)[..., 0]  # (P, M)

    got, ref = coefficients(coarse), coefficients(fine)
    error = [float((got - ref)[:, ring == r].norm() / ref[:, ring == r].norm()) for r in range(5)]
    k = resolved_modes(len(coarse.pos) / num_patches, 2)
    assert k == {4: 1, 16: 0}[num_patches]
    assert max(error[:k + 1]) < 0.2, error
    assert min(error[k + 2:]) > 1.0, error
