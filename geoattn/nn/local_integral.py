r"""Local integral operator: local weighted means of a function under a fixed kernel basis.

The kernel is a learned combination of fixed, continuous, piecewise-linear functions of the offset
``x - y`` on the ball of radius ``r``, as the discrete-continuous (DISCO) convolutions of Ocampo
et al. (2022) that Liu-Schiaffini et al. (*Neural Operators with Localized Integral and
Differential Kernels*, ICML 2024) put next to FNO's global convolution. Here every integral is
the nodes' quadrature on any mesh, and each basis function gives a weighted local mean, so the
layer is one continuum operator on every mesh:

.. math::
    (\mathcal K h)(x) = \sum_{b} M_b\,
    \frac{\int_{D} \psi_b\big(\frac{x - y}{r}\big)\, h(y)\, dy}{\int_{D} \psi_b\big(\frac{x - y}{r}\big)\, dy}
    \approx \sum_b M_b\, \frac{\sum_{j} w_j\, \psi_b\big(\frac{x_i - x_j}{r}\big)\, h_j}
    {\sum_{j} w_j\, \psi_b\big(\frac{x_i - x_j}{r}\big)}

(a term whose denominator is zero, a sector of the ball that holds no node, is zero). The basis,
``1 + (rings - 1) * angles`` functions of :math:`\rho = |z| / r` and, in 2-D, of the angle
:math:`\theta` of :math:`z`:

.. math::
    \psi_0 = \max(0, 1 - \rho), \qquad
    \psi_{k, a} = \max(0, 1 - |\text{rings}\cdot\rho - k|)\;
    \max\Big(0, 1 - \tfrac{\text{angles}}{2\pi} \big|\theta - \tfrac{2\pi a}{\text{angles}}\big|_{2\pi}\Big),
    \quad 1 \le k < \text{rings}, \ 0 \le a < \text{angles},

with the angular factor 1 when ``angles = 1`` (isotropic rings, in any dimension).

Every :math:`\psi_b` is continuous and vanishes on the sphere :math:`\rho = 1`, and the angular
ones vanish at the centre, where the angle is undefined. The isotropic :math:`\psi_0` covers the
whole ball, so it is resolved as well as the others. Dividing by the quadrature of the kernel
itself (rather than by its exact integral) makes the layer exact for constants on every mesh and
its quadrature error several times smaller on coarse meshes (``tests/nn/test_local_integral.py``);
near the boundary of :math:`D` the ball is cut and the means are over the part inside. The
differences between the sectors' means are the layer's view of the function's local variation.
The cost is :math:`O(E \cdot C)` for the ``E`` pairs of nodes closer than ``r``, one sparse
product per call; given the :class:`~geoattn.mesh.Mesh` (``mesh=``), the sparse matrices are
built once per mesh and kept in its memo (for a batch, in each member's).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import ConfigError
from ..mesh.mesh import Mesh
from ..mesh.neighbors import radius_graph
from .sparse import SparseProduct, block_diagonal, csr_matrix

__all__ = ["LocalIntegral", "local_basis"]


def local_basis(offset: torch.Tensor, radius: float, rings: int = 2, angles: int = 4) -> torch.Tensor:
    r"""The kernel basis :math:`\psi_b((x - y) / r)` of :class:`LocalIntegral` at offsets ``x - y``.

    Args:
        offset: ``[E, d]``.
        radius: :math:`r`.
        rings: radial functions (``>= 1``).
        angles: angular hat functions of the outer rings (``1``: isotropic; ``> 1`` needs ``d = 2``).

    Returns:
        ``[E, B]`` with ``B = 1 + (rings - 1) * angles``.
    """
    rho = offset.norm(dim=-1) / radius
    radial = [(1 - rho).clamp(min=0)] + [(1 - (rings * rho - k).abs()).clamp(min=0) for k in range(1, rings)]
    if angles == 1:
        return torch.stack(radial, dim=-1)
    theta = torch.atan2(offset[:, 1], offset[:, 0])
    step = 2 * math.pi / angles
    sectors = [(1 - (torch.remainder(theta - a * step + math.pi, 2 * math.pi) - math.pi).abs() / step).clamp(min=0)
               for a in range(angles)]
    return torch.stack([radial[0]] + [r * s for r in radial[1:] for s in sectors], dim=-1)


class LocalIntegral(nn.Module):
    r"""The local integral operator of the module docstring, on the nodes' quadrature.

    Args:
        in_channels: :math:`C_\text{in}`.
        out_channels: :math:`C_\text{out}`.
        dim: spatial dimension :math:`d`.
        radius: :math:`r`, in the units of the coordinates (the kernel's support is the same on
            every mesh; give it several edges of the coarsest mesh the layer will see).
        rings: radial functions (default ``2``).
        angles: angular hat functions of the outer rings (default ``4`` in 2-D, ``1`` otherwise).

    Shapes:
        - input: ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional; no
          two graphs interact), and ``mesh``, the :class:`~geoattn.mesh.Mesh` of ``pos``,
          ``weight`` and ``batch`` (optional keyword, as a model passes it: the sparse matrices
          are then kept in its memo, built once per mesh; without it they are built on every
          call).
        - output: ``[N, C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int, radius: float, rings: int = 2,
                 angles: int | None = None):
        super().__init__()
        angles = (4 if dim == 2 else 1) if angles is None else angles
        if not radius > 0 or rings < 1 or angles < 1:
            raise ConfigError(f"LocalIntegral needs radius > 0, rings >= 1 and angles >= 1, "
                              f"got {radius}, {rings}, {angles}")
        if angles > 1 and dim != 2:
            raise ConfigError(f"angular basis functions need dim = 2, got dim={dim} with angles={angles}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.radius, self.rings, self.angles = float(radius), rings, angles
        self.num_basis = 1 + (rings - 1) * angles
        self.mix = nn.Linear(self.num_basis * in_channels, out_channels, bias=False)

    @property
    def structure_key(self) -> tuple:
        """The key of the layer's matrices in a mesh's memo (every setting they depend on)."""
        return ("local_integral", self.radius, self.rings, self.angles)

    def matrix(self, pos: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r"""The sparse ``[N B, N]`` matrix of one mesh, row ``i B + b`` holding
        :math:`w_j \psi_b((x_i - x_j) / r)` over the row's sum (CSR, zeros dropped), and its
        transpose."""
        j, i = radius_graph(pos.detach(), self.radius)  # source j, target i
        values = local_basis((pos[i] - pos[j]).detach().double(), self.radius, self.rings, self.angles)
        values = values * weight.detach().double()[j, None]
        n = len(pos)
        rows = i[:, None] * self.num_basis + torch.arange(self.num_basis, device=pos.device)
        mass = torch.zeros(n * self.num_basis, dtype=values.dtype, device=values.device)
        mass.index_add_(0, rows.reshape(-1), values.reshape(-1))  # each row's quadrature of psi_b
        values = values / mass[rows].clamp(min=torch.finfo(values.dtype).tiny)  # rows without mass stay zero
        keep = values != 0
        rows, cols, values = rows[keep], j[:, None].expand_as(keep)[keep], values[keep].to(pos.dtype)
        return csr_matrix(rows, cols, values, (n * self.num_basis, n)), csr_matrix(cols, rows, values, (n, n * self.num_basis))

    def batch_matrix(self, pos: torch.Tensor, weight: torch.Tensor,
                     batch: torch.Tensor | None = None, *, mesh: Mesh | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """The block-diagonal :meth:`matrix` of a batch and its transpose, from every graph's
        matrices: kept in the memo of ``mesh`` (its members' for the blocks, its own for the
        assembled matrix), or built now for bare tensors."""
        if mesh is None:
            mesh = Mesh(pos, weight, batch=batch)  # a new mesh: nothing kept
        return mesh.structure(self.structure_key, self._build, self._join)

    @torch.compiler.disable
    def _build(self, mesh: Mesh) -> tuple[torch.Tensor, torch.Tensor]:
        """The matrices of one mesh, built eagerly (a KD-tree query and a sparse assembly) also
        under torch.compile."""
        return self.matrix(mesh.pos, mesh.weight)

    @torch.compiler.disable
    def _join(self, mesh: Mesh, parts: list) -> tuple[torch.Tensor, torch.Tensor]:
        """The block-diagonal matrices of a batch from its members'."""
        starts = list(mesh.layout.offsets)
        return (block_diagonal([m for m, _ in parts], starts, mesh.num_nodes),
                block_diagonal([t for _, t in parts], [k * self.num_basis for k in starts],
                                mesh.num_nodes * self.num_basis))

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, mesh: Mesh | None = None) -> torch.Tensor:
        if weight.shape != (x.shape[0],) or pos.shape != (x.shape[0], self.dim):
            raise ValueError(f"need pos [N, {self.dim}] and weight [N] for x of {x.shape[0]} nodes, "
                             f"got {tuple(pos.shape)} and {tuple(weight.shape)}")
        if mesh is not None and mesh.num_nodes != x.shape[0]:
            raise ValueError(f"mesh has {mesh.num_nodes} nodes, x has {x.shape[0]}")
        means = SparseProduct.apply(*self.batch_matrix(pos, weight, batch, mesh=mesh), x)  # (N * B, C_in)
        return self.mix(means.reshape(len(x), self.num_basis * self.in_channels))

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, dim={self.dim}, radius={self.radius:g}, "
                f"rings={self.rings}, angles={self.angles}")
