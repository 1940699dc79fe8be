"""``benchmarks/darcy_calvello.py`` on a tiny setting (the full run is a benchmark)."""

import math

import numpy as np
import pytest


SCRIPT = "darcy_calvello"  # the ``script`` fixture (conftest.py)


def test_boundary_refined_mesh_keeps_the_square_and_grades_by_the_stated_ratio(script):
    mesh = script.boundary_refined(20, 0.6)
    p = mesh.points[:, :2]
    assert p.min() == 0.0 and p.max() == 1.0
    x = np.unique(p[:, 0])
    steps = np.diff(x)
    # the map's derivative 1 - 0.6 cos(2 pi s): cells 0.4 / 1.6 = 1/4 of the middle ones at the boundary
    assert steps[0] / steps[len(steps) // 2] == pytest.approx(0.25, rel=0.05)
    assert steps.sum() == pytest.approx(1.0)


def test_targets_are_the_reference_solution_on_every_mesh(script):
    scale = script.SCALES["tiny"]
    meshes = script.benchmark_meshes(scale.grid)
    values = script.solutions(scale, meshes, seed=0)
    # the training grid's nodes are reference nodes (12 = 2 x 6): the interpolated target is the
    # reference solution there, and the lumped-weight integral of 1 is the area on every mesh
    from geoattn.data.darcy import DarcyProblem
    from geoattn.mesh import families
    from problems.calvello import calvello_coefficient

    reference = DarcyProblem(families.unit_square(scale.reference))
    u = reference.solve(calvello_coefficient(0, 1, "lognormal"))
    ref_nodes = {tuple(np.round(q, 12)): i for i, q in enumerate(reference.nodes)}
    grid = meshes["grid"].points[:, :2]
    index = [ref_nodes[tuple(np.round(q, 12))] for q in grid]
    np.testing.assert_allclose(values["grid"]["y"][1].numpy(), u[index], rtol=1e-10, atol=1e-14)
    samples = script.samples(meshes, values, slice(0, 2))
    for name, data in samples.items():
        assert math.isclose(float(data[0].weight.sum()), 1.0, rel_tol=1e-6), name
        assert float(data[1].x.min()) > 0  # lognormal


def test_tiny_run(script, tmp_path, capsys):
    results = script.main(["--scale", "tiny", "--device", "cpu", "--out", str(tmp_path),
                          "--figure", str(tmp_path / "d.png")])
    out = capsys.readouterr().out
    assert "| tno | quadrature |" in out and "| P1 solve on the mesh |" in out and "1.19e-02" in out
    assert "| training mean |" in out
    errors = results["models"]["tno"]["errors"]
    assert set(errors) == {"grid", "grid x1.5", "irregular", "boundary", "graded"}
    assert all(math.isfinite(e) for per in errors.values() for e in per["weighted"] + per["node_average"])
    assert (tmp_path / "d.png").stat().st_size > 1000 and (tmp_path / "results.json").exists()
