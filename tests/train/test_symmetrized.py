"""The group average of an operator: exactly equivariant, the mean of the operator on the images,
batched as the images one by one."""

import math

import pytest
import torch

from geoattn.errors import SymmetryError
from geoattn.mesh import Mesh, dihedral, families, from_meshio
from geoattn.mesh.symmetry import Isometry, transform
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, RefinedOperator, SymmetrizedOperator, symmetrize, training_size

SQUARE = dihedral(4, (0.5, 0.5))


def _sample(kind="irregular", n=6, seed=0):
    s = from_meshio(families.unit_square(n, kind, seed=seed), dtype=torch.float64)
    s.x = torch.sin(3 * s.pos[:, :1]) + s.pos[:, 1:] ** 2  # not invariant under any map but the identity
    return s


def _model():
    torch.manual_seed(0)
    return build_model("mesh_fno", in_channels=1, out_channels=1, dim=2, modes=3, width=8, depth=2).double()


def test_the_average_is_the_mean_over_the_images():
    model, s = _model(), _sample()
    sym = SymmetrizedOperator(model, SQUARE)
    expected = torch.stack([model(s.x, Mesh(g(s.pos), s.weight)) for g in SQUARE]).mean(0)
    torch.testing.assert_close(sym(s.x, Mesh(s.pos, s.weight)), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["irregular", "graded"])
def test_the_average_is_equivariant_and_the_model_is_not(kind):
    """On every image mesh the averaged output at each node is the one on the original mesh;
    the model alone changes by a visible amount (the test sees a non-equivariant operator)."""
    model, s = _model(), _sample(kind)
    sym = SymmetrizedOperator(model, SQUARE)
    out, plain = sym(s.x, Mesh(s.pos, s.weight)), model(s.x, Mesh(s.pos, s.weight))
    for g in SQUARE[1:]:
        image = transform(s, g)
        torch.testing.assert_close(sym(image.x, Mesh(image.pos, image.weight)), out, rtol=1e-9, atol=1e-12)
        assert (model(image.x, Mesh(image.pos, image.weight)) - plain).abs().max() > 1e-4 * plain.abs().max()


def test_a_batch_is_the_samples_one_by_one():
    model = _model()
    a, b = _sample(), _sample("graded", 5)
    sym = SymmetrizedOperator(NormalizedOperator(model), SQUARE)
    x, pos, w = torch.cat([a.x, b.x]), torch.cat([a.pos, b.pos]), torch.cat([a.weight, b.weight])
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([len(a.pos), len(b.pos)]))
    both = sym(x, Mesh(pos, w, batch=batch))
    torch.testing.assert_close(both, torch.cat([sym(a.x, Mesh(a.pos, a.weight)), sym(b.x, Mesh(b.pos, b.weight))]))


@pytest.mark.parametrize("order", ["refined outside", "refined inside"])
def test_the_wrappers_compose_in_any_order(order):
    """RefinedOperator(SymmetrizedOperator(model)) and SymmetrizedOperator(RefinedOperator(model)):
    both run, both are equivariant; nothing is registered, the structure lives on the Mesh."""
    from geoattn.mesh import Mesh

    size = training_size(families.unit_square(6, "irregular", seed=0)) / 2
    model, s = _model(), _sample("graded")
    if order == "refined outside":
        wrapped = RefinedOperator(SymmetrizedOperator(model, SQUARE), size)
    else:
        wrapped = SymmetrizedOperator(RefinedOperator(model, size), SQUARE)
    mesh = Mesh.from_sample(s)
    out = wrapped(s.x, mesh)
    assert out.shape == (len(s.pos), 1) and torch.isfinite(out).all()
    torch.testing.assert_close(wrapped(s.x, mesh), out)  # the memo: the same answer again


def test_a_set_that_is_not_a_group_is_refused():
    with pytest.raises(SymmetryError, match="not a group"):
        SymmetrizedOperator(_model(), SQUARE[:3])  # rotations by 0, 90, 180 without 270
    with pytest.raises(SymmetryError, match="not a group"):
        SymmetrizedOperator(_model(), [SQUARE[0], Isometry(SQUARE[1].matrix, (0.0, 0.0))])
    with pytest.raises(SymmetryError, match="no isometries"):
        SymmetrizedOperator(_model(), [])
    SymmetrizedOperator(_model(), dihedral(1, (0.0, 0.0), -math.pi / 4))  # the L-shape's pair


def test_symmetrize_wraps_any_operator_and_shares_the_parameters():
    from geoattn.mesh import Mesh
    from geoattn.train import Ensemble

    size = training_size(families.unit_square(6, "irregular", seed=0)) / 2
    model, s = _model(), _sample("graded")
    op = NormalizedOperator(RefinedOperator(model, size))
    op.x_normalizer.fit([(s.x, s.weight)])
    op.y_normalizer.fit([(s.x ** 2, s.weight)])
    sym = symmetrize(op, SQUARE)
    assert isinstance(sym, SymmetrizedOperator) and sym.op is op and op.model.op is model
    assert {id(p) for p in sym.parameters()} == {id(p) for p in op.parameters()}
    mesh = Mesh.from_sample(s)
    built = NormalizedOperator(RefinedOperator(SymmetrizedOperator(model, SQUARE), size))
    built.x_normalizer, built.y_normalizer = op.x_normalizer, op.y_normalizer
    torch.testing.assert_close(sym(s.x, mesh), built(s.x, mesh), rtol=1e-6, atol=1e-8)
    assert isinstance(symmetrize(NormalizedOperator(model), SQUARE), SymmetrizedOperator)
    assert isinstance(symmetrize(model, SQUARE), SymmetrizedOperator)
    both = symmetrize(Ensemble([model, model]), SQUARE)
    assert isinstance(both, Ensemble) and all(isinstance(m, SymmetrizedOperator) for m in both.members)


@pytest.mark.slow
def test_a_model_that_needs_its_meshes_gets_their_images():
    """MeshFNO(quadrature="p1") needs every mesh's triangles: the images of the Mesh carry them,
    and the average stays equivariant."""
    from geoattn.mesh import Mesh

    torch.manual_seed(0)
    model = build_model("mesh_fno", in_channels=1, out_channels=1, dim=2, modes=3, width=8, depth=2,
                        quadrature="p1").double()
    s = _sample("graded")
    sym = SymmetrizedOperator(model, SQUARE)
    mesh = Mesh.from_sample(s)
    out = sym(s.x, mesh)
    expected = torch.stack([model(s.x, mesh.moved(g)) for g in SQUARE]).mean(0)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    for g in SQUARE[1:]:
        image = transform(s, g)
        torch.testing.assert_close(sym(image.x, Mesh.from_sample(image)), out, rtol=1e-9, atol=1e-12)
