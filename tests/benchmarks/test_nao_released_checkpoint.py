"""``benchmarks/nao_released_checkpoint.py``: the authors' radial forward pass, reimplemented."""

import math

import pytest
import torch

from geoattn.nao import RadialKernelProblem, sine_kernel

SCRIPT = "nao_released_checkpoint"  # the ``script`` fixture (conftest.py)


def _state(d: int, dk: int, layers: int = 2) -> dict:
    """A state dict with the released files' keys and random weights."""
    g = torch.Generator().manual_seed(1)
    state = {}
    for name in ("kernel", "fnw", "fnb"):
        for i, (a, b) in zip((0, 2, 4), ((1, 32), (32, 64), (64, 1))):
            state[f"{name}.layers.{i}.weight"] = torch.randn(b, a, generator=g, dtype=torch.float64) / math.sqrt(a)
            state[f"{name}.layers.{i}.bias"] = 0.1 * torch.randn(b, generator=g, dtype=torch.float64)
    for j in range(layers):
        for m in ("fcq", "fck"):
            state[f"{m}_{j}_0.weight"] = torch.randn(dk, d, generator=g, dtype=torch.float64) / math.sqrt(d)
            state[f"{m}_{j}_0.bias"] = 0.1 * torch.randn(dk, generator=g, dtype=torch.float64)
    return state


def test_the_kernel_in_physical_units_is_the_prediction_up_to_an_offset(script):
    """The prediction is decoded from normalised units, with means: it must equal the kernel's
    Riemann sum on the raw loadings, sum_g dr K(r_g) g(r_g, x_j), plus the offset
    c = mu_f - mu_u sum_g dr K(r_g), the same for every feature j. A kernel read off without the
    factors std_f / std_u or h / dr fails this."""
    prob = RadialKernelProblem(dx=0.1)
    s = prob.samples(sine_kernel(3.0), 20)
    normaliser = tuple(torch.tensor(v, dtype=torch.float64) for v in (0.03, 0.7, -0.02, 0.4))
    model = script.ReleasedNAO(_state(20, 4), (0.3, -0.6, 0.2), normaliser)
    with torch.no_grad():
        pred, K = model(s)
    dr = s.mesh.weight[0]
    riemann = torch.einsum("sg,g,sgd->sd", K, dr, s.u)
    offset = normaliser[2] - normaliser[0] * (K * dr).sum(1)
    torch.testing.assert_close(pred[:, 0], riemann + offset[:, None], rtol=1e-10, atol=1e-12)
    assert float(K.abs().max()) > 0 and float(offset.abs().max()) > 0


def test_constants_are_the_draws_after_the_networks(script):
    """Replayed after ``manual_seed``: kappa is the draw after the W^P network's three float32
    layers (as the authors' constructor builds them), and another seed gives other constants."""
    kappa, gamma, beta = script.replayed_constants(0)
    assert (kappa, gamma, beta) == script.replayed_constants(0)
    assert script.replayed_constants(1) != (kappa, gamma, beta)
    torch.manual_seed(0)
    torch.nn.Linear(1, 32), torch.nn.Linear(32, 64), torch.nn.Linear(64, 1)
    assert float(torch.randn(1)) == kappa


def test_a_file_that_is_not_a_released_model_is_refused(script, tmp_path):
    bad = tmp_path / "other.ckpt"
    torch.save({"w": torch.zeros(2)}, bad)
    with pytest.raises(SystemExit):
        script.main(["--checkpoint", str(bad)])
    with pytest.raises(SystemExit):
        script.main(["--checkpoint", str(tmp_path / "absent.ckpt")])
