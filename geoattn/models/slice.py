"""Slice transformer: quadrature-weighted slice (physics) attention blocks, linear in the nodes."""

from __future__ import annotations

import torch
from torch import nn

from ..nn.slice_attention import SliceAttention
from .base import NeuralOperator
from .encoder import CoordinateFeatures, PointwiseMLP


class PreNormBlock(nn.Module):
    """Pre-LayerNorm residual block, :math:`h \\leftarrow h + A(\\operatorname{LN}(h))`,
    :math:`h \\leftarrow h + F(\\operatorname{LN}(h))`, around a mixing layer :math:`A`.

    Shapes:
        - ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` to ``[N, C]``.
    """

    def __init__(self, mixer: nn.Module, width: int, ff_mult: int = 2):
        super().__init__()
        self.mixer = mixer
        self.norm1 = nn.LayerNorm(width)
        self.norm2 = nn.LayerNorm(width)
        self.ff = PointwiseMLP(width, ff_mult * width, width)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.mixer(self.norm1(x), pos, weight, batch)
        return x + self.ff(self.norm2(x))


class SliceTransformer(NeuralOperator, name="slice"):
    r"""Transolver's architecture (Wu et al., `ICML 2024 <https://arxiv.org/abs/2402.02366>`_) with
    quadrature-weighted slice attention (:class:`~geoattn.nn.SliceAttention`), so that the slice
    tokens are integrals over the domain and the model is one operator on every mesh:

    .. math::
        h_0 = L(u, x), \quad
        h \leftarrow h + A_S(\operatorname{LN}(h)), \quad
        h \leftarrow h + F(\operatorname{LN}(h)), \quad
        \mathcal{G}(u) = P(\operatorname{LN}(h)),

    with :math:`A_S` slice attention (soft slices, tokens
    :math:`z_g = \int s_g f / \int s_g`, attention among the tokens, :math:`\sum_g s_g z'_g`),
    :math:`L, F` pointwise MLPs and :math:`P` linear. The cost is linear in the number of nodes.

    Args:
        in_channels: input function channels ``C_in``.
        out_channels: output function channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: hidden channels ``C`` (default ``64``).
        depth: number of blocks (default ``3``).
        num_heads: attention heads (default ``4``).
        num_slices: slices per head :math:`G` (default ``32``).
        ff_mult: feed-forward hidden size as a multiple of ``width`` (default ``2``).
        dropout: dropout on the slice attention (default ``0.0``).
        fourier_features: random Fourier features of the coordinates added to the lift's input
            (default ``0``: none; :class:`~geoattn.models.encoder.CoordinateFeatures`).
        fourier_scale: their frequency scale :math:`\sigma` (default ``1.0``).
        learned_features: train the frequencies (default ``False``).

    Shapes:
        - input: ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional).
        - output: ``[N, C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 64,
                 depth: int = 3, num_heads: int = 4, num_slices: int = 32, ff_mult: int = 2,
                 dropout: float = 0.0, fourier_features: int = 0,
                 fourier_scale: float = 1.0, learned_features: bool = False):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.inputs = CoordinateFeatures(in_channels, dim, fourier_features, fourier_scale,
                                         learned_features)
        self.lift = PointwiseMLP(self.inputs.out_features, 2 * width, width)
        self.blocks = nn.ModuleList(
            PreNormBlock(SliceAttention(width, num_heads=num_heads, num_slices=num_slices,
                                        dropout=dropout), width, ff_mult)
            for _ in range(depth))
        self.project = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, out_channels))

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        self.check_inputs(x, pos)
        h = self.lift(self.inputs(x, pos))
        for block in self.blocks:
            h = block(h, pos, weight, batch)
        return self.project(h)
