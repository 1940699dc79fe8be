"""A model together with the normalisers of its inputs and outputs: the object users predict with."""

from __future__ import annotations

import torch
from torch import nn

from .normalizer import GaussianNormalizer


class NormalizedOperator(nn.Module):
    """Wraps a model so that it reads and returns physical values.

    .. math::
        \\mathcal{G}(u) = D_y\\big(\\mathcal{G}_\\theta(E_x(u))\\big),

    with :math:`E_x` the input normaliser's ``encode`` and :math:`D_y` the output normaliser's
    ``decode`` (both :class:`GaussianNormalizer`, identity until fitted).

    Args:
        model: a :class:`~geoattn.models.NeuralOperator`.

    Shapes:
        - as the wrapped model: ``x [N, C_in]`` in, ``[N_out, C_out]`` out.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.x_normalizer = GaussianNormalizer(model.in_channels)
        self.y_normalizer = GaussianNormalizer(model.out_channels)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, **query) -> torch.Tensor:
        self.model.check_inputs(x, pos)
        return self.y_normalizer.decode(self.model(self.x_normalizer.encode(x), pos, weight, batch, **query))
