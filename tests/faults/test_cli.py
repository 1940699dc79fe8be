"""Faults of ``geoattn train / evaluate / predict / info / demo``, tried as a new user would: every
bad flag, setting and file is refused with a typed error (exit code 2, one line on stderr, the
traceback only with ``-v``), and nothing is written or lost: no output appears, and an existing
run, checkpoint or output is left byte for byte as it was."""

import os
import shutil
from pathlib import Path

import meshio
import numpy as np
import pytest
import torch

import geoattn.mesh
from geoattn.cli.main import main
from geoattn.errors import (
    CheckpointError,
    ConfigError,
    DatasetFileError,
    DimensionError,
    DTypeError,
    FieldLengthError,
    InputFilesError,
    MeshFileError,
    NonFiniteOutputError,
    OutputError,
    WeightError,
)
from geoattn.models import build_model
from geoattn.train import save_checkpoint

from .helpers import refused, snapshot

ROOT = Path(__file__).resolve().parents[2]
MESHES = ROOT / "meshes"
as_user = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                             reason="root writes into read-only folders")


def _mesh(path: Path, scale: float = 1.0, value: float = 1.0, name: str = "square_irregular.vtu") -> str:
    mesh = meshio.read(MESHES / name)
    mesh.points = mesh.points * scale
    mesh.point_data = {"a": np.full(len(mesh.points), value)}
    meshio.write(path, mesh)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny dataset, a trained run, and one bad input of each kind, built once."""
    d = tmp_path_factory.mktemp("cli_faults")
    data = d / "d.h5"
    assert main(["generate", "--mesh", f"train={MESHES / 'square_irregular.vtu'}", "--mesh",
                 f"graded={MESHES / 'square_graded.vtu'}", "--n", "4", "--family", "lognormal",
                 "--out", str(data), "--no-progress"]) == 0
    assert main(["train", str(data), "--mesh", "train", "--width", "8", "--depth", "1", "--epochs", "1",
                 "--out", str(d / "run"), "--no-progress"]) == 0
    payload = torch.load(d / "run" / "last.pt", weights_only=True)
    payload["state_dict"]["model.lift.0.weight"][0, 0] = float("nan")
    (d / "nanrun").mkdir()
    save_checkpoint(d / "nanrun" / "last.pt", payload)  # as a diverged run writes it: with its checksum
    shutil.copytree(d / "run", d / "best_as_last")
    shutil.copy(d / "run" / "best.pt", d / "best_as_last" / "last.pt")
    (d / "garbage.pt").write_bytes(b"not a checkpoint")
    (d / "truncated.pt").write_bytes((d / "run" / "last.pt").read_bytes()[:1000])
    (d / "empty").write_bytes(b"")
    (d / "truncated.h5").write_bytes(data.read_bytes()[:5000])
    (d / "afile").write_text("a file, not a folder")
    (d / "readonly").mkdir()
    _mesh(d / "good.vtu")
    _mesh(d / "old.vtu")  # an existing output that a refused predict must not replace
    _mesh(d / "huge_coordinates.vtu", scale=1e30)
    _mesh(d / "huge_values.vtu", value=1e30)
    _mesh(d / "cube.vtu", name="cube_tetra.vtu")
    (d / "empty.vtu").write_bytes(b"")
    (d / "truncated.vtu").write_bytes((d / "good.vtu").read_bytes()[:600])
    tables = {"wide": '[model]\nwidth = "wide"\n', "float_epochs": "[train]\nepochs = 1.5\n",
              "colour": "[model]\ncolour = 1\n", "channels": "[model]\nin_channels = 3\n",
              "optim": "[optim]\nlr = 0.1\n", "not_toml": "[model\nwidth = 8\n", "h1_int": "[train]\nh1 = 1\n"}
    for name, text in tables.items():
        (d / f"{name}.toml").write_text(text)
    os.chmod(d / "readonly", 0o555)
    yield d
    os.chmod(d / "readonly", 0o755)


TRAIN = ["train", "{d}/d.h5", "--mesh", "train", "--out", "{tmp}/out", "--no-progress", "--epochs", "1",
         "--width", "8", "--depth", "1"]
RESUME = ["train", "{d}/d.h5", "--mesh", "train", "--no-progress", "--epochs", "1", "--width", "8",
          "--depth", "1", "--resume", "--out"]
CONFIG = ["train", "{d}/d.h5", "--mesh", "train", "--out", "{tmp}/out", "--no-progress", "--config"]
EVALUATE = ["evaluate", "{d}/run/last.pt", "{d}/d.h5", "--out", "{tmp}/ev"]
PREDICT = ["predict", "--checkpoint", "{d}/run/last.pt", "--mesh", "{d}/good.vtu", "--field", "a",
           "-o", "{tmp}/p.vtu"]
INT = "must be an integer"

CASES = [
    # train: flags at 0, negative, huge, of the wrong type
    ("batch-size-0", TRAIN + ["--batch-size", "0"], f"--batch-size {INT} >= 1, got 0", ConfigError),
    ("epochs-negative", TRAIN + ["--epochs", "-3"], f"--epochs {INT} >= 1, got -3", ConfigError),
    ("width-0", TRAIN + ["--width", "0"], f"--width {INT} >= 1, got 0", ConfigError),
    ("depth-0", TRAIN + ["--depth", "0"], f"--depth {INT} >= 1, got 0", ConfigError),
    ("heads-0", TRAIN + ["--heads", "0"], f"--num-heads {INT} >= 1, got 0", ConfigError),
    ("width-huge", TRAIN + ["--width", str(2**62)], r"cannot build model 'tno' with \{'width': 46", ConfigError),
    ("width-not-divisible", TRAIN + ["--width", "10", "--heads", "4"], "not divisible",
     ConfigError),
    ("lr-0", TRAIN + ["--lr", "0"], "--lr must be a finite number > 0, got 0.0", ConfigError),
    ("lr-nan", TRAIN + ["--lr", "nan"], "--lr must be a finite number > 0, got nan", ConfigError),
    ("seed-negative", TRAIN + ["--seed", "-1"], f"--seed {INT} >= 0 and < 4294967296, got -1", ConfigError),
    ("seed-huge", TRAIN + ["--seed", str(2**64)], f"--seed {INT} >= 0 and < 4294967296", ConfigError),
    ("val-fraction-negative", TRAIN + ["--val-fraction", "-0.5"],
     "--val-fraction must be a finite number >= 0 and < 1, got -0.5", ConfigError),
    ("val-fraction-1", TRAIN + ["--val-fraction", "1"], "--val-fraction must be .* < 1, got 1.0", ConfigError),
    ("epochs-text", TRAIN + ["--epochs", "abc"], "geoattn train: error: argument --epochs: invalid int value: 'abc'",
     None),
    ("model-nao", TRAIN + ["--model", "nao"], "argument --model: invalid choice: 'nao'", None),
    # train: the TOML configuration
    ("config-width-text", CONFIG + ["{d}/wide.toml"], f"\\[model\\] width {INT} >= 1, got 'wide'",
     ConfigError),
    ("config-epochs-float", CONFIG + ["{d}/float_epochs.toml"], f"\\[train\\] epochs {INT}", ConfigError),
    ("config-h1-int", CONFIG + ["{d}/h1_int.toml"], "\\[train\\] h1 must be true or false", ConfigError),
    ("config-unknown-key", CONFIG + ["{d}/colour.toml"], "model 'tno' has no setting 'colour'",
     ConfigError),
    ("config-data-key", CONFIG + ["{d}/channels.toml"], "in_channels is read from the dataset",
     ConfigError),
    ("config-unknown-table", CONFIG + ["{d}/optim.toml"], "unexpected 'optim'", ConfigError),
    ("config-not-toml", CONFIG + ["{d}/not_toml.toml"], "not_toml.toml is not valid TOML", ConfigError),
    ("config-missing", CONFIG + ["{d}/none.toml"], "config file .*none.toml not found", ConfigError),
    ("config-folder", CONFIG + ["{d}"], "cannot read config file", ConfigError),
    # train: the dataset and the output folder
    ("data-missing", ["train", "{d}/none.h5", "--out", "{tmp}/out"], "dataset file .*none.h5 not found",
     FileNotFoundError),
    ("data-empty", ["train", "{d}/empty", "--out", "{tmp}/out"], "cannot open .*empty as HDF5", DatasetFileError),
    ("data-truncated", ["train", "{d}/truncated.h5", "--out", "{tmp}/out"], "truncated.h5", DatasetFileError),
    ("data-is-a-mesh", ["train", "{d}/good.vtu", "--out", "{tmp}/out"], "cannot open .*good.vtu as HDF5",
     DatasetFileError),
    ("data-no-such-mesh", TRAIN + ["--mesh", "nope"], "has no mesh 'nope'; it holds \\['graded', 'train'\\]",
     ValueError),
    ("out-under-a-file", TRAIN + ["--out", "{d}/afile/run"], "afile is a file, not a folder", OutputError),
    ("out-is-a-file", TRAIN + ["--out", "{d}/afile"], "cannot write into .*afile: it is a file", OutputError),
    ("out-read-only", TRAIN + ["--out", "{d}/readonly/run"], "no permission to write in", OutputError),
    # train --resume: the run in the folder is kept as it was
    ("resume-best-pt", RESUME + ["{d}/best_as_last"], "lacks the entries \\['optimizer', 'scheduler'",
     CheckpointError),
    ("resume-other-width", RESUME + ["{d}/run", "--width", "16"],
     "trained with other settings: width 16 \\(stored: 8\\)", ConfigError),
    ("resume-other-epochs", RESUME + ["{d}/run", "--epochs", "3"], "its run plans 1 optimiser steps, these settings 3",
     ConfigError),
    ("resume-nan-weights", RESUME + ["{d}/nanrun"], "NaN or infinite values in 'model.lift.0.weight'",
     CheckpointError),
    # evaluate
    ("evaluate-skip-negative", EVALUATE + ["--skip", "-2"], f"--skip {INT} >= 0, got -2", ConfigError),
    ("evaluate-first-0", EVALUATE + ["--first", "0"], f"--first {INT} >= 1, got 0", ConfigError),
    ("evaluate-skip-all", EVALUATE + ["--skip", "4"], "--skip 4 leaves no samples: mesh 'graded' .* has 4",
     ConfigError),
    ("evaluate-first-text", EVALUATE + ["--first", "1.5"], "argument --first: invalid int value: '1.5'", None),
    ("evaluate-meshes-empty", EVALUATE + ["--meshes", ","], "--meshes must list names separated by commas", None),  # refused while parsing
    ("evaluate-meshes-unknown", EVALUATE + ["--meshes", "train,nope"], "meshes \\['nope'\\] not found", ConfigError),
    ("evaluate-data-twice", ["evaluate", "{d}/run/last.pt", "{d}/d.h5", "{d}/d.h5"], "mesh 'graded' is in both",
     ConfigError),
    ("evaluate-nan-checkpoint", ["evaluate", "{d}/nanrun/last.pt", "{d}/d.h5", "--out", "{tmp}/ev"],
     "holds NaN or infinite values", CheckpointError),
    ("evaluate-garbage-checkpoint", ["evaluate", "{d}/garbage.pt", "{d}/d.h5"], "garbage.pt is corrupted",
     CheckpointError),
    ("evaluate-truncated-checkpoint", ["evaluate", "{d}/truncated.pt", "{d}/d.h5"], "truncated.pt is corrupted",
     CheckpointError),
    ("evaluate-dataset-as-checkpoint", ["evaluate", "{d}/d.h5", "{d}/d.h5"], "d.h5 is corrupted or not a torch file",
     CheckpointError),
    ("evaluate-missing-checkpoint", ["evaluate", "{d}/none.pt", "{d}/d.h5"], "none.pt does not exist",
     CheckpointError),
    ("evaluate-out-under-a-file", EVALUATE + ["--out", "{d}/afile/ev"], "afile is a file, not a folder", OutputError),
    # predict: inputs that would give a NaN prediction
    ("predict-huge-coordinates", PREDICT + ["--mesh", "{d}/huge_coordinates.vtu"],
     "huge_coordinates.vtu: the quadrature weights .*overflow to infinity in torch.float32.*coordinates are too "
     "large", WeightError),
    ("predict-huge-values", PREDICT + ["--mesh", "{d}/huge_values.vtu"],
     "huge_values.vtu: the model gives NaN or infinite values at 289 of 289 nodes", NonFiniteOutputError),
    ("predict-nan-checkpoint", PREDICT + ["--checkpoint", "{d}/nanrun/last.pt"], "holds NaN or infinite values",
     CheckpointError),
    ("predict-keeps-old-output", PREDICT + ["--mesh", "{d}/huge_values.vtu", "-o", "{d}/old.vtu"],
     "NaN or infinite values", NonFiniteOutputError),
    # predict: the mesh file
    ("predict-mesh-missing", PREDICT + ["--mesh", "{d}/none.vtu"], "no mesh file at", FileNotFoundError),
    ("predict-mesh-empty", PREDICT + ["--mesh", "{d}/empty.vtu"], "empty.vtu \\(the file is empty\\)", MeshFileError),
    ("predict-mesh-truncated", PREDICT + ["--mesh", "{d}/truncated.vtu"], "cannot read mesh file .*truncated.vtu",
     MeshFileError),
    # a folder is predicted file by file: the first file that cannot be is named, and every other
    # unreadable one after it, in one line; nothing is written (cube.vtu comes first)
    ("predict-mesh-folder", PREDICT + ["--mesh", "{d}"], "cube.vtu: TNO was built for 2-D coordinates .*empty.vtu "
     r"\(the file is empty\).*truncated.vtu", InputFilesError),
    ("predict-mesh-dataset", PREDICT + ["--mesh", "{d}/d.h5"], "meshio knows no format for the extension '.h5'",
     MeshFileError),
    ("predict-mesh-3d", PREDICT + ["--mesh", "{d}/cube.vtu"], "built for 2-D coordinates", DimensionError),
    ("predict-field-missing", PREDICT + ["--field", "b"], "point field 'b' not found; the mesh has \\['a'\\]",
     FieldLengthError),
    # predict: the output file
    ("predict-out-folder-missing", PREDICT + ["-o", "{tmp}/none/p.vtu"], "none does not exist; create it first",
     OutputError),
    ("predict-out-under-a-file", PREDICT + ["-o", "{d}/afile/p.vtu"], "afile is a file, not a folder", OutputError),
    ("predict-out-extension", PREDICT + ["-o", "{tmp}/p.xyz"], "cannot write .*p.xyz: Could not deduce file format "
     "from path '.*/p.xyz'", OutputError),
    ("predict-out-read-only", PREDICT + ["-o", "{d}/readonly/p.vtu"], "no permission to write in", OutputError),
    ("predict-name-taken", PREDICT + ["--name", "a"], "already has a point field 'a'; choose another --name",
     ConfigError),
    ("predict-name-empty", PREDICT + ["--name", " "], "--name must list names separated by commas", None),  # refused while parsing
    ("predict-no-output", PREDICT[:-2], "the following arguments are required: -o/--output", None),
    # info
    ("info-missing", ["info", "{d}/none.vtu"], "no mesh file at", FileNotFoundError),
    ("info-empty", ["info", "{d}/empty.vtu"], "the file is empty", MeshFileError),
    ("info-truncated", ["info", "{d}/truncated.vtu"], "cannot read mesh file", MeshFileError),
    ("info-dataset", ["info", "{d}/d.h5"], "meshio knows no format", MeshFileError),
    ("info-rule", ["info", "{d}/good.vtu", "--rule", "simpson"], "argument --rule: invalid choice: 'simpson'", None),
    # demo (refused before any data is generated)
    ("demo-epochs-0", ["demo", "--epochs", "0", "--out", "{tmp}/demo"], f"--epochs {INT} >= 1, got 0", ConfigError),
    ("demo-seed-negative", ["demo", "--seed", "-1", "--out", "{tmp}/demo"], f"--seed {INT} >= 0", ConfigError),
    ("demo-out-under-a-file", ["demo", "--out", "{d}/afile/demo"], "afile is a file, not a folder", OutputError),
]


def _overridden(args: list[str]) -> list[str]:
    """A case's flag given again after the base command's (``EVALUATE + ["--out", ...]``) takes
    the base's place: the commands refuse a single-value flag given twice."""
    out, where = [], {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and a in where and i + 1 < len(args):
            out[where[a] + 1] = args[i + 1]
            i += 2
            continue
        if a.startswith("-") and not a.lstrip("-").replace(".", "").isdigit():
            where[a] = len(out)
        out.append(a)
        i += 1
    return out


@pytest.mark.parametrize("args, match, error", [
    pytest.param(*values, id=name, marks=as_user if "read-only" in name else ()) for name, *values in CASES])
def test_refused_and_nothing_written_or_lost(files, tmp_path, capsys, args, match, error):
    before = snapshot(files)
    refused(_overridden([a.format(d=files, tmp=tmp_path) for a in args]), capsys, match, error)
    assert snapshot(files) == before
    assert not list(tmp_path.iterdir())


def test_a_failed_write_leaves_no_file_and_the_old_one_intact(files, tmp_path, monkeypatch, capsys):
    """The disk fills up half-way through writing the prediction: the error is one line, the
    old output is intact and no temporary file is left behind."""
    out = tmp_path / "p.vtu"
    out.write_bytes(b"the previous prediction")

    def half_written(path, mesh):
        Path(path).write_bytes(b"<VTKFile half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(geoattn.mesh, "save_meshio", half_written)  # predict imports it when it runs
    args = [a.format(d=files, tmp=tmp_path) for a in PREDICT]
    refused(args, capsys, "cannot write .*p.vtu: No space left on device", OutputError)
    assert [p.name for p in tmp_path.iterdir()] == ["p.vtu"] and out.read_bytes() == b"the previous prediction"


def test_prediction_is_written_whole(files, tmp_path, capsys):
    """The good path still works, with companion files (XDMF + HDF5) moved beside the output."""
    out = tmp_path / "p.xdmf"
    assert main([a.format(d=files, tmp=tmp_path) for a in PREDICT[:-1]] + [str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.h5", "p.xdmf"]
    assert np.isfinite(meshio.read(out).point_data["prediction"]).all()


def test_half_precision_inputs_name_the_dtypes():
    model = build_model("tno", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2)
    x, pos, w = torch.rand(5, 1), torch.rand(5, 2), torch.full((5,), 0.2)
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(DTypeError, match=f"float32 parameters but got x of dtype {dtype}"):
            model(x.to(dtype), pos, w)
    with pytest.raises(DTypeError, match="weight is torch.float32 but pos is torch.float64"):
        model(x, pos.double(), w)  # a mesh of two dtypes is refused when it is made
    assert model.double()(x.double(), pos.double(), w.double()).dtype == torch.float64



@pytest.mark.parametrize("fail", ["csv", "plot"])
def test_a_full_disk_during_evaluate_is_one_line_and_leaves_nothing_partial(files, tmp_path, monkeypatch, capsys,
                                                                               fail):
    """The disk fills while ``evaluate --out`` writes its table or its figure: one line, exit
    code 2, no half-written file under its final name and no temporary folder left."""
    from geoattn.eval import crossmesh

    def half_written(*args):
        Path(args[-1]).write_bytes(b"model,mesh,err")  # a partial table or figure, then ENOSPC
        raise OSError(28, "No space left on device")

    if fail == "csv":
        monkeypatch.setattr(crossmesh.CrossMeshReport, "write_csv", half_written)
    else:
        monkeypatch.setattr("geoattn.eval.plot_errors", half_written)
    args = [a.format(d=files, tmp=tmp_path) for a in EVALUATE]
    name = "crossmesh.csv" if fail == "csv" else "errors.png"
    refused(args, capsys, f"cannot write \\S*{name}: No space left on device", OutputError)
    left = sorted(p.name for p in (tmp_path / "ev").iterdir()) if (tmp_path / "ev").exists() else []
    assert name not in left and not [n for n in left if n.endswith(".tmp")], left
