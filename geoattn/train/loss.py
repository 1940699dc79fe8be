"""Relative :math:`L^2(D)` and :math:`H^1(D)` errors with quadrature weights, per sample.

For a prediction :math:`\\hat u` of a target :math:`u` on a domain :math:`D`

.. math::
    \\frac{\\|\\hat u - u\\|_{L^2(D)}}{\\|u\\|_{L^2(D)}}
    \\approx \\sqrt{\\frac{\\sum_i w_i |\\hat u_i - u_i|^2}{\\sum_i w_i |u_i|^2}},

and the :math:`H^1` version adds :math:`\\|\\nabla(\\hat u - u)\\|^2_{L^2}` (resp.
:math:`\\|\\nabla u\\|^2_{L^2}`) computed exactly for the piecewise-linear interpolants on simplex
cells. Each sample of a batch gets its own ratio; ``reduction`` combines the per-sample values.

The ratio is undefined for a target of zero norm: such a sample raises
:class:`~geoattn.errors.ZeroNormError` (and a target with NaN or infinite values
:class:`~geoattn.errors.NonFiniteError`), naming the sample, instead of returning a silent NaN
or an error divided by ``eps``. A non-finite *prediction* gives a non-finite error, which the
trainer reports as :class:`~geoattn.errors.NonFiniteLossError`.
"""

from __future__ import annotations

import math

import torch
from torch_geometric.utils import scatter

from ..errors import NonFiniteError, ZeroNormError
from ..mesh import integrate, p1_gradients
from ..mesh.mesh import Mesh


def _reduce(value: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return value.mean()  # quadrature-ok: mean over samples, not nodes
    if reduction == "sum":
        return value.sum()
    if reduction == "none":
        return value
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _ratio(num: torch.Tensor, den: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    """``sqrt(num / (den + eps))`` per sample, after checking every ``den`` is finite and ``> 0``."""
    ok = torch.isfinite(den) & (den > 0)
    if not bool(ok.all()):
        b = int(torch.nonzero(~ok.reshape(-1))[0])
        which = f"the target of sample {b}" if den.dim() else "the target"
        value = float(den.reshape(-1)[b])
        if not math.isfinite(value):
            raise NonFiniteError(f"{which} has squared {norm} norm {value}: its values or weights "
                                 f"are not finite, or too large for {den.dtype}: rescale the "
                                 "coordinates (read_mesh(..., scale=)) or the field, or use float64")
        cause = ("check the weights for negative values" if value < 0 else
                 f"drop all-zero targets (a target that is not zero underflowed {den.dtype}: rescale "
                 "the coordinates, read_mesh(..., scale=), or the field, or use float64)")
        raise ZeroNormError(f"{which} has squared {norm} norm {value:.3g}, so the relative error is "
                            f"undefined; {cause}, or compare with an absolute error")
    return torch.sqrt(num / (den + eps))


def _squared_norm(f: torch.Tensor, weight: torch.Tensor, batch: torch.Tensor | None,
                  num_graphs: int | None) -> torch.Tensor:
    """:math:`\\sum_i w_i |f_i|^2` per graph (``[B]``, or a scalar without ``batch``)."""
    f = f.reshape(f.shape[0], -1)  # [N, C]
    return integrate(f.square().sum(1), weight, batch, num_graphs)


def _former(name: str, args: tuple, kwargs: dict):
    """The former call ``name(pred, target, weight, batch, num_graphs, ...)`` (``relative_h1``:
    ``pos, weight, cells, batch, num_graphs``) bridged by :mod:`geoattn.compat`, which warns."""
    from .. import compat

    return getattr(compat, f"former_{name}")(*args, **kwargs)


def _layout(mesh: Mesh) -> tuple[torch.Tensor | None, int | None]:
    return mesh.batch_vector, (mesh.num_graphs if mesh.batch_vector is not None else None)


def relative_l2(pred: torch.Tensor, target: torch.Tensor, mesh: Mesh, *args,
                reduction: str = "mean", eps: float = 0.0, **kwargs) -> torch.Tensor:
    """Relative :math:`L^2(D)` error of ``pred`` against ``target`` on ``mesh``, one ratio per
    sample (graph of the mesh).

    .. math::
        e_b = \\sqrt{\\frac{\\sum_{i \\in b} w_i \\|\\hat u_i - u_i\\|^2}
                         {\\sum_{i \\in b} w_i \\|u_i\\|^2}}

    Args:
        pred: predicted values ``[N, C]`` (or ``[N]``).
        target: target values, same shape.
        mesh: the :class:`~geoattn.mesh.Mesh` of the values (its weights and batch layout), the
            one the model was called on.
        reduction: ``"mean"`` (default) or ``"sum"`` over samples, or ``"none"`` for ``[B]``.
        eps: added to the denominator (default ``0``). It is an absolute amount of
            :math:`\\int_D |u|^2 dx`, whose size depends on the units of the mesh (a weight is a
            volume): any ``eps > 0`` biases the error of a mesh in small units (a target of
            squared norm ``1e-16`` against ``eps = 1e-12`` reads 100 times too small). A target
            of zero norm raises :class:`~geoattn.errors.ZeroNormError` instead.

    The former call ``relative_l2(pred, target, weight, batch, num_graphs)`` goes through
    :mod:`geoattn.compat` with a :class:`DeprecationWarning`.

    Raises:
        ZeroNormError: a sample's target has zero norm (or the weights sum to zero).
        NonFiniteError: a sample's target norm is NaN or infinite.

    Shapes:
        - output: scalar, or ``[B]`` (``B = mesh.num_graphs``) with ``reduction="none"``.
    """
    if not isinstance(mesh, Mesh):
        return _former("relative_l2", (pred, target, mesh, *args), dict(reduction=reduction, eps=eps, **kwargs))
    if args or kwargs:
        raise TypeError("relative_l2(pred, target, mesh, *, reduction='mean', eps=0.0): the mesh carries "
                        "the weights and the batch layout")
    if pred.shape != target.shape:
        raise ValueError(f"prediction has shape {tuple(pred.shape)} but target has {tuple(target.shape)}")
    batch, num_graphs = _layout(mesh)
    num = _squared_norm(pred - target, mesh.weight, batch, num_graphs)
    den = _squared_norm(target, mesh.weight, batch, num_graphs)
    return _reduce(_ratio(num, den, eps, "L2").reshape(mesh.num_graphs), reduction)


def relative_h1(pred: torch.Tensor, target: torch.Tensor, mesh: Mesh, *args,
                reduction: str = "mean", eps: float = 0.0, **kwargs) -> torch.Tensor:
    """Relative :math:`H^1(D)` error on ``mesh``, with gradients of the P1 interpolants on its
    simplex cells.

    .. math::
        e_b = \\sqrt{\\frac{\\sum_i w_i \\|e_i\\|^2 + \\sum_K |K|\\,\\|\\nabla e|_K\\|^2}
                         {\\sum_i w_i \\|u_i\\|^2 + \\sum_K |K|\\,\\|\\nabla u|_K\\|^2}},
        \\quad e = \\hat u - u.

    Args:
        pred, target: values ``[N, C]``.
        mesh: the :class:`~geoattn.mesh.Mesh` of the values, with simplex ``cells``.
        reduction, eps: as in :func:`relative_l2`.

    The former call ``relative_h1(pred, target, pos, weight, cells, batch, num_graphs)`` goes
    through :mod:`geoattn.compat` with a :class:`DeprecationWarning`.

    Raises:
        ValueError: the mesh has no cells.
        ZeroNormError, NonFiniteError: as :func:`relative_l2`, for the :math:`H^1` norm.

    Shapes:
        - output: scalar, or ``[B]`` (``B = mesh.num_graphs``) with ``reduction="none"``.
    """
    if not isinstance(mesh, Mesh):
        return _former("relative_h1", (pred, target, mesh, *args), dict(reduction=reduction, eps=eps, **kwargs))
    if args or kwargs:
        raise TypeError("relative_h1(pred, target, mesh, *, reduction='mean', eps=0.0): the mesh carries "
                        "the nodes, weights, cells and the batch layout")
    if pred.shape != target.shape:
        raise ValueError(f"prediction has shape {tuple(pred.shape)} but target has {tuple(target.shape)}")
    if mesh.cells is None:
        raise ValueError("relative_h1 needs the mesh's cells (the gradients of the P1 interpolants); "
                         "build the Mesh with them")
    batch, num_graphs = _layout(mesh)
    pos, cells = mesh.pos, mesh.cells

    def seminorm(f: torch.Tensor) -> torch.Tensor:
        grad, volume = p1_gradients(f, pos, cells)
        per_cell = grad.square().sum((1, 2)) * volume  # [M]
        if batch is None:
            return per_cell.sum()
        return scatter(per_cell, batch[cells[:, 0]], dim=0, dim_size=num_graphs, reduce="sum")

    err = pred - target
    num = _squared_norm(err, mesh.weight, batch, num_graphs) + seminorm(err)
    den = _squared_norm(target, mesh.weight, batch, num_graphs) + seminorm(target)
    return _reduce(_ratio(num, den, eps, "H1").reshape(mesh.num_graphs), reduction)
