"""Training ensembles: :func:`train_ensemble` trains the members, :func:`load_ensemble` reads
them back; the :class:`~geoattn.operators.Ensemble` operator (their mean and spread) lives in
:mod:`geoattn.operators.ensemble`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from ..errors import CheckpointError, ConfigError
from ..operators.ensemble import Ensemble
from ..operators.normalized import NormalizedOperator
from .checkpoint import load_checkpoint, load_operator
from .trainer import LAST, Trainer


def train_ensemble(make: Callable[[], nn.Module], train: Sequence, val: Sequence | None = None, *,
                   members: int = 3, seed: int = 0, out_dir: str | Path | None = None,
                   **trainer_kwargs) -> Ensemble:
    """Train ``members`` operators made by ``make()`` and return their :class:`Ensemble`.

    Member ``k`` is built after ``torch.manual_seed(seed + k)`` (its initial weights) and trained
    by a :class:`~geoattn.train.Trainer` with ``seed=seed + k`` (its sample order), writing to
    ``out_dir/member<k>`` when ``out_dir`` is given (:func:`load_ensemble` reads them back).

    Args:
        make: builds one untrained operator (a :class:`~geoattn.train.NormalizedOperator`, or a
            model, which is wrapped in one).
        train: training samples.
        val: validation samples (default ``None``); with ``restore_best=True`` among the trainer's
            keywords each member keeps its best epoch on them.
        members: ``K`` (default ``3``). For the budget of one model, give each member ``1/K`` of
            its epochs.
        seed: seed of the first member (default ``0``).
        out_dir: folder of the members' checkpoints (default ``None``: write nothing).
        **trainer_kwargs: the :class:`~geoattn.train.Trainer` settings (``epochs``, ``lr``, ...),
            the same for every member. A time budget ``seconds`` is each member's: the members
            together train for up to ``members * seconds`` (for the budget of one model, give
            each ``seconds / members``).

    The members' training histories (what :meth:`~geoattn.train.Trainer.fit` returns) are kept in
    ``ensemble.histories``.
    """
    if not isinstance(members, int) or isinstance(members, bool) or members < 1:
        raise ConfigError(f"members must be an integer >= 1, got {members!r}")
    ops, histories = [], []
    for k in range(members):
        torch.manual_seed(seed + k)
        op = make()
        if not isinstance(op, NormalizedOperator):
            op = NormalizedOperator(op)
        folder = None if out_dir is None else Path(out_dir) / f"member{k}"
        histories.append(Trainer(op, folder, seed=seed + k, **trainer_kwargs).fit(train, val))
        ops.append(op)
    ensemble = Ensemble(ops)
    ensemble.histories = histories
    return ensemble


def load_ensemble(out_dir: str | Path, checkpoint: str = "best.pt",
                  map_location: str | torch.device = "cpu") -> Ensemble:
    """The :class:`Ensemble` of the members that :func:`train_ensemble` wrote to ``out_dir``
    (``member0/best.pt``, ``member1/best.pt``, ...), in eval mode.

    Only a complete ensemble is loaded: members ``0 .. K - 1`` with no number missing, each with
    its ``checkpoint``, each finished. A member is finished when its ``last.pt`` records the last
    epoch of its run; members without a ``last.pt`` pass only when none has one (a folder of
    ``best.pt`` copies), since a member killed in its first epoch may have written ``best.pt``
    alone.

    Raises:
        CheckpointError: ``out_dir`` holds no ``member<k>/<checkpoint>``, a member is missing or
            unfinished (each is named), or a checkpoint does not load.
    """
    out_dir = Path(out_dir)
    members = {int(f.name[6:]): f for f in out_dir.glob("member*") if f.name[6:].isdigit() and f.is_dir()}
    if not any((f / checkpoint).is_file() for f in members.values()):
        raise CheckpointError(f"no member<k>/{checkpoint} in {out_dir}: train_ensemble(..., out_dir=) or "
                              "`geoattn train --seed K --out FOLDER/memberK` writes them")
    problems = [f"member{k} is missing" for k in range(max(members)) if k not in members]
    with_last = any((f / LAST).is_file() for f in members.values())
    for k, folder in sorted(members.items()):
        if not (folder / checkpoint).is_file():
            problems.append(f"member{k} has no {checkpoint} (unfinished)")
        elif with_last:
            problems += [f"member{k} {why}" for why in [_unfinished(folder)] if why]
    if problems:
        raise CheckpointError(f"{out_dir} is not a complete ensemble: {'; '.join(problems)}; finish the run "
                              f"(geoattn train --resume --ensemble K --out {out_dir}) or remove those members")
    return Ensemble([load_operator(members[k] / checkpoint, map_location) for k in sorted(members)]).eval()


def _unfinished(folder: Path) -> str | None:
    """Why the member trained in ``folder`` is unfinished (``None``: it finished)."""
    if not (folder / LAST).is_file():
        return f"has no {LAST} (its run stopped in its first epoch)"
    state = load_checkpoint(folder / LAST)
    epochs = (state.get("trainer") or {}).get("epochs")
    budget = (state.get("trainer") or {}).get("seconds")
    epoch = state.get("epoch")
    if budget is not None and state.get("train_seconds", 0.0) >= budget:
        return None  # stopped by its time budget
    if isinstance(epochs, int) and isinstance(epoch, int) and epoch + 1 < epochs:
        return f"is unfinished (its run stopped after epoch {epoch + 1} of {epochs})"
    return None


def load_trained(path: str | Path, map_location: str | torch.device = "cpu") -> nn.Module:
    """What ``path`` holds, in eval mode: the operator of a checkpoint file
    (:func:`~geoattn.train.load_operator`), or the :class:`Ensemble` of a folder of members
    (:func:`load_ensemble`: ``member<k>/best.pt``, as ``train_ensemble(..., out_dir=)`` or
    ``geoattn train --seed k --out FOLDER/member<k>`` write them)."""
    return load_ensemble(path, map_location=map_location) if Path(path).is_dir() else load_operator(path, map_location)


__all__ = ["Ensemble", "load_ensemble", "load_trained", "train_ensemble"]
