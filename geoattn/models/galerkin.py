"""Galerkin Transformer (Cao): softmax-free Galerkin or Fourier attention encoder on any mesh."""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.galerkin_attention import FourierAttention, GalerkinAttention
from ..mesh.mesh import Mesh
from ..nn.spectral import SpectralIntegral
from .base import COMMON_OPTIONS, DROPOUT
from .encoder import DECODERS, CoordinateFeatures, EncoderBlock, EncoderOperator, PointwiseMLP

_ATTENTION = {"galerkin": GalerkinAttention, "fourier": FourierAttention}

#: The encoder blocks of :class:`GalerkinTransformer`: ``"postln"`` (post-LayerNorm around the
#: attention and the feed-forward network, the default) or ``"cao"`` (Cao's eq. 4, or eq. 7 with
#: ``norm="regular"``).
BLOCKS = ("postln", "cao")

#: Where :class:`GalerkinTransformer` normalises: ``"attention"`` (per-head LayerNorm inside the
#: attention, on K, V resp. Q, K: Cao's eqs. 5-6) or ``"regular"`` (plain attention, LayerNorm
#: outside it only).
NORMS = ("attention", "regular")


class CaoBlock(nn.Module):
    r"""Cao's encoder block (*Choose a Transformer: Fourier or Galerkin*, eq. 4): residual
    connections and no LayerNorm outside the mixing layer :math:`\mathcal A`,

    .. math::
        \tilde h = h + \mathcal A(h), \qquad h \leftarrow \tilde h + F(\tilde h),

    the only normalisation being the one inside :math:`\mathcal A` (the per-head LayerNorm of
    :class:`~geoattn.nn.GalerkinAttention` on :math:`K, V`, of
    :class:`~geoattn.nn.FourierAttention` on :math:`Q, K`). With ``regular=True`` it is the
    "regular LayerNorm" block of Cao's eq. 7, meant for a mixer without inner normalisation,

    .. math::
        \tilde h = h + \mathcal A(h), \qquad
        h \leftarrow \operatorname{LN}_2\big(\tilde h + F(\operatorname{LN}_1(\tilde h))\big),

    literally as printed (the outer residual carries the unnormalised :math:`\tilde h`; the
    reference code's post-LayerNorm reading of it is :class:`~geoattn.models.encoder.EncoderBlock`
    around plain attention). :math:`F` is the pointwise feed-forward network of
    :class:`~geoattn.models.encoder.EncoderBlock`, and LayerNorm acts on the channels of each
    node, so the only sums over nodes are the quadratures inside :math:`\mathcal A`.

    Args:
        mixer: a layer with ``forward(x, pos, weight, batch=None, **structure)``.
        width: channel width ``C``.
        ff_mult: hidden size of :math:`F` as a multiple of ``C`` (default ``2``).
        regular: eq. 7 instead of eq. 4 (default ``False``).
        ff_dropout: dropout inside :math:`F` (training mode; default ``0``; Cao: 0.05 for FT).

    Shapes:
        - ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` to ``[N, C]``.
    """

    def __init__(self, mixer: nn.Module, width: int, ff_mult: int = 2, regular: bool = False,
                 ff_dropout: float = 0.0):
        super().__init__()
        self.mixer = mixer
        self.ff = PointwiseMLP(width, ff_mult * width, width, dropout=ff_dropout)
        self.regular = regular
        if regular:
            self.norm1 = nn.LayerNorm(width)
            self.norm2 = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, **structure) -> torch.Tensor:
        y = x + self.mixer(x, pos, weight, batch, **structure)
        if self.regular:
            return self.norm2(y + self.ff(self.norm1(y)))
        return y + self.ff(y)

    def extra_repr(self) -> str:
        return "regular=True" if self.regular else ""


class SpectralDecoder(nn.Module):
    r"""The decoder of Cao's Burgers and Darcy models (a "2-layer spectral convolution", FNO's
    Fourier layer with SiLU and no batch normalisation), with the mesh-native spectral integral
    :class:`~geoattn.nn.SpectralIntegral` in place of the grid FFT:

    .. math::
        z_0 = h, \qquad z_{k+1} = \operatorname{SiLU}\big(W_k z_k + \mathcal K_k z_k\big), \qquad
        (\mathcal K z)(y) = \mathrm{Re} \sum_{|m_k| \le K} R(m)\, \hat z(m)\,
        e^{2\pi i m \cdot (y - a)/L},\ \ \hat z(m) = \frac{1}{|B|}\sum_i w_i z_i e^{-2\pi i m\cdot\xi_i},

    followed by the pointwise head ``Linear -> SiLU -> Linear`` (in the model's ``project``). The
    Fourier coefficients are quadratures with the nodes' weights on the (padded) bounding box, so
    the decoder is one operator on every mesh; no grid and no FFT.

    Args:
        in_channels: encoder width.
        dim: spatial dimension :math:`d`.
        width: decoder channels (default ``32``).
        modes: Fourier modes :math:`K` per dimension (default ``4``; choose what the training
            mesh resolves, :func:`~geoattn.nn.spectral.resolved_modes`).
        depth: spectral layers (default ``2``, as Cao).
        **spectral: further keywords of :class:`~geoattn.nn.SpectralIntegral`, passed on:
            ``padding`` (default here ``0.25`` as :class:`~geoattn.models.MeshFNO`, or ``0`` with
            a ``period``), ``backend``, ``period`` (a periodic domain such as Cao's Burgers
            problem, where the layer supports it).

    Shapes:
        - ``h [N, in_channels]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional) and
          the batch ``layout`` (optional keyword, ``mesh.layout``: passed on to the spectral
          layers where they take it) to ``[N, width]``.
    """

    def __init__(self, in_channels: int, dim: int, width: int = 32, modes=4, depth: int = 2,
                 **spectral):
        super().__init__()
        if depth < 1:
            raise ValueError(f"the spectral decoder needs depth >= 1, got {depth}")
        # FNO's domain padding for a non-periodic box; a declared period has no boundary to pad
        spectral.setdefault("padding", 0.25 if spectral.get("period") is None else 0.0)
        sizes = [in_channels] + [width] * depth
        self.spectral = nn.ModuleList(SpectralIntegral(a, b, modes, dim, **spectral)
                                      for a, b in zip(sizes, sizes[1:]))
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        # the spectral layers take the batch layout where their signature has it
        layer = type(self.spectral[0])
        self._layout_in_basis = "layout" in inspect.signature(layer.basis).parameters
        self._layout_in_forward = "layout" in inspect.signature(layer.forward).parameters

    def forward(self, h: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, layout=None) -> torch.Tensor:
        given = {} if layout is None else {"layout": layout}
        # the nodes' Fourier basis, shared by every layer
        basis = self.spectral[0].basis(pos, weight, batch, **(given if self._layout_in_basis else {}))
        structure = dict(basis=basis, **(given if self._layout_in_forward else {}))
        for spectral, linear in zip(self.spectral, self.linears):
            h = F.silu(linear(h) + spectral(h, pos, weight, batch, **structure))
        return h


class GalerkinTransformer(EncoderOperator, name="galerkin"):
    r"""The Galerkin Transformer of Cao (`arXiv:2105.14995 <https://arxiv.org/abs/2105.14995>`_),
    mesh-agnostic: pointwise lift of values and coordinates, ``depth`` blocks of Galerkin (or
    Fourier) attention with the coordinates concatenated per head, and a decoder.

    .. math::
        h_0 = L(u, x), \qquad h_{\ell+1} = B(h_\ell), \qquad \mathcal{G}(u) = P(h_{\text{depth}}),

    with Galerkin attention :math:`A(h)(x) = Q(x)\int_D \tilde K(y)^\top \tilde V(y)\,dy
    \approx Q_i \sum_j w_j \tilde K_j^\top \tilde V_j` (per-head layer-normalised :math:`K, V`),
    or Fourier attention :math:`A(h)(x) = \int_D (\tilde Q(x)\cdot\tilde K(y))\, V(y)\,dy \approx
    \sum_j w_j (\tilde Q_i\cdot\tilde K_j) V_j` (normalised :math:`Q, K`), the weights :math:`w_j`
    in place of Cao's uniform :math:`1/n`. The cost is linear in the number of nodes.

    **The block** :math:`B` (``block``, ``norm``):

    - ``block="postln"`` (the default, this library's original block; the default keeps existing
      checkpoints and benchmark results): post-LayerNorm around attention with its inner
      normalisation, :math:`B(h) = \operatorname{LN}_2(g + F(g))`,
      :math:`g = \operatorname{LN}_1(h + A(h))`.
    - ``block="cao"``: Cao's block as published (eq. 4), no LayerNorm outside the attention,
      :math:`\tilde h = h + A(h)`, :math:`B(h) = \tilde h + F(\tilde h)` (:class:`CaoBlock`).
    - ``norm="regular"``: the "regular LayerNorm" ablation, attention without its inner
      LayerNorm; with ``block="cao"`` the block is Cao's eq. 7 as printed,
      :math:`B(h) = \operatorname{LN}_2(\tilde h + F(\operatorname{LN}_1(\tilde h)))`; with
      ``block="postln"`` it is the reference code's post-LayerNorm reading of eq. 7.

    :math:`F` is a pointwise two-layer network of hidden size ``ff_mult * width`` (GELU).

    **The decoder** :math:`P` (``decoder``): ``"pointwise"`` (default; Cao's decoder for
    non-smooth targets), ``"spectral"`` (Cao's decoder for smooth targets, two Fourier layers
    :math:`z \mapsto \operatorname{SiLU}(W z + \mathcal K z)` with the quadrature spectral
    integral :class:`~geoattn.nn.SpectralIntegral` on the nodes, then ``Linear -> SiLU ->
    Linear``; :class:`SpectralDecoder`), or ``"cross"`` (one cross-attention of the same type from
    an embedding of the query coordinates, so the model answers on the nodes of a query mesh;
    :class:`~geoattn.models.encoder.EncoderOperator`).

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        dim: spatial dimension ``d`` (default ``2``).
        width: encoder channels (default ``64``).
        depth: number of blocks (default ``3``).
        num_heads: attention heads (default ``4``).
        ff_mult: feed-forward hidden size as a multiple of ``width`` (default ``2``).
        attention: ``"galerkin"`` (default) or ``"fourier"``.
        decoder: ``"pointwise"`` (default), ``"spectral"`` or ``"cross"``.
        coordinate_features: Fourier features of the coordinates in the lift, as the keywords of
            :class:`~geoattn.models.encoder.CoordinateFeatures` (default ``None``: none).
        block: ``"postln"`` (default) or ``"cao"``, see above.
        norm: ``"attention"`` (default: LayerNorm inside the attention, Cao's eqs. 5-6) or
            ``"regular"``, see above.
        spectral: keywords of :class:`SpectralDecoder` for ``decoder="spectral"`` (``width``,
            ``modes``, ``depth`` and those of :class:`~geoattn.nn.SpectralIntegral`; default
            ``None``: its defaults).
        attention_options: further keywords of every attention layer
            (:class:`~geoattn.nn.GalerkinAttention` / :class:`~geoattn.nn.FourierAttention`), e.g.
            ``{"init_gain": 1e-3}``, the Xavier gain of Cao's Fourier-type runs (default ``None``).
        ff_dropout: dropout inside every block's feed-forward network, in training mode (default
            ``0``; Cao's Table 7: 0.05 for FT on Burgers, 0 for GT).

    Shapes:
        - input: ``model(x, mesh, *, query=None)``: ``x [N, C_in]`` on the nodes of ``mesh`` (a
          :class:`~geoattn.mesh.Mesh`: ``pos [N, d]``, ``weight [N]`` and, for a batch
          (:meth:`~geoattn.mesh.Mesh.batch`), its layout), and ``query`` (optional,
          ``decoder="cross"`` only): a :class:`~geoattn.mesh.Mesh` of ``Nq`` nodes, with as many
          graphs as ``mesh``. The former call ``model(x, pos, weight, batch, pos_query=...,
          batch_query=...)`` still works.
        - output: ``[N, C_out]``, or ``[Nq, C_out]`` with a query mesh.
    """

    numeric_options = {**COMMON_OPTIONS, "num_heads": {"integer": True}, "ff_mult": {"integer": True},
                       "ff_dropout": DROPOUT}

    def __init__(self, in_channels: int, out_channels: int, dim: int = 2, width: int = 64,
                 depth: int = 3, num_heads: int = 4, ff_mult: int = 2, attention: str = "galerkin",
                 decoder: str = "pointwise", coordinate_features: dict | None = None,
                 block: str = "postln", norm: str = "attention", spectral: dict | None = None,
                 attention_options: dict | None = None, ff_dropout: float = 0.0):
        super().__init__()
        for name, value, allowed in (("attention", attention, sorted(_ATTENTION)),
                                     ("block", block, BLOCKS), ("norm", norm, NORMS),
                                     ("decoder", decoder, DECODERS + ("spectral",))):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
        if spectral is not None and decoder != "spectral":
            raise ValueError(f"spectral= configures decoder='spectral', got decoder={decoder!r}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.decoder, self.block, self.norm = decoder, block, norm
        layer_norm = norm == "attention"

        def attention_layer():
            return _ATTENTION[attention](width, num_heads=num_heads, dim=dim, layer_norm=layer_norm,
                                         **(attention_options or {}))

        self.inputs = CoordinateFeatures.of(in_channels, dim, coordinate_features)
        self.lift = PointwiseMLP(self.inputs.out_features, width, width)
        if block == "cao":
            blocks = (CaoBlock(attention_layer(), width, ff_mult, regular=not layer_norm, ff_dropout=ff_dropout)
                      for _ in range(depth))
        else:
            blocks = (EncoderBlock(attention_layer(), width, ff_mult, ff_dropout=ff_dropout) for _ in range(depth))
        self.blocks = nn.ModuleList(blocks)
        if decoder == "spectral":
            self.spectral_decoder = SpectralDecoder(width, dim, **(spectral or {}))
            out = self.spectral_decoder.linears[-1].out_features
            self.project = nn.Sequential(nn.Linear(out, 2 * out), nn.SiLU(), nn.Linear(2 * out, out_channels))
        else:
            self.project = PointwiseMLP(width, 2 * width, out_channels)
        if decoder == "cross":
            self.build_cross_decoder(attention_layer(), width, dim)

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        """The output ``[N, C_out]`` on ``mesh`` (``decoder="pointwise"`` or ``"spectral"``), or
        ``[Nq, C_out]`` on the nodes of the :class:`~geoattn.mesh.Mesh` ``query``
        (``decoder="cross"``; default: the input mesh)."""
        if self.decoder != "spectral":
            return super().forward(x, mesh, query=query)
        self.check_call(x, mesh)
        self.check_query(query)
        h = self.encode(x, mesh)
        return self.project(self.spectral_decoder(h, mesh.pos, mesh.weight, mesh.batch_vector,
                                                  layout=mesh.layout))

    def check_query(self, query) -> None:
        if self.decoder != "cross" and query is not None:
            raise ValueError(f"this {type(self).__name__} answers on its input mesh "
                             f"(decoder={self.decoder!r}); build it with decoder='cross' to answer "
                             "on a query mesh")

    def extra_repr(self) -> str:
        return f"block={self.block!r}, norm={self.norm!r}, decoder={self.decoder!r}"
