"""A corpus of malformed inputs, each rejected with its specific error naming the first bad index."""

import meshio
import numpy as np
import pytest
import torch

import geoattn
from geoattn.mesh import MeshData, families, from_meshio, quadrature_weights, validate_mesh, validate_sample
from geoattn.mesh.validation import validate_cells

SQ = np.array([[0, 0], [1, 0], [1, 1], [0, 1.0]])
TRI = np.array([[0, 1, 2], [0, 2, 3]])


def mesh(points=SQ, cells=TRI, cell_type="triangle", point_data=None, cell_data=None):
    m = meshio.Mesh(points, [(cell_type, cells)])
    m.point_data, m.cell_data = point_data or {}, cell_data or {}  # bypass meshio's own checks
    return m


def pts_with(i, value):
    p = SQ.copy()
    p[i] = value
    return p


CORPUS = {
    "empty": (lambda: meshio.Mesh(np.zeros((0, 2)), []), geoattn.EmptyMeshError, "no nodes"),
    "nan coordinate": (lambda: mesh(pts_with(2, [np.nan, 1.0])), geoattn.NonFiniteError, "node 2"),
    "inf coordinate": (lambda: mesh(pts_with(1, [np.inf, 0.0])), geoattn.NonFiniteError, "node 1"),
    "duplicate node": (lambda: mesh(np.vstack([SQ, SQ[1:2]]), np.array([[0, 1, 2], [0, 2, 3], [4, 2, 3]])),
                       geoattn.DuplicateNodeError, "node 1 duplicates node 4"),
    "zero-area cell": (lambda: mesh(np.vstack([SQ, [[0.5, 0.5]]]), np.array([[0, 1, 2], [0, 2, 3], [0, 4, 2]])),
                       geoattn.DegenerateCellError, "cell 2"),
    "inverted cell": (lambda: mesh(cells=np.array([[0, 1, 2], [0, 3, 2]])), geoattn.InvertedCellError, "cell 1"),
    "non-convex quad": (lambda: mesh(np.array([[0, 0], [2, 0], [0.5, 0.5], [0, 2.0]]), np.array([[0, 1, 2, 3]]), "quad"),
                        geoattn.InvertedCellError, "cell 0"),
    "index out of range": (lambda: mesh(cells=np.array([[0, 1, 2], [0, 2, 7]])), geoattn.CellIndexError, "cell 1"),
    "negative index": (lambda: mesh(cells=np.array([[0, 1, -1], [0, 2, 3]])), geoattn.CellIndexError, "cell 0"),
    "unused node": (lambda: mesh(np.vstack([SQ, [[2.0, 2.0]]])), geoattn.UnusedNodeError, "node 4"),
    "curve in 2-D": (lambda: mesh(SQ, np.array([[0, 1], [1, 2]]), "line"), geoattn.DimensionError, "column 1"),
    "tetra in 2-D": (lambda: mesh(cells=np.array([[0, 1, 2, 3]]), cell_type="tetra"), geoattn.DimensionError, "3-D"),
    "unsupported cell": (lambda: mesh(cells=np.array([[0, 1, 2, 3, 0, 1]]), cell_type="wedge"),
                         geoattn.UnsupportedCellError, "wedge"),
    "mixed cell types": (lambda: meshio.Mesh(np.vstack([SQ, [[2, 0], [2, 1]]]),
                                             [("triangle", TRI), ("quad", np.array([[1, 4, 5, 2]]))]),
                         geoattn.UnsupportedCellError, "mixes"),
    "short point field": (lambda: mesh(point_data={"a": np.ones(3)}), geoattn.FieldLengthError, "'a'"),
    "nan point field": (lambda: mesh(point_data={"a": np.array([0, 1, np.nan, 0.0])}), geoattn.NonFiniteError, "row 2"),
    "short cell field": (lambda: mesh(cell_data={"c": [np.ones(1)]}), geoattn.FieldLengthError, "'c'"),
    "wrong cell width": (lambda: mesh(cells=np.array([[0, 1], [2, 3]])), geoattn.DimensionError, "[M, 3]"),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bad_input_raises_its_specific_error(name):
    build, error, fragment = CORPUS[name]
    with pytest.raises(error, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        from_meshio(build(), unused="error")


def test_all_errors_are_mesh_errors_and_value_errors():
    for _, error, _ in CORPUS.values():
        assert issubclass(error, geoattn.MeshError) and issubclass(error, ValueError)


def test_unused_nodes_warn_by_default_and_get_zero_weight():
    with pytest.warns(geoattn.UnusedNodeWarning, match="node 4"):
        data = from_meshio(mesh(np.vstack([SQ, [[2.0, 2.0]]])), dtype=torch.float64)
    assert data.weight[4] == 0 and float(data.weight.sum()) == pytest.approx(1.0)


def test_reorient_fixes_reversed_cells():
    data = from_meshio(mesh(cells=np.array([[0, 1, 2], [0, 3, 2]])), reorient=True)
    assert float(data.weight.sum()) == pytest.approx(1.0)


@pytest.mark.parametrize("weight, fragment", [
    (torch.tensor([0.25, -0.1, 0.25, 0.25]), "weight 1 is negative"),
    (torch.tensor([0.25, 0.25, float("nan"), 0.25]), "weight 2 is not finite"),
    (torch.tensor([0.25, 0.25, 0.25]), "3 weights for 4 nodes"),
])
def test_bad_weights(weight, fragment):
    data = MeshData(pos=torch.tensor(SQ), weight=weight)
    with pytest.raises(geoattn.WeightError, match=fragment):
        validate_sample(data)


def test_bad_sample_fields():
    data = MeshData(pos=torch.tensor(SQ), weight=torch.full((4,), 0.25), x=torch.ones(5, 1))
    with pytest.raises(geoattn.FieldLengthError, match="'x' has shape"):
        validate_sample(data)


def test_point_cloud_box_errors():
    with pytest.raises(geoattn.MeshError, match="node 0"):
        quadrature_weights(np.array([[2.0, 0.5], [0.5, 0.5], [0.2, 0.1]]), rule="voronoi",
                           box=[[0, 0], [1, 1]])
    with pytest.raises(geoattn.DimensionError, match="box must have shape"):
        quadrature_weights(np.random.rand(10, 2), rule="voronoi", box=[0, 1])


def test_cells_without_a_type_name_get_the_type_their_shape_implies():
    assert validate_cells(TRI, 4, dim=2).name == "triangle"
    assert validate_cells(np.array([[0, 1, 2, 3]]), 4, dim=2).name == "quad"
    validate_mesh(SQ, TRI)  # no cell type needed
    with pytest.raises(geoattn.DimensionError, match=r"cells of shape \(2, 5\) on 2-D nodes"):
        validate_cells(np.zeros((2, 5), dtype=int), 4, dim=2)


def test_a_hexahedron_listed_twice_in_another_vertex_order_is_a_repeat():
    cube = from_meshio(families.unit_cube(2, cell="hexahedron"))
    cells = cube.cells.numpy()
    twice = np.vstack([cells, cells[3, ::-1]])
    with pytest.raises(geoattn.DuplicateCellError, match=f"cell {len(cells)} .* repeats cell 3"):
        validate_mesh(cube.pos, twice, "hexahedron")
