"""Per-mesh structure cache: exact keys, LRU eviction, and models that build per-mesh structures once."""

import pytest
import torch

import geoattn.models.gno as gno_module
from geoattn.mesh.cache import StructureCache, fingerprint
from geoattn.models import build_model


def test_fingerprint_names_the_exact_contents():
    pos = torch.rand(10, 2)
    nudged = pos.clone()
    nudged.view(torch.int32)[3, 1] ^= 1  # one bit of one coordinate
    assert fingerprint(pos, None) == fingerprint(pos.clone(), None)
    assert fingerprint(pos) != fingerprint(nudged)
    assert fingerprint(pos) != fingerprint(pos.double())  # same values, other dtype
    assert fingerprint(pos) != fingerprint(pos.reshape(5, 4))  # same bytes, other shape
    assert fingerprint(pos, None) != fingerprint(pos)


def test_least_recently_used_entry_is_evicted():
    cache, built = StructureCache(2), []

    def get(t):
        return cache.get((t,), lambda: built.append(float(t[0])) or float(t[0]))

    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    assert [get(a), get(b), get(a), get(c), get(a), get(b)] == [0, 1, 0, 2, 0, 1]
    assert built == [0, 1, 2, 1]  # b was the least recently used when c came
    assert len(cache) == 2 and (cache.hits, cache.misses) == (2, 4)
    assert cache.get((a,), lambda: "other", settings="r=2") == "other"  # settings are part of the key
    none = StructureCache(0)
    assert [none.get((a,), lambda: len(built)) for _ in range(2)] == [4, 4] and len(none) == 0
    with pytest.raises(ValueError, match=">= 0"):
        StructureCache(-1)


def test_gno_builds_the_radius_graph_once_per_mesh(monkeypatch, samples_mesh):
    calls = []
    real = gno_module.radius_graph
    monkeypatch.setattr(gno_module, "radius_graph", lambda *a, **k: calls.append(1) or real(*a, **k))
    pos, weight = samples_mesh
    torch.manual_seed(0)
    model = build_model("gno", in_channels=1, out_channels=1, width=8, depth=2, radius=0.3)
    uncached = build_model("gno", in_channels=1, out_channels=1, width=8, depth=2, radius=0.3)
    uncached.load_state_dict(model.state_dict())
    uncached._graphs = StructureCache(0)
    for seed in range(3):  # new function values on the same mesh: one graph
        x = torch.randn(len(pos), 1, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(model(x, pos, weight), uncached(x, pos, weight))
    assert len(calls) == 1 + 3
    model(x, pos + 0.01, weight)  # another mesh: another graph
    model.radius = 0.2  # another radius: another graph
    model(x, pos, weight)
    assert len(calls) == 4 + 2 and len(model._graphs) == 3


@pytest.fixture
def samples_mesh():
    from geoattn.mesh import families, from_meshio

    data = from_meshio(families.unit_square(6, "irregular"))
    return data.pos, data.weight
