"""Transformer Neural Operator (TNO): continuum self-attention encoder on any mesh."""

from __future__ import annotations

from torch import nn

from ..nn.continuum_attention import ContinuumAttention
from .base import COMMON_OPTIONS, DROPOUT
from .encoder import CoordinateFeatures, EncoderBlock, EncoderOperator, PointwiseMLP


class TNO(EncoderOperator, name="tno"):
    """The Transformer Neural Operator of Calvello, Kovachki, Levine and Stuart
    (`arXiv:2406.06486 <https://arxiv.org/abs/2406.06486>`_, §4.2), on unstructured meshes.

    A pointwise lift of input values and coordinates, ``depth`` post-LayerNorm blocks of continuum
    self-attention (:class:`~geoattn.nn.ContinuumAttention`, quadrature weights as log-biases) and a
    pointwise feed-forward network, and a pointwise projection:

    .. math::
        h_0(x) = L\\big(u(x), x\\big), \\quad
        h_{\\ell+1} = \\operatorname{LN}\\big(g + F(g)\\big),\\;
        g = \\operatorname{LN}\\big(h_\\ell + A(h_\\ell)\\big), \\quad
        \\mathcal{G}(u)(x) = P\\big(h_{\\text{depth}}(x)\\big),

    .. math::
        A(h)(x_i) = \\sum_j \\operatorname{softmax}_j\\Big(
            \\frac{\\langle Q h_i, K h_j\\rangle}{\\sqrt{d_k}} + \\log w_j\\Big) V h_j .

    With ``decoder="cross"`` the output is read at query points :math:`y` (any other mesh, or the
    input mesh itself) through one continuum cross-attention from an embedding of the query
    coordinates, :math:`z(y) = \\operatorname{LN}(E(y) + C(E(y), h_{\\text{depth}}))`,
    :math:`\\mathcal{G}(u)(y) = P(z(y))`, so the model answers on a mesh other than its input.
    With the default ``decoder="pointwise"`` it answers on its input mesh.

    Args:
        in_channels: input function channels ``C_in``.
        out_channels: output function channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: channels of the encoder ``C`` (default ``64``).
        depth: number of encoder blocks (default ``3``).
        num_heads: attention heads (default ``4``).
        ff_mult: feed-forward hidden size as a multiple of ``width`` (default ``2``).
        dropout: attention dropout (default ``0.0``).
        decoder: ``"pointwise"`` (default) or ``"cross"``.
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).

    Shapes:
        - input: ``x [N, C_in]`` on the nodes of a :class:`~geoattn.mesh.Mesh` (one mesh or a
          batch), and with ``decoder="cross"`` optionally ``query``, a mesh of ``Nq`` nodes with
          as many graphs (see :class:`~geoattn.models.GalerkinTransformer` for the full call).
        - output: ``[N, C_out]``, or ``[Nq, C_out]`` with a query mesh.
    """

    numeric_options = {**COMMON_OPTIONS, "num_heads": {"integer": True}, "ff_mult": {"integer": True},
                       "dropout": DROPOUT}

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 64,
                 depth: int = 3, num_heads: int = 4, ff_mult: int = 2, dropout: float = 0.0,
                 decoder: str = "pointwise",
                 coordinate_features: dict | None = None):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.decoder = self.check_decoder(decoder)
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, width, width)
        self.blocks = nn.ModuleList(
            EncoderBlock(ContinuumAttention(width, num_heads=num_heads, dropout=dropout), width, ff_mult)
            for _ in range(depth))
        if decoder == "cross":
            self.build_cross_decoder(ContinuumAttention(width, num_heads=num_heads, dropout=dropout),
                                     width, dim)
        self.project = PointwiseMLP(width, 2 * width, out_channels)
