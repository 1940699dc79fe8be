"""Neural-operator layers on meshes and point clouds; every sum over nodes is a quadrature.

:mod:`geoattn.nn.functional` holds the weighted-integral helpers the layers share.
"""

from . import functional

__all__ = [
    "functional",
]
