"""ViT-NO with the exact (P1) patch lift, ``quadrature="p1"``: batched equals separate, rebuilt
from its hparams, and the option's refusals."""

import pytest
import torch

from geoattn.errors import ConfigError
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import ViTNO, build_model
from geoattn.testing import assert_batched_equals_separate


def _data():
    data = [from_meshio(families.unit_square(6, "irregular", seed=1), dtype=torch.float64),
            from_meshio(families.unit_square(5, "graded"), dtype=torch.float64),
            from_meshio(families.refine(families.unit_square(4, "irregular", seed=2), 1), dtype=torch.float64)]
    for d in data:
        d.x = torch.stack([torch.sin(2 * d.pos[:, 0]) * torch.cos(d.pos[:, 1]), d.pos[:, 0] * d.pos[:, 1]], 1)
    return data


@pytest.mark.parametrize("method", ["rcb", "metis", None], ids=["fitted-rcb", "fitted-metis", "on-the-fly"])
def test_p1_lift_batched_equals_separate(method):
    torch.manual_seed(0)
    model = build_model("vit", in_channels=2, out_channels=1, width=8, depth=1, num_heads=2, num_patches=4,
                        modes=2, quadrature="p1", final_modes=2).double().eval()
    data = _data()
    if method is not None:
        from geoattn.mesh.partition import partition
        d = data[0]
        model.set_partition(partition(d.pos, d.weight, 4, cells=d.cells, method=method))
    with torch.no_grad():
        assert_batched_equals_separate(model, data, atol=1e-10)
    assert model.patch_index(Mesh.from_sample(data[0])).p1 is not None


def test_p1_lift_differs_from_nodal_and_has_gradients():
    torch.manual_seed(0)
    kw = dict(width=8, depth=1, num_heads=2, num_patches=4, modes=1)
    nodal, p1 = ViTNO(2, 1, **kw).double(), ViTNO(2, 1, quadrature="p1", **kw).double()
    p1.load_state_dict(nodal.state_dict())
    d = _data()[0]
    m = Mesh.from_sample(d)
    out = p1(d.x, m)
    assert not torch.allclose(out, nodal(d.x, m))
    out.square().sum().backward()
    assert all(p.grad is not None for p in p1.lift.layer.parameters())


@pytest.mark.parametrize("keyword", ["quadrature", "scores"])
def test_p1_refusals(keyword):
    """The exact lift (``quadrature``) and scores (``scores``) are ViT-NO's, in 2-D, on meshes
    with cells."""
    with pytest.raises(ConfigError):
        build_model("fano", in_channels=1, out_channels=1, **{keyword: "p1"})
    with pytest.raises(ConfigError):
        ViTNO(1, 1, **{keyword: "exact"})
    with pytest.raises(ConfigError):
        ViTNO(1, 1, dim=3, **{keyword: "p1"})
    d = _data()[0]
    model = ViTNO(2, 1, width=8, depth=1, num_heads=2, num_patches=4, modes=1, **{keyword: "p1"}).double()
    with pytest.raises(ValueError, match="no cells"):
        model(d.x, Mesh(d.pos, d.weight))
