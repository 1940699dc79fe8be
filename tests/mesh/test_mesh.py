"""The Mesh value: layout, batches, memo, derived meshes."""

import math

import pytest
import torch
from torch_geometric.data import Batch

from geoattn.mesh import Layout, Mesh, dihedral, families, from_meshio


def _mesh(n: int, seed: int = 0) -> Mesh:
    return Mesh.from_meshio(families.unit_square(n, "irregular", seed=seed), dtype=torch.float64)


def test_layout_of_a_batch_vector_and_of_one_graph():
    layout = Layout.of(torch.tensor([0, 0, 1, 1, 1, 2]), 6)
    assert layout.counts == (2, 3, 1) and layout.offsets == (0, 2, 5) and layout.num_graphs == 3
    assert layout.max_count == 3 and layout.num_nodes == 6
    assert layout.slices() == [slice(0, 2), slice(2, 5), slice(5, 6)]
    assert Layout.of(None, 7).counts == (7,)


def test_batch_concatenates_members_shifts_cells_and_keeps_them():
    a, b, c = _mesh(4), _mesh(5), _mesh(6)
    m = Mesh.batch([a, b, c])
    assert m.layout.counts == (a.num_nodes, b.num_nodes, c.num_nodes)
    assert torch.equal(m.batch_vector, torch.repeat_interleave(torch.arange(3), torch.tensor(m.layout.counts)))
    assert torch.equal(m.pos, torch.cat([a.pos, b.pos, c.pos]))
    # cell t of member g names the same points in the batch
    off = m.layout.offsets[2]
    last = m.cells[-len(c.cells):]
    assert torch.equal(m.pos[last], c.pos[c.cells]) and int(last.min()) >= off
    assert m.graphs() == (a, b, c)
    # a batch of batches is flat, with the members kept
    again = Mesh.batch([Mesh.batch([a, b]), c])
    assert again.graphs() == (a, b, c) and again.layout == m.layout
    assert Mesh.batch([a]) is a


def test_a_pyg_batch_splits_into_member_meshes_with_their_cells():
    d1 = from_meshio(families.unit_square(4, "irregular"))
    d2 = from_meshio(families.unit_square(5, "irregular"))
    m = Mesh.from_sample(Batch.from_data_list([d1, d2]))
    assert m.num_graphs == 2
    g1, g2 = m.graphs()
    assert torch.equal(g2.pos, d2.pos) and torch.equal(g2.cells, d2.cells) and torch.equal(g1.weight, d1.weight)


def test_structure_builds_once_and_a_batch_joins_its_members_structure():
    a, b = _mesh(4), _mesh(5)
    builds = []

    def build(mesh):
        builds.append(mesh)
        return torch.arange(mesh.num_nodes)

    def join(batch, parts):  # node indices of the batch: each member's, shifted by its offset
        return torch.cat([p + o for p, o in zip(parts, batch.layout.offsets)])

    ab = Mesh.batch([a, b])
    assert torch.equal(ab.structure(("nodes",), build, join), torch.arange(ab.num_nodes))
    assert torch.equal(Mesh.batch([b, a]).structure(("nodes",), build, join), torch.arange(ab.num_nodes))
    assert builds == [a, b]  # each member built once, over two batches
    assert ab.structure(("nodes",), build, join) is ab.memo[("nodes",)]
    assert ab.structure(("whole",), build).shape == (ab.num_nodes,) and builds[-1] is ab  # no join: on the batch
    assert a.structure(("k", 1), lambda m: 1) == 1 and a.structure(("k", 1), lambda m: 2) == 1


def test_structure_keys_are_plain_host_values():
    a = _mesh(4)
    for bad in (("graph", a), ("graph", torch.ones(1)), ("graph", object())):
        with pytest.raises(TypeError, match="plain host values"):
            a.structure(bad, lambda m: 0)
    iso = dihedral(4, center=(0.5, 0.5))[1]
    assert a.moved(iso) is a.moved(type(iso)(iso.matrix, iso.center, "another label"))


def test_memo_bytes_and_clear_structure():
    a, b = _mesh(4), _mesh(5)
    ab = Mesh.batch([a, b])
    assert ab.memo_bytes() == 0
    ab.structure(("nodes",), lambda m: torch.zeros(m.num_nodes, dtype=torch.float64),
                 lambda batch, parts: torch.cat(parts))
    assert ab.memo_bytes() == 2 * 8 * ab.num_nodes  # the joined tensor and the members' parts
    ab.checked = True
    ab.clear_structure()
    assert ab.memo_bytes() == 0 and not a.memo and not ab.checked


def test_to_returns_the_same_moved_mesh_each_time():
    a = _mesh(4)
    assert a.to(dtype=torch.float32) is a.to(dtype=torch.float32)
    assert a.to(dtype=torch.float32).pos.dtype == torch.float32 and a.to() is a


def test_moved_is_the_image_under_an_isometry_shared_by_equal_isometries():
    a = _mesh(4)
    g = dihedral(4, center=(0.5, 0.5))[1]
    image = a.moved(g)
    assert torch.allclose(image.pos, g(a.pos)) and image.weight is a.weight and image.cells is a.cells
    assert a.moved(dihedral(4, center=(0.5, 0.5))[1]) is image


def test_refined_keeps_the_nodes_first_and_interpolates_linear_functions_exactly():
    """P1 prolongation reproduces affine functions exactly (to rounding); the refined mesh's
    lumped weights still integrate 1 to the area (the unit square: 1)."""
    a = _mesh(5)
    fine, prolong = a.refined(0.05)
    assert fine.num_nodes > a.num_nodes
    assert torch.equal(fine.pos[:a.num_nodes], a.pos)
    f = lambda p: 2.0 + 3.0 * p[:, :1] - 1.5 * p[:, 1:]  # noqa: E731
    assert torch.allclose(torch.sparse.mm(prolong, f(a.pos)), f(fine.pos), atol=1e-12)
    assert math.isclose(float(fine.weight.sum()), 1.0, abs_tol=1e-12)
    assert a.refined(0.05)[0] is fine
    # a batch refines member by member
    b = _mesh(4)
    fb, pb = Mesh.batch([a, b]).refined(0.05)
    assert fb.graphs()[0] is fine and pb.shape == (fine.num_nodes + b.refined(0.05)[0].num_nodes,
                                                   a.num_nodes + b.num_nodes)


def test_refined_needs_cells():
    a = _mesh(4)
    with pytest.raises(ValueError, match="cells"):
        Mesh(a.pos, a.weight).refined(0.1)


def test_bad_arguments_are_named():
    pos = torch.rand(5, 2)
    with pytest.raises(ValueError, match="weight must be a tensor"):
        Mesh(pos, torch.ones(4))
    with pytest.raises(ValueError, match="batch must be a tensor"):
        Mesh(pos, torch.ones(5), batch=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one"):
        Mesh.batch([])
