"""``Trainer.fit(on_epoch=)``: entries a caller adds to each epoch's row (a test error) are the
model's at the end of that epoch, and are kept in the history, ``metrics.csv`` and the checkpoint,
so that a resumed run has them for the earlier epochs too."""

import csv

import pytest
import torch

from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, evaluate_errors

from toy_operator import toy_samples


def _operator():
    torch.manual_seed(0)
    return NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))


def _fit(op, samples, out, epochs, resume=False, stop_after=None):
    test = samples[6:]

    def on_epoch(epoch, row):
        row["test"] = float(evaluate_errors(op, test).max())
        if epoch == stop_after:
            raise KeyboardInterrupt  # killed before this epoch is recorded

    trainer = Trainer(op, out, epochs=epochs, batch_size=2, lr=1e-2, progress=False)
    return trainer.fit(samples[:6], resume=resume, on_epoch=on_epoch)


def test_the_entries_are_the_models_at_the_end_of_each_epoch_and_survive_a_resume(tmp_path):
    samples = toy_samples(8)
    op = _operator()
    history = _fit(op, samples, tmp_path / "whole", epochs=3)
    assert [row["epoch"] for row in history] == [0, 1, 2]
    # the last entry is the trained model's error (the hook saw the final weights)
    assert history[-1]["test"] == pytest.approx(float(evaluate_errors(op, samples[6:]).max()), rel=1e-6)
    assert len({row["test"] for row in history}) == 3  # the model changed between epochs
    with open(tmp_path / "whole" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["test"]) for r in rows] == pytest.approx([row["test"] for row in history], rel=1e-6)

    # killed in epoch 1's hook: epoch 0 is recorded and checkpointed, epoch 1 is not
    with pytest.raises(KeyboardInterrupt):
        _fit(_operator(), samples, tmp_path / "resumed", epochs=3, stop_after=1)
    resumed = _fit(_operator(), samples, tmp_path / "resumed", epochs=3, resume=True)
    assert [row["epoch"] for row in resumed] == [0, 1, 2]
    assert [row["test"] for row in resumed] == pytest.approx([row["test"] for row in history], rel=1e-5)
