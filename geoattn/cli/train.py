"""``geoattn train``: fit a model to one mesh of a dataset file; checkpoints and metrics to a folder.

A dataset file from ``geoattn import`` (format version 2: per-sample meshes, named fields,
global parameters) trains on its ``train`` split and validates on its ``val`` split (or, when
that is empty, on the last ``--val-fraction`` of the training samples); the model's
``in_channels`` are its input fields plus its global parameters, appended as constant channels,
and ``out_channels`` its target fields. The names are stored in every checkpoint (with the
coordinate frame and the training settings), where ``geoattn evaluate``, ``predict`` and
:func:`~geoattn.train.load_operator` read them: a ``best.pt`` copied alone is enough.

Model and training settings come from flags or a TOML file (flags win)::

    [model]
    name = "tno"
    width = 32
    depth = 3

    [train]
    epochs = 20
    batch_size = 4
    lr = 0.003
    device = "auto"       # or "cpu", "cuda", "cuda:1"
    precision = "fp32"    # or "bf16", "fp16" (CUDA)

``--supersample F`` (or ``supersample = F`` in ``[model]``) trains the model on the training mesh
refined to its longest edge / F, the input interpolated linearly and the loss read at the data's
nodes (:class:`~geoattn.operators.RefinedOperator`); the checkpoint stores the size, and
``geoattn evaluate`` / ``predict`` refine every mesh to it.

``--latent-mesh`` runs the model on the training mesh only
(:class:`~geoattn.operators.LatentMeshOperator`): ``geoattn evaluate`` and ``predict`` interpolate
every other mesh's input onto it and the output back, as FNO does through its grid, so the model
computes with the discretisation it was trained on; the checkpoint stores the mesh.

``--between-nodes LAMBDA`` (or ``between_nodes = LAMBDA`` in ``[train]``) trains on the error at
the training nodes plus ``LAMBDA`` times the error between them, from one call that reads the
model's output on each training mesh refined once (``Trainer(between_nodes=)``,
:mod:`geoattn.train.between_nodes`); models whose forward takes ``query`` only (the others are
refused), meshes that :meth:`~geoattn.mesh.Mesh.refined` refines. The checkpoint stores it, and
``--resume`` keeps it.

``--symmetries N`` trains on every training sample carried by the ``2 N`` symmetries of the
dihedral group about the training mesh's centroid (:func:`~geoattn.mesh.dihedral`: ``N = 4`` the
square's eight, ``N = 1`` the identity and the reflection across the line at
``--symmetry-angle`` degrees), made as they are read (:func:`~geoattn.mesh.augment`, which refuses
maps that do not carry the mesh's domain onto itself). The problem and the input law must not
change under them either; that is not checked. The validation samples are not carried.

Every setting is checked before any work: a wrong type or an out-of-range value (``width = 0``,
``--lr nan``, ``--val-fraction 1``) raises :class:`~geoattn.errors.ConfigError` naming it. The same
``--seed`` gives the same weights. ``--resume`` continues ``OUT/last.pt`` with the model stored in
it; settings that contradict it are refused. A run stopped at any moment (Ctrl-C: exit status
130, ``SIGTERM``: 143, see :mod:`geoattn.cli.main`; or killed) keeps its last completed epoch in
``OUT/last.pt``, and ``--resume`` then reaches the weights of an uninterrupted run; it first
removes the temporary files that a killed run left in ``OUT``.

``--ensemble K`` trains ``K`` members, member ``k`` with seed ``SEED + k`` (its initial weights and
sample order), each with every other setting, into ``OUT/member<k>``: the folder layout of
:func:`~geoattn.train.train_ensemble`, which ``geoattn evaluate`` and ``predict --checkpoint``
read as the members' mean (:class:`~geoattn.train.Ensemble`). ``--resume`` continues each
member from its own ``last.pt`` (members not started yet start). A run is never replaced by accident: an ``OUT`` that
holds one is refused unless ``--resume`` or ``--overwrite`` is given, and a second ``geoattn train``
into an ``OUT`` that a running one is writing is refused, naming that process
(:func:`geoattn.locking.hold`; a killed run leaves no lock behind).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

from ..atomic import remove_leftovers
from ..errors import CheckpointError, ConfigError, DatasetFileError, UnsupportedCellError
from ..locking import hold
from ..mesh.mesh import Mesh
from ..mesh.symmetry import augment, dihedral
from ..models import MODELS, build_model
from ..models.base import RENAMED_ARGUMENTS
from ..operators import LatentMeshOperator
from ..optional import require
from ..mesh.io import to_meshio
from ..train import NormalizedOperator, RefinedOperator, Trainer, init_distributed, load_checkpoint, training_size
from ..train.between_nodes import accepts_query
from ..train.checkpoint import atomic_path, check_writable
from ..train.trainer import PRECISIONS, check_precision, check_run_folder, resolve_device

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10, with the tomli backport from the dependencies
    import tomli as tomllib

TRAIN_KEYS = ("epochs", "batch_size", "lr", "weight_decay", "clip", "seed", "h1", "device", "precision",
              "between_nodes")
MODEL_FLAGS = ("width", "depth", "num_heads")
#: constructor arguments that come from the dataset, never from the settings
DATA_ARGUMENTS = ("in_channels", "out_channels", "dim")
SEEDS = 2**32
#: the file beside the checkpoints of older runs that named the fields of a version-2 dataset
FIELDS = "fields.json"
#: said after ``geoattn train: interrupted by SIGINT`` (:func:`geoattn.cli.main.main`)
INTERRUPTED = "; run the same command with --resume to continue from the last completed epoch"
#: type and range of each training setting: (type, lowest, highest, lowest excluded)
TRAIN_RANGES = {"epochs": (int, 1, None, False), "batch_size": (int, 1, None, False),
                "lr": (float, 0, None, True), "weight_decay": (float, 0, None, False),
                "clip": (float, 0, None, True), "seed": (int, 0, SEEDS, False), "h1": (bool, None, None, False),
                "device": (str, None, None, False), "precision": (str, None, None, False),
                "between_nodes": (float, 0, None, False)}


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="dataset file (from `geoattn generate` or `geoattn import`)")
    parser.add_argument("--mesh", help="mesh of the dataset to train on (default: its only/first mesh)")
    parser.add_argument("--out", default="geoattn-run", help="output folder (default: %(default)s)")
    parser.add_argument("--config", help="TOML file with [model] and [train] tables")
    parser.add_argument("--model", choices=sorted(MODELS), help="model name (default: tno)")
    for name in MODEL_FLAGS:
        flags = [f"--{name.replace('_', '-')}"] + (["--heads"] if name == "num_heads" else [])
        parser.add_argument(*flags, dest=name, type=int, help=f"model {name} (an integer >= 1)")
    parser.add_argument("--epochs", type=int, help="(an integer >= 1)")
    parser.add_argument("--batch-size", dest="batch_size", type=int, help="(an integer >= 1)")
    parser.add_argument("--lr", type=float, help="peak learning rate (a number > 0)")
    parser.add_argument("--seed", type=int, help=f"seed of the weights and shuffles (0 to {SEEDS - 1}; default 0)")
    parser.add_argument("--h1", action="store_true", default=None, help="train on the relative H1 error")
    add_device_arg(parser)
    parser.add_argument("--precision", choices=list(PRECISIONS),
                        help="fp32 (default), bf16 (bfloat16 autocast, CPU or GPU) or fp16 "
                             "(float16 autocast with a gradient scaler, CUDA only)")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="last fraction of samples kept for validation, in [0, 1) (default: %(default)s)")
    parser.add_argument("--supersample", type=float,
                        help="train and evaluate on the meshes refined to the training mesh's longest edge / F "
                             "(a number >= 1; triangle meshes; default 1: the meshes as they are)")
    parser.add_argument("--between-nodes", dest="between_nodes", type=float, metavar="LAMBDA",
                        help="train on the error at the training nodes plus LAMBDA times the error between them: one "
                             "call reads the model's output on the training mesh refined once (query=), scored at "
                             "the new nodes against the targets' piecewise-linear interpolants; validation stays "
                             "the nodal error (a number >= 0; triangle or tetrahedral meshes; models whose forward takes a query "
                             f"mesh: {', '.join(query_models())}; kept by --resume)")
    parser.add_argument("--latent-mesh", action="store_true",
                        help="run the model on the training mesh only: every other mesh's input is interpolated "
                             "there and the output back (LatentMeshOperator; stored in the checkpoint)")
    parser.add_argument("--symmetries", type=int, metavar="N",
                        help="also train on every sample carried by the 2N symmetries of the dihedral group about "
                             "the training mesh's centroid (4: the square's eight; an integer >= 1)")
    parser.add_argument("--symmetry-angle", type=float, default=0.0, metavar="DEG",
                        help="angle of the first reflection axis of --symmetries, in degrees (default: 0)")
    parser.add_argument("--ensemble", type=int, default=1, metavar="K",
                        help="train K members (seeds SEED..SEED+K-1) into OUT/member0.. OUT/member<K-1>; "
                             "evaluate and predict take OUT and use their mean (default 1: one model in OUT)")
    parser.add_argument("--unweighted", action="store_true", help="node-average ablation")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    parser.add_argument("--overwrite", action="store_true",
                        help="start a new run in an OUT that holds one (its checkpoints are replaced)")
    parser.add_argument("--workers", type=int, default=0,
                        help="processes reading the next batches from the dataset file while the model "
                             "trains (default: %(default)s, read in the training process)")
    parser.add_argument("--tensorboard", action="store_true",
                        help="also log the metrics for TensorBoard in OUT/tensorboard (the tensorboard extra)")
    parser.add_argument("--no-progress", action="store_true")


def query_models() -> list[str]:
    """The registered models that answer on a query mesh (``--between-nodes`` trains them)."""
    return sorted(name for name, cls in MODELS.items() if accepts_query(cls))


def add_device_arg(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    parser.add_argument("--device", default=default,
                        help="cpu, cuda, cuda:N or auto: CUDA when available, else the CPU (default: auto)")


def check_setting(label: str, value: Any, kind: type, low: float | None = None, high: float | None = None,
                  above: bool = False) -> Any:
    """Return ``value`` if it is a ``kind`` (an ``int`` passes for a ``float``, a ``bool`` never
    for a number; numbers finite) in ``[low, high)`` (``(low, high)`` with ``above=True``;
    ``None``: unbounded); otherwise raise :class:`~geoattn.errors.ConfigError` naming ``label``."""
    if kind in (int, float):
        ok = isinstance(value, kind if kind is int else (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
    else:
        ok = isinstance(value, kind)
    if ok and low is not None:
        ok = value > low if above else value >= low
    if ok and high is not None:
        ok = value < high
    if not ok:
        rule = {int: "an integer", float: "a finite number", bool: "true or false"}.get(kind, f"a {kind.__name__}")
        if low is not None:
            rule += f" {'>' if above else '>='} {low}"
        if high is not None:
            rule += f" and < {high}"
        raise ConfigError(f"{label} must be {rule}, got {value!r}")
    return value


def read_config(path: str) -> dict[str, dict]:
    """The ``[model]`` and ``[train]`` tables of a TOML file (:class:`ConfigError` if it is
    missing, unreadable, not TOML, or has other tables)."""
    try:
        with open(path, "rb") as fh:
            config = tomllib.load(fh)
    except FileNotFoundError as err:
        raise ConfigError(f"config file {path} not found") from err
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from err
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from err
    for key, table in config.items():
        if key not in ("model", "train") or not isinstance(table, dict):
            raise ConfigError(f"config file {path}: unexpected {key!r}; it holds a [model] and a [train] table")
    return config


def _check_model_settings(name: str, model_kw: dict[str, Any], source: dict[str, str]) -> None:
    """Names and types of model settings, from the model's constructor signature (integers >= 0,
    numbers finite and >= 0; ``width``, ``depth`` and ``num_heads`` >= 1); the constructor
    checks the rest."""
    params = inspect.signature(MODELS[name].__init__).parameters
    allowed = [p for p in params if p not in ("self", *DATA_ARGUMENTS)]
    kinds = {"int": int, "int | None": int, "float": float, "float | None": float, "str": str, "bool": bool}
    for key, value in model_kw.items():
        label = source.get(key, f"[model] {key}")
        if key in DATA_ARGUMENTS:
            raise ConfigError(f"{label}: {key} is read from the dataset, do not set it")
        if key not in allowed:
            raise ConfigError(f"{label}: model {name!r} has no setting {key!r}; it takes {allowed}")
        kind = kinds.get(str(params[key].annotation))
        if kind is not None:
            check_setting(label, value, kind, (1 if key in MODEL_FLAGS else 0) if kind in (int, float) else None)


def settings(args: argparse.Namespace) -> tuple[str, dict, dict]:
    """Model name, model keyword arguments and trainer keyword arguments from TOML and flags,
    each checked (type and range); the model's ``supersample``, when given, is among its keyword
    arguments."""
    config = read_config(args.config) if args.config else {}
    model_kw = dict(config.get("model", {}))
    name = args.model or model_kw.pop("name", "tno")
    model_kw.pop("name", None)
    if name not in MODELS:
        raise ConfigError(f"[model] name must be one of {sorted(MODELS)}, got {name!r}")
    flags = {k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k) is not None}
    model_kw.update(flags)
    supersample = model_kw.pop("supersample", None)
    if getattr(args, "supersample", None) is not None:
        supersample = args.supersample
        check_setting("--supersample", supersample, float, 1)
    elif supersample is not None:
        check_setting("[model] supersample", supersample, float, 1)
    _check_model_settings(name, model_kw, {k: f"--{k.replace('_', '-')}" for k in flags})
    if supersample is not None:
        model_kw["supersample"] = float(supersample)
    train_kw = dict(config.get("train", {}))
    unknown = set(train_kw) - set(TRAIN_KEYS)
    if unknown:
        raise ConfigError(f"unknown [train] keys {sorted(unknown)}; allowed: {list(TRAIN_KEYS)}")
    flags = {k: getattr(args, k) for k in TRAIN_KEYS if getattr(args, k, None) is not None}
    train_kw.update(flags)
    for key, value in train_kw.items():
        label = f"--{key.replace('_', '-')}" if key in flags else f"[train] {key}"
        check_setting(label, value, *TRAIN_RANGES[key])
    return name, model_kw, train_kw


def _resumed(last: Path, name: str, model_kw: dict, args: argparse.Namespace) -> tuple[dict, str, dict]:
    """The checkpoint to resume, and the model name and arguments stored in it, after checking
    that the settings given now (flags and config) do not contradict them."""
    state = load_checkpoint(last, resume=True)
    stored = {RENAMED_ARGUMENTS.get(k, k): v for k, v in state["model_kwargs"].items() if k not in DATA_ARGUMENTS}
    named = args.model is not None or (args.config is not None and "name" in read_config(args.config).get("model", {}))
    given = {**({"model": name} if named else {}), **model_kw, "unweighted": args.unweighted}
    stored.update(model=state["model"], unweighted=state.get("unweighted", False))
    clash = [f"{k} {v!r} (stored: {stored.get(k)!r})" for k, v in given.items() if stored.get(k) != v]
    if clash:
        raise ConfigError(f"cannot resume {last}: it was trained with other settings: {', '.join(clash)}; "
                          "drop these settings, or train into another --out")
    del stored["unweighted"]
    return state, stored.pop("model"), stored


def run(args: argparse.Namespace) -> int:
    from ..data.dataset import DarcyDataset
    from ..data.meshdataset import MESH_FORMAT_VERSION, dataset_version

    name, model_kw, train_kw = settings(args)
    _check_between_nodes(name, train_kw)  # again with the stored model when resuming
    supersample = model_kw.pop("supersample", None)
    if supersample not in (None, 1.0) and args.unweighted:
        raise ConfigError("--unweighted cannot be combined with --supersample: the supersampled model "
                          "integrates with the refined mesh's own weights")
    if args.latent_mesh and args.unweighted:
        raise ConfigError("--unweighted cannot be combined with --latent-mesh: the model integrates with the "
                          "latent mesh's own weights")
    val_fraction = check_setting("--val-fraction", args.val_fraction, float, 0, 1)
    members = check_setting("--ensemble", args.ensemble, int, 1)
    seed = train_kw.pop("seed", 0)
    if seed + members > SEEDS:
        raise ConfigError(f"--ensemble {members} from --seed {seed} needs seeds up to {seed + members - 1}; "
                          f"the largest is {SEEDS - 1}")
    out = check_writable(args.out, folder=True)
    folders = [out] if members == 1 else [out / f"member{k}" for k in range(members)]
    device = train_kw["device"] = resolve_device(train_kw.get("device", "auto"))
    check_precision(train_kw.get("precision", "fp32"), device)
    if args.tensorboard:
        require("tensorboard", "tensorboard", "--tensorboard")  # fail now, not after reading the data
    with _locked(out, folders):  # a second `geoattn train` into OUT is refused, naming this process
        check_run_folder(folders, resume=args.resume, overwrite=args.overwrite,
                         names=("--resume", "--overwrite", "another --out"))
        init_distributed(device)  # no-op unless launched by torchrun; NCCL only for a CUDA device
        if dataset_version(args.data) == MESH_FORMAT_VERSION:
            dataset, train, val = _split_data(args, supersample, val_fraction)
        else:
            dataset = DarcyDataset(args.data, mesh=args.mesh)  # read lazily: a sample at a time
            if len(dataset) == 0:
                raise DatasetFileError(f"{args.data} holds no samples to train on")
            n_val = math.floor(len(dataset) * val_fraction)
            train, val = dataset[:len(dataset) - n_val], dataset[len(dataset) - n_val:]
        _write_fields(out, dataset)
        group = _symmetries(args, dataset[0])
        if group is not None:
            train = augment(train, group)  # checked against the training mesh now
        for k, folder in enumerate(folders):  # member k: seed + k, its own folder
            _train_one(args, dataset, train, val, group, name, model_kw, dict(train_kw, seed=seed + k),
                       supersample, folder)
    if members > 1:
        print(f"an ensemble of {members} members (seeds {seed}..{seed + members - 1}) in {out}/: "
              f"geoattn evaluate {out} DATA scores their mean")
    return 0


def _check_between_nodes(name: str, train_kw: dict) -> None:
    """Refuse ``--between-nodes`` for a model that takes no query mesh."""
    if train_kw.get("between_nodes") is not None and not accepts_query(MODELS[name]):
        raise ConfigError(f"--between-nodes reads the model's output between the nodes (a query mesh), but model "
                          f"{name!r} takes none; drop --between-nodes, or train one of {', '.join(query_models())}")


def _split_data(args: argparse.Namespace, supersample: float | None, val_fraction: float):
    """The ``train`` split of a version-2 file and its ``val`` split (or, when it has none, the
    last ``val_fraction`` of the training samples), global parameters appended to ``x`` as
    constant channels."""
    from ..data.meshdataset import MeshDataset

    if args.mesh is not None:
        raise ConfigError(f"--mesh picks a mesh of a `geoattn generate` file; {args.data} is a dataset of "
                          "several meshes that trains on its train split: drop --mesh")
    if supersample not in (None, 1.0) or args.symmetries is not None:
        raise ConfigError(f"--supersample and --symmetries need samples on one training mesh; {args.data} "
                          "is a dataset of several meshes (from `geoattn import`): drop them")
    train = MeshDataset(args.data, "train", params_as_channels=True)
    if len(train) == 0:
        raise DatasetFileError(f"{args.data} holds no samples to train on")
    if train.splits.get("val"):
        return train, train, MeshDataset(args.data, "val", params_as_channels=True)
    n_val = math.floor(len(train) * val_fraction)
    return train, train[:len(train) - n_val], train[len(train) - n_val:]


def _write_fields(out: Path, dataset) -> None:
    """Remove an ``OUT/fields.json`` of an earlier run: the names now travel in the checkpoints
    (:func:`field_names`), and a stale file beside them would contradict them."""
    if int(os.environ.get("RANK", "0")) == 0:
        (out / FIELDS).unlink(missing_ok=True)


def field_names(dataset) -> dict | None:
    """The input, target and parameter names of a version-2 dataset (``None`` for a dataset
    without names), as a checkpoint stores them (``NormalizedOperator.fields``)."""
    names = getattr(dataset, "x_names", None)
    if names is None:
        return None
    return {"x": list(names), "y": list(dataset.y_names), "params": list(dataset.param_names)}


def read_fields(checkpoint: str | Path, operator=None) -> dict | None:
    """The field names a trained model knows: those stored in ``operator`` (loaded from
    ``checkpoint``; :func:`~geoattn.train.checkpoint.trained_fields`), else those of a
    ``fields.json`` beside ``checkpoint`` that an older ``geoattn train`` wrote, else ``None``."""
    from ..train.checkpoint import fields_beside, trained_fields

    stored = None if operator is None else trained_fields(operator)
    if stored is not None:
        return stored
    try:
        return fields_beside(checkpoint)
    except CheckpointError as err:
        raise ConfigError(str(err)) from err


def _locked(out: Path, folders: list[Path]) -> contextlib.ExitStack:
    """The locks of ``out`` and of its member folders (:func:`geoattn.locking.hold`), taken by the
    first process of a ``torchrun`` launch (whose other processes write nothing). The folders are
    created now, and removed at the end when nothing was written to them; those of a killed
    ensemble run stay, and mark the members it did not finish."""
    stack = contextlib.ExitStack()
    if int(os.environ.get("RANK", "0")) == 0:
        with stack:
            for folder in dict.fromkeys([out, *folders]):
                stack.enter_context(hold(folder, folder=True))
            return stack.pop_all()
    return stack


def _train_one(args: argparse.Namespace, dataset, train, val, group, name: str, model_kw: dict,
               train_kw: dict, supersample: float | None, out: Path) -> None:
    """Build one model after seeding, train it into ``out`` (resuming ``out/last.pt`` with
    ``--resume``), and print its last errors."""
    remove_leftovers(out)  # the temporary files of writes killed in an earlier run
    last = out / "last.pt"
    state = None
    if args.resume and last.exists():
        state, name, model_kw = _resumed(last, name, model_kw, args)
    _check_between_nodes(name, train_kw)
    first = dataset[0]
    size = _resolve_size(first, dataset.mesh, supersample, state, last)
    torch.manual_seed(train_kw["seed"])  # before the model: its initial weights follow the seed
    try:
        model = build_model(name, in_channels=first.x.shape[1], out_channels=first.y.shape[1],
                            dim=first.pos.shape[1], **model_kw)
    except (TypeError, ValueError, RuntimeError, MemoryError) as err:
        raise ConfigError(f"cannot build model {name!r} with {model_kw}: {err}") from err
    if size is not None:
        model = RefinedOperator(model, size)  # every Mesh refines itself, once
    latent = _latent_mesh(args, first, state, last)
    if latent is not None:
        model = LatentMeshOperator(model, latent)
    op = NormalizedOperator(model, unweighted=args.unweighted)
    op.fields = field_names(dataset)  # saved in every checkpoint
    trainer = Trainer(op, out, progress=not args.no_progress, tensorboard=args.tensorboard,
                      workers=args.workers, overwrite=args.overwrite, **train_kw)
    if state is not None:
        _check_resumable(state, last, op, trainer.epochs * math.ceil(len(train) / trainer.batch_size))
    history = trainer.fit(train, val or None, resume=args.resume)
    last_row = history[-1]
    images = "" if group is None else f" ({len(train) // len(group)} samples x {len(group)} symmetries)"
    where = (f"split 'train' of {dataset.path.name}" if hasattr(dataset, "x_names")
             else f"mesh {dataset.mesh!r}")
    print(f"trained {name} on {len(train)} samples{images} of {where}: "
          f"train {last_row['train']:.4f}, validation {last_row['val']:.4f}; checkpoints in {out}/")


def _symmetries(args: argparse.Namespace, first) -> list | None:
    """The dihedral group of ``--symmetries`` about the weighted centroid of the training mesh
    (which every symmetry of the domain fixes; the lumped weights integrate affine functions
    exactly), or ``None``."""
    if args.symmetries is None:
        if args.symmetry_angle != 0.0:
            raise ConfigError("--symmetry-angle without --symmetries: give the group's order too")
        return None
    check_setting("--symmetries", args.symmetries, int, 1)
    check_setting("--symmetry-angle", args.symmetry_angle, float)
    if first.pos.shape[1] != 2:
        raise ConfigError(f"--symmetries needs a 2-D mesh; the training mesh has {first.pos.shape[1]}-D nodes")
    w = first.weight.double()[:, None]
    center = ((w * first.pos.double()).sum(0) / w.sum()).tolist()
    return dihedral(args.symmetries, center, math.radians(args.symmetry_angle))


def _latent_mesh(args: argparse.Namespace, first, state: dict | None, last: Path) -> Mesh | None:
    """The mesh the model runs on with ``--latent-mesh`` (the training mesh; when resuming, the
    one stored in the checkpoint), or ``None``."""
    stored = None if state is None else state.get("latent")
    if stored is not None:
        return Mesh(stored["pos"], stored["weight"], stored["cells"] if len(stored["cells"]) else None)
    if state is not None and args.latent_mesh:
        raise ConfigError(f"cannot resume {last}: it was trained without --latent-mesh; drop --latent-mesh, "
                          "or train into another --out")
    return Mesh.from_sample(first) if args.latent_mesh else None


def _resolve_size(first, mesh: str, supersample: float | None, state: dict | None, last: Path) -> float | None:
    """The edge the model computes at (None: the meshes as they are): the training mesh's longest
    edge / ``supersample``; when resuming, the one stored in the checkpoint, which a
    ``supersample`` given now must reproduce."""
    stored = None if state is None else (state.get("resolve") or {}).get("size")
    if supersample is None:  # not given: the stored setting when resuming, else none
        return stored
    size = None
    if supersample > 1:
        try:
            size = training_size(to_meshio(first)) / supersample
        except UnsupportedCellError as err:
            raise ConfigError(f"--supersample needs a triangle mesh; mesh {mesh!r}: {err}") from err
    same = stored is None and size is None or (
        stored is not None and size is not None and math.isclose(stored, size, rel_tol=1e-6))
    if state is not None and not same:
        raise ConfigError(f"cannot resume {last}: it was trained with another --supersample (stored "
                          f"edge {stored}, given {supersample:g}: edge {size}); drop --supersample, or "
                          "train into another --out")
    return size


def _check_resumable(state: dict, last: Path, op: NormalizedOperator, total_steps: int) -> None:
    try:
        op.load_state_dict(state["state_dict"])
    except RuntimeError as err:
        raise CheckpointError(f"cannot resume {last}: its weights do not fit this dataset's "
                              f"model: {err}") from err
    planned = state["scheduler"].get("total_steps") if isinstance(state["scheduler"], dict) else None
    if planned is not None and planned != total_steps:
        raise ConfigError(f"cannot resume {last}: its run plans {planned} optimiser steps, these "
                          f"settings {total_steps}; give the epochs, batch size, validation "
                          "fraction and --symmetries of the run that wrote it")
