"""Mesh-native Fourier neural operator: FNO's architecture with the spectral integral on the nodes."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, UnsupportedCellError
from ..mesh.mesh import Mesh
from ..nn.local_integral import LocalIntegral
from ..nn.p1_fourier import p1_fourier_basis
from ..nn.spectral import SpectralIntegral, check_period_extent, checked_period
from .base import COMMON_OPTIONS, NeuralOperator

#: How the forward transforms integrate: ``"nodal"`` (the nodes' quadrature weights) or ``"p1"``
#: (the piecewise-linear interpolant, exactly on the triangles).
QUADRATURES = ("nodal", "p1")
from .encoder import CoordinateFeatures, PointwiseMLP


class MeshFNO(NeuralOperator, name="mesh_fno"):
    r"""The Fourier neural operator (Li et al., `ICLR 2021 <https://arxiv.org/abs/2010.08895>`_)
    without a grid: every global convolution is the quadrature-weighted spectral integral of the
    nodes (:class:`~geoattn.nn.SpectralIntegral`), so no interpolation to and from a grid is needed
    and the model is one operator on every mesh:

    .. math::
        h_0 = L(u, x), \qquad
        h_{\ell+1} = \sigma\big(W_\ell h_\ell + \mathcal K_\ell h_\ell\big), \qquad
        \mathcal G(u) = P(h_{\text{depth}}),

    .. math::
        (\mathcal K h)(y) = \mathrm{Re} \sum_{|m_k| \le K} R(m)\, \hat h(m)\, e^{2\pi i m \cdot (y - a)/L},
        \qquad \hat h(m) = \frac{1}{|B|} \sum_i w_i\, h_i\, e^{-2\pi i m \cdot (x_i - a)/L},

    on the bounding box of the nodes padded by the fraction ``padding`` (FNO's domain padding for
    non-periodic problems), or on the torus :math:`[0, L)^d` when the domain's ``period``
    :math:`L` is declared (:math:`a = 0`, no padding; see :class:`~geoattn.nn.SpectralIntegral`:
    a torus stored without its closing nodes has a bounding box that changes with the
    resolution, the declared period does not), with :math:`\sigma` the GELU (none after the last block) and
    :math:`L, P` pointwise MLPs. The cost is :math:`O(N M C)` per block for :math:`M = (2K+1)^d`
    modes. Choose ``modes`` so that the training mesh resolves them
    (:func:`~geoattn.nn.spectral.resolved_modes`): with more modes than the nodes resolve, the
    coefficients alias on the training mesh and the model does not transfer.

    With ``quadrature="p1"`` the coefficients are those of the piecewise-linear interpolant of
    the nodal values, integrated exactly on the mesh's triangles
    (:func:`~geoattn.nn.p1_fourier.p1_fourier_basis`) instead of the nodal quadrature: the
    exponentials are no longer sampled at the nodes, so a coarse cell aliases no mode, and the
    coefficients on every mesh are those of one continuum function. The weights are computed once
    per mesh (in float64, kept in the :class:`~geoattn.mesh.Mesh`'s memo, for a batch in each
    member's); the transforms cost the same. The model then needs the triangles of every mesh it
    sees: pass a :class:`~geoattn.mesh.Mesh` with cells (:meth:`~geoattn.mesh.Mesh.from_meshio`,
    :meth:`~geoattn.mesh.Mesh.from_sample` of a sample with cells); a mesh without cells is a
    ``ValueError``, cells other than triangles an :class:`~geoattn.errors.UnsupportedCellError`.

    With ``local={"radius": r}`` every block adds a local integral operator
    :math:`\mathcal K^{\text{loc}}_\ell h` (:class:`~geoattn.nn.LocalIntegral`: learned
    combinations of weighted local means of :math:`h` over the ball of radius :math:`r` and its
    sectors) to :math:`W_\ell h + \mathcal K_\ell h`, the localized kernels that Liu-Schiaffini
    et al. (ICML 2024) put beside FNO's global convolution: the spectral integral keeps the
    :math:`K` modes that every mesh resolves, and the local one sees the scales between them and
    the ball. Give the ball several edges of the coarsest mesh the model will compute on. Its
    sparse matrices are built once per mesh and kept in the mesh's memo.

    Args:
        in_channels: input function channels ``C_in``.
        out_channels: output function channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: channels ``C`` (default ``32``).
        depth: number of Fourier blocks (default ``4``).
        modes: Fourier modes :math:`K` per dimension, int or one per dimension (default ``4``).
        padding: fraction of the box added past the nodes on every axis (default ``None``:
            ``0.25``, or ``0`` with a ``period``; a nonzero padding with a period is a
            :class:`~geoattn.errors.ConfigError`).
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).
        quadrature: ``"nodal"`` (default) or ``"p1"`` (2-D triangle meshes), see above.
        local: a local integral in every block beside the spectral one, as the keywords of
            :class:`~geoattn.nn.LocalIntegral` but the channels and ``dim`` (``radius``,
            ``rings``, ``angles``; default ``None``: none), see above.
        period: the period :math:`L` of a periodic domain, one float or one per dimension
            (default ``None``: not periodic), given to every spectral block and kept in
            :attr:`hparams`, so a checkpoint rebuilds the model on the same torus. The lift then
            sees the coordinates as :math:`(\cos 2\pi x_k/L_k, \sin 2\pi x_k/L_k)_k` (and the
            ``coordinate_features`` of those), smooth functions on the torus, instead of
            :math:`x`, which jumps across the seam. Give the nodes periodic quadrature weights
            (:func:`geoattn.mesh.periodic_weights`).

    Shapes:
        - input: ``x [N, C_in]`` on ``mesh``, a :class:`~geoattn.mesh.Mesh` of ``N`` nodes in
          ``d`` dimensions (one mesh or a batch, :meth:`~geoattn.mesh.Mesh.batch`; with cells
          for ``quadrature="p1"``): ``model(x, mesh)``.
        - output: ``[N, C_out]``.
    """

    numeric_options = {**COMMON_OPTIONS, "modes": {"integer": True, "positive": False, "minimum": 0, "each": True},
                       "padding": {"positive": False, "minimum": 0.0}}

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 32,
                 depth: int = 4, modes: int | Sequence[int] = 4, padding: float | None = None,
                 coordinate_features: dict | None = None, quadrature: str = "nodal", local: dict | None = None,
                 period: float | Sequence[float] | None = None):
        super().__init__()
        if padding is None:
            padding = 0.25 if period is None else 0.0
        try:
            checked_period(period, dim, padding)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if quadrature not in QUADRATURES:
            raise ConfigError(f"quadrature must be one of {QUADRATURES}, got {quadrature!r}")
        if quadrature == "p1" and dim != 2:
            raise ConfigError(f"quadrature='p1' integrates over triangles: dim must be 2, got {dim}")
        self.quadrature = quadrature
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.period = checked_period(period, dim)
        # on a torus the coordinates enter as (cos, sin)(2 pi x / L): x itself jumps across the seam
        self.inputs = CoordinateFeatures.of(in_channels, dim if period is None else 2 * dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, 2 * width, width)
        self.spectral = nn.ModuleList(SpectralIntegral(width, width, modes, dim, padding=padding, period=period)
                                      for _ in range(depth))
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        if local is not None:
            unknown = set(local) - {"radius", "rings", "angles"}
            if unknown or "radius" not in local:
                raise ConfigError(f"local needs 'radius' and takes 'rings' and 'angles', got {sorted(local)}")
            self.local = nn.ModuleList(LocalIntegral(width, width, dim, **local)
                                       for _ in range(depth))
        else:
            self.local = None
        self.project = PointwiseMLP(width, 2 * width, out_channels)

    def forward(self, x: torch.Tensor, mesh: Mesh) -> torch.Tensor:
        self.check_call(x, mesh)
        pos, weight, batch, layout = mesh.pos, mesh.weight, mesh.batch_vector, mesh.layout
        if self.period is not None:  # once per mesh (and again after an in-place change)
            mesh.structure(("period_extent", self.period), lambda m: check_period_extent(self.period, m.pos),
                           lambda batch, parts: None)
        h = self.lift(self.inputs(x, pos if self.period is None else self._torus_coordinates(pos)))
        # the nodes' Fourier basis, for every block
        basis = self.spectral[0].basis(pos, weight, batch, layout=layout)
        if self.quadrature == "p1":
            basis = basis._replace(weighted=self._p1_weights(mesh))
        for k, (spectral, linear) in enumerate(zip(self.spectral, self.linears)):
            update = linear(h) + spectral(h, pos, weight, batch, basis=basis, layout=layout)
            h = update if self.local is None else update + self.local[k](h, pos, weight, batch, mesh=mesh)
            if k < len(self.linears) - 1:
                h = F.gelu(h)
        return self.project(h)

    def _torus_coordinates(self, pos: torch.Tensor) -> torch.Tensor:
        r""":math:`(\cos 2\pi x_k / L_k, \sin 2\pi x_k / L_k)_k`, ``[N, 2d]``: the coordinates
        as smooth functions on the torus."""
        angle = 2 * torch.pi * pos / torch.tensor(self.period, dtype=pos.dtype, device=pos.device)  # (N, d)
        return torch.cat([angle.cos(), angle.sin()], dim=-1)  # (N, 2d)

    def _p1_weights(self, mesh: Mesh) -> torch.Tensor:
        """The P1 weights of every graph's mesh in its frame, ``[N, M]`` (see ``quadrature``),
        each built once per member mesh and kept in its memo."""
        layer = self.spectral[0]
        key = ("mesh_fno.p1_fourier", layer.mode_box, layer.padding, layer.period)
        return mesh.structure(key, self._build_p1_weights, lambda batch, parts: torch.cat(parts))

    @torch.compiler.disable
    def _build_p1_weights(self, member: Mesh) -> torch.Tensor:
        cells = member.cells
        if cells is None:
            raise ValueError("MeshFNO(quadrature='p1') integrates over the mesh's triangles, and this "
                             "mesh has no cells: pass a Mesh with cells, e.g. Mesh.from_meshio(m) or "
                             "Mesh.from_sample(data) of a sample with cells")
        if cells.shape[1] != 3:
            raise UnsupportedCellError(f"MeshFNO(quadrature='p1') needs triangle meshes, got cells of "
                                       f"{cells.shape[1]} nodes")
        layer = self.spectral[0]
        lo, hi = layer.basis(member.pos, member.weight).box  # the member's box, as in the batch
        side = (hi[0] - lo[0]).double()
        xi = (member.pos.double() - lo[0].double()) / side
        with torch.no_grad():
            weights = p1_fourier_basis(member.pos.double(), cells.to(member.device), xi, layer.mode_index)
        return weights.to(member.dtype)
