"""``geoattn train``: fit a model to one mesh of a dataset file; checkpoints and metrics to a folder.

Model and training settings come from flags or a TOML file (flags win)::

    [model]
    name = "tno"
    width = 32
    depth = 3

    [train]
    epochs = 20
    batch_size = 4
    lr = 0.003
"""

from __future__ import annotations

import argparse
import math
import tomllib
from pathlib import Path

import torch

from ..models import MODELS, build_model
from ..train import NormalizedOperator, Trainer, init_distributed

TRAIN_KEYS = ("epochs", "batch_size", "lr", "weight_decay", "clip", "seed", "h1")
MODEL_FLAGS = ("width", "depth", "num_heads")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="dataset file (from `geoattn generate`)")
    parser.add_argument("--mesh", help="mesh of the dataset to train on (default: its only/first mesh)")
    parser.add_argument("--out", default="geoattn-run", help="output folder (default: %(default)s)")
    parser.add_argument("--config", help="TOML file with [model] and [train] tables")
    parser.add_argument("--model", choices=sorted(MODELS), help="model name (default: tno)")
    for name in MODEL_FLAGS:
        flags = [f"--{name.replace('_', '-')}"] + (["--heads"] if name == "num_heads" else [])
        parser.add_argument(*flags, dest=name, type=int, help=f"model {name}")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", dest="batch_size", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--h1", action="store_true", default=None, help="train on the relative H1 error")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="last fraction of samples kept for validation (default: %(default)s)")
    parser.add_argument("--unweighted", action="store_true", help="node-average ablation")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    parser.add_argument("--no-progress", action="store_true")


def settings(args: argparse.Namespace) -> tuple[str, dict, dict]:
    """Model name, model keyword arguments and trainer keyword arguments from TOML and flags."""
    config = {}
    if args.config:
        with open(args.config, "rb") as fh:
            config = tomllib.load(fh)
    model_kw = dict(config.get("model", {}))
    name = args.model or model_kw.pop("name", "tno")
    model_kw.pop("name", None)
    model_kw.update({k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k) is not None})
    train_kw = dict(config.get("train", {}))
    unknown = set(train_kw) - set(TRAIN_KEYS)
    if unknown:
        raise ValueError(f"unknown [train] keys {sorted(unknown)}; allowed: {list(TRAIN_KEYS)}")
    train_kw.update({k: getattr(args, k) for k in TRAIN_KEYS if getattr(args, k, None) is not None})
    return name, model_kw, train_kw


def run(args: argparse.Namespace) -> int:
    from ..data.dataset import DarcyDataset

    name, model_kw, train_kw = settings(args)
    init_distributed()  # no-op unless launched by torchrun
    dataset = DarcyDataset(args.data, mesh=args.mesh)
    samples = [dataset[i] for i in range(len(dataset))]
    n_val = math.floor(len(samples) * args.val_fraction)
    train, val = samples[:len(samples) - n_val], samples[len(samples) - n_val:]
    first = samples[0]
    model = build_model(name, in_channels=first.x.shape[1], out_channels=first.y.shape[1],
                        dim=first.pos.shape[1], **model_kw)
    torch.manual_seed(train_kw.get("seed", 0))
    op = NormalizedOperator(model, unweighted=args.unweighted)
    history = Trainer(op, args.out, progress=not args.no_progress, **train_kw).fit(
        train, val or None, resume=args.resume)
    last = history[-1]
    print(f"trained {name} on {len(train)} samples of mesh {dataset.mesh!r}: "
          f"train {last['train']:.4f}, validation {last['val']:.4f}; checkpoints in {Path(args.out)}/")
    return 0
