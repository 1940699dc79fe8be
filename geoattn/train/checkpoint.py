"""Checkpoints: written atomically, read with ``torch.load(weights_only=True)``, self-describing.

A checkpoint is a dict of plain Python values and tensors. It holds the registered model name
and constructor arguments, so :func:`load_operator` rebuilds the model without the code that
trained it, the weights (model and normalisers), and, for resuming, the optimiser and schedule
states, the epoch and the best validation error so far.

Format version 2 adds ``"checksum"``: the SHA-256 of every entry (the bytes, dtype and shape of
every tensor, and the plain values, in the order they are stored; :func:`payload_checksum`),
computed on the CPU once per save and verified on every load, so that a flipped bit anywhere in
the weights is refused instead of silently moving the predictions. Checkpoints of version 1
(written before checksums) still load, unverified; a version newer than this geoattn reads is
refused.

The atomic write is available for any output file (:func:`~geoattn.atomic.atomic_path`, which
this module re-exports), with a side-effect-free
check that an output can be written at all (:func:`check_writable`), so that a command fails
before its work, not after it, and never leaves half a file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..atomic import atomic_path
from ..errors import CheckpointError, OutputError
from ..mesh.mesh import Mesh
from ..models import build_model
from ..paths import symlink_loop
from ..operators.latent import LatentMeshOperator
from ..operators.normalized import NormalizedOperator
from ..operators.refined import RefinedOperator

log = logging.getLogger(__name__)

FORMAT = "geoattn-checkpoint"
#: format version written (2: with ``"checksum"``); versions 1 and 2 are read
VERSION = 2
CHECKSUM = "checksum"
_REQUIRED = ("format", "version", "model", "model_kwargs", "state_dict")
#: entries that :class:`~geoattn.train.Trainer` adds to ``last.pt`` to resume a run
#: the lists of names in a checkpoint's ``"fields"`` entry: inputs, targets, global parameters
FIELD_KEYS = ("x", "y", "params")
TRAINING_STATE = ("optimizer", "scheduler", "epoch", "best", "history")


def check_writable(path: str | Path, folder: bool = False) -> Path:
    """Return ``path`` after checking, without writing anything, that a file can be written
    there (into an existing folder), or with ``folder=True`` that a folder can be created there
    (with its parents) or written into; otherwise raise :class:`~geoattn.errors.OutputError`
    naming the obstacle: a missing folder, a file where a folder is needed, a folder where the
    file would go, no write permission, a read-only file in the way, a symbolic link loop."""
    path = Path(path)
    loop = symlink_loop(path)
    if loop:
        raise OutputError(f"cannot write {path}: it leads through a symbolic link loop ({loop}); "
                          "remove one of these links, or give another path")
    if folder:
        if path.exists() and not path.is_dir():
            raise OutputError(f"cannot write into {path}: it is a file, not a folder")
        parent = next(p for p in (path, *path.parents) if p.exists())
        if not parent.is_dir():
            raise OutputError(f"cannot create the folder {path}: {parent} is a file, not a folder")
    else:
        if path.is_dir():
            raise OutputError(f"cannot write {path}: a folder of that name is in the way")
        if path.exists() and (not os.access(path, os.W_OK) or not path.stat().st_mode & (
                stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)):
            raise OutputError(f"cannot write {path}: the file exists and is read-only; make it writable "
                              "(chmod u+w) to replace it, or give another path")
        parent = path.parent
        if not parent.is_dir():
            what = "is a file, not a folder" if parent.exists() else "does not exist; create it first"
            raise OutputError(f"cannot write {path}: the folder {parent} {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: no permission to write in {parent}")
    return path


def operator_payload(operator: NormalizedOperator) -> dict[str, Any]:
    """The part of a checkpoint that rebuilds ``operator``: model name, arguments and weights (the
    coordinate frame among them), the names of its fields when it has them (entry ``"fields"``:
    ``{"x": [...], "y": [...], "params": [...]}``, from ``operator.fields``), and
    for a model trained through :class:`~geoattn.operators.RefinedOperator` its size (entry
    ``"resolve"``), and through :class:`~geoattn.operators.LatentMeshOperator` its latent mesh
    (entry ``"latent"``: ``pos``, ``weight``, ``cells``)."""
    model, extra = operator.model, {}
    if isinstance(model, LatentMeshOperator):
        extra["latent"] = {"pos": model.latent_pos.detach().cpu(), "weight": model.latent_weight.detach().cpu(),
                           "cells": model.latent_cells.detach().cpu()}
        model = model.op
    if isinstance(model, RefinedOperator):
        extra["resolve"] = {"size": model.size}
        model = model.op
    if not hasattr(model, "model_name"):
        raise TypeError("a checkpoint holds a registered model, inside at most a LatentMeshOperator around a "
                        f"RefinedOperator, got {type(operator.model).__name__} around {type(model).__name__}")
    fields = getattr(operator, "fields", None)
    if fields is not None:
        extra["fields"] = {key: [str(n) for n in fields.get(key) or []] for key in FIELD_KEYS}
    return {"format": FORMAT, "version": VERSION, "model": model.model_name,
            "model_kwargs": dict(model.hparams), **extra,
            "unweighted": operator.unweighted, "state_dict": operator.state_dict()}


def payload_checksum(payload: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of every entry of ``payload`` but ``"checksum"``, in stored order:
    names, plain values (``repr``) and, of every tensor, its dtype, shape and bytes (read on the
    CPU); the containers (dicts, lists, tuples) are walked in order."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(value, dict):
            items = [(k, v) for k, v in value.items() if value is not payload or k != CHECKSUM]
            h.update(f"D{len(items)}".encode())
            for key, item in items:
                feed(key)
                feed(item)
        elif isinstance(value, (list, tuple)):
            h.update(f"{type(value).__name__[0]}{len(value)}".encode())
            for item in value:
                feed(item)
        elif value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
            h.update(f"{type(value).__name__}:{value!r};".encode())
        else:  # a type outside the weights-only set: its name only (its repr may hold an address)
            h.update(f"<{type(value).__name__}>".encode())

    feed(payload)
    return f"sha256:{h.hexdigest()}"


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (:func:`atomic_path`), creating its folder, so a
    reader (or a crash) never sees half a file; an unwritable place raises
    :class:`~geoattn.errors.OutputError`. A geoattn checkpoint (``"format"`` entry) is written at
    format :data:`VERSION` with its ``"checksum"`` (:func:`payload_checksum`)."""
    if isinstance(payload, dict) and payload.get("format") == FORMAT:
        payload = {key: value for key, value in payload.items() if key != CHECKSUM}
        payload["version"] = VERSION
        payload[CHECKSUM] = payload_checksum(payload)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        torch.save(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", *,
                    resume: bool = False) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` and verify its checksum; a missing, corrupted
    or foreign file, one whose contents fail their checksum, one written by a newer geoattn (a
    format version above :data:`VERSION`), one with NaN or infinite weights, or (with
    ``resume=True``) one without the training state of :data:`TRAINING_STATE` (a ``best.pt``)
    raises :class:`~geoattn.errors.CheckpointError` naming the file and the problem. A checkpoint
    of version 1 (no checksum) loads unverified, with a logged note."""
    path = Path(path)
    if not path.is_file():
        loop = symlink_loop(path)
        if loop:
            raise CheckpointError(f"checkpoint {path} cannot be read: it leads through a symbolic link "
                                  f"loop ({loop})")
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several unrelated types on bad bytes
        reason = str(err).partition("WeightsUnpickler error:")[2].strip().split("\n\n")[0] or str(err)
        raise CheckpointError(f"checkpoint {path} is corrupted or not a torch file: "
                              f"{type(err).__name__}: {reason}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a geoattn checkpoint (no format tag {FORMAT!r})")
    version = payload.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(f"checkpoint {path} is damaged: its format version is {version!r}, "
                              "not an integer >= 1")
    if version > VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {version}, written by a newer "
                              f"geoattn (this one, {__version__}, reads versions up to {VERSION}): "
                              "upgrade geoattn to read it")
    if CHECKSUM in payload or version >= 2:
        stored = payload.get(CHECKSUM)
        if stored != payload_checksum(payload):
            what = "have no checksum" if stored is None else "do not match their checksum"
            raise CheckpointError(f"checkpoint {path} is corrupted: its contents {what} (a damaged copy or "
                                  "disk?); use another checkpoint, or copy it again from its source")
    else:
        log.info("checkpoint %s has format version 1 (no checksum): loaded without verifying it", path)
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
    (a model trained through :class:`~geoattn.operators.RefinedOperator` inside one, of the
    stored size; through :class:`~geoattn.operators.LatentMeshOperator`, on the stored latent
    mesh)."""
    payload = load_checkpoint(path, map_location)
    try:
        model = build_model(payload["model"], **payload["model_kwargs"])
        if "resolve" in payload:  # trained through RefinedOperator (ResolvedQuadrature)
            model = RefinedOperator(model, payload["resolve"]["size"])
        if "latent" in payload:  # run through LatentMeshOperator
            latent = payload["latent"]
            cells = latent["cells"] if len(latent["cells"]) else None
            model = LatentMeshOperator(model, Mesh(latent["pos"], latent["weight"], cells))
        operator = NormalizedOperator(model, unweighted=payload.get("unweighted", False))
        operator.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {path} does not rebuild model {payload['model']!r}: {err}") from err
    operator.fields = _fields(path, payload.get("fields"))
    if operator.fields is None:  # written before checkpoints held the names: fields.json beside it
        operator.fields = _fields(path, fields_beside(path))
    operator.settings = dict(payload.get("trainer") or {})
    return operator.to(map_location).eval()


#: the file beside the checkpoints of older runs that names the fields of a version-2 dataset
FIELDS_FILE = "fields.json"


def fields_beside(checkpoint: str | Path) -> dict | None:
    """The names in a ``fields.json`` beside ``checkpoint`` (a file, or a folder of ensemble
    members) or in the folder above, as ``geoattn train`` wrote them before checkpoints held them;
    ``None`` when there is none."""
    import json

    checkpoint = Path(checkpoint)
    folder = checkpoint if checkpoint.is_dir() else checkpoint.parent
    for where in (folder, folder.parent):
        if (where / FIELDS_FILE).is_file():
            try:
                return json.loads((where / FIELDS_FILE).read_text())
            except (OSError, ValueError) as err:
                raise CheckpointError(f"cannot read {where / FIELDS_FILE}: {err}") from err
    return None


def _fields(path: Path, fields: Any) -> dict | None:
    if fields is None:
        return None
    if not isinstance(fields, dict) or not all(
            isinstance(fields.get(k, []), list) and all(isinstance(n, str) for n in fields.get(k, []))
            for k in FIELD_KEYS):
        raise CheckpointError(f"checkpoint {path} is damaged: its field names are {fields!r}, not lists of names "
                              f"under {list(FIELD_KEYS)}")
    return {key: list(fields.get(key) or []) for key in FIELD_KEYS}


def trained_fields(operator: torch.nn.Module) -> dict | None:
    """The field names an operator from :func:`load_operator` (or an
    :class:`~geoattn.operators.Ensemble` of them: its first member's) was trained on, or ``None``."""
    fields = getattr(operator, "fields", None)
    if fields is None and hasattr(operator, "members"):
        members = list(operator.members)
        fields = getattr(members[0], "fields", None) if members else None
    return fields
