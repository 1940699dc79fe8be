"""Nothing silently wrong in files: a checkpoint with a flipped bit or of a newer format, an
ensemble with a member missing or unfinished, a dataset whose mesh moved, a read-only output, a
symbolic link loop and a disk that fills up during `geoattn generate` are each refused with one
line (exit code 2) naming the file and the problem; nothing is written or lost, and a generation
stopped by a full disk resumes to the same samples as an uninterrupted one."""

import errno
import io
import logging
import os
import re
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import h5py
import meshio
import numpy as np
import pytest
import torch

from geoattn.cli.main import main
from geoattn import atomic
from geoattn.data import generate as gen
from geoattn.data.dataset import DarcyDataset, crc32
from geoattn.errors import CheckpointError, DatasetFileError
from geoattn.train import load_ensemble, load_operator, save_checkpoint
from geoattn.train.checkpoint import VERSION, load_checkpoint

from .helpers import NEEDS_UNSHARE, assert_same_samples, on_tiny_disk, refused, snapshot

ROOT = Path(__file__).resolve().parents[2]
MESH = ROOT / "meshes" / "square_irregular.vtu"
TRAIN = "train {data} --mesh train --width 8 --depth 1 --epochs {epochs} --out {out} --no-progress"


def generate(out: Path, n: int = 4, *extra: str) -> list[str]:
    return ["generate", "darcy", "--mesh", f"train={MESH}", "--n", str(n), "--modes", "4", "--out", str(out),
            "--no-progress", *extra]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny dataset, a finished run on it, and an input mesh file."""
    d = tmp_path_factory.mktemp("files")
    assert main(generate(d / "d.h5")) == 0
    assert main(TRAIN.format(data=d / "d.h5", epochs=2, out=d / "run").split()) == 0
    mesh = meshio.read(MESH)
    mesh.point_data = {"a": np.sin(3 * mesh.points[:, 0])}
    meshio.write(d / "in.vtu", mesh)
    return d


def predict(checkpoint: Path, files: Path, out: Path) -> list[str]:
    return ["predict", "--checkpoint", str(checkpoint), "--mesh", str(files / "in.vtu"), "--field", "a",
            "-o", str(out)]


# --- checkpoints: integrity and format version --------------------------------------------------
def _same_tensors(a: dict, b: dict) -> bool:
    assert a.keys() == b.keys()
    return all(torch.equal(a[k], b[k]) for k in a if torch.is_tensor(a[k]))


def _flip_bit_in_largest_tensor(path: Path) -> None:
    """Flip one bit in the middle of the largest tensor stored in the checkpoint (a weight)."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        assert info.compress_type == zipfile.ZIP_STORED
    raw = bytearray(path.read_bytes())
    name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.file_size // 2] ^= 0x10
    path.write_bytes(bytes(raw))


def test_a_flipped_bit_in_a_weight_is_refused(files, tmp_path, capsys):
    bad = tmp_path / "best.pt"
    shutil.copy(files / "run" / "best.pt", bad)
    _flip_bit_in_largest_tensor(bad)
    payload = torch.load(bad, weights_only=True)  # torch itself reads the damaged file silently
    good = torch.load(files / "run" / "best.pt", weights_only=True)
    assert not _same_tensors(payload["state_dict"], good["state_dict"])
    with pytest.raises(CheckpointError, match=rf"checkpoint {re.escape(str(bad))} is corrupted: its contents "
                                              "do not match their checksum"):
        load_operator(bad)
    out = tmp_path / "p.vtu"
    refused(predict(bad, files, out), capsys, r"geoattn predict: error: checkpoint .*best.pt is corrupted")
    assert not out.exists()
    refused(["evaluate", str(bad), str(files / "d.h5")], capsys, "is corrupted")


def test_the_checksum_covers_the_training_state(files, tmp_path):
    state = torch.load(files / "run" / "last.pt", weights_only=True)
    assert state["version"] == VERSION and state["checksum"].startswith("sha256:")
    moment = next(iter(state["optimizer"]["state"].values()))["exp_avg"]
    moment.view(-1)[0] = moment.view(-1)[0] * 2 + 1  # damaged optimiser state, stale checksum
    (tmp_path / "run").mkdir()
    torch.save(state, tmp_path / "run" / "last.pt")
    with pytest.raises(CheckpointError, match="is corrupted"):
        load_checkpoint(tmp_path / "run" / "last.pt", resume=True)


def test_a_newer_format_version_is_refused(files, tmp_path, capsys):
    payload = torch.load(files / "run" / "best.pt", weights_only=True)
    payload["version"] = 99
    torch.save(payload, tmp_path / "new.pt")
    with pytest.raises(CheckpointError, match=r"new.pt has format version 99, written by a newer geoattn "
                                              rf"\(this one, .*, reads versions up to {VERSION}\): upgrade"):
        load_operator(tmp_path / "new.pt")
    refused(predict(tmp_path / "new.pt", files, tmp_path / "p.vtu"), capsys, "written by a newer geoattn")
    payload["version"] = "2"
    torch.save(payload, tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match=r"odd.pt is damaged: its format version is '2'"):
        load_operator(tmp_path / "odd.pt")


def test_version_1_checkpoints_without_checksum_still_load(files, tmp_path, caplog):
    payload = torch.load(files / "run" / "best.pt", weights_only=True)
    del payload["checksum"]
    payload["version"] = 1
    torch.save(payload, tmp_path / "old.pt")
    with caplog.at_level(logging.INFO, logger="geoattn.train.checkpoint"):
        old = load_operator(tmp_path / "old.pt")
    assert "format version 1 (no checksum)" in caplog.text
    new = load_operator(files / "run" / "best.pt")
    assert _same_tensors(old.state_dict(), new.state_dict())
    payload["version"] = 2  # a version-2 file must have its checksum
    torch.save(payload, tmp_path / "stripped.pt")
    with pytest.raises(CheckpointError, match="stripped.pt is corrupted: its contents have no checksum"):
        load_operator(tmp_path / "stripped.pt")


def test_saving_adds_the_checksum_without_changing_the_payload(files, tmp_path):
    payload = torch.load(files / "run" / "best.pt", weights_only=True)
    del payload["checksum"]
    payload["version"] = 1
    kept = dict(payload)
    save_checkpoint(tmp_path / "c.pt", payload)
    assert payload == kept  # the caller's dict is not modified
    again = load_checkpoint(tmp_path / "c.pt")
    assert again["version"] == VERSION and again["checksum"].startswith("sha256:")


# --- ensembles: every member present and finished -----------------------------------------------
@pytest.fixture(scope="module")
def ensemble(files, tmp_path_factory):
    out = tmp_path_factory.mktemp("ens") / "ens"
    assert main(TRAIN.format(data=files / "d.h5", epochs=2, out=out).split() + ["--ensemble", "3"]) == 0
    return out


def test_an_ensemble_with_a_member_missing_is_refused(files, ensemble, tmp_path, capsys):
    gap = tmp_path / "gap"
    shutil.copytree(ensemble, gap)
    shutil.rmtree(gap / "member1")
    with pytest.raises(CheckpointError, match=r"gap is not a complete ensemble: member1 is missing"):
        load_ensemble(gap)
    refused(["evaluate", str(gap), str(files / "d.h5")], capsys, "member1 is missing")
    out = tmp_path / "p.vtu"
    refused(predict(gap, files, out), capsys, "member1 is missing")
    assert not out.exists()


def test_an_ensemble_with_an_unfinished_member_is_refused(files, ensemble, tmp_path, capsys):
    part = tmp_path / "part"
    shutil.copytree(ensemble, part)
    state = load_checkpoint(part / "member2" / "last.pt")
    state["epoch"] = 0  # as a run killed after its first epoch leaves it
    save_checkpoint(part / "member2" / "last.pt", state)
    (part / "member1" / "best.pt").unlink()  # and one killed before its first checkpoint
    (part / "member1" / "last.pt").unlink()
    refused(["evaluate", str(part), str(files / "d.h5")], capsys,
            r"part is not a complete ensemble: member1 has no best.pt \(unfinished\); member2 is unfinished "
            r"\(its run stopped after epoch 1 of 2\); finish the run")
    assert len(load_ensemble(ensemble)) == 3  # the complete one loads


# --- datasets: the mesh the samples were generated on -------------------------------------------
def test_a_dataset_whose_mesh_moved_is_refused(files, tmp_path, capsys):
    moved = tmp_path / "moved.h5"
    shutil.copy(files / "d.h5", moved)
    with h5py.File(moved, "r+") as fh:  # nodes moved, the mesh checksum recomputed to match
        g = fh["meshes/train"]
        points, cells, weight = g["points"][:], g["cells"][:], g["weight"][:]
        points[5] += 1e-3
        g["points"][:] = points
        g.attrs["checksum"] = crc32(points, cells, weight)
    before = moved.read_bytes()
    with pytest.raises(DatasetFileError, match=r"moved.h5: mesh 'train' is not the mesh its samples were "
                                               "generated on"):
        DarcyDataset(moved)
    refused(["evaluate", str(files / "run" / "best.pt"), str(moved)], capsys, "is not the mesh its samples")
    refused(TRAIN.format(data=moved, epochs=1, out=tmp_path / "run").split(), capsys, "is not the mesh")
    assert moved.read_bytes() == before and not (tmp_path / "run").exists()


# --- outputs: read-only files, symbolic link loops -----------------------------------------------
def test_predict_does_not_replace_a_read_only_file(files, tmp_path, capsys):
    out = tmp_path / "p.vtu"
    out.write_text("kept")
    out.chmod(stat.S_IRUSR | stat.S_IRGRP)
    try:
        refused(predict(files / "run" / "best.pt", files, out), capsys,
                rf"cannot write {re.escape(str(out))}: the file exists and is read-only")
        assert out.read_text() == "kept"
    finally:
        out.chmod(0o644)
    assert main(predict(files / "run" / "best.pt", files, out)) == 0  # writable again: replaced


def test_a_symbolic_link_loop_is_named(files, tmp_path, capsys):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    loop = re.escape(f"{tmp_path / 'a'} -> {tmp_path / 'b'} -> {tmp_path / 'a'}")
    before = snapshot(files)
    refused(TRAIN.format(data=files / "d.h5", epochs=1, out=tmp_path / "a").split(), capsys,
            rf"symbolic link loop \({loop}\)")
    refused(predict(files / "run" / "best.pt", files, tmp_path / "a" / "p.vtu"), capsys, f"loop \\({loop}\\)")
    refused(generate(tmp_path / "a"), capsys, f"loop \\({loop}\\)")
    refused(["evaluate", str(files / "run" / "best.pt"), str(tmp_path / "a")], capsys, f"loop \\({loop}\\)")
    refused(predict(tmp_path / "a", files, tmp_path / "p.vtu"), capsys, "loop")
    assert snapshot(files) == before and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


# --- a full disk during `geoattn generate` --------------------------------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "full.h5"
    assert main(generate(out, 6)) == 0
    return out


@pytest.mark.parametrize("when, fail_at", [("creating", None), ("first sample", 0), ("third sample", 2)])
def test_a_full_disk_stops_generate_cleanly_and_it_resumes(reference, tmp_path, monkeypatch, capsys, when, fail_at):
    """The disk fills while the file is created, or before sample ``fail_at`` is written: one
    line, exit code 2, every sample flagged before kept (a file with none is not left behind);
    with room again the same command resumes to the samples of an uninterrupted run."""
    out = tmp_path / "d.h5"
    started, written = [], []

    class FullDisk(io.FileIO):
        """The dataset file on a disk that is full from sample ``fail_at`` on (or at once)."""

        def write(self, data):
            if fail_at is None or len(started) > fail_at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    guarded, write = atomic.GuardedFile.__init__, gen._write

    def full_disk(self, path, mode):
        guarded(self, path, mode)
        self._fh.close()
        self._fh = FullDisk(path, mode.replace("b", ""))

    def counted(path, fh, guard, index, result):
        started.append(index)
        write(path, fh, guard, index, result)
        written.append(index)

    monkeypatch.setattr(atomic.GuardedFile, "__init__", full_disk)
    monkeypatch.setattr(gen, "_write", counted)
    refused(generate(out, 6), capsys, r"geoattn generate: error: cannot (create|write sample \d to) \S*d.h5: "
                                      "No space left on device")
    monkeypatch.undo()
    assert written == list(range(fail_at or 0))
    if written:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]
        with h5py.File(out, "r") as fh:
            assert fh["done"][:].tolist() == [1] * len(written) + [0] * (6 - len(written))
        with pytest.raises(DatasetFileError, match="is incomplete"):
            DarcyDataset(out)
    else:  # nothing to keep: no file (nor its partial or lock file) is left behind
        assert list(tmp_path.iterdir()) == []
    assert main(generate(out, 6)) == 0
    assert_same_samples(out, reference)


FILL_AFTER_CREATE = """
import os, sys
import h5py
from geoattn.data import generate as gen
from geoattn.cli.main import main
create = gen._create

def create_then_fill(path, recipe, bases):  # another process fills the disk once the file exists
    create(path, recipe, bases)
    fd = os.open(path.parent / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(1 << 16))
    except OSError:
        pass
    os.close(fd)

gen._create = create_then_fill
print(f"rc={main(sys.argv[1:])}", flush=True)
out = sys.argv[sys.argv.index("--out") + 1]
print("done", int(h5py.File(out, "r")["done"][:].sum()) if os.path.exists(out) else 0)
"""
RESUME = """
import sys
from geoattn.cli.main import main
from geoattn.data.dataset import DarcyDataset

print(f"rc={main(sys.argv[1:])}", flush=True)
print("read", len(DarcyDataset(sys.argv[sys.argv.index("--out") + 1])))
"""


@NEEDS_UNSHARE
def test_a_real_full_disk(tmp_path):
    """On a real 4 MB file system that another process fills right after the file is created
    (a tmpfs in a private mount namespace): one line, exit code 2, no crash (HDF5 left to itself
    segfaults here); with room again the same command resumes and the file reads."""
    disk = tmp_path / "disk"
    (tmp_path / "fill.py").write_text(FILL_AFTER_CREATE)
    (tmp_path / "resume.py").write_text(RESUME)
    py, out = sys.executable, disk / "d.h5"
    args = f"generate darcy --mesh train={MESH} --n 10 --modes 4 --out {out} --no-progress"
    script = f"{py} {tmp_path / 'fill.py'} {args} && rm {disk / 'filler'} && {py} {tmp_path / 'resume.py'} {args}"
    result = on_tiny_disk(disk, "4m", script, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = [line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("INFO")]
    text = "\n".join(lines)
    assert result.returncode == 0 and "Segmentation" not in text and "Traceback" not in text, text
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1 and re.fullmatch(r"geoattn generate: error: cannot write sample \d+ to \S*d.h5: No "
                                             "space left on device; the samples written before are kept: make "
                                             "room and run the same command again to resume", errors[0]), text
    assert [line for line in lines if line.startswith(("rc=", "read"))] == ["rc=2", "rc=0", "read 10"], text
    done = int(next(line for line in lines if line.startswith("done ")).split()[1])
    assert 0 <= done < 10


def test_a_failed_write_of_the_xdmf_companion_is_one_line(tmp_path, monkeypatch, capsys):
    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "d.h5"
    monkeypatch.setattr(gen, "write_xdmf", full)
    refused(generate(out, 2), capsys, r"d.h5 is complete, but its XDMF companions cannot be written \(No space "
                                      r"left on device\); make room and run the same command again")
    monkeypatch.undo()
    assert len(DarcyDataset(out)) == 2
    assert main(generate(out, 2)) == 0 and (tmp_path / "d.train.xdmf").exists()
