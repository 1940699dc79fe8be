import math

import pytest
import torch

from geoattn import testing
from geoattn.mesh import families
from geoattn.nn import FourierAttention, GalerkinAttention

DIM, HEADS = 8, 2
SIZES = [5, 9, 1, 7]
LAYERS = {"galerkin": GalerkinAttention, "fourier": FourierAttention}


def reference(layer, x, pos, w, batch=None):
    """Per graph and head: explicit LayerNorm, Q (K^T diag(w) V) for Galerkin and the N x N
    kernel matrix (Q K^T diag(w)) V for Fourier."""
    batch = torch.zeros(len(x), dtype=torch.long) if batch is None else batch
    d = layer.dim_head
    out = torch.empty(len(x), layer.dim, dtype=x.dtype)
    for g in range(int(batch.max()) + 1):
        i = batch == g
        heads = []
        for h in range(layer.heads):
            sl = slice(h * d, (h + 1) * d)
            t = {name: x[i] @ lin.weight[sl].T + lin.bias[sl]
                 for name, lin in (("q", layer.to_q), ("k", layer.to_k), ("v", layer.to_v))}
            if layer.layer_norm:
                for j, name in enumerate(layer.normalized):
                    c = t[name] - t[name].mean(1, keepdim=True)
                    var = (c * c).mean(1, keepdim=True)
                    t[name] = (c / torch.sqrt(var + layer.eps) * layer.norm_weight[j, h]
                               + layer.norm_bias[j, h])
            if layer.pos_dim:
                t = {name: torch.cat([pos[i], v], 1) for name, v in t.items()}
            wd = torch.diag(w[i])
            if isinstance(layer, FourierAttention):
                heads.append((t["q"] @ t["k"].T @ wd) @ t["v"])
            else:
                heads.append(t["q"] @ (t["k"].T @ wd @ t["v"]))
        out[i] = torch.cat(heads, 1) @ layer.to_out.weight.T + layer.to_out.bias
    return out


def _randomise(layer):
    """Move LayerNorm affine parameters off their (1, 0) initial values so the test sees them."""
    with torch.no_grad():
        layer.norm_weight.uniform_(0.5, 1.5)
        layer.norm_bias.uniform_(-0.5, 0.5)
        for lin in (layer.to_q, layer.to_k, layer.to_v):
            lin.weight.normal_(0, 0.4)
            lin.bias.normal_(0, 0.1)
    return layer


@pytest.mark.parametrize("kind", LAYERS)
@pytest.mark.parametrize("pos_dim,layer_norm", [(2, True), (0, True), (2, False)])
@pytest.mark.parametrize("sizes", [[11], SIZES, "unsorted"])
def test_matches_dense_reference_with_gradients(kind, pos_dim, layer_norm, sizes):
    layer = _randomise(LAYERS[kind](DIM, HEADS, pos_dim=pos_dim, layer_norm=layer_norm).double())
    if sizes == "unsorted":
        batch = torch.tensor([2, 0, 1, 0, 2, 2, 1, 0, 2])
    else:
        batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    n = len(batch)
    x = torch.randn(n, DIM, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(n, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(n, dtype=torch.float64)
    w[3] = 0.0
    batch = None if sizes == [11] else batch
    out = layer(x, pos if pos_dim else None, w, batch)
    ref = reference(layer, x, pos, w, batch)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    r = torch.randn_like(out)
    params = [x, *(p for p in layer.parameters() if p.numel())] + ([pos] if pos_dim else [])
    for g, g_ref in zip(torch.autograd.grad((out * r).sum(), params),
                        torch.autograd.grad((ref * r).sum(), params)):
        torch.testing.assert_close(g, g_ref, atol=1e-11, rtol=1e-11)


@pytest.mark.parametrize("kind", LAYERS)
def test_uniform_weights_are_the_papers_one_over_n(kind):
    """With w = 1/n the layer is Cao's attention: Q (K^T V) / n resp. (Q K^T) V / n."""
    layer = _randomise(LAYERS[kind](DIM, HEADS, layer_norm=False).double())
    x = torch.randn(13, DIM, dtype=torch.float64)
    q, k, v = (lin(x).view(13, HEADS, -1).transpose(0, 1)  # (H, N, D)
               for lin in (layer.to_q, layer.to_k, layer.to_v))
    z = q @ k.transpose(1, 2) @ v / 13  # (H, N, D)
    expected = layer.to_out(z.transpose(0, 1).reshape(13, -1))
    torch.testing.assert_close(layer(x, None, torch.full((13,), 1 / 13, dtype=torch.float64)),
                               expected)


@pytest.mark.parametrize("kind", LAYERS)
def test_properties(kind):
    layer = _randomise(LAYERS[kind](DIM, HEADS, pos_dim=2).double())
    n = sum(SIZES)
    x = torch.randn(n, DIM, dtype=torch.float64)
    pos, w = torch.rand(n, 2, dtype=torch.float64), torch.rand(n, dtype=torch.float64)
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(SIZES)])
    testing.assert_permutation_equivariant(layer, x, pos, w, batch)
    testing.assert_padding_invariant(layer, x, pos, w, batch, num_pad=4)
    testing.assert_batch_independent(
        layer, list(zip(x.split(SIZES), pos.split(SIZES), w.split(SIZES))))
    testing.assert_duplication_invariant(layer, x[:9], pos[:9], w[:9], index=2)


def test_diagonally_dominant_initialisation():
    eta, delta = 1e-2, 0.5
    layer = GalerkinAttention(32, heads=4, init_gain=eta, init_diagonal=delta)
    bound = eta * math.sqrt(6 / (32 + 32))  # Xavier uniform bound with gain eta
    for lin in (layer.to_q, layer.to_k, layer.to_v):
        u = lin.weight.detach() - delta * torch.eye(32)
        assert u.abs().max() <= bound and u.abs().max() > 0.5 * bound
        assert torch.all(lin.bias == 0)
    assert torch.all(layer.norm_weight == 1) and torch.all(layer.norm_bias == 0)
    assert layer.norm_weight.shape == (2, 4, 8)


def _features(pos):
    x, y = pos[:, 0], pos[:, 1]
    return torch.stack([torch.sin(3 * x + y), torch.cos(2 * x * y), x * x - y, 1 + 0 * x,
                        torch.exp(-x), y * y, x, torch.sin(2 * y)], dim=1)


@pytest.mark.parametrize("kind", LAYERS)
def test_cross_mesh_convergence_on_graded_mesh(kind):
    """Outputs at the coarse nodes (nodes of every refinement) converge at order 2 with the
    lumped weights; the paper's uniform 1/n does not converge on a graded mesh."""
    torch.manual_seed(2)
    layer = _randomise(LAYERS[kind](DIM, HEADS, pos_dim=2).double())
    coarse = families.unit_square(4, "graded")
    *levels, ref = testing.refinement_samples(coarse, [1, 2, 3, 4, 7], _features)
    n0 = len(coarse.points)
    with torch.no_grad():
        expected = layer(ref[0], ref[1], ref[2])[:n0]
        for uniform in (False, True):
            errors = [(layer(x, p, torch.full_like(w, 1 / len(w)) if uniform else w)[:n0]
                       - expected).abs().max().item() / expected.abs().max().item()
                      for x, p, w, _ in levels]
            if not uniform:
                testing.assert_convergence_rate([s[3] for s in levels], errors, 2.0, tol=0.25)
            else:
                assert min(errors) > 0.5 * max(errors) > 1e-2, errors


@pytest.mark.parametrize("kind", LAYERS)
def test_extreme_weights_empty_graph_and_bf16_are_finite(kind):
    layer = LAYERS[kind](DIM, HEADS, pos_dim=2)
    n = sum(SIZES)
    x, pos = torch.randn(n, DIM), torch.rand(n, 2)
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(SIZES)])
    w = torch.logspace(-12, 0, n)
    w[batch == 1] = 0.0
    out = layer(x, pos, w, batch)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[batch == 1], layer.to_out.bias.expand(9, DIM))
    bf = layer.to(torch.bfloat16)
    out_bf = bf(x.bfloat16(), pos.bfloat16(), w.bfloat16(), batch)
    assert out_bf.dtype == torch.bfloat16 and torch.isfinite(out_bf).all()


def test_repr_and_errors():
    assert repr(FourierAttention(8, heads=2, pos_dim=2)).startswith(
        "FourierAttention(\n  dim=8, heads=2, dim_head=4, pos_dim=2, layer_norm=True")
    with pytest.raises(ValueError, match=r"pos must have shape \[N, 2\]"):
        GalerkinAttention(8, 2, pos_dim=2)(torch.randn(4, 8), None, torch.rand(4))
    with pytest.raises(ValueError, match="divisible"):
        GalerkinAttention(10, heads=4)


def test_weighted_gram_is_integrate_of_outer_products():
    """The segment-wise Gram matrix equals geoattn.mesh.integrate of per-node outer products,
    for sorted, unsorted and missing batch vectors; segment_matmul applies it per graph."""
    from geoattn.mesh import integrate
    from geoattn.nn.functional import segment_matmul, weighted_gram

    a, b = torch.randn(10, 3, 4, dtype=torch.float64), torch.randn(10, 3, 5, dtype=torch.float64)
    w = torch.rand(10, dtype=torch.float64)
    for batch in (None, torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3]),
                  torch.tensor([1, 0, 3, 1, 0, 0, 2, 3, 1, 0])):
        gram = weighted_gram(a, b, w, batch, None if batch is None else 4)
        num = None if batch is None else 4
        torch.testing.assert_close(gram, integrate(a[..., :, None] * b[..., None, :], w, batch, num))
        per_node = gram.expand(10, 3, 4, 5) if batch is None else gram[batch]  # (N, H, 4, 5)
        torch.testing.assert_close(segment_matmul(a, gram, batch),
                                   torch.einsum("nhi,nhij->nhj", a, per_node))
