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
import os
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
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["atomic_path", "remove_leftovers"]
