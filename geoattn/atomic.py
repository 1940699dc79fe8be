"""Atomic file writes, and the removal of what a killed write left behind.

A file is written under a temporary name beside its final place, synced to disk and moved there
with :func:`os.replace`, so a reader (or a crash) sees the old file or the new one, never half of
one. A process killed in the middle (``SIGKILL``, a power cut) leaves its temporary folder,
``.<name>.<pid>.<random>.tmp``; the next write of the same file, or :func:`remove_leftovers` on
the folder, removes those whose process is gone (on POSIX systems, where that can be asked
without harm; elsewhere they stay).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import GeoattnError, OutputError

_SUFFIX = ".tmp"


def _owner(entry: Path, name: str | None = None) -> int | None:
    """The pid in the name of a temporary folder of :func:`atomic_path` (for the file ``name``,
    when given), or ``None`` when ``entry`` is not one."""
    parts = entry.name.removesuffix(_SUFFIX).split(".")
    if not entry.name.endswith(_SUFFIX) or len(parts) < 4 or parts[0] or not parts[-2].isdigit():
        return None
    if name is not None and ".".join(parts[1:-2]) != name:
        return None
    return int(parts[-2])


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name != "posix":  # no harmless probe of another process: keep its files
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def remove_leftovers(folder: str | Path, name: str | None = None) -> list[Path]:
    """Remove the temporary folders that writes killed in ``folder`` left there (only those of
    the file ``name``, when given), sparing those of processes still running; returns them."""
    folder = Path(folder)
    removed = []
    pattern = f".{name}.*{_SUFFIX}" if name is not None else f".*{_SUFFIX}"
    for entry in folder.glob(pattern):
        pid = _owner(entry, name)
        if pid is not None and entry.is_dir() and not _running(pid):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _sync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a path to write ``path`` through; what was written there replaces ``path`` only when
    the block succeeds, so a reader (or a crash) never sees half a file, and a failed write leaves
    the previous file, if any, as it was.

    The yielded path has ``path``'s name inside a fresh hidden folder beside it,
    ``.<name>.<pid>.<random>.tmp``, so writers that take the format from the extension, or add
    companion files named after it (XDMF's ``.h5``), work unchanged: each file written there is
    synced to disk and moved beside ``path`` with :func:`os.replace`. The folder is removed when
    the block ends, however it ends (an exception, Ctrl-C); one left by a killed process is
    removed by the next write of ``path``. Missing parent folders are created. File-system errors
    (a file where a folder is needed, a folder in the way, no permission, a full disk) raise
    :class:`~geoattn.errors.OutputError` naming ``path``.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(path.parent, path.name)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=_SUFFIX, dir=path.parent))
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        yield tmp / path.name
        written = sorted(tmp.iterdir())
        for file in written:
            _sync(file)
        for file in written:
            os.replace(file, path.parent / file.name)
    except OSError as err:
        if isinstance(err, GeoattnError):
            raise
        raise OutputError(f"cannot write {path}: {_reason(err)}") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _reason(err: OSError) -> str:
    """Why a write failed, in words: the system's (``No space left on device``), or for NumPy's
    short write (``3072 requested and 1027 written``, which names no cause), that of a full disk."""
    if err.errno is None and re.search(r"\d+ requested and \d+ written", str(err)):
        return f"No space left on device (a short write: {err})"
    return err.strerror or str(err)


class GuardedFile(io.RawIOBase):
    """A file as h5py's ``fileobj`` driver sees it: a write or truncation that fails (``ENOSPC``
    on a full disk, a quota) is kept in :attr:`error` and reported to HDF5 as done.

    HDF5 cannot recover from a failed write: the handle is left broken, and closing it crashes
    the process (a segmentation fault, after pages of tracebacks). With this file HDF5 never sees
    one, and the caller raises :attr:`error` (:meth:`check`) after closing the handle, before
    flagging anything whose values may be incomplete, or instead of publishing the file. From the
    first failure on, what HDF5 writes is kept in memory and read back from there (HDF5 reads its
    own metadata again), so it sees a consistent file until the caller stops; callers check
    after every sample, which bounds that memory by one sample.
    """

    def __init__(self, path: str | Path, mode: str):
        super().__init__()
        self._fh = open(path, mode, buffering=0)
        self.error: OSError | None = None
        self._overlay: list[tuple[int, bytes]] = []  # what was written after the first failure
        self._size: int | None = None  # the file's size as HDF5 sees it, after the first failure

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_END and self._size is not None:
            return self._fh.seek(self._size + offset, os.SEEK_SET)
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def readinto(self, buffer) -> int:
        start = self._fh.tell()
        got = self._fh.readinto(buffer)
        if self._size is None:
            return got
        view = memoryview(buffer).cast("B")
        want = max(0, min(len(view), self._size - start))
        view[got:want] = bytes(want - got) if want > got else b""
        for offset, data in self._overlay:  # later writes win
            lo, hi = max(offset, start), min(offset + len(data), start + want)
            if lo < hi:
                view[lo - start:hi - start] = data[lo - offset:hi - offset]
        self._fh.seek(start + want)
        return want

    def _fail(self, err: OSError) -> None:
        if self.error is None:
            self.error = err
            here = self._fh.tell()
            self._size = self._fh.seek(0, os.SEEK_END)
            self._fh.seek(here)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        start = self._fh.tell()
        if self.error is None:
            try:
                done = 0
                while done < len(view):
                    done += self._fh.write(view[done:])
                return len(view)
            except OSError as err:
                self._fail(err)
                self._fh.seek(start)
        self._overlay.append((start, bytes(view)))
        self._size = max(self._size, start + len(view))
        self._fh.seek(start + len(view))
        return len(view)

    def truncate(self, size: int | None = None) -> int:
        size = self._fh.tell() if size is None else size
        if self.error is None:
            try:
                return self._fh.truncate(size)
            except OSError as err:
                self._fail(err)
        self._size = size
        return size

    def flush(self) -> None:
        return None

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        self._overlay.clear()
        super().close()

    def check(self, what: str, advice: str = "") -> None:
        """Raise :class:`~geoattn.errors.OutputError` (``cannot {what}: {reason}{advice}``) for the
        first failed write, if any."""
        if self.error is not None:
            err = self.error
            raise OutputError(f"cannot {what}: {err.strerror or err}{advice}") from err


@contextlib.contextmanager
def guarded_h5(path: str | Path, mode: str, what: str, advice: str = ""):
    """``h5py.File`` on ``path`` through :class:`GuardedFile` (``mode`` ``"w"`` or ``"r+"``),
    yielded with the guard and closed at the end of the block; then a write that failed in it
    raises :class:`~geoattn.errors.OutputError` (``cannot {what}: No space left on
    device{advice}``). Every command that writes an HDF5 file (``generate``, ``import``) writes
    it through this, so a full disk is one line and never a crash of HDF5."""
    import h5py

    guard = GuardedFile(path, "w+b" if mode == "w" else "r+b")
    try:
        with h5py.File(guard, mode) as fh:
            yield fh, guard
    finally:
        guard.close()
    guard.check(what, advice)


def check_space(path: str | Path, need: int, advice: str) -> None:
    """Refuse (:class:`~geoattn.errors.OutputError`) to write about ``need`` bytes at ``path``
    when its file system has less free space, before anything is written; ``advice`` says what
    to do (fewer samples, another folder). For writers that cannot be guarded byte by byte
    (meshio's XDMF companion, a plot)."""
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if need > free:
        raise OutputError(f"cannot write {path}: it needs about {need / 1e6:.3g} MB but {folder} has "
                          f"{free / 1e6:.3g} MB free; {advice}")


__all__ = ["GuardedFile", "atomic_path", "check_space", "guarded_h5", "remove_leftovers"]
