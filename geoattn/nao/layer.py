r"""Nonlocal attention: the residual, softmax-free attention layer of the Nonlocal Attention
Operator (Yu et al., `NeurIPS 2024 <https://arxiv.org/abs/2408.07307>`_, eqs. (6), (14)).

Tokens are points of the domain, features are the :math:`d` sampled data pairs of one physical
system. The input tokens of one system are the :math:`d` loadings :math:`g[u_j]` at the nodes of
the *u-mesh* and the :math:`d` responses :math:`f_j` at the nodes of the *f-mesh* (the same mesh
for field problems, one point for the radial problem of the paper).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..nn.functional import dense_batch, num_graphs

__all__ = ["NonlocalAttention", "join_tokens", "split_tokens"]


def join_tokens(u: torch.Tensor, f: torch.Tensor, weight: torch.Tensor,
                weight_query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack u-tokens ``[B, N, d]`` and f-tokens ``[B, Nf, d]`` into ``X [B, N + Nf, d]`` with the
    matching weights ``[B, N + Nf]`` (weights with leading dimension 1 broadcast over ``B``)."""
    B = max(u.shape[0], weight.shape[0], weight_query.shape[0])
    weight = weight.expand(B, -1)
    weight_query = weight_query.expand(B, -1)
    return torch.cat([u, f], dim=1), torch.cat([weight, weight_query], dim=1)  # (B, N+Nf, d), (B, N+Nf)


def split_tokens(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`join_tokens`: the first ``n`` tokens are the u-tokens."""
    return x[:, :n], x[:, n:]


class NonlocalAttention(nn.Module):
    r"""One residual linear-attention layer of the Nonlocal Attention Operator.

    The continuum layer (eq. (14) of the paper) maps the token functions
    :math:`X = (g_1, \dots, g_d; f_1, \dots, f_d)` to

    .. math::
        X^{(l)}(x) = X^{(l-1)}(x) + \int_{\Omega_u \cup \Omega_f}
            \frac{\langle q(x), k(y) \rangle}{\sqrt{d_k}}\, X^{(l-1)}(y)\,dy,
        \qquad q = X^{(l-1)} W^Q + b^Q,\; k = X^{(l-1)} W^K + b^K,

    where one pair :math:`(W^Q, W^K) \in \mathbb{R}^{d \times d_k}` is shared by the u- and
    f-tokens (the feature axis indexes the :math:`d` data pairs). The discrete layer replaces the
    integral by the quadrature of the nodes,

    .. math::
        X^{(l)}_\alpha = X^{(l-1)}_\alpha + \sum_\gamma w_\gamma
            \frac{\langle q_\alpha, k_\gamma \rangle}{\sqrt{d_k}} X^{(l-1)}_\gamma
        = X^{(l-1)}_\alpha + \frac{q_\alpha}{\sqrt{d_k}}
            \Big(\sum_\gamma w_\gamma k_\gamma^\top X^{(l-1)}_\gamma\Big),

    evaluated in the second (linear-cost) order, :math:`O(N d\, d_k)`. With the uniform weights
    :math:`w_\gamma = \Delta x^D` this is the paper's Riemann-sum form (App. A)
    :math:`X + \Delta x^D\,\sigma(X W^Q (W^K)^\top X^\top/\sqrt{d_k}) X` with :math:`\sigma`
    the identity. There is no softmax, value or output projection, exactly as in the paper; the
    optional biases :math:`b^Q, b^K` follow the authors' code. The update is cubic in the tokens,
    so :math:`W^Q, W^K` start small (normal, std :math:`0.1/\sqrt{d}`) and the biases at zero.

    Args:
        channels (int): the token feature width, the number of data pairs :math:`d`.
        head_channels (int): rank :math:`d_k` of :math:`W^{QK} = W^Q (W^K)^\top / \sqrt{d_k}`.
        bias (bool, optional): learn :math:`b^Q, b^K`. (default: ``True``)

    Shapes:
        - **input:** the u-tokens ``x [N, d]`` on their mesh (``pos [N, dim]``, unused, kept for
          the common signature; ``weight [N]``; ``batch [N]``, optional), and the f-tokens on the
          query mesh as keywords: ``x_query [Nq, d]``, ``weight_query [Nq]``, ``batch_query [Nq]``
          (optional).
        - **output:** the updated ``(x [N, d], x_query [Nq, d])``.
    """

    def __init__(self, channels: int, head_channels: int, bias: bool = True):
        super().__init__()
        self.channels, self.head_channels, self.bias = channels, head_channels, bias
        self.query = nn.Linear(channels, head_channels, bias=bias)
        self.key = nn.Linear(channels, head_channels, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # the update is cubic in the tokens: start it small (std 0.1/sqrt(d), zero biases)
        for lin in (self.query, self.key):
            nn.init.normal_(lin.weight, std=0.1 / math.sqrt(self.channels))
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def extra_repr(self) -> str:
        return f"{self.channels}, head_channels={self.head_channels}, bias={self.bias}"

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys ``[..., dk]`` of tokens ``[..., d]``, the queries scaled by
        :math:`1/\\sqrt{d_k}` so that the score is ``q @ k.T``."""
        return self.query(x) / math.sqrt(self.head_channels), self.key(x)

    @staticmethod
    def augmented(lin: nn.Linear) -> torch.Tensor:
        """The map ``lin`` as one matrix ``[C (+ 1), dk]``: ``lin(x) = [x, 1] @ W`` (the row of
        ones only with a bias)."""
        rows = [lin.weight.T] + ([lin.bias[None]] if lin.bias is not None else [])
        return torch.cat(rows)

    @torch.no_grad()
    def load_augmented(self, lin: nn.Linear, W: torch.Tensor) -> None:
        """Set ``lin`` (:attr:`query` or :attr:`key`) from a matrix ``W [C (+ 1), dk]`` of
        :meth:`augmented` form."""
        lin.weight.copy_(W[:lin.in_features].T.to(lin.weight.dtype))
        if lin.bias is not None:
            lin.bias.copy_(W[lin.in_features].to(lin.bias.dtype))

    def update_dense(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The layer's update :math:`X^{(l)} - X^{(l-1)}` on padded tokens ``x [B, T, d]`` with
        weights ``[B, T]`` (0 on padding)."""
        q, k = self.project(x)  # (B, T, dk) each
        kx = torch.einsum("btk,bt,btd->bkd", k, weight.to(x.dtype), x)  # (B, dk, d) = ∫ k^T X dy
        return q @ kx

    def forward_dense(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The layer on padded tokens ``x [B, T, d]`` with weights ``[B, T]`` (0 on padding)."""
        return x + self.update_dense(x, weight)

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, x_query: torch.Tensor,
                weight_query: torch.Tensor,
                batch_query: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        B = num_graphs(batch, batch_query)
        du = dense_batch(x, None, weight, batch, batch_size=B)
        df = dense_batch(x_query, None, weight_query, batch_query, batch_size=B)
        x, w = join_tokens(du.x, df.x, du.weight, df.weight)  # (B, T, d), (B, T)
        u_out, f_out = split_tokens(self.forward_dense(x, w), du.x.shape[1])
        return u_out[du.mask], f_out[df.mask]
