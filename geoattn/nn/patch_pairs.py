r"""Functions moved between patches: every patch's function evaluated in every other patch's frame.

Patched attention compares and mixes the restrictions of a function to the patches of a
partition, each seen on one reference patch. A node :math:`x_i` of (query) patch :math:`p`, with
centroid :math:`c_p`, has the same local coordinate as the point

.. math::
    \tilde x_i^{(q)} = x_i - c_p + c_q

of (source) patch :math:`q`, and the value of patch :math:`q`'s function there is
:math:`u(\tilde x_i^{(q)})`, read from the source nodes by piecewise-linear interpolation
(:func:`~geoattn.mesh.interpolation.linear_interpolation`). :func:`patch_pairs` builds these
stencils once per mesh and partition (``[N, P, d + 1]`` indices and coefficients);
:func:`pair_scores` and :func:`pair_mix` are the two sums patched attention needs,

.. math::
    s_{pq} = \sum_{i \in p} x_i \cdot y(\tilde x_i^{(q)}), \qquad
    \mathrm{out}_i = \sum_q a_{p(i) q}\, y(\tilde x_i^{(q)}),

per head, computed in chunks of nodes (with recomputation in the backward pass) so that the
:math:`N \times P \times C` translated values never exist at once.

Where the partition is congruent (equal boxes of a box), :math:`\tilde x_i^{(q)}` lies in patch
:math:`q` and this is exactly the paper's operator. Patches of an unstructured partition are not
congruent: then the window :math:`c_q + (D_p - c_p)` may reach into neighbouring patches, whose
values are those of the same function :math:`u`, or out of the domain, where the nearest node's
value is used (the closest-point extension of
:func:`~geoattn.mesh.interpolation.linear_interpolation`). Both are fixed continuum definitions,
so the discrete sums converge under refinement.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

from ..mesh.interpolation import linear_interpolation
from ..mesh.partition import patch_centroids
from .functional import graph_slices, num_graphs

__all__ = ["PatchPairs", "concat_pairs", "pair_mix", "pair_scores", "patch_pairs"]

#: Elements of the translated values ``[n, P, C]`` computed at once (more are computed chunk by
#: chunk, recomputed in the backward pass).
CHUNK_ELEMENTS = 1 << 24


class PatchPairs(NamedTuple):
    """Stencils of every (query node, source patch) pair.

    Fields:

    - ``index [N, P, d + 1]``: source node indices of the stencil of :math:`\\tilde x_i^{(q)}`;
    - ``coeff [N, P, d + 1]``: the interpolation coefficients;
    - ``segment [N]``: query patch of every query node, ``batch * P_query + patch``;
    - ``num_segments``: number of query patches over the batch, ``B * P_query``.
    """

    index: torch.Tensor
    coeff: torch.Tensor
    segment: torch.Tensor
    num_segments: int


def patch_pairs(pos: torch.Tensor, weight: torch.Tensor, patch: torch.Tensor, num_patches: int,
                batch: torch.Tensor | None = None, *, pos_query: torch.Tensor | None = None,
                weight_query: torch.Tensor | None = None, patch_query: torch.Tensor | None = None,
                num_patches_query: int | None = None,
                batch_query: torch.Tensor | None = None, layout=None,
                layout_query=None, centroid: torch.Tensor | None = None,
                centroid_query: torch.Tensor | None = None) -> PatchPairs:
    """The :class:`PatchPairs` of a mesh with itself, or of a query mesh with a source mesh.

    Args:
        pos, weight, patch, batch: the source mesh ``[N, d]``, ``[N]``, patch of every node within
            its graph ``[N]``, graph of every node ``[N]`` (optional).
        num_patches: source patches per graph :math:`P`.
        pos_query, weight_query, patch_query, num_patches_query, batch_query: the query mesh
            (default: the source mesh). Centroids are weighted (:func:`patch_centroids`) on
            each mesh.
        layout, layout_query: the batch layouts (:class:`~geoattn.mesh.Layout`) of the source and
            query meshes (default ``None``: read from the batch vectors; given, the graphs are
            sliced without reading the device).
        centroid, centroid_query: the patch centres :math:`c_q` of the source and :math:`c_p` of
            the query side ``[B * P, d]`` (default ``None``: the weighted centroids of each side's
            nodes; given, e.g. the centroids of the exact patch regions, the weights are not used).

    Returns:
        the stencils of every query node and source patch.
    """
    if pos_query is None:
        pos_query, weight_query, patch_query, batch_query = pos, weight, patch, batch
        num_patches_query, layout_query = num_patches, layout
        centroid_query = centroid if centroid_query is None else centroid_query
    num_patches_query = num_patches_query or num_patches
    if layout is not None and layout_query is not None:
        b = max(layout.num_graphs, layout_query.num_graphs)
    else:
        b = num_graphs(batch, batch_query)
    seg = patch if batch is None else batch * num_patches + patch
    seg_query = patch_query if batch_query is None else batch_query * num_patches_query + patch_query
    if centroid is None:
        centroid = patch_centroids(pos, weight, seg, b * num_patches)
    centre = centroid.to(pos.device, pos.dtype).view(b, num_patches, -1)
    if centroid_query is None:
        centroid_query = patch_centroids(pos_query, weight_query, seg_query, b * num_patches_query)
    centre_query = centroid_query.to(pos_query.device, pos_query.dtype)
    k = pos.shape[1] + 1
    index = torch.zeros(len(pos_query), num_patches, k, dtype=torch.long, device=pos.device)
    coeff = torch.zeros(len(pos_query), num_patches, k, dtype=pos.dtype, device=pos.device)
    sources = graph_slices(len(pos), batch, b, counts=None if layout is None else layout.counts)
    queries = graph_slices(len(pos_query), batch_query, b,
                           counts=None if layout_query is None else layout_query.counts)
    last = None  # (source, query, points) of the previous graph: batches often repeat one mesh
    for g, (src, qry) in enumerate(zip(sources, queries)):
        if qry.stop == qry.start:
            continue
        if src.stop == src.start:
            raise ValueError(f"graph {g} has query nodes but no source nodes")
        local = pos_query[qry] - centre_query[seg_query[qry]]  # (n, d)
        points = local[:, None, :] + centre[g][None, :, :]  # (n, P, d)
        if last is not None and _same(last, (pos[src], points)):
            index[qry] = index[last[2]] - last[3].start + src.start
            coeff[qry] = coeff[last[2]]
        else:
            stencil = linear_interpolation(pos[src], points.reshape(-1, pos.shape[1]))
            index[qry] = stencil.index.view(-1, num_patches, k) + src.start
            coeff[qry] = stencil.coeff.view(-1, num_patches, k)
        last = (pos[src], points, qry, src)
    return PatchPairs(index, coeff, seg_query, b * num_patches_query)


def concat_pairs(parts: list[PatchPairs], source_counts) -> PatchPairs:
    """The :class:`PatchPairs` of a batch from those of its graphs, each made alone (graph ``g``'s
    query nodes against its source nodes): source indices shifted by the nodes of the graphs
    before (``source_counts``, nodes per source graph), query patches numbered ``g * P_query + p``.
    Equals :func:`patch_pairs` of the batch, without reading the device."""
    if len(parts) == 1:
        return parts[0]
    segments = [p.num_segments for p in parts]
    return PatchPairs(shifted_cat([p.index for p in parts], source_counts), torch.cat([p.coeff for p in parts]),
                      shifted_cat([p.segment for p in parts], segments), sum(segments))


def shifted_cat(indices, sizes) -> torch.Tensor:
    """The index tensors of the graphs of a batch as one: ``indices[g] + sum(sizes[:g])``
    concatenated (``sizes[g]``: the length of what graph ``g``'s indices point into)."""
    out, offset = [], 0
    for index, size in zip(indices, sizes):
        out.append(index + offset)
        offset += size
    return torch.cat(out)


def _same(last: tuple, now: tuple) -> bool:
    """Whether a graph's source nodes and translated points equal those of the previous graph."""
    return all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(last[:2], now))


def _chunks(pairs: PatchPairs, channels: int) -> list[slice]:
    n, p, k = pairs.index.shape
    size = max(1, CHUNK_ELEMENTS // max(1, p * channels))
    return [slice(lo, min(lo + size, n)) for lo in range(0, n, size)]


def _translated(y: torch.Tensor, index: torch.Tensor, coeff: torch.Tensor) -> torch.Tensor:
    """:math:`y(\\tilde x_i^{(q)})` ``[n, P, C]`` for the stencils ``index, coeff [n, P, k]``: one
    sparse (CSR, ``k`` entries per row) times dense product, whose backward is the transposed
    product (2-3x faster than gathering ``y[index]`` on CPU)."""
    n, p, k = index.shape
    if torch.compiler.is_compiling():  # a traced graph: a gather, which torch.compile fuses
        return (y[index] * coeff.to(y.dtype).unsqueeze(-1)).sum(2)  # quadrature-ok: over a stencil
    rows = torch.arange(0, n * p * k + 1, k, device=index.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        matrix = torch.sparse_csr_tensor(rows, index.reshape(-1), coeff.reshape(-1).to(y.dtype),
                                         size=(n * p, len(y)))
        return (matrix @ y).view(n, p, -1)


def _run(fn, chunked: bool, *args):
    """``fn(*args)``; with several chunks, recomputed in the backward pass when gradients are
    recorded (so that one chunk's translated values exist at a time)."""
    if chunked and torch.is_grad_enabled() and any(a.requires_grad for a in args if torch.is_tensor(a)):
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def _score_chunk(x, y, index, coeff, heads):
    n, c = x.shape
    z = _translated(y, index, coeff).view(n, -1, heads, c // heads)
    # the node sum of the scores is an index_add of weighted values, outside this chunk
    return (x.view(n, 1, heads, c // heads) * z).sum(-1)  # quadrature-ok: over a head's channels


def _mix_chunk(a, y, index, coeff):
    n, p, h = a.shape
    z = _translated(y, index, coeff).view(n, p, h, -1)
    # the softmax-weighted sum over the source patches q (axis 1), not over nodes
    return (a.unsqueeze(-1) * z).sum(1).reshape(n, -1)  # quadrature-ok: over patches


def pair_scores(x: torch.Tensor, y: torch.Tensor, pairs: PatchPairs, num_heads: int = 1) -> torch.Tensor:
    """:math:`s_{pqh} = \\sum_{i \\in p} x_{ih} \\cdot y_h(\\tilde x_i^{(q)})` per head.

    Args:
        x: query-node values ``[N_query, C]`` (weights already applied).
        y: source-node values ``[N, C]``.
        pairs: the stencils.
        num_heads: :math:`H`; channels split into ``H`` heads of ``C / H``.

    Returns:
        ``[num_segments, P, H]``.
    """
    p = pairs.index.shape[1]
    out = x.new_zeros(pairs.num_segments, p, num_heads)
    chunks = _chunks(pairs, x.shape[1])
    for s in chunks:
        part = _run(_score_chunk, len(chunks) > 1, x[s], y, pairs.index[s], pairs.coeff[s], num_heads)
        out = out.index_add(0, pairs.segment[s], part)
    return out


def pair_mix(a: torch.Tensor, y: torch.Tensor, pairs: PatchPairs) -> torch.Tensor:
    """:math:`\\mathrm{out}_{ih} = \\sum_q a_{p(i) qh}\\, y_h(\\tilde x_i^{(q)})` per head.

    Args:
        a: weights ``[num_segments, P, H]``.
        y: source-node values ``[N, C]``.
        pairs: the stencils.

    Returns:
        ``[N_query, C]``.
    """
    chunks = _chunks(pairs, y.shape[1])
    parts = [_run(_mix_chunk, len(chunks) > 1, a[pairs.segment[s]], y, pairs.index[s], pairs.coeff[s])
             for s in chunks]
    return torch.cat(parts) if parts else y.new_zeros(0, y.shape[1])
