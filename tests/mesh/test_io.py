import meshio
import numpy as np
import pytest
import torch
from torch_geometric.loader import DataLoader

from geoattn.mesh import families, from_meshio, read_mesh, to_meshio, write_mesh


def sample():
    m = families.unit_square(5, "irregular")
    n = len(m.points)
    m.point_data = {"a": np.arange(n, dtype=float), "u": np.sin(m.points[:, 0]),
                    "vec": np.c_[m.points[:, 0], -m.points[:, 1]]}
    m.cell_data = {"k": [np.arange(len(m.cells[0].data), dtype=float)]}
    return m


def test_from_meshio_fields_and_dimension():
    m = sample()
    m.points = np.c_[m.points, np.zeros(len(m.points))]  # zero z-column: still a 2-D mesh
    data = from_meshio(m, x=["a", "vec"], y="u", dtype=torch.float64)
    assert data.pos.shape == (len(m.points), 2)
    assert data.x.shape == (len(m.points), 3) and data.y.shape == (len(m.points), 1)
    torch.testing.assert_close(data.x[:, 0], torch.as_tensor(m.point_data["a"]))
    assert set(data.point_data) == set() and set(data.cell_data) == {"k"}
    assert data.cell_type == "triangle" and float(data.weight.sum()) == pytest.approx(1.0)


@pytest.mark.parametrize("ext, kwargs", [(".vtu", {}), (".xdmf", {}),
                                         (".msh", {})])
def test_round_trip(tmp_path, ext, kwargs):
    data = from_meshio(sample(), x="a", dtype=torch.float64)
    path = tmp_path / f"mesh{ext}"
    write_mesh(path, data, point_data={"pred": 2 * data.pos[:, 0]}, **kwargs)
    back = read_mesh(path, x="a", dtype=torch.float64)  # written under the name it was read from
    torch.testing.assert_close(back.pos, data.pos)
    torch.testing.assert_close(back.cells, data.cells)
    torch.testing.assert_close(back.x, data.x)
    torch.testing.assert_close(back.weight, data.weight)
    torch.testing.assert_close(back.point_data["pred"].double(), 2 * data.pos[:, 0])
    np.testing.assert_allclose(back.cell_data["k"], data.cell_data["k"])


def test_to_meshio_point_cloud_and_3d():
    cloud = from_meshio(meshio.Mesh(np.random.default_rng(0).random((20, 3)), []))
    assert to_meshio(cloud).cells[0].type == "vertex"
    cube = from_meshio(families.unit_cube(2))
    m = to_meshio(cube)
    assert m.points.shape[1] == 3 and m.cells[0].type == "tetra"


def test_batching_offsets_cells():
    a = from_meshio(families.unit_square(2), dtype=torch.float64)
    b = from_meshio(families.unit_square(3), dtype=torch.float64)
    for d in (a, b):
        d.point_data, d.cell_data = None, None
    batch = next(iter(DataLoader([a, b], batch_size=2)))
    assert batch.cells.shape[0] == a.cells.shape[0] + b.cells.shape[0]
    torch.testing.assert_close(batch.cells[len(a.cells):] - a.num_nodes, b.cells)


def test_read_mesh_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no mesh file"):
        read_mesh(tmp_path / "missing.vtu")


def test_fields_are_never_written_as_x_or_y(tmp_path):
    """ParaView reads point arrays named ``x``, ``y`` as coordinates: a sample's input and target
    are written under the names they were read from, else as ``input`` and ``target``."""
    data = from_meshio(sample(), x="a", dtype=torch.float64)
    data.y = 3 * data.x
    written = to_meshio(data).point_data
    assert {"a", "target", "weight"} <= set(written) and not {"x", "y"} & set(written)
    np.testing.assert_allclose(written["target"].reshape(-1), 3 * written["a"].reshape(-1))
