import math

import pytest
import torch

from geoattn.mesh import families
from geoattn.nao import NonlocalAttention
from geoattn.testing import assert_convergence_rate, refinement_samples


def dense_reference(layer, u, f, w, wf):
    """The layer as the explicit (N + Nf) x (N + Nf) attention matrix, one graph, with loops."""
    X = torch.cat([u, f])
    wt = torch.cat([w, wf])
    q = layer.query(X)
    k = layer.key(X)
    T = X.shape[0]
    A = torch.empty(T, T, dtype=X.dtype)
    for a in range(T):
        for g in range(T):
            A[a, g] = (q[a] * k[g]).sum() / math.sqrt(layer.head_channels)
    out = X + A @ (wt[:, None] * X)
    return out[:u.shape[0]], out[u.shape[0]:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_dense_reference_on_mixed_batch(dtype):
    torch.manual_seed(0)
    layer = NonlocalAttention(4, head_channels=3).to(dtype)
    sizes_u, sizes_f = [7, 5], [3, 6]  # f-mesh different from the u-mesh, graphs of unequal size
    u = [torch.randn(n, 4, dtype=dtype) for n in sizes_u]
    f = [torch.randn(n, 4, dtype=dtype) for n in sizes_f]
    w = [torch.rand(n, dtype=dtype) for n in sizes_u]
    wf = [torch.rand(n, dtype=dtype) for n in sizes_f]
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor(sizes_u))
    batch_f = torch.repeat_interleave(torch.arange(2), torch.tensor(sizes_f))
    out_u, out_f = layer(torch.cat(u), None, torch.cat(w), batch, x_query=torch.cat(f),
                         weight_query=torch.cat(wf), batch_query=batch_f)
    refs = [dense_reference(layer, *args) for args in zip(u, f, w, wf)]
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out_u, torch.cat([r[0] for r in refs]), atol=tol, rtol=tol)
    torch.testing.assert_close(out_f, torch.cat([r[1] for r in refs]), atol=tol, rtol=tol)


def test_uniform_weights_give_the_riemann_sum_form():
    """X + dx * (X W^Q (W^K)^T X^T / sqrt(dk)) X, eq. (6) with the App. A rescaling."""
    torch.manual_seed(1)
    layer = NonlocalAttention(6, head_channels=4, bias=False).double()
    N, dx = 11, 0.1
    u, f = torch.randn(N, 6, dtype=torch.float64), torch.randn(N, 6, dtype=torch.float64)
    w = torch.full((N,), dx, dtype=torch.float64)
    X = torch.cat([u, f])  # (2N, d)
    WQ, WK = layer.query.weight.T, layer.key.weight.T  # (d, dk)
    expected = X + dx * (X @ WQ @ WK.T @ X.T / math.sqrt(4)) @ X
    out_u, out_f = layer(u, None, w, x_query=f, weight_query=w)
    torch.testing.assert_close(torch.cat([out_u, out_f]), expected, atol=1e-12, rtol=1e-12)
    assert "6, head_channels=4, bias=False" in repr(layer)


def test_padding_nodes_of_weight_zero_change_nothing():
    torch.manual_seed(2)
    layer = NonlocalAttention(3, head_channels=2).double()
    u, f = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64)
    w = torch.rand(8, dtype=torch.float64)
    out = layer(u, None, w, x_query=f, weight_query=w)
    u2 = torch.cat([u, 5 * torch.randn(3, 3, dtype=torch.float64)])
    w2 = torch.cat([w, torch.zeros(3, dtype=torch.float64)])
    out2 = layer(u2, None, w2, x_query=f, weight_query=w)
    torch.testing.assert_close(out2[0][:8], out[0])
    torch.testing.assert_close(out2[1], out[1])


@pytest.mark.parametrize("bias", [True, False])
def test_augmented_matrix_is_the_affine_map_and_loads_back(bias):
    """lin(x) = [x, 1] @ augmented(lin) (no column of ones without a bias), and
    load_augmented(lin, W) makes lin the map of W."""
    torch.manual_seed(5)
    layer = NonlocalAttention(4, head_channels=3, bias=bias).double()
    x = torch.randn(7, 4, dtype=torch.float64)
    xt = torch.cat([x, torch.ones(7, 1, dtype=torch.float64)], 1) if bias else x
    W = layer.augmented(layer.query)
    assert W.shape == (4 + bias, 3)
    torch.testing.assert_close(xt @ W, layer.query(x), atol=1e-14, rtol=0)
    W2 = torch.randn(4 + bias, 3, dtype=torch.float64)
    layer.load_augmented(layer.key, W2)
    torch.testing.assert_close(layer.key(x), xt @ W2, atol=1e-14, rtol=0)
    torch.testing.assert_close(layer.augmented(layer.key), W2, atol=0, rtol=0)


def _fields(pos):
    x, y = pos[:, 0:1], pos[:, 1:2]
    j = torch.arange(1, 5, dtype=pos.dtype)
    u = torch.sin(math.pi * j * x) * torch.cos(j * y)  # (N, 4) loadings
    f = torch.exp(-j * (x - 0.3) ** 2) * (1 + y)  # (N, 4) responses
    return u, f


def test_converges_under_refinement_of_a_graded_mesh():
    """A fixed continuum input on refinements: outputs at the coarse nodes converge at order 2
    (lumped P1 quadrature). An unweighted layer (mean over nodes) converges to the operator of
    the node density of the graded family, not to the continuum one: its limit differs."""
    torch.manual_seed(3)
    layer = NonlocalAttention(4, head_channels=3).double()
    mesh = families.unit_square(6, kind="graded")
    samples = refinement_samples(mesh, [0, 1, 2, 3, 5], lambda p: p)
    outs, plain = [], []
    for pos, _, weight, _ in samples:
        u, f = _fields(pos)
        with torch.no_grad():
            n0 = len(samples[0][1])  # refinement keeps the coarse nodes first
            out_u, out_f = layer(u, pos, weight, x_query=f, weight_query=weight)
            outs.append(torch.cat([out_u[:n0], out_f[:n0]]))
            n = torch.full_like(weight, 1.0 / len(weight))
            out_u, out_f = layer(u, pos, n, x_query=f, weight_query=n)
            plain.append(torch.cat([out_u[:n0], out_f[:n0]]))
    ref, ref_plain = outs[-1], plain[-1]
    def err(a, b):
        return float((a - b).norm() / b.norm())
    errors = [err(o, ref) for o in outs[:-1]]
    assert_convergence_rate([s[3] for s in samples[:-1]], errors, expected=2.0, tol=0.35)
    assert errors[-1] < 1e-3
    assert err(ref_plain, ref) > 30 * errors[-1]
