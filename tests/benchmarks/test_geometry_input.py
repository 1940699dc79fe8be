"""The geometry benchmark (``benchmarks/geometry_input.py``) end to end at the tiny scale: every
model of every seed scored on both test sets, kept runs reread, and its page."""

import pytest

SCRIPT = "geometry_input"


@pytest.mark.slow
def test_tiny_run_writes_runs_and_page(load_script, tmp_path):
    pytest.importorskip("neuralop")
    script = load_script(SCRIPT)
    page = tmp_path / "page.md"
    argv = ["--scale", "tiny", "--seeds", "0", "--epochs", "1", "--out", str(tmp_path / "runs"), "--docs", str(page)]
    runs = script.main(argv)
    assert [r["model"] for r in runs] == list(script.MODELS)
    assert all(set(r["test"]) == {"train", "finer"} and r["epochs"] == 1 for r in runs)
    assert len(list((tmp_path / "runs").iterdir())) == 3
    text = page.read_text()
    assert "| piecewise | multigrid-distance |" in text and "equal" not in text.splitlines()[2]
    assert script.main(argv) == runs  # kept runs are read, not trained again
