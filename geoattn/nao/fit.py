r"""Fitting NAO: the kernel layer by alternating least squares (with a kernel-consistency term),
and the whole model by Adam.

The prediction of :class:`~geoattn.nao.NAO` for system :math:`s` is

.. math::
    \tilde f_s = C_s \tilde W^Q \,(\tilde W^K)^\top M_s, \qquad
    C_s = \big(W^{P,u} \mathrm{diag}(w)\, \tilde U_s + W^{P,f} \mathrm{diag}(w_f)\, \tilde F_s\big)
          / \sqrt{d_k}, \quad M_s = \tilde U_s^\top \mathrm{diag}(w)\, g_s,

where :math:`\tilde U_s = [U_s, 1]`, :math:`\tilde F_s = [F_s, 1]` are the layer-:math:`(L-1)`
tokens (with a column of ones when the maps have biases) and :math:`\tilde W = [W; b]`. It is
linear in the query map :math:`\tilde W^Q` for a fixed key map and vice versa, and so is the
kernel :math:`K_s = C_s \tilde W^Q (\tilde W^K)^\top \tilde U_s^\top`. Each sweep of
:func:`fit_kernel_layer` minimises exactly, one map at a time, the objective

.. math::
    J = \sum_s \frac{\|\tilde f_s - f_s\|^2_{w_f}}{\|f_s\|^2_{w_f}}
      + \mu \sum_s \frac{\|K_s - T_{\sigma(s)}\|^2_{w_f \otimes w}}{\|T_{\sigma(s)}\|^2_{w_f \otimes w}}
      + \lambda \big(\|\tilde W^Q\|_F^2 + \|\tilde W^K\|_F^2\big),

then sets each system's target :math:`T_\sigma` to the mean kernel of its samples
(:math:`\sigma(s)` is the system sample :math:`s` was drawn from).

Why the second term. One sample's :math:`d` pairs rarely determine a kernel: the prediction
sees the kernel only through the Gram matrix of the loadings, so many kernels fit the pairs
equally well, and a model trained on the operator error alone fits the quadrature error of its
Riemann sums with kernels far from the truth. The pairs of *all* samples of one system do
determine it, and the kernel map is meant to return the system's kernel whichever pairs it is
given (the paper's argument for permutation augmentation). The term asks exactly that; it uses
only which system each sample came from, never a true kernel. With :math:`\mu = 0` (or no
``systems``) the objective is the paper's loss (16) with relative errors and a ridge.

The attention layers before the kernel layer and the kernel networks :math:`W^P` stay as they
are (the least-squares sweeps do not need them trained; fine-tune them by gradient descent
afterwards if wanted, with :func:`fit_adam`).

:func:`fit_adam` is plain first-order training of all parameters on the mean operator error
:math:`E_f` (the paper's recipe: Adam, learning rate times 0.9 every 100 epochs).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..atomic import atomic_path
from ..optional import progress as progress_bar
from .metrics import operator_error
from .model import TokenMesh

__all__ = ["KernelLayerFit", "fit_adam", "fit_kernel_layer", "kernel_layer_objective",
           "normal_equations"]

log = logging.getLogger(__name__)


@dataclass
class KernelLayerFit:
    """Result of :func:`fit_kernel_layer`: the objective :math:`J` after each sweep, and the
    system kernels ``targets [num_systems, Nf, N]`` the last sweep was fitted to (``None``
    without the consistency term or after one sweep)."""

    history: list[float]
    targets: torch.Tensor | None


def _with_ones(x: torch.Tensor, bias: bool) -> torch.Tensor:
    return torch.cat([x, x.new_ones(*x.shape[:2], 1)], dim=2) if bias else x


def normal_equations(L: torch.Tensor, R: torch.Tensor, Y: torch.Tensor, w: torch.Tensor,
                     c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Normal matrix ``[p q, p q]`` and right-hand side ``[p q]`` of
    :math:`\sum_s c_s \|L_s X R_s - Y_s\|^2_{w_s}` over ``X [p, q]`` (rows weighted by ``w``).

    Shapes: ``L [B, n, p]``, ``R [B, q, m]``, ``Y [B, n, m]``, ``w [B, n]``, ``c [B]``.
    """
    B, _, p = L.shape
    q = R.shape[1]
    Lw = L * w[..., None]
    A = (c[:, None, None] * (L.transpose(1, 2) @ Lw)).reshape(B, p * p)  # (B, p p)
    G = (R @ R.transpose(1, 2)).reshape(B, q * q)  # (B, q q)
    H = (A.T @ G).reshape(p, p, q, q).permute(0, 2, 1, 3).reshape(p * q, p * q)
    rhs = torch.einsum("b,bpq->pq", c, (Lw.transpose(1, 2) @ Y) @ R.transpose(1, 2))
    return H, rhs.reshape(-1)


def _solve(terms, ridge: float, shape) -> torch.Tensor:
    """Minimiser ``[p, q]`` of the sum of the least-squares ``terms`` (an iterable, consumed one
    term at a time) plus ``ridge ||X||^2``."""
    H = rhs = 0
    for term in terms:
        h, r = normal_equations(*term)
        H, rhs = H + h, rhs + r
    H.diagonal().add_(ridge)
    L, info = torch.linalg.cholesky_ex(H)  # H is symmetric positive (semi)definite
    if int(info) == 0:
        return torch.cholesky_solve(rhs[:, None], L)[:, 0].reshape(shape)
    return torch.linalg.lstsq(H, rhs[:, None]).solution[:, 0].reshape(shape)  # singular H


def _rows(mesh: TokenMesh, idx: torch.Tensor) -> TokenMesh:
    """The meshes of the samples ``idx``: a mesh shared by all samples (``G = 1``) as it is."""
    return mesh if mesh.weight.shape[0] == 1 else TokenMesh(mesh.pos[idx], mesh.weight[idx])


def _system_means(K: torch.Tensor, systems: torch.Tensor) -> torch.Tensor:
    """Mean of ``K [B, ...]`` over the samples of each system: ``[num_systems, ...]``."""
    n = int(systems.max()) + 1
    total = K.new_zeros(n, *K.shape[1:]).index_add_(0, systems, K)
    count = torch.bincount(systems, minlength=n).to(K.dtype)
    return total / count.view(-1, *([1] * (K.dim() - 1)))


def kernel_layer_objective(model, u: torch.Tensor, f: torch.Tensor, mesh: TokenMesh,
                           mesh_query: TokenMesh | None = None, *,
                           systems: torch.Tensor | None = None, targets: torch.Tensor | None = None,
                           consistency: float = 0.0, ridge: float = 0.0) -> torch.Tensor:
    r"""The objective :math:`J` of :func:`fit_kernel_layer` (differentiable; arguments as there,
    ``targets [num_systems, Nq, N]`` the system kernels :math:`T`, by default the current
    per-system mean kernels, held fixed)."""
    mesh_query = mesh if mesh_query is None else mesh_query
    B = u.shape[0]
    wu, wf = mesh.weight.expand(B, -1).to(u.dtype), mesh_query.weight.expand(B, -1).to(u.dtype)
    pred = model.forward_dense(u, f, mesh, mesh_query)
    c = 1.0 / torch.einsum("bi,bij->b", wf, f * f)
    J = torch.einsum("b,bi,bij->", c, wf, (pred - f) ** 2)
    if systems is not None and consistency > 0:
        K = model.kernel_dense(u, f, mesh, mesh_query)
        T = (_system_means(K, systems) if targets is None else targets).detach()[systems]
        cK = 1.0 / torch.einsum("bi,bin,bn->b", wf, T * T, wu)
        J = J + consistency * torch.einsum("b,bi,bin,bn->", cK, wf, (K - T) ** 2, wu)
    ka = model.kernel_attention
    return J + ridge * sum(p.pow(2).sum() for p in (*ka.query.parameters(), *ka.key.parameters()))


@torch.no_grad()
def fit_kernel_layer(model, u: torch.Tensor, f: torch.Tensor, mesh: TokenMesh,
                     mesh_query: TokenMesh | None = None, *, systems: torch.Tensor | None = None,
                     consistency: float = 1.0, ridge: float = 1e-6, sweeps: int = 20,
                     chunk: int = 256, progress: bool = False) -> KernelLayerFit:
    r"""Fit the query and key maps of ``model.kernel_attention`` by alternating least squares.

    Args:
        model (NAO): the model; only its kernel layer's query and key maps change.
        u, f: padded loadings ``[B, N, d]`` and responses ``[B, Nq, d]`` of ``B`` samples.
        mesh: the u-mesh (:class:`~geoattn.nao.TokenMesh`); mesh_query: the f-mesh (default:
            the u-mesh), each with ``G = 1`` (one mesh for all samples) or ``G = B``.
        systems (LongTensor, optional): ``[B]``, the system each sample was drawn from
            (``0 .. S-1``); enables the kernel-consistency term. Needs ``G = 1``.
        consistency (float, optional): :math:`\mu`. (default: ``1.0``)
        ridge (float, optional): :math:`\lambda`. (default: ``1e-6``)
        sweeps (int, optional): query-then-key sweeps. (default: ``20``)
        chunk (int, optional): samples per block when the normal equations and kernels are
            accumulated; bounds the memory of the ``[chunk, Nq, N]`` kernels. (default: ``256``)
        progress (bool, optional): show a progress bar. (default: ``False``)

    Returns:
        :class:`KernelLayerFit`: the objective after each sweep and the last sweep's targets.
    """
    mesh_query = mesh if mesh_query is None else mesh_query
    weight, weight_query = mesh.weight, mesh_query.weight
    B, N, d = u.shape
    if f.shape[0] != B or f.shape[2] != d:
        raise ValueError(f"u {tuple(u.shape)} and f {tuple(f.shape)} must have the same samples "
                         "and pairs")
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of samples, got {chunk}")
    use_targets = systems is not None and consistency > 0
    if use_targets and (weight.shape[0] != 1 or weight_query.shape[0] != 1):
        raise ValueError("the kernel-consistency term needs one mesh shared by all samples "
                         "(pos and weight with leading dimension 1)")
    if use_targets and systems.shape != (B,):
        raise ValueError(f"systems must have shape ({B},), got {tuple(systems.shape)}")
    ka = model.kernel_attention
    bias, dk = ka.query.bias is not None, ka.head_channels
    dt = torch.float64  # the normal equations are badly conditioned: solve in double precision
    wu = weight.expand(B, -1).to(dt)
    wf = weight_query.expand(B, -1).to(dt)
    g, fd = u.to(dt), f.to(dt)
    c = 1.0 / torch.einsum("bi,bij->b", wf, fd * fd).clamp_min(torch.finfo(dt).tiny)
    U, F = model.hidden_tokens(u, f, mesh, mesh_query)
    Ut, Ft = _with_ones(U.to(dt), bias), _with_ones(F.to(dt), bias)  # (B, N, m), (B, Nf, m)
    wpu, wpf = (m.to(dt) for m in model.mixers(mesh.pos, mesh_query.pos))  # (G, Nq, N), (G, Nq, Nq)
    C = (wpu @ (wu[..., None] * Ut) + wpf @ (wf[..., None] * Ft)) / math.sqrt(dk)  # (B, Nf, m)
    M = torch.einsum("bnm,bn,bnj->bmj", Ut, wu, g)  # (B, m, d)
    sw = wu.sqrt()
    chunks = [slice(i, i + chunk) for i in range(0, B, chunk)]
    if use_targets:
        count = torch.bincount(systems, minlength=int(systems.max()) + 1).to(dt)
    targets, used, history = None, None, []
    for _ in progress_bar(range(sweeps), enabled=progress, desc="kernel layer", unit="sweep"):
        used, cK = targets, None
        if targets is not None:  # weight of each sample's consistency term, by system
            cK = (consistency / torch.einsum("i,sin,n->s", wf[0], targets**2, wu[0]).clamp_min(
                torch.finfo(dt).tiny))[systems]

        def consistency_term(sl, L, R):
            """The consistency term of the samples ``sl``: ``K = L X R``, target ``T``."""
            return (L, R * sw[sl, None, :], targets[systems[sl]] * sw[sl, None, :], wf[sl], cK[sl])

        # query map, X = W~Q [m, dk]: f~ = C X (k_U^T diag(w) g), K = C X k_U^T
        Wk_aug = ka.augmented(ka.key).to(dt)

        def query_terms():
            for sl in chunks:
                kU = Ut[sl] @ Wk_aug  # (b, N, dk)
                R = torch.einsum("bnk,bn,bnj->bkj", kU, wu[sl], g[sl])  # (b, dk, d)
                yield C[sl], R, fd[sl], wf[sl], c[sl]
                if cK is not None:
                    yield consistency_term(sl, C[sl], kU.transpose(1, 2))

        Wq = _solve(query_terms(), ridge, (C.shape[2], dk))
        ka.load_augmented(ka.query, Wq)

        # key map, X = W~K^T [dk, m]: f~ = P X M, K = P X U~^T, with P = C W~Q
        def key_terms():
            for sl in chunks:
                P = C[sl] @ Wq  # (b, Nf, dk)
                yield P, M[sl], fd[sl], wf[sl], c[sl]
                if cK is not None:
                    yield consistency_term(sl, P, Ut[sl].transpose(1, 2))

        Wk = _solve(key_terms(), ridge, (dk, Ut.shape[2]))
        ka.load_augmented(ka.key, Wk.T)
        # objective, and the next targets: each system's mean kernel
        value = ridge * (Wq.pow(2).sum() + Wk.pow(2).sum())
        sums = None
        for sl in chunks:
            P = C[sl] @ Wq
            pred = P @ (Wk @ M[sl])  # (b, Nf, d)
            value += torch.einsum("b,bi,bij->", c[sl], wf[sl], (pred - fd[sl]) ** 2)
            if use_targets:
                K = P @ (Wk @ Ut[sl].transpose(1, 2))  # (b, Nf, N)
                if targets is not None:
                    value += torch.einsum("b,bi,bin,bn->", cK[sl], wf[sl],
                                          (K - targets[systems[sl]]) ** 2, wu[sl])
                sums = (K.new_zeros(len(count), *K.shape[1:]) if sums is None else sums)
                sums.index_add_(0, systems[sl], K)
        if use_targets:
            targets = sums / count[:, None, None]
        history.append(float(value))
    return KernelLayerFit(history, used)


def fit_adam(model, u: torch.Tensor, f: torch.Tensor, mesh: TokenMesh,
             mesh_query: TokenMesh | None = None, *, epochs: int = 100, lr: float = 3e-3,
             batch_size: int = 20, weight_decay: float = 1e-5, clip: float | None = 1.0,
             step_size: int = 100, gamma: float = 0.9, seconds: float | None = None,
             seed: int | None = None, progress: bool = False, checkpoint: str | Path | None = None,
             checkpoint_every: int = 100) -> list[float]:
    r"""Train all parameters of ``model`` by Adam on the mean operator error :math:`E_f`.

    The loss of a mini-batch is the mean over its systems of
    :func:`~geoattn.nao.operator_error` of the prediction; the learning rate is multiplied by
    ``gamma`` every ``step_size`` epochs (the NAO authors' schedule).

    Args:
        model (NAO): the model.
        u, f: padded loadings ``[B, N, d]`` and responses ``[B, Nq, d]`` of the training systems.
        mesh, mesh_query: as :func:`fit_kernel_layer`.
        epochs (int, optional): passes over the systems. (default: ``100``)
        lr (float, optional): initial learning rate. (default: ``3e-3``)
        batch_size (int, optional): systems per step. (default: ``20``)
        weight_decay (float, optional): Adam's L2 penalty. (default: ``1e-5``)
        clip (float, optional): maximum gradient norm, ``None`` for none. (default: ``1.0``)
        step_size, gamma: the step schedule. (default: ``100``, ``0.9``)
        seconds (float, optional): stop after the epoch that passes this wall time.
        seed (int, optional): seed of the shuffles (default: ``None``, torch's global generator).
        progress (bool, optional): show a progress bar. (default: ``False``)
        checkpoint (str or Path, optional): a file to keep the run in (model, optimiser, schedule,
            shuffle generator, history and training seconds), written atomically every
            ``checkpoint_every`` epochs and after the last; when it exists, the run continues
            from it, to the weights of an uninterrupted run (needs ``seed``), also on another
            device than the one that wrote it. (default: ``None``)
        checkpoint_every (int, optional): epochs between checkpoints. (default: ``100``)

    Returns:
        the mean training :math:`E_f` of each epoch run (with ``checkpoint``: of every epoch, over
        all sessions; the checkpoint's ``"seconds"`` is the training time over all of them).
    """
    if u.shape[0] != f.shape[0] or u.shape[2] != f.shape[2]:
        raise ValueError(f"u {tuple(u.shape)} and f {tuple(f.shape)} must have the same systems "
                         "and pairs")
    if epochs < 0 or batch_size < 1:
        raise ValueError(f"need epochs >= 0 and batch_size >= 1, got {epochs} and {batch_size}")
    if checkpoint is not None and (seed is None or checkpoint_every < 1):
        raise ValueError("a checkpointed run needs a seed (to resume its shuffles) and checkpoint_every >= 1")
    mesh_query = mesh if mesh_query is None else mesh_query
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=gamma)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    start, history, before = time.perf_counter(), [], 0.0
    if checkpoint is not None and Path(checkpoint).exists():
        state = torch.load(checkpoint, weights_only=True, map_location="cpu")  # a run may move devices
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        generator.set_state(state["generator"])
        history, before = list(state["history"]), float(state["seconds"])
        log.info("fit_adam: resuming %s after epoch %d", checkpoint, len(history) - 1)
    for epoch in progress_bar(range(len(history), epochs), enabled=progress, desc="NAO", unit="epoch"):
        order = torch.randperm(len(u), generator=generator)
        total = 0.0
        for i in range(0, len(u), batch_size):
            idx = order[i:i + batch_size]
            m, mq = _rows(mesh, idx), _rows(mesh_query, idx)
            pred = model.forward_dense(u[idx], f[idx], m, mq)
            loss = operator_error(pred, f[idx], mq.weight).mean()  # quadrature-ok: over systems
            opt.zero_grad()
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            total += loss.item() * len(idx)
        schedule.step()
        history.append(total / len(u))
        log.debug("epoch %d: train E_f %.4f", epoch, history[-1])
        if checkpoint is not None and (epoch + 1 == epochs or (epoch + 1) % checkpoint_every == 0):
            with atomic_path(checkpoint) as tmp:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "schedule": schedule.state_dict(), "generator": generator.get_state(),
                            "history": history, "seconds": before + time.perf_counter() - start}, tmp)
        if seconds is not None and time.perf_counter() - start > seconds:
            log.info("fit_adam: time limit reached after epoch %d", epoch)
            break
    return history
