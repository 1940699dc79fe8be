"""``benchmarks/darcy_generation.py --factorisation``: the benchmark mesh and its refinement, each
factored in both orders of the interior nodes, with the fill of a sparse 2-D factorisation."""

SCRIPT = "darcy_generation"  # the ``script`` fixture (conftest.py)


def test_factorisation_times_both_orders(script):
    rows = script.factorisation("lognormal", refinements=[0, 1], natural_up_to=10_000)
    assert [r["nodes"] for r in rows] == [1089, 4225]  # unit_square(32) and its first refinement
    for r in rows:
        assert r["rcm_s"] > 0 and r["sorted_s"] > 0
        # a fill-reducing factorisation of a 2-D stiffness matrix: far below dense, above the matrix
        assert 7 * r["unknowns"] < r["rcm_fill"] < 0.1 * r["unknowns"] ** 2
        assert 0.5 < r["sorted_fill"] / r["rcm_fill"] < 2  # both minimum degree: the same order of fill
