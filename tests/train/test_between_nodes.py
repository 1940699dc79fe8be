"""The between-nodes loss (geoattn.train.between_nodes) and ``Trainer(between_nodes=)``: the two
weighted terms by hand, the split of a batch of different meshes, λ = 0 as the nodal loss of the
multigrid, training, checkpoints and resuming, the refusals, and ``geoattn train --between-nodes``."""

import math

import pytest
import torch

from geoattn.cli.main import main
from geoattn.errors import ConfigError
from geoattn.mesh import Mesh, as_samples, families, from_meshio
from geoattn.models import build_model
from geoattn.train import (NormalizedOperator, Trainer, between_nodes_loss, load_checkpoint, load_operator,
                           refined_for_loss, relative_l2, split_refined)
from geoattn.train.between_nodes import between_nodes_errors
from toy_operator import toy_samples

LAM = 0.25


def _multigrid(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    model = build_model("multigrid", in_channels=1, out_channels=1, dim=2, width=4, depth=1, grid=4, levels=2)
    return NormalizedOperator(model).to(dtype)


def _two_meshes():
    """Samples on two different meshes, alternating (one mesh per sample in a batch of two)."""
    a, b = toy_samples(4, 4, seed=0), toy_samples(4, 5, seed=1)
    return as_samples([s for pair in zip(a, b) for s in pair])


def _tiny():
    f64 = dict(dtype=torch.float64)
    coarse = Mesh(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], **f64), torch.tensor([0.1, 0.2, 0.3], **f64))
    fine_pos = torch.cat([coarse.pos, torch.tensor([[0.5, 0.0], [0.5, 0.5]], **f64)])
    return coarse, Mesh(fine_pos, torch.tensor([0.05, 0.1, 0.15, 0.2, 0.25], **f64))


def test_loss_is_the_two_weighted_relative_errors_by_hand():
    coarse, fine = _tiny()
    mesh = Mesh.batch([coarse, coarse])
    split = split_refined(mesh, Mesh.batch([fine, fine]))
    assert split.at_train.tolist() == [0, 1, 2, 5, 6, 7] and split.at_other.tolist() == [3, 4, 8, 9]
    assert split.other.num_graphs == 2 and split.other.weight.tolist() == [0.2, 0.25, 0.2, 0.25]
    pred = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0], [0.0], [1.0], [-1.0], [2.0], [2.0]], dtype=torch.float64)
    y = torch.tensor([[1.0], [1.0], [2.0], [2.0], [4.0], [1.0], [1.0], [1.0], [1.0], [3.0]], dtype=torch.float64)
    # sample 0: training weights (0.1, 0.2, 0.3), errors (0, 1, 1), targets (1, 1, 2);
    # new nodes weights (0.2, 0.25), errors (2, 1), targets (2, 4)
    nodal0 = math.sqrt((0.2 + 0.3) / (0.1 + 0.2 + 1.2))
    between0 = math.sqrt((0.2 * 4 + 0.25) / (0.2 * 4 + 0.25 * 16))
    # sample 1: errors (-1, 0, -2) and (1, -1), targets (1, 1, 1) and (1, 3)
    nodal1 = math.sqrt((0.1 + 0.3 * 4) / 0.6)
    between1 = math.sqrt((0.2 + 0.25) / (0.2 + 0.25 * 9))
    per_sample = between_nodes_loss(pred, y, mesh, split, LAM, reduction="none")
    expected = torch.tensor([nodal0 + LAM * between0, nodal1 + LAM * between1], dtype=torch.float64)
    torch.testing.assert_close(per_sample, expected, rtol=1e-14, atol=0)
    assert float(between_nodes_loss(pred, y, mesh, split, LAM)) == pytest.approx(float(expected.mean()), rel=1e-14)
    # λ = 0: exactly the nodal loss at the training nodes, with the training mesh's weights
    nodal = relative_l2(pred[[0, 1, 2, 5, 6, 7]], y[[0, 1, 2, 5, 6, 7]], mesh, reduction="none")
    assert torch.equal(between_nodes_loss(pred, y, mesh, split, 0.0, reduction="none"), nodal)


def test_split_needs_the_training_nodes_first():
    coarse, fine = _tiny()
    with pytest.raises(ValueError, match="first"):
        split_refined(coarse, Mesh(fine.pos.flip(0), fine.weight))
    with pytest.raises(ValueError, match="graph"):
        split_refined(Mesh.batch([coarse, coarse]), fine)


def test_split_picks_the_new_nodes_of_each_member_of_a_batch_of_two_meshes():
    samples = _two_meshes()
    m1, m2 = samples.meshes[0], samples.meshes[1]
    assert m1.num_nodes != m2.num_nodes
    batch = Mesh.batch([m1, m2])
    refined = refined_for_loss(batch)
    f1, f2 = refined.fine.graphs()
    n1, n2 = m1.num_nodes, m2.num_nodes
    assert refined.split.at_train.tolist() == list(range(n1)) + list(range(f1.num_nodes, f1.num_nodes + n2))
    assert refined.split.at_other.tolist() == (list(range(n1, f1.num_nodes))
                                               + list(range(f1.num_nodes + n2, f1.num_nodes + f2.num_nodes)))
    assert torch.equal(refined.fine.pos[refined.split.at_train], batch.pos)
    for member, fine in ((m1, f1), (m2, f2)):  # the new nodes: none of the member's, every other one
        new = fine.pos[member.num_nodes:]
        assert torch.cdist(new, member.pos).min() > 1e-3
        assert len(new) == fine.num_nodes - member.num_nodes > 0
    assert refined.split.other.layout.counts == (f1.num_nodes - n1, f2.num_nodes - n2)
    assert torch.equal(refined.split.other.weight, refined.fine.weight[refined.split.at_other])
    # the public split of the same meshes agrees, and each member's refinement is kept in its memo
    again = split_refined(batch, refined.fine)
    assert torch.equal(again.at_train, refined.split.at_train) and torch.equal(again.at_other, refined.split.at_other)
    assert refined_for_loss(m1).fine is f1 and refined_for_loss(m2).fine is f2
    # the prolongation carries nodal values to their linear interpolants: exact for a linear function
    linear = 0.3 + batch.pos @ torch.tensor([[2.0], [-1.0]])
    torch.testing.assert_close(torch.sparse.mm(refined.prolong, linear),
                               0.3 + refined.fine.pos @ torch.tensor([[2.0], [-1.0]]), rtol=0, atol=1e-6)


def test_lambda_zero_is_the_multigrids_nodal_loss():
    samples = _two_meshes()
    op = _multigrid(dtype=torch.float64)
    mesh = Mesh.batch([samples.meshes[0].to(dtype=torch.float64), samples.meshes[1].to(dtype=torch.float64)])
    x = torch.cat([samples[0].x, samples[1].x]).double()
    y = torch.cat([samples[0].y, samples[1].y]).double()
    with torch.no_grad():
        plain = op(x, mesh)
        queried = op(x, mesh, query=refined_for_loss(mesh).fine)
        nodal, losses, at_nodes = between_nodes_errors(op, x, y, mesh, 0.0)
        _, hybrid, _ = between_nodes_errors(op, x, y, mesh, LAM)
    # the query call's output at the training nodes is the plain call's, to rounding
    torch.testing.assert_close(queried[refined_for_loss(mesh).split.at_train], plain, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(at_nodes, plain, rtol=1e-12, atol=1e-12)
    assert torch.equal(losses, nodal)
    torch.testing.assert_close(nodal, relative_l2(plain, y, mesh, reduction="none"), rtol=1e-12, atol=0)
    assert (hybrid > nodal).all()  # the multigrid is not exact between the nodes


def _hybrid_loss(op, samples):
    mesh = Mesh.batch([samples.meshes[samples[i].mesh_id] for i in range(len(samples))])
    x, y = torch.cat([s.x for s in samples]), torch.cat([s.y for s in samples])
    with torch.no_grad():
        return float(between_nodes_errors(op, x, y, mesh, LAM)[1].mean())


def _trainer(op, out, epochs=10, **kw):
    return Trainer(op, out, epochs=epochs, batch_size=2, lr=1e-2, progress=False, **kw)


class Stop(Exception):
    pass


def _stop_at(epoch):
    def on_epoch(k, row):
        if k == epoch:
            raise Stop  # before the epoch's checkpoint: last.pt holds the epoch before
    return on_epoch


def test_training_lowers_the_loss_records_lambda_and_resume_keeps_it(tmp_path):
    samples = _two_meshes()
    op = _multigrid()
    before = _hybrid_loss(op, samples)
    _trainer(op, tmp_path / "full", between_nodes=LAM).fit(samples)
    assert _hybrid_loss(op, samples) < 0.6 * before
    assert load_checkpoint(tmp_path / "full" / "last.pt")["trainer"]["between_nodes"] == LAM
    assert load_operator(tmp_path / "full" / "best.pt").settings["between_nodes"] == LAM
    # stopped after 6 epochs, then resumed without the option: the run keeps λ and reaches the
    # uninterrupted run's weights
    with pytest.raises(Stop):
        _trainer(_multigrid(), tmp_path / "run", between_nodes=LAM).fit(samples, on_epoch=_stop_at(6))
    resumed_op = _multigrid()
    resumed = _trainer(resumed_op, tmp_path / "run")
    resumed.fit(samples, resume=True)
    assert resumed.between_nodes == LAM
    assert load_checkpoint(tmp_path / "run" / "last.pt")["trainer"]["between_nodes"] == LAM
    for a, b in zip(op.state_dict().values(), resumed_op.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    with pytest.raises(ConfigError, match="between_nodes=0.25"):
        _trainer(_multigrid(), tmp_path / "run", between_nodes=0.5).fit(samples, resume=True)
    # the loss makes a difference: the nodal loss reaches other weights
    plain = _multigrid()
    _trainer(plain, None).fit(samples)
    assert not torch.allclose(plain.model.project[0].weight, op.model.project[0].weight, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("lam", [-1.0, math.nan, math.inf, True, "0.5"])
def test_refuses_a_lambda_that_is_not_a_finite_number_at_least_zero(lam):
    with pytest.raises(ConfigError, match="between_nodes"):
        Trainer(_multigrid(), between_nodes=lam, progress=False)


def test_refuses_a_model_without_query_and_h1():
    gno = NormalizedOperator(build_model("gno", in_channels=1, out_channels=1, width=4, depth=1))
    with pytest.raises(ConfigError, match="between_nodes .* takes no query mesh"):
        Trainer(gno, between_nodes=LAM, progress=False)
    with pytest.raises(ConfigError, match="h1"):
        Trainer(_multigrid(), between_nodes=LAM, h1=True, progress=False)


def test_refuses_meshes_it_cannot_refine():
    quads = from_meshio(families.unit_square(3, "structured", cell="quad"))
    quads.x, quads.y = quads.pos[:, :1].clone(), 1 + quads.pos[:, 1:]
    with pytest.raises(ConfigError, match="between_nodes refines the training meshes.*cannot be refined"):
        _trainer(_multigrid(), None, between_nodes=LAM).fit([quads])
    bare = quads.clone()
    bare.cells = None
    with pytest.raises(ConfigError, match="has no cells"):
        _trainer(_multigrid(), None, between_nodes=LAM).fit([bare])


def test_tetrahedra_train_too():
    base = from_meshio(families.unit_cube(2), dtype=torch.float64)
    samples = []
    for k in range(2):
        s = base.clone()
        s.x = torch.sin(s.pos[:, :1] + k)
        s.y = s.x * (1 + s.pos[:, 1:2])
        samples.append(s)
    samples = as_samples(samples)
    torch.manual_seed(0)
    model = build_model("multigrid", in_channels=1, out_channels=1, dim=3, width=4, depth=1, grid=4, levels=2)
    op = NormalizedOperator(model).double()
    _trainer(op, None, epochs=1, between_nodes=LAM).fit(samples)
    mesh = samples.meshes[0]
    refined = refined_for_loss(mesh)
    assert refined.split.other.num_nodes == refined.fine.num_nodes - mesh.num_nodes > 0
    with torch.no_grad():  # the 3-D multigrid's query output at the training nodes is its plain output
        torch.testing.assert_close(op(samples[0].x, mesh, query=refined.fine)[refined.split.at_train],
                                   op(samples[0].x, mesh), rtol=1e-12, atol=1e-12)


def test_cli_between_nodes(tmp_path, capsys):
    assert main(["train", str(tmp_path / "none.h5"), "--model", "gno", "--between-nodes", "0.25"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--between-nodes" in err and "multigrid" in err
    assert main(["train", str(tmp_path / "none.h5"), "--model", "multigrid", "--between-nodes", "-1"]) == 2
    assert "--between-nodes must be a finite number >= 0" in capsys.readouterr().err
    data, out = tmp_path / "d.h5", tmp_path / "out"
    assert main(["generate", "--mesh", "train=meshes/square_irregular.vtu", "--n", "3", "--family", "lognormal",
                 "--out", str(data), "--no-progress"]) == 0
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "multigrid"\nwidth = 4\ndepth = 1\ngrid = 4\nlevels = 2\n')
    train = ["train", str(data), "--config", str(config), "--out", str(out), "--no-progress"]
    assert main(train + ["--epochs", "1", "--between-nodes", "0.25"]) == 0
    assert load_checkpoint(out / "last.pt")["trainer"]["between_nodes"] == 0.25
    capsys.readouterr()
    assert main(train + ["--epochs", "1", "--resume", "--between-nodes", "0.5"]) == 2
    assert "trained with between_nodes=0.25" in capsys.readouterr().err
    assert main(train + ["--epochs", "1", "--resume"]) == 0  # the stored λ, kept (the Trainer's test)
