"""Issue 56: every numeric option of the models' constructors (TNO, Galerkin, Slice, GNO, mesh FNO)
takes any real number type and refuses booleans, non-finite numbers, values out of range and
fractions where a whole number is needed, in one line naming the model and the option; the
command line's model settings are refused the same way."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from geoattn.cli.main import main
from geoattn.errors import ConfigError
from geoattn.models import build_model
from geoattn.models.encoder import PointwiseMLP

BASE = {"in_channels": 1, "out_channels": 1, "dim": 2}
#: per model: small settings it is built with, and one option of each kind it checks
MODELS = {
    "tno": ({"width": 8, "depth": 1, "num_heads": 2}, {"whole": "num_heads", "rate": "dropout"}),
    "galerkin": ({"width": 8, "depth": 1, "num_heads": 2}, {"whole": "ff_mult", "rate": "ff_dropout"}),
    "slice": ({"width": 8, "depth": 1, "num_heads": 2, "num_slices": 4}, {"whole": "num_slices", "rate": "dropout"}),
    "gno": ({"width": 8, "depth": 1, "kernel_width": 8}, {"whole": "kernel_width", "length": "radius"}),
    "mesh_fno": ({"width": 8, "depth": 1, "modes": 2}, {"whole": "modes", "length": "padding"}),
}


@pytest.mark.parametrize("name", MODELS)
def test_numpy_scalars_and_0d_tensors_are_taken_as_python_numbers(name):
    settings, _ = MODELS[name]
    given = {k: (np.int64(v) if i % 2 else torch.tensor(v)) for i, (k, v) in enumerate(settings.items())}
    model = build_model(name, **BASE, **given)
    reference = build_model(name, **BASE, **settings)
    for key, value in settings.items():
        assert model.hparams[key] == value and type(model.hparams[key]) is int, (key, model.hparams[key])
    assert repr(model) == repr(reference)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("option", ["width", "depth", "whole"])
@pytest.mark.parametrize("value, message", [
    (True, "must be a real number, got bool True"),
    (np.bool_(True), "must be a real number, got bool"),
    (8.5, "must be a whole number, got 8.5"),
    (float("nan"), "must be a finite number, got nan"),
    (math.inf, "must be a finite number, got inf"),
    ("8", "must be a real number, got str '8'"),
    (torch.ones(2), r"must be one number, got an array of shape \(2,\)"),
])
def test_whole_number_options_refuse_what_is_not_one(name, option, value, message):
    settings, kinds = MODELS[name]
    key = kinds.get(option, option)
    with pytest.raises(ConfigError, match=f"^{type(build_model(name, **BASE, **settings)).__name__}: {key} {message}"):
        build_model(name, **BASE, **{**settings, key: value})


@pytest.mark.parametrize("name", MODELS)
def test_non_positive_sizes_are_refused(name):
    settings, kinds = MODELS[name]
    key = kinds["whole"]
    low = 0 if key != "modes" else -1  # zero modes along an axis is allowed
    with pytest.raises(ConfigError, match=f"{key} must be"):
        build_model(name, **BASE, **{**settings, key: low})
    with pytest.raises(ConfigError, match="width must be > 0, got 0"):
        build_model(name, **BASE, **{**settings, "width": 0})


@pytest.mark.parametrize("name", [n for n, (_, k) in MODELS.items() if "rate" in k])
@pytest.mark.parametrize("value", [1.0, -0.1, np.float32(1.5)])
def test_dropout_rates_are_in_0_1(name, value):
    settings, kinds = MODELS[name]
    with pytest.raises(ConfigError, match=rf"{kinds['rate']} must be in \[0, 1\), got {float(value):g}"):
        build_model(name, **BASE, **{**settings, kinds["rate"]: value})
    model = build_model(name, **BASE, **{**settings, kinds["rate"]: np.float32(0.25)})
    assert model.hparams[kinds["rate"]] == 0.25 and type(model.hparams[kinds["rate"]]) is float


def test_lengths_refuse_zero_nan_and_bool():
    for value, message in ((0.0, "radius must be > 0, got 0.0"), (float("nan"), "radius must be a finite number"),
                           (True, "radius must be a real number, got bool")):
        with pytest.raises(ConfigError, match=f"GNO: {message}"):
            build_model("gno", **BASE, width=8, depth=1, radius=value)
    assert build_model("gno", **BASE, width=8, depth=1, radius=np.float64(0.5)).radius == 0.5
    with pytest.raises(ConfigError, match=r"MeshFNO: padding must be >= 0, got -0.1"):
        build_model("mesh_fno", **BASE, width=8, depth=1, modes=2, padding=-0.1)


def test_modes_take_a_sequence_of_any_integer_type():
    model = build_model("mesh_fno", **BASE, width=8, depth=1, modes=(np.int32(3), torch.tensor(2)))
    assert model.hparams["modes"] == (3, 2) and all(type(k) is int for k in model.hparams["modes"])
    with pytest.raises(ConfigError, match="MeshFNO: modes must be a whole number, got 2.5"):
        build_model("mesh_fno", **BASE, width=8, depth=1, modes=(3, 2.5))


def test_coordinate_features_and_mlp_rates_are_checked():
    with pytest.raises(ConfigError, match="coordinate_features num_features must be a whole number"):
        build_model("tno", **BASE, width=8, depth=1, num_heads=2, coordinate_features={"num_features": 2.5})
    with pytest.raises(ConfigError, match="coordinate_features scale must be > 0"):
        build_model("tno", **BASE, width=8, depth=1, num_heads=2, coordinate_features={"num_features": 2, "scale": 0})
    with pytest.raises(ConfigError, match=r"dropout must be in \[0, 1\), got nan|dropout must be a finite number"):
        PointwiseMLP(2, 4, 2, dropout=float("nan"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("options") / "d.h5"
    mesh = Path(__file__).resolve().parents[2] / "meshes" / "square_irregular.vtu"
    assert main(["generate", "--mesh", f"train={mesh}", "--n", "2", "--modes", "4", "--out", str(out),
                 "--no-progress"]) == 0
    return out


@pytest.mark.parametrize("model, table, message", [
    ("mesh_fno", "modes = 4.5", r"MeshFNO: modes must be a whole number, got 4.5"),
    ("gno", "radius = 0.0", r"GNO: radius must be > 0, got 0.0"),
    ("tno", "dropout = 1.0", r"TNO: dropout must be in \[0, 1\), got 1"),
])
def test_the_command_line_names_the_option(data, tmp_path, capsys, model, table, message):
    config = tmp_path / "c.toml"
    config.write_text(f"[model]\nname = \"{model}\"\nwidth = 8\ndepth = 1\n{table}\n")
    assert main(["train", str(data), "--config", str(config), "--out", str(tmp_path / "run"), "--epochs", "1",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "run").exists()
