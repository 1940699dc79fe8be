r"""An operator run on one fixed mesh, its latent mesh: inputs carried there, outputs carried back.

A model trained on one mesh computes its features at that mesh's nodes: pointwise nonlinear
layers, and integrals and interpolations of the nonlinear features between nodes. Run on another
mesh of the same domain, the same input function gives other nodal features, and a model that
learned its training mesh's discretisation moves its error although every integral it takes is
exact (``benchmarks/vit_transfer.py`` measures this for ViT-NO). FNO run through a fixed grid
does not move, because it always computes on its grid.

:class:`LatentMeshOperator` gives any operator the same property: every input is carried from
its mesh to the latent mesh (usually the training mesh) by piecewise-linear interpolation
(:func:`~geoattn.mesh.interpolation.linear_interpolation`), the operator runs there, and its
output is carried back to the mesh's nodes the same way:

.. math::
    \mathcal G_{\text{latent}}(a)(x_i) = \big(I_{X}\, \mathcal G(I_{Z}\, a)\big)(x_i),

with :math:`I_Z` the interpolation at the latent nodes :math:`Z` and :math:`I_X` at the mesh's
nodes :math:`X`. On the latent mesh itself both interpolations are the identity (up to rounding),
so training through the wrapper is training the operator. The price: detail a finer mesh
resolves beyond the latent mesh is not used, exactly as for FNO's grid. The stencils are kept in
each mesh's memo, so they are built once per mesh.
"""

from __future__ import annotations

import itertools

import meshio
import torch

from ..mesh.interpolation import linear_interpolation
from ..mesh.mesh import Mesh, block_diagonal
from .wrapper import WrappedOperator, fit_model_mesh

__all__ = ["LatentMeshOperator"]

#: One token per latent mesh a wrapper builds (after every move): the memo keys of the meshes it runs on.
_TOKENS = itertools.count()


def _stencil_matrix(source: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """The sparse ``[M, N]`` matrix of piecewise-linear interpolation from nodes ``source [N, d]``
    at ``points [M, d]`` (float64)."""
    stencil = linear_interpolation(source.detach().double(), points.detach().double())
    m, k = stencil.index.shape
    rows = torch.arange(m, device=stencil.index.device).repeat_interleave(k)
    return torch.sparse_coo_tensor(torch.stack([rows, stencil.index.reshape(-1)]), stencil.coeff.reshape(-1),
                                   (m, len(source)), check_invariants=True).coalesce()


class LatentMeshOperator(WrappedOperator):
    """``op`` run on the fixed mesh ``latent``, each input and output carried by linear
    interpolation (see the module docstring).

    Args:
        op: the operator, ``op(x, mesh) -> [N, C_out]`` (a model, a
            :class:`~geoattn.operators.NormalizedOperator`, another wrapper).
        latent: the mesh the operator runs on, one graph: a :class:`~geoattn.mesh.Mesh` or a
            ``meshio.Mesh`` (lumped weights), usually the training mesh. It should cover the
            domains of the meshes it is given: a node outside it takes the value of the
            nearest latent node.

    ``forward(x, mesh, *, query=None)``: ``x [N, C_in]`` on ``mesh`` (any batch of meshes)
    gives ``[N, C_out]`` at the nodes of ``mesh``, or with ``query`` (the same number of graphs)
    at the nodes of ``query``. The mesh's weights are not used: the latent mesh's are.
    :meth:`fit_mesh` fits the wrapped model's mesh-dependent state (a patched model's partition)
    on the latent mesh. A checkpoint of a :class:`~geoattn.operators.NormalizedOperator` around
    it stores the latent mesh (:func:`~geoattn.train.operator_payload`).
    """

    def __init__(self, op: torch.nn.Module, latent):
        super().__init__()
        if isinstance(latent, meshio.Mesh):
            latent = Mesh.from_meshio(latent)
        if not isinstance(latent, Mesh):
            raise TypeError(f"latent must be a geoattn Mesh or a meshio.Mesh, got {type(latent).__name__}")
        if latent.num_graphs != 1:
            raise ValueError(f"the latent mesh must be one graph, got a batch of {latent.num_graphs}")
        if latent.num_nodes <= latent.dim:
            raise ValueError(f"the latent mesh needs more than {latent.dim} nodes to interpolate from, "
                             f"got {latent.num_nodes}")
        self.op = op
        # buffers, so that the latent mesh moves with the module (not stored: a checkpoint
        # keeps it in its own entry, see operator_payload)
        self.register_buffer("latent_pos", latent.pos.detach().clone(), persistent=False)
        self.register_buffer("latent_weight", latent.weight.detach().clone(), persistent=False)
        cells = latent.cells if latent.cells is not None else torch.zeros(0, latent.dim + 1, dtype=torch.long)
        self.register_buffer("latent_cells", cells.detach().clone(), persistent=False)
        self._latent: tuple | None = None

    @property
    def latent(self) -> Mesh:
        """The latent mesh (rebuilt, with a new memo, after the module moves: :meth:`_apply`)."""
        if self._latent is None:
            cells = self.latent_cells if len(self.latent_cells) else None
            self._latent = (Mesh(self.latent_pos, self.latent_weight, cells), next(_TOKENS))
        return self._latent[0]

    def _apply(self, fn, *args, **kwargs):
        self._latent = None  # the buffers are replaced: a new latent Mesh on next use
        return super()._apply(fn, *args, **kwargs)

    def carry(self, mesh: Mesh, dtype: torch.dtype) -> tuple[Mesh, torch.Tensor, torch.Tensor]:
        """The latent mesh repeated once per graph of ``mesh``, the interpolation from ``mesh`` to
        it ``[B * N_latent, N]`` and back ``[N, B * N_latent]`` (sparse, in ``dtype``; kept in the
        mesh's memo)."""
        latent = self.latent

        def build():
            graphs = mesh.graphs()
            down = block_diagonal([_stencil_matrix(g.pos, latent.pos) for g in graphs])
            up = block_diagonal([_stencil_matrix(latent.pos, g.pos) for g in graphs])
            b = len(graphs)  # one batch of b latent meshes for all inputs: its structure is built once
            batch = latent if b == 1 else latent.structure(("latent_batch", b), lambda m: Mesh.batch([m] * b))
            return batch, down.to(mesh.device, dtype), up.to(mesh.device, dtype)

        return mesh.structure(("latent_operator", self._latent[1], dtype), lambda _: build())

    def fit_mesh(self, mesh: Mesh) -> None:
        """Fit the wrapped model's mesh-dependent state on the latent mesh (the mesh given is
        not used: the model only ever runs on the latent mesh)."""
        fit_model_mesh(self._model, self.latent)

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        if query is not None and query.num_graphs != mesh.num_graphs:
            raise ValueError(f"the query mesh has {query.num_graphs} graphs, the input mesh {mesh.num_graphs}")
        latent, down, up = self.carry(mesh, x.dtype)
        y = self.op(torch.sparse.mm(down, x), latent)
        return torch.sparse.mm(up if query is None else self.carry(query, y.dtype)[2], y)

    def extra_repr(self) -> str:
        return f"latent={self.latent!r}"

