r"""Softmax-free Galerkin-type and Fourier-type attention with quadrature weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .functional import num_graphs, segment_matmul, weighted_gram

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
    :math:`Q, \tilde K, \tilde V` in every head (``pos_dim > 0``), the heads are concatenated,
    and one linear map returns to ``dim`` features. The :math:`Q, K, V` projections start from
    the diagonally dominant initialisation :math:`W = \eta U + \delta I` with :math:`U` Xavier
    uniform. Batches of meshes of different sizes are handled with per-graph sums, without
    padding.

    Args:
        dim (int): feature size :math:`C`.
        heads (int, optional): number of heads :math:`H`. (default: ``4``)
        dim_head (int, optional): per-head size :math:`d_k` (default: ``dim // heads``).
        pos_dim (int, optional): coordinate dimension :math:`d` concatenated to each head;
            ``0`` concatenates nothing and ``pos`` may be ``None``. (default: ``0``)
        layer_norm (bool, optional): the per-head LayerNorm inside the attention; ``False`` gives
            the "regular" variant, to be followed by a post-LayerNorm outside. (default: ``True``)
        eps (float, optional): LayerNorm epsilon. (default: ``1e-5``)
        init_gain (float, optional): Xavier gain :math:`\eta`. (default: ``1e-2``)
        init_diagonal (float, optional): diagonal weight :math:`\delta`. (default: ``1e-2``)

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional).
        - **output:** ``[N, C]``.
    """

    #: the projections normalised per head inside the attention
    normalized: tuple[str, ...] = ("k", "v")

    def __init__(self, dim: int, heads: int = 4, dim_head: int | None = None, pos_dim: int = 0,
                 layer_norm: bool = True, eps: float = 1e-5, init_gain: float = 1e-2,
                 init_diagonal: float = 1e-2):
        super().__init__()
        if dim_head is None and dim % heads:
            raise ValueError(f"dim={dim} is not divisible by heads={heads}; pass dim_head")
        self.dim, self.heads, self.pos_dim = dim, heads, pos_dim
        self.dim_head = dim_head or dim // heads
        self.layer_norm, self.eps = layer_norm, eps
        self.init_gain, self.init_diagonal = init_gain, init_diagonal
        inner = heads * self.dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        shape = (len(self.normalized), heads, self.dim_head) if layer_norm else (0,)
        self.norm_weight = nn.Parameter(torch.empty(shape))
        self.norm_bias = nn.Parameter(torch.empty(shape))
        self.to_out = nn.Linear(heads * (self.dim_head + pos_dim), dim)
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

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        if self.pos_dim and (pos is None or pos.shape[-1] != self.pos_dim):
            got = None if pos is None else tuple(pos.shape)
            raise ValueError(f"pos must have shape [N, {self.pos_dim}], got {got}")
        n, h, d = x.shape[0], self.heads, self.dim_head
        qkv = {name: lin(x).view(n, h, d)  # (N, H, D)
               for name, lin in (("q", self.to_q), ("k", self.to_k), ("v", self.to_v))}
        if self.layer_norm:
            for i, name in enumerate(self.normalized):
                qkv[name] = (F.layer_norm(qkv[name], (d,), eps=self.eps) * self.norm_weight[i]
                             + self.norm_bias[i])
        if self.pos_dim:
            p = pos.to(x.dtype)[:, None, :].expand(n, h, self.pos_dim)  # (N, H, d)
            qkv = {name: torch.cat([p, t], dim=-1) for name, t in qkv.items()}  # (N, H, D + d)
        b = None if batch is None else num_graphs(batch)
        s = weighted_gram(qkv["k"], qkv["v"], weight, batch, b)  # ([B], H, D + d, D + d)
        out = segment_matmul(qkv["q"], s, batch)  # (N, H, D + d)
        return self.to_out(out.reshape(n, -1))  # (N, C)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, heads={self.heads}, dim_head={self.dim_head}, "
                f"pos_dim={self.pos_dim}, layer_norm={self.layer_norm}")


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
