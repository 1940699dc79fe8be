"""Record how close every numerical check of the suite came to its tolerance.

``python -m pytest -n 2 --margins=DIR -o enable_assertion_pass_hook=true`` runs the suite as usual and writes, per worker, one JSON
line per check: the test, the line of the check and its *closeness*, the measured error over the
tolerance it was allowed (``|a - b| / (atol + rtol |b|)`` for ``allclose``-style checks, ``a / b``
for ``assert a < b``, ``b / a`` for ``assert a > b``, and for a window ``assert lo < x < hi`` the
distance of ``x`` from the window's centre over its half-width). A check that asserts that two things differ
(``assert not torch.allclose(...)``) has closeness ``tolerance / error``. A closeness above 0.5
means the check passed with less than a factor of 2 to spare: another CPU, BLAS or library version
can fail it. ``python tests/margins.py DIR [DIR ...]`` prints those checks, worst first, with
the closeness of each in every run given (runs in other environments show how much it moves).

Recorded: ``torch.allclose``, ``torch.testing.assert_close``, ``numpy.allclose``,
``numpy.testing.assert_allclose``, ``pytest.approx`` and plain ``assert a < b`` / ``a > b`` with
numbers on both sides (through pytest's assertion-pass hook). Checks inside
``geoattn.testing`` are recorded at the line of the test that called them.
"""

from __future__ import annotations

import functools
import json
import linecache
import math
import os
import pathlib
import re
import sys

import numpy as np
import pytest
import torch

TESTS = pathlib.Path(__file__).resolve().parent
_out = None  # the open JSON-lines file of this process, while recording


def _caller() -> str | None:
    """``file:line`` of the innermost frame in a test file (not in this module), or None where the
    check was called by other code than a test or ``geoattn.testing`` (a library's own branch)."""
    frame = sys._getframe(3)
    direct = pathlib.Path(frame.f_code.co_filename)
    if TESTS not in direct.parents and direct.name != "testing.py" and "_pytest" not in direct.parts:
        return None
    while frame is not None:
        path = pathlib.Path(frame.f_code.co_filename)
        if path != pathlib.Path(__file__).resolve() and TESTS in path.parents:
            return f"{path.relative_to(TESTS)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _record(kind: str, closeness: float, where: str | None = None, **extra) -> None:
    if _out is None or not math.isfinite(closeness):
        return
    where = where or _caller()
    if where is None:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    file, _, line = where.rpartition(":")
    code = linecache.getline(str(TESTS / file), int(line)).strip() if line.isdigit() else ""
    _out.write(json.dumps({"test": test, "where": where, "code": code, "kind": kind,
                           "closeness": closeness, **extra}) + "\n")


def _ratio(actual, expected, rtol: float, atol: float) -> float | None:
    """max |a - b| / (atol + rtol |b|) over the entries (non-finite entries that agree skipped)."""
    try:
        a = np.asarray(actual.detach().cpu() if torch.is_tensor(actual) else actual)
        b = np.asarray(expected.detach().cpu() if torch.is_tensor(expected) else expected)
        if not (np.issubdtype(a.dtype, np.inexact) or np.issubdtype(b.dtype, np.inexact)):
            return None  # integers and booleans are compared exactly
        a, b = np.broadcast_arrays(a.astype(np.complex128 if np.iscomplexobj(a) else np.float64),
                                   b.astype(np.complex128 if np.iscomplexobj(b) else np.float64))
    except (TypeError, ValueError, RuntimeError):
        return None
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return None
    err = np.abs(a - b)[finite]
    tol = atol + rtol * np.abs(b)[finite]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(tol > 0, err / np.where(tol > 0, tol, 1), np.where(err > 0, np.inf, 0.0))
    return float(r.max())


def _closeness(ratio: float | None, passed: bool) -> float:
    if ratio is None:
        return math.nan
    if passed:
        return ratio
    return 1.0 / ratio if ratio > 0 else math.inf


_TORCH_DEFAULTS = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
                   torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7),
                   torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}


def _wrap_allclose(module, name: str, kind: str, rtol0: float, atol0: float) -> None:
    original = getattr(module, name)

    @functools.wraps(original)
    def wrapped(a, b, rtol=rtol0, atol=atol0, *args, **kwargs):
        result = original(a, b, rtol, atol, *args, **kwargs)
        _record(kind, _closeness(_ratio(a, b, rtol, atol), bool(result)))
        return result

    setattr(module, name, wrapped)


def _wrap_assert(module, name: str, kind: str, defaults) -> None:
    original = getattr(module, name)

    @functools.wraps(original)
    def wrapped(actual, expected, *args, **kwargs):
        original(actual, expected, *args, **kwargs)  # raises if it fails: nothing to record
        rtol, atol = defaults(actual, expected, *args, **kwargs)
        _record(kind, _closeness(_ratio(actual, expected, rtol, atol), True))

    setattr(module, name, wrapped)


def _torch_tolerances(actual, expected, *args, rtol=None, atol=None, **kwargs):
    if rtol is None or atol is None:
        dtypes = [x.dtype for x in (actual, expected) if torch.is_tensor(x)]
        default = (1.3e-6, 1e-5) if not dtypes else _TORCH_DEFAULTS.get(dtypes[0], (0.0, 0.0))
        if dtypes and not dtypes[0].is_floating_point and not dtypes[0].is_complex:
            default = (0.0, 0.0)
        rtol = default[0] if rtol is None else rtol
        atol = default[1] if atol is None else atol
    return rtol, atol


def _numpy_tolerances(actual, desired, rtol=1e-7, atol=0.0, *args, **kwargs):
    return rtol, atol


def _wrap_approx() -> None:
    scalar = type(pytest.approx(1.0))
    original = scalar.__eq__

    def __eq__(self, actual):
        result = original(self, actual)
        try:
            err = abs(complex(actual) - complex(self.expected))
            tol = float(self.tolerance)
        except (TypeError, ValueError, OverflowError):
            return result
        ratio = err / tol if tol > 0 else (math.inf if err > 0 else 0.0)
        _record("pytest.approx", _closeness(ratio, bool(result)))
        return result

    scalar.__eq__ = __eq__


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf"
_SIDE = re.compile(rf"^(?:[\w.]+\()?({_NUMBER})(?:,[^)]*)?\)?$")


def _number(text: str) -> float | None:
    m = _SIDE.match(text.strip())
    return float(m.group(1)) if m else None


def assertion_closeness(expl: str) -> float | None:
    """Closeness of a passing ``assert a < b`` (``a / b``) or ``assert a > b`` (``b / a``) from
    pytest's explanation of it; None where it is not a comparison of two positive numbers."""
    first = expl.splitlines()[0] if expl else ""
    for op in ("<=", ">=", "<", ">"):
        left, sep, right = first.partition(f" {op} ")
        if sep:
            a, b = _number(left), _number(right)
            if a is None or b is None:
                return None
            small, large = (a, b) if op[0] == "<" else (b, a)
            if small < 0 or large <= 0:
                return None
            return small / large
    return None


def start(directory: str, worker: str) -> None:
    global _out
    path = pathlib.Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    _out = open(path / f"margins-{worker}.jsonl", "a", buffering=1)
    _wrap_allclose(torch, "allclose", "torch.allclose", 1e-5, 1e-8)
    _wrap_allclose(np, "allclose", "numpy.allclose", 1e-5, 1e-8)
    _wrap_assert(torch.testing, "assert_close", "torch.testing.assert_close", _torch_tolerances)
    _wrap_assert(np.testing, "assert_allclose", "numpy.testing.assert_allclose", _numpy_tolerances)
    _wrap_approx()


_WINDOW = re.compile(rf"^\s*({_NUMBER})\s*<=?\s*[^<>]+?\s*<=?\s*({_NUMBER})\s*$")


def window_closeness(orig: str, expl: str) -> float | None:
    """Closeness of a passing ``assert lo < x < hi``: the distance of ``x`` from the window's
    centre over its half-width (pytest explains only the last comparison, ``x < hi``)."""
    window = _WINDOW.match(orig.split("#")[0])  # (Python 3.13 keeps a trailing comment in orig)
    first = expl.splitlines()[0] if expl else ""
    left, sep, _ = first.partition(" <")
    x = _number(left) if sep else None
    if window is None or x is None:
        return None
    lo, hi = float(window.group(1)), float(window.group(2))
    return abs(x - (lo + hi) / 2) / ((hi - lo) / 2) if hi > lo else None


_INTEGER = re.compile(r"^[-+]?\d+$")


def _not_a_tolerance(orig: str, expl: str) -> bool:
    """Counts (integers on both sides) and clock deadlines are exact checks, not tolerances."""
    if "monotonic()" in orig or "time.time()" in orig or "perf_counter()" in orig:
        return True
    first = expl.splitlines()[0] if expl else ""
    sides = re.split(r" (?:<=|>=|<|>|==) ", first)
    return len(sides) == 2 and all(_INTEGER.match(side.strip()) for side in sides)


def record_assertion(item, lineno: int, orig: str, expl: str) -> None:
    if _not_a_tolerance(orig, expl):
        return
    closeness = window_closeness(orig, expl)
    kind = "window" if closeness is not None else "assert"
    if closeness is None:
        closeness = assertion_closeness(expl)
    if closeness is not None:
        path = pathlib.Path(str(item.path))
        where = f"{path.relative_to(TESTS)}:{lineno}" if TESTS in path.parents else f"{path}:{lineno}"
        _record(kind, closeness, where)


def worst(directory: str) -> dict[tuple[str, str], dict]:
    """The worst (largest) closeness of every check, keyed by its test and the text of its line
    (so that runs of other revisions, with the lines moved, still match)."""
    rows: dict[tuple[str, str], dict] = {}
    for file in sorted(pathlib.Path(directory).glob("margins-*.jsonl")):
        for line in file.read_text().splitlines():
            row = json.loads(line)
            key = (row["test"], row.get("code") or row["where"])
            if key not in rows or row["closeness"] > rows[key]["closeness"]:
                rows[key] = row
    return rows


def report(directories: list[str], threshold: float = 0.5) -> list[tuple[dict, list[float | None]]]:
    """The checks whose closeness reached ``threshold`` in any of ``directories`` (runs of the
    suite in different environments), each with its closeness in every run, worst first."""
    runs = [worst(d) for d in directories]
    keys = {k for run in runs for k, row in run.items() if row["closeness"] >= threshold}
    table = [(next(run[k] for run in runs if k in run), [run[k]["closeness"] if k in run else None for run in runs])
             for k in keys]
    return sorted(table, key=lambda r: -max(c for c in r[1] if c is not None))


if __name__ == "__main__":
    args = sys.argv[1:]
    threshold = 0.5
    if "--threshold" in args:
        i = args.index("--threshold")
        threshold = float(args[i + 1])
        del args[i:i + 2]
    if not args:
        sys.exit("usage: python tests/margins.py DIR [DIR ...] [--threshold 0.5]")
    for row, values in report(args, threshold):
        cells = " ".join(f"{v:8.4f}" if v is not None else "       -" for v in values)
        print(f"{cells}  {row['kind']:30s} {row['where']:40s} {row['test']}")
