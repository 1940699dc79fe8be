"""Galerkin Transformer (Cao): softmax-free Galerkin or Fourier attention encoder on any mesh."""

from __future__ import annotations

from torch import nn

from ..nn.galerkin_attention import FourierAttention, GalerkinAttention
from .encoder import CoordinateFeatures, EncoderBlock, EncoderOperator, PointwiseMLP

_ATTENTION = {"galerkin": GalerkinAttention, "fourier": FourierAttention}


class GalerkinTransformer(EncoderOperator, name="galerkin"):
    """The Galerkin Transformer of Cao (`arXiv:2105.14995 <https://arxiv.org/abs/2105.14995>`_),
    mesh-agnostic: pointwise lift of values and coordinates, post-LayerNorm blocks of Galerkin
    (or Fourier) attention with the coordinates concatenated per head, and a pointwise decoder.

    .. math::
        h_0 = L(u, x), \\quad
        h_{\\ell+1} = \\operatorname{LN}\\big(g + F(g)\\big),\\;
        g = \\operatorname{LN}\\big(h_\\ell + A(h_\\ell)\\big), \\quad
        \\mathcal{G}(u) = P(h_{\\text{depth}}),

    with Galerkin attention :math:`A(h)(x) = Q(x)\\int_D \\tilde K(y)^\\top \\tilde V(y)\\,dy
    \\approx Q_i \\sum_j w_j \\tilde K_j^\\top \\tilde V_j` (layer-normalised :math:`K, V`), or Fourier
    attention :math:`\\sum_j w_j (\\tilde Q_i\\cdot\\tilde K_j) V_j`. The cost is linear in the
    number of nodes.

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: encoder channels (default ``64``).
        depth: number of blocks (default ``3``).
        num_heads: attention heads (default ``4``).
        ff_mult: feed-forward hidden size as a multiple of ``width`` (default ``2``).
        attention: ``"galerkin"`` (default) or ``"fourier"``.
        decoder: ``"pointwise"`` (default) or ``"cross"``: one cross-attention of the same type
            from an embedding of the query coordinates, so the model answers on ``pos_query``
            (:class:`~geoattn.models.encoder.EncoderOperator`).
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).

    Shapes:
        - input: ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional),
          ``pos_query [Nq, d]`` and ``batch_query [Nq]`` (optional, ``decoder="cross"`` only).
        - output: ``[N, C_out]``, or ``[Nq, C_out]`` with a query mesh.
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 64,
                 depth: int = 3, num_heads: int = 4, ff_mult: int = 2, attention: str = "galerkin",
                 decoder: str = "pointwise", coordinate_features: dict | None = None):
        super().__init__()
        if attention not in _ATTENTION:
            raise ValueError(f"attention must be one of {sorted(_ATTENTION)}, got {attention!r}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.decoder = self.check_decoder(decoder)
        layer = _ATTENTION[attention]
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, width, width)
        self.blocks = nn.ModuleList(
            EncoderBlock(layer(width, num_heads=num_heads, dim=dim), width, ff_mult) for _ in range(depth))
        self.project = PointwiseMLP(width, 2 * width, out_channels)
        if decoder == "cross":
            self.build_cross_decoder(layer(width, num_heads=num_heads, dim=dim), width, dim)
