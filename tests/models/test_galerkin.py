import pytest
import torch

from geoattn.mesh import families, from_meshio
from geoattn.models import build_model
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
