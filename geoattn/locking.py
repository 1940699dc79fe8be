"""Locks on the run folders and dataset files geoattn writes, so that two processes never write
the same one.

:func:`hold` takes the lock of a folder (the file ``.geoattn.lock`` inside it) or of a file (the
file ``.<name>.lock`` beside it) and keeps it for the duration of a ``with`` block; a second
process asking for it is refused at once with :class:`~geoattn.errors.LockError`, whose message
names the folder or file and the pid of the process holding it.

The lock is :func:`fcntl.flock` on the lock file (:func:`msvcrt.locking` on Windows): the kernel
releases it when the holding process ends, however it ends (``SIGKILL`` included), so a killed
run never leaves a lock behind that refuses the next one. The holder removes the lock file when
it lets go (and the folder the lock created, when nothing else was written to it); a taker that
finds its lock file removed under it starts again on a fresh one, so two processes can never hold
locks on two different files of the same name. A process that holds a lock may take it again
(the calls nest); processes forked while it is held share it (they end with their parent).
Where neither ``fcntl`` nor ``msvcrt`` exists, nothing is locked and a warning is logged.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from .errors import LockError, OutputError
from .paths import symlink_loop

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
try:
    import msvcrt
except ImportError:
    msvcrt = None

log = logging.getLogger(__name__)

FOLDER_LOCK = ".geoattn.lock"
#: byte of the lock file that msvcrt locks (past the pid, which stays readable)
_MSVCRT_BYTE = 1 << 20
#: locks this process holds: lock file -> [descriptor, depth]
_HELD: dict[Path, list[int]] = {}
_GUARD = threading.Lock()


def lock_file(target: str | Path, folder: bool = False) -> Path:
    """The lock file of folder ``target`` (inside it) or of file ``target`` (beside it), with
    symbolic links resolved, so that every spelling of one target names one lock."""
    target = Path(os.path.realpath(target))
    return target / FOLDER_LOCK if folder else target.with_name(f".{target.name}.lock")


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:  # pragma: no cover - Windows
            os.lseek(fd, _MSVCRT_BYTE, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, getattr(errno, "EDEADLOCK", -1)):
            return False
        log.warning("file locks do not work here (%s): nothing stops a second process writing the same "
                    "files", err.strerror or err)  # e.g. a network file system without lock support
    return True


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 32)
    except OSError:
        text = b""
    pid = text.decode(errors="replace").strip()
    return f"process {pid}" if pid.isdigit() else "another process"


def _acquire(lock: Path, target: Path, what: str) -> int:
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not _try_lock(fd):
                raise LockError(f"{what} {target} is in use by {_holder(fd)} (lock file {lock}); wait "
                                "for it to finish, or write elsewhere")
            try:  # the previous holder may have removed the file between our open and our lock
                current = os.stat(lock)
            except FileNotFoundError:
                current = None
            if current is not None and os.path.samestat(current, os.fstat(fd)):
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, f"{os.getpid()}\n".encode())
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _release(lock: Path, fd: int, made: list[Path]) -> None:
    if fcntl is not None:  # remove while still locked: a taker waiting on this file starts again
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
    else:  # pragma: no cover - Windows cannot remove an open file
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(lock)
    for folder in made:  # only when empty: never removes what was written
        try:
            os.rmdir(folder)
        except OSError:
            break


@contextlib.contextmanager
def hold(target: str | Path, *, folder: bool = False, what: str | None = None) -> Iterator[Path]:
    """Hold the lock of ``target`` (a folder with ``folder=True``, else a file) for the block.

    The folder (with ``folder=True``) or the file's folder is created when missing, and removed
    again at the end of the block when nothing was written to it. Yields the lock file.

    Args:
        target: the run folder or dataset file.
        folder: ``target`` is a folder (default ``False``: a file).
        what: how the message names ``target`` (default ``"run folder"`` or ``"file"``).

    Raises:
        LockError: another process holds the lock; its pid is named.
        OutputError: the lock file cannot be created (no permission, a symbolic link loop, a
            file where a folder is needed).
    """
    what = what or ("run folder" if folder else "file")
    target = Path(target)
    lock = lock_file(target, folder)
    with _GUARD:
        held = _HELD.get(lock)
        if held is not None:
            held[1] += 1
    if held is not None:
        try:
            yield lock
        finally:
            with _GUARD:
                held[1] -= 1
        return
    if fcntl is None and msvcrt is None:  # pragma: no cover - e.g. WebAssembly
        log.warning("no file locks on this platform: nothing stops a second process writing %s", target)
        yield lock
        return
    made = [p for p in (lock.parent, *lock.parent.parents) if not p.exists()]  # innermost first
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = _acquire(lock, target, what)
    except LockError:
        raise
    except OSError as err:
        loop = symlink_loop(target)
        reason = f"a symbolic link loop ({loop})" if loop else err.strerror or str(err)
        raise OutputError(f"cannot write {target}: {reason}") from err
    with _GUARD:
        _HELD[lock] = [fd, 1]
    try:
        yield lock
    finally:
        with _GUARD:
            depth = _HELD[lock][1] = _HELD[lock][1] - 1
            if depth == 0:
                del _HELD[lock]
        if depth == 0:
            _release(lock, fd, made)


__all__ = ["FOLDER_LOCK", "hold", "lock_file"]
