"""torch.compile captures the single-mesh forward pass of the attention and graph models whole."""

import pytest
import torch

from geoattn.mesh import families, from_meshio
from geoattn.models import build_model


@pytest.mark.parametrize("name", ["tno", "galerkin", "gno", "slice"])
def test_single_mesh_forward_compiles_without_graph_breaks(name):
    """fullgraph=True fails on any graph break; the eager backend checks the capture (dynamo)
    without code generation, and the captured graph computes what the eager model does. GNO's
    radius graph comes from its structure cache, which runs eagerly by design (SciPy's KD-tree):
    there the graph breaks, by design."""
    torch._dynamo.reset()
    data = from_meshio(families.unit_square(5, "irregular"))
    model = build_model(name, in_channels=1, out_channels=1, width=8, depth=2).eval()
    x = torch.randn(data.num_nodes, 1)
    compiled = torch.compile(model, backend="eager", fullgraph=name != "gno")
    with torch.no_grad():
        assert torch.allclose(compiled(x, data.pos, data.weight), model(x, data.pos, data.weight),
                              rtol=1e-5, atol=1e-6)
