"""An operator run on a fixed latent mesh: inputs and outputs carried by linear interpolation."""

import pytest
import torch

from geoattn.mesh import Mesh, families
from geoattn.models import build_model
from geoattn.operators import LatentMeshOperator, NormalizedOperator
from geoattn.train import load_operator, operator_payload, save_checkpoint


def meshes(n: int = 6, dtype: torch.dtype = torch.float32) -> dict:
    raw = {"train": families.unit_square(n, "irregular", seed=0), "graded": families.unit_square(n, "graded"),
           "foreign": families.unit_square(n + 3, "irregular", seed=1)}
    return {name: Mesh.from_meshio(mesh, dtype=dtype) for name, mesh in raw.items()}


class Pointwise(torch.nn.Module):
    """``3 a(x) + x_1``: linear in the input and the coordinates (not a registered model)."""

    in_channels = out_channels = 1
    dim = 2

    def forward(self, x, mesh):
        return 3 * x + mesh.pos[:, :1]


class Mean(torch.nn.Module):
    """The domain mean of the input per graph, at every node; records the meshes it runs on."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x, mesh):
        self.seen.append(mesh)
        batch = mesh.batch_vector if mesh.batch_vector is not None else torch.zeros(len(x), dtype=torch.long)
        total = torch.zeros(mesh.num_graphs, x.shape[1], dtype=x.dtype).index_add_(0, batch, mesh.weight[:, None] * x)
        mass = torch.zeros(mesh.num_graphs, 1, dtype=x.dtype).index_add_(0, batch, mesh.weight[:, None])
        return (total / mass)[batch]


def test_linear_functions_are_carried_exactly_and_integrals_taken_on_the_latent_mesh():
    """Piecewise-linear interpolation is exact on linear functions, and the lumped quadrature of
    any P1 mesh integrates them exactly: through the wrapper, a linear pointwise operator gives
    its exact values at the nodes of other meshes (float64: to 1e-12), and the domain mean of
    ``x`` and of ``2y`` (1/2 and 1 on the unit square) comes back per graph of a batch of two
    different meshes, computed on two copies of the latent mesh."""
    m = meshes(dtype=torch.float64)
    batch = Mesh.batch([m["graded"], m["foreign"]])
    n = m["graded"].num_nodes
    x = torch.cat([m["graded"].pos[:, :1], 2 * m["foreign"].pos[:, 1:]])
    pointwise = LatentMeshOperator(Pointwise(), m["train"])
    torch.testing.assert_close(pointwise(x, batch), 3 * x + batch.pos[:, :1], rtol=0, atol=1e-12)
    inner = Mean()
    mean = LatentMeshOperator(inner, m["train"])(x, batch)
    assert inner.seen[-1].num_graphs == 2 and inner.seen[-1].num_nodes == 2 * m["train"].num_nodes
    torch.testing.assert_close(mean[:n], torch.full((n, 1), 0.5, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(mean[n:], torch.ones(len(x) - n, 1, dtype=torch.float64), rtol=0, atol=1e-12)
    # the control: the mean of a quadratic is not exact on the lumped quadrature of a coarse mesh,
    # and it is the latent mesh's quadrature, not the input mesh's, that the wrapper uses
    q = m["foreign"].pos[:, :1] ** 2
    through = LatentMeshOperator(Mean(), m["train"])(q, m["foreign"])[0]
    direct = Mean()(q, m["foreign"])[0]
    assert abs(float(direct) - 1 / 3) > 1e-3 and abs(float(through - direct)) > 1e-4


def test_on_the_latent_mesh_it_is_the_operator_and_the_query_is_read_by_interpolation():
    """On its own latent mesh the wrapper returns the model's output (the interpolations are the
    identity); with a query mesh, the latent output interpolated at the query's nodes (exact for
    a linear output)."""
    m = meshes()
    torch.manual_seed(0)
    model = build_model("vit", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2, num_patches=2,
                        modes=1)
    model.fit_mesh(m["train"])
    wrapped = LatentMeshOperator(model, m["train"])
    x = torch.randn(m["train"].num_nodes, 1)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x, m["train"]), model(x, m["train"]), rtol=0, atol=1e-6)
    d = meshes(dtype=torch.float64)
    out = LatentMeshOperator(Pointwise(), d["train"])(d["graded"].pos[:, :1], d["graded"], query=d["foreign"])
    torch.testing.assert_close(out, 4 * d["foreign"].pos[:, :1], rtol=0, atol=1e-12)


def test_trains_fits_on_the_latent_mesh_and_round_trips_a_checkpoint(tmp_path):
    """Gradients reach the model through both interpolations; ``fit_mesh`` cuts the patched
    model's partition on the latent mesh whatever mesh it is given; the checkpoint stores the
    latent mesh, and the reloaded operator gives the same output on another mesh."""
    m = meshes()
    torch.manual_seed(0)
    model = build_model("vit", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2, num_patches=2,
                        modes=1)
    op = NormalizedOperator(LatentMeshOperator(model, m["train"]))
    op.fit_mesh(m["graded"])
    assert model.partition is not None
    from geoattn.mesh.partition import partition
    fitted = partition(m["train"].pos, m["train"].weight, 2, cells=m["train"].cells, method="rcb")
    torch.testing.assert_close(model.partition.transfer(m["foreign"].pos), fitted.transfer(m["foreign"].pos))
    x = torch.randn(m["graded"].num_nodes, 1)
    op(x, m["graded"]).pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.lift.parameters())
    path = tmp_path / "latent.pt"
    save_checkpoint(path, operator_payload(op))
    back = load_operator(path)
    assert isinstance(back.model, LatentMeshOperator)
    torch.testing.assert_close(back.model.latent_pos, m["train"].pos)
    op.eval()
    with torch.no_grad():
        torch.testing.assert_close(back(x, m["graded"]), op(x, m["graded"]))


def test_moves_with_the_module_and_refuses_bad_input():
    m = meshes()
    wrapped = LatentMeshOperator(Pointwise(), m["train"]).double()
    assert wrapped.latent.dtype == torch.float64
    out = wrapped(m["graded"].pos[:, :1].double(), m["graded"].to(dtype=torch.float64))
    assert out.dtype == torch.float64
    with pytest.raises(ValueError, match="one graph"):
        LatentMeshOperator(Pointwise(), Mesh.batch([m["train"], m["train"]]))
    with pytest.raises(TypeError, match="Mesh"):
        LatentMeshOperator(Pointwise(), m["train"].pos)
    with pytest.raises(ValueError, match="query mesh has 1 graphs"):
        LatentMeshOperator(Pointwise(), m["train"])(torch.zeros(2 * m["graded"].num_nodes, 1),
                                                    Mesh.batch([m["graded"], m["graded"]]), query=m["foreign"])
    with pytest.raises(TypeError, match="registered model"):
        operator_payload(NormalizedOperator(LatentMeshOperator(Pointwise(), m["train"])))
