"""`geoattn import`, then `train`, `evaluate` and `predict` on the imported dataset, via main([...])."""

import csv
import json
import shutil

import h5py
import meshio
import numpy as np
import pytest
import torch

from geoattn.cli.main import main
from geoattn.data import MeshDataset
from geoattn.data.meshdataset import reader_options
from geoattn.mesh import read_mesh
from geoattn.errors import ConfigError
from geoattn.train import load_operator, save_checkpoint
from simulation_files import plate_with_hole, simulation


def _family(folder, prefix, sizes, start=0):
    """Files ``<prefix>_<k>.vtu``, each a plate with a hole of its own mesh, and their loads."""
    loads = {}
    for k, n in enumerate(sizes):
        load = 1.0 + 0.5 * (start + k)
        name = f"{prefix}_{k}.vtu"
        meshio.write(folder / name, simulation(plate_with_hole(n, seed=start + k), load))
        loads[name] = load
    return loads


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    loads = {**_family(folder, "coarse", [6, 6, 7, 7, 6, 7, 6, 7]), **_family(folder, "fine", [10, 11], start=8)}
    with open(folder / "params.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["file", "load"])
        writer.writerows(loads.items())
    return folder, loads


@pytest.fixture(scope="module")
def imported(runs, tmp_path_factory):
    folder, _ = runs
    out = tmp_path_factory.mktemp("data") / "plate.h5"
    assert main(["import", str(folder), "--x", "kappa", "--y", "T", "--params", "load", "--test",
                 f"fine={folder}/fine_*", "--split", "0.75,0.25", "--out", str(out), "--no-progress"]) == 0
    return out


def test_import_names_fields_parameters_and_test_sets(imported, runs):
    _, loads = runs
    ds = MeshDataset(imported)
    assert ds.splits == {"train": 6, "val": 2, "fine": 2}
    assert (ds.x_names, ds.y_names, ds.param_names) == (["kappa"], ["T"], ["load"])
    for i, name in enumerate(ds.names):
        assert ds[i].params.item() == loads[name.rsplit("/", 1)[-1]]
    fine = MeshDataset(imported, "fine")
    assert all(fine.names[int(i)].rsplit("/", 1)[-1].startswith("fine_") for i in fine._index)


def test_train_evaluate_and_predict_on_an_imported_dataset(imported, runs, tmp_path, capsys):
    folder, loads = runs
    run = tmp_path / "run"
    assert main(["train", str(imported), "--out", str(run), "--epochs", "1", "--width", "8", "--depth", "1",
                 "--batch-size", "2", "--no-progress"]) == 0
    assert "split 'train'" in capsys.readouterr().out
    op = load_operator(run / "last.pt")
    assert op.model.hparams["in_channels"] == 2 and op.model.hparams["out_channels"] == 1  # kappa + load
    assert op.fields == {"x": ["kappa"], "y": ["T"], "params": ["load"]} and not (run / "fields.json").exists()
    assert (op.x_names, op.y_names, op.param_names) == (["kappa"], ["T"], ["load"]) and op.settings["epochs"] == 1

    assert main(["evaluate", str(run / "last.pt"), str(imported), "--out", str(tmp_path / "ev")]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.split("\n\n")[0].splitlines()[2:]]
    assert rows == ["fine"] and "files, worst first" in out and (tmp_path / "ev" / "errors.png").is_file()
    rows = list(csv.DictReader(open(tmp_path / "ev" / "sets.csv")))
    assert [r["set"] for r in rows] == ["fine"] and rows[0]["samples"] == "2"
    assert main(["evaluate", str(run / "last.pt"), str(imported), "--sets", "val,fine"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.split("\n\n")[0].splitlines()[2:]] == ["val", "fine"]

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(run / "best.pt", alone / "best.pt")  # the checkpoint needs nothing beside it
    src, dst = folder / "fine_1.vtu", tmp_path / "pred.vtu"
    assert main(["predict", "--checkpoint", str(alone / "best.pt"), "--mesh", str(src), "-o", str(dst)]) == 0
    op = load_operator(alone / "best.pt")
    out = meshio.read(dst)
    np.testing.assert_array_equal(out.point_data["T"], meshio.read(src).point_data["T"])  # the reference kept
    written = out.point_data["T_pred"]
    assert written.shape == (len(meshio.read(src).points),)  # one channel: [N], not [N, 1]
    data = read_mesh(src, x="kappa")
    x = torch.cat([data.x, torch.full_like(data.x, loads["fine_1.vtu"])], dim=1)
    with torch.no_grad():
        expected = op(x, data.pos, data.weight)[:, 0]
    np.testing.assert_allclose(written, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert main(["predict", "--checkpoint", str(run / "last.pt"), "--mesh", str(src), "--param", "load=3",
                 "-o", str(tmp_path / "other.vtu")]) == 0
    assert not np.allclose(meshio.read(tmp_path / "other.vtu").point_data["T_pred"], written)


def test_a_checkpoint_with_its_names_in_fields_json_beside_it_still_predicts(imported, runs, tmp_path):
    folder, _ = runs
    run = tmp_path / "run"
    assert main(["train", str(imported), "--out", str(run), "--epochs", "1", "--width", "8", "--depth", "1",
                 "--batch-size", "2", "--no-progress"]) == 0
    old = tmp_path / "old"
    old.mkdir()
    payload = torch.load(run / "best.pt", weights_only=True)
    del payload["fields"]  # as written before checkpoints held the names
    save_checkpoint(old / "best.pt", payload)
    with pytest.raises(ConfigError, match="--field"):
        run_predict(old / "best.pt", folder / "fine_1.vtu", tmp_path / "a.vtu")
    (old / "fields.json").write_text(json.dumps({"x": ["kappa"], "y": ["T"], "params": ["load"]}))
    assert load_operator(old / "best.pt").fields == {"x": ["kappa"], "y": ["T"], "params": ["load"]}
    assert main(["predict", "--checkpoint", str(old / "best.pt"), "--mesh", str(folder / "fine_1.vtu"),
                 "-o", str(tmp_path / "b.vtu")]) == 0
    assert "T_pred" in meshio.read(tmp_path / "b.vtu").point_data


def run_predict(checkpoint, mesh, out):
    from geoattn.cli.main import build_parser

    args = build_parser(["predict"]).parse_args(["predict", "--checkpoint", str(checkpoint), "--mesh", str(mesh),
                                                 "-o", str(out)])
    return args.run(args)


def test_predict_reads_a_folder_in_one_call_with_the_import_reader_flags(imported, runs, tmp_path, capsys):
    folder, loads = runs
    run = tmp_path / "run"
    assert main(["train", str(imported), "--out", str(run), "--epochs", "1", "--width", "8", "--depth", "1",
                 "--batch-size", "2", "--no-progress"]) == 0
    split = tmp_path / "split"
    split.mkdir()
    mesh = meshio.read(folder / "fine_1.vtu")
    cells = mesh.cells_dict["triangle"]
    points = mesh.points[cells].reshape(-1, 3)  # every cell's own vertices, as many solvers write
    fields = {k: np.asarray(v)[cells].reshape(len(points), *np.shape(v)[1:]) for k, v in mesh.point_data.items()}
    fields["grad"] = np.repeat(np.arange(len(cells), dtype=float), 3)  # element-wise: differs at shared nodes
    flipped = np.arange(len(points)).reshape(-1, 3)[:, ::-1]  # every cell inverted
    meshio.write(split / "solver.vtu", meshio.Mesh(points, [("triangle", flipped)], point_data=fields,
                                                    field_data=mesh.field_data))
    shutil.copy(folder / "fine_0.vtu", split / "fine_0.vtu")
    (split / "params.csv").write_text(f"file,load\nsolver.vtu,{loads['fine_1.vtu']}\nfine_0.vtu,{loads['fine_0.vtu']}\n")
    out = tmp_path / "pred"
    assert main(["predict", "--checkpoint", str(run / "best.pt"), "--mesh", str(split), "--merge-duplicates",
                 "1e-9", "--reorient", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fine_0.vtu", "solver.vtu"]
    merged = meshio.read(out / "solver.vtu").point_data["T_pred"]
    plain = meshio.read(out / "fine_0.vtu").point_data["T_pred"]
    assert np.isfinite(merged).all() and len(merged) == len(points) and np.isfinite(plain).all()
    op = load_operator(run / "best.pt")
    src = folder / "fine_1.vtu"
    assert main(["predict", "--checkpoint", str(run / "best.pt"), "--mesh", str(src), "-o", str(tmp_path / "one.vtu")]) == 0
    direct = meshio.read(tmp_path / "one.vtu").point_data["T_pred"]
    np.testing.assert_allclose(merged, direct[cells].reshape(-1), rtol=1e-4, atol=1e-5)
    del op


def test_lists_of_names_are_comma_lists_appended_over_repeats_and_scalars_are_given_once(tmp_path, capsys):
    from geoattn.cli.main import build_parser

    args = build_parser(["predict"]).parse_args(["predict", "--checkpoint", "c.pt", "--mesh", "m.vtu", "-o", "o.vtu",
                                                 "--field", "a,b", "--field", "c"])
    assert args.field == ["a", "b", "c"]
    assert main(["predict", "--checkpoint", "c.pt", "--mesh", "m.vtu", "-o", "o.vtu", "-o", "p.vtu"]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["predict", "--checkpoint", "c.pt", "--mesh", "m.vtu", "-o", "o.vtu", "--field", "a,a"]) == 2
    assert "twice" in capsys.readouterr().err


def test_split_fractions_follow_the_seed(runs, tmp_path):
    folder, _ = runs
    picked = {}
    for seed in (0, 0, 1):
        out = tmp_path / f"s{seed}.h5"
        assert main(["import", f"{folder}/coarse_*.vtu", "--x", "kappa", "--y", "T", "--split", "0.5,0.25,0.25",
                     "--seed", str(seed), "--out", str(out), "--no-progress", "--overwrite"]) == 0
        with h5py.File(out) as fh:
            picked.setdefault(seed, []).append({k: fh["splits"][k][:].tolist() for k in fh["splits"]})
    assert picked[0][0] == picked[0][1] and picked[0][0] != picked[1][0]
    assert sorted(len(v) for v in picked[0][0].values()) == [2, 2, 4]


def test_bad_files_give_one_line_and_write_nothing(runs, tmp_path, capsys):
    folder, _ = runs
    good = folder / "coarse_0.vtu"
    no_t = simulation(plate_with_hole(6), 1.0)
    del no_t.point_data["T"]
    meshio.write(tmp_path / "no_t.vtu", no_t)
    (tmp_path / "broken.vtu").write_text("<VTKFile")
    short = simulation(plate_with_hole(6), 1.0)
    short.point_data["T"] = short.point_data["T"][:-1]
    meshio.write(tmp_path / "short.vtu", short)
    bad_mesh = simulation(plate_with_hole(6), 1.0)
    bad_mesh.points[3] = np.nan
    meshio.write(tmp_path / "nan.vtu", bad_mesh)
    cases = [("no_t.vtu", "'T'"), ("broken.vtu", "broken.vtu"), ("nan.vtu", "nan.vtu"),
             ("short.vtu", 'len(point_data["T"])')]
    out = tmp_path / "d.h5"
    capsys.readouterr()  # meshio's warnings while writing the files
    for name, expected in cases:
        argv = ["import", str(good), str(tmp_path / name), "--x", "kappa", "--y", "T", "--split", "1,0",
                "--out", str(out), "--no-progress"]
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and name in err and expected in err, err
        assert not list(tmp_path.glob("d.h5*")) and not list(tmp_path.glob(".d.h5*"))
    assert main(["import", str(tmp_path / "no_t.vtu"), "--x", "kappa", "--y", "q", "--params", "load",
                 "--out", str(out), "--split", "1,0", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no_t.vtu: no parameter 'load'" in err
    assert main(["import", str(tmp_path / "missing_*.vtu"), "--x", "kappa", "--y", "T", "--out", str(out)]) == 2
    assert "no file matches" in capsys.readouterr().err
    assert not out.exists()


def test_reader_flags_reach_the_mesh_reader(runs, tmp_path, capsys):
    folder, _ = runs
    mesh = meshio.read(folder / "coarse_0.vtu")
    flipped = meshio.Mesh(mesh.points, [("triangle", mesh.cells_dict["triangle"][:, [0, 2, 1]])],
                          point_data=mesh.point_data)
    meshio.write(tmp_path / "flipped.vtu", flipped)
    capsys.readouterr()
    argv = ["import", str(tmp_path / "flipped.vtu"), "--x", "kappa", "--y", "T", "--split", "1,0",
            "--out", str(tmp_path / "d.h5"), "--no-progress"]
    assert main(argv) == 2 and "flipped.vtu" in capsys.readouterr().err
    assert main(argv + ["--reorient"]) == 0
    options = reader_options()
    flags = (("--merge-duplicates", "1e-12", "merge_duplicates"), ("--cell-block", "triangle", "cell_block"))
    for flag, value, key in flags:
        if key not in options:
            continue
        assert main(argv + ["--reorient", "--overwrite", flag, value]) == 0, capsys.readouterr().err
    assert len(MeshDataset(tmp_path / "d.h5")) == 1


def test_evaluate_refuses_meshes_with_unequal_sample_sets(tmp_path, capsys):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    assert main(["generate", "--mesh", "train=meshes/square_irregular.vtu", "--n", "3", "--out", str(a),
                 "--no-progress"]) == 0
    assert main(["generate", "--mesh", "graded=meshes/square_graded.vtu", "--n", "2", "--out", str(b),
                 "--no-progress"]) == 0
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "tno"\nwidth = 8\ndepth = 1\n[train]\nepochs = 1\nbatch_size = 2\n')
    assert main(["train", str(a), "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "run" / "last.pt"), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "'train' 3, 'graded' 2" in err and err.count("\n") == 1
    assert main(["evaluate", str(tmp_path / "run" / "last.pt"), str(a), str(b), "--first", "2"]) == 0


def test_evaluate_writes_the_figure_a_per_file_table_and_ratios_of_paired_sets_only(tmp_path, capsys):
    for folder, n in (("coarse", 6), ("fine", 11), ("other", 11)):
        (tmp_path / folder).mkdir()
        for k in range(2):
            name = f"s{k}.vtu" if folder != "other" else f"t{k}.vtu"  # other: as many samples, not the same
            meshio.write(tmp_path / folder / name, simulation(plate_with_hole(n, seed=k), 1.0 + k))
    for k in range(6):
        meshio.write(tmp_path / f"train_{k}.vtu", simulation(plate_with_hole(7, seed=10 + k), 1.0 + 0.2 * k))
    data = tmp_path / "d.h5"
    assert main(["import", str(tmp_path), "--x", "kappa", "--y", "T", "--out", str(data), "--no-progress",
                 "--test", "coarse=*/coarse/*", "--test", "fine=*/fine/*", "--test", "other=*/other/*",
                 "--split", "0.8,0.2"]) == 0
    run = tmp_path / "run"
    assert main(["train", str(data), "--out", str(run), "--epochs", "1", "--width", "8", "--depth", "1",
                 "--no-progress"]) == 0
    capsys.readouterr()
    ev = tmp_path / "ev"
    assert main(["evaluate", str(run / "best.pt"), str(data), "--sets", "coarse,fine,other", "--out", str(ev)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.split("\n\n")[0].splitlines()[2:]}
    assert "ratio" in out and rows["other"][-1] == "-" and float(rows["fine"][-1]) > 0  # paired by name only
    files = list(csv.DictReader(open(ev / "files.csv")))
    assert len(files) == 6 and [float(r["error"]) for r in files] == sorted((float(r["error"]) for r in files), reverse=True)
    assert files[0]["file"] in out  # the worst file is named
    assert (ev / "errors.png").stat().st_size > 1000
    sets = {r["set"]: r for r in csv.DictReader(open(ev / "sets.csv"))}
    assert sets["other"]["paired_ratio"] == "" and sets["fine"]["paired_ratio"] != ""


def test_the_dataset_file_is_compressed_from_a_thousand_nodes(tmp_path):
    meshio.write(tmp_path / "big.vtu", simulation(plate_with_hole(45), 1.0))  # 1 760 nodes
    meshio.write(tmp_path / "small.vtu", simulation(plate_with_hole(6), 1.0))
    assert main(["import", str(tmp_path), "--x", "kappa", "--y", "T", "--out", str(tmp_path / "d.h5"),
                 "--split", "0.5,0.5", "--no-progress"]) == 0
    with h5py.File(tmp_path / "d.h5") as fh:
        found = {len(g["points"]): {g[k].compression for k in ("x", "y", "points", "cells", "weight")}
                 for g in fh["meshes"].values()}
    assert found[max(found)] == {"gzip"} and found[min(found)] == {None}


def _linked_runs(root, runs):
    """``src/run_1/`` holding three of the runs, a link ``latest -> run_1`` beside it and a loop
    ``run_1/up -> ..``."""
    folder, _ = runs
    src = root / "src"
    (src / "run_1").mkdir(parents=True)
    for name in ["coarse_0.vtu", "coarse_1.vtu", "coarse_2.vtu"]:
        shutil.copy(folder / name, src / "run_1" / name)
    (src / "latest").symlink_to("run_1")
    (src / "run_1" / "up").symlink_to("..")
    return src


@pytest.mark.parametrize("spec", ["{src}/**/*.vtu", "{src}", "{src}/*/*.vtu"])
def test_import_reads_every_real_file_once_through_links_and_loops(runs, tmp_path, spec):
    """A link ``latest -> run_1`` and a loop of links: each of the three files is one sample,
    named without the link, in exactly one split."""
    src = _linked_runs(tmp_path, runs)
    out = tmp_path / "d.h5"
    assert main(["import", spec.format(src=src), "--x", "kappa", "--y", "T", "--split", "0.34,0.33,0.33",
                 "--out", str(out), "--no-progress"]) == 0
    ds = MeshDataset(out)
    assert sorted(n.rsplit("/", 1)[-1] for n in ds.names) == ["coarse_0.vtu", "coarse_1.vtu", "coarse_2.vtu"]
    assert all("/run_1/" in n and "latest" not in n and "/up/" not in n for n in ds.names)
    assert sum(ds.splits.values()) == 3


def test_import_lists_skipped_files_and_takes_the_cell_flags(runs, tmp_path, capsys):
    """A folder with a .vtp beside its meshes names it; a mixed triangle/quad file with a cell field
    imports whole with --triangulate and --cell-to-point (a flag of predict too)."""
    from geoattn.cli.main import build_parser

    folder = tmp_path / "mixed"
    folder.mkdir()
    k = 4
    xs = np.linspace(0, 1, k + 1)
    pos = np.stack(np.meshgrid(xs, xs), axis=-1).reshape(-1, 2)
    tris, quads = [], []
    for i in range(k):
        for j in range(k):
            a, b = j * (k + 1) + i, j * (k + 1) + i + 1
            (tris.extend([[a, b, b + k + 1], [a, b + k + 1, a + k + 1]]) if i < 2
             else quads.append([a, b, b + k + 1, a + k + 1]))
    mesh = meshio.Mesh(np.c_[pos, np.zeros(len(pos))], [("triangle", np.array(tris)), ("quad", np.array(quads))],
                       point_data={"T": pos[:, 0]},
                       cell_data={"kappa": [np.ones(len(tris)), 2.0 * np.ones(len(quads))]})
    meshio.write(folder / "mixed.vtu", mesh)
    (folder / "surface.vtp").write_text("<VTKFile type='PolyData'/>")
    capsys.readouterr()
    out = tmp_path / "d.h5"
    argv = ["import", str(folder), "--x", "kappa", "--y", "T", "--split", "1,0", "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    assert "--triangulate" in capsys.readouterr().err
    assert main(argv + ["--triangulate", "--cell-to-point", "kappa"]) == 0
    said = capsys.readouterr().out
    assert "skipped 1 file(s) meshio does not read (.vtp)" in said and "surface.vtp" in said
    sample = MeshDataset(out)[0]
    assert sample.num_nodes == len(pos) and float(sample.weight.sum()) == pytest.approx(1.0)
    # volume-weighted averages of 1 (triangles) and 2 (quads) at the seam's nodes
    assert np.allclose(np.unique(sample.x[:, 0].numpy().round(6)), [1, 4 / 3, 3 / 2, 5 / 3, 2])
    args = build_parser(["predict"]).parse_args(["predict", "--checkpoint", "c.pt", "--mesh", "m.vtu", "-o", "o.vtu",
                                                 "--triangulate", "--linearise", "--cell-to-point", "a,b"])
    from geoattn.cli.options import reader_options as given

    assert given(args) == {"triangulate": True, "linearise": True, "cell_to_point": ["a", "b"]}
