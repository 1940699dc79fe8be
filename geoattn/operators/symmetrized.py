r"""An operator made exactly equivariant under a finite group of isometries, by averaging.

For a group :math:`G` of isometries that the problem commutes with (:mod:`geoattn.mesh.symmetry`),
the group average of any operator :math:`\mathcal G`,

.. math::
    \bar{\mathcal G}(a)(x_i) = \frac{1}{|G|} \sum_{g \in G} \mathcal G(a \circ g^{-1})(g(x_i)),

commutes with every :math:`g \in G`. On a sample, :math:`a \circ g^{-1}` at the image nodes
:math:`g(x_i)` is the same values, so each term is the operator run on the image mesh (the nodes
moved, values and weights kept) and read at the same node numbers: :class:`SymmetrizedOperator`
runs the operator on the :math:`|G|` images of the batch at once and averages. The average costs
:math:`|G|` evaluations; it removes the part of the error that is not invariant, and it is the
operator that :func:`~geoattn.mesh.augment` training approximates. Trained with augmented samples,
a model averaged this way at evaluation is never worse in mean square than the average of its
images' errors (Jensen).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import SymmetryError
from ..mesh.mesh import Mesh, value_key
from ..mesh.symmetry import Isometry
from .ensemble import Ensemble
from .wrapper import WrappedOperator


class SymmetrizedOperator(WrappedOperator):
    """The mean of ``op`` over the images of each sample's mesh under ``isometries``.

    Args:
        op: the operator, ``op(x, mesh) -> [N, C_out]`` (a model, a
            :class:`~geoattn.operators.NormalizedOperator`, a
            :class:`~geoattn.operators.RefinedOperator`: the wrappers compose in any order).
        isometries: a group of isometries (such as :func:`~geoattn.mesh.dihedral`); it must be
            closed under composition for the average to be equivariant, which is checked.

    ``forward(x, mesh, *, query=None)`` runs ``op`` once on the batch of the ``|G|`` images
    ``mesh.moved(g)`` (:meth:`~geoattn.mesh.Mesh.moved`; the images and their batch are kept in
    the mesh's memo, so structure the operator builds on them is built once) and returns the
    mean of the outputs at the nodes (of ``query``, moved alike, when given).
    """

    def __init__(self, op: torch.nn.Module, isometries: Sequence[Isometry]):
        super().__init__()
        self.op = op
        self.isometries = list(isometries)
        _check_group(self.isometries)

    def images(self, mesh: Mesh) -> Mesh:
        """The batch of the images of ``mesh`` (image ``i`` of every graph, for ``i`` in order),
        kept in the mesh's memo."""
        keys = tuple(value_key(g) for g in self.isometries)
        return mesh.structure(("symmetrized_images", keys), lambda m: Mesh.batch(
            [g_m.moved(g) for g in self.isometries for g_m in m.graphs()]))

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        k = len(self.isometries)
        images = self.images(mesh)
        if query is None:
            out = self.op(x.repeat(k, 1), images)  # [k * N, C]
            n = mesh.num_nodes
        else:
            out = self.op(x.repeat(k, 1), images, query=self.images(query))
            n = query.num_nodes
        return out.reshape(k, n, -1).mean(0)  # quadrature-ok: over the group's images, per node


def symmetrize(op: torch.nn.Module, isometries: Sequence[Isometry]) -> torch.nn.Module:
    """``op`` averaged over ``isometries``, sharing its parameters: a :class:`SymmetrizedOperator`
    around it; for an :class:`~geoattn.operators.Ensemble`, the ensemble of its members averaged
    so. ``op`` itself is not changed."""
    if isinstance(op, Ensemble):
        return Ensemble([symmetrize(m, isometries) for m in op.members])
    return SymmetrizedOperator(op, isometries)


def _check_group(isometries: list[Isometry]) -> None:
    """Closed under composition (same centre convention): ``g h`` is one of them for every pair."""
    if not isometries:
        raise SymmetryError("no isometries given")
    for g in isometries:
        for h in isometries:
            shift = g(h(g.center[None]))[0]
            if not any(torch.allclose(torch.as_tensor(g.matrix @ h.matrix), torch.as_tensor(k.matrix), atol=1e-9)
                       and abs(k(g.center[None])[0] - shift).max() < 1e-9 for k in isometries):
                raise SymmetryError(f"the isometries are not a group: {g!r} after {h!r} is not one of them; "
                                    "the average would not be equivariant")


__all__ = ["SymmetrizedOperator", "symmetrize"]
