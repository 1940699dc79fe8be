"""``benchmarks/nao.py``: the checkpointed Adam loop of ``radial --scale paper``."""

import pytest
import torch

from geoattn.nao import NAO, TokenMesh, fit_adam

SCRIPT = "nao"  # the ``script`` fixture (conftest.py)


class Cut(Exception):
    """A run cut off."""


def _problem():
    """A small NAO and ``u [8, 11, 4]``, ``f [8, 1, 4]`` on token meshes shared by the systems."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(8, 11, 4, generator=g, dtype=torch.float64)
    f = torch.randn(8, 1, 4, generator=g, dtype=torch.float64)
    mesh = TokenMesh(torch.rand(1, 11, 1, generator=g, dtype=torch.float64),
                     torch.full((1, 11), 0.1, dtype=torch.float64))
    query = TokenMesh(torch.zeros(1, 1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64))
    torch.manual_seed(0)
    return NAO(4, dim=1, head_channels=2, layers=2).double(), u, f, mesh, query


SETTINGS = {"epochs": 5, "lr": 1e-2, "batch_size": 3, "weight_decay": 1e-5, "step_size": 2, "seed": 3}


def test_checkpointed_loop_is_fit_adam(script):
    model, u, f, mesh, query = _problem()
    history, seconds = script.fit_adam_checkpointed(model, u, f, mesh, query, **SETTINGS)
    reference, *_ = _problem()
    expected = fit_adam(reference, u, f, mesh, query, **SETTINGS)
    assert history == expected and seconds > 0
    for k, v in reference.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k


def test_run_cut_off_resumes_to_the_uninterrupted_weights(script, tmp_path):
    """Cut off in the fourth epoch (checkpoints after every second epoch), the same call again
    continues from epoch 2 and ends with the weights and history of an uninterrupted run; a
    finished run trains nothing more."""
    model, u, f, mesh, query = _problem()
    whole, _ = script.fit_adam_checkpointed(model, u, f, mesh, query, tmp_path / "whole", every=2,
                                            **SETTINGS)
    (tmp_path / "cut").mkdir()
    cut, *_ = _problem()
    calls, forward = [0], cut.forward_dense

    def cut_off(*args):
        calls[0] += 1
        if calls[0] > 3 * 3 + 1:  # three steps an epoch: into the fourth epoch
            raise Cut
        return forward(*args)

    cut.forward_dense = cut_off
    with pytest.raises(Cut):
        script.fit_adam_checkpointed(cut, u, f, mesh, query, tmp_path / "cut", every=2, **SETTINGS)
    assert len(torch.load(tmp_path / "cut" / "last.pt", weights_only=True)["history"]) == 2
    resumed, *_ = _problem()
    history, _ = script.fit_adam_checkpointed(resumed, u, f, mesh, query, tmp_path / "cut", every=2,
                                              **SETTINGS)
    assert history == whole
    for k, v in model.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k
    again, *_ = _problem()
    again.forward_dense = None  # nothing left to train: never called
    assert script.fit_adam_checkpointed(again, u, f, mesh, query, tmp_path / "cut", every=2,
                                        **SETTINGS)[0] == whole


def test_paper_preset_is_table_1(script):
    assert script.RADIAL_PAPER == {"dx": 0.0125, "d": 302, "dk": 10, "layers": 2, "train_set": "sine",
                                   "epochs": 20000, "lr": 3e-3, "batch": 10, "weight_decay": 1e-5,
                                   "step_size": 100}
    assert script.PAPER_RADIAL["ID"] == {"E_f": 0.0148, "E_K": 0.0540}
