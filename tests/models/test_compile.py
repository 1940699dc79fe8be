"""torch.compile captures the forward pass of the attention and graph models whole, on one mesh
and on a batch of meshes of different sizes, once the mesh's structure is in its memo."""

import pytest
import torch

from geoattn.mesh import Mesh, families
from geoattn.models import build_model


@pytest.mark.parametrize("batched", [False, True], ids=["one mesh", "batch of 3 meshes"])
@pytest.mark.parametrize("name", ["tno", "galerkin", "gno", "slice", "mesh_fno"])
def test_forward_compiles_without_graph_breaks(name, batched):
    """fullgraph=True fails on any graph break; the eager backend checks the capture (dynamo)
    without code generation, and the captured graph computes what the eager model does. The
    first, eager call builds the mesh's structure (GNO's radius graph, with SciPy's KD-tree) into
    the mesh's memo; the layout of a batch is plain integers, so nothing is read back from the
    device inside the graph."""
    torch._dynamo.reset()
    meshes = [Mesh.from_meshio(families.unit_square(n, "irregular")) for n in ((5, 6, 7) if batched else (5,))]
    mesh = Mesh.batch(meshes)
    model = build_model(name, in_channels=1, out_channels=1, width=8, depth=2).eval()
    x = torch.randn(mesh.num_nodes, 1)
    with torch.no_grad():
        expected = model(x, mesh)  # warm-up: the memo holds the mesh's structure
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        assert torch.allclose(compiled(x, mesh), expected, rtol=1e-5, atol=1e-6)
