import math

import pytest
import torch

from geoattn.mesh import integrate
from geoattn.nn import functional as F
from geoattn.nn.functional import (dense_batch, graph_slices, log_weight_bias, num_graphs,
                                   quadrature_attention, segment_matmul, weighted_gram)

SORTED = torch.tensor([0, 0, 0, 2, 2, 3, 3, 3, 3, 3])  # graph 1 has no nodes
UNSORTED = torch.tensor([1, 0, 3, 1, 0, 0, 2, 3, 1, 0])
EMPTY = torch.zeros(0, dtype=torch.long)
EQUAL = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4, 4])  # graphs of one size: one batched product
EQUAL_UNSORTED = torch.tensor([3, 0, 4, 1, 0, 2, 4, 3, 1, 2])
BATCHES = [None, SORTED, UNSORTED, EQUAL, EQUAL_UNSORTED]
BATCH_IDS = ["none", "sorted", "unsorted", "equal", "equal-unsorted"]


def test_num_graphs_is_max_plus_one_and_one_for_none_or_empty():
    assert num_graphs() == 1 and num_graphs(None) == 1 and num_graphs(EMPTY) == 1
    assert num_graphs(None, EMPTY) == 1
    assert num_graphs(torch.tensor([0, 0, 1])) == 2
    assert num_graphs(torch.tensor([2, 0])) == 3  # the largest index, not the number present
    assert num_graphs(SORTED) == 4 and num_graphs(UNSORTED) == 4
    # several vectors (source and query side): the largest count
    assert num_graphs(torch.tensor([0, 1]), torch.tensor([0, 0, 0, 3])) == 4
    assert num_graphs(None, torch.tensor([0, 1, 2])) == 3
    assert num_graphs(EMPTY, torch.tensor([1])) == 2


@pytest.mark.parametrize("count", [None, 6], ids=["default", "trailing_empty"])
def test_graph_slices_match_a_loop_over_graphs(count):
    n = len(SORTED)
    slices = graph_slices(n, SORTED, count)
    expected = 4 if count is None else count
    assert len(slices) == expected
    x = torch.arange(n)
    for g, s in enumerate(slices):
        assert (s.start, s.stop) == (int((SORTED < g).sum()), int((SORTED <= g).sum()))
        assert torch.equal(x[s], x[SORTED == g])
    if count is not None:
        assert slices[4:] == [slice(n, n), slice(n, n)]


def test_graph_slices_of_no_batch_and_empty_batch():
    assert graph_slices(7) == [slice(0, 7)]
    assert graph_slices(0, EMPTY) == [slice(0, 0)]  # one empty graph
    assert graph_slices(0, EMPTY, 2) == [slice(0, 0), slice(0, 0)]


def test_dense_batch_pads_with_weight_zero_and_a_mask():
    sizes = [2, 4, 1]
    batch = torch.repeat_interleave(torch.tensor(sizes))
    n = len(batch)
    x, pos = torch.randn(n, 3), torch.randn(n, 2)
    w = torch.rand(n) + 0.1
    for batch_size in (None, 5):  # 5: two trailing graphs without nodes, all padding
        d = dense_batch(x, pos, w, batch, batch_size)
        b = batch_size or len(sizes)
        assert d.x.shape == (b, 4, 3) and d.pos.shape == (b, 4, 2) and d.weight.shape == (b, 4)
        for g in range(b):
            k = sizes[g] if g < len(sizes) else 0
            assert torch.equal(d.x[g, :k], x[batch == g])
            assert torch.equal(d.pos[g, :k], pos[batch == g])
            assert torch.equal(d.weight[g, :k], w[batch == g])
            assert torch.all(d.weight[g, k:] == 0)
            assert torch.equal(d.mask[g], torch.arange(4) < k)
    one = dense_batch(x, None, w)
    assert one.pos is None and one.x.shape == (1, n, 3) and bool(one.mask.all())
    torch.testing.assert_close(one.weight[0], w, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"weight must have shape \[N\] = \[7\]"):
        dense_batch(x, pos, w[:5], batch)


def test_log_weight_bias_is_log_with_minus_inf_at_zero_and_finite_gradients():
    w = torch.tensor([0.0, 1e-30, 0.25, 1.0, 3.0, 0.0], dtype=torch.float64, requires_grad=True)
    bias = log_weight_bias(w)
    positive = w.detach() > 0
    assert torch.all(bias[~positive] == float("-inf"))
    torch.testing.assert_close(bias[positive], torch.log(w.detach()[positive]), rtol=0, atol=0)
    assert log_weight_bias(w.detach(), dtype=torch.float32).dtype == torch.float32
    # d/dw log w = 1/w where w > 0; the zero weights get a finite (zero) gradient
    (grad,) = torch.autograd.grad(bias[positive].sum(), w)
    assert torch.isfinite(grad).all() and torch.all(grad[~positive] == 0)
    torch.testing.assert_close(grad[positive], 1 / w.detach()[positive])
    # through a softmax, where the -inf entries are used, too
    scores = torch.randn(3, 6, dtype=torch.float64)
    (grad,) = torch.autograd.grad((torch.softmax(scores + log_weight_bias(w), -1) ** 2).sum(), w)
    assert torch.isfinite(grad).all()


def _explicit_attention(q, k, v, weight, scale=None):
    """out_i = sum_j w_j exp(s_ij) v_j / sum_l w_l exp(s_il) with the N x N matrix, per graph and
    head; a graph without mass gives 0."""
    b, h, _, d = q.shape
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype)
    for g in range(b):
        if not bool((weight[g] > 0).any()):
            continue
        for head in range(h):
            e = weight[g] * torch.exp(q[g, head] @ k[g, head].T * scale)  # (Lq, Lk)
            out[g, head] = e @ v[g, head] / e.sum(1, keepdim=True)
    return out


@pytest.mark.parametrize("scale", [None, 0.7])
def test_quadrature_attention_equals_explicit_weighted_softmax(scale):
    b, h, lq, lk, d = 3, 2, 5, 7, 4
    q = torch.randn(b, h, lq, d, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, h, lk, d, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, h, lk, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(b, lk, dtype=torch.float64) + 0.05
    weight[0, 5:] = 0.0  # padding of graph 0
    weight[1, 2] = 0.0  # a node of weight 0 inside graph 1
    weight[2] = 0.0  # graph 2 has no mass: an empty integral
    out = quadrature_attention(q, k, v, weight, scale=scale)
    torch.testing.assert_close(out, _explicit_attention(q, k, v, weight, scale),
                               atol=1e-12, rtol=1e-12)
    assert torch.all(out[2] == 0)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    # uniform weights: plain softmax attention
    uniform = torch.full((b, lk), 0.3, dtype=torch.float64)
    s = q @ k.transpose(-1, -2) * (1 / math.sqrt(d) if scale is None else scale)
    torch.testing.assert_close(quadrature_attention(q, k, v, uniform, scale=scale),
                               torch.softmax(s, -1) @ v, atol=1e-12, rtol=1e-12)


def _explicit_gram(a, b, w, batch, count):
    """sum_j w_j a_j^T b_j per graph and head, one outer product per node."""
    out = torch.zeros(count, a.shape[1], a.shape[2], b.shape[2], dtype=a.dtype)
    for j in range(len(a)):
        g = 0 if batch is None else int(batch[j])
        out[g] += w[j] * a[j, :, :, None] * b[j, :, None, :]
    return out


@pytest.mark.parametrize("batch", BATCHES, ids=BATCH_IDS)
def test_weighted_gram_is_the_sum_of_weighted_outer_products(batch):
    a = torch.randn(10, 3, 4, dtype=torch.float64)
    b = torch.randn(10, 3, 5, dtype=torch.float64)
    w = torch.rand(10, dtype=torch.float64)
    if batch is None:
        gram = weighted_gram(a, b, w)
        torch.testing.assert_close(gram, _explicit_gram(a, b, w, None, 1)[0])
        torch.testing.assert_close(gram, integrate(a[..., :, None] * b[..., None, :], w))
        return
    count = int(batch.max()) + 1
    gram = weighted_gram(a, b, w, batch)
    torch.testing.assert_close(gram, _explicit_gram(a, b, w, batch, count))
    torch.testing.assert_close(gram, integrate(a[..., :, None] * b[..., None, :], w, batch, count))
    if batch is SORTED:
        assert torch.all(gram[1] == 0)  # the graph without nodes
    # trailing graphs without nodes
    torch.testing.assert_close(weighted_gram(a, b, w, batch, 6), _explicit_gram(a, b, w, batch, 6))


def test_weighted_gram_of_an_empty_batch_is_one_zero_matrix():
    a, b = torch.zeros(0, 2, 3), torch.zeros(0, 2, 4)
    gram = weighted_gram(a, b, torch.zeros(0), EMPTY)
    assert gram.shape == (1, 2, 3, 4) and torch.all(gram == 0)
    assert weighted_gram(a, b, torch.zeros(0), EMPTY, 3).shape == (3, 2, 3, 4)


@pytest.mark.parametrize("batch", BATCHES, ids=BATCH_IDS)
def test_segment_matmul_multiplies_each_node_by_its_graphs_matrix(batch):
    q = torch.randn(10, 3, 4, dtype=torch.float64)
    s = torch.randn(*(() if batch is None else (5,)), 3, 4, 2, dtype=torch.float64)
    out = segment_matmul(q, s, batch)
    assert out.shape == (10, 3, 2)
    for i in range(10):
        s_i = s if batch is None else s[batch[i]]  # (H, 4, 2)
        for h in range(3):
            torch.testing.assert_close(out[i, h], q[i, h] @ s_i[h], atol=1e-14, rtol=1e-14)


def test_segment_matmul_of_an_empty_batch_is_empty():
    out = segment_matmul(torch.zeros(0, 2, 3), torch.randn(1, 2, 3, 4), EMPTY)
    assert out.shape == (0, 2, 4)


def test_query_side_defaults_to_the_source_and_checks_the_keywords():
    x, pos, b = torch.rand(4, 2), torch.rand(4, 2), torch.tensor([0, 0, 1, 1])
    xq, pq, bq = torch.rand(3, 2), torch.rand(3, 2), torch.tensor([0, 1, 1])
    assert F.query_side(x, pos, b, None, None, None) == (x, pos, b)
    assert F.query_side(x, pos, b, xq, pq, bq) == (xq, pq, bq)
    with pytest.raises(ValueError, match="without x_query"):
        F.query_side(x, pos, b, None, pq, None)
    with pytest.raises(ValueError, match="both batch and batch_query"):
        F.query_side(x, pos, b, xq, pq, None)
