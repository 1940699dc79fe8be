import torch

from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import build_model
from geoattn.testing import convergence_rate


@torch.no_grad()
def test_untrained_gno_converges_under_refinement_of_graded_mesh():
    mesh = families.unit_square(4, "graded")
    levels = [from_meshio(families.refine(mesh, t) if t else mesh, dtype=torch.float64) for t in range(4)]
    torch.manual_seed(0)
    model = build_model("gno", in_channels=1, out_channels=1, width=8, depth=2, radius=0.3).double().eval()
    outs = [model(torch.sin(3 * d.pos[:, :1]), Mesh(d.pos, d.weight)) for d in levels]
    n = levels[0].num_nodes  # red refinement keeps the coarse nodes first
    errors = [float((o[:n] - outs[-1][:n]).abs().max()) for o in outs[:-1]]
    # the ball cuts cells, so the quadrature of the ball integral is not smooth: ask for order > 1.5
    assert convergence_rate([1, 0.5, 0.25], errors) > 1.5, errors
    assert model.hparams["radius"] == 0.3
