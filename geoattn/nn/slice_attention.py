r"""Quadrature-weighted slice ("physics") attention: Transolver's idea as a continuum operator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from .functional import dense_batch, num_graphs, unpad

if TYPE_CHECKING:
    from ..mesh.mesh import Layout

__all__ = ["SliceAttention"]


class SliceAttention(nn.Module):
    r"""Multi-head slice attention with quadrature weights, after the Physics-Attention of
    Transolver (Wu et al., *Transolver: A Fast Transformer Solver for PDEs on General
    Geometries*, `ICML 2024 <https://arxiv.org/abs/2402.02366>`_), written as a continuum operator.

    Each head assigns every point a soft membership in :math:`G` slices,
    :math:`s_g(x) = \operatorname{softmax}_g\big(W_s\, \tilde u(x) / \tau\big)` with
    :math:`\tilde u = W_x u`, summarises each slice by an integral over the domain,

    .. math::
        z_g = \frac{\int_D s_g(x)\, f(x)\,dx}{\int_D s_g(x)\,dx + \epsilon\,\bar w}
            \approx \frac{\sum_i w_i\, s_g(x_i)\, f_i}{\sum_i w_i\, s_g(x_i) + \epsilon\,\bar w},
        \qquad f = W_f u,

    lets the :math:`G` slice tokens attend to each other
    (:math:`z' = \operatorname{softmax}(Q z (K z)^\top / \sqrt{d_k})\, V z`), and spreads them back
    to the points, :math:`\mathrm{out}(x) = W_O \sum_g s_g(x)\, z'_g`. Here :math:`\bar w` is the
    mean weight of the nodes of positive weight of the graph, so the regulariser vanishes as the
    mesh is refined (the tokens converge to the continuum ratio of integrals) and, with uniform
    weights :math:`w_i = |D|/N`, the tokens are exactly Transolver's
    :math:`\sum_i s_{ig} f_i / (\sum_i s_{ig} + \epsilon)`. Everything else is pointwise, so the
    cost is :math:`O(N G C)`: linear in the number of nodes, with no :math:`N \times N` matrix.
    The slice memberships depend only on the local value, so the layer is a discretisation of one
    operator on every mesh of the domain.

    Args:
        channels (int): feature size :math:`C`.
        num_heads (int, optional): number of heads :math:`H`. (default: ``4``)
        head_channels (int, optional): per-head size :math:`d_k`
            (default: ``channels // num_heads``).
        num_slices (int, optional): slices :math:`G` per head. (default: ``32``)
        dropout (float, optional): dropout on the slice-attention probabilities. (default: ``0.0``)
        eps (float, optional): :math:`\epsilon`, in units of the mean weight. (default: ``1e-5``,
            Transolver's)

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]`` (unused, kept for the common signature),
          ``weight [N]``, ``batch [N]`` (optional, sorted); optionally the batch layout
          ``layout`` (keyword, :class:`~geoattn.mesh.Layout`, ``mesh.layout``): with it the layer
          pads and unpads without reading ``batch`` back to the host.
        - **output:** ``[N, C]``.
    """

    def __init__(self, channels: int, num_heads: int = 4, head_channels: int | None = None,
                 num_slices: int = 32, dropout: float = 0.0, eps: float = 1e-5):
        super().__init__()
        if head_channels is None and channels % num_heads:
            raise ValueError(f"channels={channels} is not divisible by num_heads={num_heads}; "
                             "pass head_channels")
        if num_slices < 1:
            raise ValueError(f"num_slices must be at least 1, got {num_slices}")
        self.channels, self.num_heads, self.num_slices = channels, num_heads, num_slices
        self.head_channels = head_channels or channels // num_heads
        self.dropout, self.eps = dropout, eps
        inner = num_heads * self.head_channels
        self.to_x = nn.Linear(channels, inner)
        self.to_f = nn.Linear(channels, inner)
        self.to_slice = nn.Linear(self.head_channels, num_slices)
        self.temperature = nn.Parameter(torch.empty(num_heads))
        self.to_q = nn.Linear(self.head_channels, self.head_channels, bias=False)
        self.to_k = nn.Linear(self.head_channels, self.head_channels, bias=False)
        self.to_v = nn.Linear(self.head_channels, self.head_channels, bias=False)
        self.to_out = nn.Linear(inner, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.to_x, self.to_f, self.to_slice, self.to_q, self.to_k, self.to_v, self.to_out):
            lin.reset_parameters()
        nn.init.orthogonal_(self.to_slice.weight)  # as Transolver: distinct slices from the start
        nn.init.constant_(self.temperature, 0.5)

    def slices(self, x: torch.Tensor) -> torch.Tensor:
        """Slice memberships :math:`s_g(x_i)` ``[N, H, G]`` (each row sums to 1)."""
        n = x.shape[0]
        u = self.to_x(x).view(n, self.num_heads, self.head_channels)  # (N, H, D)
        return torch.softmax(self.to_slice(u) / self.temperature.view(1, -1, 1), dim=-1)

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, layout: Layout | None = None) -> torch.Tensor:
        n, h, dk = x.shape[0], self.num_heads, self.head_channels
        s = self.slices(x)  # (N, H, G)
        f = self.to_f(x).view(n, h, dk)  # (N, H, D)
        if layout is not None:  # sizes from the layout: no host read
            b, length, counts = layout.num_graphs, layout.max_count, layout.counts
        else:
            b, length, counts = num_graphs(batch), None, None
        # padded per-graph view: padding has weight 0 and drops out of both integrals
        s_d, _, w_d, mask = dense_batch(s.flatten(1), None, weight, batch, b, max_count=length)  # (B, L, H G)
        f_d = dense_batch(f.flatten(1), None, weight, batch, b, max_count=length).x  # (B, L, H D)
        s_d = s_d.view(b, -1, h, self.num_slices)
        f_d = f_d.view(b, -1, h, dk)
        w_d = w_d.to(x.dtype)
        mass = torch.einsum("bl,blhg->bhg", w_d, s_d)  # (B, H, G) = ∫ s_g
        count = (w_d > 0).sum(1).clamp_min(1).to(x.dtype)  # nodes of positive weight per graph
        mean_w = w_d.sum(1) / count  # (B,), unchanged by padding and zero-weight nodes
        tokens = torch.einsum("bl,blhg,blhd->bhgd", w_d, s_d, f_d)  # ∫ s_g f
        tokens = tokens / (mass + self.eps * mean_w[:, None, None])[..., None]  # (B, H, G, D)
        attended = nn.functional.scaled_dot_product_attention(
            self.to_q(tokens), self.to_k(tokens), self.to_v(tokens),
            dropout_p=self.dropout if self.training else 0.0)  # (B, H, G, D)
        out = torch.einsum("blhg,bhgd->blhd", s_d, attended)  # (B, L, H, D)
        return self.to_out(unpad(out, mask, batch, counts=counts).reshape(n, h * dk))

    def extra_repr(self) -> str:
        return (f"{self.channels}, num_heads={self.num_heads}, head_channels={self.head_channels}, "
                f"num_slices={self.num_slices}")
