import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from geoattn.errors import NonFiniteLossError
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, evaluate_errors, load_checkpoint

HERE = Path(__file__).parent


def _operator(seed=0):
    torch.manual_seed(seed)
    return NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))


def _fit(out, samples, epochs=4, **kw):
    op = _operator()
    Trainer(op, out, epochs=epochs, batch_size=2, lr=1e-2, progress=False).fit(samples[:6], samples[6:], **kw)
    return op


def test_training_lowers_error_and_writes_metrics(tmp_path, samples):
    before = float(evaluate_errors(_operator(), samples).mean())
    op = _fit(tmp_path, samples, epochs=6)
    after = float(evaluate_errors(op, samples).mean())
    assert after < 0.5 * before
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == "epoch,train,val,lr,seconds" and len(lines) == 7
    assert (tmp_path / "best.pt").exists() and load_checkpoint(tmp_path / "last.pt")["epoch"] == 5


def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path, samples):
    reference = _fit(tmp_path / "ref", samples)
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(HERE)!r})
        from conftest import toy_samples
        from test_trainer import _fit
        def kill(epoch, step):
            if epoch == 2 and step == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        _fit({str(tmp_path / 'run')!r}, toy_samples(), on_step=kill)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert load_checkpoint(tmp_path / "run" / "last.pt")["epoch"] == 1
    resumed = _fit(tmp_path / "run", samples, resume=True)
    for a, b in zip(reference.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
    ref_csv = (tmp_path / "ref" / "metrics.csv").read_text().splitlines()
    run_csv = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[:3] for r in ref_csv] == [r.split(",")[:3] for r in run_csv]


def test_non_finite_loss_stops_with_last_good_checkpoint(tmp_path, samples):
    _fit(tmp_path, samples, epochs=2)
    good = load_checkpoint(tmp_path / "last.pt")
    op = _operator()
    # the data are valid (they are checked up front); the model's output blows up
    op.model.register_forward_hook(lambda module, args, out: out * float("nan"))
    with pytest.raises(NonFiniteLossError, match="epoch 2, step 0.*last good checkpoint"):
        Trainer(op, tmp_path, epochs=4, batch_size=2, progress=False).fit(samples[:6], resume=True)
    kept = load_checkpoint(tmp_path / "last.pt")
    assert kept["epoch"] == good["epoch"]
    assert all(torch.equal(kept["state_dict"][k], v) for k, v in good["state_dict"].items())


def test_point_clouds_and_meshes_batch_together_and_h1_needs_cells():
    """A point cloud (no cells) batched with meshes, in either order, is scored like each alone;
    the H1 loss, which needs cells, refuses it with a typed error."""
    import pytest
    from torch_geometric.data import Data

    from geoattn.errors import FieldLengthError
    from geoattn.mesh import families, from_meshio
    from geoattn.models import TNO
    from geoattn.train import NormalizedOperator, evaluate_errors

    mesh = from_meshio(families.unit_square(3, "irregular", seed=0))
    mesh.x, mesh.y = mesh.pos[:, :1].clone(), mesh.pos[:, 1:].clone() + 1
    cloud = Data(x=mesh.x[:7], y=mesh.y[:7], pos=mesh.pos[:7], weight=mesh.weight[:7])
    torch.manual_seed(0)
    op = NormalizedOperator(TNO(1, 1, width=8, depth=1, num_heads=2))
    alone = torch.cat([evaluate_errors(op, [d]) for d in (mesh, cloud)])
    assert torch.allclose(evaluate_errors(op, [mesh, cloud]), alone, atol=1e-6)
    assert torch.allclose(evaluate_errors(op, [cloud, mesh]), alone.flip(0), atol=1e-6)
    with pytest.raises(FieldLengthError, match="sample 1 has no cells"):
        evaluate_errors(op, [mesh, cloud], h1=True)
