"""Slice transformer: quadrature-weighted slice (physics) attention blocks, linear in the nodes."""

from __future__ import annotations

import torch
from torch import nn

from ..mesh.mesh import Mesh
from ..nn.slice_attention import SliceAttention
from .base import COMMON_OPTIONS, DROPOUT, NeuralOperator
from .encoder import CoordinateFeatures, EncoderBlock, PointwiseMLP


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
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).

    Shapes:
        - input: ``model(x, mesh)``: ``x [N, C_in]`` on the nodes of ``mesh`` (a
          :class:`~geoattn.mesh.Mesh`: ``pos [N, d]``, ``weight [N]`` and, for a batch
          (:meth:`~geoattn.mesh.Mesh.batch`), its layout). The former call
          ``model(x, pos, weight, batch)`` still works.
        - output: ``[N, C_out]`` on the input mesh.
    """

    numeric_options = {**COMMON_OPTIONS, "num_heads": {"integer": True}, "num_slices": {"integer": True},
                       "ff_mult": {"integer": True}, "dropout": DROPOUT}

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 64,
                 depth: int = 3, num_heads: int = 4, num_slices: int = 32, ff_mult: int = 2,
                 dropout: float = 0.0,
                 coordinate_features: dict | None = None):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, 2 * width, width)
        self.blocks = nn.ModuleList(
            EncoderBlock(SliceAttention(width, num_heads=num_heads, num_slices=num_slices,
                                        dropout=dropout), width, ff_mult, prenorm=True)
            for _ in range(depth))
        self.project = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, out_channels))

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        self.check_call(x, mesh)
        if query is not None:
            raise ValueError(f"{type(self).__name__} answers on its input mesh; it takes no query mesh")
        pos, weight, batch = mesh.pos, mesh.weight, mesh.batch_vector
        h = self.lift(self.inputs(x, pos))
        for block in self.blocks:
            h = block(h, pos, weight, batch, layout=mesh.layout)
        return self.project(h)
