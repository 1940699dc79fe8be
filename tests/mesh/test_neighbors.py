import pytest
import torch

from geoattn.mesh.neighbors import knn, knn_graph, radius, radius_graph


def _dense_pairs(ps, pt, r, bs=None, bt=None):
    d = torch.cdist(pt, ps)  # [N_t, N_s]
    ok = d <= r
    if bs is not None:
        ok &= bt[:, None] == bs[None, :]
    tgt, src = ok.nonzero(as_tuple=True)
    return {(int(s), int(t)) for s, t in zip(src, tgt)}


def _pairs(ei):
    return {(int(s), int(t)) for s, t in ei.t()}


def test_radius_graph_equals_dense():
    pos = torch.rand(300, 2, dtype=torch.float64)
    ei = radius_graph(pos, 0.1)
    assert _pairs(ei) == _dense_pairs(pos, pos, 0.1)
    no_loop = radius_graph(pos, 0.1, loop=False)
    assert _pairs(no_loop) == {p for p in _dense_pairs(pos, pos, 0.1) if p[0] != p[1]}
    # sorted by target
    assert torch.all(ei[1, 1:] >= ei[1, :-1])


def test_radius_bipartite_and_batched():
    ps, pt = torch.rand(200, 3), torch.rand(150, 3)
    bs, bt = torch.arange(200) % 3, torch.arange(150) % 3
    assert _pairs(radius(ps, pt, 0.3)) == _dense_pairs(ps, pt, 0.3)
    assert _pairs(radius(ps, pt, 0.3, bs, bt)) == _dense_pairs(ps, pt, 0.3, bs, bt)
    b = torch.arange(200) % 2
    assert _pairs(radius_graph(ps, 0.3, b)) == _dense_pairs(ps, ps, 0.3, b, b)


def test_knn_equals_dense():
    ps, pt = torch.rand(100, 2, dtype=torch.float64), torch.rand(40, 2, dtype=torch.float64)
    ei = knn(ps, pt, 5)
    nearest = torch.cdist(pt, ps).topk(5, largest=False).indices
    assert _pairs(ei) == {(int(s), t) for t in range(40) for s in nearest[t]}
    g = knn_graph(ps, 4)
    assert g.shape[1] == 400 and bool((g[0] != g[1]).all())
    assert knn_graph(ps, 4, loop=True).shape[1] == 500


def test_errors():
    pos = torch.rand(5, 2)
    with pytest.raises(ValueError, match="radius"):
        radius_graph(pos, 0.0)
    with pytest.raises(ValueError, match="k must be"):
        knn(pos, pos, 6)
    with pytest.raises(ValueError, match="both"):
        radius(pos, pos, 0.1, batch=torch.zeros(5, dtype=torch.long))
