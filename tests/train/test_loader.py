"""The trainer's data pipeline: seeded batches, worker processes, lazily read dataset files."""

import pytest
import torch

from geoattn.cli.main import main
from geoattn.data import DarcyDataset
from geoattn.errors import ConfigError
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer
from geoattn.mesh import as_samples
from geoattn.train.loader import EpochBatches, MeshLoader


def test_epoch_batches_cover_the_seeded_order_and_split_it_between_processes():
    n, batch_size, seed, epoch = 11, 4, 3, 5
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
    single = EpochBatches(n, batch_size, seed)
    single.epoch = epoch
    steps = list(single)
    assert len(steps) == len(single) == 3 and sum(steps, []) == order
    shares = []
    for rank in range(2):
        sampler = EpochBatches(n, batch_size, seed, rank=rank, world=2)
        sampler.epoch = epoch
        shares.append(list(sampler))
    for s, (a, b) in enumerate(zip(*shares)):  # rank r takes the r::2 share of every step
        assert a == steps[s][0::2] and b == steps[s][1::2]
    single.epoch = epoch + 1
    assert sum(list(single), []) != order  # a new order every epoch


class _Tagged(torch.utils.data.Dataset):
    """Samples that record the worker process that read them."""

    def __init__(self, samples):
        self.samples = samples
        self.meshes = samples.meshes

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        data = self.samples[i].clone()
        data.params = torch.tensor([[-1.0 if info is None else float(info.id)]])
        return data


@pytest.mark.parametrize("workers", [0, 2])
def test_mesh_loader_reads_in_the_worker_processes(samples, workers):
    """Workers read and collate the fields; every batch's mesh is the batch of the dataset's
    meshes, made in this process from the same Mesh objects every epoch."""
    samples = as_samples(samples)
    batches = EpochBatches(len(samples), 3, seed=1)
    loader, readers = MeshLoader(_Tagged(samples), batches, workers=workers), set()
    for epoch in range(2):  # persistent workers follow the epoch set on the sampler
        batches.epoch = epoch
        loaded = list(loader)
        expected = list(batches)
        assert [b.num_graphs for b in loaded] == [len(ids) for ids in expected]
        for batch, ids in zip(loaded, expected):
            assert batch.index.tolist() == ids
            assert torch.equal(batch.x, torch.cat([samples[i].x for i in ids]))
            members = [samples.meshes[samples[i].mesh_id] for i in ids]
            assert all(a is b for a, b in zip(batch.mesh.graphs(), members))
            assert torch.equal(batch.mesh.weight, torch.cat([m.weight for m in members]))
            readers.update(batch.params.reshape(-1).tolist())
    assert readers == ({-1.0} if workers == 0 else {0.0, 1.0})


def _weights(samples, tmp_path, workers, name="tno"):
    torch.manual_seed(0)
    op = NormalizedOperator(build_model(name, in_channels=1, out_channels=1, width=8, depth=1))
    history = Trainer(op, tmp_path / f"w{workers}", epochs=2, batch_size=3, lr=1e-2, progress=False,
                      workers=workers).fit(samples)
    return op.state_dict(), [row["train"] for row in history]


@pytest.mark.slow
def test_worker_processes_give_the_same_weights(tmp_path, samples):
    """Workers only read and collate: weights and losses equal the in-process run bit for bit."""
    (w0, h0), (w2, h2) = _weights(samples, tmp_path, 0), _weights(samples, tmp_path, 2)
    assert h0 == h2
    for key, value in w0.items():
        assert torch.equal(value, w2[key]), key


def test_workers_must_be_a_count(samples):
    op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="workers"):
            Trainer(op, workers=bad)


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "d.h5"
    assert main(["generate", "--mesh", "train=meshes/square_irregular.vtu", "--n", "7", "--family",
                 "lognormal", "--out", str(path), "--no-progress"]) == 0
    return path


def test_a_lazy_dataset_trains_like_the_samples_in_memory(tmp_path, dataset_file):
    """A DarcyDataset slice, read a sample at a time by two workers, trains to the same weights as
    the list of its samples read up front."""
    lazy = DarcyDataset(dataset_file)[:6]
    eager = [lazy[i] for i in range(len(lazy))]
    (w_lazy, h_lazy), (w_eager, h_eager) = _weights(lazy, tmp_path / "lazy", 2), _weights(eager, tmp_path / "eager", 0)
    assert h_lazy == h_eager
    for key, value in w_eager.items():
        assert torch.equal(value, w_lazy[key]), key


@pytest.mark.slow
def test_cli_trains_from_the_file_with_workers(tmp_path, dataset_file):
    runs = {}
    for workers in ("0", "2"):
        out = tmp_path / workers
        assert main(["train", str(dataset_file), "--model", "tno", "--width", "8", "--depth", "1",
                     "--epochs", "2", "--batch-size", "2", "--workers", workers, "--out", str(out),
                     "--no-progress"]) == 0
        runs[workers] = torch.load(out / "last.pt", weights_only=False)["state_dict"]
    for key, value in runs["0"].items():
        assert torch.equal(value, runs["2"][key]), key
