r"""Fourier coefficients of the piecewise-linear interpolant, integrated exactly on the triangles.

The nodal quadrature of a Fourier coefficient, :math:`\sum_i w_i u_i e^{-2\pi i m \cdot \xi_i}`,
treats the exponential as constant over each node's share of the domain. Where cells are large
against the wavelength of a mode (the coarse corner of a graded mesh), the error of that
quadrature grows like :math:`(|m| h)^2` and the coefficients alias. Integrating instead the
piecewise-linear (P1) interpolant :math:`u_h = \sum_i u_i \varphi_i` of the nodal values exactly,

.. math::
    \int_D u_h(x)\, e^{2\pi i\, m \cdot \xi(x)}\,dx = \sum_i u_i\, W_i(m), \qquad
    W_i(m) = \int_D \varphi_i(x)\, e^{2\pi i\, m \cdot \xi(x)}\,dx,

leaves only the interpolation error of :math:`u` (:math:`O(h^2 |u''|)`, whatever the mode). The
weights :math:`W_i(m)` depend on the mesh alone: they are computed once per mesh and a transform
costs the same :math:`O(N M C)` as the nodal one (``benchmarks/fourier_quadrature.py`` measures
both against the exact coefficients).

On a triangle :math:`T` with barycentric coordinates :math:`\lambda` and phases
:math:`z_v = 2\pi i\, m \cdot \xi_v` at its vertices, :math:`e^{2\pi i m\cdot\xi(x)} = e^{\lambda
\cdot z}`, and the Hermite–Genocchi formula gives, with divided differences of :math:`\exp`,

.. math::
    \int_T \lambda_a\, e^{\lambda \cdot z}\,dx = 2|T|\; \exp[z_a, z_a, z_b, z_c]
    = 2|T|\, e^{z_a} \sum_{n \ge 0} \frac{1}{(n+3)!} \sum_{j+k=n} \delta_b^j\, \delta_c^k,
    \qquad \delta_v = z_v - z_a.

The series is summed where :math:`|\delta| \le` :data:`SERIES_RADIUS` (every cell smaller than
about a sixth of the shortest wavelength), and the divided difference is read from the matrix
exponential of the bidiagonal matrix of the phases elsewhere (Opitz's formula), in float64.
"""

from __future__ import annotations

import math

import torch

from ..errors import UnsupportedCellError

__all__ = ["SERIES_RADIUS", "p1_fourier_basis", "p1_triangle_weights"]

#: Largest phase difference :math:`|\delta|` across a triangle for which the series is summed
#: (at most 33 terms reach float64 precision there); larger ones use the matrix
#: exponential.
SERIES_RADIUS = 4.0


def _series_terms(radius: float) -> int:
    """Terms of the series of :func:`_exp_dd_repeated` for float64 precision where
    :math:`|b|, |c| \\le` ``radius``: the tail after term :math:`n` is below
    :math:`(n+2)\\, r^{n+1} / (n+4)!`, relative to the first term, :math:`1/6`."""
    n, term = 0, 1.0 / 6.0
    while True:
        n += 1
        term *= radius / (n + 3)
        if (n + 2) * term * radius < 1e-17 / 6.0:
            return n + 1


def _exp_dd_repeated(b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    r"""The divided difference :math:`\exp[0, 0, b, c]` of complex ``b`` and ``c`` (same shape)."""
    size = torch.maximum(b.abs(), c.abs())
    small = size <= SERIES_RADIUS
    every = bool(small.all())
    out = torch.empty_like(b)
    if every or small.any():
        bs, cs = (b, c) if every else (b[small], c[small])
        power, h = torch.ones_like(cs), torch.ones_like(bs)  # c^n and h_n = sum_{j+k=n} b^j c^k
        total, factorial = h / 6.0, 6.0
        for n in range(1, _series_terms(float(size[small].max()) if not every else float(size.max()))):
            power.mul_(cs)
            h.mul_(bs).add_(power)
            factorial *= n + 3
            total.add_(h, alpha=1.0 / factorial)
        if every:
            return total
        out[small] = total
    # Opitz: exp of the bidiagonal matrix holds the divided differences in its first row
    bl, cl = b[~small], c[~small]
    matrix = torch.zeros(len(bl), 4, 4, dtype=b.dtype, device=b.device)
    matrix[:, 2, 2], matrix[:, 3, 3] = bl, cl
    matrix[:, 0, 1] = matrix[:, 1, 2] = matrix[:, 2, 3] = 1.0
    out[~small] = torch.linalg.matrix_exp(matrix)[:, 0, 3]
    return out


def p1_fourier_basis(pos: torch.Tensor, cells: torch.Tensor, xi: torch.Tensor, modes: torch.Tensor,
                     half: bool = True, chunk: int = 2 ** 22) -> torch.Tensor:
    r"""The weights :math:`\int_D \varphi_i(x)\,[\cos, \sin](2\pi m \cdot \xi(x))\,dx` of every
    node :math:`i`, exact for the hat functions :math:`\varphi_i` of a triangle mesh.

    They replace :math:`w_i \cos(2\pi m \cdot \xi_i)` and :math:`w_i \sin(2\pi m \cdot \xi_i)`
    of the nodal quadrature, in the layout of :func:`~geoattn.nn.spectral.dense_basis`, as the
    ``weighted`` basis of :func:`~geoattn.nn.spectral.fourier_coefficients`. Computed in
    float64; cast the result to the model's dtype.

    Args:
        pos: node coordinates ``[N, 2]`` (for the triangles' areas).
        cells: triangles ``[T, 3]`` (node indices).
        xi: reference coordinates of the nodes in the Fourier box ``[N, 2]``
            (:attr:`~geoattn.nn.spectral.FourierFrame.xi`; an affine map of ``pos``).
        modes: integer modes ``[M, 2]`` (:func:`~geoattn.nn.spectral.fourier_modes`).
        half: for modes in the symmetric order of :func:`~geoattn.nn.spectral.fourier_modes`,
            the mode 0 and the half after it, ``[N, M]``, as :func:`~geoattn.nn.spectral.dense_basis`
            does (default); ``False``: all cosines and sines, ``[N, 2M]``.
        chunk: triangle-mode pairs computed at once (bounds the memory).

    Raises:
        UnsupportedCellError: ``cells`` are not triangles of 2-D nodes.
    """
    from .spectral import _zero_index

    if pos.shape[-1] != 2 or cells.dim() != 2 or cells.shape[1] != 3:
        raise UnsupportedCellError(f"the exact P1 transform needs triangles of 2-D nodes, got nodes "
                                   f"{tuple(pos.shape)} and cells {tuple(cells.shape)}")
    zero = _zero_index(modes) if half else None
    used = modes if zero is None else modes[zero:]
    pos, xi = pos.double(), xi.double()
    cells = cells.long().to(pos.device)
    out = torch.zeros(len(pos), len(used), dtype=torch.complex128, device=pos.device)
    step = max(1, chunk // max(len(used), 1))
    for start in range(0, len(cells), step):
        tri = cells[start:start + step]
        weights = p1_triangle_weights(pos[tri], xi[tri], used)  # (T, 3, M_u)
        for a in range(3):
            out.index_add_(0, tri[:, a], weights[:, a])
    if zero is None:
        return torch.cat([out.real, out.imag], dim=-1)
    return torch.cat([out.real, out.imag[:, 1:]], dim=-1)


def p1_triangle_weights(corner: torch.Tensor, corner_xi: torch.Tensor, modes: torch.Tensor) -> torch.Tensor:
    r"""The integrals :math:`\int_T \lambda_a(x)\, e^{2\pi i\, m \cdot \xi(x)}\,dx` of the
    barycentric coordinates :math:`\lambda_a` of every triangle against every mode, exactly
    (complex128, ``[T, 3, M]``): the per-cell pieces that :func:`p1_fourier_basis` adds up per node.

    Args:
        corner: the triangles' vertices ``[T, 3, 2]`` (for their areas).
        corner_xi: the vertices' reference coordinates ``[T, 3, 2]`` (an affine map of ``corner``).
        modes: integer modes ``[M, 2]`` (all of them are used, whatever their order).
    """
    corner, corner_xi = corner.double(), corner_xi.double()
    edge1, edge2 = corner[:, 1] - corner[:, 0], corner[:, 2] - corner[:, 0]
    area2 = (edge1[:, 0] * edge2[:, 1] - edge1[:, 1] * edge2[:, 0]).abs()  # 2 |T|
    phase = 2.0 * math.pi * (corner_xi @ modes.to(corner).t())  # (T, 3, M): z_v / i
    out = torch.empty(*phase.shape, dtype=torch.complex128, device=corner.device)
    if out.numel() == 0:
        return out
    for a in range(3):
        b, c = (a + 1) % 3, (a + 2) % 3
        dd = _exp_dd_repeated(1j * (phase[:, b] - phase[:, a]), 1j * (phase[:, c] - phase[:, a]))
        out[:, a] = area2[:, None] * torch.polar(torch.ones_like(phase[:, a]), phase[:, a]) * dd
    return out
