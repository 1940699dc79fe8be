"""``benchmarks/divergence_probe.py``: the per-step record of a Burgers paper-scale run."""

from dataclasses import replace

import torch

SCRIPT = "divergence_probe"  # the ``script`` fixture (conftest.py)


def test_first_jump_is_the_first_step_above_factor_times_the_previous_epochs_median(script):
    rows = [{"epoch": 0, "stream_rms": [1.0, v]} for v in (1.0, 2.0, 3.0)]  # median 2
    rows += [{"epoch": 1, "stream_rms": [1.0, v]} for v in (19.0, 21.0, 50.0)]
    assert script.first_jump(rows, 10.0) == 4
    assert script.first_jump(rows, 20.0) == 5
    assert script.first_jump(rows, 30.0) is None


def test_probe_records_every_step_and_restores_torch(script, monkeypatch):
    """On the tiny paper preset: one row per optimiser step of the probed epochs, with one RMS
    per block, the gradient norm before clipping and the rate; torch's clip and AdamW.step are
    put back."""
    ge = script.ge
    monkeypatch.setitem(ge.SCALES["burgers"], "paper", replace(ge.SCALES["burgers"]["paper-tiny"]))
    clip, step = torch.nn.utils.clip_grad_norm_, torch.optim.AdamW.step
    rows = script.probe("FT", 64, 0.05, 2, None)
    scale = ge.SCALES["burgers"]["paper"]
    assert [(r["epoch"], r["step"]) for r in rows] == [(e, s) for e in range(2) for s in range(2)]
    assert all(len(r["stream_rms"]) == scale.depth and r["grad_norm"] > 0 and r["lr"] > 0 for r in rows)
    assert rows[0]["lr"] < rows[-1]["lr"]  # the one-cycle warm-up
    assert torch.nn.utils.clip_grad_norm_ is clip and torch.optim.AdamW.step is step
