r"""Weighted integrals shared by the attention and integral-operator layers.

Every layer in :mod:`geoattn.nn` that sums over nodes does it through these helpers, so the
quadrature :math:`\int_D f\,dy \approx \sum_j w_j f_j` is written once:

- :func:`dense_batch` pads flat, batched node tensors to ``[B, L, ...]``; padded nodes get
  weight 0 and therefore drop out of every quadrature.
- :func:`log_weight_bias` turns weights into the additive attention bias :math:`\log w_j`
  (:math:`-\infty` for :math:`w_j = 0`).
- :func:`quadrature_attention` is softmax attention with the integral normaliser,
  :math:`\sum_j w_j e^{s_{ij}} v_j / \sum_l w_l e^{s_{il}}`, through
  :func:`torch.nn.functional.scaled_dot_product_attention` (fused kernels, no :math:`N \times N`
  matrix on the memory-efficient paths).
- :func:`num_graphs` and :func:`graph_slices` are the batch bookkeeping every layer shares: how
  many graphs a batch vector describes (one rule, also for empty batches) and the node range of
  each graph. A layer called by a model gets the batch's :class:`~geoattn.mesh.Layout` (nodes per
  graph, plain integers computed once by the :class:`~geoattn.mesh.Mesh`) as ``layout=``; the
  helpers then take its ``counts`` and never read the batch vector back to the host, which keeps
  a :func:`torch.compile` graph whole on a batch of meshes.
- :func:`weighted_gram` is the matrix-valued analogue of :func:`geoattn.mesh.integrate`,
  :math:`\int_D a(y)^\top b(y)\,dy \approx \sum_j w_j a_j^\top b_j` per graph, computed with one
  matrix product per graph (segment sums, no padding); :func:`segment_matmul` applies the per-graph
  result back to the nodes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch_geometric.utils import to_dense_batch

__all__ = [
    "DenseBatch",
    "dense_batch",
    "graph_slices",
    "log_weight_bias",
    "num_graphs",
    "quadrature_attention",
    "query_side",
    "segment_matmul",
    "unpad",
    "weighted_gram",
]


class DenseBatch(NamedTuple):
    """Padded view of a flat batch: ``x [B, L, C]``, ``pos [B, L, d]`` (or ``None``),
    ``weight [B, L]`` (0 on padding) and ``mask [B, L]`` (``True`` on real nodes)."""

    x: torch.Tensor
    pos: torch.Tensor | None
    weight: torch.Tensor
    mask: torch.Tensor


def num_graphs(*batches: torch.Tensor | None) -> int:
    """Number of graphs ``B`` described by one or more batch vectors.

    The one rule used everywhere in geoattn: a batch vector ``[N]`` holds the graph index of each
    node, so it describes ``batch.max() + 1`` graphs; ``None`` means one graph, and so does a
    batch vector with no nodes (a graph may be empty, a batch never has zero graphs). With
    several vectors (the source and query sides of a cross-operator) the count is the largest.

    Args:
        *batches: graph index of each node ``[N]``, or ``None``.

    Returns:
        ``B >= 1``.
    """
    sizes = [int(b.max()) + 1 for b in batches if b is not None and b.numel() > 0]
    return max(sizes, default=1)


def graph_slices(num_nodes: int, batch: torch.Tensor | None = None,
                 num_graphs: int | None = None, counts=None) -> list[slice]:
    """The node range of every graph of a PyG batch (its nodes are contiguous and sorted).

    Args:
        num_nodes: number of nodes ``N``.
        batch: graph index of each node ``[N]``, sorted (``None``: one graph).
        num_graphs: number of graphs ``B`` (default: :func:`num_graphs` of ``batch``); trailing
            graphs without nodes get empty slices.
        counts: nodes per graph (a :class:`~geoattn.mesh.Layout`'s ``counts``): no host read.

    Returns:
        ``B`` slices, graph ``g`` being ``x[slices[g]]``.
    """
    if counts is not None:
        counts = list(counts) + [0] * ((num_graphs or 0) - len(counts))
        ends = [sum(counts[:g + 1]) for g in range(len(counts))]
        return [slice(end - n, end) for n, end in zip(counts, ends)]
    if batch is None:
        return [slice(0, num_nodes)]
    counts = torch.bincount(batch, minlength=_count_graphs(batch) if num_graphs is None else num_graphs)
    ends = counts.cumsum(0).tolist()
    return [slice(end - n, end) for n, end in zip(counts.tolist(), ends)]


_count_graphs = num_graphs  # for the helpers whose argument of that name shadows it


def query_side(x: torch.Tensor, pos: torch.Tensor | None, batch: torch.Tensor | None,
               x_query: torch.Tensor | None, pos_query: torch.Tensor | None,
               batch_query: torch.Tensor | None):
    """The query side ``(x_query, pos_query, batch_query)`` of a layer call: the source side itself
    without ``x_query`` (self-operator), else the given one, after checking that the keywords fit
    together (no query nodes or batch without query features; both batch vectors or neither)."""
    if x_query is None:
        if pos_query is not None or batch_query is not None:
            raise ValueError("pos_query/batch_query without x_query: pass the query features too")
        return x, pos, batch
    if (batch_query is None) != (batch is None):
        raise ValueError("pass both batch and batch_query, or neither (one graph); "
                         f"got batch={'None' if batch is None else 'a tensor'}, "
                         f"batch_query={'None' if batch_query is None else 'a tensor'}")
    return x_query, pos_query, batch_query


def dense_batch(x: torch.Tensor, pos: torch.Tensor | None, weight: torch.Tensor,
                batch: torch.Tensor | None = None, batch_size: int | None = None,
                max_count: int | None = None) -> DenseBatch:
    """Pad flat node tensors of a PyG batch to dense ``[B, L, ...]`` tensors.

    Padded nodes get weight 0, so they contribute nothing to any quadrature built on the result.

    Args:
        x: node features ``[N, C]``.
        pos: node coordinates ``[N, d]`` or ``None``.
        weight: quadrature weights ``[N]``.
        batch: graph index of each node ``[N]``, sorted as PyG batches are (``None``: one graph).
        batch_size: number of graphs ``B`` (default: from ``batch``); needed when the last graphs
            of a cross-operator have no nodes on this side.
        max_count: nodes of the largest graph ``L`` (default: from ``batch``); with ``batch_size``
            no value is read back from the device.

    Returns:
        :class:`DenseBatch` ``(x [B, L, C], pos [B, L, d] | None, weight [B, L], mask [B, L])``.
    """
    if weight.dim() != 1 or weight.shape[0] != x.shape[0]:
        raise ValueError(f"weight must have shape [N] = [{x.shape[0]}], got {tuple(weight.shape)}")
    if batch is None and batch_size in (None, 1):  # one graph: no padding, no data-dependent sizes
        mask = torch.ones(1, x.shape[0], dtype=torch.bool, device=x.device)
        return DenseBatch(x[None], None if pos is None else pos[None], weight[None], mask)
    if batch is None:
        batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    sizes = dict(batch_size=batch_size, max_num_nodes=max_count)
    x_d, mask = to_dense_batch(x, batch, **sizes)  # (B, L, C), (B, L)
    w_d, _ = to_dense_batch(weight, batch, fill_value=0.0, **sizes)  # (B, L)
    pos_d = None if pos is None else to_dense_batch(pos, batch, **sizes)[0]
    return DenseBatch(x_d, pos_d, w_d, mask)


def unpad(dense: torch.Tensor, mask: torch.Tensor, batch: torch.Tensor | None = None,
          counts=None) -> torch.Tensor:
    """The flat node tensor ``[N, ...]`` of a dense ``[B, L, ...]`` result of :func:`dense_batch`:
    ``dense[mask]``, or, for one graph (``batch=None``), its rows without a boolean index (whose
    data-dependent size would break a :func:`torch.compile` graph), or, given the nodes per
    graph ``counts``, the rows picked by an index made from them (no data-dependent size)."""
    if batch is None:
        return dense.flatten(0, 1)
    if counts is None:
        return dense[mask]
    length = dense.shape[1]
    index = torch.cat([torch.arange(c, device=dense.device) + g * length for g, c in enumerate(counts)])
    return dense.flatten(0, 1)[index]


def log_weight_bias(weight: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    r"""The additive attention bias :math:`\log w_j`, with :math:`-\infty` where :math:`w_j = 0`.

    Adding it to the scores turns the discrete softmax into the quadrature of the continuum
    normaliser: :math:`\operatorname{softmax}_j(s_{ij} + \log w_j) =
    w_j e^{s_{ij}} / \sum_l w_l e^{s_{il}}`. Uniform weights add a constant, which softmax ignores.

    Args:
        weight: non-negative weights ``[..., L]`` (padding: 0).
        dtype: dtype of the result (default: ``weight.dtype``).

    Returns:
        ``[..., L]``, same shape as ``weight``.
    """
    positive = weight > 0
    # the clamp keeps log and its gradient finite where the bias is replaced by -inf
    bias = torch.where(positive, torch.log(weight.clamp_min(torch.finfo(weight.dtype).tiny)),
                       torch.full_like(weight, float("-inf")))
    return bias.to(dtype or weight.dtype)


def memory_of(device: torch.device) -> int:
    """Bytes of memory on ``device``: the GPU's total memory, or the machine's physical memory
    (0 where it cannot be read: no check is then made)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    if device.type != "cpu":
        return 0
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_dense_fits(q: torch.Tensor, k: torch.Tensor) -> None:
    """Refuse, before it is built, a dense attention whose score matrix ``[B, H, Lq, Lk]`` alone
    would exceed the device's whole memory (the unfused kernel materialises it; such a call would
    otherwise end in an allocation failure, or the process killed by the system), with
    :class:`~geoattn.errors.TooLargeError` naming its size and the ways to shrink it. Skipped
    while :func:`torch.compile` traces or :mod:`torch.export` exports."""
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return
    b, h, lq, _ = q.shape
    need = b * h * lq * k.shape[-2] * q.element_size()
    have = memory_of(q.device)
    if have and need > have:
        from ..errors import TooLargeError

        raise TooLargeError(
            f"dense attention over {k.shape[-2]} nodes ({b} graph(s) x {h} head(s) x {lq} x {k.shape[-2]} scores) "
            f"needs {_size(need)} for its score matrix alone, more than the {_size(have)} of "
            f"{q.device}: use smaller batches (batch_size=), fewer nodes, fewer heads, or a model whose "
            "attention is linear in the nodes (galerkin, slice, vit/fano on patches)")


def quadrature_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weight: torch.Tensor,
                         dropout_p: float = 0.0, scale: float | None = None) -> torch.Tensor:
    r"""Softmax attention as a quadrature of the continuum attention integral.

    .. math::
        \mathrm{out}_i = \frac{\sum_j w_j \exp(s_{ij}) v_j}{\sum_l w_l \exp(s_{il})}, \qquad
        s_{ij} = \frac{\langle q_i, k_j \rangle}{\sqrt{d_k}},

    the discretisation of
    :math:`\int_E \exp(s(x,y)) v(y)\,dy / \int_E \exp(s(x,y'))\,dy'`. A graph whose source weights
    are all zero (an empty integral) gives output 0 instead of NaN.

    Args:
        q: queries ``[B, H, Lq, D]``.
        k: keys ``[B, H, Lk, D]``.
        v: values ``[B, H, Lk, Dv]``.
        weight: source weights ``[B, Lk]`` (0 on padding).
        dropout_p: dropout on the attention probabilities (pass 0 in eval mode).
        scale: score scale (default :math:`1/\sqrt{D}`).

    Returns:
        ``[B, H, Lq, Dv]``.
    """
    check_dense_fits(q, k)
    has_mass = (weight > 0).any(dim=-1)  # (B,)
    bias = log_weight_bias(weight, dtype=q.dtype)
    bias = torch.where(has_mass[:, None], bias, torch.zeros_like(bias))
    bias = bias[:, None, None, :]  # (B, 1, 1, Lk), broadcast over heads and queries
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
    return out * has_mass.to(out.dtype)[:, None, None, None]  # no host sync: compiles in one graph


def _segments(batch: torch.Tensor | None, n: int, num_graphs: int | None, counts=None):
    """Node order sorting ``batch`` and the node count of each graph (given ``counts``, the
    batch is sorted: a :class:`~geoattn.mesh.Mesh` checks it)."""
    if batch is None:
        return None, [n]
    if counts is not None:
        return None, list(counts) + [0] * ((num_graphs or 0) - len(counts))
    counts = [s.stop - s.start for s in graph_slices(n, batch, num_graphs)]
    sorted_already = n < 2 or bool((batch[1:] >= batch[:-1]).all())
    return (None if sorted_already else torch.argsort(batch, stable=True)), counts


def weighted_gram(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor,
                  batch: torch.Tensor | None = None,
                  num_graphs: int | None = None, counts=None) -> torch.Tensor:
    r"""Per-graph weighted Gram matrix :math:`\sum_j w_j a_j^\top b_j \approx \int a^\top b\,dy`.

    The matrix-valued form of :func:`geoattn.mesh.integrate`: it equals
    ``integrate(a[..., :, None] * b[..., None, :], weight, batch)`` but never forms the
    per-node outer products; each graph costs one matrix product over its own nodes.

    Args:
        a: ``[N, *, Ca]``.
        b: ``[N, *, Cb]`` (same middle dimensions ``*`` as ``a``, e.g. heads).
        weight: quadrature weights ``[N]``.
        batch: graph index of each node ``[N]`` (``None``: one graph).
        num_graphs: number of graphs ``B`` (default: ``batch.max() + 1``).
        counts: nodes per graph, from the batch's :class:`~geoattn.mesh.Layout` (no host read).

    Returns:
        ``[*, Ca, Cb]`` without ``batch``; ``[B, *, Ca, Cb]`` with it.
    """
    wa = a * weight.view(-1, *([1] * (a.dim() - 1))).to(a.dtype)
    if batch is None:
        return torch.einsum("n...i,n...j->...ij", wa, b)
    order, counts = _segments(batch, a.shape[0], num_graphs, counts)
    if order is not None:
        wa, b = wa[order], b[order]
    if len(counts) == 1 or len(set(counts)) == 1:  # graphs of one size (one graph: N may be symbolic)
        g, n = len(counts), counts[0]
        return torch.einsum("gn...i,gn...j->g...ij", wa.reshape(g, n, *wa.shape[1:]),
                            b.reshape(g, n, *b.shape[1:]))
    grams = [torch.einsum("n...i,n...j->...ij", wa_g, b_g)
             for wa_g, b_g in zip(wa.split(counts), b.split(counts))]
    return torch.stack(grams)  # (B, *, Ca, Cb)


def segment_matmul(q: torch.Tensor, s: torch.Tensor,
                   batch: torch.Tensor | None = None, counts=None) -> torch.Tensor:
    """Multiply each node's row vector by the matrix of its graph: ``out_i = q_i @ s[batch_i]``.

    Args:
        q: ``[N, *, Ca]``.
        s: ``[*, Ca, Cb]`` without ``batch``; ``[B, *, Ca, Cb]`` with it.
        batch: graph index of each node ``[N]`` (``None``: one graph).
        counts: nodes per graph, from the batch's :class:`~geoattn.mesh.Layout` (no host read).

    Returns:
        ``[N, *, Cb]``.
    """
    if batch is None:
        return torch.einsum("n...i,...ij->n...j", q, s)
    order, counts = _segments(batch, q.shape[0], s.shape[0], counts)
    q_sorted = q if order is None else q[order]
    if len(counts) == 1 or len(set(counts)) == 1:  # graphs of one size (one graph: N may be symbolic)
        q_graphs = q_sorted.reshape(len(counts), counts[0], *q.shape[1:])
        out = torch.einsum("gn...i,g...ij->gn...j", q_graphs, s).flatten(0, 1)
    else:
        out = torch.cat([torch.einsum("n...i,...ij->n...j", q_g, s_g)
                         for q_g, s_g in zip(q_sorted.split(counts), s)])  # (N, *, Cb), sorted order
    if order is None:
        return out
    return torch.empty_like(out).index_copy_(0, order, out)

