"""Two processes never write one run folder or one dataset file: the second is refused with one
line naming the folder (or file) and the pid of the process writing it, and the first one's files
stay byte for byte as they were; a killed holder leaves no lock behind (the kernel releases it)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from geoattn.cli.main import main
from geoattn.errors import LockError
from geoattn.locking import FOLDER_LOCK, hold, lock_file
from geoattn.mesh import families, from_meshio
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer

from .helpers import refused, snapshot

ROOT = Path(__file__).resolve().parents[2]
MESH = ROOT / "meshes" / "square_irregular.vtu"
HOLDER = """
import sys, time
from geoattn.locking import hold

with hold(sys.argv[1], folder=sys.argv[2] == "folder"):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder():
    """``start(target, folder)``: a process holding the lock of ``target``; killed at the end."""
    procs = []

    def start(target: Path, folder: bool = True) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(target), "folder" if folder else "file"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.strip() == "held", proc.communicate()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny dataset and a finished one-epoch run on it."""
    d = tmp_path_factory.mktemp("locks")
    assert main(["generate", "darcy", "--mesh", f"train={MESH}", "--n", "4", "--modes", "4",
                 "--out", str(d / "d.h5"), "--no-progress"]) == 0
    assert main(TRAIN.format(data=d / "d.h5", out=d / "run").split()) == 0
    return d


TRAIN = "train {data} --width 8 --depth 1 --epochs 1 --out {out} --no-progress"


def test_second_process_is_refused_naming_the_folder_and_holder(tmp_path, holder):
    proc = holder(tmp_path / "run")
    with pytest.raises(LockError, match=rf"run folder {re.escape(str(tmp_path / 'run'))} is in use by "
                                        rf"process {proc.pid} "):
        with hold(tmp_path / "run", folder=True):
            pass
    assert (tmp_path / "run" / FOLDER_LOCK).read_text().strip() == str(proc.pid)  # the holder's, untouched


def test_a_killed_holder_leaves_no_lock_behind(tmp_path, holder):
    proc = holder(tmp_path / "data.h5", folder=False)
    assert lock_file(tmp_path / "data.h5").exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with hold(tmp_path / "data.h5") as lock:  # taken at once, though the killed one's file is there
        assert lock.read_text().strip() == str(os.getpid())
    assert not lock.exists() and list(tmp_path.iterdir()) == []  # the lock file goes with its holder


def test_locks_nest_in_one_process_and_leave_nothing_behind(tmp_path):
    with hold(tmp_path / "a" / "run", folder=True) as lock:
        with hold(tmp_path / "a" / "run", folder=True):  # the same process: no refusal
            assert lock.exists()
        assert lock.exists()  # still held by the outer block
    assert not (tmp_path / "a").exists()  # created for the lock, nothing written: removed
    with hold(tmp_path / "b", folder=True):
        (tmp_path / "b" / "kept.txt").write_text("written")
    assert list((tmp_path / "b").iterdir()) == [tmp_path / "b" / "kept.txt"]


def test_train_into_a_folder_in_use_is_refused_and_leaves_it_as_it_was(run, holder, capsys):
    before = snapshot(run / "run")
    proc = holder(run / "run")
    for extra in ("--resume", "--overwrite", ""):
        args = TRAIN.format(data=run / "d.h5", out=run / "run").split() + ([extra] if extra else [])
        refused(args, capsys, rf"geoattn train: error: run folder {re.escape(str(run / 'run'))} is in use "
                              rf"by process {proc.pid} ")
    proc.kill()
    proc.communicate()
    after = snapshot(run / "run")
    after.pop(Path(FOLDER_LOCK))  # the killed holder's (unlocked) file
    assert after == before


def test_ensemble_member_in_use_is_refused_before_any_member_trains(run, holder, tmp_path, capsys):
    proc = holder(tmp_path / "ens" / "member1")
    args = TRAIN.format(data=run / "d.h5", out=tmp_path / "ens").split() + ["--ensemble", "2"]
    refused(args, capsys, rf"member1 is in use by process {proc.pid}")
    assert not (tmp_path / "ens" / "member0").exists()


def _samples(n: int = 2):
    base = from_meshio(families.unit_square(4, "irregular"))
    out = []
    for k in range(n):
        d = base.clone()
        d.x = torch.sin((k + 1) * d.pos[:, :1])
        d.y = d.x * (1 + d.pos[:, 1:])
        out.append(d)
    return out


def test_trainer_into_a_folder_in_use_is_refused_and_writes_nothing(tmp_path, holder):
    proc = holder(tmp_path / "run")
    op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
    with pytest.raises(LockError, match=rf"is in use by process {proc.pid}"):
        Trainer(op, tmp_path / "run", epochs=1, progress=False).fit(_samples())
    assert [p.name for p in (tmp_path / "run").iterdir()] == [FOLDER_LOCK]  # the holder's only


def test_generate_into_a_file_in_use_is_refused(run, holder, tmp_path, capsys):
    out = tmp_path / "d.h5"
    proc = holder(out, folder=False)
    refused(["generate", "darcy", "--mesh", f"train={MESH}", "--n", "2", "--modes", "4", "--out", str(out),
             "--no-progress"], capsys, rf"dataset file {re.escape(str(out))} is in use by process {proc.pid} ")
    assert not out.exists()
    before = (run / "d.h5").read_bytes()  # an existing file is left as it was
    proc2 = holder(run / "d.h5", folder=False)
    refused(["generate", "darcy", "--mesh", f"train={MESH}", "--n", "4", "--modes", "4", "--out",
             str(run / "d.h5"), "--no-progress"], capsys, rf"in use by process {proc2.pid}")
    assert (run / "d.h5").read_bytes() == before


def test_two_train_commands_into_one_folder(run, tmp_path, capsys):
    """A real `geoattn train` is running into OUT: a second one is refused, naming it; once it is
    killed (no clean-up of its own), the folder can be trained into again."""
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "-m", "geoattn.cli.main",
                              *TRAIN.format(data=run / "d.h5", out=out).replace("--epochs 1", "--epochs 100000").split()],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = lock_file(out, folder=True)
        for _ in range(600):  # until it holds the lock and has written its first epoch
            if (out / "last.pt").exists() and lock.exists() and lock.read_text().strip() == str(first.pid):
                break
            assert first.poll() is None, first.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the first run did not start")
        refused(TRAIN.format(data=run / "d.h5", out=out).split() + ["--overwrite"], capsys,
                rf"run folder {re.escape(str(out))} is in use by process {first.pid} ")
        assert first.poll() is None  # the first run goes on
    finally:
        first.kill()
        first.communicate()
    assert main(TRAIN.format(data=run / "d.h5", out=out).split() + ["--overwrite"]) == 0
    assert not lock.exists()
