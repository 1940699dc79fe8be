"""The Mesh contract for MeshFNO, MultigridOperator and GNO: ``model(x, mesh)`` equals the former
call, a batch of meshes equals each mesh alone, per-mesh structure is built once per Mesh and
kept in its memo, and after a warm-up call torch.compile captures a batch of meshes whole."""

import pytest
import torch
from smooth_inputs import smooth_input

from geoattn.mesh import Mesh, families
from geoattn.models import build_model
from geoattn.nn import LocalIntegral, SpectralIntegral, SpectralSmoothing

CONFIGS = {
    "gno": ("gno", {"radius": 0.3}),
    "mesh_fno": ("mesh_fno", {}),
    "mesh_fno_p1": ("mesh_fno", {"quadrature": "p1"}),
    "mesh_fno_local": ("mesh_fno", {"local": {"radius": 0.4}}),
    "mesh_fno_period": ("mesh_fno", {"period": 1.0}),
    "multigrid": ("multigrid", {"grid": 8}),
}


def _model(label: str, dtype=torch.float64):
    name, kw = CONFIGS[label]
    torch.manual_seed(0)
    return build_model(name, in_channels=2, out_channels=1, width=8, depth=2, **kw).to(dtype).eval()


def _meshes(dtype=torch.float64, sizes=(4, 5, 6)) -> list[Mesh]:
    """Meshes of different sizes, with their triangles."""
    return [Mesh.from_meshio(families.unit_square(n, "irregular", seed=n), dtype=dtype) for n in sizes]


def _field(mesh: Mesh) -> torch.Tensor:
    return smooth_input(mesh.pos)


@pytest.mark.parametrize("label", sorted(CONFIGS))
@torch.no_grad()
def test_a_batch_of_meshes_equals_each_mesh_alone(label):
    model, meshes = _model(label), _meshes()
    outs = [model(_field(m), m) for m in meshes]
    batch = Mesh.batch(meshes)
    x = torch.cat([_field(m) for m in meshes])
    batched = model(x, batch)
    torch.testing.assert_close(batched, torch.cat(outs), rtol=0, atol=1e-12)
    assert torch.equal(model(x, batch), batched)  # again, from the memo


@pytest.mark.parametrize("label, module, name", [
    ("gno", "geoattn.models.gno", "radius_graph"),
    ("multigrid", "geoattn.models.multigrid", "restriction"),
    ("mesh_fno_p1", "geoattn.models.fno", "p1_fourier_basis"),
])
@torch.no_grad()
def test_structure_is_built_once_per_mesh(label, module, name, monkeypatch):
    import importlib

    mod = importlib.import_module(module)
    builds, build = [], getattr(mod, name)
    monkeypatch.setattr(mod, name, lambda *a, **k: builds.append(1) or build(*a, **k))
    model, meshes = _model(label), _meshes()
    mesh = meshes[0]
    out = model(_field(mesh), mesh)
    assert len(builds) == 1
    assert torch.equal(model(_field(mesh), mesh), out) and len(builds) == 1
    batch = Mesh.batch(meshes)  # the first member's structure is in its memo already
    x = torch.cat([_field(m) for m in meshes])
    model(x, batch)
    assert len(builds) == 3
    model(x, batch)
    model(x, Mesh.batch(meshes[::-1]))  # another batch of the same members: nothing new
    assert len(builds) == 3
    model(_field(mesh), Mesh.from_meshio(families.unit_square(4, "irregular", seed=4), dtype=torch.float64))
    assert len(builds) == 4  # another Mesh object, the same nodes: its own memo


def test_local_integral_matrices_are_built_once_per_mesh(monkeypatch):
    builds, matrix = [], LocalIntegral.matrix
    monkeypatch.setattr(LocalIntegral, "matrix", lambda self, *a: builds.append(1) or matrix(self, *a))
    model, meshes = _model("mesh_fno_local"), _meshes()
    with torch.no_grad():
        model(_field(meshes[0]), meshes[0])
        model(_field(meshes[0]), meshes[0])
    assert len(builds) == 1  # one radius for every block: one matrix per mesh
    batch = Mesh.batch(meshes)
    x = torch.cat([_field(m) for m in meshes])
    layer = model.local[0]
    h = torch.randn(batch.num_nodes, layer.in_channels, dtype=torch.float64)
    with torch.no_grad():
        model(x, batch)
        assert len(builds) == 3
        alone = torch.cat([layer(h[s], m.pos, m.weight, mesh=m) for s, m in zip(batch.layout.slices(), meshes)])
        torch.testing.assert_close(layer(h, batch.pos, batch.weight, batch.batch_vector, mesh=batch), alone,
                                   rtol=0, atol=1e-12)
        # without a mesh the layer builds its matrices on every call, with the same result
        torch.testing.assert_close(layer(h, batch.pos, batch.weight, batch.batch_vector), alone, rtol=0, atol=1e-12)
    assert len(builds) == 6


@pytest.mark.parametrize("label", ["gno", "mesh_fno", "mesh_fno_period", "mesh_fno_p1", "multigrid"])
def test_batch_of_three_meshes_compiles_without_graph_breaks(label):
    """After one warm-up call (which builds the structure into the meshes' memos) dynamo
    captures the forward pass on a batch of three meshes of different sizes in one graph: the
    layout comes from the Mesh, the structure from its memo, and nothing is read back from the
    device."""
    torch._dynamo.reset()
    model, meshes = _model(label, torch.float32), _meshes(torch.float32)
    batch = Mesh.batch(meshes)
    x = torch.cat([_field(m) for m in meshes])
    with torch.no_grad():
        eager = model(x, batch)  # warm-up
        explained = torch._dynamo.explain(lambda: model(x, batch))()
        assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
        compiled = torch.compile(lambda: model(x, batch), backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(), eager, rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_spectral_layers_take_the_layout_and_give_the_same_result():
    """With the Layout the spectral layers read no sizes from the device and compute what they
    compute without it, also on query points."""
    meshes = _meshes()
    batch = Mesh.batch(meshes)
    x = torch.cat([_field(m) for m in meshes])
    queries = Mesh.batch([Mesh(m.pos[::2], m.weight[::2]) for m in meshes])
    torch.manual_seed(0)
    layer = SpectralIntegral(1, 2, 3, 2, padding=0.25).double()
    args = (x, batch.pos, batch.weight, batch.batch_vector)
    plain = layer(*args)
    assert torch.equal(layer(*args, layout=batch.layout), plain)
    basis = layer.basis(batch.pos, batch.weight, batch.batch_vector, layout=batch.layout)
    assert basis.frame.counts == batch.layout.counts
    assert torch.equal(layer(*args, basis=basis, layout=batch.layout), plain)
    query = dict(pos_query=queries.pos, batch_query=queries.batch_vector)
    assert torch.equal(layer(*args, **query, layout=batch.layout, layout_query=queries.layout), layer(*args, **query))
    smoothing = SpectralSmoothing(3, 2).double()
    assert torch.equal(smoothing(*args, layout=batch.layout), smoothing(*args))
    # a basis made by another layer with the same modes fits; one with other modes does not
    other = SpectralIntegral(1, 2, 3, 2, padding=0.25).double()
    assert torch.equal(other(*args, basis=basis), other(*args))
    with pytest.raises(ValueError, match="other modes"):
        SpectralIntegral(1, 2, 2, 2, padding=0.25).double()(*args, basis=basis)
