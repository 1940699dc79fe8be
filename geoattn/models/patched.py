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
the fly (each with its own patch length), and a ``partition`` passed to ``forward`` overrides the
fitted one.

Patch attention reads every patch's function in every other patch's frame by interpolation
(:mod:`geoattn.nn.patch_pairs`); the stencils are built once per mesh and partition and cached
in the model (keyed by the bytes of the mesh), so repeated calls on one mesh do not rebuild them.
The Fourier parts (ViT-NO's patch lift, FANO's :math:`Q, K, V`) need every patch to hold enough
nodes for their ``modes``; choose ``modes`` with :func:`~geoattn.nn.spectral.resolved_modes`
from the nodes per patch of the training mesh; the models log a warning once when a patch is
under-resolved.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch
from torch import nn

from ..mesh.cache import StructureCache
from ..mesh.partition import Partition, partition as make_partition
from ..nn.functional import graph_slices
from ..nn.patch_attention import PatchAttention
from ..nn.patch_pairs import PatchPairs, patch_pairs
from ..nn.spectral import PatchSpectralIntegral, SpectralIntegral, SpectralSmoothing, resolved_modes
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
      mesh, for patch attention (default ``None``: the layer builds them).
    """

    patch: torch.Tensor
    length: torch.Tensor
    num_patches: int
    pairs: PatchPairs | None = None


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

    Shapes:
        - ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional) and the keyword
          ``patches`` (:class:`PatchIndex`); for cross-attention the query side ``x_query``,
          ``pos_query``, ``weight_query``, ``batch_query`` and ``patches_query``. Output: the
          layer's, ``[N, C_out]`` or ``[Nq, C_out]``.
    """

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, patches: PatchIndex,
                x_query: torch.Tensor | None = None, pos_query: torch.Tensor | None = None,
                weight_query: torch.Tensor | None = None, batch_query: torch.Tensor | None = None,
                patches_query: PatchIndex | None = None) -> torch.Tensor:
        pos, weight = _unit_length(pos, weight, patches)
        kwargs = dict(patch=patches.patch, num_patches=patches.num_patches)
        if isinstance(self.layer, PatchAttention):
            kwargs["pairs"] = (patches_query or patches).pairs
        if x_query is not None:
            pos_query, weight_query = _unit_length(pos_query, weight_query, patches_query)
            kwargs.update(x_query=x_query, pos_query=pos_query, weight_query=weight_query,
                          batch_query=batch_query, patch_query=patches_query.patch,
                          num_patches_query=patches_query.num_patches)
        return self.layer(x, pos, weight, batch, **kwargs)


def _unit_length(pos: torch.Tensor, weight: torch.Tensor,
                 index: PatchIndex) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinates and weights in units of each graph's patch length: ``pos / L``, ``w / L^d``."""
    length = index.length.to(pos.dtype)
    return pos / length.unsqueeze(-1), weight / length.pow(pos.shape[-1])


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

    With ``decoder="cross"`` the output is read on a query mesh :math:`y` (nodes ``pos_query`` with
    weights ``weight_query``, assigned to the same patches) through one patched cross-attention
    (:class:`~geoattn.nn.PatchAttention` with a query side) from an embedding of the query
    coordinates:
    :math:`z(y) = P\big(\operatorname{LN}(E(y) + C_P(E, h_{\text{depth}})(y))\big)`.
    """

    spectral_lift: bool = False
    spectral_qkv: bool = False

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 64,
                 depth: int = 3, num_heads: int = 4, ff_mult: int = 2, num_patches: int = 16,
                 modes: int = 4, partition_method: str = "rcb", final_modes: int | None = None,
                 decoder: str = "pointwise", smoothing_eps: float | None = None,
                 coordinate_features: dict | None = None):
        super().__init__()
        if partition_method not in ("rcb", "metis"):
            raise ValueError(f"partition_method must be 'rcb' or 'metis', got {partition_method!r}")
        if num_patches < 1:
            raise ValueError(f"num_patches must be at least 1, got {num_patches}")
        if smoothing_eps is not None and final_modes is None:
            raise ValueError("smoothing_eps needs final_modes (the modes the smoothing keeps)")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.num_patches, self.partition_method = num_patches, partition_method
        self.decoder = self.check_decoder(decoder)
        self.modes = modes
        self._warned_resolution = False
        self._pairs_cache = StructureCache(self.cache_size)
        self._partition: Partition | None = None
        for key, value in _EMPTY_PARTITION.items():
            self.register_buffer(f"partition_{key}", value.clone())
        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        if self.spectral_lift:  # a Fourier operator on every patch, plus the pointwise path
            self.lift = PatchMixer(PatchSpectralIntegral(self.inputs.out_features, width, modes, dim))
            self.lift_local = nn.Linear(self.inputs.out_features, width)
        else:
            self.lift = PointwiseMLP(self.inputs.out_features, width, width)
        def attention() -> PatchMixer:
            return PatchMixer(PatchAttention(width, num_heads=num_heads, modes=modes, dim=dim,
                                             spectral_qkv=self.spectral_qkv))

        self.blocks = nn.ModuleList(EncoderBlock(attention(), width, ff_mult) for _ in range(depth))
        if decoder == "cross":
            self.build_cross_decoder(attention(), width, dim)
        self.project = PointwiseMLP(width, 2 * width, out_channels)
        self.final = self.smoothing = None
        if smoothing_eps is not None:
            self.smoothing = SpectralSmoothing(final_modes, dim, eps=smoothing_eps)
        elif final_modes is not None:
            self.final = SpectralIntegral(out_channels, out_channels, final_modes, dim)

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
        """Make ``part`` the model's partition (``None``: none, cut every mesh on the fly)."""
        state = part.state() if part is not None else _EMPTY_PARTITION
        for key, value in state.items():
            setattr(self, f"partition_{key}", value.to(getattr(self, f"partition_{key}").device))
        self._partition = part
        self._pairs_cache.clear()

    def fit_mesh(self, pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor | None = None) -> None:
        """Cut the training mesh into ``num_patches`` parts by ``partition_method`` and keep the
        partition, unless one is already fitted (see :class:`~geoattn.models.NeuralOperator`)."""
        if self.partition is None:
            self.set_partition(make_partition(pos, weight, self.num_patches, cells=cells,
                                              method=self.partition_method))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for key in _EMPTY_PARTITION:  # the partition buffers take the saved shapes
            name = f"{prefix}partition_{key}"
            if name in state_dict:
                setattr(self, f"partition_{key}", torch.empty_like(state_dict[name]))
        self._partition = None
        self._pairs_cache.clear()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def partitions(self, pos: torch.Tensor, weight: torch.Tensor, batch: torch.Tensor | None = None,
                   partition: Partition | None = None) -> list[Partition]:
        """The partition of every graph: ``partition``, else the fitted one, for all; else each
        graph cut on the fly into ``num_patches`` parts by ``partition_method``."""
        graphs = graph_slices(len(pos), batch)
        partition = partition if partition is not None else self.partition
        if partition is not None:
            return [partition] * len(graphs)
        return [make_partition(pos[g], weight[g], self.num_patches, method=self.partition_method)
                for g in graphs]

    @staticmethod
    def patch_index(pos: torch.Tensor, batch: torch.Tensor | None, parts: list[Partition]) -> PatchIndex:
        """The :class:`PatchIndex` of nodes ``pos`` (graph ``g`` in the patches of ``parts[g]``),
        without stencils."""
        num_patches = {p.num_parts for p in parts}
        if len(num_patches) != 1:
            raise ValueError(f"all graphs of a batch need the same number of patches, got {num_patches}")
        patch = torch.zeros(len(pos), dtype=torch.long, device=pos.device)
        length = torch.ones(len(pos), dtype=pos.dtype, device=pos.device)
        for g, part in zip(graph_slices(len(pos), batch, len(parts)), parts):
            if g.stop > g.start:
                patch[g] = part.transfer(pos[g])
                length[g] = part.length
        return PatchIndex(patch, length, num_patches.pop())

    def with_pairs(self, index: PatchIndex, pos: torch.Tensor, weight: torch.Tensor,
                   batch: torch.Tensor | None, source: tuple | None = None) -> PatchIndex:
        """``index`` with the stencils of its nodes against ``source = (index, pos, weight, batch)``
        (default: itself), from the cache when this mesh and partition were seen before."""
        src, pos_s, weight_s, batch_s = source or (index, pos, weight, batch)

        def build():
            return patch_pairs(pos_s, weight_s, src.patch, src.num_patches, batch_s, pos_query=pos,
                               weight_query=weight, patch_query=index.patch,
                               num_patches_query=index.num_patches, batch_query=batch)

        pairs = self._pairs_cache.get((index.patch, pos, weight, batch, src.patch, pos_s, weight_s, batch_s),
                                      build, (index.num_patches, src.num_patches))
        return index._replace(pairs=pairs)

    def check_resolution(self, index: PatchIndex, batch: torch.Tensor | None = None) -> bool:
        """Whether every non-empty patch of ``index`` resolves the model's modes
        (:func:`~geoattn.nn.spectral.resolved_modes` of its node count is at least ``modes``);
        logs a warning, once per model, when one does not."""
        segment = index.patch if batch is None else batch * index.num_patches + index.patch
        counts = torch.bincount(segment)
        counts = counts[counts > 0]
        if counts.numel() == 0:  # no nodes: nothing to resolve
            return True
        fewest = int(counts.min())
        need = max([self.modes] if isinstance(self.modes, int) else self.modes)
        ok = resolved_modes(fewest, self.dim) >= need
        if not ok and not self._warned_resolution:
            self._warned_resolution = True
            logger.warning(
                "%s: a patch holds only %d nodes (median %d), too few to resolve modes=%s "
                "(resolved_modes gives %d); the patch Fourier coefficients are aliased on this "
                "mesh and a trained model will not transfer to other meshes: use fewer modes or "
                "fewer patches", type(self).__name__, fewest, int(counts.median()), self.modes,
                resolved_modes(fewest, self.dim))
        return ok

    def encode(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
               batch: torch.Tensor | None = None, *, patches: PatchIndex) -> torch.Tensor:
        """The encoder features ``[N, width]`` on the input mesh with patches ``patches``."""
        self.check_inputs(x, pos)
        u = self.inputs(x, pos)
        if self.spectral_lift:
            h = self.lift(u, pos, weight, batch, patches=patches) + self.lift_local(u)
        else:
            h = self.lift(u)
        for block in self.blocks:
            h = block(h, pos, weight, batch, patches=patches)
        return h

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, partition: Partition | None = None,
                pos_query: torch.Tensor | None = None, weight_query: torch.Tensor | None = None,
                batch_query: torch.Tensor | None = None) -> torch.Tensor:
        self.check_call(x, pos, weight, batch)
        self.check_query(pos_query)
        parts = self.partitions(pos, weight, batch, partition)
        index = self.patch_index(pos, batch, parts)
        self.check_resolution(index, batch)
        index = self.with_pairs(index, pos, weight, batch)
        h = self.encode(x, pos, weight, batch, patches=index)
        if self.decoder == "pointwise":
            z, pos_out, weight_out, batch_out = self.project(h), pos, weight, batch
        else:
            if pos_query is None:
                pos_query, weight_query, batch_query = pos, weight, batch
            elif weight_query is None:
                raise ValueError("a query mesh needs its quadrature weights: pass weight_query "
                                 "(they place every query patch in its reference frame)")
            index_query = self.with_pairs(self.patch_index(pos_query, batch_query, parts), pos_query,
                                          weight_query, batch_query, source=(index, pos, weight, batch))
            q = self.decode_cross(h, pos, weight, batch, pos_query, batch_query, patches=index,
                                  weight_query=weight_query, patches_query=index_query)
            z, pos_out, weight_out, batch_out = self.project(q), pos_query, weight_query, batch_query
        if self.final is not None:
            z = z + self.final(z, pos_out, weight_out, batch_out)
        if self.smoothing is not None:
            z = self.smoothing(z, pos_out, weight_out, batch_out)
        return z


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
        num_patches: patches per graph when no partition is passed (default ``16``).
        modes: Fourier modes :math:`K` per dimension on the reference patch (default ``4``, which
            needs about :math:`(2(2K+1))^d = 324` nodes per patch in 2D: see
            :func:`~geoattn.nn.spectral.resolved_modes`).
        partition_method: ``"rcb"`` (default) or ``"metis"``, for partitions made on the fly.
        final_modes: modes of the residual spectral layer :math:`z + W_S z` on the whole domain
            (default ``None``: no such layer).
        decoder: ``"pointwise"`` (default) or ``"cross"`` (answers on a query mesh too).
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).
        smoothing_eps: :math:`\varepsilon` of the smoothing last layer in place of the residual
            spectral layer (default ``None``: none; the paper uses ``1e-3``).

    Shapes:
        - input: ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional),
          ``partition`` (optional :class:`~geoattn.mesh.Partition` of the domain);
          ``pos_query [Nq, d]``, ``weight_query [Nq]``, ``batch_query [Nq]`` (optional,
          ``decoder="cross"`` only).
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
