"""Batches for the training loop: collation of meshes and point clouds, and a
:class:`~torch.utils.data.DataLoader` whose batches follow the trainer's seeded epoch order.

The samples may be a list in memory or a lazily read dataset (a
:class:`~geoattn.data.DarcyDataset`, or a slice of one): with ``workers > 0`` the samples of the
next batches are read and collated in worker processes while the model trains on the current
one, and with ``pin_memory`` the batches come in page-locked memory, so that the copy to a GPU
overlaps the computation. Which samples form which batch never depends on the workers: the batch
order is drawn in the main process from the seed and the epoch (:class:`EpochBatches`).

The operators get every batch's :class:`~geoattn.mesh.Mesh` from :class:`SampleMeshes`, in the
main process: one :class:`~geoattn.mesh.Mesh` per distinct mesh of the samples, shared by every
sample on it and kept across steps and epochs (so structure an operator builds on a mesh is built
once), and the batch of a combination of them (:meth:`~geoattn.mesh.Mesh.batch`) memoised. The
workers send back each batch's sample indices with it (:func:`collate_indexed`), never a mesh.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch.utils.data import DataLoader
from torch_geometric.data import Batch

from ..errors import FieldLengthError
from ..mesh.mesh import Mesh, tensor_identity


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


def collate_indexed(pairs: Sequence, h1: bool = False) -> tuple[torch.Tensor, Batch]:
    """``(indices [B], batch)`` of ``(index, sample)`` pairs (:class:`Indexed`): the batch as
    :func:`collate` makes it, with the indices of its samples, from which the main process takes
    the batch's mesh (:meth:`SampleMeshes.batch`)."""
    pairs = list(pairs)
    return torch.tensor([i for i, _ in pairs], dtype=torch.long), collate([d for _, d in pairs], h1)


class Indexed(torch.utils.data.Dataset):
    """``samples`` whose item ``i`` is ``(i, samples[i])``."""

    def __init__(self, samples: Sequence):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        return i, self.samples[i]


class SampleMeshes:
    """The :class:`~geoattn.mesh.Mesh` of every sample of ``samples``, one per distinct mesh.

    A dataset that knows its meshes answers ``samples.mesh_for(data)`` (the one
    :class:`~geoattn.mesh.Mesh` of the mesh a sample it returned lies on:
    :class:`~geoattn.data.DarcyDataset`, :class:`~geoattn.data.MeshDataset`). Otherwise samples
    share a mesh when they share its tensors (the same ``pos``, ``weight`` and ``cells`` objects,
    as samples cut from one base sample do); a mesh is never recognised by its coordinates, so
    samples that carry copies of a mesh each get a mesh of their own (correct, but their structure
    is built once per sample: let them share the tensors, see :func:`share_mesh`).

    :meth:`batch` is the batch mesh of some samples (:meth:`~geoattn.mesh.Mesh.batch`), the last
    ``batches`` combinations kept, so a repeated combination (always, with one mesh) is the same
    object with its memo.
    """

    def __init__(self, samples: Sequence, batches: int = 64):
        self.samples = samples
        self._of: dict[int, Mesh] = {}
        self._groups: dict[tuple, tuple] = {}  # tensor identities -> (the tensors, kept alive; Mesh)
        self._batches: OrderedDict[tuple, Mesh] = OrderedDict()
        self._size = batches

    def add(self, index: int, data) -> Mesh:
        """The mesh of sample ``index``, read as ``data`` (kept for later)."""
        mesh = self._of.get(index)
        if mesh is None:
            mesh = self._of[index] = self.of_sample(data)
        return mesh

    def of_sample(self, data) -> Mesh:
        """The mesh of ``data``: the dataset's, or one per distinct set of mesh tensors."""
        finder = getattr(self.samples, "mesh_for", None)
        if callable(finder):
            mesh = finder(data)
            if mesh is not None:
                return mesh
        cells = getattr(data, "cells", None)
        cells = cells if torch.is_tensor(cells) else None
        key = (tensor_identity(data.pos), tensor_identity(data.weight), tensor_identity(cells))
        found = self._groups.get(key)
        if found is None:
            found = self._groups[key] = ((data.pos, data.weight, cells), Mesh(data.pos, data.weight, cells))
        return found[1]

    def __getitem__(self, index: int) -> Mesh:
        index = int(index)
        mesh = self._of.get(index)
        return mesh if mesh is not None else self.add(index, self.samples[index])

    def batch(self, indices) -> Mesh:
        """The mesh of the batch of samples ``indices`` (in order)."""
        members = [self[i] for i in (indices.tolist() if torch.is_tensor(indices) else indices)]
        key = tuple(id(m) for m in members)  # the members are kept alive by self._of
        mesh = self._batches.get(key)
        if mesh is None:
            mesh = self._batches[key] = Mesh.batch(members)
            while len(self._batches) > self._size:
                self._batches.popitem(last=False)
        else:
            self._batches.move_to_end(key)
        return mesh


def share_mesh(samples: Sequence) -> list:
    """``samples``, all on one mesh, made to share the first one's ``pos``, ``weight`` and
    ``cells`` tensors (the same values: samples on one mesh carry equal copies), so that
    :class:`SampleMeshes` gives them one :class:`~geoattn.mesh.Mesh`. Changes the samples in
    place and returns them as a list."""
    samples = list(samples)
    if samples:
        first = samples[0]
        for d in samples[1:]:
            for key in ("pos", "weight", "cells"):
                value = getattr(first, key, None)
                if torch.is_tensor(value) and torch.is_tensor(getattr(d, key, None)):
                    setattr(d, key, value)
    return samples


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
    """A :class:`~torch.utils.data.DataLoader` over ``samples`` giving ``(indices, batch)``, the
    collated batches of ``batches`` with their sample indices (:func:`collate_indexed`), read by
    ``workers`` processes (``0``: in this process; kept alive between epochs otherwise), pinned
    when ``pin_memory``."""
    # A private generator: the loader's worker seeds must not draw from the global RNG, whose
    # state the trainer seeds per epoch for the dropout draws (the same for any ``workers``).
    return DataLoader(Indexed(samples), batch_sampler=batches, collate_fn=functools.partial(collate_indexed, h1=h1),
                      num_workers=workers, pin_memory=pin_memory, persistent_workers=workers > 0,
                      generator=torch.Generator().manual_seed(batches.seed))


__all__ = ["EpochBatches", "Indexed", "SampleMeshes", "batch_loader", "collate", "collate_indexed", "share_mesh"]
