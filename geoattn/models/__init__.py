"""Neural operators built from :mod:`geoattn.nn` layers; :func:`build_model` makes one by name.

Every model stores its constructor arguments in ``model.hparams`` so a checkpoint rebuilds it, and
is called as ``model(x, pos, weight, batch=None, *, ...)``. NAO, which learns kernels in context
from data pairs, lives in :mod:`geoattn.nao`.
"""

from .base import MODELS, NeuralOperator, build_model
from .galerkin import GalerkinTransformer
from .fno import MeshFNO
from .gno import GNO
from .multigrid import MultigridOperator
from .patched import FANO, ViTNO
from .slice import SliceTransformer
from .tno import TNO

__all__ = [
    "FANO",
    "GNO",
    "GalerkinTransformer",
    "MODELS",
    "MeshFNO",
    "MultigridOperator",
    "NeuralOperator",
    "SliceTransformer",
    "TNO",
    "ViTNO",
    "build_model",
]
