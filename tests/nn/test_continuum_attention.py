import math

import pytest
import torch

from geoattn import testing
from geoattn.mesh import families
from geoattn.nn import ContinuumAttention

DIM, HEADS = 8, 2
SIZES = [5, 9, 1, 7]
EXACT = dict(atol=1e-12, rtol=1e-12, grad_atol=1e-11, grad_rtol=1e-11)  # float64 references


def reference(layer, x, w, batch=None, x_query=None, batch_query=None):
    """Explicit per-graph, per-head loops with the weighted normaliser, no log trick: keys and
    values from the source ``x``, queries from ``x_query`` (default ``x``)."""
    x_query, batch_query = (x, batch) if x_query is None else (x_query, batch_query)
    bs = torch.zeros(len(x), dtype=torch.long) if batch is None else batch
    bq = torch.zeros(len(x_query), dtype=torch.long) if batch_query is None else batch_query
    d = layer.head_channels
    out = torch.empty(len(x_query), layer.query_channels, dtype=x.dtype)
    for g in range(int(max(bq.max(), bs.max())) + 1):
        iq, js = bq == g, bs == g
        heads = []
        for h in range(layer.num_heads):
            sl = slice(h * d, (h + 1) * d)
            q = x_query[iq] @ layer.to_q.weight[sl].T
            k = x[js] @ layer.to_k.weight[sl].T
            v = x[js] @ layer.to_v.weight[sl].T
            e = w[js] * torch.exp(q @ k.T / math.sqrt(d))  # [nq, ns]
            heads.append(e @ v / e.sum(1, keepdim=True))
        out[iq] = torch.cat(heads, 1) @ layer.to_out.weight.T + layer.to_out.bias
    return out


def batch_of(sizes):
    return torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])


@pytest.mark.parametrize("sizes", [[11], SIZES], ids=["single", "mixed"])
def test_self_attention_matches_dense_reference_with_gradients(sizes):
    layer = ContinuumAttention(DIM, num_heads=HEADS).double()
    n = sum(sizes)
    x = torch.randn(n, DIM, dtype=torch.float64, requires_grad=True)
    w = torch.rand(n, dtype=torch.float64) + 0.05
    w[3] = 0.0  # a zero-weight node inside a graph is a padding node
    batch = batch_of(sizes) if len(sizes) > 1 else None
    out = layer(x, None, w, batch)
    testing.assert_matches_reference(out, reference(layer, x, w, batch), [x, *layer.parameters()],
                                     **EXACT)


@pytest.mark.parametrize("query_channels", [None, 5], ids=["same_width", "query_channels"])
def test_cross_attention_matches_dense_reference_mixed_batch_with_gradients(query_channels):
    """Queries from x_query on one mesh, keys and values from x on another, graph by graph; the
    query width may differ from the source width (head_channels is then given)."""
    cq = query_channels or DIM
    layer = ContinuumAttention(DIM, num_heads=HEADS, head_channels=3,
                               query_channels=query_channels).double()
    widths = (layer.to_q.in_features, layer.to_k.in_features, layer.to_out.out_features)
    assert widths == (cq, DIM, cq)
    sq, ss = [3, 1, 6, 2], [7, 4, 2, 9]
    xq = torch.randn(sum(sq), cq, dtype=torch.float64, requires_grad=True)
    xs = torch.randn(sum(ss), DIM, dtype=torch.float64, requires_grad=True)
    ws = torch.rand(sum(ss), dtype=torch.float64)
    bq, bs = batch_of(sq), batch_of(ss)
    out = layer(xs, None, ws, bs, x_query=xq, batch_query=bq)
    assert out.shape == (sum(sq), cq)
    ref = reference(layer, xs, ws, bs, x_query=xq, batch_query=bq)
    testing.assert_matches_reference(out, ref, [xq, xs, *layer.parameters()], **EXACT)
    # one graph on each side, without batch vectors
    torch.testing.assert_close(layer(xs[:7], None, ws[:7], x_query=xq[:3]),
                               reference(layer, xs[:7], ws[:7], x_query=xq[:3]),
                               atol=1e-12, rtol=1e-12)


def test_self_attention_is_cross_attention_with_itself():
    layer = ContinuumAttention(DIM, num_heads=HEADS).double()
    x, pos = torch.randn(sum(SIZES), DIM, dtype=torch.float64), torch.rand(sum(SIZES), 2)
    w, batch = torch.rand(sum(SIZES), dtype=torch.float64), batch_of(SIZES)
    assert torch.equal(layer(x, pos, w, batch, x_query=x, pos_query=pos, batch_query=batch),
                       layer(x, pos, w, batch))
    assert torch.equal(layer(x, None, w, x_query=x), layer(x, None, w))


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-14), (torch.float32, 1e-6)])
def test_uniform_weights_equal_standard_softmax_attention(dtype, tol):
    layer = ContinuumAttention(DIM, num_heads=HEADS).to(dtype)
    mha = torch.nn.MultiheadAttention(DIM, HEADS, bias=False, batch_first=True).to(dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.to_q.weight, layer.to_k.weight,
                                            layer.to_v.weight]))
        mha.out_proj.weight.copy_(layer.to_out.weight)
    x = torch.randn(1, 40, DIM, dtype=dtype)
    expected = mha(x, x, x, need_weights=False)[0][0] + layer.to_out.bias.detach()
    for value in (1.0, 1 / 40, 3.7e-5):
        out = layer(x[0], None, torch.full((40,), value, dtype=dtype))
        torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


def _self(layer):
    return lambda x, pos, w, batch=None: layer(x, pos, w, batch)


def _cross_on_itself(layer):
    return lambda x, pos, w, batch=None: layer(x, pos, w, batch, x_query=x, pos_query=pos,
                                               batch_query=batch)


@pytest.mark.parametrize("make", [lambda: _self(ContinuumAttention(DIM, HEADS).double()),
                                  lambda: _cross_on_itself(ContinuumAttention(DIM).double())],
                         ids=["self", "cross"])
def test_properties(make):
    layer = make()
    n = sum(SIZES)
    x = torch.randn(n, DIM, dtype=torch.float64)
    pos, w = torch.rand(n, 2, dtype=torch.float64), torch.rand(n, dtype=torch.float64) + 0.1
    batch = batch_of(SIZES)
    testing.assert_permutation_equivariant(layer, x, pos, w, batch)
    testing.assert_padding_invariant(layer, x, pos, w, batch, num_pad=4)
    testing.assert_padding_invariant(layer, x, pos, w, None, num_pad=4)
    testing.assert_batch_independent(
        layer, list(zip(x.split(SIZES), pos.split(SIZES), w.split(SIZES))))
    testing.assert_duplication_invariant(layer, x[:9], pos[:9], w[:9], index=4)


def test_duplication_without_weight_split_changes_outputs():
    """The duplication check is sharp: a duplicate that keeps its full weight is detected."""
    layer = ContinuumAttention(DIM, HEADS).double()
    x, pos = torch.randn(9, DIM, dtype=torch.float64), torch.rand(9, 2, dtype=torch.float64)
    w = torch.rand(9, dtype=torch.float64)
    out = layer(x, pos, w)
    out2 = layer(torch.cat([x, x[4:5]]), torch.cat([pos, pos[4:5]]), torch.cat([w, w[4:5]]))
    assert (out2[:9] - out).abs().max() > 1e-6


def _features(pos):
    x, y = pos[:, 0], pos[:, 1]
    return torch.stack([torch.sin(3 * x + y), torch.cos(2 * x * y), x * x - y, 1 + 0 * x,
                        torch.exp(-x), y * y, x, torch.sin(2 * y)], dim=1)


def test_cross_mesh_convergence_on_graded_mesh():
    """At fixed query points the weighted layer converges at order 2 in h on uniformly refined
    graded meshes; plain softmax over nodes (uniform weights) converges to something else."""
    torch.manual_seed(1)
    layer = ContinuumAttention(DIM, num_heads=HEADS).double()
    with torch.no_grad():
        layer.to_q.weight.mul_(4.0)  # sharper attention makes the test more discriminating
    query = torch.tensor([[0.1, 0.2], [0.5, 0.5], [0.9, 0.3], [0.7, 0.95]], dtype=torch.float64)
    xq = _features(query)
    *levels, ref = testing.refinement_samples(families.unit_square(4, "graded"), [1, 2, 3, 4, 7],
                                              _features)

    def apply(sample, uniform):
        x, _, w, _ = sample
        return layer(x, None, torch.ones_like(w) if uniform else w, x_query=xq, pos_query=query)

    with torch.no_grad():
        for uniform in (False, True):
            errors = [(apply(s, uniform) - apply(ref, False)).abs().max().item() for s in levels]
            if not uniform:
                testing.assert_convergence_rate([s[3] for s in levels], errors, 2.0, tol=0.25)
            else:
                assert min(errors) > 0.5 * max(errors) > 1e-2, errors


def test_extreme_weights_empty_graphs_and_bf16_are_finite():
    layer = ContinuumAttention(DIM, HEADS)
    n = sum(SIZES)
    x, batch = torch.randn(n, DIM), batch_of(SIZES)
    w = torch.logspace(-12, 0, n)
    w[batch == 1] = 0.0  # a graph with no mass: an empty integral, output 0
    out = layer(x, None, w, batch)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[batch == 1], layer.to_out.bias.expand(9, DIM))
    x.requires_grad_(True)
    layer(x, None, w, batch).sum().backward()
    assert torch.isfinite(x.grad).all()
    bf = ContinuumAttention(DIM, HEADS).to(torch.bfloat16)
    out_bf = bf(x.detach().bfloat16(), None, w.bfloat16(), batch)
    assert out_bf.dtype == torch.bfloat16 and torch.isfinite(out_bf).all()


def test_dropout_only_in_training():
    layer = ContinuumAttention(DIM, HEADS, dropout=0.5).double()
    x, w = torch.randn(20, DIM, dtype=torch.float64), torch.rand(20, dtype=torch.float64)
    train = layer(x, None, w)
    layer.eval()
    torch.testing.assert_close(layer(x, None, w), reference(layer, x, w))
    assert not torch.allclose(train, layer(x, None, w))


def test_repr_and_errors():
    assert repr(ContinuumAttention(8, num_heads=2)).startswith(
        "ContinuumAttention(\n  8, num_heads=2, head_channels=4, dropout=0.0")
    assert "query_channels" not in repr(ContinuumAttention(8, num_heads=2))
    assert "query_channels=3" in repr(ContinuumAttention(8, query_channels=3))
    with pytest.raises(ValueError, match="divisible"):
        ContinuumAttention(10, num_heads=4)
    layer = ContinuumAttention(8)
    x, w, batch = torch.randn(3, 8), torch.rand(3), torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="pass both batch and batch_query"):
        layer(x, None, w, x_query=torch.randn(5, 8), batch_query=torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="pass both batch and batch_query"):
        layer(x, None, w, batch, x_query=torch.randn(5, 8))
    with pytest.raises(ValueError, match="batch_query without x_query"):
        layer(x, None, w, batch, batch_query=batch)
    with pytest.raises(ValueError, match="weight must have shape"):
        ContinuumAttention(8)(torch.randn(5, 8), None, torch.rand(4))
