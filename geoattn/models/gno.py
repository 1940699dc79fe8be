"""Graph-kernel neural operator (GNO): kernel integrals over balls on a radius graph."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..mesh.mesh import Mesh
from ..mesh.neighbors import radius_graph
from ..nn.graph_kernel import GraphKernelIntegral
from .base import COMMON_OPTIONS, NeuralOperator
from .encoder import CoordinateFeatures, PointwiseMLP


class GNO(NeuralOperator, name="gno"):
    """Graph-kernel neural operator (Li et al., *Neural Operator: Graph Kernel Network for
    Partial Differential Equations*, 2020) with quadrature weights in every kernel integral:

    .. math::
        h_0 = L(u, x), \\quad
        h_{\\ell+1}(x) = \\sigma\\Big(W h_\\ell(x) + \\int_{B_r(x)} \\kappa_\\ell(x, y, u(x), u(y))\\,
        h_\\ell(y)\\,dy\\Big), \\quad \\mathcal{G}(u) = P(h_{\\text{depth}}),

    with the integral discretised as :math:`\\sum_{j \\in B_r(x_i)} w_j \\kappa(x_i, x_j, u_i, u_j) h_j`
    on the radius graph of the input nodes (:class:`~geoattn.nn.GraphKernelIntegral`); no activation
    after the last layer. The radius graph is built once per mesh and kept in the
    :class:`~geoattn.mesh.Mesh`'s memo (for a batch, each member's graph in the member's memo).

    Args:
        in_channels: input channels ``C_in`` (also the kernel's node features).
        out_channels: output channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: channels ``C`` (default ``16``).
        depth: number of kernel-integral layers (default ``3``).
        radius: ball radius :math:`r` (default ``0.25``).
        kernel_width: hidden width of the kernel networks (default ``32``).
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).

    Shapes:
        - input: ``x [N, C_in]`` on ``mesh``, a :class:`~geoattn.mesh.Mesh` of ``N`` nodes in
          ``d`` dimensions (one mesh or a batch, :meth:`~geoattn.mesh.Mesh.batch`):
          ``model(x, mesh)``.
        - output: ``[N, C_out]``.
    """

    numeric_options = {**COMMON_OPTIONS, "radius": {}, "kernel_width": {"integer": True}}

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 16,
                 depth: int = 3, radius: float = 0.25, kernel_width: int = 32,
                 coordinate_features: dict | None = None):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.radius = radius
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, width, width)
        self.kernels = nn.ModuleList(
            GraphKernelIntegral(width, width, dim, feature_channels=in_channels,
                                hidden_channels=kernel_width) for _ in range(depth))
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.project = PointwiseMLP(width, 2 * width, out_channels)

    def forward(self, x: torch.Tensor, mesh: Mesh) -> torch.Tensor:
        self.check_call(x, mesh)
        pos, weight, batch = mesh.pos, mesh.weight, mesh.batch_vector
        edge_index = self.radius_graph(mesh)
        h = self.lift(self.inputs(x, pos))
        for k, (kernel, linear) in enumerate(zip(self.kernels, self.linears)):
            h = linear(h) + kernel(h, pos, weight, batch, edge_index=edge_index, f=x)
            if k < len(self.kernels) - 1:
                h = F.gelu(h)
        return self.project(h)

    def radius_graph(self, mesh: Mesh) -> torch.Tensor:
        """The radius graph ``edge_index [2, E]`` of ``mesh``'s nodes (no edge joins two graphs),
        from the memo of each member mesh, built there on first use."""
        r = float(self.radius)
        return mesh.structure(("radius_graph", r), lambda m: _radius_graph(m, r), join_edges)


@torch.compiler.disable
def _radius_graph(mesh: Mesh, r: float) -> torch.Tensor:
    """The radius graph of one mesh, built eagerly (a KD-tree query) also under torch.compile."""
    return radius_graph(mesh.pos.detach(), r)


def join_edges(batch: Mesh, parts: list) -> torch.Tensor:
    """The edges ``[2, E]`` of a batch from its members' (each shifted by its node offset)."""
    return torch.cat([e + o for e, o in zip(parts, batch.layout.offsets)], dim=1)
