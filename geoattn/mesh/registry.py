"""Meshes that an operator is told about, recognised later by their node coordinates.

The operator contract passes ``(x, pos, weight, batch)``: no cells. An operator that needs more
of a mesh than its nodes (its triangles, for the exact transform of ``MeshFNO(quadrature="p1")``,
or its refinement, for :class:`~geoattn.train.ResolvedQuadrature`) is a :class:`MeshRegistered`
module: it is given the meshes beforehand, each a :class:`meshio.Mesh` or a sample with ``pos``
and ``cells``, and finds a mesh again from the coordinates of a sample on it
(:func:`mesh_key`). :func:`register_meshes` gives meshes to every such module inside an operator;
:class:`~geoattn.train.Trainer` gives it the training and validation samples, and
:func:`~geoattn.eval.cross_mesh_report` and :func:`~geoattn.eval.predict_meshio` the meshes they
evaluate. A sample on a mesh never given raises :class:`~geoattn.errors.MeshMismatchError`:
nothing falls back silently to another computation.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..errors import MeshMismatchError
from .cache import fingerprint

__all__ = ["MeshRegistered", "mesh_key", "mesh_parts", "register_meshes"]


def mesh_key(pos: torch.Tensor) -> tuple:
    """The key of a mesh: its node coordinates rounded to float32, so that a mesh file (float64)
    and the samples on it (float32 or float64, on any device) have the same key."""
    return fingerprint(torch.as_tensor(pos).detach().to("cpu", torch.float32))


def mesh_parts(mesh) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Node coordinates ``[N, d]`` (float64, CPU) and cells ``[T, k]`` (or ``None``) of a
    :class:`meshio.Mesh` (its highest-dimensional cells; a zero z-column dropped) or of a sample
    with ``pos`` and, optionally, ``cells``."""
    if hasattr(mesh, "pos"):
        cells = getattr(mesh, "cells", None)
        return (torch.as_tensor(mesh.pos).detach().to("cpu", torch.float64),
                torch.as_tensor(cells).detach().cpu().long() if torch.is_tensor(cells) else None)
    from .io import from_meshio

    data = from_meshio(mesh, weights=None, dtype=torch.float64)
    return data.pos, None if data.cells is None else data.cells.long()


class MeshRegistered:
    """A module that needs the meshes it will see given beforehand (see the module docstring).

    Subclasses implement :meth:`register_mesh`, which :meth:`register` calls once per new mesh,
    and find a sample's mesh with :meth:`registered_key`.
    """

    #: Largest coordinate difference, relative to the mesh's extent, at which a sample's nodes
    #: are still taken for those of a registered mesh (the same nodes moved by an isometry in
    #: another precision or on another device differ in the last bits).
    match_tolerance = 1e-5

    @property
    def _mesh_nodes(self) -> dict:
        return self.__dict__.setdefault("_registered_nodes", {})  # mesh_key -> nodes (float64, CPU)

    def register(self, meshes: Iterable) -> None:
        """Register each mesh (a :class:`meshio.Mesh`, or a sample with ``pos`` and ``cells``);
        a mesh already registered (the same node coordinates) is skipped."""
        for mesh in meshes:
            if not (hasattr(mesh, "pos") or hasattr(mesh, "points")):
                raise TypeError(f"register takes meshio meshes or samples with pos and cells, got {type(mesh).__name__}")
            points = torch.as_tensor(mesh.pos) if hasattr(mesh, "pos") else mesh_parts(mesh)[0]  # 2-D: no z
            key = mesh_key(points)
            if key in self._mesh_nodes:
                continue
            self.register_mesh(key, mesh)
            self._mesh_nodes[key] = points.detach().to("cpu", torch.float64)

    def register_mesh(self, key: tuple, mesh) -> None:
        """Keep what the module needs of one new mesh (``key`` = :func:`mesh_key` of its nodes)."""
        raise NotImplementedError

    def registered_key(self, pos: torch.Tensor) -> tuple:
        """The key under which the mesh of the nodes ``pos`` was registered: the one with the same
        :func:`mesh_key`, else one with the same number of nodes within :attr:`match_tolerance`
        of ``pos``, node by node (remembered for next time).

        Raises:
            MeshMismatchError: no registered mesh has these nodes.
        """
        key = mesh_key(pos)
        nodes = self._mesh_nodes
        if key in nodes:
            return key
        aliases = self.__dict__.setdefault("_registered_aliases", {})
        if key in aliases:
            return aliases[key]
        here = pos.detach().to("cpu", torch.float64)
        for known, points in nodes.items():
            if points.shape == here.shape:
                scale = float((points.amax(0) - points.amin(0)).max()) if len(points) else 0.0
                if float((points - here).abs().max()) <= self.match_tolerance * max(scale, 1e-30):
                    aliases[key] = known
                    return known
        raise MeshMismatchError(
            f"a sample on a mesh of {len(pos)} nodes that was not given to {type(self).__name__}: "
            "register every mesh it will evaluate (geoattn.mesh.register_meshes(operator, meshes), "
            "which Trainer, cross_mesh_report and predict_meshio call for their samples)")


def register_meshes(op: torch.nn.Module, meshes: Iterable) -> None:
    """Give ``meshes`` (meshio meshes, or samples with ``pos`` and ``cells``) to every
    :class:`MeshRegistered` module inside ``op`` (nothing for an operator without one)."""
    registered = [m for m in op.modules() if isinstance(m, MeshRegistered)]
    if registered:
        meshes = list(meshes)
        for module in registered:
            module.register(meshes)
