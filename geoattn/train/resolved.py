"""Evaluate a trained operator on meshes coarser than its training mesh without aliasing.

A model trained on one mesh learns features that vary on that mesh's scale. Its integrals are
quadratures over the nodes: attention sums, spectral transforms, slice tokens. On a mesh whose
cells are much larger somewhere, such as the coarse corner of a graded mesh, those quadratures
alias the features, and the output moves although every node's input is exact.

:class:`ResolvedQuadrature` evaluates the model on each mesh refined where it is coarser than the
training mesh (:func:`geoattn.mesh.refinement.refine_to`). The input is carried to the new nodes by
linear interpolation, so no new data is used, and the output is read at the original nodes. The
model then integrates its features as finely as during training. FNO run through a fixed grid
does the same implicitly, with its grid.

Measured (``benchmarks/darcy_compare.py --resolve-quadrature``, docs/benchmarks.md): on the
169-node graded square, ``mesh_fno``'s error falls from 7.2× to 1.55× its training-mesh error,
and TNO's from 5.0× to 1.38×.

The wrapper can also be trained through (``NormalizedOperator(ResolvedQuadrature(model, meshes,
training_size(train) / 2))``, or ``geoattn train --supersample 2``): the model then learns on the
training mesh refined to half its edge, with the input interpolated linearly and the loss read at
the data's nodes, and every mesh is evaluated at that same resolution. Its integrals are then
resolved on every mesh, the training mesh included, which lets a spectral model use more modes
than the data's nodes resolve (``benchmarks/darcy_compare.py --supersample 2``). Its checkpoint
stores the size; the meshes are registered again when it is evaluated
(:func:`register_meshes`, which :func:`~geoattn.eval.cross_mesh_report` and
:func:`~geoattn.eval.predict_meshio` call).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from types import SimpleNamespace

import meshio
import numpy as np
import torch

from ..errors import UnsupportedCellError
from ..mesh.io import from_meshio, to_meshio
from ..mesh.refinement import longest_edges, refine_to
from ..mesh.registry import MeshRegistered, register_meshes
from .wrapper import WrappedOperator


def training_size(mesh: meshio.Mesh) -> float:
    """The longest edge of a triangle mesh: the size :class:`ResolvedQuadrature` refines others to
    (:class:`~geoattn.errors.UnsupportedCellError` for other cells)."""
    if not mesh.cells or mesh.cells[-1].type != "triangle":
        found = mesh.cells[-1].type if mesh.cells else "none"
        raise UnsupportedCellError(f"training_size needs a triangle mesh, got cells {found!r}")
    return float(longest_edges(mesh.points[:, :2], mesh.cells[-1].data).max())


class ResolvedQuadrature(WrappedOperator, MeshRegistered):
    """A trained operator evaluated on meshes refined to a largest edge, read at their own nodes.

    Args:
        op: the operator, ``op(x, pos, weight, batch) -> [N, C_out]`` (a model or a
            :class:`~geoattn.train.NormalizedOperator`).
        meshes: the triangle meshes it will be given (recognised by their node coordinates, in
            the dtype of ``dtype``).
        size: the longest edge allowed, usually :func:`training_size` of the training mesh.
        dtype: the floating dtype of the samples' coordinates and values (default float32).

    ``forward(x, pos, weight, batch=None)`` takes samples on the registered meshes (any batch of
    them) and returns the output at their nodes. The weights passed are not used: the refined
    mesh's own lumped weights are.

    It stands in for the model inside :class:`~geoattn.train.NormalizedOperator` and
    :class:`~geoattn.train.Trainer`: ``in_channels``, ``out_channels``, ``dim`` and
    :meth:`check_inputs` are the model's, and :meth:`fit_mesh` fits the model on the refined
    training mesh. A checkpoint of it holds the model and the size
    (:func:`~geoattn.train.operator_payload`), not the meshes: :func:`~geoattn.train.load_operator`
    rebuilds the wrapper with none, and :meth:`register` adds each mesh before it is evaluated.

    Raises:
        MeshMismatchError: a sample on a mesh that was not registered.
    """

    def __init__(self, op: torch.nn.Module, meshes: Iterable[meshio.Mesh], size: float,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not (math.isfinite(size) and size > 0):
            raise ValueError(f"size must be a finite edge length > 0, got {size!r}")
        self.op = op
        self.size = float(size)
        self.dtype = dtype
        self.structures: dict[tuple, tuple] = {}
        self.register(meshes)

    def register_mesh(self, key: tuple, mesh) -> None:
        """Refine one mesh (a triangle :class:`meshio.Mesh`, or a sample with ``pos`` and
        ``cells``) to the size, keep what evaluating samples on it needs, and register the refined
        mesh with the modules inside the model that need meshes (:func:`register_meshes`)."""
        points = mesh.points if isinstance(mesh, meshio.Mesh) else torch.as_tensor(mesh.pos).detach().cpu()
        pos = torch.as_tensor(np.asarray(points[:, :2]), dtype=self.dtype)
        cells = (mesh if isinstance(mesh, meshio.Mesh) else to_meshio(mesh)).cells
        # refine the coordinates as the samples carry them: a mesh file and its samples in
        # float32 then give the same refinement (ties between edge lengths break alike)
        refined, prolong = refine_to(meshio.Mesh(pos.double().numpy(), cells), self.size)  # triangles only
        fine = from_meshio(refined, dtype=self.dtype)
        coo = prolong.tocoo()
        matrix = torch.sparse_coo_tensor(np.stack([coo.row, coo.col]), coo.data, coo.shape, dtype=self.dtype,
                                         check_invariants=True).coalesce()
        self.structures[key] = (matrix, fine.pos, fine.weight, fine.cells)
        register_meshes(self.op, [fine])

    def refined_meshes(self) -> list:
        """The refined meshes of the meshes registered so far (samples with ``pos`` and ``cells``)."""
        return [SimpleNamespace(pos=pos, cells=cells) for _, pos, _, cells in self.structures.values()]

    def fit_mesh(self, pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor | None = None) -> None:
        """Fit the model's mesh-dependent state (a patched model's partition) on the refined
        version of the registered mesh at ``pos``."""
        if hasattr(self._model, "fit_mesh"):
            _, fine_pos, fine_weight, fine_cells = self._structure(pos)
            self._model.fit_mesh(fine_pos.to(pos.device), fine_weight.to(pos.device), fine_cells)

    def _structure(self, pos: torch.Tensor) -> tuple:
        return self.structures[self.registered_key(pos)]

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        counts = [len(pos)] if batch is None else torch.bincount(batch).tolist()
        xs, poss, weights, batches, sizes = [], [], [], [], []
        for g, (gx, gpos) in enumerate(zip(x.split(counts), pos.split(counts))):
            matrix, fine_pos, fine_weight, _ = self._structure(gpos)
            xs.append(torch.sparse.mm(matrix.to(x.device), gx))
            poss.append(fine_pos.to(x.device))
            weights.append(fine_weight.to(x.device))
            batches.append(torch.full((len(fine_pos),), g, dtype=torch.long, device=x.device))
            sizes.append((len(gpos), len(fine_pos)))
        out = self.op(torch.cat(xs), torch.cat(poss), torch.cat(weights), torch.cat(batches))
        parts, start = [], 0
        for n, fine_n in sizes:
            parts.append(out[start:start + n])  # the original nodes come first in a refined mesh
            start += fine_n
        return torch.cat(parts)
