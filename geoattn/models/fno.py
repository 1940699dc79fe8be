"""Mesh-native Fourier neural operator: FNO's architecture with the spectral integral on the nodes."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.spectral import SpectralIntegral
from .base import NeuralOperator
from .encoder import CoordinateFeatures, PointwiseMLP


class MeshFNO(NeuralOperator, name="mesh_fno"):
    r"""The Fourier neural operator (Li et al., `ICLR 2021 <https://arxiv.org/abs/2010.08895>`_)
    without a grid: every global convolution is the quadrature-weighted spectral integral of the
    nodes (:class:`~geoattn.nn.SpectralIntegral`), so no interpolation to and from a grid is needed
    and the model is one operator on every mesh:

    .. math::
        h_0 = L(u, x), \qquad
        h_{\ell+1} = \sigma\big(W_\ell h_\ell + \mathcal K_\ell h_\ell\big), \qquad
        \mathcal G(u) = P(h_{\text{depth}}),

    .. math::
        (\mathcal K h)(y) = \mathrm{Re} \sum_{|m_k| \le K} R(m)\, \hat h(m)\, e^{2\pi i m \cdot (y - a)/L},
        \qquad \hat h(m) = \frac{1}{|B|} \sum_i w_i\, h_i\, e^{-2\pi i m \cdot (x_i - a)/L},

    on the bounding box of the nodes padded by the fraction ``padding`` (FNO's domain padding for
    non-periodic problems), with :math:`\sigma` the GELU (none after the last block) and
    :math:`L, P` pointwise MLPs. The cost is :math:`O(N M C)` per block for :math:`M = (2K+1)^d`
    modes. Choose ``modes`` so that the training mesh resolves them
    (:func:`~geoattn.nn.spectral.resolved_modes`): with more modes than the nodes resolve, the
    coefficients alias on the training mesh and the model does not transfer.

    Args:
        in_channels: input function channels ``C_in``.
        out_channels: output function channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: channels ``C`` (default ``32``).
        depth: number of Fourier blocks (default ``4``).
        modes: Fourier modes :math:`K` per dimension, int or one per dimension (default ``4``).
        padding: fraction of the box added past the nodes on every axis (default ``0.25``).
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).

    Shapes:
        - input: ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional).
        - output: ``[N, C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 32,
                 depth: int = 4, modes: int | Sequence[int] = 4, padding: float = 0.25,
                 coordinate_features: dict | None = None):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, 2 * width, width)
        self.spectral = nn.ModuleList(SpectralIntegral(width, width, modes, dim, padding=padding)
                                      for _ in range(depth))
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.project = PointwiseMLP(width, 2 * width, out_channels)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        self.check_inputs(x, pos)
        h = self.lift(self.inputs(x, pos))
        basis = self.spectral[0].basis(pos, weight, batch)  # the nodes' Fourier basis, for every block
        for k, (spectral, linear) in enumerate(zip(self.spectral, self.linears)):
            h = linear(h) + spectral(h, pos, weight, batch, basis=basis)
            if k < len(self.linears) - 1:
                h = F.gelu(h)
        return self.project(h)
