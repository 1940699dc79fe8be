"""Smoke runs of ``benchmarks/galerkin_experiments.py`` at the tiny scale, and its pieces."""

import json

import pytest
import torch

from geoattn.data.burgers import burgers_data, nonuniform_samples, on_circle
from geoattn.train import NormalizedOperator

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
