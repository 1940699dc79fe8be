"""Signals at every stage of ``geoattn train`` and ``generate``, run as the console script runs:
``SIGINT`` (Ctrl-C, sent to the whole process group as a terminal does) exits with status 130,
``SIGTERM`` with 143, each with one line on stderr and no traceback, whether it comes during the
imports of torch, while the dataset is opened or inside a checkpoint write; a second Ctrl-C during
the clean-up ends the command at once with the same status; and the temporary files of a write that
was killed are removed by the next one.

The moments are hit deterministically: a ``sitecustomize`` module, put on the ``PYTHONPATH`` of
the command's process only (:func:`command`), logs each import of torch, each opening and flush of
an HDF5 file, each ``fsync`` (the end of every atomic write) and each ``rmtree`` (the removal of a
temporary folder), and holds the process inside the ``k``-th one of a kind for a while; the test
sends the signal once the log shows it there. Nothing of this is in the library.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geoattn import atomic
from geoattn.cli.main import main
from geoattn.data.xdmf import write_xdmf
from geoattn.train.checkpoint import atomic_path

ROOT = Path(__file__).resolve().parents[2]
MESH = ROOT / "meshes" / "square_irregular.vtu"
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals and process groups")

#: what ``pip`` writes as the ``geoattn`` console script (pyproject.toml's [project.scripts])
CONSOLE = "import sys\nfrom geoattn.cli.entry import main\nsys.exit(main())\n"

#: the test-only ``sitecustomize``: log the moments named in $GEOATTN_TEST_HOOKS and hold there
HOOKS = r'''
import importlib.machinery, json, os, shutil, sys, time

_spec = json.loads(os.environ["GEOATTN_TEST_HOOKS"])
_counts = {}


def moment(event):
    """Log ``event k`` (its k-th time) and hold: ``hold`` s at the target, ``slow[event]`` s at others."""
    k = _counts[event] = _counts.get(event, 0) + 1
    with open(_spec["log"], "a") as fh:
        fh.write(f"{event} {k} {os.getpid()} {time.monotonic()}\n")
    target = _spec.get("target")
    if target == [event, k]:
        time.sleep(_spec.get("hold", 30.0))
    else:
        time.sleep(_spec.get("slow", {}).get(event, 0.0))


def wrap(event, fn):
    def hooked(*args, **kwargs):
        moment(event)
        return fn(*args, **kwargs)
    return hooked


os.fsync = wrap("fsync", os.fsync)
shutil.rmtree = wrap("rmtree", shutil.rmtree)


def _patch_h5py(h5py):
    h5py.File.__init__ = wrap("h5open", h5py.File.__init__)
    h5py.File.flush = wrap("h5flush", h5py.File.flush)


class _Finder:
    seen = set()

    def find_spec(self, name, path, target=None):
        if name in self.seen or name not in ("torch", "h5py"):
            return None
        self.seen.add(name)
        if name == "torch":
            moment("import:torch")
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _patch_h5py(module)

            spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
'''


def command(args, folder: Path, target=None, hold: float = 2.0, slow=None) -> tuple[subprocess.Popen, Path]:
    """Start ``geoattn ARGS`` as the console script, in a session of its own, with the hooks of
    :data:`HOOKS` (holding ``hold`` s at ``target = (event, k)``); returns it and its log."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HOOKS)
    log = folder / "moments.log"
    log.unlink(missing_ok=True)
    spec = {"log": str(log), "target": list(target) if target else None, "hold": hold, "slow": slow or {}}
    env = dict(os.environ, GEOATTN_TEST_HOOKS=json.dumps(spec),
               PYTHONPATH=os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", CONSOLE, *map(str, args)], cwd=ROOT, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, log


def moments(log: Path, times: bool = False) -> list[tuple]:
    """The moments logged so far, ``(event, k)`` (``(event, k, time.monotonic())`` with ``times``)."""
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    words = [line.split() for line in lines if line.count(" ") == 3]
    return [(w[0], int(w[1]), float(w[3])) if times else (w[0], int(w[1])) for w in words]


def wait_for(proc: subprocess.Popen, log: Path, event: tuple[str, int], timeout: float = 120) -> None:
    """Wait until the command logs ``event`` (it is then held there)."""
    deadline = time.monotonic() + timeout
    while tuple(event) not in moments(log):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the command ended ({proc.returncode}) before {event}: {err}")
        assert time.monotonic() < deadline, f"{event} not reached in {timeout} s"
        time.sleep(0.01)


def send(proc: subprocess.Popen, sig: int) -> None:
    """SIGINT as a terminal sends it (to the whole foreground group); others to the process."""
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, out, err


#: the exit status of the command stopped by each signal (SIGKILL: the process is killed)
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}


def assert_stopped(code: int, err: str, sig: int, prog: str) -> None:
    """The documented exit status of ``sig``, and for SIGINT / SIGTERM one line, no traceback."""
    assert code == STATUS[sig], (code, err)
    if sig != signal.SIGKILL:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert re.match(rf"{prog}: interrupted by {signal.Signals(sig).name}(;|$)", lines[0]), err


def leftovers(folder: Path) -> list[str]:
    """Temporary files, lock files and other hidden entries anywhere under ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.startswith(".") or p.name.endswith((".tmp", ".partial")))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("signals") / "d.h5"
    assert main(["generate", "--mesh", f"train={MESH}", "--n", "4", "--modes", "4", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def train_args(data: Path, out: Path, epochs: int = 2) -> list:
    return ["train", data, "--out", out, "--width", "8", "--depth", "1", "--epochs", str(epochs),
            "--batch-size", "2", "--no-progress"]


def generate_args(out: Path, n: int = 4, workers: int = 1) -> list:
    return ["generate", "darcy", "--mesh", f"train={MESH}", "--n", str(n), "--modes", "4", "--out", out,
            "--workers", str(workers), "--no-progress"]


@linux
@pytest.mark.parametrize("prog, sig, at", [
    ("train", signal.SIGINT, ("import:torch", 1)),  # before the command line is parsed
    ("train", signal.SIGTERM, ("h5open", 1)),  # while the dataset is opened
    pytest.param("train", signal.SIGINT, ("h5open", 1), marks=pytest.mark.slow),
    ("generate", signal.SIGTERM, ("import:torch", 1)),
    pytest.param("generate", signal.SIGINT, ("h5open", 1), marks=pytest.mark.slow),  # creating the file
], ids=["train-SIGINT-importing", "train-SIGTERM-opening", "train-SIGINT-opening", "generate-SIGTERM-importing",
        "generate-SIGINT-creating"])
def test_signal_during_start_up(dataset, tmp_path, prog, sig, at):
    out = tmp_path / "out"
    args = train_args(dataset, out) if prog == "train" else generate_args(out / "d.h5")
    proc, log = command(args, tmp_path / "hooks", target=at)
    wait_for(proc, log, at)
    send(proc, sig)
    code, _, err = finish(proc)
    assert_stopped(code, err, sig, f"geoattn {prog}")
    assert not out.exists() or leftovers(out) == []
    assert not (out / "d.h5").exists()  # a generation stopped before its first sample leaves no file


@linux
def test_second_ctrl_c_during_the_clean_up_exits_at_once(dataset, tmp_path):
    """Ctrl-C inside the write of the first checkpoint: the write's temporary folder is being
    removed when Ctrl-C comes again, and the command ends at once, 130 and one line; the next
    run removes what was left and resumes."""
    out = tmp_path / "out"
    proc, log = command(train_args(dataset, out, epochs=1), tmp_path / "hooks", target=("fsync", 1), hold=30,
                        slow={"rmtree": 30})
    wait_for(proc, log, ("fsync", 1))
    send(proc, signal.SIGINT)
    wait_for(proc, log, ("rmtree", 1))  # the clean-up, held there for 30 s
    send(proc, signal.SIGINT)
    code, _, err = finish(proc, timeout=20)
    assert_stopped(code, err, signal.SIGINT, "geoattn train")
    left = leftovers(out)
    assert any(name.startswith(".best.pt.") for name in left), left  # cut short: left for the next run
    assert main([str(a) for a in train_args(dataset, out, epochs=1)] + ["--resume"]) == 0
    assert leftovers(out) == []


@linux
@pytest.mark.slow
def test_signals_while_the_command_ends():
    """Ctrl-C again and again from the moment the command has printed its result to its exit:
    the process ends with the command's status (0) or 130, never dies by the signal (Python gives
    the signals their default action back in its last clean-up)."""
    proc = subprocess.Popen([sys.executable, "-c", CONSOLE, "info", str(MESH)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    while not proc.stdout.readline().startswith("measure"):
        assert proc.poll() is None, proc.communicate()
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.002)
    _, err = proc.communicate()
    assert proc.returncode in (0, 130) and "Traceback" not in err, (proc.returncode, err)


def test_the_console_script_is_the_entry_module():
    """:data:`CONSOLE` runs what ``pip`` installs as ``geoattn``: the module that installs the
    signal handlers before the heavy imports, and imports nothing heavy itself."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the backport in the dependencies
        import tomli as tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["geoattn"] == "geoattn.cli.entry:main"
    heavy = subprocess.run([sys.executable, "-c", "import sys, geoattn.cli.entry; "
                            "print(sorted(m for m in ('torch', 'numpy', 'h5py') if m in sys.modules))"],
                           capture_output=True, text=True, check=True, cwd=ROOT)
    assert heavy.stdout.strip() == "[]"


def test_leftovers_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    for name in ("last.pt", "metrics.csv"):
        (tmp_path / f".{name}.{pid}.abc_123.tmp").mkdir()
    (tmp_path / f".last.pt.{os.getpid()}.xyz.tmp").mkdir()  # a write in progress in this process
    (tmp_path / ".notes.tmp").mkdir()  # not one of ours
    with atomic_path(tmp_path / "last.pt") as tmp:
        tmp.write_bytes(b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".last.pt.{}.xyz.tmp".format(os.getpid()), f".metrics.csv.{pid}.abc_123.tmp", ".notes.tmp", "last.pt"])
    assert atomic.remove_leftovers(tmp_path) == [tmp_path / f".metrics.csv.{pid}.abc_123.tmp"]
    assert (tmp_path / "last.pt").read_bytes() == b"new"


def test_interrupted_xdmf_companion_is_left_as_it_was(dataset, tmp_path, monkeypatch):
    """A Ctrl-C in the middle of writing the XDMF companion leaves the previous one whole and
    no temporary file."""
    data = tmp_path / "d.h5"
    data.write_bytes(dataset.read_bytes())
    companion, = write_xdmf(data)
    before = companion.read_bytes()
    real = atomic._sync

    def interrupted(path):
        assert Path(path).read_bytes().startswith(b'<?xml version="1.0"?>')  # written, not yet in place
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "_sync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_xdmf(data)
    assert companion.read_bytes() == before and leftovers(tmp_path) == []
    monkeypatch.setattr(atomic, "_sync", real)
    assert write_xdmf(data) == [companion] and companion.read_bytes() == before


def test_interrupt_called_from_python_exits_130(dataset, tmp_path, monkeypatch, capsys):
    """``main(argv)`` called from Python answers Ctrl-C with 130 and one line, and leaves the
    signal handlers as they were."""
    from geoattn.train import trainer

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer.Trainer, "fit", interrupt)
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    assert main([str(a) for a in train_args(dataset, tmp_path / "out")]) == 130
    err = capsys.readouterr().err
    assert err == "geoattn train: interrupted by SIGINT; run the same command with --resume to continue " \
                  "from the last completed epoch\n"
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers
