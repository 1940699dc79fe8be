"""``benchmarks/lorenz_cde.py`` on a tiny setting (the full run is a benchmark)."""

import json

import numpy as np
import pytest
import torch

from geoattn.train import relative_l2
from problems.odes import nonuniform_grid, ode_samples


SCRIPT = "lorenz_cde"  # the ``script`` fixture (conftest.py)


@pytest.fixture(scope="module")
def tiny_run(script, tmp_path_factory):
    """``main`` on every experiment at the tiny scale: (returned results, folder, printed text)."""
    folder = tmp_path_factory.mktemp("lorenz_cde")
    threads = torch.get_num_threads()
    try:
        results = script.main(["--experiment", "all", "--scale", "tiny", "--device", "cpu", "--seed", "1",
                           "--no-progress", "--out", str(folder / "r.json"), "--figure", str(folder / "fig")])
    finally:
        torch.set_num_threads(threads)  # main sets one thread for the benchmark
    return results, folder


def test_grids_and_scales_are_the_papers(script):
    g = script.grids()
    assert {k: len(v) for k, v in g.items()} == {
        "uniform": 201, "nonuniform": 151, "dt=0.005": 401, "dt=0.0075": 268, "dt=0.015": 135, "dt=0.02": 101}
    assert all(v[0] == 0.0 and v[-1] == 2.0 for v in g.values())
    paper = script.SCALES["paper"]
    assert (paper.n_train, paper.n_test, paper.width, paper.depth, paper.ff_mult) == (8000, 1000, 128, 6, 1)
    assert script.SCALES["gpu"] == paper


def test_tiny_run_writes_results_tables_and_figures(script, tiny_run, capsys):
    results, folder = tiny_run
    saved = json.loads((folder / "r.json").read_text())["results"]
    assert set(results) == set(saved) == {"lorenz1", "lorenz2", "cde"}
    for name, res in saved.items():
        assert (folder / f"fig_{name}.png").stat().st_size > 10_000
        for model in ("weighted", "node_average"):
            errors = res["models"][model]["errors"]
            assert set(errors) == set(script.grids())
            assert all(np.isfinite(e["median"]) and 0 < e["median"] <= e["max"] for e in errors.values())
        w = res["models"]["weighted"]["errors"]
        assert res["ratio"] == pytest.approx(w["nonuniform"]["median"] / w["uniform"]["median"])
        assert res["target_met"] == (res["ratio"] <= script.TARGET_RATIO)
    table = script.markdown("lorenz2", results["lorenz2"], script.SCALES["tiny"])
    assert "2.74e-02 / 6.30e-02" in table and "target <= 1.25" in table
    assert "8.73e-03 / 8.72e-02" in script.markdown("lorenz1", results["lorenz1"], script.SCALES["tiny"])


def test_example_is_the_weighted_models_prediction_on_the_median_sample(tiny_run):
    """The figure's curves are the trained model's output on the stored test sample: its relative
    L2 error recomputed from them is the median error of the table (torch.median: the lower middle
    one of an even count)."""
    for name in ("lorenz2", "cde"):
        res = tiny_run[0][name]
        ex = res["example"]
        data = ode_samples(name, {"n": nonuniform_grid()}, 1, 1, start=ex["index"])["n"][0]
        np.testing.assert_allclose(np.array(ex["true"]), data.y.numpy())
        np.testing.assert_allclose(np.array(ex["t"]), data.pos[:, 0].numpy())
        err = relative_l2(torch.tensor(ex["weighted"]), data.y, data.weight)
        assert float(err) == pytest.approx(res["models"]["weighted"]["errors"]["nonuniform"]["median"], rel=1e-5)


def _scores(results):
    """Each model's errors and training error (not its timings)."""
    return {e: {m: (r["errors"], r["train_error"]) for m, r in res["models"].items()}
            for e, res in results.items()}


def test_run_cut_off_resumes_to_the_uninterrupted_result(script, tmp_path, run_trainer):
    """The paper preset's code path in miniature: cut off in the second epoch of the first model,
    the same command again ends with the errors of an uninterrupted run, and a third run trains
    nothing."""
    threads = torch.get_num_threads()
    args = ["--experiment", "lorenz2", "--scale", "paper-tiny", "--device", "cpu", "--no-progress",
            "--threads", str(threads)]
    whole = script.main(args + ["--out", str(tmp_path / "whole.json")])
    run_trainer("cut")
    with pytest.raises(run_trainer.Cut):
        script.main(args + ["--out", str(tmp_path / "cut.json")])
    first = tmp_path / "cut_runs" / "runs" / "lorenz2-weighted"
    assert (first / "last.pt").exists() and not (first / "result.json").exists()
    run_trainer("real")
    resumed = script.main(args + ["--out", str(tmp_path / "cut.json")])
    assert _scores(resumed) == _scores(whole)
    model = resumed["lorenz2"]["models"]["weighted"]
    assert model["seconds"] >= model["train_seconds"] > 0
    run_trainer("none")
    assert _scores(script.main(args + ["--out", str(tmp_path / "cut.json")])) == _scores(whole)


def test_models_trained_side_by_side_then_tabulated_with_a_time_budget(script, tmp_path):
    """``--models`` trains one model into the run folders; the same command without it trains
    only the other and tabulates both; ``--seconds`` is each model's training-time budget."""
    args = ["--experiment", "lorenz1", "--scale", "paper-tiny", "--device", "cpu", "--no-progress",
            "--threads", str(torch.get_num_threads()), "--seconds", "30", "--out", str(tmp_path / "r.json")]
    part = script.main(args + ["--models", "node_average"])["lorenz1"]
    assert set(part["models"]) == {"node_average"} and "ratio" not in part
    whole = script.main(args)["lorenz1"]
    assert whole["models"]["node_average"] == part["models"]["node_average"]  # finished: not retrained
    assert set(whole["models"]) == {"weighted", "node_average"} and "ratio" in whole
    assert all(m["epochs"] <= 3 for m in whole["models"].values())
    saved = json.loads((tmp_path / "r_runs" / "runs" / "lorenz1-weighted" / "config.json").read_text())
    assert saved["seconds"] == 30.0
