r"""Patched attention on graph partitions (self and cross in one layer): softmax over patches, L2
scores through Fourier coefficients."""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from geoattn.mesh.quadrature import integrate

from .spectral import ModeLinear, fourier_coefficients, fourier_evaluate, fourier_modes, patch_frame

__all__ = ["PatchAttention"]


class PatchAttention(nn.Module):
    r"""Multi-head patched attention (self or cross) with patches given by a mesh partition.

    Patched attention (Definitions 13–14 of Calvello et al., *Continuum Attention for Neural
    Operators*) treats the restriction :math:`\tilde u(p) = u|_{D_p}` of a function to each patch as
    one token, compares tokens by the :math:`L^2` inner product on a reference patch :math:`D'`, and
    mixes them with a softmax over patches:

    .. math::
        A(\tilde u)(j) = \sum_{k=1}^{P}
        \frac{\exp\big(\langle Q\tilde u(j), K\tilde u(k)\rangle_{L^2(D')}\big)}
             {\sum_{l} \exp\big(\langle Q\tilde u(j), K\tilde u(l)\rangle_{L^2(D')}\big)}\,
        V\tilde u(k).

    Patches of an unstructured mesh are not congruent, so each is mapped to the reference box
    :math:`D' = [-1/2, 1/2]^d` by :math:`\xi = (x - c_p)/L` (weighted centroid :math:`c_p`, one
    global patch length :math:`L`) and represented by its quadrature Fourier coefficients there
    (zero outside the patch):

    .. math::
        \hat u_p(m) = L^{-d} \sum_{i \in D_p} w_i\, u_i\, e^{-2\pi i\, m \cdot \xi_i},
        \qquad |m_k| \le K.

    Scores are inner products of coefficients (Parseval on :math:`D'`), values are evaluated at the
    nodes :math:`x_i` of patch :math:`j` through the same basis:

    .. math::
        s_{jk} = \tau\, \mathrm{Re} \sum_m \widehat{Q u}_j(m) \cdot \overline{\widehat{K u}_k(m)},
        \qquad
        \mathrm{out}_i = W_O\, \mathrm{Re} \sum_m \Big(\sum_k \mathrm{softmax}_k(s_{jk})\,
        \widehat{V u}_k(m)\Big) e^{2\pi i\, m \cdot \xi_i}.

    Nothing depends on how many nodes a patch has: on every mesh of the domain, with the patches
    transferred (:meth:`geoattn.mesh.Partition.transfer`), the layer is a quadrature of the same
    operator. :math:`Q, K, V` are linear: pointwise matrices (ViT neural operator; they commute with
    the transform) or, with ``spectral_qkv=True``, one complex matrix per mode
    (:class:`~geoattn.nn.spectral.ModeLinear`; Fourier attention neural operator). The cost is
    :math:`O(N M C + B P^2 M C)` for :math:`M = (2K+1)^d` modes and :math:`P` patches.

    With a query side (``x_query``, ``pos_query``, ``weight_query``, ``patch_query``) the layer is
    patched cross-attention (Definitions 17–18): the patches :math:`j` of the query function
    :math:`u` on one mesh attend to the patches :math:`k` of the source function :math:`v` (``x``)
    on another,

    .. math::
        \mathrm{out}_i = W_O\, \mathrm{Re} \sum_m \Big(\sum_{k=1}^{O}
        \mathrm{softmax}_k(s_{jk})\, \widehat{V v}_k(m)\Big) e^{2\pi i\, m \cdot \xi_i},
        \qquad
        s_{jk} = \tau\, \mathrm{Re} \sum_m \widehat{Q u}_j(m) \cdot \overline{\widehat{K v}_k(m)},

    for node :math:`i` in query patch :math:`j`, both meshes seen in the reference box of side
    ``patch_length``. The number of query patches :math:`P` and source patches :math:`O` may differ.

    Args:
        channels: model width :math:`C` (a multiple of ``num_heads``).
        num_heads: number of heads :math:`H` (default 1); :math:`d_k = C/H`.
        modes: :math:`K` per dimension (int or one per dimension, default 2).
        dim: spatial dimension :math:`d` (default 2).
        spectral_qkv: per-mode complex :math:`Q, K, V` (FANO) instead of pointwise (default
            ``False``).
        scale: score temperature :math:`\tau` (default :math:`1/\sqrt{d_k}`).

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional), and
          the keywords ``patch [N]`` (patch index within its graph, in ``[0, P)``),
          ``patch_length`` (float, default ``1``), ``num_patches`` (optional :math:`P`); for
          cross-attention the query side ``x_query [Nq, C]``, ``pos_query [Nq, d]``,
          ``weight_query [Nq]``, ``patch_query [Nq]``, ``batch_query [Nq]`` (give both batch
          vectors or neither) and ``num_patches_query``.
        - **output:** ``[N, C]``, or ``[Nq, C]`` with a query side.
    """

    def __init__(self, channels: int, num_heads: int = 1, modes: int | Sequence[int] = 2, dim: int = 2,
                 spectral_qkv: bool = False, scale: float | None = None):
        super().__init__()
        if channels % num_heads:
            raise ValueError(f"channels ({channels}) must be a multiple of num_heads ({num_heads})")
        self.channels, self.num_heads, self.modes, self.dim = channels, num_heads, modes, dim
        self.spectral_qkv = spectral_qkv
        self.head_channels = channels // num_heads
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.head_channels)
        self.register_buffer("mode_index", fourier_modes(modes, dim), persistent=False)
        num_modes = len(self.mode_index)

        def projection() -> nn.Module:
            if spectral_qkv:
                return ModeLinear(channels, channels, num_modes)
            return nn.Linear(channels, channels, bias=False)  # a bias is not a patch-local map

        self.q, self.k, self.v = projection(), projection(), projection()
        self.out = nn.Linear(channels, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.q, self.k, self.v, self.out):
            lin.reset_parameters()

    def _project(self, lin: nn.Module, coeff: torch.Tensor) -> torch.Tensor:
        """Apply :math:`Q`, :math:`K` or :math:`V` to patch coefficients ``[S, M, C]``."""
        if isinstance(lin, ModeLinear):
            return lin(coeff)
        return torch.complex(lin(coeff.real), lin(coeff.imag))  # real matrix: acts on Re and Im

    def attend(self, coeff_q: torch.Tensor, coeff_s: torch.Tensor, mass_s: torch.Tensor) -> torch.Tensor:
        """Mixed value coefficients from query and source patch coefficients.

        Args:
            coeff_q: query patch coefficients ``[B, P_q, M, C]``.
            coeff_s: source patch coefficients ``[B, P_s, M, C]``.
            mass_s: total weight of every source patch ``[B, P_s]`` (empty patches, 0, are masked).

        Returns:
            ``[B, P_q, M, C]``: :math:`\\sum_k \\mathrm{softmax}_k(s_{jk}) \\widehat{Vu}_k`.
        """
        b, pq, m, _ = coeff_q.shape
        ps = coeff_s.shape[1]
        h, dk = self.num_heads, self.head_channels
        q = self._project(self.q, coeff_q).view(b, pq, m, h, dk)
        k = self._project(self.k, coeff_s).view(b, ps, m, h, dk)
        v = self._project(self.v, coeff_s).view(b, ps, m, h, dk)
        score = torch.einsum("bjmhc,bkmhc->bhjk", q, k.conj()).real * self.scale  # (B, H, Pq, Ps)
        score = score.masked_fill(~(mass_s > 0)[:, None, None, :], float("-inf"))
        attn = torch.softmax(score, dim=-1).to(v.dtype)
        mixed = torch.einsum("bhjk,bkmhc->bjmhc", attn, v)  # (B, Pq, M, H, dk)
        return mixed.reshape(b, pq, m, self.channels)

    def _coefficients(self, x, pos, weight, batch, patch, patch_length, num_patches):
        p = num_patches if num_patches is not None else int(patch.max()) + 1
        frame = patch_frame(pos, weight, patch, patch_length, batch, p)
        coeff = fourier_coefficients(x, weight, frame, self.mode_index)  # (B*P, M, C)
        mass = integrate(torch.ones_like(weight), weight, frame.segment, frame.num_segments)
        b = frame.num_segments // p
        return frame, coeff.view(b, p, *coeff.shape[1:]), mass.view(b, p)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, patch: torch.Tensor,
                patch_length: float = 1.0, num_patches: int | None = None,
                x_query: torch.Tensor | None = None, pos_query: torch.Tensor | None = None,
                weight_query: torch.Tensor | None = None, patch_query: torch.Tensor | None = None,
                batch_query: torch.Tensor | None = None,
                num_patches_query: int | None = None) -> torch.Tensor:
        frame, coeff, mass = self._coefficients(x, pos, weight, batch, patch, patch_length,
                                                num_patches)
        if x_query is None:
            if any(t is not None for t in (pos_query, weight_query, patch_query, batch_query,
                                           num_patches_query)):
                raise ValueError("query keywords without x_query: pass x_query too")
            coeff_q = coeff
        else:
            if any(t is None for t in (pos_query, weight_query, patch_query)):
                raise ValueError("a query side needs x_query, pos_query, weight_query and patch_query")
            if (batch_query is None) != (batch is None):
                raise ValueError("give both batch and batch_query, or neither")
            frame, coeff_q, _ = self._coefficients(x_query, pos_query, weight_query, batch_query,
                                                   patch_query, patch_length, num_patches_query)
            if coeff_q.shape[0] != coeff.shape[0]:
                raise ValueError(f"query has {coeff_q.shape[0]} graphs, source {coeff.shape[0]}")
        mixed = self.attend(coeff_q, coeff, mass)  # (B, P, M, C)
        out = fourier_evaluate(mixed.flatten(0, 1), frame, self.mode_index)  # (Nq, C)
        return self.out(out)

    def extra_repr(self) -> str:
        return (f"{self.channels}, num_heads={self.num_heads}, modes={self.modes}, dim={self.dim}, "
                f"spectral_qkv={self.spectral_qkv}")
