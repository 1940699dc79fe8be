"""Issue 56: a full disk during ``geoattn import``, ``predict`` and ``evaluate`` is one line and
exit status 2, with nothing partial under a final name, as for ``generate``
(tests/faults/test_files.py). Simulated here (a write that fails with ``ENOSPC``, a disk that
reports no room) and, when unprivileged mount namespaces are available, on a real 12 kB file
system (slow: one process per command)."""

import errno
import os
import re
import shutil
import sys
from pathlib import Path

import meshio
import numpy as np
import pytest

import geoattn.mesh
from geoattn.cli.main import main
from geoattn.errors import OutputError

from .helpers import NEEDS_UNSHARE, on_tiny_disk, refused

ROOT = Path(__file__).resolve().parents[2]
MESH = ROOT / "meshes" / "square_irregular.vtu"


def _full(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Four simulation files, their dataset (train, val and a test set) and a model trained on it."""
    d = tmp_path_factory.mktemp("disk")
    src = meshio.read(MESH)
    p = src.points[:, :2]
    for i in range(4):
        mesh = meshio.Mesh(src.points, src.cells, point_data={"a": np.sin((1 + i) * p[:, 0]), "T": p[:, 1] * (1 + i)})
        meshio.write(d / f"s{i}.vtu", mesh)
    assert main(["import", str(d), "--x", "a", "--y", "T", "--out", str(d / "d.h5"), "--split", "0.5,0.25,0.25",
                 "--no-progress"]) == 0
    assert main(["train", str(d / "d.h5"), "--width", "8", "--depth", "1", "--epochs", "1", "--out", str(d / "run"),
                 "--no-progress"]) == 0
    return d


def test_a_full_disk_during_evaluate_of_sets_leaves_no_table(run, tmp_path, monkeypatch, capsys):
    """The set report's tables: the first written, the second fails half-way; one line, and the
    half-written table is not under its name (the other tables are whole or absent)."""
    from geoattn.eval import crossmesh

    def half_written(self, path):
        Path(path).write_text("file,error\n")
        _full()

    monkeypatch.setattr(crossmesh.SplitReport, "write_files_csv", half_written)
    out = tmp_path / "ev"
    refused(["evaluate", str(run / "run" / "last.pt"), str(run / "d.h5"), "--sets", "val,test", "--out", str(out)],
            capsys, r"cannot write \S*files.csv: No space left on device", OutputError)
    assert sorted(p.name for p in out.iterdir()) == ["sets.csv"]  # whole, and nothing else, no temporary folder


def test_predict_to_xdmf_checks_the_room_before_hdf5_writes(run, tmp_path, monkeypatch, capsys):
    """HDF5 cannot recover from a failed write (on a real full disk the XDMF companion's write
    crashed the process): the room is checked first, and nothing is written."""
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=20_000))
    refused(["predict", "--checkpoint", str(run / "run" / "last.pt"), "--mesh", str(run / "s0.vtu"), "-o",
             str(tmp_path / "p.xdmf")], capsys,
            r"cannot write \S*p.xdmf: it needs about 0.\d+ MB but \S+ has 0.02 MB free; free some space", OutputError)
    assert not list(tmp_path.iterdir())


def test_a_short_write_is_named_a_full_disk(run, tmp_path, monkeypatch, capsys):
    """NumPy's short write (meshio's binary .msh) names no cause: it is a full disk."""
    def short(path, mesh):
        Path(path).write_bytes(b"$MeshFormat")
        raise OSError("3072 requested and 1027 written")

    monkeypatch.setattr(geoattn.mesh, "save_meshio", short)
    refused(["predict", "--checkpoint", str(run / "run" / "last.pt"), "--mesh", str(run / "s0.vtu"), "-o",
             str(tmp_path / "p.msh")], capsys, r"cannot write \S*p.msh: No space left on device \(a short write: "
            "3072 requested and 1027 written\\)", OutputError)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@NEEDS_UNSHARE
@pytest.mark.parametrize("command, name, message", [
    (["predict", "--checkpoint", "{d}/run/last.pt", "--mesh", "{d}/s0.vtu", "-o", "{disk}/p.vtu"], "p.vtu",
     r"cannot write \S*p.vtu: No space left on device"),
    (["predict", "--checkpoint", "{d}/run/last.pt", "--mesh", "{d}/s0.vtu", "-o", "{disk}/p.xdmf"], "p.xdmf",
     r"cannot write \S*p.xdmf: it needs about"),
    (["predict", "--checkpoint", "{d}/run/last.pt", "--mesh", "{d}/s0.vtu", "-o", "{disk}/p.msh"], "p.msh",
     r"cannot write \S*p.msh: No space left on device"),
    (["evaluate", "{d}/run/last.pt", "{d}/d.h5", "--sets", "val,test", "--out", "{disk}/ev"], "errors.png",
     r"cannot write \S*errors.png: No space left on device"),
    (["import", "{d}", "--x", "a", "--y", "T", "--out", "{disk}/d.h5", "--no-progress"], "d.h5",
     r"cannot (create|write to) \S*d.h5: No space left on device"),
], ids=["predict-vtu", "predict-xdmf", "predict-msh", "evaluate-sets", "import"])
def test_a_real_full_disk(run, tmp_path, command, name, message):
    """On a real 12 kB file system (a tmpfs in a private mount namespace): one line, status 2, no
    crash, no traceback, and no file under the failed output's name."""
    disk = tmp_path / "disk"
    code = "import sys; from geoattn.cli.main import main; print('rc=%d' % main(sys.argv[1:]))"
    args = " ".join(a.format(d=run, disk=disk) for a in command)
    result = on_tiny_disk(disk, "12k", f"{sys.executable} -c \"{code}\" {args}; ls -AR {disk}",
                          env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"))
    text = result.stdout + result.stderr
    assert "Segmentation" not in text and "Traceback" not in text, text
    errors = [line for line in text.splitlines() if "error" in line]
    assert len(errors) == 1 and re.search(message, errors[0]), text
    listed = [line.strip() for line in text.splitlines()]
    assert "rc=2" in listed and name not in listed and not [n for n in listed if n.endswith((".tmp", ".partial"))], text
