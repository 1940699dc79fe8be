"""The training loop: AdamW with a one-cycle schedule on the weighted relative error.

Every epoch is reproducible on its own (its shuffle and dropout draws are seeded by
``(seed, epoch)``), and a checkpoint is written atomically at the end of each epoch, so a run
killed at any point and resumed with ``resume=True`` reaches the same weights as an
uninterrupted run. Under ``torchrun`` each process takes an equal share of every batch and
:class:`~torch.nn.parallel.DistributedDataParallel` averages the gradients, which equals the
single-process step when ``batch_size`` is a multiple of the number of processes.

The device and the arithmetic precision are trainer settings: ``device="cuda"`` (or ``"auto"``)
moves the operator there, and ``precision="bf16"`` or ``"fp16"`` runs the forward pass under
:func:`torch.autocast` (fp16 with a gradient scaler), while the parameters, the optimiser state
and the loss stay in the model's own dtype.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import numbers
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from ..errors import ChannelError, ConfigError, FieldLengthError, FrameError, NonFiniteLossError
from ..locking import hold
from ..mesh.samples import as_samples, mesh_id_of
from ..mesh.validation import located, validate_field, validate_sample
from ..operators.normalized import NormalizedOperator
from ..optional import progress as progress_bar
from ..optional import require
from .checkpoint import atomic_path, load_checkpoint, operator_payload, save_checkpoint
from .between_nodes import between_nodes_errors, check_lambda, check_meshes, check_model
from .loader import EpochBatches, MeshBatch, MeshLoader, batches_of
from .loss import relative_h1, relative_l2

log = logging.getLogger(__name__)

LAST, BEST, METRICS, TENSORBOARD = "last.pt", "best.pt", "metrics.csv", "tensorboard"
#: The files that make a folder hold a run.
RUN_FILES = (LAST, BEST, METRICS)
#: autocast dtype of each precision (``None``: no autocast)
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
#: the keywords of :class:`torch.optim.lr_scheduler.OneCycleLR` that ``Trainer(schedule=)`` takes
SCHEDULE_KEYS = ("pct_start", "div_factor", "final_div_factor", "anneal_strategy")
#: positions of the one-cycle schedule of a run with a time budget (``Trainer(seconds=)``): the
#: schedule is placed at the elapsed share of the budget, to 1/BUDGET_STEPS of it
BUDGET_STEPS = 10_000


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The :class:`torch.device` named by ``device``: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or
    ``"auto"`` (CUDA when available, else the CPU). Under ``torchrun`` (``WORLD_SIZE`` > 1),
    ``"auto"`` and ``"cuda"`` mean the process's own GPU, ``cuda:LOCAL_RANK``.

    Raises:
        ConfigError: an unknown device string, or CUDA asked for where there is none (or a
            ``cuda:N`` beyond the GPUs present).
    """
    text = str(device).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in ("auto", "cpu", "cuda") or (index and (kind != "cuda" or not index.isdigit())):
        raise ConfigError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {str(device)!r}")
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"device {str(device)!r} asks for CUDA, but this PyTorch sees no CUDA device "
                          f"(torch {torch.__version__}); use --device cpu or auto")
    if not index and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        index = os.environ.get("LOCAL_RANK", "0")
    if index and int(index) >= torch.cuda.device_count():
        raise ConfigError(f"device {str(device)!r}: there are only {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", int(index)) if index else torch.device("cuda")


def check_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``precision`` (``"fp32"``: ``None``, ``"bf16"``, ``"fp16"``) on ``device``.

    Raises:
        ConfigError: an unknown precision; fp16 on the CPU (its gradient scaler and fast kernels
            are CUDA's: use bf16 there); bf16 on a GPU without bfloat16 support.
    """
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError(f"precision 'fp16' needs a CUDA device (it trains with a CUDA gradient "
                          f"scaler), got device {str(device)!r}; use bf16 or fp32 on the CPU")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"precision 'bf16': CUDA device {str(device)!r} does not support bfloat16; "
                          "use fp16 or fp32")
    return PRECISIONS[precision]


def sample_errors(operator: torch.nn.Module, batch: MeshBatch, h1: bool = False, *,
                  autocast: torch.dtype | None = None,
                  with_pred: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-sample relative :math:`L^2` (or :math:`H^1`) errors ``[B]`` of ``operator`` on a
    :class:`~geoattn.train.loader.MeshBatch` (with ``with_pred``, the pair of the errors and the
    prediction ``[N, C]``): ``loss(operator(batch.x, batch.mesh), batch.y, batch.mesh)``, the
    model and the loss on the same mesh. With ``autocast`` (``torch.bfloat16`` or
    ``torch.float16``) the operator runs under :func:`torch.autocast` in that dtype; the errors
    are computed in the target's dtype.
    """
    mesh = batch.mesh
    with torch.autocast(mesh.device.type, dtype=autocast, enabled=autocast is not None):
        pred = operator(batch.x, mesh)
    pred = pred.to(batch.y.dtype)
    loss = relative_h1 if h1 else relative_l2
    errors = loss(pred, batch.y, mesh, reduction="none")
    return (errors, pred) if with_pred else errors


@torch.no_grad()
def evaluate_errors(operator: NormalizedOperator, samples: Sequence, batch_size: int = 4,
                    h1: bool = False) -> torch.Tensor:
    """Relative errors ``[S]`` of ``operator`` on every sample (eval mode, no gradients).

    ``samples`` is a dataset whose samples name their mesh (:func:`~geoattn.mesh.as_samples`;
    a list of samples is made one here, which builds their meshes' structure anew: keep the
    :class:`~geoattn.mesh.MeshSamples` to keep it). Each batch's
    :class:`~geoattn.mesh.Mesh` comes from ``samples.meshes``.

    A batch that runs the GPU out of memory is tried again in halves, down to one sample at a
    time (logged; the errors are per sample, so they do not depend on the batch size): a model
    trained on a coarse mesh can meet a finer one with many more edges or nodes per sample.
    """
    samples = as_samples(samples)
    if h1:
        for i in range(len(samples)):
            if samples.meshes[mesh_id_of(samples, i)].cells is None:
                raise FieldLengthError(f"sample {i} has no cells; the H1 loss needs mesh cells")
    was_training = operator.training
    operator.eval()
    device = next(operator.parameters()).device
    errors, start, size = [], 0, max(1, batch_size)
    try:
        while start < len(samples):
            ids = range(start, min(start + size, len(samples)))
            try:
                errors.append(sample_errors(operator, batches_of(samples, ids, device), h1))
            except torch.OutOfMemoryError:
                if size == 1:
                    raise
                size = max(1, size // 2)  # out of the handler first: its frames hold the tensors
            else:
                start += len(ids)
                continue
            if device.type == "cuda":
                torch.cuda.empty_cache()
            log.warning("out of memory on %s: evaluating %d sample(s) at a time", device, size)
    finally:
        operator.train(was_training)
    return torch.cat(errors)


def validate_samples(samples: Sequence, model: torch.nn.Module, name: str = "training",
                     h1: bool = False, *, frame: tuple | None | str = "first") -> None:
    """Check every sample once before training: the fields a step needs (``x``, ``y``), each
    sample's mesh (:func:`~geoattn.mesh.validate_sample` without the geometric mesh checks:
    finite values, valid weights with a positive total, cells in range and not repeated; once
    per mesh of ``samples.meshes``, and its cells with ``h1=True``), the fields' lengths against
    the mesh, the model's channels and dimension, a target of non-zero norm, and one coordinate
    frame (``data.frame``, see :func:`~geoattn.mesh.from_meshio`) for all samples: ``frame``'s,
    or the first sample's with ``frame="first"``. ``samples`` names its meshes
    (:func:`~geoattn.mesh.as_samples`).

    Raises:
        MeshError: the specific error, its message prefixed with ``"{name} sample {i}"``.
    """
    checked: set[int] = set()
    needed = ("x", "y", "weight", "cells") if h1 else ("x", "y", "weight")
    for i, data in enumerate(samples):
        with located(f"{name} sample {i}"):
            if isinstance(frame, str):
                frame = getattr(data, "frame", None)
            if getattr(data, "frame", None) != frame:
                raise FrameError(f"was read in the frame (origin, scale) {getattr(data, 'frame', None)}, "
                                 f"not {frame} as the training meshes; read every mesh of the model "
                                 "with the same origin= and scale=")
            k = int(data.mesh_id)
            mesh = samples.meshes[k]
            missing = [key for key in ("x", "y") if getattr(data, key, None) is None]
            missing += ["cells"] if h1 and mesh.cells is None else []
            if missing:
                raise FieldLengthError(f"has no {', '.join(map(repr, missing))}; training needs "
                                       f"{', '.join(map(repr, needed))}")
            if k not in checked:  # the mesh's checks, once per mesh
                validate_sample(data, check_mesh=False)
                checked.add(k)
            for key in ("x", "y"):  # the fields', every sample
                validate_field(key, data[key], mesh.num_nodes)
            model.check_inputs(data.x, mesh.pos)
            if data.y.reshape(mesh.num_nodes, -1).shape[1] != model.out_channels:
                raise ChannelError(f"y has shape {tuple(data.y.shape)} but the model has "
                                   f"{model.out_channels} output channel(s)")
            relative_l2(data.y, data.y, mesh)  # raises ZeroNormError on an all-zero target


def _grad_scaler(enabled: bool):
    """A CUDA gradient scaler for fp16 (disabled: its calls pass the loss and the step through)."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)  # pragma: no cover - torch < 2.3


def _tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters and buffers of ``module`` (not ``state_dict``: a foreign model may add
    entries that are not tensors)."""
    return [*module.parameters(), *module.buffers()]


def check_run_folder(folder: str | Path | Sequence[str | Path], *, resume: bool = False, overwrite: bool = False,
                     names: tuple[str, str, str] = ("resume=True", "overwrite=True", "another out_dir"),
                     ) -> list[Path]:
    """Refuse to train into a folder that holds a run unless told what to do with it (``folder``
    may be the member folders of an ensemble: then into any of them).

    A folder holds a run when it has any of :data:`RUN_FILES` (checkpoints, metrics). Training
    into it silently would mix two runs' checkpoints and metrics (or resume one by accident), so
    it needs ``resume`` (continue it) or ``overwrite`` (replace it), not both. The Python
    :class:`Trainer` and the ``geoattn train`` command share this rule; ``names`` are the
    caller's names of the two options and of the alternative (``("--resume", "--overwrite",
    "another --out")`` on the command line).

    Returns:
        The run files present in ``folder`` (empty when it holds no run or does not exist).

    Raises:
        ConfigError: both ``resume`` and ``overwrite``, or a run and neither.
    """
    folders = [Path(folder)] if isinstance(folder, (str, os.PathLike)) else [Path(f) for f in folder]
    if resume and overwrite:
        raise ConfigError(f"give {names[0]} or {names[1]}, not both")
    held = [f / name for f in folders for name in RUN_FILES if (f / name).exists()]
    if held and not (resume or overwrite):
        if len(folders) == 1:
            where = f"{folders[0]} holds a run ({', '.join(p.name for p in held)})"
        else:  # the members of an ensemble, in one folder
            members = sorted({p.parent.name for p in held})
            where = f"{folders[0].parent} holds a run (in {', '.join(members)})"
        raise ConfigError(f"{where}; give {names[0]} to continue it, {names[1]} to replace it, or {names[2]}")
    return held


class Trainer:
    """Fits a :class:`NormalizedOperator` to samples ``x``, ``y`` on their meshes (a dataset whose
    samples name their mesh, :func:`~geoattn.mesh.as_samples`: the model and the loss read each
    batch's :class:`~geoattn.mesh.Mesh`).

    The loss is the mean over samples of the relative :math:`L^2(D)` error (or :math:`H^1(D)`
    with ``h1=True``) in physical units, after fitting the weighted normalisers on the training
    set. Writes ``last.pt``, ``best.pt`` (lowest validation error, or training error without a
    validation set) and ``metrics.csv`` to ``out_dir``.

    Args:
        operator: the model with its normalisers.
        out_dir: folder for checkpoints and metrics (default ``None``: write nothing).
        epochs: number of epochs (default ``20``); with ``seconds``, the most epochs.
        batch_size: samples per optimiser step, over all processes (default ``4``).
        lr: peak learning rate of the one-cycle schedule (default ``1e-3``).
        weight_decay: AdamW weight decay (default ``1e-4``).
        clip: maximum gradient norm (default ``1.0``; ``None``: no clipping).
        h1: train on the relative :math:`H^1` error (default ``False``).
        seed: seed of the shuffles and dropout draws (default ``0``).
        progress: show a progress bar, with tqdm (the ``progress`` extra) (default ``True``).
        device: where to train: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when
            available), see :func:`resolve_device` (default ``None``: where the operator is).
        precision: ``"fp32"`` (default), ``"bf16"`` (forward pass under bfloat16 autocast, CPU or
            GPU) or ``"fp16"`` (float16 autocast with a gradient scaler, CUDA only). Validation
            errors are computed without autocast.
        workers: processes that read and collate the next batches while the model trains
            (:class:`~geoattn.train.loader.MeshLoader`; default ``0``: in this process). Worth it
            for lazily read datasets (:class:`~geoattn.data.DarcyDataset`); the batches are the
            same for any number of workers.
        pin_memory: batches in page-locked memory, for faster copies to a GPU (default ``None``:
            when the device is CUDA). Samples already on a GPU are never pinned.
        tensorboard: also log the ``metrics.csv`` columns (``train``, ``val``, ``lr``,
            ``seconds``, ``train_seconds``) per epoch for TensorBoard, in ``out_dir/tensorboard`` (``True``) or in
            the folder given; needs the ``tensorboard`` extra (default ``False``).
        restore_best: after the last epoch, put back the weights of the epoch with the lowest
            validation error (the training error without a validation set), kept in memory: the
            operator ends as ``best.pt`` holds it, with or without an ``out_dir`` (default
            ``False``: the operator keeps its last weights). For a small training set that a
            long schedule overfits.
        overwrite: replace a run already in ``out_dir`` (default ``False``: refuse it, unless
            :meth:`fit` resumes it).
        seconds: a training-time budget (default ``None``: train ``epochs`` epochs). Training
            stops at the first optimiser step at which the time spent in the epochs' training
            steps (reading the batches, forward and backward passes, optimiser steps; not the
            checks and normaliser fits before the first epoch, the validation after each epoch
            nor the checkpoint writes), summed over the sessions of a resumed run, reaches
            ``seconds``, or after ``epochs`` epochs if that comes first. The last, partial epoch
            is scored and checkpointed like the others. The one-cycle schedule follows the
            elapsed share of the budget instead of the step count: its peak comes at 30 % of
            the budget and its final annealing at the end, on a fast machine or a slow one.
            A positive finite number.
        regularizer: a penalty added to each sample's error in the training loss (the loss
            :math:`\\mathcal J + \\mathfrak G` of Cao's eq. 2): a callable ``(pred, batch) -> [B]``
            of the prediction ``[N, C]`` in physical units and the batch
            (:class:`~geoattn.train.loader.MeshBatch`: ``x``, ``y``, ``params``, ``mesh``), differentiable
            in ``pred``. The errors reported (``train``, ``val``, ``best.pt``) stay the relative
            errors without it (default ``None``).
        schedule: keywords of :class:`torch.optim.lr_scheduler.OneCycleLR` over PyTorch's
            defaults, e.g. ``{"pct_start": 0.2, "div_factor": 1e4, "final_div_factor": 1e4}``
            for the one-cycle shape of Cao's runs (default ``None``). Only ``pct_start``,
            ``div_factor``, ``final_div_factor`` and ``anneal_strategy`` are taken.
        between_nodes: train with the between-nodes loss of weight ``between_nodes`` (λ,
            :mod:`geoattn.train.between_nodes`): each training step calls the model once with the
            inputs at the training mesh's nodes and reads its output at the nodes of the mesh
            refined once (``query=``; each training mesh refined to its longest edge / 2, once), and
            the loss is the relative error at the training nodes plus λ times the relative error
            at the new nodes against the targets' piecewise-linear interpolants. The errors
            reported (``train``, ``val``, ``best.pt``) stay the nodal errors. Needs a model whose
            forward takes ``query`` (e.g. ``multigrid``) and meshes with cells that
            :meth:`~geoattn.mesh.Mesh.refined` refines (triangles, tetrahedra); a finite number ``>= 0``
            (default ``None``: the nodal loss). Stored in the checkpoints: a run resumed without
            it keeps the stored λ.

    Raises:
        ConfigError: an unknown or unavailable device or precision (:func:`resolve_device`,
            :func:`check_precision`), ``tensorboard=True`` without an ``out_dir``,
            ``seconds`` not a positive finite number (nor ``None``), a ``regularizer`` that is not
            callable, a ``schedule`` keyword not in the list above, a ``between_nodes`` that is
            negative or not finite, given with ``h1=True``, or with a model that takes no ``query``;
            :meth:`fit` raises it for training meshes that cannot be refined.
        MissingDependencyError: ``tensorboard`` asked for and the package not installed.

    An ``out_dir`` that holds a run (``last.pt``, ``best.pt`` or ``metrics.csv``) is refused by
    :meth:`fit` unless it is called with ``resume=True`` or the trainer was built with
    ``overwrite=True``, which deletes that run's files before the first epoch
    (:func:`check_run_folder`).

    :meth:`fit` holds the lock of ``out_dir`` while it trains (:func:`geoattn.locking.hold`): it
    raises :class:`~geoattn.errors.LockError`, naming the other process, when another process is
    writing that folder.

    The settings, device and precision included, are stored under ``"trainer"`` in the
    checkpoints.
    """

    def __init__(self, operator: NormalizedOperator, out_dir: str | Path | None = None, *,
                 epochs: int = 20, batch_size: int = 4, lr: float = 1e-3, weight_decay: float = 1e-4,
                 clip: float | None = 1.0, h1: bool = False, seed: int = 0, progress: bool = True,
                 device: str | torch.device | None = None, precision: str = "fp32",
                 workers: int = 0, pin_memory: bool | None = None,
                 tensorboard: bool | str | Path = False, restore_best: bool = False,
                 overwrite: bool = False, seconds: float | None = None,
                 regularizer: Callable[[torch.Tensor, object], torch.Tensor] | None = None,
                 schedule: dict | None = None, between_nodes: float | None = None):
        if regularizer is not None and not callable(regularizer):
            raise ConfigError(f"regularizer must be a callable (pred, batch) -> [B] or None, got "
                              f"a {type(regularizer).__name__}")
        unknown = sorted(set(schedule or {}) - set(SCHEDULE_KEYS))
        if unknown:
            raise ConfigError(f"schedule takes the one-cycle keywords {SCHEDULE_KEYS}, got {unknown}")
        self.regularizer, self.schedule = regularizer, dict(schedule or {})
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real)
                                    or not math.isfinite(seconds) or seconds <= 0):
            raise ConfigError(f"seconds (the training-time budget) must be a positive finite number "
                              f"or None, got {seconds!r}")
        self.seconds = None if seconds is None else float(seconds)
        if isinstance(getattr(operator, "members", None), torch.nn.ModuleList):
            raise ConfigError(f"a Trainer fits one operator, not an ensemble of {len(operator.members)}: train "
                              "each member, or build the ensemble with geoattn.train.train_ensemble")
        self.operator = operator
        self.between_nodes = check_lambda(between_nodes)
        if self.between_nodes is not None:
            check_model(operator)
            if h1:
                raise ConfigError("between_nodes trains on the relative L2 error at and between the nodes; "
                                  "it does not combine with h1=True: drop one of them")
        self.restore_best = restore_best
        self.overwrite = overwrite
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.epochs, self.batch_size, self.lr = epochs, batch_size, lr
        self.weight_decay, self.clip, self.h1 = weight_decay, clip, h1
        self.seed, self.progress = seed, progress
        self.device = next(operator.parameters()).device if device is None else resolve_device(device)
        self.precision = precision
        self.autocast = check_precision(precision, self.device)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ConfigError(f"workers must be an integer >= 0, got {workers!r}")
        self.workers = workers
        self.pin_memory = self.device.type == "cuda" if pin_memory is None else bool(pin_memory)
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if distributed else 0
        self.world = dist.get_world_size() if distributed else 1
        if batch_size % self.world:
            raise ValueError(f"batch_size={batch_size} must be a multiple of the {self.world} processes")
        if distributed and dist.get_backend() == "nccl" and self.device.type != "cuda":
            raise ConfigError(f"the process group uses NCCL, which needs the model on CUDA, but the "
                              f"device is {str(self.device)!r}; train on CUDA or start the group with gloo")
        self.history: list[dict[str, float]] = []
        self.tensorboard = None
        if tensorboard is True:
            if self.out_dir is None:
                raise ConfigError("tensorboard=True writes to out_dir/tensorboard: give an out_dir, "
                                  "or the TensorBoard folder itself")
            self.tensorboard = self.out_dir / TENSORBOARD
        elif tensorboard is not False and tensorboard is not None:
            self.tensorboard = Path(tensorboard)
        if self.tensorboard is not None:
            require("tensorboard", "tensorboard", "TensorBoard logging")  # fail now, not after an epoch

    @property
    def settings(self) -> dict:
        """The training settings, as stored in checkpoints under ``"trainer"``."""
        return {"epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
                "weight_decay": self.weight_decay, "clip": self.clip, "h1": self.h1, "seed": self.seed,
                "device": str(self.device), "precision": self.precision, "world_size": self.world,
                "workers": self.workers, "restore_best": self.restore_best, "seconds": self.seconds,
                "regularizer": None if self.regularizer is None else getattr(
                    self.regularizer, "__qualname__", type(self.regularizer).__name__),
                "schedule": self.schedule, "between_nodes": self.between_nodes}

    def _errors(self, model: torch.nn.Module, batch: MeshBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-sample errors ``[B]`` (:func:`sample_errors`, at the trainer's precision) and
        the per-sample losses (the errors, or with ``between_nodes`` the between-nodes losses, plus
        the ``regularizer``'s penalties; :func:`~geoattn.train.between_nodes.between_nodes_errors`
        gives the nodal errors of the same call); a model whose
        operations have no kernel in that precision is a :class:`ConfigError` naming it."""
        try:
            if self.between_nodes is None:
                errors, pred = sample_errors(model, batch, self.h1, autocast=self.autocast, with_pred=True)
                losses = errors
            else:
                errors, losses, pred = between_nodes_errors(model, batch.x, batch.y, batch.mesh, self.between_nodes,
                                                            autocast=self.autocast)
        except (RuntimeError, NotImplementedError) as err:
            if "out of memory" in str(err) or self.autocast is None:
                raise
            name = getattr(self.operator.model, "model_name", type(self.operator.model).__name__)
            reason = " ".join(str(err).split())[:300]
            raise ConfigError(f"model {name!r} does not run in {self.precision} on {self.device.type} "
                              f"({type(err).__name__}: {reason}); train it in fp32") from err
        if self.regularizer is None:
            return errors, losses
        return errors, losses + self.regularizer(pred, batch)

    def _resume_between_nodes(self, state: dict, last: Path, train) -> None:
        """Keep the run's λ of ``between_nodes`` (stored in ``state``, the checkpoint ``last``)
        when none is given; refuse a different one."""
        stored = (state.get("trainer") or {}).get("between_nodes")
        if self.between_nodes is None and stored is not None:
            if self.h1:
                raise ConfigError(f"cannot resume {last} with h1=True: it was trained with between_nodes={stored!r}, "
                                  "on the relative L2 error")
            check_model(self.operator)
            check_meshes(train.meshes)
            self.between_nodes = float(stored)
            log.info("resuming %s with its between_nodes=%g", last, stored)
        elif self.between_nodes != stored:
            raise ConfigError(f"cannot resume {last}: it was trained with between_nodes={stored!r}, not "
                              f"{self.between_nodes!r}; resume with between_nodes={stored!r} (or without it), or "
                              "train into another out_dir")

    def _spent(self, seconds: float, device: torch.device) -> float:
        """The training time ``seconds`` of this process, or the most of all processes under
        ``torchrun``: every process then stops at the same step, with the same learning rates."""
        if self.world == 1:
            return seconds
        spent = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        return float(spent)

    def _run_lock(self):
        """The lock of ``out_dir`` (rank 0, when there is one) for the epochs that write it: a
        second process training into the same folder is refused (:func:`geoattn.locking.hold`)."""
        if self.out_dir is None or self.rank != 0:
            return contextlib.nullcontext()
        return hold(self.out_dir, folder=True)

    def _write(self, name: str, payload: dict) -> None:
        if self.out_dir is not None and self.rank == 0:
            save_checkpoint(self.out_dir / name, payload)

    def _summary_writer(self, start: int):
        """A TensorBoard writer (rank 0, when asked for) as a context manager, dropping events of
        epochs >= ``start`` that an interrupted run left behind; otherwise one that gives ``None``."""
        if self.tensorboard is None or self.rank != 0:
            return contextlib.nullcontext()
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self.tensorboard), purge_step=start if start else None)

    def _write_metrics(self) -> None:
        if self.out_dir is None or self.rank != 0 or not self.history:
            return
        with atomic_path(self.out_dir / METRICS) as tmp, open(tmp, "w", newline="") as fh:
            # every column of every row: a run resumed from an older checkpoint adds columns
            writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for row in self.history for k in row)))
            writer.writeheader()
            writer.writerows(self.history)

    def fit(self, train: Sequence, val: Sequence | None = None, resume: bool = False,
            on_step: Callable[[int, int], None] | None = None,
            on_epoch: Callable[[int, dict], None] | None = None) -> list[dict[str, float]]:
        """Train and return the per-epoch metrics (``epoch``, ``train``, ``val``, ``lr``, ``seconds``:
        the epoch's training time, ``train_seconds``: the training time so far, over the sessions
        of a resumed run).

        ``resume=True`` continues from ``out_dir/last.pt`` when it exists, with the training time
        it records (a run with a time budget resumed after the budget ran out trains no more).
        ``on_step(epoch, step)`` is called before every optimiser step (for tests and monitoring).
        ``on_epoch(epoch, row)`` is called at the end of every epoch, before the epoch's metrics
        are recorded and its checkpoints written, with the model in the state it ends the epoch
        in: it may add entries to ``row`` (a test error, say), which are then kept like the
        others, in ``metrics.csv``, in the returned history and in the checkpoint (so a resumed
        run keeps the earlier epochs' entries). Numbers only: the entries are written as columns.

        Every sample is checked first (:func:`validate_samples`): a bad one raises its typed
        error, naming the sample, before the normalisers are fitted or anything is written.

        Raises:
            ConfigError: ``out_dir`` holds a run and neither ``resume=True`` nor the trainer's
                ``overwrite=True`` says what to do with it (:func:`check_run_folder`); a run
                trained with a time budget resumed without one.
        """
        op = self.operator
        stale = []
        if self.out_dir is not None and self.rank == 0:
            stale = check_run_folder(self.out_dir, resume=resume, overwrite=self.overwrite)
        if not (hasattr(train, "__len__") and hasattr(train, "__getitem__")) or len(train) == 0:
            got = "an empty one" if hasattr(train, "__len__") else f"a {type(train).__name__}"
            raise ConfigError(f"Trainer.fit needs a sequence (a list or a dataset) of at least one "
                              f"training sample, got {got}; nothing was trained or written")
        # samples that name their meshes: one Mesh per mesh, kept by the dataset from one call
        # to the next (the structure operators build on a mesh lives in its memo)
        train = as_samples(train, name="training")
        validate_samples(train, op.model, "training", self.h1)
        if self.between_nodes is not None:
            check_meshes(train.meshes)  # each kind of cell refined once, before any other work
        frame = getattr(train[0], "frame", None)
        val = as_samples(val, name="validation") if val else None
        if val:
            validate_samples(val, op.model, "validation", self.h1, frame=frame)
        if hasattr(op, "record_frame"):
            op.record_frame(frame)
        device = self.device
        # a RefinedOperator fits its model on the refined training mesh
        fit_mesh = getattr(op.model, "fit_mesh", None)  # a module of the user's may have none
        if fit_mesh is not None:
            fit_mesh(train.meshes[mesh_id_of(train, 0)])
        op.x_normalizer.fit((d.x, train.meshes[d.mesh_id].weight) for d in train)
        op.y_normalizer.fit((d.y, train.meshes[d.mesh_id].weight) for d in train)
        op.to(device)
        steps = math.ceil(len(train) / self.batch_size)
        params = list(op.parameters())
        # fused: one kernel for every parameter (4x faster steps than the default on CPU)
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
        optimizer = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay,
                                      fused=fused or None)
        budget = self.seconds
        # with a budget the schedule's position is set from the elapsed share of it before each step
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.lr,
                                                       total_steps=BUDGET_STEPS if budget else self.epochs * steps,
                                                       **self.schedule)
        scaler = _grad_scaler(self.precision == "fp16")
        start, best, best_state = 0, math.inf, None
        elapsed = 0.0  # training time of the epochs so far (over the sessions of a resumed run)
        last = self.out_dir / LAST if self.out_dir is not None else None
        if resume and last is not None and last.exists():
            state = load_checkpoint(last, device)
            stored = (state.get("trainer") or {}).get("seconds")
            if stored is not None and budget is None:
                raise ConfigError(f"cannot resume {last}: it was trained with a time budget of {stored:g} s "
                                  "and its learning-rate schedule follows that budget; give seconds=")
            if budget is not None and stored != budget and "trainer" in state:
                import warnings

                was = f"a time budget of {stored:g} s" if stored is not None else "no time budget (by epochs)"
                warnings.warn(f"resuming {last} with seconds={budget:g}, but it was trained with {was}: the "
                              f"learning-rate schedule goes on from the share of the new budget already spent "
                              f"({float(state.get('train_seconds', 0.0)):g} s of {budget:g} s); resume with "
                              + (f"seconds={stored:g}" if stored is not None else "seconds=None")
                              + " to follow the run's own schedule", UserWarning, stacklevel=2)
            self._resume_between_nodes(state, last, train)
            op.load_state_dict(state["state_dict"])
            optimizer.load_state_dict(state["optimizer"])
            schedule.load_state_dict(state["scheduler"])
            if "scaler" in state and self.precision == "fp16":
                scaler.load_state_dict(state["scaler"])
            start, best, self.history = state["epoch"] + 1, state["best"], list(state["history"])
            elapsed = float(state.get("train_seconds", 0.0))  # 0: a checkpoint from before it was kept
            log.info("resuming from %s after epoch %d", last, state["epoch"])
        step_model = op
        if self.world > 1:
            ids = [device.index if device.index is not None else torch.cuda.current_device()] \
                if device.type == "cuda" else None
            step_model = torch.nn.parallel.DistributedDataParallel(op, device_ids=ids)
        batches = EpochBatches(len(train), self.batch_size, self.seed, self.rank, self.world)
        pin = self.pin_memory and train[0].x.device.type == "cpu"  # only host memory can be pinned
        loader = MeshLoader(train, batches, device, self.workers, pin)
        show = self.progress and self.rank == 0
        if budget:  # progress in whole seconds of the budget
            shown = min(int(elapsed), math.ceil(budget))
            bar = progress_bar(total=math.ceil(budget), initial=shown, enabled=show, desc="train", unit="s", leave=False)
        else:
            bar = progress_bar(total=(self.epochs - start) * steps, enabled=show, desc="train", unit="step", leave=False)
        done = budget is not None and elapsed >= budget  # a resumed run whose budget ran out
        with self._run_lock(), self._summary_writer(start) as board:  # board: None without TensorBoard
            if not resume:
                for path in stale:  # overwrite=True: the replaced run's files go before its first epoch
                    path.unlink(missing_ok=True)
            for epoch in range(start, self.epochs):
                if done:  # resumed after the budget ran out
                    break
                tic = time.perf_counter()
                torch.manual_seed(self.seed * 100_003 + epoch)
                batches.epoch = epoch
                op.train()
                total = torch.zeros(2, dtype=torch.float64, device=device)  # [sum of errors, count]
                for step, batch in enumerate(loader):
                    errors, losses = self._errors(step_model, batch)
                    loss = losses.mean()  # quadrature-ok: mean over samples
                    if not torch.isfinite(loss):
                        where = f"; the last good checkpoint is {last}" if last is not None and last.exists() else ""
                        hint = "; fp16 may have overflowed: try bf16 or fp32" if self.precision == "fp16" else ""
                        raise NonFiniteLossError(f"training loss is {loss.item()} at epoch {epoch}, step {step}"
                                                 f"{where}; lower the learning rate or check the data{hint}")
                    if on_step is not None:
                        on_step(epoch, step)
                    optimizer.zero_grad(set_to_none=True)
                    scaler.scale(loss).backward()
                    if self.clip is not None:
                        scaler.unscale_(optimizer)
                        torch.nn.utils.clip_grad_norm_(op.parameters(), self.clip)
                    scaler.step(optimizer)
                    scaler.update()
                    if budget:
                        spent = self._spent(elapsed + time.perf_counter() - tic, device)
                        # the position whose learning rate is that of this share of the budget
                        # (the step below adds one); clamped to the schedule's last position
                        share = min(spent / budget, 1.0)
                        schedule.last_epoch = min(max(share * schedule.total_steps - 1, 0.0),
                                                  schedule.total_steps - 1.0) - 1
                        done = spent >= budget
                    schedule.step()
                    total += torch.stack([errors.detach().sum().double(), torch.tensor(len(errors), device=device)])
                    if budget:
                        now = min(int(spent), math.ceil(budget))
                        bar.update(now - shown)
                        shown = now
                    else:
                        bar.update()
                    bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3e}")
                    if done:  # the budget is spent: this is the last step
                        break
                if self.world > 1:
                    dist.all_reduce(total)
                seconds = time.perf_counter() - tic
                elapsed += seconds
                row = {"epoch": epoch, "train": float(total[0] / total[1]), "val": math.nan,
                       "lr": schedule.get_last_lr()[0], "seconds": seconds, "train_seconds": elapsed}
                if val:
                    row["val"] = float(evaluate_errors(op, val, self.batch_size, self.h1).mean())  # quadrature-ok: over samples
                if on_epoch is not None:
                    on_epoch(epoch, row)
                self.history.append(row)
                score = row["val"] if val else row["train"]
                payload = {**operator_payload(op), "trainer": self.settings}
                if score < best:
                    best = score
                    self._write(BEST, payload)
                    if self.restore_best:
                        best_state = [t.detach().clone() for t in _tensors(op)]
                payload.update(optimizer=optimizer.state_dict(), scheduler=schedule.state_dict(),
                               epoch=epoch, best=best, history=self.history, train_seconds=elapsed)
                if self.precision == "fp16":
                    payload["scaler"] = scaler.state_dict()
                self._write_metrics()  # before last.pt: a resume replays this epoch and rewrites it
                self._write(LAST, payload)
                if board is not None:
                    for key, value in row.items():
                        if key != "epoch" and math.isfinite(value):
                            board.add_scalar(key, value, epoch)
                    board.flush()
                log.info("epoch %d: train %.3e val %.3e", epoch, row["train"], row["val"])
                if done:
                    log.info("training-time budget of %g s spent after epoch %d", budget, epoch)
                    break
        bar.close()
        if self.restore_best:
            if best_state is None and self.out_dir is not None and (self.out_dir / BEST).exists():
                op.load_state_dict(load_checkpoint(self.out_dir / BEST, device)["state_dict"])  # resumed past it
            elif best_state is not None:
                with torch.no_grad():
                    for t, saved in zip(_tensors(op), best_state):
                        t.copy_(saved)
        return self.history
