"""Kill at random: ``geoattn train`` and ``geoattn generate`` stopped by ``SIGKILL``, ``SIGTERM`` and
``SIGINT``, three times each (at a random moment of the work, at start-up or inside an XDMF write,
and inside a checkpoint or dataset write), then resumed to completion, end bit-identical to an
uninterrupted run: the final checkpoint's tensors and losses, the dataset's arrays and its XDMF
companion. Every stop has the documented exit status (130, 143, or -9 for a killed process) and,
when the command could answer, one line on stderr; a command stopped by SIGINT or SIGTERM leaves
no temporary file behind, and after the last run nothing is left of any kill.

The moments are reproducible: drawn from a random generator seeded with the case's name, and hit
through the test-only hooks of :mod:`tests.faults.test_signals`, which also make every write slow
(``fsync`` and HDF5 flushes), so that a moment drawn at random falls inside one often.
"""

import csv
import random
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from .helpers import assert_same_samples
from .test_signals import (  # noqa: F401 - dataset is a fixture
    assert_stopped,
    command,
    dataset,
    finish,
    generate_args,
    leftovers,
    linux,
    moments,
    send,
    train_args,
    wait_for,
)

EPOCHS, SAMPLES = 5, 8
#: every checkpoint or metrics write (fsync) and every dataset flush takes this long (seconds)
SLOW = {"fsync": 0.05, "h5flush": 0.05}
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


def _args(kind: str, data: Path, out: Path) -> list:
    if kind == "train":
        return train_args(data, out, epochs=EPOCHS)
    return generate_args(out / "d.h5", n=SAMPLES, workers=2)


def _reference(kind: str, data: Path, folder: Path) -> tuple[Path, float]:
    """An uninterrupted run with the same (slow) hooks, and a lower bound of the seconds its work
    takes after its first HDF5 open (the dataset read, or the new file created), whatever the
    machine's load: the time it holds in its checkpoint writes (train) or sample flushes
    (generate)."""
    out = folder / "out"
    proc, log = command(_args(kind, data, out), folder / "hooks", slow=SLOW)
    code, _, err = finish(proc)
    assert code == 0, err
    event = "fsync" if kind == "train" else "h5flush"
    return out, SLOW[event] * sum(1 for e, _ in moments(log) if e == event)


@pytest.fixture(scope="module")
def references(dataset, tmp_path_factory):  # noqa: F811 - the fixture imported above
    cache = {}

    def get(kind):
        if kind not in cache:
            cache[kind] = _reference(kind, dataset, tmp_path_factory.mktemp(f"reference-{kind}"))
        return cache[kind]

    return get


def _moments(kind: str, rng: random.Random, work: float) -> list[tuple]:
    """Three moments, in this order: a random time of the work (at most 0.6 ``work``), then for
    train a moment of its start-up (importing torch, or opening the dataset) and inside its k-th
    checkpoint or metrics write, for generate inside its k-th dataset flush and inside the XDMF
    companion's write (after the last sample)."""
    at_random = ("after", ("h5open", 1), rng.uniform(0.0, 0.6 * work))
    if kind == "train":
        start_up = rng.choice([("import:torch", 1), ("h5open", 1)])
        return [at_random, start_up, ("fsync", rng.randint(1, 3))]
    return [at_random, ("h5flush", rng.randint(1, 4)), ("fsync", 1)]


def _interrupted(args, hooks: Path, sig: int, moment: tuple) -> tuple[int, str]:
    if moment[0] == "after":  # a time after an event
        _, event, delay = moment
        proc, log = command(args, hooks, slow=SLOW)
        wait_for(proc, log, event)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            pass
        assert proc.poll() is None, f"the run ended before {delay:.2f} s: {proc.communicate()}"
    else:  # held inside the event
        proc, log = command(args, hooks, target=moment, hold=1.0, slow=SLOW)
        wait_for(proc, log, moment)
    send(proc, sig)
    code, _, err = finish(proc)
    return code, err


def _tensors(value, prefix=""):
    """Every tensor in a checkpoint, by its path."""
    if torch.is_tensor(value):
        return {prefix: value}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    found = {}
    for key, item in items:
        found.update(_tensors(item, f"{prefix}/{key}"))
    return found


def _losses(folder: Path) -> list[dict]:
    with open(folder / "metrics.csv") as fh:
        return [{k: v for k, v in row.items() if "seconds" not in k} for row in csv.DictReader(fh)]


def assert_same_run(out: Path, reference: Path) -> None:
    for name in ("last.pt", "best.pt"):
        a, b = (torch.load(f / name, weights_only=True) for f in (out, reference))
        ta, tb = _tensors(a), _tensors(b)
        assert ta.keys() == tb.keys() and len(ta) > 10
        for key in ta:
            assert torch.equal(ta[key], tb[key]), f"{name}: {key} differs"
        assert [a.get(k) for k in ("epoch", "best")] == [b.get(k) for k in ("epoch", "best")]
    assert _losses(out) == _losses(reference)


@linux
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["train", "generate"])
@pytest.mark.parametrize("name", list(SIGNALS))
def test_killed_three_times_then_resumed_is_bit_identical(dataset, references, tmp_path, kind, name):  # noqa: F811
    sig = SIGNALS[name]
    reference, work = references(kind)
    rng = random.Random(f"issue-40-{kind}-{name}")
    out = tmp_path / "out"
    args = _args(kind, dataset, out)
    resume = args + ["--resume"] if kind == "train" else args
    for i, moment in enumerate(_moments(kind, rng, work)):
        code, err = _interrupted(args if i == 0 else resume, tmp_path / "hooks", sig, moment)
        try:
            assert_stopped(code, err, sig, f"geoattn {kind}")
        except AssertionError as exc:
            raise AssertionError(f"stopped at {moment}: {exc}") from exc
        if sig != signal.SIGKILL:  # answered: its temporary files removed, its lock released
            assert not out.exists() or leftovers(out) == [], (moment, leftovers(out))
        elif moment[0] == "fsync":  # killed inside an atomic write: its temporary folder is left
            assert any(name.endswith(".tmp") for name in leftovers(out)), (moment, leftovers(out))
    proc, _ = command(resume, tmp_path / "hooks")
    code, _, err = finish(proc)
    assert code == 0, err
    assert leftovers(out) == []
    if kind == "train":
        assert_same_run(out, reference)
    else:
        assert_same_samples(out / "d.h5", reference / "d.h5")
        assert (out / "d.train.xdmf").read_text() == (reference / "d.train.xdmf").read_text()
        assert sorted(p.name for p in out.iterdir()) == ["d.h5", "d.train.xdmf"]
