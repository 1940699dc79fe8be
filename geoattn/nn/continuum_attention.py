r"""Continuum softmax attention (self and cross) with quadrature weights."""

from __future__ import annotations

import torch
from torch import nn

from .functional import dense_batch, num_graphs, quadrature_attention

__all__ = ["ContinuumAttention", "ContinuumCrossAttention"]


class ContinuumCrossAttention(nn.Module):
    r"""Multi-head continuum cross-attention from *Continuum Attention for Neural Operators*
    (Calvello, Kovachki, Levine, Stuart, `arXiv:2406.06486 <https://arxiv.org/abs/2406.06486>`_).

    Queries live on one discretisation (a function :math:`u` on :math:`D`), keys and values on
    another (:math:`v` on :math:`E`). Each head is the continuum operator

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
        dim (int): query feature size :math:`C` (also the output size).
        source_dim (int, optional): source feature size (default: ``dim``).
        heads (int, optional): number of heads :math:`H`. (default: ``4``)
        dim_head (int, optional): per-head size :math:`d_k` (default: ``dim // heads``).
        dropout (float, optional): dropout on the attention probabilities, training mode only.
            (default: ``0.0``)
        bias (bool, optional): learn biases in the :math:`Q, K, V` projections.
            (default: ``False``)

    Shapes:
        - **input:** ``x_query [Nq, C]``, ``pos_query [Nq, d]`` (unused, kept for the common
          signature), ``x_source [Ns, C_s]``, ``pos_source [Ns, d]`` (unused),
          ``weight_source [Ns]``, ``batch_query [Nq]`` and ``batch_source [Ns]`` (optional,
          sorted PyG batch vectors).
        - **output:** ``[Nq, C]``.
    """

    def __init__(self, dim: int, source_dim: int | None = None, heads: int = 4,
                 dim_head: int | None = None, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        if dim_head is None and dim % heads:
            raise ValueError(f"dim={dim} is not divisible by heads={heads}; pass dim_head")
        self.dim = dim
        self.source_dim = source_dim or dim
        self.heads = heads
        self.dim_head = dim_head or dim // heads
        self.dropout = dropout
        inner = self.heads * self.dim_head
        self.to_q = nn.Linear(dim, inner, bias=bias)
        self.to_k = nn.Linear(self.source_dim, inner, bias=bias)
        self.to_v = nn.Linear(self.source_dim, inner, bias=bias)
        self.to_out = nn.Linear(inner, dim)
        self.reset_parameters()

    def reset_parameters(self):
        for lin in (self.to_q, self.to_k, self.to_v, self.to_out):
            lin.reset_parameters()

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.dim_head).transpose(1, 2)  # (B, H, L, D)

    def forward(self, x_query: torch.Tensor, pos_query: torch.Tensor | None,
                x_source: torch.Tensor, pos_source: torch.Tensor | None,
                weight_source: torch.Tensor, batch_query: torch.Tensor | None = None,
                batch_source: torch.Tensor | None = None) -> torch.Tensor:
        if (batch_query is None) != (batch_source is None):
            raise ValueError("pass both batch_query and batch_source, or neither (one graph); "
                             f"got batch_query={'None' if batch_query is None else 'a tensor'}, "
                             f"batch_source={'None' if batch_source is None else 'a tensor'}")
        b = num_graphs(batch_query, batch_source)
        q = self.to_q(x_query)
        kv = torch.cat([self.to_k(x_source), self.to_v(x_source)], dim=-1)  # (Ns, 2 H D)
        # the query weights are irrelevant; ones give the dense helper a weight column to pad
        q_d, _, _, q_mask = dense_batch(q, None, q.new_ones(q.shape[0]), batch_query, b)
        kv_d, _, w_d, _ = dense_batch(kv, None, weight_source, batch_source, b)
        k_d, v_d = kv_d.chunk(2, dim=-1)  # (B, Ls, H D) each
        out = quadrature_attention(self._split_heads(q_d), self._split_heads(k_d),
                                   self._split_heads(v_d), w_d,
                                   dropout_p=self.dropout if self.training else 0.0)
        out = out.transpose(1, 2).flatten(2)  # (B, Lq, H D)
        return self.to_out(out[q_mask])  # (Nq, C)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, source_dim={self.source_dim}, heads={self.heads}, "
                f"dim_head={self.dim_head}, dropout={self.dropout}")


class ContinuumAttention(ContinuumCrossAttention):
    r"""Multi-head continuum self-attention (Calvello et al., Definition 5), the
    :class:`ContinuumCrossAttention` of a function with itself:

    .. math::
        A(u)(x) = \frac{\int_D \exp(\langle Q u(x), K u(y)\rangle / \sqrt{d_k})\, V u(y)\,dy}
                       {\int_D \exp(\langle Q u(x), K u(s)\rangle / \sqrt{d_k})\,ds}
        \approx \sum_j \operatorname{softmax}_j\!\Big(
            \frac{\langle Q u_i, K u_j\rangle}{\sqrt{d_k}} + \log w_j\Big)\, V u_j .

    Args:
        dim (int): feature size :math:`C`.
        heads (int, optional): number of heads. (default: ``4``)
        dim_head (int, optional): per-head size (default: ``dim // heads``).
        dropout (float, optional): attention dropout, training mode only. (default: ``0.0``)
        bias (bool, optional): learn biases in the :math:`Q, K, V` projections.
            (default: ``False``)

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]`` (unused, kept for the common signature),
          ``weight [N]``, ``batch [N]`` (optional, sorted).
        - **output:** ``[N, C]``.
    """

    def __init__(self, dim: int, heads: int = 4, dim_head: int | None = None,
                 dropout: float = 0.0, bias: bool = False):
        super().__init__(dim, None, heads, dim_head, dropout, bias)

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(x, pos, x, pos, weight, batch, batch)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, heads={self.heads}, dim_head={self.dim_head}, "
                f"dropout={self.dropout}")
