"""A training-time budget (``Trainer(seconds=)``): training stops at the first optimiser step that
spends it, and the one-cycle schedule follows the elapsed share of the budget. The trainer's clock
is a fake one that advances only in the training steps (by ``dt`` per step, in ``on_step``)."""

import csv
import importlib
import math

import pytest
import torch

from geoattn.errors import ConfigError
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, load_checkpoint, load_ensemble, train_ensemble
from geoattn.train.checkpoint import save_checkpoint

trainer_module = importlib.import_module("geoattn.train.trainer")

LR = 1e-2
STEPS = 3  # per epoch: 6 training samples, batch_size 2


def _operator(seed=0):
    torch.manual_seed(seed)
    return NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))


class FakeClock:
    """``time`` of the trainer module: ``perf_counter`` reads ``now``, which the tests advance."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(trainer_module, "time", fake)
    return fake


def _train(samples, clock, seconds, *, dt=1.0, epochs=10, out=None, val=None, resume=False, stop_at=None, op=None):
    """Train with the budget, each step taking ``dt`` on the fake clock; the history and the
    ``(epoch, step)`` of every optimiser step taken."""
    taken = []

    def tick(epoch, step):
        if (epoch, step) == stop_at:
            raise KeyboardInterrupt  # the run is killed here
        clock.now += dt
        taken.append((epoch, step))

    trainer = Trainer(op or _operator(), out, epochs=epochs, batch_size=2, lr=LR, progress=False, seconds=seconds)
    history = trainer.fit(samples[:6], val, resume=resume, on_step=tick)
    return history, taken


@pytest.mark.parametrize("seconds, dt", [(7.0, 1.0), (7.5, 1.0), (2.0, 0.25), (0.1, 1.0)])
def test_budget_stops_at_the_first_step_that_spends_it(samples, clock, seconds, dt):
    history, taken = _train(samples, clock, seconds, dt=dt)
    n = math.ceil(seconds / dt)  # the steps that start before the budget is spent
    assert len(taken) == n
    assert taken == [(k // STEPS, k % STEPS) for k in range(n)]
    assert len(history) == math.ceil(n / STEPS)  # the last, partial epoch has its row
    assert [row["epoch"] for row in history] == list(range(len(history)))
    assert history[-1]["seconds"] == pytest.approx((n - STEPS * (len(history) - 1)) * dt)
    assert [row["train_seconds"] for row in history] == pytest.approx(
        [min(STEPS * (e + 1), n) * dt for e in range(len(history))])
    assert all(math.isfinite(row["train"]) for row in history)


def test_epochs_cap_a_large_budget(samples, clock):
    history, taken = _train(samples, clock, 1000.0, epochs=2)
    assert len(taken) == 2 * STEPS and len(history) == 2
    assert history[-1]["train_seconds"] == pytest.approx(2 * STEPS)


def _one_cycle(share):
    """OneCycleLR's learning rate (default pct_start=0.3, div_factor=25, final_div_factor=1e4,
    cosine annealing) at ``share`` of a schedule of BUDGET_STEPS positions."""
    total = trainer_module.BUDGET_STEPS
    initial, final, peak = LR / 25, LR / 25 / 1e4, 0.3 * total - 1
    position = min(max(share * total - 1, 0.0), total - 1.0)
    if position <= peak:
        return initial + (LR - initial) * (1 - math.cos(math.pi * position / peak)) / 2
    return final + (LR - final) * (1 + math.cos(math.pi * (position - peak) / (total - 1 - peak))) / 2


@pytest.mark.parametrize("seconds, dt", [(10.0, 1.0), (2.5, 0.25), (100.0, 10.0)])
def test_learning_rate_follows_the_share_of_the_budget(samples, clock, seconds, dt):
    """The same learning rates at the same shares of the budget, whatever a step takes."""
    history, taken = _train(samples, clock, seconds, dt=dt)
    assert len(taken) == 10 and len(history) == 4
    shares = [row["train_seconds"] / seconds for row in history]
    assert shares == pytest.approx([0.3, 0.6, 0.9, 1.0])
    lrs = [row["lr"] for row in history]  # set after the epoch's last step: of its share
    assert lrs[0] == pytest.approx(LR, rel=1e-6)  # the peak at 30 % of the budget
    assert lrs[-1] == pytest.approx(LR / (25 * 1e4), rel=1e-6)  # annealed to the end
    assert lrs == pytest.approx([_one_cycle(s) for s in shares], rel=1e-9)


def test_learning_rates_of_every_step(samples, clock, monkeypatch):
    """Each step's learning rate (the optimiser's, read as it steps) is the schedule's at the
    share of the budget spent before it."""
    lrs = []
    step = torch.optim.AdamW.step

    def record(self, *args, **kwargs):
        lrs.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", record)
    _, taken = _train(samples, clock, 10.0, dt=1.0)
    assert len(lrs) == len(taken) == 10
    assert lrs[0] == pytest.approx(LR / 25)  # the schedule's start
    assert lrs[1:] == pytest.approx([_one_cycle(k / 10) for k in range(1, 10)], rel=1e-9)
    assert lrs[3] == pytest.approx(LR, rel=1e-6)


def test_validation_checkpoints_and_checks_are_not_training_time(tmp_path, samples, clock, monkeypatch):
    reference, taken = _train(samples, clock, 7.0)

    def slow(function):
        def wrapped(*args, **kwargs):
            clock.now += 100.0
            return function(*args, **kwargs)
        return wrapped

    for name in ("evaluate_errors", "save_checkpoint", "validate_samples"):
        monkeypatch.setattr(trainer_module, name, slow(getattr(trainer_module, name)))
    op = _operator()
    op.y_normalizer.fit = slow(op.y_normalizer.fit)
    history, slow_taken = _train(samples, clock, 7.0, out=tmp_path, val=samples[6:], op=op)
    assert slow_taken == taken
    assert [r["train_seconds"] for r in history] == [r["train_seconds"] for r in reference] == [3.0, 6.0, 7.0]
    assert [r["seconds"] for r in history] == [3.0, 3.0, 1.0]
    assert all(math.isfinite(r["val"]) for r in history)


@pytest.mark.parametrize("seconds", [0, 0.0, -1, float("nan"), float("inf"), -float("inf"), "10", True])
def test_bad_budgets_are_refused_before_anything_is_trained(tmp_path, seconds):
    op = _operator()
    before = [t.clone() for t in op.state_dict().values()]
    with pytest.raises(ConfigError, match=f"seconds .*got {repr(seconds)}$"):
        Trainer(op, tmp_path / "run", epochs=2, progress=False, seconds=seconds)
    assert not (tmp_path / "run").exists()
    assert all(torch.equal(a, b) for a, b in zip(before, op.state_dict().values()))


def test_budget_is_a_setting_stored_in_the_checkpoints(tmp_path, samples, clock):
    assert Trainer(_operator(), seconds=None).settings["seconds"] is None
    assert Trainer(_operator(), seconds=3).settings["seconds"] == 3.0
    _train(samples, clock, 4, out=tmp_path)
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["trainer"]["seconds"] == 4.0 and state["train_seconds"] == 4.0 and state["epoch"] == 1
    # the stored schedule loads into a new one and gives the learning rate the run ended with
    optimizer = torch.optim.AdamW(_operator().parameters(), lr=LR)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=trainer_module.BUDGET_STEPS)
    schedule.load_state_dict(state["scheduler"])
    assert schedule.get_last_lr()[0] == pytest.approx(state["history"][-1]["lr"])
    # a budget run resumed without its budget would follow another schedule
    with pytest.raises(ConfigError, match="time budget of 4 s"):
        Trainer(_operator(), tmp_path, epochs=10, progress=False).fit(samples[:6], resume=True)


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_resume_restores_the_training_time(tmp_path, samples, clock):
    with pytest.raises(KeyboardInterrupt):  # killed in its third epoch, after two checkpoints
        _train(samples, clock, 10.0, out=tmp_path, stop_at=(2, 1))
    assert load_checkpoint(tmp_path / "last.pt")["train_seconds"] == 6.0
    history, taken = _train(samples, clock, 10.0, out=tmp_path, resume=True)
    assert taken == [(2, 0), (2, 1), (2, 2), (3, 0)]  # the 4 s left of the budget
    assert [r["train_seconds"] for r in history] == [3.0, 6.0, 9.0, 10.0]
    assert history[-1]["lr"] == pytest.approx(LR / (25 * 1e4), rel=1e-6)
    assert [float(r["train_seconds"]) for r in _rows(tmp_path / "metrics.csv")] == [3.0, 6.0, 9.0, 10.0]
    # resumed once more: the budget is spent, nothing is trained
    again, taken = _train(samples, clock, 10.0, out=tmp_path, resume=True)
    assert taken == [] and len(again) == 4


def test_a_checkpoint_without_the_training_time_resumes_from_zero(tmp_path, samples, clock):
    _train(samples, clock, 100.0, epochs=2, out=tmp_path)
    state = load_checkpoint(tmp_path / "last.pt")
    del state["train_seconds"]  # as written before it was kept
    for row in state["history"]:
        del row["train_seconds"]
    save_checkpoint(tmp_path / "last.pt", state)
    history, taken = _train(samples, clock, 4.0, epochs=4, out=tmp_path, resume=True)
    assert taken == [(2, 0), (2, 1), (2, 2), (3, 0)]
    assert [r.get("train_seconds") for r in history] == [None, None, 3.0, 4.0]
    rows = _rows(tmp_path / "metrics.csv")  # the old rows leave the new column empty
    assert list(rows[0]) == ["epoch", "train", "val", "lr", "seconds", "train_seconds"]
    assert [r["train_seconds"] for r in rows] == ["", "", "3.0", "4.0"]


def test_metrics_csv_has_the_training_time_without_a_budget(tmp_path, samples, clock):
    history = Trainer(_operator(), tmp_path, epochs=2, batch_size=2, lr=LR, progress=False).fit(
        samples[:6], on_step=lambda epoch, step: setattr(clock, "now", clock.now + 0.5))
    assert [r["train_seconds"] for r in history] == [1.5, 3.0]
    assert [r["train_seconds"] for r in _rows(tmp_path / "metrics.csv")] == ["1.5", "3.0"]
    assert load_checkpoint(tmp_path / "last.pt")["trainer"]["seconds"] is None


def test_ensemble_of_budget_runs_loads_as_finished(tmp_path, samples, clock, monkeypatch):
    """Members stopped by their budget before ``epochs`` are finished runs for load_ensemble."""
    original = Trainer.fit

    def fit(self, train, val=None, resume=False, on_step=None):
        return original(self, train, val, resume, on_step=lambda e, s: setattr(clock, "now", clock.now + 1.0))

    monkeypatch.setattr(Trainer, "fit", fit)
    ensemble = train_ensemble(_operator, samples[:6], members=2, out_dir=tmp_path, epochs=10, batch_size=2,
                              lr=LR, progress=False, seconds=5.0)
    assert [h[-1]["train_seconds"] for h in ensemble.histories] == [5.0, 5.0]  # each member's budget
    assert [len(h) for h in ensemble.histories] == [2, 2]
    assert len(load_ensemble(tmp_path)) == 2
