"""``benchmarks/fourier_quadrature.py``: both quadratures of the Fourier coefficients converge at
second order under refinement, and the P1 integral beats the nodal one on the graded mesh."""

SCRIPT = "fourier_quadrature"  # the ``script`` fixture (conftest.py)


def test_nodal_and_p1_coefficients_converge_at_second_order(script):
    results = script.main(["--mesh-n", "8", "--modes", "2", "--refine", "2"])
    train, refined = results["train@2"], results["refined@2"]
    assert refined["nodes"] == 289 and train["nodes"] == 81
    # halving the edge divides both errors by about 4 (second-order quadrature and interpolation)
    assert 3.0 < train["nodal"] / refined["nodal"] < 6.0
    assert 3.0 < train["p1"] / refined["p1"] < 6.0
    graded = results["graded@2"]
    assert graded["p1"] < 0.5 * graded["nodal"]


def test_the_run_leaves_the_default_dtype_alone(script):
    import torch

    before = torch.get_default_dtype()
    script.main(["--mesh-n", "4", "--modes", "1", "--refine", "1"])
    assert torch.get_default_dtype() == before
