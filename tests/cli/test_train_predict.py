"""`geoattn train / evaluate / predict` end to end on a tiny dataset file, via main([...])."""

import csv

import meshio
import numpy as np
import pytest
import torch

from geoattn.cli.main import main
from geoattn.mesh import read_mesh, save_meshio
from geoattn.train import load_operator


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    data = tmp / "d.h5"
    assert main(["generate", "--mesh", "train=meshes/square_irregular.vtu",
                 "--mesh", "graded=meshes/square_graded.vtu", "--n", "6", "--family", "lognormal",
                 "--out", str(data), "--no-progress"]) == 0
    config = tmp / "c.toml"
    config.write_text('[model]\nname = "tno"\nwidth = 8\ndepth = 1\n[train]\nepochs = 2\nbatch_size = 2\n')
    assert main(["train", str(data), "--mesh", "train", "--config", str(config), "--out", str(tmp / "out"),
                 "--lr", "0.01", "--no-progress"]) == 0
    return tmp, data


def test_train_writes_checkpoint_with_config_and_flags(trained):
    tmp, _ = trained
    op = load_operator(tmp / "out" / "last.pt")
    assert op.model.hparams["width"] == 8 and op.model.hparams["depth"] == 1
    assert (tmp / "out" / "metrics.csv").read_text().count("\n") == 3  # header + 2 epochs


def test_evaluate_prints_table(trained, capsys):
    tmp, data = trained
    assert main(["evaluate", str(tmp / "out" / "best.pt"), str(data), "--out", str(tmp / "ev")]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "graded" in out
    assert (tmp / "ev" / "crossmesh.csv").exists()


@pytest.mark.parametrize("suffix", [".vtu", ".msh"])
def test_predict_round_trips_mesh_files(trained, suffix):
    tmp, _ = trained
    mesh = meshio.read("meshes/square_graded.vtu")
    mesh.point_data = {"a": np.exp(np.sin(3 * mesh.points[:, 0]) * mesh.points[:, 1])}
    src, dst = tmp / f"in{suffix}", tmp / f"out{suffix}"
    save_meshio(src, mesh)
    assert main(["predict", "--checkpoint", str(tmp / "out" / "last.pt"), "--mesh", str(src),
                 "--field", "a", "-o", str(dst)]) == 0
    op = load_operator(tmp / "out" / "last.pt")
    data = read_mesh(src, x="a")
    with torch.no_grad():
        expected = op(data.x, data.pos, data.weight)
    back = read_mesh(dst, x="prediction")
    assert torch.allclose(back.pos, data.pos)
    assert torch.allclose(back.x, expected, rtol=1e-5, atol=1e-6)


def test_mismatched_inputs_give_one_line_errors(trained, tmp_path, capsys):
    tmp, _ = trained
    ckpt = str(tmp / "out" / "last.pt")
    cube = meshio.read("meshes/cube_tetra.vtu")
    cube.point_data = {"a": np.ones(len(cube.points)), "v": np.ones((len(cube.points), 2))}
    meshio.write(tmp_path / "cube.vtu", cube)
    assert main(["predict", "--checkpoint", ckpt, "--mesh", str(tmp_path / "cube.vtu"), "--field", "a",
                 "-o", str(tmp_path / "o.vtu")]) == 2
    assert "built for 2-D coordinates" in capsys.readouterr().err
    square = meshio.read("meshes/square_irregular.vtu")
    square.point_data = {"v": np.ones((len(square.points), 2))}
    meshio.write(tmp_path / "sq.vtu", square)
    assert main(["predict", "--checkpoint", ckpt, "--mesh", str(tmp_path / "sq.vtu"), "--field", "v",
                 "-o", str(tmp_path / "o.vtu")]) == 2
    assert "expects 1 input channel" in capsys.readouterr().err
    (tmp_path / "bad.pt").write_bytes(b"garbage")
    assert main(["predict", "--checkpoint", str(tmp_path / "bad.pt"), "--mesh", str(tmp_path / "sq.vtu"),
                 "--field", "v", "-o", str(tmp_path / "o.vtu")]) == 2
    assert "corrupted" in capsys.readouterr().err


def test_train_offers_field_to_field_models_only(capsys):
    """NAO learns in context from pairs: ``geoattn train`` does not offer it (exit code 2)."""
    assert main(["train", "d.h5", "--model", "nao"]) == 2
    assert "invalid choice: 'nao'" in capsys.readouterr().err


@pytest.mark.slow
def test_train_with_the_same_seed_gives_the_same_weights(tmp_path):
    """The seed sets the initial weights too (the model is built after seeding), so two runs with
    one seed agree exactly and another seed gives other weights."""
    data = tmp_path / "d.h5"
    assert main(["generate", "--mesh", "train=meshes/square_irregular.vtu", "--n", "4", "--family", "lognormal",
                 "--out", str(data), "--no-progress"]) == 0

    def weights(seed: str, run: str) -> dict:
        torch.manual_seed(int(run[-1]))  # whatever the global generator held before
        assert main(["train", str(data), "--width", "8", "--depth", "1", "--epochs", "2", "--batch-size", "2",
                     "--seed", seed, "--out", str(tmp_path / run), "--no-progress"]) == 0
        return load_operator(tmp_path / run / "last.pt").state_dict()

    first, again, other = weights("3", "run1"), weights("3", "run2"), weights("4", "run3")
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_train_num_heads_flag_and_its_former_name():
    import argparse

    from geoattn.cli import train

    parser = argparse.ArgumentParser()
    train.add_args(parser)
    for flag in ("--num-heads", "--heads"):
        name, model_kw, _ = train.settings(parser.parse_args(["d.h5", "--model", "tno", flag, "2"]))
        assert name == "tno" and model_kw == {"num_heads": 2}


@pytest.mark.slow
def test_patched_model_evaluates_other_meshes_with_its_training_partition(tmp_path, capsys):
    """`geoattn train --model fano` fits the partition on the training mesh and saves it in the
    checkpoint; `geoattn evaluate` on refined, graded and foreign meshes uses it: its table equals
    scoring the loaded operator directly, and differs from cutting every mesh on its own."""
    from geoattn.data.dataset import DarcyDataset
    from geoattn.mesh.partition import partition
    from geoattn.train.trainer import evaluate_errors

    data = tmp_path / "d.h5"
    meshes = {"train": "square_irregular", "refined": "square_irregular_refined",
              "graded": "square_graded", "foreign": "square_structured"}
    assert main(["generate", *[a for k, v in meshes.items() for a in ("--mesh", f"{k}=meshes/{v}.vtu")],
                 "--n", "4", "--family", "lognormal", "--out", str(data), "--no-progress"]) == 0
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "fano"\nwidth = 8\ndepth = 1\nnum_patches = 4\nmodes = 1\n')
    assert main(["train", str(data), "--mesh", "train", "--config", str(config), "--epochs", "1",
                 "--batch-size", "2", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    op = load_operator(tmp_path / "out" / "last.pt")
    train = DarcyDataset(data, mesh="train")[0]
    fitted = partition(train.pos, train.weight, 4, method=op.model.partition_method,
                       cells=train.cells if torch.is_tensor(getattr(train, "cells", None)) else None)
    graded = DarcyDataset(data, mesh="graded")
    assert torch.equal(op.model.partition.transfer(graded[0].pos), fitted.transfer(graded[0].pos))
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "out" / "last.pt"), str(data), "--out", str(tmp_path / "ev")]) == 0
    with open(tmp_path / "ev" / "crossmesh.csv") as fh:
        table = {row["mesh"]: float(row["mean"]) for row in csv.DictReader(fh)}
    direct = {name: float(evaluate_errors(op, DarcyDataset(data, mesh=name)).mean()) for name in meshes}
    assert set(table) == set(direct)
    for name, error in direct.items():
        assert table[name] == pytest.approx(error, rel=1e-5), name
    op.model.set_partition(None)
    on_the_fly = float(evaluate_errors(op, graded).mean())
    assert abs(on_the_fly - direct["graded"]) > 1e-6 * direct["graded"]


def test_device_and_precision_flags(trained, tmp_path, capsys):
    """Bad devices and precisions are one-line errors before any training; bf16 on the CPU trains
    and its checkpoint records the settings; evaluate and predict take --device."""
    from geoattn.train import load_checkpoint

    tmp, data = trained
    train = ["train", str(data), "--mesh", "train", "--width", "8", "--depth", "1", "--epochs", "1",
             "--batch-size", "2", "--no-progress", "--out"]
    bad = [(["--device", "gpu"], "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'"),
           (["--device", "cpu", "--precision", "fp16"], "'fp16' needs a CUDA device"),
           (["--precision", "half"], "invalid choice: 'half'")]
    if not torch.cuda.is_available():
        bad.append((["--device", "cuda"], "asks for CUDA, but this PyTorch sees no CUDA device"))
    for flags, message in bad:
        assert main(train + [str(tmp_path / "bad")] + flags) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "bad" / "last.pt").exists()
    assert main(train + [str(tmp_path / "bf16"), "--device", "cpu", "--precision", "bf16"]) == 0
    settings = load_checkpoint(tmp_path / "bf16" / "last.pt")["trainer"]
    assert settings["precision"] == "bf16" and settings["device"] == "cpu"
    ckpt = str(tmp_path / "bf16" / "last.pt")
    assert main(["evaluate", ckpt, str(data), "--device", "cpu"]) == 0
    assert main(["evaluate", ckpt, str(data), "--device", "tpu"]) == 2
    assert "device must be" in capsys.readouterr().err
    mesh = meshio.read("meshes/square_graded.vtu")
    mesh.point_data = {"a": np.ones(len(mesh.points))}
    save_meshio(tmp_path / "in.vtu", mesh)
    predict = ["predict", "--checkpoint", ckpt, "--mesh", str(tmp_path / "in.vtu"), "--field", "a",
               "-o", str(tmp_path / "out.vtu"), "--device"]
    assert main(predict + ["cpu"]) == 0 and (tmp_path / "out.vtu").exists()
    assert main(predict + ["cuda:x"]) == 2


def test_train_tensorboard_flag(trained, tmp_path, monkeypatch, capsys):
    import sys

    tmp, data = trained
    train = ["train", str(data), "--mesh", "train", "--width", "8", "--depth", "1", "--epochs", "1",
             "--batch-size", "2", "--no-progress", "--tensorboard", "--out"]
    if _installed("tensorboard"):
        assert main(train + [str(tmp_path / "tb")]) == 0
        assert list((tmp_path / "tb" / "tensorboard").glob("events.out.tfevents.*"))
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert main(train + [str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'geoattn[tensorboard]'" in err
    assert not (tmp_path / "none" / "last.pt").exists()


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_train_refuses_to_replace_a_run_by_accident(trained, tmp_path, capsys):
    """An OUT that holds a run is refused (nothing written) unless --resume or --overwrite."""
    tmp, data = trained
    train = ["train", str(data), "--mesh", "train", "--width", "8", "--depth", "1", "--epochs", "1",
             "--batch-size", "2", "--no-progress", "--out", str(tmp_path / "run")]
    assert main(train) == 0
    last = tmp_path / "run" / "last.pt"
    before = last.read_bytes()
    assert main(train) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a run" in err and "--overwrite" in err
    assert main(train + ["--resume", "--overwrite"]) == 2
    assert "not both" in capsys.readouterr().err
    assert last.read_bytes() == before
    assert main(train + ["--overwrite", "--seed", "5"]) == 0
    assert last.read_bytes() != before


def assert_evaluate_scores_the_operator(op, checkpoint, data, folder):
    """`geoattn evaluate CHECKPOINT DATA` writes, per mesh, the mean error of the reloaded
    operator ``op`` on that mesh's samples (float32 sums in another order: 1e-5 relative)."""
    from geoattn.data.dataset import DarcyDataset
    from geoattn.train.trainer import evaluate_errors

    assert main(["evaluate", str(checkpoint), str(data), "--out", str(folder)]) == 0
    with open(folder / "crossmesh.csv") as fh:
        table = {row["mesh"]: float(row["mean"]) for row in csv.DictReader(fh)}
    for name in ("train", "graded"):
        assert table[name] == pytest.approx(float(evaluate_errors(op, DarcyDataset(data, mesh=name)).mean()),
                                            rel=1e-5)


def test_supersampled_training_round_trips_through_evaluate_and_predict(trained, tmp_path, capsys):
    """`geoattn train --supersample 2` trains through ResolvedQuadrature (the model sees the
    training mesh refined to half its longest edge), stores the edge, and `evaluate` / `predict`
    refine their meshes to it: their numbers equal the trained operator's on the same meshes."""
    from geoattn.mesh import Mesh
    from geoattn.train import ResolvedQuadrature, training_size

    tmp, data = trained
    out = tmp_path / "super"
    run = ["train", str(data), "--mesh", "train", "--model", "mesh_fno", "--width", "8", "--depth", "1",
           "--epochs", "1", "--batch-size", "2", "--no-progress", "--out", str(out)]
    assert main(run + ["--supersample", "2"]) == 0
    op = load_operator(out / "last.pt")
    assert isinstance(op.model, ResolvedQuadrature)
    assert op.model.size == pytest.approx(training_size(meshio.read("meshes/square_irregular.vtu")) / 2)
    capsys.readouterr()
    assert_evaluate_scores_the_operator(op, out / "last.pt", data, tmp_path / "ev")
    mesh = meshio.read("meshes/square_graded.vtu")
    mesh.point_data = {"a": np.exp(mesh.points[:, 0] * mesh.points[:, 1])}
    save_meshio(tmp_path / "in.vtu", mesh)
    assert main(["predict", "--checkpoint", str(out / "last.pt"), "--mesh", str(tmp_path / "in.vtu"),
                 "--field", "a", "-o", str(tmp_path / "pred.vtu")]) == 0
    d = read_mesh(tmp_path / "in.vtu", x="a")
    with torch.no_grad():
        expected = op(d.x, Mesh.from_sample(d))  # the Mesh with its cells, to refine
    assert torch.allclose(read_mesh(tmp_path / "pred.vtu", x="prediction").x, expected, rtol=1e-5, atol=1e-6)

    # resuming keeps the stored edge; another factor is refused, as are bad values
    capsys.readouterr()
    assert main(run + ["--resume", "--epochs", "1", "--supersample", "3"]) == 2
    assert "another --supersample" in capsys.readouterr().err
    assert main(run + ["--resume", "--supersample", "1"]) == 2
    assert main(run + ["--overwrite", "--supersample", "0.5"]) == 2
    assert "--supersample must be a finite number >= 1" in capsys.readouterr().err
    assert main(run + ["--overwrite", "--supersample", "2", "--unweighted"]) == 2
    assert "--unweighted cannot be combined" in capsys.readouterr().err


@pytest.mark.slow
def test_train_on_the_symmetries_of_the_training_mesh(trained, tmp_path, capsys):
    """`--symmetries 4` trains on the eight images of each training sample about the mesh's
    centroid (the square's: (0.5, 0.5)), 8x the optimiser steps per epoch, with --supersample too;
    a group the mesh does not have is refused in one line, before training."""
    from geoattn.mesh import dihedral
    from geoattn.cli.train import _symmetries
    from geoattn.data.dataset import DarcyDataset

    tmp, data = trained
    run = ["train", str(data), "--mesh", "train", "--model", "mesh_fno", "--width", "8", "--depth", "1",
           "--epochs", "1", "--batch-size", "2", "--no-progress", "--val-fraction", "0"]
    capsys.readouterr()
    assert main(run + ["--out", str(tmp_path / "sym"), "--symmetries", "4"]) == 0
    assert "on 48 samples (6 samples x 8 symmetries)" in capsys.readouterr().out
    from geoattn.train import load_checkpoint

    assert load_checkpoint(tmp_path / "sym" / "last.pt")["scheduler"]["total_steps"] == 48 // 2
    first = DarcyDataset(data, mesh="train")[0]

    class Args:
        symmetries, symmetry_angle = 4, 0.0

    group = _symmetries(Args, first)
    assert [g.center.tolist() for g in group] == [pytest.approx([0.5, 0.5], abs=1e-6)] * 8
    assert all(np.allclose(g.matrix, h.matrix) for g, h in zip(group, dihedral(4)))
    assert main(run + ["--out", str(tmp_path / "sym2"), "--symmetries", "4", "--supersample", "2"]) == 0
    capsys.readouterr()
    assert main(run + ["--out", str(tmp_path / "bad"), "--symmetries", "3"]) == 2  # not the square's
    err = capsys.readouterr().err
    assert "rotation by 120 degrees" in err and "does not map" in err
    assert not (tmp_path / "bad" / "last.pt").exists()
    assert main(run + ["--out", str(tmp_path / "bad"), "--symmetries", "0"]) == 2
    assert "--symmetries must be" in capsys.readouterr().err
    assert main(run + ["--out", str(tmp_path / "bad"), "--symmetry-angle", "45"]) == 2
    assert "--symmetry-angle without --symmetries" in capsys.readouterr().err


def test_a_folder_of_members_evaluates_and_predicts_as_their_mean(trained, tmp_path, capsys):
    """Members trained with `--seed K --out FOLDER/memberK` (supersampled, so every member refines
    each mesh it is given) are scored and predicted from FOLDER as their mean; a folder with no
    members is refused in one line."""
    from geoattn.data import DarcyDataset
    from geoattn.mesh import Mesh
    from geoattn.train import Ensemble, evaluate_errors, load_trained

    _, data = trained
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "mesh_fno"\nwidth = 8\ndepth = 1\nmodes = 2\n')
    for k in range(2):
        assert main(["train", str(data), "--mesh", "train", "--config", str(config), "--epochs", "1",
                     "--batch-size", "2", "--seed", str(k), "--supersample", "2",
                     "--out", str(tmp_path / "ens" / f"member{k}"), "--no-progress"]) == 0
    ens = load_trained(tmp_path / "ens")
    assert isinstance(ens, Ensemble) and len(ens) == 2
    members = [load_operator(tmp_path / "ens" / f"member{k}" / "best.pt") for k in range(2)]
    assert not torch.equal(members[0].model.op.lift[0].weight, members[1].model.op.lift[0].weight)

    assert main(["evaluate", str(tmp_path / "ens"), str(data), "--out", str(tmp_path / "ev")]) == 0
    with open(tmp_path / "ev" / "crossmesh.csv") as fh:
        scored = {r["mesh"]: float(r["mean"]) for r in csv.DictReader(fh)}
    ds = DarcyDataset(data, mesh="graded")
    graded = [ds[i] for i in range(len(ds))]
    ours = Ensemble(members)
    assert scored["graded"] == pytest.approx(float(evaluate_errors(ours, graded).mean()), rel=1e-4)

    mesh = meshio.read("meshes/square_graded.vtu")
    mesh.point_data = {"a": np.exp(np.sin(3 * mesh.points[:, 0]) * mesh.points[:, 1])}
    save_meshio(tmp_path / "in.vtu", mesh)
    assert main(["predict", "--checkpoint", str(tmp_path / "ens"), "--mesh", str(tmp_path / "in.vtu"),
                 "--field", "a", "-o", str(tmp_path / "out.vtu")]) == 0
    sample = read_mesh(tmp_path / "in.vtu", x="a")
    with torch.no_grad():
        expected = ours(sample.x, Mesh.from_sample(sample))  # the Mesh with its cells, to refine
    torch.testing.assert_close(read_mesh(tmp_path / "out.vtu", x="prediction").x, expected, rtol=1e-5, atol=1e-6)

    (tmp_path / "empty").mkdir()
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "empty"), str(data)]) == 2
    assert "no member<k>/best.pt" in capsys.readouterr().err


def test_train_ensemble_writes_members_that_equal_single_runs_with_their_seeds(trained, tmp_path, capsys):
    """`--ensemble 2 --seed 3` trains member k exactly as `--seed 3+k` would (same weights, bit for
    bit) into OUT/member<k>, which evaluate reads as the members' mean; a second run into the same
    OUT is refused before any training, --resume completes a run cut off between members, and bad
    counts are refused."""
    from geoattn.train import Ensemble, load_trained

    _, data = trained
    base = ["train", str(data), "--mesh", "train", "--width", "8", "--depth", "1", "--epochs", "1",
            "--batch-size", "2", "--no-progress"]
    assert main(base + ["--ensemble", "2", "--seed", "3", "--out", str(tmp_path / "ens")]) == 0
    assert "an ensemble of 2 members (seeds 3..4)" in capsys.readouterr().out
    for k in range(2):
        assert main(base + ["--seed", str(3 + k), "--out", str(tmp_path / f"single{k}")]) == 0
        member = load_operator(tmp_path / "ens" / f"member{k}" / "last.pt").state_dict()
        single = load_operator(tmp_path / f"single{k}" / "last.pt").state_dict()
        assert all(torch.equal(member[key], single[key]) for key in single)
    assert not (tmp_path / "ens" / "last.pt").exists()
    ens = load_trained(tmp_path / "ens")
    assert isinstance(ens, Ensemble) and len(ens) == 2

    before = (tmp_path / "ens" / "member1" / "last.pt").read_bytes()
    capsys.readouterr()
    assert main(base + ["--ensemble", "2", "--seed", "3", "--out", str(tmp_path / "ens")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a run" in err and "member0, member1" in err
    assert (tmp_path / "ens" / "member1" / "last.pt").read_bytes() == before
    import shutil

    shutil.rmtree(tmp_path / "ens" / "member1")  # a run cut off before its second member
    first = load_operator(tmp_path / "ens" / "member0" / "last.pt").state_dict()
    assert main(base + ["--ensemble", "2", "--seed", "3", "--resume", "--out", str(tmp_path / "ens")]) == 0
    again = load_operator(tmp_path / "ens" / "member0" / "last.pt").state_dict()
    assert all(torch.equal(first[key], again[key]) for key in first)  # done: kept
    member = load_operator(tmp_path / "ens" / "member1" / "last.pt").state_dict()
    single = load_operator(tmp_path / "single1" / "last.pt").state_dict()
    assert all(torch.equal(member[key], single[key]) for key in single)  # started, as with its seed

    for bad, words in ((["--ensemble", "0"], "--ensemble must be an integer >= 1"),
                       (["--ensemble", "3", "--seed", str(2**32 - 2)], "needs seeds up to")):
        capsys.readouterr()
        assert main(base + bad + ["--out", str(tmp_path / "bad")]) == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "bad" / "member0").exists()


def test_a_model_that_needs_its_meshes_trains_evaluates_and_predicts(trained, tmp_path, capsys):
    """`mesh_fno` with `quadrature = "p1"` (config) trains, `evaluate`s the dataset's meshes and
    `predict`s the mesh file (every operator gets a Mesh with its cells); each equals scoring the
    loaded model by hand."""
    from geoattn.data.dataset import DarcyDataset
    from geoattn.mesh import Mesh
    from geoattn.train.trainer import evaluate_errors

    _, data = trained
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "mesh_fno"\nwidth = 8\ndepth = 1\nmodes = 2\nquadrature = "p1"\n')
    assert main(["train", str(data), "--mesh", "train", "--config", str(config), "--epochs", "1",
                 "--batch-size", "2", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "out" / "last.pt"), str(data), "--out", str(tmp_path / "ev")]) == 0
    with open(tmp_path / "ev" / "crossmesh.csv") as fh:
        table = {row["mesh"]: float(row["mean"]) for row in csv.DictReader(fh)}
    op = load_operator(tmp_path / "out" / "last.pt")
    assert op.model.quadrature == "p1"
    graded = DarcyDataset(data, mesh="graded")
    assert table["graded"] == pytest.approx(float(evaluate_errors(op, graded).mean()), rel=1e-5)
    mesh = meshio.read("meshes/square_graded.vtu")
    mesh.point_data = {"a": np.exp(np.sin(3 * mesh.points[:, 0]) * mesh.points[:, 1])}
    save_meshio(tmp_path / "in.vtu", mesh)
    assert main(["predict", "--checkpoint", str(tmp_path / "out" / "last.pt"), "--mesh", str(tmp_path / "in.vtu"),
                 "--field", "a", "-o", str(tmp_path / "out.vtu")]) == 0
    sample = read_mesh(tmp_path / "in.vtu", x="a")
    with torch.no_grad():
        expected = op(sample.x, Mesh.from_sample(sample))
    assert torch.allclose(read_mesh(tmp_path / "out.vtu", x="prediction").x, expected, rtol=1e-5, atol=1e-6)


def test_latent_mesh_training_round_trips_through_evaluate_and_resume(trained, tmp_path, capsys):
    """`geoattn train --latent-mesh` stores the training mesh as the model's latent mesh:
    `evaluate` scores every mesh through it, equal to the reloaded operator's own numbers (the
    graded mesh's input interpolated to the training mesh, the output back); resuming keeps it,
    and it is refused with --unweighted and when resuming a run trained without it."""
    from geoattn.data.dataset import DarcyDataset
    from geoattn.operators import LatentMeshOperator

    tmp, data = trained
    out = tmp_path / "latent"
    run = ["train", str(data), "--mesh", "train", "--model", "tno", "--width", "8", "--depth", "1",
           "--epochs", "1", "--batch-size", "2", "--no-progress", "--out", str(out)]
    assert main(run + ["--latent-mesh"]) == 0
    op = load_operator(out / "last.pt")
    train = DarcyDataset(data, mesh="train")
    assert isinstance(op.model, LatentMeshOperator)
    torch.testing.assert_close(op.model.latent_pos, train[0].pos)
    capsys.readouterr()
    assert_evaluate_scores_the_operator(op, out / "last.pt", data, tmp_path / "ev")
    assert main(run + ["--resume"]) == 0  # the stored latent mesh is kept
    assert isinstance(load_operator(out / "last.pt").model, LatentMeshOperator)
    capsys.readouterr()
    assert main(run + ["--overwrite", "--latent-mesh", "--unweighted"]) == 2
    assert "--unweighted cannot be combined with --latent-mesh" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain_run = run[:-1] + [str(plain)]
    assert main(plain_run) == 0
    capsys.readouterr()
    assert main(plain_run + ["--resume", "--latent-mesh"]) == 2
    assert "trained without --latent-mesh" in capsys.readouterr().err
