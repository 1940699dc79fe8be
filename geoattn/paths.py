"""Path checks shared by the commands that read and write files.

A symbolic link that points, directly or through others, back at itself makes every file-system
call on a path through it fail with ``ELOOP`` ("Too many levels of symbolic links"), or, for
``mkdir``, with a misleading "File exists". :func:`symlink_loop` finds such a loop and names its
links, so that the error says what to remove.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def _loops(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


def symlink_loop(path: str | Path) -> str | None:
    """The chain of symbolic links met when resolving ``path`` that leads back to itself, as
    ``"a -> b -> a"``, or ``None`` when resolving ``path`` (or the part of it that exists) meets
    no loop."""
    path = Path(os.path.abspath(path))
    if not _loops(path):
        return None
    start = next((p for p in (*reversed(path.parents), path) if _loops(p)), path)
    chain, seen, link = [start], {start}, start
    while link.is_symlink():
        link = Path(os.path.normpath(link.parent / os.readlink(link)))
        chain.append(link)
        if link in seen or _loops(link) and not link.is_symlink():
            break
        seen.add(link)
    return " -> ".join(str(p) for p in chain)


__all__ = ["symlink_loop"]
