import pytest
import torch

from geoattn.mesh import families, from_meshio
from geoattn.models import GalerkinTransformer, build_model
from geoattn.testing import convergence_rate


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
@torch.no_grad()
def test_untrained_galerkin_transformer_converges_under_refinement(attention):
    mesh = families.unit_square(4, "graded")
    levels = [from_meshio(families.refine(mesh, t) if t else mesh, dtype=torch.float64) for t in range(4)]
    torch.manual_seed(0)
    model = build_model("galerkin", in_channels=1, out_channels=1, width=16, depth=2,
                        attention=attention).double().eval()
    # the small initialisation of Galerkin attention hides the integral term; perturb the weights
    for p in model.parameters():
        p.add_(0.2 * torch.randn_like(p))
    outs = [model(torch.sin(3 * d.pos[:, :1]), d.pos, d.weight) for d in levels]
    n = levels[0].num_nodes
    errors = [float((o[:n] - outs[-1][:n]).abs().max()) for o in outs[:-1]]
    assert errors[0] > 1e-4
    assert convergence_rate([1, 0.5, 0.25], errors) > 1.6, errors
    assert model.hparams["attention"] == attention


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
def test_cross_decoder_answers_on_the_query_mesh(attention):
    torch.manual_seed(0)
    model = GalerkinTransformer(1, 1, dim=2, width=8, depth=1, num_heads=2, attention=attention,
                                decoder="cross")
    x, pos, w = torch.randn(30, 1), torch.rand(30, 2), torch.full((30,), 1 / 30)
    q = torch.rand(7, 2)
    assert model(x, pos, w, pos_query=q).shape == (7, 1)
    # a batch of two graphs equals the graphs one by one, with query batches of other sizes
    x2, pos2, w2, q2 = torch.randn(20, 1), torch.rand(20, 2), torch.full((20,), 1 / 20), torch.rand(4, 2)
    both = model(torch.cat([x, x2]), torch.cat([pos, pos2]), torch.cat([w, w2]),
                 torch.cat([torch.zeros(30, dtype=torch.long), torch.ones(20, dtype=torch.long)]),
                 pos_query=torch.cat([q, q2]),
                 batch_query=torch.cat([torch.zeros(7, dtype=torch.long), torch.ones(4, dtype=torch.long)]))
    torch.testing.assert_close(both, torch.cat([model(x, pos, w, pos_query=q), model(x2, pos2, w2, pos_query=q2)]))
