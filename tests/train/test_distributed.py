import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from geoattn.train import load_operator

HERE = Path(__file__).parent

SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import torch
from toy_operator import toy_samples
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, init_distributed
init_distributed()
torch.manual_seed(0)
op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
Trainer(op, {out!r}, epochs=2, batch_size=4, lr=1e-2, progress=False).fit(toy_samples())
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_two_process_torchrun_matches_single_process(tmp_path):
    for name, launcher in (("single", [sys.executable]),
                           ("ddp", ["torchrun", "--standalone", "--nproc_per_node=2"])):
        script = tmp_path / f"{name}.py"
        script.write_text(textwrap.dedent(SCRIPT.format(here=str(HERE), out=str(tmp_path / name))))
        proc = subprocess.run(launcher + [str(script)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
    single = load_operator(tmp_path / "single" / "last.pt").state_dict()
    ddp = load_operator(tmp_path / "ddp" / "last.pt").state_dict()
    for key, value in single.items():
        assert torch.allclose(value, ddp[key], rtol=1e-4, atol=1e-6), key
    rows = [(tmp_path / name / "metrics.csv").read_text().splitlines()[1:] for name in ("single", "ddp")]
    for a, b in zip(*rows):  # the epoch's mean training error, gathered over both processes
        assert abs(float(a.split(",")[1]) - float(b.split(",")[1])) < 1e-5


def test_backend_follows_the_device(monkeypatch):
    """NCCL only for a model on CUDA: a CPU run on a machine with GPUs joins with gloo."""
    import torch.distributed as dist

    from geoattn.train import init_distributed

    chosen = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", chosen.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: chosen.append(str(device)))
    assert init_distributed(torch.device("cpu")) and chosen == ["gloo"]
    chosen.clear()
    assert init_distributed() and chosen == ["cuda:1", "nccl"]  # default: this process's GPU
    chosen.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert init_distributed() and chosen == ["gloo"]
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not init_distributed("cuda")
