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

from .functional import dense_batch

__all__ = ["NonlocalAttention", "join_tokens", "split_tokens"]


def join_tokens(u: torch.Tensor, f: torch.Tensor, weight: torch.Tensor,
                weight_f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack u-tokens ``[B, N, d]`` and f-tokens ``[B, Nf, d]`` into ``X [B, N + Nf, d]`` with the
    matching weights ``[B, N + Nf]`` (weights with leading dimension 1 broadcast over ``B``)."""
    B = max(u.shape[0], weight.shape[0], weight_f.shape[0])
    weight = weight.expand(B, -1)
    weight_f = weight_f.expand(B, -1)
    return torch.cat([u, f], dim=1), torch.cat([weight, weight_f], dim=1)  # (B, N+Nf, d), (B, N+Nf)


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
        pairs (int): number of data pairs :math:`d` (the feature width).
        dk (int): rank :math:`d_k` of :math:`W^{QK} = W^Q (W^K)^\top / \sqrt{d_k}`.
        bias (bool, optional): learn :math:`b^Q, b^K`. (default: ``True``)

    Shapes:
        - **input:** u-tokens ``u [N, d]``, f-tokens ``f [Nf, d]``, weights ``weight [N]``,
          ``weight_f [Nf]``, optional graph indices ``batch [N]``, ``batch_f [Nf]``.
        - **output:** the updated ``(u [N, d], f [Nf, d])``.
    """

    def __init__(self, pairs: int, dk: int, bias: bool = True):
        super().__init__()
        self.pairs, self.dk, self.bias = pairs, dk, bias
        self.query = nn.Linear(pairs, dk, bias=bias)
        self.key = nn.Linear(pairs, dk, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # the update is cubic in the tokens: start it small (std 0.1/sqrt(d), zero biases)
        for lin in (self.query, self.key):
            nn.init.normal_(lin.weight, std=0.1 / math.sqrt(self.pairs))
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def extra_repr(self) -> str:
        return f"pairs={self.pairs}, dk={self.dk}, bias={self.bias}"

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys ``[..., dk]`` of tokens ``[..., d]``, the queries scaled by
        :math:`1/\\sqrt{d_k}` so that the score is ``q @ k.T``."""
        return self.query(x) / math.sqrt(self.dk), self.key(x)

    def forward_dense(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The layer on padded tokens ``x [B, T, d]`` with weights ``[B, T]`` (0 on padding)."""
        q, k = self.project(x)  # (B, T, dk) each
        kx = torch.einsum("btk,bt,btd->bkd", k, weight.to(x.dtype), x)  # (B, dk, d) = ∫ k^T X dy
        return x + q @ kx

    def forward(self, u: torch.Tensor, f: torch.Tensor, weight: torch.Tensor,
                weight_f: torch.Tensor, batch: torch.Tensor | None = None,
                batch_f: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        B = max(int(b.max()) + 1 if b is not None and b.numel() else 1 for b in (batch, batch_f))
        du = dense_batch(u, None, weight, batch, batch_size=B)
        df = dense_batch(f, None, weight_f, batch_f, batch_size=B)
        x, w = join_tokens(du.x, df.x, du.weight, df.weight)  # (B, T, d), (B, T)
        u_out, f_out = split_tokens(self.forward_dense(x, w), du.x.shape[1])
        return u_out[du.mask], f_out[df.mask]
