import pytest
import torch

from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import TNO, build_model
from geoattn.testing import convergence_rate


def _f(pos):
    return torch.stack([torch.sin(2 * pos[:, 0]) * torch.cos(pos[:, 1]), pos[:, 0] * pos[:, 1]], 1)


def _levels(kind="graded", times=(0, 1, 2, 3)):
    mesh = families.unit_square(4, kind)
    return [from_meshio(families.refine(mesh, t) if t else mesh, dtype=torch.float64) for t in times]


def _model(**kw):
    torch.manual_seed(0)
    return TNO(2, 1, width=16, depth=2, **kw).double().eval()


def _errors(outputs, n):
    """Max error at the coarse nodes (kept first by red refinement) against the finest level."""
    return [float((o[:n] - outputs[-1][:n]).abs().max()) for o in outputs[:-1]]


@torch.no_grad()
def test_untrained_tno_converges_under_refinement_of_graded_mesh():
    levels = _levels()
    model = _model()
    weighted = [model(_f(d.pos), Mesh(d.pos, d.weight)) for d in levels]
    errors = _errors(weighted, levels[0].num_nodes)
    assert convergence_rate([1, 0.5, 0.25], errors) > 1.6, errors


@torch.no_grad()
def test_cross_decoder_answers_on_query_mesh_and_converges_in_the_source():
    levels = _levels()
    query = from_meshio(families.unit_square(5, "irregular", seed=2), dtype=torch.float64)
    model = _model(decoder="cross")
    outs = [model(_f(d.pos), Mesh(d.pos, d.weight), query=Mesh(query.pos, query.weight)) for d in levels]
    assert outs[0].shape == (query.num_nodes, 1)
    errors = _errors(outs, query.num_nodes)
    assert convergence_rate([1, 0.5, 0.25], errors) > 1.6, errors
    # on its own nodes as queries it is the same operator as without a query mesh
    d = levels[1]
    assert torch.allclose(model(_f(d.pos), Mesh(d.pos, d.weight)), model(_f(d.pos), Mesh(d.pos, d.weight), query=Mesh(d.pos, d.pos.new_ones(len(d.pos)))))


def test_batched_equals_separate_and_hparams_rebuild():
    levels = _levels(times=(0, 1))
    model = _model()
    from torch_geometric.data import Batch
    for d in levels:
        d.x = _f(d.pos)
    b = Batch.from_data_list(levels)
    out = model(b.x, Mesh(b.pos, b.weight, batch=b.batch))
    sep = torch.cat([model(d.x, Mesh(d.pos, d.weight)) for d in levels])
    assert torch.allclose(out, sep, atol=1e-12)
    again = build_model("tno", **model.hparams).double()
    again.load_state_dict(model.state_dict())
    assert torch.equal(again(levels[0].x, Mesh(levels[0].pos, levels[0].weight)), model(levels[0].x, Mesh(levels[0].pos, levels[0].weight)))


def test_query_mesh_needs_the_cross_decoder():
    model = _model()
    z = lambda *shape: torch.zeros(*shape, dtype=torch.float64)  # noqa: E731
    with pytest.raises(ValueError, match="decoder='cross'"):
        model(z(5, 2), Mesh(z(5, 2), z(5) + 1), query=Mesh(z(3, 2), z(3) + 1))
