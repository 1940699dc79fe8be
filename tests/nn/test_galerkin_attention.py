import math

import pytest
import torch

from geoattn import testing
from geoattn.mesh import families
from geoattn.nn import FourierAttention, GalerkinAttention

DIM, HEADS = 8, 2
SIZES = [5, 9, 1, 7]
EXACT = dict(atol=1e-12, rtol=1e-12, grad_atol=1e-11, grad_rtol=1e-11)  # float64 references
LAYERS = {"galerkin": GalerkinAttention, "fourier": FourierAttention}


def batch_of(sizes):
    return torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])


def _project(layer, name, x, pos, h):
    """Head ``h`` of projection ``name``: explicit LayerNorm where the variant normalises it,
    coordinates in front."""
    d = layer.head_channels
    lin = getattr(layer, f"to_{name}")
    sl = slice(h * d, (h + 1) * d)
    t = x @ lin.weight[sl].T + lin.bias[sl]
    if layer.layer_norm and name in layer.normalized:
        j = layer.normalized.index(name)
        c = t - t.mean(1, keepdim=True)
        var = (c * c).mean(1, keepdim=True)
        t = c / torch.sqrt(var + layer.eps) * layer.norm_weight[j, h] + layer.norm_bias[j, h]
    return torch.cat([pos, t], 1) if layer.dim else t


def reference(layer, x, pos, w, batch=None, x_query=None, pos_query=None, batch_query=None):
    """Per graph and head: Q from the query side (default: the source), K and V from the source,
    Q (sum_j w_j K_j^T V_j) for Galerkin, one outer product per node, and the Nq x N kernel
    matrix (Q K^T diag(w)) V for Fourier."""
    if x_query is None:
        x_query, pos_query, batch_query = x, pos, batch
    bs = torch.zeros(len(x), dtype=torch.long) if batch is None else batch
    bq = torch.zeros(len(x_query), dtype=torch.long) if batch_query is None else batch_query
    out = torch.empty(len(x_query), layer.channels, dtype=x.dtype)
    for g in range(int(max(bs.max(), bq.max())) + 1):
        i, j = bq == g, bs == g
        p, pq = (None, None) if not layer.dim else (pos[j], pos_query[i])
        heads = []
        for h in range(layer.num_heads):
            q = _project(layer, "q", x_query[i], pq, h)
            k, v = _project(layer, "k", x[j], p, h), _project(layer, "v", x[j], p, h)
            if isinstance(layer, FourierAttention):
                heads.append((q @ k.T @ torch.diag(w[j])) @ v)
            else:
                gram = sum((w_n * k_n[:, None] * v_n[None, :] for w_n, k_n, v_n in zip(w[j], k, v)),
                           torch.zeros(k.shape[1], v.shape[1], dtype=x.dtype))
                heads.append(q @ gram)
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
@pytest.mark.parametrize("dim,layer_norm", [(2, True), (0, True), (2, False)])
@pytest.mark.parametrize("sizes", [[11], SIZES, "unsorted"])
def test_matches_dense_reference_with_gradients(kind, dim, layer_norm, sizes):
    layer = _randomise(LAYERS[kind](DIM, HEADS, dim=dim, layer_norm=layer_norm).double())
    if sizes == "unsorted":
        batch = torch.tensor([2, 0, 1, 0, 2, 2, 1, 0, 2])
    else:
        batch = batch_of(sizes)
    n = len(batch)
    x = torch.randn(n, DIM, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(n, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(n, dtype=torch.float64)
    w[3] = 0.0
    batch = None if sizes == [11] else batch
    out = layer(x, pos if dim else None, w, batch)
    params = [x, *(p for p in layer.parameters() if p.numel())] + ([pos] if dim else [])
    testing.assert_matches_reference(out, reference(layer, x, pos, w, batch), params, **EXACT)


@pytest.mark.parametrize("kind", LAYERS)
@pytest.mark.parametrize("dim,layer_norm", [(2, True), (0, True), (2, False)])
@pytest.mark.parametrize("source_sizes,query_sizes",
                         [([9], [5]), ([7, 4], [3, 6]), ([7, 4, 0], [3, 6, 2])],
                         ids=["one_graph", "two_graphs", "query_graph_without_source"])
def test_cross_form_matches_dense_reference_with_gradients(kind, dim, layer_norm, source_sizes,
                                                           query_sizes):
    """Keys and values from x on the source mesh, queries from x_query on another mesh, graph by
    graph; a query graph whose source has no nodes gets the empty integral (output: the bias)."""
    layer = _randomise(LAYERS[kind](DIM, HEADS, dim=dim, layer_norm=layer_norm).double())
    ns, nq = sum(source_sizes), sum(query_sizes)
    x = torch.randn(ns, DIM, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(ns, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(ns, dtype=torch.float64)
    x_query = torch.randn(nq, DIM, dtype=torch.float64, requires_grad=True)
    pos_query = torch.rand(nq, 2, dtype=torch.float64, requires_grad=True)
    batch, batch_query = ((None, None) if len(source_sizes) == 1
                          else (batch_of(source_sizes), batch_of(query_sizes)))
    out = layer(x, pos if dim else None, w, batch, x_query=x_query,
                pos_query=pos_query if dim else None, batch_query=batch_query)
    assert out.shape == (nq, DIM)
    if len(source_sizes) == 3:
        torch.testing.assert_close(out[batch_query == 2], layer.to_out.bias.expand(2, DIM))
    params = [x, x_query, *(p for p in layer.parameters() if p.numel())]
    params += [pos, pos_query] if dim else []
    ref = reference(layer, x, pos, w, batch, x_query, pos_query, batch_query)
    testing.assert_matches_reference(out, ref, params, **EXACT)


@pytest.mark.parametrize("kind", LAYERS)
def test_self_attention_is_the_cross_form_with_itself(kind):
    layer = _randomise(LAYERS[kind](DIM, HEADS, dim=2).double())
    x, pos = torch.randn(sum(SIZES), DIM, dtype=torch.float64), torch.rand(sum(SIZES), 2)
    w, batch = torch.rand(sum(SIZES), dtype=torch.float64), batch_of(SIZES)
    assert torch.equal(layer(x, pos, w, batch, x_query=x, pos_query=pos, batch_query=batch),
                       layer(x, pos, w, batch))


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
    layer = _randomise(LAYERS[kind](DIM, HEADS, dim=2).double())
    n = sum(SIZES)
    x = torch.randn(n, DIM, dtype=torch.float64)
    pos, w = torch.rand(n, 2, dtype=torch.float64), torch.rand(n, dtype=torch.float64)
    batch = batch_of(SIZES)
    testing.assert_permutation_equivariant(layer, x, pos, w, batch)
    testing.assert_padding_invariant(layer, x, pos, w, batch, num_pad=4)
    testing.assert_batch_independent(
        layer, list(zip(x.split(SIZES), pos.split(SIZES), w.split(SIZES))))
    testing.assert_duplication_invariant(layer, x[:9], pos[:9], w[:9], index=2)


def test_diagonally_dominant_initialisation():
    eta, delta = 1e-2, 0.5
    layer = GalerkinAttention(32, num_heads=4, init_gain=eta, init_diagonal=delta)
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
    layer = _randomise(LAYERS[kind](DIM, HEADS, dim=2).double())
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
    layer = LAYERS[kind](DIM, HEADS, dim=2)
    n = sum(SIZES)
    x, pos = torch.randn(n, DIM), torch.rand(n, 2)
    batch = batch_of(SIZES)
    w = torch.logspace(-12, 0, n)
    w[batch == 1] = 0.0
    out = layer(x, pos, w, batch)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[batch == 1], layer.to_out.bias.expand(9, DIM))
    bf = layer.to(torch.bfloat16)
    out_bf = bf(x.bfloat16(), pos.bfloat16(), w.bfloat16(), batch)
    assert out_bf.dtype == torch.bfloat16 and torch.isfinite(out_bf).all()


def test_repr_and_errors():
    assert repr(FourierAttention(8, num_heads=2, dim=2)).startswith(
        "FourierAttention(\n  8, num_heads=2, head_channels=4, dim=2, layer_norm=True")
    with pytest.raises(ValueError, match=r"pos must have shape \[N, 2\]"):
        GalerkinAttention(8, 2, dim=2)(torch.randn(4, 8), None, torch.rand(4))
    with pytest.raises(ValueError, match=r"pos must have shape \[N, 2\]"):
        GalerkinAttention(8, 2, dim=2)(torch.randn(4, 8), torch.rand(4, 2), torch.rand(4),
                                       x_query=torch.randn(3, 8))
    with pytest.raises(ValueError, match="divisible"):
        GalerkinAttention(10, num_heads=4)
    layer = GalerkinAttention(8, 2)
    x, w, batch = torch.randn(4, 8), torch.rand(4), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="without x_query"):
        layer(x, None, w, batch, batch_query=batch)
    with pytest.raises(ValueError, match="pass both batch and batch_query"):
        layer(x, None, w, batch, x_query=x)


@pytest.mark.parametrize("kind", LAYERS)
def test_layer_norm_sits_after_the_projections_on_the_papers_pair(kind):
    """Cao's normalisation is post-projection and pre-product, per head: on K, V (Galerkin) or
    Q, K (Fourier). So (with eps = 0 and zero biases) rescaling the projection of a normalised
    tensor changes nothing, and rescaling the other one rescales the output: Galerkin is
    linear in W_Q, Fourier in W_V."""
    layer = _randomise(LAYERS[kind](DIM, HEADS, eps=0.0).double())
    with torch.no_grad():
        for lin in (layer.to_q, layer.to_k, layer.to_v, layer.to_out):
            lin.bias.zero_()
    x, w = torch.randn(11, DIM, dtype=torch.float64), torch.rand(11, dtype=torch.float64)
    out = layer(x, None, w)
    free = ({"q", "k", "v"} - set(layer.normalized)).pop()
    for name in "qkv":
        with torch.no_grad():
            getattr(layer, f"to_{name}").weight.mul_(3.0)
        expected = 3.0 * out if name == free else out
        torch.testing.assert_close(layer(x, None, w), expected, atol=1e-12, rtol=1e-12)
        with torch.no_grad():
            getattr(layer, f"to_{name}").weight.div_(3.0)
