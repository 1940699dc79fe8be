"""The multigrid accuracy benchmark's hybrid loss (``benchmarks/multigrid_accuracy.py``): the
variant syntax, the split of one query output into the training nodes and the refined mesh's
other nodes, the loss as the sum of the two weighted terms, and a tiny run end to end."""

import pytest
import torch

from geoattn.mesh import Mesh
from geoattn.train import relative_l2

SCRIPT = "multigrid_accuracy"


@pytest.fixture
def acc(load_script):
    pytest.importorskip("neuralop")
    return load_script(SCRIPT)


def test_variant_syntax(acc):
    assert acc.parse("hybrid@0.25") == ("hybrid", None, 0.25)
    assert acc.parse("hybrid@1:1,2") == ("hybrid", (1, 2), 1.0)
    assert acc.parse("nodes") == ("nodes", None, None)
    with pytest.raises(ValueError):
        acc.parse("hybrid")  # the weight is required
    with pytest.raises(ValueError):
        acc.parse("query@1")  # and only the hybrid takes one


def _meshes():
    coarse = Mesh(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), torch.tensor([0.1, 0.2, 0.3]))
    fine_pos = torch.cat([coarse.pos, torch.tensor([[0.5, 0.0], [0.5, 0.5]])])
    fine = Mesh(fine_pos, torch.tensor([0.05, 0.1, 0.15, 0.2, 0.25]))
    return coarse, fine


def test_hybrid_loss_is_nodal_plus_lambda_between(acc):
    coarse, fine = _meshes()
    b = 2
    split = acc.hybrid_split(coarse, fine, b)
    at_train, at_other, other = split
    assert at_train.tolist() == [0, 1, 2, 5, 6, 7] and at_other.tolist() == [3, 4, 8, 9]
    assert other.num_graphs == b and torch.equal(other.weight, torch.tensor([0.2, 0.25, 0.2, 0.25]))
    g = torch.Generator().manual_seed(0)
    pred, y = torch.randn(2 * 5, 1, generator=g), torch.randn(2 * 5, 1, generator=g)
    coarse_b = Mesh.batch([coarse] * b)
    # the nodal term: the training mesh's weights, not the refined mesh's
    nodal = relative_l2(torch.cat([pred[0:3], pred[5:8]]), torch.cat([y[0:3], y[5:8]]), coarse_b)
    between = relative_l2(torch.cat([pred[3:5], pred[8:10]]), torch.cat([y[3:5], y[8:10]]), Mesh.batch(
        [Mesh(fine.pos[3:], fine.weight[3:])] * b))
    assert acc.hybrid_loss(pred, y, split, coarse_b, 0.0) == pytest.approx(float(nodal))
    assert acc.hybrid_loss(pred, y, split, coarse_b, 0.25) == pytest.approx(float(nodal + 0.25 * between))
    # exact between the nodes: the weight makes no difference
    exact = pred.clone()
    exact[at_other] = y[at_other]
    assert acc.hybrid_loss(exact, y, split, coarse_b, 1.0) == pytest.approx(float(nodal))


def test_hybrid_split_needs_the_training_nodes_first(acc):
    coarse, fine = _meshes()
    moved = Mesh(fine.pos.flip(0), fine.weight)
    with pytest.raises(ValueError, match="first"):
        acc.hybrid_split(coarse, moved, 1)


def test_tiny_hybrid_run(acc, tmp_path):
    runs = acc.main(["--scale", "tiny", "--variants", "nodes", "hybrid@0.25", "--seeds", "0", "--epochs", "1",
                     "--out", str(tmp_path)])
    assert [(r["mode"], r["lambda"]) for r in runs] == [("nodes", None), ("hybrid", 0.25)]
    assert (tmp_path / "hybrid0.25-s0.json").exists()
    for r in runs:
        assert r["epochs"] == 1 and all(0 < e < 10 for e in r["test"].values())
    assert "hybrid, λ=0.25" in acc.table(runs)
