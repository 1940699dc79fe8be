"""Entry point of the ``geoattn`` command: ``main(argv=None)`` with argparse subcommands.

Each subcommand module exposes ``add_args(parser)`` and ``run(args) -> int``, and imports what
needs an optional extra (data, plots) in ``run``, so that every command's help and ``geoattn info``
work with the core dependencies. Library code raises; only this function turns errors into an
exit code and a one-line message: every error geoattn raises on purpose
(:class:`~geoattn.errors.GeoattnError`), a missing extra, a file-system error, a bad value and a
bad command line alike exit with code 2 and one line on stderr, ``geoattn COMMAND: error: ...``;
with ``-v`` the traceback comes first.

Exit statuses: 0 done, 2 an error (above), **130** interrupted by ``SIGINT`` (Ctrl-C), **143**
stopped by ``SIGTERM``: ``128 +`` the signal's number, as a shell reports a process that the
signal ended, with one line on stderr, ``geoattn COMMAND: interrupted by SIGINT`` (or
``SIGTERM``) and what to run to resume, never a traceback. This holds at every stage, from the
imports to the last write: the console script's entry point, :func:`geoattn.cli.entry.main`,
installs the handlers before anything heavy is imported; a second signal ends the command at
once, with the same status. ``SIGKILL`` cannot be answered (a shell reports 137); every file a
command writes is written atomically or resumably, and its next run removes the temporary files
a killed one left. Called from Python, :func:`main` answers a :class:`KeyboardInterrupt` the same
way (130) and leaves the signal handlers as they are.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback

from .. import __version__
from ..errors import ConfigError, GeoattnError
from ..optional import MissingDependencyError
from . import demo, evaluate, generate, importer, info, predict, train
from .entry import name_command, report

COMMANDS = {
    "demo": (demo, "run the main demonstration"),
    "info": (info, "read, validate and summarise a mesh file"),
    "generate": (generate, "generate a multi-mesh Darcy dataset file (resumable)"),
    "import": (importer, "build a dataset file from your own simulation mesh files (resumable)"),
    "train": (train, "train a neural operator on a dataset file (resumable)"),
    "evaluate": (evaluate, "score a checkpoint on every mesh of a dataset file"),
    "predict": (predict, "run a checkpoint on a mesh file and write the prediction"),
}

#: the failures answered with a one-line message (exit code 2) rather than a traceback
EXPECTED = (GeoattnError, MissingDependencyError, OSError, ValueError)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad command line raises :class:`~geoattn.errors.ConfigError` (one line,
    answered by :func:`main`) instead of printing the usage and exiting."""

    def error(self, message: str):
        err = ConfigError(f"{message} (see {self.prog} --help)")
        err.prog = self.prog
        raise err


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="geoattn", description="Mesh-agnostic neural operators with quadrature-weighted attention."
    )
    parser.add_argument("--version", action="version", version=f"geoattn {__version__}")
    verbose = {"action": "store_true", "help": "log progress details, and show the traceback of an error"}
    parser.add_argument("-v", "--verbose", **verbose)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=module.__doc__)
        p.add_argument("-v", "--verbose", default=argparse.SUPPRESS, **verbose)  # after the command too
        module.add_args(p)
        p.set_defaults(run=module.run)
    return parser


def _fail(prog: str, err: BaseException, verbose: bool) -> int:
    if verbose:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    message = " ".join(str(err).split()) or type(err).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except ConfigError as err:
        return _fail(getattr(err, "prog", "geoattn"), err, verbose=False)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command is None:
        parser.print_help()
        return 0
    prog = f"geoattn {args.command}"
    name_command(prog)
    try:
        return args.run(args)
    except EXPECTED as err:
        return _fail(prog, err, args.verbose)
    except KeyboardInterrupt as err:  # Ctrl-C, or a Stopped from the console script's handlers
        return report(prog, err, getattr(COMMANDS[args.command][0], "INTERRUPTED", ""))


if __name__ == "__main__":  # pragma: no cover
    from .entry import main as console

    sys.exit(console())
