import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from geoattn.errors import ConfigError, NonFiniteLossError
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


@pytest.mark.slow
def test_training_lowers_error_and_writes_metrics(tmp_path, samples):
    before = float(evaluate_errors(_operator(), samples).mean())
    op = _fit(tmp_path, samples, epochs=6)
    after = float(evaluate_errors(op, samples).mean())
    assert after < 0.5 * before
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == "epoch,train,val,lr,seconds,train_seconds" and len(lines) == 7
    assert (tmp_path / "best.pt").exists() and load_checkpoint(tmp_path / "last.pt")["epoch"] == 5


@pytest.mark.slow
def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path, samples):
    reference = _fit(tmp_path / "ref", samples)
    script = textwrap.dedent(f"""
        import os, signal, sys
        import torch
        torch.set_num_threads({torch.get_num_threads()})  # the reduction order of this process
        sys.path.insert(0, {str(HERE)!r})
        from toy_operator import toy_samples
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


def test_device_strings_resolve_or_are_refused_with_one_line(monkeypatch):
    from geoattn.errors import ConfigError
    from geoattn.train.trainer import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("CPU") == resolve_device(torch.device("cpu")) == torch.device("cpu")
    for bad in ("gpu", "cuda:x", "cpu:0", "mps", "", "cuda:-1"):
        with pytest.raises(ConfigError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"):
            resolve_device(bad)
    for cuda in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(ConfigError, match="asks for CUDA, but this PyTorch sees no CUDA device") as err:
            resolve_device(cuda)
        assert "\n" not in str(err.value)


def test_precision_is_checked_against_the_device():
    from geoattn.errors import ConfigError
    from geoattn.train.trainer import check_precision

    cpu = torch.device("cpu")
    assert check_precision("fp32", cpu) is None and check_precision("bf16", cpu) is torch.bfloat16
    with pytest.raises(ConfigError, match="'fp16' needs a CUDA device.*use bf16 or fp32 on the CPU"):
        check_precision("fp16", cpu)
    with pytest.raises(ConfigError, match="precision must be one of"):
        check_precision("float16", cpu)
    with pytest.raises(ConfigError, match="'fp16' needs a CUDA device"):
        Trainer(_operator(), device="cpu", precision="fp16")


def test_bf16_autocast_trains_close_to_fp32_and_checkpoints_record_the_settings(tmp_path, samples):
    """Training with the forward pass under bfloat16 autocast on the CPU gives finite losses within
    a few percent of float32's; the parameters stay float32; the checkpoints store the settings."""
    histories = {}
    for precision in ("fp32", "bf16"):
        op = _operator()
        histories[precision] = Trainer(op, tmp_path / precision, epochs=2, batch_size=2, lr=1e-2,
                                       progress=False, device="cpu", precision=precision).fit(samples[:4])
        assert all(p.dtype == torch.float32 for p in op.parameters())
    fp32 = torch.tensor([row["train"] for row in histories["fp32"]])
    bf16 = torch.tensor([row["train"] for row in histories["bf16"]])
    assert torch.isfinite(bf16).all() and bf16[-1] < bf16[0]
    assert torch.allclose(bf16, fp32, rtol=0.02), (bf16, fp32)
    for name in ("last.pt", "best.pt"):
        settings = load_checkpoint(tmp_path / "bf16" / name)["trainer"]
        assert settings["precision"] == "bf16" and settings["device"] == "cpu" and settings["lr"] == 1e-2


def test_model_without_bf16_kernels_is_a_config_error(samples):
    from geoattn.errors import ConfigError

    torch.manual_seed(0)
    op = NormalizedOperator(build_model("mesh_fno", in_channels=1, out_channels=1, width=8, depth=1, modes=2))
    with pytest.raises(ConfigError, match="model 'mesh_fno' does not run in bf16 on cpu.*train it in fp32"):
        Trainer(op, epochs=1, batch_size=2, progress=False, precision="bf16").fit(samples[:2])


def test_tensorboard_logs_the_metrics_columns(tmp_path, samples):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    history = Trainer(_operator(), tmp_path, epochs=2, batch_size=2, progress=False,
                      tensorboard=True).fit(samples[:4], samples[4:6])
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert set(events.Tags()["scalars"]) == {"train", "val", "lr", "seconds", "train_seconds"}
    for key in ("train", "val", "lr"):
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert logged == [(row["epoch"], pytest.approx(row[key], rel=1e-6)) for row in history]


def test_tensorboard_without_the_package_names_the_extra(monkeypatch, tmp_path):
    import sys

    from geoattn.errors import ConfigError
    from geoattn.optional import MissingDependencyError

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'geoattn\[tensorboard\]'"):
        Trainer(_operator(), tmp_path, tensorboard=True)
    assert not (tmp_path / "tensorboard").exists()
    with pytest.raises(ConfigError, match="give an out_dir"):
        Trainer(_operator(), tensorboard=True)


def test_evaluation_out_of_memory_halves_the_batch(samples, monkeypatch, caplog):
    """A batch the device cannot hold is split until it fits: the same per-sample errors, in order;
    one sample that does not fit is still an error."""
    import geoattn.train.trainer as trainer_module

    op = _operator()
    expected = evaluate_errors(op, samples, batch_size=1)
    plain, sizes = trainer_module.sample_errors, []

    def limited(operator, batch, h1=False, **kwargs):
        sizes.append(int(batch.num_graphs))
        if batch.num_graphs > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return plain(operator, batch, h1, **kwargs)

    monkeypatch.setattr(trainer_module, "sample_errors", limited)
    with caplog.at_level("WARNING", logger="geoattn.train.trainer"):
        errors = evaluate_errors(op, samples[:7], batch_size=5)
    torch.testing.assert_close(errors, expected[:7])
    assert sizes == [5, 2, 2, 2, 1] and "2 sample(s) at a time" in caplog.text
    assert op.training

    def never(operator, batch, h1=False, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(trainer_module, "sample_errors", never)
    with pytest.raises(torch.OutOfMemoryError):
        evaluate_errors(op, samples[:3], batch_size=4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cuda_autocast_trains_and_resumes(tmp_path, samples, precision):
    def stop(epoch, step):
        if epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # interrupted after the checkpoint of epoch 0
        Trainer(_operator(), tmp_path, epochs=2, batch_size=2, progress=False, device="cuda",
                precision=precision).fit(samples[:4], on_step=stop)
    op = _operator()
    history = Trainer(op, tmp_path, epochs=2, batch_size=2, progress=False, device="cuda",
                      precision=precision).fit(samples[:4], resume=True)
    assert len(history) == 2 and all(torch.isfinite(torch.tensor(row["train"])) for row in history)
    assert next(op.parameters()).device.type == "cuda"
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["trainer"]["precision"] == precision and ("scaler" in state) == (precision == "fp16")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_samples_already_on_the_gpu_train_unpinned(samples):
    # pinning is for host memory; samples moved to the device beforehand skip it
    on_gpu = [d.to("cuda") for d in samples[:4]]
    trainer = Trainer(_operator(), epochs=1, batch_size=2, progress=False, device="cuda")
    assert trainer.pin_memory
    history = trainer.fit(on_gpu, on_gpu[:2])
    assert len(history) == 1 and torch.isfinite(torch.tensor(history[0]["val"]))


@pytest.mark.slow
def test_restore_best_ends_with_the_weights_of_the_best_validation_epoch(tmp_path, samples):
    flipped = [d.clone() for d in samples[6:]]
    for d in flipped:  # targets the training moves away from: an early epoch is the best
        d.y = -d.y

    def fit(out):
        op = _operator()
        trainer = Trainer(op, out, epochs=6, batch_size=2, lr=1e-2, progress=False, restore_best=True)
        return op, [h["val"] for h in trainer.fit(samples[:6], flipped)]

    op, val = fit(tmp_path)
    best = min(range(len(val)), key=val.__getitem__)
    assert best < len(val) - 1
    assert float(evaluate_errors(op, flipped).mean()) == pytest.approx(val[best], rel=1e-6)
    for a, b in zip(op.state_dict().values(), load_checkpoint(tmp_path / "best.pt")["state_dict"].values()):
        assert torch.equal(a, b)
    in_memory, _ = fit(None)  # no folder: the same weights, kept in memory
    for a, b in zip(op.state_dict().values(), in_memory.state_dict().values()):
        assert torch.equal(a, b)


def _weights(op):
    return [t.detach().clone() for t in op.state_dict().values()]


def test_regularizer_enters_the_loss_but_not_the_reported_errors(samples):
    """A penalty with no gradient (a constant) leaves every step and the reported errors as they
    are; a penalty with a gradient changes the steps; the callable sees the prediction [N, C] in
    physical units and the collated batch."""
    def fit(regularizer):
        op = _operator()
        history = Trainer(op, epochs=2, batch_size=2, lr=1e-2, progress=False,
                          regularizer=regularizer).fit(samples[:6])
        return op, history

    plain, plain_history = fit(None)
    seen = []

    def constant(pred, batch):
        seen.append((pred.shape, batch.num_graphs, pred.requires_grad))
        return torch.full((batch.num_graphs,), 5.0)

    same, same_history = fit(constant)
    assert all(torch.equal(a, b) for a, b in zip(_weights(plain), _weights(same)))
    assert [h["train"] for h in same_history] == [h["train"] for h in plain_history]
    nodes = samples[0].pos.shape[0]
    assert seen[0] == (torch.Size([2 * nodes, 1]), 2, True) and len(seen) == 6

    def squared(pred, batch):
        return 10.0 * pred.square().sum() * torch.ones(batch.num_graphs)

    other, _ = fit(squared)
    assert not all(torch.equal(a, b) for a, b in zip(_weights(plain), _weights(other)))


def test_schedule_keywords_shape_the_one_cycle_and_bad_ones_are_refused(samples):
    """The learning rate after each epoch is that of OneCycleLR with the keywords given (stepped
    as often), and differs from PyTorch's default shape; the settings record the schedule."""
    shape = {"div_factor": 1e4, "final_div_factor": 1e4, "pct_start": 0.2}

    def expected(epochs, steps, **keywords):
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=epochs * steps, **keywords)
        out = []
        for _ in range(epochs):
            for _ in range(steps):
                opt.step()
                schedule.step()
            out.append(schedule.get_last_lr()[0])
        return out

    trainer = Trainer(_operator(), epochs=3, batch_size=2, lr=1e-2, progress=False, schedule=shape)
    history = trainer.fit(samples[:6])  # 3 steps per epoch
    got = [h["lr"] for h in history]
    assert got == pytest.approx(expected(3, 3, **shape), rel=1e-12)
    assert got != pytest.approx(expected(3, 3), rel=1e-3)
    assert trainer.settings["schedule"] == shape
    with pytest.raises(ConfigError, match="max_lr"):
        Trainer(_operator(), schedule={"max_lr": 1.0})
    with pytest.raises(ConfigError, match="callable"):
        Trainer(_operator(), regularizer=3.0)
