"""Batches for the training loop: the samples' fields collated with their mesh numbers, the batch
:class:`~geoattn.mesh.Mesh` taken from the dataset's meshes, and a
:class:`~torch.utils.data.DataLoader` whose batches follow the trainer's seeded epoch order.

The samples are a dataset whose samples name their mesh (:func:`~geoattn.mesh.as_samples`: a
:class:`~geoattn.data.DarcyDataset`, a :class:`~geoattn.data.MeshDataset`, a
:class:`~geoattn.mesh.MeshSamples`). With ``workers > 0`` the fields of the next batches are read
and collated in worker processes while the model trains on the current one, and with
``pin_memory`` they come in page-locked memory; a worker sends back the fields and the mesh
numbers only, never a mesh. In the main process every batch gets its
:class:`~geoattn.mesh.Mesh` from the dataset's :attr:`~geoattn.mesh.MeshSamples.meshes`
(:meth:`~geoattn.mesh.MeshStore.batch`): each mesh made once and moved to the device once, so the
structure an operator builds on it is built once. Which samples form which batch never depends
on the workers: the order is drawn in the main process from the seed and the epoch
(:class:`EpochBatches`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import torch
from torch.utils.data import DataLoader

from ..errors import FieldLengthError
from ..mesh.mesh import Mesh
from ..mesh.samples import MeshStore


@dataclass
class MeshBatch:
    """A batch of samples: ``x [N, C_in]`` and ``y [N, C_out]`` (``None`` if the samples have no
    targets) at the nodes of the batch ``mesh`` (a :class:`~geoattn.mesh.Mesh` of
    ``mesh.num_graphs`` graphs, one per sample), ``params [B, P]`` (``None`` without global
    parameters), the mesh number of each sample ``mesh_ids [B]`` and its index in the dataset
    ``index [B]``. The model and the loss read the same ``mesh``: ``loss(model(x, mesh), y, mesh)``."""

    x: torch.Tensor
    y: torch.Tensor | None
    params: torch.Tensor | None
    mesh_ids: torch.Tensor
    index: torch.Tensor
    mesh: Mesh | None = None

    @property
    def num_graphs(self) -> int:
        return len(self.mesh_ids)

    def to(self, device, non_blocking: bool = False) -> MeshBatch:
        """The fields on ``device`` (the mesh is not moved: take it from the dataset's meshes,
        :meth:`with_mesh`)."""
        def move(t):
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return replace(self, x=move(self.x), y=move(self.y), params=move(self.params))

    def with_mesh(self, meshes: MeshStore, device=None) -> MeshBatch:
        """This batch with its :class:`~geoattn.mesh.Mesh` from ``meshes`` on ``device``."""
        return replace(self, mesh=meshes.batch(self.mesh_ids, device))

    def pin_memory(self) -> MeshBatch:  # called by the DataLoader's pinning thread
        def pin(t):
            return None if t is None else t.pin_memory()

        return replace(self, x=pin(self.x), y=pin(self.y), params=pin(self.params))


def collate(pairs: Sequence) -> MeshBatch:
    """The :class:`MeshBatch` (without its mesh) of ``(index, sample)`` pairs: ``x`` and ``y``
    concatenated over the nodes, ``params`` stacked, the mesh numbers and indices listed."""
    pairs = list(pairs)
    samples = [d for _, d in pairs]
    has_y = [getattr(d, "y", None) is not None for d in samples]
    if any(has_y) and not all(has_y):
        i = has_y.index(False)
        raise FieldLengthError(f"sample {pairs[i][0]} has no y while others of its batch have one")
    params = [getattr(d, "params", None) for d in samples]
    return MeshBatch(
        x=torch.cat([d.x.reshape(d.x.shape[0], -1) for d in samples]),
        y=torch.cat([d.y.reshape(d.y.shape[0], -1) for d in samples]) if all(has_y) else None,
        params=torch.cat([p.reshape(1, -1) for p in params]) if all(torch.is_tensor(p) for p in params) else None,
        mesh_ids=torch.tensor([int(d.mesh_id) for d in samples], dtype=torch.long),
        index=torch.tensor([i for i, _ in pairs], dtype=torch.long))


def batches_of(samples: Sequence, ids: Sequence[int], device=None) -> MeshBatch:
    """The :class:`MeshBatch` of samples ``ids`` of ``samples`` (a dataset whose samples name
    their mesh, :func:`~geoattn.mesh.as_samples`) with its mesh, on ``device``."""
    batch = collate([(i, samples[i]) for i in ids])
    if device is not None:
        batch = batch.to(device)
    return batch.with_mesh(samples.meshes, device)


class Indexed(torch.utils.data.Dataset):
    """``samples`` whose item ``i`` is ``(i, samples[i])``."""

    def __init__(self, samples: Sequence):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        return i, self.samples[i]


class EpochBatches:
    """Batch sampler: the sample indices of every optimiser step of one epoch.

    The epoch's order is ``torch.randperm`` seeded by ``(seed, epoch)``; step ``s`` takes the
    ``batch_size`` indices from ``s * batch_size`` on, and process ``rank`` of ``world`` the
    ``rank::world`` share of them. Set :attr:`epoch` before iterating: the sampler lives in the
    main process, so persistent workers see the new order too.
    """

    def __init__(self, num_samples: int, batch_size: int, seed: int = 0, rank: int = 0, world: int = 1):
        self.num_samples, self.batch_size = num_samples, batch_size
        self.seed, self.rank, self.world = seed, rank, world
        self.epoch = 0

    def __len__(self) -> int:
        return -(-self.num_samples // self.batch_size)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.num_samples, generator=generator)
        for step in range(len(self)):
            ids = order[step * self.batch_size:(step + 1) * self.batch_size][self.rank::self.world]
            yield ids.tolist()


def quiet_worker(worker_id: int) -> None:
    """``worker_init_fn`` of the loader's worker processes: when the command stops (``SIGTERM``
    or Ctrl-C, to the main process or to its whole process group), its workers exit without a
    word, so that the command's one line is all that is printed.

    - ``SIGTERM`` ends a worker as Ctrl-C does (torch's worker loop answers a
      :class:`KeyboardInterrupt` by returning): it exits with status 0 instead of dying by the
      signal, which the main process would report, while it stops, as a ``RuntimeError``
      ("DataLoader worker ... is killed by signal") printed after the line.
    - A worker hands its tensors over through a thread of :mod:`multiprocessing.resource_sharer`,
      which reports a failed hand-over with :func:`sys.excepthook`; when the main process has
      stopped, the failure is a reset or closed connection (``ConnectionError``, ``EOFError``),
      whose traceback is dropped. Every other error is reported as before.
    - A stop that lands in a finaliser (a weak reference's callback, ``__del__``), where Python
      cannot raise it and would print "Exception ignored in ..." and carry on, ends the worker
      there, with status 0, as the worker loop would."""
    import os
    import signal
    import sys

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    previous, previous_unraisable = sys.excepthook, sys.unraisablehook

    def hook(kind, value, traceback):
        if not issubclass(kind, (ConnectionError, EOFError)):
            previous(kind, value, traceback)

    def unraisable(info):
        if isinstance(info.exc_value, KeyboardInterrupt):
            os._exit(0)
        previous_unraisable(info)

    sys.excepthook, sys.unraisablehook = hook, unraisable


class MeshLoader:
    """Iterates the :class:`MeshBatch` es of ``batches`` (an :class:`EpochBatches`) of ``samples``
    on ``device``, each with its mesh from ``samples.meshes``: the fields read and collated by
    ``workers`` processes (``0``: in this process; kept alive between epochs otherwise), pinned
    when ``pin_memory``."""

    def __init__(self, samples: Sequence, batches: EpochBatches, device=None, workers: int = 0,
                 pin_memory: bool = False):
        self.meshes, self.device, self.pin = samples.meshes, device, pin_memory
        # A private generator: the loader's worker seeds must not draw from the global RNG, whose
        # state the trainer seeds per epoch for the dropout draws (the same for any ``workers``).
        self.loader = DataLoader(Indexed(samples), batch_sampler=batches, collate_fn=collate,
                                 num_workers=workers, pin_memory=pin_memory, persistent_workers=workers > 0,
                                 worker_init_fn=quiet_worker if workers > 0 else None,
                                 generator=torch.Generator().manual_seed(batches.seed))

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[MeshBatch]:
        for batch in self.loader:
            if self.device is not None:
                batch = batch.to(self.device, non_blocking=self.pin)
            yield batch.with_mesh(self.meshes, self.device)


__all__ = ["EpochBatches", "Indexed", "MeshBatch", "MeshLoader", "batches_of", "collate", "quiet_worker"]
