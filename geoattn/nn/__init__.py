"""Neural-operator layers on meshes and point clouds; every sum over nodes is a quadrature.

:mod:`geoattn.nn.functional` holds the weighted-integral helpers the layers share.
"""

from . import functional
from .continuum_attention import ContinuumAttention, ContinuumCrossAttention
from .galerkin_attention import FourierAttention, GalerkinAttention
from .graph_kernel import GraphKernelIntegral
from .nonlocal_attention import NonlocalAttention
from .patch_attention import PatchAttention, PatchCrossAttention
from .spectral import PatchSpectralIntegral, SpectralIntegral, SpectralSmoothing

__all__ = [
    "ContinuumAttention",
    "ContinuumCrossAttention",
    "FourierAttention",
    "GalerkinAttention",
    "GraphKernelIntegral",
    "NonlocalAttention",
    "PatchAttention",
    "PatchCrossAttention",
    "PatchSpectralIntegral",
    "SpectralIntegral",
    "SpectralSmoothing",
    "functional",
]
