"""The ``geoattn`` console script: the stopping signals are handled before anything else.

``SIGINT`` (Ctrl-C) and ``SIGTERM`` stop a command at every stage, from the imports of torch and
geoattn to its last write, with one line on stderr, ``geoattn COMMAND: interrupted by SIGINT``,
no traceback, and the exit status a shell gives a process ended by that signal, ``128 +`` its
number: **130** for ``SIGINT``, **143** for ``SIGTERM``. A process killed with ``SIGKILL`` ends
at once (status ``-9`` from :mod:`subprocess`, 137 in a shell); everything geoattn writes is
written atomically or resumably, so that a killed command leaves no half file and its next run
removes the temporary files it left.

:func:`main` is the console script's entry point (``geoattn = geoattn.cli.entry:main``). It
imports only the standard library before installing the handlers, then the command's modules
(torch among them), so that a signal during those imports is answered as one during the work.

- The first signal raises :class:`Stopped`, a :class:`KeyboardInterrupt` naming the signal, in
  the main thread: the command stops at its next Python instruction and unwinds, removing its
  temporary files and closing its files. A loop that must finish a step first (``geoattn
  generate`` finishes the sample it is writing) installs its own handlers for the time of the
  loop and calls the previous ones, these, when it stops.
- A second signal ends the process at once (:func:`os._exit`) with the status of the first, as
  does a :class:`Stopped` raised where Python cannot propagate it (a finaliser, a weakref
  callback, an ``atexit`` function: Python would print it and carry on), and a signal after
  the command has returned, up to the end of the ``atexit`` functions. In the interpreter's last
  clean-up after them (where Python would give the signals their default action back, and the
  process would die by the signal) they are ignored: the command's own status stands.
- Once a signal has stopped the command, an error that Python cannot raise (in a finaliser:
  a data loader's iterator torn down before it was whole) is not printed: it follows from the
  stop, and the one line stands.
- Processes forked from this one keep Python's default behaviour (the training loader's
  workers exit quietly on ``SIGTERM``: :func:`geoattn.train.loader.quiet_worker`).

:func:`geoattn.cli.main.main` answers a :class:`KeyboardInterrupt` with the same line and status
when it is called from Python, without installing handlers: the host program's stay in place.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys

#: the signals that stop a command; the exit status of each is ``128 +`` its number
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_state: dict = {"pid": None, "signum": None, "finished": False, "reported": False, "prog": "geoattn"}


class Stopped(KeyboardInterrupt):
    """The first ``SIGINT`` or ``SIGTERM`` received by the ``geoattn`` command; ``signum`` names it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def _signum(err: BaseException | None) -> int:
    return getattr(err, "signum", None) or _state["signum"] or signal.SIGINT


def status(err: BaseException | None = None) -> int:
    """The exit status of a command stopped by ``err``: ``128 +`` the number of its signal (of
    the first signal the handlers received, for a :class:`KeyboardInterrupt` that names none; a
    Ctrl-C, 130, without them)."""
    return 128 + _signum(err)


def _line(prog: str, signum: int, detail: str = "") -> str:
    return f"{prog}: interrupted by {signal.Signals(signum).name}{detail}\n"


def report(prog: str, err: BaseException, detail: str = "") -> int:
    """Print ``PROG: interrupted by SIGNAL<detail>`` on stderr and return the exit status of
    ``err`` (:func:`status`)."""
    _state["reported"] = True
    sys.stderr.write(_line(prog, _signum(err), detail))
    sys.stderr.flush()
    return status(err)


def name_command(prog: str) -> None:
    """Name the command in the line printed when a signal ends the process at once."""
    _state["prog"] = prog


def _exit_now(signum: int) -> None:
    """End the process now with the status of ``signum``, after the one line if none was printed."""
    with contextlib.suppress(OSError, RuntimeError, ValueError):  # a write cut short by this signal
        sys.stdout.flush()
    if not _state["reported"]:
        _state["reported"] = True
        os.write(2, _line(_state["prog"], signum).encode())
    os._exit(128 + signum)


def _handler(signum: int, frame) -> None:
    if os.getpid() != _state["pid"]:  # a forked child: Python's default behaviour
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), signum)
        return
    if _state["signum"] is None and not _state["finished"]:
        _state["signum"] = signum
        raise Stopped(signum)
    _exit_now(_state["signum"] or signum)


def _unraisable(unraisable) -> None:
    if isinstance(unraisable.exc_value, Stopped) and os.getpid() == _state["pid"]:
        _exit_now(unraisable.exc_value.signum)
    if _state["signum"] is not None and os.getpid() == _state["pid"]:
        return  # an object torn down half-made by the stop (a data loader's iterator): the one line stands
    _state["unraisablehook"](unraisable)


def _ignore_at_exit() -> None:
    """Ignore the signals for the interpreter's last clean-up, after the ``atexit`` functions:
    Python gives them back their default action there (death by the signal, status ``-N``)."""
    if os.getpid() == _state["pid"]:
        for signum in SIGNALS:
            if signal.getsignal(signum) is _handler:
                signal.signal(signum, signal.SIG_IGN)


def install() -> None:
    """Answer ``SIGINT`` and ``SIGTERM`` as described above from now on, in this process (a
    signal that the process ignores, as a background job ignores Ctrl-C, stays ignored)."""
    if _state["pid"] is None:
        atexit.register(_ignore_at_exit)  # registered first, so run after every other one
    _state.update(pid=os.getpid(), signum=None, finished=False, reported=False, prog="geoattn")
    for signum in SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handler)
    if sys.unraisablehook is not _unraisable:
        _state["unraisablehook"] = sys.unraisablehook
        sys.unraisablehook = _unraisable


def main() -> int:
    """Run ``geoattn`` with the arguments of the command line; return its exit status."""
    install()
    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    name_command(f"geoattn {words[0]}" if words else "geoattn")  # until the command line is parsed
    try:
        from .main import main as command

        return command()
    except KeyboardInterrupt as err:  # outside the command's own answer: during the imports
        return report(_state["prog"], err)
    finally:
        _state["finished"] = True  # a signal from here on ends the process at once


__all__ = ["SIGNALS", "Stopped", "install", "main", "name_command", "report", "status"]
