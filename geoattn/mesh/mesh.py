r"""The discretisation as a value: one :class:`Mesh` carries a mesh to every operator.

A function on a mesh is ``(x, mesh)``: values ``x [N, C]`` at the nodes of ``mesh``, which holds

- ``pos [N, d]`` and the quadrature weights ``weight [N]`` (:math:`\int_D f \approx \sum_j w_j f_j`);
- ``cells [T, k]`` (optional): node indices of each cell, for operators that need more of the
  mesh than its nodes (exact P1 transforms, refinement);
- for a batch of meshes, the graph index of each node ``batch [N]`` and its :class:`Layout`
  (nodes per graph, offsets, number of graphs), computed once when the batch is made;
- a memo of derived structure (a radius graph, the P1 Fourier weights, patch pairs, the refined
  mesh with its prolongation, images under an isometry), built on first use by
  :meth:`Mesh.structure` (named by plain host values, joined over a batch by one stated rule)
  and kept as long as the mesh, or until :meth:`Mesh.clear_structure`.

Operators never recognise a mesh by its coordinates: the structure of a mesh lives on the mesh
object, so a dataset hands every sample on one mesh the same :class:`Mesh` and its structure is
built once. :meth:`Mesh.batch` assembles a batch from its members and keeps them, so per-graph
structure comes from each member's memo.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import torch

from .validation import check_mesh_tensors

__all__ = ["Layout", "Mesh", "value_key"]


class Layout(NamedTuple):
    """The batch layout of a mesh: ``counts[g]`` nodes in graph ``g``, which start at
    ``offsets[g]``; ``num_graphs = len(counts)``. Plain Python integers, so layers slice and pad
    without reading the device."""

    counts: tuple[int, ...]

    @property
    def num_graphs(self) -> int:
        return len(self.counts)

    @property
    def offsets(self) -> tuple[int, ...]:
        out, total = [], 0
        for c in self.counts:
            out.append(total)
            total += c
        return tuple(out)

    @property
    def num_nodes(self) -> int:
        return sum(self.counts)

    @property
    def max_count(self) -> int:
        return max(self.counts, default=0)

    def slices(self) -> list[slice]:
        """The node range of every graph."""
        return [slice(o, o + c) for o, c in zip(self.offsets, self.counts)]

    @classmethod
    def of(cls, batch: torch.Tensor | None, num_nodes: int) -> Layout:
        """The layout of a sorted batch vector (one host read), or one graph for ``None``."""
        if batch is None:
            return cls((int(num_nodes),))
        if batch.numel() == 0:
            return cls((0,))
        return cls(tuple(torch.bincount(batch).tolist()))


class Mesh:
    """One discretisation: nodes, quadrature weights, optional cells, batch layout and a memo.

    Args:
        pos: node coordinates ``[N, d]``.
        weight: quadrature weights ``[N]``.
        cells: node indices of each cell ``[T, k]`` (optional).
        batch: graph index of each node ``[N]``, sorted (``None``: one graph). Prefer
            :meth:`batch` to assemble a batch from its members.
        check: check the values (default): cells in range and not degenerate, the batch vector
            sorted and non-negative (:func:`~geoattn.mesh.validation.check_mesh_tensors`,
            ``O(N)`` with one host synchronisation). Devices and dtypes are always checked.
            :meth:`batch`, :meth:`to` and :meth:`graphs` skip the values of meshes made from
            checked ones.

    A mesh checks itself once, when it is made; its tensors are its own from then on. An
    in-place change of one of them (``mesh.pos.mul_(2)``, ``mesh.weight[0] = -1``; seen through
    the tensors' version counters) is noticed on the next use: the values are checked again, the
    checks' flags are reset and the memo of derived structure is emptied, so nothing built from
    the old values is reused.

    Attributes:
        layout (Layout): nodes per graph, computed once.
        memo (dict): derived structure, see :meth:`structure`.
        checked (bool): a model's checks of the mesh (weights, batch order, finite coordinates,
            :func:`~geoattn.models.base.check_call`) passed; they are not run again.
        weights_checked (bool): :func:`~geoattn.mesh.validate_weights` passed.
        serial (int): a number given to this object alone (never reused, unlike ``id``), the
            plain value that names a mesh in the key of a structure between two meshes.
        weights_known (bool): ``False`` for a query mesh given by its nodes only (the former
            ``pos_query`` without ``weight_query``): its weights are placeholders, and an operator
            that integrates over the query mesh refuses it.

    Two meshes are the same mesh only if they are the same object: a mesh is a value created
    once per discretisation and passed along, never looked up by its coordinates.
    """

    def __init__(self, pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor | None = None, *,
                 batch: torch.Tensor | None = None, layout: Layout | None = None,
                 members: Sequence[Mesh] | None = None, check: bool = True):
        if not torch.is_tensor(pos) or pos.dim() != 2:
            raise ValueError(f"pos must be a tensor [N, d], got {_shape(pos)}")
        if not torch.is_tensor(weight) or weight.dim() != 1 or weight.shape[0] != pos.shape[0]:
            raise ValueError(f"weight must be a tensor [N] with N = {pos.shape[0]} (one per node), "
                             f"got {_shape(weight)}")
        if cells is not None and (not torch.is_tensor(cells) or cells.dim() != 2):
            raise ValueError(f"cells must be a tensor [T, k] of node indices, got {_shape(cells)}")
        if batch is not None and (not torch.is_tensor(batch) or batch.shape != (pos.shape[0],)):
            raise ValueError(f"batch must be a tensor [N] with N = {pos.shape[0]}, got {_shape(batch)}")
        check_mesh_tensors(pos, weight, cells, batch, values=check)
        self.pos, self.weight, self.cells = pos, weight, cells
        self._batch = batch
        self.layout = layout if layout is not None else Layout.of(batch, pos.shape[0])
        if self.layout.num_nodes != pos.shape[0]:
            raise ValueError(f"the layout counts {self.layout.num_nodes} nodes, pos has {pos.shape[0]}")
        self.members = tuple(members) if members is not None else None
        self.memo: dict[Hashable, Any] = {}
        self.serial = next(_SERIALS)
        self._versions = self._stamp()
        self._checked = False
        self._weights_checked = False
        self.weights_known = True

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_sample(cls, data) -> Mesh:
        """The mesh of a sample with ``pos``, ``weight`` and optionally ``cells`` and ``batch``
        (a :class:`~geoattn.mesh.MeshData` or a PyG batch of them)."""
        cells = getattr(data, "cells", None)
        batch = getattr(data, "batch", None)
        return cls(data.pos, data.weight, cells if torch.is_tensor(cells) else None,
                   batch=batch if torch.is_tensor(batch) else None)

    @classmethod
    def from_meshio(cls, mesh, *, weights: str | None = "lumped", dtype: torch.dtype | None = None,
                    **kwargs) -> Mesh:
        """The mesh of a :class:`meshio.Mesh` (its highest-dimensional cells), with the
        quadrature weights ``weights`` (see :func:`~geoattn.mesh.from_meshio`, which takes the
        same keywords)."""
        from .io import from_meshio

        return cls.from_sample(from_meshio(mesh, weights=weights, dtype=dtype, **kwargs))

    @classmethod
    def batch(cls, meshes: Sequence[Mesh]) -> Mesh:
        """A batch of ``meshes`` (graph ``g`` is ``meshes[g]``): nodes, weights and cells
        concatenated (cell indices shifted), the batch vector and layout made from the members'
        sizes without reading any device, and the members kept for their memos."""
        meshes = list(meshes)
        if not meshes:
            raise ValueError("Mesh.batch needs at least one mesh")
        if len(meshes) == 1 and meshes[0].layout.num_graphs == 1:
            return meshes[0]
        bad = next((m for m in meshes if not isinstance(m, Mesh)), None)
        if bad is not None:
            raise TypeError(f"Mesh.batch takes geoattn.mesh.Mesh objects, got {type(bad).__name__}")
        _same(meshes, "dim", "spatial dimension", "batch meshes of one dimension (a 2-D and a 3-D mesh "
              "are two batches)")
        _same(meshes, "device", "device", "move them to one device first (mesh.to(device))")
        _same(meshes, "dtype", "dtype", "convert them to one dtype first (mesh.to(dtype=...))")
        for m in meshes:
            m.refresh()  # a member changed in place since it was made is checked again
        flat = [m for mesh in meshes for m in mesh.graphs()]
        counts = tuple(m.num_nodes for m in flat)
        pos = torch.cat([m.pos for m in flat])
        weight = torch.cat([m.weight for m in flat])
        cells = None
        if all(m.cells is not None for m in flat) and len({m.cells.shape[1] for m in flat}) == 1:
            offsets = Layout(counts).offsets
            cells = torch.cat([m.cells + o for m, o in zip(flat, offsets)])
        batch = torch.repeat_interleave(torch.arange(len(flat), device=pos.device),
                                        torch.tensor(counts, device=pos.device), output_size=sum(counts))
        return cls(pos, weight, cells, batch=batch, layout=Layout(counts), members=flat, check=False)

    # ---------------------------------------------------------------- in-place changes

    def _stamp(self) -> tuple:
        """The version counters of the mesh's tensors (``None`` for one that keeps none, an
        inference tensor)."""
        def version(t):
            try:
                return None if t is None else t._version
            except RuntimeError:  # inference tensors track no version
                return None

        return tuple(version(t) for t in (self.pos, self.weight, self.cells, self._batch))

    def refresh(self) -> bool:
        """Notice an in-place change of the mesh's tensors since it was checked: check the values
        again, reset the checks' flags and empty the memo. Returns whether anything changed.
        Called on every use of the checks' flags and of the memo (a few attribute reads)."""
        if torch.compiler.is_compiling():
            return False
        stamp = self._stamp()
        if stamp == self._versions:
            return False
        self.memo.clear()
        self._checked = self._weights_checked = False
        self._versions = stamp
        check_mesh_tensors(self.pos, self.weight, self.cells, self._batch)
        return True

    @property
    def checked(self) -> bool:
        self.refresh()
        return self._checked

    @checked.setter
    def checked(self, value: bool) -> None:
        self.refresh()
        self._checked = bool(value)

    @property
    def weights_checked(self) -> bool:
        self.refresh()
        return self._weights_checked

    @weights_checked.setter
    def weights_checked(self, value: bool) -> None:
        self.refresh()
        self._weights_checked = bool(value)

    # ---------------------------------------------------------------- properties

    @property
    def batch_vector(self) -> torch.Tensor | None:
        """Graph index of each node ``[N]``, ``None`` for one graph."""
        return self._batch

    @property
    def num_nodes(self) -> int:
        return self.pos.shape[0]

    @property
    def dim(self) -> int:
        return self.pos.shape[1]

    @property
    def num_graphs(self) -> int:
        return self.layout.num_graphs

    @property
    def device(self) -> torch.device:
        return self.pos.device

    @property
    def dtype(self) -> torch.dtype:
        return self.pos.dtype

    def graphs(self) -> tuple[Mesh, ...]:
        """The member meshes of a batch (each graph as a mesh of its own), or ``(self,)``."""
        if self.num_graphs == 1:
            return (self,)
        if self.members is None:
            def member(s: slice) -> Mesh:
                cells = None
                if self.cells is not None:
                    keep = (self.cells >= s.start).all(1) & (self.cells < s.stop).all(1)
                    cells = self.cells[keep] - s.start
                return Mesh(self.pos[s], self.weight[s], cells, check=False)

            self.members = tuple(member(s) for s in self.layout.slices())
        return self.members

    # ---------------------------------------------------------------- memo

    def structure(self, key: tuple, build: Callable[[Mesh], Any],
                  join: Callable[[Mesh, list], Any] | None = None) -> Any:
        """The structure named ``key`` of this mesh: from the memo, else built and kept there.

        ``key`` names the structure and every setting it depends on, in plain host values
        (``str``, ``int``, ``float``, ``bool``, ``None``, ``torch.dtype``, ``torch.device`` and
        tuples of them; see :func:`value_key`), e.g. ``("radius_graph", 0.1)``; never a tensor,
        a module or an object compared by identity. How it is built:

        - one graph: ``build(self)``;
        - a batch, with ``join``: every member's structure (each from the member's memo, built
          there on first use, so a dataset's meshes build theirs once whatever the batches) joined
          by ``join(self, parts)``, e.g. concatenated with the members' node offsets or
          block-diagonal (:func:`block_diagonal`);
        - a batch, without ``join``: ``build(self)`` on the batch as a whole.

        The memo lives as long as the mesh; :meth:`memo_bytes` measures it and
        :meth:`clear_structure` empties it.
        """
        _check_key(key)
        self.refresh()
        try:
            return self.memo[key]
        except KeyError:
            pass
        if join is not None and self.num_graphs > 1:
            value = join(self, [m.structure(key, build, join) for m in self.graphs()])
        else:
            value = build(self)
        self.memo[key] = value
        return value

    def cached(self, key: tuple, build: Callable[[], Any]) -> Any:
        """Deprecated: ``structure(key, lambda mesh: build())``."""
        import warnings

        warnings.warn("Mesh.cached(key, build) is deprecated and will be removed in the next minor version: "
                      "use Mesh.structure(key, build, join)", DeprecationWarning, stacklevel=2)
        return self.structure(key, lambda _: build())

    def per_graph(self, key, build: Callable[[Mesh], Any]) -> list:
        """Deprecated: ``[m.structure(key, build) for m in self.graphs()]``."""
        import warnings

        warnings.warn("Mesh.per_graph(key, build) is deprecated and will be removed in the next minor version: "
                      "use Mesh.structure(key, build, join)", DeprecationWarning, stacklevel=2)
        return [m.structure(key, build) for m in self.graphs()]

    def memo_bytes(self) -> int:
        """Bytes held by the tensors of the memo (of the members' memos too, for a batch that
        keeps its members), counting each tensor's storage once."""
        seen: set = set()

        def size(value) -> int:
            if torch.is_tensor(value):
                if value.is_sparse:
                    return size(value._indices()) + size(value._values())
                if value.layout != torch.strided:
                    return sum(size(t) for t in (getattr(value, a)() for a in ("crow_indices", "col_indices", "values"))
                               if torch.is_tensor(t))
                storage = value.untyped_storage()
                ptr = (storage.data_ptr(), value.device)
                if ptr in seen:
                    return 0
                seen.add(ptr)
                return storage.nbytes()
            if isinstance(value, Mesh):
                return size(value.pos) + size(value.weight) + size(value.cells) + value.memo_bytes()
            if isinstance(value, dict):
                return sum(size(v) for v in value.values())
            if isinstance(value, (tuple, list)):
                return sum(size(v) for v in value)
            if hasattr(value, "__dict__"):
                return sum(size(v) for v in vars(value).values())
            return 0

        total = sum(size(v) for v in self.memo.values())
        if self.members is not None and self.num_graphs > 1:
            total += sum(m.memo_bytes() for m in self.members)
        return total

    def clear_structure(self) -> None:
        """Forget the derived structure (the memo; the members' too) and the checks' flags: the
        next use builds again. A dataset of many meshes bounds what it keeps by clearing the
        meshes it has not used for a while (e.g. least recently used first)."""
        self.memo.clear()
        self._checked = self._weights_checked = False
        self._versions = self._stamp()
        if self.members is not None and self.num_graphs > 1:
            for m in self.members:
                m.clear_structure()

    # ---------------------------------------------------------------- derived meshes

    def to(self, device=None, dtype: torch.dtype | None = None) -> Mesh:
        """This mesh on ``device`` with floating tensors of ``dtype``; the result is kept in the
        memo, so moving the same mesh again returns the same object (with its own memo)."""
        device = self.device if device is None else torch.device(device)
        dtype = self.dtype if dtype is None else dtype
        if device == self.device and dtype == self.dtype:
            return self

        def move() -> Mesh:
            members = None if self.members is None else [m.to(device, dtype) for m in self.members]
            return Mesh(self.pos.to(device, dtype), self.weight.to(device, dtype),
                        None if self.cells is None else self.cells.to(device),
                        batch=None if self._batch is None else self._batch.to(device),
                        layout=self.layout, members=members, check=False)

        return self.structure(("to", device, dtype), lambda _: move())

    def moved(self, isometry) -> Mesh:
        """The image of this mesh under ``isometry`` (a callable on ``pos [N, d]``, e.g. a
        :class:`~geoattn.mesh.Isometry`): the same weights, cells and layout, kept in the memo."""
        def move() -> Mesh:
            members = None if self.members is None else [m.moved(isometry) for m in self.members]
            return Mesh(isometry(self.pos), self.weight, self.cells, batch=self._batch,
                        layout=self.layout, members=members, check=False)

        return self.structure(("moved", value_key(isometry)), lambda _: move())

    def refined(self, size: float) -> tuple[Mesh, torch.Tensor]:
        """This triangle (2-D) or tetrahedral (3-D) mesh refined until no edge is longer than
        ``size`` (:func:`~geoattn.mesh.refinement.refine_to`; its original nodes come first) and the
        prolongation ``[N_fine, N]`` (sparse) that interpolates nodal values onto it linearly;
        kept in the memo. A batch is refined member by member."""
        def join(batch: Mesh, parts: list) -> tuple[Mesh, torch.Tensor]:
            return Mesh.batch([p[0] for p in parts]), block_diagonal([p[1] for p in parts])

        return self.structure(("refined", float(size)), lambda m: _refine_one(m, size), join)

    def __repr__(self) -> str:
        cells = "" if self.cells is None else f", cells={tuple(self.cells.shape)}"
        graphs = "" if self.num_graphs == 1 else f", graphs={self.num_graphs}"
        return f"Mesh(nodes={self.num_nodes}, dim={self.dim}{cells}{graphs})"


def block_diagonal(matrices: Sequence[torch.Tensor]) -> torch.Tensor:
    """The sparse block-diagonal matrix of sparse ``matrices`` (one block per graph of a batch),
    coalesced."""
    rows, cols, vals, r0, c0 = [], [], [], 0, 0
    for m in matrices:
        m = m.coalesce()
        rows.append(m.indices()[0] + r0)
        cols.append(m.indices()[1] + c0)
        vals.append(m.values())
        r0, c0 = r0 + m.shape[0], c0 + m.shape[1]
    return torch.sparse_coo_tensor(torch.stack([torch.cat(rows), torch.cat(cols)]), torch.cat(vals), (r0, c0),
                                   check_invariants=True).coalesce()


_SERIALS = itertools.count()
_PLAIN = (str, int, float, bool, type(None), torch.dtype, torch.device)


def _check_key(key) -> None:
    if isinstance(key, tuple):
        for k in key:
            _check_key(k)
    elif not isinstance(key, _PLAIN):
        raise TypeError(f"a structure key holds plain host values (str, int, float, bool, None, dtype, device "
                        f"and tuples), got {type(key).__name__}: name the structure by the values it "
                        "depends on (value_key)")


def value_key(obj) -> Hashable:
    """A key naming ``obj`` by its value, in plain host values: ``obj`` itself if it is one (or a
    tuple of them), else its type's name and its attributes' values (arrays as tuples of floats;
    a ``name`` attribute, a label for messages, left out), e.g. an
    :class:`~geoattn.mesh.Isometry` by its matrix and centre, so that equal isometries share one
    image of a mesh."""
    import numpy as np

    def value(v):
        if isinstance(v, tuple):
            return tuple(value(u) for u in v)
        if isinstance(v, _PLAIN):
            return v
        if isinstance(v, (np.ndarray, list, np.generic)) or torch.is_tensor(v):
            return tuple(np.asarray(v.cpu() if torch.is_tensor(v) else v, dtype=np.float64).ravel().tolist())
        return (type(v).__name__, *(value(u) for k, u in vars(v).items() if k != "name"))

    return value(obj)


def _refine_one(mesh: Mesh, size: float) -> tuple[Mesh, torch.Tensor]:
    import meshio
    import numpy as np

    from .io import from_meshio
    from .refinement import refine_to, simplex_type

    if mesh.cells is None:
        raise ValueError("Mesh.refined needs the mesh's cells; build the Mesh with them "
                         "(Mesh.from_meshio, Mesh.from_sample of a sample with cells, or "
                         "Mesh(pos, weight, cells))")
    cell_type = simplex_type(mesh.dim, mesh.cells, "Mesh.refined")
    # the coordinates as the mesh carries them: a mesh file and its samples in float32 then give
    # the same refinement (ties between edge lengths break alike)
    points = mesh.pos.detach().cpu().double().numpy()
    fine, prolong = refine_to(meshio.Mesh(points, [(cell_type, mesh.cells.cpu().numpy())]), size)
    data = from_meshio(fine, dtype=mesh.dtype)
    coo = prolong.tocoo()
    matrix = torch.sparse_coo_tensor(torch.as_tensor(np.stack([coo.row, coo.col])), coo.data, coo.shape,
                                     dtype=mesh.dtype, check_invariants=True).coalesce().to(mesh.device)
    return Mesh(data.pos.to(mesh.device), data.weight.to(mesh.device), data.cells.to(mesh.device)), matrix


def _same(meshes: Sequence[Mesh], attr: str, what: str, fix: str) -> None:
    """Refuse meshes that differ in ``attr`` (a typed error naming the first two values)."""
    from ..errors import DeviceError, DimensionError, DTypeError

    values = [getattr(m, attr) for m in meshes]
    if len(set(values)) > 1:
        i = next(i for i, v in enumerate(values) if v != values[0])
        error = {"dim": DimensionError, "device": DeviceError, "dtype": DTypeError}[attr]
        raise error(f"Mesh.batch got meshes of different {what}: mesh 0 is {values[0]}, mesh {i} is "
                    f"{values[i]}; {fix}")


def _shape(t) -> str:
    return f"shape {tuple(t.shape)}" if torch.is_tensor(t) else type(t).__name__

