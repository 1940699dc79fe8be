"""The device backends of the neighbour search give the scipy path's graphs exactly.

A capped search with the packages' contract (at most ``M`` sources per query in an arbitrary
order, strict ``<`` in the inputs' dtype, sorted batches only), written by brute force in the
tests' ``conftest.py``, stands in for them, so
the cap doubling, the closed-ball filter and the batch sorting are tested without the packages;
the real ``torch-cluster`` is compared too where it is installed.
"""

import numpy as np
import pytest
import torch

from geoattn.mesh import neighbor_search
from geoattn.mesh.neighbor_search import capped_exact_radius, resolve_backend
from geoattn.mesh.neighbors import knn, knn_graph, radius, radius_graph
from geoattn.optional import MissingDependencyError


def _pairs(ei):
    return {(int(s), int(t)) for s, t in ei.t()}


def _capped_search(backend):
    return neighbor_search._search_fn(backend, "radius")


def test_capped_search_is_exact_after_doubling(fake_device_search):
    search = _capped_search(fake_device_search)
    gen = torch.Generator().manual_seed(1)
    pos = torch.rand(400, 2, generator=gen)
    calls = []

    def counting(*args, max_num_neighbors):
        calls.append(max_num_neighbors)
        return search(*args, max_num_neighbors=max_num_neighbors)

    src, dst = capped_exact_radius(counting, pos, pos, 0.15, first_cap=2)
    reference = _pairs(radius_graph(pos, 0.15, backend="scipy"))
    assert {(int(s), int(t)) for s, t in zip(src, dst)} == reference
    assert calls[0] == 2 and len(calls) > 2 and calls == [2 * 2 ** i for i in range(len(calls))]
    # the last cap is above every node's neighbour count, the one before it is not
    counts = np.bincount([t for _, t in reference])
    assert calls[-2] <= counts.max() < calls[-1]


def test_ties_at_the_radius_are_kept(fake_device_search):
    """Integer grid, r = 1: the four neighbours lie exactly on the sphere the packages exclude."""
    g = torch.arange(6, dtype=torch.float32)
    pos = torch.cartesian_prod(g, g)
    src, dst = capped_exact_radius(_capped_search(fake_device_search), pos, pos, 1.0)
    assert {(int(s), int(t)) for s, t in zip(src, dst)} == _pairs(radius_graph(pos, 1.0, backend="scipy"))
    assert len(src) == 36 + 2 * 2 * 6 * 5  # self-loops + both directions of the 60 grid edges


def test_graph_functions_through_a_device_backend_equal_scipy(fake_device_search):
    gen = torch.Generator().manual_seed(2)
    ps, pt = torch.rand(180, 3, generator=gen), torch.rand(120, 3, generator=gen)
    bs = torch.randint(0, 3, (180,), generator=gen)  # unsorted: sorted and mapped back
    bt = torch.randint(0, 3, (120,), generator=gen)
    for loop in (True, False):
        a = radius_graph(ps, 0.3, bs, loop=loop, backend=fake_device_search)
        b = radius_graph(ps, 0.3, bs, loop=loop, backend="scipy")
        assert torch.equal(a, b)  # same set, same order
    assert torch.equal(radius(ps, pt, 0.3, bs, bt, backend=fake_device_search),
                       radius(ps, pt, 0.3, bs, bt, backend="scipy"))
    assert torch.equal(knn(ps, pt, 4, bs, bt, backend=fake_device_search),
                       knn(ps, pt, 4, bs, bt, backend="scipy"))
    assert torch.equal(knn_graph(ps, 5, bs, backend=fake_device_search),
                       knn_graph(ps, 5, bs, backend="scipy"))


def test_device_knn_needs_k_sources_per_graph(fake_device_search):
    pos = torch.rand(10, 2)
    batch = torch.tensor([0] * 8 + [1] * 2)
    with pytest.raises(ValueError, match="fewer than k=3"):
        knn(pos, pos, 3, batch, batch, backend=fake_device_search)
    with pytest.raises(ValueError, match="fewer than k=3"):
        knn(pos, pos, 3, batch, batch, backend="scipy")


def test_backend_choice(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(neighbor_search, "_has_torch_cluster", lambda: False)
    monkeypatch.setattr(neighbor_search, "_has_pyg_lib", lambda op: False)
    assert resolve_backend("auto", cpu) == "scipy"
    assert resolve_backend("auto", cuda) == "scipy"
    with pytest.raises(MissingDependencyError, match="pip install torch-cluster"):
        resolve_backend("torch-cluster", cpu)
    with pytest.raises(ValueError, match="unknown neighbour-search backend"):
        resolve_backend("faiss", cpu)
    monkeypatch.setattr(neighbor_search, "_has_torch_cluster", lambda: True)
    assert resolve_backend("auto", cpu) == "scipy"  # scipy stays the CPU default
    assert resolve_backend("auto", cuda) == "torch-cluster"
    monkeypatch.setattr(neighbor_search, "_has_pyg_lib", lambda op: True)
    assert resolve_backend("auto", cuda) == "pyg-lib"
    assert resolve_backend("torch-cluster", cuda) == "torch-cluster"


def test_bad_backend_fails_before_any_work():
    with pytest.raises(ValueError, match="unknown neighbour-search backend"):
        radius_graph(torch.rand(5, 2), 0.5, backend="fast")


needs_torch_cluster = pytest.mark.skipif(not neighbor_search._has_torch_cluster(),
                                         reason="torch-cluster not installed")
devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@needs_torch_cluster
@pytest.mark.parametrize("device", devices)
def test_torch_cluster_equals_scipy(device):
    gen = torch.Generator().manual_seed(3)
    ps, pt = torch.rand(3000, 2, generator=gen), torch.rand(500, 2, generator=gen)
    bs = torch.randint(0, 4, (3000,), generator=gen)
    bt = torch.randint(0, 4, (500,), generator=gen)
    ps, pt, bs, bt = (t.to(device) for t in (ps, pt, bs, bt))
    for args in [(ps, 0.05), (ps, 0.05, bs)]:
        a = radius_graph(*args, backend="torch-cluster")
        assert a.device.type == device
        assert torch.equal(a.cpu(), radius_graph(*args, backend="scipy").cpu())
    assert torch.equal(radius(ps, pt, 0.08, bs, bt, backend="torch-cluster").cpu(),
                       radius(ps, pt, 0.08, bs, bt, backend="scipy").cpu())
    assert torch.equal(knn(ps, pt, 6, bs, bt, backend="torch-cluster").cpu(),
                       knn(ps, pt, 6, bs, bt, backend="scipy").cpu())
    g = torch.arange(8, dtype=torch.float32, device=device)
    grid = torch.cartesian_prod(g, g)
    assert torch.equal(radius_graph(grid, 1.0, backend="torch-cluster").cpu(),
                       radius_graph(grid, 1.0, backend="scipy").cpu())
