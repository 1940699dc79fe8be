"""Neighbour search on the tensors' own device, through ``pyg-lib`` or ``torch-cluster``.

:mod:`geoattn.mesh.neighbors` answers with :class:`scipy.spatial.cKDTree` by default, which runs
on the CPU: a graph for CUDA tensors pays a copy to the host and back. When ``pyg-lib`` (what
PyG's own :func:`torch_geometric.nn.radius` calls) or ``torch-cluster`` is installed, the search
can run where the coordinates live. Both packages answer a *capped* query: at most
``max_num_neighbors`` sources per query node, the rest silently dropped, and they compare
distances in the coordinates' dtype with a strict ``<``. This module turns that into the exact
graph the scipy path defines:

* the cap is doubled until no query node reaches it, so no neighbour is dropped;
* the search runs with the radius widened by a relative ``1e-5`` (far above float32 rounding),
  and the candidates are then kept by :math:`\\|x_i - x_j\\|^2 \\le r^2` evaluated in float64,
  the closed ball of the scipy path;
* a batch vector that is not sorted (both packages need sorted ones) is sorted first and the
  indices mapped back.

Backends: ``"scipy"`` (always there), ``"pyg-lib"`` and ``"torch-cluster"`` (when installed).
``"auto"`` (the default of every graph function) picks scipy for CPU tensors, which stays the
default there, and for tensors on another device the first of pyg-lib and torch-cluster that is
installed, else scipy.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from ..optional import MissingDependencyError

BACKENDS = ("auto", "scipy", "pyg-lib", "torch-cluster")
#: relative widening of the radius for the candidate search (float32 rounding is ~1e-7)
_WIDEN = 1e-5
#: first cap on neighbours per query node; doubled until no node reaches it
_FIRST_CAP = 64


def _has_pyg_lib(op: str) -> bool:
    import torch_geometric.typing as pyg_typing

    return bool(getattr(pyg_typing, "WITH_RADIUS" if op == "radius" else "WITH_KNN", False))


def _has_torch_cluster() -> bool:
    return importlib.util.find_spec("torch_cluster") is not None


def available_backends(op: str = "radius") -> list[str]:
    """The backends installed here for ``op`` (``"radius"`` or ``"knn"``), scipy first."""
    found = ["scipy"]
    if _has_pyg_lib(op):
        found.append("pyg-lib")
    if _has_torch_cluster():
        found.append("torch-cluster")
    return found


def resolve_backend(backend: str, device: torch.device, op: str = "radius") -> str:
    """The backend that answers a query on ``device``: ``backend`` itself, or ``"auto"``'s choice.

    Raises:
        ValueError: an unknown name.
        MissingDependencyError: a named backend that is not installed.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown neighbour-search backend {backend!r}; choose one of {BACKENDS}")
    have = available_backends(op)
    if backend == "auto":
        if device.type == "cpu":
            return "scipy"
        return next((b for b in ("pyg-lib", "torch-cluster") if b in have), "scipy")
    if backend not in have:
        raise MissingDependencyError(
            f"the neighbour-search backend {backend!r} is not installed "
            f"(installed: {', '.join(have)}); install it with: pip install {backend}")
    return backend


def _search_fn(backend: str, op: str) -> Callable:
    """The package's capped search ``fn(x, y, r_or_k, batch_x, batch_y, ...) -> [query, source]``."""
    if backend == "pyg-lib":
        import torch_geometric.nn.pool as pool

        return getattr(pool, op)
    import torch_cluster

    return getattr(torch_cluster, op)


def _sorted_batch(batch: torch.Tensor | None):
    """``(order, sorted batch)`` with ``order`` ``None`` when ``batch`` is ``None`` or sorted."""
    if batch is None or batch.numel() < 2 or bool((batch[1:] >= batch[:-1]).all()):
        return None, batch
    order = torch.sort(batch, stable=True).indices
    return order, batch[order]


def _permuted(pos, batch):
    order, batch = _sorted_batch(batch)
    return (pos if order is None else pos[order]), batch, order


def _unpermute(index: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    return index if order is None else order[index]


def capped_exact_radius(search: Callable, pos: torch.Tensor, pos_query: torch.Tensor, r: float,
                        batch: torch.Tensor | None = None,
                        batch_query: torch.Tensor | None = None,
                        first_cap: int = _FIRST_CAP) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ``(source j, query i)`` with :math:`\\|x_j - y_i\\|^2 \\le r^2` (float64), from a capped search.

    Args:
        search: ``search(x, y, r, batch_x, batch_y, max_num_neighbors=M)`` returning
            ``[2, E]`` = (query index, source index), at most ``M`` sources per query node, with
            a strict ``<`` on distances in the inputs' dtype (the contract of ``pyg-lib`` and
            ``torch-cluster``).
        pos, pos_query, r, batch, batch_query: as in :func:`geoattn.mesh.radius`.
        first_cap: the first ``M``; doubled until no query node is capped.

    Returns:
        ``(source, query)`` index tensors on ``pos``'s device, in no particular order.
    """
    x, bx, ox = _permuted(pos.detach(), batch)
    y, by, oy = _permuted(pos_query.detach(), batch_query)
    x, y = x.contiguous(), y.contiguous()
    widened = r * (1.0 + _WIDEN)
    cap = max(1, int(first_cap))
    while True:
        query, source = search(x, y, widened, bx, by, max_num_neighbors=cap)
        counts = torch.bincount(query, minlength=len(y))
        if len(y) == 0 or int(counts.max()) < cap:
            break
        cap *= 2
    d2 = (x[source].double() - y[query].double()).square().sum(-1)
    keep = d2 <= r * r
    return _unpermute(source[keep], ox), _unpermute(query[keep], oy)


def device_radius(pos, pos_query, r, batch, batch_query, backend: str):
    """Exact radius search through ``backend`` (``"pyg-lib"`` or ``"torch-cluster"``)."""
    return capped_exact_radius(_search_fn(backend, "radius"), pos, pos_query, r, batch, batch_query)


def device_knn(pos, pos_query, k: int, batch, batch_query, backend: str):
    """The ``k`` nearest sources of every query node through ``backend``: ``(source, query)``.

    Distances are compared in the coordinates' dtype, so on exact or near ties (below its
    rounding) the neighbour chosen may differ from the scipy path's.

    Raises:
        ValueError: some graph has fewer than ``k`` source nodes.
    """
    x, bx, ox = _permuted(pos.detach(), batch)
    y, by, oy = _permuted(pos_query.detach(), batch_query)
    query, source = _search_fn(backend, "knn")(x.contiguous(), y.contiguous(), k, bx, by)
    if query.numel() != len(y) * k:
        raise ValueError(f"some graph has fewer than k={k} source nodes")
    return _unpermute(source, ox), _unpermute(query, oy)
