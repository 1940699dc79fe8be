"""Neural-operator layers on meshes and point clouds; every sum over nodes is a quadrature.

:mod:`geoattn.nn.functional` holds the weighted-integral helpers the layers share.
"""

from . import functional
from .continuum_attention import ContinuumAttention, ContinuumCrossAttention
from .galerkin_attention import FourierAttention, GalerkinAttention

__all__ = [
    "ContinuumAttention",
    "ContinuumCrossAttention",
    "FourierAttention",
    "GalerkinAttention",
    "functional",
]
