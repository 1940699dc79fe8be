"""The multigrid step benchmark (``benchmarks/multigrid_step.py``): a tiny run end to end, its
page, and the revision loader giving the model of that revision beside this one."""

import pytest

SCRIPT = "multigrid_step"


def test_tiny_run_writes_its_page(script, tmp_path):
    pytest.importorskip("neuralop")
    page = tmp_path / "multigrid_step.md"
    out = script.main(["--scale", "tiny", "--before", "HEAD", "--smoothing", "1,2", "--steps", "1", "--rounds", "1",
                       "--pool", "4", "--docs", str(page)])
    models = {name for name, _ in out["result"]}
    assert models == {"neuralop-fno", "multigrid @ HEAD", "multigrid", "multigrid, smoothing=(1, 2)"}
    assert all(s > 0 for s in out["result"].values())
    assert out["nodes"]["shared, refined"] > 3 * out["nodes"]["shared"]
    text = page.read_text()
    assert "Written by: `python benchmarks/multigrid_step.py --scale tiny --before HEAD" in text
    assert "| `multigrid` |" in text and "x FNO)" in text


def test_revision_loader_registers_nothing(script):
    from geoattn.models import MODELS

    before = dict(MODELS)
    old = script.multigrid_at("HEAD")
    assert MODELS == before and old is not MODELS["multigrid"] and old.__name__ == "MultigridOperator"


def test_accuracy_script_schedule_and_tiny_run(load_script, tmp_path):
    """``benchmarks/multigrid_accuracy.py``: the one-cycle rate by elapsed fraction (1/25 of the
    peak at the start, the peak at 30 %, 1e-4 of it at the end, rising then falling), and a tiny
    run of the three losses and FNO: one epoch each, finite errors on every mesh, the multigrid's
    two diagnostics of the refined mesh (FNO, which answers on its input mesh only, without)."""
    pytest.importorskip("neuralop")
    acc = load_script("multigrid_accuracy")
    rates = [acc.one_cycle(f, 1.0) for f in (0.0, 0.15, 0.3, 0.65, 1.0)]
    assert rates[0] == pytest.approx(1 / 25) and rates[2] == pytest.approx(1.0) and rates[4] == pytest.approx(1e-4)
    assert rates[0] < rates[1] < rates[2] > rates[3] > rates[4]
    runs = acc.main(["--scale", "tiny", "--variants", "nodes", "query", "refined", "fno", "--seeds", "0",
                     "--epochs", "1", "--out", str(tmp_path)])
    assert [r["mode"] for r in runs] == ["nodes", "query", "refined", "fno"]
    for r in runs:
        assert r["epochs"] == 1 and all(0 < e < 10 for e in r["test"].values())
    nodes = runs[0]["test"]
    assert {"refined, train inputs", "refined targets at train nodes"} <= set(nodes)
    assert "refined, train inputs" not in runs[3]["test"]  # FNO answers on its input mesh only
