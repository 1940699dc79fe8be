"""Samples carried to a refined mesh by piecewise-linear interpolation.

A sample on a triangle or tetrahedral mesh holds node values; the functions it stands for are their
piecewise-linear interpolants. :func:`refined_samples` gives the same functions at the nodes of
the mesh refined: training on them, the weighted nodal loss is the :math:`L^2(D)` error against
the interpolants between the original nodes too, not only at them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from ..errors import ConfigError, UnsupportedCellError
from ..mesh.refinement import simplex_type
from ..mesh.samples import MeshSamples, as_samples
from ..operators.refined import training_size

__all__ = ["refined_samples"]

#: Node-level attributes carried to the refined mesh: interpolated (``x``, ``y``) or replaced by the
#: refined mesh's own (``pos``, ``weight``, ``cells``).
_CARRIED = ("x", "y", "pos", "weight", "cells")


def refined_samples(samples: Sequence, factor: float = 2.0) -> MeshSamples:
    r"""Each sample's inputs ``x`` and targets ``y`` as their piecewise-linear interpolants at the
    nodes of its triangle or tetrahedral mesh refined until no edge is longer than its longest
    edge / ``factor``
    (:meth:`geoattn.mesh.Mesh.refined`: the original nodes first, then the new ones).

    The refined mesh's lumped weights integrate the interpolants' products to
    :math:`O(h^2)`, so a model trained on the refined samples minimises the relative
    :math:`L^2(D)` error against the interpolants of the data, between the original nodes as well
    as at them; the functions themselves are unchanged (no new information). Samples on one mesh
    (:func:`~geoattn.mesh.as_samples`) share its refined mesh (one refinement per mesh, kept in
    the mesh's memo).

    Args:
        samples: samples with ``weight [N]``, ``x`` and ``y`` at the nodes, and ``pos [N, 2]`` with
            triangle ``cells [T, 3]`` or ``pos [N, 3]`` with tetrahedral ``cells [T, 4]``.
        factor: how much finer than the longest edge (default ``2``: about one uniform
            refinement, about 4 times the nodes on triangles and 8 times on tetrahedra).

    Returns:
        A :class:`~geoattn.mesh.MeshSamples` of new samples (shallow copies with the new node
        data; the inputs are not changed) on the refined meshes.

    Raises:
        ConfigError: ``factor`` below 1, a sample without triangle or tetrahedral cells (hexahedra,
            quads, surfaces and lines are refused), or a sample with
            other node-level tensors, which could not be carried (named).
    """
    if not factor >= 1.0:
        raise ConfigError(f"factor must be at least 1, got {factor!r}")
    samples = as_samples(samples)
    fine_of: dict[int, int] = {}  # source mesh number -> refined mesh number
    fines, prolongs, out = [], [], []
    for index, data in enumerate(samples):
        k = int(data.mesh_id)
        if k not in fine_of:
            mesh = samples.meshes[k]
            try:
                simplex_type(mesh.dim, mesh.cells, "refined_samples")
            except UnsupportedCellError as err:
                raise ConfigError(f"sample {index}: {err}") from err
            fine, prolong = mesh.refined(training_size(mesh) / factor)  # kept in the mesh's memo
            fine_of[k] = len(fines)
            fines.append(fine)
            prolongs.append(prolong)
        n = data.pos.shape[0]
        others = [key for key in data.keys() if key not in _CARRIED and torch.is_tensor(data[key])
                  and data[key].dim() > 0 and data[key].shape[0] == n]
        if others:
            raise ConfigError(f"sample {index}: node-level tensors {others} cannot be carried to the refined mesh")
        fine, prolong = fines[fine_of[k]], prolongs[fine_of[k]]
        new = copy.copy(data)
        new.pos, new.weight, new.cells, new.mesh_id = fine.pos, fine.weight, fine.cells, fine_of[k]
        new.x = torch.sparse.mm(prolong, data.x.to(prolong.dtype)).to(data.x.dtype)
        new.y = torch.sparse.mm(prolong, data.y.to(prolong.dtype)).to(data.y.dtype)
        out.append(new)
    return MeshSamples(out, fines)
