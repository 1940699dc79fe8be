"""``benchmarks/kolmogorov.py`` on a tiny setting (the full run is a benchmark)."""

import math

import pytest
import torch

from problems.navier_stokes import LENGTH, evaluate


SCRIPT = "kolmogorov"  # the ``script`` fixture (conftest.py)


def test_discretisations_carry_the_same_pairs(script):
    scale = script.SCALES["tiny"]
    torch.set_num_threads(1)
    coefficients = script.pairs(scale, seed=0, device="cpu")
    where = script.discretisations(scale, seed=0)
    assert list(where)[0] == "grid"
    for name, w in where.items():
        # every set's weights integrate 1 over the torus exactly
        assert math.isclose(float(w["weight"].sum()), LENGTH**2, rel_tol=1e-9), name
        data = script.samples_on(coefficients, w, slice(1, 2))[0]
        torch.testing.assert_close(data.y[:, 0], evaluate(coefficients["second"][1:2], w["pos"])[0].to(data.y.dtype))
    # node-average weights are the quadrature weights on a uniform grid, not on the graded points
    grid, graded = where["grid"]["weight"], where["graded"]["weight"]
    assert torch.allclose(grid, grid.mean().expand_as(grid))
    assert float(graded.max() / graded.min()) > 10


def test_tiny_run_scores_every_model_on_every_set(script, tmp_path, capsys):
    results = script.main(["--scale", "tiny", "--models", "galerkin", "tno", "--device", "cpu",
                          "--out", str(tmp_path), "--figure", str(tmp_path / "k.png")])
    out = capsys.readouterr().out
    assert "| galerkin | quadrature |" in out and "| identity |" in out and "1.07e-02" in out
    for name in ("galerkin", "tno"):
        errors = results["models"][name]["errors"]
        assert set(errors) == {"grid", "grid x1.5", "uniform", "graded", "patchy", "graded x4"}
        for per_set in errors.values():
            assert all(math.isfinite(e) and e > 0 for e in per_set["weighted"] + per_set["node_average"])
        # uniform grid: the node average is the quadrature, so the ablation changes nothing there
        assert errors["grid"]["weighted"] == pytest.approx(errors["grid"]["node_average"], rel=1e-5)
    assert (tmp_path / "results.json").exists() and (tmp_path / "table.md").exists()
    assert (tmp_path / "k.png").stat().st_size > 1000


@pytest.mark.slow
def test_physics_baselines_are_first_and_second_order_in_the_interval(script):
    """At T = 11, where the flow is developed: over an interval dt, the identity misses the
    increment (error ~ dt), the exact linear part misses the advection (also ~ dt) and one
    explicit Euler step of the whole equation only its local truncation (~ dt^2): halving dt
    halves the first two and quarters the third."""
    from dataclasses import replace

    errors = {}
    for dt in (0.02, 0.01):
        scale = replace(script.SCALES["tiny"], time=11.0, interval=dt, solver_dtype="float64")
        coefficients = script.pairs(scale, seed=0, device="cpu")
        where = {"grid": script.discretisations(scale, seed=0)["grid"]}
        rows = slice(0, scale.n_train + scale.n_test)
        tests = {"grid": script.samples_on(coefficients, where["grid"], rows)}
        found = script.physics_errors(coefficients, where, rows, scale, tests)
        found["identity"] = script.identity_errors(tests)
        errors[dt] = {k: sum(v["grid"]) / len(v["grid"]) for k, v in found.items()}
    ratio = {k: errors[0.02][k] / errors[0.01][k] for k in errors[0.02]}
    assert ratio["identity"] == pytest.approx(2, rel=0.1)
    assert ratio["linear part"] == pytest.approx(2, rel=0.1)
    assert ratio["Euler step"] == pytest.approx(4, rel=0.1)
    assert errors[0.01]["Euler step"] < 0.1 * errors[0.01]["identity"]


def test_patched_models_take_the_papers_modes_where_their_patches_resolve_them(script):
    """FANO 9 and ViT-NO 12 modes per axis (the paper's) where 16 patches resolve them (416^2:
    25), the resolved modes below that (the cpu scale's 32^2 grid: 1)."""
    gpu, cpu = script.SCALES["gpu"], script.SCALES["cpu"]
    assert script.model_kwargs("fano", gpu, 416 ** 2)["modes"] == 9
    assert script.model_kwargs("vit", gpu, 416 ** 2)["modes"] == 12
    assert script.model_kwargs("fano", cpu, 32 ** 2)["modes"] == 1
    assert script.model_kwargs("fano", cpu, 152 ** 2)["modes"] == 9  # the smallest square grid for 9
    assert script.model_kwargs("fano", cpu, 150 ** 2)["modes"] == 8


def test_global_spectral_layers_take_the_resolved_modes_up_to_max_modes(script):
    """The global spectral layers (``mesh_fno``'s modes, Galerkin's decoder, the patched models'
    Remark 21 layer) take the modes the nodes resolve, at most ``max_modes``: 12 by default (the
    paper's FNO); the 64^2 grid resolves 15 (``(2 (2K + 1))^2 <= 4096``), 61^2 only 14."""
    from dataclasses import replace

    cpu = script.SCALES["cpu"]
    assert script.model_kwargs("mesh_fno", cpu, 64 ** 2)["modes"] == 12
    wide = replace(cpu, max_modes=32)
    assert script.model_kwargs("mesh_fno", wide, 64 ** 2)["modes"] == 15
    assert script.model_kwargs("mesh_fno", wide, 61 ** 2)["modes"] == 14
    assert script.model_kwargs("galerkin", wide, 64 ** 2, period=1.0)["spectral"] == {"modes": 15, "period": 1.0}
    assert script.model_kwargs("fano", wide, 64 ** 2, period=1.0)["final_modes"] == 15


def test_a_run_kept_before_a_scale_setting_existed_resumes_at_its_default(script, tmp_path):
    """A run.json written before ``max_modes`` was a scale setting resumes when the setting has
    its default (the value that run used) and is refused with another one."""
    import json
    from dataclasses import asdict, replace

    scale = script.SCALES["tiny"]
    defaults = {"max_modes": 12}
    settings = {"model": "tno", "kwargs": {}, "scale": asdict(scale), "h1": True, "seed": 0}
    old = json.loads(json.dumps(settings))
    del old["scale"]["max_modes"]
    (tmp_path / "run.json").write_text(json.dumps(old))
    script.check_run_settings(tmp_path, settings, defaults)
    (tmp_path / "run.json").write_text(json.dumps(old))
    other = {**settings, "scale": asdict(replace(scale, max_modes=15))}
    with pytest.raises(script.ConfigError, match="other settings"):
        script.check_run_settings(tmp_path, other, defaults)


def test_runs_resume_and_record_the_test_error_of_every_epoch(script, tmp_path):
    """With --out each model's run is kept: the curve holds one test error per epoch, its last
    point is the table's grid error (the same pairs, the same metric, the input plus the learned
    increment), and the same command again trains nothing more and reads the same numbers."""
    argv = ["--scale", "tiny", "--models", "tno", "--device", "cpu", "--epochs", "2", "--out", str(tmp_path),
            "--curves", str(tmp_path / "curves.png"), "--docs", str(tmp_path / "page.md")]
    first = script.main(argv)["models"]["tno"]
    assert first["target"] == "increment"
    assert [epoch for epoch, _ in first["curve"]] == [1, 2]
    grid = sorted(first["errors"]["grid"]["weighted"])
    assert first["curve"][-1][1] == pytest.approx((grid[0] + grid[1]) / 2, rel=1e-5)  # the median of 2
    assert (tmp_path / "tno" / "last.pt").exists() and (tmp_path / "curves.png").stat().st_size > 1000
    page = (tmp_path / "page.md").read_text()
    assert "![learning curves](curves.png)" in page and "| tno | 2 |" in page
    again = script.main(argv)["models"]["tno"]
    assert again["curve"] == first["curve"] and again["train_seconds"] == first["train_seconds"]
    assert again["errors"] == first["errors"]
    beside = script.main(argv[:4] + ["galerkin"] + argv[4:])["models"]  # another model beside it: tno resumed
    assert beside["tno"]["curve"] == first["curve"] and set(beside) == {"tno", "galerkin"}
    with pytest.raises(script.ConfigError, match="other settings"):  # not resumed with other sizes
        script.main(argv[:-6] + ["--width", "12", "--out", str(tmp_path)])


def test_energy_above_counts_each_mode_with_its_conjugate_and_its_h1_weight(script):
    """omega(T) = one mode k = (2, 0); omega(T + dt) doubles it and adds k = (-9, 4), stored once
    for the pair +-k of the real FFT: above 7 modes the increment holds 2 / 3 of the squared L2
    norm (1 for (2, 0), 2 for the pair) and 2 * 98 / (5 + 2 * 98) of the H1 norm (weights 1 + |k|^2)."""
    n = 32
    first = torch.zeros(1, n, n // 2 + 1, dtype=torch.complex128)
    first[0, 2, 0] = 1.0
    second = 2 * first
    second[0, -9, 4] = 1.0
    shares = script.energy_above({"first": first, "second": second}, slice(0, 1), (1, 7, 9))
    assert shares["omega(T), L2"] == pytest.approx([1.0, 0.0, 0.0])
    assert shares["increment, L2"] == pytest.approx([1.0, 2 / 3, 0.0])
    assert shares["increment, H1"] == pytest.approx([1.0, 196 / 201, 0.0])
