"""Run a trained operator on a :class:`meshio.Mesh`: weights computed, prediction as point data."""

from __future__ import annotations

from collections.abc import Sequence

import meshio
import numpy as np
import torch

from ..errors import ChannelError, ConfigError, NonFiniteOutputError
from ..mesh import from_meshio
from ..mesh.mesh import Mesh
from ..mesh.validation import located, validate_field, validate_points, validate_weights


@torch.no_grad()
def predict_meshio(operator: torch.nn.Module, mesh: meshio.Mesh, fields: str | Sequence[str],
                   name: str | Sequence[str] = "prediction", *,
                   params: Sequence[float] | None = None, **reader) -> meshio.Mesh:
    """Predict on any mesh meshio reads and return it with the prediction added as point data.

    The mesh is validated and given lumped quadrature weights by
    :func:`~geoattn.mesh.from_meshio`; the point field(s) ``fields`` are the input channels, and
    the global parameters ``params``, when given, are appended to them as constant channels (as
    :class:`~geoattn.data.MeshDataset` does with ``params_as_channels=True``).
    A mesh of the wrong dimension or a field with the wrong number of components raises
    :class:`~geoattn.errors.DimensionError` / :class:`~geoattn.errors.ChannelError`. The inputs
    are validated again in the model's dtype (coordinates of 1e30 have float32-overflowing cell
    areas), raising :class:`~geoattn.errors.NonFiniteError` / :class:`~geoattn.errors.WeightError`,
    and a prediction with a NaN or infinite value raises
    :class:`~geoattn.errors.NonFiniteOutputError`: nothing non-finite is ever returned.

    Args:
        operator: a trained :class:`~geoattn.operators.NormalizedOperator` (or any operator
            called ``operator(x, mesh)`` with a :class:`~geoattn.mesh.Mesh`, which is made of
            ``mesh`` with its cells).
        mesh: the mesh with the input field(s).
        fields: input point field name(s), one or more channels.
        name: name of the output point field (default ``"prediction"``), or one name per output
            channel.
        params: global parameter values appended to the inputs as constant channels.
        **reader: options of :func:`~geoattn.mesh.from_meshio` (``merge_duplicates``,
            ``reorient``, ``cell_block``, ``origin``: for a model trained without a frame, the
            point that brings the mesh to its coordinates; a model trained in a frame applies
            its own, and another ``origin`` is refused). After a merge the prediction of a merged node is
            returned at each of the file's copies of it, so the mesh keeps the nodes it was
            written with.

    Returns:
        a new :class:`meshio.Mesh` with the same points, cells and fields as ``mesh``, plus the
        prediction: under one ``name``, ``[N]`` for one output channel and ``[N, C_out]`` for
        several; under one name per channel, ``[N]`` each. A field of ``mesh`` with an output's
        name is replaced.
    """
    dtype = next(operator.parameters()).dtype
    device = next(operator.parameters()).device
    frame = dict(getattr(operator, "frame", {}))  # the frame the training meshes were read in
    if reader.get("origin") is not None and frame:
        given = [float(v) for v in np.ravel(reader["origin"])]
        if given != [float(v) for v in np.ravel(frame["origin"])]:
            raise ConfigError(f"origin {given} given, but the model was trained on meshes read with origin "
                              f"{list(frame['origin'])}, which it applies itself; drop the origin (--origin)")
    data = from_meshio(mesh, x=fields, dtype=dtype, **{**frame, **reader})
    n, label = data.pos.shape[0], "+".join([fields] if isinstance(fields, str) else fields)
    if params is not None and len(params):
        values = torch.as_tensor(list(params), dtype=dtype)
        data.x = torch.cat([data.x, values.expand(n, -1)], dim=1)  # [N, C_in + P]
    with located(f"in the model's dtype {dtype} (rescale a mesh or field that overflows it)"):
        validate_points(data.pos)
        validate_weights(data.weight, n)
        validate_field(label, data.x, n)
    data = data.to(device)
    prediction = operator(data.x, Mesh.from_sample(data))
    if prediction.shape[0] != n:
        raise ValueError(f"the mesh has {n} points but the model answered on {prediction.shape[0]} nodes")
    bad = ~torch.isfinite(prediction).reshape(n, -1).all(dim=1)
    if bad.any():
        raise NonFiniteOutputError(
            f"the model gives NaN or infinite values at {int(bad.sum())} of {n} nodes (the first is "
            f"node {int(bad.nonzero()[0])}); the input {label!r} spans [{data.x.min():.3g}, "
            f"{data.x.max():.3g}] and the coordinates [{data.pos.min():.3g}, {data.pos.max():.3g}]: "
            "far outside what the model was trained on?")
    values = prediction.cpu().numpy().reshape(n, -1)  # [N, C_out]
    if n != len(mesh.points):  # merged: back to the file's nodes
        values = values[_merged_index(mesh, reader.get("merge_duplicates"))]  # [N_file, C_out]
    names = [name] if isinstance(name, str) else list(name)
    if len(names) == 1:
        out = {names[0]: values[:, 0] if values.shape[1] == 1 else values}  # [N] or [N, C_out]
    elif len(names) == values.shape[1]:
        out = {key: values[:, c] for c, key in enumerate(names)}  # [N] each
    else:
        raise ChannelError(f"{len(names)} output names {names} for the model's {values.shape[1]} output "
                           "channels; give one name, or one per channel")
    return meshio.Mesh(mesh.points, mesh.cells, cell_data=mesh.cell_data,
                       point_data={**mesh.point_data, **out}, field_data=mesh.field_data)


def _merged_index(mesh: meshio.Mesh, tol) -> np.ndarray:
    """The node of the merged mesh (:func:`~geoattn.mesh.merge_nodes`, by the same rule as
    :func:`~geoattn.mesh.from_meshio`) that each node of ``mesh`` became: ``[N_file]``."""
    from scipy.spatial import cKDTree

    from ..mesh.io import MERGE_TOL, merge_nodes

    points = np.asarray(mesh.points, dtype=np.float64)
    merged, _, _, _ = merge_nodes(points, None, {}, MERGE_TOL if tol is True else tol)
    return cKDTree(merged).query(points)[1]
