"""Patched transformer neural operators on graph partitions: the ViT neural operator and FANO.

Both models cut the domain into patches (a :class:`~geoattn.mesh.Partition`), attend over
patches with :class:`~geoattn.nn.PatchAttention`, and differ only in where the nonlocal
(spectral) map sits: in the lift (:class:`ViTNO`) or in the query, key and value maps of every
attention layer (:class:`FANO`).

The partition is part of the model. :meth:`PatchedOperator.fit_mesh` (called by
:class:`~geoattn.train.Trainer` and ``geoattn train`` with the first training sample) cuts the
training mesh into ``num_patches`` parts by ``partition_method`` and stores the partition in
buffers (RCB cut planes, or METIS seed nodes with nearest-seed assignment), so it is saved in
checkpoints and the same subdomains are found on every mesh the model is evaluated on
(:meth:`~geoattn.mesh.Partition.transfer`). A model without a fitted partition cuts every graph on
the fly (each with its own patch length); :meth:`PatchedOperator.set_partition` sets or clears the
partition.

Patch attention reads every patch's function in every other patch's frame by interpolation
(:mod:`geoattn.nn.patch_pairs`); these stencils, the patch of every node and its frame are built
once per mesh and partition and kept in the memo of the :class:`~geoattn.mesh.Mesh` (each graph of
a batch in its member mesh's memo), so repeated calls on one mesh rebuild nothing and read nothing
back from the device.
The Fourier parts (ViT-NO's patch lift, FANO's :math:`Q, K, V`) need every patch to hold enough
nodes for their ``modes``; choose ``modes`` with :func:`~geoattn.nn.spectral.resolved_modes`
from the nodes per patch of the training mesh; the models log a warning once when a patch is
under-resolved.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError, UnsupportedCellError
from ..mesh.mesh import Mesh
from ..mesh.partition import Partition, partition as make_partition, patch_centroids
from ..mesh.interpolation import linear_interpolation
from ..mesh.validation import checked_number
from ..nn.patch_attention import (P1PatchGeometry, PatchAttention, PatchGeometry, PatchPieces, PatchSide, TokenMesh,
                                  cell_pieces, clipped_pieces, concat_geometry, concat_p1_geometry, grid_stencil,
                                  majority_patch, p1_patch_geometry, patch_coefficients, patch_evaluate, patch_geometry,
                                  piece_corners, reference_grid, region_centroids, token_mesh)
from ..nn.patch_mass import P1PatchMass, concat_p1_mass, p1_patch_mass
from ..nn.patch_pairs import PatchPairs, concat_pairs, patch_pairs, shifted_cat
from ..nn.spectral import (PatchSpectralIntegral, SpectralIntegral, SpectralSmoothing, _uses_nufft, _zero_index,
                           checked_period, fourier_modes, resolved_modes)
from .encoder import CoordinateFeatures, EncoderBlock, EncoderOperator, PointwiseMLP

logger = logging.getLogger(__name__)


class PatchIndex(NamedTuple):
    """The patch structure of a (batched) mesh, passed to :class:`PatchMixer` as the keyword
    ``patches`` (the batch vector travels separately, as everywhere).

    Fields:

    - ``patch``: patch of every node within its graph ``[N]``, in ``[0, num_patches)``;
    - ``length``: patch length :math:`L` of every node's graph ``[N]``;
    - ``num_patches``: patches per graph :math:`P`;
    - ``pairs``: the :class:`~geoattn.nn.patch_pairs.PatchPairs` of these nodes with the source
      mesh, for patch attention (default ``None``: the layer builds them);
    - ``geometry``: the :class:`~geoattn.nn.patch_attention.PatchGeometry` of the nodes in units
      of their patch length (default ``None``: the layers compute the frames);
    - ``unit``: the coordinates and weights in units of the patch length, ``pos / L`` and
      ``weight / L^d`` (default ``None``: computed by :class:`PatchMixer`);
    - ``p1``: the :class:`~geoattn.nn.patch_attention.P1PatchGeometry` of the mesh's triangles in
      units of the patch length, for a patch lift with ``quadrature="p1"`` (default ``None``);
    - ``p1_mass``: the :class:`~geoattn.nn.patch_mass.P1PatchMass` of the same pieces in units of
      the patch length, for attention with ``scores="p1"`` (default ``None``);
    - ``congruent``: the points per patch of a
      :class:`~geoattn.nn.patch_attention.TokenMesh` (``quadrature="tokens"``; default ``None``),
      see :class:`~geoattn.nn.patch_attention.PatchSide`.
    """

    patch: torch.Tensor
    length: torch.Tensor
    num_patches: int
    pairs: PatchPairs | None = None
    geometry: PatchGeometry | None = None
    unit: tuple[torch.Tensor, torch.Tensor] | None = None
    p1: P1PatchGeometry | None = None
    p1_mass: P1PatchMass | None = None
    congruent: int | None = None


class PatchMixer(nn.Module):
    r"""Runs a patch layer (:class:`~geoattn.nn.PatchAttention`,
    :class:`~geoattn.nn.PatchSpectralIntegral`) with a :class:`PatchIndex` per mesh, so that it
    fits :class:`~geoattn.models.encoder.EncoderBlock` and the cross decoder.

    Graphs with different patch lengths :math:`L_g` share one batched call: the coordinates of
    graph :math:`g` are divided by :math:`L_g` and its weights by :math:`L_g^d`, and the layer runs
    with :math:`L = 1`. Patch layers only see :math:`(x - c_p)/L` and :math:`L^{-d} \sum w_i (\cdot)`,
    which this change of units leaves unchanged.

    Args:
        layer: the patch layer.
        quadrature: how the layer integrates over a patch: ``"nodal"`` (default, the nodes'
            quadrature in each patch) or ``"p1"`` (exact on the piecewise-linear interpolant over
            the patch's pieces of triangles): a :class:`~geoattn.nn.PatchSpectralIntegral`'s patch
            coefficients from ``patches.p1`` (see
            :func:`~geoattn.nn.patch_attention.p1_patch_geometry`), a
            :class:`~geoattn.nn.PatchAttention`'s scores (pointwise :math:`Q, K`, self-attention)
            with the mass matrices ``patches.p1_mass`` (see :mod:`geoattn.nn.patch_mass`).

    Shapes:
        - ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional) and the keywords
          ``patches`` (:class:`PatchIndex`) and ``layout`` (optional batch
          :class:`~geoattn.mesh.Layout`); for cross-attention the query side ``x_query``,
          ``pos_query``, ``weight_query``, ``batch_query``, ``patches_query`` and
          ``layout_query``. Output: the layer's, ``[N, C_out]`` or ``[Nq, C_out]``.
    """

    def __init__(self, layer: nn.Module, quadrature: str = "nodal"):
        super().__init__()
        if quadrature not in ("nodal", "p1"):
            raise ConfigError(f"quadrature must be 'nodal' or 'p1', got {quadrature!r}")
        if quadrature == "p1" and not (isinstance(layer, PatchSpectralIntegral)
                                       or isinstance(layer, PatchAttention) and not layer.spectral_qkv):
            raise ConfigError("quadrature='p1' is for a PatchSpectralIntegral (the ViT-NO lift) or a "
                              "PatchAttention with pointwise Q, K (ViT-NO's scores)")
        self.layer, self.quadrature = layer, quadrature
        index = getattr(layer, "mode_index", None)
        self._zero = _zero_index(index) if index is not None else None  # once: torch.equal syncs

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, patches: PatchIndex, layout=None,
                x_query: torch.Tensor | None = None, pos_query: torch.Tensor | None = None,
                weight_query: torch.Tensor | None = None, batch_query: torch.Tensor | None = None,
                patches_query: PatchIndex | None = None, layout_query=None) -> torch.Tensor:
        pos, weight = patches.unit if patches.unit is not None else _unit_length(pos, weight, patches)
        layer, geometry = self.layer, patches.geometry
        p1_mass = None
        if self.quadrature == "p1" and isinstance(layer, PatchAttention):
            if x_query is not None or patches.p1_mass is None:
                raise ValueError("PatchMixer(PatchAttention, quadrature='p1') needs patches.p1_mass (the model's "
                                 "patch index of a triangle mesh) and no query side")
            p1_mass = patches.p1_mass
        elif self.quadrature == "p1":
            if x_query is not None or patches.p1 is None:
                raise ValueError("PatchMixer(quadrature='p1') needs patches.p1 (the model's patch index of a "
                                 "triangle mesh) and no query side")
            p1 = patches.p1
            coeff = layer.mix(patch_coefficients(x, weight, p1.geometry, layer.mode_index, self._zero, p1=p1))
            return patch_evaluate(coeff, p1.geometry, layer.mode_index, self._zero)
        if isinstance(layer, PatchSpectralIntegral) and x_query is None and geometry is not None \
                and not _uses_nufft(layer.backend, geometry.frame, layer.mode_index):
            # PatchSpectralIntegral.forward with the frame and segment sizes of the mesh's memo
            coeff = layer.mix(patch_coefficients(x, weight, geometry, layer.mode_index, self._zero))
            return patch_evaluate(coeff, geometry, layer.mode_index, self._zero)
        if not isinstance(layer, PatchAttention):
            if x_query is not None:
                raise ValueError(f"a query side needs a PatchAttention, this mixer holds a {type(layer).__name__}")
            return layer(x, pos, weight, batch, patch=patches.patch, num_patches=patches.num_patches)
        side = PatchSide(patches.patch, 1.0, patches.num_patches, geometry, layout, p1_mass, patches.congruent)
        if x_query is None:
            return layer(x, pos, weight, batch, patches=side, pairs=patches.pairs)
        if patches_query.unit is not None:
            pos_query, weight_query = patches_query.unit
        else:
            pos_query, weight_query = _unit_length(pos_query, weight_query, patches_query)
        return layer(x, pos, weight, batch, patches=side, pairs=patches_query.pairs, x_query=x_query,
                     pos_query=pos_query, weight_query=weight_query, batch_query=batch_query,
                     patches_query=PatchSide(patches_query.patch, 1.0, patches_query.num_patches,
                                             patches_query.geometry, layout_query))


def _unit_length(pos: torch.Tensor, weight: torch.Tensor,
                 index: PatchIndex) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinates and weights in units of each graph's patch length: ``pos / L``, ``w / L^d``."""
    length = index.length.to(pos.dtype)
    return pos / length.unsqueeze(-1), weight / length.pow(pos.shape[-1])


#: Tokens that name a model's partition in the memo keys of the meshes it runs on: a new token
#: for every partition a model is given (fitted, set or loaded), unique in the process.
_TOKENS = itertools.count()


class PatchedOperator(EncoderOperator):
    r"""Shared implementation of :class:`ViTNO` and :class:`FANO` (not registered itself).

    .. math::
        h_0 = L(u, x), \quad
        h_{\ell+1} = \operatorname{LN}\big(g + F(g)\big),\;
        g = \operatorname{LN}\big(h_\ell + A_P(h_\ell)\big), \quad
        z = P(h_{\text{depth}}), \quad
        \mathcal{G}(u) = z,\ \ z + W_S z\ \text{ or }\ (I - \varepsilon\Delta)^{-\alpha} z,

    with :math:`A_P` patched multi-head attention (:class:`~geoattn.nn.PatchAttention`) over the
    patches of the mesh, :math:`F` and :math:`P` pointwise, and the optional residual spectral layer
    :math:`W_S` on the whole domain (``final_modes``) or the smoothing layer
    :math:`(I - \varepsilon\Delta)^{-\alpha}` (``smoothing_eps``, with :math:`\alpha = 1.001`, on
    ``final_modes`` modes of the bounding box), the two remedies of Remark 21 for the seams between
    patches. Subclasses set ``spectral_lift`` (ViT NO) or ``spectral_qkv`` (FANO).

    The partition is model state (:meth:`fit_mesh`, :attr:`partition`): see the module docstring.

    With ``decoder="cross"`` the output is read on a query mesh :math:`y` (the
    :class:`~geoattn.mesh.Mesh` ``query``, its nodes assigned to the same patches and placed in
    them by its own weights) through one patched cross-attention
    (:class:`~geoattn.nn.PatchAttention` with a query side) from an embedding of the query
    coordinates:
    :math:`z(y) = P\big(\operatorname{LN}(E(y) + C_P(E, h_{\text{depth}})(y))\big)`.
    """

    spectral_lift: bool = False
    spectral_qkv: bool = False

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 64,
                 depth: int = 3, num_heads: int = 4, ff_mult: int = 2, num_patches: int = 4,
                 modes: int = 2, partition_method: str = "rcb", final_modes: int | None = None,
                 decoder: str = "pointwise", smoothing_eps: float | None = None,
                 coordinate_features: dict | None = None, quadrature: str | None = None, scores: str = "nodal",
                 grid: int = 16, period: float | tuple[float, ...] | None = None, readout: str | None = None):
        super().__init__()
        whole = lambda name, value: checked_number(name, value, integer=True)  # noqa: E731
        in_channels, out_channels, dim = whole("in_channels", in_channels), whole("out_channels", out_channels), \
            whole("dim", dim)
        width, depth, num_heads = whole("width", width), whole("depth", depth), whole("num_heads", num_heads)
        ff_mult, num_patches, grid = whole("ff_mult", ff_mult), whole("num_patches", num_patches), whole("grid", grid)
        modes = _checked_modes("modes", modes)
        final_modes = None if final_modes is None else _checked_modes("final_modes", final_modes)
        smoothing_eps = None if smoothing_eps is None else checked_number("smoothing_eps", smoothing_eps)
        self.period = checked_period(period, dim)
        if quadrature is None:  # the transferring design, unless an option needs the nodes
            quadrature = "tokens" if decoder == "pointwise" and scores == "nodal" else "nodal"
        if quadrature not in QUADRATURES:
            raise ConfigError(f"quadrature must be one of {QUADRATURES}, got {quadrature!r}")
        if scores not in ("nodal", "p1"):
            raise ConfigError(f"scores must be 'nodal' or 'p1', got {scores!r}")
        if quadrature == "tokens":
            if scores != "nodal":
                raise ConfigError("scores='p1' is for quadrature='nodal' or 'p1': with quadrature='tokens' the "
                                  "scores are integrals over the patches' reference grids; leave scores='nodal'")
            if decoder != "pointwise":
                raise ConfigError("decoder='cross' is for quadrature='nodal' or 'p1': with quadrature='tokens' the "
                                  "output is evaluated at the nodes; use decoder='pointwise'")
            if grid < 2:
                raise ConfigError(f"grid must be at least 2 (points per axis of a patch's reference grid), got {grid}")
            top = max([modes] if isinstance(modes, int) else modes)
            if 2 * top + 1 > grid:
                raise ConfigError(f"modes={modes} needs 2 * modes + 1 = {2 * top + 1} points per axis of the patches' "
                                  f"reference grid, grid={grid} has fewer: give grid >= {2 * top + 1} or fewer modes")
        if readout is None:  # continuous across the seams for the grids' design; the nodal designs read no grids
            readout = "blend" if quadrature == "tokens" else "patch"
        if readout not in ("patch", "blend"):
            raise ConfigError(f"readout must be 'patch' or 'blend', got {readout!r}")
        if readout != "patch" and quadrature != "tokens":
            raise ConfigError(f"readout={readout!r} reads the patches' grids at the nodes: it needs quadrature='tokens'")
        if quadrature != "tokens" and self.period is not None:
            raise ConfigError(f"period={period!r} needs quadrature='tokens' (the periodic patch grids); the nodal "
                              f"and P1 designs read patches across the seams without the period: give "
                              f"quadrature='tokens' (the default)")
        if scores == "p1" and self.spectral_qkv:
            raise ConfigError(f"scores='p1' applies to pointwise Q, K (ViT-NO); {type(self).__name__}'s are spectral")
        if scores == "p1" and dim != 2:
            raise ConfigError(f"scores='p1' integrates over triangles: dim must be 2, got {dim}")
        if quadrature == "p1" and not self.spectral_lift:
            raise ConfigError(f"quadrature='p1' applies to the patch lift of ViT-NO; {type(self).__name__} has none")
        if quadrature == "p1" and dim != 2:
            raise ConfigError(f"quadrature='p1' integrates over triangles: dim must be 2, got {dim}")
        self.quadrature, self.scores, self.grid, self.readout = quadrature, scores, grid, readout
        self.register_buffer("input_modes", fourier_modes(modes, dim), persistent=False)
        self._input_zero = _zero_index(self.input_modes)
        if partition_method not in ("rcb", "metis"):
            raise ValueError(f"partition_method must be 'rcb' or 'metis', got {partition_method!r}")
        if smoothing_eps is not None and final_modes is None:
            raise ValueError("smoothing_eps needs final_modes (the modes the smoothing keeps)")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.num_patches, self.partition_method = num_patches, partition_method
        self.decoder = self.check_decoder(decoder)
        self.modes = modes
        self._warned_resolution = False
        self._partition: Partition | None = None
        self._token = next(_TOKENS)
        for key, value in _EMPTY_PARTITION.items():
            self.register_buffer(f"partition_{key}", value.clone())
        # the patch centres of quadrature="tokens", float64 bits (so that no dtype cast changes them)
        self.register_buffer("patch_centre", torch.zeros(0, dtype=torch.long))
        self._token_meshes: dict = {}
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        if self.spectral_lift:  # a Fourier operator on every patch, plus the pointwise path
            self.lift = PatchMixer(PatchSpectralIntegral(self.inputs.out_features, width, modes, dim),
                                   "nodal" if quadrature == "tokens" else quadrature)
            self.lift_local = nn.Linear(self.inputs.out_features, width)
        else:
            self.lift = PointwiseMLP(self.inputs.out_features, width, width)
        def attention(scores: str = "nodal") -> PatchMixer:
            return PatchMixer(PatchAttention(width, num_heads=num_heads, modes=modes, dim=dim,
                                             spectral_qkv=self.spectral_qkv), scores)

        self.blocks = nn.ModuleList(EncoderBlock(attention(scores), width, ff_mult) for _ in range(depth))
        if decoder == "cross":  # the query mesh has no pieces of its own: nodal scores
            self.build_cross_decoder(attention(), width, dim)
        self.project = PointwiseMLP(width, 2 * width, out_channels)
        self.final = self.smoothing = None
        if smoothing_eps is not None:
            self.smoothing = SpectralSmoothing(final_modes, dim, eps=smoothing_eps, period=self.period)
        elif final_modes is not None:
            self.final = SpectralIntegral(out_channels, out_channels, final_modes, dim, period=self.period)

    # -- the partition as model state ---------------------------------------------------------
    @property
    def partition(self) -> Partition | None:
        """The fitted partition (``None`` until :meth:`fit_mesh` or :meth:`set_partition`)."""
        if len(self.partition_meta) == 0:
            return None
        if self._partition is None:
            self._partition = Partition.from_state(
                {key: getattr(self, f"partition_{key}") for key in _EMPTY_PARTITION})
        return self._partition

    def set_partition(self, part: Partition | None) -> None:
        """Make ``part`` the model's partition (``None``: none, cut every mesh on the fly). The
        structure meshes keep for the former partition is not used again."""
        state = part.state() if part is not None else _EMPTY_PARTITION
        for key, value in state.items():
            setattr(self, f"partition_{key}", value.to(getattr(self, f"partition_{key}").device))
        self.patch_centre = torch.zeros(0, dtype=torch.long, device=self.patch_centre.device)
        self._partition = part
        self._token = next(_TOKENS)

    def fit_mesh(self, mesh: Mesh, *args, **kwargs) -> None:
        """Cut the training :class:`~geoattn.mesh.Mesh` (its first graph, for a batch) into
        ``num_patches`` parts by ``partition_method`` (METIS on its cells, when it has them) and
        keep the partition, unless one is already fitted (see
        :class:`~geoattn.models.NeuralOperator`). The former ``fit_mesh(pos, weight, cells)``
        works for one minor version, with a :class:`DeprecationWarning`."""
        if not isinstance(mesh, Mesh) or args or kwargs:
            from ..compat import legacy_fit

            return legacy_fit(self, mesh, *args, **kwargs)
        if self.partition is not None:
            return
        mesh = mesh.graphs()[0]
        part = make_partition(mesh.pos, mesh.weight, self.num_patches, cells=mesh.cells, method=self.partition_method)
        self.set_partition(part)
        if self.quadrature == "tokens":  # the centres of the patches' grids: the same on every mesh from now on
            centre, length = self._windows(mesh.pos, mesh.weight, part, mesh.cells)
            if length != part.length:
                self.set_partition(dataclasses.replace(part, length=length))
            self.patch_centre = centre.contiguous().view(torch.long).to(self.patch_centre.device)
            self._token = next(_TOKENS)

    def _windows(self, pos: torch.Tensor, weight: torch.Tensor, part: Partition,
                 cells: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
        """The centres ``[P, d]`` (float64, CPU) and the side of the patches' grids on the mesh
        ``pos``: on a torus cut by RCB, the centres of the boxes the cuts make of the torus (whose
        box starts at the nodes' lowest coordinates) and 1.1 times their longest side, so that
        the grids tile the torus, its seam included; else the weighted centroids of the patches'
        nodes and the partition's length."""
        node = pos.detach().cpu().double()
        tree = getattr(part, "_tree", None)
        if self._exact_input(cells, part):  # the centroids of the patches' regions, the same on every mesh
            patch = part.transfer(pos)
            pieces = clipped_pieces(pos, cells, patch, tree)
            corner, area = piece_corners(pos, cells, pieces)
            return region_centroids(corner, area, pieces, pos, weight, patch.cpu(), part.num_parts), float(part.length)
        if self.period is None or tree is None:
            return _node_centres(node, weight, part.transfer(pos).cpu(), part.num_parts), float(part.length)
        lo = node.amin(0)
        centre = torch.zeros(part.num_parts, node.shape[1], dtype=torch.float64)
        sides = []

        def descend(t, a: torch.Tensor, b: torch.Tensor) -> None:
            if not hasattr(t, "axis"):
                centre[t], _ = (a + b) / 2, sides.append(float((b - a).max()))
                return
            left_hi, right_lo = b.clone(), a.clone()
            left_hi[t.axis] = right_lo[t.axis] = t.value
            descend(t.left, a, left_hi)
            descend(t.right, right_lo, b)

        descend(tree, lo, lo + torch.tensor(self.period, dtype=torch.float64))
        return centre, 1.1 * max(sides)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for key in _EMPTY_PARTITION:  # the partition buffers take the saved shapes
            name = f"{prefix}partition_{key}"
            if name in state_dict:
                setattr(self, f"partition_{key}", torch.empty_like(state_dict[name]))
        name = f"{prefix}patch_centre"
        if name not in state_dict:  # saved before quadrature="tokens": no centres
            state_dict[name] = torch.zeros(0, dtype=torch.long)
        self.patch_centre = torch.empty_like(state_dict[name], device=self.patch_centre.device)
        self._partition = None
        self._token = next(_TOKENS)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- per-mesh structure, in the meshes' memos ---------------------------------------------
    def _partition_key(self) -> tuple:
        """What the patches of a mesh depend on besides the mesh: the fitted partition (its
        token), or the settings of the partitions made on the fly."""
        if self.partition is not None:
            return ("fitted", self._token)
        return ("own", self.num_patches, self.partition_method)

    def partitions(self, mesh: Mesh) -> list[Partition]:
        """The partition of every graph of ``mesh``: the fitted one, for all; else each graph cut
        on the fly into ``num_patches`` parts by ``partition_method`` (once per graph's
        :class:`~geoattn.mesh.Mesh`, kept in its memo)."""
        if self.partition is not None:
            return [self.partition] * mesh.num_graphs
        key = ("partition", self.num_patches, self.partition_method)
        return [m.structure(key, lambda g: make_partition(g.pos, g.weight, self.num_patches,
                                                          method=self.partition_method))
                for m in mesh.graphs()]

    def patch_index(self, mesh: Mesh, source: Mesh | None = None) -> PatchIndex:
        """The :class:`PatchIndex` of ``mesh`` with its stencils against ``source`` (default: the
        mesh itself; a query mesh of the cross decoder takes the partition of its source graph):
        built per graph and kept in the memo of every graph's mesh, and assembled once per
        (batched) mesh in its memo."""
        own = source is None or source is mesh
        source = mesh if own else source
        if source.num_graphs != mesh.num_graphs:
            raise ValueError(f"the query mesh has {mesh.num_graphs} graphs, the input mesh "
                             f"{source.num_graphs}")
        key = ("patch_index",) + self._partition_key() + (() if own else ("source", source.serial))
        if own and self.quadrature == "p1":
            key += ("p1", tuple(self.lift.layer.mode_index.flatten().tolist()))
        if own and self.scores == "p1":
            key += ("p1_scores",)
        return mesh.structure(key, lambda m: self._build_patch_index(m, source))

    @torch.compiler.disable  # host work (partitions, stencils): run eagerly, once per mesh
    def _build_patch_index(self, mesh: Mesh, source: Mesh) -> PatchIndex:
        parts = self.partitions(source)
        graphs = [self._graph_index(m, s, part) for m, s, part in zip(mesh.graphs(), source.graphs(), parts)]
        num_patches = {p.num_parts for p in parts}
        if len(num_patches) != 1:
            raise ValueError(f"all graphs of a batch need the same number of patches, got {num_patches}")
        if len(graphs) == 1:
            return graphs[0]
        cat = lambda name: torch.cat([getattr(g, name) for g in graphs])  # noqa: E731
        p1 = p1_mass = None
        if all(g.p1 is not None for g in graphs):
            p1 = concat_p1_geometry([g.p1 for g in graphs], mesh.layout.counts)
        if all(g.p1_mass is not None for g in graphs):
            p1_mass = concat_p1_mass([g.p1_mass for g in graphs], mesh.layout.counts)
        return PatchIndex(cat("patch"), cat("length"), num_patches.pop(),
                          concat_pairs([g.pairs for g in graphs], source.layout.counts),
                          concat_geometry([g.geometry for g in graphs]),
                          (torch.cat([g.unit[0] for g in graphs]), torch.cat([g.unit[1] for g in graphs])), p1,
                          p1_mass)

    def _graph_index(self, mesh: Mesh, source: Mesh, part: Partition) -> PatchIndex:
        """The :class:`PatchIndex` of one graph ``mesh`` in the patches of ``part`` (kept in its
        memo), with the stencils against the graph ``source``."""
        own = source is mesh
        key = self._partition_key() + (() if own or self.partition is not None else ("source", source.serial))

        def side() -> PatchIndex:
            pos, weight = mesh.pos, mesh.weight
            patch = part.transfer(pos) if len(pos) else torch.zeros(0, dtype=torch.long, device=pos.device)
            length = torch.full((len(pos),), part.length, dtype=pos.dtype, device=pos.device)
            index = PatchIndex(patch, length, part.num_parts)
            unit = _unit_length(pos, weight, index)
            return index._replace(geometry=patch_geometry(*unit, patch, part.num_parts), unit=unit)

        index = mesh.structure(("patch_side",) + key, lambda _: side())

        def pairs() -> PatchPairs:
            src = index if own else self._graph_index(source, source, part)
            return patch_pairs(source.pos, source.weight, src.patch, src.num_patches, pos_query=mesh.pos,
                               weight_query=mesh.weight, patch_query=index.patch,
                               num_patches_query=index.num_patches)

        index = index._replace(pairs=mesh.structure(
            ("patch_pairs",) + key + (() if own else ("source", source.serial)), lambda _: pairs()))
        pieces = lambda: mesh.structure(("patch_pieces",) + key, lambda _: self._pieces(mesh, part, index))  # noqa: E731
        if own and self.quadrature == "p1":
            modes = self.lift.layer.mode_index
            index = index._replace(p1=mesh.structure(("patch_p1",) + key + (tuple(modes.flatten().tolist()),),
                                                     lambda _: self._p1_geometry(mesh, index, pieces())))
        if own and self.scores == "p1":
            index = index._replace(p1_mass=mesh.structure(("patch_p1_mass",) + key,
                                                          lambda _: self._p1_mass(mesh, index, pieces())))
        return index

    def _pieces(self, mesh: Mesh, part: Partition, index: PatchIndex) -> PatchPieces:
        """How the triangles of one graph are cut among its patches (``quadrature="p1"``,
        ``scores="p1"``): with an RCB partition the triangles are cut along its planes, so every
        patch is the same region on every mesh; otherwise every triangle goes whole to the patch of
        most of its vertices."""
        cells = mesh.cells
        if cells is None:
            raise ValueError(f"{type(self).__name__} with quadrature='p1' or scores='p1' integrates over the mesh's "
                             "triangles, and this mesh has no cells: pass a Mesh with cells, e.g. Mesh.from_meshio(m) "
                             "or Mesh.from_sample(data) of a sample with cells")
        if cells.shape[1] != 3:
            raise UnsupportedCellError(f"{type(self).__name__} with quadrature='p1' or scores='p1' needs triangle "
                                       f"meshes, got cells of {cells.shape[1]} nodes")
        tree = getattr(part, "_tree", None)
        if tree is not None:
            return clipped_pieces(mesh.pos, cells, index.patch, tree)
        return cell_pieces(cells, majority_patch(cells, index.patch))

    def _p1_geometry(self, mesh: Mesh, index: PatchIndex, pieces: PatchPieces) -> P1PatchGeometry:
        """The exact P1 patch lift structure of one graph (``quadrature="p1"``)."""
        with torch.no_grad():
            return p1_patch_geometry(*index.unit, mesh.cells, index.patch, index.num_patches, pieces,
                                     self.lift.layer.mode_index)

    def _p1_mass(self, mesh: Mesh, index: PatchIndex, pieces: PatchPieces) -> P1PatchMass:
        """The patches' mass matrices of one graph, in units of the patch length (``scores="p1"``)."""
        with torch.no_grad():
            return p1_patch_mass(*index.unit, mesh.cells, index.patch, index.num_patches, pieces)

    def check_resolution(self, index: PatchIndex) -> bool:
        """Whether every non-empty patch of ``index`` resolves the model's modes
        (:func:`~geoattn.nn.spectral.resolved_modes` of its node count is at least ``modes``);
        logs a warning, once per model, when one does not. Reads the patch sizes of
        ``index.geometry`` (plain integers), not the device."""
        counts = sorted(c for c in index.geometry.counts if c > 0)
        if not counts:  # no nodes: nothing to resolve
            return True
        fewest = counts[0]
        need = max([self.modes] if isinstance(self.modes, int) else self.modes)
        ok = resolved_modes(fewest, self.dim) >= need
        if not ok and not self._warned_resolution:
            self._warned_resolution = True
            logger.warning(
                "%s: a patch holds only %d nodes (median %d), too few to resolve modes=%s "
                "(resolved_modes gives %d); the patch Fourier coefficients are aliased on this "
                "mesh and a trained model will not transfer to other meshes: use fewer modes or "
                "fewer patches", type(self).__name__, fewest, counts[(len(counts) - 1) // 2], self.modes,
                resolved_modes(fewest, self.dim))
        return ok

    def encode(self, x: torch.Tensor, mesh: Mesh, *, patches: PatchIndex) -> torch.Tensor:
        """The encoder features ``[N, width]`` on ``mesh`` with its patches ``patches``
        (:meth:`patch_index`)."""
        pos, weight, batch, layout = mesh.pos, mesh.weight, mesh.batch_vector, mesh.layout
        u = self.inputs(x, pos)
        if self.spectral_lift:
            h = self.lift(u, pos, weight, batch, patches=patches, layout=layout) + self.lift_local(u)
        else:
            h = self.lift(u)
        for block in self.blocks:
            h = block(h, pos, weight, batch, patches=patches, layout=layout)
        return h

    # -- quadrature="tokens": all work on the patches' reference grids --------------------------
    def token_index(self, mesh: Mesh) -> TokenIndex:
        """The :class:`TokenIndex` of ``mesh`` (``quadrature="tokens"``): built per graph and kept
        in the memo of every graph's mesh, joined once per batch."""
        key = ("patch_tokens",) + self._partition_key() + (self.grid, self.period, self.readout)
        return mesh.structure(key, lambda m: self._graph_tokens(m, self.partitions(m)[0]), join=_join_tokens)

    @torch.compiler.disable  # host work (point location): run eagerly, once per mesh
    def _graph_tokens(self, mesh: Mesh, part: Partition) -> TokenIndex:
        """The :class:`TokenIndex` of one graph in the patches of ``part``."""
        pos, weight = mesh.pos, mesh.weight
        d, g, p = pos.shape[1], self.grid, part.num_parts
        patch = part.transfer(pos).cpu()
        node = pos.detach().cpu().double()
        if len(self.patch_centre) and self.partition is not None:
            centre, length = self.patch_centre.cpu().view(torch.float64).view(p, d), float(part.length)
        else:
            centre, length = self._windows(pos, weight, part, mesh.cells)
        exact = None
        if self._exact_input(mesh.cells, part):  # the input's modes integrated exactly over each patch's region
            with torch.no_grad():
                pieces = clipped_pieces(pos, mesh.cells, patch.to(pos.device), part._tree)
                exact = p1_patch_geometry(pos / length, weight / length ** d, mesh.cells, patch.to(pos.device), p,
                                          pieces, self.input_modes)
        points = (centre[:, None, :] + length * reference_grid(g, d)[None]).reshape(-1, d)  # (P G^d, d)
        source, owner = node, torch.arange(len(node))
        if self.period is not None:
            if d > 3:
                raise ConfigError(f"period= supports dim <= 3, got {d}")
            period = torch.tensor(self.period, dtype=torch.float64)
            source, owner = _periodic_images(node, period, reach=length)
        stencil = linear_interpolation(source, points)
        index, coeff = self.node_reading(node, centre, length, patch)
        device, dtype = pos.device, pos.dtype
        return TokenIndex(points.to(device, dtype), owner[stencil.index.cpu()].to(device),
                          stencil.coeff.to(device, dtype), index.to(device),
                          coeff.to(device, dtype), exact,
                          None if exact is None else torch.arange(p, device=device))

    def node_reading(self, node: torch.Tensor, centre: torch.Tensor, length: float,
                     patch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """How the points ``node [N, d]`` (float64, CPU) of the patches ``patch [N]`` read the grids
        about ``centre [P, d]`` of side ``length``: indices into the grids' points ``[P G^d]`` and
        non-negative coefficients summing to one, ``[N, 2^d]`` (``readout="patch"``: the own
        patch's grid, multilinear) or ``[N, P 2^d]`` (``"blend"``)."""
        g, d = self.grid, node.shape[1]
        delta = node - centre[patch]
        if self.period is not None:  # the nearest image of a node about its patch's centre
            period = torch.tensor(self.period, dtype=torch.float64)
            delta = delta - period * torch.round(delta / period)
        index, coeff = grid_stencil(delta / length, g)
        index = patch[:, None] * g ** d + index
        if self.readout == "blend":
            index, coeff = self._blended_reading(node, centre, length, patch, index, coeff)
        return index, coeff

    def _blended_reading(self, node: torch.Tensor, centre: torch.Tensor, length: float, patch: torch.Tensor,
                         index: torch.Tensor, coeff: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r"""``readout="blend"``: every node reads the grids of all the patches whose windows hold it,
        weighted by the partition of unity :math:`\phi_q(x) / \sum_r \phi_r(x)`,
        :math:`\phi_q(x) = \prod_k \max(0, 1/2 - |\xi_k|)` with :math:`\xi = (x - c_q)/L` (the
        nearest image with a period), so that the output is continuous across the patch seams
        where windows overlap; a node in no window reads its own patch's grid (``index``,
        ``coeff``). Stencils ``[N, P 2^d]``, zero coefficients for the patches that do not hold
        the node."""
        g, d, p, n = self.grid, node.shape[1], len(centre), len(node)
        delta = node[:, None, :] - centre[None]  # (N, P, d)
        if self.period is not None:
            period = torch.tensor(self.period, dtype=torch.float64)
            delta = delta - period * torch.round(delta / period)
        xi = delta / length
        phi = (0.5 - xi.abs()).clamp(min=0.0).prod(-1)  # (N, P)
        total = phi.sum(1, keepdim=True)
        idx, c = grid_stencil(xi.reshape(-1, d), g)  # (N P, 2^d)
        idx = (torch.arange(p)[None, :, None] * g ** d + idx.view(n, p, -1)).reshape(n, -1)
        c = ((phi / total.clamp(min=1e-300))[:, :, None] * c.view(n, p, -1)).reshape(n, -1)
        alone = total[:, 0] <= 0
        if alone.any():  # outside every window: the own patch's reading, padded with zeros
            pad = idx.shape[1] - index.shape[1]
            idx[alone] = torch.cat([index[alone], index[alone][:, :1].expand(-1, pad)], 1)
            c[alone] = torch.cat([coeff[alone], coeff.new_zeros(int(alone.sum()), pad)], 1)
        return idx, c

    def _exact_input(self, cells: torch.Tensor | None, part: Partition) -> bool:
        """Whether the input's modes are integrated exactly on the pieces of the triangles
        (2-D triangle meshes cut by RCB planes, no period), not on the grid's samples."""
        return (self.dim == 2 and self.period is None and cells is not None and cells.shape[1] == 3
                and getattr(part, "_tree", None) is not None)

    def token_mesh(self, num_graphs: int, dtype: torch.dtype, device) -> tuple[TokenMesh, PatchIndex]:
        """The :class:`~geoattn.nn.patch_attention.TokenMesh` of ``num_graphs`` graphs and its
        :class:`PatchIndex` (the same for every mesh; kept in the model for a few batch sizes)."""
        key = (num_graphs, dtype, str(device))
        if key not in self._token_meshes:
            if len(self._token_meshes) >= 8:
                self._token_meshes.clear()
            grid = token_mesh(num_graphs, self.num_patches, self.grid, self.dim, dtype, device)
            ones = torch.ones_like(grid.weight)
            self._token_meshes[key] = grid, PatchIndex(grid.patch, ones, self.num_patches, grid.pairs,
                                                       grid.geometry, (grid.pos, grid.weight),
                                                       congruent=self.grid ** self.dim)
        return self._token_meshes[key]

    def _forward_tokens(self, x: torch.Tensor, mesh: Mesh) -> torch.Tensor:
        tokens = self.token_index(mesh)
        grid, index = self.token_mesh(mesh.num_graphs, x.dtype, x.device)
        # the input's piecewise-linear interpolant at the grid points: the one mesh-dependent input step
        modes, zero = self.input_modes, self._input_zero
        if tokens.exact_rows is None or len(tokens.exact_rows) < len(grid.geometry.counts):
            # the grid's midpoint rule on the interpolant's samples (graphs without the exact structure)
            u = (x[tokens.sample_index] * tokens.sample_coeff.to(x.dtype).unsqueeze(-1)).sum(1)  # quadrature-ok: a stencil
            coeff = patch_coefficients(u, grid.weight, grid.geometry, modes, zero)
        if tokens.exact is not None:  # exact on the interpolant over each patch's region: no aliasing
            exact = patch_coefficients(x, mesh.weight, tokens.exact.geometry, modes, zero, p1=tokens.exact)
            coeff = exact if tokens.exact_rows is None or len(tokens.exact_rows) == len(grid.geometry.counts) \
                else coeff.index_copy(0, tokens.exact_rows, exact)
        # the input's truncated Fourier series on every grid: nothing finer than the modes
        f = self.inputs(patch_evaluate(coeff, grid.geometry, modes, zero), tokens.points.to(x.dtype))
        if self.spectral_lift:
            h = self.lift(f, grid.pos, grid.weight, grid.batch, patches=index) + self.lift_local(f)
        else:
            h = self.lift(f)
        for block in self.blocks:
            h = block(h, grid.pos, grid.weight, grid.batch, patches=index, layout=None)
        # the grid functions evaluated at the nodes (multilinear in each patch's grid): no integral
        h = (h[tokens.node_index] * tokens.node_coeff.to(h.dtype).unsqueeze(-1)).sum(1)  # quadrature-ok: a stencil
        z = self.project(h)
        if self.final is not None:
            z = z + self.final(z, mesh.pos, mesh.weight, mesh.batch_vector, layout=mesh.layout)
        if self.smoothing is not None:
            z = self.smoothing(z, mesh.pos, mesh.weight, mesh.batch_vector, layout=mesh.layout)
        return z

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        self.check_call(x, mesh)
        self.check_query(query)
        if self.quadrature == "tokens":
            return self._forward_tokens(x, mesh)
        if query is not None and not query.weights_known:
            raise ValueError("a query mesh needs its quadrature weights: the patched decoders "
                             "integrate over the query's patches; pass a Mesh(pos, weight)")
        index = self.patch_index(mesh)
        if self.quadrature == "nodal":  # the exact P1 coefficients are not aliased by the nodes
            self.check_resolution(index)
        h = self.encode(x, mesh, patches=index)
        if self.decoder == "pointwise":
            z, out = self.project(h), mesh
        else:
            out = mesh if query is None else query
            index_query = index if out is mesh else self.patch_index(out, source=mesh)
            e = self.query_embed(out.pos)
            c = self.cross(h, mesh.pos, mesh.weight, mesh.batch_vector, patches=index, layout=mesh.layout,
                           x_query=e, pos_query=out.pos, weight_query=out.weight,
                           batch_query=out.batch_vector, patches_query=index_query, layout_query=out.layout)
            z = self.project(self.cross_norm(e + c))
        if self.final is not None:
            z = z + self.final(z, out.pos, out.weight, out.batch_vector)
        if self.smoothing is not None:
            z = self.smoothing(z, out.pos, out.weight, out.batch_vector)
        return z


class TokenIndex(NamedTuple):
    r"""How a (batched) mesh meets the patches' reference grids (``quadrature="tokens"``):

    - ``points [B P G^d, d]``: the grid points in the domain, :math:`c_p + L \xi_j`;
    - ``sample_index``, ``sample_coeff [B P G^d, d + 1]``: the piecewise-linear interpolation of
      the nodes' values at the points (:func:`~geoattn.mesh.interpolation.linear_interpolation`;
      with a period, on the nodes' periodic images);
    - ``node_index``, ``node_coeff [N, 2^d]``: the multilinear interpolation of the grid of every
      node's patch at the node (:func:`~geoattn.nn.patch_attention.grid_stencil`).
    """

    points: torch.Tensor
    sample_index: torch.Tensor
    sample_coeff: torch.Tensor
    node_index: torch.Tensor
    node_coeff: torch.Tensor
    exact: P1PatchGeometry | None = None
    exact_rows: torch.Tensor | None = None


def _join_tokens(mesh: Mesh, parts: list[TokenIndex]) -> TokenIndex:
    """The :class:`TokenIndex` of a batch from those of its graphs (indices shifted)."""
    return TokenIndex(torch.cat([t.points for t in parts]),
                      shifted_cat([t.sample_index for t in parts], mesh.layout.counts),
                      torch.cat([t.sample_coeff for t in parts]),
                      shifted_cat([t.node_index for t in parts], [len(t.points) for t in parts]),
                      torch.cat([t.node_coeff for t in parts]), *_join_exact(parts, mesh.layout.counts))


def _join_exact(parts: list[TokenIndex], counts) -> tuple[P1PatchGeometry | None, torch.Tensor | None]:
    """The exact input structure of the graphs of a batch that have one (their node indices
    shifted to the batch's) and the rows ``[B' P]`` of their patches among the batch's."""
    have = [g for g, t in enumerate(parts) if t.exact is not None]
    if not have:
        return None, None
    offsets = [sum(counts[:g]) for g in range(len(parts))]
    shifted = [parts[g].exact._replace(node=parts[g].exact.node + offsets[g]) for g in have]
    p = len(parts[have[0]].exact_rows)
    rows = torch.cat([parts[g].exact_rows + g * p for g in have])
    return concat_p1_geometry(shifted, [0] * len(shifted)), rows


def _node_centres(pos: torch.Tensor, weight: torch.Tensor, patch: torch.Tensor, num_patches: int) -> torch.Tensor:
    """The weighted centroids ``[P, d]`` (float64, CPU) of the nodes of every patch."""
    return patch_centroids(pos.detach().cpu().double(), weight.detach().cpu().double(), patch.cpu(), num_patches)


def _periodic_images(node: torch.Tensor, period: torch.Tensor, reach: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The nodes ``[N, d]`` with their images shifted by a period along any axes, those within
    ``reach`` of the nodes' box (coincident images, e.g. of closing nodes, kept once), and the
    node each point is an image of."""
    d = node.shape[1]
    shifts = torch.tensor(list(itertools.product((0.0, -1.0, 1.0), repeat=d)), dtype=torch.float64) * period
    images = (node[None] + shifts[:, None]).reshape(-1, d)  # the nodes themselves first
    owner = torch.arange(len(node)).repeat(len(shifts))
    lo, hi = node.amin(0) - reach, node.amax(0) + reach
    near = ((images >= lo) & (images <= hi)).all(1)
    images, owner = images[near], owner[near]
    key = torch.round(images / (1e-9 * period.max())).numpy()
    _, first = np.unique(key, axis=0, return_index=True)
    keep = torch.from_numpy(np.sort(first))
    return images[keep], owner[keep]


#: The values of ``quadrature`` (see :class:`ViTNO`).
QUADRATURES = ("nodal", "p1", "tokens")


def _checked_modes(name: str, modes):
    """``modes`` (one whole number >= 0, or one per axis) checked by
    :func:`~geoattn.mesh.validation.checked_number`."""
    if isinstance(modes, (list, tuple)):
        return type(modes)(checked_number(name, k, integer=True, positive=False, minimum=0) for k in modes)
    return checked_number(name, modes, integer=True, positive=False, minimum=0)


#: The buffers of a model without a partition (see :meth:`geoattn.mesh.Partition.state`).
_EMPTY_PARTITION = {"meta": torch.zeros(0, dtype=torch.long), "cuts": torch.zeros(0, 4, dtype=torch.long),
                    "seeds": torch.zeros(0, 0, dtype=torch.long), "seed_patch": torch.zeros(0, dtype=torch.long)}


_ARGS = r"""
    Args:
        in_channels: input function channels ``C_in``.
        out_channels: output function channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: encoder channels ``C`` (default ``64``).
        depth: number of encoder blocks (default ``3``).
        num_heads: attention heads (default ``4``).
        ff_mult: feed-forward hidden size as a multiple of ``width`` (default ``2``).
        num_patches: patches per graph :math:`P` (default ``4``).
        modes: Fourier modes :math:`K` per dimension on the reference patch (default ``2``). With
            ``quadrature="tokens"`` at most ``(grid - 1) // 2``; with ``"nodal"`` every patch
            needs about :math:`(2(2K+1))^d` nodes (:func:`~geoattn.nn.spectral.resolved_modes`).
        partition_method: ``"rcb"`` (default) or ``"metis"``, for the fitted partition and those
            made on the fly.
        final_modes: modes of the residual spectral layer :math:`z + W_S z` on the whole domain
            (default ``None``: no such layer).
        decoder: ``"pointwise"`` (default) or ``"cross"`` (answers on a query mesh too).
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).
        smoothing_eps: :math:`\varepsilon` of the smoothing last layer in place of the residual
            spectral layer (default ``None``: none; the paper uses ``1e-3``).
        quadrature: where the model computes and integrates. ``"tokens"`` (the default, unless
            ``decoder="cross"`` or ``scores="p1"``, which need the nodes: then ``"nodal"``): every
            patch carries a fixed grid of ``grid`` points per axis on its window
            :math:`c_p + L[-1/2, 1/2]^d` (the same points on every mesh: the centres :math:`c_p`
            are fitted with the partition, :meth:`fit_mesh`); the input's piecewise-linear
            interpolant is read at these points, the lift, the attention between patches (the
            grid's midpoint rule in the scores and the spectral transforms) and the feed-forward
            networks all act on the grids, and the output is the grid function of every node's
            patch, interpolated multilinearly at the node. The only steps that see the mesh are
            the interpolation of the input and the evaluation at the nodes, so the model is one
            continuum operator of the input's interpolant on every mesh of the domain.
            ``"nodal"``: the nodes' weights in each patch (the former default); ``"p1"`` (ViT-NO,
            2-D triangle meshes): the lift's Fourier coefficients exact on the piecewise-linear
            interpolant over each patch (see
            :func:`~geoattn.nn.patch_attention.p1_patch_geometry`), nodal elsewhere.
        grid: points per axis of every patch's grid with ``quadrature="tokens"`` (default ``16``;
            at least ``2 * modes + 1``).
        period: the period :math:`L` of a periodic domain (a torus), one number or one per axis
            (default ``None``: not periodic), checked by
            :func:`~geoattn.nn.spectral.checked_period`; ``quadrature="tokens"`` only. The
            input is then read on the torus (the grids of the patches at the seam read the
            periodic interpolant across it), an RCB partition cuts the torus itself (its box
            starting at the nodes' lowest coordinates, so the grids tile the torus, seam included),
            and the residual spectral layer and Remark 21's smoothing (``final_modes``,
            ``smoothing_eps``) act on the torus, as :class:`~geoattn.nn.SpectralSmoothing` with
            ``period``.
        readout: how the output's grid functions are read at the nodes with
            ``quadrature="tokens"``: ``"blend"`` (the default there: the grids of every patch
            whose window holds the node, weighted by a partition of unity that vanishes at each
            window's edge, continuous across the seams wherever the windows overlap; see
            :meth:`node_reading`) or ``"patch"`` (the multilinear interpolation of the grid of every
            node's own patch, discontinuous across the patch seams; the nodal designs' only
            reading). Checkpoints record it; those without it rebuild with ``"patch"`` only for the
            nodal designs.
        scores: how ViT-NO's attention scores integrate over a patch: ``"nodal"`` (default, the
            nodes' weights in each patch) or ``"p1"`` (2-D triangle meshes: the exact integrals of
            the piecewise-linear interpolants over each patch's region, with the consistent mass
            matrices of its pieces as for ``quadrature="p1"``, see
            :mod:`geoattn.nn.patch_mass`; the cross decoder's scores stay nodal). FANO takes
            ``"nodal"`` only.

    Shapes:
        - input: ``x [N, C_in]`` on the nodes of ``mesh`` (a :class:`~geoattn.mesh.Mesh`, one
          graph or a batch); ``query`` (optional :class:`~geoattn.mesh.Mesh` with as many graphs,
          ``decoder="cross"`` only): the nodes and weights to answer on.
        - output: ``[N, C_out]``, or ``[Nq, C_out]`` with a query mesh.
"""


class ViTNO(PatchedOperator, name="vit"):
    r"""The Vision Transformer neural operator of Calvello, Kovachki, Levine and Stuart
    (`arXiv:2406.06486 <https://arxiv.org/abs/2406.06486>`_, §4.3) on graph partitions.

    ViT's "flatten a patch and project it" is replaced by a Fourier integral operator applied to
    every patch in its reference frame (:class:`~geoattn.nn.PatchSpectralIntegral`), with the same
    weights for all patches; attention then uses pointwise :math:`Q, K, V`:

    .. math::
        h_0(p)(x) = \mathrm{Re} \sum_m R(m)\, \hat u_{\text{in},p}(m)\, e^{2\pi i\, m\cdot(x-c_p)/L},
        \qquad u_\text{in} = (u, x),

    .. math::
        A_P(h)(j) = \sum_k \operatorname{softmax}_k\Big(\tau
            \sum_m \widehat{Qh}_j(m)\cdot\overline{\widehat{Kh}_k(m)}\Big)\, Vh(k),

    followed by the encoder and projection of :class:`PatchedOperator`.
    """

    spectral_lift = True


class FANO(PatchedOperator, name="fano"):
    r"""The Fourier attention neural operator of Calvello, Kovachki, Levine and Stuart
    (`arXiv:2406.06486 <https://arxiv.org/abs/2406.06486>`_, §4.4) on graph partitions.

    A pointwise lift of values and coordinates, and patched attention whose :math:`Q, K, V` are
    Fourier integral operators on every patch (one complex matrix per mode,
    ``PatchAttention(spectral_qkv=True)``):

    .. math::
        h_0(x) = L(u(x), x), \qquad
        \widehat{Qh}_j(m) = R_Q(m)\, \hat h_j(m) \ \text{(likewise } K, V),

    .. math::
        A_P(h)(j)(x) = \mathrm{Re} \sum_m \Big(\sum_k \operatorname{softmax}_k(s_{jk})\,
            \widehat{Vh}_k(m)\Big) e^{2\pi i\, m\cdot(x-c_j)/L},
        \qquad s_{jk} = \tau\, \mathrm{Re} \sum_m \widehat{Qh}_j(m)\cdot\overline{\widehat{Kh}_k(m)},

    followed by the encoder and projection of :class:`PatchedOperator`.
    """

    spectral_qkv = True


for _model in (ViTNO, FANO):  # one argument list for both docstrings
    _model.__doc__ += _ARGS
del _model
