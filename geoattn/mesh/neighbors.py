"""Radius and k-nearest-neighbour graphs on point clouds, self and bipartite.

Graphs follow PyG's ``source_to_target`` convention: ``edge_index[0]`` holds source nodes ``j``
and ``edge_index[1]`` target nodes ``i``, so a message-passing layer sums over
:math:`j \\in \\mathcal{N}(i)`. Neighbours are found with :class:`scipy.spatial.cKDTree` on the CPU
(the query is a geometric preprocessing step; the result is moved to the device of ``pos``).
Batches of graphs are handled by lifting every graph to its own slab along an extra coordinate,
far enough apart that no neighbour can cross between graphs.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial import cKDTree


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


def _edges(src: np.ndarray, dst: np.ndarray, device: torch.device) -> torch.Tensor:
    num = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    order = np.argsort(dst.astype(np.int64) * num + src)  # by target, then source: deterministic
    ei = np.stack([src[order], dst[order]]).astype(np.int64)
    return torch.from_numpy(ei).to(device)


def radius_graph(pos: torch.Tensor, r: float, batch: torch.Tensor | None = None,
                 loop: bool = True) -> torch.Tensor:
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

    Returns:
        ``edge_index [2, E]`` (source, target), symmetric, sorted by target then source.
    """
    if r <= 0:
        raise ValueError(f"radius must be positive, got r={r}")
    p = _lift(pos, batch, _gap(pos, r=r))
    pairs = cKDTree(p).query_pairs(r, output_type="ndarray")  # [E, 2] with i < j
    src = [pairs[:, 0], pairs[:, 1]]
    dst = [pairs[:, 1], pairs[:, 0]]
    if loop:
        idx = np.arange(len(p))
        src.append(idx)
        dst.append(idx)
    return _edges(np.concatenate(src), np.concatenate(dst), pos.device)


def radius(pos_source: torch.Tensor, pos_target: torch.Tensor, r: float,
           batch_source: torch.Tensor | None = None,
           batch_target: torch.Tensor | None = None) -> torch.Tensor:
    """Bipartite radius graph: every source node within distance :math:`r` of each target node.

    Args:
        pos_source: source coordinates ``[N_s, d]``.
        pos_target: target coordinates ``[N_t, d]``.
        r: radius (``> 0``).
        batch_source: graph index of each source node ``[N_s]`` (default ``None``).
        batch_target: graph index of each target node ``[N_t]`` (required with ``batch_source``).

    Returns:
        ``edge_index [2, E]``: row 0 indexes ``pos_source``, row 1 indexes ``pos_target``.
    """
    if r <= 0:
        raise ValueError(f"radius must be positive, got r={r}")
    if (batch_source is None) != (batch_target is None):
        raise ValueError("give both batch_source and batch_target, or neither")
    gap = _gap(pos_source, pos_target, r=r)
    ps, pt = _lift(pos_source, batch_source, gap), _lift(pos_target, batch_target, gap)
    dist = cKDTree(pt).sparse_distance_matrix(cKDTree(ps), r, output_type="ndarray")
    return _edges(dist["j"], dist["i"], pos_source.device)


def knn(pos_source: torch.Tensor, pos_target: torch.Tensor, k: int,
        batch_source: torch.Tensor | None = None,
        batch_target: torch.Tensor | None = None) -> torch.Tensor:
    """The ``k`` nearest source nodes of every target node (bipartite kNN graph).

    Args:
        pos_source: source coordinates ``[N_s, d]``.
        pos_target: target coordinates ``[N_t, d]``.
        k: neighbours per target node (at most the number of source nodes in its graph).
        batch_source: graph index of each source node ``[N_s]`` (default ``None``).
        batch_target: graph index of each target node ``[N_t]`` (required with ``batch_source``).

    Returns:
        ``edge_index [2, N_t * k]``: row 0 indexes ``pos_source``, row 1 indexes ``pos_target``.
    """
    if (batch_source is None) != (batch_target is None):
        raise ValueError("give both batch_source and batch_target, or neither")
    if k < 1 or k > len(pos_source):
        raise ValueError(f"k must be in [1, {len(pos_source)}] (number of source nodes), got k={k}")
    gap = _gap(pos_source, pos_target)
    ps, pt = _lift(pos_source, batch_source, gap), _lift(pos_target, batch_target, gap)
    _, src = cKDTree(ps).query(pt, k=k, workers=-1)
    src = np.asarray(src).reshape(len(pt), k)  # [N_t, k]
    if batch_source is not None:
        bs, bt = batch_source.cpu().numpy(), batch_target.cpu().numpy()
        if (bs[src] != bt[:, None]).any():
            raise ValueError(f"some graph has fewer than k={k} source nodes")
    dst = np.repeat(np.arange(len(pt)), k)
    return _edges(src.reshape(-1), dst, pos_source.device)


def knn_graph(pos: torch.Tensor, k: int, batch: torch.Tensor | None = None,
              loop: bool = False) -> torch.Tensor:
    """k-nearest-neighbour graph of one point cloud (each node receives from its ``k`` neighbours).

    Args:
        pos: node coordinates ``[N, d]``.
        k: neighbours per node, not counting the node itself.
        batch: graph index of each node ``[N]`` (default ``None``).
        loop: also include the self-loop ``(i, i)`` (default ``False``).

    Returns:
        ``edge_index [2, E]`` (source, target), sorted by target then source.
    """
    ei = knn(pos, pos, k + 1, batch, batch)  # the nearest neighbour of a (non-duplicate) node is itself
    return ei if loop else ei[:, ei[0] != ei[1]]
