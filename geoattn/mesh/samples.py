r"""Samples that name their mesh: the one road of a mesh from a dataset to the model and the loss.

A dataset holds its meshes once, as :class:`~geoattn.mesh.Mesh` values, in :attr:`meshes` (a
:class:`MeshStore`), and each sample names its mesh by number: ``sample.mesh_id``. The trainer,
:func:`~geoattn.train.evaluate_errors` and the reports batch a few samples' fields and take the
batch's mesh from ``meshes`` (:meth:`MeshStore.batch`), so a structure an operator derives from a
mesh (a radius graph, a multigrid restriction, a refined mesh) is built once per mesh and kept
from one call to the next: a second fit, an evaluation after training, a resume.

Every dataset of geoattn is such a dataset (:class:`~geoattn.data.DarcyDataset`,
:class:`~geoattn.data.MeshDataset`, :func:`~geoattn.data.darcy_samples`); a list of
:class:`~geoattn.mesh.MeshData` becomes one through :func:`as_samples`, the one boundary where a
mesh is recognised: samples that share their mesh's tensors, or whose nodes, weights and cells are
equal, share one :class:`~geoattn.mesh.Mesh`. Keep the :class:`MeshSamples` it returns to keep
the structure its meshes build.
"""

from __future__ import annotations

import copy
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

import torch

from .mesh import Mesh
from .validation import located, validate_sample

__all__ = ["MeshSamples", "MeshStore", "as_samples", "mesh_id_of"]

#: bytes of derived structure (the meshes' memos: device copies, graphs, restrictions, transform
#: weights) a dataset's :class:`MeshStore` keeps before it forgets the least recently used
DEFAULT_MAX_BYTES = 8 * 2**30

log = logging.getLogger(__name__)


class MeshStore(Sequence):
    """The meshes of a dataset, each one :class:`~geoattn.mesh.Mesh` made once: ``store[k]``.

    A mesh's derived structure (its memo, :meth:`~geoattn.mesh.Mesh.structure`) is kept from one
    call to the next, up to a bound: when the structure of the meshes used exceeds ``max_bytes``
    (measured by :meth:`~geoattn.mesh.Mesh.memo_bytes` after each batch), or more than ``keep``
    meshes hold structure, the least recently used mesh's structure is cleared
    (:meth:`~geoattn.mesh.Mesh.clear_structure`; its nodes, weights and cells stay) and built
    again when it comes back, which is logged once as a warning: a dataset of thousands of
    meshes keeps bounded memory, and says when the bound costs time.

    Args:
        meshes: the meshes, or their number when ``load`` makes them.
        load: ``load(k)`` makes mesh ``k`` on first use (a lazily read dataset file).
        max_bytes: bytes of derived structure kept (default :data:`DEFAULT_MAX_BYTES`; ``None``:
            no bound).
        keep: meshes whose structure is kept (default ``None``: no bound but ``max_bytes``).
    """

    def __init__(self, meshes: Sequence[Mesh] | int, load: Callable[[int], Mesh] | None = None, *,
                 max_bytes: int | None = DEFAULT_MAX_BYTES, keep: int | None = None):
        if isinstance(meshes, int):
            if load is None:
                raise TypeError("MeshStore(n) needs load=, the function that makes mesh k")
            self._meshes: list[Mesh | None] = [None] * meshes
        else:
            self._meshes = list(meshes)
            for k, m in enumerate(self._meshes):
                if not isinstance(m, Mesh):
                    raise TypeError(f"mesh {k} is a {type(m).__name__}, not a geoattn.mesh.Mesh")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be at least 1 (or None), got {keep!r}")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be at least 0 (or None), got {max_bytes!r}")
        self._load, self.keep, self.max_bytes = load, keep, max_bytes
        self._used: OrderedDict[int, None] = OrderedDict()  # meshes that may hold structure, oldest first
        self._bytes: dict[int, int] = {}  # their structure's bytes, as last measured
        self._pending: set[int] = set()  # used since the last measurement
        self._warned = False

    def __len__(self) -> int:
        return len(self._meshes)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = int(k)
        if not -len(self) <= k < len(self):
            raise IndexError(f"mesh {k} out of range: the dataset holds {len(self)} meshes")
        k %= len(self)
        mesh = self._meshes[k]
        if mesh is None:
            mesh = self._meshes[k] = self._load(k)
        self._used[k] = None
        self._used.move_to_end(k)
        self._pending.add(k)
        return mesh

    @property
    def structure_bytes(self) -> int:
        """Bytes of derived structure held by the meshes, as last measured."""
        return sum(self._bytes.values())

    def trim(self, protect: Iterable[int] = ()) -> None:
        """Measure the structure of the meshes used since the last call and clear the least
        recently used meshes' structure while the bounds are exceeded (never those of
        ``protect``). :meth:`batch` calls it before each batch."""
        for k in self._pending:
            self._bytes[k] = self._meshes[k].memo_bytes()
        self._pending.clear()
        protect, total = set(protect), self.structure_bytes
        for old in list(self._used):
            over_bytes = self.max_bytes is not None and total > self.max_bytes
            over_count = self.keep is not None and len(self._used) > self.keep
            if not (over_bytes or over_count):
                break
            if old in protect:
                continue
            del self._used[old]
            total -= self._bytes.pop(old, 0)
            self._meshes[old].clear_structure()
            if not self._warned:
                self._warned = True
                bound = f"max_bytes={self.max_bytes}" if over_bytes else f"keep={self.keep}"
                log.warning("the derived structure of this dataset's %d meshes exceeds %s: the least recently "
                            "used meshes' structure is cleared and built again when they come back (slower "
                            "steps); raise the bound if memory allows", len(self), bound)

    def batch(self, ids: Iterable[int], device: torch.device | str | None = None) -> Mesh:
        """The batch :class:`~geoattn.mesh.Mesh` of meshes ``ids`` (one per sample, in order) on
        ``device``: each member moved once (kept in its memo) and the batch assembled there, so
        its structure joins the members' (:meth:`~geoattn.mesh.Mesh.batch`). The store's bounds
        are applied first (:meth:`trim`)."""
        ids = ids.tolist() if torch.is_tensor(ids) else [int(k) for k in ids]
        self.trim(protect=ids)
        members = [self[k] if device is None else self[k].to(device) for k in ids]
        return Mesh.batch(members)

    def __repr__(self) -> str:
        loaded = sum(m is not None for m in self._meshes)
        return (f"MeshStore({len(self)} meshes, {loaded} read, structure {self.structure_bytes} bytes, "
                f"max_bytes={self.max_bytes}, keep={self.keep})")


def mesh_id_of(samples: Sequence, i: int) -> int:
    """The number of sample ``i``'s mesh in ``samples.meshes``, without reading its fields where
    the dataset can tell (``samples.mesh_ids``), else from the sample."""
    ids = getattr(samples, "mesh_ids", None)
    if ids is not None:
        return int(ids[i])
    return int(samples[i].mesh_id)


class MeshSamples(Sequence):
    """Samples in memory with their meshes: ``samples[i]`` is a :class:`~geoattn.mesh.MeshData`
    whose ``mesh_id`` numbers its mesh in :attr:`meshes`.

    Made by :func:`as_samples` (from a list of samples) or by the datasets. A slice, or a list of
    indices, is a :class:`MeshSamples` over the same :attr:`meshes`; ``a + b`` joins two.

    Args:
        samples: the samples, each with ``mesh_id``.
        meshes: the :class:`MeshStore` (or a list of :class:`~geoattn.mesh.Mesh`) they name.
    """

    def __init__(self, samples: Sequence, meshes: MeshStore | Sequence[Mesh]):
        self.meshes = meshes if isinstance(meshes, MeshStore) else MeshStore(meshes)
        self._samples = list(samples)
        for i, d in enumerate(self._samples):
            k = getattr(d, "mesh_id", None)
            if not isinstance(k, int) or not 0 <= k < len(self.meshes):
                raise ValueError(f"sample {i} names mesh {k!r}; expected a mesh number in "
                                 f"0..{len(self.meshes) - 1}")

    @property
    def mesh_ids(self) -> list[int]:
        """The mesh number of every sample."""
        return [d.mesh_id for d in self._samples]

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return MeshSamples(self._samples[i], self.meshes)
        if isinstance(i, (list, tuple)) or (torch.is_tensor(i) and i.dim() == 1):
            return MeshSamples([self._samples[int(j)] for j in i], self.meshes)
        return self._samples[i]

    def __add__(self, other) -> MeshSamples:
        if not isinstance(other, MeshSamples):
            other = as_samples(other)
        if other.meshes is self.meshes:
            return MeshSamples(self._samples + other._samples, self.meshes)
        shift = len(self.meshes)
        moved = [_named(d, d.mesh_id + shift) for d in other._samples]
        return MeshSamples(self._samples + moved, MeshStore([self.meshes[k] for k in range(shift)] +
                                                            [other.meshes[k] for k in range(len(other.meshes))]))

    def __radd__(self, other) -> MeshSamples:
        return as_samples(other) + self

    def __repr__(self) -> str:
        return f"MeshSamples({len(self)} samples on {len(self.meshes)} meshes)"


def _named(data, k: int):
    """A shallow copy of ``data`` naming mesh ``k`` (the sample's tensors shared)."""
    data = copy.copy(data)
    data.mesh_id = k
    return data


def _cells(data) -> torch.Tensor | None:
    cells = getattr(data, "cells", None)
    return cells if torch.is_tensor(cells) else None


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is b
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b))


def _check_measure(mesh: Mesh, where: str) -> None:
    """Warn when a simplex mesh's weights do not sum to its cells' measure: its nodes were moved
    (a PyG ``NormalizeScale`` or ``RandomScale``, say) and its weights were not recomputed."""
    cells = mesh.cells
    if cells is None or cells.shape[1] != mesh.dim + 1 or mesh.num_nodes == 0:
        return
    corners = mesh.pos.detach().double()[cells]
    measure = float(torch.linalg.det(corners[:, 1:] - corners[:, :1]).abs().sum()) / math.factorial(mesh.dim)
    total = float(mesh.weight.detach().double().sum())
    if measure > 0 and abs(total - measure) > 1e-3 * measure:
        log.warning("%s: its weights sum to %.6g but its cells cover %.6g: were its nodes moved (a transform that "
                    "scales or warps pos) without recomputing the weights? Recompute them, e.g. data.weight = "
                    "geoattn.mesh.quadrature_weights(data.pos, data.cells, data.cell_type)", where, total, measure)


def as_samples(samples, *, name: str = "") -> MeshSamples | Sequence:
    """``samples`` as a dataset whose samples name their mesh (``.meshes`` and ``sample.mesh_id``).

    A dataset that already names its meshes (a :class:`MeshSamples`, a
    :class:`~geoattn.data.DarcyDataset` or :class:`~geoattn.data.MeshDataset`, a
    :class:`torch.utils.data.Subset` of one) is returned as it is. A sequence of
    :class:`~geoattn.mesh.MeshData` becomes a :class:`MeshSamples`: samples whose ``pos``,
    ``weight`` and ``cells`` are the same tensors, or equal ones, share one
    :class:`~geoattn.mesh.Mesh` (compared once, here, and never again); the samples are shallow
    copies carrying ``mesh_id`` (their tensors shared, the inputs unchanged).

    Keep the result and pass it to every call (fit, evaluate, report): the structure an
    operator derives from a mesh lives on that :class:`~geoattn.mesh.Mesh`.

    Raises:
        MeshError: a sample whose mesh is not one (weights of another shape, cells that are no
            table of node indices...), the typed error of :func:`~geoattn.mesh.validate_sample`
            prefixed with ``"{name} sample {i}"`` (``name``, e.g. ``"training"``, says which set).
    """
    if getattr(samples, "meshes", None) is not None:
        return samples
    base = getattr(samples, "dataset", None)  # a torch Subset of a dataset with meshes
    if base is not None and getattr(base, "meshes", None) is not None:
        return MeshSamples([samples[i] for i in range(len(samples))], base.meshes)
    meshes: list[Mesh] = []
    by_size: dict[tuple, list[int]] = {}
    out = []
    for i, d in enumerate(samples):
        pos, weight, cells = getattr(d, "pos", None), getattr(d, "weight", None), _cells(d)
        if not torch.is_tensor(pos) or not torch.is_tensor(weight):
            raise TypeError(f"sample {i} has no pos and weight tensors: a sample is a MeshData with "
                            "pos [N, d], weight [N], x [N, C] (and y, cells)")
        # candidates: meshes of the same size and first and last node (then compared whole)
        ends = tuple(pos[[0, -1]].flatten().tolist()) if pos.shape[0] else ()
        key = (tuple(pos.shape), None if cells is None else tuple(cells.shape), ends)
        found = None
        for k in by_size.get(key, ()):
            m = meshes[k]
            if _same(m.pos, pos) and _same(m.weight, weight) and _same(m.cells, cells):
                found = k
                break
        if found is None:
            found = len(meshes)
            try:
                meshes.append(Mesh(pos, weight, cells))
            except ValueError:
                with located(f"{name} sample {i}".strip()):
                    validate_sample(d, check_mesh=False)  # the typed error naming the problem
                raise
            _check_measure(meshes[-1], f"{name} sample {i}".strip())
            by_size.setdefault(key, []).append(found)
        out.append(_named(d, found))
    return MeshSamples(out, meshes)
