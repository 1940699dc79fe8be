"""The Python API refuses what would be silently wrong: bad quadrature weights, NaN inputs and
unsorted batch vectors given to a bare model, an empty training set, a point cloud in a .vtu file,
a refinement that cannot fit in memory. Each raises its typed error with a message naming the
cause and the fix, and changes nothing."""

import meshio
import numpy as np
import pytest
import torch

import geoattn
from geoattn.mesh import families, read_mesh, write_mesh
from geoattn.mesh.refinement import refine_to, refined_size
from geoattn.models import MODELS, build_model
from geoattn.train import NormalizedOperator, Trainer

SMALL = {"tno": {"num_heads": 2}, "galerkin": {"num_heads": 2}, "vit": {"num_heads": 2, "num_patches": 4},
         "fano": {"num_heads": 2, "num_patches": 4}, "slice": {"num_heads": 2, "num_slices": 4},
         "gno": {"radius": 0.5}, "mesh_fno": {}, "multigrid": {"grid": 4, "levels": 2}}


def _model(name):
    torch.manual_seed(0)
    return build_model(name, in_channels=1, out_channels=1, dim=2, width=8, depth=1, **SMALL.get(name, {}))


def _inputs(n=20, graphs=1):
    g = torch.Generator().manual_seed(1)
    x, pos = torch.randn(n, 1, generator=g), torch.rand(n, 2, generator=g)
    weight = torch.full((n,), 1.0 / n)
    batch = None if graphs == 1 else torch.arange(graphs).repeat_interleave(n // graphs)
    return x, pos, weight, batch


def test_every_registered_model_is_covered():
    assert set(MODELS) == set(SMALL)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("bad,words", [(-0.1, r"weight 7 is negative"), (float("nan"), r"weight 7 is not finite"),
                                       (float("inf"), r"weight 7 is not finite")])
def test_bare_model_refuses_a_bad_weight_naming_it(name, bad, words):
    model = _model(name)
    x, pos, weight, _ = _inputs()
    weight[7] = bad
    kept = weight.clone()
    with pytest.raises(geoattn.WeightError, match=words):
        model(x, pos, weight)
    torch.testing.assert_close(weight, kept, rtol=0, atol=0, equal_nan=True)  # left as it was


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bare_model_refuses_a_graph_of_zero_total_weight_and_accepts_zero_weights(name):
    model = _model(name)
    x, pos, weight, batch = _inputs(20, graphs=2)
    zero = weight.clone()
    zero[10:] = 0
    with pytest.raises(geoattn.WeightError, match=r"graph 1 has total weight 0 \(10 nodes, every weight zero\)"):
        model(x, pos, zero, batch)
    some = weight.clone()
    some[[3, 15]] = 0  # zero-weight nodes (padding) are part of the design
    assert torch.isfinite(model(x, pos, some, batch)).all()


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("field", ["x", "pos"])
def test_bare_model_refuses_nan_inputs_naming_the_nodes(name, field):
    model = _model(name)
    x, pos, weight, _ = _inputs()
    inputs = {"x": x.clone(), "pos": pos.clone()}
    inputs[field][[4, 9]] = float("nan")
    words = fr"{field} is NaN or infinite at 2 of 20 nodes, the first is node 4"
    with pytest.raises(geoattn.NonFiniteError, match=words):
        model(inputs["x"], inputs["pos"], weight)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bare_model_refuses_an_unsorted_batch_saying_how_to_sort_it(name):
    model = _model(name)
    x, pos, weight, batch = _inputs(20, graphs=2)
    shuffled = batch.flip(0)  # graph 1 first, then graph 0
    with pytest.raises(geoattn.BatchOrderError, match=r"(?s)not sorted: node 10 has graph 0 after graph 1.*argsort"):
        model(x, pos, weight, shuffled)
    gap = batch.clone()
    gap[10:] = 2  # graph 1 is empty
    with pytest.raises(geoattn.BatchOrderError, match="skips a graph index"):
        model(x, pos, weight, gap)


def test_normalized_operator_refuses_a_bad_weight_before_the_model():
    op = NormalizedOperator(_model("tno"))
    x, pos, weight, _ = _inputs()
    weight[2] = -1.0
    with pytest.raises(geoattn.WeightError, match="weight 2 is negative"):
        op(x, pos, weight)


@pytest.mark.parametrize("train,words", [([], "got an empty one"), (iter([]), "got a list_iterator")])
def test_fit_on_no_samples_says_so_and_writes_nothing(tmp_path, train, words):
    op = NormalizedOperator(_model("tno"))
    before = {k: v.clone() for k, v in op.state_dict().items() if torch.is_tensor(v)}
    with pytest.raises(geoattn.ConfigError, match=f"at least one training sample, {words}"):
        Trainer(op, tmp_path / "run", epochs=1, progress=False).fit(train)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
    assert all(torch.equal(v, op.state_dict()[k]) for k, v in before.items())


def test_vtu_point_cloud_says_it_has_no_cells_and_how_to_read_points(tmp_path):
    path = tmp_path / "cloud.vtu"
    meshio.write(path, meshio.Mesh(np.random.default_rng(0).random((20, 3)), []))
    words = r"(?s)it has no cells.*'vertex' cell.*quadrature_weights.*'voronoi'"
    with pytest.raises(geoattn.MeshFileError, match=words):
        read_mesh(path)
    # the way the message names: one vertex cell per node reads as a point cloud with weights
    data = geoattn.mesh.from_meshio(meshio.Mesh(np.random.default_rng(0).random((20, 2)), []))
    write_mesh(tmp_path / "vertices.vtu", data)
    assert read_mesh(tmp_path / "vertices.vtu").weight.shape == (20,)


def test_refinement_that_cannot_fit_names_its_size():
    mesh = families.unit_square(4)
    nodes = refined_size(mesh.points[:, :2], mesh.cells[-1].data, 1e-7)
    # each of the 32 triangles (longest edge 0.35) is split 4 ** 22 times: about 7e13 nodes
    assert 1e13 < nodes < 1e15
    words = r"would give about [0-9.]+e\+1[34] nodes, which do not fit in memory"
    with pytest.raises(geoattn.TooLargeError, match=words):
        refine_to(mesh, 1e-7)
    fine, prolong = refine_to(mesh, 0.1)  # a refinement that fits: about as many nodes as estimated
    estimate = refined_size(mesh.points[:, :2], mesh.cells[-1].data, 0.1)
    assert 0.5 * len(fine.points) <= estimate <= 2 * len(fine.points)


def test_memory_error_during_refinement_is_named(monkeypatch):
    mesh = families.unit_square(4)
    import skfem

    def fail(self, marked=None):
        raise MemoryError

    monkeypatch.setattr(skfem.MeshTri1, "refined", fail)
    with pytest.raises(geoattn.TooLargeError, match=r"refining to edges of at most 0\.1 would give about \d+ nodes"):
        refine_to(mesh, 0.1)
