"""Issue 56, part three: the mesh files the CLI reads. Several unreadable files are all named in
one line; meshio's own ASCII gmsh files are read; a tiny point cloud is refused; ``--origin``
brings meshes in UTM-like coordinates through import, train, predict and evaluate; files of other
samples are not scored as paired."""

import re
from pathlib import Path

import meshio
import numpy as np
import pytest
import torch

from geoattn.cli.main import main
from geoattn.errors import ConfigError, InputFilesError, MeshFileError, TooFewNodesError
from geoattn.mesh import read_mesh
from geoattn.mesh.io import CLOUD_SPAN_MIN, check_cloud_size

from faults.helpers import refused, snapshot

MESHES = Path(__file__).resolve().parents[2] / "meshes"


def _sample(path: Path, shift=(0.0, 0.0), scale: float = 1.0, k: float = 1.0, fmt: str | None = None,
            binary: bool = True) -> Path:
    """The 289-node square as a simulation file with fields ``a`` and ``T``, its nodes at
    ``scale * p + shift``, written with two coordinate columns (as meshio users write 2-D meshes)."""
    src = meshio.read(MESHES / "square_irregular.vtu")
    p = src.points[:, :2]
    mesh = meshio.Mesh(p * scale + np.asarray(shift), [("triangle", src.cells_dict["triangle"])],
                       point_data={"a": np.sin(k * p[:, 0]) + p[:, 1], "T": np.cos(k * p[:, 1]) * p[:, 0]})
    kwargs = {} if fmt is None else {"file_format": fmt, "binary": binary}
    meshio.write(path, mesh, **kwargs)
    return path


@pytest.fixture
def bad_folder(tmp_path):
    """Two good files and one unreadable file of each kind (.vtu, .msh, .xdmf), and a .txt."""
    d = tmp_path / "runs"
    d.mkdir()
    _sample(d / "a_good.vtu")
    _sample(d / "b_good.vtu", k=2.0)
    (d / "c_empty.vtu").write_bytes(b"")
    (d / "d_text.msh").write_text("$MeshFormat\nnot a mesh\n")
    (d / "e_broken.xdmf").write_text("<Xdmf><Domain><Grid>")
    (d / "notes.txt").write_text("hello\n")
    return d


def test_import_names_every_unreadable_file_in_one_line(bad_folder, tmp_path, capsys):
    out = tmp_path / "d.h5"
    args = ["import", str(bad_folder), "--x", "a", "--y", "T", "--out", str(out), "--no-progress"]
    err = refused(args, capsys, r"3 of 5 input files cannot be used", InputFilesError)
    reasons = re.split(r" \(\d\) ", err)[1:]  # "...: (1) ... (2) ... (3) ...": one reason per file
    assert len(reasons) == 3 and "(4)" not in err, err
    for reason, name in zip(reasons, ("c_empty.vtu", "d_text.msh", "e_broken.xdmf")):
        assert name in reason, (name, reason)
    assert "a_good" not in err and "b_good" not in err
    assert not out.exists() and not list(tmp_path.glob("d.h5*"))  # nothing written, no partial file


def test_import_of_one_bad_file_keeps_its_own_error(bad_folder, tmp_path, capsys):
    for name in ("d_text.msh", "e_broken.xdmf"):
        (bad_folder / name).unlink()
    args = ["import", str(bad_folder), "--x", "a", "--y", "T", "--out", str(tmp_path / "d.h5"), "--no-progress"]
    refused(args, capsys, r"cannot read mesh file \S*c_empty.vtu \(the file is empty\)", MeshFileError)


def test_predict_names_every_unreadable_file_in_one_line(bad_folder, tmp_path, capsys):
    data, run = tmp_path / "d.h5", tmp_path / "run"
    good = tmp_path / "good"
    good.mkdir()
    for i in range(3):
        _sample(good / f"s{i}.vtu", k=1.0 + i)
    assert main(["import", str(good), "--x", "a", "--y", "T", "--out", str(data), "--no-progress",
                 "--split", "0.67,0.33"]) == 0
    assert main(["train", str(data), "--width", "8", "--depth", "1", "--epochs", "1", "--out", str(run),
                 "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "pred"
    out.mkdir()
    args = ["predict", "--checkpoint", str(run / "last.pt"), "--mesh", str(bad_folder), "-o", str(out)]
    err = refused(args, capsys, r"3 of 5 input files cannot be used \(the 2 before the first were predicted and "
                                r"written\)", InputFilesError)
    assert all(name in err for name in ("c_empty.vtu", "d_text.msh", "e_broken.xdmf")), err
    assert sorted(p.name for p in out.iterdir()) == ["a_good.vtu", "b_good.vtu"]


@pytest.mark.parametrize("fmt", ["gmsh", "gmsh22"])
@pytest.mark.parametrize("binary", [False, True])
def test_a_2d_msh_written_by_meshio_is_read_with_its_fields(tmp_path, fmt, binary):
    """meshio writes a 2-D mesh's ASCII gmsh fields as NumPy reprs (``np.float64(0.5)``) under
    NumPy 2, which its reader then refuses: read, every value exact, as from the .vtu."""
    reference = read_mesh(_sample(tmp_path / "s.vtu"), x="a", y="T", dtype=torch.float64)
    got = read_mesh(_sample(tmp_path / "s.msh", fmt=fmt, binary=binary), x="a", y="T", dtype=torch.float64)
    assert got.pos.shape == (289, 2)
    for key in ("pos", "x", "y", "weight"):
        assert torch.equal(got[key], reference[key]), key  # the repr's digits round-trip exactly


def test_a_msh_that_is_not_meshio_text_is_still_refused(tmp_path):
    path = _sample(tmp_path / "s.msh", fmt="gmsh22", binary=False)
    head, mark, rest = path.read_text().partition("$NodeData")
    lines = rest.split("\n")  # "", 3 header blocks (tags), then "1 <value>" for node 1, ...
    first = next(k for k in range(9, len(lines)) if lines[k].startswith("1 "))
    value = lines[first].split(" ", 1)[1].removeprefix("np.float64(").removesuffix(")")
    lines[first] = f"1 np.float64(({value})"  # damaged: not a repr (meshio writes one under NumPy 2 only)
    path.write_text(head + mark + "\n".join(lines))
    with pytest.raises(MeshFileError, match="cannot read mesh file"):
        read_mesh(path, x="a")


def test_a_two_point_cloud_is_refused_naming_the_fix(tmp_path, capsys):
    pts = np.array([[0.2, 0.3, 0.0], [0.7, 0.9, 0.0]])
    path = tmp_path / "two.vtu"
    meshio.write(path, meshio.Mesh(pts, [("vertex", np.arange(2).reshape(-1, 1))], point_data={"a": pts[:, 0]}))
    with pytest.raises(TooFewNodesError, match=r"2 node\(s\) in 2-D .* span only 11% .* at least 6 nodes"):
        read_mesh(path, x="a")
    refused(["info", str(path)], capsys, "a point cloud of 2 node", TooFewNodesError)
    data = read_mesh(path, x="a", weights="monte_carlo", box=[[0, 0], [1, 1]])  # the domain's box: its measure
    assert float(data.weight.sum()) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_the_cloud_size_rule_is_the_stated_span(d):
    """Refused exactly below the count whose expected span ((N-1)/(N+1))^d reaches CLOUD_SPAN_MIN."""
    need = next(n for n in range(2, 100) if ((n - 1) / (n + 1)) ** d >= CLOUD_SPAN_MIN)
    assert need == {1: 3, 2: 6, 3: 9}[d]  # 1/2 (d=1), 0.51 (d=2, 5/7 squared), 0.51 (d=3, (8/10)^3)
    check_cloud_size(need, d)
    with pytest.raises(TooFewNodesError):
        check_cloud_size(need - 1, d)


@pytest.fixture
def utm(tmp_path):
    """Six samples of the unit square scaled to 100 m and placed at UTM-like coordinates."""
    d = tmp_path / "utm"
    d.mkdir()
    for i in range(6):
        _sample(d / f"s{i}.vtu", shift=(500000.0, 4000000.0), scale=100.0, k=1.0 + 0.2 * i)
    return d


def test_origin_brings_utm_meshes_through_import_train_predict_and_evaluate(utm, tmp_path, capsys):
    plain, centred = tmp_path / "plain.h5", tmp_path / "centred.h5"
    base = ["--x", "a", "--y", "T", "--no-progress", "--split", "0.67,0.33"]
    train = ["--width", "8", "--depth", "1", "--epochs", "1", "--no-progress"]
    assert main(["import", str(utm), "--out", str(plain), *base]) == 0
    capsys.readouterr()
    # without it, float32 cannot tell the nodes apart: the message names the flag that helps
    refused(["train", str(plain), "--out", str(tmp_path / "r0"), *train], capsys,
            r"geoattn import --origin 500050,4000050 \(or --origin auto")
    assert main(["import", str(utm), "--out", str(centred), "--origin", "auto", *base]) == 0
    assert "--origin auto: 500050,4000050" in capsys.readouterr().out
    run = tmp_path / "run"
    assert main(["train", str(centred), "--out", str(run), *train]) == 0
    out = tmp_path / "p.vtu"
    assert main(["predict", "--checkpoint", str(run / "last.pt"), "--mesh", str(utm / "s5.vtu"), "-o", str(out)]) == 0
    written = meshio.read(out)
    assert np.array_equal(written.points, meshio.read(utm / "s5.vtu").points)  # in the file's own frame
    assert np.isfinite(written.point_data["T_pred"]).all() and np.ptp(written.point_data["T_pred"]) > 0
    assert main(["evaluate", str(run / "last.pt"), str(centred), "--sets", "val"]) == 0
    capsys.readouterr()
    refused(["evaluate", str(run / "last.pt"), str(plain), "--sets", "val"], capsys,
            r"trained on meshes read with origin \[500050.0, 4000050.0\], but \S*plain.h5 holds them with "
            "origin None", ConfigError)
    refused(["predict", "--checkpoint", str(run / "last.pt"), "--mesh", str(utm / "s5.vtu"), "-o",
             str(tmp_path / "q.vtu"), "--origin", "1,2"], capsys, r"origin \[1.0, 2.0\] given, but the model",
            ConfigError)


@pytest.mark.parametrize("value, match", [("1,nan", "finite"), ("a,b", "1 to 3 finite numbers"),
                                          ("1,2,3,4", "1 to 3"), ("", "1 to 3")])
def test_bad_origins_are_refused_before_anything_is_read(utm, tmp_path, capsys, value, match):
    before = snapshot(tmp_path)
    refused(["import", str(utm), "--x", "a", "--y", "T", "--out", str(tmp_path / "d.h5"), "--origin", value],
            capsys, f"--origin must be {match}|--origin must be 1 to 3 finite numbers", ConfigError)
    assert snapshot(tmp_path) == before


def test_origin_of_the_wrong_dimension_names_the_file(utm, tmp_path, capsys):
    refused(["import", str(utm), "--x", "a", "--y", "T", "--out", str(tmp_path / "d.h5"), "--origin", "1,2,3"],
            capsys, r"s0.vtu: origin must be 2 finite numbers for 2-D nodes")


def test_evaluate_refuses_files_of_other_samples_as_pairs(tmp_path, capsys):
    """Two generated files with as many samples but another seed hold other samples: a cross-mesh
    report would pair sample i of each; one recipe on two meshes is paired."""
    def generate(name, mesh, *extra):
        assert main(["generate", "--mesh", f"{name}={MESHES / mesh}", "--n", "2", "--modes", "4",
                     "--out", str(tmp_path / f"{name}.h5"), "--no-progress", *extra]) == 0
        return str(tmp_path / f"{name}.h5")

    train = generate("train", "square_irregular.vtu")
    same = generate("graded", "square_graded.vtu")
    other = generate("other", "square_graded.vtu", "--seed", "5")
    run = tmp_path / "run"
    assert main(["train", train, "--width", "8", "--depth", "1", "--epochs", "1", "--out", str(run),
                 "--no-progress"]) == 0
    capsys.readouterr()
    refused(["evaluate", str(run / "last.pt"), train, other], capsys,
            r"train.h5 and \S*other.h5 hold other samples \(seed 0 against 5\)", ConfigError)
    assert main(["evaluate", str(run / "last.pt"), train, same]) == 0
