"""Optional dependencies, in one place: which extra installs each, and progress bars without tqdm.

The core of geoattn (meshes, layers, models, training) needs torch, torch-geometric, meshio,
numpy and scipy. Other packages are imported where a feature uses them, through
:func:`require`, so that ``import geoattn.models`` stays light and a missing package says which
extra to install:

===============  ===================  ===================================================
extra            packages             features
===============  ===================  ===================================================
``data``         scikit-fem, h5py     Darcy data, mesh families and refinement, dataset files
``plot``         matplotlib           figures of reports and predictions
``progress``     tqdm                 progress bars (torch-geometric installs it too)
``partition``    pymetis              METIS partitions (coordinate bisection otherwise)
``nufft``        finufft              NUFFT spectral transforms (dense transforms otherwise)
``tensorboard``  tensorboard          TensorBoard logs of training (``--tensorboard``)
``all``          all six              the demo and the test suite
``pyvista``      pyvista              ``from_pyvista`` / ``to_pyvista`` (meshes held as pyvista)
===============  ===================  ===================================================
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import time
from collections.abc import Iterable
from types import ModuleType

log = logging.getLogger(__name__)

#: pip package of an import name, where the two differ.
_PACKAGES = {"skfem": "scikit-fem"}


class MissingDependencyError(ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import and return ``module``, or raise an :class:`ImportError` saying how to install it.

    Args:
        module: import name, e.g. ``"skfem"`` or ``"matplotlib.pyplot"``.
        extra: the geoattn extra that installs it, e.g. ``"data"``.
        feature: what needs it, for the message, e.g. ``"the Darcy solver"``.

    Raises:
        MissingDependencyError: (an :class:`ImportError`) when ``module`` or a parent package
            is not installed; an import error raised inside an installed package propagates as is.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is None or not (module == err.name or module.startswith(err.name + ".")):
            raise
        package = _PACKAGES.get(err.name.partition(".")[0], err.name.partition(".")[0])
        raise MissingDependencyError(
            f"the {package!r} package, needed for {feature}, is not installed; "
            f"install it with: pip install 'geoattn[{extra}]'"
        ) from err


class _NoProgress:
    """Stand-in for a tqdm bar: iterates over ``iterable`` and shows nothing."""

    def __init__(self, iterable: Iterable | None = None):
        self.iterable = iterable

    def __iter__(self):
        return iter(() if self.iterable is None else self.iterable)

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


class _LogProgress(_NoProgress):
    """Stand-in for a bar when standard error is not a terminal: one plain line there, at most
    every ``interval`` seconds and none in the first, with the count, the elapsed time and, when
    the total is known, the time left. A log of an hour-long loop shows it is moving; a short
    loop writes nothing."""

    interval = 60.0

    def __init__(self, iterable: Iterable | None = None, total: float | None = None, desc: str | None = None,
                 unit: str = "it", initial: float = 0, **_):
        super().__init__(iterable)
        if total is None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total, self.desc, self.unit, self.n, self.initial = total, desc, unit, initial, initial
        self.start = self.last = time.monotonic()

    def __iter__(self):
        for item in super().__iter__():
            yield item
            self.update()

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            sys.stderr.write(self._line(now - self.start) + "\n")
            sys.stderr.flush()

    def _line(self, elapsed: float) -> str:
        def clock(seconds: float) -> str:
            minutes, seconds = divmod(int(seconds), 60)
            return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"

        head = f"{self.desc}: " if self.desc else ""
        count = f"{self.n:g}" + (f"/{self.total:g}" if self.total else "") + f" {self.unit}"
        if self.total and self.n > self.initial:  # the rate of this run, not of the count resumed from
            share = f" ({100 * self.n / self.total:.0f} %)"
            left = f", about {clock(elapsed * (self.total - self.n) / (self.n - self.initial))} left"
        else:
            share = left = ""
        return f"{head}{count}{share}, {clock(elapsed)} elapsed{left}"


@functools.cache
def _say_once(message: str) -> None:
    log.info("%s", message)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(iterable: Iterable | None = None, *, enabled: bool = True, **tqdm_kwargs):
    """A progress bar: ``tqdm.auto.tqdm(iterable, **tqdm_kwargs)`` when ``enabled`` and installed.

    Otherwise a silent stand-in with the same small API (iteration over ``iterable``,
    ``update``, ``set_postfix``, ``close``, use as a context manager). When a bar is wanted but
    tqdm is missing, this is logged once at INFO level with the extra that installs it. A bar is
    drawn only on a terminal: when standard error is redirected to a file or a pipe (a log, CI),
    the bar's carriage-return redraws would fill it with hundreds of bytes per step, so the
    stand-in is used there too.

    Args:
        iterable: what to iterate over (default ``None``: drive the bar with ``update``).
        enabled: show a bar (default ``True``).
        **tqdm_kwargs: passed to tqdm (``total``, ``desc``, ``unit``, ``leave``, ...).
    """
    if not enabled:
        return _NoProgress(iterable)
    if not _is_terminal(sys.stderr):
        return _NoProgress(iterable) if tqdm_kwargs.get("disable") else _LogProgress(iterable, **tqdm_kwargs)
    try:
        tqdm = require("tqdm.auto", "progress", "progress bars").tqdm
    except MissingDependencyError as err:
        _say_once(str(err))
        return _NoProgress(iterable)
    return tqdm(iterable, **tqdm_kwargs)


__all__ = ["MissingDependencyError", "progress", "require"]
