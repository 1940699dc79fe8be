"""``benchmarks/spectral.py`` on a tiny setting (the full run is a benchmark)."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(FOLDER))  # the script imports its sibling `timing`
    threads = torch.get_num_threads()  # main() sets them
    spec = importlib.util.spec_from_file_location("spectral_benchmark", FOLDER / "spectral.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    torch.set_num_threads(threads)


def test_crossover_interpolates_the_time_ratio_in_log_log(bench):
    # ratio 0.5 at 1000, 2 at 4000: log-linear in log N crosses 1 at the geometric mean
    assert bench.crossover([1000, 4000], [0.5, 2.0]) == pytest.approx(2000.0)
    assert bench.crossover([1000, 4000], [1.5, 2.0]) == 1000
    assert bench.crossover([1000, 4000], [0.5, 0.9]) is None
    assert math.isclose(bench.crossover([10, 100, 1000], [0.1, 0.1, 10.0]), 10 ** 2.5)


def test_tiny_run_reports_both_backends(bench, capsys):
    pytest.importorskip("finufft")
    report = bench.main(["--nodes", "200", "400", "--channels", "2", "--modes", "2",
                         "--repeat", "1", "--threads", "1"])
    assert [r["nodes"] for r in report["rows"]] == [200, 400]
    assert all(r["finufft_step_s"] > 0 and r["dense_step_s"] > 0 for r in report["rows"])
    assert "speedup_forward_at_400" in report and "crossover_nodes_step" in capsys.readouterr().out


def test_model_step_times_backward_and_both_optimizers(bench):
    report = bench.main(["--model-step", "--mesh-n", "4", "--graphs", "2", "--modes", "1",
                         "--repeat", "1", "--threads", "1"])
    assert report["nodes"] == 25 and report["graphs"] == 2 and report["modes"] == 1
    assert all(report[k] > 0 for k in ("forward_backward_ms", "adamw_default_ms", "adamw_fused_ms"))
