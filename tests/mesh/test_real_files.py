"""Mesh files as solvers and mesh generators write them: every element's vertices written
separately, reversed cells, several cell blocks, gmsh and PyVista meshes."""

import logging

import meshio
import numpy as np
import pytest
import torch

import geoattn
from geoattn.mesh import from_meshio, orient_cells, quadrature_weights, read_mesh


def _shared_square(refine: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A positively oriented triangulation of the unit square with shared vertices."""
    skfem = pytest.importorskip("skfem")
    m = skfem.MeshTri().refined(refine)
    pos = m.p.T
    return pos, orient_cells(pos, m.t.T, "triangle")


def _per_element(pos: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same mesh with every cell's vertices written as separate points (no shared nodes)."""
    points = pos[cells].reshape(-1, pos.shape[1])  # [M * V, d]
    return points, np.arange(len(points)).reshape(cells.shape)


def _field(p: np.ndarray) -> np.ndarray:
    return np.sin(3 * p[:, 0]) + p[:, 1] ** 2


def test_per_element_vertices_file_is_refused_with_the_fix(tmp_path):
    pos, cells = _shared_square()
    points, split = _per_element(pos, cells)
    path = tmp_path / "solver_output.vtu"
    meshio.write(path, meshio.Mesh(np.c_[points, np.zeros(len(points))], [("triangle", split)],
                                   point_data={"u": _field(points)}))
    with pytest.raises(geoattn.DuplicateNodeError, match="merge_duplicates=") as err:
        read_mesh(path)
    assert "--merge-duplicates" in str(err.value) and str(path) in str(err.value)


def test_merge_duplicates_recovers_the_shared_mesh(tmp_path, caplog):
    pos, cells = _shared_square()
    points, split = _per_element(pos, cells)
    tags = np.repeat(np.arange(len(cells)), 3) * 0 + 7  # an integer field, equal everywhere
    path = tmp_path / "solver_output.vtu"
    meshio.write(path, meshio.Mesh(np.c_[points, np.zeros(len(points))], [("triangle", split)],
                                   point_data={"u": _field(points), "tag": tags},
                                   cell_data={"k": [np.arange(len(cells), dtype=float)]}))
    with caplog.at_level(logging.INFO, logger="geoattn.mesh.io"):
        data = read_mesh(path, x="u", merge_duplicates=1e-9, dtype=torch.float64)
    reference = from_meshio(meshio.Mesh(pos, [("triangle", cells)], point_data={"u": _field(pos)}),
                            x="u", dtype=torch.float64)
    assert data.num_nodes == len(pos)
    assert data.merged_nodes == len(points) - len(pos)
    assert f"merged {len(points) - len(pos)} of {len(points)}" in caplog.text
    # the same nodes, so the same lumped weights and field: match the nodes by position
    order = np.lexsort(data.pos.numpy().T[::-1])
    ref = np.lexsort(reference.pos.numpy().T[::-1])
    torch.testing.assert_close(data.pos[order], reference.pos[ref])
    torch.testing.assert_close(data.weight[order], reference.weight[ref], rtol=1e-12, atol=0)
    torch.testing.assert_close(data.x[order], reference.x[ref], rtol=1e-12, atol=1e-14)
    assert (data.point_data["tag"] == 7).all()
    assert data.cell_data["k"].shape == (len(cells),)  # cell fields stay with their cells
    assert float(data.weight.sum()) == pytest.approx(1.0, rel=1e-12)


def test_merge_duplicates_refuses_a_field_that_disagrees():
    pos, cells = _shared_square(2)
    points, split = _per_element(pos, cells)
    u = _field(points)
    shared = np.flatnonzero(np.all(points == points[split[0, 1]], axis=1))  # a vertex of >1 cells
    assert len(shared) > 1
    u[shared[1]] += 0.5  # an element-wise (discontinuous) field
    mesh = meshio.Mesh(points, [("triangle", split)], point_data={"u": u})
    with pytest.raises(geoattn.DuplicateNodeError, match="field 'u' differs"):
        from_meshio(mesh, merge_duplicates=True)
    u[shared[1]] -= 0.5 - 1e-12  # agreement within the tolerance is averaged
    data = from_meshio(mesh, merge_duplicates=True, dtype=torch.float64)
    assert data.merged_nodes == len(points) - len(pos)


def test_merge_tolerance_is_relative_to_the_mesh_size():
    pos, cells = _shared_square(2)
    points, split = _per_element(pos * 1e4, cells)  # the same mesh in other units
    points = points + 1e-9 * np.random.default_rng(0).standard_normal(points.shape)  # writer noise
    data = from_meshio(meshio.Mesh(points, [("triangle", split)]), merge_duplicates=1e-9,
                       dtype=torch.float64)
    assert data.num_nodes == len(pos)
    with pytest.raises(ValueError, match="merge_duplicates"):
        from_meshio(meshio.Mesh(points, [("triangle", split)]), merge_duplicates=-1.0)


@pytest.mark.parametrize("name", ["triangle", "quad", "tetra"])
def test_reorient_fixes_reversed_cells(name):
    skfem = pytest.importorskip("skfem")
    mesh = {"triangle": skfem.MeshTri, "quad": skfem.MeshQuad, "tetra": skfem.MeshTet}[name]().refined(2)
    pos = mesh.p.T
    cells = orient_cells(pos, mesh.t.T, name)
    flipped = cells.copy()
    flip = {"triangle": [0, 2, 1], "quad": [0, 3, 2, 1], "tetra": [0, 2, 1, 3]}[name]
    flipped[::3] = flipped[::3][:, flip]
    bad = meshio.Mesh(pos, [(name, flipped)])
    with pytest.raises(geoattn.InvertedCellError, match="reorient=True"):
        from_meshio(bad)
    data = from_meshio(bad, reorient=True, dtype=torch.float64)
    expected = quadrature_weights(pos, cells, name)
    torch.testing.assert_close(data.weight, expected, rtol=1e-12, atol=0)


def test_cell_block_picks_one_block():
    pos, cells = _shared_square(2)
    boundary = np.array([[0, 1]])  # a boundary line block, as gmsh writes them
    points = np.c_[pos, np.zeros(len(pos))]
    mesh = meshio.Mesh(points, [("line", boundary), ("triangle", cells)])
    default = from_meshio(mesh)
    assert default.cell_type == "triangle"
    for block in ("triangle", 1, -1):
        assert torch.equal(from_meshio(mesh, cell_block=block).cells, default.cells)
    with pytest.raises(geoattn.UnsupportedCellError, match=r"0: line \(1\), 1: triangle"):
        from_meshio(mesh, cell_block="quad")
    with pytest.raises(geoattn.UnsupportedCellError, match="2 cell block"):
        from_meshio(mesh, cell_block=5)
    # a 1-D line mesh stored with 2-D points picks its lines over the vertex block
    x = np.linspace(0, 2, 9)
    line = meshio.Mesh(np.c_[x, np.zeros(9)], [("vertex", np.array([[0]])),
                                               ("line", np.c_[np.arange(8), np.arange(1, 9)])])
    assert float(from_meshio(line, cell_block="line").weight.sum()) == pytest.approx(2.0)


def test_gmsh_file_in_the_repository():
    """meshes/disk_two_holes.msh (written by gmsh) reads with its boundary blocks dropped; its
    lumped weights sum to the total area of its triangles."""
    from pathlib import Path

    from geoattn.mesh import signed_volumes

    path = Path(__file__).parents[2] / "meshes" / "disk_two_holes.msh"
    data = read_mesh(path, dtype=torch.float64)
    raw = meshio.read(path)
    cells = np.concatenate([b.data for b in raw.cells if b.type == "triangle"])
    area = np.abs(signed_volumes(raw.points[:, :2], cells, "triangle")).sum()
    assert data.cell_type == "triangle" and data.pos.shape[1] == 2
    assert float(data.weight.sum()) == pytest.approx(area, rel=1e-12)


def test_gmsh_generated_disk(tmp_path):
    """A unit disk meshed by gmsh: the lumped weights sum to the polygon's area, within
    ``O(h^2)`` of pi (h = 0.1: the inscribed polygon's area is pi (1 - O(h^2)))."""
    gmsh = pytest.importorskip("gmsh")
    path = tmp_path / "disk.msh"
    gmsh.initialize()
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.add("disk")
        gmsh.model.occ.addDisk(0, 0, 0, 1, 1)
        gmsh.model.occ.synchronize()
        gmsh.option.setNumber("Mesh.MeshSizeMax", 0.1)
        gmsh.model.mesh.generate(2)
        gmsh.write(str(path))
    finally:
        gmsh.finalize()
    data = read_mesh(path, reorient=True, unused="ignore", dtype=torch.float64)
    assert data.pos.shape[1] == 2
    assert float(data.weight.sum()) == pytest.approx(np.pi, rel=0.01)


def test_pyvista_round_trip():
    pv = pytest.importorskip("pyvista")
    from geoattn.mesh import from_pyvista, to_pyvista

    pos, cells = _shared_square(2)
    data = from_meshio(meshio.Mesh(pos, [("triangle", cells)], point_data={"u": _field(pos)}),
                       x="u", dtype=torch.float64)
    grid = to_pyvista(data)
    assert isinstance(grid, pv.UnstructuredGrid) and grid.n_points == len(pos)
    back = from_pyvista(grid, x="x", dtype=torch.float64)
    torch.testing.assert_close(back.pos, data.pos)
    torch.testing.assert_close(back.weight, data.weight)
    torch.testing.assert_close(back.x, data.x)
    sphere = from_pyvista(pv.Sphere(radius=1.0, theta_resolution=40, phi_resolution=40),
                          dtype=torch.float64)  # a PolyData surface in 3-D
    assert sphere.pos.shape[1] == 3
    assert float(sphere.weight.sum()) == pytest.approx(4 * np.pi, rel=0.01)


@pytest.mark.parametrize("h", [0.05, 0.025])
def test_gmsh_square_with_holes_is_valid_and_its_weights_hold_its_area(h):
    """families.square_with_holes: a valid, positively oriented triangulation whose lumped weights
    sum to the area of the inscribed polygon, within the chord error of the circles: a regular
    n-gon in a circle of radius r misses pi r^2 (2 pi / n)^2 / 6 to leading order, n >= 2 pi r / h."""
    pytest.importorskip("gmsh")
    from geoattn.mesh import families

    holes = [(0.3, 0.4, 0.1), (0.7, 0.6, 0.15)]
    data = from_meshio(families.square_with_holes(holes, h), dtype=torch.float64)
    exact = 1.0 - sum(np.pi * r**2 for _, _, r in holes)
    chord = sum(np.pi * r**2 * (h / r) ** 2 / 6 for _, _, r in holes)  # the polygons' deficit, bound
    area = float(data.weight.sum())
    assert exact <= area <= exact + 2 * chord  # holes inscribed: the mesh covers a little more
