"""A Python Trainer, like ``geoattn train``, refuses a folder that holds a run unless told to
resume or overwrite it."""

import pytest
import torch

from geoattn.errors import ConfigError
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, load_checkpoint
from geoattn.train.trainer import check_run_folder


def _trainer(out, **kw):
    torch.manual_seed(0)
    op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
    return Trainer(op, out, batch_size=2, lr=1e-2, progress=False, **kw)


def test_existing_run_is_refused_before_anything_is_written(tmp_path, samples):
    _trainer(tmp_path, epochs=2).fit(samples[:4])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert {"last.pt", "best.pt", "metrics.csv"} <= set(before)
    with pytest.raises(ConfigError, match=r"holds a run \(last.pt, best.pt, metrics.csv\).*resume=True"
                                          r".*overwrite=True"):
        _trainer(tmp_path, epochs=2).fit(samples[:4])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_resume_continues_and_overwrite_replaces(tmp_path, samples):
    _trainer(tmp_path, epochs=2).fit(samples[:4])
    history = _trainer(tmp_path, epochs=2).fit(samples[:4], resume=True)
    assert [row["epoch"] for row in history] == [0, 1]  # the finished run, read back
    history = _trainer(tmp_path, epochs=1, overwrite=True).fit(samples[:4])
    assert [row["epoch"] for row in history] == [0]
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 0
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 2  # header and the new epoch
    with pytest.raises(ConfigError, match="not both"):
        _trainer(tmp_path, epochs=1, overwrite=True).fit(samples[:4], resume=True)


def test_folder_with_only_metrics_holds_a_run(tmp_path):
    assert check_run_folder(tmp_path / "new") == []
    (tmp_path / "metrics.csv").write_text("epoch,train\n")
    with pytest.raises(ConfigError, match=r"--resume to continue it, --overwrite to replace it, or another --out"):
        check_run_folder(tmp_path, names=("--resume", "--overwrite", "another --out"))
    assert check_run_folder(tmp_path, overwrite=True) == [tmp_path / "metrics.csv"]


def test_no_out_dir_writes_nothing_and_is_never_refused(samples):
    _trainer(None, epochs=1).fit(samples[:4])
    _trainer(None, epochs=1).fit(samples[:4])
