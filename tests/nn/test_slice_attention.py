"""Weighted slice attention: dense reference, Transolver's formula, batches, mesh refinement."""

import math

import pytest
import torch

from geoattn import testing
from geoattn.mesh import families
from geoattn.nn import SliceAttention

C, HEADS, SLICES = 8, 2, 5
EXACT = dict(atol=1e-12, rtol=1e-12, grad_atol=1e-11, grad_rtol=1e-11)  # float64 references


def _layer(**kw):
    torch.manual_seed(0)
    return SliceAttention(C, num_heads=HEADS, num_slices=SLICES, **kw).double()


def reference(layer, x, w, batch=None, uniform_transolver=False):
    """Per graph and per head, with explicit sums: tokens sum_i w_i s_ig f_i / (sum_i w_i s_ig +
    eps mean(w > 0)), softmax attention among the tokens, de-slicing. With ``uniform_transolver`` the
    tokens are Transolver's unweighted sum_i s_ig f_i / (sum_i s_ig + eps), whatever ``w``."""
    batch = torch.zeros(len(x), dtype=torch.long) if batch is None else batch
    d = layer.head_channels
    out = torch.empty(len(x), layer.channels, dtype=x.dtype)
    for g in range(int(batch.max()) + 1):
        i = batch == g
        xg, wg = x[i], w[i]
        heads = []
        for h in range(layer.num_heads):
            sl = slice(h * d, (h + 1) * d)
            u = xg @ layer.to_x.weight[sl].T + layer.to_x.bias[sl]
            f = xg @ layer.to_f.weight[sl].T + layer.to_f.bias[sl]
            s = torch.softmax((u @ layer.to_slice.weight.T + layer.to_slice.bias)
                              / layer.temperature[h], dim=1)  # (n, G)
            if uniform_transolver:
                z = (s.T @ f) / (s.sum(0) + layer.eps)[:, None]
            else:
                z = (s.T @ (wg[:, None] * f)) / ((wg[:, None] * s).sum(0) + layer.eps * wg[wg > 0].mean())[:, None]
            q, k, v = z @ layer.to_q.weight.T, z @ layer.to_k.weight.T, z @ layer.to_v.weight.T
            z2 = torch.softmax(q @ k.T / math.sqrt(d), dim=1) @ v  # (G, d)
            heads.append(s @ z2)
        out[i] = torch.cat(heads, 1) @ layer.to_out.weight.T + layer.to_out.bias
    return out


def _batch(sizes):
    return torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])


@pytest.mark.parametrize("sizes", [[13], [6, 11, 1, 9]], ids=["single", "mixed"])
def test_matches_dense_reference_with_gradients(sizes):
    layer = _layer()
    n = sum(sizes)
    x = torch.randn(n, C, dtype=torch.float64, requires_grad=True)
    w = torch.rand(n, dtype=torch.float64) + 0.05
    w[2] = 0.0  # a node of weight 0 takes no part in the integrals
    batch = _batch(sizes) if len(sizes) > 1 else None
    out = layer(x, None, w, batch)
    testing.assert_matches_reference(out, reference(layer, x, w, batch), [x, *layer.parameters()],
                                     **EXACT)


def test_uniform_weights_give_transolver_formula():
    """With w_i = |D|/N the weighted tokens are exactly Transolver's, for any |D|."""
    layer = _layer()
    x = torch.randn(17, C, dtype=torch.float64)
    for area in (1.0, 0.003, 40.0):
        w = torch.full((17,), area / 17, dtype=torch.float64)
        expected = reference(layer, x, w, uniform_transolver=True)
        assert torch.allclose(layer(x, None, w), expected, atol=1e-12, rtol=1e-12)
    # and a non-uniform rule differs from it: the weights are really used
    w = torch.rand(17, dtype=torch.float64) + 0.1
    assert not torch.allclose(layer(x, None, w), reference(layer, x, w, uniform_transolver=True),
                              atol=1e-6)


def test_batch_padding_permutation_and_duplication():
    layer = _layer()
    xs = [torch.randn(n, C, dtype=torch.float64) for n in (4, 9, 6)]
    ws = [torch.rand(n, dtype=torch.float64) + 0.1 for n in (4, 9, 6)]
    ps = [torch.rand(n, 2, dtype=torch.float64) for n in (4, 9, 6)]
    testing.assert_batch_independent(layer, list(zip(xs, ps, ws)))
    testing.assert_padding_invariant(layer, xs[1], ps[1], ws[1])
    testing.assert_permutation_equivariant(layer, xs[1], ps[1], ws[1])
    # splitting a node's weight over a duplicate changes nothing up to the eps term (eps * mean w)
    testing.assert_duplication_invariant(_layer(eps=0.0), xs[1], ps[1], ws[1], index=3)


def _features(pos):
    x, y = pos[:, 0], pos[:, 1]
    return torch.stack([torch.sin(3 * x + y), x * x - y, torch.cos(2 * y)], 1).repeat(1, 3)[:, :C]


def test_converges_under_refinement_on_a_graded_mesh_and_unweighted_does_not():
    """The same continuum input on refinements of a graded mesh: outputs at the coarse nodes
    converge (second order, as the P1 quadrature); node-average weights converge to another
    operator, far from the weighted limit."""
    layer = _layer(eps=0.0)
    samples = testing.refinement_samples(families.unit_square(6, "graded"), range(5), _features)
    n0 = len(samples[0][1])
    with torch.no_grad():
        outs = [layer(u, pos, w)[:n0] for u, pos, w, _ in samples]
        plain = [layer(u, pos, torch.full_like(w, 1.0 / len(w)))[:n0] for u, pos, w, _ in samples]
    ref = outs[-1]
    errors = [float((o - ref).norm() / ref.norm()) for o in outs[:-1]]
    rate = testing.convergence_rate([s[3] for s in samples[1:-1]], errors[1:])
    assert rate > 1.6, (errors, rate)
    assert errors[-1] < 2e-3, errors
    assert float((plain[-1] - ref).norm() / ref.norm()) > 20 * errors[-1]


def test_rejects_bad_arguments_and_repr():
    with pytest.raises(ValueError, match="divisible"):
        SliceAttention(7, num_heads=2)
    with pytest.raises(ValueError, match="num_slices"):
        SliceAttention(8, num_slices=0)
    assert "num_slices=5" in repr(_layer())
