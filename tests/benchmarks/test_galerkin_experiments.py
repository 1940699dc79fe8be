"""Smoke runs of ``benchmarks/galerkin_experiments.py`` at the tiny scale, and its pieces."""

import dataclasses
import json
import math

import pytest
import torch

from geoattn.train import NormalizedOperator
from problems.burgers import burgers_data, nonuniform_samples, on_circle

THREADS = ["--threads", str(torch.get_num_threads())]  # leave the session's thread count as it is


SCRIPT = "galerkin_experiments"  # the ``script`` fixture (conftest.py)


@pytest.mark.slow
def test_burgers_tiny_run(script, tmp_path):
    results = script.main(["--experiment", "burgers", "--scale", "tiny", "--out", str(tmp_path), *THREADS,
                       "--figure", str(tmp_path / "burgers.png")])
    rows = results["rows"]
    assert set(rows) == {"GT-64", "FT-64", "GT-128", "FT-128"}
    for row in rows.values():
        for key in ("uniform", "non-uniform", "node-average", "non-uniform (initial)"):
            assert 0 < row[key] < 10
        assert row["ratio"] == pytest.approx(row["non-uniform"] / row["uniform"])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["settings"]["resolutions"] == [64, 128] and set(saved["target_met"]) == set(rows)
    table = (tmp_path / "table.md").read_text()
    assert "| GT | 64 |" in table and "load average" in table
    assert (tmp_path / "burgers.png").stat().st_size > 1000


@pytest.mark.slow
def test_inverse_tiny_run(script, tmp_path):
    results = script.main(["--experiment", "inverse", "--scale", "tiny", "--out", str(tmp_path), *THREADS,
                       "--figure", str(tmp_path / "inverse.png")])
    assert set(results["rows"]) == {f"{m}-{e:g}" for m in ("GT", "FT") for e in (0.0, 0.01, 0.1)}
    for row in results["rows"].values():
        assert all(0 < row[k] < 10 for k in ("train", "graded", "finer"))
    assert "| FT | 0.1 |" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "inverse.png").stat().st_size > 1000


def test_node_average_ablation_shares_the_model(script):
    data = burgers_data(2, seed=0, grid=64, dt=1e-2)
    sample = on_circle(nonuniform_samples(data, 24, 96))[0]
    op = NormalizedOperator(script.GalerkinTransformer(1, 1, dim=2, width=8, depth=1, num_heads=1))
    op.x_normalizer.fit([(sample.x, sample.weight)])
    op.y_normalizer.fit([(sample.y, sample.weight)])
    ablation = script.node_average_operator(op)
    assert ablation.model is op.model and ablation.unweighted
    with torch.no_grad():
        uniform = torch.full_like(sample.weight, 1 / 24)
        torch.testing.assert_close(ablation(sample.x, sample.pos, sample.weight),
                                   op(sample.x, sample.pos, uniform))
        assert not torch.allclose(ablation(sample.x, sample.pos, sample.weight),
                                  op(sample.x, sample.pos, sample.weight))


def test_paper_preset_is_cao_table_2a(script):
    paper = script.SCALES["burgers"]["paper"]
    assert (paper.n_train, paper.n_test, paper.resolutions, paper.epochs, paper.batch_size, paper.lr) == \
        (1024, 100, (512, 2048), 100, 8, 1e-3)
    assert (paper.width, paper.depth, paper.num_heads, paper.weight_decay) == (96, 4, 1, 0.0)
    assert paper.nu == pytest.approx(0.1 / (2 * math.pi), rel=1e-15)  # §5.1: "nu = (2 pi)^-1 0.1"
    # App. C.1: the H1 penalty gamma = 0.1 (h), the one-cycle shape of Cao's runs, FT's Xavier gain 1e-3
    assert (paper.h1_gamma, paper.schedule, paper.fourier_init_gain) == (0.1, "cao", 1e-3)
    assert paper.model_options() == {"block": "cao", "decoder": "spectral",
                                     "spectral": {"width": 48, "modes": 15, "period": 1.0}}
    model = script.GalerkinTransformer(1, 1, dim=paper.dim, width=paper.width, depth=paper.depth,
                                       num_heads=paper.num_heads, **paper.model_options())
    # Table 5: 523k-530k parameters (ours: a weight per mode k and -k, the library's lift and heads)
    assert 5e5 < sum(p.numel() for p in model.parameters()) < 1e6


def _scores(rows):
    """The rows without their timings."""
    return {k: {c: v for c, v in row.items() if "seconds" not in c} for k, row in rows.items()}


def test_burgers_run_cut_off_resumes_to_the_uninterrupted_result(script, tmp_path, run_trainer):
    """The paper preset's code path in miniature: a run cut off after the first epoch of its first
    model, run again with the same command, ends with the scores of an uninterrupted run; a third
    run trains nothing and reports the same; other settings in the same folder are refused."""
    args = ["--experiment", "burgers", "--scale", "paper-tiny", *THREADS]
    whole = script.main(args + ["--out", str(tmp_path / "whole")])["rows"]
    run_trainer("cut")
    with pytest.raises(run_trainer.Cut):
        script.main(args + ["--out", str(tmp_path / "cut")])
    first = tmp_path / "cut" / "runs" / "GT-64"
    assert (first / "last.pt").exists() and not (first / "result.json").exists()
    assert not (tmp_path / "cut" / "runs" / "FT-64").exists()
    run_trainer("real")
    resumed = script.main(args + ["--out", str(tmp_path / "cut")])["rows"]
    assert _scores(resumed) == _scores(whole)
    assert all(row["seconds"] >= row["train_seconds"] > 0 for row in resumed.values())
    run_trainer("none")
    again = script.main(args + ["--out", str(tmp_path / "cut")])["rows"]
    assert again == resumed
    with pytest.raises(ValueError, match="other settings"):
        script.main(args + ["--out", str(tmp_path / "cut"), "--epochs", "2"])
    with pytest.raises(ValueError, match="other settings"):  # --lr reaches the runs' settings
        script.main(args + ["--out", str(tmp_path / "cut"), "--lr", "5e-4"])


def test_burgers_samples_solved_in_parallel_and_cached_equal_the_serial_solve(script, tmp_path):
    """``--prepare-data``: the samples solved in chunks by worker processes and read back from the
    cache are bit for bit the serial solve of the same stream (train samples first, then test)."""
    import numpy as np

    scale = script.SCALES["burgers"]["paper-tiny"]
    train = burgers_data(scale.n_train, 0, grid=scale.grid, dt=scale.dt)
    test = burgers_data(scale.n_test, 0, grid=scale.grid, dt=scale.dt, start=scale.n_train)
    for workers, cache in ((1, None), (2, tmp_path), (1, tmp_path)):  # serial, parallel + write, read
        got_train, got_test = script.burgers_split(scale, 0, cache=cache, workers=workers)
        for got, want in ((got_train, train), (got_test, test)):
            assert np.array_equal(got.initial.coefficients, want.initial.coefficients)
            assert np.array_equal(got.solution.coefficients, want.solution.coefficients)
            assert list(got.indices) == list(want.indices)
    assert len(list(tmp_path.glob("burgers_*.npy"))) == 1


def test_viscosity_reaches_the_solver_the_cache_and_the_samples(script, tmp_path):
    """A scale's ``nu`` is the solver's (the same samples as ``burgers_data`` with that ``nu``,
    unlike the default 0.1's), names its own cache file and is carried by the samples (the
    non-uniform grids' density reads it)."""
    import numpy as np

    scale = script.replace(script.SCALES["burgers"]["paper-tiny"], nu=0.05)
    want = burgers_data(scale.n_train, 0, grid=scale.grid, dt=scale.dt, nu=0.05).solution.coefficients
    other = burgers_data(scale.n_train, 0, grid=scale.grid, dt=scale.dt).solution.coefficients
    assert not np.allclose(want, other)
    for workers in (2, 1):  # solved by workers into the cache, then read back
        train, test = script.burgers_split(scale, 0, cache=tmp_path, workers=workers)
        assert np.array_equal(train.solution.coefficients, want)
        assert train.nu == test.nu == 0.05
    default = script.SCALES["burgers"]["paper-tiny"]
    script.burgers_split(default, 0, cache=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("burgers_*.npy")) == [
        "burgers_seed0_n6_grid256_dt0.002.npy", "burgers_seed0_n6_grid256_dt0.002_nu0.05.npy"]


def test_fno_reference_row(script, tmp_path):
    """``--models FNO``: neuralop's FNO on the uniform grid, tabulated beside Cao's FNO1d row."""
    pytest.importorskip("neuralop")
    rows = script.main(["--experiment", "burgers", "--scale", "paper-tiny", "--models", "FNO", *THREADS,
                        "--out", str(tmp_path)])["rows"]
    row = rows["FNO-64"]
    assert row["model"] == "FNO" and row["epochs"] == 3 and 0 < row["uniform"] < float("inf")
    table = (tmp_path / "table.md").read_text()
    assert "| FNO | 64 |" in table
    assert script.PAPER_BURGERS["FNO"][512] == 4.373e-3  # Table 2a, "FNO1d 1cycle"


def test_input_floor_is_zero_for_a_resolved_input_and_second_order_in_the_spacing(script):
    """``input_floor``: the interpolant of a trigonometric polynomial from nodes on a grid that
    contains the reference grid reproduces it exactly (0 to float64 rounding); on coarser uniform grids the error of a
    smooth input falls as h^2 (P1 interpolation), ratio 4 per halving within 10 %."""
    import numpy as np

    from problems.burgers import BurgersData, FourierSeries, uniform_samples

    c = np.zeros((1, 4), dtype=complex)
    c[0, 1], c[0, 3] = 0.5, 0.2j
    data = BurgersData(FourierSeries(c), FourierSeries(c), 0, np.arange(1), 0.1, 1.0)
    assert script.input_floor(data, uniform_samples(data, 256, dtype=torch.float64), 256) < 1e-12
    errors = [script.input_floor(data, uniform_samples(data, n, dtype=torch.float64), 4096) for n in (32, 64, 128)]
    assert errors[0] / errors[1] == pytest.approx(4, rel=0.1)
    assert errors[1] / errors[2] == pytest.approx(4, rel=0.1)


def test_cao_h1_penalty_matches_the_central_difference_of_a_sine(script):
    """u = sin 2 pi x, pred = u + eps sin 2 pi k x on n uniform nodes: the periodic central
    difference of sin 2 pi m x is n sin(2 pi m / n) cos 2 pi m x exactly, so the penalty is
    sqrt(gamma / n) eps |sin(2 pi k / n) / sin(2 pi / n)| to rounding; a batch of two samples of
    different errors keeps them apart."""
    from torch_geometric.data import Batch, Data

    n, gamma = 64, 0.1
    x = torch.arange(n, dtype=torch.float64) / n
    u = torch.sin(2 * math.pi * x)[:, None]
    cases = [(1e-2, 3), (3e-2, 7)]
    preds = [u + eps * torch.sin(2 * math.pi * k * x)[:, None] for eps, k in cases]
    batch = Batch.from_data_list([Data(y=u, pos=x[:, None]) for _ in cases])
    got = script.CaoH1Penalty(gamma)(torch.cat(preds), batch)
    want = torch.tensor([math.sqrt(gamma / n) * eps * abs(math.sin(2 * math.pi * k / n) / math.sin(2 * math.pi / n))
                         for eps, k in cases], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


def test_cao_recipe_reaches_the_trainer_and_the_run_folder(script, tmp_path):
    """--h1-gamma, --schedule cao and --fourier-init-gain set the scale; the Trainer gets the
    penalty and Cao's one-cycle shape, FT's projections their gain, and the run folder records
    them (a run folder of the library's recipe keeps its settings without these keys)."""
    scale = script.SCALES["burgers"]["tiny"]
    assert scale.trainer_options() == {}
    cao = dataclasses.replace(scale, **script.RECIPES["cao"])
    options = cao.trainer_options()
    assert options["schedule"] == script.CAO_SCHEDULE and options["regularizer"].gamma == 0.1
    results = script.main(["--experiment", "burgers", "--scale", "tiny", "--resolutions", "64", "--out",
                           str(tmp_path), *THREADS, "--recipe", "library", "--h1-gamma", "0.1", "--schedule", "cao",
                           "--fourier-init-gain", "1e-3"])
    assert set(results["rows"]) == {"GT-64", "FT-64"}
    ft = results["operators"]["FT-64"].model.blocks[0].mixer
    assert ft.init_gain == 1e-3 and results["operators"]["GT-64"].model.blocks[0].mixer.init_gain == 1e-2
    settings = json.loads((tmp_path / "runs" / "FT-64" / "config.json").read_text())
    assert (settings["h1_gamma"], settings["schedule"], settings["fourier_init_gain"]) == (0.1, "cao", 1e-3)
    with pytest.raises(SystemExit):
        script.main(["--experiment", "inverse", "--scale", "tiny", "--h1-gamma", "0.1"])
    with pytest.raises(SystemExit):
        script.main(["--experiment", "inverse", "--scale", "tiny", "--recipe", "cao"])


def test_init_seed_changes_the_training_not_the_data(script, tmp_path):
    """--init-seed 1 with --seed 0: the test samples (so the input floors) are those of seed 0,
    the trained model differs; the run folder records the initialisation seed."""
    base = ["--experiment", "burgers", "--scale", "tiny", "--resolutions", "64", "--models", "GT", *THREADS]
    same = script.main(base + ["--out", str(tmp_path / "a")])
    other = script.main(base + ["--out", str(tmp_path / "b"), "--init-seed", "1"])
    assert other["floors"] == same["floors"]
    assert other["rows"]["GT-64"]["uniform"] != same["rows"]["GT-64"]["uniform"]
    settings = json.loads((tmp_path / "b" / "runs" / "GT-64" / "config.json").read_text())
    assert (settings["seed"], settings["init_seed"]) == (0, 1)
    assert "init_seed" not in json.loads((tmp_path / "a" / "runs" / "GT-64" / "config.json").read_text())
    with pytest.raises(SystemExit):
        script.main(["--experiment", "inverse", "--scale", "tiny", "--init-seed", "1"])
