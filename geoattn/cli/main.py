"""Entry point of the ``geoattn`` command: ``main(argv=None)`` with argparse subcommands.

Each subcommand module exposes ``add_args(parser)`` and ``run(args) -> int``, and imports what
needs an optional extra (data, plots) in ``run``, so that every command's help and ``geoattn info``
work with the core dependencies. Only the module of the command named on the command line is
imported (``geoattn --help`` imports none, and so no torch); help texts are printed as written
(:class:`argparse.RawDescriptionHelpFormatter`), with Sphinx roles shown as plain names. Library code raises; only this function turns errors into an
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
import importlib
import logging
import re
import sys
import traceback

from .. import __version__
from ..errors import ConfigError, GeoattnError
from ..optional import MissingDependencyError
from .entry import name_command, report

#: each command: (its module in geoattn.cli, imported only when the command runs; one line of help)
COMMANDS = {
    "demo": ("demo", "run the main demonstration"),
    "info": ("info", "read, validate and summarise a mesh file"),
    "generate": ("generate", "generate a multi-mesh Darcy dataset file (resumable)"),
    "import": ("importer", "build a dataset file from your own simulation mesh files (resumable)"),
    "train": ("train", "train a neural operator on a dataset file (resumable)"),
    "evaluate": ("evaluate", "score a checkpoint on every mesh, or every test set, of a dataset file"),
    "predict": ("predict", "run a checkpoint on mesh files (files, folders, globs); write the predictions"),
}


def command_module(name: str):
    """The module of the command ``name`` (imported now)."""
    return importlib.import_module(f".{COMMANDS[name][0]}", __package__)


_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def plain(text: str | None) -> str | None:
    """A docstring as help text: Sphinx roles (``:func:`~a.b``) shown as their names, ````code````
    as ``code``, and the ``::`` that opens a literal block as ``:``."""
    if text is None:
        return None
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else m.group(1), text)
    return text.replace("``", "`").replace("::\n", ":\n")

#: the failures answered with a one-line message (exit code 2) rather than a traceback
EXPECTED = (GeoattnError, MissingDependencyError, OSError, ValueError)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad command line raises :class:`~geoattn.errors.ConfigError` (one line,
    answered by :func:`main`) instead of printing the usage and exiting."""

    def error(self, message: str):
        err = ConfigError(f"{message} (see {self.prog} --help)")
        err.prog = self.prog
        raise err


def _command_word(argv: list[str]) -> str | None:
    """The command named in ``argv`` (its first word that is not an option), or ``None``."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``geoattn`` parser. With ``argv``, only the command it names gets its arguments (and
    its module is imported); without, every command does."""
    parser = ArgumentParser(
        prog="geoattn", description="Mesh-agnostic neural operators with quadrature-weighted attention.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"geoattn {__version__}")
    verbose = {"action": "store_true", "help": "log progress details, and show the traceback of an error"}
    parser.add_argument("-v", "--verbose", **verbose)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = list(COMMANDS) if argv is None else [_command_word(argv)]
    for name, (_, help_text) in COMMANDS.items():
        if name not in wanted:
            sub.add_parser(name, help=help_text)  # listed in the help; its module is not imported
            continue
        module = command_module(name)
        p = sub.add_parser(name, help=help_text, description=plain(module.__doc__),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
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
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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
    except KeyboardInterrupt as err:  # Ctrl-C, or a Stopped from the console script's handlers
        return report(prog, err, getattr(command_module(args.command), "INTERRUPTED", ""))
    except Exception as err:
        stop = _stop_behind(err)
        if stop is not None:  # raised by the clean-up the stop began (a write it cut short): the stop's
            return report(prog, stop, getattr(command_module(args.command), "INTERRUPTED", ""))
        if isinstance(err, EXPECTED):
            return _fail(prog, err, args.verbose)
        raise


def _stop_behind(err: BaseException) -> KeyboardInterrupt | None:
    """The interrupt (Ctrl-C, or a :class:`~geoattn.cli.entry.Stopped`) during whose handling
    ``err`` was raised, if any: a library's own clean-up can fail when a signal cut its work
    short (torch's checkpoint writer closing a half-written archive), and that error replaces
    the interrupt."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, KeyboardInterrupt):
            return err
        err = err.__cause__ or err.__context__
    return None


if __name__ == "__main__":  # pragma: no cover
    from .entry import main as console

    sys.exit(console())
