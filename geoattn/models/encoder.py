"""Pieces shared by the encoder-type models: pointwise MLPs and the post-LayerNorm block."""

from __future__ import annotations

import torch
from torch import nn

from .base import NeuralOperator


class PointwiseMLP(nn.Sequential):
    """A two-layer perceptron applied at every node independently (no sum over nodes).

    Args:
        in_features: input size.
        hidden: hidden size.
        out_features: output size.

    Shapes:
        - ``[N, in_features]`` to ``[N, out_features]``.
    """

    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__(nn.Linear(in_features, hidden), nn.GELU(), nn.Linear(hidden, out_features))


class EncoderBlock(nn.Module):
    """Post-LayerNorm encoder block around a mixing layer :math:`\\mathcal{A}`:

    .. math::
        h \\leftarrow \\operatorname{LN}\\big(h + \\mathcal{A}(h)\\big), \\qquad
        h \\leftarrow \\operatorname{LN}\\big(h + F(h)\\big),

    with :math:`F` a pointwise feed-forward network. LayerNorm acts on the channels of each node,
    so the only sums over nodes are the quadratures inside :math:`\\mathcal{A}`.

    Args:
        mixer: a layer with ``forward(x, pos, weight, batch=None)`` (attention, integral operator).
        width: channel width ``C``.
        ff_mult: hidden size of :math:`F` as a multiple of ``C`` (default ``2``).

    Shapes:
        - ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` to ``[N, C]``.
    """

    def __init__(self, mixer: nn.Module, width: int, ff_mult: int = 2):
        super().__init__()
        self.mixer = mixer
        self.norm1 = nn.LayerNorm(width)
        self.ff = PointwiseMLP(width, ff_mult * width, width)
        self.norm2 = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x + self.mixer(x, pos, weight, batch))
        return self.norm2(x + self.ff(x))


class EncoderOperator(NeuralOperator):
    """Shared ``lift -> blocks`` path of the encoder models: subclasses set ``self.lift``
    (a :class:`PointwiseMLP` on ``[x, pos]``) and ``self.blocks`` (:class:`EncoderBlock` list)."""

    def encode(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
               batch: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder features ``[N, width]`` on the input mesh."""
        self.check_inputs(x, pos)
        h = self.lift(torch.cat([x, pos], dim=-1))
        for block in self.blocks:
            h = block(h, pos, weight, batch)
        return h
