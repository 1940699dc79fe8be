"""Weighted Gaussian normaliser: zero mean, unit variance in :math:`L^2(D)`, per channel."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ..mesh import integrate


class GaussianNormalizer(nn.Module):
    """Shift and scale each channel by its domain mean and standard deviation over a dataset.

    The statistics are quadrature averages over the domain and the samples, so a refined part of
    a mesh does not count more than the rest:

    .. math::
        \\mu = \\frac{\\sum_s \\int_D u_s\\,dx}{\\sum_s |D_s|}
        \\approx \\frac{\\sum_s \\sum_i w_{s,i} u_{s,i}}{\\sum_s \\sum_i w_{s,i}}, \\qquad
        \\sigma^2 = \\frac{\\sum_s \\sum_i w_{s,i} (u_{s,i} - \\mu)^2}{\\sum_s \\sum_i w_{s,i}}.

    ``encode(u) = (u - mu) / (sigma + eps)`` and ``decode`` inverts it. Before :meth:`fit` it is the
    identity.

    Args:
        channels: number of channels ``C``.
        eps: added to :math:`\\sigma` (default ``1e-6``).

    Shapes:
        - values: ``[N, C]`` in and out.
    """

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.channels = channels
        self.eps = eps
        self.register_buffer("mean", torch.zeros(channels, dtype=torch.float64))
        self.register_buffer("std", torch.ones(channels, dtype=torch.float64))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, eps={self.eps}"

    @torch.no_grad()
    def fit(self, samples: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> GaussianNormalizer:
        """Fit on ``(values [N, C], weight [N])`` pairs, one per sample; returns ``self``."""
        samples = [(v.to(torch.float64).reshape(v.shape[0], -1), w.to(torch.float64))
                   for v, w in samples]
        if not samples:
            raise ValueError("cannot fit a normaliser on an empty dataset")
        if samples[0][0].shape[1] != self.channels:
            raise ValueError(f"normaliser has {self.channels} channels, data has {samples[0][0].shape[1]}")
        total = sum(w.sum() for _, w in samples)  # sum_s |D_s|
        mean = sum(integrate(v, w) for v, w in samples) / total
        var = sum(integrate((v - mean).square(), w) for v, w in samples) / total
        self.mean.copy_(mean)
        self.std.copy_(var.sqrt())
        return self

    def encode(self, values: torch.Tensor) -> torch.Tensor:
        return (values - self.mean.to(values)) / (self.std.to(values) + self.eps)

    def decode(self, values: torch.Tensor) -> torch.Tensor:
        return values * (self.std.to(values) + self.eps) + self.mean.to(values)
