"""Evaluating an operator on meshes refined to the training mesh's size, read at their nodes."""

import meshio
import numpy as np
import pytest
import torch

from geoattn.compat import MeshCall
from geoattn.eval import RefinedOperator, training_size
from geoattn.mesh import Mesh, families, from_meshio


def test_resolved_quadrature_reads_the_output_at_the_original_nodes():
    """A pointwise operator gives the same output through the wrapper (the original nodes come
    first in the refined mesh, with their own values); an integral operator runs on the refined
    nodes, each graph of the batch on its own: the domain mean of a linear input (exact for the
    lumped quadrature on any mesh) comes back per graph."""
    meshes = {"train": families.unit_square(6, "irregular"), "graded": families.unit_square(6, "graded")}
    size = training_size(meshes["train"])
    graded = from_meshio(meshes["graded"])
    one = Mesh.from_sample(graded)
    mesh = Mesh.batch([one, one])
    pos, batch = mesh.pos, mesh.batch_vector
    x = torch.cat([graded.pos[:, :1], 2 * graded.pos[:, 1:]])  # two linear inputs

    class Pointwise(torch.nn.Module):
        def forward(self, x, pos, weight, batch=None):
            return 3 * x + pos[:, :1]

    class Mean(torch.nn.Module):
        seen = []

        def forward(self, x, pos, weight, batch=None):
            self.seen.append(len(pos))
            total = torch.zeros(int(batch.max()) + 1, 1).index_add_(0, batch, weight[:, None] * x)
            return (total / torch.zeros_like(total).index_add_(0, batch, weight[:, None]))[batch]

    weight = torch.cat([graded.weight, graded.weight])
    pointwise = RefinedOperator(MeshCall(Pointwise()), size)
    torch.testing.assert_close(pointwise(x, mesh), Pointwise()(x, pos, weight, batch))
    mean = RefinedOperator(MeshCall(Mean()), size)(x, mesh)
    assert Mean.seen[-1] > len(pos)  # the refined nodes of both graphs
    torch.testing.assert_close(mean[0], torch.tensor([0.5]))  # mean of x over the unit square
    torch.testing.assert_close(mean[-1], torch.tensor([1.0]))  # mean of 2y
    with pytest.warns(DeprecationWarning, match="ResolvedQuadrature"):
        from geoattn.eval import ResolvedQuadrature
    assert ResolvedQuadrature is RefinedOperator  # the former name
    # the former signature (op, meshes, size) still builds it; the meshes are not needed
    assert ResolvedQuadrature(MeshCall(Mean()), meshes.values(), size).size == size


def test_the_refinement_is_built_once_per_mesh(monkeypatch):
    """The refined mesh lives in the Mesh's memo: a second call, or another operator of the same
    size, refines nothing; a mesh without cells is refused with a message naming them."""
    import geoattn.mesh.mesh as mesh_module

    calls = []
    plain = mesh_module._refine_one
    monkeypatch.setattr(mesh_module, "_refine_one", lambda m, size: calls.append(size) or plain(m, size))
    sample = from_meshio(families.unit_square(5, "irregular"))
    mesh = Mesh.from_sample(sample)
    size = training_size(families.unit_square(5, "irregular")) / 2
    x = sample.pos[:, :1]
    class Same(torch.nn.Module):
        def forward(self, x, mesh):
            return x

    a = RefinedOperator(Same(), size)
    b = RefinedOperator(Same(), size)
    for op in (a, a, b):
        torch.testing.assert_close(op(x, mesh), x)
    assert calls == [size]
    with pytest.raises(ValueError, match="cells"):
        a(x, Mesh(sample.pos, sample.weight))


def test_a_trained_operator_on_the_graded_mesh_sees_the_refined_quadrature():
    """A TNO (global attention, a quadrature over the nodes) on a graded mesh, through the
    wrapper, equals the TNO run by hand on the refined mesh with the interpolated input."""
    from geoattn.mesh.refinement import refine_to
    from geoattn.models import build_model

    train, graded = families.unit_square(6, "irregular"), families.unit_square(6, "graded")
    size = training_size(train)
    torch.manual_seed(0)
    model = build_model("tno", in_channels=1, out_channels=1, dim=2, width=8, depth=1, num_heads=2).double()
    sample = from_meshio(graded, dtype=torch.float64)
    x = torch.sin(3 * sample.pos[:, :1]) + sample.pos[:, 1:]
    wrapped = RefinedOperator(model, size)
    refined, prolong = refine_to(graded, size)
    fine = from_meshio(refined, dtype=torch.float64)
    by_hand = model(torch.as_tensor(prolong @ x.numpy()), Mesh(fine.pos, fine.weight))[:len(x)]
    torch.testing.assert_close(wrapped(x, Mesh.from_sample(sample)), by_hand)
    assert not torch.allclose(by_hand, model(x, Mesh(sample.pos, sample.weight)))  # the quadrature matters


def test_training_through_the_wrapper_uses_the_refined_training_mesh(tmp_path):
    """``NormalizedOperator(RefinedOperator(model, size))`` trains: the model sees the training
    mesh refined to half its edge (as many nodes as its uniform refinement), the loss is read at
    the data's nodes, the weights move, a patched model's partition is fitted on the refined
    nodes."""
    from geoattn.models import build_model
    from geoattn.train import NormalizedOperator, Trainer

    mesh = families.unit_square(6, "irregular")
    size = training_size(mesh) / 2
    fine_nodes = len(families.refine(mesh, 1).points)
    samples = []
    for k in range(4):
        d = from_meshio(mesh)
        d.x = torch.sin((k + 1) * d.pos[:, :1]) + d.pos[:, 1:]
        d.y = d.x ** 2
        samples.append(d)

    seen = []
    torch.manual_seed(0)
    model = build_model("mesh_fno", in_channels=1, out_channels=1, width=8, depth=1, modes=2)
    model.register_forward_pre_hook(lambda m, args: seen.append(len(args[1].pos)))
    wrapped = RefinedOperator(model, size)
    assert (wrapped.in_channels, wrapped.out_channels, wrapped.dim) == (1, 1, 2)
    op = NormalizedOperator(wrapped)
    before = [p.detach().clone() for p in model.parameters()]
    Trainer(op, tmp_path, epochs=2, batch_size=2, lr=1e-2, progress=False).fit(samples)
    assert set(seen) == {2 * fine_nodes}  # batches of two samples, each on the refined mesh
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert op(samples[0].x, Mesh.from_sample(samples[0])).shape == (len(samples[0].pos), 1)

    patched = build_model("vit", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2,
                          num_patches=4)
    Trainer(NormalizedOperator(RefinedOperator(patched, size)), epochs=1, batch_size=2,
            progress=False).fit(samples)
    assert len(patched.partition.assignment) == fine_nodes


def test_checkpoint_of_a_supersampled_model_rebuilds_it_and_answers_on_any_mesh(tmp_path):
    """The checkpoint holds the model and the size, not the meshes: the loaded operator answers
    as the trained one on any Mesh with cells, and in cross_mesh_report and predict_meshio."""
    from geoattn.eval import cross_mesh_report, predict_meshio
    from geoattn.models import build_model
    from geoattn.train import NormalizedOperator, Trainer, load_operator, operator_payload

    mesh, other = families.unit_square(5, "irregular"), families.unit_square(6, "graded")
    size = training_size(mesh) / 2
    samples = {}
    for name, m in (("train", mesh), ("graded", other)):
        samples[name] = []
        for k in range(3):
            d = from_meshio(m)
            d.x = torch.cos((k + 1) * d.pos[:, :1])
            d.y = d.x * d.pos[:, 1:]
            samples[name].append(d)
    torch.manual_seed(0)
    model = build_model("mesh_fno", in_channels=1, out_channels=1, width=8, depth=1, modes=2)
    op = NormalizedOperator(RefinedOperator(model, size))
    Trainer(op, tmp_path, epochs=1, batch_size=3, progress=False).fit(samples["train"])
    op.eval()
    payload = operator_payload(op)
    assert payload["model"] == "mesh_fno" and payload["resolve"] == {"size": size}

    loaded = load_operator(tmp_path / "last.pt")
    assert isinstance(loaded.model, RefinedOperator) and loaded.model.size == size
    d = samples["graded"][0]
    dmesh = Mesh.from_sample(d)
    with torch.no_grad():
        torch.testing.assert_close(loaded(d.x, dmesh), op(d.x, dmesh))

    fresh = load_operator(tmp_path / "last.pt")
    ours, theirs = (cross_mesh_report({"m": o}, samples) for o in (fresh, op))
    for name in samples:
        torch.testing.assert_close(ours.errors["m"][name], theirs.errors["m"][name])
    fresh = load_operator(tmp_path / "last.pt")
    with torch.no_grad():
        expected = op(d.x, dmesh).numpy()[:, 0]  # one output channel: written as [N]
    point_mesh = meshio.Mesh(other.points, other.cells, point_data={"a": d.x.numpy()})
    np.testing.assert_allclose(predict_meshio(fresh, point_mesh, "a").point_data["prediction"], expected,
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="finite edge length"):
        RefinedOperator(model, 0.0)
