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
"""

from __future__ import annotations

from collections.abc import Iterable

import meshio
import numpy as np
import torch

from ..errors import MeshMismatchError
from ..mesh.cache import fingerprint
from ..mesh.io import from_meshio
from ..mesh.refinement import longest_edges, refine_to


def training_size(mesh: meshio.Mesh) -> float:
    """The longest edge of a triangle mesh: the size :class:`ResolvedQuadrature` refines others to."""
    return float(longest_edges(mesh.points[:, :2], mesh.cells[-1].data).max())


def _key(pos: torch.Tensor) -> tuple:
    return fingerprint(pos.detach().to("cpu", torch.float64))


class ResolvedQuadrature(torch.nn.Module):
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

    Raises:
        MeshMismatchError: a sample on a mesh that was not registered.
    """

    def __init__(self, op: torch.nn.Module, meshes: Iterable[meshio.Mesh], size: float,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.op = op
        self.size = float(size)
        self.structures: dict[tuple, tuple] = {}
        for mesh in meshes:
            refined, prolong = refine_to(mesh, self.size)
            fine = from_meshio(refined, dtype=dtype)
            pos = torch.as_tensor(np.asarray(mesh.points[:, :fine.pos.shape[1]]), dtype=dtype)
            coo = prolong.tocoo()
            matrix = torch.sparse_coo_tensor(np.stack([coo.row, coo.col]), coo.data, coo.shape, dtype=dtype,
                                             check_invariants=True).coalesce()
            self.structures[_key(pos)] = (matrix, fine.pos, fine.weight)

    def _structure(self, pos: torch.Tensor) -> tuple:
        try:
            return self.structures[_key(pos)]
        except KeyError:
            raise MeshMismatchError(f"a sample on a mesh of {len(pos)} nodes that was not given to "
                                    "ResolvedQuadrature; register every mesh it will evaluate") from None

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        counts = [len(pos)] if batch is None else torch.bincount(batch).tolist()
        xs, poss, weights, batches, sizes = [], [], [], [], []
        for g, (gx, gpos) in enumerate(zip(x.split(counts), pos.split(counts))):
            matrix, fine_pos, fine_weight = self._structure(gpos)
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
