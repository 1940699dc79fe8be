"""Resumable model runs for the benchmark presets: one run folder per trained model.

A preset trains several models; each gets ``ROOT/runs/NAME/`` with

- ``config.json``: what defines the model's run (the preset's settings, the model's name, the
  seed); a folder whose config differs is refused, so a rerun never mixes two settings;
- the :class:`~geoattn.train.Trainer`'s ``last.pt``, ``best.pt`` and ``metrics.csv``, written after
  every epoch: a run cut off resumes from its last finished epoch (``fit(..., resume=True)``) and
  reaches the weights of an uninterrupted run;
- ``result.json``: the model's scores once it is trained and evaluated; a rerun of the same
  command loads the model and skips it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from geoattn.train import Trainer
from geoattn.train.checkpoint import load_checkpoint

CONFIG, RESULT, LAST = "config.json", "result.json", "last.pt"


def _plain(value):
    """``value`` as JSON gives it back (tuples become lists), for comparing configs."""
    return json.loads(json.dumps(value))


class ModelRun:
    """The run folder of one model, ``root/runs/name`` (no folder, and nothing written, when
    ``root`` is ``None``).

    Raises:
        ValueError: the folder holds a run of another ``config``.
    """

    def __init__(self, root: str | Path | None, name: str, config: dict):
        self.name, self.config = name, _plain(config)
        self.folder = None if root is None else Path(root) / "runs" / name
        if self.folder is None:
            return
        saved = self.folder / CONFIG
        if saved.exists():
            old = json.loads(saved.read_text())
            if old != self.config:
                diff = {k: (old.get(k), v) for k, v in self.config.items() if old.get(k) != v}
                raise ValueError(f"{self.folder} holds a run of other settings (saved, now: {diff}); "
                                 "give another --out, or delete that folder to start it again")
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            _write(saved, self.config)

    @property
    def result(self) -> dict | None:
        """The saved result of a finished run, else ``None``."""
        if self.folder is None or not (self.folder / RESULT).exists():
            return None
        return json.loads((self.folder / RESULT).read_text())

    def restore(self, operator: torch.nn.Module) -> None:
        """Load the finished run's last weights (and normalisers) into ``operator``."""
        device = next(operator.parameters()).device
        operator.load_state_dict(load_checkpoint(self.folder / LAST, device)["state_dict"])

    def fit(self, operator, train: Sequence, **trainer) -> list[dict]:
        """Train ``operator`` with a :class:`~geoattn.train.Trainer` (keywords ``trainer``) into
        the run folder, continuing from its last finished epoch; returns the whole history."""
        return Trainer(operator, self.folder, **trainer).fit(train, resume=self.folder is not None)

    def finish(self, result: dict) -> None:
        """Save the finished run's ``result``."""
        if self.folder is not None:
            _write(self.folder / RESULT, result)


def _write(path: Path, value) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)
