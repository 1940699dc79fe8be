"""Faults of ``geoattn generate`` and of reading its files: every bad flag, file and setting is
refused with a typed error (exit code 2, one line on stderr) before anything is written; a changed
mesh is refused on resume; a generation killed or interrupted at any moment, workers included,
resumes to the same samples as an uninterrupted run; damaged quadrature weights and cells in a
dataset file are refused on load, naming the first offending index."""

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from geoattn.cli.main import main
from geoattn.data import generate as gen
from geoattn.data.dataset import DarcyDataset, crc32, mesh_hash
from geoattn.data.recipe import Recipe
from geoattn.errors import (
    CellIndexError,
    ConfigError,
    DuplicateCellError,
    NonFiniteError,
    WeightError,
)

from .helpers import assert_same_samples, refused, snapshot

ROOT = Path(__file__).resolve().parents[2]
MESH = ROOT / "meshes" / "square_irregular.vtu"


def argv(out, *extra, mesh=MESH, n="2"):
    return ["generate", "darcy", "--mesh", f"train={mesh}", "--n", n, "--modes", "4",
            "--out", str(out), "--no-progress", *extra]


@pytest.fixture
def inputs(tmp_path):
    """Bad input files next to a good dataset; returns the folder."""
    (tmp_path / "empty.vtu").write_bytes(b"")
    (tmp_path / "truncated.vtu").write_bytes(MESH.read_bytes()[:2000])
    (tmp_path / "text.vtu").write_text("this is not a mesh\n")
    (tmp_path / "folder.vtu").mkdir()
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "empty.toml").write_text("")
    good = f'name = "r"\nn = 2\ngrf = {{ preset = "cao", modes = 4 }}\n[meshes.train]\npath = "{MESH}"\n'
    (tmp_path / "truncated.toml").write_text(good[: len(good) // 2])
    (tmp_path / "wrongtype.toml").write_text(good.replace("n = 2", 'n = "2"'))
    (tmp_path / "refine.toml").write_text(good + "refine = 99\n")
    (tmp_path / "unknown.toml").write_text(good.replace("n = 2", "n = 2\nsamples = 3"))
    (tmp_path / "folder.toml").mkdir()
    (tmp_path / "blocker").write_text("a file where a folder should be\n")
    assert main(argv(tmp_path / "made.h5")) == 0
    made = tmp_path / "made.h5"
    (tmp_path / "truncated.h5").write_bytes(made.read_bytes()[: made.stat().st_size // 2])
    (tmp_path / "empty.h5").write_bytes(b"")
    shutil.copy(MESH, tmp_path / "mesh_as_out.h5")
    return tmp_path


M = str(MESH)
# (id, command line given the input folder d and a fresh output path o, stderr must match)
CASES = [
    ("n-zero", lambda d, o: argv(o, n="0"), r"n must be an integer in \[1,"),
    ("n-negative", lambda d, o: argv(o, n="-3"), r"n must be an integer in \[1,"),
    ("n-float", lambda d, o: argv(o, n="1.5"), r"argument --n: invalid int value: '1.5'"),
    ("n-text", lambda d, o: argv(o, n="abc"), r"argument --n: invalid int value"),
    ("n-huge-disk", lambda d, o: argv(o, n="1000000000"), r"1000000000 samples need about .* GB free"),
    ("n-beyond-int64", lambda d, o: argv(o, n=str(2**64)), r"n must be an integer in \[1, 2\*\*63 - 1\]"),
    ("seed-negative", lambda d, o: argv(o, "--seed", "-1"), r"seed must be an integer in \[0,"),
    ("seed-huge", lambda d, o: argv(o, "--seed", str(2**70)), r"seed must be an integer"),
    ("seed-text", lambda d, o: argv(o, "--seed", "x"), r"argument --seed: invalid int value"),
    ("modes-zero", lambda d, o: argv(o, "--modes", "0"), r"grf modes must be an integer in \[1,"),
    ("modes-negative", lambda d, o: argv(o, "--modes", "-2"), r"grf modes must be an integer"),
    ("modes-huge", lambda d, o: argv(o, "--modes", "100000"), r"more than \d+ random coefficients"),
    ("modes-text", lambda d, o: argv(o, "--modes", "many"), r"argument --modes: invalid int value"),
    ("workers-negative", lambda d, o: argv(o, "--workers", "-1"), r"--workers must be >= 0"),
    ("workers-huge", lambda d, o: argv(o, "--workers", "100000"), r"workers must be an integer in \[1, \d+\]"),
    ("workers-text", lambda d, o: argv(o, "--workers", "two"), r"argument --workers: invalid int value"),
    ("family-unknown", lambda d, o: argv(o, "--family", "constant"), r"argument --family: invalid choice"),
    ("grf-unknown", lambda d, o: argv(o, "--grf", "matern"), r"unknown GRF preset 'matern'"),
    ("grf-empty", lambda d, o: argv(o, "--grf", ""), r"unknown GRF preset ''"),
    ("problem-unknown", lambda d, o: ["generate", "heat", "--mesh", M, "--n", "2", "--out", str(o)],
     r"invalid choice: 'heat'"),
    ("no-out", lambda d, o: ["generate", "--mesh", M, "--n", "2"], r"give --mesh PATH .* --out FILE"),
    ("mesh-missing", lambda d, o: argv(o, mesh=d / "none.vtu"), r"mesh 'train': file .*none.vtu not found"),
    ("mesh-empty", lambda d, o: argv(o, mesh=d / "empty.vtu"), r"mesh 'train': cannot read mesh file .*empty"),
    ("mesh-truncated", lambda d, o: argv(o, mesh=d / "truncated.vtu"), r"mesh 'train': cannot read mesh file"),
    ("mesh-text", lambda d, o: argv(o, mesh=d / "text.vtu"), r"mesh 'train': cannot read mesh file"),
    ("mesh-other-kind", lambda d, o: argv(o, mesh=d / "notes.txt"), r"mesh 'train': cannot read mesh file"),
    ("mesh-folder", lambda d, o: argv(o, mesh=d / "folder.vtu"), r"mesh 'train': .*is a folder"),
    ("mesh-quads", lambda d, o: argv(o, mesh=ROOT / "meshes" / "square_quad.vtu"),
     r"mesh 'train': Darcy needs a triangle or tetrahedron mesh, got cells 'quad'"),
    ("mesh-1d", lambda d, o: argv(o, mesh=ROOT / "meshes" / "interval_irregular.vtu"),
     r"mesh 'train': Darcy needs a triangle or tetrahedron mesh, got cells 'line'"),
    ("mesh-3d-field-2d", lambda d, o: argv(o, mesh=ROOT / "meshes" / "cube_tetra.vtu"),
     r"mesh 'train' is 3-D but the field's box is 2-D"),
    ("mesh-names-twice", lambda d, o: argv(o, "--mesh", f"train={M}"), r"two meshes are named 'train'"),
    ("mesh-no-name", lambda d, o: ["generate", "--mesh", "=", "--n", "2", "--out", str(o)], r"mesh names must be"),
    ("out-folder", lambda d, o: argv(d), r"is a folder; give a file name"),
    ("out-under-a-file", lambda d, o: argv(d / "blocker" / "x.h5"), r"cannot write .*blocker/x.h5"),
    ("out-device", lambda d, o: argv("/dev/null/x.h5"), r"cannot write /dev/null/x.h5"),
    ("out-empty-file", lambda d, o: argv(d / "empty.h5"), r"cannot open .*empty.h5 as HDF5"),
    ("out-truncated", lambda d, o: argv(d / "truncated.h5"), r"cannot open .*truncated.h5 as HDF5"),
    ("out-other-kind", lambda d, o: argv(d / "mesh_as_out.h5"), r"cannot open .*mesh_as_out.h5 as HDF5"),
    ("out-other-recipe", lambda d, o: argv(d / "made.h5", n="3"), r"made.h5 exists and was made by a different recipe"),
    ("recipe-missing", lambda d, o: ["generate", "--recipe", str(d / "none.toml")], r"recipe file .*none.toml not found"),
    ("recipe-empty", lambda d, o: ["generate", "--recipe", str(d / "empty.toml")], r"empty.toml: invalid recipe"),
    ("recipe-truncated", lambda d, o: ["generate", "--recipe", str(d / "truncated.toml")], r"is not a TOML recipe"),
    ("recipe-other-kind", lambda d, o: ["generate", "--recipe", M], r"is not a TOML recipe"),
    ("recipe-folder", lambda d, o: ["generate", "--recipe", str(d / "folder.toml")], r"cannot read recipe .*folder.toml"),
    ("recipe-wrong-type", lambda d, o: ["generate", "--recipe", str(d / "wrongtype.toml"), "--out", str(o)],
     r"n must be an integer in \[1, .*got '2'"),
    ("recipe-refine-huge", lambda d, o: ["generate", "--recipe", str(d / "refine.toml"), "--out", str(o)],
     r"mesh 'train': refine must be an integer in \[0, 8\], got 99"),
    ("recipe-unknown-key", lambda d, o: ["generate", "--recipe", str(d / "unknown.toml"), "--out", str(o)],
     r"unexpected keyword argument 'samples'"),
    ("recipe-and-mesh", lambda d, o: ["generate", "--recipe", str(d / "refine.toml"), "--mesh", M],
     r"give either --recipe or --mesh/--n"),
]


@pytest.mark.parametrize("make, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_refused_and_nothing_written(inputs, tmp_path_factory, capsys, make, match):
    out = tmp_path_factory.mktemp("out") / "d.h5"
    before = snapshot(inputs)
    refused(make(inputs, out), capsys, match)
    assert snapshot(inputs) == before
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_unwritable_folder(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    refused(argv(locked / "d.h5"), capsys, r"cannot write .*d.h5")
    assert not any(locked.iterdir())


def test_bad_grf_then_corrected_rerun(tmp_path, capsys):
    out = tmp_path / "d.h5"
    refused(argv(out, "--grf", "matern"), capsys, "unknown GRF preset")
    assert not any(tmp_path.iterdir())
    assert main(argv(out)) == 0
    assert len(DarcyDataset(out)) == 2


def test_failure_before_the_first_sample_removes_the_file(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("solver failed")

    monkeypatch.setattr(gen, "solve_sample", broken)
    recipe = Recipe(meshes={"train": {"path": str(MESH)}}, n=2, grf={"preset": "cao", "modes": 4})
    with pytest.raises(RuntimeError, match="solver failed"):
        gen.generate_darcy(tmp_path / "d.h5", recipe, progress=False)
    assert not any(tmp_path.iterdir())
    monkeypatch.undo()
    gen.generate_darcy(tmp_path / "d.h5", recipe, progress=False)
    assert len(DarcyDataset(tmp_path / "d.h5")) == 2


def test_disk_space_checked_before_anything_is_written(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=10_000))
    recipe = Recipe(meshes={"train": {"path": str(MESH)}}, n=2, grf={"preset": "cao", "modes": 4})
    with pytest.raises(ConfigError, match=r"2 samples need about .* GB"):
        gen.generate_darcy(tmp_path / "sub" / "d.h5", recipe, progress=False)
    assert not any(tmp_path.iterdir())


def test_workers_setting_of_the_library():
    recipe = Recipe(meshes={"train": {"path": str(MESH)}}, n=2)
    for workers in (0, -1, 2.0, True, 10**6):
        with pytest.raises(ConfigError, match="workers must be an integer"):
            gen.generate_darcy("unused.h5", recipe, workers=workers)
    assert not Path("unused.h5").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_after_the_sample_in_hand(tmp_path, monkeypatch, sig):
    real, calls = gen.solve_sample, []

    def signalled(*args):
        calls.append(args[3])
        if len(calls) == 3:
            os.kill(os.getpid(), sig)  # arrives in the middle of sample 2
        return real(*args)

    monkeypatch.setattr(gen, "solve_sample", signalled)
    recipe = Recipe(meshes={"train": {"path": str(MESH)}}, n=6, grf={"preset": "cao", "modes": 4})
    previous = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt):
        gen.generate_darcy(tmp_path / "d.h5", recipe, progress=False)
    assert signal.getsignal(sig) is previous
    with h5py.File(tmp_path / "d.h5") as fh:
        assert fh["done"][:].tolist() == [1, 1, 1, 0, 0, 0]


def test_changed_mesh_is_refused_on_resume(tmp_path, capsys):
    mesh = tmp_path / "mesh.vtu"
    shutil.copy(MESH, mesh)
    out = tmp_path / "d.h5"
    assert main(argv(out, mesh=mesh)) == 0
    with h5py.File(out, "r+") as fh:
        fh["done"][1] = 0  # as if interrupted: resuming would solve sample 1 on the new mesh
    shutil.copy(ROOT / "meshes" / "square_structured.vtu", mesh)  # same size, other nodes
    before = snapshot(tmp_path)
    refused(argv(out, mesh=mesh), capsys, r"d.h5 was generated on another version of mesh 'train'")
    assert snapshot(tmp_path) == before


def test_mesh_hash_is_of_the_content():
    a = np.random.default_rng(0).random((5, 2))
    cells = np.array([[0, 1, 2], [2, 3, 4]])
    assert mesh_hash(a, cells) == mesh_hash(a, cells.astype(np.int32))  # the same mesh, any int type
    assert mesh_hash(a, cells) != mesh_hash(a, cells[:, [0, 2, 1]])
    assert mesh_hash(a, cells) != mesh_hash(a.reshape(2, 5), cells)
    b = a.copy()
    b[3, 1] += 1e-12
    assert mesh_hash(a, cells) != mesh_hash(b, cells)


# --- damaged weights and cells in a dataset file ----------------------------------------------


def _nan_node(points, cells, weight):
    points[3, 0] = np.nan


def _negative_weight(points, cells, weight):
    weight[7] = -0.1


def _nan_weight(points, cells, weight):
    weight[4] = np.nan


def _zero_weights(points, cells, weight):
    weight[:] = 0.0


def _cell_out_of_range(points, cells, weight):
    cells[3, 1] = len(points) + 5


def _negative_cell_index(points, cells, weight):
    cells[6, 0] = -1


def _cell_twice(points, cells, weight):
    cells[5] = cells[2][[1, 2, 0]]


DAMAGE = [
    (_nan_node, NonFiniteError, r"made.h5: mesh 'train': node 3 has a non-finite coordinate"),
    (_negative_weight, WeightError, r"made.h5: mesh 'train': weight 7 is negative"),
    (_nan_weight, WeightError, r"made.h5: mesh 'train': weight 4 is not finite"),
    (_zero_weights, WeightError, r"made.h5: mesh 'train': .*total weight 0"),
    (_cell_out_of_range, CellIndexError, r"made.h5: mesh 'train': cell 3 refers to node indices"),
    (_negative_cell_index, CellIndexError, r"made.h5: mesh 'train': cell 6 refers to node indices"),
    (_cell_twice, DuplicateCellError, r"made.h5: mesh 'train': cell 5 .* repeats cell 2"),
]


@pytest.mark.parametrize("damage, error, match", DAMAGE, ids=[d[0].__name__[1:] for d in DAMAGE])
def test_damaged_mesh_refused_on_load(inputs, damage, error, match):
    path = inputs / "made.h5"
    with h5py.File(path, "r+") as fh:  # damage written with a matching checksum: only validation sees it
        g = fh["meshes/train"]
        points, cells, weight = g["points"][:], g["cells"][:], g["weight"][:]
        damage(points, cells, weight)
        g["points"][:], g["cells"][:], g["weight"][:] = points, cells, weight
        g.attrs["checksum"] = crc32(points, cells, weight)
    before = path.read_bytes()
    with pytest.raises(error, match=match):
        DarcyDataset(path)
    assert path.read_bytes() == before


# --- stopping a multi-worker generation ---------------------------------------------------------

SLOW = """
import sys, time
from geoattn.data import generate

real = generate.solve_sample


def slow(*args):
    time.sleep(0.05)
    return real(*args)


generate.solve_sample = slow
from geoattn.cli.entry import main  # as the console script

sys.exit(main())
"""


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, from /proc; None when it does not exist."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        state = _proc_state(int(stat.parent.name))
        if state is not None and state[1] == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pids, timeout: float) -> list[int]:
    """Pids among ``pids`` still running (not gone, not a zombie) after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if (_proc_state(p) or ("Z",))[0] not in ("Z", "X")]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _done(path: Path) -> int:
    try:
        with h5py.File(path, "r", locking=False) as fh:
            return int(fh["done"][:].sum())
    except (OSError, KeyError):
        return 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted dataset of the interrupted runs below."""
    out = tmp_path_factory.mktemp("reference") / "full.h5"
    assert main(argv(out, n="40")) == 0
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGINT-group"])
def test_stopped_workers_die_and_the_run_resumes(tmp_path, reference, how):
    out = tmp_path / "d.h5"
    args = argv(out, "--workers", "2", n="40")
    proc = subprocess.Popen([sys.executable, "-c", SLOW, *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _done(out) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        workers = _children(proc.pid)
        assert len(workers) >= 2
        if how == "SIGKILL":
            proc.kill()
        elif how == "SIGTERM":
            proc.terminate()
        else:  # Ctrl-C in a terminal: the whole foreground group gets SIGINT
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _alive(workers, timeout=10) == []
    if how == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == (143 if how == "SIGTERM" else 130)
        name = "SIGTERM" if how == "SIGTERM" else "SIGINT"
        assert err.strip().splitlines()[-1].startswith(f"geoattn generate: interrupted by {name}; the complete")
        assert "Traceback" not in err
    assert 2 <= _done(out) < 40
    assert main(args) == 0
    assert_same_samples(out, reference)


def _orphan(parent: int, pids) -> None:
    pids.send(os.getpid())  # written at once: the pid arrives even if we exit next
    threading.Thread(target=gen._watch_parent, args=(parent, 0.05), daemon=True).start()
    time.sleep(60)


def _middle(pids) -> None:
    child = multiprocessing.get_context("fork").Process(target=_orphan, args=(os.getpid(), pids))
    child.start()
    os._exit(0)  # die without waiting for the child


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /proc")
def test_parent_watcher_ends_an_orphan():
    """The worker guard used where prctl is missing (macOS, Windows): exit once orphaned."""
    ctx = multiprocessing.get_context("fork")
    received, pids = ctx.Pipe(duplex=False)
    middle = ctx.Process(target=_middle, args=(pids,))
    middle.start()
    assert received.poll(30)
    orphan = received.recv()
    middle.join(timeout=30)
    assert _alive([orphan], timeout=10) == []
