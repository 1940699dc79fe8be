"""Batches for the training loop: collation of meshes and point clouds, and a
:class:`~torch.utils.data.DataLoader` whose batches follow the trainer's seeded epoch order.

The samples may be a list in memory or a lazily read dataset (a
:class:`~geoattn.data.DarcyDataset`, or a slice of one): with ``workers > 0`` the samples of the
next batches are read and collated in worker processes while the model trains on the current
one, and with ``pin_memory`` the batches come in page-locked memory, so that the copy to a GPU
overlaps the computation. Which samples form which batch never depends on the workers: the batch
order is drawn in the main process from the seed and the epoch (:class:`EpochBatches`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch.utils.data import DataLoader
from torch_geometric.data import Batch

from ..errors import FieldLengthError


def collate(samples: Sequence, h1: bool = False) -> Batch:
    """One PyG batch of ``samples``. Point clouds and meshes batch together: attributes that only
    some samples have (the cells and mesh data of the meshes) are left out, as no quadrature here
    needs them; the H1 loss needs the cells, so with ``h1`` a sample without cells is a
    :class:`~geoattn.errors.FieldLengthError`."""
    samples = list(samples)
    keys = [set(d.keys()) for d in samples]
    if h1 and not all("cells" in k for k in keys):
        first = next(i for i, k in enumerate(keys) if "cells" not in k)
        raise FieldLengthError(f"sample {first} has no cells; the H1 loss needs mesh cells")
    partial = set().union(*keys) - set.intersection(*keys) if keys else set()
    return Batch.from_data_list(samples, exclude_keys=sorted(partial))


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


def batch_loader(samples: Sequence, batches: EpochBatches, h1: bool = False, workers: int = 0,
                 pin_memory: bool = False) -> DataLoader:
    """A :class:`~torch.utils.data.DataLoader` over ``samples`` giving the collated batches of
    ``batches`` (:func:`collate`), read by ``workers`` processes (``0``: in this process; kept
    alive between epochs otherwise), pinned when ``pin_memory``."""
    # A private generator: the loader's worker seeds must not draw from the global RNG, whose
    # state the trainer seeds per epoch for the dropout draws (the same for any ``workers``).
    return DataLoader(samples, batch_sampler=batches, collate_fn=functools.partial(collate, h1=h1),
                      num_workers=workers, pin_memory=pin_memory, persistent_workers=workers > 0,
                      generator=torch.Generator().manual_seed(batches.seed))


__all__ = ["EpochBatches", "batch_loader", "collate"]
