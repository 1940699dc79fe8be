import meshio
import numpy as np
import pytest
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from geoattn.mesh import families, from_meshio, read_mesh
from geoattn.mesh.partition import partition, patch_centroids

SAMPLES = ["square_graded.vtu", "square_irregular.vtu", "square_quad.vtu", "l_shape.vtu",
           "cube_tetra.vtu", "disk_two_holes.msh"]


def _weight_error(assign, w, num_parts):
    total = np.bincount(assign, w, num_parts)
    return np.abs(total / (w.sum() / num_parts) - 1).max()


def _parts_connected(assign, cells, num_parts):
    """Each part induces one connected component of the graph of cell edges (plain scipy)."""
    rows, cols = [], []
    for a in range(cells.shape[1]):
        for b in range(cells.shape[1]):
            rows.append(cells[:, a])
            cols.append(cells[:, b])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    keep = assign[rows] == assign[cols]
    n = len(assign)
    graph = coo_matrix((np.ones(keep.sum()), (rows[keep], cols[keep])), shape=(n, n))
    return connected_components(graph, directed=False)[0] == num_parts


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("num_parts", [4, 8])
def test_metis_balanced_and_connected(meshes_dir, name, num_parts):
    data = read_mesh(meshes_dir / name)
    part = partition(data.pos, data.weight, num_parts, cells=data.cells)
    assign, w = part.assignment.numpy(), data.weight.numpy()
    assert _weight_error(assign, w, num_parts) <= 0.05
    assert _parts_connected(assign, data.cells.numpy(), num_parts)
    # deterministic
    again = partition(data.pos, data.weight, num_parts, cells=data.cells)
    assert torch.equal(part.assignment, again.assignment)


def test_metis_balances_weight_not_nodes():
    # graded mesh: node counts per part differ wildly, total weights do not
    data = from_meshio(families.unit_square(24, "graded"))
    part = partition(data.pos, data.weight, 4, cells=data.cells)
    counts = np.bincount(part.assignment.numpy(), minlength=4)
    assert _weight_error(part.assignment.numpy(), data.weight.numpy(), 4) <= 0.05
    assert counts.max() > 2 * counts.min()


def test_rcb_balanced_on_irregular():
    # RCB regions are boxes (connected as regions; the node subgraph of a box may not be)
    data = from_meshio(families.unit_square(24, "irregular"))
    for num_parts in [2, 5, 8]:
        part = partition(data.pos, data.weight, num_parts, method="rcb")
        assert _weight_error(part.assignment.numpy(), data.weight.numpy(), num_parts) <= 0.05


@pytest.mark.parametrize("method", ["metis", "rcb"])
@pytest.mark.parametrize("kind", ["irregular", "graded"])
def test_transfer_to_refined_mesh_keeps_patches(method, kind):
    coarse_mesh = families.unit_square(8, kind)
    coarse = from_meshio(coarse_mesh)
    part = partition(coarse.pos, coarse.weight, 6, cells=coarse.cells, method=method)
    # transfer to itself is the identity
    assert torch.equal(part.transfer(coarse.pos), part.assignment)
    prev = coarse
    for times in (1, 2):
        fine = from_meshio(families.refine(coarse_mesh, times))
        fine_assign = part.transfer(fine.pos)
        # red refinement keeps the coarse nodes first: they keep their patches exactly
        assert torch.allclose(fine.pos[:len(coarse.pos)], coarse.pos)
        assert torch.equal(fine_assign[:len(coarse.pos)], part.assignment)
        # the patches are the same regions: total weights converge to the coarse ones' regions
        assert set(fine_assign.tolist()) == set(range(6))
        prev = fine
    if method == "rcb":
        # RCB regions are boxes: total weight per patch equals the box areas on every mesh up to O(h)
        w_fine = np.bincount(fine_assign.numpy(), prev.weight.numpy(), 6)
        w_coarse = np.bincount(part.assignment.numpy(), coarse.weight.numpy(), 6)
        assert np.abs(w_fine - w_coarse).max() < 0.5 / 6


def test_rcb_transfer_is_exact_geometry():
    """A point is assigned by the cut planes alone: any cloud in a node's cut box gets its patch."""
    data = from_meshio(families.unit_square(12, "irregular"))
    part = partition(data.pos, data.weight, 4, method="rcb")
    cloud = torch.rand(2000, 2, dtype=data.pos.dtype)
    assign = part.transfer(cloud)
    # nearest coarse node is in the same patch for the vast majority: regions are unions of boxes
    # aligned with the nodes, so disagreements only occur near cut planes
    near = part.assignment[torch.cdist(cloud, data.pos).argmin(1)]
    assert (assign == near).float().mean() > 0.9
    # and the transfer is a function of position: two copies of the same point agree
    assert torch.equal(part.transfer(cloud[:10]), assign[:10])


def test_patch_length_covers_patches():
    data = from_meshio(families.unit_square(16, "irregular"))
    part = partition(data.pos, data.weight, 8, cells=data.cells)
    c = patch_centroids(data.pos, data.weight, part.assignment, 8)
    xi = (data.pos - c[part.assignment]) / part.length
    assert xi.abs().max() <= 0.5 / 1.1 + 1e-6


def test_errors():
    pos = torch.rand(10, 2)
    with pytest.raises(ValueError, match="num_parts"):
        partition(pos, torch.ones(10), 11)
    with pytest.raises(ValueError, match="method"):
        partition(pos, torch.ones(10), 2, method="spectral")


def test_point_cloud_without_cells():
    pos = torch.rand(400, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = torch.full((400,), 1 / 400, dtype=torch.float64)
    part = partition(pos, w, 4)
    assert _weight_error(part.assignment.numpy(), w.numpy(), 4) <= 0.05
