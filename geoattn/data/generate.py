"""Generate a multi-mesh Darcy dataset file from a recipe: parallel, with progress, resumable.

Every sample is solved on every mesh of the recipe (the same continuum coefficient on each) and
written to the file as soon as it is done, with its completion flag. Running the same generation
again on an existing file checks that the recipe and the meshes' content (:func:`mesh_hash`)
match and solves only the samples that are not flagged done, so an interrupted generation resumes
without redoing work.

Faults:

- Everything is checked before the file is created (the recipe, every mesh, the field, the free
  disk space for the whole file), so a failed start leaves no file behind; a file created by a run
  that fails before its first sample is removed.
- The file's storage is allocated when it is created, and a sample's values reach the file before
  its flag, so a process killed at any moment (``SIGKILL`` included) leaves a readable file whose
  flagged samples are complete.
- A full disk (``ENOSPC``, or a quota) during a write stops the generation with
  :class:`~geoattn.errors.OutputError` before the sample is flagged: the file keeps every sample
  flagged before, and the same call resumes once there is room. HDF5 cannot recover from a failed
  write (closing its handle then crashes the process), so the file is written through a file object
  that keeps the error from HDF5 and raises it after the handle is closed (:class:`geoattn.atomic.GuardedFile`).
- The file is locked while a generation writes it (:func:`geoattn.locking.hold`, the file
  ``.<name>.lock`` beside it): a second generation into the same file is refused, naming the first
  one's pid; the kernel releases the lock of a killed process, and its workers, which share it,
  die with it.
- Ctrl-C (``SIGINT``) and ``SIGTERM`` ask the generation to stop: the sample being written is
  finished, then the handler the signal had before is called (the ``geoattn`` command's raises
  :class:`~geoattn.cli.entry.Stopped`, which sets its exit status), the workers are killed, the
  file is closed with every complete sample in it, and :class:`KeyboardInterrupt` is raised
  (a second signal stops at once). The signals are handled this way only when generating from
  the main thread; a signal the process ignores stays ignored.
- Worker processes die with their parent: on Linux through ``prctl(PR_SET_PDEATHSIG, SIGKILL)``
  (the kernel kills them the moment the parent dies, however it dies), elsewhere through a thread
  that polls the parent's pid every second. They are started before the dataset file is opened,
  so none inherits its handle or its HDF5 lock, and they ignore ``SIGINT`` (a Ctrl-C reaches the
  whole process group; the parent stops them).
- At most ``2 * workers`` samples are in flight and completion flags are read in blocks, so memory
  stays flat for any number of samples.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import datetime
import functools
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import meshio
import numpy as np
import torch

from .. import __version__
from ..atomic import GuardedFile, guarded_h5
from ..errors import ConfigError, DatasetFileError, OutputError
from ..locking import hold
from ..paths import symlink_loop
from ..mesh import MeshData, from_meshio
from ..mesh.validation import located
from ..optional import progress as progress_bar, require
from .darcy import DarcyProblem, solve_sample
from .dataset import FORMAT, FORMAT_VERSION, crc32, mesh_hash, open_dataset_file
from .recipe import Recipe
from .xdmf import step_bytes, write_xdmf

h5py = require("h5py", "data", "dataset files")
log = logging.getLogger(__name__)

#: Completion flags read at a time.
_BLOCK = 1 << 20
_PR_SET_PDEATHSIG = 1

_WORKER: dict = {}


def _die_with_parent(parent: int) -> None:
    """Make this worker exit when process ``parent`` dies, however it dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    else:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the above took effect
        os._exit(1)


def _watch_parent(parent: int, interval: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(1)


def _init_worker(parent: int, state: dict) -> None:
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _WORKER.update(state)


def _solve(index: int, state: dict | None = None):
    s = state or _WORKER
    r = s["recipe"]
    return index, solve_sample(s["problems"], s["field"], r.seed, index, r.family, r.f)


def _prepare(recipe: Recipe, meshes: dict[str, meshio.Mesh]) -> tuple[dict[str, MeshData], dict]:
    """Validate the meshes and build their solvers: ``(mesh data by name, solver state)``."""
    field = recipe.field()
    bases, problems = {}, {}
    for name, mesh in meshes.items():
        with located(f"mesh {name!r}"):
            bases[name] = from_meshio(mesh, dtype=torch.float64)
        try:
            problems[name] = DarcyProblem(mesh)
        except ValueError as err:
            raise ConfigError(f"mesh {name!r}: {err}") from err
        dim = bases[name].pos.shape[1]
        if dim != field.dim:
            raise ConfigError(f"mesh {name!r} is {dim}-D but the field's box is {field.dim}-D; give "
                              "the recipe's grf a box of the mesh's dimension, e.g. "
                              "box = [[0, 0, 0], [1, 1, 1]]")
    return bases, {"recipe": recipe, "field": field, "problems": problems}


def _check_space(path: Path, samples: int, bases: dict[str, MeshData], n: int) -> None:
    """Refuse ``samples`` more samples (of ``n``) when they would not fit on the disk."""
    per_sample = 1 + sum(16 * len(d.pos) + 4 + step_bytes(path.name, name, n, d.pos.shape,
                                                          d.cells.shape, d.cell_type)
                         for name, d in bases.items())
    need = samples * per_sample
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if need > free:
        raise ConfigError(f"{samples} samples need about {need / 1e9:.3g} GB (the dataset and its "
                          f"XDMF companions) but {folder} has {free / 1e9:.3g} GB free; generate "
                          "fewer samples (--n) or write elsewhere")


def _allocated(group, name: str, shape: tuple, dtype: str, fillvalue=None):
    """A contiguous dataset whose storage is allocated now: writing a sample later changes no
    file metadata, so a process killed in the middle of a write leaves a readable file."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return group.create_dataset(name, shape=shape, dtype=dtype, fillvalue=fillvalue, dcpl=dcpl)


#: what a failed sample write adds to its message
_RESUME = "; the samples written before are kept: make room and run the same command again to resume"


def _create(path: Path, recipe: Recipe, bases: dict[str, MeshData]) -> None:
    tmp = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with guarded_h5(tmp, "w", f"create {path}") as (fh, _):
            fh.attrs.update(format=FORMAT, format_version=FORMAT_VERSION, geoattn_version=__version__,
                            recipe=recipe.to_json(), n=recipe.n, seed=recipe.seed,
                            created=datetime.datetime.now(datetime.timezone.utc).isoformat())
            _allocated(fh, "done", (recipe.n,), "u1", fillvalue=0)
            group = fh.create_group("meshes")
            for name, data in bases.items():
                points, cells, weight = data.pos.numpy(), data.cells.numpy(), data.weight.numpy()
                g = group.create_group(name)
                g["points"], g["cells"], g["weight"] = points, cells, weight
                g.attrs.update(cell_type=data.cell_type, checksum=crc32(points, cells, weight),
                               mesh_hash=mesh_hash(points, cells))
                for key in ("x", "y"):
                    _allocated(g, key, (recipe.n, len(points)), "f8")
                _allocated(g, "checksum", (recipe.n,), "u4")
        tmp.replace(path)  # the file appears only once its header and meshes are complete
    except BaseException as err:
        if tmp.exists():
            tmp.unlink()
        if isinstance(err, OSError) and not isinstance(err, OutputError):
            raise OutputError(f"cannot write {path} ({err})") from err
        raise


def _check_same(path: Path, fh: h5py.File, recipe: Recipe, bases: dict[str, MeshData]) -> None:
    stored = Recipe.from_json(str(fh.attrs["recipe"]))
    if stored != recipe:
        raise DatasetFileError(
            f"{path} exists and was made by a different recipe ({stored.to_json()}); delete it or "
            "write to another file")
    for name, data in bases.items():
        g = fh["meshes"].get(name)
        if g is None:
            raise DatasetFileError(f"{path} has no mesh {name!r}, which its recipe names (damaged file)")
        was = g.attrs.get("mesh_hash") or mesh_hash(g["points"][:], g["cells"][:])
        if mesh_hash(data.pos.numpy(), data.cells.numpy()) != was:
            raise DatasetFileError(
                f"{path} was generated on another version of mesh {name!r} "
                f"({recipe.meshes[name]}): its nodes or cells changed since; restore that mesh to "
                "resume, or write to another file")


def _flag_blocks(done):
    for start in range(0, done.shape[0], _BLOCK):
        yield start, done[start:start + _BLOCK]


def _todo(done):
    """Indices of the samples not flagged done, read block by block."""
    for start, flags in _flag_blocks(done):
        yield from (start + int(i) for i in np.flatnonzero(flags == 0))


def _write(path: Path, fh: h5py.File, guard: GuardedFile, index: int, result: dict) -> None:
    """Write sample ``index``, then its flag; a write that fails (a full disk) stops before the
    flag: the file keeps every sample flagged before, and the next run resumes from them."""
    what = f"write sample {index} to {path}"
    try:
        for name, (x, y) in result.items():
            g = fh["meshes"][name]
            g["x"][index], g["y"][index] = x, y
            g["checksum"][index] = crc32(x, y)
        fh.flush()  # the values reach the file before their flag
        guard.check(what, _RESUME)
        fh["done"][index] = 1
        fh.flush()
        guard.check(what, _RESUME)
    except OSError as err:
        if isinstance(err, OutputError):
            raise
        raise OutputError(f"cannot {what}: {err}{_RESUME}") from err


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill the workers now (a sample they were solving is lost, never half-written) and drop
    the queued samples. Python has no public way to do this before 3.14 (``kill_workers``)."""
    for process in list((pool._processes or {}).values()):
        process.kill()
    pool.shutdown(wait=True, cancel_futures=True)


def _pooled(pool: ProcessPoolExecutor, workers: int, todo):
    pending = collections.deque()
    for index in todo:
        pending.append(pool.submit(_solve, index))
        if len(pending) >= 2 * workers:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


class _StopRequest(threading.Event):
    """Set by the first ``SIGINT`` or ``SIGTERM`` (:attr:`signum`) while generating; :meth:`stop`
    stops the generation as the handler of that signal installed before would have."""

    def __init__(self):
        super().__init__()
        self.signum: int | None = None
        self.previous: dict[int, object] = {}

    def stop(self, done: bool = False) -> None:
        """Call the previous handler of the signal received (the application's: the ``geoattn``
        command's raises :class:`~geoattn.cli.entry.Stopped`, Python's default for ``SIGINT``
        raises :class:`KeyboardInterrupt`); raise :class:`KeyboardInterrupt` if there was none
        (``SIGTERM``'s default), or if it returns and the generation is not ``done``."""
        handler = self.previous.get(self.signum)
        if callable(handler):
            handler(self.signum, None)
            if done:
                return
        raise KeyboardInterrupt


@contextlib.contextmanager
def _stop_requests():
    """A :class:`_StopRequest` set by ``SIGINT`` or ``SIGTERM``; a second signal stops at once.

    A handler that raises at once could land in a weakref callback or a ``__del__``, where
    Python prints and drops the exception, and the generation would go on: so the first signal
    only asks, and the generation stops at its next check (:func:`_stop_if`) the way the
    handler it replaced would have stopped it, which gives the application its say (the
    ``geoattn`` command's exit status of each signal). A signal the process ignores stays
    ignored; the previous handlers are back when the block ends, and a signal that came after
    the last check (in the XDMF write) is given to them then: a stop requested is never dropped.
    """
    requested = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return

    def handler(signum, frame):
        if requested.is_set():
            requested.stop()
        requested.signum = signum
        requested.set()

    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:
            requested.previous[s] = signal.signal(s, handler)
    try:
        yield requested
    finally:
        for s, h in requested.previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
    if requested.is_set():
        requested.stop(done=True)


def _stop_if(requested: _StopRequest) -> None:
    if requested.is_set():
        requested.stop()


@contextlib.contextmanager
def _solver(state: dict, workers: int):
    """``solve(indices) -> iterator of (index, {mesh: (x, y)})``, in this process or in ``workers``
    worker processes that die with this one; on an exception (Ctrl-C included) they are killed."""
    if workers == 1:
        yield lambda todo: (_solve(i, state) for i in todo)
        return
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(os.getpid(), state))
    try:
        pool.submit(int).result()  # start the workers now, before the dataset file is opened
        yield functools.partial(_pooled, pool, workers)
    except BaseException:
        _kill(pool)
        raise
    pool.shutdown()


def generate_darcy(path: str | Path, recipe: Recipe, *, workers: int = 1, progress: bool = True,
                   base: Path | None = None, xdmf: bool = True) -> Path:
    """Generate (or resume) the dataset file of ``recipe`` at ``path``.

    Args:
        path: output ``.h5`` file; its folder is created.
        recipe: what to generate.
        workers: processes (``1``: in this process), at most four per core. (default: ``1``)
        progress: show a progress bar, with tqdm (the ``progress`` extra). (default: ``True``)
        base: folder against which relative mesh paths of the recipe resolve (its folder).
        xdmf: write the ParaView companions ``<path stem>.<mesh>.xdmf``. (default: ``True``)

    Returns:
        The path of the dataset file.

    Raises:
        ConfigError: ``workers`` out of range, a mesh unfit for the recipe, or not enough free
            disk space; nothing is written.
        MeshError, FileNotFoundError: a mesh is invalid or missing; nothing is written.
        DatasetFileError: ``path`` is not a dataset file, or was made by another recipe or on
            other meshes; it is left unchanged.
        OutputError: ``path`` cannot be written, or the disk filled up (every sample flagged
            before is kept, and the same call resumes once there is room).
        LockError: another process is writing ``path``; nothing is written.
        KeyboardInterrupt: on Ctrl-C or ``SIGTERM``; every complete sample is kept, and the same
            call resumes.
    """
    path = Path(path)
    limit = 4 * (os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= limit:
        raise ConfigError(f"workers must be an integer in [1, {limit}] (four per core), got {workers!r}")
    loop = symlink_loop(path)
    if loop:
        raise OutputError(f"cannot write {path}: it leads through a symbolic link loop ({loop}); remove "
                          "one of these links, or give another path")
    with hold(path, what="dataset file"), _stop_requests() as stop:  # a second writer is refused
        bases, state = _prepare(recipe, recipe.load_meshes(base))
        if path.is_dir():
            raise OutputError(f"{path} is a folder; give a file name such as {path / 'data.h5'}")
        created = not path.exists()
        if created:
            _check_space(path, recipe.n, bases, recipe.n)
            _create(path, recipe, bases)
        with open_dataset_file(path) as fh:
            _check_same(path, fh, recipe, bases)
            remaining = sum(int((flags == 0).sum()) for _, flags in _flag_blocks(fh["done"]))
        if not created and remaining:
            log.info("%s: resuming, %d of %d samples already done", path, recipe.n - remaining, recipe.n)
            _check_space(path, remaining, bases, recipe.n)
        written = 0
        try:
            _stop_if(stop)
            if remaining:
                with _solver(state, min(workers, remaining)) as solve, \
                        guarded_h5(path, "r+", f"write to {path}", _RESUME) as (fh, guard), \
                        progress_bar(total=recipe.n, initial=recipe.n - remaining, enabled=progress,
                                     desc=path.name, unit="sample") as bar:
                    for index, result in solve(_todo(fh["done"])):
                        _write(path, fh, guard, index, result)
                        written += 1
                        bar.update()
                        _stop_if(stop)
        except BaseException:
            log.info("%s: stopped after writing %d more samples", path, written)
            if created and not written:
                path.unlink(missing_ok=True)  # this run made the file and put nothing in it
            raise
        if xdmf:
            try:
                write_xdmf(path)
            except OSError as err:
                raise OutputError(f"{path} is complete, but its XDMF companions cannot be written "
                                  f"({err.strerror or err}); make room and run the same command "
                                  "again to write them") from err
    return path


__all__ = ["generate_darcy"]
