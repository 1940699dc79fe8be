"""The attention models on the Mesh contract: ``model(x, mesh, *, query=None)`` on a batch of
meshes computes what it computes on each mesh alone, and a batch of meshes of different sizes compiles without graph breaks
(the layers take the batch layout from the Mesh instead of reading the batch vector back)."""

import pytest
import torch

from geoattn.mesh import Layout, Mesh, families, from_meshio
from geoattn.models import build_model
from geoattn.nn import ContinuumAttention, FourierAttention, GalerkinAttention, SliceAttention

VARIANTS = {
    "tno": ("tno", {}),
    "tno_cross": ("tno", {"decoder": "cross"}),
    "galerkin": ("galerkin", {}),
    "galerkin_cross": ("galerkin", {"decoder": "cross"}),
    "fourier_cross": ("galerkin", {"attention": "fourier", "decoder": "cross"}),
    "cao_regular": ("galerkin", {"block": "cao", "norm": "regular"}),
    "cao_spectral": ("galerkin", {"block": "cao", "decoder": "spectral", "spectral": {"width": 6, "modes": 2}}),
    "slice": ("slice", {"num_slices": 4}),
}


def _model(variant: str, dtype=torch.float64):
    name, kw = VARIANTS[variant]
    torch.manual_seed(0)
    return build_model(name, in_channels=1, out_channels=1, width=8, depth=2, num_heads=2, **kw).to(dtype).eval()


def _samples(sizes=(4, 5, 6), seed=0, dtype=torch.float64):
    out = []
    g = torch.Generator().manual_seed(seed)
    for n in sizes:
        d = from_meshio(families.unit_square(n, "irregular", seed=seed + n), dtype=dtype)
        d.x = torch.randn(d.num_nodes, 1, generator=g, dtype=dtype)
        out.append(d)
    return out


def _setup(variant):
    """The variant's model, three samples on meshes of different sizes, and their Meshes."""
    samples = _samples()
    return _model(variant), samples, [Mesh.from_sample(d) for d in samples]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_batch_of_three_meshes_of_different_sizes_equals_each_mesh_alone(variant):
    model, samples, meshes = _setup(variant)
    batch = Mesh.batch(meshes)
    x = torch.cat([d.x for d in samples])
    with torch.no_grad():
        torch.testing.assert_close(model(x, batch), torch.cat([model(d.x, m) for d, m in zip(samples, meshes)]),
                                   rtol=0, atol=1e-12)
        if VARIANTS[variant][1].get("decoder") == "cross":
            queries = [Mesh.from_sample(q) for q in _samples((3, 4, 5), seed=7)]
            alone = torch.cat([model(d.x, m, query=q) for d, m, q in zip(samples, meshes, queries)])
            torch.testing.assert_close(model(x, batch, query=Mesh.batch(queries)), alone, rtol=0, atol=1e-12)


def test_the_slice_transformer_answers_on_its_input_mesh_only():
    model = _model("slice")
    d = _samples((4,))[0]
    mesh = Mesh.from_sample(d)
    with pytest.raises(ValueError, match="answers on its input mesh"):
        model(d.x, mesh, query=mesh)


def test_the_mesh_checks_run_once_per_mesh():
    model = _model("tno")
    d = _samples((4,))[0]
    mesh = Mesh.from_sample(d)
    with torch.no_grad():
        model(d.x, mesh)
    assert mesh.checked


@pytest.mark.parametrize("variant", ["tno", "tno_cross", "galerkin", "galerkin_cross", "fourier_cross",
                                     "cao_regular", "slice"])
def test_a_batch_of_three_meshes_compiles_without_graph_breaks(variant):
    """After one warm-up call (which checks the mesh once), the forward pass on a Mesh.batch of
    three meshes of different sizes is one graph: the layers take the graphs' sizes from the
    batch layout and read nothing back from the device."""
    torch._dynamo.reset()
    model = _model(variant, torch.float32)
    samples = _samples((4, 5, 6), dtype=torch.float32)
    mesh = Mesh.batch([Mesh.from_sample(d) for d in samples])
    x = torch.cat([d.x for d in samples])
    query = None
    if VARIANTS[variant][1].get("decoder") == "cross":
        query = Mesh.batch([Mesh.from_sample(q) for q in _samples((3, 4, 5), seed=7, dtype=torch.float32)])

    def call():
        return model(x, mesh) if query is None else model(x, mesh, query=query)

    with torch.no_grad():
        call()
        explained = torch._dynamo.explain(call)()
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]


def _batch_inputs(channels=8):
    torch.manual_seed(1)
    counts = (5, 9, 7)
    n = sum(counts)
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor(counts))
    x, pos, weight = torch.randn(n, channels), torch.rand(n, 2), torch.rand(n) + 0.1
    return x, pos, weight, batch, Layout(counts)


@pytest.mark.parametrize("layer", [
    lambda: ContinuumAttention(8, num_heads=2),
    lambda: GalerkinAttention(8, num_heads=2, dim=2),
    lambda: FourierAttention(8, num_heads=2, dim=2),
    lambda: SliceAttention(8, num_heads=2, num_slices=4),
])
def test_layers_with_the_layout_equal_the_layers_without_it_and_compile_whole(layer):
    layer = layer().eval()
    x, pos, weight, batch, layout = _batch_inputs()
    with torch.no_grad():
        expected = layer(x, pos, weight, batch)
        assert torch.equal(layer(x, pos, weight, batch, layout=layout), expected)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(lambda: layer(x, pos, weight, batch, layout=layout))()
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]


@pytest.mark.parametrize("layer", [
    lambda: ContinuumAttention(8, num_heads=2),
    lambda: GalerkinAttention(8, num_heads=2, dim=2),
])
def test_cross_layers_take_the_query_layout(layer):
    layer = layer().eval()
    x, pos, weight, batch, layout = _batch_inputs()
    counts_q = (4, 2, 6)
    batch_q = torch.repeat_interleave(torch.arange(3), torch.tensor(counts_q))
    xq, pq = torch.randn(sum(counts_q), 8), torch.rand(sum(counts_q), 2)
    query = dict(x_query=xq, pos_query=pq, batch_query=batch_q)
    with torch.no_grad():
        expected = layer(x, pos, weight, batch, **query)
        got = layer(x, pos, weight, batch, layout=layout, layout_query=Layout(counts_q), **query)
        assert torch.equal(got, expected)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(
            lambda: layer(x, pos, weight, batch, layout=layout, layout_query=Layout(counts_q), **query))()
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
