"""Every command that writes a dataset writes it through the guarded writer
(:func:`geoattn.atomic.guarded_h5`): a disk that fills during ``geoattn import`` is one line and
exit code 2, never a crash of HDF5, and nothing partial is left under the final name; with room
again the same command writes the whole file. (``generate``: tests/faults/test_files.py;
``predict`` and ``evaluate``: tests/faults/test_cli.py.)"""

import errno
import io
import os
import re
import sys
from pathlib import Path

import meshio
import numpy as np
import pytest

from geoattn import atomic
from geoattn.cli.main import main
from geoattn.data import meshdataset

from .helpers import NEEDS_UNSHARE, on_tiny_disk, refused

ROOT = Path(__file__).resolve().parents[2]
GUARDED = pytest.mark.skipif(not hasattr(meshdataset, "guarded_h5"),
                             reason="data/meshdataset.py does not yet write through geoattn.atomic.guarded_h5")


def _runs(folder: Path, n: int = 4) -> Path:
    mesh = meshio.read(ROOT / "meshes" / "square_irregular.vtu")
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        x = mesh.points[:, 0] * (k + 1)
        meshio.write(folder / f"run_{k}.vtu", meshio.Mesh(mesh.points, mesh.cells, point_data={"a": x, "b": 2 * x}))
    return folder


def _import(src: Path, out: Path) -> list[str]:
    return ["import", str(src), "--x", "a", "--y", "b", "--split", "0.5,0.5", "--out", str(out), "--no-progress"]


@GUARDED
@pytest.mark.parametrize("fail_after", [0, 3])
def test_a_full_disk_stops_import_with_one_line_and_nothing_partial(tmp_path, monkeypatch, capsys, fail_after):
    """The disk fills while the file is created (after 0 writes) or while samples are written:
    one line, exit code 2, no file under the final name nor a partial one; with room again the
    same command writes the whole dataset."""
    src, out = _runs(tmp_path / "src"), tmp_path / "out" / "d.h5"
    writes = []

    class FullDisk(io.FileIO):
        def write(self, data):
            writes.append(len(data))
            if len(writes) > fail_after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    guarded = atomic.GuardedFile.__init__

    def full_disk(self, path, mode):
        guarded(self, path, mode)
        self._fh.close()
        self._fh = FullDisk(path, mode.replace("b", ""))

    monkeypatch.setattr(atomic.GuardedFile, "__init__", full_disk)
    refused(_import(src, out), capsys, r"geoattn import: error: cannot (create|write to) \S*d.h5: "
                                       "No space left on device")
    monkeypatch.undo()
    assert not out.exists() and not out.with_name("d.h5.partial").exists()
    assert main(_import(src, out)) == 0
    assert len(meshdataset.MeshDataset(out)) == 4


@GUARDED
@NEEDS_UNSHARE
def test_a_real_full_disk_during_import(tmp_path):
    """On a real 64 kB file system (a tmpfs in a private mount namespace) too small for the
    dataset: one line, exit code 2, no crash (HDF5 left to itself segfaults), no file left."""
    disk = tmp_path / "disk"
    src = _runs(tmp_path / "src", 40)
    out = disk / "d.h5"
    code = f"import sys; from geoattn.cli.main import main; print('rc=%d' % main(sys.argv[1:]))"
    args = " ".join(_import(src, out))
    result = on_tiny_disk(disk, "64k", f"{sys.executable} -c \"{code}\" {args}; ls -A {disk}",
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    text = result.stdout + result.stderr
    assert "Segmentation" not in text and "Traceback" not in text, text
    errors = [line for line in text.splitlines() if "error" in line]
    assert len(errors) == 1 and re.fullmatch(r"geoattn import: error: cannot (create|write to) \S*d.h5: No space "
                                             r"left on device.*", errors[0]), text
    lines = [line.strip() for line in text.splitlines()]
    assert "rc=2" in lines and "d.h5" not in lines and "d.h5.partial" not in lines, text
