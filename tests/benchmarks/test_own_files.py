"""``benchmarks/own_files.py``: the tiny scale runs every part through the command line, and the
surface target is the continuum integral."""

import math

import numpy as np
import pytest

SCRIPT = "own_files"  # the ``script`` fixture (conftest.py)


def test_surface_target_is_the_sphere_integral(script):
    """For g = 1 on the unit sphere, u = 2 pi sigma^2 (1 - exp(-2 / sigma^2)) at every point
    (|x - y|^2 = 2 - 2 cos theta); the level-5 lumped rule is second order in an edge of about
    0.03, so a few 1e-4 relative."""
    fine = script.surface_mesh((1.0, 1.0, 1.0), 5, None)
    weight = script.lumped_area(fine)
    points = script.surface_mesh((1.0, 1.0, 1.0), 2, np.random.default_rng(0)).points
    u = script.surface_integral(points, fine, weight, np.ones(len(fine.points)))
    exact = 2 * math.pi * script.SIGMA**2 * (1 - math.exp(-2 / script.SIGMA**2))
    assert np.abs(u / exact - 1).max() < 2e-3


def test_tiny_scale_imports_trains_and_scores_every_set(script, tmp_path):
    results = script.main(["--scale", "tiny", "--out", str(tmp_path)])
    plates = results["plates"]["tno"]["sets"]
    assert list(plates) == ["val", "new_positions", "remeshed", "three_holes"]
    surfaces = results["surfaces"]["tno"]["sets"]
    assert {k: (int(r["min_nodes"]), int(r["max_nodes"])) for k, r in surfaces.items()} == {
        "val": (642, 642), "coarse": (162, 162), "fine": (2562, 2562), "same_level": (642, 642)}
    for row in [*plates.values(), *surfaces.values()]:
        assert 0 < float(row["mean"]) < 5, row  # two epochs: a smoke run
    rate = results["throughput"]
    assert rate["files"] == 10 and rate["files_per_s"] == pytest.approx(10 / rate["seconds"])
    assert (tmp_path / "throughput" / "t.h5").is_file()
