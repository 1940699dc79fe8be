"""What the fault tests check again and again: a command refused with one line, and a folder
left byte-for-byte as it was."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from geoattn.cli.main import main
from geoattn.data.dataset import DarcyDataset


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` (hidden ones too) with its bytes: what a refused command must
    leave as it was."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(args: list[str], capsys, match: str, error: type | None = None) -> str:
    """``geoattn ARGS`` exits with code 2 and one line on stderr matching ``match``, no traceback;
    given ``error``, ``-v`` shows the traceback, ending in that error and then the same line."""
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(match, err), err
    if error is not None:
        assert main(["-v", *args]) == 2
        verbose = capsys.readouterr().err
        raised = re.findall(r"^([\w.]+): ", verbose, re.MULTILINE)
        assert "Traceback" in verbose and raised and raised[-1].rsplit(".", 1)[-1] == error.__name__, verbose
        assert verbose.splitlines()[-1] == err.strip()
    return err


def assert_same_samples(a: Path, b: Path) -> None:
    """Two dataset files hold the same samples, bit for bit."""
    da, db = DarcyDataset(a, dtype=torch.float64), DarcyDataset(b, dtype=torch.float64)
    assert len(da) == len(db)
    for i in range(len(da)):
        for key in ("x", "y", "pos", "weight", "cells"):
            assert torch.equal(da[i][key], db[i][key]), (i, key)


NEEDS_UNSHARE = pytest.mark.skipif(shutil.which("unshare") is None or not sys.platform.startswith("linux"),
                                   reason="needs unshare (Linux)")


def on_tiny_disk(disk: Path, size: str, script: str, env: dict | None = None,
                 timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the shell ``script`` where ``disk`` is a fresh tmpfs of ``size`` (``"12k"``), in a
    private mount namespace (a real full disk, no privileges needed); skip the test where this
    machine allows no unprivileged mount namespace. Use with :data:`NEEDS_UNSHARE`."""
    disk.mkdir(exist_ok=True)
    mount = f"mount -t tmpfs -o size={size} tmpfs {disk}"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", mount], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no unprivileged mount namespace here: {probe.stderr.strip()}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", f"{mount} && {script}"], capture_output=True, text=True,
                          env=env, timeout=timeout)
