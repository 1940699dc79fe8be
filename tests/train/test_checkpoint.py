import pytest
import torch

from geoattn.errors import CheckpointError
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, load_operator, operator_payload, save_checkpoint


def _operator():
    op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
    op.y_normalizer.mean.fill_(3.0)
    return op.eval()


def test_checkpoint_rebuilds_model_and_normalisers(tmp_path, samples):
    op = _operator()
    save_checkpoint(tmp_path / "c.pt", operator_payload(op))
    again = load_operator(tmp_path / "c.pt")
    d = samples[0]
    assert again.model.hparams == op.model.hparams
    assert torch.equal(again(d.x, d.pos, d.weight), op(d.x, d.pos, d.weight))
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", None])
def test_corrupted_checkpoint_raises_clear_error(tmp_path, content):
    path = tmp_path / "bad.pt"
    if content is None:  # a valid file cut in half
        save_checkpoint(path, operator_payload(_operator()))
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match="bad.pt"):
        load_operator(path)


def test_foreign_and_missing_checkpoints(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a geoattn checkpoint"):
        load_operator(tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_operator(tmp_path / "missing.pt")
