"""Checkpoints: written atomically, read with ``torch.load(weights_only=True)``, self-describing.

A checkpoint is a dict of plain Python values and tensors. It holds the registered model name
and constructor arguments, so :func:`load_operator` rebuilds the model without the code that
trained it, the weights (model and normalisers), and, for resuming, the optimiser and schedule
states, the epoch and the best validation error so far.

The atomic write is available for any output file (:func:`atomic_path`), with a side-effect-free
check that an output can be written at all (:func:`check_writable`), so that a command fails
before its work, not after it, and never leaves half a file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, GeoattnError, OutputError
from ..models import build_model
from .operator import NormalizedOperator
from .resolved import ResolvedQuadrature

FORMAT = "geoattn-checkpoint"
VERSION = 1
_REQUIRED = ("format", "version", "model", "model_kwargs", "state_dict")
#: entries that :class:`~geoattn.train.Trainer` adds to ``last.pt`` to resume a run
TRAINING_STATE = ("optimizer", "scheduler", "epoch", "best", "history")


def check_writable(path: str | Path, folder: bool = False) -> Path:
    """Return ``path`` after checking, without writing anything, that a file can be written
    there (into an existing folder), or with ``folder=True`` that a folder can be created there
    (with its parents) or written into; otherwise raise :class:`~geoattn.errors.OutputError`
    naming the obstacle: a missing folder, a file where a folder is needed, a folder where the
    file would go, no write permission."""
    path = Path(path)
    if folder:
        if path.exists() and not path.is_dir():
            raise OutputError(f"cannot write into {path}: it is a file, not a folder")
        parent = next(p for p in (path, *path.parents) if p.exists())
        if not parent.is_dir():
            raise OutputError(f"cannot create the folder {path}: {parent} is a file, not a folder")
    else:
        if path.is_dir():
            raise OutputError(f"cannot write {path}: a folder of that name is in the way")
        parent = path.parent
        if not parent.is_dir():
            what = "is a file, not a folder" if parent.exists() else "does not exist; create it first"
            raise OutputError(f"cannot write {path}: the folder {parent} {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: no permission to write in {parent}")
    return path


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a path to write ``path`` through; what was written there replaces ``path`` only when
    the block succeeds, so a reader (or a crash) never sees half a file, and a failed write leaves
    the previous file, if any, as it was.

    The yielded path has ``path``'s name inside a fresh hidden folder beside it, so writers that
    take the format from the extension, or add companion files named after it (XDMF's ``.h5``),
    work unchanged: each file written there is moved beside ``path`` with :func:`os.replace`.
    Missing parent folders are created. File-system errors (a file where a folder is needed, a
    folder in the way, no permission, a full disk) raise :class:`~geoattn.errors.OutputError`
    naming ``path``.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        yield tmp / path.name
        for written in sorted(tmp.iterdir()):
            os.replace(written, path.parent / written.name)
    except OSError as err:
        if isinstance(err, GeoattnError):
            raise
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def operator_payload(operator: NormalizedOperator) -> dict[str, Any]:
    """The part of a checkpoint that rebuilds ``operator``: model name, arguments and weights, and
    for a model trained through :class:`~geoattn.train.ResolvedQuadrature` its size (entry
    ``"resolve"``; the meshes are registered again when it is evaluated)."""
    model, extra = operator.model, {}
    if isinstance(model, ResolvedQuadrature):
        if not hasattr(model.op, "model_name"):
            raise TypeError("a checkpoint holds a registered model inside ResolvedQuadrature, got "
                            f"{type(model.op).__name__}")
        model, extra = model.op, {"resolve": {"size": model.size}}
    return {"format": FORMAT, "version": VERSION, "model": model.model_name,
            "model_kwargs": dict(model.hparams), **extra,
            "unweighted": operator.unweighted, "state_dict": operator.state_dict()}


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (:func:`atomic_path`), creating its folder, so a
    reader (or a crash) never sees half a file; an unwritable place raises
    :class:`~geoattn.errors.OutputError`."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        torch.save(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", *,
                    resume: bool = False) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; a missing, corrupted or foreign file, one with
    NaN or infinite weights, or (with ``resume=True``) one without the training state of
    :data:`TRAINING_STATE` (a ``best.pt``) raises :class:`~geoattn.errors.CheckpointError` naming
    the file and the problem."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several unrelated types on bad bytes
        reason = str(err).partition("WeightsUnpickler error:")[2].strip().split("\n\n")[0] or str(err)
        raise CheckpointError(f"checkpoint {path} is corrupted or not a torch file: "
                              f"{type(err).__name__}: {reason}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a geoattn checkpoint (no format tag {FORMAT!r})")
    missing = [key for key in _REQUIRED + (TRAINING_STATE if resume else ()) if key not in payload]
    if missing:
        hint = "; only the last.pt of a run holds the training state to resume" if resume else ""
        raise CheckpointError(f"checkpoint {path} lacks the entries {missing}{hint}")
    if not isinstance(payload["state_dict"], dict) or not isinstance(payload["model_kwargs"], dict):
        raise CheckpointError(f"checkpoint {path} is damaged: its state_dict or model_kwargs is not a dict")
    for key, value in payload["state_dict"].items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(f"checkpoint {path} holds NaN or infinite values in {key!r}; the model "
                                  "cannot predict with it (a diverged run? use an earlier checkpoint)")
    return payload


def load_operator(path: str | Path, map_location: str | torch.device = "cpu") -> NormalizedOperator:
    """Rebuild the trained model (with its normalisers) stored in a checkpoint, in eval mode
    (a model trained through :class:`~geoattn.train.ResolvedQuadrature` inside one with no
    meshes registered yet: :func:`~geoattn.train.register_meshes` adds them)."""
    payload = load_checkpoint(path, map_location)
    try:
        model = build_model(payload["model"], **payload["model_kwargs"])
        if "resolve" in payload:  # trained through ResolvedQuadrature: its meshes come when evaluated
            model = ResolvedQuadrature(model, (), payload["resolve"]["size"])
        operator = NormalizedOperator(model, unweighted=payload.get("unweighted", False))
        operator.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {path} does not rebuild model {payload['model']!r}: {err}") from err
    return operator.to(map_location).eval()
