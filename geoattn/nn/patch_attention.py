r"""Patched attention on graph partitions (self and cross in one layer): softmax over patches of
:math:`L^2` inner products on the reference patch, values moved between patches by interpolation."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from geoattn.mesh.partition import patch_centroids
from geoattn.mesh.quadrature import integrate

from ..errors import UnsupportedCellError

from .functional import segment_matmul, weighted_gram
from .p1_fourier import p1_triangle_weights
from .patch_mass import P1PatchMass, mass_product
from .patch_pairs import PatchPairs, pair_mix, pair_scores, patch_pairs
from .spectral import (FourierFrame, ModeLinear, _cos_sin, _uses_nufft, _zero_index, fourier_coefficients,
                       fourier_evaluate, fourier_modes, patch_frame)

if TYPE_CHECKING:
    from ..mesh.mesh import Layout

__all__ = ["P1PatchGeometry", "PatchAttention", "PatchGeometry", "PatchPieces", "PatchSide", "cell_pieces",
           "clipped_pieces",
           "concat_geometry", "concat_p1_geometry", "grid_stencil", "majority_patch", "p1_patch_geometry",
           "patch_coefficients", "patch_evaluate", "patch_geometry", "piece_corners", "reference_grid", "region_centroids",
           "token_mesh", "TokenMesh"]


class PatchGeometry(NamedTuple):
    r"""What the patch layers compute from the nodes and patches of one side alone, once per mesh
    and partition (:func:`patch_geometry`):

    - ``frame``: the :class:`~geoattn.nn.spectral.FourierFrame` of every node in its patch
      (:func:`~geoattn.nn.spectral.patch_frame`; segment ``batch * P + patch``);
    - ``order``: the nodes sorted by segment (stable) ``[N]``;
    - ``counts``: nodes per segment (plain integers), so the per-patch transforms split the sorted
      nodes without reading the device;
    - ``mass``: :math:`\sum_{i \in p} w_i` of every segment ``[B * P]`` (empty patches are masked).
    """

    frame: FourierFrame
    order: torch.Tensor
    counts: tuple[int, ...]
    mass: torch.Tensor


class PatchSide(NamedTuple):
    r"""The patches of one side of a :class:`PatchAttention` (its source nodes, or the query nodes
    of a cross-attention): what a model computes once per mesh and partition and passes as the
    keyword ``patches`` (``patches_query``). The nodes' values, coordinates, weights and batch
    vector travel separately, as everywhere.

    Fields:

    - ``patch``: patch of every node within its graph ``[N]``, in ``[0, num_patches)``;
    - ``length``: patch length :math:`L` (float, default ``1``; the two sides of a
      cross-attention share it);
    - ``num_patches``: patches per graph :math:`P` (default ``None``: ``patch.max() + 1``, read
      from the device);
    - ``geometry``: the :class:`PatchGeometry` of the nodes with ``length`` (default ``None``:
      the frames are computed from the nodes), for the spectral :math:`Q, K, V` without reading
      the device;
    - ``layout``: the batch :class:`~geoattn.mesh.Layout` of the nodes (default ``None``), for
      the stencils made by the layer when it is not given ``pairs``;
    - ``p1_mass``: the :class:`~geoattn.nn.patch_mass.P1PatchMass` of the nodes (default
      ``None``; the source side of a self-attention with pointwise :math:`Q, K` only): the
      scores are then the exact integrals of the piecewise-linear interpolants over the patches'
      regions, :math:`s_{pq} = \tau L^{-d} q_p^\top M_p \tilde k_q` (:mod:`geoattn.nn.patch_mass`),
      in place of the nodes' quadrature; the values are moved as without it.

    - ``congruent``: ``G``, when every patch holds the same ``G`` points in its frame, the nodes
      sorted by segment and point ``j`` of every patch at the same local coordinate (a
      :class:`TokenMesh`; default ``None``). Self-attention then reads point ``j`` of patch ``q``
      for point ``j`` of patch ``p`` directly, without stencils; the output is the same as
      with the identity ``pairs`` of :func:`token_mesh`.

    The output of the layer is the same with or without ``geometry`` and ``layout``.
    """

    patch: torch.Tensor
    length: float = 1.0
    num_patches: int | None = None
    geometry: PatchGeometry | None = None
    layout: Layout | None = None
    p1_mass: P1PatchMass | None = None
    congruent: int | None = None


def patch_geometry(pos: torch.Tensor, weight: torch.Tensor, patch: torch.Tensor, num_patches: int,
                   batch: torch.Tensor | None = None, patch_length: float = 1.0) -> PatchGeometry:
    """The :class:`PatchGeometry` of nodes ``pos [N, d]`` with weights ``weight [N]`` in patches
    ``patch [N]`` (``num_patches`` per graph, patch length ``patch_length``); reads the segment
    sizes from the device once."""
    frame = patch_frame(pos, weight, patch, patch_length, batch, num_patches)
    order = torch.argsort(frame.segment, stable=True)
    counts = tuple(torch.bincount(frame.segment, minlength=frame.num_segments).tolist())
    mass = integrate(torch.ones_like(weight), weight, frame.segment, frame.num_segments)
    return PatchGeometry(frame, order, counts, mass)


def concat_geometry(parts: Sequence[PatchGeometry]) -> PatchGeometry:
    """The :class:`PatchGeometry` of a batch from those of its graphs (graph ``g``'s segments
    numbered after those of the graphs before), without reading the device."""
    if len(parts) == 1:
        return parts[0]
    xi, segment, order, counts, offset, seg_offset = [], [], [], (), 0, 0
    for part in parts:
        xi.append(part.frame.xi)
        segment.append(part.frame.segment + seg_offset)
        order.append(part.order + offset)
        counts += part.counts
        offset += len(part.frame.xi)
        seg_offset += part.frame.num_segments
    frame = FourierFrame(torch.cat(xi), torch.cat(segment), seg_offset,
                         torch.cat([p.frame.volume for p in parts]))
    return PatchGeometry(frame, torch.cat(order), counts, torch.cat([p.mass for p in parts]))


class PatchPieces(NamedTuple):
    r"""How the triangles of a mesh are cut among the patches: piece ``k`` is the triangle with
    vertices ``bary[k] @ pos[cells[cell[k]]]`` (``bary[k, j]``: the barycentric coordinates of its
    vertex ``j`` in its parent cell, rows summing to 1; float64) and belongs to patch
    ``patch[k]``. The pieces of a cell tile it. Made by :func:`cell_pieces` (whole cells) or
    :func:`clipped_pieces` (cells cut by the planes of a recursive coordinate bisection)."""

    cell: torch.Tensor
    patch: torch.Tensor
    bary: torch.Tensor


def majority_patch(cells: torch.Tensor, patch: torch.Tensor) -> torch.Tensor:
    """The patch of every cell ``[T]``: the one that holds most of its vertices (``patch [N]``),
    ties to the lowest patch index."""
    vp = patch[cells.long()]  # (T, k)
    votes = (vp[:, :, None] == vp[:, None, :]).sum(-1)  # (T, k): how many vertices share my patch
    best = votes.max(1, keepdim=True).values
    big = torch.iinfo(vp.dtype).max
    return torch.where(votes == best, vp, torch.full_like(vp, big)).min(1).values


def cell_pieces(cells: torch.Tensor, cell_patch: torch.Tensor) -> PatchPieces:
    """Every triangle whole, in patch ``cell_patch [T]`` (e.g. :func:`majority_patch`)."""
    t = len(cells)
    eye = torch.eye(3, dtype=torch.float64).expand(t, 3, 3).clone()
    return PatchPieces(torch.arange(t), cell_patch.long().cpu(), eye)


def clipped_pieces(pos: torch.Tensor, cells: torch.Tensor, patch: torch.Tensor, tree) -> PatchPieces:
    r"""The triangles cut exactly along the planes of a recursive coordinate bisection ``tree``
    (nodes with ``axis``, ``value``, ``left`` (``x[axis] < value``) and ``right``; leaves are patch
    indices, as in :class:`~geoattn.mesh.Partition`): every piece lies in one box of the tree, so
    the patches are the same regions of the domain on every mesh. A triangle whose vertices
    (``patch [N]``, the nodes' patches under ``tree``) share one patch lies in that box (boxes
    are convex) and stays whole; the others are clipped polygon by polygon down the tree and the
    pieces fanned into triangles (pieces of relative area below ``1e-13`` dropped)."""
    cells_np = cells.long().cpu().numpy()
    p = pos.detach().cpu().double().numpy()
    vp = patch.cpu().numpy()[cells_np]
    whole = (vp == vp[:, :1]).all(1)
    out_cell = [np.nonzero(whole)[0]]
    out_patch = [vp[whole, 0]]
    out_bary = [np.broadcast_to(np.eye(3), (int(whole.sum()), 3, 3))]
    pieces_cell, pieces_patch, pieces_bary = [], [], []
    eye = np.eye(3)

    def clip(poly, bary, axis, value, keep_left):
        """Sutherland–Hodgman against one half-plane, carrying barycentric coordinates."""
        sign = 1.0 if keep_left else -1.0
        dist = sign * (poly[:, axis] - value)  # <= 0: inside
        outp, outb = [], []
        n = len(poly)
        for i in range(n):
            j = (i + 1) % n
            di, dj = dist[i], dist[j]
            if di <= 0:
                outp.append(poly[i]), outb.append(bary[i])
            if (di < 0 < dj) or (dj < 0 < di):
                t = di / (di - dj)
                outp.append(poly[i] + t * (poly[j] - poly[i])), outb.append(bary[i] + t * (bary[j] - bary[i]))
        return np.array(outp).reshape(-1, 2), np.array(outb).reshape(-1, 3)

    def descend(node, poly, bary, c, area):
        if len(poly) < 3:
            return
        if not hasattr(node, "axis"):
            for k in range(1, len(poly) - 1):
                tri_p = poly[[0, k, k + 1]]
                e1, e2 = tri_p[1] - tri_p[0], tri_p[2] - tri_p[0]
                if abs(e1[0] * e2[1] - e1[1] * e2[0]) > 1e-13 * area:
                    pieces_cell.append(c), pieces_patch.append(int(node))
                    pieces_bary.append(bary[[0, k, k + 1]])
            return
        descend(node.left, *clip(poly, bary, node.axis, node.value, True), c, area)
        descend(node.right, *clip(poly, bary, node.axis, node.value, False), c, area)

    for c in np.nonzero(~whole)[0]:
        corner = p[cells_np[c]]
        e1, e2 = corner[1] - corner[0], corner[2] - corner[0]
        descend(tree, corner, eye, int(c), abs(e1[0] * e2[1] - e1[1] * e2[0]))
    if pieces_cell:
        out_cell.append(np.array(pieces_cell)), out_patch.append(np.array(pieces_patch))
        out_bary.append(np.stack(pieces_bary))
    return PatchPieces(torch.from_numpy(np.concatenate(out_cell)).long(),
                       torch.from_numpy(np.concatenate(out_patch)).long(),
                       torch.from_numpy(np.ascontiguousarray(np.concatenate(out_bary))).double())


def piece_corners(pos: torch.Tensor, cells: torch.Tensor, pieces: PatchPieces) -> tuple[torch.Tensor, torch.Tensor]:
    """The vertices ``[K, 3, 2]`` and areas ``[K]`` of the ``pieces`` of the triangles ``cells`` of
    the nodes ``pos [N, 2]`` (float64, on the CPU)."""
    parent = pos.detach().cpu().double()[cells.long().cpu()[pieces.cell]]  # (K, 3, 2)
    corner = pieces.bary @ parent  # (K, 3, 2): the pieces' vertices
    e1, e2 = corner[:, 1] - corner[:, 0], corner[:, 2] - corner[:, 0]
    return corner, 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).abs()


def region_centroids(corner: torch.Tensor, area: torch.Tensor, pieces: PatchPieces, pos: torch.Tensor,
                     weight: torch.Tensor, patch: torch.Tensor, num_patches: int) -> torch.Tensor:
    r"""The centroids :math:`c_p = |D_p|^{-1} \int_{D_p} x\,dx` ``[P, 2]`` (float64, CPU) of the
    regions :math:`D_p` the pieces of every patch cover (from :func:`piece_corners`); a patch
    without pieces takes the weighted centroid of its nodes (``pos``, ``weight``, ``patch [N]``)."""
    mass = torch.zeros(num_patches, dtype=torch.float64).index_add_(0, pieces.patch, area)
    moment = torch.zeros(num_patches, 2, dtype=torch.float64).index_add_(
        0, pieces.patch, area[:, None] * corner.mean(1))  # quadrature-ok: a piece's centroid, over its 3 vertices
    nodal = patch_centroids(pos.detach().cpu().double(), weight.detach().cpu().double(), patch.cpu(), num_patches)
    return torch.where((mass > 0)[:, None], moment / mass.clamp(min=1e-300)[:, None], nodal)


class P1PatchGeometry(NamedTuple):
    r"""What the exact (P1) patch transforms need, once per mesh, partition and modes
    (:func:`p1_patch_geometry`):

    - ``geometry``: the :class:`PatchGeometry` of the nodes in the frames of the patches'
      exact centroids (the centroids of the regions their pieces cover, not the weighted
      centroids of their nodes), for the evaluation at the nodes;
    - ``node``, ``segment``: one entry per (piece, vertex of its parent cell) ``[E]``, sorted by
      segment (``batch * P + patch``);
    - ``counts``: entries per segment (plain integers);
    - ``weighted``: per entry the integral over the piece of the parent's hat function of
      ``node`` times every cosine and sine, in the layout of
      :func:`~geoattn.nn.spectral.dense_basis` ``[E, M]`` (in the frame of the piece's patch).
    """

    geometry: PatchGeometry
    node: torch.Tensor
    segment: torch.Tensor
    counts: tuple[int, ...]
    weighted: torch.Tensor


def p1_patch_geometry(pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor, patch: torch.Tensor,
                      num_patches: int, pieces: PatchPieces, modes: torch.Tensor,
                      patch_length: float = 1.0) -> P1PatchGeometry:
    r"""The :class:`P1PatchGeometry` of one graph: nodes ``pos [N, 2]`` with weights ``weight``
    (only for the :attr:`PatchGeometry.mass` of the node patches) in patches ``patch [N]``,
    triangles ``cells [T, 3]`` cut into ``pieces`` (:class:`PatchPieces`), for the modes
    ``modes`` (the symmetric order of :func:`~geoattn.nn.spectral.fourier_modes`).

    Patch :math:`p`'s frame is centred at the centroid :math:`c_p` of the region :math:`D_p`
    its pieces cover, with side ``patch_length`` :math:`L`, and

    .. math::
        \hat u_p(m) = rac{1}{L^d} \int_{D_p} u_h(x)\, e^{-2\pi i\, m\cdot(x - c_p)/L}\,dx
        = rac{1}{L^d} \sum_{	ext{pieces } 	au \subset D_p} \sum_{a} u_{i_a}
        \int_	au arphi_{i_a}\, e^{-2\pi i\, m\cdot(x - c_p)/L}\,dx,

    exact for the piecewise-linear interpolant :math:`u_h` (:func:`~geoattn.nn.p1_fourier.p1_triangle_weights`
    on every piece, in float64). A patch without pieces keeps the weighted centroid of its nodes.
    """
    from .spectral import _zero_index

    if pos.shape[-1] != 2 or cells.dim() != 2 or cells.shape[1] != 3:
        raise UnsupportedCellError(f"the exact P1 patch transform needs triangles of 2-D nodes, got nodes "
                                   f"{tuple(pos.shape)} and cells {tuple(cells.shape)}")
    device, dtype = pos.device, pos.dtype
    zero = _zero_index(modes)
    if zero is None:
        raise ValueError("p1_patch_geometry needs the symmetric modes of fourier_modes")
    used = modes[zero:].cpu()
    cells = cells.long().cpu()
    corner, area = piece_corners(pos, cells, pieces)
    nodal = patch_geometry(pos, weight, patch, num_patches, patch_length=patch_length)
    centroid = region_centroids(corner, area, pieces, pos, weight, patch, num_patches)
    # the pieces' integrals of the parent's hats in their patch's frame
    xi_piece = (corner - centroid[pieces.patch][:, None, :]) / patch_length
    lam = p1_triangle_weights(corner, xi_piece, used)  # (K, 3, M_h): int lambda'_j e^{+}
    hat = torch.einsum("kja,kjm->kam", pieces.bary.to(lam.dtype), lam)  # (K, 3, M_h): int phi_a e^{+}
    weighted = torch.cat([hat.real, hat.imag[..., 1:]], dim=-1)  # (K, 3, M)
    node = cells[pieces.cell]  # (K, 3)
    segment = pieces.patch[:, None].expand(-1, 3)
    node, segment, weighted = node.reshape(-1), segment.reshape(-1), weighted.reshape(-1, weighted.shape[-1])
    order = torch.argsort(segment, stable=True)
    counts = tuple(torch.bincount(segment, minlength=num_patches).tolist())
    xi = (pos - centroid.to(device, dtype)[patch]) / patch_length
    frame = FourierFrame(xi, nodal.frame.segment, num_patches, nodal.frame.volume)
    geometry = PatchGeometry(frame, nodal.order, nodal.counts, nodal.mass)
    return P1PatchGeometry(geometry, node[order].to(device), segment[order].to(device), counts,
                           weighted[order].to(device, dtype))


def concat_p1_geometry(parts: Sequence[P1PatchGeometry], num_nodes: Sequence[int]) -> P1PatchGeometry:
    """The :class:`P1PatchGeometry` of a batch from those of its graphs (with ``num_nodes`` nodes
    each), without reading the device."""
    if len(parts) == 1:
        return parts[0]
    node, segment, counts, offset, seg_offset = [], [], (), 0, 0
    for part, n in zip(parts, num_nodes):
        node.append(part.node + offset)
        segment.append(part.segment + seg_offset)
        counts += part.counts
        offset += n
        seg_offset += part.geometry.frame.num_segments
    return P1PatchGeometry(concat_geometry([p.geometry for p in parts]), torch.cat(node), torch.cat(segment),
                           counts, torch.cat([p.weighted for p in parts]))


def _dense_basis(xi: torch.Tensor, modes: torch.Tensor, zero: int | None) -> torch.Tensor:
    """:func:`~geoattn.nn.spectral.dense_basis` with the place of mode 0 given (no
    ``torch.equal`` on the modes, which would read the device)."""
    if zero is None:
        return _cos_sin(xi, modes)
    angle = 2.0 * math.pi * (xi @ modes[zero:].to(xi.dtype).t())  # (N, M_h): modes 0 and H
    return torch.cat([angle.cos(), angle[:, 1:].sin()], dim=-1)  # (N, M)


def patch_coefficients(x: torch.Tensor, weight: torch.Tensor, geometry: PatchGeometry,
                       modes: torch.Tensor, zero: int | None, basis: torch.Tensor | None = None,
                       backend: str = "auto", *, p1: P1PatchGeometry | None = None) -> torch.Tensor:
    """:func:`~geoattn.nn.spectral.fourier_coefficients` ``[B * P, M, C]`` of every patch, with the
    segment sizes of ``geometry`` (no host read; the same numbers). ``zero``: the index of mode 0
    in ``modes`` (:func:`~geoattn.nn.spectral._zero_index`, computed once by the layer);
    ``basis``: :func:`~geoattn.nn.spectral.dense_basis` of ``geometry.frame.xi`` (default: made
    here).

    ``p1`` (keyword, optional): a :class:`P1PatchGeometry` made by :func:`p1_patch_geometry` for
    ``modes``: the coefficients are then the exact integrals of the piecewise-linear interpolant
    of ``x`` over every patch's pieces of triangles (``quadrature="p1"``), not the quadrature over
    its nodes; ``weight`` and ``basis`` are unused and ``geometry`` should be ``p1.geometry``
    (its frame, the exact patch centroids, is the one the weights were made in)."""
    frame = geometry.frame
    if p1 is not None:
        trig = p1.weighted.to(x.dtype)
        gram = weighted_gram(trig, x[p1.node], torch.ones_like(trig[:, 0]), p1.segment, frame.num_segments,
                             counts=p1.counts)  # entries are sorted by segment
    else:
        if _uses_nufft(backend, frame, modes):
            return fourier_coefficients(x, weight, frame, modes, backend)
        trig = _dense_basis(frame.xi.to(x.dtype), modes, zero) if basis is None else basis.to(x.dtype)
        o = geometry.order  # weighted_gram sorts by segment itself; given the counts, it takes them sorted
        gram = weighted_gram(trig[o], x[o], weight[o], frame.segment, frame.num_segments, counts=geometry.counts)
    gram = gram / frame.volume.to(gram.dtype).view(-1, 1, 1)
    if zero is None:
        m = len(modes)
        return torch.complex(gram[:, :m], -gram[:, m:])  # (S, M, C)
    cos, sin = gram[:, :zero + 1], gram[:, zero + 1:]  # modes 0 and H; modes H
    half = torch.complex(cos, -torch.cat([torch.zeros_like(cos[:, :1]), sin], dim=1))
    return torch.cat([half[:, 1:].flip(1).conj(), half], dim=1)  # (S, M, C): u(-m) = conj u(m)


def patch_evaluate(coeff: torch.Tensor, geometry: PatchGeometry, modes: torch.Tensor, zero: int | None,
                   basis: torch.Tensor | None = None, backend: str = "auto") -> torch.Tensor:
    """:func:`~geoattn.nn.spectral.fourier_evaluate` of patch coefficients ``[B * P, M, C]`` at the
    nodes of ``geometry`` ``[N, C]``, with its segment sizes (no host read; the same numbers)."""
    frame = geometry.frame
    if _uses_nufft(backend, frame, modes):
        return fourier_evaluate(coeff, frame, modes, backend)
    dtype = coeff.real.dtype
    trig = _dense_basis(frame.xi.to(dtype), modes, zero) if basis is None else basis.to(dtype)
    if zero is None:
        stacked = torch.cat([coeff.real, -coeff.imag], dim=1)  # (S, 2M, C)
    else:
        pair = coeff[:, zero + 1:] + coeff[:, :zero].flip(1).conj()  # c(m) + conj c(-m), m in H
        stacked = torch.cat([coeff[:, zero:zero + 1].real, pair.real, -pair.imag], dim=1)  # (S, M, C)
    o = geometry.order
    out = segment_matmul(trig[o], stacked, frame.segment, counts=geometry.counts)  # sorted order
    return torch.empty_like(out).index_copy_(0, o, out)


class PatchAttention(nn.Module):
    r"""Multi-head patched attention (self or cross) with patches given by a mesh partition.

    Patched attention (Definitions 13–14 of Calvello et al., *Continuum Attention for Neural
    Operators*) treats the restriction :math:`\tilde u(p) = u|_{D_p}` of a function to each patch as
    one token, compares tokens by the :math:`L^2` inner product on a reference patch :math:`D'`, and
    mixes them with a softmax over patches:

    .. math::
        A(\tilde u)(p) = \sum_{q=1}^{P}
        \frac{\exp\big(\tau\langle Q\tilde u(p), K\tilde u(q)\rangle_{L^2(D')}\big)}
             {\sum_{l} \exp\big(\tau\langle Q\tilde u(p), K\tilde u(l)\rangle_{L^2(D')}\big)}\,
        V\tilde u(q).

    Every patch is identified with the reference patch by translation: a node :math:`x_i` of patch
    :math:`p` and the point :math:`\tilde x_i^{(q)} = x_i - c_p + c_q` of patch :math:`q` share the
    local coordinate (:math:`c_p` the weighted centroid). With pointwise :math:`Q, K, V` (ViT
    neural operator) the scores are quadratures over the nodes of patch :math:`p` of the reference
    patch of side :math:`L` (``patch_length``), and the value of patch :math:`q` is read at
    :math:`\tilde x_i^{(q)}` by piecewise-linear interpolation between the nodes
    (:mod:`geoattn.nn.patch_pairs`), at full resolution:

    .. math::
        s_{pq} = \frac{\tau}{L^d} \sum_{i \in D_p} w_i\, (Q u)(x_i) \cdot (K u)(\tilde x_i^{(q)}),
        \qquad
        \mathrm{out}_i = W_O \sum_q \mathrm{softmax}_q(s_{pq})\, (V u)(\tilde x_i^{(q)}).

    Nothing is truncated: with :math:`Q = K = 0` and :math:`V = W_O = I` the layer returns
    :math:`\frac1P \sum_q u(\tilde x_i^{(q)})`, constants exactly and linear functions exactly
    wherever the windows stay in the domain, and the layer converges at the order of the
    interpolation under refinement. The cost is :math:`O(N P C)` (the paper's), in chunks.

    With ``spectral_qkv=True`` (Fourier attention neural operator) :math:`Q, K, V` are Fourier
    integral operators on the reference box :math:`[-1/2, 1/2]^d` about each centroid, one complex
    matrix per mode (:class:`~geoattn.nn.spectral.ModeLinear`) on the quadrature coefficients
    :math:`\hat u_p(m) = L^{-d} \sum_{i \in D_p} w_i u_i e^{-2\pi i m \cdot (x_i - c_p)/L}`, and the
    scores are their inner products (Parseval on :math:`D'`). The value map is the spectral part
    plus a pointwise matrix :math:`W_V` moved between patches as above, so the value path keeps the
    full resolution as well:

    .. math::
        s_{pq} = \tau\, \mathrm{Re} \sum_m \widehat{Q u}_p(m) \cdot \overline{\widehat{K u}_q(m)},
        \qquad
        \mathrm{out}_i = W_O \sum_q a_{pq} \Big((W_V u)(\tilde x_i^{(q)}) + \mathrm{Re} \sum_m
        \widehat{V u}_q(m)\, e^{2\pi i\, m \cdot (x_i - c_p)/L}\Big).

    With a query side (``x_query``, ``pos_query``, ``weight_query`` and its patches
    ``patches_query``) the layer is patched cross-attention (Definitions 17–18): the patches
    :math:`p` of the query function on one mesh attend to the :math:`O` patches :math:`q` of the
    source function ``x`` on another (the number of patches may differ); :math:`\tilde x_i^{(q)}`
    is then a point of the source mesh.

    Args:
        channels: model width :math:`C` (a multiple of ``num_heads``).
        num_heads: number of heads :math:`H` (default 1); :math:`d_k = C/H`.
        modes: :math:`K` per dimension of the spectral :math:`Q, K, V` (int or one per dimension,
            default 2; ``spectral_qkv=True`` only).
        dim: spatial dimension :math:`d` (default 2).
        spectral_qkv: Fourier-multiplier :math:`Q, K, V` (FANO) instead of pointwise (default
            ``False``).
        scale: score temperature :math:`\tau` (default :math:`1/\sqrt{d_k}`).

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional), and
          the keywords ``patches`` (:class:`PatchSide`: the patch of every node, the patch
          length, and the structure a model computes once per mesh and partition) and ``pairs``
          (optional :class:`~geoattn.nn.patch_pairs.PatchPairs` of the query and source sides,
          computed when not given); for cross-attention the query side ``x_query [Nq, C]``,
          ``pos_query [Nq, d]``, ``weight_query [Nq]``, ``batch_query [Nq]`` (give both batch
          vectors or neither) and ``patches_query`` (:class:`PatchSide` of the query nodes, with
          the same ``length``).
        - **output:** ``[N, C]``, or ``[Nq, C]`` with a query side.
    """

    def __init__(self, channels: int, num_heads: int = 1, modes: int | Sequence[int] = 2, dim: int = 2,
                 spectral_qkv: bool = False, scale: float | None = None):
        super().__init__()
        if channels % num_heads:
            raise ValueError(f"channels ({channels}) must be a multiple of num_heads ({num_heads})")
        self.channels, self.num_heads, self.modes, self.dim = channels, num_heads, modes, dim
        self.spectral_qkv = spectral_qkv
        self.head_channels = channels // num_heads
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.head_channels)
        self.register_buffer("mode_index", fourier_modes(modes, dim), persistent=False)
        self._zero = _zero_index(self.mode_index)  # mode 0's place, once (torch.equal syncs)
        num_modes = len(self.mode_index)
        linear = lambda: nn.Linear(channels, channels, bias=False)  # noqa: E731  (a bias is not patch-local)
        if spectral_qkv:
            self.q, self.k = ModeLinear(channels, channels, num_modes), ModeLinear(channels, channels, num_modes)
            self.v_spectral = ModeLinear(channels, channels, num_modes)
        else:
            self.q, self.k = linear(), linear()
        self.v = linear()
        self.out = nn.Linear(channels, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.q, self.k, self.v, self.out) + ((self.v_spectral,) if self.spectral_qkv else ()):
            lin.reset_parameters()

    def _spectral(self, x, pos, weight, batch, patch, patch_length, num_patches):
        """Patch frame and Fourier coefficients ``[B, P, M, C]`` of one side."""
        frame = patch_frame(pos, weight, patch, patch_length, batch, num_patches)
        coeff = fourier_coefficients(x, weight, frame, self.mode_index)  # (B*P, M, C)
        return frame, coeff.view(-1, num_patches, *coeff.shape[1:])

    def _scores(self, coeff_q: torch.Tensor, coeff_s: torch.Tensor) -> torch.Tensor:
        """Spectral scores ``[B, P_q, P_s, H]`` from patch coefficients ``[B, P, M, C]``."""
        b, pq, m, _ = coeff_q.shape
        h, dk = self.num_heads, self.head_channels
        q = self.q(coeff_q).view(b, pq, m, h, dk)
        k = self.k(coeff_s).view(b, coeff_s.shape[1], m, h, dk)
        return torch.einsum("bjmhc,bkmhc->bjkh", q, k.conj()).real

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, patches: PatchSide, pairs: PatchPairs | None = None,
                x_query: torch.Tensor | None = None, pos_query: torch.Tensor | None = None,
                weight_query: torch.Tensor | None = None, batch_query: torch.Tensor | None = None,
                patches_query: PatchSide | None = None) -> torch.Tensor:
        patch, patch_length, geometry, layout, p1_mass = (patches.patch, patches.length, patches.geometry,
                                                          patches.layout, patches.p1_mass)
        p = patches.num_patches if patches.num_patches is not None else int(patch.max()) + 1
        cross = x_query is not None
        if p1_mass is not None and self.spectral_qkv:
            raise ValueError("p1_mass (the P1 scores) is for pointwise Q, K (spectral_qkv=False)")
        if not cross:
            if any(t is not None for t in (pos_query, weight_query, batch_query, patches_query)):
                raise ValueError("query keywords without x_query: pass x_query too")
            x_query, pos_query, weight_query, batch_query = x, pos, weight, batch
            patch_query, pq, geometry_query, layout_query = patch, p, geometry, layout
        else:
            if any(t is None for t in (pos_query, weight_query, patches_query)):
                raise ValueError("a query side needs x_query, pos_query, weight_query and patches_query")
            if (batch_query is None) != (batch is None):
                raise ValueError("give both batch and batch_query, or neither")
            if patches_query.length != patch_length:
                raise ValueError(f"the two sides share one patch length: patches.length={patch_length}, "
                                 f"patches_query.length={patches_query.length}")
            if patches_query.p1_mass is not None:
                raise ValueError("p1_mass (the P1 scores) is for self-attention: give it on patches, with no "
                                 "query side")
            patch_query, geometry_query, layout_query = (patches_query.patch, patches_query.geometry,
                                                         patches_query.layout)
            pq = (patches_query.num_patches if patches_query.num_patches is not None
                  else int(patch_query.max()) + 1)
        if patches.congruent is not None and not cross and p1_mass is None and geometry is not None:
            return self._congruent(x, weight, geometry, p, patches.congruent)
        if pairs is None:
            pairs = patch_pairs(pos, weight, patch, p, batch, pos_query=pos_query,
                                weight_query=weight_query, patch_query=patch_query,
                                num_patches_query=pq, batch_query=batch_query, layout=layout,
                                layout_query=layout_query)
        if geometry is not None:
            mass = geometry.mass
        else:
            segment = patch if batch is None else batch * p + patch
            mass = integrate(torch.ones_like(weight), weight, segment, pairs.num_segments // pq * p)
        mass = mass.view(-1, p)  # (B, P_s): empty source patches are masked
        h = self.num_heads
        if self.spectral_qkv and geometry is not None and geometry_query is not None:
            coeff = self._coefficients(x, weight, geometry, p)
            if not cross:  # the query side is the source side: the same coefficients
                frame, coeff_q = geometry_query, coeff
            else:
                frame, coeff_q = geometry_query, self._coefficients(x_query, weight_query, geometry_query, pq)
            if coeff_q.shape[0] != coeff.shape[0]:
                raise ValueError(f"query has {coeff_q.shape[0]} graphs, source {coeff.shape[0]}")
            score = self._scores(coeff_q, coeff).flatten(0, 1)  # (B*P_q, P_s, H)
        elif self.spectral_qkv:
            _, coeff = self._spectral(x, pos, weight, batch, patch, patch_length, p)
            frame, coeff_q = self._spectral(x_query, pos_query, weight_query, batch_query,
                                            patch_query, patch_length, pq)
            if coeff_q.shape[0] != coeff.shape[0]:
                raise ValueError(f"query has {coeff_q.shape[0]} graphs, source {coeff.shape[0]}")
            score = self._scores(coeff_q, coeff).flatten(0, 1)  # (B*P_q, P_s, H)
        elif p1_mass is not None:  # exact for P1: the consistent mass matrices in place of the weights
            if cross:
                raise ValueError("p1_mass (the P1 scores) is for self-attention: no query side")
            qm = mass_product(self.q(x), p1_mass) / float(patch_length) ** pos.shape[1]
            score = pair_scores(qm, self.k(x), p1_mass.pairs, h)  # (B*P, P, H)
        else:
            w = (weight_query / float(patch_length) ** pos.shape[1]).unsqueeze(-1)
            score = pair_scores(w * self.q(x_query), self.k(x), pairs, h)  # (B*P_q, P_s, H)
        b = mass.shape[0]
        score = (score * self.scale).view(b, pq, p, h)
        score = score.masked_fill(~(mass > 0)[:, None, :, None], float("-inf"))
        attn = torch.softmax(score, dim=2).flatten(0, 1)  # (B*P_q, P_s, H)
        out = pair_mix(attn, self.v(x), pairs)
        if self.spectral_qkv:
            v = self.v_spectral(coeff).view(b, p, coeff.shape[2], h, self.head_channels)
            mixed = torch.einsum("bjkh,bkmhc->bjmhc", attn.view(b, pq, p, h).to(v.dtype), v)
            mixed = mixed.reshape(b * pq, -1, self.channels)
            if isinstance(frame, PatchGeometry):
                out = out + patch_evaluate(mixed, frame, self.mode_index, self._zero)
            else:
                out = out + fourier_evaluate(mixed, frame, self.mode_index)
        return self.out(out)

    def _congruent(self, x: torch.Tensor, weight: torch.Tensor, geometry: PatchGeometry, p: int,
                   g: int) -> torch.Tensor:
        """Self-attention over congruent patches of ``g`` points each (:attr:`PatchSide.congruent`):
        the sums of :func:`~geoattn.nn.patch_pairs.pair_scores` and
        :func:`~geoattn.nn.patch_pairs.pair_mix` with identity stencils, as dense products."""
        h, dk = self.num_heads, self.head_channels
        b = geometry.mass.shape[0] // p
        if self.spectral_qkv:
            coeff = self._coefficients(x, weight, geometry, p)
            score = self._scores(coeff, coeff)  # (B, P, P, H)
        else:
            q = (weight.unsqueeze(-1) * self.q(x)).view(b, p, g, h, dk)
            k = self.k(x).view(b, p, g, h, dk)
            score = torch.einsum("bpghc,bqghc->bpqh", q, k)  # the grid's quadrature of Q . K
        score = (score * self.scale).masked_fill(~(geometry.mass.view(b, p) > 0)[:, None, :, None], float("-inf"))
        attn = torch.softmax(score, dim=2)  # (B, P, P, H)
        out = torch.einsum("bpqh,bqghc->bpghc", attn, self.v(x).view(b, p, g, h, dk)).reshape(-1, self.channels)
        if self.spectral_qkv:
            v = self.v_spectral(coeff).view(b, p, coeff.shape[2], h, dk)
            mixed = torch.einsum("bjkh,bkmhc->bjmhc", attn.to(v.dtype), v).reshape(b * p, -1, self.channels)
            out = out + patch_evaluate(mixed, geometry, self.mode_index, self._zero)
        return self.out(out)

    def _coefficients(self, x: torch.Tensor, weight: torch.Tensor, geometry: PatchGeometry,
                      num_patches: int) -> torch.Tensor:
        """Fourier coefficients ``[B, P, M, C]`` of one side with its :class:`PatchGeometry`."""
        coeff = patch_coefficients(x, weight, geometry, self.mode_index, self._zero)
        return coeff.view(-1, num_patches, *coeff.shape[1:])

    def extra_repr(self) -> str:
        modes = f", modes={self.modes}" if self.spectral_qkv else ""
        return (f"{self.channels}, num_heads={self.num_heads}{modes}, dim={self.dim}, "
                f"spectral_qkv={self.spectral_qkv}")


def reference_grid(size: int, dim: int, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    r"""The cell-centred grid of ``size`` points per axis on the reference patch
    :math:`[-1/2, 1/2]^d`, :math:`\xi_j = (j + 1/2)/G - 1/2`, ``[G^d, d]`` in lexicographic order
    (the last axis fastest). Its equal weights :math:`G^{-d}` are the midpoint rule of the box."""
    axis = (torch.arange(size, dtype=dtype, device=device) + 0.5) / size - 0.5
    mesh = torch.meshgrid(*([axis] * dim), indexing="ij")
    return torch.stack([m.reshape(-1) for m in mesh], dim=-1)


def grid_stencil(xi: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Multilinear interpolation in the :func:`reference_grid` of ``size`` points per axis at the
    reference coordinates ``xi [N, d]``: grid indices and coefficients ``[N, 2^d]`` (coefficients
    non-negative, summing to one; points beyond the outer grid points take the value on the
    grid's boundary, constant along the axes). A fixed continuous function of ``xi``, whatever
    mesh the points come from."""
    n, d = xi.shape
    t = ((xi + 0.5) * size - 0.5).clamp(0.0, float(size - 1))
    low = t.floor().clamp(max=max(size - 2, 0))
    frac = t - low
    low = low.long()
    index, coeff = [], []
    for corner in range(2 ** d):
        bits = [(corner >> (d - 1 - k)) & 1 for k in range(d)]
        idx = torch.zeros(n, dtype=torch.long, device=xi.device)
        c = torch.ones(n, dtype=xi.dtype, device=xi.device)
        for k, bit in enumerate(bits):
            idx = idx * size + (low[:, k] + bit).clamp(max=size - 1)
            c = c * (frac[:, k] if bit else 1.0 - frac[:, k])
        index.append(idx)
        coeff.append(c)
    return torch.stack(index, dim=1), torch.stack(coeff, dim=1)


class TokenMesh(NamedTuple):
    r"""The reference grids of the patches of ``B`` graphs as one point set (:func:`token_mesh`),
    on which :class:`PatchAttention` and :class:`~geoattn.nn.PatchSpectralIntegral` run
    unchanged: point ``(b, p, j)`` is grid point :math:`\xi_j` of patch ``p`` of graph ``b``.

    Fields: ``pos [B P G^d, d]`` (the reference coordinates, in units of the patch length),
    ``weight`` (:math:`G^{-d}`: the midpoint rule of the unit box), ``patch``, ``batch``
    (``None`` for one graph), ``pairs`` (:class:`~geoattn.nn.patch_pairs.PatchPairs` reading
    point :math:`\xi_j` of every other patch ``q``: the patches are congruent, so the stencils are
    the identity) and ``geometry`` (:class:`PatchGeometry`, frames centred on the boxes)."""

    pos: torch.Tensor
    weight: torch.Tensor
    patch: torch.Tensor
    batch: torch.Tensor | None
    pairs: PatchPairs
    geometry: PatchGeometry


def token_mesh(num_graphs: int, num_patches: int, size: int, dim: int, dtype: torch.dtype = torch.float32,
               device=None) -> TokenMesh:
    """The :class:`TokenMesh` of ``num_graphs`` graphs of ``num_patches`` patches, each with the
    :func:`reference_grid` of ``size`` points per axis (reads the device once, for the segment
    sizes)."""
    grid = reference_grid(size, dim, dtype, device)  # (G^d, d)
    g, b, p = len(grid), num_graphs, num_patches
    pos = grid.repeat(b * p, 1)  # (B P G^d, d)
    weight = torch.full((len(pos),), 1.0 / g, dtype=dtype, device=device)
    seg = torch.arange(b * p, device=device).repeat_interleave(g)  # b * P + p
    patch, batch = seg % p, (seg // p if b > 1 else None)
    local = torch.arange(len(pos), device=device) % g
    source = (seg // p)[:, None] * p + torch.arange(p, device=device)[None, :]  # (B P G^d, P): segment of q
    index = torch.zeros(len(pos), p, dim + 1, dtype=torch.long, device=device)
    index[:, :, 0] = source * g + local[:, None]
    coeff = torch.zeros(len(pos), p, dim + 1, dtype=dtype, device=device)
    coeff[:, :, 0] = 1.0
    pairs = PatchPairs(index, coeff, seg, b * p)
    return TokenMesh(pos, weight, patch, batch, pairs, patch_geometry(pos, weight, patch, p, batch))
