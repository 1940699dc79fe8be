"""The multigrid's ``geometry="distance"``: the distance of the first grid's cell centres to the
mesh's boundary, the same on every mesh of a polygonal domain, per member of a batch."""

import numpy as np
import pytest
import torch

from geoattn.errors import ConfigError
from geoattn.mesh import Mesh, families
from geoattn.models import MultigridOperator, build_model

BOX = ((0.0, 0.0), (2.0, 1.0))
SHAPE = (8, 4)


def _model(**kw):
    torch.manual_seed(0)
    return MultigridOperator(1, 1, width=8, depth=1, grid=SHAPE, levels=2, box=BOX, **kw).double().eval()


def _rectangle(n: int, kind: str) -> Mesh:
    """A mesh of [0, 2] x [0, 1]: the unit square's family stretched along x."""
    m = families.unit_square(n, kind)
    m.points[:, 0] *= 2.0
    return Mesh.from_meshio(m, dtype=torch.float64)


def _expected() -> np.ndarray:
    """The cell centres' distances to the rectangle's sides, over its largest side (2)."""
    x = (np.arange(SHAPE[0]) + 0.5) * 2.0 / SHAPE[0]
    y = (np.arange(SHAPE[1]) + 0.5) * 1.0 / SHAPE[1]
    cx, cy = np.meshgrid(x, y, indexing="ij")  # the grid's C order, axis 0 slowest
    return (np.minimum(np.minimum(cx, 2.0 - cx), np.minimum(cy, 1.0 - cy)) / 2.0).reshape(-1)


@pytest.mark.parametrize("kind", ["structured", "irregular", "graded"])
def test_the_channel_is_the_distance_to_the_domain_on_every_mesh(kind):
    model = _model(geometry="distance")
    got = model.boundary_distance(_rectangle(7, kind)).numpy()
    np.testing.assert_allclose(got, _expected(), atol=1e-12)  # polygonal domain: exact up to rounding


def test_batch_members_keep_their_own_domain():
    model = _model(geometry="distance")
    square = _rectangle(6, "irregular")
    half = families.unit_square(5)  # [0, 1]^2 inside the box: a smaller domain
    half = Mesh.from_meshio(half, dtype=torch.float64)
    both = model.boundary_distance(Mesh.batch([square, half]))
    n = SHAPE[0] * SHAPE[1]
    np.testing.assert_allclose(both[:n].numpy(), _expected(), atol=1e-12)
    np.testing.assert_array_equal(both[n:].numpy(), model.boundary_distance(half).numpy())
    assert not torch.equal(both[:n], both[n:])


def test_the_channel_enters_the_model_and_changes_its_output():
    mesh = _rectangle(7, "irregular")
    x = torch.sin(3 * mesh.pos[:, :1]) * mesh.pos[:, 1:]
    plain, geo = _model(), _model(geometry="distance")
    assert geo.enter.in_channels == plain.enter.in_channels + 1
    with torch.no_grad():  # the same weights on the shared channels, zero on the distance: the same output
        geo.enter.weight.zero_()
        geo.enter.weight[:, :-1] = plain.enter.weight
        geo.enter.bias.copy_(plain.enter.bias)
        for a, b in zip(geo.parameters(), plain.parameters()):
            if a.shape == b.shape:
                a.copy_(b)
        torch.testing.assert_close(geo(x, mesh), plain(x, mesh), rtol=0, atol=1e-12)
        geo.enter.weight[:, -1] = 1.0
        assert (geo(x, mesh) - plain(x, mesh)).abs().max() > 1e-6


def test_the_option_is_kept_and_checked():
    model = _model(geometry="distance")
    again = build_model("multigrid", **model.hparams).double()
    again.load_state_dict(model.state_dict())
    assert again.geometry == "distance"
    mesh = _rectangle(5, "structured")
    x = mesh.pos[:, :1].clone()
    torch.testing.assert_close(again.eval()(x, mesh), model(x, mesh))
    assert "geometry='distance'" in repr(model)
    with pytest.raises(ConfigError, match="geometry must be one of"):
        _model(geometry="sdf")
    bare = Mesh(mesh.pos, mesh.weight)
    with pytest.raises(ConfigError, match="needs the mesh's cells"):
        model(x, bare)
