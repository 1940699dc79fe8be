"""Ensembles: the mean and spread of the members' outputs, never worse in mean square than the
members (Jensen), trained reproducibly and read back from their checkpoints."""

import pytest
import torch

from geoattn.errors import CheckpointError, ConfigError
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import build_model
from geoattn.train import Ensemble, NormalizedOperator, load_ensemble, train_ensemble

from toy_operator import toy_samples


def _model(seed, out_channels=1):
    torch.manual_seed(seed)
    return build_model("mesh_fno", in_channels=1, out_channels=out_channels, dim=2, modes=2, width=8,
                       depth=2).double()


def _sample():
    s = from_meshio(families.unit_square(6, "irregular"), dtype=torch.float64)
    s.x = torch.sin(3 * s.pos[:, :1]) + s.pos[:, 1:] ** 2
    return s


def test_mean_and_spread_are_those_of_the_members():
    members, s = [_model(k) for k in range(3)], _sample()
    ens = Ensemble(members)
    outs = torch.stack([m(s.x, Mesh(s.pos, s.weight)) for m in members])  # [3, N, 1]
    torch.testing.assert_close(ens(s.x, Mesh(s.pos, s.weight)), (outs[0] + outs[1] + outs[2]) / 3, rtol=1e-12, atol=1e-14)
    var = ((outs - outs.mean(0)) ** 2).sum(0) / 3
    torch.testing.assert_close(ens.spread(s.x, Mesh(s.pos, s.weight)), var.sqrt(), rtol=1e-10, atol=1e-14)
    assert ens.spread(s.x, Mesh(s.pos, s.weight)).min() > 0  # members from other seeds differ everywhere
    assert len(ens) == 3 and (ens.in_channels, ens.out_channels, ens.dim) == (1, 1, 2)


def test_one_member_is_the_member():
    m, s = _model(0), _sample()
    ens = Ensemble([m])
    torch.testing.assert_close(ens(s.x, Mesh(s.pos, s.weight)), m(s.x, Mesh(s.pos, s.weight)), rtol=0, atol=0)
    assert ens.spread(s.x, Mesh(s.pos, s.weight)).abs().max() == 0


def test_the_mean_is_never_worse_in_mean_square_than_the_members():
    """Jensen: |mean_k u_k - y|^2 <= mean_k |u_k - y|^2 in any (here the weighted L2) norm, with
    the gap the members' variance: equality holds exactly as the identity says."""
    members, s = [_model(k) for k in range(4)], _sample()
    y = torch.cos(2 * s.pos[:, :1])
    ens = Ensemble(members)
    sq = lambda u: (s.weight[:, None] * (u - y) ** 2).sum()  # noqa: E731
    members_mean = torch.stack([sq(m(s.x, Mesh(s.pos, s.weight))) for m in members]).mean()
    spread = (s.weight[:, None] * ens.spread(s.x, Mesh(s.pos, s.weight)) ** 2).sum()
    torch.testing.assert_close(sq(ens(s.x, Mesh(s.pos, s.weight))) + spread, members_mean, rtol=1e-10, atol=0)
    assert sq(ens(s.x, Mesh(s.pos, s.weight))) < members_mean


def test_members_of_another_contract_are_refused():
    with pytest.raises(ConfigError, match="at least one member"):
        Ensemble([])
    with pytest.raises(ConfigError, match="members differ"):
        Ensemble([_model(0), _model(1, out_channels=2)])


def test_the_contract_checks_are_the_members():
    ens = Ensemble([_model(0), _model(1)])
    s = _sample()
    with pytest.raises(Exception, match="input channel"):
        ens.check_inputs(torch.zeros(len(s.pos), 3, dtype=torch.float64), s.pos)


def test_train_ensemble_seeds_members_and_reads_back(tmp_path):
    train = toy_samples(8)
    make = lambda: NormalizedOperator(  # noqa: E731
        build_model("mesh_fno", in_channels=1, out_channels=1, dim=2, modes=2, width=8, depth=1))
    ens = train_ensemble(make, train, train[:2], members=2, seed=5, out_dir=tmp_path, epochs=2,
                         progress=False, restore_best=True)
    assert len(ens) == 2
    # member k is what one Trainer with seed 5 + k makes of an operator built after manual_seed(5 + k)
    from geoattn.train import Trainer

    torch.manual_seed(6)
    alone = make()
    Trainer(alone, epochs=2, seed=6, progress=False, restore_best=True).fit(train, train[:2])
    for a, b in zip(alone.state_dict().values(), ens.members[1].state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    s = train[0]
    ens.eval()
    loaded = load_ensemble(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["member0", "member1"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(s.x, Mesh(s.pos, s.weight)), ens(s.x, Mesh(s.pos, s.weight)), rtol=1e-6, atol=1e-7)
        assert not torch.equal(ens.members[0](s.x, Mesh(s.pos, s.weight)), ens.members[1](s.x, Mesh(s.pos, s.weight)))


def test_a_trainer_refuses_an_ensemble():
    from geoattn.train import Trainer

    with pytest.raises(ConfigError, match="train_ensemble"):
        Trainer(Ensemble([NormalizedOperator(_model(0).float()), NormalizedOperator(_model(1).float())]))


def test_train_ensemble_refuses_bad_settings(tmp_path):
    with pytest.raises(ConfigError, match="members"):
        train_ensemble(lambda: None, [], members=0)
    with pytest.raises(CheckpointError, match="member"):
        load_ensemble(tmp_path)
