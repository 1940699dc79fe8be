"""The multigrid's box: fitted to the training data and kept in checkpoints, checked when given,
and a mesh outside it refused with how far outside and the fix."""

import pytest
import torch

from geoattn.errors import ConfigError, MeshMismatchError
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import MultigridOperator, build_model
from geoattn.models.multigrid import covering_box
from geoattn.operators import NormalizedOperator
from geoattn.train import load_operator
from geoattn.train.checkpoint import operator_payload, save_checkpoint


def _mesh(scale=(1.0, 1.0), shift=(0.0, 0.0)) -> Mesh:
    d = from_meshio(families.unit_square(6, "irregular", seed=1), dtype=torch.float64)
    pos = d.pos * torch.tensor(scale, dtype=torch.float64) + torch.tensor(shift, dtype=torch.float64)
    return Mesh(pos, d.weight * scale[0] * scale[1], d.cells)


def _model(**kw):
    torch.manual_seed(0)
    return MultigridOperator(1, 1, **{"width": 4, "depth": 1, "grid": 4, "levels": 2, **kw}).double().eval()


def test_covering_box_is_the_bounding_box_with_a_rounded_margin():
    """1 % of the largest extent on every side, rounded outwards to a hundredth of its power of
    ten: the unit square gives [-0.01, 1.01]^2, [0, 2] x [0, 1] gives [-0.02, 2.02] x [-0.02, 1.02],
    the same in millimetres [-20, 2020] x [-20, 1020], and an odd domain's corners are rounded
    outwards (never inside the data)."""
    unit = _mesh().pos
    assert covering_box(unit) == ((-0.01, -0.01), (1.01, 1.01))
    assert covering_box(unit * torch.tensor([2.0, 1.0], dtype=torch.float64)) == ((-0.02, -0.02), (2.02, 1.02))
    assert covering_box(unit * torch.tensor([2000.0, 1000.0], dtype=torch.float64)) == ((-20.0, -20.0), (2020.0, 1020.0))
    odd = unit * 0.37 + 0.123
    (a, b), lo, hi = covering_box(odd), odd.amin(0), odd.amax(0)
    assert all(x < float(y) for x, y in zip(a, lo)) and all(x > float(y) for x, y in zip(b, hi)), (a, b)
    with pytest.raises(ConfigError, match="all lie at"):
        covering_box(torch.zeros(3, 2))


def test_box_is_fitted_once_to_the_training_mesh_and_saved(tmp_path):
    """``fit_mesh`` fixes the box to the training mesh ([0, 2] x [0, 1]) and a second fit keeps it;
    a checkpoint restores it (buffer ``grid_box``, float64 even after ``.float()``) and predicts
    the same numbers; an unfitted model fits the box at its first call."""
    model = _model()
    assert model.box is None
    wide = _mesh(scale=(2.0, 1.0))
    model.fit_mesh(wide)
    assert model.box == ((-0.02, -0.02), (2.02, 1.02))
    model.fit_mesh(_mesh())
    assert model.box == ((-0.02, -0.02), (2.02, 1.02))
    assert model.float().grid_box.dtype == torch.float64
    model.double()
    op = NormalizedOperator(model)
    save_checkpoint(tmp_path / "m.pt", operator_payload(op))
    again = load_operator(tmp_path / "m.pt").double()
    assert again.model.box == model.box
    x = wide.pos[:, :1].sin()
    with torch.no_grad():
        torch.testing.assert_close(again(x, wide), op.eval()(x, _mesh(scale=(2.0, 1.0))), rtol=0, atol=0)
    lazy = _model()
    lazy(x, wide)
    assert lazy.box == model.box
    rebuilt = build_model("multigrid", **lazy.hparams)
    rebuilt.load_state_dict(lazy.state_dict())
    assert rebuilt.box == model.box


@pytest.mark.parametrize("how", ["translated", "scaled", "millimetres"])
def test_a_mesh_outside_the_box_is_refused_with_how_far_and_the_fix(how):
    """Fitted on the unit square: the mesh translated by 2, scaled by 1.5 or in millimetres is
    refused, naming the nodes outside, how far and what to do; a mesh inside the box (a refined
    one) and nodes within the tolerance (1e-3 of the box's side) are answered."""
    model = _model()
    model.fit_mesh(_mesh())
    other = {"translated": _mesh(shift=(2.0, 2.0)), "scaled": _mesh(scale=(1.5, 1.5)),
             "millimetres": _mesh(scale=(1000.0, 1000.0))}[how]
    count = int((other.pos > 1.011).any(1).sum())
    far = float(other.pos.max()) - 1.01
    with pytest.raises(MeshMismatchError, match=rf"{count} of 49 nodes lie outside the box .* by up to {far:.4g} "
                                                rf".*Bring the mesh into the box"):
        model(other.pos[:, :1], other)
    near = _mesh(shift=(0.0105, 0.0))  # 5e-4 past the box's face at 1.01
    assert torch.isfinite(model(near.pos[:, :1], near)).all()
    batch = Mesh.batch([_mesh(), _mesh(shift=(0.5, 0.0))])
    with pytest.raises(MeshMismatchError, match=f"{int((batch.pos[:, 0] > 1.011).sum())} of 98 nodes"):
        model(batch.pos[:, :1], batch)


@pytest.mark.parametrize("box, match", [(((0.0, 0.0), (1.0, float("inf"))), "finite"),
                                        (((0.0, 0.0), (1.0, float("nan"))), "finite"),
                                        (((0.0, 1.0), (1.0, 1.0)), "positive extent"),
                                        (((0.0,), (1.0,)), "two rows of 2"),
                                        (((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), "two rows of 2"),
                                        ("unit", "two rows of 2")])
def test_a_bad_box_is_refused(box, match):
    with pytest.raises(ConfigError, match=match):
        MultigridOperator(1, 1, box=box)


def test_grid_sizes_are_whole_numbers_of_any_type():
    import numpy as np

    from geoattn.errors import ConfigError
    from geoattn.models import build_model

    assert build_model("multigrid", in_channels=1, out_channels=1, grid=np.int64(8), levels=2).shape == (8, 8)
    for bad, words in ((8.5, "grid must be a whole number"), (True, "grid"), ("8", "grid")):
        with pytest.raises(ConfigError, match=words):
            build_model("multigrid", in_channels=1, out_channels=1, grid=bad, levels=2)
