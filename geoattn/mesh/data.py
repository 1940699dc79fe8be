"""The sample type: a :class:`torch_geometric.data.Data` that knows how to batch mesh cells."""

from __future__ import annotations

from typing import Any

from torch_geometric.data import Data


class MeshData(Data):
    """A discretised sample: ``pos [N, d]``, ``weight [N]``, ``x [N, C_in]``, ``y [N, C_out]``,
    and optionally ``cells [M, V]`` with its ``cell_type`` (a meshio name), ``point_data`` and
    ``cell_data`` (dicts of extra fields) and ``edge_index``.

    It is a plain PyG :class:`~torch_geometric.data.Data` except that ``cells`` are node indices:
    when samples are batched, each sample's cells are offset by the nodes before it, exactly like
    ``edge_index``.
    """

    def __inc__(self, key: str, value: Any, *args, **kwargs) -> Any:
        if key == "cells":
            return self.num_nodes
        return super().__inc__(key, value, *args, **kwargs)

    def __cat_dim__(self, key: str, value: Any, *args, **kwargs) -> Any:
        if key == "cells":
            return 0
        return super().__cat_dim__(key, value, *args, **kwargs)
