"""The widened Darcy race (``benchmarks/widened_race.py``): the 3-D family's meshes and FNO's
3-D grid path, the summary's ratios and verdicts, and the script end to end at the tiny scale."""

import importlib

import numpy as np
import pytest
import torch

from geoattn.mesh import Mesh, families, from_meshio

SCRIPT = "widened_race"


@pytest.fixture(scope="module")
def darcy(script):
    return {name: importlib.import_module(f"darcy.{name}") for name in ("meshes", "peers", "race")}


def _volumes(mesh):
    p, t = mesh.points, mesh.cells_dict["tetra"]
    return np.linalg.det(p[t[:, 1:]] - p[t[:, :1]]) / 6


def test_jittered_cube_keeps_the_cube_and_every_cell_positive(darcy):
    cube = families.unit_cube(5)
    moved = darcy["meshes"].jitter(cube, seed=0)
    boundary = np.any((cube.points < 1e-12) | (cube.points > 1 - 1e-12), axis=1)
    np.testing.assert_array_equal(moved.points[boundary], cube.points[boundary])  # the domain stays
    assert np.abs(moved.points[~boundary] - cube.points[~boundary]).max() > 0.01  # interior nodes moved
    np.testing.assert_array_equal(moved.cells_dict["tetra"], cube.cells_dict["tetra"])
    v = _volumes(moved)
    assert np.all(np.sign(v) == np.sign(_volumes(cube)))  # no cell turned inside out
    assert abs(np.abs(v).sum() - 1.0) < 1e-12  # still tiles the unit cube


def test_cube_family_meshes_and_field(darcy):
    meshes = darcy["meshes"].benchmark_meshes(4, "cube")
    nodes = {k: len(m.points) for k, m in meshes.items()}
    assert nodes == {"train": 125, "refined": 9**3, "graded": 125, "foreign": 7**3}
    for m in meshes.values():
        assert darcy["meshes"].mesh_dim(m) == 3
        assert abs(np.abs(_volumes(m)).sum() - 1.0) < 1e-12
    graded = np.unique(meshes["graded"].points[:, 0])
    np.testing.assert_allclose(graded, np.linspace(0, 1, 5) ** 2, atol=1e-15)
    field = darcy["meshes"].coefficient_field(meshes)
    assert field.dim == 3 and field.modes == (darcy["meshes"].CUBE_MODES,) * 3
    np.testing.assert_allclose(field.box, [[0, 0, 0], [1, 1, 1]], atol=1e-12)


def test_cube_models_are_sized_in_three_dimensions(darcy):
    race = darcy["race"]
    scale = race.Scale(mesh_n=12, n_train=4, n_test=2, epochs=1)
    fno = race.peer_configuration(scale, "cube")
    assert fno["grid"] == 13 and fno["dim"] == 3 and fno["domain"] is None and fno["modes"] == 6
    mg = race.multigrid_configuration(scale, "cube")
    assert mg["grid"] == 12 and mg["levels"] == 3  # 12^3 cells for 13^3 nodes, 3 cells on the coarsest
    assert np.allclose(mg["box"], [[0, 0, 0], [1, 1, 1]])


def test_grid_interpolation_in_3d_is_exact_for_linear_and_trilinear_functions(darcy):
    peers = darcy["peers"]
    mesh = darcy["meshes"].jitter(families.unit_cube(4), seed=2)
    pos = mesh.points
    grid = peers._grid(torch.as_tensor(pos), 6)
    assert grid.shape == (216, 3)
    f = lambda p: 0.3 + 2.0 * p[:, 0] - 1.5 * p[:, 1] + 0.7 * p[:, 2]  # noqa: E731
    to_grid = peers.mesh_to_grid(pos, grid).tocsr()
    to_mesh = peers.grid_to_mesh(pos, grid.min(0), grid.max(0), 6).tocsr()
    np.testing.assert_allclose(to_grid @ f(pos), f(grid), atol=1e-12)
    np.testing.assert_allclose(to_grid.sum(1).A[:, 0], 1.0, atol=1e-12)
    g = lambda p: f(p) + p[:, 0] * p[:, 1] * p[:, 2] - 2 * p[:, 1] * p[:, 2]  # noqa: E731 trilinear
    np.testing.assert_allclose(to_mesh @ g(grid), g(pos), atol=1e-12)


def test_grid_fno_in_3d_runs_each_graph_on_its_grid(darcy):
    pytest.importorskip("neuralop")
    torch.manual_seed(0)
    fno = darcy["peers"].GridFNO(1, 1, dim=3, grid=6, modes=2, width=4, depth=1).eval()
    base = from_meshio(families.unit_cube(3))
    x = torch.rand(2 * len(base.pos), 1)
    pos = torch.cat([base.pos, base.pos])
    batch = torch.repeat_interleave(torch.arange(2), len(base.pos))
    with torch.no_grad():
        together = fno(x, Mesh(pos, torch.ones(len(pos)), batch=batch))
        alone = torch.cat([fno(xs, Mesh(base.pos, torch.ones(len(base.pos)))) for xs in x.split(len(base.pos))])
    assert together.shape == (len(pos), 1)
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="2-D domains only"):
        darcy["peers"].GridFNO(1, 1, dim=3, domain="cells")


def _run(family, model, seed, test, spe=1.0):
    return {"family": family, "model": model, "seed": seed, "test": test, "epochs": 10,
            "seconds_per_epoch": spe, "load": 2.0}


def test_summary_ratios_and_verdicts(script):
    peer = script.PEER
    runs = [_run("piecewise", "multigrid", s, {"train": 0.02, "refined": 0.021, "graded": 0.03, "foreign": 0.0218},
                 spe=3.0) for s in (0, 1)]
    runs += [_run("piecewise", peer, 0, {"train": 0.030, "refined": 0.030, "graded": 0.030, "foreign": 0.030}),
             _run("piecewise", peer, 1, {"train": 0.020, "refined": 0.030, "graded": 0.040, "foreign": 0.030})]
    (row,) = script.summary("square", runs)
    # FNO's means: 0.025 / 0.030 / 0.035 / 0.030; the multigrid's 0.020 / 0.021 / 0.030 / 0.0218
    assert row[2] == "multigrid" and row[3].startswith("0.80 / 0.70 / 0.86 / 0.73")
    assert row[4] == "missed"  # 0.857 on the graded mesh
    assert row[5] == "1.09" and row[6] == "met"  # the graded mesh's 1.5 is not scored; foreign 0.0218 / 0.020
    assert row[7] == "–" and row[8] == "3.00" and row[9] == 2  # no scores against the fine solutions
    finer = [_run("threephase", "multigrid", 0, {"train": 0.02, "finer": 0.0224}),
             _run("threephase", peer, 0, {"train": 0.05, "finer": 0.05})]
    (row,) = script.summary("random_holes", finer)
    assert row[4] == "met" and row[5] == "1.12" and row[6] == "missed"
    for r, fine in zip(runs[:2], (0.030, 0.040)):  # against the fine solutions: refined 0.032 / train 0.030
        r["reference"] = {"train": fine, "refined": fine + 0.002, "graded": 2 * fine, "foreign": fine}
    (row,) = script.summary("square", runs)
    assert row[7] == "1.06"  # (0.032 + 0.042) / (0.030 + 0.040); the graded mesh is not scored
    other = [dict(r, model="multigrid, other", test={k: 2 * v for k, v in r["test"].items()}) for r in runs[:2]]
    rows = script.summary("square", runs + other)
    assert [r[2] for r in rows] == ["multigrid", "multigrid, other"]
    assert rows[1][3].startswith("1.60 / 1.40")  # each geoattn model against the same FNO


@pytest.mark.slow
def test_tiny_run_on_the_square_and_the_cube_writes_one_page(script, tmp_path):
    pytest.importorskip("neuralop")
    page = tmp_path / "page.md"
    argv = ["--scale", "tiny", "--domains", "square", "cube", "--families", "piecewise", "--seeds", "0",
            "--epochs", "1", "--tune-peer", "0.5", "--tune-modes", "2", "--tune-widths", "4",
            "--out", str(tmp_path / "runs"), "--docs", str(page), "--equal-epochs", "--reference-targets", "square",
            "--between-nodes", "1"]
    results = script.main(argv)
    assert set(results) == {"square", "cube"}
    assert {r["model"] for r in results["cube"]} == {"multigrid", "multigrid, between-nodes λ=1", script.PEER}
    assert set(results["cube"][0]["test"]) == {"train", "refined", "graded", "foreign"}
    text = page.read_text()
    assert "| cube | piecewise |" in text and "| square | piecewise |" in text
    assert "At equal epochs" in text and (tmp_path / "runs" / "cube" / "equal-epochs").is_dir()
    assert not list((tmp_path / "runs" / "cube" / "equal-epochs").glob("peer-*"))  # the selection is reused
    assert all(set(r["reference"]) == set(r["test"]) for r in results["square"])
    assert "against the fine solutions" in text
    assert "| cube | piecewise | multigrid, between-nodes λ=1 |" in text
    assert (tmp_path / "runs" / "cube" / "between1" / "piecewise-multigrid-s0.json").exists()
    assert script.main(argv) == results  # kept runs are reread, not trained again
    kept = script.main(argv[:3] + ["pores"] + argv[3:] + ["--kept-only", "--seeds", "0", "1"])
    assert kept["pores"] == [] and kept["cube"] == results["cube"]  # nothing trained: no pores, no seed 1
