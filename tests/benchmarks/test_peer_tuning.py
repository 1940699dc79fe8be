"""FNO tuned on a validation split (``benchmarks/darcy/tuning.py``) at the tiny scale: the split, the
candidates trained through the race's path and scored on the held-out samples, the cache, and
``benchmarks/geometry_input.py --tune-peer``."""

import math
from dataclasses import replace

import pytest

from darcy import tuning
from darcy.race import SCALES, race_data

SCRIPT = "geometry_input"
DOMAIN = "random_holes"


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("neuralop")
    scale = replace(SCALES["tiny"], n_train=5)  # an 8 x 8 grid: modes up to 4
    return scale, race_data("piecewise", scale, 0, DOMAIN)


@pytest.mark.parametrize("n, holdout, held", [(2, 0.2, 1), (5, 0.2, 1), (10, 0.2, 2), (10, 0.5, 5), (3, 0.9, 2)])
def test_split_holds_out_the_last_samples(n, holdout, held):
    """The last ``round(holdout * n)`` samples (at least 1, at most n - 1), the same on every call,
    disjoint from the fit part, and the two together are the samples in their order."""
    samples = list(range(n))
    fit, val = tuning.split(samples, holdout)
    assert val == samples[n - held:] and fit == samples[:n - held]
    assert tuning.split(samples, holdout) == (fit, val)


def test_split_refuses_too_few_samples_or_a_bad_fraction():
    with pytest.raises(ValueError, match="at least 2"):
        tuning.split([0], 0.2)
    with pytest.raises(ValueError, match="holdout"):
        tuning.split([0, 1, 2], 1.0)


def test_each_candidate_is_trained_on_the_fit_part_and_scored_on_the_held_out_part(tiny, monkeypatch, tmp_path):
    """Every (modes, width) within the grid is raced alone through run_family with its own peer
    configuration (the default's grid, depth and mask), on the fit part, tested on the held-out
    part; modes above s // 2 are recorded as skipped; the best is the lowest validation error."""
    scale, data = tiny
    calls, real = [], tuning.run_family

    def spy(family, budget, names, device, **kw):
        calls.append((budget, names, kw))
        return real(family, budget, names, device, **kw)

    monkeypatch.setattr(tuning, "run_family", spy)
    out = tuning.select_peer(data, scale, DOMAIN, None, modes=(2, 3, 5), widths=(4, 8), family="piecewise",
                             cache=tmp_path)
    fit, val = data["train"][:4], data["train"][4:]
    assert [(kw["peer"]["modes"], kw["peer"]["width"]) for _, _, kw in calls] == [(2, 4), (2, 8), (3, 4), (3, 8)]
    for budget, names, kw in calls:
        assert names == ["neuralop-fno"] and budget.epochs == scale.epochs and budget.seconds is None
        assert kw["peer"] == dict(grid=8, modes=kw["peer"]["modes"], width=kw["peer"]["width"], depth=4, domain="cells", dim=2)
        assert kw["data"]["train"] == fit and kw["data"]["test"]["validation"] == val and kw["data"]["val"] is None
    scored = [c for c in out["candidates"] if "val_error" in c]
    assert len(scored) == 4 and all(math.isfinite(c["val_error"]) and c["epochs"] == scale.epochs for c in scored)
    skipped = [c for c in out["candidates"] if "skipped" in c]
    assert [(c["modes"], c["width"]) for c in skipped] == [(5, 4), (5, 8)]
    assert all("s // 2 = 4" in c["skipped"] for c in skipped)
    best = min(scored, key=lambda c: c["val_error"])
    assert out["best"] == dict(grid=8, modes=best["modes"], width=best["width"], depth=4, domain="cells", dim=2)
    assert (out["fit_samples"], out["val_samples"]) == (4, 1)

    def trained_again(*args, **kwargs):
        raise AssertionError("a cached selection was trained again")

    monkeypatch.setattr(tuning, "run_family", trained_again)
    assert tuning.select_peer(data, scale, DOMAIN, None, modes=(2, 3, 5), widths=(4, 8), family="piecewise",
                              cache=tmp_path) == out
    # a setting at its default (as one the race gains later) is the same selection; another value is not
    assert tuning.select_peer(data, replace(scale, between_nodes=None), DOMAIN, None, modes=(2, 3, 5),
                              widths=(4, 8), family="piecewise", cache=tmp_path) == out
    with pytest.raises(AssertionError, match="trained again"):
        tuning.select_peer(data, replace(scale, between_nodes=1.0), DOMAIN, None, modes=(2, 3, 5), widths=(4, 8),
                           family="piecewise", cache=tmp_path)
    with pytest.raises(AssertionError, match="trained again"):  # another budget is another selection
        tuning.select_peer(data, scale, DOMAIN, 0.1, modes=(2, 3, 5), widths=(4, 8), family="piecewise",
                           cache=tmp_path)


def test_the_lowest_validation_error_wins_and_failures_are_recorded(tiny, monkeypatch):
    """With run_family's answers made up: the candidate of least validation error is selected, a
    candidate that failed is recorded with its error, and a budget in seconds is the trainer's."""
    scale, data = tiny
    errors = {(2, 4): 0.5, (2, 8): 0.3, (3, 4): None, (3, 8): 0.4}
    budgets = []

    def fake(family, budget, names, device, peer, **kw):
        budgets.append(budget)
        e = errors[peer["modes"], peer["width"]]
        if e is None:
            return {"models": {}, "failed": {"neuralop-fno": "RuntimeError: diverged"}}
        row = {"test": {"train": e, "validation": e}, "train_error": 0.1, "epochs": 3, "train_seconds": 0.2}
        return {"models": {"neuralop-fno": row}, "failed": {}}

    monkeypatch.setattr(tuning, "run_family", fake)
    out = tuning.select_peer(data, scale, DOMAIN, 2.5, modes=(2, 3), widths=(4, 8))
    assert (out["best"]["modes"], out["best"]["width"]) == (2, 8)
    assert out["candidates"][2] == {"modes": 3, "width": 4, "skipped": "RuntimeError: diverged"}
    assert all(b.seconds == 2.5 and b.ensemble == 1 and not b.refine_data for b in budgets)


@pytest.mark.slow
def test_geometry_input_races_the_selected_fno_and_names_it(load_script, tmp_path, tiny):
    """``--tune-peer`` at the tiny scale: the selection is kept in OUT, FNO's runs carry it, the page
    names the selected configuration and lists every candidate; a rerun trains nothing."""
    script = load_script(SCRIPT)
    page = tmp_path / "page.md"
    argv = ["--scale", "tiny", "--seeds", "0", "--epochs", "1", "--out", str(tmp_path / "runs"), "--docs", str(page),
            "--tune-peer", "0.2", "--tune-modes", "2", "3", "5", "--tune-widths", "8"]
    runs = script.main(argv)
    fno = next(r for r in runs if r["model"] == "neuralop-fno")
    best = fno["tuning"]["best"]
    assert best["modes"] in (2, 3) and best["width"] == 8 and len(fno["tuning"]["candidates"]) == 3
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "runs").iterdir()) == ["peer"] + ["piecewise"] * 3
    text = page.read_text()
    assert f"| piecewise | neuralop-fno (tuned: modes {best['modes']}, width 8) |" in text
    assert "| piecewise | 5 | 8 | skipped: modes above s // 2 = 4 of the 8-point grid |" in text
    assert text.count("| selected |") == 1
    assert script.main(argv) == runs  # kept runs are read, not trained again
