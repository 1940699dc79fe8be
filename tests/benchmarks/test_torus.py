"""``benchmarks/torus.py``: with the declared period one spectral layer agrees between grids of the
torus to rounding and the smoothing is its multiplier; with the bounding box neither holds."""

SCRIPT = "torus"  # the ``script`` fixture (conftest.py)


def test_period_makes_the_layer_grid_independent(script):
    results = script.main(["--grids", "16", "32", "--cloud", "300", "--modes", "3"])
    before, after = results["before (period=None)"], results["after (period=1.0)"]
    # float64 rounding over 32^2 nodes is ~1e-15 (measured 4e-15): bound 1e-12
    assert after["16x16"] < 1e-12 and after["smoothing"] < 1e-12
    # the bounding box misses the period by a grid step: percents (measured 0.16 and 0.20)
    assert before["16x16"] > 0.05 and before["smoothing"] > 0.05
    # 300 random points resolve 3 modes poorly: the cloud is only reported (measured 0.16 vs 0.19)
    assert 0 < after["cloud 300"] < 1
