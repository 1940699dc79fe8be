r"""Softmax-free Galerkin-type and Fourier-type attention with quadrature weights."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .functional import num_graphs, query_side, segment_matmul, weighted_gram

if TYPE_CHECKING:
    from ..mesh.mesh import Layout

__all__ = ["FourierAttention", "GalerkinAttention"]


class GalerkinAttention(nn.Module):
    r"""Galerkin-type attention from *Choose a Transformer: Fourier or Galerkin* (Cao,
    `arXiv:2105.14995 <https://arxiv.org/abs/2105.14995>`_), with quadrature weights in place of
    the uniform :math:`1/n`.

    Per head, with :math:`\tilde K, \tilde V` the layer-normalised keys and values, the operator is
    a learnable Petrov-Galerkin projection

    .. math::
        z(x) = Q(x) \int_D \tilde K(y)^\top \tilde V(y)\,dy
        \approx Q_i \Big(\sum_j w_j \tilde K_j^\top \tilde V_j\Big)
        = \big(Q\,(\tilde K^\top \operatorname{diag}(w)\, \tilde V)\big)_i ,

    which costs :math:`O(N d_k^2)` per head. The node coordinates are concatenated in front of
    :math:`Q, \tilde K, \tilde V` in every head (``dim > 0``), the heads are concatenated,
    and one linear map returns to ``channels`` features. The :math:`Q, K, V` projections start from
    the diagonally dominant initialisation :math:`W = \eta U + \delta I` with :math:`U` Xavier
    uniform. Batches of meshes of different sizes are handled with per-graph sums, without
    padding.

    With a query side (``x_query``, ``pos_query``, ``batch_query``) the layer is the cross form
    :math:`z(x) = Q(u(x)) \int_E \tilde K(v(y))^\top \tilde V(v(y))\,dy`: keys and values from
    the source function :math:`v` (``x`` on its mesh, with its weights), queries from the query
    function :math:`u` on another mesh, the output on the query nodes.

    Args:
        channels (int): feature size :math:`C`.
        num_heads (int, optional): number of heads :math:`H`. (default: ``4``)
        head_channels (int, optional): per-head size :math:`d_k`
            (default: ``channels // num_heads``).
        dim (int, optional): spatial dimension :math:`d` of the coordinates concatenated to each
            head; ``0`` concatenates nothing and ``pos`` may be ``None``. (default: ``0``)
        layer_norm (bool, optional): the per-head LayerNorm inside the attention; ``False`` gives
            the "regular" variant, to be followed by a post-LayerNorm outside. (default: ``True``)
        eps (float, optional): LayerNorm epsilon. (default: ``1e-5``)
        init_gain (float, optional): Xavier gain :math:`\eta`. (default: ``1e-2``)
        init_diagonal (float, optional): diagonal weight :math:`\delta`. (default: ``1e-2``)

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional);
          optionally the query side ``x_query [Nq, C]``, ``pos_query [Nq, d]``,
          ``batch_query [Nq]`` (give both batch vectors or neither); optionally the batch
          layouts ``layout`` and ``layout_query`` (keywords, :class:`~geoattn.mesh.Layout`:
          ``mesh.layout`` of the source and query meshes; without ``x_query`` the source's serves
          both): with them the per-graph sums take the nodes per graph from the layouts and never
          read the batch vectors back to the host.
        - **output:** ``[N, C]``, or ``[Nq, C]`` with a query side.
    """

    #: the projections normalised per head inside the attention
    normalized: tuple[str, ...] = ("k", "v")

    def __init__(self, channels: int, num_heads: int = 4, head_channels: int | None = None,
                 dim: int = 0, layer_norm: bool = True, eps: float = 1e-5, init_gain: float = 1e-2,
                 init_diagonal: float = 1e-2):
        super().__init__()
        if head_channels is None and channels % num_heads:
            raise ValueError(f"channels={channels} is not divisible by num_heads={num_heads}; "
                             "pass head_channels")
        self.channels, self.num_heads, self.dim = channels, num_heads, dim
        self.head_channels = head_channels or channels // num_heads
        self.layer_norm, self.eps = layer_norm, eps
        self.init_gain, self.init_diagonal = init_gain, init_diagonal
        inner = num_heads * self.head_channels
        self.to_q = nn.Linear(channels, inner)
        self.to_k = nn.Linear(channels, inner)
        self.to_v = nn.Linear(channels, inner)
        shape = (len(self.normalized), num_heads, self.head_channels) if layer_norm else (0,)
        self.norm_weight = nn.Parameter(torch.empty(shape))
        self.norm_bias = nn.Parameter(torch.empty(shape))
        self.to_out = nn.Linear(num_heads * (self.head_channels + dim), channels)
        self.reset_parameters()

    def reset_parameters(self):
        for lin in (self.to_q, self.to_k, self.to_v):
            nn.init.xavier_uniform_(lin.weight, gain=self.init_gain)
            with torch.no_grad():
                lin.weight.add_(self.init_diagonal * torch.eye(*lin.weight.shape, dtype=lin.weight.dtype,
                                                               device=lin.weight.device))
            nn.init.zeros_(lin.bias)
        nn.init.ones_(self.norm_weight)
        nn.init.zeros_(self.norm_bias)
        self.to_out.reset_parameters()

    def _heads(self, x: torch.Tensor, pos: torch.Tensor | None,
               names: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """The projections ``names`` of ``x`` per head ``[N, H, D (+ d)]``, normalised where the
        variant says so, with the coordinates in front."""
        if self.dim and (pos is None or pos.shape[-1] != self.dim):
            got = None if pos is None else tuple(pos.shape)
            raise ValueError(f"pos must have shape [N, {self.dim}], got {got}")
        n, h, d = x.shape[0], self.num_heads, self.head_channels
        out = {}
        for name in names:
            t = getattr(self, f"to_{name}")(x).view(n, h, d)  # (N, H, D)
            if self.layer_norm and name in self.normalized:
                i = self.normalized.index(name)
                t = F.layer_norm(t, (d,), eps=self.eps) * self.norm_weight[i] + self.norm_bias[i]
            if self.dim:
                p = pos.to(x.dtype)[:, None, :].expand(n, h, self.dim)  # (N, H, d)
                t = torch.cat([p, t], dim=-1)  # (N, H, D + d)
            out[name] = t
        return out

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, x_query: torch.Tensor | None = None,
                pos_query: torch.Tensor | None = None,
                batch_query: torch.Tensor | None = None, layout: Layout | None = None,
                layout_query: Layout | None = None) -> torch.Tensor:
        if x_query is None:
            layout_query = layout
        x_query, pos_query, batch_query = query_side(x, pos, batch, x_query, pos_query, batch_query)
        kv = self._heads(x, pos, ("k", "v"))
        q = self._heads(x_query, pos_query, ("q",))["q"]
        counts = counts_q = None
        if batch is None:
            b = None
        elif layout is not None and layout_query is not None:  # no host read
            b = max(layout.num_graphs, layout_query.num_graphs)
            counts, counts_q = layout.counts, layout_query.counts
        else:
            b = num_graphs(batch, batch_query)
        s = weighted_gram(kv["k"], kv["v"], weight, batch, b, counts=counts)  # ([B], H, D + d, D + d)
        out = segment_matmul(q, s, batch_query, counts=counts_q)  # (Nq, H, D + d)
        return self.to_out(out.reshape(q.shape[0], -1))  # (Nq, C)

    def extra_repr(self) -> str:
        return (f"{self.channels}, num_heads={self.num_heads}, head_channels={self.head_channels}, "
                f"dim={self.dim}, layer_norm={self.layer_norm}")


class FourierAttention(GalerkinAttention):
    r"""Fourier-type attention (Cao, eq. 5) with quadrature weights: a learnable kernel integral

    .. math::
        z(x) = \int_D \big(\tilde Q(x) \cdot \tilde K(y)\big)\, V(y)\,dy
        \approx \big((\tilde Q \tilde K^\top \operatorname{diag}(w))\, V\big)_i ,

    with LayerNorm on :math:`Q` and :math:`K` instead of :math:`K` and :math:`V`. The product is
    evaluated as :math:`\tilde Q (\tilde K^\top \operatorname{diag}(w) V)`, which is the same
    number in exact arithmetic and costs :math:`O(N d_k^2)` instead of :math:`O(N^2 d_k)`. As in
    the paper's formula there is no :math:`1/\sqrt{d_k}` factor. Arguments and shapes are those
    of :class:`GalerkinAttention`; Cao's recommended Xavier gain for this variant is ``1e-3``.
    """

    normalized = ("q", "k")
