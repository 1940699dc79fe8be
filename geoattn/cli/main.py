"""Entry point of the ``geoattn`` command: ``main(argv=None)`` with argparse subcommands.

Each subcommand module exposes ``add_args(parser)`` and ``run(args) -> int``, and imports what
needs an optional extra (data, plots) in ``run``, so that every command's help and ``geoattn info``
work with the core dependencies. Library code raises; only this function turns errors into an
exit code and a one-line message (a missing extra included).
"""

from __future__ import annotations

import argparse
import logging
import sys

from .. import __version__
from ..errors import MeshError
from ..optional import MissingDependencyError
from . import demo, evaluate, generate, info, predict, train

COMMANDS = {
    "demo": (demo, "run the main demonstration"),
    "info": (info, "read, validate and summarise a mesh file"),
    "generate": (generate, "generate a multi-mesh Darcy dataset file (resumable)"),
    "train": (train, "train a neural operator on a dataset file (resumable)"),
    "evaluate": (evaluate, "score a checkpoint on every mesh of a dataset file"),
    "predict": (predict, "run a checkpoint on a mesh file and write the prediction"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="geoattn", description="Mesh-agnostic neural operators with quadrature-weighted attention."
    )
    parser.add_argument("--version", action="version", version=f"geoattn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_args(p)
        p.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.run(args)
    except (MeshError, FileNotFoundError, ValueError, MissingDependencyError) as err:
        print(f"geoattn {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
