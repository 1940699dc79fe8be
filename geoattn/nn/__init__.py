"""Neural-operator layers on meshes and point clouds; every sum over nodes is a quadrature.

:mod:`geoattn.nn.functional` holds the weighted-integral and batch helpers the layers share.
Every field-to-field layer is called as ``layer(x, pos, weight, batch=None, *, ...)``; a cross
layer is the same class called with a query side (``x_query``, ``pos_query``, ``batch_query``).
NAO's nonlocal attention lives with the rest of NAO in :mod:`geoattn.nao`.
"""

from . import functional
from .continuum_attention import ContinuumAttention
from .galerkin_attention import FourierAttention, GalerkinAttention
from .graph_kernel import GraphKernelIntegral
from .local_integral import LocalIntegral
from .patch_attention import PatchAttention, PatchSide
from .slice_attention import SliceAttention
from .spectral import PatchSpectralIntegral, SpectralIntegral, SpectralSmoothing

__all__ = [
    "ContinuumAttention",
    "FourierAttention",
    "GalerkinAttention",
    "GraphKernelIntegral",
    "LocalIntegral",
    "PatchAttention",
    "PatchSide",
    "PatchSpectralIntegral",
    "SliceAttention",
    "SpectralIntegral",
    "SpectralSmoothing",
    "functional",
]
