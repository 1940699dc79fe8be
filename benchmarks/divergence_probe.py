"""Where a Burgers paper-scale run of Cao's block diverges: the first ``--epochs`` epochs of one
run of ``galerkin_experiments.py --experiment burgers --scale paper`` (the same data, seeds,
model and one-cycle schedule over the full 100 epochs), with per step the RMS of the residual
stream after every block, the gradient norm before clipping and the learning rate.

Usage::

    python benchmarks/divergence_probe.py --model FT --n 512 --ff-dropout 0.05 --epochs 20 \\
        --data-cache bench_out/cache --out bench_out/divergence_ft512.json

It prints the steps around the first one whose last-block RMS exceeds ``--factor`` times its
median over the previous epoch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

import galerkin_experiments as ge
from geoattn.models import GalerkinTransformer
from geoattn.operators import NormalizedOperator
from geoattn.train import Trainer


class Stop(Exception):
    """The probe's last epoch is done."""


def probe(model_name: str, n: int, ff_dropout: float, epochs: int, data_cache: Path | None,
          lr: float | None = None) -> list[dict]:
    scale = ge.SCALES["burgers"]["paper"]
    scale = scale if lr is None else replace(scale, lr=lr)
    train_data, _ = ge.burgers_split(scale, 0, False, data_cache)
    train = scale.coordinates_of(ge.uniform_samples(train_data, n))
    options = scale.model_options() | ({"ff_dropout": ff_dropout} if ff_dropout else {})
    gain = ({"attention_options": {"init_gain": scale.fourier_init_gain}}
            if model_name == "FT" and scale.fourier_init_gain is not None else {})
    torch.manual_seed(0)  # as run_burgers: the data's seed initialises the model
    model = GalerkinTransformer(1, 1, dim=scale.dim, width=scale.width, depth=scale.depth,
                                num_heads=scale.num_heads, attention=ge.MODELS[model_name], **options, **gain)
    op = NormalizedOperator(model)
    stream: list[float] = []
    for block in model.blocks:
        block.register_forward_hook(lambda mod, args, out: stream.append(float(out.detach().pow(2).mean().sqrt())))
    norms: list[float] = []
    clip = torch.nn.utils.clip_grad_norm_

    def clip_and_record(params, max_norm, *args, **kwargs):
        total = clip(params, max_norm, *args, **kwargs)
        norms.append(float(total))
        return total

    rows: list[dict] = []

    def on_step(epoch: int, step: int) -> None:  # after the forward pass, before the backward
        if epoch >= epochs:
            raise Stop
        rows.append({"epoch": epoch, "step": step, "stream_rms": stream[-len(model.blocks):]})
        stream.clear()

    original_step = torch.optim.AdamW.step

    def step_and_record(self, *args, **kwargs):  # after clipping: the step's norm and rate
        rows[-1] |= {"grad_norm": norms[-1], "lr": self.param_groups[0]["lr"]}
        return original_step(self, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = clip_and_record
    torch.optim.AdamW.step = step_and_record
    try:
        with tempfile.TemporaryDirectory() as folder:
            trainer = Trainer(op, folder, epochs=scale.epochs, batch_size=scale.batch_size, lr=scale.lr,
                              weight_decay=scale.weight_decay, seed=0, progress=True, **scale.trainer_options())
            try:
                trainer.fit(train, resume=False, on_step=on_step)
            except Stop:
                pass
    finally:
        torch.nn.utils.clip_grad_norm_ = clip
        torch.optim.AdamW.step = original_step
    return rows


def first_jump(rows: list[dict], factor: float) -> int | None:
    """Index of the first step whose last-block RMS exceeds ``factor`` times the median of the
    previous epoch's."""
    for i, row in enumerate(rows):
        before = [r["stream_rms"][-1] for r in rows if r["epoch"] == row["epoch"] - 1]
        if before and row["stream_rms"][-1] > factor * statistics.median(before):
            return i
    return None


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(ge.MODELS), default="FT")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--ff-dropout", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=20, help="epochs to probe (of the schedule's 100)")
    parser.add_argument("--lr", type=float, help="the schedule's peak rate (default: the preset's, 1e-3)")
    parser.add_argument("--factor", type=float, default=10.0)
    parser.add_argument("--data-cache", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = probe(args.model, args.n, args.ff_dropout, args.epochs, args.data_cache, args.lr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows))
    i = first_jump(rows, args.factor)
    if i is None:
        print(f"no step's last-block RMS exceeds {args.factor} x the previous epoch's median")
        return rows
    print("epoch step lr grad-norm(before clip) stream RMS after each block")
    for row in rows[max(0, i - 8):i + 8]:
        rms = " ".join(f"{v:.3g}" for v in row["stream_rms"])
        print(f"{row['epoch']:5d} {row['step']:4d} {row['lr']:.3g} {row['grad_norm']:.3g}  {rms}")
    return rows


if __name__ == "__main__":
    main()
