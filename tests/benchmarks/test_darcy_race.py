"""The fair race's driver (``benchmarks/darcy_race.py``): its tables from runs' rows, and one
tiny run end to end."""

import json

import pytest

SCRIPT = "darcy_race"


def _row(errors, epochs=3, seconds=0.5, config="X()"):
    return {"test": dict(zip(("train", "refined", "graded"), errors)), "epochs": epochs,
            "seconds_per_epoch": seconds, "config": config}


NODES = {"train": 10, "refined": 40, "graded": 12}


def test_race_table_gives_ratios_to_fno_per_mesh_and_the_floor(script):
    """Each model's error over FNO's on the same mesh, its worst / train ratio, the range of the
    ratios under the table and the finite-element floor as a last row."""
    results = {("square", 200): {"multigrid": (NODES, _row([0.02, 0.03, 0.05])),
                                 "neuralop-fno": (NODES, _row([0.04, 0.03, 0.04]))}}
    text = script.race_table(results, ["multigrid", "neuralop-fno"],
                             {("square", 200): {"train": 0.01, "refined": 0.005, "graded": 0.02}})
    assert "| multigrid | 3 | 0.50 | 0.0200 | 0.0300 | 0.0500 | 2.50 | 0.50 / 1.00 / 1.25 |" in text
    assert "`multigrid` 0.50–1.25" in text
    assert "| FE floor of the targets |  |  | 0.0100 | 0.0050 | 0.0200 |  |  |" in text
    assert "`neuralop-fno`: `X()`" in text


def test_samples_table_and_plot(script, tmp_path):
    results = {("square", n): {"multigrid": (NODES, _row([e, 2 * e, 3 * e])),
                               "neuralop-fno": (NODES, _row([2 * e, 2 * e, 2 * e]))}
               for n, e in ((50, 0.04), (100, 0.03))}
    text = script.samples_table(results, ["multigrid", "neuralop-fno"])
    assert "| 50 | 0.0400 / 0.1200 | 0.0800 / 0.0800 |" in text
    assert "| 100 | 0.0300 / 0.0900 | 0.0600 / 0.0600 |" in text
    pytest.importorskip("matplotlib")
    script.plot_samples(results, ["multigrid", "neuralop-fno"], tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 0


@pytest.mark.slow
def test_tiny_race_runs_every_model_in_its_process_and_skips_finished_runs(script, tmp_path):
    """Two models at the tiny scale, two processes at a time; a second call finds the runs done
    and only writes the page again."""
    pytest.importorskip("neuralop")
    args = ["--scale", "tiny", "--domains", "square", "--models", "multigrid", "neuralop-fno", "--seconds", "1",
            "--out", str(tmp_path), "--docs", str(tmp_path / "page.md")]
    results = script.main(args)
    runs = results[("square", 200)]
    assert set(runs) == {"multigrid", "neuralop-fno"}
    page = (tmp_path / "page.md").read_text()
    assert "| multigrid |" in page and "Configurations" in page
    stamp = (tmp_path / "square" / "n200" / "multigrid" / "results.json").stat().st_mtime
    script.main(args)
    assert (tmp_path / "square" / "n200" / "multigrid" / "results.json").stat().st_mtime == stamp
    assert json.loads((tmp_path / "square" / "n200" / "multigrid" / "results.json").read_text())["domain"] == "square"


def test_multigrid_configuration_smooths_once_on_the_first_grid():
    """The race's multigrid: the first grid matched to the 1 089 nodes (32 cells per axis, 4
    levels), one smoothing step on it and two on each coarser grid (its convolutions are most of
    a step's cost, ``benchmarks/multigrid_step.py``); a model builds from it."""
    from darcy.race import SCALES, multigrid_configuration

    from geoattn.models import build_model

    config = multigrid_configuration(SCALES["race"])
    assert (config["grid"], config["levels"], config["smoothing"]) == (32, 4, (1, 2, 2, 2))
    model = build_model("multigrid", in_channels=1, out_channels=1, **config)
    assert [len(s) for s in model.cycles[0].down] == [1, 2, 2] and len(model.cycles[0].coarsest) == 2
