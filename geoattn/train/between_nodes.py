r"""The between-nodes loss: a model's error at the training nodes and between them, from one call.

A target known at the nodes of a mesh stands for its piecewise-linear interpolant. The nodal loss
(:func:`~geoattn.train.relative_l2` on the training mesh) scores a model's function at the nodes
only. Refining the mesh once (:meth:`~geoattn.mesh.Mesh.refined`: the mesh's nodes first, then the
new ones) gives points between the nodes where the interpolant is known too. One call
``model(x, mesh, query=fine)``, the inputs at the training nodes and the output read at the
refined mesh's nodes, is split into the rows at the training nodes and those at the new nodes
(:func:`split_refined`), and scored by :func:`between_nodes_loss`:

.. math::
    \mathcal L = e_{\text{nodes}} + \lambda\, e_{\text{between}},\qquad
    e_{\text{nodes}} = \sqrt{\frac{\sum_{i \le N} w_i |\hat u_i - u_i|^2}{\sum_{i \le N} w_i |u_i|^2}},\quad
    e_{\text{between}} = \sqrt{\frac{\sum_{i > N} w^f_i |\hat u_i - (Pu)_i|^2}{\sum_{i > N} w^f_i |(Pu)_i|^2}},

per sample, with :math:`w` the training mesh's weights, :math:`w^f` the refined mesh's weights at
its new nodes and :math:`P` the prolongation (the linear interpolation onto the refined mesh). With
:math:`\lambda = 0` it is the nodal loss of the query call's output at the training nodes, which for
a model whose output at a point depends only on that point (the multigrid) is the nodal loss of the
plain call.

:class:`~geoattn.train.Trainer` trains with it when built with ``between_nodes=LAMBDA``
(``geoattn train --between-nodes LAMBDA``): each training mesh is refined to its longest edge / 2
(:func:`refined_for_loss`, kept in the mesh's memo, so once per mesh), the targets are carried by
the prolongation, and the validation scores stay the plain nodal errors. The model's forward must
take ``query=`` (:func:`accepts_query`).
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..errors import ConfigError, UnsupportedCellError
from ..mesh.mesh import Mesh, block_diagonal
from ..operators.refined import training_size
from .loss import relative_l2

#: how much finer than the longest edge of each training mesh its refined mesh is (about one
#: uniform refinement, as :func:`~geoattn.data.refined_samples`)
FACTOR = 2.0


class NodeSplit(NamedTuple):
    """The rows of an output on refined meshes (a batch of them, each holding its coarse mesh's
    nodes first): ``at_train [N]``, those at the coarse meshes' nodes, in the coarse batch's order;
    ``at_other [M]``, those at the new nodes; ``other``, the mesh of the new nodes (a batch, one
    graph per member, the refined meshes' weights there, no cells)."""

    at_train: torch.Tensor
    at_other: torch.Tensor
    other: Mesh


@dataclass(frozen=True)
class RefinedForLoss:
    """A (batch) mesh's refined meshes as the between-nodes loss uses them: ``fine``, the query
    mesh (each member refined, its nodes first), ``prolong`` ``[N_fine, N]`` (sparse), which
    carries nodal values to their piecewise-linear interpolants at the refined nodes, and
    ``split``, the :class:`NodeSplit` of an output on ``fine``."""

    fine: Mesh
    prolong: torch.Tensor
    split: NodeSplit


def _split_one(coarse: Mesh, fine: Mesh, check: bool = True) -> NodeSplit:
    n1, nf = coarse.num_nodes, fine.num_nodes
    if check and (nf <= n1 or not torch.equal(fine.pos[:n1], coarse.pos)):
        raise ValueError("the refined mesh must hold the training mesh's nodes first (Mesh.refined, "
                         "geoattn.data.refined_samples), and new nodes after them")
    device = fine.pos.device
    return NodeSplit(torch.arange(n1, device=device), torch.arange(n1, nf, device=device),
                     Mesh(fine.pos[n1:], fine.weight[n1:]))


def _join_splits(parts: list[NodeSplit], offsets: tuple[int, ...]) -> NodeSplit:
    """The split of a batch of refined meshes from its members' (``offsets``: the members' first
    rows in the batch)."""
    if len(parts) == 1:
        return parts[0]
    return NodeSplit(torch.cat([p.at_train + o for p, o in zip(parts, offsets)]),
                     torch.cat([p.at_other + o for p, o in zip(parts, offsets)]),
                     Mesh.batch([p.other for p in parts]))


def split_refined(mesh: Mesh, fine: Mesh) -> NodeSplit:
    """The :class:`NodeSplit` of an output on ``fine``, the refinement of ``mesh``: for a batch,
    member ``g`` of ``fine`` the refinement of member ``g`` of ``mesh``, holding its nodes first
    (:meth:`~geoattn.mesh.Mesh.refined`, :func:`~geoattn.data.refined_samples`).

    Raises:
        ValueError: the two meshes have different numbers of graphs, or a member of ``fine`` does
            not start with the nodes of its member of ``mesh`` (the same coordinates, in order)
            or has no new node.
    """
    if mesh.num_graphs != fine.num_graphs:
        raise ValueError(f"the refined mesh has {fine.num_graphs} graph(s), the mesh {mesh.num_graphs}; "
                         "give one refined mesh per graph")
    parts = [_split_one(m, f) for m, f in zip(mesh.graphs(), fine.graphs())]
    return _join_splits(parts, fine.layout.offsets)


def between_nodes_loss(pred: torch.Tensor, y_fine: torch.Tensor, mesh: Mesh, split: NodeSplit,
                       lam: float, reduction: str = "mean") -> torch.Tensor:
    r"""The nodal error at the training nodes plus ``lam`` times the error at the new nodes
    (the module's :math:`\mathcal L`), both from one output ``pred`` on the refined meshes.

    Args:
        pred: the output ``[N_fine, C]`` of ``model(x, mesh, query=fine)``.
        y_fine: the targets at the refined meshes' nodes ``[N_fine, C]``: the training targets at
            the training nodes and their interpolants at the new ones (``prolong @ y``, the
            ``y`` of :func:`~geoattn.data.refined_samples`).
        mesh: the training (batch) mesh: the weights of the first term.
        split: :func:`split_refined` of ``mesh`` and ``fine``.
        lam: the weight of the between-nodes term.
        reduction: as in :func:`~geoattn.train.relative_l2` (``"none"``: ``[B]``, per sample).
    """
    nodal, between = _terms(pred, y_fine, mesh, split, reduction)
    return nodal + lam * between


def _terms(pred: torch.Tensor, y_fine: torch.Tensor, mesh: Mesh, split: NodeSplit,
           reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two relative errors of :func:`between_nodes_loss`: at the training nodes, between them."""
    return (relative_l2(pred[split.at_train], y_fine[split.at_train], mesh, reduction=reduction),
            relative_l2(pred[split.at_other], y_fine[split.at_other], split.other, reduction=reduction))


def between_nodes_errors(operator: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, mesh: Mesh, lam: float, *,
                         autocast: torch.dtype | None = None,
                         factor: float = FACTOR) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One training step's forward pass with the between-nodes loss: ``operator(x, mesh,
    query=fine)`` on the refined meshes of :func:`refined_for_loss` (under :func:`torch.autocast`
    in ``autocast``, when given), the targets ``y [N, C]`` carried to them by the prolongation.

    Returns:
        The per-sample nodal errors ``[B]`` (the first term: the relative error at the training
        nodes), the per-sample losses ``[B]`` (:func:`between_nodes_loss` with
        ``reduction="none"``) and the output at the training nodes ``[N, C]``.
    """
    refined = refined_for_loss(mesh, factor)
    with torch.autocast(mesh.device.type, dtype=autocast, enabled=autocast is not None):
        pred = operator(x, mesh, query=refined.fine)
    pred = pred.to(y.dtype)
    y_fine = torch.sparse.mm(refined.prolong, y.to(refined.prolong.dtype)).to(y.dtype)
    nodal, between = _terms(pred, y_fine, mesh, refined.split, "none")
    return nodal, nodal + lam * between, pred[refined.split.at_train]


def refined_for_loss(mesh: Mesh, factor: float = FACTOR) -> RefinedForLoss:
    """Each member of ``mesh`` refined to its own longest edge / ``factor``
    (:func:`~geoattn.operators.training_size`, :meth:`~geoattn.mesh.Mesh.refined`), with the
    prolongation and the split, kept in each member's memo: built once per mesh of a dataset,
    whatever the batches (a batch joins its members')."""
    def one(m: Mesh) -> RefinedForLoss:
        fine, prolong = m.refined(training_size(m) / factor)
        return RefinedForLoss(fine, prolong, _split_one(m, fine, check=False))

    def join(batch: Mesh, parts: list[RefinedForLoss]) -> RefinedForLoss:
        fine = Mesh.batch([p.fine for p in parts])
        return RefinedForLoss(fine, block_diagonal([p.prolong for p in parts]),
                              _join_splits([p.split for p in parts], fine.layout.offsets))

    return mesh.structure(("between_nodes", float(factor)), one, join)


def accepts_query(operator: torch.nn.Module) -> bool:
    """Whether ``operator`` answers on another mesh: its ``forward`` takes ``query``, and so does
    every operator it wraps (a :class:`~geoattn.operators.NormalizedOperator`'s ``model``, a
    wrapper's ``op``)."""
    module = operator
    while module is not None:
        if "query" not in inspect.signature(module.forward).parameters:
            return False
        inner = getattr(module, "model", None)
        inner = inner if isinstance(inner, torch.nn.Module) else getattr(module, "op", None)
        module = inner if isinstance(inner, torch.nn.Module) else None
    return True


def check_lambda(lam, option: str = "between_nodes") -> float | None:
    """``lam`` as a float (``None`` kept): a finite number ``>= 0``; otherwise a
    :class:`~geoattn.errors.ConfigError` naming ``option``."""
    if lam is None:
        return None
    if isinstance(lam, bool) or not isinstance(lam, numbers.Real) or not math.isfinite(lam) or lam < 0:
        raise ConfigError(f"{option} (the weight of the between-nodes term) must be a finite number >= 0 "
                          f"or None, got {lam!r}")
    return float(lam)


def check_model(operator: torch.nn.Module, option: str = "between_nodes") -> None:
    """Refuse (:class:`~geoattn.errors.ConfigError`, naming ``option``) an operator whose model
    cannot be read on another mesh (:func:`accepts_query`)."""
    if not accepts_query(operator):
        inner = getattr(operator, "model", operator)
        name = getattr(inner, "model_name", type(inner).__name__)
        raise ConfigError(f"{option} reads the model's output between the nodes (model(x, mesh, query=fine)), "
                          f"but model {name!r} takes no query mesh; drop {option}, or train a model whose "
                          "forward takes query= (e.g. multigrid)")


def check_meshes(meshes, option: str = "between_nodes", factor: float = FACTOR) -> None:
    """Refuse (:class:`~geoattn.errors.ConfigError`, naming ``option``) training meshes that
    :func:`refined_for_loss` cannot refine: one without cells, or of a cell type that
    :meth:`~geoattn.mesh.Mesh.refined` does not refine (tried on the first mesh of each kind of
    cell, whose refinement is kept for training)."""
    tried: set[tuple[int, int]] = set()
    for k in range(len(meshes)):
        mesh = meshes[k]
        if mesh.cells is None:
            raise ConfigError(f"{option} refines the training meshes, but mesh {k} has no cells; give the "
                              f"samples their cells (triangles, tetrahedra), or drop {option}")
        kind = (mesh.dim, mesh.cells.shape[1])
        if kind in tried:
            continue
        tried.add(kind)
        try:
            refined_for_loss(mesh, factor)
        except (UnsupportedCellError, ValueError) as err:
            raise ConfigError(f"{option} refines the training meshes, but mesh {k} ({mesh.dim}-D cells of "
                              f"{mesh.cells.shape[1]} nodes) cannot be refined: {err}; give triangle or tetrahedral meshes, "
                              f"or drop {option}") from err


__all__ = ["FACTOR", "NodeSplit", "RefinedForLoss", "accepts_query", "between_nodes_errors", "between_nodes_loss",
           "check_lambda", "check_meshes", "check_model", "refined_for_loss", "split_refined"]
