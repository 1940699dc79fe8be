"""Partitions of a mesh into patches, balanced by quadrature weight and transferable between meshes.

A partition :math:`D = D_1 \\cup \\dots \\cup D_P` is a set of *subdomains*, not of nodes: patched
attention compares functions on the patches, so the same patches must be found on every mesh of a
domain. :func:`partition` cuts one mesh and returns a :class:`Partition` that remembers its
regions; :meth:`Partition.transfer` assigns the nodes of any other mesh of the domain to them.

Two methods:

- ``"metis"``: METIS k-way partitioning (via ``pymetis``) of the mesh graph (nodes joined when
  they share a cell; a kNN graph for bare point clouds) with vertex weights proportional to the
  quadrature weights, and contiguous parts. The region of patch :math:`p` is the union of the
  Voronoi cells of its nodes: another mesh is transferred by nearest node.
- ``"rcb"``: recursive coordinate bisection, dependency free. A set of nodes destined for
  :math:`k` parts is cut by a plane normal to its longest extent at the weighted
  :math:`\\lfloor k/2 \\rfloor / k` quantile, recursively. The regions are boxes and the cut planes
  transfer exactly: a node of a refined mesh lies in the same patch as the coarse node it refines.

Both balance the total weight :math:`\\sum_{i \\in D_p} w_i \\approx |D| / P`, not the node count,
and are deterministic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from ..optional import require
from .neighbors import knn_graph
from .quadrature import integrate

logger = logging.getLogger(__name__)

#: Integer resolution of the METIS vertex weights (total weight of one mesh).
_METIS_TOTAL = 1 << 24
#: Neighbours per node of the graph METIS partitions when a point cloud has no cells.
_CLOUD_NEIGHBORS = 8
#: METIS attempts (seeds x schemes) and the relative imbalance that ends the search early.
_METIS_ATTEMPTS = 16
_METIS_GOOD = 0.01


@dataclass(frozen=True)
class _Cut:
    """One node of the RCB tree: ``x[axis] < value`` goes ``left``; leaves are part indices."""

    axis: int
    value: float
    left: "_Cut | int"
    right: "_Cut | int"


@dataclass
class Partition:
    """Patches of a domain, made on one mesh and transferable to any mesh of the same domain.

    Attributes:
        assignment: patch index of every node of the mesh the partition was made on ``[N]``.
        num_parts: number of patches :math:`P`.
        length: one global patch length :math:`L`: every patch of the source mesh fits in a cube of
            side :math:`L` centred at its weighted centroid (``2 * margin`` times the largest
            sup-norm distance of a node from its patch centroid). Patch layers use it to map
            every patch to the same reference box :math:`[-1/2, 1/2]^d`.
        method: ``"metis"`` or ``"rcb"``.
    """

    assignment: torch.Tensor
    num_parts: int
    length: float
    method: str
    _tree: "_Cut | int | None" = field(default=None, repr=False)
    _source: np.ndarray | None = field(default=None, repr=False)

    def transfer(self, pos: torch.Tensor) -> torch.Tensor:
        """Patch index of every node of another mesh of the same domain.

        Args:
            pos: coordinates ``[M, d]`` of the other mesh.

        Returns:
            ``[M]`` long tensor on ``pos.device``.
        """
        p = pos.detach().to("cpu", torch.float64).numpy()
        if self._tree is not None:
            out = np.empty(len(p), dtype=np.int64)
            _descend(self._tree, p, np.arange(len(p)), out)
        else:
            _, nearest = cKDTree(self._source).query(p)
            out = self.assignment.cpu().numpy()[nearest]
        return torch.from_numpy(out).to(pos.device)

    def state(self) -> dict[str, torch.Tensor]:
        """The partition as integer tensors (floats stored bit-exactly as ``int64``, so that no
        dtype cast of a module's buffers changes them), for :meth:`from_state` and checkpoints.

        Keys: ``meta`` (``[num_parts, method, length]``), ``cuts`` (RCB: one row
        ``[axis, value, left, right]`` per cut, children ``>= 0`` are cuts and ``< 0`` are parts
        ``-1 - child``), ``seeds`` (METIS: the nodes the partition was made on, ``[M, d]``),
        ``seed_patch`` (their patches ``[M]``).
        """
        cuts: list[list[float]] = []

        def flatten(node) -> int:
            if not isinstance(node, _Cut):
                return -1 - int(node)
            row = len(cuts)
            cuts.append([node.axis, node.value, 0, 0])
            cuts[row][2], cuts[row][3] = flatten(node.left), flatten(node.right)
            return row

        if self._tree is not None:
            flatten(self._tree)
        table = np.asarray(cuts, dtype=np.float64).reshape(-1, 4)
        bits = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).view(torch.int64)  # noqa: E731
        seeds = self._source if self._source is not None else np.zeros((0, 0))
        seed_patch = self.assignment.cpu() if self._source is not None else torch.zeros(0, dtype=torch.long)
        length_bits = int(bits(np.array([self.length]))[0])
        return {"meta": torch.tensor([self.num_parts, METHODS.index(self.method), length_bits]),
                "cuts": bits(table), "seeds": bits(seeds), "seed_patch": seed_patch.long()}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> "Partition":
        """The partition saved by :meth:`state` (its ``assignment`` is that of the METIS seed nodes,
        and empty for RCB)."""
        meta = state["meta"].cpu()
        num_parts, method = int(meta[0]), METHODS[int(meta[1])]
        length = float(meta[2:3].view(torch.float64)[0])
        table = state["cuts"].cpu().view(torch.float64).numpy()

        def build(child: int):
            if child < 0:
                return -1 - child
            axis, value, left, right = table[child]
            return _Cut(int(axis), float(value), build(int(left)), build(int(right)))

        tree = build(0) if len(table) else None
        if method == "rcb" and tree is None:
            tree = 0  # one part: every node in patch 0
        source = state["seeds"].cpu().view(torch.float64).numpy() if method == "metis" else None
        assignment = state["seed_patch"].cpu() if method == "metis" else torch.zeros(0, dtype=torch.long)
        return cls(assignment, num_parts, length, method, tree, source)


#: Partition methods, in the order of their codes in :meth:`Partition.state`.
METHODS = ("rcb", "metis")


def partition(pos: torch.Tensor, weight: torch.Tensor, num_parts: int,
              cells: torch.Tensor | None = None, method: str = "metis", seed: int = 0,
              margin: float = 1.1) -> Partition:
    """Split one mesh into ``num_parts`` patches of (nearly) equal total quadrature weight.

    Args:
        pos: node coordinates ``[N, d]``.
        weight: quadrature weights ``[N]``.
        num_parts: number of patches :math:`P \\ge 1`.
        cells: cell-to-node table ``[M, V]`` defining the mesh graph for METIS (default ``None``:
            the 8-nearest-neighbour graph of the nodes). Ignored by RCB.
        method: ``"metis"`` (default; needs ``pymetis``) or ``"rcb"`` (no dependency).
        seed: METIS random seed (default 0); results are deterministic for a given seed.
        margin: factor :math:`\\ge 1` on the patch length (default 1.1), so that transferred
            meshes whose patch centroids move slightly still fit the reference box.

    Returns:
        a :class:`Partition`.
    """
    n = len(pos)
    if not 1 <= num_parts <= n:
        raise ValueError(f"num_parts must be in [1, {n}] (number of nodes), got {num_parts}")
    p = pos.detach().to("cpu", torch.float64).numpy()
    w = weight.detach().to("cpu", torch.float64).numpy()
    if method == "rcb":
        tree = _rcb(p, w, np.arange(n), num_parts, [0])
        assign = np.empty(n, dtype=np.int64)
        _descend(tree, p, np.arange(n), assign)
        source = None
    elif method == "metis":
        tree, source = None, p
        assign = _metis(p, w, num_parts, cells, seed)
    else:
        raise ValueError(f"method must be 'metis' or 'rcb', got {method!r}")
    length = _patch_length(p, w, assign, num_parts) * margin
    logger.debug("partition %s: %d nodes into %d parts, length %.4g", method, n, num_parts, length)
    return Partition(torch.from_numpy(assign).to(pos.device), num_parts, length, method, tree, source)


def patch_centroids(pos: torch.Tensor, weight: torch.Tensor, patch: torch.Tensor,
                    num_patches: int) -> torch.Tensor:
    """Weighted centroids :math:`c_p = \\sum_{i \\in D_p} w_i x_i / \\sum_{i \\in D_p} w_i` ``[P, d]``.

    Empty patches (zero weight) get the origin.
    """
    mass = integrate(torch.ones_like(weight), weight, patch, num_patches)  # [P]
    moment = integrate(pos, weight, patch, num_patches)  # [P, d]
    return moment / mass.clamp_min(torch.finfo(mass.dtype).tiny).unsqueeze(-1)


def _patch_length(p: np.ndarray, w: np.ndarray, assign: np.ndarray, num_parts: int) -> float:
    c = patch_centroids(torch.from_numpy(p), torch.from_numpy(w), torch.from_numpy(assign),
                        num_parts).numpy()
    return 2.0 * float(np.abs(p - c[assign]).max())


def _rcb(p: np.ndarray, w: np.ndarray, idx: np.ndarray, k: int, counter: list[int]) -> "_Cut | int":
    if k == 1:
        counter[0] += 1
        return counter[0] - 1
    sub = p[idx]
    axis = int(np.argmax(sub.max(0) - sub.min(0)))
    order = np.argsort(sub[:, axis], kind="stable")
    x, cw = sub[order, axis], np.cumsum(w[idx][order])
    k_left = k // 2
    target = cw[-1] * k_left / k
    # the cut plane lies between two distinct coordinates; take the one whose left weight is closest
    # to the target, keeping at least one node per part on either side
    m = np.flatnonzero(x[1:] != x[:-1]) + 1  # candidate sizes of the left side
    m = m[(m >= k_left) & (m <= len(x) - (k - k_left))]
    if len(m) == 0:
        raise ValueError(f"cannot bisect {len(x)} nodes into {k} parts: too many coincident coordinates")
    m = int(m[np.argmin(np.abs(cw[m - 1] - target))])
    value = 0.5 * (x[m - 1] + x[m])
    left = _rcb(p, w, idx[order[:m]], k_left, counter)
    right = _rcb(p, w, idx[order[m:]], k - k_left, counter)
    return _Cut(axis, float(value), left, right)


def _descend(tree: "_Cut | int", p: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    if not isinstance(tree, _Cut):
        out[idx] = tree
        return
    go_left = p[idx, tree.axis] < tree.value
    _descend(tree.left, p, idx[go_left], out)
    _descend(tree.right, p, idx[~go_left], out)


def mesh_graph(num_nodes: int, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR adjacency ``(xadj, adjncy)`` of the graph joining nodes that share a cell (no loops)."""
    cells = np.asarray(cells, dtype=np.int64)
    v = cells.shape[1]
    a, b = np.triu_indices(v, 1)
    rows = np.concatenate([cells[:, a].ravel(), cells[:, b].ravel()])
    cols = np.concatenate([cells[:, b].ravel(), cells[:, a].ravel()])
    adj = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(num_nodes, num_nodes)).tocsr()
    adj.sum_duplicates()
    adj.sort_indices()
    return adj.indptr.astype(np.int64), adj.indices.astype(np.int64)


def _metis(p: np.ndarray, w: np.ndarray, num_parts: int, cells, seed: int) -> np.ndarray:
    pymetis = require("pymetis", "partition", "METIS partitions (method='rcb' works without it)")
    n = len(p)
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64)
    if cells is None:
        ei = knn_graph(torch.from_numpy(p), k=min(_CLOUD_NEIGHBORS, n - 1)).numpy()
        cells = ei.T  # each kNN edge is a 2-node "cell"
    else:
        cells = cells.detach().cpu().numpy() if torch.is_tensor(cells) else np.asarray(cells)
    xadj, adjncy = mesh_graph(n, cells)
    if not _connected(np.zeros(n, dtype=np.int64), xadj, adjncy, 1):
        raise ValueError("the mesh graph is not connected: METIS cannot make contiguous parts; "
                         "use method='rcb'")
    adjacency = pymetis.CSRAdjacency(xadj, adjncy)
    vw = np.maximum(np.rint(w / w.sum() * _METIS_TOTAL), 1).astype(np.int64)
    # METIS balances integer vertex weights only loosely on small meshes with heavy nodes: try a
    # fixed sequence of seeds and both schemes, keep the best-balanced contiguous result.
    best, best_err = None, np.inf
    for attempt in range(_METIS_ATTEMPTS):
        opts = pymetis.Options(seed=seed + attempt // 2, contig=1, ufactor=1, ncuts=4)
        _, parts = pymetis.part_graph(num_parts, adjacency, vweights=vw, options=opts,
                                      recursive=bool(attempt % 2))
        parts = np.asarray(parts, dtype=np.int64)
        err = _imbalance(parts, w, num_parts)
        if err < best_err and _connected(parts, xadj, adjncy, num_parts):
            best, best_err = parts, err
        if best_err <= _METIS_GOOD:
            break
    if best is None:
        raise ValueError("METIS found no partition into contiguous parts: is the mesh connected?")
    logger.debug("METIS imbalance %.4f after %d attempts", best_err, attempt + 1)
    return best



def _imbalance(parts: np.ndarray, w: np.ndarray, num_parts: int) -> float:
    """Largest relative deviation of a part's total weight from the mean ``|D| / P``."""
    total = np.bincount(parts, w, num_parts)
    return float(np.abs(total / (w.sum() / num_parts) - 1.0).max())


def _connected(parts: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray, num_parts: int) -> bool:
    """Whether every part induces a connected subgraph (and none is empty)."""
    n = len(parts)
    adj = csr_matrix((np.ones(len(adjncy)), adjncy, xadj), shape=(n, n)).tocoo()
    same = parts[adj.row] == parts[adj.col]
    inner = coo_matrix((np.ones(same.sum()), (adj.row[same], adj.col[same])), shape=(n, n))
    num, labels = connected_components(inner, directed=False)
    return num == num_parts
