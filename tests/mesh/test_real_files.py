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
    assert "u" in grid.point_data and "x" not in grid.point_data  # ParaView would take "x" for a coordinate
    back = from_pyvista(grid, x="u", dtype=torch.float64)
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


def _mixed_square(k: int = 4) -> meshio.Mesh:
    """The unit square on a k x k grid: triangles on its left half, quads on its right half."""
    xs = np.linspace(0, 1, k + 1)
    pos = np.stack(np.meshgrid(xs, xs), axis=-1).reshape(-1, 2)  # node j * (k + 1) + i at (xs[i], xs[j])
    tris, quads = [], []
    for i in range(k):
        for j in range(k):
            a, b = j * (k + 1) + i, j * (k + 1) + i + 1
            c, d = b + k + 1, a + k + 1
            if i < k // 2:
                tris += [[a, b, c], [a, c, d]]
            else:
                quads.append([a, b, c, d])
    return meshio.Mesh(np.c_[pos, np.zeros(len(pos))], [("triangle", np.array(tris)), ("quad", np.array(quads))],
                       point_data={"u": _field(pos)},
                       cell_data={"k": [np.ones(len(tris)), 3.0 * np.ones(len(quads))]})


def test_a_cell_block_that_leaves_out_part_of_the_domain_is_refused_and_triangulate_reads_it_whole():
    mesh = _mixed_square()
    with pytest.raises(geoattn.UnsupportedCellError, match="triangulate=True"):
        from_meshio(mesh)
    with pytest.raises(geoattn.UnsupportedCellError, match=r"keeps 15 of 25 nodes: 10 nodes .*triangulate=True"):
        from_meshio(mesh, cell_block="triangle")
    data = from_meshio(mesh, triangulate=True, x="u", dtype=torch.float64)
    assert data.cell_type == "triangle" and data.cells.shape == (16 + 2 * 8, 3)
    assert float(data.weight.sum()) == pytest.approx(1.0, rel=1e-12)  # the whole square
    # lumped P1 weights integrate affine functions exactly
    assert float(data.weight @ data.pos[:, 0]) == pytest.approx(0.5, rel=1e-12)
    # a quad's cell field goes to both of its triangles
    assert sorted(data.cell_data["k"].tolist()) == [1.0] * 16 + [3.0] * 16


def test_cell_data_reaches_the_nodes_as_a_volume_weighted_average():
    mesh = _mixed_square()
    data = from_meshio(mesh, triangulate=True, cell_to_point="k", x="k", dtype=torch.float64)
    assert "k" not in data.cell_data
    grid = data.x.reshape(5, 5)  # rows: y, columns: x
    assert torch.all(grid[:, :2] == 1) and torch.all(grid[:, 3:] == 3)
    # node (0.5, 0): one triangle of area 1/32 (k=1) and both halves of a quad, 1/32 each (k=3)
    assert float(grid[0, 2]) == pytest.approx((1 + 2 * 3) / 3, rel=1e-12)
    # an interior node on the seam: 3 triangles on the left and 3 quad halves on the right (1/32 each)
    assert float(grid[2, 2]) == pytest.approx((3 * 1 + 3 * 3) / 6, rel=1e-12)
    # by hand against the definition on an irregular mesh with cells of different sizes
    pos, cells = _shared_square(2)
    values = np.random.default_rng(0).standard_normal(len(cells))
    got = from_meshio(meshio.Mesh(pos, [("triangle", cells)], cell_data={"c": [values]}),
                      cell_to_point=True, dtype=torch.float64).point_data["c"].numpy()
    area = np.abs(geoattn.mesh.signed_volumes(pos, cells, "triangle"))
    for i in (0, 7, len(pos) - 1):
        around = np.flatnonzero((cells == i).any(axis=1))
        assert got[i] == pytest.approx(area[around] @ values[around] / area[around].sum(), rel=1e-12)
    with pytest.raises(geoattn.FieldLengthError, match="cell field 'nope' not found"):
        from_meshio(mesh, triangulate=True, cell_to_point="nope")


def test_cell_data_of_a_per_element_file_is_carried_after_merging():
    pos, cells = _shared_square(2)
    points, split = _per_element(pos, cells)
    mesh = meshio.Mesh(points, [("triangle", split)], point_data={"u": _field(points)},
                       cell_data={"c": [np.full(len(cells), 2.5)]})
    data = from_meshio(mesh, merge_duplicates=True, cell_to_point="c", x="c", y="u", dtype=torch.float64)
    assert data.num_nodes == len(pos)
    torch.testing.assert_close(data.x, torch.full((len(pos), 1), 2.5, dtype=torch.float64))


@pytest.mark.parametrize("name", ["triangle", "tetra"])
def test_linearise_keeps_the_corner_nodes_and_drops_the_mid_edge_nodes(name):
    """A quadratic mesh (mid-edge nodes on straight edges) read with linearise=True is the linear
    mesh of its corners: the same nodes, cells and lumped weights, and the corners' values."""
    skfem = pytest.importorskip("skfem")
    linear = {"triangle": skfem.MeshTri, "tetra": skfem.MeshTet}[name]().refined(2)
    pos = linear.p.T
    cells = orient_cells(pos, linear.t.T, name)
    pairs = [(0, 1), (1, 2), (0, 2)] if name == "triangle" else [(0, 1), (1, 2), (0, 2), (0, 3), (1, 3), (2, 3)]
    edges = np.sort(np.concatenate([cells[:, p] for p in pairs]), axis=1)
    unique, inverse = np.unique(edges, axis=0, return_inverse=True)
    mids = len(pos) + inverse.reshape(len(pairs), -1).T  # [M, E]: each cell's mid-edge nodes
    # number the nodes with mid-edge nodes in between the corners, as a solver might
    points = np.concatenate([pos, pos[unique].mean(axis=1)])
    order = np.random.default_rng(1).permutation(len(points))
    where = np.argsort(order)
    quadratic = meshio.Mesh(points[order], [(name + ("6" if name == "triangle" else "10"),
                                              where[np.c_[cells, mids]])],
                            point_data={"u": _field(points[order])})
    with pytest.raises(geoattn.UnsupportedCellError, match="linearise=True"):
        from_meshio(quadratic)
    data = from_meshio(quadratic, linearise=True, x="u", dtype=torch.float64)
    assert data.cell_type == name and data.num_nodes == len(pos)
    order_data = np.lexsort(data.pos.numpy().T[::-1])
    order_ref = np.lexsort(pos.T[::-1])
    np.testing.assert_array_equal(data.pos.numpy()[order_data], pos[order_ref])  # the corners
    torch.testing.assert_close(data.x[:, 0], torch.as_tensor(_field(data.pos.numpy())), rtol=1e-12, atol=1e-14)
    assert float(data.weight.sum()) == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_allclose(data.weight.numpy()[order_data],
                               quadrature_weights(pos, cells, name).numpy()[order_ref], rtol=1e-12)


def test_a_vtp_file_and_gmsh_views_are_named_for_what_they_are(tmp_path):
    path = tmp_path / "surface.vtp"
    path.write_text("<VTKFile type='PolyData'/>")
    with pytest.raises(geoattn.MeshFileError, match="VTK PolyData file: pyvista reads it"):
        read_mesh(path)
    gmsh = pytest.importorskip("gmsh")
    path = tmp_path / "views.msh"
    gmsh.initialize()
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.add("square")
        gmsh.model.occ.addRectangle(0, 0, 0, 1, 1)
        gmsh.model.occ.synchronize()
        gmsh.option.setNumber("Mesh.MeshSizeMax", 0.3)
        gmsh.option.setNumber("Mesh.MshFileVersion", 2.2)
        gmsh.model.mesh.generate(2)
        gmsh.write(str(path))
        tags, coords, _ = gmsh.model.mesh.getNodes()
        view = gmsh.view.add("u")
        for step in range(2):
            gmsh.view.addHomogeneousModelData(view, step, "square", "NodeData", tags, coords[0::3] + step,
                                              time=step)
        gmsh.view.write(view, str(path), append=True)
    finally:
        gmsh.finalize()
    try:
        meshio.read(path)
    except Exception:
        pass
    else:
        pytest.skip("this meshio reads gmsh views")
    with pytest.raises(geoattn.MeshFileError, match=r"post-processing views \(2 \$NodeData\)") as err:
        read_mesh(path)
    assert "corrupted" not in str(err.value)
