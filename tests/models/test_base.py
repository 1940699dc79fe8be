"""The model registry and base class: hyperparameters recorded, renamed arguments, docstrings."""

import logging

import pytest
import torch

from geoattn.mesh import Mesh
from geoattn.models import FANO, MODELS, TNO, ViTNO, build_model
from geoattn.models.base import RENAMED_ARGUMENTS
from geoattn.nao import NAO


def test_registry_holds_field_to_field_models_only():
    assert {"tno", "galerkin", "gno", "vit", "fano"} <= set(MODELS)
    assert not any(issubclass(cls, NAO) for cls in MODELS.values())
    # NAO still records its arguments (for saving) although it is not registered
    assert NAO(6, dim=1, head_channels=3).hparams["head_channels"] == 3


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registered_model_documents_its_arguments(name):
    doc = MODELS[name].__doc__
    assert doc is not None and "Args:" in doc and "in_channels" in doc, name


def test_subclass_without_init_records_its_own_arguments():
    model = FANO(1, 1, width=8, depth=1, num_heads=2, num_patches=2, modes=1)
    assert model.hparams["num_patches"] == 2 and model.hparams["num_heads"] == 2
    rebuilt = build_model("fano", **model.hparams)
    assert type(rebuilt) is FANO and rebuilt.hparams == model.hparams
    assert type(build_model("vit", **ViTNO(1, 1, width=8, num_heads=2).hparams)) is ViTNO


def test_former_argument_names_are_renamed_with_a_log(caplog):
    assert RENAMED_ARGUMENTS["heads"] == "num_heads"
    with caplog.at_level(logging.WARNING):
        model = build_model("tno", in_channels=1, out_channels=1, width=8, depth=1, heads=2)
    assert model.hparams["num_heads"] == 2 and "heads" not in model.hparams
    assert "now called 'num_heads'" in caplog.text
    with pytest.raises(ValueError, match="former name"):
        build_model("tno", in_channels=1, out_channels=1, heads=2, num_heads=2)


def test_old_checkpoint_arguments_rebuild_the_same_model():
    """A checkpoint written with ``heads`` loads into the renamed model with identical outputs."""
    torch.manual_seed(0)
    new = TNO(1, 1, width=8, depth=1, num_heads=2)
    old_kwargs = dict(new.hparams)
    old_kwargs["heads"] = old_kwargs.pop("num_heads")
    rebuilt = build_model("tno", **old_kwargs)
    rebuilt.load_state_dict(new.state_dict())
    x, pos, w = torch.rand(7, 1), torch.rand(7, 2), torch.full((7,), 1 / 7)
    assert torch.equal(rebuilt(x, Mesh(pos, w)), new(x, Mesh(pos, w)))


def test_coordinate_features_are_fourier_features_of_the_position():
    from geoattn.models.encoder import CoordinateFeatures

    torch.manual_seed(0)
    feats = CoordinateFeatures(1, 2, num_features=3, scale=2.0).double()
    x, pos = torch.rand(5, 1, dtype=torch.float64), torch.rand(5, 2, dtype=torch.float64)
    out = feats(x, pos)
    b = feats.frequencies
    assert out.shape == (5, feats.out_features) == (5, 1 + 2 + 6)
    assert torch.equal(out[:, :3], torch.cat([x, pos], 1))
    assert torch.allclose(out[:, 3:6], torch.cos(2 * torch.pi * pos @ b.T))
    assert torch.allclose(out[:, 6:], torch.sin(2 * torch.pi * pos @ b.T))
    assert not any(p is b for p in feats.parameters())  # a buffer unless learned
    learned = CoordinateFeatures(1, 2, 3, learned=True)
    assert [n for n, _ in learned.named_parameters()] == ["frequencies"]
    assert torch.equal(CoordinateFeatures(1, 2)(x, pos), torch.cat([x, pos], 1))
    with pytest.raises(ValueError):
        CoordinateFeatures(1, 2, num_features=-1)
    with pytest.raises(ValueError, match="unknown coordinate_features keys"):
        CoordinateFeatures.of(1, 2, {"features": 3})
    assert CoordinateFeatures.of(1, 2, None).frequencies is None


SMALL = {"tno": {}, "galerkin": {}, "gno": {"radius": 0.5}, "slice": {"num_slices": 4},
         "mesh_fno": {"modes": 1}, "vit": {"num_patches": 2, "modes": 1}, "fano": {"num_patches": 2, "modes": 1},
         "multigrid": {"grid": 4, "levels": 2}}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_takes_fourier_features_in_its_lift(name):
    kw = dict(in_channels=1, out_channels=1, width=8, depth=1, **SMALL[name])
    if "num_heads" in MODELS[name].__init__.__wrapped__.__code__.co_varnames:
        kw["num_heads"] = 2
    torch.manual_seed(0)
    plain = build_model(name, **kw)
    assert not any("frequencies" in k for k in plain.state_dict())  # old checkpoints still load
    model = build_model(name, coordinate_features={"num_features": 4, "scale": 3.0}, **kw)
    assert model.state_dict()["inputs.frequencies"].shape == (4, 2)
    x, pos, w = torch.rand(30, 1), torch.rand(30, 2), torch.full((30,), 1 / 30)
    out = model(x, Mesh(pos, w))
    assert out.shape == (30, 1) and torch.isfinite(out).all()
    again = build_model(name, **model.hparams)
    again.load_state_dict(model.state_dict())
    assert torch.equal(again(x, Mesh(pos, w)), out)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_depth_zero_is_refused(name):
    """With no block a model is a pointwise map of its input, not an operator: refused by name."""
    from geoattn.errors import ConfigError

    with pytest.raises(ConfigError, match="depth must be at least 1, got 0"):
        build_model(name, in_channels=1, out_channels=1, depth=0)
    build_model(name, in_channels=1, out_channels=1, depth=1)
