"""``benchmarks/darcy_floor.py``: the Monte Carlo correction and the floors' ordering on a tiny setting."""

import numpy as np
import pytest


SCRIPT = "darcy_floor"  # the ``script`` fixture (conftest.py)


@pytest.fixture(scope="module")
def tiny(script, tmp_path_factory):
    out = tmp_path_factory.mktemp("floor")
    return script.main(["--scale", "tiny", "--draws", "6", "--out", str(out)]), out


def test_correction_recovers_the_error_of_the_exact_mean(script):
    """Draws and truth from one law N(mu, s^2 I): the corrected error of the mean of M draws has,
    in mean square, the error of mu itself (without the correction it is (1 + 1/M) times larger)."""
    rng = np.random.default_rng(0)
    n, m, trials = 50, 4, 3000
    mu, weight = rng.uniform(1, 2, n), rng.uniform(0.5, 1, n)
    got, exact, raw = [], [], []
    for _ in range(trials):
        truth = mu + 0.1 * rng.standard_normal(n)
        draws = mu + 0.1 * rng.standard_normal((m, n))
        norm = (weight * truth**2).sum()
        got.append(script.corrected_errors(draws, truth, weight) ** 2)
        exact.append((weight * (mu - truth) ** 2).sum() / norm)
        raw.append((weight * (draws.mean(0) - truth) ** 2).sum() / norm)
    se = np.std(got) / np.sqrt(trials)
    assert abs(np.mean(got) - np.mean(exact)) < 4 * se
    assert np.mean(raw) / np.mean(exact) == pytest.approx(1 + 1 / m, rel=0.05)
    # the spread of the draws estimates the same mean square without the truth
    spread = [script.spread_errors(mu + 0.1 * rng.standard_normal((m, n)), mu + 0.1 * rng.standard_normal(n),
                               weight) ** 2 for _ in range(trials)]
    assert abs(np.mean(spread) - np.mean(exact)) < 4 * np.std(spread) / np.sqrt(trials) + 4 * se


def test_lag_one_correlation_tells_independent_draws_from_a_slow_chain(script):
    rng = np.random.default_rng(0)
    independent = rng.standard_normal((400, 30))
    walk = np.cumsum(rng.standard_normal((400, 30)), axis=0)
    walk[:, 0] = 1.0  # a node without spread (a boundary node) is left out
    assert abs(script.lag_one_correlation(independent)) < 0.1
    assert script.lag_one_correlation(walk) > 0.9


@pytest.mark.slow
def test_floors_order_as_the_information(tiny):
    """More nodes tell more: the refined mesh's floor is below the training mesh's it contains.
    Signs tell less than values: the piecewise floor conditioned on signs is above the floor
    conditioned on the field's values (the same draws' law with more information)."""
    result, out = tiny
    floors = result["floors"]
    for family in ("lognormal", "piecewise"):
        f = floors[family]
        assert all(0 < r["mean"] <= r["rms"] and 0 < r["spread"]["mean"] <= r["spread"]["rms"] for r in f.values())
        assert f["refined"]["mean"] < f["train"]["mean"]
        assert len(f["train"]["samples"]) == 2  # the tiny scale's test samples
    assert (out / "floors.md").exists() and (out / "floors.json").exists()


def test_signs_tell_less_than_values(script):
    scale = script.SCALES["tiny"]
    meshes = script.benchmark_meshes(scale.mesh_n)
    field = script.coefficient_field(meshes)
    nodes = meshes["train"].points[:, :2]
    truth = field.sample(0, scale.n_train)
    rng = np.random.default_rng(0)
    far = np.random.default_rng(1).uniform(0, 1, (200, 2))
    spread = {}
    for family in ("lognormal", "piecewise"):
        draws = script.conditional_draws(field, family, truth, nodes, rng, 16, burn=10, thin=1)
        spread[family] = np.mean(np.std([d(far) for d in draws], axis=0))
        if family == "lognormal":  # the values: every draw takes them at the nodes
            for d in draws:
                np.testing.assert_allclose(d(nodes), truth(nodes), atol=1e-6 * np.abs(truth(nodes)).max())
        else:  # the signs: every draw keeps them
            for d in draws:
                np.testing.assert_array_equal(d(nodes) >= 0, truth(nodes) >= 0)
    # values tell more than signs, and signs more than nothing (the prior's spread)
    prior = np.mean(np.sqrt(np.diag(field.covariance(far, far))))
    assert spread["lognormal"] < spread["piecewise"] < 0.8 * prior, (spread, prior)


def test_bad_arguments_are_refused(script):
    with pytest.raises(SystemExit):
        script.main(["--draws", "1"])
    with pytest.raises(ValueError, match="unknown family"):
        script.conditional_draws(None, "smooth", None, None, None, 2, 1, 1)
    for bad in (["--sampler", "gibbs"], ["--thin", "0"], ["--burn", "-1"]):
        with pytest.raises(SystemExit):
            script.main(bad)
    meshes = script.benchmark_meshes(script.SCALES["tiny"].mesh_n)
    field = script.coefficient_field(meshes)
    with pytest.raises(ValueError, match="unknown sampler"):
        script.conditional_draws(field, "piecewise", field.sample(0, 0), meshes["train"].points[:, :2],
                                 np.random.default_rng(0), 2, 1, 1, sampler="gibbs")


def test_race_sizes_reach_the_floor(script):
    """``--mesh-n`` and ``--n-train`` pick the race's training mesh and its test samples (those after
    the training samples), as ``darcy_compare.py`` does."""
    result = script.main(["--scale", "tiny", "--mesh-n", "4", "--n-train", "1", "--n-test", "1", "--draws", "2",
                          "--families", "lognormal", "--meshes", "train"])
    floor = result["floors"]["lognormal"]
    assert list(floor) == ["train"]
    assert floor["train"]["nodes"] == len(script.benchmark_meshes(4)["train"].points)
    assert len(floor["train"]["samples"]) == 1
    with pytest.raises(SystemExit):
        script.main(["--scale", "tiny", "--mesh-n", "0"])


def test_transfer_bound_splits_the_error_into_floor_and_excess(script):
    """A model that keeps its excess over the floor on every sample (``e_g^2 = e_t^2 - f_t^2 +
    f_g^2``) has excess ratio 1 and its own ratio as ``kept``; one whose excess doubles has excess
    ratio 2 and keeps ``kept``; a floor above the error counts as no excess."""
    rng = np.random.default_rng(0)
    f_t, f_g = rng.uniform(0.005, 0.01, 40), rng.uniform(0.01, 0.02, 40)
    e_t = np.sqrt(f_t**2 + rng.uniform(0.01, 0.02, 40) ** 2)
    floors = {"train": f_t, "graded": f_g}
    same = script.transfer_bound({"train": e_t, "graded": np.sqrt(e_t**2 - f_t**2 + f_g**2)}, floors)
    assert same["train"]["excess_ratio"] == pytest.approx(1.0) and same["train"]["kept"] == pytest.approx(1.0)
    assert same["graded"]["excess_ratio"] == pytest.approx(1.0)
    assert same["graded"]["kept"] == pytest.approx(same["graded"]["ratio"])
    assert same["graded"]["ratio"] > 1.05  # the floor alone moves the ratio
    double = script.transfer_bound({"train": e_t, "graded": np.sqrt(f_g**2 + 4 * (e_t**2 - f_t**2))}, floors)
    assert double["graded"]["excess_ratio"] == pytest.approx(2.0)
    assert double["graded"]["kept"] == pytest.approx(same["graded"]["kept"])
    below = script.transfer_bound({"train": e_t, "graded": f_g / 2}, floors)
    assert below["graded"]["excess"] == 0.0
    with pytest.raises(ValueError, match="same test samples"):
        script.transfer_bound({"train": e_t, "graded": e_t[:5]}, floors)


def test_transfer_intervals_cover_the_population_ratio(script):
    """The bootstrap intervals of the ratios: the training mesh's is exactly 1, each holds its point
    estimate, and over repeated test sets of 40 samples from one population they cover the
    population's ratio of mean errors about 95 % of the time."""
    rng = np.random.default_rng(1)

    def draw(n):
        f_t, f_g = rng.uniform(0.005, 0.01, n), rng.uniform(0.01, 0.02, n)
        e_t = np.sqrt(f_t**2 + rng.uniform(0.01, 0.03, n) ** 2)
        e_g = np.sqrt(f_g**2 + (e_t**2 - f_t**2) * rng.uniform(0.5, 2.5, n))
        return {"train": e_t, "graded": e_g}, {"train": f_t, "graded": f_g}

    big = draw(400_000)[0]
    truth = big["graded"].mean() / big["train"].mean()
    covered = 0
    for trial in range(200):
        errors, floors = draw(40)
        out = script.transfer_bound(errors, floors, resamples=500, seed=trial)
        assert out["train"]["ratio_ci"] == pytest.approx([1.0, 1.0])
        lo, hi = out["graded"]["ratio_ci"]
        assert lo <= out["graded"]["ratio"] <= hi
        assert out["graded"]["kept_ci"][0] <= out["graded"]["kept"] <= out["graded"]["kept_ci"][1]
        covered += lo <= truth <= hi
    assert 0.88 <= covered / 200 <= 0.99, covered


def test_transfer_table_reads_a_race_and_its_floor(script, load_script, tiny, tmp_path):
    """``--transfer FLOORS_JSON RESULTS_JSON``: the race's per-sample errors (its test samples are
    the floor's) against both floor estimates; a score the race did not keep is refused."""
    _, floor_out = tiny
    load_script("darcy_compare").main(["--scale", "tiny", "--families", "lognormal", "--models", "mesh_fno",
                                       "--reference-targets", "--out", str(tmp_path)])
    text = script.main(["--transfer", str(floor_out / "floors.json"), str(tmp_path / "results.json")])["transfer"]
    assert "**lognormal**, `mesh_fno` (test_reference)" in text
    assert all(f"| {mesh} |" in text for mesh in ("train", "refined", "graded", "foreign"))
    with pytest.raises(SystemExit):
        script.main(["--transfer", str(floor_out / "floors.json"), str(tmp_path / "results.json"),
                     "--scores", "test_resolved"])
