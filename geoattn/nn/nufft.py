r"""Non-uniform fast Fourier transforms (finufft) as differentiable torch operations.

For nonuniform points :math:`x_j \in [-\pi, \pi)^d` and the integer modes
:math:`k \in \{-\lfloor n_1/2 \rfloor .. \lfloor (n_1-1)/2 \rfloor\} \times \dots`, the type-1
transform (nonuniform to uniform) and the type-2 transform (uniform to nonuniform) are

.. math::
    f(k) = \sum_j c_j\, e^{\pm i\, k \cdot x_j}, \qquad
    c_j = \sum_k f(k)\, e^{\pm i\, k \cdot x_j},

computed to a relative tolerance :math:`\varepsilon` in :math:`O(N w^d + M \log M)` per
transform (:math:`w \approx \log_{10}(1/\varepsilon) + 1` the spreading width, :math:`M` the
modes) rather than the :math:`O(N M)` of the direct sums. Both are linear in the values; the
adjoint of one is the other with the opposite sign, which is how the backward passes are
computed (they are not themselves differentiable: no second derivatives). The points are data,
not parameters: no gradient flows to them, and passing points that require grad is an error
(use the dense path of :mod:`geoattn.nn.spectral` for gradients in the positions).

The package is `finufft <https://finufft.readthedocs.io>`_ (Flatiron Institute), imported when
first used (extra ``nufft``). Only CPU tensors are transformed: a tensor on another device is
copied to the CPU and the result copied back. The GPU library of the same authors, cufinufft,
has the same interface and would be the CUDA path; it is not wired in.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.autograd.function import once_differentiable

from geoattn.optional import MissingDependencyError, require

__all__ = ["available", "finufft", "nufft_tolerance", "nufft_type1", "nufft_type2"]


def finufft():
    """The finufft module, or a :class:`~geoattn.optional.MissingDependencyError` naming the
    ``nufft`` extra."""
    return require("finufft", "nufft", "the NUFFT spectral path")


def available() -> bool:
    """Whether finufft can be imported (it is, if so: the first call pays the import)."""
    try:
        finufft()
    except MissingDependencyError:
        return False
    return True


def nufft_tolerance(dtype: torch.dtype) -> float:
    """Requested relative tolerance: ``1e-6`` for single precision, ``1e-13`` for double.

    ``1e-6`` is close to the best finufft reaches in single precision, and keeps the transforms
    within about ``1e-5`` (relative, in norm) of the direct sums computed in float32.
    """
    return 1e-13 if dtype in (torch.float64, torch.complex128) else 1e-6


def _execute(nufft_type: int, points: torch.Tensor, data: torch.Tensor, n_modes: tuple[int, ...],
             isign: int) -> torch.Tensor:
    """One finufft plan executed on ``data``: ``[C, N] -> [C, *n_modes]`` (type 1) or
    ``[C, *n_modes] -> [C, N]`` (type 2), on the device of ``data``."""
    dtype = torch.complex128 if data.dtype in (torch.float64, torch.complex128) else torch.complex64
    pts = points.detach().to("cpu", dtype.to_real())
    plan = finufft().Plan(nufft_type, n_modes, n_trans=data.shape[0], eps=nufft_tolerance(dtype),
                          isign=isign, dtype=str(dtype).removeprefix("torch."), modeord=0,
                          nthreads=torch.get_num_threads())
    plan.setpts(*(pts[:, k].contiguous().numpy() for k in range(pts.shape[1])))
    values = data.detach().to("cpu", dtype).resolve_conj().contiguous()
    out = torch.from_numpy(plan.execute(values.numpy()))
    shape = n_modes if nufft_type == 1 else (-1,)
    return out.reshape(data.shape[0], *shape).to(data.device)


class _NUFFT(torch.autograd.Function):
    """Type 1 or 2; the backward pass is the adjoint, the other type with the opposite sign."""

    @staticmethod
    def forward(ctx, points, data, nufft_type, n_modes, isign):
        ctx.save_for_backward(points)
        ctx.nufft_type, ctx.n_modes, ctx.isign = nufft_type, n_modes, isign
        return _execute(nufft_type, points, data, n_modes, isign)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (points,) = ctx.saved_tensors
        adjoint = _execute(3 - ctx.nufft_type, points, grad, ctx.n_modes, -ctx.isign)
        return None, adjoint, None, None, None


def _check(points: torch.Tensor, values: torch.Tensor) -> None:
    if points.requires_grad:
        raise ValueError("the NUFFT gives no gradient in the points; detach them, or use the "
                         "dense transforms for gradients in the positions")
    if points.dim() != 2 or not 1 <= points.shape[1] <= 3:
        raise ValueError(f"points must be [N, d] with d in 1..3, got shape {tuple(points.shape)}")
    if not values.is_complex():
        raise TypeError(f"values must be complex (complex64 or complex128), got {values.dtype}")


def nufft_type1(points: torch.Tensor, values: torch.Tensor, n_modes: Sequence[int],
                isign: int = -1) -> torch.Tensor:
    r"""Type-1 NUFFT :math:`f_c(k) = \sum_j c_{c,j}\, e^{\mathrm{isign}\, i\, k \cdot x_j}`.

    Args:
        points: nonuniform points :math:`x_j` ``[N, d]`` (real, ``d <= 3``; the transform is
            :math:`2\pi`-periodic in each coordinate, best kept in :math:`[-\pi, \pi)`).
        values: strengths ``[C, N]`` complex, one transform per row ``C`` (``n_trans``).
        n_modes: modes per dimension :math:`(n_1, \dots, n_d)`, in the order ``-n//2 .. (n-1)//2``.
        isign: sign of the exponent (default ``-1``).

    Returns:
        ``[C, n_1, ..., n_d]`` complex, differentiable in ``values``.
    """
    _check(points, values)
    return _NUFFT.apply(points, values, 1, tuple(int(n) for n in n_modes), isign)


def nufft_type2(points: torch.Tensor, coeff: torch.Tensor, isign: int = 1) -> torch.Tensor:
    r"""Type-2 NUFFT :math:`c_{c,j} = \sum_k f_c(k)\, e^{\mathrm{isign}\, i\, k \cdot x_j}`.

    Args:
        points: nonuniform points ``[N, d]``, as :func:`nufft_type1`.
        coeff: mode values ``[C, n_1, ..., n_d]`` complex, modes ordered as :func:`nufft_type1`.
        isign: sign of the exponent (default ``+1``).

    Returns:
        ``[C, N]`` complex, differentiable in ``coeff``.
    """
    _check(points, coeff)
    if coeff.dim() != points.shape[1] + 1:
        raise ValueError(f"coeff must be [C, n_1..n_{points.shape[1]}], "
                         f"got shape {tuple(coeff.shape)}")
    return _NUFFT.apply(points, coeff, 2, tuple(coeff.shape[1:]), isign)
