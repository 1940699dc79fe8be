"""The mesh-native FNO: spectral padding, refinement convergence, batching, trained transfer."""

import pytest
import torch
from torch_geometric.data import Batch

from geoattn.data import darcy_samples
from geoattn.eval import cross_mesh_report
from geoattn.mesh import families, from_meshio
from geoattn.models import MeshFNO, build_model
from geoattn.nn import SpectralIntegral
from geoattn.testing import convergence_rate
from geoattn.train import NormalizedOperator, Trainer


def _f(pos):
    return torch.stack([torch.sin(2 * pos[:, 0]) * torch.cos(pos[:, 1]), pos[:, 0] * pos[:, 1]], 1)


def _model(**kw):
    torch.manual_seed(0)
    return MeshFNO(2, 1, width=12, depth=2, modes=2, **kw).double().eval()


def test_padding_is_a_larger_box():
    """With padding p the layer on the unit square equals the unpadded layer on the nodes of the
    box [0, 1 + p]^2 (the same coefficients of a zero-extended function)."""
    torch.manual_seed(0)
    padded = SpectralIntegral(1, 1, 2, 2, padding=0.5).double()
    plain = SpectralIntegral(1, 1, 2, 2).double()
    plain.load_state_dict(padded.state_dict())
    pos = torch.rand(40, 2, dtype=torch.float64)
    pos[0], pos[1] = torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])
    x, w = torch.rand(40, 1, dtype=torch.float64), torch.rand(40, dtype=torch.float64)
    corner = torch.tensor([[1.5, 1.5]], dtype=torch.float64)  # a zero-weight node fixes the box
    out = plain(torch.cat([x, torch.zeros(1, 1, dtype=x.dtype)]), torch.cat([pos, corner]),
                torch.cat([w, torch.full((1,), 1e-300, dtype=w.dtype)]))[:40]
    assert torch.allclose(padded(x, pos, w), out, atol=1e-12)
    with pytest.raises(ValueError, match="padding"):
        SpectralIntegral(1, 1, 2, 2, padding=-0.1)


@torch.no_grad()
def test_untrained_model_converges_under_refinement_of_graded_mesh():
    mesh = families.unit_square(4, "graded")
    levels = [from_meshio(families.refine(mesh, t) if t else mesh, dtype=torch.float64) for t in range(4)]
    model = _model()
    outs = [model(_f(d.pos), d.pos, d.weight) for d in levels]
    n = levels[0].num_nodes
    errors = [float((o[:n] - outs[-1][:n]).abs().max()) for o in outs[:-1]]
    assert convergence_rate([1, 0.5, 0.25], errors) > 1.6, errors


@torch.no_grad()
def test_batched_equals_separate_and_hparams_rebuild():
    mesh = families.unit_square(4, "irregular", seed=1)
    data = [from_meshio(m, dtype=torch.float64) for m in (mesh, families.refine(mesh, 1))]
    for d in data:
        d.x = _f(d.pos)
    model = _model()
    b = Batch.from_data_list(data)
    sep = torch.cat([model(d.x, d.pos, d.weight) for d in data])
    assert torch.allclose(model(b.x, b.pos, b.weight, b.batch), sep, atol=1e-12)
    again = build_model("mesh_fno", **model.hparams).double()
    again.load_state_dict(model.state_dict())
    assert torch.equal(again(data[0].x, data[0].pos, data[0].weight), model(data[0].x, data[0].pos, data[0].weight))


def test_trained_model_keeps_its_error_on_refined_and_graded_meshes():
    """Regression: trained briefly on one irregular mesh, the error on a refined and on a graded
    mesh of the same continuum samples stays within 25 % of the training-mesh error."""
    meshes = {"train": families.unit_square(12, "irregular", seed=1)}
    meshes["refined"] = families.refine(meshes["train"], 1)
    meshes["graded"] = families.unit_square(24, "graded")
    train = darcy_samples({"train": meshes["train"]}, 48, seed=0, family="lognormal")["train"]
    test = darcy_samples(meshes, 6, seed=0, family="lognormal", start=48)
    torch.manual_seed(0)
    op = NormalizedOperator(MeshFNO(1, 1, width=16, depth=3, modes=3))
    Trainer(op, epochs=12, batch_size=4, lr=3e-3, progress=False).fit(train)
    report = cross_mesh_report({"fno": op}, test)
    assert report.mean("fno", "train") < 0.15, report.table()
    for mesh in ("refined", "graded"):
        assert report.ratio("fno", mesh) < 1.25, report.table()
