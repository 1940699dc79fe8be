"""geoattn: mesh-agnostic neural operators with quadrature-weighted attention.

Functions live on unstructured meshes and point clouds as ``(pos, weight, values)``; every sum
over nodes is a quadrature with the weights, so models discretise one continuum operator and keep
their accuracy when the mesh changes.
"""

__version__ = "0.1.0"

from .errors import *  # noqa: F401,F403  (the typed errors are part of the top-level API)
from .errors import __all__ as _errors_all

__all__ = ["__version__", *_errors_all]
