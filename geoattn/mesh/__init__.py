"""Meshes, point clouds and their quadrature weights.

A discretised function is ``(x, mesh)``: values at the nodes of a :class:`Mesh` (nodes,
quadrature weights, cells, batch layout and the structure derived from it), the value every model
and loss takes. :func:`from_meshio` / :func:`read_mesh` build a validated :class:`MeshData` sample
with weights from any meshio mesh (:meth:`Mesh.from_meshio` its :class:`Mesh`); a dataset's
samples name their mesh (:func:`as_samples`, :class:`MeshSamples`); and
:func:`quadrature_weights` computes weights for meshes and bare point clouds, and
:mod:`~geoattn.mesh.symmetry` carries samples by the symmetries of their domain (:func:`augment`).

Importing this package loads neither meshio nor scikit-fem: meshio is imported by the functions
that build, read or write a :class:`meshio.Mesh`, and :mod:`~geoattn.mesh.families` (which needs
scikit-fem, the ``data`` extra) on first access to ``geoattn.mesh.families``.
"""

import importlib

from .boundary import boundary_distance, boundary_facets
from .cells import CELL_DIMENSIONS, CELL_TYPES, lumped_mass, orient_cells, signed_volumes
from .data import MeshData
from .gradients import p1_gradients
from .mesh import Layout, Mesh
from .samples import MeshSamples, MeshStore, as_samples
from .io import (from_meshio, from_pyvista, merge_nodes, read_mesh, read_meshio, save_meshio,
                 to_meshio, to_pyvista, write_mesh)
from .neighbors import knn, knn_graph, radius, radius_graph
from .partition import Partition, partition, patch_centroids
from .quadrature import integrate, weighted_mean
from .surface import orient_surface, surface_areas, surface_lumped_mass
from .symmetry import Isometry, augment, check_symmetry, dihedral
from .validation import (validate_cells, validate_field, validate_mesh, validate_sample,
                         validate_weights)
from .weights import (knn_weights, node_average_weights, periodic_weights, quadrature_weights,
                      surface_knn_weights, voronoi_weights)


def __getattr__(name: str):
    """Load :mod:`~geoattn.mesh.families` (scikit-fem) on first access (PEP 562)."""
    if name == "families":
        return importlib.import_module(f"{__name__}.families")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CELL_DIMENSIONS",
    "CELL_TYPES",
    "Isometry",
    "Layout",
    "Mesh",
    "MeshData",
    "MeshSamples",
    "MeshStore",
    "Partition",
    "as_samples",
    "augment",
    "boundary_distance",
    "boundary_facets",
    "check_symmetry",
    "dihedral",
    "families",
    "from_meshio",
    "from_pyvista",
    "integrate",
    "knn",
    "knn_graph",
    "knn_weights",
    "lumped_mass",
    "merge_nodes",
    "node_average_weights",
    "orient_cells",
    "orient_surface",
    "p1_gradients",
    "partition",
    "patch_centroids",
    "periodic_weights",
    "quadrature_weights",
    "radius",
    "radius_graph",
    "read_mesh",
    "read_meshio",
    "save_meshio",
    "signed_volumes",
    "surface_areas",
    "surface_knn_weights",
    "surface_lumped_mass",
    "to_meshio",
    "to_pyvista",
    "validate_cells",
    "validate_field",
    "validate_mesh",
    "validate_sample",
    "validate_weights",
    "voronoi_weights",
    "weighted_mean",
    "write_mesh",
]
