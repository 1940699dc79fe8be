r"""Graph-kernel integral operator (GNO style) with quadrature weights inside the message."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import MessagePassing

__all__ = ["GraphKernelIntegral"]


class GraphKernelIntegral(MessagePassing):
    r"""Kernel integral over a ball, discretised on a radius graph.

    From Li et al., *Neural Operator: Graph Kernel Network for Partial Differential Equations*
    (2020), with the quadrature weights :math:`w_j` of the source nodes in every message, so that
    the sum is a quadrature of one continuum operator on every mesh:

    .. math::
        (\mathcal K v)(x) = \int_{B_r(x) \cap D} \kappa_\theta\big(x, y, f(x), f(y)\big)\, v(y)\,dy
        \quad\approx\quad
        (\mathcal K v)_i = \sum_{j \in B_r(x_i)} w_j\, \kappa_\theta(x_i, x_j, f_i, f_j)\, v_j,

    where :math:`\kappa_\theta(x, y, a, b) \in \mathbb{R}^{C_\text{out} \times C_\text{in}}` is a
    network (by default an MLP) of the two positions and optional node features :math:`f` (e.g. the
    input coefficient), and the ball is given as a radius graph
    (:func:`geoattn.mesh.radius_graph`, or :func:`geoattn.mesh.radius` from the source nodes to
    the nodes of a query mesh, for the bipartite form). Unlike
    an unweighted mean over neighbours, the result does not depend on how densely the ball is
    sampled.

    Args:
        in_channels: :math:`C_\text{in}` (channels of ``v``).
        out_channels: :math:`C_\text{out}`.
        dim: spatial dimension :math:`d`.
        feature_channels: channels of ``f`` fed to the kernel (default 0: no features).
        hidden_channels: width of the default kernel MLP (default 64).
        kernel: a module mapping ``[E, 2d + 2F]`` to ``[E, C_out * C_in]`` to use instead of the
            default MLP (default ``None``).
        edge_chunk: edges whose messages are computed at a time (default ``65536``). The kernel
            matrices of all edges, ``[E, C_out, C_in]``, are never held at once: each chunk's
            messages are added to the output and, when gradients are recorded, recomputed in the
            backward pass, so the memory beyond the graph itself is ``O(N C + edge_chunk C_out
            C_in)`` instead of growing with ``E C_out C_in`` (a ball holding a fixed share of the
            nodes has ``E`` quadratic in ``N``).

    Shapes:
        - **input:** ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional and
          unused: the edges never join two graphs), ``edge_index [2, E]`` (keyword; row 0 source,
          row 1 query node), ``f [N, F]`` (optional), and for the bipartite form the query nodes
          ``pos_query [Nq, d]`` and ``f_query [Nq, F]``.
        - **output:** ``[Nq, C_out]`` (``Nq = N`` without ``pos_query``).
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int, feature_channels: int = 0,
                 hidden_channels: int = 64, kernel: nn.Module | None = None, edge_chunk: int = 65536):
        super().__init__(aggr="add", flow="source_to_target", node_dim=0)
        if edge_chunk < 1:
            raise ValueError(f"edge_chunk must be at least 1, got {edge_chunk}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.edge_chunk = int(edge_chunk)
        self.feature_channels, self.hidden_channels = feature_channels, hidden_channels
        self.kernel = kernel if kernel is not None else nn.Sequential(
            nn.Linear(2 * dim + 2 * feature_channels, hidden_channels), nn.GELU(),
            nn.Linear(hidden_channels, hidden_channels), nn.GELU(),
            nn.Linear(hidden_channels, out_channels * in_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for module in self.kernel.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, edge_index: torch.Tensor,
                f: torch.Tensor | None = None, pos_query: torch.Tensor | None = None,
                f_query: torch.Tensor | None = None) -> torch.Tensor:
        if weight.shape != (x.shape[0],):
            raise ValueError(f"weight must have shape [N] = [{x.shape[0]}], got {tuple(weight.shape)}")
        if f is None and self.feature_channels:
            raise ValueError(f"the kernel expects f with {self.feature_channels} channels")
        if pos_query is None:
            pos_query, f_query = pos, f
        elif f is not None and f_query is None:
            raise ValueError("bipartite call with source features f needs f_query too")
        if f is None:
            f, f_query = pos.new_zeros(len(pos), 0), pos.new_zeros(len(pos_query), 0)
        src, dst = edge_index
        recompute = torch.is_grad_enabled() and src.numel() > self.edge_chunk
        out = None
        for start in range(0, max(src.numel(), 1), self.edge_chunk):
            args = (x, pos, pos_query, f, f_query, weight,
                    src[start:start + self.edge_chunk], dst[start:start + self.edge_chunk])
            # recomputed in the backward pass, a chunk keeps nothing but references to its inputs
            part = checkpoint(self._chunk, *args, use_reentrant=False) if recompute else self._chunk(*args)
            out = part if out is None else out + part
        return out

    def _chunk(self, x, pos, pos_query, f, f_query, weight, j, i) -> torch.Tensor:
        """The messages of the edges ``j -> i`` summed at their query nodes ``[Nq, C_out]``."""
        msg = self.message(x[j], pos_query[i], pos[j], f_query[i], f[j], weight[j])  # (E_chunk, C_out)
        return msg.new_zeros(len(pos_query), self.out_channels).index_add_(0, i, msg)

    def message(self, x_j: torch.Tensor, pos_i: torch.Tensor, pos_j: torch.Tensor,
                f_i: torch.Tensor, f_j: torch.Tensor, weight_j: torch.Tensor) -> torch.Tensor:
        k = self.kernel(torch.cat([pos_i, pos_j, f_i, f_j], dim=-1))
        k = k.view(-1, self.out_channels, self.in_channels)  # (E, C_out, C_in)
        return weight_j.unsqueeze(-1) * torch.bmm(k, x_j.unsqueeze(-1)).squeeze(-1)  # (E, C_out)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, dim={self.dim}, "
                f"feature_channels={self.feature_channels})")
