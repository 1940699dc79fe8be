r"""Nonlocal Attention Operator (NAO) and its discrete-mixer baseline, on any mesh.

Decisions taken where the paper (Yu et al., NeurIPS 2024) is ambiguous, all documented here:

- Eq. (7) is read in its dimensionally consistent form :math:`A_{uu} = U W^{QK} U^\top`,
  :math:`A_{fu} = F W^{QK} U^\top` (rows: z, columns: y), as in eq. (15) and App. A.
- "3-layer models" means :math:`L = 2`: ``layers - 1`` residual :class:`NonlocalAttention` layers
  and one kernel layer with its own :math:`(W^Q_L, W^K_L)`; the default is ``layers=2``.
- The kernel is applied to the raw (layer-0) loadings :math:`g[u_j]`, as in App. A.
- Every token sum is a quadrature with the nodes' weights (the paper's :math:`\Delta x^D` on a
  uniform grid): once per attention layer, once in the :math:`z`-integral of the kernel and once
  in the :math:`y`-integral of the prediction.
- :math:`W^{P,u}(x, z)` and :math:`W^{P,f}(x, z)` are MLPs ``2 dim -> 32 -> 64 -> 1`` with
  LeakyReLU on *physical coordinates* divided by ``coord_scale`` (the authors use a reference grid
  on :math:`[-1, 1]`, which ties them to one resolution). For the radial problem the f-mesh is
  one point, so :math:`W^{P,u}` becomes a function of :math:`z` and :math:`W^{P,f}` a scalar.
- No normalisation by default. ``token_norm=True`` adds the authors' radial-code normaliser
  (:class:`~geoattn.nao.TokenNorm`: the update centred over the tokens, then scaled and shifted by
  coordinate MLPs) to every hidden layer; the authors' Darcy LayerNorm over the
  :math:`2N \times d` slab has one parameter per node and is not offered. Permutation invariance
  over pairs is not built in.
- Training. The prediction is bilinear in the kernel layer's query and key maps, through the
  Gram matrices of the loadings, whose eigenvalues spread over many decades; first-order
  training of those maps is extremely slow. :func:`geoattn.nao.fit_kernel_layer` solves them
  by alternating least squares instead (a training aid; the model's formula is unchanged).
- Names. In the library's convention the u-mesh (the loadings :math:`g[u_j]`, the input ``x``)
  is the source mesh and the f-mesh (the responses :math:`f_j`, ``x_query``) is the query mesh,
  where the model answers.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from ..errors import MeshMismatchError
from ..models.base import check_call, check_inputs, mesh_of
from ..nn.functional import dense_batch, num_graphs
from .layer import NonlocalAttention, join_tokens, split_tokens
from .norm import TokenNorm

__all__ = ["NAO", "DiscreteNAO", "KernelNetwork", "TokenMesh"]

_PAIR_CHUNK = 1 << 18  # (x, z) pairs per kernel-network evaluation chunk


class TokenMesh(NamedTuple):
    """The nodes and weights of one token mesh, padded: ``pos [G, N, dim]``, ``weight [G, N]``
    (0 on padding), with ``G = 1`` for one mesh shared by a batch of systems or ``G = B`` for one
    mesh per system."""

    pos: torch.Tensor
    weight: torch.Tensor

    @classmethod
    def of(cls, pos: torch.Tensor, weight: torch.Tensor) -> TokenMesh:
        """The mesh of one sample, ``pos [N, dim]`` and ``weight [N]`` (e.g. a
        :class:`~geoattn.mesh.MeshData`), shared by every system: ``G = 1``."""
        return cls(pos[None], weight[None])


class KernelNetwork(nn.Module):
    r"""The coordinate MLP :math:`W^P(x, z)`: ``Linear(2 dim, h1) - LeakyReLU - Linear(h1, h2) -
    LeakyReLU - Linear(h2, 1)`` on :math:`(x, z) / s`.

    Shapes:
        - **input:** ``pos_x [G, Nx, dim]``, ``pos_z [G, Nz, dim]``.
        - **output:** ``[G, Nx, Nz]``.
    """

    def __init__(self, dim: int, hidden: tuple[int, int] = (32, 64), coord_scale: float = 1.0):
        super().__init__()
        self.coord_scale = coord_scale
        self.first_x = nn.Linear(dim, hidden[0])
        self.first_z = nn.Linear(dim, hidden[0], bias=False)
        self.rest = nn.Sequential(nn.LeakyReLU(), nn.Linear(hidden[0], hidden[1]), nn.LeakyReLU(),
                                  nn.Linear(hidden[1], 1))

    @torch.no_grad()
    def zero_(self) -> KernelNetwork:
        """Make the network the zero function (its last layer zero); returns ``self``."""
        nn.init.zeros_(self.rest[-1].weight)
        nn.init.zeros_(self.rest[-1].bias)
        return self

    def forward(self, pos_x: torch.Tensor, pos_z: torch.Tensor) -> torch.Tensor:
        # the first layer is linear, so Linear([x, z]) = Ax + Bz + b is evaluated per side
        hx = self.first_x(pos_x / self.coord_scale)  # (G, Nx, h1)
        hz = self.first_z(pos_z / self.coord_scale)  # (G, Nz, h1)
        rows = max(1, _PAIR_CHUNK // max(1, hz.shape[1]))
        out = [self.rest(hx[:, i:i + rows, None, :] + hz[:, None, :, :]).squeeze(-1)
               for i in range(0, hx.shape[1], rows)]  # each (G, rows, Nz)
        return torch.cat(out, dim=1)  # (G, Nx, Nz)


class NAO(nn.Module):
    r"""The Nonlocal Attention Operator: a kernel map from :math:`d` data pairs to a kernel.

    From the tokens of one system, the loadings :math:`g[u_j]` on the u-mesh and the responses
    :math:`f_j` on the f-mesh, ``layers - 1`` residual :class:`~geoattn.nao.NonlocalAttention`
    layers give :math:`(U, F) = (g^{(L-1)}, f^{(L-1)})` and the kernel layer (eqs. (7), (15))

    .. math::
        K(x, y) = \int_{\Omega_u} W^{P,u}(x, z)\, \langle q_U(z), k_U(y) \rangle\, dz
                + \int_{\Omega_f} W^{P,f}(x, z)\, \langle q_F(z), k_U(y) \rangle\, dz,

    with :math:`q = (X W^Q_L + b^Q_L)/\sqrt{d_k}`, :math:`k = X W^K_L + b^K_L`. The prediction is
    the nonlocal operator with that kernel applied to the raw loadings,

    .. math::
        \tilde f_j(x_i) = \int_{\Omega_u} K(x_i, y)\, g[u_j](y)\,dy
                        \approx \sum_k w_k K(x_i, y_k)\, g[u_j](y_k).

    Discretely :math:`K(x_i, y_k) = \langle P(x_i), k_U(y_k) \rangle` with
    :math:`P(x_i) = \sum_l w_l W^{P,u}(x_i, z_l) q_U(z_l) + \sum_l w^f_l W^{P,f}(x_i, z_l) q_F(z_l)`,
    so :math:`K` has rank :math:`\le d_k` and the prediction costs :math:`O(N N_f)` kernel-network
    evaluations plus :math:`O(N d\, d_k)`; the dense kernel is formed only by :meth:`kernel`.
    Uniform weights :math:`\Delta x^D` give the paper's Riemann sums. See the module docstring
    for the decisions taken where the paper is ambiguous.

    NAO is not a field-to-field model of the Darcy datasets (it learns in context from pairs), so
    it is not in :func:`~geoattn.models.build_model`'s registry nor offered by ``geoattn train``;
    fit it with :func:`~geoattn.nao.fit_kernel_layer` or :func:`~geoattn.nao.fit_adam`.

    Args:
        channels (int): number of data pairs :math:`d` per system (fixed by :math:`W^Q, W^K`).
        dim (int, optional): spatial dimension of the meshes. (default: ``2``)
        head_channels (int, optional): attention rank :math:`d_k`. (default: ``10``)
        layers (int, optional): :math:`L`, the number of :math:`(W^Q, W^K)` pairs. (default: ``2``)
        hidden (tuple, optional): kernel-network widths. (default: ``(32, 64)``)
        bias (bool, optional): biases in the query/key maps. (default: ``True``)
        coord_scale (float, optional): length dividing coordinates before the kernel network.
            (default: ``1.0``)
        token_norm (bool, optional): normalise every hidden layer's update with a
            :class:`~geoattn.nao.TokenNorm`, as the authors' radial-kernel code. (default: ``False``)

    Shapes:
        - **input:** the loadings ``x = g[u] [N, d]`` on the u-mesh ``pos [N, dim]``,
          ``weight [N]``, ``batch [N]`` (optional); the responses ``x_query = f [Nq, d]`` on the
          f-mesh ``pos_query [Nq, dim]``, ``weight_query [Nq]``, ``batch_query [Nq]`` (keywords;
          default mesh: the u-mesh, then ``x_query`` is ``[N, d]``).
        - **output:** the prediction ``[Nq, d]``; :meth:`kernel` gives ``[B, Nq_max, N_max]``.
        - The dense methods (:meth:`forward_dense`, :meth:`kernel_dense`, used for training
          on many systems of one mesh) take padded ``u [B, N, d]``, ``f [B, Nq, d]`` and
          :class:`TokenMesh` es.
    """

    def __init__(self, channels: int, dim: int = 2, head_channels: int = 10, layers: int = 2,
                 hidden: tuple[int, int] = (32, 64), bias: bool = True, coord_scale: float = 1.0,
                 token_norm: bool = False):
        super().__init__()
        if layers < 1:
            raise ValueError(f"layers must be >= 1 (the kernel layer), got {layers}")
        self.hparams = dict(channels=channels, dim=dim, head_channels=head_channels, layers=layers,
                            hidden=hidden, bias=bias, coord_scale=coord_scale, token_norm=token_norm)
        self.in_channels = self.out_channels = self.channels = channels
        self.dim, self.head_channels, self.layers = dim, head_channels, layers
        self.blocks = nn.ModuleList(NonlocalAttention(channels, head_channels, bias)
                                    for _ in range(layers - 1))
        self.kernel_attention = NonlocalAttention(channels, head_channels, bias)
        self._build_mixers(dim, tuple(hidden), coord_scale)
        # built last: the other parameters start as in a model without them (same seed)
        self.norms = (nn.ModuleList(TokenNorm(dim, tuple(hidden), coord_scale) for _ in range(layers - 1))
                      if token_norm else None)

    def _build_mixers(self, dim, hidden, coord_scale) -> None:
        self.mixer_u = KernelNetwork(dim, hidden, coord_scale)
        self.mixer_f = KernelNetwork(dim, hidden, coord_scale)

    def mixers(self, pos: torch.Tensor, pos_query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:math:`W^{P,u}(x_i, z_k)` ``[G, Nq, N]`` and :math:`W^{P,f}(x_i, z_l)` ``[G, Nq, Nq]``."""
        return self.mixer_u(pos_query, pos), self.mixer_f(pos_query, pos_query)

    def factors_dense(self, u: torch.Tensor, f: torch.Tensor, mesh: TokenMesh,
                      mesh_query: TokenMesh | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Low-rank factors of the kernel, :math:`K = P k_U^\top`, on padded tensors.

        Args:
            u: loadings ``[B, N, d]``; f: responses ``[B, Nq, d]``.
            mesh: the u-mesh; mesh_query: the f-mesh (default: the u-mesh). With ``G = 1`` (one
                mesh shared by the batch) the kernel network is evaluated once.

        Returns:
            ``P [B, Nq, dk]`` and ``k_U [B, N, dk]``.
        """
        mesh_query = mesh if mesh_query is None else mesh_query
        U, F = self.hidden_tokens(u, f, mesh, mesh_query)
        qu, _ = self.kernel_attention.project(U)  # (B, N, dk)
        qf, _ = self.kernel_attention.project(F)  # (B, Nq, dk)
        wpu, wpf = self.mixers(mesh.pos, mesh_query.pos)  # (G, Nq, N), (G, Nq, Nq)
        P = (wpu @ (mesh.weight.to(u.dtype)[..., None] * qu)
             + wpf @ (mesh_query.weight.to(u.dtype)[..., None] * qf))  # (B, Nq, dk)
        return P, self.kernel_attention.key(U)  # (B, Nq, dk), (B, N, dk)

    def hidden_tokens(self, u: torch.Tensor, f: torch.Tensor, mesh: TokenMesh,
                      mesh_query: TokenMesh) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer-:math:`(L-1)` tokens ``(U [B, N, d], F [B, Nq, d])`` that enter the kernel
        layer, on padded tensors (the u- and f-meshes as :class:`TokenMesh` es)."""
        x, w = join_tokens(u, f, mesh.weight, mesh_query.weight)  # (B, N+Nq, d), (B, N+Nq)
        for i, block in enumerate(self.blocks):
            if self.norms is None:
                x = block.forward_dense(x, w)
            else:
                x = x + self.norms[i](block.update_dense(x, w), w, mesh.pos)
        return split_tokens(x, u.shape[1])

    def forward_dense(self, u: torch.Tensor, f: torch.Tensor, mesh: TokenMesh,
                      mesh_query: TokenMesh | None = None) -> torch.Tensor:
        """Prediction ``[B, Nq, d]`` on padded tensors (see :meth:`factors_dense`)."""
        P, ku = self.factors_dense(u, f, mesh, mesh_query)
        kg = torch.einsum("bnk,bn,bnd->bkd", ku, mesh.weight.expand(u.shape[0], -1).to(u.dtype), u)
        return P @ kg  # (B, Nq, d) = sum_k w_k K(x_i, y_k) g(y_k)

    def kernel_dense(self, u: torch.Tensor, f: torch.Tensor, mesh: TokenMesh,
                     mesh_query: TokenMesh | None = None) -> torch.Tensor:
        """The kernel :math:`K(x_i, y_k)` ``[B, Nq, N]`` on padded tensors."""
        P, ku = self.factors_dense(u, f, mesh, mesh_query)
        return P @ ku.transpose(1, 2)

    def check_inputs(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor | None = None) -> None:
        """Refuse inputs of another dimension, number of pairs or dtype than the model's, with a
        typed error (:func:`~geoattn.models.base.check_inputs`)."""
        check_inputs(self, x, pos, weight)

    def check_call(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                   batch: torch.Tensor | None = None) -> None:
        """The checks of :func:`~geoattn.models.base.check_call` on one mesh's tensors."""
        check_call(self, x, mesh_of(x, pos, weight, batch))

    def _dense(self, x, pos, weight, batch, x_query, pos_query, weight_query, batch_query):
        self.check_call(x, pos, weight, batch)
        if pos_query is None:
            if weight_query is not None or batch_query is not None:
                raise ValueError("weight_query/batch_query without pos_query: give the f-mesh nodes "
                                 "too, or leave all three out to use the u-mesh")
            pos_query, weight_query, batch_query = pos, weight, batch
        elif weight_query is None:
            raise ValueError("an f-mesh (pos_query) needs its quadrature weights weight_query")
        if pos_query is pos:
            self.check_inputs(x_query, pos_query)
        else:
            self.check_call(x_query, pos_query, weight_query, batch_query)
        B = num_graphs(batch, batch_query)
        du = dense_batch(x, pos, weight, batch, batch_size=B)
        df = dense_batch(x_query, pos_query, weight_query, batch_query, batch_size=B)
        return du, df

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, x_query: torch.Tensor,
                pos_query: torch.Tensor | None = None, weight_query: torch.Tensor | None = None,
                batch_query: torch.Tensor | None = None) -> torch.Tensor:
        du, df = self._dense(x, pos, weight, batch, x_query, pos_query, weight_query, batch_query)
        out = self.forward_dense(du.x, df.x, TokenMesh(du.pos, du.weight),
                                 TokenMesh(df.pos, df.weight))
        return out[df.mask]

    def kernel(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
               batch: torch.Tensor | None = None, *, x_query: torch.Tensor,
               pos_query: torch.Tensor | None = None, weight_query: torch.Tensor | None = None,
               batch_query: torch.Tensor | None = None) -> torch.Tensor:
        """The learned kernel ``[B, Nq_max, N_max]`` of each system (zero on padding): rows are
        the f-mesh points :math:`x_i`, columns the u-mesh points :math:`y_k`. Arguments as
        :meth:`forward`."""
        du, df = self._dense(x, pos, weight, batch, x_query, pos_query, weight_query, batch_query)
        K = self.kernel_dense(du.x, df.x, TokenMesh(du.pos, du.weight), TokenMesh(df.pos, df.weight))
        return K * (df.mask[:, :, None] & du.mask[:, None, :]).to(K.dtype)


class DiscreteNAO(NAO):
    r"""The Discrete-NAO baseline: :math:`W^{P,u}, W^{P,f}` are free node-by-node matrices.

    Same attention layers and quadrature as :class:`NAO`, but :math:`W^{P,u}(x_i, z_k)` and
    :math:`W^{P,f}(x_i, z_l)` are free parameters ``[Nq, N]`` and ``[Nq, Nq]`` (on a fixed mesh
    this is a reparametrisation of the paper's free :math:`N \times N` mixer, whose columns absorb
    the weights). The model therefore exists only on the mesh it is bound to with
    :meth:`bind_mesh`; any other mesh raises :class:`~geoattn.errors.MeshMismatchError`.

    Args:
        channels (int): number of data pairs :math:`d`.
        num_nodes (int): nodes :math:`N` of the u-mesh.
        num_query_nodes (int, optional): nodes of the f-mesh (default: ``num_nodes``).
        dim, head_channels, layers, bias: as in :class:`NAO`.
    """

    def __init__(self, channels: int, num_nodes: int, num_query_nodes: int | None = None,
                 dim: int = 2, head_channels: int = 10, layers: int = 2, bias: bool = True):
        self.num_nodes = num_nodes
        self.num_query_nodes = num_nodes if num_query_nodes is None else num_query_nodes
        super().__init__(channels, dim=dim, head_channels=head_channels, layers=layers, bias=bias)
        self.hparams = dict(channels=channels, num_nodes=num_nodes, num_query_nodes=num_query_nodes, dim=dim,
                            head_channels=head_channels, layers=layers, bias=bias)

    def _build_mixers(self, dim, hidden, coord_scale) -> None:
        n, nq = self.num_nodes, self.num_query_nodes
        self.mixer_u = nn.Parameter(torch.randn(nq, n) / n)
        self.mixer_f = nn.Parameter(torch.randn(nq, nq) / nq)
        self.register_buffer("mesh_pos", torch.full((n, dim), float("nan")))
        self.register_buffer("mesh_pos_query", torch.full((nq, dim), float("nan")))

    def bind_mesh(self, pos: torch.Tensor, pos_query: torch.Tensor | None = None) -> DiscreteNAO:
        """Fix the u-mesh (and f-mesh) nodes this model is defined on; returns ``self``."""
        pos_query = pos if pos_query is None else pos_query
        for name, p, buf in (("pos", pos, self.mesh_pos), ("pos_query", pos_query, self.mesh_pos_query)):
            if p.shape != buf.shape:
                raise MeshMismatchError(f"DiscreteNAO was built for {name} of shape {tuple(buf.shape)}, "
                                        f"got {tuple(p.shape)}")
            buf.copy_(p)
        return self

    def mixers(self, pos, pos_query):
        for name, p, buf in (("u-mesh", pos, self.mesh_pos), ("f-mesh", pos_query, self.mesh_pos_query)):
            if bool(torch.isnan(buf).any()):
                raise MeshMismatchError("DiscreteNAO has no mesh yet; call bind_mesh(pos, pos_query) "
                                        "with the training mesh first")
            if p.shape[1:] != buf.shape or not torch.allclose(p, buf.to(p.dtype).expand_as(p)):
                raise MeshMismatchError(
                    f"DiscreteNAO is defined on its training {name} only ({buf.shape[0]} nodes) but "
                    f"got {p.shape[1]} nodes at other positions; use NAO (continuous kernel) to "
                    "evaluate on another mesh")
        return self.mixer_u[None], self.mixer_f[None]
