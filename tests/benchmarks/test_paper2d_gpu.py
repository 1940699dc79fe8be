"""``benchmarks/paper2d_gpu.sh`` at its tiny scale on the CPU: every experiment prepares its data,
trains each of its models for its epochs and leaves its per-epoch curve, the baselines and the
device record, and the summary and the archive come out (the lent GPU then cannot fail at setup)."""

import csv
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = {"kolmogorov": ("tno", "galerkin", "vit", "fano"), "darcy": ("tno", "galerkin", "vit", "fano"),
          "inverse": ("GT", "FT"), "nao": ("NAO",)}


@pytest.mark.slow
def test_tiny_run_on_the_cpu(tmp_path):
    # python3 of the script is this interpreter
    env = {**os.environ, "SCALE": "tiny", "DEVICE": "cpu",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "paper2d_gpu.sh"), str(tmp_path), "100"], env=env,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("device: cpu torch")
    assert "Traceback" not in done.stdout and len(done.stdout) < 6000, done.stdout
    with tarfile.open(tmp_path / "results.tgz") as tar:
        names = set(tar.getnames())
        assert not any(n.endswith(".pt") for n in names)
        for experiment, models in MODELS.items():
            base = json.load(tar.extractfile(f"res/{experiment}/baselines.json"))
            assert base["device_name"] == "cpu" and base["torch"]
            for model in models:
                info = json.load(tar.extractfile(f"res/{experiment}/{model}/result.json"))
                rows = list(csv.DictReader(line.decode() for line in tar.extractfile(f"res/{experiment}/{model}/curve.csv")))
                assert info["epochs"] == len(rows) >= 1 and info["device_name"] == "cpu"
                assert all(0 < float(r["test_median"]) < 10 and float(r["seconds"]) > 0 for r in rows)
                assert f"  {model}: {len(rows)} epochs (finished)" in done.stdout
        kolmogorov = json.load(tar.extractfile("res/kolmogorov/baselines.json"))["baselines"]
        assert set(kolmogorov) == {"training mean", "identity", "Euler step"}
