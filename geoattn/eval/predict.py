"""Run a trained operator on a :class:`meshio.Mesh`: weights computed, prediction as point data."""

from __future__ import annotations

from collections.abc import Sequence

import meshio
import torch

from ..mesh import from_meshio


@torch.no_grad()
def predict_meshio(operator: torch.nn.Module, mesh: meshio.Mesh, fields: str | Sequence[str],
                   name: str = "prediction") -> meshio.Mesh:
    """Predict on any mesh meshio reads and return it with the prediction added as point data.

    The mesh is validated and given lumped quadrature weights by
    :func:`~geoattn.mesh.from_meshio`; the point field(s) ``fields`` are the input channels.
    A mesh of the wrong dimension or a field with the wrong number of components raises
    :class:`~geoattn.errors.DimensionError` / :class:`~geoattn.errors.ChannelError`.

    Args:
        operator: a trained :class:`~geoattn.train.NormalizedOperator` (or any model with the
            ``forward(x, pos, weight)`` signature).
        mesh: the mesh with the input field(s).
        fields: input point field name(s), one or more channels.
        name: name of the output point field (default ``"prediction"``).

    Returns:
        a new :class:`meshio.Mesh` with the same points, cells and fields as ``mesh``, plus
        ``name`` (``[N, C_out]``).
    """
    dtype = next(operator.parameters()).dtype
    device = next(operator.parameters()).device
    data = from_meshio(mesh, x=fields, dtype=dtype).to(device)
    prediction = operator(data.x, data.pos, data.weight)
    if prediction.shape[0] != len(mesh.points):
        raise ValueError(f"the mesh has {len(mesh.points)} points but the model answered on "
                         f"{prediction.shape[0]} nodes")
    return meshio.Mesh(mesh.points, mesh.cells, cell_data=mesh.cell_data,
                       point_data={**mesh.point_data, name: prediction.cpu().numpy()})
