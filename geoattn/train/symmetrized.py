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

import copy
from collections.abc import Sequence
from types import SimpleNamespace

import torch

from ..errors import SymmetryError
from ..mesh.registry import MeshRegistered, mesh_parts, register_meshes
from ..mesh.symmetry import Isometry
from .ensemble import Ensemble
from .operator import NormalizedOperator
from .resolved import ResolvedQuadrature
from .wrapper import WrappedOperator


class SymmetrizedOperator(WrappedOperator, MeshRegistered):
    """The mean of ``op`` over the images of each sample's mesh under ``isometries``.

    Args:
        op: the operator, ``op(x, pos, weight, batch) -> [N, C_out]`` (a model or a
            :class:`~geoattn.train.NormalizedOperator`). A
            :class:`~geoattn.train.ResolvedQuadrature` recognises its meshes by their
            coordinates, so it must wrap this one, not the other way round:
            :func:`symmetrize` puts the average where it belongs.
        isometries: a group of isometries (such as :func:`~geoattn.mesh.dihedral`); it must be
            closed under composition for the average to be equivariant, which is checked.

    ``forward(x, pos, weight, batch=None)`` runs ``op`` once on a batch of ``|G|`` times the
    samples and returns the mean of the outputs at the nodes. Meshes registered with it
    (:func:`~geoattn.mesh.register_meshes`) are registered with ``op`` with all their images.
    """

    def __init__(self, op: torch.nn.Module, isometries: Sequence[Isometry]):
        super().__init__()
        self.op = op
        self.isometries = list(isometries)
        _check_group(self.isometries)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        k = len(self.isometries)
        if batch is None:
            batch = torch.zeros(len(pos), dtype=torch.long, device=pos.device)
        groups = int(batch.max()) + 1 if len(batch) else 0
        poss = torch.cat([g(pos) for g in self.isometries])
        batches = torch.cat([batch + i * groups for i in range(k)])
        out = self.op(x.repeat(k, 1), poss, weight.repeat(k), batches)  # [k * N, C]
        return out.reshape(k, len(pos), -1).mean(0)  # quadrature-ok: over the group's images, per node


    def register_mesh(self, key: tuple, mesh) -> None:
        pos, cells = mesh_parts(mesh)
        register_meshes(self.op, [SimpleNamespace(pos=g(pos), cells=cells) for g in self.isometries])


def symmetrize(op: torch.nn.Module, isometries: Sequence[Isometry]) -> torch.nn.Module:
    """``op`` averaged over ``isometries``, sharing its parameters: a :class:`SymmetrizedOperator`
    around it, or, when ``op`` is (or is a :class:`~geoattn.train.NormalizedOperator` of) a
    :class:`~geoattn.train.ResolvedQuadrature`, a copy of those wrappers with the average inside
    the refinement, so that the meshes they were given are still recognised (the images of the
    refined meshes need no registering); for an :class:`~geoattn.train.Ensemble`, the ensemble of
    its members averaged so. ``op`` itself is not changed."""
    if isinstance(op, Ensemble):
        return Ensemble([symmetrize(m, isometries) for m in op.members])
    if isinstance(op, ResolvedQuadrature) or (isinstance(op, NormalizedOperator)
                                              and isinstance(op.model, ResolvedQuadrature)):
        attr = "op" if isinstance(op, ResolvedQuadrature) else "model"
        new = copy.copy(op)
        new._modules = dict(op._modules)  # the copy's own submodule table: op keeps its model
        inner = getattr(op, attr)
        setattr(new, attr, SymmetrizedOperator(inner, isometries) if attr == "op" else symmetrize(inner, isometries))
        if attr == "op":  # the meshes refined so far, with their images, for the models that need them
            register_meshes(new.op, new.refined_meshes())
        return new
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
