"""Evaluate an operator on each mesh refined to a largest edge, read at the mesh's own nodes.

A model trained on one mesh learns features that vary on that mesh's scale. Its integrals are
quadratures over the nodes: attention sums, spectral transforms, slice tokens. On a mesh whose
cells are much larger somewhere, such as the coarse corner of a graded mesh, those quadratures
alias the features, and the output moves although every node's input is exact.

:class:`RefinedOperator` evaluates the operator on ``mesh.refined(size)``
(:meth:`geoattn.mesh.Mesh.refined`: refined where its edges are longer than ``size``, original
nodes first). The input is carried to the new nodes by linear interpolation (the prolongation),
so no new data is used, and the output is read at the original nodes. The model then integrates
its features as finely as during training. FNO run through a fixed grid does the same
implicitly, with its grid. The refinement is part of the :class:`~geoattn.mesh.Mesh` (its memo):
built once per mesh, nothing is registered beforehand.

The wrapper can also be trained through (``NormalizedOperator(RefinedOperator(model,
training_size(train) / 2))``, or ``geoattn train --supersample 2``): the model then learns on the
training mesh refined to half its edge, with the input interpolated linearly and the loss read at
the data's nodes, and every mesh is evaluated at that same resolution. Its checkpoint stores the
size. ``ResolvedQuadrature``, its former name, is deprecated (:mod:`geoattn.compat`).
"""

from __future__ import annotations

import math
import numbers

import meshio
import torch

from ..compat import moved
from ..mesh.mesh import Mesh
from ..mesh.refinement import SIMPLICES, longest_edges, meshio_simplex_type, simplex_type
from .wrapper import WrappedOperator


def training_size(mesh: meshio.Mesh) -> float:
    """The longest edge of a triangle mesh in 2-D or a tetrahedral mesh in 3-D: the size
    :class:`RefinedOperator` refines others to (:class:`~geoattn.errors.UnsupportedCellError` for
    other cells)."""
    if isinstance(mesh, Mesh):
        simplex_type(mesh.dim, mesh.cells, "training_size")
        return float(longest_edges(mesh.pos.detach().cpu().double().numpy(), mesh.cells.cpu().numpy()).max())
    dim = SIMPLICES[meshio_simplex_type(mesh, "training_size")][1]
    return float(longest_edges(mesh.points[:, :dim], mesh.cells[-1].data).max())


class RefinedOperator(WrappedOperator):
    """An operator evaluated on each mesh refined to a largest edge, read at the mesh's nodes.

    Args:
        op: the operator, ``op(x, mesh) -> [N, C_out]`` (a model or a
            :class:`~geoattn.operators.NormalizedOperator`).
        size: the longest edge allowed, usually :func:`training_size` of the training mesh.

    The former signature ``RefinedOperator(op, meshes, size, dtype=...)`` (of
    ``ResolvedQuadrature``) is accepted; the meshes are not needed any more (each
    :class:`~geoattn.mesh.Mesh` refines itself, once) and are ignored.

    ``forward(x, mesh, *, query=None)``: ``x [N, C_in]`` on ``mesh`` (triangles: the mesh needs
    its cells; any batch of meshes) gives the output ``[N, C_out]`` at the nodes of ``mesh``; with
    ``query``, the operator's answer on ``query`` from the refined mesh. The mesh's weights are
    not used: the refined mesh's own lumped weights are.

    It stands in for the model inside :class:`~geoattn.operators.NormalizedOperator` and
    :class:`~geoattn.train.Trainer`: ``in_channels``, ``out_channels``, ``dim`` and
    :meth:`check_inputs` are the model's, and :meth:`fit_mesh` fits the model on the refined
    training mesh. A checkpoint of it holds the model and the size
    (:func:`~geoattn.train.operator_payload`).
    """

    def __init__(self, op: torch.nn.Module, size, *args, dtype: torch.dtype | None = None):
        super().__init__()
        if args:  # the former (op, meshes, size[, dtype]): the meshes are not needed
            if len(args) > 2:
                raise TypeError("RefinedOperator(op, size)")
            size, dtype = args[0], (args[1] if len(args) > 1 else dtype)
        if isinstance(size, bool) or not isinstance(size, numbers.Real) or not (math.isfinite(size) and size > 0):
            raise ValueError(f"size must be a finite edge length > 0, got {size!r}")
        self.op = op
        self.size = float(size)

    def refine(self, mesh: Mesh) -> tuple[Mesh, torch.Tensor, torch.Tensor]:
        """The refined mesh, the prolongation ``[N_fine, N]`` and the rows of the original nodes
        in the refined mesh ``[N]`` (kept in the mesh's memo)."""
        def build():
            fine, prolong = mesh.refined(self.size)
            rows, start = [], 0
            for n, n_fine in zip(mesh.layout.counts, fine.layout.counts):
                rows.append(torch.arange(start, start + n, device=mesh.device))  # original nodes first
                start += n_fine
            return fine, prolong, torch.cat(rows)

        return mesh.structure(("refined_operator", float(self.size)), lambda _: build())

    def fit_mesh(self, mesh: Mesh) -> None:
        """Fit the model's mesh-dependent state (a patched model's partition) on the refined
        training mesh."""
        super().fit_mesh(self.refine(mesh)[0])

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        fine, prolong, rows = self.refine(mesh)
        x_fine = torch.sparse.mm(prolong.to(x.dtype), x) if x.dtype != prolong.dtype else torch.sparse.mm(prolong, x)
        if query is not None:
            return self.op(x_fine, fine, query=query)
        return self.op(x_fine, fine)[rows]


#: the former name of :class:`RefinedOperator`
__getattr__ = moved(__name__, {"ResolvedQuadrature": "geoattn.operators:RefinedOperator"})

__all__ = ["RefinedOperator", "training_size"]
