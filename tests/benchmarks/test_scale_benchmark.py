"""``benchmarks/scale.py`` on a tiny setting (the full run is a benchmark)."""

import importlib.util
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
    spec = importlib.util.spec_from_file_location("scale_benchmark", FOLDER / "scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_scale_runs_each_model_in_its_own_process_and_skips_quadratic_sizes(capsys):
    results = _load().main(["--nodes", "300", "900", "--models", "galerkin", "tno", "--threads", "1",
                            "--quadratic-max", "500", "--timeout", "120"])
    for key in ("galerkin@300", "galerkin@900", "tno@300"):
        r = results[key]
        assert r["status"] == "ok" and r["finite"] and r["seconds"] > 0, (key, r)
    assert results["tno@900"]["status"].startswith("not tried")
    assert "galerkin" in capsys.readouterr().out
