r"""Metrics of kernel learning (NAO paper, eqs. (17), (18), Fig. 5), as quadratures.

- :func:`operator_error`, :math:`E_f`: relative :math:`L^2` error of the predicted responses,
  averaged over the :math:`d` pairs of a system;
- :func:`kernel_error`, :math:`E_K`: relative error of the kernel in :math:`L^2(\rho)`;
- :func:`radial_density`: the paper's empirical density :math:`\rho'(r) \propto \sum_j |g[u](r, x_j)|`;
- :func:`recover_microstructure`: the two-phase map read off the kernel's row sums.
"""

from __future__ import annotations

import math

import torch

__all__ = ["kernel_error", "operator_error", "radial_density", "recover_microstructure"]


def operator_error(pred: torch.Tensor, target: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    r""":math:`E_f = \frac1d \sum_j \|\tilde f_j - f_j\|_{L^2} / \|f_j\|_{L^2}` per system.

    With an f-mesh of one point (the radial problem, where the pairs are the samples
    :math:`f(x_j)` of one function) the norm is taken over the :math:`d` samples instead:
    :math:`\|\tilde f - f\|_{\ell^2} / \|f\|_{\ell^2}`.

    Args:
        pred, target: ``[B, Nf, d]``.
        weight: f-mesh weights ``[B or 1, Nf]``.

    Returns:
        ``[B]``.
    """
    if pred.shape[1] == 1:
        return (pred - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1)
    w = weight[..., None].to(pred.dtype)
    num = (w * (pred - target) ** 2).sum(1)  # (B, d) = ∫ |f~_j - f_j|^2
    den = (w * target**2).sum(1)
    return torch.sqrt(num / den).mean(1)


def kernel_error(kernel: torch.Tensor, truth: torch.Tensor, weight_x: torch.Tensor,
                 weight_y: torch.Tensor, rho: torch.Tensor | None = None) -> torch.Tensor:
    r""":math:`E_K = \|K - K^*\|_{L^2(\rho)} / \|K^*\|_{L^2(\rho)}`, with
    :math:`\|K\|^2 = \sum_{i,k} w^x_i\, w^y_k\, \rho_k\, K(x_i, y_k)^2` (:math:`\rho = 1`: plain
    relative :math:`L^2(\Omega \times \Omega)`).

    Args:
        kernel, truth: ``[B, Nx, Ny]`` (``truth`` may have ``B = 1``).
        weight_x: ``[B or 1, Nx]``; weight_y: ``[B or 1, Ny]``.
        rho: density on the y-points ``[B or 1, Ny]`` (default: 1).

    Returns:
        ``[B]``.
    """
    wy = weight_y if rho is None else weight_y * rho
    w = (weight_x[:, :, None] * wy[:, None, :]).to(kernel.dtype)  # (B, Nx, Ny)
    return torch.sqrt((w * (kernel - truth) ** 2).sum((1, 2)) / (w * truth**2).sum((1, 2)))


def radial_density(u: torch.Tensor) -> torch.Tensor:
    r"""Eq. (22): :math:`\rho'(r_k) \propto \sum_j |g[u](r_k, x_j)|` from loadings ``[B, N, d]``;
    returns ``[B, N]`` (normalised to mean 1, which does not affect :func:`kernel_error`)."""
    rho = u.abs().sum(-1)
    return rho / rho.mean(-1, keepdim=True)


def recover_microstructure(kernel: torch.Tensor, reference: torch.Tensor, weight: torch.Tensor,
                           high: float = 12.0, low: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The conductivity phases read off the kernel's row sums (Fig. 5 of the paper).

    The row sum :math:`S(x) = \int K(x, y)\,dy` is the response to the unit load. Divided by the
    row sum of the unit-conductivity kernel ``reference`` it is :math:`1/b` for a constant
    conductivity :math:`b`, so the high phase is where :math:`S/S_1 < 1/\sqrt{b_+ b_-}`.

    Args:
        kernel: ``[Nx, Ny]``; reference: ``[Nx, Ny]`` (Green's kernel for :math:`b = 1`).
        weight: ``[Ny]``.
        high, low: the two conductivities.

    Returns:
        ``(is_high [Nx] bool, ratio [Nx])``.
    """
    ratio = (kernel @ weight) / (reference @ weight)
    return ratio < 1.0 / math.sqrt(high * low), ratio
