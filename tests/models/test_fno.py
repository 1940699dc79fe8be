"""The mesh-native FNO: spectral padding, refinement convergence, batching, trained transfer."""

import pytest
import torch
from smooth_inputs import smooth_input

from geoattn import testing
from geoattn.errors import ConfigError, UnsupportedCellError
from geoattn.mesh import Mesh, families
from geoattn.models import MeshFNO, build_model
from geoattn.nn import SpectralIntegral
from geoattn.operators import RefinedOperator, training_size


def _model(**kw):
    torch.manual_seed(0)
    return MeshFNO(2, 1, **{"width": 12, "depth": 2, "modes": 2, **kw}).double().eval()


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


def test_untrained_model_converges_under_refinement_of_graded_mesh():
    testing.assert_model_converges(_model(), smooth_input, families.unit_square(4, "graded"))


def test_batched_equals_separate_and_hparams_rebuild(two_meshes):
    testing.assert_batched_equals_separate(_model(), two_meshes)


@pytest.mark.slow
def test_trained_model_keeps_its_error_on_refined_and_graded_meshes(darcy_transfer):
    """Regression: trained briefly on one irregular mesh, the error on a refined and on a graded
    mesh of the same continuum samples stays within 25 % of the training-mesh error."""
    torch.manual_seed(0)
    report = darcy_transfer(MeshFNO(1, 1, width=16, depth=3, modes=3))
    assert report.mean("model", "train") < 0.15, report.table()
    for mesh in ("refined", "graded"):
        assert report.ratio("model", mesh) < 1.25, report.table()


# quadrature="p1": the exact transform of the piecewise-linear interpolant

def _refined_meshes(mesh, times=(0, 1, 2, 3)) -> list[Mesh]:
    """A :class:`Mesh` (with its triangles) of each uniform refinement of ``mesh`` (float64)."""
    return [Mesh.from_meshio(families.refine(mesh, t) if t else mesh, dtype=torch.float64) for t in times]


@torch.no_grad()
def test_p1_untrained_model_converges_under_refinement_of_graded_mesh():
    """As testing.assert_model_converges, on Meshes with their triangles."""
    model, meshes = _model(quadrature="p1"), _refined_meshes(families.unit_square(4, "graded"))
    n = meshes[0].num_nodes  # red refinement keeps the coarse nodes first
    outs = [model(smooth_input(m.pos), m)[:n] for m in meshes]
    errors = [float((o - outs[-1]).abs().max()) for o in outs[:-1]]
    assert testing.convergence_rate([1, 0.5, 0.25], errors) >= 1.6, errors


@torch.no_grad()
def test_p1_batched_equals_separate_and_hparams_rebuild(two_meshes):
    model = _model(quadrature="p1")
    meshes = [Mesh.from_sample(d) for d in two_meshes]
    alone = torch.cat([model(d.x, m) for d, m in zip(two_meshes, meshes)])
    batched = model(torch.cat([d.x for d in two_meshes]), Mesh.batch(meshes))
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-12)
    again = build_model(model.model_name, **model.hparams).double()
    again.load_state_dict(model.state_dict())
    again.eval()
    assert torch.equal(again(two_meshes[0].x, meshes[0]), model(two_meshes[0].x, meshes[0]))


def test_p1_is_closer_to_the_continuum_on_a_coarse_graded_mesh():
    """The same weights on a coarse graded mesh and on its third refinement (the continuum's
    stand-in): the P1 transform's output at the coarse nodes is several times closer to the fine
    one than the nodal quadrature's."""
    coarse, fine = _refined_meshes(families.unit_square(4, "graded"), (0, 3))
    errors = {}
    for quadrature in ("nodal", "p1"):
        model = _model(quadrature=quadrature, modes=4)
        n = coarse.num_nodes
        with torch.no_grad():
            errors[quadrature] = float((model(smooth_input(coarse.pos), coarse)
                                        - model(smooth_input(fine.pos), fine)[:n]).abs().max())
    assert errors["p1"] < 0.3 * errors["nodal"], errors


def test_p1_needs_a_mesh_with_triangles(two_meshes, monkeypatch):
    import geoattn.models.fno as fno

    model, coarse = _model(quadrature="p1"), two_meshes[0]
    with pytest.raises(ValueError, match="pass a Mesh with cells"):
        model(coarse.x, Mesh(coarse.pos, coarse.weight))
    builds = []
    build = fno.p1_fourier_basis
    monkeypatch.setattr(fno, "p1_fourier_basis", lambda *a, **k: builds.append(1) or build(*a, **k))
    mesh = Mesh.from_sample(coarse)
    out = model(coarse.x, mesh)
    assert torch.equal(model(2 * coarse.x, mesh), model(2 * coarse.x, mesh)) and len(builds) == 1
    assert torch.equal(model(coarse.x, mesh), out) and len(builds) == 1  # once per Mesh
    model(coarse.x, Mesh.from_sample(coarse))  # another Mesh object: built for it
    assert len(builds) == 2
    quads = Mesh.from_meshio(families.unit_square(3, "structured", cell="quad"), dtype=torch.float64)
    with pytest.raises(UnsupportedCellError, match="triangle"):
        model(smooth_input(quads.pos), quads)
    with pytest.raises(ConfigError, match="quadrature"):
        MeshFNO(1, 1, quadrature="exact")
    with pytest.raises(ConfigError, match="dim"):
        MeshFNO(1, 1, dim=3, quadrature="p1")
    plain = _model()  # the nodal model needs no cells
    plain(coarse.x, Mesh(coarse.pos, coarse.weight))


@pytest.mark.slow
def test_p1_trained_model_keeps_its_error_on_refined_and_graded_meshes(darcy_transfer):
    """Regression, as for the nodal model: the trainer and the report hand the model each
    sample's Mesh with its triangles."""
    torch.manual_seed(0)
    report = darcy_transfer(MeshFNO(1, 1, width=16, depth=3, modes=3, quadrature="p1"))
    assert report.mean("model", "train") < 0.15, report.table()
    for mesh in ("refined", "graded"):
        assert report.ratio("model", mesh) < 1.25, report.table()


# local={"radius": r}: a local integral beside the spectral one in every block

def test_local_untrained_model_converges_under_refinement_of_graded_mesh():
    testing.assert_model_converges(_model(local={"radius": 0.5}), smooth_input, families.unit_square(4, "graded"))


def test_local_batched_equals_separate_and_hparams_rebuild(two_meshes):
    testing.assert_batched_equals_separate(_model(local={"radius": 0.4, "rings": 3, "angles": 3}), two_meshes)


def test_local_needs_a_radius():
    for bad in ({}, {"radius": 0.2, "width": 3}):
        with pytest.raises(ConfigError, match="radius"):
            MeshFNO(1, 1, local=bad)


@pytest.mark.slow
def test_local_trained_model_keeps_its_error_on_refined_and_graded_meshes(darcy_transfer):
    """Regression, as for the plain model, with a ball of 2.5 training-mesh cells, computed on
    every mesh refined to the training mesh's longest edge (RefinedOperator): the ball must be
    resolved on every mesh, and the graded mesh's coarse corner does not resolve it.

    A briefly trained model's transfer ratio moves with its training path (the seed, and the
    floating-point path of another BLAS or numpy: 1.05-1.19 on the graded mesh over three seeds
    and two setups), so the promise is checked on the mean over three trainings, whose excess
    over 1 sits at about half the 25 % allowed; and the refinement's effect is checked paired,
    on the same weights, where it lowers the graded ratio by 0.10-0.14 in every training."""
    size = training_size(families.unit_square(12, "irregular", seed=1))  # the fixture's training mesh
    ratios = {"model": {"refined": [], "graded": []}, "inner": {"refined": [], "graded": []}}
    for seed in range(3):
        torch.manual_seed(seed)
        model = MeshFNO(1, 1, width=16, depth=3, modes=3, local={"radius": 2.5 / 12})
        report = darcy_transfer(RefinedOperator(model, [], size), inner=model)
        assert report.mean("model", "train") < 0.15, report.table()
        for name, by_mesh in ratios.items():
            for mesh, values in by_mesh.items():
                values.append(report.ratio(name, mesh))
        # the same weights without the refinement: the unresolved ball costs the graded mesh
        assert ratios["model"]["graded"][-1] < ratios["inner"]["graded"][-1] - 0.05, report.table()
    for mesh in ("refined", "graded"):
        assert sum(ratios["model"][mesh]) / 3 < 1.25, ratios
