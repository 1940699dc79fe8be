"""Pieces shared by the encoder-type models: pointwise MLPs, the post-LayerNorm block, and the
``lift -> blocks`` encoder with its cross-attention decoder."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..mesh.mesh import Mesh
from ..mesh.validation import checked_number
from .base import NeuralOperator


class PointwiseMLP(nn.Sequential):
    """A two-layer perceptron applied at every node independently (no sum over nodes).

    Args:
        in_features: input size.
        hidden: hidden size.
        out_features: output size.
        dropout: dropout on the hidden layer in training mode, as in Cao's feed-forward network
            (default ``0``: none). It adds no module, so checkpoints keep their keys.

    Shapes:
        - ``[N, in_features]`` to ``[N, out_features]``.
    """

    def __init__(self, in_features: int, hidden: int, out_features: int, dropout: float = 0.0):
        dropout = checked_number("dropout", dropout, positive=False, minimum=0.0, below=1.0)
        super().__init__(nn.Linear(in_features, hidden), nn.GELU(), nn.Linear(hidden, out_features))
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.dropout(self[1](self[0](x)), self.dropout, self.training) if self.dropout else self[1](self[0](x))
        return self[2](h)

    def extra_repr(self) -> str:
        return f"dropout={self.dropout}" if self.dropout else ""


class CoordinateFeatures(nn.Module):
    r"""The input of a model's pointwise lift: the function values, the coordinates and, optionally,
    random Fourier features of the coordinates (Tancik et al., NeurIPS 2020),

    .. math::
        \big(u(x),\ x,\ \cos(2\pi B x),\ \sin(2\pi B x)\big), \qquad
        B \in \mathbb{R}^{F \times d},\ B_{ij} \sim \mathcal N(0, \sigma^2),

    fixed (a buffer) or learned. The features are functions of the position only, so they are the
    same on every mesh of the domain; they let a pointwise lift represent variation faster than
    its width allows from :math:`x` alone.

    Args:
        in_channels: channels of ``u``.
        dim: spatial dimension :math:`d`.
        num_features: :math:`F` (default ``0``: values and coordinates only).
        scale: :math:`\sigma`, in cycles per unit length (default ``1``).
        learned: train :math:`B` (default ``False``).

    Shapes:
        - ``x [N, C]``, ``pos [N, d]`` to ``[N, C + d + 2F]`` (:attr:`out_features`).
    """

    def __init__(self, in_channels: int, dim: int, num_features: int = 0, scale: float = 1.0,
                 learned: bool = False):
        super().__init__()
        num_features = checked_number("coordinate_features num_features", num_features, integer=True,
                                      positive=False, minimum=0)
        scale = checked_number("coordinate_features scale", scale)
        self.num_features, self.scale, self.learned = num_features, scale, learned
        self.out_features = in_channels + dim + 2 * num_features
        b = torch.randn(num_features, dim) * scale if num_features else None
        if learned and b is not None:
            self.frequencies = nn.Parameter(b)
        else:
            self.register_buffer("frequencies", b)

    @classmethod
    def of(cls, in_channels: int, dim: int, options: dict | None = None) -> CoordinateFeatures:
        """The features a model's ``coordinate_features`` argument asks for: ``None`` for none,
        or a dict of this class's keywords (``num_features``, ``scale``, ``learned``)."""
        options = dict(options or {})
        unknown = set(options) - {"num_features", "scale", "learned"}
        if unknown:
            raise ValueError(f"unknown coordinate_features keys {sorted(unknown)}; "
                             "allowed: num_features, scale, learned")
        return cls(in_channels, dim, **options)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if self.frequencies is None:
            return torch.cat([x, pos], dim=-1)
        angle = 2 * torch.pi * pos @ self.frequencies.to(pos.dtype).T  # (N, F)
        return torch.cat([x, pos, angle.cos(), angle.sin()], dim=-1)

    def extra_repr(self) -> str:
        return f"num_features={self.num_features}, scale={self.scale}, learned={self.learned}"


class EncoderBlock(nn.Module):
    """Residual encoder block around a mixing layer :math:`\\mathcal{A}`, post-LayerNorm (the
    default, as the TNO and Galerkin Transformer papers)

    .. math::
        h \\leftarrow \\operatorname{LN}\\big(h + \\mathcal{A}(h)\\big), \\qquad
        h \\leftarrow \\operatorname{LN}\\big(h + F(h)\\big),

    or pre-LayerNorm (``prenorm=True``, as Transolver)
    :math:`h \\leftarrow h + \\mathcal{A}(\\operatorname{LN}(h))`,
    :math:`h \\leftarrow h + F(\\operatorname{LN}(h))`, with :math:`F` a pointwise feed-forward
    network. LayerNorm acts on the channels of each node, so the only sums over nodes are the
    quadratures inside :math:`\\mathcal{A}`.

    Args:
        mixer: a layer with ``forward(x, pos, weight, batch=None, *, ...)`` (attention, integral
            operator); keyword arguments of the block's call (structure such as a partition, the
            batch ``layout``) are passed on to it.
        width: channel width ``C``.
        ff_mult: hidden size of :math:`F` as a multiple of ``C`` (default ``2``).
        prenorm: normalise before the mixer and the feed-forward network (default ``False``).
        ff_dropout: dropout inside :math:`F` (training mode; default ``0``).

    Shapes:
        - ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` to ``[N, C]``.
    """

    def __init__(self, mixer: nn.Module, width: int, ff_mult: int = 2, prenorm: bool = False,
                 ff_dropout: float = 0.0):
        super().__init__()
        self.mixer = mixer
        self.norm1 = nn.LayerNorm(width)
        self.ff = PointwiseMLP(width, ff_mult * width, width, dropout=ff_dropout)
        self.norm2 = nn.LayerNorm(width)
        self.prenorm = prenorm

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, **structure) -> torch.Tensor:
        if self.prenorm:
            x = x + self.mixer(self.norm1(x), pos, weight, batch, **structure)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.mixer(x, pos, weight, batch, **structure))
        return self.norm2(x + self.ff(x))

    def extra_repr(self) -> str:
        return "prenorm=True" if self.prenorm else ""


DECODERS = ("pointwise", "cross")


class EncoderOperator(NeuralOperator):
    r"""Shared ``lift -> blocks`` path of the encoder models, and their cross-attention decoder.

    Subclasses set ``self.inputs`` (:class:`CoordinateFeatures`), ``self.lift`` (a
    :class:`PointwiseMLP` on its output), ``self.blocks`` (:class:`EncoderBlock` list),
    ``self.project`` and ``self.decoder`` (:meth:`check_decoder`); :meth:`forward` is then
    ``project(encode(x, mesh))`` on the input mesh or ``project(decode_cross(...))`` on a query
    mesh. With ``decoder="cross"`` they call :meth:`build_cross_decoder` with a cross-attention
    layer :math:`C` and read their output on a query mesh :math:`y` with :meth:`decode_cross`: an
    embedding :math:`E` of the query coordinates attends to the encoder features :math:`h` on the
    input mesh,

    .. math::
        z(y) = \operatorname{LN}\big(E(y) + C(E, h)(y)\big),

    so the model answers on any mesh, including its input mesh. The blocks and the
    cross-attention get the meshes' batch layouts (``layout=mesh.layout``,
    ``layout_query=query.layout``), so a batch of meshes runs without host reads.
    """

    def encode(self, x: torch.Tensor, mesh: Mesh, **structure) -> torch.Tensor:
        """The encoder features ``[N, width]`` on ``mesh`` (a :class:`~geoattn.mesh.Mesh`;
        ``structure``: further keyword arguments of the blocks' mixers). The inputs are checked
        by :meth:`forward`, not here."""
        pos, weight, batch = mesh.pos, mesh.weight, mesh.batch_vector
        h = self.lift(self.inputs(x, pos))
        for block in self.blocks:
            h = block(h, pos, weight, batch, layout=mesh.layout, **structure)
        return h

    @staticmethod
    def check_decoder(decoder: str) -> str:
        """``decoder`` if it is one of :data:`DECODERS`, else a :class:`ValueError`."""
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, got {decoder!r}")
        return decoder

    def build_cross_decoder(self, attention: nn.Module, width: int, dim: int) -> None:
        """Create the query embedding :math:`E`, the cross-attention :math:`C` (a layer with the
        query side in the keywords ``x_query``, ``pos_query``, ``batch_query``, ...) and the
        LayerNorm of :meth:`decode_cross`."""
        self.query_embed = PointwiseMLP(dim, width, width)
        self.cross = attention
        self.cross_norm = nn.LayerNorm(width)

    def decode_cross(self, h: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                     batch: torch.Tensor | None, pos_query: torch.Tensor,
                     batch_query: torch.Tensor | None, **query) -> torch.Tensor:
        """Features ``[Nq, width]`` on the query nodes from the encoder features ``h`` on the
        input mesh (``query``: further keywords of the cross-attention, e.g. the batch layouts
        ``layout`` and ``layout_query``, the query weights and patches)."""
        q = self.query_embed(pos_query)
        return self.cross_norm(q + self.cross(h, pos, weight, batch, x_query=q, pos_query=pos_query,
                                              batch_query=batch_query, **query))

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        """The output ``[N, C_out]`` on ``mesh`` (``decoder="pointwise"``), or ``[Nq, C_out]`` on
        the nodes of the :class:`~geoattn.mesh.Mesh` ``query`` (``decoder="cross"``; default:
        the input mesh)."""
        self.check_call(x, mesh)
        self.check_query(query)
        h = self.encode(x, mesh)
        if self.decoder == "pointwise":
            return self.project(h)
        if query is None:
            query = mesh
        return self.project(self.decode_cross(h, mesh.pos, mesh.weight, mesh.batch_vector, query.pos,
                                              query.batch_vector, layout=mesh.layout,
                                              layout_query=query.layout))

    def check_query(self, query) -> None:
        """Refuse a query mesh (a :class:`~geoattn.mesh.Mesh`, or the former ``pos_query``) when
        the model answers on its input mesh only."""
        if self.decoder == "pointwise" and query is not None:
            raise ValueError(f"this {type(self).__name__} answers on its input mesh "
                             "(decoder='pointwise'); build it with decoder='cross' to answer "
                             "on a query mesh")
