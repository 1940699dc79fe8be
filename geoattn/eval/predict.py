"""Run a trained operator on a :class:`meshio.Mesh`: weights computed, prediction as point data."""

from __future__ import annotations

from collections.abc import Sequence

import meshio
import torch

from ..errors import NonFiniteOutputError
from ..mesh import from_meshio
from ..mesh.validation import located, validate_field, validate_points, validate_weights
from ..mesh.registry import register_meshes


@torch.no_grad()
def predict_meshio(operator: torch.nn.Module, mesh: meshio.Mesh, fields: str | Sequence[str],
                   name: str = "prediction") -> meshio.Mesh:
    """Predict on any mesh meshio reads and return it with the prediction added as point data.

    The mesh is validated and given lumped quadrature weights by
    :func:`~geoattn.mesh.from_meshio`; the point field(s) ``fields`` are the input channels.
    A mesh of the wrong dimension or a field with the wrong number of components raises
    :class:`~geoattn.errors.DimensionError` / :class:`~geoattn.errors.ChannelError`. The inputs
    are validated again in the model's dtype (coordinates of 1e30 have float32-overflowing cell
    areas), raising :class:`~geoattn.errors.NonFiniteError` / :class:`~geoattn.errors.WeightError`,
    and a prediction with a NaN or infinite value raises
    :class:`~geoattn.errors.NonFiniteOutputError`: nothing non-finite is ever returned.

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
    frame = getattr(operator, "frame", {})  # the frame the training meshes were read in
    data = from_meshio(mesh, x=fields, dtype=dtype, **frame)
    register_meshes(operator, [data if frame else mesh])  # through ResolvedQuadrature: refine it
    n, label = len(mesh.points), "+".join([fields] if isinstance(fields, str) else fields)
    with located(f"in the model's dtype {dtype} (rescale a mesh or field that overflows it)"):
        validate_points(data.pos)
        validate_weights(data.weight, n)
        validate_field(label, data.x, n)
    data = data.to(device)
    prediction = operator(data.x, data.pos, data.weight)
    if prediction.shape[0] != n:
        raise ValueError(f"the mesh has {n} points but the model answered on {prediction.shape[0]} nodes")
    bad = ~torch.isfinite(prediction).reshape(n, -1).all(dim=1)
    if bad.any():
        raise NonFiniteOutputError(
            f"the model gives NaN or infinite values at {int(bad.sum())} of {n} nodes (the first is "
            f"node {int(bad.nonzero()[0])}); the input {label!r} spans [{data.x.min():.3g}, "
            f"{data.x.max():.3g}] and the coordinates [{data.pos.min():.3g}, {data.pos.max():.3g}]: "
            "far outside what the model was trained on?")
    return meshio.Mesh(mesh.points, mesh.cells, cell_data=mesh.cell_data,
                       point_data={**mesh.point_data, name: prediction.cpu().numpy()})
