"""ViT NO and FANO on the Mesh contract: a batch of meshes equals each mesh alone (with and
without a query mesh), structure is built once per Mesh, and a torch.compile graph is whole."""

import pytest
import torch

from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import build_model
from geoattn.nn.patch_pairs import patch_pairs as real_patch_pairs

NAMES = ["vit", "fano"]


def _mesh(n, seed=0):
    d = from_meshio(families.unit_square(n, "irregular", seed=seed), dtype=torch.float64)
    return Mesh(d.pos, d.weight, d.cells)


def _x(mesh):
    return torch.sin(3 * mesh.pos[:, :1]) * torch.cos(2 * mesh.pos[:, 1:])


def _model(name, **kw):
    torch.manual_seed(0)
    kw = {"quadrature": "nodal"} | kw
    return build_model(name, in_channels=1, out_channels=1, width=8, depth=2, num_heads=2,
                       num_patches=4, modes=1, **kw).double().eval()


@pytest.fixture(scope="module")
def meshes():
    return [_mesh(n, seed=n) for n in (7, 9, 11)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fitted", [False, True])
@torch.no_grad()
def test_a_batch_of_meshes_equals_each_mesh_alone(name, fitted, meshes):
    model = _model(name, decoder="cross", final_modes=2)
    if fitted:
        model.fit_mesh(meshes[0])
    batch = Mesh.batch(meshes)
    x = torch.cat([_x(m) for m in meshes])
    out = model(x, batch)
    alone = torch.cat([model(_x(m), m) for m in meshes])
    assert torch.allclose(out, alone, atol=1e-12)
    queries = [_mesh(n, seed=n + 1) for n in (5, 6, 8)]
    query = Mesh.batch(queries)
    out = model(x, batch, query=query)
    assert out.shape == (query.num_nodes, 1)
    alone = torch.cat([model(_x(m), m, query=q) for m, q in zip(meshes, queries)])
    assert torch.allclose(out, alone, atol=1e-12)
    with pytest.raises(ValueError, match="graphs"):
        model(x, batch, query=queries[0])


@pytest.mark.parametrize("name", NAMES)
@torch.no_grad()
def test_structure_is_built_once_per_mesh_and_batch_members_reuse_it(name, meshes, monkeypatch):
    built = []
    real = real_patch_pairs
    from geoattn.models import patched
    monkeypatch.setattr(patched, "patch_pairs", lambda *a, **k: built.append(1) or real(*a, **k))
    model = _model(name)
    model.fit_mesh(meshes[0])
    x = torch.cat([_x(m) for m in meshes])
    model(x, Mesh.batch(meshes))
    assert len(built) == 3  # once per member
    model(x, Mesh.batch(meshes))  # a new batch of the same members: their memos
    model(_x(meshes[1]), meshes[1])
    assert len(built) == 3


@pytest.mark.parametrize("design", [dict(decoder="cross"), dict(quadrature="tokens", grid=4)],
                         ids=["nodal-cross", "tokens"])
@pytest.mark.parametrize("name", NAMES)
def test_no_graph_breaks_on_a_batch_of_three_meshes_after_warm_up(name, design, meshes):
    """Both designs, the nodal one (its cross-attention decoder) and the patches' grids, compile
    whole once the structure is built."""
    torch._dynamo.reset()
    model = _model(name, **design)
    model.fit_mesh(meshes[0])
    batch = Mesh.batch(meshes)
    x = torch.cat([_x(m) for m in meshes])
    model(x, batch)  # builds the structure
    explained = torch._dynamo.explain(lambda: model(x, batch))()
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
