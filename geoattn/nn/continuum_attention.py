r"""Continuum softmax attention with quadrature weights, self and cross in one layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from .functional import dense_batch, num_graphs, quadrature_attention, query_side, unpad

if TYPE_CHECKING:
    from ..mesh.mesh import Layout

__all__ = ["ContinuumAttention"]


class ContinuumAttention(nn.Module):
    r"""Multi-head continuum attention from *Continuum Attention for Neural Operators*
    (Calvello, Kovachki, Levine, Stuart, `arXiv:2406.06486 <https://arxiv.org/abs/2406.06486>`_,
    Definitions 5 and 7).

    Keys and values come from the source function :math:`v` on :math:`E` (``x`` with its nodes
    ``pos`` and weights ``weight``), queries from the query function :math:`u` on :math:`D`
    (``x_query``; by default :math:`u = v`, which is self-attention). Each head is the continuum
    operator

    .. math::
        C(u, v)(x) = \frac{\int_E \exp(\langle Q u(x), K v(y)\rangle / \sqrt{d_k})\, V v(y)\,dy}
                          {\int_E \exp(\langle Q u(x), K v(s)\rangle / \sqrt{d_k})\,ds},

    discretised with the source quadrature weights :math:`w_j`, which enter the softmax as the
    additive bias :math:`\log w_j`:

    .. math::
        C(u, v)(x_i) \approx \sum_j \operatorname{softmax}_j\!\Big(
            \frac{\langle Q u_i, K v_j\rangle}{\sqrt{d_k}} + \log w_j\Big)\, V v_j .

    The heads are concatenated and projected back by :math:`W_O`. Uniform weights give standard
    softmax attention exactly; padding and nodes of weight 0 take no part. The attention runs
    through :func:`torch.nn.functional.scaled_dot_product_attention`.

    Args:
        channels (int): feature size :math:`C` of the source ``x`` (and of the output of
            self-attention).
        num_heads (int, optional): number of heads :math:`H`. (default: ``4``)
        head_channels (int, optional): per-head size :math:`d_k`
            (default: ``channels // num_heads``).
        dropout (float, optional): dropout on the attention probabilities, training mode only.
            (default: ``0.0``)
        bias (bool, optional): learn biases in the :math:`Q, K, V` projections.
            (default: ``False``)
        query_channels (int, optional): feature size of ``x_query``, and of the output of
            cross-attention (default: ``channels``).

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]`` (unused, kept for the common signature),
          ``weight [N]``, ``batch [N]`` (optional, sorted); for cross-attention the query side
          ``x_query [Nq, C_q]``, ``pos_query [Nq, d]`` (unused) and ``batch_query [Nq]`` (give
          both batch vectors or neither); optionally the batch layouts ``layout`` and
          ``layout_query`` (keywords, :class:`~geoattn.mesh.Layout`: ``mesh.layout`` of the
          source and query meshes; without ``x_query`` the source's serves both): with them the
          layer pads and unpads without reading the batch vectors back to the host, so a
          :func:`torch.compile` graph stays whole on a batch of meshes.
        - **output:** ``[N, C]``, or ``[Nq, C_q]`` with a query side.
    """

    def __init__(self, channels: int, num_heads: int = 4, head_channels: int | None = None,
                 dropout: float = 0.0, bias: bool = False, query_channels: int | None = None):
        super().__init__()
        if head_channels is None and channels % num_heads:
            raise ValueError(f"channels={channels} is not divisible by num_heads={num_heads}; "
                             "pass head_channels")
        self.channels = channels
        self.query_channels = query_channels or channels
        self.num_heads = num_heads
        self.head_channels = head_channels or channels // num_heads
        self.dropout = dropout
        inner = self.num_heads * self.head_channels
        self.to_q = nn.Linear(self.query_channels, inner, bias=bias)
        self.to_k = nn.Linear(channels, inner, bias=bias)
        self.to_v = nn.Linear(channels, inner, bias=bias)
        self.to_out = nn.Linear(inner, self.query_channels)
        self.reset_parameters()

    def reset_parameters(self):
        for lin in (self.to_q, self.to_k, self.to_v, self.to_out):
            lin.reset_parameters()

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_channels).transpose(1, 2)  # (B, H, L, D)

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, x_query: torch.Tensor | None = None,
                pos_query: torch.Tensor | None = None,
                batch_query: torch.Tensor | None = None, layout: Layout | None = None,
                layout_query: Layout | None = None) -> torch.Tensor:
        if x_query is None and self.query_channels != self.channels:
            raise ValueError(f"self-attention needs query_channels == channels; this layer reads "
                             f"{self.query_channels}-channel queries: pass x_query")
        if x_query is None:
            layout_query = layout
        x_query, _, batch_query = query_side(x, pos, batch, x_query, pos_query, batch_query)
        if layout is not None and layout_query is not None:  # sizes from the layouts: no host read
            b = max(layout.num_graphs, layout_query.num_graphs)
            sizes, sizes_q = layout.max_count, layout_query.max_count
            counts_q = layout_query.counts
        else:
            b = num_graphs(batch, batch_query)
            sizes = sizes_q = counts_q = None
        q = self.to_q(x_query)
        kv = torch.cat([self.to_k(x), self.to_v(x)], dim=-1)  # (N, 2 H D)
        # the query weights are irrelevant; ones give the dense helper a weight column to pad
        q_d, _, _, q_mask = dense_batch(q, None, q.new_ones(q.shape[0]), batch_query, b, max_count=sizes_q)
        kv_d, _, w_d, _ = dense_batch(kv, None, weight, batch, b, max_count=sizes)
        k_d, v_d = kv_d.chunk(2, dim=-1)  # (B, L, H D) each
        out = quadrature_attention(self._split_heads(q_d), self._split_heads(k_d),
                                   self._split_heads(v_d), w_d,
                                   dropout_p=self.dropout if self.training else 0.0)
        out = out.transpose(1, 2).flatten(2)  # (B, Lq, H D)
        return self.to_out(unpad(out, q_mask, batch_query, counts=counts_q))  # (Nq, C_q)

    def extra_repr(self) -> str:
        query = "" if self.query_channels == self.channels else f", query_channels={self.query_channels}"
        return (f"{self.channels}, num_heads={self.num_heads}, head_channels={self.head_channels}, "
                f"dropout={self.dropout}{query}")
