"""Radius and k-nearest-neighbour graphs on point clouds, self and bipartite.

Graphs follow PyG's ``source_to_target`` convention: ``edge_index[0]`` holds source nodes ``j``
and ``edge_index[1]`` target nodes ``i``, so a message-passing layer sums over
:math:`j \\in \\mathcal{N}(i)`. Neighbours are found with :class:`scipy.spatial.cKDTree` on the CPU
(the query is a geometric preprocessing step; the result is moved to the device of ``pos``).
Batches of graphs are handled by lifting every graph to its own slab along an extra coordinate,
far enough apart that no neighbour can cross between graphs.

Every function takes ``backend=`` (see :mod:`geoattn.mesh.neighbor_search`): ``"auto"`` (the
default) keeps scipy for CPU tensors and, for CUDA tensors, searches on the device through
``pyg-lib`` or ``torch-cluster`` when one is installed; the radius graphs are the same exact
sets either way.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial import cKDTree

from .neighbor_search import device_knn, device_radius, resolve_backend


def _lift(pos: torch.Tensor, batch: torch.Tensor | None, gap: float) -> np.ndarray:
    """Coordinates ``[N, d]`` (+ one slab coordinate ``batch * gap`` when batched) as float64 numpy."""
    p = pos.detach().to("cpu", torch.float64).numpy()
    if batch is None:
        return p
    b = batch.detach().to("cpu", torch.float64).numpy()[:, None]
    return np.concatenate([p, b * gap], axis=1)


def _gap(*pos: torch.Tensor, r: float = 0.0) -> float:
    """A slab spacing larger than any distance inside one graph plus ``r``."""
    lo = torch.stack([p.detach().amin(0) for p in pos]).amin(0)
    hi = torch.stack([p.detach().amax(0) for p in pos]).amax(0)
    return float((hi - lo).norm()) * 2.0 + 2.0 * r + 1.0


def _edges(src, dst, device: torch.device) -> torch.Tensor:
    """``[2, E]`` (source, target) on ``device``, sorted by target then source: deterministic."""
    src = torch.as_tensor(src, dtype=torch.int64).to(device)
    dst = torch.as_tensor(dst, dtype=torch.int64).to(device)
    if src.numel() == 0:
        return torch.stack([src, dst])
    num = int(torch.maximum(src.max(), dst.max())) + 1
    order = torch.argsort(dst * num + src)
    return torch.stack([src[order], dst[order]])


def radius_graph(pos: torch.Tensor, r: float, batch: torch.Tensor | None = None,
                 loop: bool = True, backend: str = "auto") -> torch.Tensor:
    """All pairs of nodes of one point cloud at distance :math:`\\le r`.

    .. math::
        \\mathcal{E} = \\{(j, i) : \\|x_i - x_j\\|_2 \\le r\\}

    Args:
        pos: node coordinates ``[N, d]``.
        r: radius (``> 0``).
        batch: graph index of each node ``[N]`` (default ``None``: one graph); no edge joins two
            graphs.
        loop: include the self-loops ``(i, i)`` (default ``True``: the ball contains its centre,
            as the integral :math:`\\int_{B_r(x)}` needs).
        backend: ``"auto"``, ``"scipy"``, ``"pyg-lib"`` or ``"torch-cluster"`` (see the module).

    Returns:
        ``edge_index [2, E]`` (source, target), symmetric, sorted by target then source.
    """
    if r <= 0:
        raise ValueError(f"radius must be positive, got r={r}")
    backend = resolve_backend(backend, pos.device, "radius")
    if backend != "scipy":
        src, dst = device_radius(pos, pos, r, batch, batch, backend)
        if not loop:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        return _edges(src, dst, pos.device)
    p = _lift(pos, batch, _gap(pos, r=r))
    pairs = cKDTree(p).query_pairs(r, output_type="ndarray")  # [E, 2] with i < j
    src = [pairs[:, 0], pairs[:, 1]]
    dst = [pairs[:, 1], pairs[:, 0]]
    if loop:
        idx = np.arange(len(p))
        src.append(idx)
        dst.append(idx)
    return _edges(np.concatenate(src), np.concatenate(dst), pos.device)


def _check_batches(batch: torch.Tensor | None, batch_query: torch.Tensor | None) -> None:
    if (batch is None) != (batch_query is None):
        raise ValueError("give both batch and batch_query, or neither")


def _bipartite(pos: torch.Tensor, pos_query: torch.Tensor, batch: torch.Tensor | None,
               batch_query: torch.Tensor | None, r: float = 0.0):
    """Both node sets lifted apart by graph (see :func:`_lift`)."""
    gap = _gap(pos, pos_query, r=r)
    return _lift(pos, batch, gap), _lift(pos_query, batch_query, gap)


def radius(pos: torch.Tensor, pos_query: torch.Tensor, r: float,
           batch: torch.Tensor | None = None,
           batch_query: torch.Tensor | None = None, backend: str = "auto") -> torch.Tensor:
    """Bipartite radius graph: every source node within distance :math:`r` of each query node.

    Args:
        pos: source coordinates ``[N, d]``.
        pos_query: query coordinates ``[Nq, d]``.
        r: radius (``> 0``).
        batch: graph index of each source node ``[N]`` (default ``None``).
        batch_query: graph index of each query node ``[Nq]`` (required with ``batch``).
        backend: ``"auto"``, ``"scipy"``, ``"pyg-lib"`` or ``"torch-cluster"`` (see the module).

    Returns:
        ``edge_index [2, E]``: row 0 indexes ``pos``, row 1 indexes ``pos_query``.
    """
    if r <= 0:
        raise ValueError(f"radius must be positive, got r={r}")
    _check_batches(batch, batch_query)
    backend = resolve_backend(backend, pos.device, "radius")
    if backend != "scipy":
        return _edges(*device_radius(pos, pos_query, r, batch, batch_query, backend), pos.device)
    ps, pt = _bipartite(pos, pos_query, batch, batch_query, r)
    dist = cKDTree(pt).sparse_distance_matrix(cKDTree(ps), r, output_type="ndarray")
    return _edges(dist["j"], dist["i"], pos.device)


def knn(pos: torch.Tensor, pos_query: torch.Tensor, k: int,
        batch: torch.Tensor | None = None,
        batch_query: torch.Tensor | None = None, backend: str = "auto") -> torch.Tensor:
    """The ``k`` nearest source nodes of every query node (bipartite kNN graph).

    Args:
        pos: source coordinates ``[N, d]``.
        pos_query: query coordinates ``[Nq, d]``.
        k: neighbours per query node (at most the number of source nodes in its graph).
        batch: graph index of each source node ``[N]`` (default ``None``).
        batch_query: graph index of each query node ``[Nq]`` (required with ``batch``).
        backend: ``"auto"``, ``"scipy"``, ``"pyg-lib"`` or ``"torch-cluster"`` (see the module;
            off scipy, ties are broken in the coordinates' dtype).

    Returns:
        ``edge_index [2, Nq * k]``: row 0 indexes ``pos``, row 1 indexes ``pos_query``.
    """
    if k < 1 or k > len(pos):
        raise ValueError(f"k must be in [1, {len(pos)}] (number of source nodes), got k={k}")
    _check_batches(batch, batch_query)
    backend = resolve_backend(backend, pos.device, "knn")
    if backend != "scipy":
        return _edges(*device_knn(pos, pos_query, k, batch, batch_query, backend), pos.device)
    ps, pt = _bipartite(pos, pos_query, batch, batch_query)
    _, src = cKDTree(ps).query(pt, k=k, workers=-1)
    src = np.asarray(src).reshape(len(pt), k)  # [Nq, k]
    if batch is not None:
        bs, bt = batch.cpu().numpy(), batch_query.cpu().numpy()
        if (bs[src] != bt[:, None]).any():
            raise ValueError(f"some graph has fewer than k={k} source nodes")
    dst = np.repeat(np.arange(len(pt)), k)
    return _edges(src.reshape(-1), dst, pos.device)


def knn_graph(pos: torch.Tensor, k: int, batch: torch.Tensor | None = None,
              loop: bool = False, backend: str = "auto") -> torch.Tensor:
    """k-nearest-neighbour graph of one point cloud (each node receives from its ``k`` neighbours).

    Args:
        pos: node coordinates ``[N, d]``.
        k: neighbours per node, not counting the node itself.
        batch: graph index of each node ``[N]`` (default ``None``).
        loop: also include the self-loop ``(i, i)`` (default ``False``).
        backend: as in :func:`knn`.

    Returns:
        ``edge_index [2, E]`` (source, target), sorted by target then source.
    """
    ei = knn(pos, pos, k + 1, batch, batch, backend)  # the nearest neighbour of a (non-duplicate) node is itself
    return ei if loop else ei[:, ei[0] != ei[1]]
