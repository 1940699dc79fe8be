"""The GPU script of both Darcy races (``benchmarks/darcy_gpu_races.py``) at a tiny size on the
CPU, and the per-sample domains it races on (``benchmarks/darcy/random_holes.py``): their meshes
and FNO's per-sample grid masks."""

import importlib
import json
import math

import numpy as np
import pytest

SCRIPT = "darcy_gpu_races"


@pytest.fixture(scope="module")
def holes(script):
    return importlib.import_module("darcy.random_holes")


def test_domains_keep_their_holes_apart_and_the_meshes_cover_them(holes):
    """1 to 3 discs of the stated radii, apart from each other and the sides by the gap; the mesh
    has about the asked nodes, positive cells, every node in a cell, and covers the square less
    the holes' inscribed polygons (every chord an edge); no node inside a hole."""
    counts = set()
    for i in range(40):
        discs = holes.draw_discs(0, i)
        counts.add(len(discs))
        assert discs == holes.draw_discs(0, i)  # from (seed, index) alone
        for k, (x, y, r) in enumerate(discs):
            assert holes.RADII[0] <= r <= holes.RADII[1]
            assert min(x, y, 1 - x, 1 - y) >= r + holes.GAP - 1e-12
            for x2, y2, r2 in discs[k + 1:]:
                assert math.hypot(x - x2, y - y2) >= r + r2 + holes.GAP - 1e-12
    assert counts == {1, 2, 3}
    discs = holes.draw_discs(0, 5)
    for nodes in (300, 1200):
        points, cells = holes.holed_mesh(discs, nodes)
        assert abs(len(points) - nodes) < 0.05 * nodes
        a, b, c = (points[cells[:, i]] for i in range(3))
        area = 0.5 * ((b - a)[:, 0] * (c - a)[:, 1] - (b - a)[:, 1] * (c - a)[:, 0])
        assert area.min() > 0 and len(np.unique(cells)) == len(points)
        hole_area = sum(math.pi * r * r for _, _, r in discs)
        assert 1 - hole_area - 0.01 < area.sum() < 1 - hole_area + 0.01
        for x, y, r in discs:
            assert np.hypot(points[:, 0] - x, points[:, 1] - y).min() >= r * (1 - 1e-9) - 1e-12


def test_fno_grid_mask_follows_each_mesh(holes):
    """``domain="cells"``: the grid points in the mesh's triangles get the piecewise-linear
    interpolant (exact for an affine function), the points in a hole zero and a zero mask."""
    peers = importlib.import_module("darcy.peers")
    discs = holes.draw_discs(0, 2)
    points, cells = holes.holed_mesh(discs, 600)
    to_grid, _, mask = peers.grid_operators(points, 17, "cells", cells)
    grid = peers._grid(__import__("torch").as_tensor(points), 17)
    f = lambda p: 0.3 + 2.0 * p[:, 0] - 1.5 * p[:, 1]  # noqa: E731
    values = to_grid.tocsr() @ f(points)
    np.testing.assert_allclose(values[mask], f(grid[mask]), atol=1e-12)
    assert np.all(values[~mask] == 0)
    in_hole = np.zeros(len(grid), dtype=bool)
    for x, y, r in discs:
        in_hole |= np.hypot(grid[:, 0] - x, grid[:, 1] - y) < r * math.cos(math.pi / 12) - 1e-9
    assert in_hole.any() and not mask[in_hole].any()
    outside = ~in_hole
    for x, y, r in discs:
        outside &= np.hypot(grid[:, 0] - x, grid[:, 1] - y) > r + 1e-9
    assert mask[outside].all()


def test_a_process_past_the_deadline_is_killed_and_named(script, tmp_path):
    """With no time to start, the model processes are killed at the deadline, the summary names
    them with their logs' last lines, and the run ends before its deadline."""
    # the children are given 0.5 s: importing torch alone takes longer, so they are still running
    text = script.main(["--out", str(tmp_path), "--deadline", "2", "--scale", "tiny", "--device", "cpu",
                        "--workers", "1", "--races", "square", "--models", "neuralop-fno", "--finish", "1.5",
                        "--reserve", "0"])
    assert "square neuralop-fno: killed at the deadline" in text


@pytest.mark.slow
def test_both_races_run_at_a_tiny_size(script, tmp_path):
    """Both races, the three models, each in its process, on the CPU: a result for every model
    on every test mesh, the ratios to FNO and each race's merged files."""
    pytest.importorskip("neuralop")
    text = script.main(["--out", str(tmp_path), "--deadline", "55", "--scale", "tiny", "--device", "cpu",
                        "--workers", "1"])
    for race, meshes in (("square", ["train", "refined", "graded", "foreign"]), ("random_holes", ["train", "finer"])):
        merged = json.loads((tmp_path / race / "results.json").read_text())
        assert merged["domain"] == race
        rows = merged["results"]["piecewise"]["models"]
        assert set(rows) == {"multigrid", "mesh_fno", "neuralop-fno"}
        for row in rows.values():
            assert list(row["test"]) == meshes and all(0 < e < 2 for e in row["test"].values())
            assert row["epochs"] >= 1 and row["seconds_per_epoch"] > 0
        assert "| multigrid |" in (tmp_path / race / "table.md").read_text()
    assert text.count("| multigrid / FNO |") == 2 and text.count("| mesh_fno / FNO |") == 2
    assert "killed" not in text and len(text) < 8000
    assert (tmp_path / "summary.md").read_text().strip() == text.strip()
