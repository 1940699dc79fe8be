import importlib.util
import math
import pathlib

import pytest
import torch

from geoattn import testing
from geoattn.mesh import families
from geoattn.nn import ContinuumAttention, ContinuumCrossAttention

DIM, HEADS = 8, 2
SIZES = [5, 9, 1, 7]


def reference_cross(layer, xq, xs, ws, bq=None, bs=None):
    """Explicit per-graph, per-head loops with the weighted normaliser, no log trick."""
    bq = torch.zeros(len(xq), dtype=torch.long) if bq is None else bq
    bs = torch.zeros(len(xs), dtype=torch.long) if bs is None else bs
    d = layer.dim_head
    rows = []
    for g in range(int(max(bq.max(), bs.max())) + 1):
        iq, js = bq == g, bs == g
        heads = []
        for h in range(layer.heads):
            sl = slice(h * d, (h + 1) * d)
            q = xq[iq] @ layer.to_q.weight[sl].T
            k = xs[js] @ layer.to_k.weight[sl].T
            v = xs[js] @ layer.to_v.weight[sl].T
            e = ws[js] * torch.exp(q @ k.T / math.sqrt(d))  # [nq, ns]
            heads.append(e @ v / e.sum(1, keepdim=True))
        rows.append(torch.cat(heads, 1) @ layer.to_out.weight.T + layer.to_out.bias)
    out = torch.empty(len(xq), layer.dim, dtype=xq.dtype)
    for g, r in enumerate(rows):
        out[bq == g] = r
    return out


def batch_of(sizes):
    return torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])


@pytest.mark.parametrize("sizes", [[11], SIZES], ids=["single", "mixed"])
def test_self_attention_matches_dense_reference_with_gradients(sizes):
    layer = ContinuumAttention(DIM, heads=HEADS).double()
    n = sum(sizes)
    x = torch.randn(n, DIM, dtype=torch.float64, requires_grad=True)
    w = torch.rand(n, dtype=torch.float64) + 0.05
    w[3] = 0.0  # a zero-weight node inside a graph is a padding node
    batch = batch_of(sizes) if len(sizes) > 1 else None
    out = layer(x, None, w, batch)
    ref = reference_cross(layer, x, x, w, batch, batch)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    r = torch.randn_like(out)
    params = [x, *layer.parameters()]
    grads = torch.autograd.grad((out * r).sum(), params)
    grads_ref = torch.autograd.grad((ref * r).sum(), params)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref, atol=1e-11, rtol=1e-11)


def test_cross_attention_matches_dense_reference_mixed_batch_with_gradients():
    layer = ContinuumCrossAttention(DIM, source_dim=DIM, heads=HEADS).double()
    sq, ss = [3, 1, 6, 2], [7, 4, 2, 9]
    xq = torch.randn(sum(sq), DIM, dtype=torch.float64, requires_grad=True)
    xs = torch.randn(sum(ss), DIM, dtype=torch.float64, requires_grad=True)
    ws = torch.rand(sum(ss), dtype=torch.float64)
    bq, bs = batch_of(sq), batch_of(ss)
    out = layer(xq, None, xs, None, ws, bq, bs)
    ref = reference_cross(layer, xq, xs, ws, bq, bs)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    params = [xq, xs, *layer.parameters()]
    r = torch.randn_like(out)
    for g, g_ref in zip(torch.autograd.grad((out * r).sum(), params),
                        torch.autograd.grad((ref * r).sum(), params)):
        torch.testing.assert_close(g, g_ref, atol=1e-11, rtol=1e-11)


def test_cross_attention_source_dim_and_self_equals_cross_with_itself():
    cross = ContinuumCrossAttention(DIM, source_dim=3, heads=HEADS).double()
    xq, xs = torch.randn(4, DIM, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    ws = torch.rand(6, dtype=torch.float64)
    torch.testing.assert_close(cross(xq, None, xs, None, ws), reference_cross(cross, xq, xs, ws))
    layer = ContinuumAttention(DIM, heads=HEADS).double()
    x, w = torch.randn(6, DIM, dtype=torch.float64), torch.rand(6, dtype=torch.float64)
    assert torch.equal(layer(x, None, w), ContinuumCrossAttention.forward(layer, x, None, x, None, w))


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-14), (torch.float32, 1e-6)])
def test_uniform_weights_equal_standard_softmax_attention(dtype, tol):
    layer = ContinuumAttention(DIM, heads=HEADS).to(dtype)
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
    return lambda x, pos, w, batch=None: layer(x, pos, x, pos, w, batch, batch)


@pytest.mark.parametrize("make", [lambda: _self(ContinuumAttention(DIM, HEADS).double()),
                                  lambda: _cross_on_itself(ContinuumCrossAttention(DIM).double())],
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
    layer = ContinuumCrossAttention(DIM, heads=HEADS).double()
    with torch.no_grad():
        layer.to_q.weight.mul_(4.0)  # sharper attention makes the test more discriminating
    query = torch.tensor([[0.1, 0.2], [0.5, 0.5], [0.9, 0.3], [0.7, 0.95]], dtype=torch.float64)
    xq = _features(query)
    *levels, ref = testing.refinement_samples(families.unit_square(4, "graded"), [1, 2, 3, 4, 7],
                                              _features)

    def apply(sample, uniform):
        x, _, w, _ = sample
        return layer(xq, query, x, None, torch.ones_like(w) if uniform else w)

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
    torch.testing.assert_close(layer(x, None, w), reference_cross(layer, x, x, w))
    assert not torch.allclose(train, layer(x, None, w))


def test_repr_and_errors():
    assert repr(ContinuumAttention(8, heads=2)).startswith(
        "ContinuumAttention(\n  dim=8, heads=2, dim_head=4, dropout=0.0")
    assert "source_dim=3" in repr(ContinuumCrossAttention(8, source_dim=3))
    with pytest.raises(ValueError, match="divisible"):
        ContinuumAttention(10, heads=4)
    with pytest.raises(ValueError, match="pass both batch_query and batch_source"):
        ContinuumCrossAttention(8)(torch.randn(5, 8), None, torch.randn(3, 8), None,
                                   torch.rand(3), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="weight must have shape"):
        ContinuumAttention(8)(torch.randn(5, 8), None, torch.rand(4))


def test_example_attention_cross_mesh():
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "attention_cross_mesh.py"
    spec = importlib.util.spec_from_file_location("attention_cross_mesh", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    result = example.run(levels=4, reference_level=6)
    assert abs(result["weighted_rate"] - 2.0) < 0.3, result
    assert result["unweighted_final_error"] > 10 * result["weighted_final_error"], result
