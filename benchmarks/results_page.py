"""Write a benchmark's results page under ``docs/results/``.

Every page has one fixed layout, so that a page written by a benchmark's ``--docs PATH`` and a
page written by hand look the same::

    # <title>

    Written by: `<command>`

    Machine: <machine>

    <tables: markdown, may hold ## subheadings>

    <notes: at most a short paragraph; left out when empty>

The page holds the latest run only: writing it replaces the previous page (git history keeps the
earlier runs). The file is written to a temporary file beside it and renamed over it, so a page
is never left half-written.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["render_page", "write_page", "add_docs_argument", "markdown_table"]


def render_page(title: str, command: str, table_markdown: str, machine: str,
                notes: str = "") -> str:
    """The text of a results page (see the module docstring for the layout)."""
    title, command, machine = (" ".join(str(s).split()) for s in (title, command, machine))
    for name, value in (("title", title), ("command", command), ("machine", machine)):
        if not value:
            raise ValueError(f"a results page needs a {name}")
    if "`" in command:
        raise ValueError("the command is set in backticks and must not contain one")
    table = table_markdown.strip()
    if not table:
        raise ValueError("a results page needs its table")
    parts = [f"# {title}", f"Written by: `{command}`", f"Machine: {machine}", table]
    if notes.strip():
        parts.append(notes.strip())
    return "\n\n".join(parts) + "\n"


def write_page(path, title: str, command: str, table_markdown: str, machine: str,
               notes: str = "") -> Path:
    """Write the page ``render_page(...)`` to ``path`` atomically; return the path."""
    path = Path(path)
    text = render_page(title, command, table_markdown, machine, notes)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown pipe table; cells are written with ``str`` and must not contain ``|``."""
    header = [str(h) for h in header]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = ["" if c is None else str(c) for c in row]
        if len(cells) != len(header):
            raise ValueError(f"row {cells} has {len(cells)} cells, the header {len(header)}")
        if any("|" in c or "\n" in c for c in cells):
            raise ValueError(f"a cell of {cells} holds '|' or a line break")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_docs_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--docs PATH``: write the run's results page there (e.g. docs/results/<name>.md)."""
    parser.add_argument(
        "--docs", metavar="PATH", type=Path, default=None,
        help="also write this run's results page (markdown) to PATH, e.g. "
             "docs/results/<benchmark>.md; it replaces the page there")
    return parser
