r"""Consistent P1 mass matrices of patches: patch attention scores exact on piecewise-linear functions.

Patch attention compares the query function of patch :math:`p` with the key function of patch
:math:`q` moved onto it, :math:`\tilde k_q(x) = (Ku)(x - c_p + c_q)`, by an :math:`L^2` inner product
over the region :math:`D_p` of patch :math:`p`. The nodal scores of
:class:`~geoattn.nn.PatchAttention` take it as a lumped-mass quadrature over the nodes of patch
:math:`p`. Here it is the exact integral of the product of the piecewise-linear interpolants of
the nodal values over :math:`D_p`, the union of the patch's pieces of triangles
(:class:`~geoattn.nn.patch_attention.PatchPieces`, the regions of the exact patch lift):

.. math::
    s_{pq} = \frac{\tau}{L^d} \int_{D_p} q_h\, \tilde k_{q,h}\,dx
    = \frac{\tau}{L^d}\, q_p^\top M_p\, \tilde k_q,
    \qquad (M_p)_{ab} = \int_{D_p} \varphi_a \varphi_b\,dx,

with :math:`\varphi_a` the hat functions of the mesh, :math:`q_p` the values of :math:`Qu` at the
vertices of the triangles that meet :math:`D_p`, and :math:`\tilde k_q` those of :math:`Ku` read at
the same vertices moved by :math:`c_q - c_p` (:mod:`geoattn.nn.patch_pairs`). On a piece
:math:`\tau` of a triangle with barycentric matrix :math:`B` (row :math:`j`: the parent's
barycentric coordinates of the piece's vertex :math:`j`) the parent's hats are linear, and

.. math::
    \int_\tau \varphi_a \varphi_b\,dx = \frac{|\tau|}{12}\,\big(B^\top (I + \mathbf 1 \mathbf 1^\top) B\big)_{ab}.

The centres :math:`c_p` are the centroids of the regions :math:`D_p`, so with pieces cut along an
RCB partition's planes the regions and their translations are the same on every mesh, and the
scores of one continuous piecewise-linear pair agree on a mesh and its refinement. A row of
:math:`M_p` is a (vertex, patch) pair: a vertex of a triangle cut between patches has one row in
each, its key read in each patch's translation. Since :math:`M_p` is symmetric,
:math:`s_{pq} = \sum_{(a, p)} (M_p q_p)_a\, \tilde k_q(x_a)`: :func:`mass_product` forms
:math:`M_p q_p` (:math:`O(\mathrm{nnz}\, C)`) and :func:`~geoattn.nn.patch_pairs.pair_scores` the
sums over the rows and source patches, in chunks (:math:`O(N P C)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Sequence

import torch

from .patch_pairs import PatchPairs, concat_pairs, patch_pairs, shifted_cat

if TYPE_CHECKING:
    from .patch_attention import PatchPieces

__all__ = ["P1PatchMass", "concat_p1_mass", "mass_product", "p1_patch_mass"]


class P1PatchMass(NamedTuple):
    r"""The consistent mass matrices of the patches of one mesh (:func:`p1_patch_mass`):

    - ``row``, ``col``, ``value``: the nonzero entries ``[nnz]`` of the stacked matrices
      :math:`M_p` (row: a (vertex, patch) pair, in ``[0, R)``; column: a node), in the units of the
      weights (areas over :math:`L^d` when the coordinates are in units of the patch length);
    - ``pairs``: the :class:`~geoattn.nn.patch_pairs.PatchPairs` of the ``R`` rows (``segment``:
      the patch ``batch * P + p`` of the row), each vertex moved by :math:`c_q - c_p` with the
      centroids of the patch regions.
    """

    row: torch.Tensor
    col: torch.Tensor
    value: torch.Tensor
    pairs: PatchPairs


def p1_patch_mass(pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor, patch: torch.Tensor,
                  num_patches: int, pieces: PatchPieces) -> P1PatchMass:
    """The :class:`P1PatchMass` of one graph: nodes ``pos [N, 2]`` (weights ``weight`` and patches
    ``patch [N]`` only for the centre of a patch without pieces), triangles ``cells [T, 3]`` cut
    into ``pieces`` (:class:`~geoattn.nn.patch_attention.PatchPieces`) among ``num_patches``
    patches. Entries in float64 on the CPU, then in ``pos``'s dtype and device."""
    from .patch_attention import piece_corners, region_centroids

    n = len(pos)
    cells = cells.long().cpu()
    corner, area = piece_corners(pos, cells, pieces)
    centroid = region_centroids(corner, area, pieces, pos, weight, patch, num_patches)
    b = pieces.bary
    local = (area / 12.0)[:, None, None] * (b.transpose(1, 2) @ (torch.eye(3, dtype=b.dtype) + 1.0) @ b)
    node = cells[pieces.cell]  # (K, 3): the parents' vertices
    key = pieces.patch[:, None] * n + node  # (K, 3): (patch, vertex) pairs, sorted by patch once unique
    keys, row = torch.unique(key.reshape(-1), return_inverse=True)
    row = row.view(-1, 3)
    entry = (row[:, :, None] * n + node[:, None, :]).reshape(-1)  # (K * 9): (row, column)
    entries, at = torch.unique(entry, return_inverse=True)
    value = torch.zeros(len(entries), dtype=torch.float64).index_add_(0, at, local.reshape(-1))
    row_node, row_patch = keys % n, keys // n
    pairs = patch_pairs(pos, weight, patch, num_patches, pos_query=pos[row_node.to(pos.device)],
                        weight_query=weight[row_node.to(pos.device)], patch_query=row_patch.to(pos.device),
                        num_patches_query=num_patches, centroid=centroid, centroid_query=centroid)
    device = pos.device
    return P1PatchMass((entries // n).to(device), (entries % n).to(device), value.to(device, pos.dtype), pairs)


def concat_p1_mass(parts: Sequence[P1PatchMass], num_nodes: Sequence[int]) -> P1PatchMass:
    """The :class:`P1PatchMass` of a batch from those of its graphs (with ``num_nodes`` nodes
    each), without reading the device."""
    if len(parts) == 1:
        return parts[0]
    return P1PatchMass(shifted_cat([p.row for p in parts], [len(p.pairs.segment) for p in parts]),
                       shifted_cat([p.col for p in parts], num_nodes), torch.cat([p.value for p in parts]),
                       concat_pairs([p.pairs for p in parts], num_nodes))


def mass_product(x: torch.Tensor, mass: P1PatchMass) -> torch.Tensor:
    r""":math:`(M_p x)_a` of every row ``[R, C]`` of the stacked mass matrices, for node values
    ``x [N, C]``: the values to pair with the moved keys in
    :func:`~geoattn.nn.patch_pairs.pair_scores` in place of the nodes' weighted values."""
    rows = len(mass.pairs.segment)
    return x.new_zeros(rows, x.shape[1]).index_add(0, mass.row, mass.value.to(x.dtype)[:, None] * x[mass.col])
