"""Neural operators built from :mod:`geoattn.nn` layers; :func:`build_model` makes one by name.

Every model stores its constructor arguments in ``model.hparams`` so a checkpoint rebuilds it.
"""

from .base import MODELS, NeuralOperator, build_model
from .galerkin import GalerkinTransformer
from .gno import GNO
from .nao import NAO, DiscreteNAO
from .patched import FANO, ViTNO
from .tno import TNO

__all__ = [
    "DiscreteNAO",
    "FANO",
    "GNO",
    "GalerkinTransformer",
    "MODELS",
    "NAO",
    "NeuralOperator",
    "TNO",
    "ViTNO",
    "build_model",
]
