"""Evaluating an operator on meshes refined to the training mesh's size, read at their nodes."""

import pytest
import torch

from geoattn.errors import MeshMismatchError
from geoattn.eval import ResolvedQuadrature, training_size
from geoattn.mesh import families, from_meshio


def test_resolved_quadrature_reads_the_output_at_the_original_nodes():
    """A pointwise operator gives the same output through the wrapper (the original nodes come
    first in the refined mesh, with their own values); an integral operator runs on the refined
    nodes, each graph of the batch on its own: the domain mean of a linear input (exact for the
    lumped quadrature on any mesh) comes back per graph."""
    meshes = {"train": families.unit_square(6, "irregular"), "graded": families.unit_square(6, "graded")}
    size = training_size(meshes["train"])
    graded = from_meshio(meshes["graded"])
    pos = torch.cat([graded.pos, graded.pos])
    batch = torch.repeat_interleave(torch.arange(2), len(graded.pos))
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
    pointwise = ResolvedQuadrature(Pointwise(), meshes.values(), size)
    torch.testing.assert_close(pointwise(x, pos, weight, batch), Pointwise()(x, pos, weight, batch))
    mean = ResolvedQuadrature(Mean(), meshes.values(), size)(x, pos, weight, batch)
    assert Mean.seen[-1] > len(pos)  # the refined nodes of both graphs
    torch.testing.assert_close(mean[0], torch.tensor([0.5]))  # mean of x over the unit square
    torch.testing.assert_close(mean[-1], torch.tensor([1.0]))  # mean of 2y
    assert len(ResolvedQuadrature(Mean(), meshes.values(), size).structures) == len(meshes)


def test_unregistered_mesh_is_refused():
    mesh = families.unit_square(4, "irregular")
    wrapped = ResolvedQuadrature(torch.nn.Identity(), [mesh], training_size(mesh))
    other = from_meshio(families.unit_square(5, "irregular"))
    with pytest.raises(MeshMismatchError, match="not given to ResolvedQuadrature"):
        wrapped(other.pos[:, :1], other.pos, other.weight)


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
    wrapped = ResolvedQuadrature(model, [graded], size, dtype=torch.float64)
    refined, prolong = refine_to(graded, size)
    fine = from_meshio(refined, dtype=torch.float64)
    by_hand = model(torch.as_tensor(prolong @ x.numpy()), fine.pos, fine.weight)[:len(x)]
    torch.testing.assert_close(wrapped(x, sample.pos, sample.weight), by_hand)
    assert not torch.allclose(by_hand, model(x, sample.pos, sample.weight))  # the quadrature matters
