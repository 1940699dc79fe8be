"""Weighted integrals over nodes, per graph of a (possibly batched) sample.

These are the only sums over nodes geoattn uses: :math:`\\int_D f\\,dx \\approx \\sum_i w_i f_i`
and the mean :math:`|D|^{-1}\\int_D f\\,dx \\approx \\sum_i w_i f_i / \\sum_i w_i`. With a PyG
``batch`` vector the sums are taken per graph.
"""

from __future__ import annotations

import torch
from torch_geometric.utils import scatter


def integrate(f: torch.Tensor, weight: torch.Tensor, batch: torch.Tensor | None = None,
              num_graphs: int | None = None) -> torch.Tensor:
    """:math:`\\sum_i w_i f_i` over nodes.

    Args:
        f: values ``[N]`` or ``[N, C]``.
        weight: quadrature weights ``[N]``.
        batch: graph index of each node ``[N]`` (``None``: one graph).
        num_graphs: number of graphs ``B`` (default: ``batch.max() + 1``).

    Returns:
        ``f.shape[1:]`` without ``batch``; ``[B, *f.shape[1:]]`` with it.
    """
    wf = f * weight.view(-1, *([1] * (f.dim() - 1))).to(f.dtype)
    if batch is None:
        return wf.sum(0)
    return scatter(wf, batch, dim=0, dim_size=num_graphs, reduce="sum")


def weighted_mean(f: torch.Tensor, weight: torch.Tensor, batch: torch.Tensor | None = None,
                  num_graphs: int | None = None) -> torch.Tensor:
    """:math:`\\sum_i w_i f_i / \\sum_i w_i`, the quadrature of the domain average of ``f``."""
    total = integrate(torch.ones_like(weight), weight, batch, num_graphs)
    value = integrate(f, weight, batch, num_graphs)
    if batch is not None:
        total = total.view(-1, *([1] * (value.dim() - 1)))
    return value / total
