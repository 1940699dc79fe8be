"""Checkpoints: written atomically, read with ``torch.load(weights_only=True)``, self-describing.

A checkpoint is a dict of plain Python values and tensors. It holds the registered model name
and constructor arguments, so :func:`load_operator` rebuilds the model without the code that
trained it, the weights (model and normalisers), and, for resuming, the optimiser and schedule
states, the epoch and the best validation error so far.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..models import build_model
from .operator import NormalizedOperator

FORMAT = "geoattn-checkpoint"
VERSION = 1
_REQUIRED = ("format", "version", "model", "model_kwargs", "state_dict")


def operator_payload(operator: NormalizedOperator) -> dict[str, Any]:
    """The part of a checkpoint that rebuilds ``operator``: model name, arguments and weights."""
    model = operator.model
    return {"format": FORMAT, "version": VERSION, "model": model.model_name,
            "model_kwargs": dict(model.hparams),
            "unweighted": operator.unweighted, "state_dict": operator.state_dict()}


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically: a temporary file in the same folder, then
    :func:`os.replace`, so a reader (or a crash) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; a missing, corrupted or foreign file raises
    :class:`~geoattn.errors.CheckpointError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several unrelated types on bad bytes
        raise CheckpointError(f"checkpoint {path} is corrupted or not a torch file: {err}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a geoattn checkpoint (no format tag {FORMAT!r})")
    missing = [key for key in _REQUIRED if key not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks the entries {missing}")
    return payload


def load_operator(path: str | Path, map_location: str | torch.device = "cpu") -> NormalizedOperator:
    """Rebuild the trained model (with its normalisers) stored in a checkpoint, in eval mode."""
    payload = load_checkpoint(path, map_location)
    try:
        operator = NormalizedOperator(build_model(payload["model"], **payload["model_kwargs"]),
                                      unweighted=payload.get("unweighted", False))
        operator.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {path} does not rebuild model {payload['model']!r}: {err}") from err
    return operator.to(map_location).eval()
