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
