"""Per-cell gradients of piecewise-linear (P1) interpolants on simplex meshes."""

from __future__ import annotations

import math

import torch


def p1_gradients(values: torch.Tensor, pos: torch.Tensor, cells: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Constant gradients of the piecewise-linear interpolant on each simplex cell.

    On a cell with vertices :math:`v_0, \\dots, v_d` and Jacobian
    :math:`J = [v_1 - v_0, \\dots, v_d - v_0]`, the gradient :math:`g` solves
    :math:`J^\\top g = (u_k - u_0)_{k=1..d}`; the cell volume is :math:`|\\det J| / d!`. On a
    surface (triangles in 3-D, ``J`` of shape ``3 x 2``) the gradient is the tangential one, in
    the cell's plane: :math:`g = J (J^\\top J)^{-1} (u_k - u_0)_k`, and the area is
    :math:`\\sqrt{\\det J^\\top J} / 2`.

    Args:
        values: nodal values ``[N, C]``.
        pos: node coordinates ``[N, d]``.
        cells: simplex cells ``[M, d + 1]`` (lines, triangles, tetrahedra), or triangles
            ``[M, 3]`` of a surface in 3-D.

    Shapes:
        - output: gradients ``[M, C, d]`` and cell volumes ``[M]``.
    """
    d = pos.shape[1]
    values = values.reshape(values.shape[0], -1)  # [N, C]
    if d == 3 and cells.shape[1] == 3:  # a surface: tangential gradients
        edges = pos[cells[:, 1:]] - pos[cells[:, :1]]  # [M, 2, 3], rows are edge vectors = J^T
        gram = edges @ edges.transpose(1, 2)  # [M, 2, 2] = J^T J
        du = values[cells[:, 1:]] - values[cells[:, :1]]  # [M, 2, C]
        grad = (edges.transpose(1, 2) @ torch.linalg.solve(gram, du)).transpose(1, 2)  # [M, C, 3]
        return grad, torch.linalg.det(gram).clamp_min(0).sqrt() / 2
    if cells.shape[1] != d + 1:
        raise ValueError(f"P1 gradients need simplex cells with {d + 1} vertices in {d}-D, "
                         f"got cells with {cells.shape[1]} vertices")
    verts = pos[cells]  # [M, d+1, d]
    jac_t = (verts[:, 1:] - verts[:, :1])  # [M, d, d], rows are edge vectors = J^T
    du = values[cells[:, 1:]] - values[cells[:, :1]]  # [M, d, C]
    grad = torch.linalg.solve(jac_t, du).transpose(1, 2)  # [M, C, d]
    volume = torch.linalg.det(jac_t).abs() / math.factorial(d)
    return grad, volume
