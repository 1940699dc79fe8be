"""geoattn: mesh-agnostic neural operators with quadrature-weighted attention.

A function on an unstructured mesh or a point cloud is ``(x, mesh)``: values ``x [N, C]`` at the
nodes of a :class:`geoattn.mesh.Mesh` (nodes, quadrature weights, cells); every sum over nodes is a
quadrature with the weights, so a model, called ``model(x, mesh)``, discretises one continuum
operator and keeps its accuracy when the mesh changes.
"""

__version__ = "0.1.0"

from .errors import *  # noqa: F401,F403  (the typed errors are part of the top-level API)
from .errors import __all__ as _errors_all

__all__ = ["__version__", *_errors_all]
