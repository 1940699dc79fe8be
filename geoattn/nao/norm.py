r"""The NAO authors' continuous normaliser of a hidden layer's update (their radial-kernel code)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TokenNorm"]


class PointNetwork(nn.Module):
    r"""The coordinate MLP of one point, :math:`s(x)`: ``Linear(dim, h1) - LeakyReLU - Linear(h1, h2) -
    LeakyReLU - Linear(h2, 1)`` on :math:`x / s`, ``[..., dim] -> [..., 1]``, starting as the
    constant ``start`` (its last layer's weights zero)."""

    def __init__(self, dim: int, hidden: tuple[int, int] = (32, 64), coord_scale: float = 1.0,
                 start: float = 0.0):
        super().__init__()
        self.coord_scale = coord_scale
        self.net = nn.Sequential(nn.Linear(dim, hidden[0]), nn.LeakyReLU(), nn.Linear(hidden[0], hidden[1]),
                                 nn.LeakyReLU(), nn.Linear(hidden[1], 1))
        with torch.no_grad():
            self.net[-1].weight.zero_()
            self.net[-1].bias.fill_(start)

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        return self.net(pos / self.coord_scale)


class TokenNorm(nn.Module):
    r"""Centre a hidden layer's update over the tokens, then scale and shift it by functions of
    the position: the normaliser of the NAO authors' radial-kernel code, on any mesh.

    For the update :math:`M = X^{(l)} - X^{(l-1)}` of a :class:`~geoattn.nao.NonlocalAttention`
    layer the normalised update is

    .. math::
        \hat M(x) = b(x) + \big(M(x) - \bar M\big)\, s(x) \quad\text{(u-tokens)}, \qquad
        \hat M = \beta + (M - \bar M)\,\gamma \quad\text{(f-tokens)},

    with :math:`\bar M = \int M / \int 1` the quadrature mean over all tokens (per system and
    channel), :math:`s, b` coordinate MLPs (:class:`PointNetwork`, starting as :math:`s = 1`,
    :math:`b = 0`: the centred update) and :math:`\gamma, \beta` scalars (starting at 1 and 0).
    Every ingredient is a function of the continuum, so the normaliser keeps NAO's transfer
    between meshes; the authors' Darcy LayerNorm, whose parameters are one per node, would not.

    Args:
        dim (int): spatial dimension of the u-mesh.
        hidden (tuple, optional): widths of :math:`s` and :math:`b`. (default: ``(32, 64)``)
        coord_scale (float, optional): length dividing the coordinates. (default: ``1.0``)

    Shapes:
        - **input:** the update ``m [B, N + Nf, d]`` (u-tokens first), weights ``[B, N + Nf]``
          (0 on padding), the u-tokens' positions ``pos [G, N, dim]``.
        - **output:** ``[B, N + Nf, d]``.
    """

    def __init__(self, dim: int, hidden: tuple[int, int] = (32, 64), coord_scale: float = 1.0):
        super().__init__()
        self.scale = PointNetwork(dim, hidden, coord_scale, start=1.0)
        self.shift = PointNetwork(dim, hidden, coord_scale, start=0.0)
        self.gamma = nn.Parameter(torch.ones(()))
        self.beta = nn.Parameter(torch.zeros(()))

    def forward(self, m: torch.Tensor, weight: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        n = pos.shape[1]
        w = weight.to(m.dtype)
        mean = torch.einsum("bt,btd->bd", w, m) / w.sum(1, keepdim=True).clamp_min(torch.finfo(m.dtype).tiny)
        c = m - mean[:, None]  # (B, T, d)
        p = pos.to(m.dtype)
        return torch.cat([c[:, :n] * self.scale(p) + self.shift(p), c[:, n:] * self.gamma + self.beta], dim=1)
