"""Command-line options shared by several ``geoattn`` commands, defined once.

- The mesh reader's flags (:func:`add_reader_args`, read back by :func:`reader_options`):
  ``geoattn import`` and ``geoattn predict`` read a file the same way.
- Lists of names (:class:`NameList`): one convention everywhere, comma-separated, and a repeated
  flag appends (``--x a,f`` is ``--x a --x f``); each name once.
- A scalar flag given twice is refused (:class:`Once`) rather than silently keeping the last value.
"""

from __future__ import annotations

import argparse

from ..errors import ConfigError


class NameList(argparse.Action):
    """A flag whose values are names: comma-separated, appended over repeats, each name once."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = list(getattr(namespace, self.dest, None) or [])
        new = [n.strip() for n in str(values).split(",")]
        if not all(new):
            raise ConfigError(f"{option_string} must list names separated by commas, got {values!r}")
        twice = [n for i, n in enumerate(given + new) if n in (given + new)[:i]]
        if twice:
            raise ConfigError(f"{option_string} names {twice[0]!r} twice")
        setattr(namespace, self.dest, given + new)


class Once(argparse.Action):
    """A scalar flag that may be given once: a second value is refused, never silently kept."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, f"_given_{self.dest}", False):
            raise ConfigError(f"{option_string} is given twice ({getattr(namespace, self.dest)!r} and "
                              f"{values!r}); give it once")
        setattr(namespace, f"_given_{self.dest}", True)
        setattr(namespace, self.dest, values)


def names(value: list[str] | str | None, flag: str) -> list[str]:
    """The names of a :class:`NameList` flag (a comma-separated string is split the same way;
    ``[]`` for ``None``)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [n.strip() for n in value.split(",")]
    if not all(value) or len(set(value)) != len(value):
        raise ConfigError(f"{flag} must list distinct names separated by commas, got {','.join(value)!r}")
    return list(value)


def add_reader_args(parser: argparse.ArgumentParser) -> None:
    """The mesh reader's flags (:func:`~geoattn.mesh.from_meshio`'s options)."""
    parser.add_argument("--merge-duplicates", type=float, metavar="TOL", action=Once,
                        help="merge nodes closer than TOL (relative to the bounding-box diagonal) before "
                             "validation; only the fields read are checked to agree at merged nodes")
    parser.add_argument("--reorient", action="store_true", default=None,
                        help="reverse negatively oriented cells instead of refusing them")
    parser.add_argument("--cell-block", metavar="NAME|INDEX", action=Once,
                        help="the cell block to read (a cell type name, or a block's index); one that "
                             "leaves out nodes of other blocks is refused")
    parser.add_argument("--triangulate", action="store_true", default=None,
                        help="split each quad into two triangles (a mixed triangle/quad mesh is read whole)")
    parser.add_argument("--linearise", action="store_true", default=None,
                        help="read higher-order cells (triangle6, tetra10, ...) as linear cells of their "
                             "corners, dropping the other nodes and their values")
    parser.add_argument("--origin", action=Once, metavar="X,Y[,Z]",
                        help="a point subtracted from the coordinates, in float64, before anything else: "
                             "for meshes far from the origin (UTM-like coordinates), which float32 cannot "
                             "resolve; give every mesh of a domain the same one. `geoattn import` records "
                             "it in the dataset (`--origin auto`: the centre of the first file's nodes), "
                             "and the model trained on it applies it again in `geoattn predict`")
    parser.add_argument("--cell-to-point", action=NameList, metavar="NAMES",
                        help="cell field(s) to carry to the nodes (volume-weighted average of the cells "
                             "around each node), comma-separated (a repeated flag appends); --x and --y "
                             "may then name them")


def reader_options(args: argparse.Namespace) -> dict:
    """The mesh reader's options given on the command line (:func:`add_reader_args`); one the
    reader lacks is refused."""
    from ..data.meshdataset import reader_options as known_options

    cell_block = args.cell_block
    if cell_block is not None and cell_block.strip().lstrip("-").isdigit():
        cell_block = int(cell_block)
    given = {"merge_duplicates": args.merge_duplicates, "reorient": args.reorient, "cell_block": cell_block,
             "triangulate": args.triangulate, "linearise": args.linearise,
             "cell_to_point": args.cell_to_point, "origin": origin(getattr(args, "origin", None))}
    given = {k: v for k, v in given.items() if v is not None}
    known = known_options()
    missing = [k for k in given if k not in known]
    if missing:
        flags = ", ".join("--" + k.replace("_", "-") for k in missing)
        raise ConfigError(f"this geoattn's mesh reader has no option {flags}")
    if "merge_duplicates" in given and not given["merge_duplicates"] >= 0:
        raise ConfigError(f"--merge-duplicates must be a number >= 0, got {args.merge_duplicates}")
    return given


def origin(text: str | None) -> list[float] | str | None:
    """The point of ``--origin X,Y[,Z]`` as finite floats (``"auto"`` kept as it is; ``None``
    when not given)."""
    import math

    if text is None or text.strip() == "auto":
        return None if text is None else "auto"
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 3 or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"--origin must be 1 to 3 finite numbers X,Y[,Z] (one per coordinate) or auto, "
                          f"got {text!r}")
    return values


__all__ = ["NameList", "Once", "add_reader_args", "names", "origin", "reader_options"]
